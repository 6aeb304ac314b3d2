#!/usr/bin/python3
"""families_check.py MHA_BINARY: every model family mha reads, exact or refused.

For each family (Llama 2, Llama with biases, Mistral, Mistral NeMo, Mixtral,
Qwen2, Qwen3, Qwen3-MoE, Gemma, Gemma 2, Gemma 3, Granite, Cohere Command R
and R+, SmolLM3, OLMo, OLMo 2, Phi-3, Phi-4-mini, Pythia, Falcon in its
three layouts, StarCoder and GPT-BigCode, ModernBERT, GPT-2, BERT, RoBERTa,
and the text models of LLaVA, Mistral 3 and Gemma 3) a tiny checkpoint is
written as
the family publishes it: its tensor names, the dtype it ships in, a
config.json with the family's real keys (those outside the attention too),
and the tensors around the attention (embeddings, norms, MLPs, an
image-text model's vision tower).  One layer's attention is then computed
by mha and by a reference transcribed from the family's Hugging Face
modeling code: the settings each family's attention takes from its config
(scaling, softcap, sliding window by layer, rotary style and base by
layer kind, layers without rotation, biases, the q/k norm, a fused
projection's split, transformers' default heads) in hf_settings(),
and the attention itself in NumPy (decoder_attention) and, when torch can
be imported, again in PyTorch (torch_attention), the two checked against
each other.  mha must agree to

    |a - b| <= 1e-12 * max(1, |b|)

for a sliding and a global layer where the family has both, a layer
without rotation where it has one, and a batch with a padding mask
(--kv-len).  The stored values are exact in float64, so the reference
uses them as they are.

Then what mha must refuse, each with exit 1 and one line naming it: a key
planted in each family's config (a copy with one more attention key), a
tensor planted in each family's attention module, biases the family's
code would not add (or would, and are missing), the model types whose
attention mha does not compute yet, an unknown model_type (and under
--layout llama, held to llama's keys), a family that --layout contradicts,
a checkpoint that does not say its heads, a rotary_emb.inv_freq that is not
config.json's rotation, a layer-dependent setting without --layer.

Prints one line per case and "N passed, N failed"; exit status 1 if any
failed.
"""

import copy
import json
import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_check as ck  # noqa: E402  (safetensors writing, runs, Checker)

RTOL = 1e-12
SEED = 20261127
N = 6  # tokens

# ---- configs as the families publish them ----------------------------------

COMMON = {"bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
          "max_position_embeddings": 4096, "tie_word_embeddings": False,
          "transformers_version": "4.46.0", "use_cache": True, "vocab_size": 11}


def cfg(arch, model_type, D, H, G, layers, dtype, **keys):
    c = dict(COMMON)
    c.update({"architectures": [arch], "model_type": model_type, "hidden_size": D,
              "intermediate_size": 2 * D, "num_attention_heads": H, "num_hidden_layers": layers,
              "num_key_value_heads": G, "rms_norm_eps": 1e-05, "hidden_act": "silu",
              "attention_dropout": 0.0,
              "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype]})
    c.update(keys)
    return c


# Each family: its config.json, its checkpoint's shape, and the layers (with
# extra options) to run.
FAMILIES = [
    dict(name="Llama 2", type="llama", dtype="F16", D=16, H=4, G=4, hd=4, layers=2,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 4, 4, 2, f["dtype"],
                              attention_bias=False, mlp_bias=False, pretraining_tp=1,
                              rope_scaling=None, rope_theta=10000.0),
         runs=[1]),
    dict(name="Llama, attention_bias true", type="llama", dtype="BF16", D=16, H=4, G=2, hd=4,
         layers=2, bias="qkvo",
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 4, 2, 2, f["dtype"],
                              attention_bias=True, mlp_bias=False, pretraining_tp=1,
                              rope_scaling={"rope_type": "default"}, rope_theta=500000.0,
                              head_dim=4),
         runs=[0, 1]),
    dict(name="Mistral 7B", type="mistral", dtype="BF16", D=16, H=4, G=2, hd=4, layers=2,
         config=lambda f: cfg("MistralForCausalLM", "mistral", 16, 4, 2, 2, f["dtype"],
                              rope_theta=10000.0, sliding_window=4),
         runs=[0, 1]),
    dict(name="Mistral NeMo (head_dim apart)", type="mistral", dtype="BF16", D=16, H=4, G=2,
         hd=6, layers=2,
         config=lambda f: cfg("MistralForCausalLM", "mistral", 16, 4, 2, 2, f["dtype"],
                              head_dim=6, rope_theta=1000000.0, sliding_window=None),
         runs=[1]),
    dict(name="Mixtral", type="mixtral", dtype="BF16", D=16, H=4, G=2, hd=4, layers=2, moe=True,
         config=lambda f: cfg("MixtralForCausalLM", "mixtral", 16, 4, 2, 2, f["dtype"],
                              num_local_experts=2, num_experts_per_tok=2,
                              output_router_logits=False, router_aux_loss_coef=0.02,
                              router_jitter_noise=0.0, rope_theta=1000000.0,
                              sliding_window=None),
         runs=[1]),
    dict(name="Qwen2.5, sliding from max_window_layers", type="qwen2", dtype="BF16", D=16, H=4,
         G=2, hd=4, layers=2, bias="qkv",
         config=lambda f: cfg("Qwen2ForCausalLM", "qwen2", 16, 4, 2, 2, f["dtype"],
                              max_window_layers=1, rope_scaling=None, rope_theta=1000000.0,
                              sliding_window=3, use_sliding_window=True),
         runs=[0, 1]),
    dict(name="Gemma", type="gemma", dtype="BF16", D=12, H=2, G=1, hd=8, layers=2,
         config=lambda f: cfg("GemmaForCausalLM", "gemma", 12, 2, 1, 2, f["dtype"],
                              attention_bias=False, head_dim=8, hidden_act="gelu",
                              hidden_activation="gelu_pytorch_tanh", pad_token_id=0,
                              rope_scaling=None, rope_theta=10000.0),
         runs=[1]),
    dict(name="Gemma 2 (softcap, query_pre_attn_scalar, every other layer slides)",
         type="gemma2", dtype="BF16", D=12, H=2, G=1, hd=8, layers=2, weight_scale=1.2,
         config=lambda f: cfg("Gemma2ForCausalLM", "gemma2", 12, 2, 1, 2, f["dtype"],
                              attention_bias=False, attn_logit_softcapping=3.0,
                              cache_implementation="hybrid", final_logit_softcapping=30.0,
                              head_dim=8, hidden_act="gelu_pytorch_tanh",
                              hidden_activation="gelu_pytorch_tanh", pad_token_id=0,
                              query_pre_attn_scalar=6, rope_theta=10000.0, sliding_window=3,
                              sliding_window_size=3),
         runs=[0, 1]),
    dict(name="Granite (attention_multiplier)", type="granite", dtype="BF16", D=16, H=4, G=2,
         hd=4, layers=2,
         config=lambda f: cfg("GraniteForCausalLM", "granite", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, attention_multiplier=0.3,
                              embedding_multiplier=12.0, logits_scaling=8.0, mlp_bias=False,
                              residual_multiplier=0.22, rope_scaling=None,
                              rope_theta=10000000.0),
         runs=[1]),
    dict(name="Cohere Command R (interleaved rotation)", type="cohere", dtype="F16", D=16, H=4,
         G=4, hd=4, layers=2,
         config=lambda f: cfg("CohereForCausalLM", "cohere", 16, 4, 4, 2, f["dtype"],
                              attention_bias=False, layer_norm_eps=1e-05, logit_scale=0.0625,
                              pad_token_id=0, rope_theta=8000000.0, use_qk_norm=False),
         runs=[1]),
    dict(name="Cohere Command R+ (use_qk_norm: a LayerNorm per head)", type="cohere",
         dtype="F16", D=16, H=4, G=2, hd=4, layers=2, qk_norm="per_head",
         config=lambda f: cfg("CohereForCausalLM", "cohere", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, layer_norm_eps=1e-05, logit_scale=0.0625,
                              pad_token_id=0, rope_theta=75000000.0, use_qk_norm=True),
         runs=[1]),
    dict(name="Qwen3 (q_norm and k_norm per head)", type="qwen3", dtype="BF16", D=16, H=4, G=2,
         hd=8, layers=2, qk_norm="head",
         config=lambda f: cfg("Qwen3ForCausalLM", "qwen3", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, head_dim=8, max_window_layers=28,
                              rope_scaling=None, rope_theta=1000000.0, rms_norm_eps=1e-06,
                              sliding_window=None, use_sliding_window=False),
         runs=[1]),
    dict(name="Qwen3 sliding from max_window_layers", type="qwen3", dtype="BF16", D=16, H=4,
         G=2, hd=4, layers=2, qk_norm="head",
         config=lambda f: cfg("Qwen3ForCausalLM", "qwen3", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, head_dim=4, max_window_layers=1,
                              layer_types=["full_attention", "sliding_attention"],
                              rope_scaling=None, rope_theta=1000000.0, rms_norm_eps=1e-06,
                              sliding_window=3, use_sliding_window=True),
         runs=[0, 1]),
    dict(name="Qwen3-MoE", type="qwen3_moe", dtype="BF16", D=16, H=4, G=2, hd=8, layers=2,
         qk_norm="head", moe=True,
         config=lambda f: cfg("Qwen3MoeForCausalLM", "qwen3_moe", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, decoder_sparse_step=1, head_dim=8,
                              max_window_layers=28, mlp_only_layers=[], moe_intermediate_size=8,
                              norm_topk_prob=True, num_experts=2, num_experts_per_tok=2,
                              output_router_logits=False, rope_scaling=None,
                              rope_theta=1000000.0, router_aux_loss_coef=0.001,
                              sliding_window=None, use_sliding_window=False),
         runs=[1]),
    dict(name="OLMo 2 (q_norm and k_norm over the whole projection)", type="olmo2",
         dtype="F32", D=16, H=4, G=2, hd=4, layers=2, qk_norm="all",
         config=lambda f: cfg("Olmo2ForCausalLM", "olmo2", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, pad_token_id=1, rms_norm_eps=1e-06,
                              rope_scaling=None, rope_theta=500000.0),
         runs=[1]),
    dict(name="Phi-3 mini 128k (qkv_proj, longrope, sliding window)", type="phi3", dtype="BF16",
         D=16, H=4, G=4, hd=4, layers=2, fused="blocks", scaling=True,
         config=lambda f: cfg("Phi3ForCausalLM", "phi3", 16, 4, 4, 2, f["dtype"],
                              embd_pdrop=0.0, max_position_embeddings=64,
                              original_max_position_embeddings=4, pad_token_id=32000,
                              resid_pdrop=0.0, rope_theta=10000.0, sliding_window=5,
                              rope_scaling={"type": "longrope",
                                            "short_factor": [1.0, 1.2],
                                            "long_factor": [1.5, 3.0]}),
         runs=[1]),
    dict(name="Phi-4-mini (qkv_proj, grouped heads, partial rotation)", type="phi3",
         dtype="BF16", D=16, H=4, G=2, hd=4, layers=2, fused="blocks",
         config=lambda f: cfg("Phi3ForCausalLM", "phi3", 16, 4, 2, 2, f["dtype"],
                              partial_rotary_factor=0.5, rope_theta=10000.0,
                              sliding_window=None, original_max_position_embeddings=4096),
         runs=[1]),
    dict(name="Pythia (GPT-NeoX: query_key_value head by head, rotary_pct)", type="gpt_neox",
         dtype="F16", D=16, H=4, G=4, hd=4, layers=2, fused="per_head", bias="qkvo",
         config=lambda f: {"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0,
                           "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": 16,
                           "initializer_range": 0.02, "intermediate_size": 64,
                           "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
                           "model_type": "gpt_neox", "num_attention_heads": 4,
                           "num_hidden_layers": 2, "rotary_emb_base": 10000, "rotary_pct": 0.5,
                           "tie_word_embeddings": False, "torch_dtype": "float16",
                           "transformers_version": "4.24.0", "use_cache": True,
                           "use_parallel_residual": True, "vocab_size": 11},
         runs=[1]),
    dict(name="Falcon 7B (multi_query: Q, one K, one V)", type="falcon", dtype="BF16", D=16,
         H=4, G=1, hd=4, layers=2, fused="blocks",
         config=lambda f: {"alibi": False, "apply_residual_connection_post_layernorm": False,
                           "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0,
                           "bias": False, "bos_token_id": 11, "eos_token_id": 11,
                           "hidden_dropout": 0.0, "hidden_size": 16, "initializer_range": 0.02,
                           "layer_norm_epsilon": 1e-05, "model_type": "falcon",
                           "multi_query": True, "new_decoder_architecture": False,
                           "num_attention_heads": 4, "num_hidden_layers": 2,
                           "parallel_attn": True, "torch_dtype": "bfloat16", "vocab_size": 11},
         runs=[1]),
    dict(name="Falcon 40B (new_decoder_architecture: grouped)", type="falcon", dtype="BF16",
         D=16, H=4, G=2, hd=4, layers=2, fused="grouped", bias="qkvo",
         config=lambda f: {"alibi": False, "architectures": ["FalconForCausalLM"],
                           "bias": True, "hidden_size": 16, "layer_norm_epsilon": 1e-05,
                           "model_type": "falcon", "new_decoder_architecture": True,
                           "num_attention_heads": 4, "num_hidden_layers": 2, "num_kv_heads": 2,
                           "parallel_attn": True, "rope_theta": 500000.0,
                           "torch_dtype": "bfloat16", "vocab_size": 11},
         runs=[1]),
    dict(name="Falcon RW (neither: head by head)", type="falcon", dtype="BF16", D=16, H=4,
         G=4, hd=4, layers=2, fused="per_head",
         config=lambda f: {"alibi": False, "architectures": ["FalconForCausalLM"],
                           "bias": False, "hidden_size": 16, "model_type": "falcon",
                           "multi_query": False, "num_attention_heads": 4,
                           "num_hidden_layers": 2, "vocab_size": 11},
         runs=[1]),
    dict(name="StarCoder (GPT-BigCode: c_attn multi-query)", type="gpt_bigcode", dtype="F32",
         D=16, H=4, G=1, hd=4, layers=2, fused="blocks", bias="qkvo",
         config=lambda f: {"activation_function": "gelu_pytorch_tanh",
                           "architectures": ["GPTBigCodeForCausalLM"],
                           "attention_softmax_in_fp32": True, "attn_pdrop": 0.1,
                           "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0,
                           "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
                           "model_type": "gpt_bigcode", "multi_query": True, "n_embd": 16,
                           "n_head": 4, "n_inner": 64, "n_layer": 2, "n_positions": 64,
                           "resid_pdrop": 0.1, "scale_attention_softmax_in_fp32": True,
                           "scale_attn_weights": True, "vocab_size": 11},
         runs=[1]),
    dict(name="GPT-BigCode without multi_query (head by head)", type="gpt_bigcode",
         dtype="F32", D=16, H=4, G=4, hd=4, layers=2, fused="per_head", bias="qkvo",
         config=lambda f: {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
                           "multi_query": False, "n_embd": 16, "n_head": 4, "n_layer": 2,
                           "vocab_size": 11},
         runs=[1]),
    dict(name="Gemma 3 (1 + w q/k norm, local layers' own base, rope_scaling on the global)",
         type="gemma3_text", dtype="BF16", D=12, H=2, G=1, hd=8, layers=2, qk_norm="head",
         config=lambda f: cfg("Gemma3ForCausalLM", "gemma3_text", 12, 2, 1, 2, f["dtype"],
                              attention_bias=False, attn_logit_softcapping=None,
                              cache_implementation="hybrid", final_logit_softcapping=None,
                              head_dim=8, hidden_activation="gelu_pytorch_tanh",
                              pad_token_id=0, query_pre_attn_scalar=6,
                              rms_norm_eps=1e-06, rope_local_base_freq=10000.0,
                              rope_scaling={"factor": 8.0, "rope_type": "linear"},
                              rope_theta=1000000.0, sliding_window=3,
                              sliding_window_pattern=2),
         runs=[0, 1]),
    dict(name="Gemma 3 4B's text model (gemma3, text_config, layer_types)", type="gemma3",
         text="gemma3_text", dtype="BF16", D=12, H=2, G=1, hd=8, layers=2, qk_norm="head",
         vision=True, prefix="language_model.model.",
         config=lambda f: {
             "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
             "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
             "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
             "text_config": {"head_dim": 8, "hidden_size": 12, "intermediate_size": 24,
                             "model_type": "gemma3_text", "num_attention_heads": 2,
                             "num_hidden_layers": 2, "num_key_value_heads": 1,
                             "query_pre_attn_scalar": 8, "rope_scaling": {"factor": 8.0,
                                                                          "rope_type": "linear"},
                             "layer_types": ["full_attention", "sliding_attention"],
                             "sliding_window": 4},
             "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
             "vision_config": {"hidden_size": 8, "model_type": "siglip_vision_model"}},
         runs=[0, 1]),
    dict(name="ModernBERT (Wqkv, local layers with their own base, not causal)",
         type="modernbert", dtype="F32", D=16, H=4, G=4, hd=4, layers=3, fused="blocks",
         config=lambda f: {"architectures": ["ModernBertForMaskedLM"], "attention_bias": False,
                           "attention_dropout": 0.0, "bos_token_id": 50281,
                           "classifier_activation": "gelu", "classifier_bias": False,
                           "classifier_dropout": 0.0, "classifier_pooling": "mean",
                           "cls_token_id": 50281, "decoder_bias": True,
                           "deterministic_flash_attn": False, "embedding_dropout": 0.0,
                           "eos_token_id": 50282, "global_attn_every_n_layers": 3,
                           "global_rope_theta": 160000.0, "gradient_checkpointing": False,
                           "hidden_activation": "gelu", "hidden_size": 16,
                           "initializer_cutoff_factor": 2.0, "initializer_range": 0.02,
                           "intermediate_size": 24, "layer_norm_eps": 1e-05,
                           "local_attention": 2, "local_rope_theta": 10000.0,
                           "max_position_embeddings": 8192, "mlp_bias": False,
                           "mlp_dropout": 0.0, "model_type": "modernbert", "norm_bias": False,
                           "norm_eps": 1e-05, "num_attention_heads": 4, "num_hidden_layers": 3,
                           "pad_token_id": 50283, "position_embedding_type": "absolute",
                           "sep_token_id": 50282, "tie_word_embeddings": True,
                           "torch_dtype": "float32", "transformers_version": "4.47.0.dev0",
                           "vocab_size": 11},
         runs=[0, 1]),
    dict(name="GLM-4 (q, k, v biases, interleaved pairs of half the features)", type="glm",
         dtype="BF16", D=16, H=4, G=2, hd=8, layers=2, bias="qkv",
         config=lambda f: cfg("GlmForCausalLM", "glm", 16, 4, 2, 2, f["dtype"],
                              attention_bias=True, head_dim=8, pad_token_id=151329,
                              partial_rotary_factor=0.5, rope_theta=10000.0),
         runs=[1]),
    dict(name="GLM-4-0414 (glm4, no biases)", type="glm4", dtype="BF16", D=16, H=4, G=2, hd=4,
         layers=2,
         config=lambda f: cfg("Glm4ForCausalLM", "glm4", 16, 4, 2, 2, f["dtype"],
                              attention_bias=False, head_dim=4, partial_rotary_factor=0.5,
                              rope_theta=10000.0),
         runs=[1]),
    dict(name="Command R7B (cohere2: rotation and window on local layers alone)",
         type="cohere2", dtype="BF16", D=16, H=4, G=2, hd=4, layers=4,
         config=lambda f: cfg("Cohere2ForCausalLM", "cohere2", 16, 4, 2, 4, f["dtype"],
                              attention_bias=False, cache_implementation="hybrid", head_dim=4,
                              layer_norm_eps=1e-05, logit_scale=0.25,
                              order_of_interleaved_layers="local_attn_first", pad_token_id=0,
                              position_embedding_type="rope_gptj", rope_scaling=None,
                              rope_theta=50000, rotary_pct=1.0, sliding_window=3,
                              sliding_window_pattern=4, use_embedding_sharing=True,
                              use_gated_activation=True),
         runs=[2, 3]),
    dict(name="SmolLM3 (a layer without rotation)", type="smollm3", dtype="BF16", D=16, H=4,
         G=2, hd=4, layers=4,
         config=lambda f: cfg("SmolLM3ForCausalLM", "smollm3", 16, 4, 2, 4, f["dtype"],
                              attention_bias=False, layer_types=["full_attention"] * 4,
                              max_window_layers=28, mlp_bias=False, no_rope_layer_interval=4,
                              no_rope_layers=[1, 1, 1, 0], pretraining_tp=2, rope_scaling=None,
                              rope_theta=5000000.0, sliding_window=None,
                              use_sliding_window=False),
         runs=[2, 3]),
    dict(name="OLMo", type="olmo", dtype="F32", D=16, H=4, G=4, hd=4, layers=2,
         config=lambda f: cfg("OlmoForCausalLM", "olmo", 16, 4, 4, 2, f["dtype"],
                              attention_bias=False, clip_qkv=None, pad_token_id=1,
                              rope_scaling=None, rope_theta=10000.0),
         runs=[1]),
    dict(name="Llama 3.1 (rope_scaling llama3)", type="llama", dtype="BF16", D=16, H=2, G=1,
         hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              attention_bias=False, head_dim=8, max_position_embeddings=131072,
                              mlp_bias=False, pretraining_tp=1, rope_theta=500000.0,
                              rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8192,
                                            "rope_type": "llama3"}),
         runs=[1]),
    dict(name="Llama 3.1, a small original context (every band)", type="llama", dtype="BF16",
         D=16, H=2, G=1, hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              rope_theta=10000.0,
                              rope_scaling={"factor": 4.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64,
                                            "rope_type": "llama3"}),
         runs=[1]),
    dict(name="Qwen2.5 (rope_scaling yarn)", type="qwen2", dtype="BF16", D=16, H=2, G=1, hd=8,
         layers=2, bias="qkv", scaling=True,
         config=lambda f: cfg("Qwen2ForCausalLM", "qwen2", 16, 2, 1, 2, f["dtype"],
                              max_position_embeddings=131072, max_window_layers=28,
                              rope_theta=1000000.0, sliding_window=None,
                              use_sliding_window=False,
                              rope_scaling={"factor": 4.0, "type": "yarn",
                                            "original_max_position_embeddings": 32768}),
         runs=[1]),
    dict(name="YaRN as gpt-oss sets it (truncate false, betas)", type="llama", dtype="BF16",
         D=16, H=2, G=1, hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              max_position_embeddings=131072, rope_theta=150000.0,
                              rope_scaling={"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096,
                                            "rope_type": "yarn", "truncate": False}),
         runs=[1]),
    dict(name="YaRN with mscale and mscale_all_dim (DeepSeek's)", type="llama", dtype="BF16",
         D=16, H=2, G=1, hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              max_position_embeddings=163840, rope_theta=10000.0,
                              rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                            "mscale": 0.707, "mscale_all_dim": 1.0,
                                            "original_max_position_embeddings": 4096,
                                            "type": "yarn"}),
         runs=[1]),
    dict(name="rope_scaling linear", type="llama", dtype="F32", D=16, H=2, G=1, hd=8,
         layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              rope_scaling={"type": "linear", "factor": 2.0}),
         runs=[1]),
    dict(name="rope_scaling dynamic, the sequence past max_position_embeddings", type="llama",
         dtype="F32", D=16, H=2, G=1, hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              max_position_embeddings=4,
                              rope_scaling={"type": "dynamic", "factor": 2.0}),
         runs=[1]),
    dict(name="rope_scaling longrope, the long factors", type="llama", dtype="F32", D=16, H=2,
         G=1, hd=8, layers=2, scaling=True,
         config=lambda f: cfg("LlamaForCausalLM", "llama", 16, 2, 1, 2, f["dtype"],
                              max_position_embeddings=16,
                              rope_scaling={"type": "longrope",
                                            "short_factor": [1.0, 1.1, 1.5, 2.0],
                                            "long_factor": [1.0, 1.3, 2.5, 4.0],
                                            "original_max_position_embeddings": 4}),
         runs=[1]),
    dict(name="gpt-oss (sinks, layer_types, YaRN, biases, quantized experts)", type="gpt_oss",
         dtype="BF16", D=16, H=4, G=2, hd=4, layers=2, bias="qkvo", sinks=True, moe=True,
         config=lambda f: cfg("GptOssForCausalLM", "gpt_oss", 16, 4, 2, 2, f["dtype"],
                              attention_bias=True, experts_per_token=4, head_dim=4,
                              initial_context_length=4096,
                              layer_types=["sliding_attention", "full_attention"],
                              max_position_embeddings=131072, num_experts_per_tok=4,
                              num_local_experts=4, output_router_logits=False,
                              quantization_config={"modules_to_not_convert": [
                                  "model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
                              rope_scaling={"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096,
                                            "rope_type": "yarn", "truncate": False},
                              rope_theta=150000.0, router_aux_loss_coef=0.9, sliding_window=3,
                              swiglu_limit=7.0),
         runs=[0, 1]),
    dict(name="LLaVA 1.5 (text_config, the text model's default heads)", type="llava",
         dtype="F16", D=64, H=32, G=32, hd=2, layers=2, text="llama", vision=True,
         prefix="language_model.model.",
         config=lambda f: {
             "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
             "image_token_index": 32000, "model_type": "llava", "pad_token_id": 32001,
             "projector_hidden_act": "gelu",
             "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5",
                             "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                             "intermediate_size": 128, "max_position_embeddings": 4096,
                             "model_type": "llama", "num_hidden_layers": 2,
                             "rms_norm_eps": 1e-05, "torch_dtype": "float16",
                             "vocab_size": 11},
             "tie_word_embeddings": False, "torch_dtype": "float16",
             "transformers_version": "4.46.0",
             "vision_config": {"hidden_size": 8, "model_type": "clip_vision_model"},
             "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
             "vocab_size": 11},
         runs=[1]),
    dict(name="Mistral 3 (text_config, new naming)", type="mistral3", dtype="BF16", D=16, H=4,
         G=2, hd=6, layers=2, text="mistral", vision=True, prefix="model.language_model.",
         config=lambda f: {
             "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10,
             "model_type": "mistral3", "multimodal_projector_bias": False,
             "projector_hidden_act": "gelu", "spatial_merge_size": 2,
             "text_config": cfg("MistralForCausalLM", "mistral", 16, 4, 2, 2, f["dtype"],
                                head_dim=6, rope_theta=1000000000.0, sliding_window=None),
             "torch_dtype": "bfloat16", "transformers_version": "4.50.0",
             "vision_config": {"hidden_size": 8, "model_type": "pixtral"},
             "vision_feature_layer": -1},
         runs=[0]),
]

# ---- the families' attention, transcribed from their modeling code ---------


def hf_settings(f, config, layer):
    """What the family's attention module takes from its config for layer:
    as transformers' modeling_<family>.py sets up self.scaling,
    self.sliding_window, the rotary embedding and the softcap."""
    t = f.get("text", f["type"])
    c = config.get("text_config", config)
    H = c.get("num_attention_heads", c.get("n_head", 32))  # LlamaConfig's default
    hd = c.get("head_dim") or c.get("hidden_size", c.get("n_embd")) // H
    theta = c.get("rope_theta", c.get("rotary_emb_base", 10000.0))
    s = dict(H=H, G=c.get("num_key_value_heads") or H, hd=hd, scaling=hd ** -0.5,
             softcap=None, window=None, rope="half", theta=theta,
             R=int(hd * c.get("partial_rotary_factor", c.get("rotary_pct", 1.0))))
    if t == "gpt_neox":
        c = dict(c, rope_theta=theta)
    # the fused projections, split as each modeling code splits them
    if t == "phi3":
        s["fused"] = "blocks"
        s["window"] = c.get("sliding_window")
    if t == "gpt_neox":
        s["fused"] = "per_head"
    if t == "falcon":
        # FalconAttention: num_kv_heads if new_decoder_architecture or not
        # multi_query, else 1; _split_heads by the same flags
        if c.get("new_decoder_architecture"):
            s["G"], s["fused"] = c.get("num_kv_heads") or H, "grouped"
        elif c.get("multi_query", True):
            s["G"], s["fused"] = 1, "blocks"
        else:
            s["G"], s["fused"] = H, "per_head"
    if t == "gemma3_text":
        # Gemma3Attention: query_pre_attn_scalar (256), sliding by layer_types or
        # sliding_window_pattern, the local rotary embedding on sliding layers
        # (rope_local_base_freq, rope_scaling default), Gemma3RMSNorm on q and k
        s["scaling"] = c.get("query_pre_attn_scalar", 256) ** -0.5
        s["softcap"] = c.get("attn_logit_softcapping")
        if "layer_types" in c:
            local = c["layer_types"][layer] == "sliding_attention"
        else:
            local = bool((layer + 1) % c.get("sliding_window_pattern", 6))
        if local:
            s["window"] = c.get("sliding_window", 4096)
            s["theta"] = c.get("rope_local_base_freq", 10000.0)
            c = dict(c, rope_theta=s["theta"], rope_scaling=None)
        else:
            s["theta"] = c.get("rope_theta", 1000000.0)
            c = dict(c, rope_theta=s["theta"])
        s["norm"] = ("rms1p", "head", c.get("rms_norm_eps", 1e-6))
    if t == "modernbert":
        # ModernBertAttention: Wqkv viewed (3, heads, head_dim); a local layer
        # (layer % global_attn_every_n_layers) sees local_attention // 2 keys on
        # each side and turns by local_rope_theta; bidirectional
        s["fused"], s["causal"] = "blocks", False
        if layer % c.get("global_attn_every_n_layers", 3):
            s["both"] = c.get("local_attention", 128) // 2
            s["theta"] = c.get("local_rope_theta") or c.get("global_rope_theta", 160000.0)
        else:
            s["theta"] = c.get("global_rope_theta", 160000.0)
        c = dict(c, rope_theta=s["theta"])
    if t == "gpt_bigcode":
        s["rope"] = None
        if c.get("multi_query", True):
            s["G"], s["fused"] = 1, "blocks"
        else:
            s["G"], s["fused"] = H, "per_head"
        if not c.get("scale_attn_weights", True):
            s["scaling"] = 1.0
    s["inv"], s["af"] = rope_parameters(c, s["R"], N)
    if t == "gemma2":
        s["scaling"] = c["query_pre_attn_scalar"] ** -0.5
        s["softcap"] = c.get("attn_logit_softcapping")
        # layer_types' default: sliding when (i + 1) % 2 (layers 0, 2, ...)
        if (layer + 1) % 2:
            s["window"] = c["sliding_window"]
    if t in ("mistral", "mixtral"):
        s["window"] = c.get("sliding_window")
    if t in ("qwen2", "qwen3", "qwen3_moe") and c.get("use_sliding_window") and \
            layer >= c["max_window_layers"]:
        s["window"] = c["sliding_window"]
    # the q/k norm: Qwen3RMSNorm per head, Olmo2RMSNorm over the projection,
    # CohereLayerNorm over (heads, head_dim) when use_qk_norm
    if t in ("qwen3", "qwen3_moe"):
        s["norm"] = ("rms", "head", c.get("rms_norm_eps", 1e-6))
    if t == "olmo2":
        s["norm"] = ("rms", "all", c.get("rms_norm_eps", 1e-5))
    if t == "cohere" and c.get("use_qk_norm"):
        s["norm"] = ("layer", "head", c.get("layer_norm_eps", 1e-5))
    if t == "granite":
        s["scaling"] = c["attention_multiplier"]
    if t == "cohere":
        s["rope"] = "interleaved"
    if t in ("glm", "glm4"):
        # GlmAttention's apply_rotary_pos_emb: cos and sin repeat_interleave'd,
        # pairs (2i, 2i + 1) of the first int(head_dim * partial_rotary_factor)
        s["rope"] = "interleaved"
    if t == "cohere2":
        # Cohere2Attention: sliding and rotated on the local layers (layer_types,
        # else all but every sliding_window_pattern-th), neither on the others
        local = bool((layer + 1) % c.get("sliding_window_pattern", 4))
        if "layer_types" in c:
            local = c["layer_types"][layer] == "sliding_attention"
        s["rope"] = "interleaved" if local and c.get("sliding_window") else None
        s["window"] = c.get("sliding_window") if local else None
    if t == "smollm3" and not c["no_rope_layers"][layer]:
        s["rope"] = None
    if t == "gpt_oss" and c["layer_types"][layer] == "sliding_attention":
        s["window"] = c["sliding_window"]
    return s


def rope_parameters(c, R, seq_len):
    """inv_freq and the attention factor as modeling_rope_utils.py's
    _compute_*_parameters compute them from config c's rope_scaling"""
    base = c.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (np.arange(0, R, 2, dtype=np.float64) / R))
    sc = c.get("rope_scaling")
    t = sc and sc.get("rope_type", sc.get("type"))
    if not t or t == "default":
        return inv, 1.0
    if t == "linear":
        return inv / sc["factor"], 1.0
    if t == "dynamic":
        mp, f = c["max_position_embeddings"], sc["factor"]
        if seq_len > mp:
            base = base * ((f * seq_len / mp) - (f - 1)) ** (R / (R - 2))
            inv = 1.0 / (base ** (np.arange(0, R, 2, dtype=np.float64) / R))
        return inv, 1.0
    if t == "llama3":
        f, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old = sc["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_l = np.where(wavelen > low_wl, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / f + smooth * inv_l
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, smoothed, inv_l), 1.0
    if t == "yarn":
        f = sc["factor"]
        if "original_max_position_embeddings" in sc:
            old = sc["original_max_position_embeddings"]
            f = c["max_position_embeddings"] / old
        else:
            old = c["max_position_embeddings"]

        def m(scale, k=1):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
        af = sc.get("attention_factor")
        if af is None:
            ms, ma = sc.get("mscale"), sc.get("mscale_all_dim")
            af = m(f, ms) / m(f, ma) if ms and ma else m(f)

        def dim(rot):
            return (R * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = dim(sc.get("beta_fast") or 32), dim(sc.get("beta_slow") or 1)
        if sc.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, R - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(R // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        pos_freqs = base ** (np.arange(0, R, 2, dtype=np.float64) / R)
        extra, inter = 1.0 / pos_freqs, 1.0 / (f * pos_freqs)
        e = 1 - ramp
        return inter * (1 - e) + extra * e, af
    if t == "longrope":
        # Phi-3 keeps original_max_position_embeddings beside rope_scaling
        old = c.get("original_max_position_embeddings") or sc["original_max_position_embeddings"]
        f = c["max_position_embeddings"] / old
        af = sc.get("attention_factor")
        if af is None:
            af = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(old))
        ext = np.array(sc["long_factor"] if seq_len > old else sc["short_factor"])
        return 1.0 / (ext * base ** (np.arange(0, R, 2, dtype=np.float64) / R)), af
    raise ValueError(t)


def rotate(x, pos, R, inv_freq, af, style):
    """the first R features of each row of x turned by its position (cos
    and sin times the attention factor af)"""
    freqs = np.outer(pos, inv_freq)
    xr, rest = x[..., :R], x[..., R:]
    if style == "half":  # rotate_half over cat(freqs, freqs)
        emb = np.concatenate([freqs, freqs], axis=-1)
        out = xr * (np.cos(emb) * af) + ck.rotate_half(xr) * (np.sin(emb) * af)
    else:  # Cohere: repeat_interleave(freqs, 2), pairs (2i, 2i + 1)
        emb = np.repeat(freqs, 2, axis=-1)
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = np.stack([-x2, x1], axis=-1).reshape(xr.shape)
        out = xr * (np.cos(emb) * af) + rot * (np.sin(emb) * af)
    return np.concatenate([out, rest], axis=-1)


def qk_normed(x, w, kind, eps):
    """x normalised over its last axis as the norm modules do: LayerNorm
    centres first; then x / sqrt(mean(x^2) + eps) times the weight (Gemma's:
    1 + the weight)"""
    if kind == "layer":
        x = x - x.mean(-1, keepdims=True)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * ((1 + w) if kind == "rms1p" else w)


def split_qkv(y, s):
    """a fused projection's output (n, rows) as Q, K and V, (n, H*hd),
    (n, G*hd), (n, G*hd), as the modeling code views and splits it"""
    n, H, G, hd = y.shape[0], s["H"], s["G"], s["hd"]
    if s["fused"] == "blocks":  # Phi-3's qkv[..., :q], BigCode's split, Falcon's [:-2]
        return y[:, :H * hd], y[:, H * hd:(H + G) * hd], y[:, (H + G) * hd:]
    if s["fused"] == "per_head":  # GPT-NeoX: view(n, H, 3 * hd).chunk(3, dim=-1)
        y = y.reshape(n, H, 3 * hd)
        return (y[..., :hd].reshape(n, -1), y[..., hd:2 * hd].reshape(n, -1),
                y[..., 2 * hd:].reshape(n, -1))
    # Falcon's new_decoder_architecture: view(n, G, H/G + 2, hd)
    y = y.reshape(n, G, H // G + 2, hd)
    return y[:, :, :-2].reshape(n, -1), y[:, :, -2].reshape(n, -1), y[:, :, -1].reshape(n, -1)


def decoder_attention(x, p, s, kv_len=None):
    """eager_attention_forward with the family's settings: projections,
    rotary embedding, repeat_kv, scaled scores, softcap, causal + sliding +
    padding mask, softmax, the heads merged, o_proj; x (n, D)"""
    n = x.shape[0]
    H, G, hd = s["H"], s["G"], s["hd"]
    if "qkv" in p:
        q, k, v = split_qkv(x @ p["qkv"].T + p.get("bqkv", 0), s)
    else:
        q = x @ p["q"].T + p.get("bq", 0)
        k = x @ p["k"].T + p.get("bk", 0)
        v = x @ p["v"].T + p.get("bv", 0)
    if s.get("norm") and s["norm"][1] == "all":  # OLMo 2: before the heads are split
        q = qk_normed(q, p["qn"], s["norm"][0], s["norm"][2])
        k = qk_normed(k, p["kn"], s["norm"][0], s["norm"][2])
    q, k = q.reshape(n, H, hd), k.reshape(n, G, hd)
    if s.get("norm") and s["norm"][1] == "head":  # weights (hd) or (heads, hd)
        q = qk_normed(q, p["qn"], s["norm"][0], s["norm"][2])
        k = qk_normed(k, p["kn"], s["norm"][0], s["norm"][2])
    q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
    v = v.reshape(n, G, hd).transpose(1, 0, 2)
    pos = np.arange(n, dtype=np.float64)
    if s["rope"]:
        q = rotate(q, pos, s["R"], s["inv"], s["af"], s["rope"])
        k = rotate(k, pos, s["R"], s["inv"], s["af"], s["rope"])
    k = np.repeat(k, H // G, axis=0)
    v = np.repeat(v, H // G, axis=0)
    w = q @ k.transpose(0, 2, 1) * s["scaling"]
    if s["softcap"]:
        w = np.tanh(w / s["softcap"]) * s["softcap"]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    keep = j <= i if s.get("causal", True) else np.ones((n, n), dtype=bool)
    if s["window"]:
        keep = keep & (i - j < s["window"])
    if s.get("both"):  # ModernBERT's local window: |i - j| <= local_attention // 2
        keep = keep & (np.abs(i - j) <= s["both"])
    if kv_len is not None:
        keep = keep & (j < kv_len)
    w = np.where(keep, w, -np.inf)
    if "sinks" in p:
        # gpt-oss: each head's sink joins its softmax, then is dropped
        sink = np.broadcast_to(p["sinks"][:, None, None], (H, n, 1))
        o = ck.softmax(np.concatenate([w, sink], axis=-1))[..., :-1] @ v
    else:
        o = ck.softmax(w) @ v
    return o.transpose(1, 0, 2).reshape(n, H * hd) @ p["o"].T + p.get("bo", 0)


def torch_attention(torch, x, p, s, kv_len=None):
    """the same in PyTorch, float64, as the modeling code writes it"""
    F = torch.nn.functional
    T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    n = x.shape[0]
    H, G, hd = s["H"], s["G"], s["hd"]
    hs = T(x)[None]
    lin = lambda w, b: F.linear(hs, T(w), None if b is None else T(b))  # noqa: E731
    if "qkv" in p:
        qkv = lin(p["qkv"], p.get("bqkv"))[0]
        if s["fused"] == "per_head":
            qkv = qkv.view(n, H, 3 * hd)
            q, k, v = (t.reshape(1, n, -1) for t in qkv.chunk(3, dim=-1))
        elif s["fused"] == "grouped":
            qkv = qkv.view(n, G, H // G + 2, hd)
            q, k, v = (qkv[:, :, :-2].reshape(1, n, -1), qkv[:, :, -2].reshape(1, n, -1),
                       qkv[:, :, -1].reshape(1, n, -1))
        else:
            q, k, v = (t[None] for t in qkv.split([H * hd, G * hd, G * hd], dim=-1))
    else:
        q, k = lin(p["q"], p.get("bq")), lin(p["k"], p.get("bk"))
        v = lin(p["v"], p.get("bv"))
    if s.get("norm"):
        kind, over, eps = s["norm"]

        def norm(t, w):
            # Qwen3RMSNorm / Olmo2RMSNorm: in float32 upstream, float64 here
            if kind == "layer":  # CohereLayerNorm
                t = t - t.mean(-1, keepdim=True)
            t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
            return t * (1.0 + T(w)) if kind == "rms1p" else T(w) * t
        if over == "all":
            q, k = norm(q, p["qn"]), norm(k, p["kn"])
        else:
            q = norm(q.view(1, n, H, hd), p["qn"])
            k = norm(k.view(1, n, G, hd), p["kn"])
    q = q.reshape(1, n, H, hd).transpose(1, 2)
    k = k.reshape(1, n, G, hd).transpose(1, 2)
    v = v.reshape(1, n, G, hd).transpose(1, 2)
    if s["rope"]:
        R = s["R"]
        inv_freq = T(s["inv"])
        freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
        if s["rope"] == "half":
            emb = torch.cat((freqs, freqs), dim=-1)

            def rot(t):
                return torch.cat((-t[..., R // 2:], t[..., :R // 2]), dim=-1)
        else:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)

            def rot(t):
                return torch.stack([-t[..., 1::2], t[..., ::2]], dim=-1).flatten(-2)
        cos, sin = emb.cos() * s["af"], emb.sin() * s["af"]
        q = torch.cat((q[..., :R] * cos + rot(q[..., :R]) * sin, q[..., R:]), dim=-1)
        k = torch.cat((k[..., :R] * cos + rot(k[..., :R]) * sin, k[..., R:]), dim=-1)
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) * s["scaling"]
    if s["softcap"]:
        w = torch.tanh(w / s["softcap"]) * s["softcap"]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = j <= i if s.get("causal", True) else torch.ones(n, n, dtype=torch.bool)
    if s["window"]:
        keep &= (i - j) < s["window"]
    if s.get("both"):
        keep &= (i - j).abs() <= s["both"]
    if kv_len is not None:
        keep &= j < kv_len
    w = w.masked_fill(~keep, float("-inf"))
    if "sinks" in p:
        sinks = T(p["sinks"]).reshape(1, -1, 1, 1).expand(1, H, n, 1)
        combined = torch.cat([w, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined, dim=-1)[..., :-1]
    else:
        probs = F.softmax(w, dim=-1)
    o = torch.matmul(probs, v).transpose(1, 2).reshape(1, n, H * hd)
    return F.linear(o, T(p["o"]), None if p.get("bo") is None else T(p["bo"]))[0].numpy()


# ---- checkpoints -------------------------------------------------------------


# a fused family's names: the layer's module, the fused and output
# projections, and the tensors around them
FUSED_NAMES = {
    "phi3": ("model.layers.%d.self_attn.", "qkv_proj", "o_proj",
             ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"),
             ("input_layernorm.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight")),
    "gpt_neox": ("gpt_neox.layers.%d.attention.", "query_key_value", "dense",
                 ("gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm.weight",
                  "embed_out.weight"),
                 ("input_layernorm.weight", "input_layernorm.bias", "mlp.dense_h_to_4h.weight",
                  "mlp.dense_4h_to_h.weight")),
    "falcon": ("transformer.h.%d.self_attention.", "query_key_value", "dense",
               ("transformer.word_embeddings.weight", "transformer.ln_f.weight",
                "lm_head.weight"),
               ("input_layernorm.weight", "mlp.dense_h_to_4h.weight", "mlp.dense_4h_to_h.weight")),
    "modernbert": ("model.layers.%d.attn.", "Wqkv", "Wo",
                   ("model.embeddings.tok_embeddings.weight", "model.embeddings.norm.weight",
                    "model.final_norm.weight"),
                   ("mlp_norm.weight", "mlp.Wi.weight", "mlp.Wo.weight")),
    "gpt_bigcode": ("transformer.h.%d.attn.", "c_attn", "c_proj",
                    ("transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"),
                    ("ln_1.weight", "ln_1.bias", "mlp.c_fc.weight", "mlp.c_proj.weight")),
}


def fused_checkpoint(rng, f):
    """a fused family's tensors: its Q, K and V in one (rows, D) tensor laid
    out as f["fused"] says (the reference splits it as the modeling code
    does), the output projection, biases where f["bias"] says, and what
    lies around them (embeddings, norms, MLP, which mha never reads)"""
    D, H, G, hd, dt = f["D"], f["H"], f["G"], f["hd"], f["dtype"]
    mod, fused, out, top, around = FUSED_NAMES[f["type"]]
    t, params = {}, []
    for name in top:
        t[name] = ck.Tensor(rng.standard_normal((11, D)) if "embed" in name or "wte" in
                            name or "wpe" in name or "head" in name or "embed_out" in name
                            else np.ones(D), dt)
    for n in range(f["layers"]):
        a = mod % n
        qkv = ck.Tensor(rng.standard_normal(((H + 2 * G) * hd, D)) * 0.5, dt)
        o = ck.Tensor(rng.standard_normal((D, H * hd)) * 0.5, dt)
        t[a + fused + ".weight"], t[a + out + ".weight"] = qkv, o
        p = {"qkv": qkv.value, "o": o.value}
        if "q" in f.get("bias", ""):
            b = ck.Tensor(rng.standard_normal((H + 2 * G) * hd) * 0.3, dt)
            t[a + fused + ".bias"] = b
            p["bqkv"] = b.value
        if "o" in f.get("bias", ""):
            b = ck.Tensor(rng.standard_normal(D) * 0.3, dt)
            t[a + out + ".bias"] = b
            p["bo"] = b.value
        layer = a.rsplit(".", 2)[0] + "."
        for name in around:
            t[layer + name] = ck.Tensor(np.ones(D) if name.endswith(("norm.weight", "bias",
                                                                       "ln_1.weight"))
                                        else rng.standard_normal((2 * D, D)), dt)
        params.append(p)
    return t, params


def decoder_checkpoint(rng, f):
    """the family's tensors: per layer its attention (weights and the biases
    f["bias"] names), norms and MLP (or experts), and the model's
    embeddings; an image-text model's vision tower beside its text model"""
    if f.get("fused"):
        return fused_checkpoint(rng, f)
    D, H, G, hd, dt = f["D"], f["H"], f["G"], f["hd"], f["dtype"]
    pre = f.get("prefix", "model.")
    sc = f.get("weight_scale", 0.5)
    t, params = {}, []
    t[pre + "embed_tokens.weight"] = ck.Tensor(rng.standard_normal((11, D)), dt)
    t[pre + "norm.weight"] = ck.Tensor(np.ones(D), dt)
    head = "language_model.lm_head.weight" if pre.startswith("language_model") else \
        "lm_head.weight"
    t[head] = ck.Tensor(rng.standard_normal((11, D)), dt)
    for n in range(f["layers"]):
        a = "%slayers.%d." % (pre, n)
        p = {}
        for c, rows, cols in (("q", H * hd, D), ("k", G * hd, D), ("v", G * hd, D),
                              ("o", D, H * hd)):
            w = ck.Tensor(rng.standard_normal((rows, cols)) * sc, dt)
            t[a + "self_attn.%s_proj.weight" % c] = w
            p[c] = w.value
            if c in f.get("bias", ""):
                b = ck.Tensor(rng.standard_normal(rows) * 0.3, dt)
                t[a + "self_attn.%s_proj.bias" % c] = b
                p["b" + c] = b.value
        if f.get("sinks"):
            sk = ck.Tensor(rng.standard_normal(H), dt)
            t[a + "self_attn.sinks"] = sk
            p["sinks"] = sk.value
        if f.get("qk_norm"):
            # Qwen3's (head_dim), OLMo 2's (heads*head_dim), Cohere's (heads, head_dim)
            lay = f["qk_norm"]
            for side, heads in (("q", H), ("k", G)):
                shape = (hd,) if lay == "head" else (heads * hd,) if lay == "all" else (heads, hd)
                w = ck.Tensor(rng.standard_normal(shape) * 0.3 + 1, dt)
                t[a + "self_attn.%s_norm.weight" % side] = w
                p[side + "n"] = w.value
        t[a + "input_layernorm.weight"] = ck.Tensor(np.ones(D), dt)
        t[a + "post_attention_layernorm.weight"] = ck.Tensor(np.ones(D), dt)
        if f.get("moe"):
            t[a + "block_sparse_moe.gate.weight"] = ck.Tensor(rng.standard_normal((2, D)), dt)
            for e in range(2):
                t[a + "block_sparse_moe.experts.%d.w1.weight" % e] = \
                    ck.Tensor(rng.standard_normal((2 * D, D)), dt)
        else:
            t[a + "mlp.gate_proj.weight"] = ck.Tensor(rng.standard_normal((2 * D, D)), dt)
            t[a + "mlp.down_proj.weight"] = ck.Tensor(rng.standard_normal((D, 2 * D)), dt)
        params.append(p)
    if f.get("vision"):
        # a vision tower whose attention modules also match *.layers.N.self_attn
        v = "vision_tower." if pre.startswith("language_model") else "model.vision_tower."
        for n in range(2):
            for c in ("q", "k", "v"):
                t["%svision_model.encoder.layers.%d.self_attn.%s_proj.weight" % (v, n, c)] = \
                    ck.Tensor(rng.standard_normal((8, 8)), dt)
            t["%svision_model.encoder.layers.%d.self_attn.o_proj.weight" % (v, n)] = \
                ck.Tensor(rng.standard_normal((8, 8)), dt)
        t["multi_modal_projector.linear_1.weight"] = ck.Tensor(rng.standard_normal((D, 8)), dt)
    return t, params


# ---- the cases ---------------------------------------------------------------


def family_cases(c, rng, torch):
    worst_pair = 0.0
    for f in FAMILIES:
        tensors, params = decoder_checkpoint(rng, f)
        config = f["config"](f)
        d = ck.folder(c.tmp, "fam-%s-%s" % (f["type"], len(os.listdir(c.tmp))), tensors, config)
        f["dir"], f["tensors"], f["cfg"] = d, tensors, config
        x = rng.standard_normal((N, f["D"]))
        xp = os.path.join(d, "x.npy")
        np.save(xp, x)
        for layer in f["runs"]:
            s = hf_settings(f, config, layer)
            want = decoder_attention(x, params[layer], s)
            if torch is not None:
                other = torch_attention(torch, x, params[layer], s)
                worst_pair = max(worst_pair, np.max(np.abs(other - want) /
                                                    np.maximum(1, np.abs(want))))
            if f.get("scaling"):
                # the scaling changes the numbers: the test could fail
                plain = dict(s, af=1.0, inv=1.0 / (s["theta"] ** (np.arange(0, s["R"], 2) /
                                                                  s["R"])))
                moved = np.max(np.abs(decoder_attention(x, params[layer], plain) - want))
                c.result("%s: the scaling moves the output (%.2g)" % (f["name"], moved),
                         moved > 1e-6)
            what = ", ".join(k for k in ("window", "softcap", "norm") if s.get(k))
            what += (", " if what else "") + ("no rotation" if not s["rope"] else s["rope"])
            c.output("%s (%s): layer %d (%s)" % (f["name"], f["dtype"], layer, what),
                     ["-x", xp, "-w", d, "--layer", str(layer)], want)
            check_model(c, f, d, layer, s, params[layer])
        # a batch of two, the second padded after 4 tokens (--kv-len)
        layer = f["runs"][0]
        s = hf_settings(f, config, layer)
        xb = rng.standard_normal((2, N, f["D"]))
        xbp = os.path.join(d, "xb.npy")
        np.save(xbp, xb)
        want = np.stack([decoder_attention(xb[0], params[layer], s),
                         decoder_attention(xb[1], params[layer], s, kv_len=4)])
        c.output("%s: layer %d, a batch padded by --kv-len 6,4" % (f["name"], layer),
                 ["-x", xbp, "-w", d, "--layer", str(layer), "--kv-len", "6,4"], want)
    if torch is None:
        c.result("PyTorch transcriptions: skipped (torch cannot be imported)", True)
    else:
        c.result("the NumPy references against their PyTorch transcriptions: %.2g" % worst_pair,
                 worst_pair <= 1e-13)
    return FAMILIES


def check_model(c, f, d, layer, s, p):
    """'mha model DIR --layer N -f json' says what the family's code does, and
    its -o FILE.npz holds the layer's tensors as -w takes them (p: the
    checkpoint's own, out x in)"""
    t = os.path.join(c.tmp, "layer-tensors.npz")
    rc, out, err = ck.run_cmd(c.binary, ["model", d, "--layer", str(layer), "-f", "json", "-o", t])
    if rc != 0:
        c.result("%s: mha model --layer %d" % (f["name"], layer), False, err)
        return
    m = json.loads(out)["layers"][0]
    want_window = None
    if s["window"]:
        want_window = [s["window"] - 1, -1]
    if s.get("both"):
        want_window = [s["both"], s["both"]]
    got = (m["heads"], m["kv_heads"], m["d_k"], m["window"], m["rope"] and m["rope"]["mode"],
           m["norm"] and m["norm"]["kind"], m["softcap"], m["causal"] != "none")
    want = (s["H"], s["G"], s["hd"], want_window, s["rope"], s.get("norm") and s["norm"][0],
            s["softcap"], s.get("causal", True))
    ok = got == want and abs(m["scale"]["value"] - s["scaling"]) <= 1e-15 * s["scaling"] and \
        (not s["rope"] or m["rope"]["theta"] == s["theta"])
    c.result("%s: mha model --layer %d says it as the family's code does" % (f["name"], layer),
             ok, "got %r, want %r" % (got + (m["scale"]["value"], m["rope"]),
                                      want + (s["scaling"], s["theta"])))
    names = {"q": "W_Q", "k": "W_K", "v": "W_V", "o": "W_O", "bq": "b_Q", "bk": "b_K", "bv": "b_V",
             "bo": "b_O", "sinks": "sinks", "qn": "q_norm", "kn": "k_norm"}
    p = dict(p)
    if "qkv" in p:
        # one fused projection: split as the modeling code splits its output
        p["q"], p["k"], p["v"] = (w.T for w in split_qkv(p.pop("qkv").T, s))
        if "bqkv" in p:
            p["bq"], p["bk"], p["bv"] = (b[0] for b in split_qkv(p.pop("bqkv")[None, :], s))
    want_t = {names[k]: (v.T if k in "qkvo" else v) for k, v in p.items()}
    with np.load(t) as z:
        got_t = {k: z[k] for k in z.files}
    same = set(got_t) == set(want_t) and all(np.array_equal(got_t[k], want_t[k]) for k in want_t)
    c.result("%s: mha model --layer %d -o holds its tensors as -w takes them (%s)"
             % (f["name"], layer, ", ".join(sorted(got_t))), same,
             "got %s, want %s" % ({k: v.shape for k, v in got_t.items()},
                                  {k: v.shape for k, v in want_t.items()}))


def by_type(t):
    return next(f for f in FAMILIES if f["type"] == t)


def planted(c, f, name, config=None, tensors=None, extra=()):
    """f's checkpoint again with config or tensors changed"""
    d = ck.folder(c.tmp, "plant-%d" % len(os.listdir(c.tmp)),
                  tensors if tensors is not None else f["tensors"],
                  config if config is not None else f["cfg"])
    return ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer",
            str(f["runs"][0])] + list(extra)


def refusal_cases(c, rng):
    # a key planted in each family's config: named at its line and column
    keys = {"llama": "attn_logit_softcapping", "mistral": "query_pre_attn_scalar",
            "mixtral": "use_sliding_window", "qwen2": "attention_multiplier",
            "qwen3": "attn_logit_softcapping", "qwen3_moe": "use_qk_norm",
            "olmo2": "clip_qkv", "phi3": "attn_logit_softcapping",
            "gpt_neox": "sliding_window", "falcon": "query_pre_attn_scalar",
            "gpt_bigcode": "rope_theta", "gemma3_text": "attention_multiplier",
            "gemma3": "use_qk_norm", "modernbert": "sliding_window", "glm": "sliding_window",
            "glm4": "use_qk_norm", "cohere2": "use_qk_norm",
            "gemma": "sliding_window", "gemma2": "no_rope_layers", "granite": "use_qk_norm",
            "cohere": "sliding_window", "smollm3": "attn_logit_softcapping",
            "olmo": "layer_types", "llava": "some_new_attention_key", "gpt_oss": "use_qk_norm",
            "mistral3": "attention_multiplier"}
    seen = set()
    for f in FAMILIES:
        if f["type"] in seen:
            continue
        seen.add(f["type"])
        conf = copy.deepcopy(f["cfg"])
        where = conf.get("text_config", conf) if f["type"] != "llava" else conf
        where[keys[f["type"]]] = 1.0
        c.refused("%s: config.json with %s planted" % (f["name"], keys[f["type"]]),
                  planted(c, f, "key", config=conf),
                  ['unknown key "%s"' % keys[f["type"]], "config.json:"])
        # a tensor planted in the layer's attention module
        t = dict(f["tensors"])
        pre = f.get("prefix", "model.")
        name = "%slayers.%d.self_attn.gate.weight" % (pre, f["runs"][0])
        if f.get("fused"):
            name = FUSED_NAMES[f["type"]][0] % f["runs"][0] + "gate.weight"
        t[name] = ck.Tensor(np.ones(4), "F32")
        c.refused("%s: a tensor planted in the attention module" % f["name"],
                  planted(c, f, "tensor", tensors=t),
                  ['"%s"' % name, "does not know"])
    # the tensors some families have that mha does not read yet, by name
    f = by_type("llama")
    for suffix, words in (("q_norm.weight", "normalisation"), ("sinks", "attention sinks"),
                          ("qkv_proj.weight", "fused")):
        t = dict(f["tensors"])
        t["model.layers.1.self_attn." + suffix] = ck.Tensor(np.ones(4), "F32")
        c.refused("llama: a planted %s names what it is" % suffix,
                  planted(c, f, suffix, tensors=t), [suffix, words])
    # biases the family's code would not add, or would and are missing
    for ftype, change, words in (
            ("mistral", ("add", "q"), ["q_proj.bias", "mistral's attention adds no such bias"]),
            ("llama", ("drop", "k"), ["k_proj.bias", "attention_bias true"]),
            ("qwen2", ("add", "o"), ["o_proj.bias", "qwen2's attention adds no such bias"]),
            ("qwen2", ("drop", "v"), ["no tensor", "v_proj.bias"])):
        f = next(g for g in FAMILIES if g["type"] == ftype and
                 (ftype != "llama" or "bias" in g))
        t = dict(f["tensors"])
        name = "model.layers.%d.self_attn.%s_proj.bias" % (f["runs"][0], change[1])
        if change[0] == "add":
            t[name] = ck.Tensor(np.ones(f["D"] if change[1] == "o" else f["H"] * f["hd"]),
                                f["dtype"])
        else:
            del t[name]
        c.refused("%s: %s_proj.bias %s" % (ftype, change[1],
                                           "planted" if change[0] == "add" else "missing"),
                  planted(c, f, "bias", tensors=t), words)
    f = by_type("llama")
    conf = dict(f["cfg"], attention_bias=False)
    t = dict(f["tensors"])
    t["model.layers.1.self_attn.q_proj.bias"] = ck.Tensor(np.ones(16), "F16")
    c.refused("llama: attention_bias false with q_proj.bias there",
              planted(c, f, "bias", config=conf, tensors=t), ["attention_bias is false"])
    # a model type whose attention is another (DeepSeek's latent attention, which
    # tests/mla_check.py reads) over a Llama's tensors: the tensor it needs named
    for mtype in ("deepseek_v3", "deepseek_v2", "kimi_k2"):
        conf = dict(f["cfg"], model_type=mtype)
        c.refused("model_type %s over Llama's tensors: the latent's tensor named" % mtype,
                  planted(c, f, "type", config=conf), ["deepseek attention",
                                                        "kv_a_proj_with_mqa.weight"])
    # an image-text model whose text model is DeepSeek's: the text model's tensors looked for
    conf = {"model_type": "llava", "text_config": dict(f["cfg"], model_type="deepseek_v3")}
    c.refused("model_type llava with a deepseek_v3 text model: its tensors looked for",
              planted(c, f, "g3", config=conf), ["text model", "kv_a_proj_with_mqa.weight"])
    # Gemma 3: no head_dim, bidirectional attention; ModernBERT without --layer
    g = by_type("gemma3_text")
    conf = {k: v for k, v in g["cfg"].items() if k != "head_dim"}
    c.refused("gemma3_text without head_dim", planted(c, g, "hd", config=conf),
              ["no head_dim", "256"])
    c.refused("gemma3_text: use_bidirectional_attention",
              planted(c, g, "bidi", config=dict(g["cfg"], use_bidirectional_attention=True)),
              ["use_bidirectional_attention"])
    # a fused family's model_type over a llama checkpoint: its fused tensor missing
    conf = {k: v for k, v in f["cfg"].items() if k not in ("attention_bias", "mlp_bias",
                                                            "pretraining_tp")}
    c.refused("model_type phi3 over llama's q_proj, k_proj and v_proj",
              planted(c, f, "phi", config=dict(conf, model_type="phi3")),
              ["no tensor", "qkv_proj.weight"])
    # Falcon: ALiBi, and num_kv_heads where query_key_value is fused head by head
    f = next(g for g in FAMILIES if g["type"] == "falcon")
    c.refused("falcon: alibi true", planted(c, f, "alibi", config=dict(f["cfg"], alibi=True)),
              ["alibi", "does not read"])
    g = next(g for g in FAMILIES if g["name"].startswith("Falcon RW"))
    c.refused("falcon: num_kv_heads 2, fused head by head",
              planted(c, g, "kvh", config=dict(g["cfg"], num_kv_heads=2)),
              ["num_kv_heads 2", "head by head"])
    # a fused tensor whose rows do not fit the heads
    t = dict(f["tensors"])
    name = "transformer.h.1.self_attention.query_key_value.weight"
    t[name] = ck.Tensor(np.ones((25, f["D"])), f["dtype"])
    c.refused("falcon: query_key_value of 25 rows", planted(c, f, "rows", tensors=t),
              [name, "25x16", "rows"])
    f = by_type("llama")
    # an unknown model_type: the list; under --layout llama, llama's keys
    conf = dict(f["cfg"], model_type="mygemma")
    c.refused("an unknown model_type: refused with the types mha reads",
              planted(c, f, "unknown", config=conf), ['"mygemma"', "llama, mistral", "--layout"])
    conf = dict(conf, query_pre_attn_scalar=8)
    c.refused("an unknown model_type under --layout llama: held to llama's keys",
              planted(c, f, "unknown", config=conf, extra=["--layout", "llama"]),
              ['unknown key "query_pre_attn_scalar"', '"mygemma" read as --layout llama'])
    conf = dict(f["cfg"], model_type="mygemma")
    args = planted(c, f, "unknown", config=conf, extra=["--layout", "llama"])
    rc, out, err = ck.run(c.binary, args + ["-f", "json"])
    rc2, out2, err2 = ck.run(c.binary, planted(c, f, "known") + ["-f", "json"])
    c.result("an unknown model_type under --layout llama, with llama's keys only: read as llama",
             rc == 0 and rc2 == 0 and json.loads(out)["output"] == json.loads(out2)["output"],
             err + err2)
    c.refused("model_type llama under --layout gpt2: refused",
              planted(c, f, "layout", extra=["--layout", "gpt2"]), ["llama", "--layout gpt2"])
    # no heads said: refused, never one head guessed
    d = ck.folder(c.tmp, "no-heads", f["tensors"])
    c.refused("a checkpoint with no config.json and no --heads",
              ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer", "1"],
              ["how many heads", "--heads"])
    conf = {k: v for k, v in by_type("mistral")["cfg"].items() if k != "num_attention_heads"}
    c.refused("mistral's config.json without num_attention_heads",
              planted(c, by_type("mistral"), "heads", config=conf),
              ["no num_attention_heads", "--heads"])
    conf = {k: v for k, v in conf.items() if k != "num_key_value_heads"}
    c.refused("mistral's config.json without either heads key",
              planted(c, by_type("mistral"), "heads", config=conf),
              ["how many heads", "config.json does not say"])
    # rotary_emb.inv_freq, as older Llama checkpoints kept it: checked
    f = by_type("llama")
    for scale, ok in ((1.0, True), (0.5, False)):
        t = dict(f["tensors"])
        R = f["hd"]
        inv = 1.0 / (10000.0 ** (np.arange(0, R, 2) / R)) * scale
        t["model.layers.1.self_attn.rotary_emb.inv_freq"] = ck.Tensor(inv, "F32")
        args = planted(c, f, "inv", tensors=t)
        if ok:
            rc, out, err = ck.run(c.binary, args + ["-f", "json"])
            rc2, out2, _ = ck.run(c.binary, planted(c, f, "noinv") + ["-f", "json"])
            c.result("rotary_emb.inv_freq as rope_theta gives: read, the same output",
                     rc == 0 and json.loads(out)["output"] == json.loads(out2)["output"], err)
        else:
            c.refused("rotary_emb.inv_freq scaled by one half: refused", args,
                      ["inv_freq", "rope_theta", "not the one config.json describes"])
            # the same halved frequencies where rope_scaling halves them: read
            conf = dict(f["cfg"], rope_scaling={"type": "linear", "factor": 2.0})
            rc, _, err = ck.run(c.binary, planted(c, f, "inv2", config=conf, tensors=t))
            c.result("rotary_emb.inv_freq halved with rope_scaling linear 2: read", rc == 0,
                     err)
    # settings that differ by layer need --layer
    for ftype, words in (("gemma2", "every other layer"), ("smollm3", "give --layer"),
                         ("gemma3_text", "global layer every 2"),
                         ("modernbert", "global layer every 3")):
        f = by_type(ftype)
        args = planted(c, f, "nolayer")
        i = args.index("--layer")
        d = args[args.index("-w") + 1]
        # a checkpoint of one layer's module named whole by --prefix
        c.refused("%s without --layer: refused" % ftype,
                  args[:i] + ["--prefix", "model.layers.%d.self_attn" % f["runs"][0]],
                  [words])
        del d
    # gpt-oss: quantized attention, no layer_types, sinks with --sinks too
    f = by_type("gpt_oss")
    conf = copy.deepcopy(f["cfg"])
    conf["quantization_config"]["modules_to_not_convert"] = ["model.embed_tokens"]
    c.refused("gpt-oss: the attention quantized", planted(c, f, "q", config=conf),
              ["quantization_config", "quantized"])
    conf = {k: v for k, v in f["cfg"].items() if k != "layer_types"}
    c.refused("gpt-oss without layer_types", planted(c, f, "lt", config=conf),
              ["sliding_window without layer_types"])
    sk = os.path.join(c.tmp, "sinks.json")
    with open(sk, "w") as fp:
        json.dump([0.0] * f["H"], fp)
    c.refused("gpt-oss's sinks and --sinks", planted(c, f, "sk", extra=["--sinks", sk]),
              ["leave out --sinks"])
    # OLMo's clip_qkv and Cohere's use_qk_norm: what mha does not compute
    f = by_type("olmo")
    c.refused("olmo: clip_qkv 8", planted(c, f, "clip", config=dict(f["cfg"], clip_qkv=8.0)),
              ["clip_qkv"])
    # the q/k norm: its tensors where the type has none, or missing where it has
    f = by_type("cohere")
    c.refused("cohere: use_qk_norm true without q_norm and k_norm",
              planted(c, f, "qkn", config=dict(f["cfg"], use_qk_norm=True)),
              ["no tensor", "q_norm.weight"])
    f = next(g for g in FAMILIES if g["type"] == "cohere" and g.get("qk_norm"))
    c.refused("cohere: q_norm and k_norm with use_qk_norm false",
              planted(c, f, "qkn", config=dict(f["cfg"], use_qk_norm=False)),
              ["_norm.weight", "normalisation"])
    f = by_type("qwen3")
    t = {k: v for k, v in f["tensors"].items() if not k.endswith("layers.1.self_attn.k_norm.weight")}
    c.refused("qwen3: k_norm missing", planted(c, f, "nok", tensors=t),
              ["no tensor", "k_norm.weight"])
    qn = os.path.join(c.tmp, "qn.json")
    with open(qn, "w") as fp:
        json.dump([1.0] * f["hd"], fp)
    c.refused("qwen3: its q_norm and --q-norm", planted(c, f, "qn", extra=["--q-norm", qn,
                                                                          "--k-norm", qn]),
              ["leave out --q-norm"])
    # --norm none over a family that normalises: the layer without its norm
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], 1)
    del s["norm"]
    c.output("qwen3: --norm none, the layer without its q/k norm",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "1", "--norm",
              "none"], decoder_attention(x, decoder_params(f, 1), s))
    # --norm-eps over config.json's rms_norm_eps
    s = hf_settings(f, f["cfg"], 1)
    s["norm"] = ("rms", "head", 0.5)
    c.output("qwen3: --norm-eps 0.5 over rms_norm_eps",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "1",
              "--norm-eps", "0.5"], decoder_attention(x, decoder_params(f, 1), s))
    # rope_scaling: what transformers would read differently, or not at all
    f = next(g for g in FAMILIES if g["name"].startswith("Llama 3.1 ("))
    for sc, words in (
            ({"rope_type": "su", "factor": 2.0}, ['"su"', "not one mha computes"]),
            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
              "smooth": 1}, ['"smooth"', "does not know"]),
            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0}, ["needs", "original_max_position_embeddings"]),
            ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096},
             ["factor 8", "is 32", "versions"]),
            ({"rope_type": "linear", "factor": -1}, ['"factor" is not a number above 0']),
            ({"factor": 2.0}, ['no "rope_type"'])):
        conf = dict(f["cfg"], rope_scaling=sc)
        c.refused("rope_scaling %s: refused" % json.dumps(sc)[:60],
                  planted(c, f, "sc", config=conf), words)
    # --rope-scaling: the object given inline or in a file, over config.json's
    base = by_type("llama")
    plain = dict(base["cfg"])
    scaled = dict(plain, rope_scaling={"type": "linear", "factor": 2.0})
    x = os.path.join(base["dir"], "x.npy")
    rc, want, err = ck.run(c.binary, planted(c, base, "sc1", config=scaled) + ["-f", "json"])
    obj = json.dumps({"type": "linear", "factor": 2.0})
    path = os.path.join(c.tmp, "sc.json")
    with open(path, "w") as fp:
        fp.write(obj)
    for how, arg in (("inline", obj), ("from a file", path)):
        rc2, got, err2 = ck.run(c.binary, planted(c, base, "sc2", config=plain) +
                                ["--rope", "half", "--rope-scaling", arg, "-f", "json"])
        c.result("--rope-scaling %s: config.json's rope_scaling's output" % how,
                 rc == 0 and rc2 == 0 and json.loads(got)["output"] == json.loads(want)["output"],
                 err + err2)
    c.refused("--rope-scaling that is not JSON", planted(c, base, "sc3", config=plain) +
              ["--rope", "half", "--rope-scaling", "{factor"], ["--rope-scaling"])
    rc, out, err = ck.run(c.binary, ["-x", x, "--rope-scaling", obj])
    c.result("--rope-scaling without --rope: a usage error", rc == 2 and
             err.startswith("mha: --rope-scaling needs --rope") and out == "", err)
    # --rope none: a layer without rotation, over a family that turns
    f = by_type("smollm3")
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], 2)
    s["rope"] = None
    c.output("smollm3: layer 2 with --rope none, as the layer without rotation computes it",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "2", "--rope",
              "none"], decoder_attention(x, decoder_params(f, 2), s))


def decoder_params(f, layer):
    """the float64 values of a layer's attention tensors, read back"""
    pre = f.get("prefix", "model.")
    a = "%slayers.%d.self_attn." % (pre, layer)
    p = {}
    for c in "qkvo":
        p[c] = f["tensors"][a + "%s_proj.weight" % c].value
        if a + "%s_proj.bias" % c in f["tensors"]:
            p["b" + c] = f["tensors"][a + "%s_proj.bias" % c].value
    if a + "sinks" in f["tensors"]:
        p["sinks"] = f["tensors"][a + "sinks"].value
    for side in "qk":
        if a + "%s_norm.weight" % side in f["tensors"]:
            p[side + "n"] = f["tensors"][a + "%s_norm.weight" % side].value
    return p


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        c = ck.Checker(os.path.abspath(sys.argv[1]), tmp)
        family_cases(c, rng, torch)
        refusal_cases(c, rng)
        print("max relative difference over all outputs: %.2g (tolerance %g)"
              % (getattr(c, "worst", 0.0), RTOL))
        print("%d passed, %d failed" % (c.passed, c.failed))
        sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()

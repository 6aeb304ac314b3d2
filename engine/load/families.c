/*
 * families.c: the model types mha reads, as one table (families.h): each
 * type's config.json keys with its class's defaults, and its row.  A new
 * type is a row here (its tensors, when they are a family of their own,
 * a row of tensor_families.c); where it brings a config key with a new
 * meaning, config.c's apply() gives the key that meaning, once.
 */
#include "load/families.h"

#include <stdio.h>
#include <string.h>

/* ---- config.json's keys ------------------------------------------------------ */

/* Every type's: PretrainedConfig's own, generation's, the tokenizer's, and
 * what lies outside the attention (vocabulary, MLP, norms of the residual
 * stream, dropout, which inference leaves out). */
static const char *const common[] = {
	"_name_or_path", "architectures", "auto_map", "model_type", "torch_dtype", "dtype",
	"transformers_version", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
	"decoder_start_token_id", "vocab_size", "tie_word_embeddings", "use_cache",
	"initializer_range", "num_hidden_layers", "intermediate_size", "hidden_act",
	"max_position_embeddings", "id2label", "label2id", "problem_type", "tokenizer_class",
	"task_specific_params", "finetuning_task", "output_attentions", "output_hidden_states",
	"return_dict", "torchscript", "chunk_size_feed_forward", "rms_norm_eps", "layer_norm_eps",
	"layer_norm_epsilon", "attention_dropout", "gradient_checkpointing", "use_bfloat16",
	"is_encoder_decoder", "add_cross_attention", "cross_attention_hidden_size",
	"tf_legacy_loss", "prefix", "max_length", "min_length", "do_sample", "early_stopping",
	"num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
	"typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
	"encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
	"return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
	"remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
	"begin_suppress_tokens", NULL
};

/*
 * The keys each type's attention reads (config.c gives each its meaning),
 * each with the default its configuration class gives it (transformers'
 * models/TYPE/configuration_TYPE.py), which a config.json that leaves the
 * key out takes.  "null" is the class's None, which it or the modeling
 * code derives (num_key_value_heads: the heads; head_dim: hidden_size /
 * heads); NO: the class does not define the key, and the modeling code's
 * fallback, mha's too, applies.  A third value is transformers 5's default
 * where it differs from 4's (config_complete.c picks by transformers_version).
 */
#define NO NULL
#define END { NULL, NULL, NULL }
/* what every Llama-like type reads, with LlamaConfig's defaults */
#define HEADS(h, kv, hidden, hd) { "num_attention_heads", h, NULL }, \
	{ "num_key_value_heads", kv, NULL }, { "hidden_size", hidden, NULL }, \
	{ "head_dim", hd, NULL }
#define ROPE(theta, scaling, partial, max_pos) { "rope_theta", theta, NULL }, \
	{ "rope_scaling", scaling, NULL }, { "partial_rotary_factor", partial, NULL }, \
	{ "max_position_embeddings", max_pos, NULL }
static const struct config_key llama_keys[] = {
	HEADS("32", "null", "4096", "null"), ROPE("10000.0", "null", NO, "2048"),
	{ "attention_bias", "false", NULL }, END };
static const struct config_key mistral_keys[] = {
	HEADS("32", "8", "4096", "null"), ROPE("10000.0", NO, NO, "131072"),
	{ "attention_bias", NO, NULL }, { "sliding_window", "4096", NULL }, END };
static const struct config_key mixtral_keys[] = {
	HEADS("32", "8", "4096", "null"), ROPE("1000000.0", NO, NO, "131072"),
	{ "attention_bias", NO, NULL }, { "sliding_window", "null", NULL }, END };
static const struct config_key qwen2_keys[] = {
	HEADS("32", "32", "4096", NO), ROPE("10000.0", "null", NO, "32768"),
	{ "attention_bias", NO, NULL }, { "sliding_window", "4096", NULL },
	{ "use_sliding_window", "false", NULL }, { "max_window_layers", "28", NULL },
	{ "layer_types", "null", NULL }, END };
static const struct config_key qwen3_keys[] = {
	HEADS("32", "32", "4096", "128"), ROPE("10000.0", "null", NO, "32768"),
	{ "attention_bias", "false", NULL }, { "sliding_window", "4096", NULL },
	{ "use_sliding_window", "false", NULL }, { "max_window_layers", "28", NULL },
	{ "layer_types", "null", NULL }, { "rms_norm_eps", "1e-06", NULL }, END };
static const struct config_key qwen3_moe_keys[] = {
	HEADS("32", "4", "2048", NO), ROPE("10000.0", "null", NO, "32768"),
	{ "attention_bias", "false", NULL }, { "sliding_window", "4096", NULL },
	{ "use_sliding_window", "false", NULL }, { "max_window_layers", "28", NULL },
	{ "layer_types", NO, NULL }, { "rms_norm_eps", "1e-06", NULL }, END };
static const struct config_key gemma_keys[] = {
	HEADS("16", "16", "3072", "256"), ROPE("10000.0", NO, NO, "8192"),
	{ "attention_bias", "false", NULL }, END };
static const struct config_key gemma2_keys[] = {
	HEADS("8", "4", "2304", "256"), ROPE("10000.0", NO, NO, "8192"),
	{ "attention_bias", "false", NULL }, { "query_pre_attn_scalar", "256", NULL },
	{ "attn_logit_softcapping", "50.0", NULL }, { "sliding_window", "4096", NULL },
	{ "layer_types", "null", NULL }, END };
static const struct config_key granite_keys[] = {
	HEADS("32", "null", "4096", NO), ROPE("10000.0", "null", NO, "2048"),
	{ "attention_bias", "false", NULL }, { "attention_multiplier", "1.0", NULL }, END };
/* CohereConfig's base: 10000 in transformers 4, default_theta 500000 in 5 */
static const struct config_key cohere_keys[] = {
	HEADS("64", "null", "8192", NO), { "rope_theta", "10000.0", "500000.0" },
	{ "rope_scaling", "null", NULL }, { "partial_rotary_factor", NO, NULL },
	{ "max_position_embeddings", "8192", NULL }, { "attention_bias", "false", NULL },
	{ "use_qk_norm", "false", NULL }, { "layer_norm_eps", "1e-05", NULL }, END };
static const struct config_key olmo_keys[] = {
	HEADS("32", "null", "4096", NO), ROPE("10000.0", "null", NO, "2048"),
	{ "attention_bias", "false", NULL }, { "clip_qkv", "null", NULL }, END };
static const struct config_key olmo2_keys[] = {
	HEADS("32", "null", "4096", NO), ROPE("10000.0", "null", NO, "2048"),
	{ "attention_bias", "false", NULL }, { "rms_norm_eps", "1e-05", NULL }, END };
static const struct config_key smollm3_keys[] = {
	HEADS("16", "4", "2048", NO), ROPE("2000000.0", "null", NO, "32768"),
	{ "attention_bias", "false", NULL }, { "no_rope_layers", "null", NULL },
	{ "no_rope_layer_interval", "4", NULL }, { "use_sliding_window", "false", NULL },
	{ "sliding_window", "null", NULL }, { "layer_types", "null", NULL }, END };
/* GptOssConfig: YaRN by default, q, k, v and o biases always */
static const struct config_key gpt_oss_keys[] = {
	HEADS("64", "8", "2880", "64"),
	ROPE("150000.0", "{\"rope_type\": \"yarn\", \"factor\": 32.0, \"beta_fast\": 32.0, "
	     "\"beta_slow\": 1.0, \"truncate\": false, \"original_max_position_embeddings\": "
	     "4096}", NO, "131072"),
	{ "attention_bias", "true", NULL }, { "sliding_window", "128", NULL },
	{ "layer_types", "null", NULL }, { "quantization_config", NO, NULL }, END };
/* Gemma3TextConfig: the global layers' base and scaling, the local ones' base */
static const struct config_key gemma3_keys[] = {
	HEADS("8", "4", "2304", "256"), ROPE("1000000.0", "null", NO, "131072"),
	{ "attention_bias", "false", NULL }, { "query_pre_attn_scalar", "256", NULL },
	{ "attn_logit_softcapping", "null", NULL }, { "sliding_window", "4096", NULL },
	{ "layer_types", "null", NULL }, { "sliding_window_pattern", "6", NULL },
	{ "rope_local_base_freq", "10000.0", NULL }, { "rms_norm_eps", "1e-06", NULL },
	{ "use_bidirectional_attention", "false", NULL }, END };
/* Cohere2Config: head_dim is always hidden_size / heads (head_dim: harmless) */
static const struct config_key cohere2_keys[] = {
	{ "num_attention_heads", "64", NULL }, { "num_key_value_heads", "null", NULL },
	{ "hidden_size", "8192", NULL }, ROPE("10000.0", "null", NO, "8192"),
	{ "attention_bias", "false", NULL }, { "sliding_window", "4096", NULL },
	{ "layer_types", "null", NULL }, { "sliding_window_pattern", "4", NULL },
	{ "layer_norm_eps", "1e-05", NULL }, END };
/* GlmConfig, Glm4Config: half of each head turned, q, k and v biases */
static const struct config_key glm_keys[] = {
	HEADS("32", "2", "4096", "128"), ROPE("10000.0", NO, "0.5", "131072"),
	{ "attention_bias", "true", NULL }, END };
/* Phi3Config: longrope with the top level's original_max_position_embeddings */
static const struct config_key phi3_keys[] = {
	HEADS("32", "null", "3072", NO), ROPE("10000.0", "null", "1.0", "4096"),
	{ "attention_bias", NO, NULL }, { "sliding_window", "null", NULL },
	{ "original_max_position_embeddings", "4096", NULL }, END };
/* GPTNeoXConfig: rotary_pct and rotary_emb_base, or their later names */
static const struct config_key neox_keys[] = {
	{ "num_attention_heads", "64", NULL }, { "hidden_size", "6144", NULL },
	{ "rotary_pct", "0.25", NULL }, { "rotary_emb_base", "10000", NULL },
	{ "partial_rotary_factor", NO, NULL }, { "rope_theta", NO, NULL },
	{ "rope_scaling", "null", NULL }, { "max_position_embeddings", "2048", NULL },
	{ "attention_bias", "true", NULL }, END };
/* FalconConfig: the key/value heads and the fused layout from its flags */
static const struct config_key falcon_keys[] = {
	{ "num_attention_heads", "71", NULL }, { "num_kv_heads", "null", NULL },
	{ "hidden_size", "4544", NULL }, { "multi_query", "true", NULL },
	{ "new_decoder_architecture", "false", NULL }, { "alibi", "false", NULL },
	{ "bias", "false", NULL }, { "rope_theta", "10000.0", NULL },
	{ "rope_scaling", "null", NULL }, { "max_position_embeddings", "2048", NULL }, END };
static const struct config_key bigcode_keys[] = {
	{ "n_head", "12", NULL }, { "n_embd", "768", NULL }, { "multi_query", "true", NULL },
	{ "scale_attn_weights", "true", NULL }, END };
static const struct config_key modernbert_keys[] = {
	{ "num_attention_heads", "12", NULL }, { "hidden_size", "768", NULL },
	{ "global_rope_theta", "160000.0", NULL }, { "local_rope_theta", "10000.0", NULL },
	{ "local_attention", "128", NULL }, { "global_attn_every_n_layers", "3", NULL },
	{ "attention_bias", "false", NULL }, END };
/* multi-head latent attention's: the ranks and head dims (latent.c) */
static const struct config_key deepseek_v2_keys[] = {
	HEADS("32", "null", "4096", "null"), { "q_lora_rank", "1536", NULL },
	{ "kv_lora_rank", "512", NULL }, { "qk_nope_head_dim", "128", NULL },
	{ "qk_rope_head_dim", "64", NULL }, { "v_head_dim", "128", NULL },
	ROPE("10000.0", "null", NO, "2048"), { "rope_interleave", NO, NULL },
	{ "qk_head_dim", NO, NULL },
	{ "rms_norm_eps", "1e-06", NULL }, { "attention_bias", "false", NULL },
	{ "quantization_config", NO, NULL }, END };
static const struct config_key deepseek_v3_keys[] = {
	HEADS("128", "128", "7168", NO), { "q_lora_rank", "1536", NULL },
	{ "kv_lora_rank", "512", NULL }, { "qk_nope_head_dim", "128", NULL },
	{ "qk_rope_head_dim", "64", NULL }, { "v_head_dim", "128", NULL },
	ROPE("10000.0", "null", NO, "4096"), { "rope_interleave", "true", NULL },
	{ "qk_head_dim", NO, NULL },
	{ "rms_norm_eps", "1e-06", NULL }, { "attention_bias", "false", NULL },
	{ "quantization_config", NO, NULL }, END };
/* Kimi K2's class ships with its checkpoint (remote code), and its copies
 * disagree on their defaults (rope_theta 10000 or 50000, max_position_embeddings
 * 4096 or 131072): each key its attention reads must be in the file */
#define NEED "!"
static const struct config_key kimi_k2_keys[] = {
	HEADS(NEED, NEED, NEED, NO), { "q_lora_rank", NEED, NULL },
	{ "kv_lora_rank", NEED, NULL }, { "qk_nope_head_dim", NEED, NULL },
	{ "qk_rope_head_dim", NEED, NULL }, { "v_head_dim", NEED, NULL },
	ROPE(NEED, NEED, NO, NEED), { "rope_interleave", NO, NULL }, { "qk_head_dim", NO, NULL },
	{ "rms_norm_eps", NEED, NULL }, { "attention_bias", NEED, NULL },
	{ "quantization_config", NO, NULL }, END };
/* Arcee (AFM): Llama's attention, ArceeConfig's own defaults */
static const struct config_key arcee_keys[] = {
	HEADS("32", "null", "2560", "null"), ROPE("10000.0", "null", NO, "4096"),
	{ "attention_bias", "false", NULL }, END };
/* Apertus: q and k normalised per head; llama3's rope_scaling by default */
static const struct config_key apertus_keys[] = {
	HEADS("32", "null", "4096", NO),
	ROPE("12000000.0", "{\"rope_type\": \"llama3\", \"factor\": 8.0, "
	     "\"original_max_position_embeddings\": 8192, \"low_freq_factor\": 1.0, "
	     "\"high_freq_factor\": 4.0}", NO, "65536"),
	{ "attention_bias", "false", NULL }, { "rms_norm_eps", "1e-05", NULL }, END };
/* StarCoder2: use_bias on every projection, a window on every layer */
static const struct config_key starcoder2_keys[] = {
	HEADS("24", "2", "3072", NO), ROPE("10000.0", "null", NO, "4096"),
	{ "use_bias", "true", NULL }, { "sliding_window", "null", NULL }, END };
/* Nemotron: half of each head turned; num_key_value_heads kept None by its
 * class, which its attention cannot run with; no rope_scaling (its rotary
 * embedding is the default one whatever the config says) */
static const struct config_key nemotron_keys[] = {
	HEADS("48", "?", "6144", "null"), { "rope_theta", "10000.0", NULL },
	{ "partial_rotary_factor", "0.5", NULL }, { "max_position_embeddings", "4096", NULL },
	{ "attention_bias", "false", NULL }, END };
/* Phi (phi-2): every projection biased, partial_rotary_factor of each head
 * turned; its q/k LayerNorm (qk_layernorm) is refused (config.c) */
static const struct config_key phi_keys[] = {
	HEADS("32", "null", "2048", NO), ROPE("10000.0", "null", "0.5", "2048"),
	{ "qk_layernorm", "false", NULL }, END };
/* GPT-J: rotary_dim features of each head turned in pairs (2i, 2i + 1), by
 * 10000 always */
static const struct config_key gptj_keys[] = {
	{ "n_head", "16", NULL }, { "n_embd", "4096", NULL }, { "rotary_dim", "64", NULL },
	END };
/* StableLM: a quarter of each head turned, q, k, v biases by use_qkv_bias
 * (never o), head_dim always hidden_size / heads; qk_layernorm refused */
static const struct config_key stablelm_keys[] = {
	{ "num_attention_heads", "32", NULL }, { "num_key_value_heads", "32", NULL },
	{ "hidden_size", "2560", NULL }, ROPE("10000", "null", "0.25", "4096"),
	{ "use_qkv_bias", "false", NULL }, { "qk_layernorm", "false", NULL }, END };
/* OPT: every head with a key/value head of its own, no rotation (learned
 * positions), biases by enable_bias; q scaled after its bias, the same
 * scores */
static const struct config_key opt_keys[] = {
	{ "num_attention_heads", "12", NULL }, { "hidden_size", "768", NULL },
	{ "enable_bias", "true", NULL }, END };
/* GLM-4.5 (glm4_moe): half of each head turned, half-split (not GLM-4's
 * pairs); q and k normalised per head with use_qk_norm */
static const struct config_key glm4_moe_keys[] = {
	HEADS("96", "8", "4096", NO), ROPE("10000.0", "null", "0.5", "131072"),
	{ "attention_bias", "false", NULL }, { "use_qk_norm", "false", NULL },
	{ "rms_norm_eps", "1e-05", NULL }, END };
/* EXAONE 4: q and k normalised per head; local layers slide and turn, the
 * global ones neither (sliding_window_pattern 4: LLLG) */
static const struct config_key exaone4_keys[] = {
	HEADS("32", "32", "4096", NO), ROPE("10000.0", "null", NO, "2048"),
	{ "sliding_window", "4096", NULL }, { "sliding_window_pattern", "4", NULL },
	{ "layer_types", "null", NULL }, { "rms_norm_eps", "1e-05", NULL }, END };
/* ERNIE 4.5: head_dim 128 apart from hidden_size, interleaved pairs, use_bias */
static const struct config_key ernie4_5_keys[] = {
	HEADS("16", "2", "1024", "128"), ROPE("500000.0", "null", NO, "131072"),
	{ "use_bias", "false", NULL }, END };
/* InternLM2's class ships with its checkpoint (remote code): each key its
 * attention reads must be in the file */
static const struct config_key internlm2_keys[] = {
	{ "num_attention_heads", NEED, NULL }, { "num_key_value_heads", NEED, NULL },
	{ "hidden_size", NEED, NULL }, { "rope_theta", NEED, NULL }, { "rope_scaling", NEED, NULL },
	{ "bias", NEED, NULL }, END };
static const struct config_key gpt2_keys[] = {
	{ "n_head", "12", NULL }, { "n_embd", "768", NULL }, { "scale_attn_weights", "true", NULL },
	{ "scale_attn_by_inverse_layer_idx", "false", NULL }, END };
static const struct config_key bert_keys[] = {
	{ "num_attention_heads", "12", NULL }, { "hidden_size", "768", NULL },
	{ "position_embedding_type", "\"absolute\"", NULL }, { "is_decoder", "false", NULL },
	END };

/* and the keys of each known to leave the attention alone */
static const char *const none[] = { NULL };
static const char *const llama_other[] = { "pretraining_tp", "mlp_bias", NULL };
static const char *const mixtral_other[] = { "num_local_experts", "num_experts_per_tok",
					     "output_router_logits", "router_aux_loss_coef",
					     "router_jitter_noise", NULL };
static const char *const gemma_other[] = { "hidden_activation", NULL };
static const char *const gemma2_other[] = { "hidden_activation", "final_logit_softcapping",
					    "cache_implementation",
					    /* a second spelling the modeling code never reads */
					    "sliding_window_size", NULL };
static const char *const granite_other[] = { "embedding_multiplier", "residual_multiplier",
					     "logits_scaling", "mlp_bias", NULL };
static const char *const cohere_other[] = { "logit_scale", NULL };
static const char *const arcee_other[] = { "mlp_bias", NULL };
static const char *const nemotron_other[] = { "mlp_bias", "norm_eps", NULL };
static const char *const phi_other[] = { "resid_pdrop", "embd_pdrop", NULL };
static const char *const stablelm_other[] = { "use_parallel_residual", "hidden_dropout", NULL };
/* its remote code's switches that compute the same attention */
static const char *const internlm2_other[] = { "attn_implementation", "pretraining_tp", NULL };
static const char *const opt_other[] = { "ffn_dim", "do_layer_norm_before",
					 "_remove_final_layer_norm", "word_embed_proj_dim", "dropout",
					 "activation_function", "layerdrop", "init_std",
					 "layer_norm_elementwise_affine", NULL };
static const char *const gptj_other[] = { "n_layer", "n_positions", "n_inner",
					  "activation_function", "resid_pdrop", "embd_pdrop",
					  "attn_pdrop", NULL };
/* its mixture of experts, and the multi-token prediction layer its
 * checkpoints keep beside the model (no attention of the layers read) */
static const char *const glm4_moe_other[] = {
	"moe_intermediate_size", "num_experts_per_tok", "n_shared_experts", "n_routed_experts",
	"routed_scaling_factor", "n_group", "topk_group", "first_k_dense_replace",
	"norm_topk_prob", "num_nextn_predict_layers", NULL };
/* set by Exaone4Config itself when a layer slides */
static const char *const exaone4_other[] = { "cache_implementation", NULL };
static const char *const starcoder2_other[] = { "norm_epsilon", "residual_dropout",
						"embedding_dropout", NULL };
/* Phi-4-mini's full_attn_mod: kept by PretrainedConfig, read by no modeling code */
static const char *const phi3_other[] = { "resid_pdrop", "embd_pdrop", "full_attn_mod", NULL };
/* the encoder's own: its norms, MLP, classifier heads, flash-attention and
 * compile switches that compute the same attention */
static const char *const modernbert_other[] = {
	"hidden_activation", "initializer_cutoff_factor", "norm_eps", "norm_bias",
	"embedding_dropout", "mlp_bias", "mlp_dropout", "decoder_bias", "classifier_pooling",
	"classifier_dropout", "classifier_bias", "classifier_activation",
	"deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
	"reference_compile", "repad_logits_with_grad", "cls_token_id",
	/* a leftover of BERT's config the modeling code never reads */
	"position_embedding_type", NULL
};
static const char *const neox_other[] = { "use_parallel_residual", "hidden_dropout",
					  "classifier_dropout", NULL };
static const char *const falcon_other[] = { "apply_residual_connection_post_layernorm",
					    "hidden_dropout", "parallel_attn",
					    "num_ln_in_parallel_attn", "ffn_hidden_size",
					    "activation",
					    /* Falcon 2's, which FalconConfig keeps and nothing
					       reads (the MLP is ffn_hidden_size wide) */
					    "ff_factor", NULL };
/* the same scores in float64: where float16 code upcasts the softmax */
static const char *const bigcode_other[] = { "n_layer", "n_positions", "n_inner",
					     "activation_function", "resid_pdrop", "embd_pdrop",
					     "attn_pdrop", "attention_softmax_in_fp32",
					     "scale_attention_softmax_in_fp32",
					     /* StarCoder's: its original inference runner's
					        switches and GPT-2's summary head, which
					        GPTBigCodeConfig keeps and nothing reads */
					     "inference_runner", "max_batch_size",
					     "max_sequence_length", "pad_key_length",
					     "pre_allocate_kv_cache", "validate_runner_input",
					     "summary_type", "summary_use_proj", "summary_activation",
					     "summary_proj_to_labels", "summary_first_dropout", NULL };
/* Command R7B's config carries keys of its original code that transformers'
 * Cohere 2 stores and never reads (its rotation is interleaved and whole) */
static const char *const cohere2_other[] = { "logit_scale", "cache_implementation",
					     /* Cohere2Config sets it to hidden_size / heads */
					     "head_dim",
					     "order_of_interleaved_layers",
					     "position_embedding_type", "rotary_pct",
					     "use_embedding_sharing", "use_gated_activation", NULL };
static const char *const qwen3_moe_other[] = { "decoder_sparse_step", "moe_intermediate_size",
					       "num_experts_per_tok", "num_experts",
					       "norm_topk_prob", "output_router_logits",
					       "router_aux_loss_coef", "mlp_only_layers", NULL };
/* SmolLM3 slides by layer_types alone */
static const char *const smollm3_other[] = { "mlp_bias", "max_window_layers", "pretraining_tp",
					     NULL };
static const char *const gpt2_other[] = {
	"n_layer", "n_positions", "n_ctx", "n_inner", "attn_pdrop", "resid_pdrop", "embd_pdrop",
	"activation_function", "summary_type", "summary_use_proj", "summary_activation",
	"summary_proj_to_labels", "summary_first_dropout",
	/* the same scores, scaled before the product in float32 */
	"reorder_and_upcast_attn", NULL
};
static const char *const bert_other[] = { "type_vocab_size", "hidden_dropout_prob",
					  "attention_probs_dropout_prob", "classifier_dropout",
					  /* XLM-RoBERTa's, from transformers' first releases
					     (removed in 2020; nothing reads it) */
					  "output_past", NULL };
/* DeepSeek's mixture of experts, its multi-token prediction layer, and the
 * tensor-parallel switches that compute the same attention */
static const char *const deepseek_other[] = {
	"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
	"moe_layer_freq", "first_k_dense_replace", "norm_topk_prob", "scoring_func",
	"topk_method", "n_group", "topk_group", "routed_scaling_factor", "aux_loss_alpha",
	"seq_aux", "ep_size", "num_nextn_predict_layers", "pretraining_tp", "mlp_bias",
	"rope_parameters_legacy",
	/* transformers 5's name for num_nextn_predict_layers */
	"num_mtp_layers", NULL
};
static const char *const gpt_oss_other[] = { "experts_per_token", "initial_context_length",
					     "num_local_experts", "num_experts_per_tok",
					     "output_router_logits", "router_aux_loss_coef",
					     "swiglu_limit", "swiglu_alpha", NULL };
/* an image-text model's own keys: its vision tower and projector */
static const char *const image_text_other[] = {
	"text_config", "vision_config", "image_token_index", "image_token_id",
	"projector_hidden_act", "vision_feature_select_strategy", "vision_feature_layer",
	"image_seq_length", "multimodal_projector_bias", "spatial_merge_size",
	"image_grid_pinpoints", "ignore_index",
	/* Gemma 3's */
	"boi_token_index", "eoi_token_index", "mm_tokens_per_image", NULL
};

/* a row that reads the type's attention: family, biases, rotation, window,
 * keys read (with their defaults), keys known harmless */
#define READS(fam, bias, rope, slide, keys, other) \
	fam, bias, NULL, rope, slide, keys, other, NULL, 0, FUSED_NONE, { 0 }, NULL
/* and its biases switched by a key of its own (use_bias) */
#define READS_BIAS(key, fam, bias, rope, slide, keys, other) \
	fam, bias, NULL, rope, slide, keys, other, NULL, 0, FUSED_NONE, { 0 }, key
/* and a q/k norm: its kind, over the whole row, eps's key, the key that
 * turns it on */
#define READS_NORM(fam, bias, rope, slide, keys, other, kind, all, eps_key, flag) \
	fam, bias, NULL, rope, slide, keys, other, NULL, 0, FUSED_NONE, \
	{ kind, all, eps_key, flag }, NULL
/* an image-text type: its text model's type when text_config gives none */
#define TEXT_OF(type) FAMILY_NONE, BIAS_ANY, NULL, MHA_ROPE_NONE, SLIDE_NONE, NULL, \
	image_text_other, type, 0, FUSED_NONE, { 0 }, NULL

/* a type whose attention needs what mha does not compute yet: refused,
 * saying what (the message: "its attention has ...") */
#define REFUSED(why) FAMILY_NONE, BIAS_ANY, why, MHA_ROPE_NONE, SLIDE_NONE, NULL, NULL, NULL, 0, \
	FUSED_NONE, { 0 }, NULL

#define HALF MHA_ROPE_HALF
#define PAIRS MHA_ROPE_INTERLEAVED

static const struct model_type types[] = {
	{ "llama", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, llama_keys, llama_other) },
	{ "mistral", READS(FAMILY_LLAMA, BIAS_NONE, HALF, SLIDE_ALL, mistral_keys, none) },
	{ "mixtral", READS(FAMILY_LLAMA, BIAS_NONE, HALF, SLIDE_ALL, mixtral_keys, mixtral_other) },
	{ "qwen2", READS(FAMILY_LLAMA, BIAS_QKV, HALF, SLIDE_QWEN, qwen2_keys, none) },
	{ "gemma", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, gemma_keys, gemma_other) },
	{ "gemma2", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_EVEN, gemma2_keys, gemma2_other) },
	{ "granite", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, granite_keys, granite_other) },
	/* Command R+: with use_qk_norm, a LayerNorm per head, weights (heads, head_dim) */
	{ "cohere", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, PAIRS, SLIDE_NONE, cohere_keys, cohere_other,
			       MHA_NORM_LAYER, 0, "layer_norm_eps", "use_qk_norm") },
	{ "qwen3", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_QWEN, qwen3_keys, none,
			      MHA_NORM_RMS, 0, "rms_norm_eps", NULL) },
	{ "qwen3_moe", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_QWEN, qwen3_moe_keys,
				  qwen3_moe_other, MHA_NORM_RMS, 0, "rms_norm_eps", NULL) },
	/* its norm over the whole projection, before the heads are split */
	{ "olmo2", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, olmo2_keys, none,
			      MHA_NORM_RMS, 1, "rms_norm_eps", NULL) },
	{ "smollm3", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_TYPES, smollm3_keys, smollm3_other) },
	{ "olmo", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, olmo_keys, none) },
	{ "gpt2", READS(FAMILY_GPT2, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, gpt2_keys, gpt2_other) },
	{ "bert", READS(FAMILY_BERT, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bert_keys, bert_other) },
	{ "roberta", READS(FAMILY_BERT, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bert_keys, bert_other) },
	{ "xlm-roberta", READS(FAMILY_BERT, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bert_keys,
			       bert_other) },
	{ "llava", TEXT_OF("llama") },
	{ "llava_next", TEXT_OF("llama") },
	{ "mistral3", TEXT_OF("mistral") },
	{ "gemma3", TEXT_OF("gemma3_text") },
	/* Gemma 3: q_norm and k_norm times 1 + w, five local layers to a global
	 * one, the local ones turning by rope_local_base_freq */
	{ "gemma3_text", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_PATTERN, gemma3_keys,
				    gemma2_other, MHA_NORM_RMS1P, 0, "rms_norm_eps", NULL) },
	/* Phi-3, Phi-4: qkv_proj; longrope with the top level's original_max_position_embeddings */
	{ "phi3", READS(FAMILY_PHI3, BIAS_NONE, HALF, SLIDE_ALL, phi3_keys, phi3_other) },
	/* Pythia: query_key_value head by head, rotary_pct of each head turned */
	{ "gpt_neox", READS(FAMILY_NEOX, BIAS_ANY, HALF, SLIDE_NONE, neox_keys, neox_other) },
	/* the fused layout and the key/value heads from multi_query and
	 * new_decoder_architecture (config.c) */
	{ "falcon", READS(FAMILY_FALCON, BIAS_FLAG, HALF, SLIDE_NONE, falcon_keys, falcon_other) },
	/* StarCoder: c_attn as Q and one K and V (multi_query), learned positions */
	{ "gpt_bigcode", READS(FAMILY_BIGCODE, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bigcode_keys,
			       bigcode_other) },
	/* an encoder: Wqkv, local and global layers with their own rotary bases */
	{ "modernbert", READS(FAMILY_MODERNBERT, BIAS_FLAG, HALF, SLIDE_EVERY_N, modernbert_keys,
			      modernbert_other) },
	/* multi-head latent attention: the turned parts' pairs (2i, 2i + 1), unless
	 * rope_interleave is false (latent.c) */
	{ "deepseek_v2", READS(FAMILY_DEEPSEEK, BIAS_NONE, PAIRS, SLIDE_NONE, deepseek_v2_keys,
			       deepseek_other) },
	{ "deepseek_v3", READS(FAMILY_DEEPSEEK, BIAS_NONE, PAIRS, SLIDE_NONE, deepseek_v3_keys,
			       deepseek_other) },
	/* Kimi K2 ships a configuration class of its own with its checkpoint */
	{ "kimi_k2", READS(FAMILY_DEEPSEEK, BIAS_NONE, PAIRS, SLIDE_NONE, kimi_k2_keys,
			   deepseek_other) },
	/* sinks, every other layer sliding, YaRN; its MoE quantized, never its attention */
	{ "gpt_oss", FAMILY_LLAMA, BIAS_FLAG, NULL, HALF, SLIDE_EVEN, gpt_oss_keys, gpt_oss_other,
	  NULL, 1, FUSED_NONE, { 0 }, NULL },
	/* Command R7B: rotation on its sliding layers alone */
	{ "cohere2", READS(FAMILY_LLAMA, BIAS_FLAG, PAIRS, SLIDE_ROPE_LOCAL, cohere2_keys,
			   cohere2_other) },
	/* GLM-4: q, k, v biases with attention_bias (never o), pairs 2i, 2i + 1 of the
	 * partial_rotary_factor features turned */
	{ "glm", READS(FAMILY_LLAMA, BIAS_FLAG_QKV, PAIRS, SLIDE_NONE, glm_keys, none) },
	{ "glm4", READS(FAMILY_LLAMA, BIAS_FLAG_QKV, PAIRS, SLIDE_NONE, glm_keys, none) },
	{ "arcee", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, arcee_keys, arcee_other) },
	/* Apertus: an RMS norm per head of q and k, always */
	{ "apertus", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, apertus_keys, none,
				MHA_NORM_RMS, 0, "rms_norm_eps", NULL) },
	/* StarCoder2: q, k, v and o biases by use_bias (its MLP's too) */
	{ "starcoder2", READS_BIAS("use_bias", FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_ALL,
				   starcoder2_keys, starcoder2_other) },
	{ "phi", READS(FAMILY_PHI, BIAS_ALL, HALF, SLIDE_NONE, phi_keys, phi_other) },
	/* InternLM2 (remote code): wqkv grouped, biases on wqkv and wo by bias */
	{ "internlm2", READS_BIAS("bias", FAMILY_INTERNLM2, BIAS_FLAG, HALF, SLIDE_NONE,
				  internlm2_keys, internlm2_other) },
	{ "stablelm", READS_BIAS("use_qkv_bias", FAMILY_LLAMA, BIAS_FLAG_QKV, HALF, SLIDE_NONE,
				 stablelm_keys, stablelm_other) },
	{ "gptj", READS(FAMILY_GPTJ, BIAS_NONE, PAIRS, SLIDE_NONE, gptj_keys, gptj_other) },
	/* the types of the families' list whose attention mha does not compute yet */
	{ "llama4", REFUSED("chunked local attention (attention_chunk_size) and, on its layers "
			    "without rotation, a temperature by position (floor_scale, attn_scale), "
			    "which mha does not compute yet") },
	{ "llama4_text", REFUSED("chunked local attention (attention_chunk_size) and, on its "
				 "layers without rotation, a temperature by position (floor_scale, "
				 "attn_scale), which mha does not compute yet") },
	{ "qwen3_next", REFUSED("an output gate (q_proj gives each head a gate: output times "
				"sigmoid(gate)) on its full-attention layers and linear attention "
				"(Gated DeltaNet) on the others, which mha does not compute yet") },
	{ "dbrx", REFUSED("its settings under attn_config (kv_n_heads, rope_theta, clip_qkv: Q, K "
			  "and V clamped), which mha does not read yet") },
	{ "t5", REFUSED("a relative position bias by buckets (relative_attention_num_buckets) and "
			"no scaling, which mha does not compute yet") },
	{ "mt5", REFUSED("a relative position bias by buckets (relative_attention_num_buckets) and "
			 "no scaling, which mha does not compute yet") },
	{ "mpt", REFUSED("ALiBi (alibi_bias_max) with a fused Wqkv and clip_qkv under attn_config, "
			 "which mha does not read yet") },
	{ "bloom", REFUSED("ALiBi with query_key_value fused head by head, which mha does not read "
			   "yet") },
	{ "persimmon", REFUSED("a LayerNorm with a bias on q and k (qk_layernorm, on by default), "
			       "which mha does not compute yet") },
	{ "whisper", REFUSED("an encoder-decoder's attention (k_proj without a bias, "
			     "cross-attention from the encoder), which mha does not read yet") },
	{ "mpnet", REFUSED("a relative attention bias by buckets, which mha does not compute yet") },
	{ "opt", READS_BIAS("enable_bias", FAMILY_OPT, BIAS_FLAG, MHA_ROPE_NONE, SLIDE_NONE, opt_keys,
			    opt_other) },
	{ "nemotron", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, nemotron_keys,
			    nemotron_other) },
	/* GLM-4.5: q, k, v biases by attention_bias (never o); half of each head
	 * turned, half-split; an RMS norm per head of q and k with use_qk_norm */
	{ "glm4_moe", READS_NORM(FAMILY_LLAMA, BIAS_FLAG_QKV, HALF, SLIDE_NONE, glm4_moe_keys,
				 glm4_moe_other, MHA_NORM_RMS, 0, "rms_norm_eps", "use_qk_norm") },
	/* EXAONE 4: RMS norms of q and k per head, global layers without rotation */
	{ "exaone4", READS_NORM(FAMILY_LLAMA, BIAS_NONE, HALF, SLIDE_NOPE_GLOBAL, exaone4_keys,
				exaone4_other, MHA_NORM_RMS, 0, "rms_norm_eps", NULL) },
	/* ERNIE 4.5 (dense): pairs (2i, 2i + 1), as GLM turns them */
	{ "ernie4_5", READS_BIAS("use_bias", FAMILY_LLAMA, BIAS_FLAG, PAIRS, SLIDE_NONE,
				 ernie4_5_keys, none) },
};

const char *model_type_bias_key(const struct model_type *t)
{
	return t && t->bias_key ? t->bias_key : t && t->family == FAMILY_FALCON ? "bias"
									     : "attention_bias";
}

const struct model_type *model_type_find(const char *type)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(types[i].type, type))
			return &types[i];
	return NULL;
}

/* no model_type and no --layout: the heads alone */
/* (no class: nothing is filled in) */
static const struct config_key generic_keys[] = {
	HEADS(NO, NO, NO, NO), { "n_head", NO, NULL }, { "n_embd", NO, NULL }, END };
static const struct model_type generic = { "", FAMILY_NONE, BIAS_ANY, NULL, MHA_ROPE_NONE,
					   SLIDE_NONE, generic_keys, none, NULL, 0, FUSED_NONE,
					   { 0 }, NULL };
/* --layout torch: nn.MultiheadAttention has no config.json of its own */
static const struct model_type torch_row = { "", FAMILY_TORCH, BIAS_ANY, NULL, MHA_ROPE_NONE,
					     SLIDE_NONE, generic_keys, none, NULL, 0, FUSED_NONE,
					     { 0 }, NULL };

const struct model_type *model_type_of_family(model_family f)
{
	static const char *const row[] = { [FAMILY_LLAMA] = "llama", [FAMILY_GPT2] = "gpt2",
					   [FAMILY_BERT] = "bert" };

	if (f == FAMILY_TORCH)
		return &torch_row;
	return f > FAMILY_NONE && f < FAMILY_TORCH ? model_type_find(row[f]) : &generic;
}

/* transformers 5's rope_parameters stands for the rotary keys (rope_params.c):
 * read where the type reads a rotary base */
static int reads_rope_parameters(const struct model_type *t)
{
	return model_type_key(t, "rope_theta") || model_type_key(t, "global_rope_theta");
}

size_t model_type_known(const struct model_type *t, const char **list, size_t cap)
{
	const char *const *const from[] = { t->harmless, common };
	size_t n = 0;

	for (const struct config_key *k = t->keys; k && k->name && n + 1 < cap; k++)
		list[n++] = k->name;
	if (reads_rope_parameters(t) && n + 1 < cap)
		list[n++] = "rope_parameters";
	for (size_t k = 0; k < 2; k++)
		for (const char *const *p = from[k]; p && *p && n + 1 < cap; p++)
			list[n++] = *p;
	list[n] = NULL;
	return n;
}

static int listed(const char *const *list, const char *key)
{
	for (; list && *list; list++)
		if (!strcmp(*list, key))
			return 1;
	return 0;
}

const struct config_key *model_type_key(const struct model_type *t, const char *key)
{
	for (const struct config_key *k = t->keys; k && k->name; k++)
		if (!strcmp(k->name, key))
			return k;
	return NULL;
}

int model_type_knows(const struct model_type *t, const char *key)
{
	if (model_type_key(t, key) || (!strcmp(key, "rope_parameters") && reads_rope_parameters(t)))
		return 1;
	return listed(t->harmless, key) || listed(common, key) ? 2 : 0;
}

/* the spellings transformers reads for one another (GPT-2's attribute_map,
 * GPT-NeoX's older names) */
static const char *const aliases[][2] = {
	{ "num_attention_heads", "n_head" }, { "hidden_size", "n_embd" },
	{ "partial_rotary_factor", "rotary_pct" }, { "rope_theta", "rotary_emb_base" },
};

const char *config_key_alias(const char *key)
{
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		for (int j = 0; j < 2; j++)
			if (!strcmp(aliases[i][j], key))
				return aliases[i][!j];
	return NULL;
}

const char *model_types_read(char *buf, size_t size)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]) && at < size; i++) {
		if (types[i].refused)
			continue;
		at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? ", " : "", types[i].type);
	}
	return buf;
}

/* --layout's words: "mha" (-w's own layout, FAMILY_NONE), then the tensor
 * families up to FAMILY_TORCH, by their names in the table above */
static const char *layout_word(model_family f)
{
	return f == FAMILY_NONE ? "mha" : families[f].name;
}

int family_by_layout(const char *word, int checkpoint, model_family *f)
{
	for (int i = checkpoint ? FAMILY_LLAMA : FAMILY_NONE; i <= FAMILY_TORCH; i++)
		if (!strcmp(word, layout_word((model_family)i))) {
			*f = (model_family)i;
			return 0;
		}
	return -1;
}

const char *family_layouts(int checkpoint, char *buf, size_t size)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int i = checkpoint ? FAMILY_LLAMA : FAMILY_NONE; i <= FAMILY_TORCH && at < size; i++) {
		const int n = snprintf(buf + at, size - at, "%s%s", i == (checkpoint ? FAMILY_LLAMA :
				       FAMILY_NONE) ? "" : i == FAMILY_TORCH ? " or " : ", ",
				       layout_word((model_family)i));

		at += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

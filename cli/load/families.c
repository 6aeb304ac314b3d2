/*
 * families.c: the model families mha reads, as one table (families.h).
 * A new family is a row here; where it brings a config key with a new
 * meaning, model.c's apply() gives the key that meaning, once.
 */
#include "load/families.h"

#include <stdio.h>
#include <string.h>

/* ---- tensor families ----------------------------------------------------- */

const struct family families[] = {
	[FAMILY_LLAMA] = { "llama", "layers.%zu.self_attn", "q_proj.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1, NULL }, { "k_proj.weight", WK, 1, NULL },
		{ "v_proj.weight", WV, 1, NULL }, { "o_proj.weight", WO, 1, NULL },
		{ "q_proj.bias", BQ, 0, NULL }, { "k_proj.bias", BK, 0, NULL },
		{ "v_proj.bias", BV, 0, NULL }, { "o_proj.bias", BO, 0, NULL },
		/* older checkpoints kept the frequencies rope_theta gives */
		{ "rotary_emb.inv_freq", T_INV_FREQ, 0, NULL },
		{ "sinks", T_SINKS, 0, NULL },
		{ "q_norm.weight", T_Q_NORM, 0, NULL }, { "k_norm.weight", T_K_NORM, 0, NULL } } },
	/* Conv1D: (in, out), applied as x·W + b */
	[FAMILY_GPT2] = { "gpt2", "h.%zu.attn", "c_attn.weight", LAYOUT_MHA, {
		{ "c_attn.weight", T_PACKED_W, 1, NULL }, { "c_attn.bias", T_PACKED_B, 0, NULL },
		{ "c_proj.weight", WO, 1, NULL }, { "c_proj.bias", BO, 0, NULL },
		{ "bias", T_IGNORED, 0, "the causal mask as a buffer, which config.json's family implies" },
		{ "masked_bias", T_IGNORED, 0, "the masked scores' fill value, a buffer" } } },
	[FAMILY_BERT] = { "bert", "layer.%zu.attention", "self.query.weight", LAYOUT_TORCH, {
		{ "self.query.weight", WQ, 1, NULL }, { "self.key.weight", WK, 1, NULL },
		{ "self.value.weight", WV, 1, NULL }, { "output.dense.weight", WO, 1, NULL },
		{ "self.query.bias", BQ, 0, NULL }, { "self.key.bias", BK, 0, NULL },
		{ "self.value.bias", BV, 0, NULL }, { "output.dense.bias", BO, 0, NULL },
		{ "output.LayerNorm.weight", T_IGNORED, 0,
		  "the LayerNorm after the residual, past the output projection mha ends with" },
		{ "output.LayerNorm.bias", T_IGNORED, 0,
		  "the LayerNorm after the residual, past the output projection mha ends with" } } },
	/* nn.MultiheadAttention, as nn.TransformerEncoderLayer holds it */
	[FAMILY_TORCH] = { "torch", "layers.%zu.self_attn", "out_proj.weight", LAYOUT_TORCH, {
		{ "in_proj_weight", T_TORCH_KEY, 0, NULL }, { "in_proj_bias", T_TORCH_KEY, 0, NULL },
		{ "q_proj_weight", T_TORCH_KEY, 0, NULL }, { "k_proj_weight", T_TORCH_KEY, 0, NULL },
		{ "v_proj_weight", T_TORCH_KEY, 0, NULL }, { "out_proj.weight", T_TORCH_KEY, 1, NULL },
		{ "out_proj.bias", T_TORCH_KEY, 0, NULL } } },
	/* the families with Q, K and V in one tensor (out x in), split by rows */
	[FAMILY_PHI3] = { "phi3", "layers.%zu.self_attn", "qkv_proj.weight", LAYOUT_TORCH, {
		{ "qkv_proj.weight", T_FUSED_W, 1, NULL }, { "o_proj.weight", WO, 1, NULL },
		{ "qkv_proj.bias", T_FUSED_B, 0, NULL }, { "o_proj.bias", BO, 0, NULL } },
		FUSED_BLOCKS },
	[FAMILY_NEOX] = { "gpt_neox", "layers.%zu.attention", "query_key_value.weight", LAYOUT_TORCH, {
		{ "query_key_value.weight", T_FUSED_W, 1, NULL },
		{ "query_key_value.bias", T_FUSED_B, 0, NULL },
		{ "dense.weight", WO, 1, NULL }, { "dense.bias", BO, 0, NULL },
		{ "rotary_emb.inv_freq", T_INV_FREQ, 0, NULL },
		{ "bias", T_IGNORED, 0, "the causal mask as a buffer, which config.json's family implies" },
		{ "masked_bias", T_IGNORED, 0, "the masked scores' fill value, a buffer" } },
		FUSED_PER_HEAD },
	[FAMILY_FALCON] = { "falcon", "h.%zu.self_attention", "query_key_value.weight", LAYOUT_TORCH, {
		{ "query_key_value.weight", T_FUSED_W, 1, NULL },
		{ "query_key_value.bias", T_FUSED_B, 0, NULL },
		{ "dense.weight", WO, 1, NULL }, { "dense.bias", BO, 0, NULL } },
		FUSED_PER_HEAD },
	[FAMILY_BIGCODE] = { "gpt_bigcode", "h.%zu.attn", "c_attn.weight", LAYOUT_TORCH, {
		{ "c_attn.weight", T_FUSED_W, 1, NULL }, { "c_attn.bias", T_FUSED_B, 0, NULL },
		{ "c_proj.weight", WO, 1, NULL }, { "c_proj.bias", BO, 0, NULL } },
		FUSED_BLOCKS },
	[FAMILY_MODERNBERT] = { "modernbert", "layers.%zu.attn", "Wqkv.weight", LAYOUT_TORCH, {
		{ "Wqkv.weight", T_FUSED_W, 1, NULL }, { "Wqkv.bias", T_FUSED_B, 0, NULL },
		{ "Wo.weight", WO, 1, NULL }, { "Wo.bias", BO, 0, NULL } },
		FUSED_BLOCKS },
	/* multi-head latent attention (DeepSeek-V2, V3, Kimi K2): q_b_proj after
	 * q_a_proj, or q_proj alone; an FP8 weight's block scales
	 * (NAME.weight_scale_inv) are read with it (model.c) */
	[FAMILY_DEEPSEEK] = { "deepseek", "layers.%zu.self_attn", "kv_a_proj_with_mqa.weight",
		LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 0, NULL }, { "q_b_proj.weight", WQ, 0, NULL },
		{ "q_a_proj.weight", T_LATENT + LAT_Q_A_PROJ, 0, NULL },
		{ "q_a_layernorm.weight", T_LATENT + LAT_Q_A_NORM, 0, NULL },
		{ "kv_a_proj_with_mqa.weight", T_LATENT + LAT_KV_A_PROJ, 1, NULL },
		{ "kv_a_layernorm.weight", T_LATENT + LAT_KV_A_NORM, 0, NULL },
		{ "kv_b_proj.weight", T_LATENT + LAT_KV_B_PROJ, 1, NULL },
		{ "o_proj.weight", WO, 1, NULL },
		{ "rotary_emb.inv_freq", T_INV_FREQ, 0, NULL } } },
};
const size_t n_families = sizeof(families) / sizeof(families[0]);

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

/* the keys each kind of attention reads (model.c gives each its meaning) */
#define LLAMA_KEYS "num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim", \
	"rope_theta", "rope_scaling", "partial_rotary_factor", "attention_bias"
static const char *const llama_keys[] = { LLAMA_KEYS, NULL };
static const char *const mistral_keys[] = { LLAMA_KEYS, "sliding_window", NULL };
static const char *const qwen2_keys[] = { LLAMA_KEYS, "sliding_window", "use_sliding_window",
					  "max_window_layers", "layer_types", NULL };
static const char *const gemma2_keys[] = { LLAMA_KEYS, "query_pre_attn_scalar",
					   "attn_logit_softcapping", "sliding_window",
					   "layer_types", NULL };
static const char *const granite_keys[] = { LLAMA_KEYS, "attention_multiplier", NULL };
static const char *const cohere_keys[] = { LLAMA_KEYS, "use_qk_norm", "layer_norm_eps", NULL };
static const char *const qwen3_keys[] = { LLAMA_KEYS, "sliding_window", "use_sliding_window",
					  "max_window_layers", "layer_types", "rms_norm_eps", NULL };
static const char *const olmo2_keys[] = { LLAMA_KEYS, "rms_norm_eps", NULL };
static const char *const smollm3_keys[] = { LLAMA_KEYS, "no_rope_layers", "no_rope_layer_interval",
					    "use_sliding_window", "sliding_window",
					    "layer_types", NULL };
static const char *const olmo_keys[] = { LLAMA_KEYS, "clip_qkv", NULL };
static const char *const gpt_oss_keys[] = { LLAMA_KEYS, "sliding_window", "layer_types",
					    "quantization_config", NULL };
static const char *const phi3_keys[] = { LLAMA_KEYS, "sliding_window",
					 "original_max_position_embeddings", NULL };
/* GPT-NeoX: rotary_pct and rotary_emb_base, or their later names */
static const char *const neox_keys[] = { "num_attention_heads", "hidden_size", "rotary_pct",
					 "rotary_emb_base", "partial_rotary_factor", "rope_theta",
					 "rope_scaling", "attention_bias", NULL };
static const char *const falcon_keys[] = { "num_attention_heads", "num_kv_heads", "hidden_size",
					   "multi_query", "new_decoder_architecture", "alibi",
					   "bias", "rope_theta", "rope_scaling", NULL };
static const char *const bigcode_keys[] = { "n_head", "n_embd", "multi_query",
					    "scale_attn_weights", NULL };
static const char *const gemma3_keys[] = { LLAMA_KEYS, "query_pre_attn_scalar",
					   "attn_logit_softcapping", "sliding_window", "layer_types",
					   "sliding_window_pattern", "rope_local_base_freq",
					   "rms_norm_eps", "use_bidirectional_attention", NULL };
static const char *const modernbert_keys[] = { "num_attention_heads", "hidden_size",
					       "global_rope_theta", "local_rope_theta",
					       "local_attention", "global_attn_every_n_layers",
					       "attention_bias", NULL };
static const char *const cohere2_keys[] = { LLAMA_KEYS, "sliding_window", "layer_types",
					    "sliding_window_pattern", "layer_norm_eps", NULL };
/* multi-head latent attention's: the ranks and head dims (latent.c) */
static const char *const deepseek_keys[] = { "num_attention_heads", "num_key_value_heads",
					     "hidden_size", "head_dim", "q_lora_rank",
					     "kv_lora_rank", "qk_nope_head_dim",
					     "qk_rope_head_dim", "v_head_dim", "rope_theta",
					     "rope_scaling", "rope_interleave", "rms_norm_eps",
					     "attention_bias", "quantization_config", NULL };
static const char *const gpt2_keys[] = { "n_head", "n_embd", "scale_attn_weights",
					 "scale_attn_by_inverse_layer_idx", NULL };
static const char *const bert_keys[] = { "num_attention_heads", "hidden_size",
					 "position_embedding_type", "is_decoder", NULL };

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
static const char *const phi3_other[] = { "resid_pdrop", "embd_pdrop", NULL };
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
					    "activation", NULL };
/* the same scores in float64: where float16 code upcasts the softmax */
static const char *const bigcode_other[] = { "n_layer", "n_positions", "n_inner",
					     "activation_function", "resid_pdrop", "embd_pdrop",
					     "attn_pdrop", "attention_softmax_in_fp32",
					     "scale_attention_softmax_in_fp32", NULL };
/* Command R7B's config carries keys of its original code that transformers'
 * Cohere 2 stores and never reads (its rotation is interleaved and whole) */
static const char *const cohere2_other[] = { "logit_scale", "cache_implementation",
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
					  NULL };
/* DeepSeek's mixture of experts, its multi-token prediction layer, and the
 * tensor-parallel switches that compute the same attention */
static const char *const deepseek_other[] = {
	"n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
	"moe_layer_freq", "first_k_dense_replace", "norm_topk_prob", "scoring_func",
	"topk_method", "n_group", "topk_group", "routed_scaling_factor", "aux_loss_alpha",
	"seq_aux", "ep_size", "num_nextn_predict_layers", "pretraining_tp", "mlp_bias",
	"rope_parameters_legacy", NULL
};
static const char *const gpt_oss_other[] = { "experts_per_token", "initial_context_length",
					     "num_local_experts", "num_experts_per_tok",
					     "output_router_logits", "router_aux_loss_coef",
					     "swiglu_limit", NULL };
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
 * keys read, keys known harmless, transformers' default heads */
#define READS(fam, bias, rope, slide, keys, other, heads) \
	fam, bias, NULL, rope, slide, keys, other, heads, NULL, 0, FUSED_NONE, { 0 }
/* and a q/k norm: its kind, over the whole row, eps's key and default, the key
 * that turns it on */
#define READS_NORM(fam, bias, rope, slide, keys, other, heads, kind, all, eps_key, eps, flag) \
	fam, bias, NULL, rope, slide, keys, other, heads, NULL, 0, FUSED_NONE, \
	{ kind, all, eps_key, eps, flag }
/* an image-text type: its text model's type when text_config gives none */
#define TEXT_OF(type) FAMILY_NONE, BIAS_ANY, NULL, MHA_ROPE_NONE, SLIDE_NONE, NULL, \
	image_text_other, 0, type, 0, FUSED_NONE, { 0 }
/* a type whose attention needs what mha does not compute */
#define REFUSED(fam, why) fam, BIAS_ANY, why, MHA_ROPE_NONE, SLIDE_NONE, NULL, NULL, 0, NULL, 0, \
	FUSED_NONE, { 0 }

#define HALF MHA_ROPE_HALF

static const struct model_type types[] = {
	{ "llama", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, llama_keys, llama_other, 32) },
	{ "mistral", READS(FAMILY_LLAMA, BIAS_NONE, HALF, SLIDE_ALL, mistral_keys, none, 0) },
	{ "mixtral", READS(FAMILY_LLAMA, BIAS_NONE, HALF, SLIDE_ALL, mistral_keys, mixtral_other,
			   0) },
	{ "qwen2", READS(FAMILY_LLAMA, BIAS_QKV, HALF, SLIDE_QWEN, qwen2_keys, none, 0) },
	{ "gemma", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, llama_keys, gemma_other, 0) },
	{ "gemma2", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_EVEN, gemma2_keys, gemma2_other,
			  0) },
	{ "granite", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, granite_keys,
			   granite_other, 0) },
	/* Command R+: with use_qk_norm, a LayerNorm per head, weights (heads, head_dim) */
	{ "cohere", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, MHA_ROPE_INTERLEAVED, SLIDE_NONE,
			       cohere_keys, cohere_other, 0, MHA_NORM_LAYER, 0, "layer_norm_eps",
			       1e-5, "use_qk_norm") },
	{ "qwen3", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_QWEN, qwen3_keys, none, 0,
			      MHA_NORM_RMS, 0, "rms_norm_eps", 1e-6, NULL) },
	{ "qwen3_moe", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_QWEN, qwen3_keys,
				  qwen3_moe_other, 0, MHA_NORM_RMS, 0, "rms_norm_eps", 1e-6, NULL) },
	/* its norm over the whole projection, before the heads are split */
	{ "olmo2", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, olmo2_keys, none, 0,
			      MHA_NORM_RMS, 1, "rms_norm_eps", 1e-5, NULL) },
	{ "smollm3", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_TYPES, smollm3_keys,
			   smollm3_other, 0) },
	{ "olmo", READS(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_NONE, olmo_keys, none, 0) },
	{ "gpt2", READS(FAMILY_GPT2, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, gpt2_keys, gpt2_other,
			12) },
	{ "bert", READS(FAMILY_BERT, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bert_keys, bert_other,
			12) },
	{ "roberta", READS(FAMILY_BERT, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bert_keys,
			   bert_other, 12) },
	{ "llava", TEXT_OF("llama") },
	{ "llava_next", TEXT_OF("llama") },
	{ "mistral3", TEXT_OF("mistral") },
	{ "gemma3", TEXT_OF("gemma3_text") },
	/* Gemma 3: q_norm and k_norm times 1 + w, five local layers to a global
	 * one, the local ones turning by rope_local_base_freq */
	{ "gemma3_text", READS_NORM(FAMILY_LLAMA, BIAS_FLAG, HALF, SLIDE_PATTERN, gemma3_keys,
				    gemma2_other, 0, MHA_NORM_RMS1P, 0, "rms_norm_eps", 1e-6,
				    NULL) },
	/* Phi-3, Phi-4: qkv_proj; longrope with the top level's original_max_position_embeddings */
	{ "phi3", READS(FAMILY_PHI3, BIAS_NONE, HALF, SLIDE_ALL, phi3_keys, phi3_other, 32) },
	/* Pythia: query_key_value head by head, rotary_pct of each head turned */
	{ "gpt_neox", READS(FAMILY_NEOX, BIAS_ANY, HALF, SLIDE_NONE, neox_keys, neox_other, 64) },
	/* the fused layout and the key/value heads from multi_query and
	 * new_decoder_architecture (config.c) */
	{ "falcon", READS(FAMILY_FALCON, BIAS_ANY, HALF, SLIDE_NONE, falcon_keys, falcon_other,
			  71) },
	/* StarCoder: c_attn as Q and one K and V (multi_query), learned positions */
	{ "gpt_bigcode", READS(FAMILY_BIGCODE, BIAS_ANY, MHA_ROPE_NONE, SLIDE_NONE, bigcode_keys,
			       bigcode_other, 12) },
	/* an encoder: Wqkv, local and global layers with their own rotary bases */
	{ "modernbert", READS(FAMILY_MODERNBERT, BIAS_FLAG, HALF, SLIDE_EVERY_N, modernbert_keys,
			      modernbert_other, 12) },
	/* multi-head latent attention: the turned parts' pairs (2i, 2i + 1), unless
	 * rope_interleave is false (latent.c) */
	{ "deepseek_v2", READS(FAMILY_DEEPSEEK, BIAS_NONE, MHA_ROPE_INTERLEAVED, SLIDE_NONE,
			       deepseek_keys, deepseek_other, 0) },
	{ "deepseek_v3", READS(FAMILY_DEEPSEEK, BIAS_NONE, MHA_ROPE_INTERLEAVED, SLIDE_NONE,
			       deepseek_keys, deepseek_other, 0) },
	{ "kimi_k2", READS(FAMILY_DEEPSEEK, BIAS_NONE, MHA_ROPE_INTERLEAVED, SLIDE_NONE,
			   deepseek_keys, deepseek_other, 0) },
	/* sinks, layer_types, YaRN; its MoE quantized, never its attention */
	{ "gpt_oss", FAMILY_LLAMA, BIAS_FLAG, NULL, HALF, SLIDE_BY_TYPES, gpt_oss_keys, gpt_oss_other,
	  0, NULL, 1, FUSED_NONE, { 0 } },
	/* Command R7B: rotation on its sliding layers alone */
	{ "cohere2", READS(FAMILY_LLAMA, BIAS_FLAG, MHA_ROPE_INTERLEAVED, SLIDE_ROPE_LOCAL,
			   cohere2_keys, cohere2_other, 0) },
	/* GLM-4: q, k, v biases with attention_bias (never o), pairs 2i, 2i + 1 of the
	 * partial_rotary_factor features turned */
	{ "glm", READS(FAMILY_LLAMA, BIAS_FLAG_QKV, MHA_ROPE_INTERLEAVED, SLIDE_NONE, llama_keys,
		       none, 0) },
	{ "glm4", READS(FAMILY_LLAMA, BIAS_FLAG_QKV, MHA_ROPE_INTERLEAVED, SLIDE_NONE, llama_keys,
			none, 0) },
};

const struct model_type *model_type_find(const char *type)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(types[i].type, type))
			return &types[i];
	return NULL;
}

/* no model_type and no --layout: the heads alone */
static const char *const generic_keys[] = { "num_attention_heads", "num_key_value_heads",
					    "hidden_size", "head_dim", "n_head", "n_embd", NULL };
static const struct model_type generic = { "", FAMILY_NONE, BIAS_ANY, NULL, MHA_ROPE_NONE,
					   SLIDE_NONE, generic_keys, none, 0, NULL, 0, FUSED_NONE, { 0 } };
/* --layout torch: nn.MultiheadAttention has no config.json of its own */
static const struct model_type torch_row = { "", FAMILY_TORCH, BIAS_ANY, NULL, MHA_ROPE_NONE,
					     SLIDE_NONE, generic_keys, none, 0, NULL, 0, FUSED_NONE,
					     { 0 } };

const struct model_type *model_type_of_family(model_family f)
{
	static const char *const row[] = { [FAMILY_LLAMA] = "llama", [FAMILY_GPT2] = "gpt2",
					   [FAMILY_BERT] = "bert" };

	if (f == FAMILY_TORCH)
		return &torch_row;
	return f > FAMILY_NONE && f < FAMILY_TORCH ? model_type_find(row[f]) : &generic;
}

size_t model_type_known(const struct model_type *t, const char **list, size_t cap)
{
	const char *const *const from[] = { t->keys, t->harmless, common };
	size_t n = 0;

	for (size_t k = 0; k < 3; k++)
		for (const char *const *p = from[k]; p && *p && n + 1 < cap; p++)
			list[n++] = *p;
	list[n] = NULL;
	return n;
}

/* tensors some families have that mha does not read yet, and what they do */
static const struct { const char *suffix, *what; } unread[] = {
	{ "q_norm.weight", "a normalisation of q before the rotation (Qwen3, OLMo 2, Gemma 3, "
	  "Cohere R+ with use_qk_norm), which this model type's attention does not have: give "
	  "the type that has it (model_type), or --norm" },
	{ "k_norm.weight", "a normalisation of k before the rotation (Qwen3, OLMo 2, Gemma 3, "
	  "Cohere R+ with use_qk_norm), which this model type's attention does not have: give "
	  "the type that has it (model_type), or --norm" },
	{ "q_norm.bias", "a bias of q's normalisation, which no family mha reads has" },
	{ "k_norm.bias", "a bias of k's normalisation, which no family mha reads has" },
	{ "sinks", "attention sinks (gpt-oss's), one logit per head, which this model type's "
	  "attention does not have: say model_type gpt_oss, or give them with --sinks" },
	{ "qkv_proj.weight", "Q, K and V fused in one tensor (Phi-3's), which this model type's "
	  "attention does not have: say model_type phi3" },
	{ "query_key_value.weight", "Q, K and V fused in one tensor (GPT-NeoX's, Falcon's), which "
	  "this model type's attention does not have: say model_type gpt_neox or falcon" },
	{ "Wqkv.weight", "Q, K and V fused in one tensor (ModernBERT's), which this model type's "
	  "attention does not have: say model_type modernbert" },
	{ "kv_a_proj_with_mqa.weight", "multi-head latent attention's (DeepSeek's), which this "
	  "model type's attention does not have: say model_type deepseek_v3 (or deepseek_v2, "
	  "kimi_k2)" },
};

const char *family_tensor_unread(const char *suffix)
{
	for (size_t i = 0; i < sizeof(unread) / sizeof(unread[0]); i++)
		if (!strcmp(unread[i].suffix, suffix))
			return unread[i].what;
	return NULL;
}

static int listed(const char *const *list, const char *key)
{
	for (; list && *list; list++)
		if (!strcmp(*list, key))
			return 1;
	return 0;
}

int model_type_knows(const struct model_type *t, const char *key)
{
	if (listed(t->keys, key))
		return 1;
	return listed(t->harmless, key) || listed(common, key) ? 2 : 0;
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

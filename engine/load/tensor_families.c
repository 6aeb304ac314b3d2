/*
 * tensor_families.c: what each tensor family's attention module holds
 * (families.h): the module of layer N, its tensors and what each becomes,
 * a fused projection's layout; and the tensors some families have that mha
 * does not read yet, said by name.  The model types that use them are
 * families.c's.
 */
#include "load/families.h"

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
		  "the LayerNorm after the residual, past the output projection mha ends with" },
		/* the same, as bert-base-uncased was published (transformers renames
		 * gamma and beta to weight and bias as it loads them) */
		{ "output.LayerNorm.gamma", T_IGNORED, 0,
		  "the LayerNorm after the residual, past the output projection mha ends with" },
		{ "output.LayerNorm.beta", T_IGNORED, 0,
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
	/* Phi (phi-1, phi-1.5, phi-2): Llama's names, the output projection dense */
	[FAMILY_PHI] = { "phi", "layers.%zu.self_attn", "dense.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1, NULL }, { "k_proj.weight", WK, 1, NULL },
		{ "v_proj.weight", WV, 1, NULL }, { "dense.weight", WO, 1, NULL },
		{ "q_proj.bias", BQ, 0, NULL }, { "k_proj.bias", BK, 0, NULL },
		{ "v_proj.bias", BV, 0, NULL }, { "dense.bias", BO, 0, NULL } } },
	/* GPT-J: transformer.h.N.attn, out_proj, no biases; older checkpoints keep
	 * the causal mask's buffers */
	[FAMILY_GPTJ] = { "gptj", "h.%zu.attn", "out_proj.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1, NULL }, { "k_proj.weight", WK, 1, NULL },
		{ "v_proj.weight", WV, 1, NULL }, { "out_proj.weight", WO, 1, NULL },
		{ "bias", T_IGNORED, 0, "the causal mask as a buffer, which config.json's family implies" },
		{ "masked_bias", T_IGNORED, 0, "the masked scores' fill value, a buffer" } } },
	/* OPT: model.decoder.layers.N.self_attn, out_proj (nn.MultiheadAttention's
	 * name, but four tensors of their own) */
	[FAMILY_OPT] = { "opt", "layers.%zu.self_attn", "out_proj.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1, NULL }, { "k_proj.weight", WK, 1, NULL },
		{ "v_proj.weight", WV, 1, NULL }, { "out_proj.weight", WO, 1, NULL },
		{ "q_proj.bias", BQ, 0, NULL }, { "k_proj.bias", BK, 0, NULL },
		{ "v_proj.bias", BV, 0, NULL }, { "out_proj.bias", BO, 0, NULL } } },
	/* InternLM2: attention.wqkv group by group [H/G q heads | k | v], wo */
	[FAMILY_INTERNLM2] = { "internlm2", "layers.%zu.attention", "wqkv.weight", LAYOUT_TORCH, {
		{ "wqkv.weight", T_FUSED_W, 1, NULL }, { "wqkv.bias", T_FUSED_B, 0, NULL },
		{ "wo.weight", WO, 1, NULL }, { "wo.bias", BO, 0, NULL } },
		FUSED_GROUPED },
};
const size_t n_families = sizeof(families) / sizeof(families[0]);

/* tensors some families have that mha does not read yet, and what they do */
static const struct { const char *suffix, *what; } unread[] = {
	{ "q_norm.weight", "a normalisation of q before the rotation (Qwen3, OLMo 2, Gemma 3, "
	  "Cohere R+ with use_qk_norm), which this model type's attention does not have: give "
	  "the type that has it (model_type), or --norm with its kind (rms, rms1p, layer), "
	  "--norm-eps and --norm-over" },
	{ "k_norm.weight", "a normalisation of k before the rotation (Qwen3, OLMo 2, Gemma 3, "
	  "Cohere R+ with use_qk_norm), which this model type's attention does not have: give "
	  "the type that has it (model_type), or --norm with its kind (rms, rms1p, layer), "
	  "--norm-eps and --norm-over" },
	{ "q_norm.bias", "a bias of q's normalisation, which no family mha reads has" },
	{ "k_norm.bias", "a bias of k's normalisation, which no family mha reads has" },
	{ "sinks", "attention sinks (gpt-oss's), one logit per head, which this model type's "
	  "attention does not have: say model_type gpt_oss" },
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


/*
 * config.c: Hugging Face's config.json read for the attention (model.h):
 * the model type's row (families.c), every key known or refused, and what
 * each key the type reads sets, under the command line's options.
 */
#include "load/model.h"
#include "load/said.h"
#include "load/families.h"
#include "load/config_keys.h"
#include "load/complete.h"
#include "load/latent.h"
#include "load/layers.h"
#include "load/rope_scaling.h"
#include "read/checkpoint.h"
#include "util/msg.h"
#include "read/json.h"
#include "read/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The key/value heads and the fused layout of Falcon's query_key_value
 * (new_decoder_architecture: num_kv_heads groups; multi_query: one; else
 * every head its own, fused head by head) and BigCode's c_attn
 * (multi_query, the default: one; else head by head), as their modeling
 * code reads them: *kv set, s->fused.  0, or -1 said.
 */
static int fused_heads(struct problem_spec *s, const cJSON *root, const char *path, size_t heads,
		       size_t *kv)
{
	int multi = s->mtype->family == FAMILY_BIGCODE, newer = 0, alibi = 0;
	size_t n = 0;
	char note[96];

	if (config_bool(root, path, "multi_query", &multi) < 0 ||
	    (s->mtype->family == FAMILY_FALCON &&
	     (config_bool(root, path, "new_decoder_architecture", &newer) < 0 ||
	      config_bool(root, path, "alibi", &alibi) < 0 ||
	      config_count(root, path, "num_kv_heads", &n) < 0)))
		return -1;
	if (alibi)
		return error("%s: alibi: Falcon's ALiBi scores (BLOOM's, added before the scaling), "
			     "which mha does not read yet", path);
	if (newer) {
		s->fused = FUSED_GROUPED;
		*kv = n ? n : heads;
		snprintf(s->kv_from, sizeof(s->kv_from), "new_decoder_architecture%s and %s",
			 config_default_note(s, "new_decoder_architecture", note, sizeof(note)),
			 n ? "num_kv_heads" : "no num_kv_heads: as many as the heads");
	} else if (multi) {
		s->fused = FUSED_BLOCKS;
		*kv = 1;
		snprintf(s->kv_from, sizeof(s->kv_from), "multi_query%s%s", config_default_note(s,
			 "multi_query", note, sizeof(note)), s->mtype->family == FAMILY_FALCON ?
			 ", no new_decoder_architecture" : "");
	} else {
		s->fused = FUSED_PER_HEAD;
		if (n && heads && n != heads)
			return error("%s: num_kv_heads %zu with neither multi_query nor "
				     "new_decoder_architecture: query_key_value is fused head by "
				     "head, %zu of them", path, n, heads);
		*kv = 0;
	}
	return 0;
}

/*
 * The heads config.json gives (0: none), under the command line's, and
 * checked here, so that a value that does not divide is blamed on the file
 * and its key rather than on an option never given.  0, or -1 said.
 */
static int config_heads(struct problem_spec *s, const char *path, size_t heads, size_t kv)
{
	const unsigned g = s->given;
	size_t H, G;
	char kn[96], hn[96];

	if (heads && !(g & GIVEN_HEADS)) {
		s->heads = heads;
		s->given |= CONFIG_HEADS;
	}
	if (kv && !(g & GIVEN_KV_HEADS)) {
		s->kv_heads = kv;
		s->given |= CONFIG_KV_HEADS;
	}
	if (!(s->given & (CONFIG_HEADS | CONFIG_KV_HEADS)))
		return 0; /* the options' own, checked with the options */
	H = s->heads;
	G = s->kv_heads ? s->kv_heads : H;
	if (G <= H && H % G == 0)
		return 0;
	if (!(s->given & CONFIG_HEADS) && !(g & GIVEN_HEADS))
		return error("'%s': num_key_value_heads %zu but no %s: give --heads", path, G,
			     model_heads_key(s));
	return error("'%s': %s %zu%s does not divide %s %zu%s", path,
		     s->given & CONFIG_KV_HEADS ? "num_key_value_heads" : "--kv-heads", G,
		     s->given & CONFIG_KV_HEADS ? config_default_note(s, "num_key_value_heads", kn,
								    sizeof(kn)) : "",
		     s->given & CONFIG_HEADS ? model_heads_key(s) : "--heads", H,
		     s->given & CONFIG_HEADS ? config_default_note(s, model_heads_key(s), hn,
								 sizeof(hn)) : "");
}

/*
 * partial_rotary_factor: the first int(head_dim x factor) features of each
 * head turn, as Hugging Face computes it.  None: no rotation at all (a rope
 * dim of 0 would mean all of d_k).  An odd number: refused, for
 * transformers' tables would not fit it.  0, or -1 said.
 */
static int config_rotary_dim(struct problem_spec *s, const char *path, size_t hd, double partial,
			     const char *key, const char *width)
{
	char note[96];
	/* Python's int() of the product, as a double: the same rounding */
	const size_t R = (size_t)floor((double)hd * partial);
	const unsigned g = s->given;

	if (R % 2)
		return error("'%s': %s %g%s of %s turns %zu feature%s, an odd number: a "
			     "rotary embedding turns pairs", path, key, partial,
			     config_default_note(s, key, note, sizeof(note)), width, R,
			     R == 1 ? "" : "s");
	if (R) {
		s->cfg.rope.dim = R;
		s->given |= CONFIG_ROPE_DIM;
		return 0;
	}
	if ((g & (GIVEN_ROPE | GIVEN_ROPE_THETA)) || s->positions)
		return error("'%s': %s %g%s of %s turns no feature: leave out %s", path, key,
			     partial, config_default_note(s, key, note, sizeof(note)), width, g & GIVEN_ROPE ? "--rope" :
			     g & GIVEN_ROPE_THETA ? "--rope-theta" : "--positions");
	s->cfg.rope.mode = MHA_ROPE_NONE;
	s->cfg.rope.theta = 0;
	return 0;
}

/*
 * GPT-J's rotary_dim: the first R features of each head turn (a count, not a
 * share).  Null: its code sizes the rotation by the whole width, which no
 * head fits; odd, or wider than a head: refused.  0, or -1 said.
 */
static int config_rotary_count(struct problem_spec *s, const cJSON *root, const char *path,
			       size_t hd, const char *width)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "rotary_dim");
	char note[96];
	size_t R = 0;
	int rc;

	if (v && cJSON_IsNull(v))
		return error("%s: rotary_dim null: GPT-J's code then turns the whole width (n_embd), "
			     "which none of its heads fits", path);
	if ((rc = config_count(root, path, "rotary_dim", &R)) <= 0)
		return rc;
	config_default_note(s, "rotary_dim", note, sizeof(note));
	if (R % 2 || !R)
		return error("%s: rotary_dim %zu%s: a rotary embedding turns pairs", path, R, note);
	if (hd && R > hd)
		return error("%s: rotary_dim %zu%s is wider than %s", path, R, note, width);
	s->cfg.rope.dim = R;
	s->given |= CONFIG_ROPE_DIM;
	return 0;
}

/* a head's width in words, where it came from: "head_dim 128", or "a head's
 * 1024 features (hidden_size 2048 (left out: ...) / num_attention_heads 2)" */
static void head_width(const struct problem_spec *s, char *buf, size_t size, size_t heads,
		       size_t hidden, size_t head_dim)
{
	char n1[96], n2[96];

	if (head_dim)
		snprintf(buf, size, "head_dim %zu%s", head_dim,
			 config_default_note(s, "head_dim", n1, sizeof(n1)));
	else if (heads && hidden)
		snprintf(buf, size, "a head's %zu features (%s %zu%s / %s %zu%s)", hidden / heads,
			 model_hidden_key(s), hidden,
			 config_default_note(s, model_hidden_key(s), n1, sizeof(n1)),
			 model_heads_key(s), heads,
			 config_default_note(s, model_heads_key(s), n2, sizeof(n2)));
	else
		snprintf(buf, size, "a head");
}

/* key is one t's attention reads: model.c reads no other (and config.json
 * holds no key t does not know: known_keys) */
static int reads(const struct model_type *t, const char *key)
{
	return model_type_knows(t, key) == 1;
}

/* The rotary embedding the type implies, as config.json sets it. */
static int apply_rope(struct problem_spec *s, const cJSON *root, const char *path, size_t heads,
		      size_t hidden, size_t head_dim)
{
	const struct model_type *t = s->mtype;
	const unsigned g = s->given;
	const cJSON *sc;
	double theta = 0, partial = 0;
	int rc, lg;
	char hn[96], kn[96], width[320];

	if (!(g & GIVEN_ROPE))
		s->cfg.rope.mode = t->rope;
	if (root && reads(t, "no_rope_layers") && !(g & GIVEN_ROPE)) {
		if ((rc = layers_turns(root, path, s)) < 0)
			return -1;
		if (!rc)
			s->cfg.rope.mode = MHA_ROPE_NONE;
	}
	head_width(s, width, sizeof(width), heads, hidden, head_dim);
	if (root && reads(t, "rotary_dim") && s->cfg.rope.mode && !(g & GIVEN_ROPE_DIM) &&
	    !s->rope_cos && config_rotary_count(s, root, path, head_dim ? head_dim : heads ?
						hidden / heads : 0, width))
		return -1;
	if (!root || !reads(t, "rope_theta"))
		return 0;
	/* the base and rope_scaling by layer kind: apply_local_global */
	lg = t->slide == SLIDE_PATTERN || t->slide == SLIDE_EVERY_N;
	if (config_number2(root, path, "rope_theta", "rotary_emb_base", &theta) < 0 ||
	    config_number2(root, path, "partial_rotary_factor", "rotary_pct", &partial) < 0)
		return -1;
	sc = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
	/* --rope-scaling's object wins (model_config); tables given replace it */
	if (sc && !cJSON_IsNull(sc) && !(g & GIVEN_ROPE_SCALING) && !s->rope_cos && !lg) {
		double max_pos = 0, orig = 0;

		/* Phi-3's original_max_position_embeddings, beside rope_scaling */
		if (config_number(root, path, "max_position_embeddings", &max_pos) < 0 ||
		    (reads(t, "original_max_position_embeddings") &&
		     config_number(root, path, "original_max_position_embeddings", &orig) < 0) ||
		    rope_scaling_read(s, sc, path, max_pos, orig))
			return -1;
	}
	if (partial > 1)
		return config_bad_type(path, "partial_rotary_factor", "a number from 0 to 1");
	if (!s->cfg.rope.mode)
		return 0; /* this layer does not turn: the rest is not used */
	if (theta && !(g & GIVEN_ROPE_THETA) && !s->rope_cos && !lg)
		s->cfg.rope.theta = theta;
	if (partial && !(g & GIVEN_ROPE_DIM) && !s->rope_cos) {
		const size_t hd = head_dim ? head_dim : heads && hidden ? hidden / heads : 0;

		if (!hd && heads && hidden)
			return error("'%s': hidden_size %zu%s is narrower than num_attention_heads "
				     "%zu%s: no head is left", path, hidden,
				     config_default_note(s, "hidden_size", hn, sizeof(hn)), heads,
				     config_default_note(s, "num_attention_heads", kn, sizeof(kn)));
		if (!hd)
			return error("%s: partial_rotary_factor needs head_dim, or hidden_size and "
				     "num_attention_heads", path);
		if (config_rotary_dim(s, path, hd, partial,
				      cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor") ?
				      "partial_rotary_factor" : "rotary_pct", width))
			return -1;
	}
	return 0;
}

/* The scale and softcap the type implies: Gemma 2's query_pre_attn_scalar
 * and attn_logit_softcapping, Granite's attention_multiplier. */
static int apply_scale(struct problem_spec *s, const cJSON *root, const char *path)
{
	const struct model_type *t = s->mtype;
	double v = 0;
	int rc;

	if (reads(t, "query_pre_attn_scalar")) {
		if ((rc = config_number(root, path, "query_pre_attn_scalar", &v)) < 0)
			return -1;
		if (rc && !(s->given & GIVEN_SCALE)) {
			s->cfg.scale_mode = MHA_SCALE_VALUE;
			s->cfg.scale = 1 / sqrt(v);
		}
	}
	if (reads(t, "attention_multiplier")) {
		if ((rc = config_number(root, path, "attention_multiplier", &v)) < 0)
			return -1;
		if (rc && !(s->given & GIVEN_SCALE)) {
			s->cfg.scale_mode = MHA_SCALE_VALUE;
			s->cfg.scale = v;
		}
	}
	if (reads(t, "attn_logit_softcapping")) {
		if ((rc = config_number(root, path, "attn_logit_softcapping", &v)) < 0)
			return -1;
		if (rc && !(s->given & GIVEN_SOFTCAP))
			s->cfg.softcap = v;
	}
	return 0;
}

/* The q/k norm the type implies (Qwen3, OLMo 2; Cohere's with use_qk_norm):
 * its kind, over what, and eps from config.json or transformers' default;
 * an option given wins */
static int apply_norm(struct problem_spec *s, const cJSON *root, const char *path)
{
	const struct model_type *t = s->mtype;
	double eps = 0;
	int on = !t->norm.flag;

	if (t->norm.flag && config_bool(root, path, t->norm.flag, &on) < 0)
		return -1;
	if (!on)
		return 0;
	s->model_norm = 1;
	if (!(s->given & GIVEN_NORM))
		s->cfg.norm.kind = t->norm.kind;
	if (!(s->given & GIVEN_NORM_OVER))
		s->cfg.norm.over_all = t->norm.over_all;
	if (config_number(root, path, t->norm.eps_key, &eps) < 0)
		return -1;
	if (!eps)
		return error("%s: no \"%s\": the q/k norm's eps is not said", path,
			     t->norm.eps_key);
	if (!(s->given & GIVEN_NORM_EPS)) {
		s->cfg.norm.eps = eps;
		s->given |= CONFIG_NORM_EPS;
	}
	return 0;
}

/* quantization_config: the attention's modules must be among those left
 * unquantized (gpt-oss quantizes its experts alone); -1 said, else 0 */
static int quantized_attention(const cJSON *root, const char *path)
{
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), *keep, *e;

	if (!q || cJSON_IsNull(q))
		return 0;
	keep = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, "modules_to_not_convert")
				 : NULL;
	for (e = cJSON_IsArray(keep) ? keep->child : NULL; e; e = e->next)
		if (cJSON_IsString(e) && strstr(e->valuestring, "self_attn"))
			return 0;
	return error("%s: quantization_config: the attention's weights are quantized (its "
		     "modules_to_not_convert names no self_attn), which mha does not read", path);
}

/* What the model type implies, and what the config says of it. */
static int apply(struct problem_spec *s, const cJSON *root, const char *path)
{
	const struct model_type *t = s->mtype;
	const unsigned g = s->given;
	size_t heads = 0, kv = 0, hidden = 0, head_dim = 0, window = 0;
	int rc, flag = 0;
	const char *str;

	if (root) {
		if (config_count2(root, path, "num_attention_heads", "n_head", &heads) < 0 ||
		    config_count(root, path, "num_key_value_heads", &kv) < 0 ||
		    config_count2(root, path, "hidden_size", "n_embd", &hidden) < 0 ||
		    config_count(root, path, "head_dim", &head_dim) < 0 ||
		    config_bool(root, path, model_type_bias_key(t), &flag) < 0)
			return -1;
		s->config_bias = 1 + flag;
		/* the shapes the model's modules take (model.c holds the weights to them):
		 * head_dim, else hidden_size / heads; Cohere 2's always the latter,
		 * DeepSeek's latent.c's */
		if (t->family == FAMILY_DEEPSEEK)
			s->config_hidden = hidden; /* latent.c holds kv_a_proj_with_mqa to it */
		if (t->family != FAMILY_NONE && t->family != FAMILY_TORCH &&
		    t->family != FAMILY_DEEPSEEK) {
			s->config_hidden = hidden;
			s->config_head_dim = reads(t, "head_dim") ? head_dim : 0;
			s->config_head_derived = !s->config_head_dim;
			if (!s->config_head_dim && hidden && heads && hidden % heads == 0)
				s->config_head_dim = hidden / heads;
		}
		if ((t->family == FAMILY_FALCON || t->family == FAMILY_BIGCODE) &&
		    fused_heads(s, root, path, heads, &kv))
			return -1;
		if (config_heads(s, path, heads, kv))
			return -1;
	}
	if (t->family == FAMILY_NONE || t->family == FAMILY_TORCH)
		return 0; /* the heads alone */
	/* decoders: causal; BERT and ModernBERT: not, unless is_decoder */
	if (t->family != FAMILY_BERT && t->family != FAMILY_MODERNBERT && !(g & GIVEN_CAUSAL))
		s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
	if (apply_rope(s, root, path, heads, hidden, head_dim) || (root && apply_scale(s, root, path)))
		return -1;
	if (!root)
		return 0;
	if (t->norm.kind && apply_norm(s, root, path))
		return -1;
	if (t->family == FAMILY_DEEPSEEK && latent_apply_config(s, root, path))
		return -1;
	if (reads(t, "qk_layernorm") && config_bool(root, path, "qk_layernorm", &flag) > 0 && flag)
		return error("%s: qk_layernorm: %s normalises q and k %s, which mha does not %s yet",
			     path, t->type, t->family == FAMILY_PHI
			     ? "with a LayerNorm that has a bias" : "head by head, each with a "
			     "LayerNorm of its own (q_layernorm.norms.N)", t->family == FAMILY_PHI
			     ? "compute" : "read");
	if (reads(t, "clip_qkv") && cJSON_GetObjectItemCaseSensitive(root, "clip_qkv") &&
	    !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "clip_qkv")))
		return error("%s: clip_qkv: OLMo clamps Q, K and V to +-clip_qkv, which mha does not "
			     "compute yet", path);
	/* FP8 with block scales is latent.c's to read (DeepSeek) */
	if (reads(t, "quantization_config") && t->family != FAMILY_DEEPSEEK &&
	    quantized_attention(root, path))
		return -1;
	if ((t->slide == SLIDE_PATTERN || t->slide == SLIDE_EVERY_N) &&
	    layers_local_global(s, root, path))
		return -1;
	if ((t->slide == SLIDE_ROPE_LOCAL || t->slide == SLIDE_NOPE_GLOBAL) &&
	    layers_rope_local(s, root, path))
		return -1;
	if (reads(t, "sliding_window") && t->slide != SLIDE_PATTERN && t->slide != SLIDE_ROPE_LOCAL &&
	    t->slide != SLIDE_NOPE_GLOBAL) {
		if ((rc = config_count(root, path, "sliding_window", &window)) < 0)
			return -1;
		if (rc && !(g & GIVEN_WINDOW)) {
			if ((rc = layers_sliding(root, path, s)) < 0)
				return -1;
			/* the query and the window - 1 keys before it */
			if (rc) {
				s->cfg.window.on = 1;
				s->cfg.window.left = (ptrdiff_t)(window - 1);
				s->cfg.window.right = -1;
			}
		}
	}
	if (reads(t, "scale_attn_weights")) {
		if ((rc = config_bool(root, path, "scale_attn_weights", &flag)) < 0)
			return -1;
		if (rc && !flag && !(g & GIVEN_SCALE))
			s->cfg.scale_mode = MHA_SCALE_NONE;
		if ((rc = config_bool(root, path, "scale_attn_by_inverse_layer_idx", &flag)) < 0)
			return -1;
		if (rc && flag && !(g & GIVEN_SCALE))
			return error("%s: scale_attn_by_inverse_layer_idx: give the layer's scale, "
				     "1/(sqrt(d_k)*(N+1)), with --scale", path);
	}
	if (reads(t, "position_embedding_type")) {
		str = NULL;
		if (config_string(root, path, "position_embedding_type", &str) < 0)
			return -1;
		if (str && strcmp(str, "absolute"))
			return error("%s: position_embedding_type \"%s\" changes the scores; mha reads "
				     "BERT's \"absolute\" only", path, str);
		if ((rc = config_bool(root, path, "is_decoder", &flag)) < 0)
			return -1;
		if (rc && flag && !(g & GIVEN_CAUSAL))
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
	}
	return 0;
}

/* Every key of obj (the config, or its text_config) is one t knows, or
 * the run stops naming it, at its line and column.  0, or -1 said. */
static int known_keys(const json_doc *doc, const cJSON *obj, const struct model_type *t)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "model_type");
	const char *list[512], *said = cJSON_IsString(type) ? type->valuestring : NULL;
	const size_t n = model_type_known(t, list, sizeof(list) / sizeof(list[0]));
	char why[256];

	if (said && *t->type && strcmp(said, t->type))
		snprintf(why, sizeof(why), "mha does not know what it does to model_type \"%.40s\" "
			 "read as --layout %s, so the run stops rather than guess", said,
			 families[t->family].name);
	else if (*t->type)
		snprintf(why, sizeof(why), "mha does not know what it does to model_type \"%s\"'s "
			 "attention, so the run stops rather than guess", t->type);
	else if (t->family)
		snprintf(why, sizeof(why), "mha does not know what it does to --layout %s's "
			 "attention, so the run stops rather than guess",
			 families[t->family].name);
	else
		snprintf(why, sizeof(why), "without a model_type (or --layout), mha reads only the "
			 "heads from config.json; give one to read the rest");
	return json_known_keys(doc, obj, list, n, why);
}

/* The settings the command line may state, as their options are named;
 * differs: families differ in it, so that a model_type mha does not read
 * (read as --layout's family) must have it stated. */
static const struct {
	unsigned bit;
	const char *opt;
	int differs;
} settings[] = {
	{ GIVEN_HEADS, "--heads", 0 }, { GIVEN_KV_HEADS, "--kv-heads", 0 },
	{ GIVEN_CAUSAL, "--causal", 0 }, { GIVEN_ROPE, "--rope", 1 },
	{ GIVEN_ROPE_DIM, "--rope-dim", 1 }, { GIVEN_ROPE_THETA, "--rope-theta", 1 },
	{ GIVEN_ROPE_SCALING, "--rope-scaling", 1 }, { GIVEN_SCALE, "--scale", 1 },
	{ GIVEN_SOFTCAP, "--softcap", 1 }, { GIVEN_NORM, "--norm", 1 },
	{ GIVEN_NORM_EPS, "--norm-eps", 1 }, { GIVEN_NORM_OVER, "--norm-over", 1 },
	{ GIVEN_WINDOW, "--window", 1 }, { GIVEN_SINKS, "--sinks", 1 },
	{ GIVEN_BIASES, "--biases", 1 }, { GIVEN_QK_ROPE, "--qk-rope-head-dim", 0 },
	{ GIVEN_MLA_EPS, "--mla-eps", 0 },
};

/* a differing setting that the others stated make moot: the rotation's
 * details without one, the norm's without a norm */
static int moot(const struct problem_spec *s, unsigned bit)
{
	if (bit & (GIVEN_ROPE_DIM | GIVEN_ROPE_THETA | GIVEN_ROPE_SCALING))
		return (s->given & GIVEN_ROPE) && !s->cfg.rope.mode;
	if (bit & (GIVEN_NORM_EPS | GIVEN_NORM_OVER))
		return (s->given & GIVEN_NORM) && !s->cfg.norm.kind;
	return 0;
}

size_t model_settings(const struct problem_spec *s, int stated, const char **list, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]) && n < cap; i++)
		if (stated ? (s->given & settings[i].bit) != 0 :
		    settings[i].differs && !(s->given & settings[i].bit) && !moot(s, settings[i].bit))
			list[n++] = settings[i].opt;
	return n;
}

/*
 * A model_type mha does not read, read as --layout's family: every setting
 * families differ in stated, or the run stops naming those that are not
 * (with them, the family's names alone are read of it).  0, or -1 said.
 */
static int layout_stated(struct problem_spec *s, const char *path, const char *type)
{
	const char *list[16];
	const size_t n = model_settings(s, 0, list, 16);
	char names[400];
	size_t at = 0;

	snprintf(s->type_said, sizeof(s->type_said), "%s", type);
	if (!n)
		return 0;
	names[0] = '\0';
	for (size_t i = 0; i < n && at < sizeof(names); i++)
		at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s",
				       i ? i + 1 == n ? " and " : ", " : "", list[i]);
	return error("%s: model_type \"%.40s\" is not one mha reads, and --layout %s says only how "
		     "its tensors are named: families differ in what their attention does, so "
		     "give %s too (none where the model has none), or the run would guess them",
		     path, type, families[s->family].name, names);
}

/*
 * The config's model type: its row into s->mtype, and the object that
 * holds its attention's keys into *attn (an image-text model's
 * text_config).  A model_type mha does not read is refused, naming those it
 * does, unless --layout says which family to hold it to; one whose
 * attention mha does not compute yet says what that is.  0, or -1 said.
 */
static int config_type(struct problem_spec *s, const json_doc *doc, const char *path, int ckpt,
		       const cJSON **attn)
{
	const cJSON *root = doc->root, *text;
	const struct model_type *t;
	const char *type = NULL;
	char list[512];

	*attn = root;
	if (config_string(root, path, "model_type", &type) < 0)
		return -1;
	t = type ? model_type_find(type) : NULL;
	if (t && t->text_config) {
		/* an image-text model: its text model's type, its own keys, then
		 * (below) its text model's keys */
		const struct model_type *wrapper = t;

		text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
		if (!text || !cJSON_IsObject(text))
			return error("%s: model_type \"%s\" holds its text model's settings in "
				     "text_config, an object: not found", path, type);
		*attn = text;
		s->text_model = 1;
		type = NULL;
		if (config_string(text, path, "model_type", &type) < 0)
			return -1;
		if (!type)
			type = t->text_config;
		t = model_type_find(type);
		if (!(t && t->refused) && known_keys(doc, root, wrapper))
			return -1;
	}
	if (t && t->refused)
		return error("%s: model_type \"%s\": its attention has %s", path, type, t->refused);
	if (!t && type && !(s->given & GIVEN_LAYOUT))
		return error("%s: model_type \"%.40s\" is not one mha reads (%s), so the run stops "
			     "rather than guess what its attention does; --layout FAMILY reads its "
			     "tensors by a family's names once every setting families differ in is "
			     "given as well", path, type, model_types_read(list, sizeof(list)));
	if (!t && type && layout_stated(s, path, type))
		return -1;
	if (t && ckpt && s->family && s->family != t->family)
		return error("%s: model_type \"%s\" is a %s model, not --layout %s", path, type,
			     families[t->family].name, families[s->family].name);
	if (t)
		s->mtype = t;
	return 0;
}

int model_config(struct problem_spec *s)
{
	char dir[4096], path[PATH_TEXT];
	const char *cfg = s->config;
	const int ckpt = s->w && ckpt_is_checkpoint(s->w);
	const cJSON *attn = NULL;
	cJSON *full = NULL;
	input_file in;
	json_doc doc = { 0 };
	int rc = 0;

	if (!cfg && ckpt) {
		ckpt_folder_of(s->w, dir, sizeof(dir));
		snprintf(path, sizeof(path), "%s/config.json", dir);
		/* there, whatever it is: read, or refused when not a regular file */
		if (access(path, F_OK) == 0)
			cfg = path;
	}
	if (cfg) {
		/* config.json found beside the checkpoint: a regular file only */
		if (cfg == path ? input_load_found(&in, cfg) : input_load(&in, cfg)) {
			input_free(&in);
			return -1;
		}
		if (json_parse(&doc, &in))
			rc = -1;
		else if (!cJSON_IsObject(doc.root))
			rc = error("%s: expected a JSON object (Hugging Face's config.json)", in.name);
		else
			rc = config_type(s, &doc, in.name, ckpt, &attn);
		/* the tensors' family, from the model type: a checkpoint's */
		if (!rc && ckpt && !s->family && s->mtype)
			s->family = s->mtype->family;
	}
	if (!rc && ckpt && !s->family) {
		/* the family from the tensors' names */
		struct ckpt c;

		rc = ckpt_open(&c, s->w);
		if (!rc && !(s->family = model_detect(&c)))
			rc = error("%s: which model family is this? give --layout llama, gpt2, bert or "
				   "torch (or --config with a model_type)", s->w);
		ckpt_free(&c);
	}
	if (!rc && !s->mtype)
		s->mtype = model_type_of_family(s->family);
	if (!rc && s->family)
		s->layout = families[s->family].layout;
	if (!rc && attn)
		rc = known_keys(&doc, attn, s->mtype);
	if (!rc && attn) {
		/* the keys the attention reads, for 'mha model' */
		const cJSON *e;
		size_t at = 0;

		cJSON_ArrayForEach(e, attn) {
			const size_t n = strlen(e->string) + 1;

			if (model_type_knows(s->mtype, e->string) == 1 && at + n < sizeof(s->keys_used)) {
				memcpy(s->keys_used + at, e->string, n);
				at += n;
			}
		}
		s->keys_used[at] = '\0';
	}
	/* the keys it leaves out, as its class fills them */
	if (!rc && attn && !(full = config_complete(s, attn, doc.root, in.name)))
		rc = -1;
	if (!rc)
		rc = apply(s, full, cfg ? in.name : NULL);
	if (!rc && s->rope_scaling) {
		double max_pos = 0;

		rc = (full && config_number(full, in.name, "max_position_embeddings", &max_pos) < 0) ||
		     rope_scaling_option(s, max_pos) ? -1 : 0;
	}
	if (!rc && s->mtype && s->mtype->family == FAMILY_DEEPSEEK)
		latent_mscale(s);
	cJSON_Delete(full);
	if (!rc && cfg)
		snprintf(s->config_read, sizeof(s->config_read), "%s", cfg); /* for meta */
	if (cfg) {
		json_doc_free(&doc);
		input_free(&in);
	}
	return rc;
}

/* the layers config.json counts, for mha model (model.h) */
int config_layer_count(const struct problem_spec *s, size_t *n)
{
	char dir[4096], path[PATH_TEXT];
	const char *cfg = s->config;
	input_file in;
	json_doc doc = { 0 };
	int rc = 0;

	*n = 0;
	if (!cfg) {
		ckpt_folder_of(s->w, dir, sizeof(dir));
		snprintf(path, sizeof(path), "%s/config.json", dir);
		if (access(path, F_OK) != 0)
			return 0;
		cfg = path;
	}
	if ((cfg == path ? input_load_found(&in, cfg) : input_load(&in, cfg)) ||
	    json_parse(&doc, &in)) {
		rc = -1;
	} else if (cJSON_IsObject(doc.root)) {
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(doc.root, "text_config");
		const cJSON *o = cJSON_IsObject(text) ? text : doc.root;

		rc = config_count2(o, in.name, "num_hidden_layers", "n_layer", n) < 0 ? -1 : 0;
		if (!rc && *n > 100000)
			rc = error("%s: num_hidden_layers %zu: more layers than mha describes at once "
				   "(100000): give --layer N", in.name, *n);
	}
	json_doc_free(&doc);
	input_free(&in);
	return rc;
}

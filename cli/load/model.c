/*
 * model.c: one attention layer out of a checkpoint (model.h): the model
 * families' tensor names, the module picked, and config.json.  The
 * checkpoint's files and names are checkpoint.c's.
 */
#include "load/model.h"
#include "read/checkpoint.h"
#include "base/cli.h"
#include "read/json.h"
#include "read/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the families ------------------------------------------------------ */

/* what a tensor becomes: one of mha's weights, or GPT-2's packed Q|K|V */
enum { PACKED_W = N_WEIGHTS, PACKED_B, TORCH_KEY };

struct family {
	const char *name;
	const char *layer;   /* the module of layer N, "%zu" for N */
	const char *key;     /* a tensor every such module has */
	weight_layout layout;
	struct { const char *suffix; int what; int required; } t[8];
};

static const struct family families[] = {
	[FAMILY_LLAMA] = { "llama", "layers.%zu.self_attn", "q_proj.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1 }, { "k_proj.weight", WK, 1 }, { "v_proj.weight", WV, 1 },
		{ "o_proj.weight", WO, 1 }, { "q_proj.bias", BQ, 0 }, { "k_proj.bias", BK, 0 },
		{ "v_proj.bias", BV, 0 }, { "o_proj.bias", BO, 0 } } },
	/* Conv1D: (in, out), applied as x·W + b */
	[FAMILY_GPT2] = { "gpt2", "h.%zu.attn", "c_attn.weight", LAYOUT_MHA, {
		{ "c_attn.weight", PACKED_W, 1 }, { "c_attn.bias", PACKED_B, 0 },
		{ "c_proj.weight", WO, 1 }, { "c_proj.bias", BO, 0 } } },
	[FAMILY_BERT] = { "bert", "layer.%zu.attention", "self.query.weight", LAYOUT_TORCH, {
		{ "self.query.weight", WQ, 1 }, { "self.key.weight", WK, 1 },
		{ "self.value.weight", WV, 1 }, { "output.dense.weight", WO, 1 },
		{ "self.query.bias", BQ, 0 }, { "self.key.bias", BK, 0 },
		{ "self.value.bias", BV, 0 }, { "output.dense.bias", BO, 0 } } },
	/* nn.MultiheadAttention, as nn.TransformerEncoderLayer holds it */
	[FAMILY_TORCH] = { "torch", "layers.%zu.self_attn", "out_proj.weight", LAYOUT_TORCH, {
		{ "in_proj_weight", TORCH_KEY, 0 }, { "in_proj_bias", TORCH_KEY, 0 },
		{ "q_proj_weight", TORCH_KEY, 0 }, { "k_proj_weight", TORCH_KEY, 0 },
		{ "v_proj_weight", TORCH_KEY, 0 }, { "out_proj.weight", TORCH_KEY, 1 },
		{ "out_proj.bias", TORCH_KEY, 0 } } },
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

/* config.json's model_type: the families mha reads */
static const struct { const char *type; model_family family; } model_types[] = {
	{ "llama", FAMILY_LLAMA }, { "mistral", FAMILY_LLAMA }, { "qwen2", FAMILY_LLAMA },
	{ "gpt2", FAMILY_GPT2 }, { "bert", FAMILY_BERT }, { "roberta", FAMILY_BERT },
};

/* the key a family's config.json gives its heads under */
static const char *heads_key(const struct problem_spec *s)
{
	return s->family == FAMILY_GPT2 ? "n_head" : "num_attention_heads";
}

/* ---- the module -------------------------------------------------------- */

/* name is module + "." + key (or key alone: module ""): the module's length, or -1 */
static ptrdiff_t module_of(const char *name, const char *key)
{
	const size_t n = strlen(name), k = strlen(key);

	if (n == k && !strcmp(name, key))
		return 0;
	if (n > k + 1 && name[n - k - 1] == '.' && !strcmp(name + n - k, key))
		return (ptrdiff_t)(n - k - 1);
	return -1;
}

/* module is layer N of the family (ends with its layer pattern): N, or -1 */
static ptrdiff_t layer_of(const char *module, size_t len, const struct family *fam)
{
	const char *pct = strstr(fam->layer, "%zu");
	const size_t pre = (size_t)(pct - fam->layer), post = strlen(pct + 3);

	/* find the pattern's start: after a '.' or at the start */
	for (size_t at = 0; at + pre + post < len; at++) {
		size_t i = at + pre, v = 0, digits = 0;

		if ((at && module[at - 1] != '.') || strncmp(module + at, fam->layer, pre))
			continue;
		while (i < len && module[i] >= '0' && module[i] <= '9' && digits < 9) {
			v = v * 10 + (size_t)(module[i++] - '0');
			digits++;
		}
		if (digits && i + post == len && !strncmp(module + i, pct + 3, post))
			return (ptrdiff_t)v;
	}
	return -1;
}

/* Which family's attention the names hold: the only one with modules. */
static model_family detect(const struct ckpt *c)
{
	model_family found = FAMILY_NONE;

	for (size_t f = 1; f < N_FAMILIES; f++)
		for (size_t i = 0; i < c->n_names; i++)
			if (module_of(c->names[i].name, families[f].key) >= 0) {
				if (found)
					return FAMILY_NONE;
				found = (model_family)f;
				break;
			}
	return found;
}

/* --layer N, but none of the count modules found (any: the first two, each
 * any_len long) has a layer number: say so, naming them */
static int no_layer_numbers(const struct ckpt *c, size_t layer, const struct family *fam,
			    size_t count, const char *const any[2], const size_t any_len[2])
{
	if (count == 1 && !any_len[0])
		return error("%s: no layer %zu: the checkpoint's %s attention is one module at the top "
			     "level (\"%s\"), with no layer number: leave out --layer", c->path, layer,
			     fam->name, any[0]);
	if (count == 1)
		return error("%s: no layer %zu: the checkpoint's %s attention is one module, \"%.*s\", "
			     "with no layer number: leave out --layer", c->path, layer, fam->name,
			     (int)any_len[0], any[0]);
	return error("%s: no layer %zu: the checkpoint's %zu %s attention modules (\"%.*s\", "
		     "\"%.*s\"%s) have no layer numbers: pick one with --prefix", c->path, layer,
		     count, fam->name, (int)any_len[0], any[0], (int)any_len[1], any[1],
		     count > 2 ? ", ..." : "");
}

/* The module to read, into module (without its trailing '.'). */
static int pick_module(const struct ckpt *c, const struct problem_spec *s,
		       const struct family *fam, char *module, size_t size)
{
	size_t count = 0, lo = SIZE_MAX, hi = 0, matched = 0;
	const char *first = NULL, *second = NULL, *any[2] = { NULL, NULL };
	size_t first_len = 0, second_len = 0, any_len[2] = { 0, 0 };

	if (s->prefix) {
		size_t n = strlen(s->prefix);
		char want[PATH_TEXT];

		while (n && s->prefix[n - 1] == '.')
			n--;
		snprintf(module, size, "%.*s", (int)n, s->prefix);
		snprintf(want, sizeof(want), "%s%s%s", module, *module ? "." : "", fam->key);
		if (ckpt_find(c, want) < 0)
			return ckpt_missing(c, want, "");
		return 0;
	}
	for (size_t i = 0; i < c->n_names; i++) {
		const ptrdiff_t len = module_of(c->names[i].name, fam->key);
		ptrdiff_t l;

		if (len < 0)
			continue;
		if (count < 2) {
			any[count] = c->names[i].name;
			any_len[count] = (size_t)len;
		}
		count++;
		l = layer_of(c->names[i].name, (size_t)len, fam);
		if (l >= 0) {
			lo = (size_t)l < lo ? (size_t)l : lo;
			hi = (size_t)l > hi ? (size_t)l : hi;
		}
		if (s->has_layer && (l < 0 || (size_t)l != s->layer))
			continue;
		matched++;
		if (!first) {
			first = c->names[i].name;
			first_len = (size_t)len;
		} else if (!second) {
			second = c->names[i].name;
			second_len = (size_t)len;
		}
	}
	if (!count)
		return error("%s: no %s attention in the checkpoint: no tensor named *.%s (give "
			     "--layout for another family, or --prefix)", c->path, fam->name, fam->key);
	if (s->has_layer && !matched && lo != SIZE_MAX)
		return error("%s: no layer %zu: the checkpoint's %s attention layers are %zu to %zu",
			     c->path, s->layer, fam->name, lo, hi);
	if (s->has_layer && !matched)
		return no_layer_numbers(c, s->layer, fam, count, any, any_len);
	if (matched > 1 && s->has_layer)
		return error("%s: layer %zu is in two modules, \"%.*s\" and \"%.*s\": pick one with "
			     "--prefix", c->path, s->layer, (int)first_len, first, (int)second_len, second);
	if (matched > 1 && lo != SIZE_MAX)
		return error("%s: the checkpoint has %zu %s attention modules (layers %zu to %zu): "
			     "pick one with --layer N or --prefix", c->path, matched, fam->name, lo, hi);
	if (matched > 1)
		return error("%s: the checkpoint has %zu %s attention modules (\"%.*s\", \"%.*s\", "
			     "...): pick one with --prefix", c->path, matched, fam->name,
			     (int)first_len, first, (int)second_len, second);
	snprintf(module, size, "%.*s", (int)first_len, first);
	return 0;
}

/* (rows, 3·D) -> its columns [k·D, (k+1)·D); a vector (3·D) -> its part */
static int third(matrix *dst, const matrix *m, size_t k)
{
	const size_t rows = m->rank == 2 ? m->dim[0] : 1, cols = m->dim[m->rank - 1] / 3;

	if (matrix_alloc(dst, m->rank, m->rank == 2 ? rows : cols, m->rank == 2 ? cols : 1, 1))
		return -1;
	for (size_t r = 0; r < rows; r++)
		memcpy(dst->v + r * cols, m->v + r * 3 * cols + k * cols, cols * sizeof(double));
	return 0;
}

/* the features each of m's rows or columns projects to: out of (out, in) or (in, out) */
static size_t out_features(const matrix *m, weight_layout layout)
{
	return m->rank != 2 ? 0 : layout == LAYOUT_TORCH ? m->dim[0] : m->dim[1];
}

/*
 * The heads and rotary dim config.json set, against the weights read: a
 * mismatch is the file's (its key named), not an option's.  0, or -1 said.
 */
static int check_config(const weights *w, const struct problem_spec *s)
{
	const char *path = s->config_read;
	const size_t qf = out_features(&w->m[WQ], w->layout), kf = out_features(&w->m[WK], w->layout);
	const size_t H = s->heads, G = s->kv_heads ? s->kv_heads : s->heads;
	const int heads = !!(s->given & CONFIG_HEADS), kv = !!(s->given & CONFIG_KV_HEADS);

	if (!qf || !kf || !(s->given & (CONFIG_HEADS | CONFIG_KV_HEADS | CONFIG_ROPE_DIM)))
		return 0;
	if (qf % H)
		return heads ? error("'%s': %s %zu does not divide the %zu features of W_Q from %s",
				     path, heads_key(s), H, qf, w->src[WQ]) : 0;
	if ((heads || kv) && kf != G * (qf / H))
		return error("'%s': %s %zu and %s %zu make %zu key/value features (d_k %zu), but W_K "
			     "from %s has %zu", path, heads ? heads_key(s) : "--heads", H,
			     kv ? "num_key_value_heads" : s->given & GIVEN_KV_HEADS ? "--kv-heads" :
			     "key/value heads", G, G * (qf / H), qf / H, w->src[WK], kf);
	if ((s->given & CONFIG_ROPE_DIM) && s->cfg.rope.dim > qf / H)
		return error("'%s': partial_rotary_factor turns %zu features of each head, but a head "
			     "has d_k = %zu (W_Q from %s, %zu heads): head_dim or hidden_size is wrong",
			     path, s->cfg.rope.dim, qf / H, w->src[WQ], H);
	return 0;
}

const char *model_family_name(model_family f)
{
	return f > FAMILY_NONE && f <= FAMILY_TORCH ? families[f].name : NULL;
}

int model_load(weights *w, struct problem_spec *s, const char *path)
{
	struct ckpt c;
	const struct family *fam;
	char module[4096];
	int rc = 0;

	if (ckpt_open(&c, path)) {
		ckpt_free(&c);
		return -1;
	}
	if (!s->family && !(s->family = detect(&c))) {
		ckpt_free(&c);
		return error("%s: which model family is this? give --layout llama, gpt2, bert or "
			     "torch (or --config with a model_type)", path);
	}
	fam = &families[s->family];
	w->layout = fam->layout;
	s->layout = fam->layout;
	if (pick_module(&c, s, fam, module, sizeof(module))) {
		ckpt_free(&c);
		return -1;
	}
	/* for meta: the names' start, as they are read below */
	snprintf(s->module, sizeof(s->module), "%s%s", module, *module ? "." : "");
	s->checkpoint = 1;
	if (s->family == FAMILY_LLAMA) {
		/* Qwen3, OLMo 2: an RMSNorm on each head's q and k before the rotation */
		static const char *const norms[] = { "q_norm.weight", "k_norm.weight" };

		for (size_t k = 0; k < 2; k++) {
			char name[PATH_TEXT];

			snprintf(name, sizeof(name), "%s%s%s", module, *module ? "." : "", norms[k]);
			if (ckpt_find(&c, name) >= 0) {
				ckpt_free(&c);
				return error("%s: \"%s\": this attention normalises q and k (Qwen3, OLMo "
					     "2), which mha does not compute", path, name);
			}
		}
	}
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix && !rc; k++) {
		char name[PATH_TEXT], src[2 * PATH_TEXT];
		matrix m;

		snprintf(name, sizeof(name), "%s%s%s", module, *module ? "." : "", fam->t[k].suffix);
		if (ckpt_find(&c, name) < 0) {
			if (fam->t[k].required)
				rc = ckpt_missing(&c, name, "");
			continue;
		}
		if (ckpt_read(&m, &c, name, src, sizeof(src))) {
			rc = -1;
			break;
		}
		if (fam->t[k].what == TORCH_KEY) {
			rc = weights_put_key(w, fam->t[k].suffix, &m, src);
		} else if (fam->t[k].what == PACKED_W || fam->t[k].what == PACKED_B) {
			/* GPT-2's c_attn: Q | K | V side by side */
			const int base = fam->t[k].what == PACKED_W ? WQ : BQ;
			char shape[64];

			if (m.rank != (fam->t[k].what == PACKED_W ? 2u : 1u) || m.dim[m.rank - 1] % 3) {
				rc = error("%s: %s is %s, expected %s", path, name,
					   matrix_shape(&m, shape, sizeof(shape)),
					   base == WQ ? "(D, 3*D): Q, K and V side by side"
						      : "a vector of 3*D: Q's, K's and V's biases");
				matrix_free(&m);
				break;
			}
			for (int q = 0; q < 3 && !rc; q++) {
				matrix part;

				rc = third(&part, &m, (size_t)q) ||
				     weights_put_key(w, weight_names[base + q], &part, src);
			}
			matrix_free(&m);
		} else {
			rc = weights_put_key(w, weight_names[fam->t[k].what], &m, src);
		}
	}
	ckpt_free(&c);
	return rc || check_config(w, s) ? -1 : 0;
}

/* ---- config.json ------------------------------------------------------- */

static int bad_type(const char *path, const char *key, const char *want)
{
	return error("%s: \"%s\" is not %s", path, key, want);
}

/* key as a whole number from 1: 1 and *out, 0 absent or null, -1 said */
static int config_count(const cJSON *root, const char *path, const char *key, size_t *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1) || e->valuedouble != floor(e->valuedouble))
		return bad_type(path, key, "a whole number from 1");
	if (e->valuedouble > 1e15)
		return error("%s: \"%s\" is %g, more than any model has", path, key, e->valuedouble);
	*out = (size_t)e->valuedouble;
	return 1;
}

static int config_number(const cJSON *root, const char *path, const char *key, double *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || !(e->valuedouble > 0))
		return bad_type(path, key, "a number above 0");
	*out = e->valuedouble;
	return 1;
}

static int config_bool(const cJSON *root, const char *path, const char *key, int *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsBool(e))
		return bad_type(path, key, "true or false");
	*out = cJSON_IsTrue(e);
	return 1;
}

static int config_string(const cJSON *root, const char *path, const char *key, const char **out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsString(e))
		return bad_type(path, key, "a string");
	*out = e->valuestring;
	return 1;
}

/* the first of two spellings present (hidden_size, n_embd) */
static int config_count2(const cJSON *root, const char *path, const char *a, const char *b,
			 size_t *out)
{
	const int rc = config_count(root, path, a, out);

	return rc ? rc : config_count(root, path, b, out);
}

/* Whether the layer the run takes slides its window (Mistral: every layer;
 * Qwen2: use_sliding_window, and layers from max_window_layers; newer
 * configs: layer_types). 1, 0, or -1 said. */
static int sliding(const cJSON *root, const char *path, const struct problem_spec *s)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	size_t from = 0;
	int use = 1, rc;

	if ((rc = config_bool(root, path, "use_sliding_window", &use)) < 0)
		return -1;
	if (!use)
		return 0;
	if (types && !cJSON_IsNull(types)) {
		const cJSON *t;

		if (!cJSON_IsArray(types))
			return bad_type(path, "layer_types", "a list of strings");
		if (!s->has_layer)
			return error("%s: layer_types differ by layer: give --layer", path);
		t = cJSON_GetArrayItem(types, (int)(s->layer < 1000000 ? s->layer : 1000000));
		if (!t)
			return error("%s: layer_types has no entry for layer %zu", path, s->layer);
		if (!cJSON_IsString(t))
			return bad_type(path, "layer_types", "a list of strings");
		return !strcmp(t->valuestring, "sliding_attention");
	}
	if ((rc = config_count(root, path, "max_window_layers", &from)) < 0)
		return -1;
	if (rc && !cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window"))
		rc = 0; /* Mistral-style configs slide every layer */
	if (rc && (!s->has_layer || s->layer < from))
		return s->has_layer ? 0 : error("%s: layers from max_window_layers slide their "
						"window: give --layer", path);
	return 1;
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
			     heads_key(s));
	return error("'%s': %s %zu does not divide %s %zu", path,
		     s->given & CONFIG_KV_HEADS ? "num_key_value_heads" : "--kv-heads", G,
		     s->given & CONFIG_HEADS ? heads_key(s) : "--heads", H);
}

/*
 * partial_rotary_factor: the first int(head_dim x factor) features of each
 * head turn, as Hugging Face computes it.  None: no rotation at all (a rope
 * dim of 0 would mean all of d_k).  An odd number: refused, for
 * transformers' tables would not fit it.  0, or -1 said.
 */
static int config_rotary_dim(struct problem_spec *s, const char *path, size_t hd, double partial)
{
	/* Python's int() of the product, as a double: the same rounding */
	const size_t R = (size_t)floor((double)hd * partial);
	const unsigned g = s->given;

	if (R % 2)
		return error("'%s': partial_rotary_factor %g of head_dim %zu turns %zu feature%s, an "
			     "odd number: a rotary embedding turns pairs", path, partial, hd, R,
			     R == 1 ? "" : "s");
	if (R) {
		s->cfg.rope.dim = R;
		s->given |= CONFIG_ROPE_DIM;
		return 0;
	}
	if ((g & (GIVEN_ROPE | GIVEN_ROPE_THETA)) || s->positions)
		return error("'%s': partial_rotary_factor %g of head_dim %zu turns no feature: "
			     "leave out %s", path, partial, hd, g & GIVEN_ROPE ? "--rope" :
			     g & GIVEN_ROPE_THETA ? "--rope-theta" : "--positions");
	s->cfg.rope.mode = MHA_ROPE_NONE;
	s->cfg.rope.theta = 0;
	return 0;
}

/* What the family implies, and what the config says of it. */
static int apply(struct problem_spec *s, const cJSON *root, const char *path)
{
	const unsigned g = s->given;
	size_t heads = 0, kv = 0, hidden = 0, head_dim = 0, window = 0;
	double theta = 0, partial = 0;
	int rc, flag;
	const char *str;

	if (root) {
		if (config_count2(root, path, "num_attention_heads", "n_head", &heads) < 0 ||
		    config_count(root, path, "num_key_value_heads", &kv) < 0 ||
		    config_count2(root, path, "hidden_size", "n_embd", &hidden) < 0 ||
		    config_count(root, path, "head_dim", &head_dim) < 0 ||
		    config_number(root, path, "rope_theta", &theta) < 0 ||
		    config_number(root, path, "partial_rotary_factor", &partial) < 0 ||
		    config_bool(root, path, "attention_bias", &flag) < 0)
			return -1;
		if (partial > 1)
			return bad_type(path, "partial_rotary_factor", "a number from 0 to 1");
		if (config_heads(s, path, heads, kv))
			return -1;
	}
	switch (s->family) {
	case FAMILY_LLAMA:
		if (!(g & GIVEN_CAUSAL))
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		if (!(g & GIVEN_ROPE))
			s->cfg.rope.mode = MHA_ROPE_HALF;
		if (!root)
			break;
		{
			const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");

			if (sc && !cJSON_IsNull(sc)) {
				const char *type = NULL;

				if (!cJSON_IsObject(sc))
					return bad_type(path, "rope_scaling", "an object");
				if (config_string(sc, path, "rope_type", &type) < 0 ||
				    (!type && config_string(sc, path, "type", &type) < 0))
					return -1;
				if ((!type || strcmp(type, "default")) && !s->rope_cos)
					return error("%s: rope_scaling (\"%s\") changes the rotary "
						     "frequencies, which --rope cannot: give the tables with "
						     "--rope-cos and --rope-sin", path, type ? type : "?");
			}
		}
		if (theta && !(g & GIVEN_ROPE_THETA) && !s->rope_cos)
			s->cfg.rope.theta = theta;
		if (partial && !(g & GIVEN_ROPE_DIM) && !s->rope_cos) {
			const size_t hd = head_dim ? head_dim : heads && hidden ? hidden / heads : 0;

			if (!hd)
				return error("%s: partial_rotary_factor needs head_dim, or hidden_size and "
					     "num_attention_heads", path);
			if (config_rotary_dim(s, path, hd, partial))
				return -1;
		}
		if ((rc = config_count(root, path, "sliding_window", &window)) < 0)
			return -1;
		if (rc && !(g & GIVEN_WINDOW)) {
			if ((rc = sliding(root, path, s)) < 0)
				return -1;
			/* the query and the window - 1 keys before it */
			if (rc) {
				s->cfg.window.on = 1;
				s->cfg.window.left = (ptrdiff_t)(window - 1);
				s->cfg.window.right = -1;
			}
		}
		break;
	case FAMILY_GPT2:
		if (!(g & GIVEN_CAUSAL))
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		if (!root)
			break;
		if ((rc = config_bool(root, path, "scale_attn_weights", &flag)) < 0)
			return -1;
		if (rc && !flag && !(g & GIVEN_SCALE))
			s->cfg.scale_mode = MHA_SCALE_NONE;
		if ((rc = config_bool(root, path, "scale_attn_by_inverse_layer_idx", &flag)) < 0)
			return -1;
		if (rc && flag && !(g & GIVEN_SCALE))
			return error("%s: scale_attn_by_inverse_layer_idx: give the layer's scale, "
				     "1/(sqrt(d_k)*(N+1)), with --scale", path);
		break;
	case FAMILY_BERT:
		if (!root)
			break;
		str = NULL;
		if (config_string(root, path, "position_embedding_type", &str) < 0)
			return -1;
		if (str && strcmp(str, "absolute"))
			return error("%s: position_embedding_type \"%s\" changes the scores; mha reads "
				     "BERT's \"absolute\" only", path, str);
		break;
	default:
		break;
	}
	return 0;
}

const char *model_heads_said(const struct problem_spec *s, int kv, size_t n, char *buf,
			     size_t size)
{
	const unsigned from_config = kv ? CONFIG_KV_HEADS : CONFIG_HEADS;

	if (kv && !(s->given & (CONFIG_KV_HEADS | GIVEN_KV_HEADS)))
		return model_heads_said(s, 0, n, buf, size); /* as many as the heads */
	if (!(s->given & from_config))
		snprintf(buf, size, "%s %zu", kv ? "--kv-heads" : "--heads", n);
	else
		snprintf(buf, size, "%s %zu of '%s'", kv ? "num_key_value_heads" : heads_key(s), n,
			 path_shown(s->config_read));
	return buf;
}

int model_config(struct problem_spec *s)
{
	char dir[4096], path[PATH_TEXT];
	const char *cfg = s->config;
	const int ckpt = s->w && ckpt_is_checkpoint(s->w);
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
		if (json_parse(&doc, &in)) {
			rc = -1;
		} else if (!cJSON_IsObject(doc.root)) {
			rc = error("%s: expected a JSON object (Hugging Face's config.json)", in.name);
		} else if (!(s->given & GIVEN_LAYOUT) && ckpt) {
			const char *type = NULL;

			if (config_string(doc.root, in.name, "model_type", &type) < 0) {
				rc = -1;
			} else if (type) {
				size_t i;

				for (i = 0; i < sizeof(model_types) / sizeof(model_types[0]); i++)
					if (!strcmp(type, model_types[i].type))
						break;
				if (i == sizeof(model_types) / sizeof(model_types[0]))
					rc = error("%s: model_type \"%s\" is not one mha reads (llama, "
						   "mistral, qwen2, gpt2, bert, roberta): give --layout "
						   "llama, gpt2, bert or torch", in.name, type);
				else
					s->family = model_types[i].family;
			}
		}
	}
	if (!rc && ckpt && !s->family) {
		/* the family from the tensors' names */
		struct ckpt c;

		rc = ckpt_open(&c, s->w);
		if (!rc && !(s->family = detect(&c)))
			rc = error("%s: which model family is this? give --layout llama, gpt2, bert or "
				   "torch (or --config with a model_type)", s->w);
		ckpt_free(&c);
	}
	if (!rc && s->family)
		s->layout = families[s->family].layout;
	if (!rc)
		rc = apply(s, cfg && doc.root ? doc.root : NULL, cfg ? in.name : NULL);
	if (!rc && cfg)
		snprintf(s->config_read, sizeof(s->config_read), "%s", cfg); /* for meta */
	if (cfg) {
		json_doc_free(&doc);
		input_free(&in);
	}
	return rc;
}

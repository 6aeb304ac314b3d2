/*
 * model.c: one attention layer out of a checkpoint (model.h): the model
 * families' tensor names, the module picked, and config.json.  The
 * checkpoint's files and names are checkpoint.c's.
 */
#include "load/model.h"
#include "load/families.h"
#include "load/rope_scaling.h"
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

/* the key a family's config.json gives its heads under */
static const char *heads_key(const struct problem_spec *s)
{
	return (s->mtype ? s->mtype->family : s->family) == FAMILY_GPT2 ? "n_head"
								       : "num_attention_heads";
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

	for (size_t f = 1; f < n_families; f++)
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

/* the module name[0..len) lies under prefix[0..plen) (a whole component) */
static int under_prefix(const char *name, size_t len, const char *prefix, size_t plen)
{
	return !plen || (len >= plen && !strncmp(name, prefix, plen) &&
			 (len == plen || name[plen] == '.'));
}

/* name[0..len) has a component "language_model": an image-text model's
 * text model (language_model.model.layers..., model.language_model.layers...) */
static int in_text_model(const char *name, size_t len)
{
	static const char word[] = "language_model";
	const size_t w = sizeof(word) - 1;

	for (size_t at = 0; at + w <= len; at++)
		if ((!at || name[at - 1] == '.') && !strncmp(name + at, word, w) &&
		    (at + w == len || name[at + w] == '.'))
			return 1;
	return 0;
}

/* The module to read, into module (without its trailing '.'): --prefix
 * alone names it whole; with --layer, the layer's module under it. */
static int pick_module(const struct ckpt *c, const struct problem_spec *s,
		       const struct family *fam, char *module, size_t size)
{
	size_t count = 0, lo = SIZE_MAX, hi = 0, matched = 0, plen = 0;
	const char *first = NULL, *second = NULL, *any[2] = { NULL, NULL };
	size_t first_len = 0, second_len = 0, any_len[2] = { 0, 0 };

	if (s->prefix) {
		plen = strlen(s->prefix);
		while (plen && s->prefix[plen - 1] == '.')
			plen--;
	}
	if (s->prefix && !s->has_layer) {
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

		if (len < 0 || !under_prefix(c->names[i].name, (size_t)len, s->prefix, plen) ||
		    (s->text_model && !s->prefix && !in_text_model(c->names[i].name, (size_t)len)))
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
	if (!count && plen)
		return error("%s: no %s attention under \"%.*s\": no tensor named %.*s.*.%s",
			     c->path, fam->name, (int)plen, s->prefix, (int)plen, s->prefix, fam->key);
	if (!count && s->text_model)
		return error("%s: no %s attention in the text model: no tensor named "
			     "*language_model.*.%s (give --prefix)", c->path, fam->name, fam->key);
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

/* the name of the module's tensor suffix, into name */
static const char *tensor_name(char *name, size_t size, const char *module, const char *suffix)
{
	snprintf(name, size, "%s%s%s", module, *module ? "." : "", suffix);
	return name;
}

/*
 * Every tensor of the module is one the family's table names: any other
 * (a q_norm, sinks, a fused projection) would change the attention, so it
 * stops the run, named, rather than be left out.  0, or -1 said.
 */
static int all_known(const struct ckpt *c, const struct family *fam, const char *module,
		     const struct problem_spec *s)
{
	const size_t mlen = strlen(module);

	for (size_t i = 0; i < c->n_names; i++) {
		const char *name = c->names[i].name, *suffix = name + mlen + (mlen ? 1 : 0), *what;
		size_t k;

		if (mlen && (strncmp(name, module, mlen) || name[mlen] != '.'))
			continue;
		for (k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++)
			if (!strcmp(fam->t[k].suffix, suffix))
				break;
		if (k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix)
			continue;
		what = family_tensor_unread(suffix);
		if (what)
			return error("%s: \"%s\": %s", c->path, name, what);
		return error("%s: \"%s\": a tensor of the attention module that mha does not know "
			     "for %s%s%s%s: it may change the attention, so the run stops rather "
			     "than leave it out", c->path, name, fam->name,
			     s->mtype && *s->mtype->type ? " (model_type \"" : "",
			     s->mtype && *s->mtype->type ? s->mtype->type : "",
			     s->mtype && *s->mtype->type ? "\")" : "");
	}
	return 0;
}

/*
 * The biases the model type's code adds, against those the checkpoint
 * holds (with a config.json to say): one it would not add is refused, as
 * is one it would add that is missing.  0, or -1 said.
 */
static int check_biases(const struct ckpt *c, const struct problem_spec *s, const char *module,
			const struct family *fam)
{
	const struct model_type *t = s->mtype;

	if (!t || !s->config_bias || t->bias == BIAS_ANY)
		return 0;
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++) {
		const int b = fam->t[k].what;
		const int adds = t->bias == BIAS_FLAG ? s->config_bias == 2 : t->bias == BIAS_QKV
			? b != BO : 0;
		char name[PATH_TEXT];
		const int has = ckpt_find(c, tensor_name(name, sizeof(name), module,
							 fam->t[k].suffix)) >= 0;

		if (b < BQ || b > BO || adds == has)
			continue;
		if (has)
			return error("%s: \"%s\": %s's attention adds no such bias%s, so the run "
				     "stops rather than guess which is right", c->path, name, t->type,
				     t->bias == BIAS_FLAG ? " (config.json's attention_bias is false)"
				     : "");
		return ckpt_missing(c, name, t->bias == BIAS_FLAG
				    ? ", which config.json's attention_bias true says there is" : "");
	}
	return 0;
}

/* rotary_emb.inv_freq, as older checkpoints kept it: the frequencies the
 * rotation uses (θ^(−2i/R)) to the precision it was stored in, or refused */
static int check_inv_freq(const matrix *m, const struct problem_spec *s, const weights *w,
			  const char *name, const char *path)
{
	const size_t qf = out_features(&w->m[WQ], w->layout);
	const size_t R = s->cfg.rope.dim ? s->cfg.rope.dim : s->heads ? qf / s->heads : 0;
	const double theta = s->cfg.rope.theta ? s->cfg.rope.theta : 10000;

	if (!s->cfg.rope.mode || s->rope_cos || !R)
		return 0; /* not turned, or by tables given */
	if (matrix_size(m) != R / 2)
		return error("%s: \"%s\" holds %zu frequencies, but the rotation turns %zu features "
			     "(%zu pairs)", path, name, matrix_size(m), R, R / 2);
	for (size_t i = 0; i < R / 2; i++) {
		const double want = pow(theta, -(double)(2 * i) / (double)R);

		/* bfloat16 keeps 8 bits: a scaled rotation is off by far more */
		if (!(fabs(m->v[i] - want) <= want / 256))
			return error("%s: \"%s\"[%zu] is %.9g, but rope_theta %g gives %.9g: the "
				     "checkpoint's rotation is not the one config.json describes "
				     "(a scaled rope?)", path, name, i, m->v[i], theta, want);
	}
	return 0;
}

int model_load(weights *w, struct problem_spec *s, const char *path)
{
	struct ckpt c;
	const struct family *fam;
	char module[4096];
	matrix inv_freq = { 0 };
	char inv_name[PATH_TEXT] = "";
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
	/* what is missing first, then what is there that mha does not read */
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++) {
		char name[PATH_TEXT];

		if (fam->t[k].required &&
		    ckpt_find(&c, tensor_name(name, sizeof(name), module, fam->t[k].suffix)) < 0) {
			rc = ckpt_missing(&c, name, "");
			ckpt_free(&c);
			return rc;
		}
	}
	if (all_known(&c, fam, module, s) || check_biases(&c, s, module, fam)) {
		ckpt_free(&c);
		return -1;
	}
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix && !rc; k++) {
		char name[PATH_TEXT], src[2 * PATH_TEXT];
		matrix m;

		tensor_name(name, sizeof(name), module, fam->t[k].suffix);
		if (ckpt_find(&c, name) < 0) {
			if (fam->t[k].required)
				rc = ckpt_missing(&c, name, "");
			continue;
		}
		if (fam->t[k].what == T_IGNORED)
			continue;
		if (ckpt_read(&m, &c, name, src, sizeof(src))) {
			rc = -1;
			break;
		}
		if (fam->t[k].what == T_INV_FREQ) {
			inv_freq = m;
			snprintf(inv_name, sizeof(inv_name), "%s", name);
		} else if (fam->t[k].what == T_TORCH_KEY) {
			rc = weights_put_key(w, fam->t[k].suffix, &m, src);
		} else if (fam->t[k].what == T_PACKED_W || fam->t[k].what == T_PACKED_B) {
			/* GPT-2's c_attn: Q | K | V side by side */
			const int base = fam->t[k].what == T_PACKED_W ? WQ : BQ;
			char shape[64];

			if (m.rank != (fam->t[k].what == T_PACKED_W ? 2u : 1u) || m.dim[m.rank - 1] % 3) {
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
	/* a checkpoint does not hold its heads: 1 would be a guess */
	if (!rc && !(s->given & (GIVEN_HEADS | CONFIG_HEADS)))
		rc = error("%s: how many heads? %s: give --heads", path, s->config_read[0] ?
			   "config.json does not say" : "no config.json beside the checkpoint says");
	if (!rc && inv_freq.rank)
		rc = check_inv_freq(&inv_freq, s, w, inv_name, path);
	matrix_free(&inv_freq);
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

/* layer_types' entry for the layer the run takes: 1 sliding, 0 not, -1 said */
static int layer_type(const cJSON *types, const char *path, const struct problem_spec *s)
{
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
	if (!strcmp(t->valuestring, "sliding_attention"))
		return 1;
	if (!strcmp(t->valuestring, "full_attention"))
		return 0;
	return error("%s: layer_types[%zu] is \"%.40s\", expected \"sliding_attention\" or "
		     "\"full_attention\"", path, s->layer, t->valuestring);
}

/*
 * Whether the layer the run takes slides its window, by the type's rule
 * (families.h): Mistral every layer; Qwen2 use_sliding_window, and layers
 * from max_window_layers, or layer_types; Gemma 2 layer_types, else the
 * even layers; SmolLM3 use_sliding_window and layer_types.  1, 0, or -1 said.
 */
static int sliding(const cJSON *root, const char *path, const struct problem_spec *s)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	const enum slide_rule rule = s->mtype->slide;
	size_t from = 0;
	int use = rule != SLIDE_TYPES, rc;

	if (rule == SLIDE_ALL)
		return 1;
	if (rule == SLIDE_QWEN || rule == SLIDE_TYPES) {
		if (config_bool(root, path, "use_sliding_window", &use) < 0)
			return -1;
		if (!use)
			return 0;
	}
	if (types && !cJSON_IsNull(types))
		return layer_type(types, path, s);
	if (rule == SLIDE_EVEN) {
		if (!s->has_layer)
			return error("%s: %s slides its window on every other layer: give --layer",
				     path, s->mtype->type);
		return s->layer % 2 == 0;
	}
	if (rule == SLIDE_TYPES)
		return error("%s: use_sliding_window without layer_types: which layers slide is not "
			     "said; give --window, or leave it out with --window none", path);
	/* Qwen2: layers from max_window_layers (all without it) */
	if ((rc = config_count(root, path, "max_window_layers", &from)) < 0)
		return -1;
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

/* key of root as a list entry for the layer the run takes: a whole number
 * from 0 into *out; 1, 0 absent, -1 said */
static int config_layer_entry(const cJSON *root, const char *path, const char *key,
			      const struct problem_spec *s, size_t *out)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, key), *e;

	if (!list || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list))
		return bad_type(path, key, "a list");
	if (!s->has_layer)
		return error("%s: %s differs by layer: give --layer", path, key);
	e = cJSON_GetArrayItem(list, (int)(s->layer < 1000000 ? s->layer : 1000000));
	if (!e)
		return error("%s: %s has no entry for layer %zu", path, key, s->layer);
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || e->valuedouble > 1e15 ||
	    e->valuedouble != floor(e->valuedouble))
		return error("%s: %s[%zu] is not a whole number from 0", path, key, s->layer);
	*out = (size_t)e->valuedouble;
	return 1;
}

/* SmolLM3's layers without position encoding: no_rope_layers[layer] 0, or
 * (without the list) every no_rope_layer_interval-th layer.  1 the layer
 * turns, 0 not, -1 said. */
static int layer_turns(const cJSON *root, const char *path, const struct problem_spec *s)
{
	size_t use = 1, every = 4;
	int rc = config_layer_entry(root, path, "no_rope_layers", s, &use);

	if (rc)
		return rc < 0 ? -1 : use != 0;
	if (config_count(root, path, "no_rope_layer_interval", &every) < 0)
		return -1;
	if (!s->has_layer)
		return error("%s: every %zu%s layer has no rotary embedding: give --layer", path,
			     every, every == 2 ? "nd" : every == 3 ? "rd" : "th");
	return (s->layer + 1) % every != 0;
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
	int rc;

	if (!(g & GIVEN_ROPE))
		s->cfg.rope.mode = t->rope;
	if (root && reads(t, "no_rope_layers") && !(g & GIVEN_ROPE)) {
		if ((rc = layer_turns(root, path, s)) < 0)
			return -1;
		if (!rc)
			s->cfg.rope.mode = MHA_ROPE_NONE;
	}
	if (!root || !reads(t, "rope_theta"))
		return 0;
	if (config_number(root, path, "rope_theta", &theta) < 0 ||
	    config_number(root, path, "partial_rotary_factor", &partial) < 0)
		return -1;
	sc = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
	/* --rope-scaling's object wins (model_config); tables given replace it */
	if (sc && !cJSON_IsNull(sc) && !s->rope_scaling && !s->rope_cos) {
		double max_pos = 0;

		if (config_number(root, path, "max_position_embeddings", &max_pos) < 0 ||
		    rope_scaling_read(s, sc, path, max_pos))
			return -1;
	}
	if (partial > 1)
		return bad_type(path, "partial_rotary_factor", "a number from 0 to 1");
	if (!s->cfg.rope.mode)
		return 0; /* this layer does not turn: the rest is not used */
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
		if (rc && !s->cfg.softcap)
			s->cfg.softcap = v;
	}
	return 0;
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
		    config_bool(root, path, "attention_bias", &flag) < 0)
			return -1;
		s->config_bias = 1 + flag;
		if (config_heads(s, path, heads, kv))
			return -1;
	}
	if (t->family == FAMILY_NONE || t->family == FAMILY_TORCH)
		return 0; /* the heads alone */
	/* decoders: causal; BERT: not, unless is_decoder */
	if (t->family != FAMILY_BERT && !(g & GIVEN_CAUSAL))
		s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
	if (apply_rope(s, root, path, heads, hidden, head_dim) || (root && apply_scale(s, root, path)))
		return -1;
	if (!root)
		return 0;
	if (reads(t, "use_qk_norm") && config_bool(root, path, "use_qk_norm", &flag) > 0 && flag)
		return error("%s: use_qk_norm: Command R+ normalises each head's q and k with a "
			     "LayerNorm, which mha does not compute yet", path);
	if (reads(t, "clip_qkv") && cJSON_GetObjectItemCaseSensitive(root, "clip_qkv") &&
	    !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "clip_qkv")))
		return error("%s: clip_qkv: OLMo clamps Q, K and V to +-clip_qkv, which mha does not "
			     "compute yet", path);
	if (reads(t, "sliding_window")) {
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

/* Every key of obj (the config, or its text_config) is one t knows, or
 * the run stops naming it, at its line and column.  0, or -1 said. */
static int known_keys(const json_doc *doc, const cJSON *obj, const struct model_type *t)
{
	const char *list[512], *said = NULL;
	const size_t n = model_type_known(t, list, sizeof(list) / sizeof(list[0]));
	char why[256];

	if (config_string(obj, "config.json", "model_type", &said) < 0)
		said = NULL;
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
		return error("%s: model_type \"%s\" is not one mha reads (%s): give --layout llama, "
			     "gpt2, bert or torch to read it as one of those, its keys held to that "
			     "family's", path, type, model_types_read(list, sizeof(list)));
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
		if (!rc && !(s->family = detect(&c)))
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
	if (!rc)
		rc = apply(s, attn, cfg ? in.name : NULL);
	if (!rc && s->rope_scaling) {
		double max_pos = 0;

		rc = (attn && config_number(attn, in.name, "max_position_embeddings", &max_pos) < 0) ||
		     rope_scaling_option(s, max_pos) ? -1 : 0;
	}
	if (!rc && ckpt && cfg && !(s->given & (GIVEN_HEADS | CONFIG_HEADS)) && s->mtype->heads) {
		/* transformers' default, for a config.json that leaves the heads
		 * out (LLaVA's text_config); none known: model_load refuses */
		s->heads = s->mtype->heads;
		s->given |= CONFIG_HEADS;
		rc = config_heads(s, in.name, s->heads, 0);
	}
	if (!rc && cfg)
		snprintf(s->config_read, sizeof(s->config_read), "%s", cfg); /* for meta */
	if (cfg) {
		json_doc_free(&doc);
		input_free(&in);
	}
	return rc;
}

/*
 * model.c: one attention layer out of a checkpoint (model.h): the module
 * picked by the family's names (families.c), its tensors read and held to
 * the family's rules.  The checkpoint's files and names are checkpoint.c's;
 * config.json is config.c's.
 */
#include "load/model.h"
#include "load/said.h"
#include "load/families.h"
#include "load/complete.h"
#include "load/latent.h"
#include "read/checkpoint.h"
#include "util/msg.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Which family's attention the names hold: the only one with modules (of
 * --layout's families: the others share their names, a model_type says) */
model_family model_detect(const struct ckpt *c)
{
	model_family found = FAMILY_NONE;

	for (size_t f = 1; f <= FAMILY_TORCH; f++)
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

/*
 * A fused projection m, (rows, in) or a bias (rows), as Q, K and V by the
 * layout (families.h), put into w: H query heads and G key/value heads of d
 * = rows / (H + 2G) features.  0, or -1 said.
 */
static int split_fused(weights *w, const matrix *m, const struct problem_spec *s,
		       enum fused_layout lay, int bias, const char *name, const char *src)
{
	const size_t H = s->heads, G = s->kv_heads ? s->kv_heads : s->heads;
	const size_t rows = m->dim[0], cols = bias ? 1 : m->rank == 2 ? m->dim[1] : 0;
	matrix part[3] = { { 0 } };
	size_t d;
	char shape[64];
	int rc = 0;

	if (!(s->given & (GIVEN_HEADS | CONFIG_HEADS)))
		return error("%s: \"%s\" holds Q, K and V, which the heads split: how many heads? "
			     "give --heads", s->config_read[0] ? path_shown(s->config_read) : src, name);
	if (m->rank != (bias ? 1u : 2u) || rows % (H + 2 * G) || (lay == FUSED_PER_HEAD && G != H)) {
		char hs[PATH_TEXT + 128], gs[PATH_TEXT + 256];

		model_heads_said(s, 0, H, hs, sizeof(hs));
		if (s->kv_from[0] || (s->given & (CONFIG_KV_HEADS | GIVEN_KV_HEADS)))
			model_heads_said(s, 1, G, gs, sizeof(gs));
		else
			snprintf(gs, sizeof(gs), "as many key/value heads (no num_key_value_heads)");
		return error("%s: \"%s\" is %s, but Q, K and V of %s and %s %s", src, name,
			     matrix_shape(m, shape, sizeof(shape)), hs, gs,
			     lay == FUSED_PER_HEAD && G != H ? "cannot be fused head by head (its "
			     "layout needs as many key/value heads as heads)" : bias ?
			     "need a vector of (heads + 2 key/value heads) x head_dim" :
			     "need (heads + 2 key/value heads) x head_dim rows");
	}
	d = rows / (H + 2 * G);
	for (int q = 0; q < 3 && !rc; q++)
		rc = matrix_alloc(&part[q], m->rank, (q ? G : H) * d, bias ? 1 : cols, 1);
	for (size_t r = 0; r < rows && !rc; r++) {
		size_t which, at;

		if (lay == FUSED_PER_HEAD) {
			/* head h's [q | k | v] (GPT-NeoX's view(heads, 3 * d)) */
			which = r % (3 * d) / d;
			at = r / (3 * d) * d + r % d;
		} else if (lay == FUSED_GROUPED) {
			/* group g's [H/G q heads | k | v] (Falcon's new_decoder_architecture) */
			const size_t per = H / G, g = r / ((per + 2) * d), j = r % ((per + 2) * d) / d;

			which = j < per ? 0 : j == per ? 1 : 2;
			at = (j < per ? g * per + j : g) * d + r % d;
		} else {
			which = r < H * d ? 0 : r < (H + G) * d ? 1 : 2;
			at = r - (which == 0 ? 0 : which == 1 ? H * d : (H + G) * d);
		}
		memcpy(part[which].v + at * cols, m->v + r * cols, cols * sizeof(double));
	}
	for (int q = 0; q < 3 && !rc; q++)
		rc = weights_put_key(w, weight_names[(bias ? BQ : WQ) + q], &part[q], src);
	for (int q = 0; q < 3; q++)
		matrix_free(&part[q]);
	return rc ? -1 : 0;
}

/* the features each of m's rows or columns projects to: out of (out, in) or (in, out) */
static size_t out_features(const matrix *m, weight_layout layout)
{
	return m->rank != 2 ? 0 : layout == LAYOUT_TORCH ? m->dim[0] : m->dim[1];
}

/*
 * hidden_size and head_dim (said, derived, or the class's defaults), against
 * the weights read, as transformers' modules would refuse to load them:
 * W_Q takes hidden_size features and makes heads x head_dim.  0, or -1 said.
 */
static int config_shapes(const weights *w, const struct problem_spec *s, size_t qf)
{
	const matrix *m = &w->m[WQ];
	const size_t din = m->rank != 2 ? 0 : w->layout == LAYOUT_TORCH ? m->dim[1] : m->dim[0];
	const char *hkey = model_hidden_key(s);
	const size_t H = s->heads, hd = s->config_head_dim;
	char note[96], note2[96];

	if (s->config_hidden && din && din != s->config_hidden)
		return error("'%s': %s %zu%s, but W_Q from %s takes %zu features", s->config_read,
			     hkey, s->config_hidden, config_default_note(s, hkey, note, sizeof(note)),
			     w->src[WQ], din);
	if (!hd || (s->given & GIVEN_HEADS) || qf == H * hd)
		return 0;
	if (s->config_head_derived)
		return error("'%s': no head_dim, and %s %zu%s / %s %zu makes heads %zu features wide, "
			     "but W_Q from %s has %zu features, not %zu x %zu%s%s%s", s->config_read,
			     hkey, s->config_hidden,
			     config_default_note(s, hkey, note, sizeof(note)), model_heads_key(s), H,
			     hd, w->src[WQ], qf, H, hd, s->kv_from[0] ? " (split by " : "",
			     s->kv_from, s->kv_from[0] ? ")" : "");
	return error("'%s': head_dim %zu%s, but W_Q from %s has %zu features, not %s %zu%s x %zu",
		     s->config_read, hd, config_default_note(s, "head_dim", note, sizeof(note)),
		     w->src[WQ], qf, model_heads_key(s), H,
		     config_default_note(s, model_heads_key(s), note2, sizeof(note2)), hd);
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
	char hk[96], kk[96];

	if (!qf || !kf)
		return 0;
	if (!(s->given & (CONFIG_HEADS | CONFIG_KV_HEADS | CONFIG_ROPE_DIM)))
		return config_shapes(w, s, qf);
	if (qf % H)
		return heads ? error("'%s': %s %zu%s does not divide the %zu features of W_Q from "
				     "%s", path, model_heads_key(s), H,
				     config_default_note(s, model_heads_key(s), hk, sizeof(hk)), qf,
				     w->src[WQ]) : 0;
	if ((heads || kv) && kf != G * (qf / H))
		return error("'%s': %s %zu%s and %s %zu%s make %zu key/value features (d_k %zu), but "
			     "W_K from %s has %zu", path, heads ? model_heads_key(s) : "--heads", H,
			     config_default_note(s, model_heads_key(s), hk, sizeof(hk)),
			     kv ? "num_key_value_heads" : s->given & GIVEN_KV_HEADS ? "--kv-heads" :
			     "key/value heads", G, kv ? config_default_note(s, "num_key_value_heads",
			     kk, sizeof(kk)) : s->given & GIVEN_KV_HEADS ? "" :
			     " (no num_key_value_heads: as many as the heads)",
			     G * (qf / H), qf / H, w->src[WK], kf);
	if (config_shapes(w, s, qf))
		return -1;
	if ((s->given & CONFIG_ROPE_DIM) && s->cfg.rope.dim > qf / H)
		return error("'%s': partial_rotary_factor turns %zu features of each head, but a head "
			     "has d_k = %zu (W_Q from %s, %zu heads): head_dim or hidden_size is wrong",
			     path, s->cfg.rope.dim, qf / H, w->src[WQ], H);
	return 0;
}

const char *model_family_name(model_family f)
{
	return f > FAMILY_NONE && (size_t)f < n_families ? families[f].name : NULL;
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
		const char *name = c->names[i].name, *suffix = name + mlen + (mlen ? 1 : 0), *what,
			   *type;
		size_t k;

		if (mlen && (strncmp(name, module, mlen) || name[mlen] != '.'))
			continue;
		for (k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++) {
			const size_t n = strlen(fam->t[k].suffix);

			/* an FP8 weight's block scales are read with it */
			if (!strcmp(fam->t[k].suffix, suffix) ||
			    (!strncmp(fam->t[k].suffix, suffix, n) && !strcmp(suffix + n, "_scale_inv")))
				break;
		}
		/* a q/k norm's weights where the type normalises, or --norm says it does */
		if (k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix &&
		    (fam->t[k].what != T_SINKS || (s->mtype && s->mtype->sinks)) &&
		    ((fam->t[k].what != T_Q_NORM && fam->t[k].what != T_K_NORM) || s->model_norm ||
		     ((s->given & GIVEN_NORM) && s->cfg.norm.kind)))
			continue;
		what = family_tensor_unread(suffix);
		type = s->type_said[0] ? s->type_said : s->mtype ? s->mtype->type : "";
		if (what)
			return error("%s: \"%s\": %s", c->path, name, what);
		return error("%s: \"%s\": a tensor of the attention module that mha does not know "
			     "for %s%s%s%s: it may change the attention, so the run stops rather "
			     "than leave it out", c->path, name, fam->name,
			     *type ? " (model_type \"" : "", type, *type ? "\")" : "");
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
	const int flag = t && (t->bias == BIAS_FLAG || t->bias == BIAS_FLAG_QKV);
	const char *key = model_type_bias_key(t);
	char why[160], note[96];

	if (s->given & GIVEN_BIASES) {
		/* --biases: those, and only those */
		for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++) {
			const int fused = fam->t[k].what == T_FUSED_B;
			const int b = fused ? BQ : fam->t[k].what;
			/* a fused bias is Q's, K's and V's at once */
			const unsigned bits = fused ? 7u : b >= BQ && b <= BO ? 1u << (b - BQ) : 0;
			char name[PATH_TEXT];
			const int has = ckpt_find(c, tensor_name(name, sizeof(name), module,
								 fam->t[k].suffix)) >= 0;

			if (!bits || has == ((s->biases & bits) == bits))
				continue;
			if (has)
				return error("%s: \"%s\": a bias --biases does not name, so the run stops "
					     "rather than leave it out", c->path, name);
			return ckpt_missing(c, name, " (--biases names it)");
		}
		return 0;
	}
	if (!t || !s->config_bias || t->bias == BIAS_ANY)
		return 0;
	snprintf(why, sizeof(why), " (config.json's %s is %s%s)", key,
		 s->config_bias == 2 ? "true" : "false", config_default_note(s, key, note,
									  sizeof(note)));
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix; k++) {
		/* a fused projection's bias is Q's, K's and V's */
		const int b = fam->t[k].what == T_FUSED_B ? BQ : fam->t[k].what;
		const int adds = t->bias == BIAS_FLAG ? s->config_bias == 2 : t->bias == BIAS_QKV
			? b != BO : t->bias == BIAS_FLAG_QKV ? s->config_bias == 2 && b != BO
			: t->bias == BIAS_ALL;
		char name[PATH_TEXT];
		const int has = ckpt_find(c, tensor_name(name, sizeof(name), module,
							 fam->t[k].suffix)) >= 0;

		if (b < BQ || b > BO || adds == has)
			continue;
		if (has)
			return error("%s: \"%s\": %s's attention adds no such bias%s, so the run "
				     "stops rather than guess which is right", c->path, name, t->type,
				     flag ? why : "");
		return ckpt_missing(c, name, flag ? why : "");
	}
	return 0;
}

/* rotary_emb.inv_freq, as older checkpoints kept it: the frequencies the
 * rotation uses (the library's, rope_scaling's included) to the precision
 * it was stored in, or refused */
static int check_inv_freq(const matrix *m, const struct problem_spec *s, const weights *w,
			  const char *name, const char *path)
{
	const mha_rope *r = &s->cfg.rope;
	const size_t qf = out_features(&w->m[WQ], w->layout);
	const size_t R = r->dim ? r->dim : s->heads ? qf / s->heads : 0;

	if (!r->mode || s->rope_cos || !R || R % 2 ||
	    (r->scaling.type == MHA_ROPE_SCALING_LONGROPE && s->n_rope_factors != R / 2))
		return 0; /* not turned, by tables given, or refused later (checks.c) */
	if (matrix_size(m) != R / 2)
		return error("%s: \"%s\" holds %zu frequencies, but the rotation turns %zu features "
			     "(%zu pairs)", path, name, matrix_size(m), R, R / 2);
	for (size_t i = 0; i < R / 2; i++) {
		const double want = mha_rope_frequency(r, R, i);

		/* bfloat16 keeps 8 bits: a scaled rotation is off by far more */
		if (!(fabs(m->v[i] - want) <= want / 256))
			return error("%s: \"%s\"[%zu] is %.9g, but config.json's rope_theta %g%s "
				     "gives %.9g: the checkpoint's rotation is not the one config.json "
				     "describes (a scaled rope?)", path, name, i, m->v[i],
				     r->theta ? r->theta : 10000, r->scaling.type ? " and rope_scaling"
				     : "", want);
	}
	return 0;
}

/*
 * An FP8 weight m (out x in, as stored) times its block scales, the tensor
 * NAME_scale_inv beside it: (ceil(out/b0), ceil(in/b1)) finite numbers
 * above 0, block (r, c) scaling rows r*b0 … and columns c*b1 …, the last
 * ones partial.  fp8 times a float32 scale is exact in a double.  0, or -1 said.
 */
static int block_scales(matrix *m, struct ckpt *c, const char *name, const struct problem_spec *s)
{
	const size_t b0 = s->fp8_block[0] ? s->fp8_block[0] : 128;
	const size_t b1 = s->fp8_block[1] ? s->fp8_block[1] : 128;
	char sname[PATH_TEXT + 16], src[2 * PATH_TEXT], shape[64];
	matrix sc;
	size_t rows, cols;
	int rc = 0;

	snprintf(sname, sizeof(sname), "%s_scale_inv", name);
	if (m->rank != 2)
		return error("%s: \"%s\" is FP8 but %s: mha reads FP8 matrices, with block scales",
			     c->path, name, matrix_shape(m, shape, sizeof(shape)));
	if (ckpt_find(c, sname) < 0)
		return ckpt_missing(c, sname, ", the block scales an FP8 weight needs");
	if (ckpt_read(&sc, c, sname, src, sizeof(src)))
		return -1;
	rows = (m->dim[0] + b0 - 1) / b0;
	cols = (m->dim[1] + b1 - 1) / b1;
	if (sc.rank != 2 || sc.dim[0] != rows || sc.dim[1] != cols) {
		rc = error("%s: \"%s\" is %s, but \"%s\" (%zux%zu) needs %zux%zu: blocks of %zux%zu",
			   c->path, sname, matrix_shape(&sc, shape, sizeof(shape)), name, m->dim[0],
			   m->dim[1], rows, cols, b0, b1);
	} else if (c->last_f8) {
		rc = error("%s: \"%s\" is FP8 itself: block scales are float numbers", c->path,
			   sname);
	}
	for (size_t i = 0; !rc && i < rows * cols; i++)
		if (!(sc.v[i] > 0) || !isfinite(sc.v[i]))
			rc = error("%s: \"%s\"[%zu][%zu] is %g: a block scale is a finite number "
				   "above 0", c->path, sname, i / cols, i % cols, sc.v[i]);
	for (size_t r = 0; !rc && r < m->dim[0]; r++)
		for (size_t k = 0; k < m->dim[1]; k++)
			m->v[r * m->dim[1] + k] *= sc.v[(r / b0) * cols + k / b1];
	matrix_free(&sc);
	return rc;
}

/* the tensor just read (m, as c read it) with its block scales when it is FP8;
 * a scale beside a weight that is not FP8 is refused */
static int fp8_weight(matrix *m, struct ckpt *c, const char *name, const struct problem_spec *s)
{
	char sname[PATH_TEXT + 16];

	if (c->last_f8)
		return block_scales(m, c, name, s);
	snprintf(sname, sizeof(sname), "%s_scale_inv", name);
	if (ckpt_find(c, sname) >= 0)
		return error("%s: \"%s\" scales an FP8 weight, but \"%s\" is not FP8", c->path, sname,
			     name);
	return 0;
}

/* a checkpoint's latent attention tensor i, (d_in, d_out) as --q-a-proj … would give it */
static int latent_tensor(matrix *m, int i, matrix *const extra[MODEL_EXTRA],
			 struct problem_spec *s, const char *path, const char *name,
			 const char *src)
{
	if (s->latent[i]) {
		matrix_free(m);
		return error("%s: the checkpoint has \"%s\": leave out %s", path, name,
			     latent_options[i]);
	}
	if (m->rank == 2 && matrix_transpose(m)) {
		matrix_free(m);
		return -1;
	}
	*extra[MODEL_LATENT + i] = *m;
	snprintf(s->latent_from[i], sizeof(s->latent_from[i]), "%s", src);
	s->latent[i] = s->latent_from[i];
	return 0;
}

/* DeepSeek's queries: q_proj alone, or q_b_proj after q_a_proj */
static int latent_queries(struct ckpt *c, const char *module)
{
	char qp[PATH_TEXT], qa[PATH_TEXT], qb[PATH_TEXT];
	const int p = ckpt_find(c, tensor_name(qp, sizeof(qp), module, "q_proj.weight")) >= 0;
	const int a = ckpt_find(c, tensor_name(qa, sizeof(qa), module, "q_a_proj.weight")) >= 0;
	const int b = ckpt_find(c, tensor_name(qb, sizeof(qb), module, "q_b_proj.weight")) >= 0;

	if (p && (a || b))
		return error("%s: \"%s\" and \"%s\": the queries come from q_proj alone or from "
			     "q_a_proj and q_b_proj, not both", c->path, qp, a ? qa : qb);
	if (!p && !a && !b)
		return ckpt_missing(c, qp, " (or q_a_proj and q_b_proj)");
	if (a != b)
		return ckpt_missing(c, a ? qb : qa, a ? ", which follows q_a_proj" : ", before q_b_proj");
	return 0;
}

int model_load(weights *w, matrix *const extra[MODEL_EXTRA], struct problem_spec *s,
	       const char *path)
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
	if (!s->family && !(s->family = model_detect(&c))) {
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
		/* the q/k norm's weights, where the type normalises (and --norm none does not
		 * leave the norm out) */
		const int norm = (fam->t[k].what == T_Q_NORM || fam->t[k].what == T_K_NORM) &&
				 s->model_norm && s->cfg.norm.kind;

		if ((fam->t[k].required || norm) &&
		    ckpt_find(&c, tensor_name(name, sizeof(name), module, fam->t[k].suffix)) < 0) {
			rc = ckpt_missing(&c, name, "");
			ckpt_free(&c);
			return rc;
		}
	}
	if (all_known(&c, fam, module, s) || check_biases(&c, s, module, fam) ||
	    (s->family == FAMILY_DEEPSEEK && latent_queries(&c, module))) {
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
		if (fam->t[k].what == T_IGNORED ||
		    ((fam->t[k].what == T_Q_NORM || fam->t[k].what == T_K_NORM) && !s->cfg.norm.kind))
			continue;
		if (ckpt_read(&m, &c, name, src, sizeof(src))) {
			rc = -1;
			break;
		}
		if (fp8_weight(&m, &c, name, s)) {
			matrix_free(&m);
			rc = -1;
			break;
		}
		if (fam->t[k].what == T_INV_FREQ) {
			inv_freq = m;
			snprintf(inv_name, sizeof(inv_name), "%s", name);
		} else if (fam->t[k].what == T_SINKS && (s->given & GIVEN_SINKS) && !s->sinks) {
			matrix_free(&m); /* --sinks none: left out, as said */
		} else if (fam->t[k].what == T_SINKS) {
			/* gpt-oss's: the run's sinks, as --sinks would give them */
			if (s->sinks) {
				matrix_free(&m);
				rc = error("%s: the checkpoint has its attention's sinks (\"%s\"): leave "
					   "out --sinks", path, name);
				break;
			}
			*extra[MODEL_SINKS] = m;
			snprintf(s->sinks_from, sizeof(s->sinks_from), "%s", src);
			s->sinks = s->sinks_from;
		} else if (fam->t[k].what == T_Q_NORM || fam->t[k].what == T_K_NORM) {
			/* the norm's weights, as --q-norm and --k-norm would give them */
			const int q = fam->t[k].what == T_Q_NORM;

			if (q ? s->q_norm : s->k_norm) {
				matrix_free(&m);
				rc = error("%s: the checkpoint has its attention's %s_norm (\"%s\"): leave "
					   "out --%s-norm", path, q ? "q" : "k", name, q ? "q" : "k");
				break;
			}
			*extra[q ? MODEL_Q_NORM : MODEL_K_NORM] = m;
			snprintf(s->norm_from[!q], sizeof(s->norm_from[0]), "%s", src);
			if (q)
				s->q_norm = s->norm_from[0];
			else
				s->k_norm = s->norm_from[1];
		} else if (fam->t[k].what == T_FUSED_W || fam->t[k].what == T_FUSED_B) {
			rc = split_fused(w, &m, s, s->fused ? (enum fused_layout)s->fused : fam->fused,
					 fam->t[k].what == T_FUSED_B, name, src);
			matrix_free(&m);
		} else if (fam->t[k].what >= T_LATENT && fam->t[k].what < T_LATENT + N_LATENT) {
			rc = latent_tensor(&m, fam->t[k].what - T_LATENT, extra, s, path, name, src);
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


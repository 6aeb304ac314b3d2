/*
 * problem.c: reading an attention problem and checking it (problem.h):
 * the files, the labels, the shapes and the mask; the run's memory before
 * it starts; and the run itself, in float64 or float32.
 *
 * Shape errors name each matrix with the option and file it came from
 * ("W_Q from -w w.json is 4x3 but X from -x x.json has 5 columns") and
 * give both shapes.
 */
#include "problem.h"
#include "model.h"
#include "checkpoint.h"

#include "budget.h"
#include "cli.h"
#include "explain.h"
#include "files.h"
#include "input.h"
#include "read_json.h"
#include "safetensors.h"
#include "write.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "s" for a plural count: "%zu head%s" */
static const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

/* ---- reading ------------------------------------------------------------ */

static const char *const x_keys[] = { "output", "X", NULL };
static const char *const q_keys[] = { "Q", NULL };
static const char *const k_keys[] = { "K", NULL };
static const char *const v_keys[] = { "V", NULL };
static const char *const mask_keys[] = { "mask", NULL };

/* "The bear eats" or "New York, is, big": the labels, split at commas if any, else at blanks */
static char **split_tokens(const char *list, size_t *n)
{
	const int commas = strchr(list, ',') != NULL;
	char **out = NULL;
	size_t cap = 0;

	*n = 0;
	for (const char *p = list; *p;) {
		const char *start, *end;
		char *t;

		while (*p == ' ' || *p == '\t' || (!commas && *p == '\n'))
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && (commas ? *p != ',' : (*p != ' ' && *p != '\t' && *p != '\n')))
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (commas && *p == ',')
			p++;
		if (*n == cap) {
			char **more = realloc(out, (cap = cap ? cap * 2 : 16) * sizeof(*out));

			if (!more)
				goto nomem;
			out = more;
		}
		if (!(t = strndup(start, (size_t)(end - start))))
			goto nomem;
		out[(*n)++] = t;
	}
	return out;
nomem:
	for (size_t i = 0; i < *n; i++)
		free(out[i]);
	free(out);
	*n = 0;
	return NULL;
}

static void free_tokens(char **t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		free(t[i]);
	free(t);
}

/* One side's labels: split from opt's list, which must give one for each of
 * the rows of name; else those read with the matrix from (NULL: none). */
static int take_labels(char ***t, size_t *n, int *own, const char *list, const char *opt,
		       size_t rows, const char *name, const matrix *from)
{
	if (list) {
		*t = split_tokens(list, n);
		*own = 1;
		if (*n != rows)
			return error("%s gives %zu label%s but %s has %zu row%s", opt, *n, plural(*n),
				     name, rows, plural(rows));
	} else if (from && from->labels) {
		/* "tokens" in the JSON file, or a first column of names in the CSV */
		*t = from->labels;
		*n = from->n_labels;
	}
	return 0;
}

/* --tokens and --kv-tokens, one label a row: checked once the shapes are known */
static int set_labels(const struct problem_spec *s, struct problem *p, const mha_dims *d)
{
	struct labels *l = &p->labels;
	const char *xname = p->direct ? "Q" : "X",
		   *kvname = p->direct ? "K" : s->xk ? "X_k" : s->kv ? "X_kv" : "X";
	const matrix *qm = p->direct ? &p->q : &p->x;
	const matrix *km = p->direct ? &p->k : s->xk ? &p->xk : s->kv ? &p->kv : NULL;

	if (take_labels(&l->query, &l->n_query, &l->own_query, s->tokens, "--tokens", d->n_q, xname,
			qm) ||
	    take_labels(&l->key, &l->n_key, &l->own_key, s->kv_tokens, "--kv-tokens", d->n_kv, kvname,
			km))
		return -1;
	if (!l->key && l->query && !s->kv && !s->xk && d->n_kv == d->n_q &&
	    (!p->direct || s->tokens)) {
		/* self-attention: the keys are the queries; with Q, K and V given,
		 * --tokens as long as both names the keys too */
		l->key = l->query;
		l->n_key = l->n_query;
	}
	return 0;
}

/* A file larger than the run may use is refused before it is read. */
/* --mask m.safetensors: read in place by the safetensors reader, by its name
 * as -w tells a checkpoint (a pipe cannot be read so) */
static int is_safetensors(const char *path)
{
	char ext[16];

	file_extension(path, ext, sizeof(ext));
	return !strcmp(ext, "safetensors");
}

static int check_file_size(const char *path)
{
	struct stat st;
	char a[48], b[48];

	if (!path || !strcmp(path, "-") || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (unsigned long long)st.st_size <= (unsigned long long)budget_limit())
		return 0;
	return error("%s: the file is %s, more than --max-memory (%s)", path,
		     show_bytes(a, sizeof(a), (size_t)st.st_size),
		     show_bytes(b, sizeof(b), budget_limit()));
}

/*
 * Weights with W_Q alone (or any one or two of W_Q, W_K, W_V), as a
 * learner has them part way through a tutorial: each missing one is the
 * identity, so K = X (or X_kv) and V = X, said in a note.  The identity
 * must fit the weights given (W_Q d_model square for K = X): else an error
 * asking for the weight.  0, or -1 said.
 */
static int identity_for_missing(const struct problem_spec *s, struct problem *p)
{
	weights *w = &p->w;
	const size_t H = s->heads, G = s->kv_heads ? s->kv_heads : s->heads;
	const int n_proj = weights_has(w, WQ) + weights_has(w, WK) + weights_has(w, WV);
	const matrix *kv = s->xk ? &p->xk : s->kv ? &p->kv : &p->x;
	const char *kvname = s->xk ? "X_k" : s->kv ? "X_kv" : "X";
	const char *vname = s->xv ? "X_v" : kvname;
	const size_t in[3] = { matrix_cols(&p->x), matrix_cols(kv),
			       matrix_cols(s->xv ? &p->xv : kv) };
	const int given = weights_has(w, WQ) ? WQ : weights_has(w, WK) ? WK : WV;
	char have[32] = "", missing[32] = "", eqs[64] = "", src[64];
	size_t dk = 0;

	if (p->direct || n_proj == 0 || n_proj == 3)
		return 0;
	/* d_k as the given W_Q or W_K says; else (W_V alone) as Q = X says */
	if (weights_has(w, WQ) && w->m[WQ].dim[1] % H == 0)
		dk = w->m[WQ].dim[1] / H;
	else if (!weights_has(w, WQ) && weights_has(w, WK) && w->m[WK].dim[1] % G == 0)
		dk = w->m[WK].dim[1] / G;
	else if (!weights_has(w, WQ) && !weights_has(w, WK) && in[0] % H == 0)
		dk = in[0] / H;
	for (int i = WQ; i <= WV; i++) {
		const char *const who = i == WQ ? "Q" : i == WK ? "K" : "V";
		const char *const from = i == WQ ? "X" : i == WK ? kvname : vname;
		const size_t n = in[i - WQ], need = (i == WQ ? H : G) * dk;
		matrix m;

		if (weights_has(w, i))
			continue;
		if (weights_has(w, i + BQ - WQ))
			return error("%s from %s without %s", weight_names[i + BQ - WQ],
				     w->src[i + BQ - WQ], weight_names[i]);
		if (i != WV && dk && n != need)
			return error("no %s beside %s from %s: the identity in its place gives %s = %s, "
				     "%zu columns wide, but %s needs %zu (%s would have to be %zux%zu, "
				     "d_model square): give %s", weight_names[i], weight_names[given],
				     w->src[given], who, from, n, who, need, weight_names[given], n, n,
				     weight_names[i]);
		if (matrix_alloc(&m, 2, n, n, 1))
			return -1;
		for (size_t r = 0; r < n; r++)
			m.v[r * n + r] = 1;
		snprintf(src, sizeof(src), "the identity (no %s given)", weight_names[i]);
		free(w->src[i]);
		w->src[i] = strdup(src);
		if (!w->src[i]) {
			matrix_free(&m);
			return error("out of memory");
		}
		w->m[i] = m;
		snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
			 missing[0] ? " and " : "", weight_names[i]);
		snprintf(eqs + strlen(eqs), sizeof(eqs) - strlen(eqs), "%s%s = %s",
			 eqs[0] ? ", " : "", who, from);
	}
	for (int i = WQ; i <= WV; i++)
		if (!strchr(w->src[i], ' ') || strncmp(w->src[i], "the identity", 12))
			snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s",
				 have[0] ? " and " : "", weight_names[i]);
	notice("%s gives %s without %s: %s the identity, so %s", w->src[given], have, missing,
	       strchr(missing, ' ') ? "each is" : "it is", eqs);
	return 0;
}

/* --kt: m read as K^T, (d, n) or (B, d, n), turned into K, (n, d) or (B, n, d); 0 or -1 said */
static int transpose(matrix *m)
{
	const size_t B = m->rank == 3 ? m->dim[0] : 1, r = matrix_rows(m), c = matrix_cols(m);
	matrix t;

	if (m->rank == 3 ? matrix_alloc(&t, 3, B, c, r) : matrix_alloc(&t, 2, c, r, 1))
		return -1;
	for (size_t b = 0; b < B; b++)
		for (size_t i = 0; i < r; i++)
			for (size_t j = 0; j < c; j++)
				t.v[b * r * c + j * r + i] = m->v[b * r * c + i * c + j];
	t.is_f32 = m->is_f32;
	matrix_free(m);
	*m = t;
	return 0;
}
/*
 * --positions: one list (JSON, CSV row or column, 1-D .npy) for queries and
 * keys alike, kept in p->pos_q; or a JSON object {"q": [..], "k": [..]}
 * (either may be left out): p->pos_q and p->pos_k.  Checked in check_rope.
 */
static int read_positions(struct problem *p, const char *path)
{
	input_file f;
	json_doc doc = { 0 };
	int rc;

	if (input_load(&f, path)) {
		input_free(&f);
		return -1;
	}
	if (input_format(&f) == FORMAT_IN_JSON &&
	    f.data[strspn((const char *)f.data, " \t\r\n")] == '{') {
		rc = json_parse(&doc, &f);
		if (!rc) {
			static const char *const keys[] = { "q", "k" };

			/* {"q": .., "keys": ..} would leave the keys at their default positions */
			rc = json_known_keys(&doc, doc.root, keys, 2,
					     "positions are under \"q\" (the queries') and \"k\" "
					     "(the keys')");
		}
		if (!rc) {
			const cJSON *q = cJSON_GetObjectItemCaseSensitive(doc.root, "q");
			const cJSON *k = cJSON_GetObjectItemCaseSensitive(doc.root, "k");

			if (!q && !k)
				rc = error("%s: expected positions as an array, or an object holding "
					   "them under \"q\" and \"k\"", f.name);
			if (!rc && q)
				rc = json_node_matrix(&p->pos_q, &doc, q, "q", "q", 1, 2, 0);
			if (!rc && k)
				rc = json_node_matrix(&p->pos_k, &doc, k, "k", "k", 1, 2, 0);
			p->pos_apart = 1;
		}
		json_doc_free(&doc);
	} else {
		rc = read_input(&p->pos_q, &f, &(read_spec){ "positions", NULL, 1, 2, 0 });
	}
	input_free(&f);
	return rc;
}

static int read_inputs(const struct problem_spec *s, struct problem *p)
{
	/* 3-D: a batch of sequences (B, rows, cols) */
	const unsigned fl = (s->floats ? READ_F32 : 0) | /* float32 stays float32 */
			    (s->map ? READ_MAP : 0);
	const read_spec xs = { "X", x_keys, 2, 3, READ_LABELS | fl },
			kvs = { "X_kv", x_keys, 2, 3, READ_LABELS | fl },
			xks = { "X_k", x_keys, 2, 3, READ_LABELS | fl }, xvs = { "X_v", x_keys, 2, 3, fl };
	const read_spec qs = { "Q", q_keys, 2, 3, READ_LABELS | fl },
			ks = { "K", k_keys, 2, 3, READ_LABELS | fl };
	const read_spec vs = { "V", v_keys, 2, 3, fl };
	/* --kt: K^T, whose rows are features, so no labels; widened (it is turned) */
	const read_spec kts = { "K^T", k_keys, 2, 3, 0 };
	/* 1-D to 4-D, broadcast as ONNX's attn_mask (check_mask) */
	const read_spec ms = { "mask", mask_keys, 1, 4, READ_NONFINITE | READ_BOOL };
	const read_spec ss = { "sinks", NULL, 1, 2, 0 };
	const read_spec as = { "slopes", NULL, 1, 2, 0 };

	snprintf(p->x_src, sizeof(p->x_src), "-x %s", s->x ? path_shown(s->x) : "");
	snprintf(p->kv_src, sizeof(p->kv_src), "--kv %s", s->kv ? path_shown(s->kv) : "");
	snprintf(p->xk_src, sizeof(p->xk_src), "--xk %s", s->xk ? path_shown(s->xk) : "");
	snprintf(p->xv_src, sizeof(p->xv_src), "--xv %s", s->xv ? path_shown(s->xv) : "");
	snprintf(p->q_src, sizeof(p->q_src), "--q %s", s->q ? path_shown(s->q) : "");
	snprintf(p->k_src, sizeof(p->k_src), s->k_transposed ? "--kt %s (transposed)" : "--k %s",
		 s->k ? path_shown(s->k) : "");
	snprintf(p->v_src, sizeof(p->v_src), "--v %s", s->v ? path_shown(s->v) : "");
	snprintf(p->mask_src, sizeof(p->mask_src), "--mask %s", s->mask ? path_shown(s->mask) : "");
	{
		/* a checkpoint is read a tensor at a time, never whole */
		const char *const files[] = { s->x, s->kv, s->xk, s->xv, s->q, s->k, s->v, s->mask,
					      ckpt_is_checkpoint(s->w) ? NULL : s->w, s->sinks, s->alibi_slopes, s->positions,
					      s->rope_cos, s->rope_sin };

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			if (check_file_size(files[i]))
				return -1;
		for (int i = 0; i < N_WEIGHTS; i++)
			if (check_file_size(s->one[i]))
				return -1;
	}
	if (s->x && read_matrix(&p->x, s->x, &xs))
		return -1;
	if (s->sinks && read_matrix(&p->sinks, s->sinks, &ss))
		return -1;
	if (s->alibi_slopes && read_matrix(&p->alibi, s->alibi_slopes, &as))
		return -1;
	if (s->kv && read_matrix(&p->kv, s->kv, &kvs))
		return -1;
	if (s->xk && (read_matrix(&p->xk, s->xk, &xks) || read_matrix(&p->xv, s->xv, &xvs)))
		return -1;
	p->direct = s->q != NULL;
	if (p->direct && (read_matrix(&p->q, s->q, &qs) ||
			   read_matrix(&p->k, s->k, s->k_transposed ? &kts : &ks) ||
			   read_matrix(&p->v, s->v, &vs) || (s->k_transposed && transpose(&p->k))))
		return -1;
	p->w.layout = s->layout;
	p->w.floats = s->floats;
	p->w.map = s->map;
	if (s->w && ckpt_is_checkpoint(s->w)) {
		if (model_load(&p->w, &p->spec, s->w))
			return -1;
	} else if (s->family && s->family != FAMILY_TORCH) {
		return error("%s: --layout %s reads a safetensors checkpoint: give -w a .safetensors "
			     "file or its folder", s->w ? s->w : "-w", s->family == FAMILY_LLAMA ? "llama" :
			     s->family == FAMILY_GPT2 ? "gpt2" : "bert");
	} else if (s->w && (s->has_layer || s->prefix)) {
		return error("%s: %s picks a module of a safetensors checkpoint", s->w,
			     s->has_layer ? "--layer" : "--prefix");
	} else if (s->w && weights_load(&p->w, s->w, s->layout)) {
		return -1;
	}
	for (int i = 0; i < N_WEIGHTS; i++)
		if (s->one[i] && weights_load_one(&p->w, i, weight_options[i], s->one[i], s->layout))
			return -1;
	if (weights_finish(&p->w, s->heads, s->kv_heads))
		return -1;
	if (s->mask && (is_safetensors(s->mask) ? st_read_mask(&p->mask, s->mask)
						  : read_matrix(&p->mask, s->mask, &ms)))
		return -1;
	if (s->rope_cos && (read_matrix(&p->rope_cos, s->rope_cos, &(read_spec){ "cos", NULL, 1, 2, 0 }) ||
			    read_matrix(&p->rope_sin, s->rope_sin, &(read_spec){ "sin", NULL, 1, 2, 0 })))
		return -1;
	if (s->positions && read_positions(p, s->positions))
		return -1;
	return 0;
}

/* ---- shapes ------------------------------------------------------------- */

/* m, 2-D, as B copies of itself: (B, rows, cols), its labels kept */
static int spread(matrix *m, size_t B)
{
	matrix b;
	const size_t n = matrix_size(m), dims[3] = { B, m->dim[0], m->dim[1] };

	if (m->f ? matrix_alloc_f32(&b, 3, dims) : matrix_alloc(&b, 3, B, m->dim[0], m->dim[1]))
		return -1;
	for (size_t i = 0; i < B; i++)
		if (m->f)
			memcpy(b.f + i * n, m->f, n * sizeof(float));
		else
			memcpy(b.v + i * n, m->v, n * sizeof(double));
	b.is_bool = m->is_bool;
	b.is_f32 = m->is_f32;
	b.labels = m->labels;
	b.n_labels = m->n_labels;
	b.labels_held = m->labels_held;
	m->labels = NULL;
	m->n_labels = 0;
	m->labels_held = 0;
	matrix_free(m);
	*m = b;
	return 0;
}

/*
 * A batch: the 3-D inputs must agree on B; a 2-D one beside them is the
 * same for every sequence.  Sets p->batch (0: every input 2-D).
 */
static int set_batch(struct problem *p)
{
	struct { matrix *m; const char *name, *src; } in[] = {
		{ &p->x, "X", p->x_src }, { &p->kv, "X_kv", p->kv_src }, { &p->xk, "X_k", p->xk_src },
		{ &p->xv, "X_v", p->xv_src }, { &p->q, "Q", p->q_src }, { &p->k, "K", p->k_src },
		{ &p->v, "V", p->v_src },
	};
	const size_t n = sizeof(in) / sizeof(in[0]);
	size_t first = n;

	for (size_t i = 0; i < n; i++) {
		if (in[i].m->rank != 3)
			continue;
		if (first == n) {
			first = i;
		} else if (in[i].m->dim[0] != in[first].m->dim[0]) {
			const size_t a = in[first].m->dim[0], b = in[i].m->dim[0];

			return error("%s from %s holds %zu sequence%s but %s from %s holds %zu: the "
				     "inputs of a batch must hold as many", in[first].name,
				     in[first].src, a, plural(a), in[i].name, in[i].src, b);
		}
	}
	if (first == n)
		return 0;
	p->batch = in[first].m->dim[0];
	for (size_t i = 0; i < n; i++) {
		/* a shared input: its gradient (mha backward) is the sequences' sum */
		if (in[i].m->rank == 2)
			p->shared |= 1u << i;
		if (in[i].m->rank == 2 && spread(in[i].m, p->batch))
			return -1;
	}
	return 0;
}

/* Bias lengths must match the columns of their weight. */
static int check_bias(const weights *w, int b, int wt)
{
	const size_t want = w->m[wt].dim[1];

	if (weights_has(w, b) && w->m[b].dim[0] != want)
		return error("%s from %s has %zu entr%s but %s from %s has %zu columns",
			     weight_names[b], w->src[b], w->m[b].dim[0], w->m[b].dim[0] == 1 ? "y" : "ies",
			     weight_names[wt], w->src[wt], want);
	return 0;
}

/* Work out mha_dims from the inputs, explaining any mismatch. */
static int derive_dims(const struct problem_spec *s, const struct problem *p, mha_dims *d)
{
	const weights *w = &p->w;
	const size_t H = s->heads, G = s->kv_heads;
	char said[4400]; /* what set the heads, for a message */

	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	d->heads = H;
	d->kv_heads = G;
	d->batch = p->batch;

	if (p->direct) {
		for (int i = WQ; i < N_WEIGHTS; i++)
			if (i != WO && i != BO && weights_has(w, i))
				return error("%s from %s cannot be used with --q/--k/--v (they are given "
					     "directly); only W_O and b_O can", weight_names[i], w->src[i]);
		d->n_q = matrix_rows(&p->q);
		d->n_kv = matrix_rows(&p->k);
		d->d_q_in = matrix_cols(&p->q);
		d->d_k_in = matrix_cols(&p->k);
		d->d_v_in = matrix_cols(&p->v);
		if (d->d_q_in % H)
			return error("Q from %s has %zu columns, which %s does not divide",
				     p->q_src, d->d_q_in, model_heads_said(s, 0, H, said, sizeof(said)));
		d->d_k = d->d_q_in / H;
		if (d->d_k_in != G * d->d_k)
			return error("K from %s has %zu columns but needs %zu (%zu key/value head%s of "
				     "d_k %zu, as Q from %s has %zu columns for %zu head%s)", p->k_src,
				     d->d_k_in, G * d->d_k, G, plural(G), d->d_k, p->q_src, d->d_q_in,
				     H, plural(H));
		if (matrix_rows(&p->v) != d->n_kv)
			return error("V from %s has %zu rows but K from %s has %zu: one value per key",
				     p->v_src, matrix_rows(&p->v), p->k_src, d->n_kv);
		if (d->d_v_in % G)
			return error("V from %s has %zu columns, which %s does not divide",
				     p->v_src, d->d_v_in, model_heads_said(s, 1, G, said, sizeof(said)));
		d->d_v = d->d_v_in / G;
	} else {
		/* the keys' source, and the values' (the same but with --xk/--xv) */
		const matrix *kv = s->xk ? &p->xk : s->kv ? &p->kv : &p->x;
		const char *kvname = s->xk ? "X_k" : s->kv ? "X_kv" : "X";
		const char *kvsrc = s->xk ? p->xk_src : s->kv ? p->kv_src : p->x_src;
		const matrix *vm = s->xv ? &p->xv : kv;
		const char *vname = s->xv ? "X_v" : kvname, *vsrc = s->xv ? p->xv_src : kvsrc;
		const int n_proj = weights_has(w, WQ) + weights_has(w, WK) + weights_has(w, WV);

		d->n_q = matrix_rows(&p->x);
		d->n_kv = matrix_rows(kv);
		d->d_q_in = matrix_cols(&p->x);
		d->d_k_in = matrix_cols(kv);
		d->d_v_in = matrix_cols(vm);
		if (matrix_rows(vm) != d->n_kv)
			return error("%s from %s has %zu rows but %s from %s has %zu: one value per key",
				     vname, vsrc, matrix_rows(vm), kvname, kvsrc, d->n_kv);
		if (n_proj != 0 && n_proj != 3) {
			const int have = weights_has(w, WQ) ? WQ : weights_has(w, WK) ? WK : WV;

			return error("missing %s (W_Q, W_K and W_V go together; %s came from %s)",
				     !weights_has(w, WQ) ? "W_Q" : !weights_has(w, WK) ? "W_K" : "W_V",
				     weight_names[have], w->src[have]);
		}
		for (int b = BQ; b <= BV; b++)
			if (!n_proj && weights_has(w, b))
				return error("%s from %s without %s", weight_names[b], w->src[b],
					     weight_names[b - BQ + WQ]);
		if (n_proj) {
			const matrix *wq = &w->m[WQ], *wk = &w->m[WK], *wv = &w->m[WV];

			if (wq->dim[0] != d->d_q_in)
				return error("W_Q from %s is %zux%zu but X from %s has %zu columns: W_Q "
					     "needs %zu rows", w->src[WQ], wq->dim[0], wq->dim[1],
					     p->x_src, d->d_q_in, d->d_q_in);
			if (wq->dim[1] % H)
				return error("W_Q from %s has %zu columns, which %s does not "
					     "divide (each head takes an equal block)", w->src[WQ],
					     wq->dim[1], model_heads_said(s, 0, H, said, sizeof(said)));
			d->d_k = wq->dim[1] / H;
			for (int i = WK; i <= WV; i++) {
				const size_t in = i == WK ? d->d_k_in : d->d_v_in;

				if (w->m[i].dim[0] != in)
					return error("%s from %s is %zux%zu but %s from %s has %zu columns: "
						     "%s needs %zu rows", weight_names[i], w->src[i],
						     w->m[i].dim[0], w->m[i].dim[1],
						     i == WK ? kvname : vname, i == WK ? kvsrc : vsrc, in,
						     weight_names[i], in);
			}
			if (wk->dim[1] != G * d->d_k)
				return error("W_K from %s has %zu columns but needs %zu (%zu key/value "
					     "head%s of d_k %zu, as W_Q from %s has %zu columns for %zu "
					     "head%s)", w->src[WK], wk->dim[1], G * d->d_k, G, plural(G),
					     d->d_k, w->src[WQ], wq->dim[1], H, plural(H));
			if (wv->dim[1] % G)
				return error("W_V from %s has %zu columns, which %s does not "
					     "divide", w->src[WV], wv->dim[1],
					     model_heads_said(s, 1, G, said, sizeof(said)));
			d->d_v = wv->dim[1] / G;
			if (check_bias(w, BQ, WQ) || check_bias(w, BK, WK) || check_bias(w, BV, WV))
				return -1;
		} else {
			/* Q = X, K = V = X_kv: the heads split X's own columns */
			if (d->d_q_in % H)
				return error("%s does not divide d_model %zu (the columns of X "
					     "from %s)", model_heads_said(s, 0, H, said, sizeof(said)),
					     d->d_q_in, p->x_src);
			d->d_k = d->d_v = d->d_q_in / H;
			if (d->d_k_in != G * d->d_k && !s->kv && !s->xk)
				return error("--kv-heads %zu needs weights (-w) or --kv: without them K = V "
					     "= X, %zu columns wide, but %zu key/value head%s of %zu need%s %zu",
					     G, d->d_q_in, G, plural(G), d->d_k, G == 1 ? "s" : "", G * d->d_k);
			if (d->d_k_in != G * d->d_k)
				return error("%s from %s has %zu columns but without weights it needs "
					     "%zu (%zu key/value head%s of %zu, like the %zu columns of X "
					     "from %s)", kvname, kvsrc, d->d_k_in, G * d->d_k, G, plural(G), d->d_k,
					     d->d_q_in, p->x_src);
			if (s->xv) {
				/* V = X_v: its own width, split among the key/value heads */
				if (d->d_v_in % G)
					return error("X_v from %s has %zu columns, which %s "
						     "does not divide", vsrc, d->d_v_in,
						     model_heads_said(s, 1, G, said, sizeof(said)));
				d->d_v = d->d_v_in / G;
			}
		}
	}

	if (weights_has(w, WO)) {
		const matrix *wo = &w->m[WO];

		if (wo->dim[0] != H * d->d_v)
			return error("W_O from %s is %zux%zu but the heads concatenate to %zu columns "
				     "(%zu head%s of d_v %zu): W_O needs %zu rows", w->src[WO],
				     wo->dim[0], wo->dim[1], H * d->d_v, H, plural(H), d->d_v, H * d->d_v);
		d->d_out = wo->dim[1];
		if (check_bias(w, BO, WO))
			return -1;
	} else if (weights_has(w, BO)) {
		return error("b_O from %s without W_O", w->src[BO]);
	}
	return 0;
}

/* "[1][0][2]": element i of m as its own indices, into buf */
static const char *element_path(char *buf, size_t size, const matrix *m, size_t i)
{
	size_t idx[4], used = 0;

	for (size_t r = m->rank; r-- > 0;) {
		idx[r] = i % m->dim[r];
		i /= m->dim[r];
	}
	buf[0] = '\0';
	for (size_t r = 0; r < m->rank && used < size; r++)
		used += (size_t)snprintf(buf + used, size - used, "[%zu]", idx[r]);
	return buf;
}

/*
 * The mask must fit the scores (B, H, n_q, n_kv) as ONNX broadcasts its
 * attn_mask, the dimensions right-aligned: (n_kv), (n_q, n_kv), (H, n_q,
 * n_kv) or (B, H, n_q, n_kv), each of B, H and n_q also 1 for all of them;
 * and it may only add numbers or -inf.  The library takes (B|1, H|1, n_q,
 * n_kv): a mask shared by the queries is spread over them here.
 */
static int check_mask(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		      mha_config *cfg)
{
	matrix *m = &p->mask;
	const size_t B = problem_sequences(p);
	size_t md[4] = { 1, 1, 1, 1 }, n;
	char shape[64], at[64];

	if (!s->mask)
		return 0;
	for (size_t r = 0; r < m->rank; r++)
		md[4 - m->rank + r] = m->dim[r];
	if (m->rank >= 3 && md[1] != d->heads && md[1] != 1)
		return error("mask from %s has %zu per-head matrices but there %s %zu head%s",
			     p->mask_src, md[1], d->heads == 1 ? "is" : "are", d->heads,
			     plural(d->heads));
	if ((md[2] != d->n_q && md[2] != 1) || md[3] != d->n_kv)
		return error("mask from %s is %s but the scores are %zux%zu (%zu quer%s x %zu key%s)%s",
			     p->mask_src, matrix_shape(m, shape, sizeof(shape)), d->n_q, d->n_kv,
			     d->n_q, d->n_q == 1 ? "y" : "ies", d->n_kv, plural(d->n_kv),
			     m->rank >= 3 ? " for each head" : "");
	if (md[0] != B && md[0] != 1)
		return error("mask from %s holds %zu sequences' masks but the batch holds %zu "
			     "sequence%s", p->mask_src, md[0], B, plural(B));
	for (size_t i = 0; i < matrix_size(m); i++)
		if (isnan(m->v[i]) || m->v[i] == INFINITY)
			return error("%s: mask%s is %s: a mask adds numbers or -inf", path_shown(s->mask),
				     element_path(at, sizeof(at), m, i), isnan(m->v[i]) ? "nan" : "inf");
	/* a 3-D mask of one head is per head as it always was (titled so) */
	cfg->mask.per_head = md[1] > 1 || (m->rank == 3 && d->heads == 1);
	cfg->mask.per_batch = md[0] > 1;
	if (md[2] != d->n_q) {
		/* one row for every query: the rows spread out */
		matrix spread_rows;
		const size_t dims[4] = { md[0], md[1], d->n_q, d->n_kv };

		if (matrix_alloc_dims(&spread_rows, 4, dims))
			return -1;
		for (size_t k = 0; k < md[0] * md[1]; k++)
			for (size_t i = 0; i < d->n_q; i++)
				memcpy(spread_rows.v + (k * d->n_q + i) * d->n_kv, m->v + k * d->n_kv,
				       d->n_kv * sizeof(double));
		spread_rows.is_bool = m->is_bool;
		matrix_free(m);
		*m = spread_rows;
	}
	n = matrix_size(m);
	if (m->is_bool) {
		p->allow = malloc(n ? n : 1);
		if (!p->allow)
			return error("out of memory");
		/* --mask-bool block: PyTorch's nn.MultiheadAttention, true = blocked */
		for (size_t i = 0; i < n; i++)
			p->allow[i] = (m->v[i] != 0) != (s->mask_block != 0);
		cfg->mask.allow = p->allow;
		/* every query blocked from its own key: a PyTorch mask read as mha's? */
		p->diag_blocked = !s->mask_block && d->n_q == d->n_kv;
		for (size_t k = 0; p->diag_blocked && k < md[0] * md[1]; k++)
			for (size_t i = 0; p->diag_blocked && i < d->n_q; i++)
				p->diag_blocked = !p->allow[(k * d->n_q + i) * d->n_kv + i];
		return 0;
	}
	if (s->mask_block)
		return error("--mask-bool block: mask from %s holds numbers, which are added to the "
			     "scores; it applies to a boolean mask (true and false)", p->mask_src);
	cfg->mask.bias = m->v;
	return 0;
}

/*
 * A vector of one number per query head from file (a row or a column will
 * do): noun names one ("sink"), unit what it is ("logit")
 */
static int check_per_head(const char *file, const matrix *m, size_t heads, const char *noun,
			  const char *unit)
{
	char shape[64];

	if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1)
		return error("%s: %ss are %s, expected a vector of one %s per head",
			     path_shown(file), noun, matrix_shape(m, shape, sizeof(shape)), unit);
	if (matrix_size(m) != heads)
		return error("%s: %zu %s%s but there %s %zu head%s (one %s per query head)",
			     path_shown(file), matrix_size(m), noun, plural(matrix_size(m)),
			     heads == 1 ? "is" : "are", heads, plural(heads), unit);
	return 0;
}

/* --sinks: one logit per query head */
static int check_sinks(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		       mha_config *cfg)
{
	if (!s->sinks)
		return 0;
	if (check_per_head(s->sinks, &p->sinks, d->heads, "sink", "logit"))
		return -1;
	cfg->sinks = p->sinks.v;
	return 0;
}

/*
 * --alibi-slopes: one slope per query head; --alibi alone: Press et al.'s,
 * from the library, kept to show them (the library is still handed none
 * and works them out the same way)
 */
static int check_alibi(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		       mha_config *cfg)
{
	if (!cfg->alibi.on)
		return 0;
	if (!s->alibi_slopes) {
		if (matrix_alloc(&p->alibi, 1, d->heads, 1, 1))
			return -1;
		return mha_alibi_slopes(p->alibi.v, d->heads) == MHA_OK ? 0 : -1;
	}
	if (check_per_head(s->alibi_slopes, &p->alibi, d->heads, "ALiBi slope", "slope"))
		return -1;
	cfg->alibi.slopes = p->alibi.v;
	return 0;
}

/*
 * Whole numbers from 0 (and below the tables' rows, if any) into *out (n),
 * from m, a vector of n: what names its elements ("positions", "q", "k"),
 * whom what there are n of ("queries", "keys").
 */
static int rope_positions(const char *file, const char *what, const matrix *m, size_t n,
			  const char *whom, size_t rows, ptrdiff_t **out)
{
	char shape[64];

	if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1)
		return error("%s: %s are %s, expected a list of whole numbers", file, what,
			     matrix_shape(m, shape, sizeof(shape)));
	if (matrix_size(m) != n)
		return error("%s: %zu position%s%s%s but %zu %s", file, matrix_size(m),
			     plural(matrix_size(m)), strcmp(what, "positions") ? " in " : "",
			     strcmp(what, "positions") ? what : "", n, whom);
	/* charged like every matrix (budget.h); given back in problem_free */
	if (budget_take(budget_block(n * sizeof(**out))))
		return budget_refuse(file, n * sizeof(**out));
	*out = malloc(n * sizeof(**out));
	if (!*out) {
		budget_give(budget_block(n * sizeof(**out)));
		return error("out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const double v = m->v[i];
		char num[40];

		format_shortest(num, sizeof(num), v);
		if (v != floor(v) || v < 0 || v > 1e15)
			return error("%s: %s[%zu] is %s: positions are whole numbers from 0", file,
				     what, i, num);
		if (rows && v >= (double)rows)
			return error("%s: %s[%zu] is %s, past the cos/sin tables' %zu rows "
				     "(positions 0 to %zu)", file, what, i, num, rows, rows - 1);
		(*out)[i] = (ptrdiff_t)v;
	}
	return 0;
}

/* the causal rule's offset as the library works it out (mha.h): query i sits at i + it */
static ptrdiff_t causal_offset_of(const mha_dims *d, const mha_config *cfg)
{
	switch (cfg->causal) {
	case MHA_CAUSAL_BOTTOM_RIGHT:
		return (ptrdiff_t)(cfg->kv_len ? cfg->kv_len : d->n_kv) - (ptrdiff_t)d->n_q;
	case MHA_CAUSAL_OFFSET: return cfg->causal_offset;
	default: return 0;
	}
}

/* --rope and its settings: R against d_k, the tables' shapes, the positions */
static int check_rope(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		      mha_config *cfg)
{
	mha_rope *r = &cfg->rope;
	const size_t R = r->dim ? r->dim : d->d_k;
	const char *pf = s->positions ? path_shown(s->positions) : NULL;
	size_t rows = 0;
	char a[64], b[64];

	if (!r->mode)
		return 0;
	if (r->dim > d->d_k)
		return error("--rope-dim %zu but each head's Q and K have d_k = %zu features",
			     r->dim, d->d_k);
	if (R % 2)
		return error("--rope turns pairs of features but d_k = %zu is odd: give an even "
			     "--rope-dim", d->d_k);
	if (s->rope_cos) {
		const matrix *c = &p->rope_cos, *sn = &p->rope_sin;
		const size_t cols = c->rank == 1 ? c->dim[0] : c->dim[1];

		if (c->rank != sn->rank || c->dim[0] != sn->dim[0] || c->dim[1] != sn->dim[1])
			return error("--rope-cos %s is %s but --rope-sin %s is %s: the tables go "
				     "together", path_shown(s->rope_cos), matrix_shape(c, a, sizeof(a)),
				     path_shown(s->rope_sin), matrix_shape(sn, b, sizeof(b)));
		if (cols != R / 2)
			return error("--rope-cos %s is %s but R = %zu features turn in %zu pair%s: "
				     "expected %zu column%s (one per pair; --rope-dim sets R)",
				     path_shown(s->rope_cos), matrix_shape(c, a, sizeof(a)), R, R / 2,
				     plural(R / 2), R / 2, plural(R / 2));
		rows = c->rank == 1 ? 1 : c->dim[0];
		r->cos = c->v;
		r->sin = sn->v;
		r->rows = rows;
	}
	if (s->positions) {
		if (!p->pos_apart && d->n_q != d->n_kv)
			return error("%s: one list of positions serves queries and keys alike, but "
				     "there are %zu queries and %zu keys: give {\"q\": [..], \"k\": [..]}",
				     pf, d->n_q, d->n_kv);
		if (p->pos_q.rank && rope_positions(pf, p->pos_apart ? "q" : "positions", &p->pos_q,
						    d->n_q, p->pos_apart ? "queries" :
						    "queries (and as many keys)", rows, &p->q_pos))
			return -1;
		if (p->pos_k.rank && rope_positions(pf, "k", &p->pos_k, d->n_kv, "keys", rows,
						    &p->k_pos))
			return -1;
		r->q_pos = p->q_pos;
		r->k_pos = p->pos_apart ? p->k_pos : p->q_pos;
	}
	if (rows) {
		/* the default positions against the tables: keys at j, queries at i + offset */
		const ptrdiff_t off = causal_offset_of(d, cfg);

		if (!r->k_pos && d->n_kv > rows)
			return error("--rope-cos %s has %zu row%s (positions 0 to %zu) but key %zu "
				     "is at position %zu: give --positions", path_shown(s->rope_cos),
				     rows, plural(rows), rows - 1, d->n_kv, d->n_kv - 1);
		if (!r->q_pos && (off < 0 || (size_t)off + d->n_q > rows))
			return error("--rope-cos %s has %zu row%s (positions 0 to %zu) but the "
				     "queries are at %td to %td (the causal offset %td): give "
				     "--positions", path_shown(s->rope_cos), rows, plural(rows),
				     rows - 1, off, off + (ptrdiff_t)d->n_q - 1, off);
	}
	if (mha_check(d, cfg) == MHA_ERR_ROPE)
		return error("--rope: %s", mha_strerror(MHA_ERR_ROPE));
	return 0;
}

/* ---- the run ------------------------------------------------------------ */

/* *acc += count·size, saturating at SIZE_MAX */
static void add_bytes(size_t *acc, size_t count, size_t size)
{
	if (*acc == SIZE_MAX || (count && size > (SIZE_MAX - *acc) / count))
		*acc = SIZE_MAX;
	else
		*acc += count * size;
}

/*
 * What a run will hold at its peak: the inputs as read, the library's own
 * needs (mha_memory), the copies of the steps to print, and the output.
 */
static void run_memory(const struct problem *p, unsigned wanted, int f32, size_t out_cols,
		       size_t part[3])
{
	const mha_dims *d = &p->d;
	const matrix *held[] = { &p->x, &p->kv, &p->xk, &p->xv, &p->q, &p->k, &p->v, &p->mask };
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, nn = d->n_q * d->n_kv;
	const size_t B = problem_sequences(p);
	size_t lib;

	/* the inputs as read hold what the budget was charged for them; float32
	 * adds a float copy of each */
	part[0] = budget_held();
	part[1] = part[2] = 0;
	for (size_t i = 0; f32 && i < sizeof(held) / sizeof(held[0]); i++)
		if (!held[i]->f)
			add_bytes(&part[0], matrix_size(held[i]), sizeof(float));
	for (int i = 0; f32 && i < N_WEIGHTS; i++)
		if (!p->w.m[i].f)
			add_bytes(&part[0], matrix_size(&p->w.m[i]), sizeof(float));
	add_bytes(&part[0], matrix_size(&p->mask), 1);
	lib = mha_memory(d, &p->cfg, wanted, f32);
	add_bytes(&part[1], 1, lib);
	/* the copies kept for printing: every sequence's */
	/* the output: doubles, and the floats made first with --dtype f32;
	 * floats alone when they are what is written (spec.floats) */
	add_bytes(&part[2], B * d->n_q * out_cols,
		  !f32 ? sizeof(double) : p->spec.float_out ? sizeof(float) : sizeof(double) + sizeof(float));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_K))
		add_bytes(&part[2], B * d->n_kv * G * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_V))
		add_bytes(&part[2], B * d->n_kv * G * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_CONCAT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & (MHA_STAGE_BIT(MHA_STAGE_HEAD_K) | MHA_STAGE_BIT(MHA_STAGE_HEAD_V)))
		add_bytes(&part[2], B * d->n_kv * d->heads * (d->d_k + d->d_v), sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_OUTPUT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	for (int s = MHA_STAGE_SCORES; s <= MHA_STAGE_SOFTMAX; s++)
		if (wanted & MHA_STAGE_BIT(s))
			/* a per-head mask is kept per head and once more stacked */
			add_bytes(&part[2], B * nn, d->heads * sizeof(double) *
				  (s == MHA_STAGE_MASK && (p->cfg.mask.per_head || p->cfg.alibi.on)
				   ? 2 : 1));
}

int problem_check_memory(const struct problem *p, unsigned wanted, int f32)
{
	const size_t limit = budget_limit();
	size_t part[3], total = 0;
	char t[48], a[48], b[48], c[48], m[48];

	if (limit == SIZE_MAX)
		return 0;
	run_memory(p, wanted, f32, mha_output_cols(&p->d, weights_has(&p->w, WO)), part);
	for (int i = 0; i < 3; i++)
		add_bytes(&total, 1, part[i]);
	if (total <= limit)
		return 0;
	return error("this run needs about %s (the inputs %s, the computation %s, the output and "
		     "the steps to print %s), more than --max-memory (%s): print fewer steps, or "
		     "raise --max-memory", show_bytes(t, sizeof(t), total),
		     show_bytes(a, sizeof(a), part[0]), show_bytes(b, sizeof(b), part[1]),
		     show_bytes(c, sizeof(c), part[2]), show_bytes(m, sizeof(m), limit));
}

/*
 * --dtype f32: the inputs rounded to float, the library's float32 path,
 * the output widened back (exactly) and marked as floats for the writers.
 */
static mha_status forward_f32(matrix *out, const mha_dims *d, const mha_inputs *src,
			      const mha_inputs_f32 *srcf, const mha_weights *w,
			      const mha_weights_f32 *wf, const mha_config *cfg, mha_report *rep)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t n_out = matrix_size(out), out_cols = matrix_cols(out);
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	const size_t B = d->batch ? d->batch : 1;
	int ok = 1;
	/* inputs read as floats are used as they are; the rest rounded here */
	float *xq = srcf->xq ? NULL : floats_copy(src->xq, B * d->n_q * d->d_q_in, &ok);
	float *xk = src->xk == src->xq ? xq : srcf->xk ? NULL : floats_copy(src->xk, B * d->n_kv * d->d_k_in, &ok);
	float *xv = src->xv == src->xk ? xk : srcf->xv ? NULL : floats_copy(src->xv, B * d->n_kv * d->d_v_in, &ok);
	/* weights read as floats (wf) are used as they are; doubles rounded */
	float *W[8] = {
		floats_copy(w->W_Q, d->d_q_in * hk, &ok), floats_copy(w->W_K, d->d_k_in * gk, &ok),
		floats_copy(w->W_V, d->d_v_in * gv, &ok), floats_copy(w->W_O, hv * out_cols, &ok),
		floats_copy(w->b_Q, hk, &ok), floats_copy(w->b_K, gk, &ok), floats_copy(w->b_V, gv, &ok),
		floats_copy(w->b_O, out_cols, &ok),
	};
	const float *const Wf[8] = { wf->W_Q, wf->W_K, wf->W_V, wf->W_O, wf->b_Q, wf->b_K, wf->b_V,
				     wf->b_O };
	const float *Wu[8];
	/* the output's floats: out's own when it holds floats */
	float *o = out->f ? NULL : malloc((n_out ? n_out : 1) * sizeof(float));
	mha_status st = MHA_ERR_NOMEM;

	if (ok && (o || out->f)) {
		const mha_inputs_f32 in = { .size = sizeof(mha_inputs_f32),
					    srcf->xq ? srcf->xq : xq, srcf->xk ? srcf->xk : xk,
					    srcf->xv ? srcf->xv : xv };

		for (int i = 0; i < 8; i++)
			Wu[i] = Wf[i] ? Wf[i] : W[i];
		st = mha_forward_f32(out->f ? out->f : o, d, &in,
				     &(mha_weights_f32){ .size = sizeof(mha_weights_f32), Wu[0], Wu[1],
							 Wu[2], Wu[3], Wu[4], Wu[5], Wu[6], Wu[7] },
				     cfg, rep);
		for (size_t i = 0; st == MHA_OK && o && i < n_out; i++)
			out->v[i] = o[i];
		out->is_f32 = 1;
	}
	if (xv != xk)
		free(xv);
	if (xk != xq)
		free(xk);
	free(xq);
	for (int i = 0; i < 8; i++)
		free(W[i]);
	free(o);
	return st;
}

static const double *weight_ptr(const weights *w, int i)
{
	return weights_has(w, i) ? w->m[i].v : NULL;
}

static const float *weight_ptr_f(const weights *w, int i)
{
	return weights_has(w, i) ? w->m[i].f : NULL;
}


int problem_forward(matrix *out, const struct problem *p, const mha_observer *obs, int f32,
		    mha_report *rep)
{
	const mha_dims *d = &p->d;
	mha_status st;
	/* a PyTorch mask (true = blocked) read as mha's blocks the diagonal */
	const char *const hint = p->diag_blocked ? "; the boolean mask blocks every query's own "
		"key: if true means blocked there (PyTorch's nn.MultiheadAttention), add "
		"--mask-bool block" : "";

	const size_t cols = mha_output_cols(d, weights_has(&p->w, WO));

	/* a batch keeps its 3-D shape, B = 1 too: (B, n_q, cols); floats
	 * alone when those are what is written */
	if (f32 && p->spec.float_out) {
		const size_t dims[3] = { p->batch ? p->batch : d->n_q, p->batch ? d->n_q : cols, cols };

		if (matrix_alloc_out(out, p->batch ? 3 : 2, dims, 1))
			return -1;
	} else {
		const size_t dims[3] = { p->batch ? p->batch : d->n_q, p->batch ? d->n_q : cols,
					 p->batch ? cols : 1 };

		if (matrix_alloc_out(out, p->batch ? 3 : 2, dims, 0))
			return -1;
	}
	st = f32 ? forward_f32(out, d, &p->in, &p->in_f, &p->weights, &p->weights_f, &p->cfg, rep)
		 : mha_forward(out->v, d, &p->in, &p->weights, &p->cfg, obs, rep);
	if (st == MHA_ERR_OBSERVER)
		return -1; /* the observer said why */
	if (st == MHA_ERR_RANGE)
		/* the type the run computes in: --dtype f32 overflows near 3.4e38 */
		return error("the numbers overflow: Q, K, V, the scores or the output went past the "
			     "largest %s; scale the inputs down",
			     f32 ? "float (about 3.4e38)" : "double (about 1.8e308)");
	if (st != MHA_OK)
		return error("%s", mha_strerror(st));
	if (p->diag_blocked && !rep->blocked_rows)
		warning("the boolean mask from %s blocks every query's own key; if true means "
			"blocked there (PyTorch's nn.MultiheadAttention), add --mask-bool block",
			p->mask_src);
	if (rep->blocked_rows && p->batch > 1) {
		char seq[48];

		snprintf(seq, sizeof(seq), "sequence %zu, ", rep->first_blocked_sequence + 1);
		if (rep->blocked_rows == 1)
			warning("%shead %d, query row %zu: every key is masked; its softmax row and "
				"output are zero%s", seq, rep->first_blocked_head + 1, rep->first_blocked_row + 1,
				hint);
		else
			warning("%zu query rows have every key masked (the first: %shead %d, row %zu); "
				"their softmax rows and outputs are zero%s", rep->blocked_rows, seq,
				rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	} else if (rep->blocked_rows == 1) {
		warning("head %d, query row %zu: every key is masked; its softmax row and output "
			"are zero%s", rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	} else if (rep->blocked_rows > 1) {
		warning("%zu query rows have every key masked (the first: head %d, row %zu); their "
			"softmax rows and outputs are zero%s", rep->blocked_rows,
			rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	}
	return 0;
}

/* ---- the problem -------------------------------------------------------- */

/* the library's view of the inputs read */
static void set_inputs(struct problem *p)
{
	const struct problem_spec *s = &p->spec;

	p->in.size = sizeof(p->in);
	p->in_f.size = sizeof(p->in_f);
	p->in.xq = p->direct ? p->q.v : p->x.v;
	p->in.xk = p->direct ? p->k.v : s->xk ? p->xk.v : s->kv ? p->kv.v : p->x.v;
	p->in.xv = p->direct ? p->v.v : s->xv ? p->xv.v : p->in.xk;
	p->in_f.xq = p->direct ? p->q.f : p->x.f;
	p->in_f.xk = p->direct ? p->k.f : s->xk ? p->xk.f : s->kv ? p->kv.f : p->x.f;
	p->in_f.xv = p->direct ? p->v.f : s->xv ? p->xv.f : p->in_f.xk;
}

int problem_keep_sequence(struct problem *p, size_t b)
{
	matrix *in[] = { &p->x, &p->kv, &p->xk, &p->xv, &p->q, &p->k, &p->v };

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		matrix *m = in[i], one;
		const size_t n = m->dim[1] * m->dim[2];

		if (m->rank != 3)
			continue;
		if (matrix_alloc(&one, 3, 1, m->dim[1], m->dim[2]))
			return -1;
		memcpy(one.v, m->v + b * n, n * sizeof(double));
		one.is_f32 = m->is_f32;
		one.labels = m->labels;
		one.n_labels = m->n_labels;
		one.labels_held = m->labels_held;
		m->labels = NULL;
		m->n_labels = m->labels_held = 0;
		matrix_free(m);
		*m = one;
	}
	if (p->cfg.mask.per_batch) {
		/* sequence b's mask, moved to the front of the arrays the config points at */
		const size_t n = p->d.n_q * p->d.n_kv * (p->cfg.mask.per_head ? p->d.heads : 1);

		if (p->allow)
			memmove(p->allow, p->allow + b * n, n);
		else
			memmove(p->mask.v, p->mask.v + b * n, n * sizeof(double));
		p->cfg.mask.per_batch = 0;
	}
	if (p->cfg.kv_lens) {
		p->cfg.kv_len = p->cfg.kv_lens[b];
		p->cfg.kv_lens = NULL;
	}
	p->batch_read = p->batch;
	p->batch = p->d.batch = 1;
	set_inputs(p);
	return 0;
}

/* --kv-len 5,3,4: one length per sequence of the batch, none past the keys */
static int check_kv_lens(const struct problem_spec *s, struct problem *p)
{
	const size_t B = problem_sequences(p), n_kv = p->d.n_kv;
	const char *keys = p->direct ? p->k_src : s->xk ? p->xk_src : s->kv ? p->kv_src : p->x_src;

	if (s->n_kv_lens != B)
		return error("--kv-len gives %zu lengths but %s %zu sequence%s (%s)", s->n_kv_lens,
			     p->batch ? "the batch holds" : "there is", B, plural(B),
			     p->batch ? "the inputs' first dimension" : "the inputs are 2-D");
	for (size_t b = 0; b < B; b++)
		if (s->kv_lens[b] > n_kv)
			return error("--kv-len: sequence %zu's length is %zu but %s gives %zu key%s", b + 1,
				     s->kv_lens[b], keys, n_kv, plural(n_kv));
	p->cfg.kv_lens = s->kv_lens;
	return 0;
}

size_t problem_sequences(const struct problem *p)
{
	return p->batch ? p->batch : 1;
}

static int add_input(void *ctx, const char *file)
{
	(void)ctx;
	return files_note("-w", file);
}

int problem_note_inputs(const struct problem_spec *s)
{
	const struct { const char *opt, *path; } files[] = {
		{ "-x", s->x }, { "--kv", s->kv }, { "--xk", s->xk }, { "--xv", s->xv },
		{ "--q", s->q }, { s->k_transposed ? "--kt" : "--k", s->k }, { "--v", s->v },
		{ "--mask", s->mask }, { "--sinks", s->sinks }, { "--alibi-slopes", s->alibi_slopes },
		{ "--positions", s->positions },
		{ "--rope-cos", s->rope_cos }, { "--rope-sin", s->rope_sin },
		{ "--config", s->config }, { "--grad-output", s->grad_output },
	};
	int rc = 0;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && !rc; i++)
		if (files[i].path)
			rc = files_note(files[i].opt, files[i].path);
	for (int i = 0; i < N_WEIGHTS && !rc; i++)
		if (s->one[i])
			rc = files_note(weight_options[i], s->one[i]);
	if (!rc && s->w && ckpt_is_checkpoint(s->w))
		rc = ckpt_files(s->w, add_input, NULL); /* its shards, index and config */
	else if (!rc && s->w)
		rc = weights_files(s->w, add_input, NULL); /* a directory: every file it may read */
	return rc;
}

static int load(struct problem *p, const struct problem_spec *s)
{
	const weights *w = &p->w;
	const mha_dims *d = &p->d;

	if (read_inputs(s, p) || set_batch(p) || identity_for_missing(s, p) || derive_dims(s, p, &p->d) ||
	    check_mask(s, p, &p->d, &p->cfg) || check_sinks(s, p, &p->d, &p->cfg) ||
	    check_alibi(s, p, &p->d, &p->cfg) || check_rope(s, p, &p->d, &p->cfg) ||
	    set_labels(s, p, &p->d))
		return EXIT_DATA;
	/* --cell names a query and a key: a command-line error, known once the labels are */
	if (s->cell && explain_parse_cell(s->cell, (const char *const *)p->labels.query, d->n_q,
					  (const char *const *)p->labels.key, d->n_kv, &p->cell[0],
					  &p->cell[1]))
		return EXIT_USAGE;
	if (s->cfg.kv_len > d->n_kv) {
		error("--kv-len %zu but %s gives %zu key%s", s->cfg.kv_len,
		      p->direct ? p->k_src : s->xk ? p->xk_src : s->kv ? p->kv_src : p->x_src, d->n_kv,
		      plural(d->n_kv));
		return EXIT_DATA;
	}
	if (s->kv_lens && check_kv_lens(s, p))
		return EXIT_DATA;
	set_inputs(p);
	p->weights = (mha_weights){
		.size = sizeof(mha_weights),
		.W_Q = weight_ptr(w, WQ), .W_K = weight_ptr(w, WK), .W_V = weight_ptr(w, WV),
		.W_O = weight_ptr(w, WO), .b_Q = weight_ptr(w, BQ), .b_K = weight_ptr(w, BK),
		.b_V = weight_ptr(w, BV), .b_O = weight_ptr(w, BO),
	};
	p->weights_f = (mha_weights_f32){
		.size = sizeof(mha_weights_f32),
		.W_Q = weight_ptr_f(w, WQ), .W_K = weight_ptr_f(w, WK), .W_V = weight_ptr_f(w, WV),
		.W_O = weight_ptr_f(w, WO), .b_Q = weight_ptr_f(w, BQ), .b_K = weight_ptr_f(w, BK),
		.b_V = weight_ptr_f(w, BV), .b_O = weight_ptr_f(w, BO),
	};
	return EXIT_OK;
}

int problem_load(struct problem *p, const struct problem_spec *s)
{
	memset(p, 0, sizeof(*p));
	p->spec = *s;
	if (!p->spec.kv_heads)
		p->spec.kv_heads = p->spec.heads;
	p->cfg = s->cfg;
	p->cfg.size = sizeof(p->cfg);
	return load(p, &p->spec);
}

void problem_free(struct problem *p)
{
	matrix_free(&p->x);
	matrix_free(&p->kv);
	matrix_free(&p->xk);
	matrix_free(&p->xv);
	matrix_free(&p->q);
	matrix_free(&p->k);
	matrix_free(&p->v);
	matrix_free(&p->mask);
	matrix_free(&p->sinks);
	matrix_free(&p->alibi);
	matrix_free(&p->rope_cos);
	matrix_free(&p->rope_sin);
	matrix_free(&p->pos_q);
	matrix_free(&p->pos_k);
	if (p->q_pos)
		budget_give(budget_block(p->d.n_q * sizeof(*p->q_pos)));
	if (p->k_pos)
		budget_give(budget_block(p->d.n_kv * sizeof(*p->k_pos)));
	free(p->q_pos);
	free(p->k_pos);
	weights_free(&p->w);
	free(p->allow);
	if (p->labels.own_key)
		free_tokens(p->labels.key, p->labels.n_key);
	if (p->labels.own_query)
		free_tokens(p->labels.query, p->labels.n_query);
	memset(p, 0, sizeof(*p));
}

void problem_facts(const struct problem *p, double scale, struct step_facts *f)
{
	*f = (struct step_facts){ .cfg = &p->cfg, .d = &p->d, .scale = scale,
				  .mask_file = p->spec.mask, .mask_block = p->spec.mask_block,
				  .heads = p->d.heads,
				  .alibi_slopes = p->cfg.alibi.on ? p->alibi.v : NULL,
				  .direct = p->direct,
				  .cross = p->spec.kv != NULL || p->spec.xk != NULL,
				  .apart = p->spec.xk != NULL, .positions_file = p->spec.positions,
				  .rope_cos_file = p->spec.rope_cos, .rope_sin_file = p->spec.rope_sin,
				  .model_layer = -1 };
	if (p->allow)
		f->mask_bool = p->spec.mask_block ? "block" : "attend";
	if (p->spec.checkpoint) {
		f->model = model_family_name(p->spec.family);
		f->model_prefix = p->spec.module;
		f->model_config = p->spec.config_read[0] ? p->spec.config_read : NULL;
		f->model_layer = p->spec.has_layer ? (long long)p->spec.layer : -1;
	}
	for (int i = 0; i < N_WEIGHTS; i++)
		f->weights |= (unsigned)weights_has(&p->w, i) << i;
}

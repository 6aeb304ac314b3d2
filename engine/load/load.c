/*
 * load.c: reading an attention problem (load.h): every file the spec names,
 * then the shapes (shapes.c), the options' matrices (checks.c) and the
 * labels (labels.c) in turn.
 *
 * Shape errors name each matrix with the option and file it came from
 * ("W_Q from -w w.json is 4x3 but X from -x x.json has 5 columns") and
 * give both shapes.
 */
#include "load/load.h"
#include "load/inputs.h"
#include "load/checks.h"
#include "load/shapes.h"
#include "load/model.h"
#include "read/checkpoint.h"

#include "util/budget.h"
#include "util/msg.h"
#include "util/number.h"
#include "load/labels.h"
#include "load/latent.h"
#include "util/files.h"
#include "read/input.h"
#include "read/memory.h"
#include "read/json.h"
#include "read/safetensors.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* ---- reading ------------------------------------------------------------ */

static const char *const x_keys[] = { "output", "X", NULL };
static const char *const q_keys[] = { "Q", NULL };
static const char *const k_keys[] = { "K", NULL };
static const char *const v_keys[] = { "V", NULL };
static const char *const mask_keys[] = { "mask", NULL };





/* A file larger than the run may use is refused before it is read. */

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

	/* latent attention's keys and values have their own projections */
	if (p->direct || n_proj == 0 || n_proj == 3 || latent_on(s))
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

	if (memory_has(path)) /* one list in memory, for queries and keys alike */
		return read_matrix(&p->pos_q, path, &(read_spec){ "positions", NULL, 1, 2, 0 });
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

/* "-x x.json", "--mask <stdin>": where a matrix came from, for messages
 * (malloc'd; opt and a space alone when path is NULL) */
static char *source(const char *opt, const char *path, const char *after)
{
	const char *shown = path ? path_shown(path) : "";
	const size_t n = strlen(opt) + strlen(shown) + strlen(after) + 2;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "%s %s%s", opt, shown, after);
	return s;
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
	const read_spec ns = { "norm weights", NULL, 1, 2, 0 };

	if (!(p->x_src = source("-x", s->x, "")) || !(p->kv_src = source("--kv", s->kv, "")) ||
	    !(p->xk_src = source("--xk", s->xk, "")) || !(p->xv_src = source("--xv", s->xv, "")) ||
	    !(p->q_src = source("--q", s->q, "")) ||
	    !(p->k_src = s->k_transposed ? source("--kt", s->k, " (transposed)") : source("--k", s->k, "")) ||
	    !(p->v_src = source("--v", s->v, "")) || !(p->mask_src = source("--mask", s->mask, "")))
		return error("out of memory");
	/* the files read here, each refused first if larger than the budget's
	 * limit (config.json is read before, --grad-output after; a checkpoint
	 * is read a tensor at a time, never whole) */
	for (size_t i = 0; i < n_spec_files; i++) {
		const struct spec_file *f = &spec_files[i];
		const char *path = spec_file_path(s, f);

		if (!strcmp(f->name, "config") || !strcmp(f->name, "grad-output") ||
		    (!strcmp(f->name, "weights") && ckpt_is_checkpoint(path)) || memory_has(path))
			continue;
		if (check_file_size(path))
			return -1;
	}
	if (s->x && read_matrix(&p->x, s->x, &xs))
		return -1;
	if (s->sinks && read_matrix(&p->sinks, s->sinks, &ss))
		return -1;
	if (s->alibi_slopes && read_matrix(&p->alibi, s->alibi_slopes, &as))
		return -1;
	if ((s->q_norm && read_matrix(&p->q_norm, s->q_norm, &ns)) ||
	    (s->k_norm && read_matrix(&p->k_norm, s->k_norm, &ns)) || latent_read(s, p))
		return -1;
	if (s->kv && read_matrix(&p->kv, s->kv, &kvs))
		return -1;
	if (s->xk && (read_matrix(&p->xk, s->xk, &xks) || read_matrix(&p->xv, s->xv, &xvs)))
		return -1;
	p->direct = s->q != NULL;
	if (p->direct && (read_matrix(&p->q, s->q, &qs) ||
			   read_matrix(&p->k, s->k, s->k_transposed ? &kts : &ks) ||
			   read_matrix(&p->v, s->v, &vs) || (s->k_transposed && matrix_transpose(&p->k))))
		return -1;
	p->w.layout = s->layout;
	p->w.floats = s->floats;
	p->w.map = s->map;
	if (s->w && ckpt_is_checkpoint(s->w)) {
		matrix *const extra[MODEL_EXTRA] = {
			[MODEL_SINKS] = &p->sinks, [MODEL_Q_NORM] = &p->q_norm,
			[MODEL_K_NORM] = &p->k_norm,
			[MODEL_LATENT + LAT_Q_A_PROJ] = &p->latent[LAT_Q_A_PROJ],
			[MODEL_LATENT + LAT_Q_A_NORM] = &p->latent[LAT_Q_A_NORM],
			[MODEL_LATENT + LAT_KV_A_PROJ] = &p->latent[LAT_KV_A_PROJ],
			[MODEL_LATENT + LAT_KV_A_NORM] = &p->latent[LAT_KV_A_NORM],
			[MODEL_LATENT + LAT_KV_B_PROJ] = &p->latent[LAT_KV_B_PROJ] };

		if (model_load(&p->w, extra, &p->spec, s->w))
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
	if (s->probe && !s->x && !p->direct && (p->w.m[WQ].rank == 2 || p->latent[LAT_KV_A_PROJ].rank)) {
		/* the layer alone: one token of zeros, of the width its weights take
		 * (latent attention's: kv_a_proj_with_mqa's, (d_in, d_out)) */
		const matrix *in = p->latent[LAT_KV_A_PROJ].rank ? &p->latent[LAT_KV_A_PROJ] :
				   &p->w.m[WQ];

		if (matrix_alloc(&p->x, 2, 1, in->dim[0], 1))
			return -1;
		memset(p->x.v, 0, in->dim[0] * sizeof(double));
	}
	/* --mask m.safetensors: read in place by the safetensors reader, by its
	 * name as -w tells a checkpoint (a pipe cannot be read so) */
	if (s->mask && (st_path(s->mask) ? st_read_mask(&p->mask, s->mask)
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












/* ---- the problem -------------------------------------------------------- */

static const double *weight_ptr(const weights *w, int i)
{
	return weights_has(w, i) ? w->m[i].v : NULL;
}

static const float *weight_ptr_f(const weights *w, int i)
{
	return weights_has(w, i) ? w->m[i].f : NULL;
}





static int add_input(void *ctx, const char *file)
{
	(void)ctx;
	return files_note("-w", file);
}

int problem_note_inputs(const struct problem_spec *s)
{
	int rc = 0;

	/* every file but -w's, which may be a folder or a checkpoint's files */
	for (size_t i = 0; i < n_spec_files && !rc; i++) {
		const char *path = spec_file_path(s, &spec_files[i]);

		/* an array in memory is no file an output could overwrite */
		if (path && spec_files[i].at != offsetof(struct problem_spec, w) && !memory_has(path))
			rc = files_note(spec_file_option(s, &spec_files[i]), path);
	}
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

	/* the keys' lengths before the rules that depend on them (the causal
	 * offsets the rotary tables are checked against) */
	if (read_inputs(s, p) || shapes_batch(p) || identity_for_missing(s, p) ||
	    shapes_dims(s, p, &p->d) || (latent_on(s) && (latent_config(p), 0)) ||
	    shapes_kv_len(s, p) || checks_mask(s, p, &p->d, &p->cfg) ||
	    checks_sinks(s, p, &p->d, &p->cfg) || checks_alibi(s, p, &p->d, &p->cfg) ||
	    checks_rope(s, p, &p->d, &p->cfg) || checks_norm(s, p, &p->d, &p->cfg) ||
	    checks_config(s, p) || labels_set(s, p, &p->d))
		return EXIT_DATA;
	/* --rows and --cols: queries and keys, known once the labels are */
	p->rows[0] = p->cols[0] = 0;
	p->rows[1] = d->n_q;
	p->cols[1] = d->n_kv;
	if (s->rows && labels_parse_range(s->rows, "--rows", "queries",
					  (const char *const *)p->labels.query, d->n_q, p->rows))
		return EXIT_USAGE;
	if (s->cols && labels_parse_range(s->cols, "--cols", "keys",
					  (const char *const *)p->labels.key, d->n_kv, p->cols))
		return EXIT_USAGE;
	/* --cell names a query and a key: a command-line error, known once the labels are */
	if (s->cell && labels_parse_cell(s->cell, (const char *const *)p->labels.query, d->n_q,
					 (const char *const *)p->labels.key, d->n_kv, &p->cell[0],
					 &p->cell[1]))
		return EXIT_USAGE;
	shapes_inputs(p);
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
	if (latent_on(s))
		latent_weights(p);
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
	free(p->x_src);
	free(p->kv_src);
	free(p->xk_src);
	free(p->xv_src);
	free(p->q_src);
	free(p->k_src);
	free(p->v_src);
	free(p->mask_src);
	matrix_free(&p->x);
	matrix_free(&p->kv);
	matrix_free(&p->xk);
	matrix_free(&p->xv);
	matrix_free(&p->q);
	matrix_free(&p->k);
	matrix_free(&p->v);
	matrix_free(&p->mask);
	matrix_free(&p->sinks);
	matrix_free(&p->q_norm);
	matrix_free(&p->k_norm);
	for (int i = 0; i < N_LATENT; i++)
		matrix_free(&p->latent[i]);
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
	labels_free(&p->labels);
	memset(p, 0, sizeof(*p));
}

/*
 * diagnose.c: 'mha compare's diagnosis (compare.h): for the first step
 * that differs, the well-known mistakes each recomputed, through the
 * library with the configuration changed where an mha option or a
 * rearranged weight expresses the mistake, and with a small tail of the
 * computation here (scores on) for those no configuration can (K·Qᵀ, the
 * softmax over queries); the one that reproduces their numbers is named.
 */
#include "util/budget.h"
#include "util/msg.h"
#include "util/text.h"
#include "compare/compare.h"
#include "load/problem.h"

#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mistakes ----------------------------------------------------------- */

/* "divides by sqrt(d_k) = 2" for a config of these dims */
static void scale_words(char *buf, size_t size, const mha_dims *d, const mha_config *cfg, int you)
{
	const double s = mha_scale_of(d, cfg);
	const char *verb = you ? "divided" : "divides";

	switch (cfg->scale_mode) {
	case MHA_SCALE_DK:
		snprintf(buf, size, "%s by sqrt(d_k) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_DMODEL:
		snprintf(buf, size, "%s by sqrt(d_model) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_SEQLEN:
		snprintf(buf, size, "%s by sqrt(n_kv) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_NONE:
		snprintf(buf, size, "%s", you ? "did not scale the scores" : "does not scale the scores");
		break;
	default:
		snprintf(buf, size, "%s by %.6g", you ? "multiplied" : "multiplies", s);
		break;
	}
}

/*
 * Scratch memory of a mistake's recomputation (weights rearranged, masks
 * inverted), charged to --max-memory as a matrix is: the charge in front of
 * the block.  NULL said (out of memory, or past the limit).
 */
static void *charged_alloc(size_t n)
{
	const size_t held = budget_block(n + sizeof(size_t));
	size_t *p;
	char lim[48];

	if (n > SIZE_MAX / 2 || budget_take(held)) {
		error("recomputing the mistakes needs more than --max-memory (%s): raise "
		      "--max-memory", show_bytes(lim, sizeof(lim), budget_limit()));
		return NULL;
	}
	p = malloc(n + sizeof(size_t));
	if (!p) {
		budget_give(held);
		error("out of memory");
		return NULL;
	}
	p[0] = held;
	return p + 1;
}

static void charged_free(void *q)
{
	if (q) {
		size_t *p = (size_t *)q - 1;

		budget_give(p[0]);
		free(p);
	}
}

/* a weight's transpose, in place of the square original: (n, n) */
static double *transposed(const double *w, size_t n)
{
	double *t = charged_alloc(n * n * sizeof(*t));

	for (size_t i = 0; t && i < n; i++)
		for (size_t j = 0; j < n; j++)
			t[j * n + i] = w[i * n + j];
	return t;
}

/* perm[b*dk + i] = i*H + b: the column of the whole that interleaved head b's i-th is */
static size_t *interleave_perm(size_t H, size_t dk)
{
	size_t *perm = malloc(H * dk * sizeof(*perm));

	for (size_t b = 0; perm && b < H; b++)
		for (size_t i = 0; i < dk; i++)
			perm[b * dk + i] = i * H + b;
	return perm;
}

/* m (rows, cols) with column j taken from column perm[j] of src */
static double *permute_cols(const double *src, size_t rows, size_t cols, const size_t *perm)
{
	double *m = charged_alloc(rows * cols * sizeof(*m));

	for (size_t r = 0; m && r < rows; r++)
		for (size_t j = 0; j < cols; j++)
			m[r * cols + j] = src[r * cols + perm[j]];
	return m;
}

/* back to the whole's column order: m's column j was the whole's perm[j] */
static int unpermute(matrix *m, const size_t *perm, size_t cols)
{
	double *tmp;
	size_t rows;

	if (!m->rank || matrix_cols(m) != cols)
		return 0;
	rows = matrix_size(m) / cols;
	tmp = charged_alloc(matrix_size(m) * sizeof(*tmp));
	if (!tmp)
		return -1;
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++)
			tmp[r * cols + perm[j]] = m->v[r * cols + j];
	memcpy(m->v, tmp, matrix_size(m) * sizeof(double));
	charged_free(tmp);
	return 0;
}

/*
 * The tail of the computation from mine's scores on, the scores transposed
 * (K·Qᵀ) or the softmax taken over each column (the queries): what no
 * configuration of the library computes.  0, 1 not possible, -1 said.
 */
static int tail_set(struct set *c, const struct ctx *x, int transpose, int by_query)
{
	const struct problem *p = x->p;
	const struct set *mine = x->mine;
	const mha_dims *d = &p->d;
	const size_t H = d->heads, nq = d->n_q, nkv = d->n_kv, dv = d->d_v;
	const size_t R = transpose ? nkv : nq, C = transpose ? nq : nkv;
	const double scale = x->rep->scale, cap = p->cfg.softcap;
	const matrix *mask = &mine->m[C_MASK], *V = &mine->m[C_HEAD_V];
	size_t mP, mR, mC;
	int full;

	if (!mine->m[C_SCORES].rank || !V->rank || !mask->rank)
		return 1;
	shape3(mask, &mP, &mR, &mC);
	full = mR == R && mC == C;
	for (int i = 0; i <= C_HEAD_V; i++)
		if (copy_matrix(&c->m[i], &mine->m[i]))
			return -1;
	if (matrix_alloc(&c->m[C_SCORES], 3, H, R, C))
		return -1;
	for (size_t h = 0; h < H; h++)
		for (size_t i = 0; i < R; i++)
			for (size_t j = 0; j < C; j++)
				c->m[C_SCORES].v[(h * R + i) * C + j] =
					mine->m[C_SCORES].v[(h * nq + (transpose ? j : i)) * nkv +
							    (transpose ? i : j)];
	if (!full)
		return 0; /* K·Qᵀ of another shape than Q·Kᵀ goes no further */
	if (copy_matrix(&c->m[C_MASK], mask) ||
	    matrix_alloc(&c->m[C_SCALED], 3, H, R, C) || matrix_alloc(&c->m[C_MASKED], 3, H, R, C) ||
	    matrix_alloc(&c->m[C_SOFTMAX], 3, H, R, C) ||
	    (cap > 0 && matrix_alloc(&c->m[C_SOFTCAPPED], 3, H, R, C)) ||
	    matrix_alloc(&c->m[C_HEAD_OUTPUT], 3, H, R, dv) || matrix_alloc(&c->m[C_CONCAT], 2, R, H * dv, 1))
		return -1;
	for (size_t h = 0; h < H; h++) {
		double *sc = c->m[C_SCALED].v + h * R * C, *mk = c->m[C_MASKED].v + h * R * C;
		double *sm = c->m[C_SOFTMAX].v + h * R * C;
		const double *mh = mask->v + (mP > 1 ? h : 0) * R * C;

		for (size_t k = 0; k < R * C; k++) {
			double v = c->m[C_SCORES].v[h * R * C + k] * scale;

			sc[k] = v;
			if (cap > 0) {
				v = cap * tanh(v / cap);
				c->m[C_SOFTCAPPED].v[h * R * C + k] = v;
			}
			mk[k] = mh[k] == -INFINITY ? -INFINITY : v + mh[k];
		}
		/* the softmax along rows (keys), or down columns (queries) */
		for (size_t a = 0; a < (by_query ? C : R); a++) {
			const size_t n = by_query ? R : C, stride = by_query ? C : 1;
			const size_t at = by_query ? a : a * C;
			const double sink = !by_query && p->cfg.sinks ? p->cfg.sinks[h] : -INFINITY;
			double mx = sink, sum = 0;

			for (size_t k = 0; k < n; k++)
				mx = fmax(mx, mk[at + k * stride]);
			for (size_t k = 0; k < n; k++) {
				const double e = mx == -INFINITY ? 0 : exp(mk[at + k * stride] - mx);

				sm[at + k * stride] = e;
				sum += e;
			}
			if (sink > -INFINITY && mx > -INFINITY)
				sum += exp(sink - mx);
			for (size_t k = 0; k < n; k++)
				sm[at + k * stride] = sum > 0 ? sm[at + k * stride] / sum : 0;
		}
		for (size_t i = 0; i < R; i++)
			for (size_t e = 0; e < dv; e++) {
				double acc = 0;

				for (size_t j = 0; j < C; j++)
					acc += sm[i * C + j] * V->v[(h * nkv + j) * dv + e];
				c->m[C_HEAD_OUTPUT].v[(h * R + i) * dv + e] = acc;
				c->m[C_CONCAT].v[i * H * dv + h * dv + e] = acc;
			}
	}
	if (!p->weights.W_O)
		return copy_matrix(&c->m[C_OUTPUT], &c->m[C_CONCAT]);
	if (matrix_alloc(&c->m[C_OUTPUT], 2, R, d->d_out, 1))
		return -1;
	for (size_t i = 0; i < R; i++)
		for (size_t o = 0; o < d->d_out; o++) {
			double acc = 0;

			for (size_t k = 0; k < H * dv; k++)
				acc += c->m[C_CONCAT].v[i * H * dv + k] * p->weights.W_O[k * d->d_out + o];
			c->m[C_OUTPUT].v[i * d->d_out + o] = acc + (p->weights.b_O ? p->weights.b_O[o] : 0);
		}
	return 0;
}

/* heads split by interleaved columns, and merged back the same way */
static int interleaved_set(struct set *c, const struct ctx *x)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	mha_inputs in = p->in;
	mha_weights w = p->weights;
	size_t *pq = interleave_perm(d->heads, d->d_k), *pk = interleave_perm(d->kv_heads, d->d_k);
	size_t *pv = interleave_perm(d->kv_heads, d->d_v), *po = interleave_perm(d->heads, d->d_v);
	double *bufs[8] = { NULL };
	size_t nb = 0;
	int rc = -1;

	if (!pq || !pk || !pv || !po) {
		error("out of memory");
		goto done;
	}
	/* each projection's columns, or its input's where there is no weight */
#define PERMUTE(W, b, X, rows_in, xrows, perm, cols)                                         \
	do {                                                                                  \
		if (W) {                                                                      \
			W = bufs[nb++] = permute_cols(W, rows_in, cols, perm);               \
			if (b)                                                                \
				b = bufs[nb++] = permute_cols(b, 1, cols, perm);              \
		} else {                                                                      \
			X = bufs[nb++] = permute_cols(X, xrows, cols, perm);                  \
		}                                                                             \
	} while (0)
	PERMUTE(w.W_Q, w.b_Q, in.xq, d->d_q_in, d->n_q, pq, d->heads * d->d_k);
	PERMUTE(w.W_K, w.b_K, in.xk, d->d_k_in, d->n_kv, pk, d->kv_heads * d->d_k);
	PERMUTE(w.W_V, w.b_V, in.xv, d->d_v_in, d->n_kv, pv, d->kv_heads * d->d_v);
#undef PERMUTE
	if (w.W_O) {
		/* concat's column j is theirs po[j]: W_O's rows follow */
		double *wo = charged_alloc(d->heads * d->d_v * d->d_out * sizeof(*wo));

		bufs[nb++] = wo;
		for (size_t j = 0; wo && j < d->heads * d->d_v; j++)
			memcpy(wo + j * d->d_out, p->weights.W_O + po[j] * d->d_out,
			       d->d_out * sizeof(*wo));
		w.W_O = wo;
	}
	for (size_t i = 0; i < nb; i++)
		if (!bufs[i])
			goto done; /* said */
	rc = run_set(c, x, &in, &w, &p->cfg, NULL, NULL);
	if (rc)
		goto done;
	/* the whole matrices in their order again: only the split was wrong (X
	 * permuted for a projection without weight is X itself to them) */
	matrix_free(&c->m[C_X]);
	rc = copy_matrix(&c->m[C_X], &x->mine->m[C_X]);
	if (!rc)
		rc = unpermute(&c->m[C_Q], pq, d->heads * d->d_k) ||
		     unpermute(&c->m[C_Q_ROT], pq, d->heads * d->d_k) ||
		     unpermute(&c->m[C_K], pk, d->kv_heads * d->d_k) ||
		     unpermute(&c->m[C_K_ROT], pk, d->kv_heads * d->d_k) ||
		     unpermute(&c->m[C_V], pv, d->kv_heads * d->d_v) ||
		     unpermute(&c->m[C_CONCAT], po, d->heads * d->d_v) ||
		     (!w.W_O && unpermute(&c->m[C_OUTPUT], po, d->heads * d->d_v)) ? -1 : 0;
done:
	for (size_t i = 0; i < nb; i++)
		charged_free(bufs[i]);
	free(pq);
	free(pk);
	free(pv);
	free(po);
	return rc;
}

enum {
	M_F32, M_SCALE_DMODEL, M_SCALE_SEQLEN, M_SCALE_NONE, M_SCALE_DK, M_WQ_T, M_WK_T, M_WV_T, M_WO_T, M_KQ,
	M_INTERLEAVED, M_MASK_INVERTED, M_CAUSAL_ALIGN, M_NO_MASK, M_NO_CAUSAL,
	M_NO_KV_LEN, M_SOFTMAX_QUERIES, M_NO_BQ, M_NO_BK, M_NO_BV, M_NO_BO, M_ROPE, M_COUNT
};

/*
 * Mistake k recomputed into c, and described in m: 0, 1 when it does not
 * apply to this run (or cannot differ from mha's), -1 said.
 */
static int candidate(int k, const struct ctx *x, struct mistake *m, struct set *c)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	mha_config cfg = p->cfg;
	mha_weights w = p->weights;
	mha_inputs in = p->in;
	char ours[120], theirs[120];
	double *tmp = NULL;
	unsigned char *allow = NULL;
	ptrdiff_t *pos = NULL;
	int rc;

	memset(m, 0, sizeof(*m));
	/* latent attention has no W_K, W_V or Q, K, V biases, and its W_Q follows a
	 * latent: the mistakes of those weights and of the heads' columns are
	 * ordinary attention's */
	if (cfg.mla.on && (k == M_WQ_T || k == M_WK_T || k == M_WV_T || k == M_INTERLEAVED ||
			   k == M_NO_BQ || k == M_NO_BK || k == M_NO_BV))
		return 1;
	switch (k) {
	case M_SCALE_DMODEL: case M_SCALE_SEQLEN: case M_SCALE_NONE: case M_SCALE_DK: {
		static const char *const names[] = { "dmodel", "seqlen", "none", "dk" };
		static const char *const ids[] = { "scale-dmodel", "scale-seqlen", "scale-none",
						   "scale-dk" };
		const int i = k - M_SCALE_DMODEL;

		/* scale-dk: the run itself scales otherwise (--scale dmodel, a number) */
		cfg.scale_mode = k == M_SCALE_DMODEL ? MHA_SCALE_DMODEL : k == M_SCALE_SEQLEN ?
				 MHA_SCALE_SEQLEN : k == M_SCALE_NONE ? MHA_SCALE_NONE : MHA_SCALE_DK;
		if (mha_scale_of(d, &cfg) == x->rep->scale)
			return 1;
		m->id = ids[i];
		snprintf(m->option, sizeof(m->option), "--scale %s", names[i]);
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		scale_words(theirs, sizeof(theirs), d, &cfg, 1);
		scale_words(ours, sizeof(ours), d, &p->cfg, 0);
		snprintf(m->why, sizeof(m->why), "you %s; this layer %s", theirs, ours);
		break;
	}
	case M_WQ_T: case M_WK_T: case M_WV_T: case M_WO_T: {
		static const char *const names[] = { "W_Q", "W_K", "W_V", "W_O" };
		const double **slot = k == M_WQ_T ? &w.W_Q : k == M_WK_T ? &w.W_K : k == M_WV_T ? &w.W_V
				      : &w.W_O;
		const size_t rows = k == M_WQ_T ? d->d_q_in : k == M_WK_T ? d->d_k_in : k == M_WV_T ?
				    d->d_v_in : d->heads * d->d_v;
		const size_t cols = k == M_WQ_T ? d->heads * d->d_k : k == M_WK_T ? d->kv_heads * d->d_k
				    : k == M_WV_T ? d->kv_heads * d->d_v : d->d_out;
		const char *name = names[k - M_WQ_T];

		/* only a square weight can be applied the wrong way round */
		if (!*slot || rows != cols)
			return 1;
		tmp = transposed(*slot, rows);
		if (!tmp)
			return -1;
		*slot = tmp;
		m->id = "weight-transposed";
		snprintf(m->with, sizeof(m->with), "%s transposed", name);
		snprintf(m->why, sizeof(m->why), "you applied %s the wrong way round, x*%s^T where this "
			 "layer computes x*%s (%s), as %s", name, name, name,
			 p->spec.layout == LAYOUT_TORCH ? "--layout torch: x*W^T of PyTorch's weight"
			 : "weights stored d_in x d_out", p->spec.layout == LAYOUT_TORCH ?
			 "nn.Linear does" : "the tutorials write it");
		break;
	}
	case M_KQ:
		m->id = "scores-transposed";
		snprintf(m->with, sizeof(m->with), "the scores transposed");
		snprintf(m->why, sizeof(m->why), "you computed K*Q^T; the scores are Q*K^T, a row per "
			 "query and a column per key");
		return tail_set(c, x, 1, 0);
	case M_INTERLEAVED:
		if (d->heads == 1)
			return 1;
		m->id = "heads-interleaved";
		snprintf(m->with, sizeof(m->with), "the heads split by interleaved columns");
		snprintf(m->why, sizeof(m->why), "you gave head h the columns h, h+%zu, h+%zu, ... of Q, "
			 "K and V; this layer gives it a block of d_k = %zu columns side by side, "
			 "h*%zu to h*%zu+%zu", d->heads, 2 * d->heads, d->d_k, d->d_k, d->d_k, d->d_k - 1);
		return interleaved_set(c, x);
	case M_MASK_INVERTED: {
		const size_t n = matrix_size(&p->mask);

		if (!p->allow)
			return 1;
		allow = charged_alloc(n + 1);
		if (!allow)
			return -1;
		for (size_t i = 0; i < n; i++)
			allow[i] = !p->allow[i];
		cfg.mask.allow = allow;
		m->id = "mask-inverted";
		snprintf(m->option, sizeof(m->option), "--mask-bool %s",
			 p->spec.mask_block ? "attend" : "block");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you read the boolean mask's true as %s; this run "
			 "reads it as %s", p->spec.mask_block ? "may attend" : "blocked",
			 p->spec.mask_block ? "blocked (PyTorch's attn_mask)" : "may attend (SDPA, ONNX)");
		break;
	}
	case M_CAUSAL_ALIGN: {
		const ptrdiff_t was = mha_causal_offset(d, &p->cfg, 0);

		if (cfg.causal != MHA_CAUSAL_TOP_LEFT && cfg.causal != MHA_CAUSAL_BOTTOM_RIGHT)
			return 1;
		cfg.causal = cfg.causal == MHA_CAUSAL_TOP_LEFT ? MHA_CAUSAL_BOTTOM_RIGHT
							      : MHA_CAUSAL_TOP_LEFT;
		if (mha_causal_offset(d, &cfg, 0) == was)
			return 1;
		m->id = "causal-alignment";
		snprintf(m->option, sizeof(m->option), "--causal=%s",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "top-left" : "bottom-right");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you aligned the causal mask %s (query i sees keys j "
			 "<= i%s); this run aligns it %s (j <= i%s)",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "top-left" : "bottom-right",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "" : " + n_kv - n_q",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "bottom-right" : "top-left",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? " + n_kv - n_q" : "");
		break;
	}
	case M_NO_MASK:
		if (!cfg.mask.allow && !cfg.mask.bias)
			return 1;
		cfg.mask.allow = NULL;
		cfg.mask.bias = NULL;
		m->id = "mask-missing";
		snprintf(m->with, sizeof(m->with), "no --mask");
		text_shown(ours, sizeof(ours), path_shown(p->spec.mask));
		snprintf(m->why, sizeof(m->why), "you left out the mask (--mask %s)", ours);
		break;
	case M_NO_CAUSAL:
		if (!cfg.causal)
			return 1;
		if (cfg.rope.mode && !cfg.rope.q_pos && mha_causal_offset(d, &cfg, 0)) {
			/* the queries stay where they stand: the mask alone left out
			 * (rope-position-offset is the queries turned elsewhere) */
			const ptrdiff_t off = mha_causal_offset(d, &cfg, 0);

			if (!(pos = charged_alloc(d->n_q * sizeof(*pos))))
				return -1;
			for (size_t i = 0; i < d->n_q; i++)
				pos[i] = off + (ptrdiff_t)i;
			cfg.rope.q_pos = pos;
		}
		cfg.causal = MHA_CAUSAL_NONE;
		m->id = "causal-missing";
		snprintf(m->with, sizeof(m->with), "no --causal");
		snprintf(m->why, sizeof(m->why), "you left out the causal mask: each query saw every "
			 "key, the later ones too");
		break;
	case M_NO_KV_LEN:
		if (!cfg.kv_len && !cfg.kv_lens)
			return 1;
		cfg.kv_len = 0;
		cfg.kv_lens = NULL;
		m->id = "padding-missing";
		snprintf(m->with, sizeof(m->with), "no --kv-len");
		snprintf(m->why, sizeof(m->why), "you left out the padding mask: the keys past --kv-len "
			 "took part");
		break;
	case M_SOFTMAX_QUERIES:
		if (p->cfg.sinks)
			return 1;
		m->id = "softmax-over-queries";
		snprintf(m->with, sizeof(m->with), "the softmax over the queries");
		snprintf(m->why, sizeof(m->why), "you took the softmax down each column (over the "
			 "queries: axis 0, or dim=-2); it runs along each row, over the keys (axis -1), "
			 "so that each query's weights sum to 1");
		return tail_set(c, x, 0, 1);
	case M_NO_BQ: case M_NO_BK: case M_NO_BV: case M_NO_BO: {
		static const char *const names[] = { "b_Q", "b_K", "b_V", "b_O" };
		static const char *const what[] = { "query", "key", "value", "output" };
		const double **slot = k == M_NO_BQ ? &w.b_Q : k == M_NO_BK ? &w.b_K : k == M_NO_BV ?
				      &w.b_V : &w.b_O;
		const int i = k - M_NO_BQ;

		if (!*slot || (k == M_NO_BO && !w.W_O))
			return 1;
		*slot = NULL;
		m->id = "bias-missing";
		snprintf(m->with, sizeof(m->with), "no %s", names[i]);
		snprintf(m->why, sizeof(m->why), "you left out %s, the bias of the %s projection",
			 names[i], what[i]);
		break;
	}
	case M_ROPE:
		if (!cfg.rope.mode)
			return 1;
		cfg.rope.mode = cfg.rope.mode == MHA_ROPE_HALF ? MHA_ROPE_INTERLEAVED : MHA_ROPE_HALF;
		m->id = "rope-pairs";
		snprintf(m->option, sizeof(m->option), "--rope %s",
			 cfg.rope.mode == MHA_ROPE_HALF ? "half" : "interleaved");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you paired RoPE's features %s; this run pairs them %s",
			 cfg.rope.mode == MHA_ROPE_HALF ? "half-split, i with i + R/2 (Llama, GPT-NeoX)"
			 : "interleaved, 2i with 2i + 1 (GPT-J)",
			 cfg.rope.mode == MHA_ROPE_HALF ? "interleaved, 2i with 2i + 1 (--rope "
			 "interleaved)" : "half-split, i with i + R/2 (--rope half)");
		break;
	default:
		return 1;
	}
	rc = run_set(c, x, &in, &w, &cfg, NULL, NULL);
	charged_free(tmp);
	charged_free(allow);
	charged_free(pos);
	return rc;
}

/*
 * The mistake that reproduces their first differing step (and agrees with
 * every step they gave before it): the first, in the order above, that
 * matches all their later steps too, else the first that matches.
 */
static int diagnose_with(struct diagnosis *dg, const struct ctx *x, int first,
			 const struct tol *tol)
{
	const struct tol f32tol = { 1e-4, 1e-5, 1, 0, tol->factor, tol->refs };
	struct mistake best = { 0 };
	int have = 0, best_later = 0, best_as = first;
	const int n_port = port_mistake_count();

	memset(dg, 0, sizeof(*dg));
	for (int k = 0; k < M_COUNT + n_port + bw_mistake_count() && !(have && best_later); k++) {
		struct set c = { 0 };
		struct mistake m;
		int ok = 1, later = 1, rc, as = first;

		if (k == M_F32) {
			/* float32 rounding is no recomputation: their numbers within its tolerance */
			if (x->f32 || tol->f32)
				continue;
			for (int s = 0; s <= first && ok; s++)
				if (x->a->g[s].m.rank)
					ok = (as = reproduced_as(x->mine, x->a, s, &f32tol)) >= 0;
			for (int s = first + 1; s < C_COUNT && ok; s++)
				later &= !x->a->g[s].m.rank || reproduced_as(x->mine, x->a, s, &f32tol) >= 0;
			if (ok) {
				best = (struct mistake){ .id = "float32", .option = "--dtype f32" };
				snprintf(best.with, sizeof(best.with), "--dtype f32");
				snprintf(best.why, sizeof(best.why), "your numbers agree within float32 "
					 "rounding (rtol 1e-4, atol 1e-5): you computed in float32; "
					 "compare with --dtype f32");
				have = 1;
				best_later = later;
				best_as = as;
			}
			continue;
		}
		/* the backward's mistakes explain a gradient alone */
		rc = k < M_COUNT ? candidate(k, x, &m, &c) :
		     k < M_COUNT + n_port ? port_candidate(k - M_COUNT, x, &m, &c) :
		     first >= C_GRAD ? bw_candidate(k - M_COUNT - n_port, x, &m, &c) : 1;
		if (rc < 0) {
			set_free(&c);
			return -1;
		}
		if (rc == 0) {
			for (int s = 0; s <= first && ok; s++)
				if (x->a->g[s].m.rank)
					ok = (as = reproduced_as(&c, x->a, s, tol)) >= 0;
			for (int s = first + 1; s < C_COUNT && ok; s++)
				later &= !x->a->g[s].m.rank || reproduced_as(&c, x->a, s, tol) >= 0;
			if (ok && (!have || (later && !best_later))) {
				best = m;
				have = 1;
				best_later = later;
				best_as = as;
			}
		}
		set_free(&c);
	}
	if (!have)
		return 0;
	dg->found = 1;
	dg->step = first;
	dg->as_step = best_as;
	dg->m = best;
	dg->later = best_later;
	{
		char name[96];

		if (best_as != first)
			snprintf(name, sizeof(name), "%s (your %s)", cmp_name(best_as), cmp_key(first));
		else
			snprintf(name, sizeof(name), "%s", cmp_name(first));
		if (!strcmp(best.id, "float32"))
			snprintf(dg->message, sizeof(dg->message), "%s: %s", name, best.why);
		else
			snprintf(dg->message, sizeof(dg->message), "%s matches mha's with %s: %s%s",
			 name, best.with, best.why, tol->f32 && !x->f32 ?
			 " (within float32 rounding: your numbers are float32's, compare with --dtype "
			 "f32)" : "");
	}
	return 0;
}

/* at the run's tolerance; without --dtype f32 at float32's too, for float32
 * numbers that carry a mistake as well */
int diagnose(struct diagnosis *dg, const struct ctx *x, int first)
{
	const struct tol f32tol = { fmax(1e-4, x->tol.rtol), fmax(1e-5, x->tol.atol), 1, 0,
				     x->tol.factor, x->tol.refs };

	int first32 = -1;

	if (diagnose_with(dg, x, first, &x->tol))
		return -1;
	if (x->f32 || (dg->found && (strcmp(dg->m.id, "float32") || dg->later)))
		return 0;
	/* float32 numbers, and then a mistake: the first step past float32's rounding */
	for (int s = 0; s < C_COUNT && first32 < 0; s++)
		if (x->a->g[s].m.rank && !reproduces(x->mine, x->a, s, &f32tol))
			first32 = s;
	if (first32 < 0)
		return 0;
	{
		struct diagnosis d32;

		if (diagnose_with(&d32, x, first32, &f32tol))
			return -1;
		if (d32.found)
			*dg = d32;
	}
	return 0;
}


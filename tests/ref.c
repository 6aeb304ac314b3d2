/*
 * ref.c: the reference multi-head attention described in ref.h.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double *new_matrix(size_t rows, size_t cols)
{
	double *m = calloc(rows && cols ? rows * cols : 1, sizeof(double));

	if (!m)
		abort();
	return m;
}

static double **new_list(size_t n)
{
	double **l = calloc(n, sizeof(double *));

	if (!l)
		abort();
	return l;
}

/* C (n, p) = A (n, m) · B (m, p) */
static double *matmul(const double *A, const double *B, size_t n, size_t m, size_t p)
{
	double *C = new_matrix(n, p);

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < p; j++) {
			long double s = 0;

			for (size_t k = 0; k < m; k++)
				s += (long double)A[i * m + k] * B[k * p + j];
			C[i * p + j] = (double)s;
		}
	return C;
}

static double *transpose(const double *A, size_t n, size_t m)
{
	double *T = new_matrix(m, n);

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < m; j++)
			T[j * n + i] = A[i * m + j];
	return T;
}

/* x·W + b, or x + b without W (identity projection) */
static double *linear(const double *x, size_t n, size_t d_in, const double *W,
		      const double *b, size_t d_out)
{
	double *y;

	if (W) {
		y = matmul(x, W, n, d_in, d_out);
	} else {
		y = new_matrix(n, d_out);
		memcpy(y, x, n * d_out * sizeof(double));
	}
	if (b)
		for (size_t i = 0; i < n; i++)
			for (size_t j = 0; j < d_out; j++)
				y[i * d_out + j] += b[j];
	return y;
}

/* columns [c0, c0+w) of A (n, cols) */
static double *columns(const double *A, size_t n, size_t cols, size_t c0, size_t w)
{
	double *B = new_matrix(n, w);

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < w; j++)
			B[i * w + j] = A[i * cols + c0 + j];
	return B;
}

/*
 * ALiBi's slope for head h of H: given, or Press et al.'s geometric
 * sequence written out as the paper's code does it: for a power of two n,
 * start = 2^(-8/n) and slope h = start^(h+1); otherwise the n = 2^floor(log2 H)
 * slopes, then every other one (from the first) of the 2n sequence.
 */
static double press_pow2(size_t h, size_t n)
{
	const long double start = powl(2.0L, -8.0L / (long double)n);

	return (double)powl(start, (long double)(h + 1));
}

static double ref_alibi_slope(const mha_config *cfg, size_t h, size_t H)
{
	size_t n = 1;

	if (cfg->alibi.slopes)
		return cfg->alibi.slopes[h];
	while (n * 2 <= H)
		n *= 2;
	return h < n ? press_pow2(h, n) : press_pow2(2 * (h - n), 2 * n);
}

/*
 * Rotary embeddings, as the papers write them: each pair of a head's first
 * R features is a complex number x1 + i·x2, multiplied by e^(i·angle),
 * angle = pos·θ^(−2t/R) (or the tables' cos and sin), in long double.
 */
static double *rotate(const double *A, size_t n, size_t heads, size_t dk, const mha_rope *rope,
		      const ptrdiff_t *pos, long pos0)
{
	const size_t R = rope->dim ? rope->dim : dk;
	const long double theta = rope->theta ? rope->theta : 10000.0L;
	double *B = new_matrix(n, heads * dk);

	memcpy(B, A, n * heads * dk * sizeof(double));
	for (size_t i = 0; i < n; i++) {
		const long p = pos ? (long)pos[i] : pos0 + (long)i;

		for (size_t h = 0; h < heads; h++)
			for (size_t t = 0; t < R / 2; t++) {
				/* half: t and t + R/2; interleaved: 2t and 2t + 1 */
				const size_t a = rope->mode == MHA_ROPE_HALF ? t : 2 * t;
				const size_t b = rope->mode == MHA_ROPE_HALF ? t + R / 2 : 2 * t + 1;
				const size_t at = i * heads * dk + h * dk;
				long double c, s;
				long double x1 = A[at + a], x2 = A[at + b];

				if (rope->cos) {
					c = rope->cos[(size_t)p * (R / 2) + t];
					s = rope->sin[(size_t)p * (R / 2) + t];
				} else {
					const long double angle =
						(long double)p * powl(theta, -2.0L * (long double)t / (long double)R);

					c = cosl(angle);
					s = sinl(angle);
				}
				/* (x1 + i·x2)(c + i·s) */
				B[at + a] = (double)(x1 * c - x2 * s);
				B[at + b] = (double)(x1 * s + x2 * c);
			}
	}
	return B;
}

/*
 * Q/K normalisation as the model code writes it: per group of m features
 * (a head's d_k, or the whole row), μ = mean (LAYER only), variance =
 * mean((x − μ)²), y = (x − μ)/√(variance + eps) · weight, the weight 1 + w
 * for RMS1P; in long double.  w_at(n, heads, h, t): feature t of head h's
 * weight.
 */
static long double norm_weight(const mha_qk_norm *n, const double *w, size_t per_group,
			       size_t group, size_t t)
{
	long double v;

	if (!w)
		return 1;
	v = n->over_all || n->per_head ? w[group * per_group + t] : w[t];
	return n->kind == MHA_NORM_RMS1P ? 1 + v : v;
}

static void norm_group_stats(const mha_qk_norm *n, const double *x, size_t m, long double *mu,
			     long double *r)
{
	long double s = 0, v = 0;

	for (size_t t = 0; t < m && n->kind == MHA_NORM_LAYER; t++)
		s += x[t];
	*mu = s / m;
	for (size_t t = 0; t < m; t++)
		v += (x[t] - *mu) * (x[t] - *mu);
	*r = 1 / sqrtl(v / m + n->eps);
}

static double *normalise(const double *A, size_t n, size_t heads, size_t dk, const mha_qk_norm *nm,
			 const double *w)
{
	const size_t m = nm->over_all ? heads * dk : dk, groups = nm->over_all ? 1 : heads;
	double *B = new_matrix(n, heads * dk);

	for (size_t i = 0; i < n; i++)
		for (size_t q = 0; q < groups; q++) {
			const double *x = A + i * heads * dk + q * m;
			long double mu, r;

			norm_group_stats(nm, x, m, &mu, &r);
			for (size_t t = 0; t < m; t++)
				B[i * heads * dk + q * m + t] =
					(double)((x[t] - mu) * r * norm_weight(nm, w, m, q, t));
		}
	return B;
}

/*
 * Its gradient through the Jacobian, entry by entry: ∂y_a/∂x_b = w'_a·(r·(δ_ab
 * − [LAYER]/m) − (x_a − μ)·r³·(x_b − μ)/m); dx_b = Σ_a dy_a·∂y_a/∂x_b, and
 * the weight's gradient Σ dy_a·(x_a − μ)·r (1 + w's is w's).  dw: the
 * weight's length, summed into.
 */
static double *normalise_back(const double *dY, const double *A, size_t n, size_t heads, size_t dk,
			      const mha_qk_norm *nm, const double *w, double *dw)
{
	const size_t m = nm->over_all ? heads * dk : dk, groups = nm->over_all ? 1 : heads;
	double *dX = new_matrix(n, heads * dk);

	for (size_t i = 0; i < n; i++)
		for (size_t q = 0; q < groups; q++) {
			const size_t at = i * heads * dk + q * m;
			const double *x = A + at;
			long double mu, r;

			norm_group_stats(nm, x, m, &mu, &r);
			for (size_t b = 0; b < m; b++) {
				long double s = 0;

				for (size_t a = 0; a < m; a++) {
					const long double jac = norm_weight(nm, w, m, q, a) *
						(r * ((a == b ? 1.0L : 0.0L) -
						      (nm->kind == MHA_NORM_LAYER ? 1.0L / m : 0.0L)) -
						 (x[a] - mu) * r * r * r * (x[b] - mu) / m);

					s += dY[at + a] * jac;
				}
				dX[at + b] = (double)s;
			}
			for (size_t a = 0; w && dw && a < m; a++)
				dw[(nm->over_all || nm->per_head ? q * m : 0) + a] +=
					(double)(dY[at + a] * (x[a] - mu) * r);
		}
	return dX;
}

int ref_forward(ref_result *r, const mha_dims *d, const mha_inputs *in,
		const mha_weights *w, const mha_config *cfg)
{
	static const mha_weights none = MHA_INIT(mha_weights);
	static const mha_config defaults = MHA_INIT(mha_config);
	const size_t H = d->heads, G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t nq = d->n_q, nkv = d->n_kv, dk = d->d_k, dv = d->d_v;
	double scale;

	if (!w)
		w = &none;
	if (!cfg)
		cfg = &defaults;
	memset(r, 0, sizeof(*r));
	r->H = H;
	r->G = G;
	r->n_q = nq;
	r->n_kv = nkv;
	r->dk = dk;
	r->dv = dv;
	r->d_out = w->W_O ? d->d_out : H * dv;

	switch (cfg->scale_mode) {
	case MHA_SCALE_DK: scale = 1 / sqrt((double)dk); break;
	case MHA_SCALE_DMODEL: scale = 1 / sqrt((double)d->d_q_in); break;
	case MHA_SCALE_SEQLEN: scale = 1 / sqrt((double)nkv); break;
	case MHA_SCALE_NONE: scale = 1; break;
	default: scale = cfg->scale; break;
	}

	r->Q = linear(in->xq, nq, d->d_q_in, w->W_Q, w->b_Q, H * dk);
	r->K = linear(in->xk, nkv, d->d_k_in, w->W_K, w->b_K, G * dk);
	r->V = linear(in->xv, nkv, d->d_v_in, w->W_V, w->b_V, G * dv);
	if (cfg->norm.kind != MHA_NORM_NONE) {
		r->q_norm = normalise(r->Q, nq, H, dk, &cfg->norm, cfg->norm.q_weight);
		r->k_norm = normalise(r->K, nkv, G, dk, &cfg->norm, cfg->norm.k_weight);
	}
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		/* queries at i + the causal offset (as the window counts them), keys at j */
		long q0 = 0;

		if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT)
			q0 = (long)(cfg->kv_len ? cfg->kv_len : nkv) - (long)nq;
		if (cfg->causal == MHA_CAUSAL_OFFSET)
			q0 = (long)cfg->causal_offset;
		r->q_rot = rotate(r->q_norm ? r->q_norm : r->Q, nq, H, dk, &cfg->rope, cfg->rope.q_pos, q0);
		r->k_rot = rotate(r->k_norm ? r->k_norm : r->K, nkv, G, dk, &cfg->rope, cfg->rope.k_pos, 0);
	}

	r->head_q = new_list(H);
	r->head_k = new_list(H);
	r->head_v = new_list(H);
	r->scores = new_list(H);
	r->scaled = new_list(H);
	r->softcapped = new_list(H);
	r->mask = new_list(H);
	r->masked = new_list(H);
	r->softmax = new_list(H);
	r->head_out = new_list(H);
	r->concat = new_matrix(nq, H * dv);

	for (size_t h = 0; h < H; h++) {
		const size_t g = h * G / H; /* H/G query heads share each kv head */
		double *Kt, *pre;

		r->head_q[h] = columns(r->q_rot ? r->q_rot : r->q_norm ? r->q_norm : r->Q, nq, H * dk,
				       h * dk, dk);
		r->head_k[h] = columns(r->k_rot ? r->k_rot : r->k_norm ? r->k_norm : r->K, nkv, G * dk,
				       g * dk, dk);
		r->head_v[h] = columns(r->V, nkv, G * dv, g * dv, dv);
		Kt = transpose(r->head_k[h], nkv, dk);
		r->scores[h] = matmul(r->head_q[h], Kt, nq, dk, nkv);
		free(Kt);

		r->scaled[h] = new_matrix(nq, nkv);
		r->softcapped[h] = new_matrix(nq, nkv);
		r->mask[h] = new_matrix(nq, nkv);
		r->masked[h] = new_matrix(nq, nkv);
		r->softmax[h] = new_matrix(nq, nkv);
		for (size_t i = 0; i < nq; i++)
			for (size_t j = 0; j < nkv; j++) {
				const size_t at = i * nkv + j;
				const size_t mat = (cfg->mask.per_head ? h * nq * nkv : 0) + at;
				double m = 0;

				r->scaled[h][at] = r->scores[h][at] * scale;
				r->softcapped[h][at] = cfg->softcap > 0
					? cfg->softcap * tanh(r->scaled[h][at] / cfg->softcap)
					: r->scaled[h][at];
				/* causal: key j is in the future of query i */
				if (cfg->causal == MHA_CAUSAL_TOP_LEFT && (long)j > (long)i)
					m = -INFINITY;
				if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT &&
				    (long)j > (long)i + (long)(cfg->kv_len ? cfg->kv_len : nkv) - (long)nq)
					m = -INFINITY;
				if (cfg->causal == MHA_CAUSAL_OFFSET &&
				    (long)j > (long)i + (long)cfg->causal_offset)
					m = -INFINITY;
				/* sliding window around the query's position p */
				if (cfg->window.on) {
					long p = (long)i;

					if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT)
						p += (long)(cfg->kv_len ? cfg->kv_len : nkv) - (long)nq;
					if (cfg->causal == MHA_CAUSAL_OFFSET)
						p += (long)cfg->causal_offset;
					if (cfg->window.left >= 0 && (long)j < p - (long)cfg->window.left)
						m = -INFINITY;
					if (cfg->window.right >= 0 && (long)j > p + (long)cfg->window.right)
						m = -INFINITY;
				}
				/* padding: keys past the sequence's own length */
				if (cfg->kv_len && j >= cfg->kv_len)
					m = -INFINITY;
				if (cfg->mask.allow && !cfg->mask.allow[mat])
					m = -INFINITY;
				if (m == 0 && cfg->mask.bias)
					m = cfg->mask.bias[mat];
				/* ALiBi: slope·(key position - query position) on keys still seen */
				if (cfg->alibi.on && m != -INFINITY) {
					long p = (long)i;

					if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT)
						p += (long)(cfg->kv_len ? cfg->kv_len : nkv) - (long)nq;
					if (cfg->causal == MHA_CAUSAL_OFFSET)
						p += (long)cfg->causal_offset;
					m += ref_alibi_slope(cfg, h, H) * (double)((long)j - p);
				}
				r->mask[h][at] = m;
				r->masked[h][at] = r->softcapped[h][at] + m;
			}
		pre = r->masked[h];
		for (size_t i = 0; i < nq; i++) {
			double mx = -INFINITY;
			long double sum = 0;

			for (size_t j = 0; j < nkv; j++)
				mx = fmax(mx, pre[i * nkv + j]);
			if (mx == -INFINITY) {
				r->blocked++;
				continue; /* the row stays zero, sink or not */
			}
			/* a sink: one more logit in the softmax, its column then dropped */
			if (cfg->sinks)
				mx = fmax(mx, cfg->sinks[h]);
			for (size_t j = 0; j < nkv; j++)
				sum += expl((long double)pre[i * nkv + j] - mx);
			if (cfg->sinks)
				sum += expl((long double)cfg->sinks[h] - mx);
			for (size_t j = 0; j < nkv; j++)
				r->softmax[h][i * nkv + j] =
					(double)(expl((long double)pre[i * nkv + j] - mx) / sum);
		}
		r->head_out[h] = matmul(r->softmax[h], r->head_v[h], nq, nkv, dv);
		for (size_t i = 0; i < nq; i++)
			for (size_t c = 0; c < dv; c++)
				r->concat[i * H * dv + h * dv + c] = r->head_out[h][i * dv + c];
	}
	r->output = w->W_O ? linear(r->concat, nq, H * dv, w->W_O, w->b_O, d->d_out)
			   : linear(r->concat, nq, H * dv, NULL, NULL, H * dv);
	return 0;
}

static void free_list(double **l, size_t n)
{
	if (!l)
		return;
	for (size_t i = 0; i < n; i++)
		free(l[i]);
	free(l);
}

void ref_free(ref_result *r)
{
	free(r->Q);
	free(r->K);
	free(r->V);
	free(r->q_rot);
	free(r->k_rot);
	free(r->q_norm);
	free(r->k_norm);
	free_list(r->head_q, r->H);
	free_list(r->head_k, r->H);
	free_list(r->head_v, r->H);
	free_list(r->scores, r->H);
	free_list(r->scaled, r->H);
	free_list(r->softcapped, r->H);
	free_list(r->mask, r->H);
	free_list(r->masked, r->H);
	free_list(r->softmax, r->H);
	free_list(r->head_out, r->H);
	free(r->concat);
	free(r->output);
	memset(r, 0, sizeof(*r));
}

/* ---- the backward pass ---------------------------------------------------- */

/* x (n, heads·dk) turned back: each pair times e^(−i·angle), the conjugate */
static double *rotate_back(const double *A, size_t n, size_t heads, size_t dk, const mha_rope *rope,
			   const ptrdiff_t *pos, long pos0)
{
	const size_t R = rope->dim ? rope->dim : dk;
	const long double theta = rope->theta ? rope->theta : 10000.0L;
	double *B = new_matrix(n, heads * dk);

	memcpy(B, A, n * heads * dk * sizeof(double));
	for (size_t i = 0; i < n; i++) {
		const long p = pos ? (long)pos[i] : pos0 + (long)i;

		for (size_t h = 0; h < heads; h++)
			for (size_t t = 0; t < R / 2; t++) {
				const size_t a = rope->mode == MHA_ROPE_HALF ? t : 2 * t;
				const size_t b = rope->mode == MHA_ROPE_HALF ? t + R / 2 : 2 * t + 1;
				const size_t at = i * heads * dk + h * dk;
				long double c, s;
				long double x1 = A[at + a], x2 = A[at + b];

				if (rope->cos) {
					c = rope->cos[(size_t)p * (R / 2) + t];
					s = rope->sin[(size_t)p * (R / 2) + t];
				} else {
					const long double angle =
						(long double)p * powl(theta, -2.0L * (long double)t / (long double)R);

					c = cosl(angle);
					s = sinl(angle);
				}
				/* (x1 + i·x2)(c − i·s) */
				B[at + a] = (double)(x1 * c + x2 * s);
				B[at + b] = (double)(x2 * c - x1 * s);
			}
	}
	return B;
}

/* the column sums of A (n, m) */
static double *colsum(const double *A, size_t n, size_t m)
{
	double *s = new_matrix(1, m);

	for (size_t j = 0; j < m; j++) {
		long double t = 0;

		for (size_t i = 0; i < n; i++)
			t += A[i * m + j];
		s[j] = (double)t;
	}
	return s;
}

int ref_backward(ref_grads *g, const mha_dims *d, const mha_inputs *in, const mha_weights *w,
		 const mha_config *cfg, const double *dout)
{
	static const mha_weights none = MHA_INIT(mha_weights);
	static const mha_config defaults = MHA_INIT(mha_config);
	ref_result f;
	const size_t H = d->heads, G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t nq = d->n_q, nkv = d->n_kv, dk = d->d_k, dv = d->d_v;
	double *ones = NULL, *dcat, *dQr, *dKr, *dV, scale;

	if (!w)
		w = &none;
	if (!cfg)
		cfg = &defaults;
	memset(g, 0, sizeof(*g));
	if (ref_forward(&f, d, in, w, cfg))
		return -1;
	g->H = H;
	if (!dout) {
		ones = new_matrix(nq, f.d_out);
		for (size_t i = 0; i < nq * f.d_out; i++)
			ones[i] = 1;
		dout = ones;
	}
	switch (cfg->scale_mode) {
	case MHA_SCALE_DK: scale = 1 / sqrt((double)dk); break;
	case MHA_SCALE_DMODEL: scale = 1 / sqrt((double)d->d_q_in); break;
	case MHA_SCALE_SEQLEN: scale = 1 / sqrt((double)nkv); break;
	case MHA_SCALE_NONE: scale = 1; break;
	default: scale = cfg->scale; break;
	}
	/* output = concat·W_O + b_O */
	if (w->W_O) {
		double *Wt = transpose(w->W_O, H * dv, d->d_out), *ct = transpose(f.concat, nq, H * dv);

		dcat = matmul(dout, Wt, nq, d->d_out, H * dv);
		g->dW_O = matmul(ct, dout, H * dv, nq, d->d_out);
		g->db_O = colsum(dout, nq, d->d_out);
		free(Wt);
		free(ct);
	} else {
		dcat = new_matrix(nq, H * dv);
		memcpy(dcat, dout, nq * H * dv * sizeof(double));
	}
	dQr = new_matrix(nq, H * dk);
	dKr = new_matrix(nkv, G * dk);
	dV = new_matrix(nkv, G * dv);
	g->dS = new_list(H);
	if (cfg->sinks)
		g->dsinks = new_matrix(1, H);
	for (size_t h = 0; h < H; h++) {
		const size_t kvh = h * G / H;
		double *dO = columns(dcat, nq, H * dv, h * dv, dv);
		double *Vt = transpose(f.head_v[h], nkv, dv);
		double *dP = matmul(dO, Vt, nq, dv, nkv);
		double *Pt = transpose(f.softmax[h], nq, nkv);
		double *dVh = matmul(Pt, dO, nkv, nq, dv);
		double *dsc = new_matrix(nq, nkv), *dsct, *dQh, *dKh;
		const double *P = f.softmax[h];

		g->dS[h] = new_matrix(nq, nkv);
		for (size_t i = 0; i < nq; i++) {
			/* the Jacobian of the softmax row: dz_j = Σ_k (δ_jk p_j − p_j p_k) dP_k */
			long double mass = 0, pdp = 0;

			for (size_t k = 0; k < nkv; k++) {
				mass += P[i * nkv + k];
				pdp += (long double)P[i * nkv + k] * dP[i * nkv + k];
			}
			for (size_t j = 0; j < nkv; j++) {
				long double z = 0;

				for (size_t k = 0; k < nkv; k++)
					z += ((j == k ? (long double)P[i * nkv + j] : 0) -
					      (long double)P[i * nkv + j] * P[i * nkv + k]) * dP[i * nkv + k];
				g->dS[h][i * nkv + j] = (double)z;
				/* back through the softcap and the scale */
				if (cfg->softcap > 0) {
					const long double t = tanhl((long double)f.scaled[h][i * nkv + j] /
								    cfg->softcap);

					z *= 1 - t * t;
				}
				dsc[i * nkv + j] = (double)(z * scale);
			}
			/* the sink's logit: its value's gradient is 0; a blocked row's mass is 0 */
			if (cfg->sinks && mass > 0)
				g->dsinks[h] += (double)(-(1 - mass) * pdp);
		}
		dQh = matmul(dsc, f.head_k[h], nq, nkv, dk);
		dsct = transpose(dsc, nq, nkv);
		dKh = matmul(dsct, f.head_q[h], nkv, nq, dk);
		for (size_t i = 0; i < nq; i++)
			for (size_t t = 0; t < dk; t++)
				dQr[i * H * dk + h * dk + t] = dQh[i * dk + t];
		for (size_t j = 0; j < nkv; j++) {
			for (size_t t = 0; t < dk; t++)
				dKr[j * G * dk + kvh * dk + t] += dKh[j * dk + t];
			for (size_t t = 0; t < dv; t++)
				dV[j * G * dv + kvh * dv + t] += dVh[j * dv + t];
		}
		free(dO);
		free(Vt);
		free(dP);
		free(Pt);
		free(dVh);
		free(dsc);
		free(dsct);
		free(dQh);
		free(dKh);
	}
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		long q0 = 0;

		if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT)
			q0 = (long)(cfg->kv_len ? cfg->kv_len : nkv) - (long)nq;
		if (cfg->causal == MHA_CAUSAL_OFFSET)
			q0 = (long)cfg->causal_offset;
		g->dQ = rotate_back(dQr, nq, H, dk, &cfg->rope, cfg->rope.q_pos, q0);
		g->dK = rotate_back(dKr, nkv, G, dk, &cfg->rope, cfg->rope.k_pos, 0);
		free(dQr);
		free(dKr);
	} else {
		g->dQ = dQr;
		g->dK = dKr;
	}
	if (cfg->norm.kind != MHA_NORM_NONE) {
		/* what reached q_norm and k_norm, then back through the norm */
		const mha_qk_norm *nm = &cfg->norm;
		const size_t lq = nm->over_all || nm->per_head ? H * dk : dk;
		const size_t lk = nm->over_all || nm->per_head ? G * dk : dk;

		g->dq_norm = g->dQ;
		g->dk_norm = g->dK;
		if (nm->q_weight)
			g->dq_norm_w = new_matrix(1, lq);
		if (nm->k_weight)
			g->dk_norm_w = new_matrix(1, lk);
		g->dQ = normalise_back(g->dq_norm, f.Q, nq, H, dk, nm, nm->q_weight, g->dq_norm_w);
		g->dK = normalise_back(g->dk_norm, f.K, nkv, G, dk, nm, nm->k_weight, g->dk_norm_w);
	}
	g->dV = dV;
	/* Q = Xq·W_Q + b_Q: dXq = dQ·W_Qᵀ, dW_Q = Xqᵀ·dQ, db_Q = Σ_i dQ_i */
	{
		const double *x[3] = { in->xq, in->xk, in->xv };
		const double *W[3] = { w->W_Q, w->W_K, w->W_V };
		const double *dY[3] = { g->dQ, g->dK, g->dV };
		const size_t rows[3] = { nq, nkv, nkv }, din[3] = { d->d_q_in, d->d_k_in, d->d_v_in };
		const size_t cols[3] = { H * dk, G * dk, G * dv };
		double **dx[3] = { &g->dxq, &g->dxk, &g->dxv }, **dW[3] = { &g->dW_Q, &g->dW_K, &g->dW_V };
		double **db[3] = { &g->db_Q, &g->db_K, &g->db_V };

		for (int k = 0; k < 3; k++) {
			if (W[k]) {
				double *Wt = transpose(W[k], din[k], cols[k]), *xt = transpose(x[k], rows[k], din[k]);

				*dx[k] = matmul(dY[k], Wt, rows[k], cols[k], din[k]);
				*dW[k] = matmul(xt, dY[k], din[k], rows[k], cols[k]);
				free(Wt);
				free(xt);
			} else {
				*dx[k] = new_matrix(rows[k], cols[k]);
				memcpy(*dx[k], dY[k], rows[k] * cols[k] * sizeof(double));
			}
			*db[k] = colsum(dY[k], rows[k], cols[k]);
		}
	}
	free(dcat);
	free(ones);
	ref_free(&f);
	return 0;
}

void ref_grads_free(ref_grads *g)
{
	free(g->dxq);
	free(g->dxk);
	free(g->dxv);
	free(g->dW_Q);
	free(g->dW_K);
	free(g->dW_V);
	free(g->dW_O);
	free(g->db_Q);
	free(g->db_K);
	free(g->db_V);
	free(g->db_O);
	free(g->dsinks);
	free(g->dQ);
	free(g->dK);
	free(g->dV);
	free(g->dq_norm);
	free(g->dk_norm);
	free(g->dq_norm_w);
	free(g->dk_norm_w);
	free_list(g->dS, g->H);
	memset(g, 0, sizeof(*g));
}

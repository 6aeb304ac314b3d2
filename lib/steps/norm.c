/*
 * norm.c: q/k normalisation (mha.h, mha_qk_norm) and its gradient, for
 * both paths and both element types.
 *
 * Like the rotation, it is O(n·d), done once on the projected Q and K
 * before the heads, so the kernels never see it.  Every row is read as
 * double, normalised in double and each result rounded once to the
 * element type: one compiled copy, the very same numbers on both paths.
 */
#include "mha.h"
#include "base/rules.h"

#include <float.h>
#include <math.h>
#include <stddef.h>

/* element i of a row of doubles (esize 8) or floats (4) */
static double get(const void *x, size_t esize, size_t i)
{
	return esize == sizeof(double) ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

static void put(void *x, size_t esize, size_t i, double v)
{
	if (esize == sizeof(double))
		((double *)x)[i] = v;
	else
		((float *)x)[i] = (float)v;
}

/* the weights' length for one side: heads blocks of d, or one shared d */
static size_t weight_len(const mha_qk_norm *n, size_t heads, size_t d)
{
	return n->over_all || n->per_head ? heads * d : d;
}

mha_fault_kind mha_norm_fault(const mha_qk_norm *n, size_t H, size_t G, size_t d, size_t *index)
{
	size_t len;

	*index = 0;
	if (n->kind == MHA_NORM_NONE)
		return MHA_FAULT_NONE;
	if ((unsigned)n->kind > MHA_NORM_LAYER)
		return MHA_FAULT_NORM_KIND;
	if (!isfinite(n->eps) || n->eps < 0)
		return MHA_FAULT_NORM_EPS;
	len = weight_len(n, H, d);
	for (size_t i = 0; n->q_weight && i < len; i++)
		if (!isfinite(n->q_weight[i])) {
			*index = i;
			return MHA_FAULT_NORM_Q_WEIGHT;
		}
	len = weight_len(n, G, d);
	for (size_t i = 0; n->k_weight && i < len; i++)
		if (!isfinite(n->k_weight[i])) {
			*index = i;
			return MHA_FAULT_NORM_K_WEIGHT;
		}
	return MHA_FAULT_NONE;
}

/*
 * A group of m features at x: its mean μ (0 but for LAYER) and r =
 * 1/√(Σ(x − μ)²/m + eps), each sum ascending.  When a sum overflows, it is
 * taken again over x scaled by s = 2^-k (k from the largest |x|): r is then
 * s/√(Σ(s(x − μ))²/m + s²·eps).  0 when r is not a finite number.
 */
static int stats(const void *x, size_t esize, size_t m, mha_norm_kind kind, double eps,
		 double *mu, double *r)
{
	double sum = 0.0, sq = 0.0;

	if (kind == MHA_NORM_LAYER) {
		for (size_t i = 0; i < m; i++)
			sum += get(x, esize, i);
		if (!isfinite(sum)) {
			/* the mean of huge numbers: m·(mean of x/m) */
			sum = 0.0;
			for (size_t i = 0; i < m; i++)
				sum += get(x, esize, i) / (double)m;
			*mu = sum;
		} else {
			*mu = sum / (double)m;
		}
	} else {
		*mu = 0.0;
	}
	for (size_t i = 0; i < m; i++) {
		const double c = get(x, esize, i) - *mu;

		sq += c * c;
	}
	if (isfinite(sq)) {
		*r = 1.0 / sqrt(sq / (double)m + eps);
	} else {
		double big = 0.0;
		int e;

		for (size_t i = 0; i < m; i++)
			big = fmax(big, fabs(get(x, esize, i) - *mu));
		(void)frexp(big, &e);
		sq = 0.0;
		for (size_t i = 0; i < m; i++) {
			const double c = ldexp(get(x, esize, i) - *mu, -e);

			sq += c * c;
		}
		*r = ldexp(1.0 / sqrt(sq / (double)m + ldexp(eps, -2 * e)), -e);
	}
	return isfinite(*r) && isfinite(*mu);
}

/* the factor on normalised feature i: w, 1 + w, or 1 without weights */
static double factor(mha_norm_kind kind, const double *w, size_t i)
{
	if (!w)
		return 1.0;
	return kind == MHA_NORM_RMS1P ? 1.0 + w[i] : w[i];
}

/*
 * The groups of a (rows, heads·d) block whose first head is h0: per head
 * (heads groups of d) or, over_all, the whole row (one group; h0 is 0);
 * the weights of group q at w + off(q).
 */
struct groups {
	size_t count, m, ld;
	const double *w;
	size_t w_step; /* 0: shared by the groups; m: one block each */
};

static struct groups groups_of(const mha_qk_norm *n, size_t heads, size_t d, size_t h0,
			       const double *w)
{
	struct groups g = { .count = heads, .m = d, .ld = heads * d, .w = w, .w_step = 0 };

	if (n->over_all) {
		g.count = 1;
		g.m = heads * d;
	} else if (n->per_head && w) {
		g.w = w + h0 * d;
		g.w_step = d;
	}
	return g;
}

mha_status mha_norm_turn(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			 size_t d, size_t h0, const mha_qk_norm *n, int k_side)
{
	const struct groups g = groups_of(n, heads, d, h0, k_side ? n->k_weight : n->q_weight);

	for (size_t i = 0; i < rows; i++)
		for (size_t q = 0; q < g.count; q++) {
			const size_t at = i * g.ld + q * g.m;
			const void *xr = (const char *)x + at * esize;
			void *yr = (char *)out + at * esize;
			const double *w = g.w ? g.w + q * g.w_step : NULL;
			double mu, r;

			if (!stats(xr, esize, g.m, n->kind, n->eps, &mu, &r))
				return MHA_ERR_RANGE;
			for (size_t t = 0; t < g.m; t++) {
				const double y = (get(xr, esize, t) - mu) * r * factor(n->kind, w, t);

				if (!isfinite(y) || (esize == sizeof(float) && fabs(y) > FLT_MAX))
					return MHA_ERR_RANGE;
				put(yr, esize, t, y);
			}
		}
	return MHA_OK;
}

mha_status mha_norm_back(void *dx, const void *dy, const void *x, size_t esize, size_t rows,
			 size_t heads, size_t d, const mha_qk_norm *n, int k_side, double *dw)
{
	const struct groups g = groups_of(n, heads, d, 0, k_side ? n->k_weight : n->q_weight);

	for (size_t i = 0; i < rows; i++)
		for (size_t q = 0; q < g.count; q++) {
			const size_t at = i * g.ld + q * g.m;
			const void *xr = (const char *)x + at * esize;
			const void *dyr = (const char *)dy + at * esize;
			void *dxr = (char *)dx + at * esize;
			const double *w = g.w ? g.w + q * g.w_step : NULL;
			double *dwq = dw && g.w ? dw + q * g.w_step : NULL;
			double mu, r, sum_g = 0.0, sum_gx = 0.0;

			if (!stats(xr, esize, g.m, n->kind, n->eps, &mu, &r))
				return MHA_ERR_RANGE;
			for (size_t t = 0; t < g.m; t++) {
				const double xh = (get(xr, esize, t) - mu) * r;
				const double gy = get(dyr, esize, t);
				const double gt = gy * factor(n->kind, w, t);

				sum_g += gt;
				sum_gx += gt * xh;
				if (dwq)
					dwq[t] += gy * xh;
			}
			sum_g /= (double)g.m;
			sum_gx /= (double)g.m;
			for (size_t t = 0; t < g.m; t++) {
				const double xh = (get(xr, esize, t) - mu) * r;
				const double gt = get(dyr, esize, t) * factor(n->kind, w, t);
				const double v = r * (gt - (n->kind == MHA_NORM_LAYER ? sum_g : 0.0) -
						      xh * sum_gx);

				if (!isfinite(v) || (esize == sizeof(float) && fabs(v) > FLT_MAX))
					return MHA_ERR_RANGE;
				put(dxr, esize, t, v);
			}
		}
	return MHA_OK;
}

/*
 * rope.c: rotary position embeddings (mha.h, mha_rope), for both paths and
 * both element types, and mha_rope_apply() on its own.
 *
 * The rotation is O(n·d) and done once, on the projected Q and K, before
 * the heads: the kernels never see it.  One compiled copy (no fused
 * multiply-adds from the kernels' flags), so both paths turn every entry
 * into the very same number.
 */
#include "mha.h"
#include "base/rules.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* R, the features turned per head */
static size_t rope_dim(const mha_rope *r, size_t d)
{
	return r->dim ? r->dim : d;
}

/* m(s, k) of YaRN's attention factor */
static double yarn_m(double s, double k)
{
	return s <= 1 ? 1.0 : 0.1 * k * log(s) + 1.0;
}

/* the scaling's values in their ranges (mha.h): 1 */
static int scaling_ok(const mha_rope_scaling *c, size_t R)
{
	const int pos = isfinite(c->factor) && c->factor > 0 && isfinite(c->original_max) &&
			c->original_max > 0;

	switch (c->type) {
	case MHA_ROPE_SCALING_NONE:
		return 1;
	case MHA_ROPE_SCALING_LINEAR:
		return isfinite(c->factor) && c->factor > 0;
	case MHA_ROPE_SCALING_DYNAMIC:
		return pos && R > 2;
	case MHA_ROPE_SCALING_LLAMA3:
		return pos && isfinite(c->low_freq_factor) && c->low_freq_factor > 0 &&
		       isfinite(c->high_freq_factor) && c->high_freq_factor > 0 &&
		       c->high_freq_factor != c->low_freq_factor;
	case MHA_ROPE_SCALING_YARN:
		return pos && isfinite(c->beta_fast) && c->beta_fast >= 0 &&
		       isfinite(c->beta_slow) && c->beta_slow >= 0 && isfinite(c->mscale) &&
		       c->mscale >= 0 && isfinite(c->mscale_all_dim) && c->mscale_all_dim >= 0 &&
		       isfinite(c->attention_factor) && c->attention_factor >= 0;
	case MHA_ROPE_SCALING_LONGROPE:
		if (!c->short_factor || !c->long_factor || !isfinite(c->original_max) ||
		    c->original_max <= 0 || !isfinite(c->factor) || c->factor < 0 ||
		    !isfinite(c->attention_factor) || c->attention_factor < 0)
			return 0;
		for (size_t t = 0; t < R / 2; t++)
			if (!isfinite(c->short_factor[t]) || !(c->short_factor[t] > 0) ||
			    !isfinite(c->long_factor[t]) || !(c->long_factor[t] > 0))
				return 0;
		return 1;
	}
	return 0;
}

/*
 * Pair t's frequency, as mha.h documents it: θ^(−2t/R) to the bit without
 * scaling, else as the scaling's type computes it.
 */
static double frequency(const mha_rope *r, double theta, size_t R, size_t t)
{
	const mha_rope_scaling *c = &r->scaling;
	const double e = (double)(2 * t) / (double)R, f = pow(theta, -e);

	switch (c->type) {
	case MHA_ROPE_SCALING_LINEAR:
		return f / c->factor;
	case MHA_ROPE_SCALING_DYNAMIC:
		if ((double)c->seq_len > c->original_max) {
			const double b = theta * pow(c->factor * (double)c->seq_len / c->original_max -
						     (c->factor - 1), (double)R / (double)(R - 2));

			return pow(b, -e);
		}
		return f;
	case MHA_ROPE_SCALING_LLAMA3: {
		const double w = 2 * M_PI / f, lo = c->original_max / c->low_freq_factor;
		const double hi = c->original_max / c->high_freq_factor;
		double sm;

		if (w > lo)
			return f / c->factor;
		if (w < hi)
			return f;
		sm = (c->original_max / w - c->low_freq_factor) /
		     (c->high_freq_factor - c->low_freq_factor);
		return (1 - sm) * f / c->factor + sm * f;
	}
	case MHA_ROPE_SCALING_YARN: {
		const double fast = c->beta_fast ? c->beta_fast : 32, slow = c->beta_slow ? c->beta_slow : 1;
		const double pf = pow(theta, e);
		double lo = (double)R * log(c->original_max / (fast * 2 * M_PI)) / (2 * log(theta));
		double hi = (double)R * log(c->original_max / (slow * 2 * M_PI)) / (2 * log(theta));
		double ramp;

		if (!c->no_truncate) {
			lo = floor(lo);
			hi = ceil(hi);
		}
		lo = lo > 0 ? lo : 0;
		hi = hi < (double)(R - 1) ? hi : (double)(R - 1);
		if (lo == hi)
			hi += 0.001;
		ramp = ((double)t - lo) / (hi - lo);
		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		/* inv_freq_interpolation·(1 − e) + inv_freq_extrapolation·e, e = 1 − ramp */
		return 1.0 / (c->factor * pf) * ramp + 1.0 / pf * (1 - ramp);
	}
	case MHA_ROPE_SCALING_LONGROPE: {
		const double *x = (double)c->seq_len > c->original_max ? c->long_factor
									: c->short_factor;

		return 1.0 / (x[t] * pow(theta, e));
	}
	default:
		return f;
	}
}

/* the factor on cos and sin */
static double attention_factor(const mha_rope_scaling *c)
{
	if (c->type == MHA_ROPE_SCALING_YARN) {
		if (c->attention_factor)
			return c->attention_factor;
		if (c->mscale && c->mscale_all_dim)
			return yarn_m(c->factor, c->mscale) / yarn_m(c->factor, c->mscale_all_dim);
		return yarn_m(c->factor, 1);
	}
	if (c->type == MHA_ROPE_SCALING_LONGROPE) {
		if (c->attention_factor)
			return c->attention_factor;
		return c->factor > 1 ? sqrt(1 + log(c->factor) / log(c->original_max)) : 1.0;
	}
	return 1.0;
}

double mha_rope_frequency(const mha_rope *r, size_t R, size_t t)
{
	return frequency(r, r->theta == 0 ? 10000.0 : r->theta, R, t);
}

double mha_rope_attention_factor(const mha_rope *r)
{
	return attention_factor(&r->scaling);
}

/* pair t's cos and sin at position p: the tables', or from the frequency */
static void cos_sin(const mha_rope *r, double theta, size_t R, ptrdiff_t p, size_t t, double a,
		    double *c, double *s)
{
	if (r->cos) {
		*c = r->cos[(size_t)p * (R / 2) + t];
		*s = r->sin[(size_t)p * (R / 2) + t];
	} else {
		/* the angle as mha.h documents it, to the bit */
		const double angle = (double)p * frequency(r, theta, R, t);

		*c = cos(angle);
		*s = sin(angle);
		if (a != 1) {
			*c *= a;
			*s *= a;
		}
	}
}

mha_fault_kind mha_rope_fault(const mha_rope *r, size_t d)
{
	const double theta = r->theta == 0 ? 10000.0 : r->theta;
	const size_t R = rope_dim(r, d);

	if (r->mode == MHA_ROPE_NONE)
		return MHA_FAULT_NONE;
	if ((unsigned)r->mode > MHA_ROPE_INTERLEAVED)
		return MHA_FAULT_ROPE_MODE;
	if (!isfinite(theta) || theta <= 0)
		return MHA_FAULT_ROPE_THETA;
	if (R > d)
		return MHA_FAULT_ROPE_DIM_WIDE;
	if (R == 0 || R % 2)
		return MHA_FAULT_ROPE_DIM_ODD;
	if (!r->cos != !r->sin || (r->cos && !r->rows))
		return MHA_FAULT_ROPE_TABLES;
	if ((r->cos && r->scaling.type) || !scaling_ok(&r->scaling, R))
		return MHA_FAULT_ROPE_SCALING;
	return MHA_FAULT_NONE;
}

mha_status mha_rope_check(const mha_rope *r, size_t d)
{
	return mha_rope_fault(r, d) == MHA_FAULT_NONE ? MHA_OK : MHA_ERR_ROPE;
}

/* the position of row i: pos[i], or pos0 + i */
static ptrdiff_t position(const ptrdiff_t *pos, ptrdiff_t pos0, size_t i)
{
	return pos ? pos[i] : mha_rule_add(pos0, (ptrdiff_t)i);
}

size_t mha_rope_position_fault(const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0, size_t n)
{
	if (r->mode == MHA_ROPE_NONE)
		return n;
	for (size_t i = 0; i < n; i++) {
		const ptrdiff_t p = position(pos, pos0, i);

		/* given positions count from 0; a table has a row for each it serves */
		if ((pos && p < 0) || (r->cos && (p < 0 || (size_t)p >= r->rows)))
			return i;
	}
	return n;
}

mha_status mha_rope_positions_ok(const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0, size_t n)
{
	return mha_rope_position_fault(r, pos, pos0, n) < n ? MHA_ERR_ROPE : MHA_OK;
}

/* the indices of pair t's two features within a head */
static void pair_of(mha_rope_mode mode, size_t R, size_t t, size_t *a, size_t *b)
{
	if (mode == MHA_ROPE_INTERLEAVED) {
		*a = 2 * t;
		*b = 2 * t + 1;
	} else {
		*a = t;
		*b = t + R / 2;
	}
}

mha_status mha_rope_turn(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			 size_t d, const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0)
{
	const double theta = r->theta == 0 ? 10000.0 : r->theta;
	const double af = attention_factor(&r->scaling);
	const size_t R = rope_dim(r, d), ld = heads * d;
	int finite = 1;

	if (out != x)
		memcpy(out, x, rows * ld * esize);
	for (size_t i = 0; i < rows; i++) {
		const ptrdiff_t p = position(pos, pos0, i);

		for (size_t t = 0; t < R / 2; t++) {
			double c, s;
			size_t a, b;

			cos_sin(r, theta, R, p, t, af, &c, &s);
			pair_of(r->mode, R, t, &a, &b);
			for (size_t h = 0; h < heads; h++) {
				const size_t at = i * ld + h * d;

				if (esize == sizeof(double)) {
					double *o = (double *)out + at;
					const double x1 = o[a], x2 = o[b];

					o[a] = x1 * c - x2 * s;
					o[b] = x1 * s + x2 * c;
					finite &= isfinite(o[a]) && isfinite(o[b]);
				} else {
					/* in double, each result rounded to float once */
					float *o = (float *)out + at;
					const double x1 = o[a], x2 = o[b];

					o[a] = (float)(x1 * c - x2 * s);
					o[b] = (float)(x1 * s + x2 * c);
					finite &= isfinite(o[a]) && isfinite(o[b]);
				}
			}
		}
	}
	return finite ? MHA_OK : MHA_ERR_RANGE;
}

mha_status mha_rope_apply(double *out, const double *x, size_t rows, size_t heads, size_t d,
			  const mha_config *cfg, const ptrdiff_t *pos)
{
	const mha_rope *rope;
	mha_config c_;
	mha_status st;

	if (!out || !x || !cfg)
		return MHA_ERR_NULL;
	if (MHA_TAKE(cfg, c_))
		return MHA_ERR_VERSION;
	rope = &cfg->rope;
	if (!rows || !heads || !d)
		return MHA_ERR_DIM;
	if (heads > SIZE_MAX / d || rows > SIZE_MAX / sizeof(double) / (heads * d))
		return MHA_ERR_TOOBIG;
	st = mha_rope_check(rope, d);
	if (st == MHA_OK)
		st = mha_rope_positions_ok(rope, pos, 0, rows);
	if (st != MHA_OK)
		return st;
	if (rope->mode == MHA_ROPE_NONE) {
		if (out != x)
			memmove(out, x, rows * heads * d * sizeof(double));
		return MHA_OK;
	}
	return mha_rope_turn(out, x, sizeof(double), rows, heads, d, rope, pos, 0);
}

/*
 * The gradient through the rotation: each pair turned back by its angle
 * (the rotation's transpose), y1' = y1·cos a + y2·sin a, y2' = −y1·sin a
 * + y2·cos a, with the very cos and sin mha_rope_turn used.  esize 8 or 4
 * (floats: in double, each result rounded once, as mha_rope_turn); out may
 * be x.
 */
void mha_rope_turn_back(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			size_t d, const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0)
{
	const double theta = r->theta == 0 ? 10000.0 : r->theta;
	const double af = attention_factor(&r->scaling);
	const size_t R = rope_dim(r, d), ld = heads * d;

	if (out != x)
		memcpy(out, x, rows * ld * esize);
	for (size_t i = 0; i < rows; i++) {
		const ptrdiff_t p = position(pos, pos0, i);

		for (size_t t = 0; t < R / 2; t++) {
			double c, s;
			size_t a, b;

			cos_sin(r, theta, R, p, t, af, &c, &s);
			pair_of(r->mode, R, t, &a, &b);
			for (size_t h = 0; h < heads; h++) {
				const size_t at = i * ld + h * d;

				if (esize == sizeof(double)) {
					double *o = (double *)out + at;
					const double y1 = o[a], y2 = o[b];

					o[a] = y1 * c + y2 * s;
					o[b] = -y1 * s + y2 * c;
				} else {
					float *o = (float *)out + at;
					const double y1 = o[a], y2 = o[b];

					o[a] = (float)(y1 * c + y2 * s);
					o[b] = (float)(-y1 * s + y2 * c);
				}
			}
		}
	}
}

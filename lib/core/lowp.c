/*
 * lowp.c: the low-precision reference (mha_config.precision, mha.h): the
 * forward pass as Hugging Face's eager attention computes it in bfloat16
 * or float16 on PyTorch, every value the type holds, so that a port in
 * that type can be judged against what a correct one gives.
 *
 * The rounding points, one a step (each "rounded" is to the nearest value
 * of the type, ties to even; a product of two values of the type is exact
 * in float32, a sum of float32 values rounds at each addition, in order):
 *   X, the weights, the biases, the sinks, the mask's values: rounded;
 *   Q, K, V, each head's scores, P·V and the output: each entry a float32
 *     sum of products in ascending order (the bias added last), rounded;
 *   RoPE: cos and sin made in float32 (θ^(−2t/R) by powf, or the scaled
 *     frequency made a float, times the position, cosf, sinf, times YaRN's
 *     or LongRoPE's attention factor) and rounded; q·cos and
 *     rotate_half(q)·sin each rounded, and their sum rounded;
 *   scaled: the score times the scale made a float32, in float32, rounded
 *     (mha_config.lowp_scale: the scale rounded to the type first, or the
 *     score divided by 1/scale rounded to the type);
 *   softcapped: x/c, tanh and ·c each in float32 and rounded;
 *   masked: the score plus the rounded mask, in float32, rounded;
 *   softmax: from the masked row in float32 (its max, expf(x − max), their
 *     sum in key order, each over the sum), each weight rounded (lowp_sum
 *     TYPE: each exponential and each addition rounded to the type); with
 *     sinks, as gpt-oss's eager attention: the row and the head's sink less
 *     their max, rounded, then the softmax of that, the sink's column left
 *     out;
 *   concat: the heads' outputs side by side, nothing rounded.
 * A row whose every key is masked gives weights 0, as the float64 path.
 */
#include "mha.h"
#include "base/progress.h"
#include "base/rules.h"
#include "core/lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* v rounded to the type: 8 significant bits from 2^-126 (bfloat16, whose
 * exponent is float32's) or 11 from 2^-14 (float16), ties to even;
 * past the largest finite value, infinity */
double mha_lowp_round(double v, mha_precision p)
{
	const int bits = p == MHA_PRECISION_FP16 ? 11 : 8;
	const int emin = p == MHA_PRECISION_FP16 ? -14 : -126;
	const double big = p == MHA_PRECISION_FP16 ? 65504.0 : ldexp(2 - ldexp(1, -7), 127);
	int e;
	double q, r;

	if ((p != MHA_PRECISION_BF16 && p != MHA_PRECISION_FP16) || !isfinite(v) || v == 0)
		return v; /* float64's, or a precision it does not know: as it is */
	e = ilogb(v);
	q = ldexp(1, (e < emin ? emin : e) - (bits - 1));
	r = nearbyint(v / q) * q; /* v / q is exact: q a power of two */
	if (fabs(r) > big)
		return copysign(INFINITY, v);
	return r;
}

/* n values rounded, from src into dst (which may be src) */
static void round_all(double *dst, const double *src, size_t n, mha_precision p)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = mha_lowp_round(src[i], p);
}

static double *doubles(size_t rows, size_t cols)
{
	const size_t n = rows * cols;

	if (cols && rows > (size_t)-1 / cols / sizeof(double))
		return NULL;
	return malloc((n ? n : 1) * sizeof(double));
}

/*
 * out (rows, cols) = x (rows, d_in, ld lx) · W (d_in, cols) + b, each
 * entry a float32 sum in ascending order, the bias last, rounded; x, W and
 * b hold values of the type already.  W NULL: x's columns themselves.
 */
static void product(double *out, const double *x, size_t rows, size_t d_in, size_t lx,
		    const double *W, const double *b, size_t cols, mha_precision p)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t c = 0; c < cols; c++) {
			float acc = 0;

			if (W)
				for (size_t k = 0; k < d_in; k++)
					acc += (float)x[i * lx + k] * (float)W[k * cols + c];
			else
				acc = (float)x[i * lx + c];
			if (b)
				acc += (float)b[c];
			out[i * cols + c] = mha_lowp_round(acc, p);
		}
}

/* The rotation, as Hugging Face's rotary embedding turns a (rows, heads·d)
 * block in the type: cos and sin in float32, rounded; q·cos and
 * rotate_half(q)·sin rounded, and their sum */
static void rope_turn(double *m, size_t rows, size_t heads, size_t d, const mha_rope *r,
		      const ptrdiff_t *pos, ptrdiff_t pos0, mha_precision p)
{
	const size_t R = r->dim ? r->dim : d;
	const float base = (float)(r->theta == 0 ? 10000.0 : r->theta);
	/* scaled frequencies (rope_scaling) as the library makes them, made
	 * floats, and YaRN's or LongRoPE's factor on cos and sin */
	const int scaled = r->scaling.type != MHA_ROPE_SCALING_NONE;
	const float factor = scaled ? (float)mha_rope_attention_factor(r) : 1.0f;

	for (size_t i = 0; i < rows; i++) {
		const ptrdiff_t at = pos ? pos[i] : pos0 + (ptrdiff_t)i;

		for (size_t t = 0; t < R / 2; t++) {
			double c, s;

			if (r->cos) {
				c = mha_lowp_round(r->cos[(size_t)at * (R / 2) + t], p);
				s = mha_lowp_round(r->sin[(size_t)at * (R / 2) + t], p);
			} else {
				const float inv = scaled ? (float)mha_rope_frequency(r, R, t)
							 : 1.0f / powf(base, (float)(2 * t) / (float)R);
				const float angle = (float)at * inv;

				c = mha_lowp_round(scaled ? cosf(angle) * factor : cosf(angle), p);
				s = mha_lowp_round(scaled ? sinf(angle) * factor : sinf(angle), p);
			}
			for (size_t h = 0; h < heads; h++) {
				double *row = m + i * heads * d + h * d;
				const size_t a = r->mode == MHA_ROPE_INTERLEAVED ? 2 * t : t;
				const size_t b = r->mode == MHA_ROPE_INTERLEAVED ? 2 * t + 1 : t + R / 2;
				const double x1 = row[a], x2 = row[b];
				const double a1 = mha_lowp_round((float)x1 * (float)c, p);
				const double a2 = mha_lowp_round((float)-x2 * (float)s, p);
				const double b1 = mha_lowp_round((float)x2 * (float)c, p);
				const double b2 = mha_lowp_round((float)x1 * (float)s, p);

				row[a] = mha_lowp_round((float)a1 + (float)a2, p);
				row[b] = mha_lowp_round((float)b1 + (float)b2, p);
			}
		}
	}
}

static int wants(const mha_observer *obs, mha_stage s)
{
	return obs && obs->fn && (obs->stages & MHA_STAGE_SET(s));
}

/* what the run holds for one sequence */
struct lowp {
	const mha_dims *d;
	const mha_config *cfg;
	const mha_observer *obs;
	mha_precision p;
	size_t H, G, dk, dv;
	float scale;            /* the multiplier, or with divide the divisor */
	int divide, sum_in_type; /* mha_config's lowp_scale DIVIDED, lowp_sum TYPE */
	double *Q, *K, *V, *concat, *row, *e, *block;
	double *square[6];      /* (n_q, n_kv) each stage wanted, one head's */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row;
};

enum { L_SCORES, L_SCALED, L_SOFTCAPPED, L_MASK, L_MASKED, L_SOFTMAX };
static const mha_stage lowp_stages[6] = {
	MHA_STAGE_SCORES, MHA_STAGE_SCALED, MHA_STAGE_SOFTCAPPED, MHA_STAGE_MASK,
	MHA_STAGE_MASKED, MHA_STAGE_SOFTMAX,
};

static void keep(struct lowp *r, int which, size_t i, const double *x)
{
	if (r->square[which])
		memcpy(r->square[which] + i * r->d->n_kv, x, r->d->n_kv * sizeof(double));
}

/* stage s, a column block (rows, width) of m (ld) from column col0,
 * handed over when wanted: 0, or 1 the observer said stop */
static int hand_block(struct lowp *r, mha_stage s, size_t h, const double *m, size_t rows,
		      size_t ld, size_t col0, size_t width)
{
	if (!wants(r->obs, s))
		return 0;
	for (size_t i = 0; i < rows; i++)
		memcpy(r->block + i * width, m + i * ld + col0, width * sizeof(double));
	return r->obs->fn(r->obs->ctx, s, (int)h, r->block, rows, width) != 0;
}

/* head h of one sequence, row by row: its weights, then P·V into concat */
static mha_status lowp_head(struct lowp *r, const struct mha_rule *rule, size_t h)
{
	const mha_dims *d = r->d;
	const mha_precision p = r->p;
	const size_t g = mha_rule_kv_head(h, r->H, r->G), n_kv = d->n_kv;
	const float c = (float)r->cfg->softcap;
	double *x = r->row, *m = r->e;

	if (hand_block(r, MHA_STAGE_HEAD_Q, h, r->Q, d->n_q, r->H * r->dk, h * r->dk, r->dk) ||
	    hand_block(r, MHA_STAGE_HEAD_K, h, r->K, n_kv, r->G * r->dk, g * r->dk, r->dk) ||
	    hand_block(r, MHA_STAGE_HEAD_V, h, r->V, n_kv, r->G * r->dv, g * r->dv, r->dv))
		return MHA_ERR_OBSERVER;

	for (size_t i = 0; i < d->n_q; i++) {
		const double *q = r->Q + i * r->H * r->dk + h * r->dk;
		double *o = r->concat + i * r->H * r->dv + h * r->dv;
		float max = -INFINITY, sum = 0;

		for (size_t j = 0; j < n_kv; j++) {
			const double *k = r->K + j * r->G * r->dk + g * r->dk;
			float acc = 0;

			for (size_t t = 0; t < r->dk; t++)
				acc += (float)q[t] * (float)k[t];
			x[j] = mha_lowp_round(acc, p);
		}
		keep(r, L_SCORES, i, x);
		for (size_t j = 0; j < n_kv; j++)
			x[j] = mha_lowp_round(r->divide ? (float)x[j] / r->scale
							: (float)x[j] * r->scale, p);
		keep(r, L_SCALED, i, x);
		if (c > 0) {
			for (size_t j = 0; j < n_kv; j++) {
				const double y = mha_lowp_round((float)x[j] / c, p);
				const double t = mha_lowp_round(tanhf((float)y), p);

				x[j] = mha_lowp_round((float)t * c, p);
			}
			keep(r, L_SOFTCAPPED, i, x);
		}
		for (size_t j = 0; j < n_kv; j++) {
			const double mj = mha_rule_mask(rule, h, i, j);

			m[j] = mj == -INFINITY ? mj : mha_lowp_round(mj, p);
			x[j] = m[j] == -INFINITY ? -INFINITY : mha_lowp_round((float)x[j] + (float)m[j], p);
			if (x[j] > max)
				max = (float)x[j];
		}
		keep(r, L_MASK, i, m);
		keep(r, L_MASKED, i, x);
		if (max == -INFINITY) {
			/* every key blocked: weights 0, as the float64 path says */
			memset(x, 0, n_kv * sizeof(*x));
			if (!r->blocked++) {
				r->first_blocked_head = (int)h;
				r->first_blocked_row = i;
			}
		} else {
			float sink_e = 0;

			if (rule->sinks) {
				/* gpt-oss: the row and the head's sink less their max, each
				 * rounded; the softmax's max is then 0 */
				const double sink = mha_lowp_round(rule->sinks[h], p);
				const float top = sink > max ? (float)sink : max;

				for (size_t j = 0; j < n_kv; j++)
					if (x[j] != -INFINITY)
						x[j] = mha_lowp_round((float)x[j] - top, p);
				sink_e = expf((float)mha_lowp_round((float)sink - top, p));
				max = 0;
			}
			for (size_t j = 0; j < n_kv; j++) {
				const float e = expf((float)x[j] - max);

				/* summed in the type: each exponential and each
				 * addition rounded (a port's mistake) */
				m[j] = r->sum_in_type ? mha_lowp_round(e, p) : e;
				sum = r->sum_in_type ? (float)mha_lowp_round(sum + (float)m[j], p)
						     : sum + e;
			}
			if (rule->sinks)
				sum = r->sum_in_type ? (float)mha_lowp_round(
							       sum + (float)mha_lowp_round(sink_e, p), p)
						     : sum + sink_e;
			for (size_t j = 0; j < n_kv; j++)
				x[j] = mha_lowp_round((float)m[j] / sum, p);
		}
		keep(r, L_SOFTMAX, i, x);
		for (size_t t = 0; t < r->dv; t++) {
			float acc = 0;

			for (size_t j = 0; j < n_kv; j++)
				acc += (float)x[j] * (float)r->V[j * r->G * r->dv + g * r->dv + t];
			o[t] = mha_lowp_round(acc, p);
		}
	}
	for (int s = 0; s < 6; s++)
		if (r->square[s] && r->obs->fn(r->obs->ctx, lowp_stages[s], (int)h, r->square[s],
						d->n_q, n_kv))
			return MHA_ERR_OBSERVER;
	if (hand_block(r, MHA_STAGE_HEAD_OUTPUT, h, r->concat, d->n_q, r->H * r->dv, h * r->dv,
		       r->dv))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

/* one sequence: the projections, the rotation, each head, the output */
static mha_status lowp_sequence(double *out, const double *xq, const double *xk,
				const double *xv, const mha_weights *w, struct lowp *r,
				const struct mha_rule *rule, size_t b)
{
	const mha_dims *d = r->d;
	const mha_config *cfg = r->cfg;
	const mha_observer *obs = r->obs;
	const mha_precision p = r->p;
	const size_t out_cols = mha_output_cols(d, w->W_O != NULL);
	double *xr[3] = { NULL, NULL, NULL };
	const double *x[3] = { xq, xk, xv };
	const size_t rows[3] = { d->n_q, d->n_kv, d->n_kv };
	const size_t din[3] = { d->d_q_in, d->d_k_in, d->d_v_in };
	mha_status st = MHA_OK;

	if (obs && obs->fn && obs->sequence && obs->sequence(obs->ctx, b))
		return MHA_ERR_OBSERVER;
	for (int k = 0; k < 3 && st == MHA_OK; k++) {
		xr[k] = doubles(rows[k], din[k]);
		if (!xr[k])
			st = MHA_ERR_NOMEM;
		else
			round_all(xr[k], x[k], rows[k] * din[k], p);
	}
	if (st == MHA_OK) {
		product(r->Q, xr[0], d->n_q, d->d_q_in, d->d_q_in, w->W_Q, w->b_Q, r->H * r->dk, p);
		product(r->K, xr[1], d->n_kv, d->d_k_in, d->d_k_in, w->W_K, w->b_K, r->G * r->dk, p);
		product(r->V, xr[2], d->n_kv, d->d_v_in, d->d_v_in, w->W_V, w->b_V, r->G * r->dv, p);
	}
	for (int k = 0; k < 3; k++)
		free(xr[k]);
	if (st != MHA_OK)
		return st;
	if ((wants(obs, MHA_STAGE_Q) && obs->fn(obs->ctx, MHA_STAGE_Q, -1, r->Q, d->n_q, r->H * r->dk)) ||
	    (wants(obs, MHA_STAGE_K) && obs->fn(obs->ctx, MHA_STAGE_K, -1, r->K, d->n_kv, r->G * r->dk)) ||
	    (wants(obs, MHA_STAGE_V) && obs->fn(obs->ctx, MHA_STAGE_V, -1, r->V, d->n_kv, r->G * r->dv)))
		return MHA_ERR_OBSERVER;
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		rope_turn(r->Q, d->n_q, r->H, r->dk, &cfg->rope, cfg->rope.q_pos,
			  mha_rule_offset_seq(d, cfg, b), p);
		rope_turn(r->K, d->n_kv, r->G, r->dk, &cfg->rope, cfg->rope.k_pos, 0, p);
		if ((wants(obs, MHA_STAGE_Q_ROT) &&
		     obs->fn(obs->ctx, MHA_STAGE_Q_ROT, -1, r->Q, d->n_q, r->H * r->dk)) ||
		    (wants(obs, MHA_STAGE_K_ROT) &&
		     obs->fn(obs->ctx, MHA_STAGE_K_ROT, -1, r->K, d->n_kv, r->G * r->dk)))
			return MHA_ERR_OBSERVER;
	}
	for (size_t h = 0; h < r->H && st == MHA_OK; h++)
		st = lowp_head(r, rule, h);
	if (st != MHA_OK)
		return st;
	if (wants(obs, MHA_STAGE_CONCAT) &&
	    obs->fn(obs->ctx, MHA_STAGE_CONCAT, -1, r->concat, d->n_q, r->H * r->dv))
		return MHA_ERR_OBSERVER;
	if (w->W_O) {
		double *wo = doubles(r->H * r->dv, out_cols), *bo = w->b_O ? doubles(out_cols, 1) : NULL;

		if (!wo || (w->b_O && !bo)) {
			free(wo);
			free(bo);
			return MHA_ERR_NOMEM;
		}
		round_all(wo, w->W_O, r->H * r->dv * out_cols, p);
		if (bo)
			round_all(bo, w->b_O, out_cols, p);
		product(out, r->concat, d->n_q, r->H * r->dv, r->H * r->dv, wo, bo, out_cols, p);
		free(wo);
		free(bo);
	} else {
		memcpy(out, r->concat, d->n_q * out_cols * sizeof(double));
	}
	if (wants(obs, MHA_STAGE_OUTPUT) && obs->fn(obs->ctx, MHA_STAGE_OUTPUT, -1, out, d->n_q, out_cols))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

/* weights rounded once, for every sequence: W_Q, W_K, W_V and their biases */
static mha_status rounded_weights(const mha_weights *w, mha_weights *to, double *own[6],
				  const mha_dims *d, size_t G, mha_precision p)
{
	const double *src[6] = { w->W_Q, w->W_K, w->W_V, w->b_Q, w->b_K, w->b_V };
	const size_t n[6] = { d->d_q_in * d->heads * d->d_k, d->d_k_in * G * d->d_k,
			      d->d_v_in * G * d->d_v, d->heads * d->d_k, G * d->d_k, G * d->d_v };

	*to = *w;
	for (int k = 0; k < 6; k++) {
		own[k] = NULL;
		if (!src[k])
			continue;
		own[k] = doubles(n[k], 1);
		if (!own[k])
			return MHA_ERR_NOMEM;
		round_all(own[k], src[k], n[k], p);
	}
	to->W_Q = own[0];
	to->W_K = own[1];
	to->W_V = own[2];
	to->b_Q = own[3];
	to->b_K = own[4];
	to->b_V = own[5];
	return MHA_OK;
}

mha_status mha_lowp_forward(double *out, const mha_dims *d, const mha_inputs *in,
			    const mha_weights *w, const mha_config *cfg, const mha_observer *obs,
			    mha_report *rep, struct mha_progress *prog)
{
	struct lowp r;
	struct mha_rule all = mha_rule_of(d, cfg);
	const size_t B = mha_rule_batch(d), out_cols = mha_output_cols(d, w->W_O != NULL);
	mha_weights wr;
	double *own[6];
	mha_status st;

	if (cfg->alibi.on || cfg->norm.kind != MHA_NORM_NONE || cfg->mla.on)
		return MHA_ERR_PRECISION;
	memset(&r, 0, sizeof(r));
	r.d = d;
	r.cfg = cfg;
	r.obs = obs;
	r.p = cfg->precision;
	r.H = d->heads;
	r.G = mha_rule_kv_heads(d);
	r.dk = d->d_k;
	r.dv = d->d_v;
	{
		/* the scale as the port applies it (mha_lowp_scale) */
		const double s = mha_scale_of(d, cfg);

		r.divide = cfg->lowp_scale == MHA_LOWP_SCALE_DIVIDED;
		r.scale = (float)(r.divide ? mha_lowp_round(1 / s, r.p)
				  : cfg->lowp_scale == MHA_LOWP_SCALE_ROUNDED ? mha_lowp_round(s, r.p) : s);
		r.sum_in_type = cfg->lowp_sum == MHA_LOWP_SUM_TYPE;
	}
	r.first_blocked_head = -1;
	st = rounded_weights(w, &wr, own, d, r.G, r.p);
	r.Q = doubles(d->n_q, r.H * r.dk);
	r.K = doubles(d->n_kv, r.G * r.dk);
	r.V = doubles(d->n_kv, r.G * r.dv);
	r.concat = doubles(d->n_q, r.H * r.dv);
	r.row = doubles(d->n_kv, 1);
	r.e = doubles(d->n_kv, 1);
	r.block = doubles(d->n_q > d->n_kv ? d->n_q : d->n_kv, r.dk > r.dv ? r.dk : r.dv);
	if (st == MHA_OK && !(r.Q && r.K && r.V && r.concat && r.row && r.e && r.block))
		st = MHA_ERR_NOMEM;
	for (int s = 0; s < 6 && st == MHA_OK; s++)
		if (wants(obs, lowp_stages[s]) && (s != L_SOFTCAPPED || cfg->softcap > 0) &&
		    !(r.square[s] = doubles(d->n_q, d->n_kv)))
			st = MHA_ERR_NOMEM;
	mha_progress_phase(prog, "attention");
	for (size_t b = 0; b < B && st == MHA_OK; b++) {
		const struct mha_rule rule = mha_rule_seq(&all, b);

		st = lowp_sequence(out + b * d->n_q * out_cols, in->xq + b * d->n_q * d->d_q_in,
				   in->xk + b * d->n_kv * d->d_k_in, in->xv + b * d->n_kv * d->d_v_in,
				   &wr, &r, &rule, b);
	}
	if (st == MHA_OK && rep) {
		rep->blocked_rows = r.blocked;
		rep->first_blocked_head = r.first_blocked_head;
		rep->first_blocked_row = r.first_blocked_row;
		rep->scale = mha_scale_of(d, cfg);
		rep->fast_path = 0;
	}
	for (int k = 0; k < 6; k++)
		free(own[k]);
	for (int s = 0; s < 6; s++)
		free(r.square[s]);
	free(r.Q);
	free(r.K);
	free(r.V);
	free(r.concat);
	free(r.row);
	free(r.e);
	free(r.block);
	return st;
}

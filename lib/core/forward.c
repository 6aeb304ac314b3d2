/*
 * mha.c: the float64 multi-head attention of mha.h.
 *
 * This is the exact path: it computes one query row of one head at a time,
 * in the order the formula is written, so that every intermediate can be
 * handed to an observer and every sum is taken in a fixed order (keys, then
 * features, ascending).  It builds an (n_q, n_kv) matrix only for a stage
 * somebody asked to see; otherwise a row of n_kv doubles is all the
 * attention itself needs.  A batch is computed one sequence after another,
 * each as if alone (plain_sequence).  It is not the fast path: no
 * blocking, no threads.  Here too: the core forward in float64 and float32
 * (core.h), which picks a path, and its memory; the checks of a problem are
 * check.c's, the public entry points api.c's.
 */
#include "mha.h"
#include "kernels/kernel.h"
#include "base/progress.h"
#include "base/rules.h"
#include "core/plain.h"
#include "core/core.h"
#include "core/lowp.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * out (rows, cols) = x (rows, d_in) · W (d_in, cols) + b (cols).
 * Each element sums over the inputs in ascending order, then adds the bias.
 */
static void project(double *out, const double *x, size_t rows, size_t d_in,
		    const double *W, const double *b, size_t cols)
{
	for (size_t i = 0; i < rows; i++) {
		double *o = out + i * cols;
		const double *xi = x + i * d_in;

		memset(o, 0, cols * sizeof(*o));
		for (size_t k = 0; k < d_in; k++) {
			const double a = xi[k];
			const double *wk = W + k * cols;

			for (size_t c = 0; c < cols; c++)
				o[c] += a * wk[c];
		}
		if (b)
			for (size_t c = 0; c < cols; c++)
				o[c] += b[c];
	}
}

static int all_finite(const double *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

/*
 * One projection: Q = x·W + b, or x itself (+ b) when W is NULL.  *owned
 * receives what must be freed (NULL when x is used in place).
 */
static mha_status make_projection(const double **res, double **owned,
				  const double *x, size_t rows, size_t d_in,
				  const double *W, const double *b, size_t cols)
{
	size_t n;

	*owned = NULL;
	if (!W && !b) {
		*res = x;
		return MHA_OK;
	}
	if (!mha_mul_fits(rows, cols, &n) || !mha_mul_fits(n, sizeof(double), &n))
		return MHA_ERR_TOOBIG;
	*owned = malloc(n ? n : 1);
	if (!*owned)
		return MHA_ERR_NOMEM;
	if (W) {
		project(*owned, x, rows, d_in, W, b, cols);
		/* partial sums that overflowed: again, rescaled (rules.h) */
		if (!all_finite(*owned, rows * cols) &&
		    mha_finish_product(*owned, rows, cols, cols, x, d_in, W, cols, b, d_in, sizeof(double)))
			return MHA_ERR_RANGE;
	} else {
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				(*owned)[i * cols + c] = x[i * cols + c] + b[c];
	}
	*res = *owned;
	return MHA_OK;
}

static int wants(const mha_observer *obs, mha_stage s)
{
	return obs && obs->fn && (obs->stages & MHA_STAGE_SET(s));
}

/* copy a column block (rows, width) at column col0 of m (rows, ld) into dst */
static void copy_block(double *dst, const double *m, size_t rows, size_t ld,
		       size_t col0, size_t width)
{
	for (size_t i = 0; i < rows; i++)
		memcpy(dst + i * width, m + i * ld + col0, width * sizeof(*dst));
}

/* hand a column block to the observer, through scratch space of rows·width */
static int observe_block(const mha_observer *obs, mha_stage s, int head,
			 double *scratch, const double *m, size_t rows,
			 size_t ld, size_t col0, size_t width)
{
	copy_block(scratch, m, rows, ld, col0, width);
	return obs->fn(obs->ctx, s, head, scratch, rows, width);
}

/* The per-head (n_q, n_kv) stages, in the order they are computed. */
enum { SQ_SCORES, SQ_SCALED, SQ_SOFTCAPPED, SQ_MASK, SQ_MASKED, SQ_SOFTMAX, N_SQUARE };
static const mha_stage square_stages[N_SQUARE] = {
	[SQ_SCORES] = MHA_STAGE_SCORES, [SQ_SCALED] = MHA_STAGE_SCALED,
	[SQ_SOFTCAPPED] = MHA_STAGE_SOFTCAPPED, [SQ_MASK] = MHA_STAGE_MASK,
	[SQ_MASKED] = MHA_STAGE_MASKED, [SQ_SOFTMAX] = MHA_STAGE_SOFTMAX,
};

struct run {
	const mha_dims *d;
	const mha_config *cfg;
	const mha_observer *obs;
	size_t H, G, dk, dv;
	double scale;
	struct mha_rule rule;    /* which keys each query sees (rules.h) */
	const double *Q, *K, *V; /* (n_q, H·dk), (n_kv, G·dk), (n_kv, G·dv) */
	double *concat;          /* (n_q, H·dv) */
	double *row;             /* (n_kv) the row being worked on */
	double *square[N_SQUARE];/* (n_q, n_kv) each, only for the wanted stages */
	double *scratch;         /* (max(n_q, n_kv), max(dk, dv)) for head blocks */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row;
	size_t first_blocked_seq; /* a batch: the sequence of the first blocked row */
	struct mha_progress *progress; /* the call's, told row by row (progress.h) */
};

static void keep_row(struct run *r, size_t which, size_t i)
{
	if (r->square[which])
		memcpy(r->square[which] + i * r->d->n_kv, r->row,
		       r->d->n_kv * sizeof(double));
}

/* the largest |v| in a column block (rows, width) of m (ld) */
static double max_abs(const double *m, size_t rows, size_t ld, size_t width)
{
	double x = 0;

	for (size_t i = 0; i < rows; i++)
		for (size_t t = 0; t < width; t++)
			x = fmax(x, fabs(m[i * ld + t]));
	return x;
}

/* o (dv) = Σ_j p_j·v_j, keys ascending, the weights scaled by 2^-shift */
static void weigh_values(double *o, const double *p, const double *V, size_t n_kv, size_t ldv,
			 size_t dv, int shift)
{
	memset(o, 0, dv * sizeof(*o));
	for (size_t j = 0; j < n_kv; j++) {
		const double pj = shift ? ldexp(p[j], -shift) : p[j];
		const double *v = V + j * ldv;

		if (pj == 0.0)
			continue;
		for (size_t t = 0; t < dv; t++)
			o[t] += pj * v[t];
	}
}

/* One query head: every (n_q, n_kv) stage row by row, then softmax·V into concat. */
static mha_status run_head(struct run *r, size_t h)
{
	const mha_dims *d = r->d;
	const struct mha_rule *rule = &r->rule;
	const size_t g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldk = r->G * r->dk, ldv = r->G * r->dv;
	const size_t ldc = r->H * r->dv;
	const double c = r->cfg->softcap;
	const int head = (int)h;
	const mha_observer *obs = r->obs;

	if (wants(obs, MHA_STAGE_HEAD_Q) &&
	    observe_block(obs, MHA_STAGE_HEAD_Q, head, r->scratch, r->Q, d->n_q, ldq, h * r->dk, r->dk))
		return MHA_ERR_OBSERVER;
	if (wants(obs, MHA_STAGE_HEAD_K) &&
	    observe_block(obs, MHA_STAGE_HEAD_K, head, r->scratch, r->K, d->n_kv, ldk, g * r->dk, r->dk))
		return MHA_ERR_OBSERVER;
	if (wants(obs, MHA_STAGE_HEAD_V) &&
	    observe_block(obs, MHA_STAGE_HEAD_V, head, r->scratch, r->V, d->n_kv, ldv, g * r->dv, r->dv))
		return MHA_ERR_OBSERVER;

	for (size_t i = 0; i < d->n_q; i++) {
		const double *q = r->Q + i * ldq + h * r->dk;
		double *o = r->concat + i * ldc + h * r->dv;
		double *x = r->row;
		double max = -INFINITY, sum = 0.0;

		if (r->progress) {
			/* the keys row i sees, as mha_progress_forward_work counts them */
			const size_t e = mha_rule_keys_end(&r->rule, i), s = mha_rule_keys_begin(&r->rule, i);

			mha_progress_add(r->progress, (uint64_t)(e > s ? e - s : 0) * (r->dk + r->dv));
			mha_progress_tell(r->progress);
			if (mha_progress_stopped(r->progress))
				return MHA_ERR_STOPPED;
		}
		int finite = 1;

		/* every key's score, seen or not (the stages show them all); the
		 * overflow rule counts only the keys the query sees */
		for (size_t j = 0; j < d->n_kv; j++) {
			const double *k = r->K + j * ldk + g * r->dk;
			double s = 0.0;

			for (size_t t = 0; t < r->dk; t++)
				s += q[t] * k[t];
			if (!isfinite(s)) {
				/* overflowing partial sums, or truly too large: rules.h decides */
				s = mha_dot_f64(q, 1, k, 1, r->dk, 0.0);
				if (mha_rule_overflows(rule, h, i, j, s))
					return MHA_ERR_RANGE;
			}
			x[j] = s;
		}
		keep_row(r, SQ_SCORES, i);
		for (size_t j = 0; j < d->n_kv; j++) {
			x[j] *= r->scale;
			if (!isfinite(x[j]) && mha_rule_overflows(rule, h, i, j, x[j]))
				return MHA_ERR_RANGE;
		}
		keep_row(r, SQ_SCALED, i);
		if (c > 0) {
			for (size_t j = 0; j < d->n_kv; j++)
				x[j] = c * tanh(x[j] / c);
			keep_row(r, SQ_SOFTCAPPED, i);
		}
		for (size_t j = 0; j < d->n_kv; j++) {
			const double m = mha_rule_mask(rule, h, i, j);

			if (r->square[SQ_MASK])
				r->square[SQ_MASK][i * d->n_kv + j] = m;
			x[j] = mha_rule_masked(x[j], m);
			if (!isfinite(x[j]) && mha_rule_overflows(rule, h, i, j, x[j]))
				return MHA_ERR_RANGE;
			if (x[j] > max)
				max = x[j];
		}
		keep_row(r, SQ_MASKED, i);

		if (max == -INFINITY) {
			/* every key blocked: no distribution to speak of; say zero, not NaN */
			memset(x, 0, d->n_kv * sizeof(*x));
			if (!r->blocked++) {
				r->first_blocked_head = head;
				r->first_blocked_row = i;
			}
		} else {
			/* a sink joins the max (its term may be the largest) and the sum */
			const double sink = rule->sinks ? rule->sinks[h] : -INFINITY;

			if (sink > max)
				max = sink;
			/* subtract the row max: exp() of a large score would overflow */
			for (size_t j = 0; j < d->n_kv; j++) {
				x[j] = exp(x[j] - max);
				sum += x[j];
			}
			if (rule->sinks)
				sum += exp(sink - max);
			/* sum >= 1: the max term (a key's or the sink's) is exp(0) */
			for (size_t j = 0; j < d->n_kv; j++)
				x[j] /= sum;
		}
		keep_row(r, SQ_SOFTMAX, i);

		weigh_values(o, x, r->V + g * r->dv, d->n_kv, ldv, r->dv, 0);
		for (size_t t = 0; t < r->dv; t++)
			finite &= isfinite(o[t]) != 0;
		if (!finite) {
			/* a convex combination of finite values is finite: the sum
			 * overflowed on the way; again, the weights scaled down */
			const int shift = mha_rescue_shift(max_abs(r->V + g * r->dv, d->n_kv, ldv, r->dv),
							   d->n_kv, DBL_MAX);

			weigh_values(o, x, r->V + g * r->dv, d->n_kv, ldv, r->dv, shift);
			for (size_t t = 0; t < r->dv; t++)
				o[t] = mha_rescue_back(o[t], shift, DBL_MAX);
		}
	}

	for (size_t s = 0; s < N_SQUARE; s++)
		if (r->square[s] &&
		    obs->fn(obs->ctx, square_stages[s], head, r->square[s], d->n_q, d->n_kv))
			return MHA_ERR_OBSERVER;
	if (wants(obs, MHA_STAGE_HEAD_OUTPUT) &&
	    observe_block(obs, MHA_STAGE_HEAD_OUTPUT, head, r->scratch, r->concat, d->n_q, ldc, h * r->dv, r->dv))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

static void *alloc_doubles(size_t rows, size_t cols)
{
	size_t n;

	if (!mha_mul_fits(rows, cols, &n) || !mha_mul_fits(n, sizeof(double), &n))
		return NULL;
	return malloc(n ? n : 1);
}

/* a block of rows·cols elements of esize bytes as the allocator sees it, saturating */
static size_t block_bytes(size_t rows, size_t cols, size_t esize)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), esize), MHA_ALLOC_SLACK);
}

static size_t max_size(size_t a, size_t b)
{
	return a > b ? a : b;
}

static int wants_per_head_bits(mha_stages wanted);

/*
 * What mha_forward allocates at its peak, allocation by allocation as the
 * code does it, taking every weight and bias as given (without them Q, K,
 * V or the concatenation are the caller's arrays, and this is an upper
 * bound).  The fast path's kernels say what they allocate themselves.
 */
size_t mha_core_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32)
{
	static const mha_config defaults = MHA_INIT(mha_config);
	const size_t e = f32 ? sizeof(float) : sizeof(double);
	size_t G, hk, hv, gk, gv, q, qk, qkv, held, B;
	int plain;

	if (!d || mha_check(d, cfg) != MHA_OK)
		return SIZE_MAX;
	if (!cfg)
		cfg = &defaults;
	G = mha_rule_kv_heads(d);
	hk = d->heads * d->d_k;
	hv = d->heads * d->d_v;
	gk = G * d->d_k;
	gv = G * d->d_v;
	/* the plain path computes one sequence at a time, the fast path all at once;
	 * the low-precision reference as the plain path */
	plain = !f32 && (cfg->exact || wants_per_head_bits(wanted) ||
			 cfg->precision != MHA_PRECISION_F64);
	B = plain ? 1 : mha_rule_batch(d);
	/* Q, K and V, held to the end; then the concatenation (without W_O the output) */
	q = block_bytes(mha_sat_mul(B, d->n_q), hk, e);
	qk = mha_sat_add(q, block_bytes(mha_sat_mul(B, d->n_kv), gk, e));
	qkv = mha_sat_add(qk, block_bytes(mha_sat_mul(B, d->n_kv), gv, e));
	if (cfg->rope.mode != MHA_ROPE_NONE || cfg->norm.kind != MHA_NORM_NONE) {
		/* q_rot and k_rot (or q_norm and k_norm, turned in place) beside Q
		 * and K, held to the end */
		qkv = mha_sat_add(qkv, block_bytes(mha_sat_mul(B, d->n_q), hk, e));
		qkv = mha_sat_add(qkv, block_bytes(mha_sat_mul(B, d->n_kv), gk, e));
	}
	/* the fast path writes the concatenation over Q when W_O is there and d_k = d_v (fast.c) */
	held = !plain && d->d_out && d->d_k == d->d_v ? qkv
		: mha_sat_add(qkv, block_bytes(mha_sat_mul(B, d->n_q), hv, e));
	if (plain) {
		/* the plain path: a row, the head blocks, an (n_q, n_kv) matrix per watched stage */
		size_t squares = 0;

		for (int s = MHA_STAGE_SCORES; s <= MHA_STAGE_SOFTMAX; s++)
			if ((wanted & MHA_STAGE_SET(s)) && (s != MHA_STAGE_SOFTCAPPED || cfg->softcap > 0))
				squares++;
		held = mha_sat_add(held, block_bytes(d->n_kv, 1, e));
		held = mha_sat_add(held, block_bytes(max_size(d->n_q, d->n_kv), max_size(d->d_k, d->d_v), e));
		if (cfg->precision != MHA_PRECISION_F64) {
			/* and its copies rounded to the type: a sequence's X, the
			 * weights and biases, a second row (lowp.c) */
			size_t copies = mha_sat_add(block_bytes(d->n_q, d->d_q_in, e),
						    block_bytes(d->n_kv, mha_sat_add(d->d_k_in,
										 d->d_v_in), e));

			copies = mha_sat_add(copies, block_bytes(d->d_q_in + 1, hk, e));
			copies = mha_sat_add(copies, block_bytes(d->d_k_in + 1, gk, e));
			copies = mha_sat_add(copies, block_bytes(d->d_v_in + 1, gv, e));
			copies = mha_sat_add(copies, block_bytes(hv + 1, d->d_out, e));
			held = mha_sat_add(held, mha_sat_add(copies, block_bytes(d->n_kv, 1, e)));
		}
		return mha_sat_add(held, mha_sat_mul(squares, block_bytes(d->n_q, d->n_kv, e)));
	} else {
		/* the fast path: each product's and the attention's own blocks at their turn */
		const struct mha_kernels *k = mha_pick_kernels(f32);
		const size_t per = mha_stream_heads(d, cfg, wanted, e);
		const int threads = mha_threads(cfg);
		struct mha_gemm gq = { .m = B * d->n_q, .n = hk, .k = d->d_q_in, .threads = threads };
		struct mha_gemm gk_ = { .m = B * d->n_kv, .n = gk, .k = d->d_k_in, .threads = threads };
		struct mha_gemm gv_ = { .m = B * d->n_kv, .n = gv, .k = d->d_v_in, .threads = threads };
		struct mha_gemm go = { .m = B * d->n_q, .n = d->d_out, .k = hv, .threads = threads };
		struct mha_attend at = { .B = B, .n_q = d->n_q, .n_kv = d->n_kv, .H = d->heads, .G = G,
					 .dk = d->d_k, .dv = d->d_v, .threads = threads };
		/* Q, K and V are one block from the first product on (fast.c) */
		const size_t qkv3 = mha_sat_add(qk, block_bytes(mha_sat_mul(B, d->n_kv), gv, e));
		size_t peak = mha_sat_add(qkv3, k->gemm_bytes(&gq));

		/* the heads in groups (fast.c): no Q, K or V whole */
		if (per < G)
			return mha_stream_memory(d, cfg, per, f32);

		peak = max_size(peak, mha_sat_add(qkv3, k->gemm_bytes(&gk_)));
		peak = max_size(peak, mha_sat_add(qkv, k->gemm_bytes(&gv_)));
		peak = max_size(peak, mha_sat_add(held, k->attend_bytes(&at)));
		if (d->d_out)
			peak = max_size(peak, mha_sat_add(held, k->gemm_bytes(&go)));
		return peak;
	}
}

/* What both paths and both element types check before computing. */
static mha_status validate(const mha_dims *d, const mha_config *cfg, const void *out,
			   const void *const x[3], const void *const W[4], mha_report *rep)
{
	const size_t G = mha_rule_kv_heads(d);
	mha_status st;

	if (rep) {
		rep->blocked_rows = 0;
		rep->first_blocked_head = -1;
		rep->first_blocked_row = 0;
		rep->first_blocked_sequence = 0;
		rep->scale = NAN;
		rep->causal_offset = 0;
		rep->fast_path = 0;
	}
	st = mha_check(d, cfg);
	if (st != MHA_OK)
		return st;
	if (!out || !x[0] || !x[1] || !x[2])
		return MHA_ERR_NULL;
	if (!isfinite(mha_scale_of(d, cfg)))
		return MHA_ERR_SCALE;
	if (W[3] && !d->d_out)
		return MHA_ERR_DIM;
	if ((!W[0] && d->d_q_in != d->heads * d->d_k) || (!W[1] && d->d_k_in != G * d->d_k) ||
	    (!W[2] && d->d_v_in != G * d->d_v))
		return MHA_ERR_SHAPE;
	if (rep && cfg->causal != MHA_CAUSAL_NONE)
		rep->causal_offset = mha_rule_offset(d, cfg);
	return MHA_OK;
}

/* the stages only the plain path can hand over */
static int wants_per_head_bits(mha_stages wanted)
{
	const mha_stages per_head = MHA_STAGE_SET(MHA_STAGE_HEAD_Q) | MHA_STAGE_SET(MHA_STAGE_HEAD_K) |
		MHA_STAGE_SET(MHA_STAGE_HEAD_V) | MHA_STAGE_SET(MHA_STAGE_SCORES) |
		MHA_STAGE_SET(MHA_STAGE_SCALED) | MHA_STAGE_SET(MHA_STAGE_SOFTCAPPED) |
		MHA_STAGE_SET(MHA_STAGE_MASK) | MHA_STAGE_SET(MHA_STAGE_MASKED) |
		MHA_STAGE_SET(MHA_STAGE_SOFTMAX) | MHA_STAGE_SET(MHA_STAGE_HEAD_OUTPUT);

	return (wanted & per_head) != 0;
}

static int wants_per_head(const mha_observer *obs)
{
	return obs && obs->fn && wants_per_head_bits(obs->stages);
}

mha_status mha_core_forward_f32(float *out, const mha_dims *d, const mha_inputs_f32 *in,
				const mha_weights_f32 *w, const mha_config *cfg, const mha_observer *obs,
				mha_report *rep)
{
	static const mha_weights_f32 no_weights = MHA_INIT(mha_weights_f32);
	static const mha_config defaults = MHA_INIT(mha_config);
	struct typed t = { .esize = sizeof(float) };
	mha_observer told = MHA_INIT(mha_observer);
	struct mha_progress prog;
	mha_status st;

	if (!d || !in)
		return MHA_ERR_NULL;
	if (!MHA_SIZED(d) || !MHA_SIZED(in) || !MHA_SIZED(w) || !MHA_SIZED(cfg) ||
	    !MHA_SIZED(obs) || !MHA_SIZED(rep))
		return MHA_ERR_VERSION;
	if (!w)
		w = &no_weights;
	if (!cfg)
		cfg = &defaults;
	/* float32 keeps no intermediates: of obs, its progress alone */
	if (obs) {
		told.progress = obs->progress;
		told.progress_ctx = obs->progress_ctx;
		told.stop = obs->stop;
		told.stop_ctx = obs->stop_ctx;
	}
	t.k = mha_pick_kernels(1);
	t.x[0] = in->xq;
	t.x[1] = in->xk;
	t.x[2] = in->xv;
	t.W[0] = w->W_Q;
	t.W[1] = w->W_K;
	t.W[2] = w->W_V;
	t.W[3] = w->W_O;
	t.b[0] = w->b_Q;
	t.b[1] = w->b_K;
	t.b[2] = w->b_V;
	t.b[3] = w->W_O ? w->b_O : NULL;
	st = validate(d, cfg, out, t.x, t.W, rep);
	if (st != MHA_OK)
		return st;
	if (rep)
		rep->fast_path = 1;
	mha_progress_start(&prog, told.progress, told.progress_ctx, told.stop, told.stop_ctx,
			   mha_progress_listened(told.progress, told.stop) ?
			   mha_progress_forward_work(d, cfg, t.W) : 0);
	t.progress = &prog;
	st = (mha_status)mha_fast_forward(out, &t, d, cfg, NULL, rep);
	if (mha_progress_stopped(&prog))
		st = MHA_ERR_STOPPED; /* whatever the skipped work left */
	if (st == MHA_OK)
		mha_progress_end(&prog);
	return st;
}

/*
 * The plain path for one sequence: xq (n_q, d_q_in), xk and xv (n_kv, …),
 * out (n_q, out_cols), rule that sequence's.  Adds its blocked rows to *tot.
 */
static mha_status plain_sequence(double *out, const mha_dims *d, const double *xq,
				 const double *xk, const double *xv, const mha_weights *w,
				 const mha_config *cfg, const mha_observer *obs,
				 const struct mha_rule *rule, size_t b, struct run *tot)
{
	struct run r;
	double *owned_q = NULL, *owned_k = NULL, *owned_v = NULL, *owned_c = NULL;
	double *q_rot = NULL, *k_rot = NULL;
	mha_status st;
	size_t out_cols;

	memset(&r, 0, sizeof(r));
	r.d = d;
	r.cfg = cfg;
	r.obs = obs;
	r.progress = tot->progress;
	r.H = d->heads;
	r.G = mha_rule_kv_heads(d);
	r.dk = d->d_k;
	r.dv = d->d_v;
	r.scale = mha_scale_of(d, cfg);
	r.rule = *rule;
	r.first_blocked_head = -1;
	out_cols = mha_output_cols(d, w->W_O != NULL);

	if (obs && obs->fn && obs->sequence && obs->sequence(obs->ctx, b))
		return MHA_ERR_OBSERVER;
	mha_progress_phase(r.progress, "projections");
	st = make_projection(&r.Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q, w->b_Q, r.H * r.dk);
	if (st == MHA_OK)
		st = make_projection(&r.K, &owned_k, xk, d->n_kv, d->d_k_in, w->W_K, w->b_K, r.G * r.dk);
	if (st == MHA_OK)
		st = make_projection(&r.V, &owned_v, xv, d->n_kv, d->d_v_in, w->W_V, w->b_V, r.G * r.dv);
	if (st != MHA_OK)
		goto done;
	/* as mha_progress_forward_work counts them */
	mha_progress_add(r.progress, (uint64_t)((w->W_Q ? d->n_q * d->d_q_in * r.H * r.dk : 0) +
						(w->W_K ? d->n_kv * d->d_k_in * r.G * r.dk : 0) +
						(w->W_V ? d->n_kv * d->d_v_in * r.G * r.dv : 0)));
	mha_progress_phase(r.progress, "attention");
	if (!all_finite(r.Q, d->n_q * r.H * r.dk) || !all_finite(r.K, d->n_kv * r.G * r.dk) ||
	    !all_finite(r.V, d->n_kv * r.G * r.dv)) {
		st = MHA_ERR_RANGE;
		goto done;
	}
	if ((wants(obs, MHA_STAGE_Q) && obs->fn(obs->ctx, MHA_STAGE_Q, -1, r.Q, d->n_q, r.H * r.dk)) ||
	    (wants(obs, MHA_STAGE_K) && obs->fn(obs->ctx, MHA_STAGE_K, -1, r.K, d->n_kv, r.G * r.dk)) ||
	    (wants(obs, MHA_STAGE_V) && obs->fn(obs->ctx, MHA_STAGE_V, -1, r.V, d->n_kv, r.G * r.dv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (cfg->rope.mode != MHA_ROPE_NONE || cfg->norm.kind != MHA_NORM_NONE) {
		/* the heads see Q and K normalised, then turned by position */
		q_rot = alloc_doubles(d->n_q, r.H * r.dk);
		k_rot = alloc_doubles(d->n_kv, r.G * r.dk);
		st = q_rot && k_rot ? MHA_OK : MHA_ERR_NOMEM;
	}
	if (st == MHA_OK && cfg->norm.kind != MHA_NORM_NONE) {
		st = mha_norm_turn(q_rot, r.Q, sizeof(double), d->n_q, r.H, r.dk, 0, &cfg->norm, 0);
		if (st == MHA_OK)
			st = mha_norm_turn(k_rot, r.K, sizeof(double), d->n_kv, r.G, r.dk, 0, &cfg->norm, 1);
		if (st == MHA_OK &&
		    ((wants(obs, MHA_STAGE_Q_NORM) &&
		      obs->fn(obs->ctx, MHA_STAGE_Q_NORM, -1, q_rot, d->n_q, r.H * r.dk)) ||
		     (wants(obs, MHA_STAGE_K_NORM) &&
		      obs->fn(obs->ctx, MHA_STAGE_K_NORM, -1, k_rot, d->n_kv, r.G * r.dk))))
			st = MHA_ERR_OBSERVER;
		r.Q = q_rot;
		r.K = k_rot;
	}
	if (st != MHA_OK)
		goto done;
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		/* the heads see Q and K turned by position (in place after a norm) */
		st = mha_rope_turn(q_rot, r.Q, sizeof(double), d->n_q, r.H, r.dk, &cfg->rope,
				   cfg->rope.q_pos, mha_rule_offset_seq(d, cfg, b));
		if (st == MHA_OK)
			st = mha_rope_turn(k_rot, r.K, sizeof(double), d->n_kv, r.G, r.dk, &cfg->rope,
					   cfg->rope.k_pos, 0);
		if (st != MHA_OK)
			goto done;
		if ((wants(obs, MHA_STAGE_Q_ROT) &&
		     obs->fn(obs->ctx, MHA_STAGE_Q_ROT, -1, q_rot, d->n_q, r.H * r.dk)) ||
		    (wants(obs, MHA_STAGE_K_ROT) &&
		     obs->fn(obs->ctx, MHA_STAGE_K_ROT, -1, k_rot, d->n_kv, r.G * r.dk))) {
			st = MHA_ERR_OBSERVER;
			goto done;
		}
		r.Q = q_rot;
		r.K = k_rot;
	}

	/* without W_O the concatenation is the output: build it in place */
	if (w->W_O) {
		owned_c = alloc_doubles(d->n_q, r.H * r.dv);
		r.concat = owned_c;
	} else {
		r.concat = out;
	}
	r.row = alloc_doubles(d->n_kv, 1);
	r.scratch = alloc_doubles(d->n_q > d->n_kv ? d->n_q : d->n_kv,
				  r.dk > r.dv ? r.dk : r.dv);
	st = (r.concat && r.row && r.scratch) ? MHA_OK : MHA_ERR_NOMEM;
	for (size_t s = 0; s < N_SQUARE && st == MHA_OK; s++) {
		if (s == SQ_SOFTCAPPED && !(cfg->softcap > 0))
			continue;
		if (wants(obs, square_stages[s])) {
			r.square[s] = alloc_doubles(d->n_q, d->n_kv);
			if (!r.square[s])
				st = MHA_ERR_NOMEM;
		}
	}
	for (size_t h = 0; h < r.H && st == MHA_OK; h++)
		st = run_head(&r, h);
	if (st != MHA_OK)
		goto done;

	if (wants(obs, MHA_STAGE_CONCAT) &&
	    obs->fn(obs->ctx, MHA_STAGE_CONCAT, -1, r.concat, d->n_q, r.H * r.dv)) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (w->W_O) {
		mha_progress_phase(r.progress, "output");
		project(out, r.concat, d->n_q, r.H * r.dv, w->W_O, w->b_O, out_cols);
		mha_progress_add(r.progress, (uint64_t)d->n_q * r.H * r.dv * out_cols);
		if (!all_finite(out, d->n_q * out_cols) &&
		    mha_finish_product(out, d->n_q, out_cols, out_cols, r.concat, r.H * r.dv, w->W_O,
				       out_cols, w->b_O, r.H * r.dv, sizeof(double))) {
			st = MHA_ERR_RANGE;
			goto done;
		}
	}
	if (!all_finite(out, d->n_q * out_cols)) {
		st = MHA_ERR_RANGE;
		goto done;
	}
	if (wants(obs, MHA_STAGE_OUTPUT) &&
	    obs->fn(obs->ctx, MHA_STAGE_OUTPUT, -1, out, d->n_q, out_cols))
		st = MHA_ERR_OBSERVER;

done:
	if (st == MHA_OK && r.blocked && !tot->blocked) {
		/* the first blocked row over the batch: this sequence's first */
		tot->first_blocked_head = r.first_blocked_head;
		tot->first_blocked_row = r.first_blocked_row;
		tot->first_blocked_seq = b;
	}
	tot->blocked += r.blocked;
	for (size_t s = 0; s < N_SQUARE; s++)
		free(r.square[s]);
	free(r.scratch);
	free(r.row);
	free(owned_c);
	free(owned_q);
	free(owned_k);
	free(owned_v);
	free(q_rot);
	free(k_rot);
	return st;
}

mha_status mha_core_forward(double *out, const mha_dims *d, const mha_inputs *in,
			    const mha_weights *w, const mha_config *cfg, const mha_observer *obs,
			    mha_report *rep)
{
	static const mha_weights no_weights = MHA_INIT(mha_weights);
	static const mha_config defaults = MHA_INIT(mha_config);
	struct run tot;
	struct mha_rule all;
	struct mha_progress prog;
	mha_status st = MHA_OK;
	size_t out_cols, B;

	if (!d || !in)
		return MHA_ERR_NULL;
	if (!MHA_SIZED(d) || !MHA_SIZED(in) || !MHA_SIZED(w) || !MHA_SIZED(cfg) ||
	    !MHA_SIZED(obs) || !MHA_SIZED(rep))
		return MHA_ERR_VERSION;
	if (!w)
		w = &no_weights;
	if (!cfg)
		cfg = &defaults;
	{
		const void *const x[3] = { in->xq, in->xk, in->xv };
		const void *const W[4] = { w->W_Q, w->W_K, w->W_V, w->W_O };

		st = validate(d, cfg, out, x, W, rep);
		if (st != MHA_OK)
			return st;
		mha_progress_start(&prog, obs ? obs->progress : NULL, obs ? obs->progress_ctx : NULL,
				   obs ? obs->stop : NULL, obs ? obs->stop_ctx : NULL,
				   obs && mha_progress_listened(obs->progress, obs->stop) ?
				   mha_progress_forward_work(d, cfg, W) : 0);
		if (cfg->precision != MHA_PRECISION_F64) {
			/* the low-precision reference: a path of its own */
			st = mha_lowp_forward(out, d, in, w, cfg, obs, rep, &prog);
			if (st == MHA_OK)
				mha_progress_end(&prog);
			return st;
		}
		if (!cfg->exact && !wants_per_head(obs)) {
			const struct typed t = {
				.esize = sizeof(double), .k = mha_pick_kernels(0),
				.x = { in->xq, in->xk, in->xv },
				.W = { w->W_Q, w->W_K, w->W_V, w->W_O },
				.b = { w->b_Q, w->b_K, w->b_V, w->W_O ? w->b_O : NULL },
				.progress = &prog,
			};

			if (rep)
				rep->fast_path = 1;
			st = (mha_status)mha_fast_forward(out, &t, d, cfg, obs, rep);
			if (mha_progress_stopped(&prog))
				st = MHA_ERR_STOPPED; /* whatever the skipped work left */
			if (st == MHA_OK)
				mha_progress_end(&prog);
			return st;
		}
	}

	/* the plain path: one sequence after another, each as if alone */
	memset(&tot, 0, sizeof(tot));
	tot.first_blocked_head = -1;
	tot.progress = &prog;
	all = mha_rule_of(d, cfg);
	B = mha_rule_batch(d);
	out_cols = mha_output_cols(d, w->W_O != NULL);
	for (size_t b = 0; b < B && st == MHA_OK; b++) {
		const struct mha_rule rule = mha_rule_seq(&all, b);

		st = plain_sequence(out + b * d->n_q * out_cols, d, in->xq + b * d->n_q * d->d_q_in,
				    in->xk + b * d->n_kv * d->d_k_in, in->xv + b * d->n_kv * d->d_v_in,
				    w, cfg, obs, &rule, b, &tot);
	}
	if (mha_progress_stopped(&prog))
		st = MHA_ERR_STOPPED;
	if (st == MHA_OK)
		mha_progress_end(&prog);
	if (rep && st == MHA_OK) {
		rep->blocked_rows = tot.blocked;
		rep->first_blocked_head = tot.first_blocked_head;
		rep->first_blocked_row = tot.first_blocked_row;
		rep->first_blocked_sequence = tot.first_blocked_seq;
		rep->scale = mha_scale_of(d, cfg);
	}
	return st;
}

/* ---- lent to backward.c (plain.h) ---------------------------------------- */

mha_status mha_plain_validate(const mha_dims *d, const mha_config *cfg, const void *out,
			      const void *const x[3], const void *const W[4], mha_report *rep)
{
	return validate(d, cfg, out, x, W, rep);
}

mha_status mha_plain_projection(const double **res, double **owned, const double *x, size_t rows,
				size_t d_in, const double *W, const double *b, size_t cols)
{
	return make_projection(res, owned, x, rows, d_in, W, b, cols);
}

int mha_plain_per_head(mha_stages wanted)
{
	return wants_per_head_bits(wanted);
}

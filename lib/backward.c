/*
 * backward.c: mha_backward(), every gradient of the layer (mha.h).
 *
 * The plain path: one sequence after another, one head after
 * another, one query row at a time.  Each row of the forward is recomputed
 * as mha.c computes it (scores, scaled, softcapped, masked, softmax, the
 * head's output), then its gradients are formed in the order mha.h writes
 * them (dP, D, dS, dscaled, dscores) and scattered into dQ_h, dK_h and
 * dV_h, every sum in ascending order.  An (n_q, n_kv) matrix exists only
 * for a stage an observer watches.  No blocking, no threads.  (The fast
 * path, below, shares its checks, rope and the stages handed over.)
 *
 * The fast path (fast_heads, FlashAttention-2's backward) runs when obs
 * wants no per-head stage (grad_per_head() is 0) and cfg->exact is 0, as
 * mha_forward() picks its fast path.  Per sequence: pass 1, tasks (query
 * head, block of 96 query rows): S = Q·Kᵀ over the keys the block may see,
 * masked row by row, the softmax (the sink's term included) into P,
 * O = P·V, each row's log-sum-exp L_i = m_i + log(sum_i) (-inf for a row
 * that sees no key) and D_i = rowsum(dO_i ∘ O_i) kept, dP = dO·Vᵀ, dS and
 * dQ = dscores·K.  Pass 2, tasks (key/value head, block of 96 keys): Sᵀ and
 * dPᵀ again over the queries that may see the block, P = exp(masked − L)
 * from the saved L, and dK, dV summed over the group's query heads.  With
 * FAST_ONE_PASS_G key/value heads or more there is no pass 2: a task is a
 * whole key/value head, and pass 1 adds dscoresᵀ·Q and Pᵀ·dO to its dK and
 * dV block by block (6 products a block, not 8).  The tiles' products run
 * on the micro-kernels of the forward's GEMM (kernel.c's mha_gemm_packed,
 * the widest the CPU has) over K, V, Q and dO packed once per head, one
 * thread inside a task; the projections, dconcat and the weights'
 * gradients on the GEMM itself.  The softmax, P = exp(masked − L) and dS run
 * on kernel_bwd.c's vector loops (the same width as the GEMM's) where no
 * softcap, mask term or ALiBi applies and every value is finite; anything
 * else one entry at a time.  No (n_q, n_kv) matrix: each thread holds
 * four (96, n) tiles, O(n·d) memory in all.  Each task owns what it writes
 * and sums in a fixed order, so the bits are the same for any thread
 * count.  Rope turned back is shared with the plain path, and the
 * whole-model stages (doutput, dconcat, dq_rot, dk_rot, dQ, dK, dV) can
 * still be handed over.  The rules (which keys are seen, the mask and
 * ALiBi terms, the sink) come from rules.h, as on the plain path.
 *
 * mha_backward_f32 is this file again, compiled with -DMHA_F32 (Makefile:
 * build/lib/backward_f32.o): real is float there, the products run on the
 * float GEMM and packed kernels, the elementwise steps on kernel_bwd.c's
 * float copies, every value and sum a float, in the same fixed order.
 * That copy takes the fast path only, hands nothing to an observer, and
 * defines mha_backward_f32 alone (this one mha_backward, its stage names
 * and mha_backward_memory).
 */
#include "mha.h"
#include "kernel.h"
#include "kernel_bwd.h"
#include "mla.h"
#include "plain.h"
#include "progress.h"
#include "rules.h"
#include "team.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the element type of every array and sum here (kernel_bwd.h) */
typedef bwd_real real;
#ifdef MHA_F32
#define IS_F32 1
#define DOT mha_dot_f32
typedef mha_grads_f32 grads_t;
typedef mha_inputs_f32 inputs_t;
typedef mha_weights_f32 weights_t;
#else
#define IS_F32 0
#define DOT mha_dot_f64
typedef mha_grads grads_t;
typedef mha_inputs inputs_t;
typedef mha_weights weights_t;
#endif

#ifndef MHA_F32
#define GRAD_NAME(id, name) [MHA_GRAD_##id] = name,
static const char *const grad_names[MHA_GRAD_COUNT] = { MHA_GRAD_LIST(GRAD_NAME) };

const char *mha_grad_stage_name(mha_grad_stage stage)
{
	if ((unsigned)stage >= MHA_GRAD_COUNT)
		return "unknown";
	return grad_names[stage];
}
#endif

/* the stages that exist per head: only the plain path hands them over */
static int grad_per_head(unsigned wanted)
{
	unsigned bits = 0;

	for (int s = MHA_GRAD_HEAD_P; s <= MHA_GRAD_HEAD_DK; s++)
		bits |= MHA_STAGE_BIT(s);
	return (wanted & bits) != 0;
}

/* The per-head (n_q, n_kv) stages, kept row by row when watched. */
enum { SQ_P, SQ_DP, SQ_DS, SQ_DSCALED, SQ_DSCORES, N_SQ };
static const mha_grad_stage sq_stage[N_SQ] = {
	[SQ_P] = MHA_GRAD_HEAD_P, [SQ_DP] = MHA_GRAD_HEAD_DP, [SQ_DS] = MHA_GRAD_HEAD_DS,
	[SQ_DSCALED] = MHA_GRAD_HEAD_DSCALED, [SQ_DSCORES] = MHA_GRAD_HEAD_DSCORES,
};

struct bw {
	const mha_dims *d;
	const mha_config *cfg;
	const mha_grad_observer *obs;
	size_t H, G, dk, dv;
	real scale;
	struct mha_rule rule;      /* this sequence's (rules.h) */
	struct mha_progress *progress; /* the call's (progress.h), or NULL */
	double seen;               /* the keys this sequence's queries see, in all */
	const real *Q, *K, *V;   /* what the heads read: (n_q, H·dk) (rotated with rope),
				      (n_kv, G·dk), (n_kv, G·dv) */
	const real *dcat;        /* (n_q, H·dv) the gradient of concat */
	real *concat;            /* (n_q, H·dv) the heads' outputs, recomputed */
	real *dQr, *dKr, *dV;    /* (n_q, H·dk), (n_kv, G·dk), (n_kv, G·dv): the gradients
				      of what the heads read */
	real *masked, *tanh_of, *p, *dscores; /* (n_kv) rows being worked on */
	real *dP;                /* (n_kv) */
	real *sq[N_SQ];          /* (n_q, n_kv) each, only for the watched stages */
	real *dQh, *dKh, *dVh;   /* (n_q, dk), (n_kv, dk), (n_kv, dv): one head's */
	real *Dv;                /* (n_q) one head's D */
	real *lse, *Dall;        /* fast path: (H, n_q) each row's log-sum-exp L and D */
	real *pk;                /* fast path: per key/value head Kᵀ, K, Vᵀ, V (pass 1), then per
				      head Qᵀ, Q, dOᵀ, dO (pass 2), packed (fast_pack_head) */
	size_t pk_bytes;           /* as mha_big_alloc was asked for pk */
	size_t nr;                 /* fast path: the packed strips' width */
	int one_pass;              /* fast path: dK and dV in pass 1 (fast_one_pass) */
	real *scratch;           /* (max(n_q, n_kv), max(dk, dv)) for head blocks */
	real *dsinks;            /* (H) the run's, summed over the sequences; or NULL */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row;
};

static int watches(const mha_grad_observer *obs, mha_grad_stage s)
{
	return obs && obs->fn && (obs->wanted & MHA_STAGE_BIT(s));
}

/* m (rows, cols) handed to obs; nonzero stops the run.  mha_backward_f32
 * has no observer (obs is NULL there) */
static int hand(const mha_grad_observer *obs, mha_grad_stage s, int head, const real *m,
		size_t rows, size_t cols)
{
#ifdef MHA_F32
	(void)obs, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 0;
#else
	return obs->fn(obs->ctx, s, head, m, rows, cols);
#endif
}

/* a stage's values (rows, cols) offered to obs's editor before the
 * backward goes on with them (row: the query row); nonzero stops the run */
static int edit(const mha_grad_observer *obs, mha_grad_stage s, int head, size_t row, real *m,
		size_t rows, size_t cols)
{
#ifdef MHA_F32
	(void)obs, (void)s, (void)head, (void)row, (void)m, (void)rows, (void)cols;
	return 0;
#else
	return obs && obs->edit ? obs->edit(obs->edit_ctx, s, head, row, m, rows, cols) : 0;
#endif
}

/* hand over a column block (rows, width) at column col0 of m (rows, ld) */
static int show_block(const struct bw *r, mha_grad_stage s, int head, const real *m,
		      size_t rows, size_t ld, size_t col0, size_t width)
{
	for (size_t i = 0; i < rows; i++)
		memcpy(r->scratch + i * width, m + i * ld + col0, width * sizeof(real));
	return hand(r->obs, s, head, r->scratch, rows, width);
}

static int finite_all(const real *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

static void keep(struct bw *r, int which, size_t i, const real *row)
{
	if (r->sq[which])
		memcpy(r->sq[which] + i * r->d->n_kv, row, r->d->n_kv * sizeof(real));
}

/*
 * Query row i of head h, forward: masked (n_kv) and, with a softcap,
 * tanh(scaled/c) of every key, then the softmax into p.  *psink the mass
 * the sink took (0 without one, or when every key is masked).  As mha.c's
 * run_head computes them, in the same order.
 */
static mha_status forward_row(struct bw *r, size_t h, size_t g, size_t i, real *psink)
{
	const mha_dims *d = r->d;
	const struct mha_rule *rule = &r->rule;
	const real *q = r->Q + i * r->H * r->dk + h * r->dk;
	const real c = r->cfg->softcap;
	real max = -INFINITY, sum = 0.0;

	for (size_t j = 0; j < d->n_kv; j++) {
		const real *k = r->K + j * r->G * r->dk + g * r->dk;
		real s = 0.0, x, m;

		for (size_t t = 0; t < r->dk; t++)
			s += q[t] * k[t];
		if (!isfinite(s)) {
			/* overflowing partial sums, or truly too large: rules.h decides */
			s = DOT(q, 1, k, 1, r->dk, 0.0);
			if (mha_rule_overflows(rule, h, i, j, s))
				return MHA_ERR_RANGE;
		}
		x = s * r->scale;
		if (!isfinite(x) && mha_rule_overflows(rule, h, i, j, x))
			return MHA_ERR_RANGE;
		if (c > 0) {
			r->tanh_of[j] = tanh(x / c);
			x = c * r->tanh_of[j];
		}
		m = mha_rule_mask(rule, h, i, j);
		x = mha_rule_masked(x, m);
		if (!isfinite(x) && mha_rule_overflows(rule, h, i, j, x))
			return MHA_ERR_RANGE;
		r->masked[j] = x;
		if (x > max)
			max = x;
	}
	*psink = 0.0;
	if (max == -INFINITY) {
		/* every key blocked: weights 0, output 0, nothing flows back */
		memset(r->p, 0, d->n_kv * sizeof(real));
		if (!r->blocked++) {
			r->first_blocked_head = (int)h;
			r->first_blocked_row = i;
		}
		return MHA_OK;
	}
	{
		const real sink = rule->sinks ? rule->sinks[h] : -INFINITY;

		if (sink > max)
			max = sink;
		/* subtract the row max: exp() of a large score would overflow */
		for (size_t j = 0; j < d->n_kv; j++) {
			r->p[j] = exp(r->masked[j] - max);
			sum += r->p[j];
		}
		if (rule->sinks)
			sum += exp(sink - max);
		for (size_t j = 0; j < d->n_kv; j++)
			r->p[j] /= sum;
		if (rule->sinks)
			*psink = exp(sink - max) / sum;
	}
	return MHA_OK;
}

/* One query head: the forward row by row, its gradients, and what it adds to dK and dV. */
static mha_status back_head(struct bw *r, size_t h)
{
	const mha_dims *d = r->d;
	const size_t g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldk = r->G * r->dk, ldv = r->G * r->dv, ldc = r->H * r->dv;
	const real c = r->cfg->softcap;
	const mha_grad_observer *obs = r->obs;
	const int head = (int)h;
	real dsink = 0.0;
	mha_status st;

	memset(r->dKh, 0, d->n_kv * r->dk * sizeof(real));
	memset(r->dVh, 0, d->n_kv * r->dv * sizeof(real));
	for (size_t i = 0; i < d->n_q; i++) {
		const real *q = r->Q + i * ldq + h * r->dk;
		const real *dO = r->dcat + i * ldc + h * r->dv;
		real *o = r->concat + i * ldc + h * r->dv;
		real *dq = r->dQh + i * r->dk;
		real psink, D = 0.0;

		st = forward_row(r, h, g, i, &psink);
		if (st != MHA_OK)
			return st;
		/* the head's output row: softmax·V, keys ascending */
		memset(o, 0, r->dv * sizeof(real));
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *v = r->V + j * ldv + g * r->dv;

			if (r->p[j] == 0.0)
				continue;
			for (size_t t = 0; t < r->dv; t++)
				o[t] += r->p[j] * v[t];
		}
		if (!finite_all(o, r->dv))
			return MHA_ERR_RANGE;
		/* D_i = rowsum(dO ∘ O) = Σ_j P_ij·dP_ij */
		for (size_t t = 0; t < r->dv; t++)
			D += dO[t] * o[t];
		/* an editor's what-ifs (mha.h): P as dV and dS use it, D, dP */
		if (edit(obs, MHA_GRAD_HEAD_P, head, i, r->p, 1, d->n_kv) ||
		    edit(obs, MHA_GRAD_HEAD_D, head, i, &D, 1, 1))
			return MHA_ERR_OBSERVER;
		r->Dv[i] = D;
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *v = r->V + j * ldv + g * r->dv;
			real dp = 0.0;

			for (size_t t = 0; t < r->dv; t++)
				dp += dO[t] * v[t];
			r->dP[j] = dp;
		}
		if (edit(obs, MHA_GRAD_HEAD_DP, head, i, r->dP, 1, d->n_kv))
			return MHA_ERR_OBSERVER;
		for (size_t j = 0; j < d->n_kv; j++) {
			const real dp = r->dP[j];
			real ds, dsc;

			/* a masked-out key gets nothing back, whatever its score (but a
			 * weight an editor gave it) */
			if (r->masked[j] == -INFINITY && r->p[j] == 0.0) {
				ds = dsc = r->dscores[j] = 0.0;
			} else {
				ds = r->p[j] * (dp - D);
				dsc = c > 0 ? ds * (1.0 - r->tanh_of[j] * r->tanh_of[j]) : ds;
				r->dscores[j] = dsc * r->scale;
			}
			if (r->sq[SQ_DS])
				r->sq[SQ_DS][i * d->n_kv + j] = ds;
			if (r->sq[SQ_DSCALED])
				r->sq[SQ_DSCALED][i * d->n_kv + j] = dsc;
		}
		if (edit(obs, MHA_GRAD_HEAD_DSCORES, head, i, r->dscores, 1, d->n_kv))
			return MHA_ERR_OBSERVER;
		keep(r, SQ_P, i, r->p);
		keep(r, SQ_DP, i, r->dP);
		keep(r, SQ_DSCORES, i, r->dscores);
		/* the sink: a logit whose value is 0, so its dP is 0 */
		dsink += -psink * D;
		/* dQ_h row i = Σ_j dscores_ij·K_j; dK_h, dV_h gather row i's part */
		memset(dq, 0, r->dk * sizeof(real));
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *k = r->K + j * ldk + g * r->dk;
			const real ds = r->dscores[j], pj = r->p[j];
			real *dk = r->dKh + j * r->dk, *dv = r->dVh + j * r->dv;

			if (ds != 0.0)
				for (size_t t = 0; t < r->dk; t++) {
					dq[t] += ds * k[t];
					dk[t] += ds * q[t];
				}
			if (pj != 0.0)
				for (size_t t = 0; t < r->dv; t++)
					dv[t] += pj * dO[t];
		}
	}
	if (r->dsinks)
		r->dsinks[h] += dsink;
	if (edit(obs, MHA_GRAD_HEAD_DV, head, 0, r->dVh, d->n_kv, r->dv) ||
	    edit(obs, MHA_GRAD_HEAD_DQ, head, 0, r->dQh, d->n_q, r->dk) ||
	    edit(obs, MHA_GRAD_HEAD_DK, head, 0, r->dKh, d->n_kv, r->dk))
		return MHA_ERR_OBSERVER;

	/* into the whole: dQ's block h; dK's and dV's block g, query heads ascending */
	for (size_t i = 0; i < d->n_q; i++)
		memcpy(r->dQr + i * ldq + h * r->dk, r->dQh + i * r->dk, r->dk * sizeof(real));
	for (size_t j = 0; j < d->n_kv; j++) {
		for (size_t t = 0; t < r->dk; t++)
			r->dKr[j * ldk + g * r->dk + t] += r->dKh[j * r->dk + t];
		for (size_t t = 0; t < r->dv; t++)
			r->dV[j * ldv + g * r->dv + t] += r->dVh[j * r->dv + t];
	}

	if (!obs || !obs->fn)
		return MHA_OK;
	if ((r->sq[SQ_P] && hand(obs, MHA_GRAD_HEAD_P, head, r->sq[SQ_P], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_O) &&
	     show_block(r, MHA_GRAD_HEAD_O, head, r->concat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DO) &&
	     show_block(r, MHA_GRAD_HEAD_DO, head, r->dcat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DV) &&
	     hand(obs, MHA_GRAD_HEAD_DV, head, r->dVh, d->n_kv, r->dv)) ||
	    (r->sq[SQ_DP] && hand(obs, MHA_GRAD_HEAD_DP, head, r->sq[SQ_DP], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_D) && hand(obs, MHA_GRAD_HEAD_D, head, r->Dv, d->n_q, 1)) ||
	    (r->sq[SQ_DS] && hand(obs, MHA_GRAD_HEAD_DS, head, r->sq[SQ_DS], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCALED] &&
	     hand(obs, MHA_GRAD_HEAD_DSCALED, head, r->sq[SQ_DSCALED], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCORES] &&
	     hand(obs, MHA_GRAD_HEAD_DSCORES, head, r->sq[SQ_DSCORES], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DQ) &&
	     hand(obs, MHA_GRAD_HEAD_DQ, head, r->dQh, d->n_q, r->dk)) ||
	    (watches(obs, MHA_GRAD_HEAD_DK) &&
	     hand(obs, MHA_GRAD_HEAD_DK, head, r->dKh, d->n_kv, r->dk)))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

/* ---- the fast path (FlashAttention-2's backward) ------------------------ */

/*
 * Query blocks and key blocks: the tasks the threads share.  Each task owns
 * what it writes (dQ's rows of one head, or dK's and dV's rows of one key
 * block of one key/value head), and sums in a fixed order (its products on
 * one thread), so the bits are the same for any thread count.
 */
#define FAST_QB 96
#define FAST_KB 96

/*
 * The masked value of query i (head h) and key j from its score s, as
 * forward_row goes on from it, with tanh(scaled/c) in *th under a
 * softcap: -inf for a key the query does not see.  j is within the row's
 * [keys_begin, keys_end).  A score that is not finite is recomputed (q, k
 * the rows).  MHA_ERR_RANGE as forward_row.
 */
static mha_status fast_masked(const struct bw *r, size_t h, size_t i, size_t j, real s,
			      const real *q, const real *k, real *out, real *th)
{
	const real c = r->cfg->softcap;
	real x, m;

	if (isfinite(s) && !(c > 0) && !r->rule.allow && !r->rule.bias && !r->rule.alibi) {
		/* the common case: within the row's keys the mask entry is 0 */
		x = s * r->scale;
		if (isfinite(x)) {
			*out = x;
			return MHA_OK;
		}
	}
	if (!isfinite(s)) {
		/* overflowing partial sums, or truly too large: rules.h decides */
		s = DOT(q, 1, k, 1, r->dk, 0.0);
		if (mha_rule_overflows(&r->rule, h, i, j, s))
			return MHA_ERR_RANGE;
	}
	x = s * r->scale;
	if (!isfinite(x) && mha_rule_overflows(&r->rule, h, i, j, x))
		return MHA_ERR_RANGE;
	if (c > 0) {
		*th = tanh(x / c);
		x = c * *th;
	}
	m = mha_rule_mask(&r->rule, h, i, j);
	x = mha_rule_masked(x, m);
	if (!isfinite(x) && mha_rule_overflows(&r->rule, h, i, j, x))
		return MHA_ERR_RANGE;
	*out = x;
	return MHA_OK;
}

/*
 * The tiles' products run on operands packed once per head (kernel.h's
 * mha_pack_b): for a key/value head Kᵀ (dk, n_kv), K (n_kv, dk), Vᵀ and V;
 * for a query head Qᵀ, Q, dOᵀ and dO over n_q.  A row range of a packed
 * operand is an offset, a column range whole strips of nr from a multiple
 * of nr: the tiles' first key (pass 1) or query (pass 2) is rounded down to
 * one, and the extra columns are keys or queries that weigh 0.  Offsets of
 * the four in one head's part of pk, and the part's size (elements).
 */
static size_t fast_pk_count(size_t k, size_t n, size_t nr)
{
	return mha_sat_mul(k, mha_sat_mul(mha_sat_add(n, nr - 1) / nr, nr));
}

static size_t fast_pack_head(size_t n, size_t dk, size_t dv, size_t nr, size_t off[4])
{
	off[0] = 0;
	off[1] = fast_pk_count(dk, n, nr);
	off[2] = mha_sat_add(off[1], fast_pk_count(n, dk, nr));
	off[3] = mha_sat_add(off[2], fast_pk_count(dv, n, nr));
	return mha_sat_add(off[3], fast_pk_count(n, dv, nr));
}

/*
 * One pass or two: with FAST_ONE_PASS_G key/value heads or more, a task is
 * a whole key/value head (its query heads' blocks in order), which then
 * owns its dK and dV and adds to them in pass 1: no pass 2, whose products
 * S and dP are pass 1's again (6 products a block, not 8).  Fewer heads
 * would leave threads idle; the choice is the shape's, never the threads'.
 */
#define FAST_ONE_PASS_G 4
static int fast_one_pass(const mha_dims *d)
{
	return mha_rule_kv_heads(d) >= FAST_ONE_PASS_G;
}

/* the bytes of pk (aligned_alloc's size, whole cache lines): pass 1's or
 * pass 2's, the larger (pass 1's with one pass); SIZE_MAX when too large */
static size_t fast_pack_bytes(const mha_dims *d, size_t nr)
{
	size_t off[4];
	const size_t a = mha_sat_mul(mha_rule_kv_heads(d),
				     fast_pack_head(d->n_kv, d->d_k, d->d_v, nr, off));
	const size_t b = fast_one_pass(d) ? 0
			 : mha_sat_mul(d->heads, fast_pack_head(d->n_q, d->d_k, d->d_v, nr, off));
	const size_t bytes = mha_sat_mul(a > b ? a : b, sizeof(real));

	return bytes > SIZE_MAX - 64 ? SIZE_MAX : (bytes + 63) / 64 * 64;
}

/* the bytes of a thread's qp (fast_buf), whole cache lines */
static size_t fast_qp_bytes(size_t wide, size_t nr)
{
	return (fast_pk_count(FAST_QB, wide, nr) * sizeof(real) + 63) / 64 * 64;
}

/* n rows of w elements in whole cache lines: the bytes of a part of the one-pass block */
static size_t fast_lines(size_t n, size_t w)
{
	const size_t bytes = mha_sat_mul(mha_sat_mul(n, w), sizeof(real));

	return bytes > SIZE_MAX - 63 ? SIZE_MAX : (bytes + 63) / 64 * 64;
}

/* a thread's block with one pass: qp and qo, then its key/value head's dK
 * and dV (n_kv rows of dk, of dv) */
static size_t fast_one_bytes(const mha_dims *d, size_t nr)
{
	const size_t wide = d->d_k > d->d_v ? d->d_k : d->d_v;

	return mha_sat_add(mha_sat_mul(2, fast_qp_bytes(wide, nr)),
			   mha_sat_add(fast_lines(d->n_kv, d->d_k), fast_lines(d->n_kv, d->d_v)));
}


#define BWD_KERNELS(sfx) { mha_bwd_softmax_##sfx, mha_bwd_dscores_##sfx, mha_bwd_keyrow_##sfx, \
			   mha_pack_b_##sfx, mha_gemm_packed_##sfx, mha_packed_nr_##sfx, \
			   mha_gemm_packed_tadd_##sfx }
/* the element type's name in the kernels' suffixes (f32_avx2, f64_base …), expanded first */
#ifdef MHA_F32
#define BWD_ELEM(isa) f32_##isa
#else
#define BWD_ELEM(isa) f64_##isa
#endif
#define BWD_PASTE(a, b) a##b
#define BWD_NAME(f, sfx) BWD_PASTE(f, sfx)
#define BWD_KERNELS_OF(sfx) BWD_KERNELS(sfx)

/* the elementwise kernels (kernel_bwd.c) of the vector width k's GEMM has */
static const struct mha_bwd_kernels *bwd_kernels(const struct mha_kernels *k)
{
	static const struct mha_bwd_kernels base = BWD_KERNELS_OF(BWD_ELEM(base));
#if defined(MHA_X86_KERNELS)
	static const struct mha_bwd_kernels avx2 = BWD_KERNELS_OF(BWD_ELEM(avx2));
	static const struct mha_bwd_kernels avx512 = BWD_KERNELS_OF(BWD_ELEM(avx512));

	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(avx512)))
		return &avx512;
	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(avx2)))
		return &avx2;
#endif
#if defined(MHA_ARM_KERNELS)
	static const struct mha_bwd_kernels neon = BWD_KERNELS_OF(BWD_ELEM(neon));

	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(neon)))
		return &neon;
#endif
	(void)k;
	return &base;
}

/* no softcap, mask term or ALiBi: the rows the elementwise kernels take */
static int fast_plain_rule(const struct bw *r)
{
	return !(r->cfg->softcap > 0) && !r->rule.allow && !r->rule.bias && !r->rule.alibi;
}

/*
 * A tile's row stride for rows of n: whole cache lines, an odd number of
 * them.  Rows n·8 bytes apart are 4 KiB apart or a multiple for n = 512,
 * 1024 …: every row then falls in one set of L1 (a 4 KiB way), and a
 * product walking 6 rows, or 96 (the transposed reads of tadd), misses on
 * each.  An odd count of lines puts 64 rows in 64 different sets.
 */
static size_t fast_tile_ld(size_t n)
{
	const size_t line = 64 / sizeof(real), lines = (n + line - 1) / line;

	return (lines | 1) * line;
}

/*
 * Pass 1 works a block's backward half a chunk of keys at a time, MHA_GEMM_KC
 * of them (the GEMM kernels' runs along k: dQ summed chunk by chunk is the
 * same sum as in one product): dP and dS of a chunk, (96, 256), stay in L2
 * for the three products that read them.
 */
#define FAST_CHUNK MHA_GEMM_KC

/*
 * What a thread holds.  Pass 1: S, then P in its place, and th, (96, n_kv)
 * each; dP, then dS, of one chunk of keys (96, FAST_CHUNK).  Pass 2: S
 * then P, th and dP (96, n_q), and part.
 */
struct fast_buf {
	real *s, *th, *p, *dp;
	real *part;            /* pass 2: (96, max(dk, dv)) a head's part of dK or dV */
	real *qp, *qo;         /* one pass: (96, max(dk, dv)) rounded up to strips, a query
				    block of Q and of dO packed; 64-byte aligned */
	real *dKg, *dVg;       /* one pass: the task's dK (n_kv, dk) and dV (n_kv, dv), rows
				    contiguous: the products add to them a block at a time
				    (rows G·dk apart, 4 KiB for 8 heads of 64, each row's
				    lines would fall in one set of the caches) */
	size_t bytes, one;     /* the tiles' block and qp's, as mha_big_alloc was asked */
};

/* the elements of a thread's tiles (fast_buf) for rows of n, pass 1 or 2 */
static size_t fast_tiles_count(size_t n, size_t wide, int pass)
{
	const size_t ld = fast_tile_ld(n);

	if (pass == 1)
		return mha_sat_add(mha_sat_mul(2 * FAST_QB, ld), FAST_QB * fast_tile_ld(FAST_CHUNK));
	return mha_sat_add(mha_sat_mul(3 * FAST_KB, ld), mha_sat_mul(FAST_KB, wide));
}

/*
 * Pass 1, query rows [i0, i1) of head h, keys [kb, ke) (the block's union
 * of the rows' ranges): S = Q·Kᵀ, masked row by row, the softmax with the
 * sink into P, O = P·V (concat), L_i and D_i = rowsum(dO_i ∘ O_i) kept,
 * dP = dO·Vᵀ, dscores, dQ = dscores·K.  1 out of memory, 2 overflow.
 */
static int fast_query_block(struct bw *r, const struct mha_kernels *k, struct fast_buf *f,
			    size_t h, size_t i0, size_t i1)
{
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv, g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldc = r->H * r->dv, ldk = r->G * r->dk, ldv = r->G * r->dv;
	const size_t ke = mha_rule_keys_end(&r->rule, i1 - 1), nr = r->nr;
	size_t kb = mha_rule_keys_begin(&r->rule, i0), off[4];
	const size_t nb = i1 - i0, per = fast_pack_head(n_kv, r->dk, r->dv, nr, off);
	const int capped = r->cfg->softcap > 0, vect = fast_plain_rule(r);
	const struct mha_bwd_kernels *bk = bwd_kernels(k);
	const real *pk = r->pk + g * per;
	size_t nk, ld;

	for (size_t i = i0; i < i1; i++) {
		memset(r->concat + i * ldc + h * r->dv, 0, r->dv * sizeof(real));
		memset(r->dQr + i * ldq + h * r->dk, 0, r->dk * sizeof(real));
		r->lse[h * n_q + i] = -INFINITY;
		r->Dall[h * n_q + i] = 0.0;
	}
	if (ke <= kb)
		return 0;
	kb = kb / nr * nr; /* whole strips of Kᵀ and Vᵀ */
	nk = ke - kb;
	ld = fast_tile_ld(nk);
	bk->gemm_packed(f->s, ld, r->Q + i0 * ldq + h * r->dk, ldq, pk + off[0] + kb / nr * r->dk * nr,
			r->dk * nr, nb, nk, r->dk, 0);
	for (size_t i = i0; i < i1; i++) {
		const size_t jb = mha_rule_keys_begin(&r->rule, i), je = mha_rule_keys_end(&r->rule, i);
		const real *q = r->Q + i * ldq + h * r->dk;
		real *s = f->s + (i - i0) * ld, *th = f->th + (i - i0) * ld, *p = f->p + (i - i0) * ld;
		real m = -INFINITY, l = 0.0;

		if (vect && jb < je &&
		    !bk->softmax(p + (jb - kb), s + (jb - kb), je - jb, r->scale,
				 r->rule.sinks ? r->rule.sinks + h : NULL, &r->lse[h * n_q + i])) {
			/* the common case, vectorised: keys outside the row's range weigh 0 */
			memset(p, 0, (jb - kb) * sizeof(real));
			memset(p + (je - kb), 0, (ke - je) * sizeof(real));
			continue;
		}
		for (size_t j = kb; j < ke; j++) {
			real x = -INFINITY, t = 0.0;

			if (j >= jb && j < je &&
			    fast_masked(r, h, i, j, s[j - kb], q, r->K + j * ldk + g * r->dk, &x, &t))
				return 2;
			s[j - kb] = x;
			th[j - kb] = t;
			if (x > m)
				m = x;
		}
		if (m == -INFINITY) {
			/* every key blocked: weights 0, output 0, nothing flows back */
			memset(p, 0, nk * sizeof(real));
			continue;
		}
		if (r->rule.sinks && r->rule.sinks[h] > m)
			m = r->rule.sinks[h];
		/* subtract the row max: exp() of a large score would overflow */
		for (size_t j = 0; j < nk; j++) {
			p[j] = exp(s[j] - m);
			l += p[j];
		}
		if (r->rule.sinks)
			l += exp(r->rule.sinks[h] - m);
		for (size_t j = 0; j < nk; j++)
			p[j] /= l;
		r->lse[h * n_q + i] = m + log(l);
	}
	/* O = P·V: a convex combination, finite unless a product's partial sums overflowed */
	bk->gemm_packed(r->concat + i0 * ldc + h * r->dv, ldc, f->p, ld, pk + off[3] + kb * nr,
			n_kv * nr, nb, r->dv, nk, 0);
	for (size_t i = i0; i < i1; i++) {
		real *o = r->concat + i * ldc + h * r->dv;
		const real *dO = r->dcat + i * ldc + h * r->dv;
		real D = 0.0;

		if (!finite_all(o, r->dv) &&
		    mha_finish_product(o, 1, r->dv, ldc, f->p + (i - i0) * ld, ld,
				       r->V + kb * ldv + g * r->dv, ldv, NULL, nk, sizeof(real)))
			return 2;
		for (size_t t = 0; t < r->dv; t++)
			D += dO[t] * o[t];
		r->Dall[h * n_q + i] = D;
	}
	if (r->one_pass) {
		/* the block's Q and dO, packed for dK += dscoresᵀ·Q and dV += Pᵀ·dO */
		bk->pack_b(f->qp, r->Q + i0 * ldq + h * r->dk, ldq, 1, nb, r->dk);
		bk->pack_b(f->qo, r->dcat + i0 * ldc + h * r->dv, ldc, 1, nb, r->dv);
	}
	/* a chunk of keys at a time: dP = dO·Vᵀ, then dS = P·(dP − D), tanh', the
	 * scale (dscores) in its place; dQ += dscores·K (the chunks are the
	 * product's runs: the same sums as in one); with one pass dK and dV of
	 * the chunk's keys, the task owning key/value head g and adding the
	 * blocks in a fixed order */
	for (size_t c = 0; c < nk; c += FAST_CHUNK) {
		const size_t cw = nk - c < FAST_CHUNK ? nk - c : FAST_CHUNK;
		const size_t lc = fast_tile_ld(FAST_CHUNK);

		bk->gemm_packed(f->dp, lc, r->dcat + i0 * ldc + h * r->dv, ldc,
				pk + off[2] + (kb + c) / nr * r->dv * nr, r->dv * nr, nb, cw, r->dv, 0);
		for (size_t i = 0; i < nb; i++) {
			const real D = r->Dall[h * n_q + i0 + i];
			real *dp = f->dp + i * lc;
			const real *p = f->p + i * ld + c, *th = f->th + i * ld + c;

			if (!capped) {
				bk->dscores(dp, p, cw, D, r->scale);
				continue;
			}
			for (size_t j = 0; j < cw; j++) {
				const real ds = p[j] == 0.0 ? 0.0 : p[j] * (dp[j] - D) * (1.0 - th[j] * th[j]);

				dp[j] = ds * r->scale;
			}
		}
		bk->gemm_packed(r->dQr + i0 * ldq + h * r->dk, ldq, f->dp, lc, pk + off[1] + (kb + c) * nr,
				n_kv * nr, nb, r->dk, cw, c > 0);
		if (r->one_pass) {
			bk->gemm_packed_tadd(f->dKg + (kb + c) * r->dk, r->dk, f->dp, lc, f->qp, nb * nr, cw,
					     r->dk, nb);
			bk->gemm_packed_tadd(f->dVg + (kb + c) * r->dv, r->dv, f->p + c, ld, f->qo, nb * nr,
					     cw, r->dv, nb);
		}
	}
	return 0;
}

/* the queries [*qa, *qb) whose key ranges meet [j0, j1) (both ends never decrease) */
static void fast_query_range(const struct bw *r, size_t j0, size_t j1, size_t *qa, size_t *qb)
{
	size_t a = 0, b = r->d->n_q;

	while (a < b && mha_rule_keys_end(&r->rule, a) <= j0)
		a++;
	while (b > a && mha_rule_keys_begin(&r->rule, b - 1) >= j1)
		b--;
	*qa = a;
	*qb = b;
}

/*
 * Pass 2, one entry (query i, key j) of head h from its score s, one at a
 * time: p = exp(masked − L), dp = dS·scale (dp holds dP on entry)
 */
static void fast_key_entry(const struct bw *r, size_t h, size_t g, size_t i, size_t j, real s,
			   real *p, real *dp)
{
	const size_t n_q = r->d->n_q, ldq = r->H * r->dk, ldk = r->G * r->dk;
	const size_t jb = mha_rule_keys_begin(&r->rule, i), je = mha_rule_keys_end(&r->rule, i);
	const real L = r->lse[h * n_q + i], D = r->Dall[h * n_q + i];
	real x = -INFINITY, t = 0.0, e, ds;

	/* the forward saw every value finite: no error here */
	if (L == -INFINITY || j < jb || j >= je ||
	    fast_masked(r, h, i, j, s, r->Q + i * ldq + h * r->dk, r->K + j * ldk + g * r->dk, &x,
			&t) || x == -INFINITY) {
		*p = *dp = 0.0;
		return;
	}
	e = exp(x - L);
	ds = e * (*dp - D);
	if (r->cfg->softcap > 0)
		ds *= 1.0 - t * t;
	*p = e;
	*dp = ds * r->scale;
}

/*
 * Pass 2, keys [j0, j1) of key/value head g: for each of its query heads h
 * ascending, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ over the queries that may see the
 * block, P and dS from the saved L and D, then dK += dSᵀ·Q and dV += Pᵀ·dO.
 * 1 out of memory.
 */
static int fast_key_block(struct bw *r, const struct mha_kernels *k, struct fast_buf *f,
			  size_t g, size_t j0, size_t j1)
{
	const size_t n_q = r->d->n_q, per = r->H / r->G, nb = j1 - j0;
	const size_t ldk = r->G * r->dk, ldv = r->G * r->dv;
	const int vect = fast_plain_rule(r);
	const struct mha_bwd_kernels *bk = bwd_kernels(k);
	size_t qa, qb, nq, off[4];
	const size_t nr = r->nr, per_h = fast_pack_head(n_q, r->dk, r->dv, nr, off);

	for (size_t j = j0; j < j1; j++) {
		memset(r->dKr + j * ldk + g * r->dk, 0, r->dk * sizeof(real));
		memset(r->dV + j * ldv + g * r->dv, 0, r->dv * sizeof(real));
	}
	fast_query_range(r, j0, j1, &qa, &qb);
	if (qb <= qa)
		return 0;
	qa = qa / nr * nr; /* whole strips of Qᵀ and dOᵀ */
	nq = qb - qa;
	for (size_t h = g * per; h < (g + 1) * per; h++) {
		const real *pk = r->pk + h * per_h;

		bk->gemm_packed(f->s, nq, r->K + j0 * ldk + g * r->dk, ldk,
				pk + off[0] + qa / nr * r->dk * nr, r->dk * nr, nb, nq, r->dk, 0);
		bk->gemm_packed(f->dp, nq, r->V + j0 * ldv + g * r->dv, ldv,
				pk + off[2] + qa / nr * r->dv * nr, r->dv * nr, nb, nq, r->dv, 0);
		for (size_t j = j0, ia = qa, ib = qa; j < j1; j++) {
			real *p = f->p + (j - j0) * nq, *dp = f->dp + (j - j0) * nq;

			if (vect) {
				/* the queries that see key j: [ia, ib), moving on with j */
				while (ia < qb && mha_rule_keys_end(&r->rule, ia) <= j)
					ia++;
				if (ib < ia)
					ib = ia;
				while (ib < qb && mha_rule_keys_begin(&r->rule, ib) <= j)
					ib++;
				if (ia == ib || !bk->keyrow(p + (ia - qa), dp + (ia - qa), f->s + (j - j0) * nq +
							   (ia - qa), r->lse + h * n_q + ia,
							   r->Dall + h * n_q + ia, ib - ia, r->scale)) {
					memset(p, 0, (ia - qa) * sizeof(real));
					memset(dp, 0, (ia - qa) * sizeof(real));
					memset(p + (ib - qa), 0, (qb - ib) * sizeof(real));
					memset(dp + (ib - qa), 0, (qb - ib) * sizeof(real));
					continue;
				}
			}
			for (size_t i = qa; i < qb; i++)
				fast_key_entry(r, h, g, i, j, f->s[(j - j0) * nq + (i - qa)], p + (i - qa),
					       dp + (i - qa));
		}
		/* dK += dSᵀ·Q, dV += Pᵀ·dO: each head's part, added in head order */
		bk->gemm_packed(f->part, r->dk, f->dp, nq, pk + off[1] + qa * nr, n_q * nr, nb, r->dk, nq,
				0);
		for (size_t j = 0; j < nb; j++)
			for (size_t t = 0; t < r->dk; t++)
				r->dKr[(j0 + j) * ldk + g * r->dk + t] += f->part[j * r->dk + t];
		bk->gemm_packed(f->part, r->dv, f->p, nq, pk + off[3] + qa * nr, n_q * nr, nb, r->dv, nq,
				0);
		for (size_t j = 0; j < nb; j++)
			for (size_t t = 0; t < r->dv; t++)
				r->dV[(j0 + j) * ldv + g * r->dv + t] += f->part[j * r->dv + t];
	}
	return 0;
}

/* a (rows, cols) transposed into t (cols, rows), in 32 x 32 tiles so
 * that neither side is walked a whole column at a time through the cache */
/*
 * One of the 4·heads packings of a pass (task t: head t / 4, operand
 * t % 4): x (n, heads·dk) and y (n, heads·dv) are K and V (pass 1) or Q and
 * dconcat (pass 2); Kᵀ and Vᵀ are read in place, never transposed first.
 */
static void fast_pack(const struct bw *r, const struct mha_bwd_kernels *bk, long t, size_t heads,
		      size_t n, const real *x, const real *y)
{
	const size_t h = (size_t)t / 4, dk = r->dk, dv = r->dv, nr = r->nr;
	size_t off[4];
	real *pk = r->pk + h * fast_pack_head(n, dk, dv, nr, off) + off[t % 4];

	switch (t % 4) {
	case 0:
		bk->pack_b(pk, x + h * dk, 1, heads * dk, dk, n);
		break;
	case 1:
		bk->pack_b(pk, x + h * dk, heads * dk, 1, n, dk);
		break;
	case 2:
		bk->pack_b(pk, y + h * dv, 1, heads * dv, dv, n);
		break;
	default:
		bk->pack_b(pk, y + h * dv, heads * dv, 1, n, dv);
	}
}

/* a thread's tiles for rows of n, pass 1 or 2 (fast_buf), or NULL; P
 * takes the place of S, the softmax working each row in place */
static real *fast_buf_alloc(struct fast_buf *f, size_t n, size_t wide, int pass)
{
	const size_t ld = fast_tile_ld(n), count = fast_tiles_count(n, wide, pass);
	const size_t rows = pass == 1 ? FAST_QB : FAST_KB;
	real *b;

	/* rows whole cache lines from a 64-byte boundary (mapped from
	 * MHA_BIG_MIN up, whole 2 MiB pieces in huge pages: kernel.h) */
	f->bytes = count > SIZE_MAX / sizeof(real) ? SIZE_MAX : count * sizeof(real);
	b = f->bytes == SIZE_MAX ? NULL : mha_big_alloc(f->bytes);
	if (b) {
		f->s = f->p = b;
		f->th = b + rows * ld;
		f->dp = b + 2 * rows * ld;
		f->part = pass == 2 ? b + 3 * rows * ld : NULL;
	}
	return b;
}

/* one pass of fast_heads on the team: its tasks, counted out, and the worst error (1 memory) */
struct fast_team {
	struct bw *r;
	const struct mha_kernels *k;
	struct team_counter packs, tasks; /* the next pack, the next task */
	atomic_int err;
};

/* pass 1, tasks (head, query block), or one key/value head each in one pass */
static void fast_pass1(void *arg, int tid, int nthreads)
{
	struct fast_team *z = arg;
	struct bw *r = z->r;
	const struct mha_kernels *k = z->k;
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t qblocks = (n_q + FAST_QB - 1) / FAST_QB;
	const size_t wide = r->dk > r->dv ? r->dk : r->dv;
	const long t1 = r->one_pass ? (long)r->G : (long)(r->H * qblocks);
	const struct mha_bwd_kernels *bk = bwd_kernels(k);
	const size_t qp = fast_qp_bytes(wide, r->nr);

	{
		struct fast_buf f = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 };
		real *b = fast_buf_alloc(&f, n_kv, 0, 1);
		int e = b ? 0 : 1;

		if (r->one_pass) {
			f.one = fast_one_bytes(r->d, r->nr);
			f.qp = f.one == SIZE_MAX ? NULL : mha_big_alloc(f.one);
			e = e || !f.qp;
			if (f.qp) {
				f.qo = f.qp + qp / sizeof(real);
				f.dKg = f.qo + qp / sizeof(real);
				f.dVg = f.dKg + fast_lines(n_kv, r->dk) / sizeof(real);
			}
		}
		/* each key/value head's K and V packed, both ways, once */
		for (long t = (long)team_next(&z->packs); t < (long)(4 * r->G); t = (long)team_next(&z->packs))
			fast_pack(r, bk, t, r->G, n_kv, r->K, r->V);
		mha_team_barrier(nthreads);
		for (long t = (long)team_next(&z->tasks); t < t1; t = (long)team_next(&z->tasks)) {
			if (r->one_pass) {
				/* one key/value head: its query heads' blocks in order, dK and dV summed here */
				const size_t g = (size_t)t, per = r->H / r->G;

				if (e)
					continue;
				memset(f.dKg, 0, n_kv * r->dk * sizeof(real));
				memset(f.dVg, 0, n_kv * r->dv * sizeof(real));
				for (size_t i0 = 0; i0 < n_q && !e; i0 += FAST_QB)
					for (size_t h = g * per; h < (g + 1) * per && !e; h++)
						e = fast_query_block(r, k, &f, h, i0,
								     i0 + FAST_QB < n_q ? i0 + FAST_QB : n_q);
				for (size_t j = 0; j < n_kv; j++) {
					memcpy(r->dKr + j * r->G * r->dk + g * r->dk, f.dKg + j * r->dk,
					       r->dk * sizeof(real));
					memcpy(r->dV + j * r->G * r->dv + g * r->dv, f.dVg + j * r->dv,
					       r->dv * sizeof(real));
				}
				/* both passes of its query heads (backward_work's three shares) */
				mha_progress_add(r->progress, (uint64_t)(3 * r->seen * (double)per *
									 (double)(r->dk + r->dv)));
				if (tid == 0)
					mha_progress_tell(r->progress);
				continue;
			}
			const size_t h = (size_t)t / qblocks, i0 = (size_t)t % qblocks * FAST_QB;

			if (!e)
				e = fast_query_block(r, k, &f, h, i0, i0 + FAST_QB < n_q ? i0 + FAST_QB : n_q);
			/* pass 1 is two of a head's three shares (backward_work), a block its part */
			mha_progress_add(r->progress, (uint64_t)(2 * r->seen * (double)(r->dk + r->dv) /
								 (double)qblocks));
			if (tid == 0)
				mha_progress_tell(r->progress);
		}
		if (e)
			team_max_int(&z->err, e);
		mha_big_free(f.qp, f.one);
		mha_big_free(b, f.bytes);
	}
}

/* pass 2, tasks (key/value head, key block): dK and dV */
static void fast_pass2(void *arg, int tid, int nthreads)
{
	struct fast_team *z = arg;
	struct bw *r = z->r;
	const struct mha_kernels *k = z->k;
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t kblocks = (n_kv + FAST_KB - 1) / FAST_KB;
	const size_t wide = r->dk > r->dv ? r->dk : r->dv;
	const long t2 = (long)(r->G * kblocks);
	const struct mha_bwd_kernels *bk = bwd_kernels(k);

	{
		struct fast_buf f = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 };
		real *b = fast_buf_alloc(&f, n_q, wide, 2);
		int e = b ? 0 : 1;

		/* each head's Q and dconcat packed, both ways, once (K's and V's are done with) */
		for (long t = (long)team_next(&z->packs); t < (long)(4 * r->H); t = (long)team_next(&z->packs))
			fast_pack(r, bk, t, r->H, n_q, r->Q, r->dcat);
		mha_team_barrier(nthreads);
		for (long t = (long)team_next(&z->tasks); t < t2; t = (long)team_next(&z->tasks)) {
			const size_t g = (size_t)t / kblocks, j0 = (size_t)t % kblocks * FAST_KB;

			if (!e)
				e = fast_key_block(r, k, &f, g, j0, j0 + FAST_KB < n_kv ? j0 + FAST_KB : n_kv);
			/* pass 2 the third share of its key/value head's query heads */
			mha_progress_add(r->progress, (uint64_t)(r->seen * (double)(r->dk + r->dv) *
								 (double)(r->H / r->G) /
								 (double)kblocks));
			if (tid == 0)
				mha_progress_tell(r->progress);
		}
		if (e)
			team_max_int(&z->err, e);
		mha_big_free(b, f.bytes);
	}
}

/*
 * Every head of one sequence on the fast path: O(n·d) memory, no (n_q, n_kv)
 * matrix.  Pass 1, tasks (head, query block): the forward, L, D and dQ.
 * Pass 2, tasks (key/value head, key block): dK and dV.  Then the sinks'
 * gradients and the blocked rows, in order.
 */
static mha_status fast_heads(struct bw *r, const struct mha_kernels *k, int threads)
{
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t qblocks = (n_q + FAST_QB - 1) / FAST_QB, kblocks = (n_kv + FAST_KB - 1) / FAST_KB;
	const long t1 = r->one_pass ? (long)r->G : (long)(r->H * qblocks), t2 = (long)(r->G * kblocks);
	struct fast_team z1 = { r, k, { 0 }, { 0 }, 0 }, z2 = { r, k, { 0 }, { 0 }, 0 };
	int err;

	mha_team_run(t1 > 1 ? threads : 1, fast_pass1, &z1);
	err = atomic_load(&z1.err);
	if (err)
		return err == 1 ? MHA_ERR_NOMEM : MHA_ERR_RANGE;
	if (r->one_pass)
		goto sinks;
	mha_team_run(t2 > 1 ? threads : 1, fast_pass2, &z2);
	if (atomic_load(&z2.err))
		return MHA_ERR_NOMEM;
sinks:
	for (size_t h = 0; h < r->H; h++) {
		real dsink = 0.0;

		for (size_t i = 0; i < n_q; i++) {
			const real L = r->lse[h * n_q + i];

			if (L == -INFINITY) {
				if (!r->blocked++) {
					r->first_blocked_head = (int)h;
					r->first_blocked_row = i;
				}
				continue;
			}
			/* the sink: a logit whose value is 0, so its dP is 0 */
			if (r->rule.sinks)
				dsink += -exp(r->rule.sinks[h] - L) * r->Dall[h * n_q + i];
		}
		if (r->dsinks)
			r->dsinks[h] += dsink;
	}
	return MHA_OK;
}

static real *alloc_n(size_t rows, size_t cols)
{
	size_t n;

	if (cols && rows > SIZE_MAX / cols)
		return NULL;
	n = rows * cols;
	if (n > SIZE_MAX / sizeof(real))
		return NULL;
	return malloc(n ? n * sizeof(real) : 1);
}

/*
 * Through one projection P = x·W + b (x (rows, d_in), W (d_in, cols)), given
 * dP (rows, cols): dx = dP·Wᵀ (dP without W), and dW += xᵀ·dP, db += the
 * column sums of dP, when asked (and W is there, for dW).
 */
static void back_projection(real *dx, real *dW, real *db, const real *x, const real *W,
			    const real *dP, size_t rows, size_t d_in, size_t cols)
{
	if (dx && W) {
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const real *w = W + k * cols, *g = dP + i * cols;
				real s = 0.0;

				for (size_t c = 0; c < cols; c++)
					s += g[c] * w[c];
				dx[i * d_in + k] = s;
			}
	} else if (dx) {
		memcpy(dx, dP, rows * cols * sizeof(real));
	}
	if (dW && W)
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const real a = x[i * d_in + k];
				real *w = dW + k * cols;

				for (size_t c = 0; c < cols; c++)
					w[c] += a * dP[i * cols + c];
			}
	if (db)
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				db[c] += dP[i * cols + c];
}

/* ---- the fast path's products (the forward's GEMM kernels) -------------- */

/* the product C (m, n) = A (m, k)·B (k, n) + bias as the kernels run it;
 * ta: A given as Aᵀ (k, m), tb: B given as Bᵀ (n, k), read in place */
static struct mha_gemm gemm_of(real *C, const real *A, const real *B, const real *bias,
			       size_t m, size_t n, size_t k, int ta, int tb, int threads)
{
	struct mha_gemm g = { .m = m, .n = n, .k = k, .A = A, .B = B, .bias = bias,
			      .lda = ta ? m : k, .ldb = tb ? k : n, .ldc = n, .C = C,
			      .threads = threads, .ta = ta, .tb = tb };

	return g;
}

/* C = A·B + bias on the kernels (ta, tb as gemm_of); an entry not finite
 * recomputed (rules.h) */
static mha_status fast_gemm(const struct mha_kernels *k, real *C, const real *A, int ta,
			    const real *B, int tb, const real *bias, size_t m, size_t n, size_t kk,
			    int threads)
{
	struct mha_gemm g = gemm_of(C, A, B, bias, m, n, kk, ta, tb, threads);

	if (!m || !n)
		return MHA_OK;
	k->gemm(&g);
	if (g.failed)
		return MHA_ERR_NOMEM;
	if (g.nonfinite &&
	    mha_finish_strided(C, m, n, n, A, ta ? 1 : kk, ta ? m : 1, B, tb ? kk : 1, tb ? 1 : n,
			       bias, kk, sizeof(real)))
		return MHA_ERR_RANGE;
	return MHA_OK;
}

/* x·W + b (W given) on the kernels into *owned; without W, x + b as the
 * plain path adds them (x itself without b) */
static mha_status fast_projection(const struct mha_kernels *k, int threads, const real **res,
				  real **owned, const real *x, size_t rows, size_t d_in,
				  const real *W, const real *b, size_t cols)
{
	*owned = NULL;
	*res = x;
	if (!W && !b)
		return MHA_OK;
	*owned = alloc_n(rows, cols);
	*res = *owned;
	if (!*owned)
		return MHA_ERR_NOMEM;
	if (!W) {
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				(*owned)[i * cols + c] = x[i * cols + c] + b[c];
		return MHA_OK;
	}
	return fast_gemm(k, *owned, x, 0, W, 0, b, rows, cols, d_in, threads);
}

/*
 * back_projection on the kernels: dx = dP·Wᵀ, dW += xᵀ·dP (Wᵀ and xᵀ
 * read in place by the GEMM's packing), db as there.  The first sequence
 * (first: dW all zeros) writes its product into dW, which 0 + part would
 * leave the same; later ones add a block of their own.  A gradient not
 * finite is found by mha_backward's last checks.
 */
static mha_status fast_back_projection(const struct mha_kernels *k, int threads, real *dx,
				       real *dW, real *db, const real *x, const real *W,
				       const real *dP, size_t rows, size_t d_in, size_t cols,
				       int first)
{
	mha_status st = MHA_OK;

	if (dx && W)
		st = fast_gemm(k, dx, dP, 0, W, 1, NULL, rows, d_in, cols, threads);
	else if (dx)
		memcpy(dx, dP, rows * cols * sizeof(real));
	if (st != MHA_ERR_NOMEM && dW && W && first) {
		st = fast_gemm(k, dW, x, 1, dP, 0, NULL, d_in, cols, rows, threads);
	} else if (st != MHA_ERR_NOMEM && dW && W) {
		real *part = alloc_n(d_in, cols);

		st = part ? fast_gemm(k, part, x, 1, dP, 0, NULL, d_in, cols, rows, threads)
			  : MHA_ERR_NOMEM;
		if (st != MHA_ERR_NOMEM)
			for (size_t i = 0; i < d_in * cols; i++)
				dW[i] += part[i];
		free(part);
	}
	if (st == MHA_OK && db)
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				db[c] += dP[i * cols + c];
	return st == MHA_ERR_RANGE ? MHA_OK : st;
}

/* What every sequence shares. */
struct bw_run {
	const grads_t *g;
	const mha_dims *d;
	const inputs_t *in;
	const weights_t *w;
	const mha_config *cfg;
	const mha_grad_observer *obs;
	struct mha_rule all;
	size_t out_cols;
	int fast, threads;         /* the fast path, on this many threads at most */
	const struct mha_kernels *k; /* the fast path's (of real) */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row, first_blocked_seq;
	double *dwq, *dwk;         /* the norm weights' gradients, summed in double */
	struct mha_progress progress; /* told to obs->progress (progress.h) */
};

/* The backward's multiply-adds, counted as three forwards': the forward
 * again, then each product's two gradients (as back_sequence adds them). */
static double backward_work(const mha_dims *d, const mha_config *cfg, const weights_t *w)
{
	const void *const W[4] = { w->W_Q, w->W_K, w->W_V, w->W_O };

	return 3 * mha_progress_forward_work(d, cfg, W);
}

static mha_status back_sequence(struct bw_run *z, const real *dout, size_t b)
{
	const mha_dims *d = z->d;
	const mha_config *cfg = z->cfg;
	const weights_t *w = z->w;
	const grads_t *g = z->g;
	const mha_grad_observer *obs = z->obs;
	const real *xq = z->in->xq + b * d->n_q * d->d_q_in;
	const real *xk = z->in->xk + b * d->n_kv * d->d_k_in;
	const real *xv = z->in->xv + b * d->n_kv * d->d_v_in;
	const int rope = cfg->rope.mode != MHA_ROPE_NONE, norm = cfg->norm.kind != MHA_NORM_NONE;
	const ptrdiff_t q_pos0 = mha_rule_offset_seq(d, cfg, b);
	struct bw r;
	real *owned_q = NULL, *owned_k = NULL, *owned_v = NULL, *q_rot = NULL, *k_rot = NULL;
	real *dcat_own = NULL, *dQ = NULL, *dK = NULL, *q_norm = NULL, *k_norm = NULL;
	real *dQp = NULL, *dKp = NULL;
	const real *dQn, *dKn, *dQf, *dKf;
	const real *Q = NULL, *K = NULL, *V = NULL;
	size_t hk, gk, gv, hv;
	double products; /* the sequence's projections' multiply-adds, W_O's too */
	mha_status st = MHA_OK;

	memset(&r, 0, sizeof(r));
	r.d = d;
	r.cfg = cfg;
	r.obs = obs;
	r.H = d->heads;
	r.G = mha_rule_kv_heads(d);
	r.dk = d->d_k;
	r.dv = d->d_v;
	r.scale = mha_scale_of(d, cfg);
	r.rule = mha_rule_seq(&z->all, b);
	r.progress = &z->progress;
	r.seen = r.progress->fn ? mha_progress_seen(&r.rule, d->n_q) : 0;
	r.first_blocked_head = -1;
	r.dsinks = cfg->sinks ? g->dsinks : NULL;
	hk = r.H * r.dk;
	gk = r.G * r.dk;
	gv = r.G * r.dv;
	hv = r.H * r.dv;
	/* as mha_progress_forward_work counts them: once forward, twice back */
	products = (w->W_Q ? (double)d->n_q * (double)d->d_q_in * (double)hk : 0) +
		   (w->W_K ? (double)d->n_kv * (double)d->d_k_in * (double)gk : 0) +
		   (w->W_V ? (double)d->n_kv * (double)d->d_v_in * (double)gv : 0) +
		   (w->W_O ? (double)d->n_q * (double)hv * (double)d->d_out : 0);

	if (obs && obs->fn && obs->sequence && obs->sequence(obs->ctx, b))
		return MHA_ERR_OBSERVER;
	mha_progress_phase(r.progress, "forward");
	if (z->fast) {
		st = fast_projection(z->k, z->threads, &Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q,
				     w->b_Q, hk);
		if (st == MHA_OK)
			st = fast_projection(z->k, z->threads, &K, &owned_k, xk, d->n_kv, d->d_k_in,
					     w->W_K, w->b_K, gk);
		if (st == MHA_OK)
			st = fast_projection(z->k, z->threads, &V, &owned_v, xv, d->n_kv, d->d_v_in,
					     w->W_V, w->b_V, gv);
	}
#ifndef MHA_F32
	/* (mha_backward_f32 has the fast path only) */
	else {
		st = mha_plain_projection(&Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q, w->b_Q, hk);
		if (st == MHA_OK)
			st = mha_plain_projection(&K, &owned_k, xk, d->n_kv, d->d_k_in, w->W_K, w->b_K,
						  gk);
		if (st == MHA_OK)
			st = mha_plain_projection(&V, &owned_v, xv, d->n_kv, d->d_v_in, w->W_V, w->b_V,
						  gv);
	}
#endif
	if (st != MHA_OK)
		goto done;
	if (!finite_all(Q, d->n_q * hk) || !finite_all(K, d->n_kv * gk) || !finite_all(V, d->n_kv * gv)) {
		st = MHA_ERR_RANGE;
		goto done;
	}
	r.Q = Q;
	r.K = K;
	r.V = V;
	if (norm) {
		/* the heads read Q and K normalised (and then turned) */
		q_norm = alloc_n(d->n_q, hk);
		k_norm = alloc_n(d->n_kv, gk);
		st = q_norm && k_norm ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_norm_turn(q_norm, Q, sizeof(real), d->n_q, r.H, r.dk, 0, &cfg->norm, 0);
		if (st == MHA_OK)
			st = mha_norm_turn(k_norm, K, sizeof(real), d->n_kv, r.G, r.dk, 0, &cfg->norm, 1);
		if (st != MHA_OK)
			goto done;
		r.Q = q_norm;
		r.K = k_norm;
	}
	if (rope) {
		/* the heads read Q and K turned by position */
		q_rot = alloc_n(d->n_q, hk);
		k_rot = alloc_n(d->n_kv, gk);
		st = q_rot && k_rot ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_rope_turn(q_rot, r.Q, sizeof(real), d->n_q, r.H, r.dk, &cfg->rope,
					   cfg->rope.q_pos, q_pos0);
		if (st == MHA_OK)
			st = mha_rope_turn(k_rot, r.K, sizeof(real), d->n_kv, r.G, r.dk, &cfg->rope,
					   cfg->rope.k_pos, 0);
		if (st != MHA_OK)
			goto done;
		r.Q = q_rot;
		r.K = k_rot;
	}

	/* dconcat = dO·W_Oᵀ; without W_O the concat is the output */
	if (w->W_O) {
		dcat_own = alloc_n(d->n_q, hv);
		if (!dcat_own) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		if (z->fast) {
			st = fast_gemm(z->k, dcat_own, dout, 0, w->W_O, 1, NULL, d->n_q, hv,
				       z->out_cols, z->threads);
			/* not finite: the last checks say so */
			if (st == MHA_ERR_NOMEM)
				goto done;
			st = MHA_OK;
		}
		for (size_t i = 0; i < d->n_q && !z->fast; i++)
			for (size_t c = 0; c < hv; c++) {
				const real *wc = w->W_O + c * z->out_cols, *gi = dout + i * z->out_cols;
				real s = 0.0;

				for (size_t k = 0; k < z->out_cols; k++)
					s += gi[k] * wc[k];
				dcat_own[i * hv + c] = s;
			}
		r.dcat = dcat_own;
	} else {
		r.dcat = dout;
	}
	if ((watches(obs, MHA_GRAD_DOUTPUT) &&
	     hand(obs, MHA_GRAD_DOUTPUT, -1, dout, d->n_q, z->out_cols)) ||
	    (watches(obs, MHA_GRAD_DCONCAT) &&
	     hand(obs, MHA_GRAD_DCONCAT, -1, r.dcat, d->n_q, hv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	r.concat = alloc_n(d->n_q, hv);
	r.dQr = calloc(d->n_q * hk, sizeof(real));
	r.dKr = calloc(d->n_kv * gk, sizeof(real));
	r.dV = calloc(d->n_kv * gv, sizeof(real));
	if (z->fast) {
		/* O(n·d): each row's L and D; K, V, then Q, dconcat packed per head */
		const size_t pk = fast_pack_bytes(d, bwd_kernels(z->k)->packed_nr());

		r.nr = bwd_kernels(z->k)->packed_nr();
		r.one_pass = fast_one_pass(d);
		r.lse = alloc_n(r.H, d->n_q);
		r.Dall = alloc_n(r.H, d->n_q);
		/* kept for the next call when large (pages.c): 32 MiB at n 2048,
		 * d_model 512, which malloc would map and fault in afresh */
		r.pk = pk == SIZE_MAX ? NULL : mha_big_alloc(pk);
		r.pk_bytes = pk;
		st = r.concat && r.dQr && r.dKr && r.dV && r.lse && r.Dall && r.pk ? MHA_OK
										   : MHA_ERR_NOMEM;
		if (st == MHA_OK) {
			mha_progress_phase(r.progress, "backward");
			st = fast_heads(&r, z->k, z->threads);
		}
		if (st != MHA_OK)
			goto done;
		goto heads_done;
	}
	r.masked = alloc_n(d->n_kv, 1);
	r.tanh_of = alloc_n(d->n_kv, 1);
	r.p = alloc_n(d->n_kv, 1);
	r.dP = alloc_n(d->n_kv, 1);
	r.dscores = alloc_n(d->n_kv, 1);
	r.dQh = alloc_n(d->n_q, r.dk);
	r.dKh = alloc_n(d->n_kv, r.dk);
	r.dVh = alloc_n(d->n_kv, r.dv);
	r.Dv = alloc_n(d->n_q, 1);
	r.scratch = alloc_n(d->n_q > d->n_kv ? d->n_q : d->n_kv, r.dk > r.dv ? r.dk : r.dv);
	st = r.concat && r.dQr && r.dKr && r.dV && r.masked && r.tanh_of && r.p && r.dP &&
	     r.dscores && r.dQh && r.dKh && r.dVh && r.Dv && r.scratch ? MHA_OK : MHA_ERR_NOMEM;
	for (int s = 0; s < N_SQ && st == MHA_OK; s++) {
		if (s == SQ_DSCALED && !(cfg->softcap > 0))
			continue;
		if (watches(obs, sq_stage[s]) && !(r.sq[s] = alloc_n(d->n_q, d->n_kv)))
			st = MHA_ERR_NOMEM;
	}
	mha_progress_phase(r.progress, "backward");
	for (size_t h = 0; h < r.H && st == MHA_OK; h++) {
		st = back_head(&r, h);
		/* the head's attention forward and back: three times its keys */
		mha_progress_add(r.progress, (uint64_t)(3 * r.seen * (double)(r.dk + r.dv)));
		mha_progress_tell(r.progress);
	}
	if (st != MHA_OK)
		goto done;
heads_done:
	mha_progress_phase(r.progress, "gradients");

	/* back through the rotation: the same angles, turned the other way */
	if (rope) {
		dQ = alloc_n(d->n_q, hk);
		dK = alloc_n(d->n_kv, gk);
		if (!dQ || !dK) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		mha_rope_turn_back(dQ, r.dQr, sizeof(real), d->n_q, r.H, r.dk, &cfg->rope,
				   cfg->rope.q_pos, q_pos0);
		mha_rope_turn_back(dK, r.dKr, sizeof(real), d->n_kv, r.G, r.dk, &cfg->rope,
				   cfg->rope.k_pos, 0);
	}
	/* back through the norm: Q and K as projected, the weights' sums in double */
	dQn = dQf = rope ? dQ : r.dQr;
	dKn = dKf = rope ? dK : r.dKr;
	if (norm) {
		dQp = alloc_n(d->n_q, hk);
		dKp = alloc_n(d->n_kv, gk);
		st = dQp && dKp ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_norm_back(dQp, dQn, Q, sizeof(real), d->n_q, r.H, r.dk, &cfg->norm, 0,
					   z->dwq);
		if (st == MHA_OK)
			st = mha_norm_back(dKp, dKn, K, sizeof(real), d->n_kv, r.G, r.dk, &cfg->norm, 1,
					   z->dwk);
		if (st != MHA_OK)
			goto done;
		dQf = dQp;
		dKf = dKp;
	}
	if ((rope && watches(obs, MHA_GRAD_DQ_ROT) &&
	     hand(obs, MHA_GRAD_DQ_ROT, -1, r.dQr, d->n_q, hk)) ||
	    (rope && watches(obs, MHA_GRAD_DK_ROT) &&
	     hand(obs, MHA_GRAD_DK_ROT, -1, r.dKr, d->n_kv, gk)) ||
	    (norm && watches(obs, MHA_GRAD_DQ_NORM) &&
	     hand(obs, MHA_GRAD_DQ_NORM, -1, dQn, d->n_q, hk)) ||
	    (norm && watches(obs, MHA_GRAD_DK_NORM) &&
	     hand(obs, MHA_GRAD_DK_NORM, -1, dKn, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DQ) && hand(obs, MHA_GRAD_DQ, -1, dQf, d->n_q, hk)) ||
	    (watches(obs, MHA_GRAD_DK) && hand(obs, MHA_GRAD_DK, -1, dKf, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DV) && hand(obs, MHA_GRAD_DV, -1, r.dV, d->n_kv, gv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	/* through the projections; the weights' gradients sum over the sequences */
	if (z->fast) {
		st = fast_back_projection(z->k, z->threads,
					  g->dxq ? g->dxq + b * d->n_q * d->d_q_in : NULL, g->dW_Q,
					  g->db_Q, xq, w->W_Q, dQf, d->n_q, d->d_q_in, hk, b == 0);
		if (st == MHA_OK)
			st = fast_back_projection(z->k, z->threads,
						  g->dxk ? g->dxk + b * d->n_kv * d->d_k_in : NULL,
						  g->dW_K, g->db_K, xk, w->W_K, dKf, d->n_kv,
						  d->d_k_in, gk, b == 0);
		if (st == MHA_OK)
			st = fast_back_projection(z->k, z->threads,
						  g->dxv ? g->dxv + b * d->n_kv * d->d_v_in : NULL,
						  g->dW_V, g->db_V, xv, w->W_V, r.dV, d->n_kv, d->d_v_in, gv,
						  b == 0);
		if (st == MHA_OK && w->W_O)
			st = fast_back_projection(z->k, z->threads, NULL, g->dW_O, g->db_O, r.concat,
						  w->W_O, dout, d->n_q, hv, z->out_cols, b == 0);
		goto done;
	}
	back_projection(g->dxq ? g->dxq + b * d->n_q * d->d_q_in : NULL, g->dW_Q, g->db_Q, xq,
			w->W_Q, dQf, d->n_q, d->d_q_in, hk);
	back_projection(g->dxk ? g->dxk + b * d->n_kv * d->d_k_in : NULL, g->dW_K, g->db_K, xk,
			w->W_K, dKf, d->n_kv, d->d_k_in, gk);
	back_projection(g->dxv ? g->dxv + b * d->n_kv * d->d_v_in : NULL, g->dW_V, g->db_V, xv,
			w->W_V, r.dV, d->n_kv, d->d_v_in, gv);
	if (w->W_O)
		back_projection(NULL, g->dW_O, g->db_O, r.concat, w->W_O, dout, d->n_q, hv,
				z->out_cols);

done:
	if (st == MHA_OK) {
		mha_progress_add(r.progress, (uint64_t)(3 * products));
		mha_progress_tell(r.progress);
	}
	if (st == MHA_OK && r.blocked && !z->blocked) {
		z->first_blocked_head = r.first_blocked_head;
		z->first_blocked_row = r.first_blocked_row;
		z->first_blocked_seq = b;
	}
	z->blocked += r.blocked;
	for (int s = 0; s < N_SQ; s++)
		free(r.sq[s]);
	free(r.concat);
	free(r.dQr);
	free(r.dKr);
	free(r.dV);
	free(r.masked);
	free(r.tanh_of);
	free(r.p);
	free(r.dP);
	free(r.dscores);
	free(r.dQh);
	free(r.dKh);
	free(r.dVh);
	free(r.Dv);
	free(r.lse);
	free(r.Dall);
	mha_big_free(r.pk, r.pk_bytes);
	free(r.scratch);
	free(dcat_own);
	free(dQ);
	free(dK);
	free(owned_q);
	free(owned_k);
	free(owned_v);
	free(q_rot);
	free(k_rot);
	free(q_norm);
	free(k_norm);
	free(dQp);
	free(dKp);
	return st;
}

/* n doubles at a, when a is given, set to 0 */
static void zero(real *a, size_t n)
{
	if (a)
		memset(a, 0, n * sizeof(real));
}

/* every entry of a (n, when a is given) finite */
static int finite_or_absent(const real *a, size_t n)
{
	return !a || finite_all(a, n);
}

/* mha_backward and mha_backward_f32: the checks, the sums set to zero,
 * the sequences, the last checks */
static mha_status run_backward(const grads_t *g, const real *dout, const mha_dims *d,
			       const inputs_t *in, const weights_t *w, const mha_config *cfg,
			       const mha_grad_observer *obs, mha_report *rep)
{
	static const weights_t no_weights = MHA_INIT(weights_t);
	static const mha_config defaults = MHA_INIT(mha_config);
	struct bw_run z;
	real *ones = NULL;
	size_t B, G, hk, gk, gv, hv, nq_w = 0, nk_w = 0;
	mha_status st = MHA_OK;

	if (!d || !in || !g)
		return MHA_ERR_NULL;
	if (!MHA_SIZED(g) || !MHA_SIZED(d) || !MHA_SIZED(in) || !MHA_SIZED(w) || !MHA_SIZED(cfg) ||
	    !MHA_SIZED(obs) || !MHA_SIZED(rep))
		return MHA_ERR_VERSION;
	if (!w)
		w = &no_weights;
	if (!cfg)
		cfg = &defaults;
	if (cfg->mla.on) {
		const struct mla_io io = MHA_MLA_IO(sizeof(real), in, w);
		const struct mla_grads mg = { .dxq = g->dxq, .dxk = g->dxk, .dW_QA = g->dW_QA,
					      .dW_Q = g->dW_Q, .dW_KVA = g->dW_KVA,
					      .dW_KVB = g->dW_KVB, .dW_O = g->dW_O, .db_O = g->db_O,
					      .dsinks = g->dsinks, .dq_a_norm = g->dq_a_norm,
					      .dkv_a_norm = g->dkv_a_norm };

		return mha_mla_backward(&mg, dout, &io, d, cfg, obs, rep);
	}
	{
		const void *const x[3] = { in->xq, in->xk, in->xv };
		const void *const W[4] = { w->W_Q, w->W_K, w->W_V, w->W_O };

		st = mha_plain_validate(d, cfg, g, x, W, rep);
		if (st != MHA_OK)
			return st;
	}
	B = mha_rule_batch(d);
	G = mha_rule_kv_heads(d);
	hk = d->heads * d->d_k;
	gk = G * d->d_k;
	gv = G * d->d_v;
	hv = d->heads * d->d_v;
	memset(&z, 0, sizeof(z));
	z.g = g;
	z.d = d;
	z.in = in;
	z.w = w;
	z.cfg = cfg;
	z.obs = obs;
	z.all = mha_rule_of(d, cfg);
	z.out_cols = mha_output_cols(d, w->W_O != NULL);
	z.first_blocked_head = -1;

	/* the sums over the sequences start from zero */
	zero(w->W_Q ? g->dW_Q : NULL, d->d_q_in * hk);
	zero(w->W_K ? g->dW_K : NULL, d->d_k_in * gk);
	zero(w->W_V ? g->dW_V : NULL, d->d_v_in * gv);
	zero(g->dW_O, w->W_O ? hv * d->d_out : 0);
	zero(g->db_Q, hk);
	zero(g->db_K, gk);
	zero(g->db_V, gv);
	zero(g->db_O, w->W_O ? d->d_out : 0);
	zero(g->dsinks, cfg->sinks ? d->heads : 0);
	/* the norm weights' gradients: summed in double over the sequences */
	if (cfg->norm.kind != MHA_NORM_NONE) {
		const size_t per = cfg->norm.over_all || cfg->norm.per_head;

		nq_w = per ? hk : d->d_k;
		nk_w = per ? gk : d->d_k;
		if (cfg->norm.q_weight && g->dq_norm)
			z.dwq = calloc(nq_w, sizeof(double));
		if (cfg->norm.k_weight && g->dk_norm)
			z.dwk = calloc(nk_w, sizeof(double));
		if ((cfg->norm.q_weight && g->dq_norm && !z.dwq) ||
		    (cfg->norm.k_weight && g->dk_norm && !z.dwk)) {
			free(z.dwq);
			free(z.dwk);
			return MHA_ERR_NOMEM;
		}
	}

	if (!dout) {
		/* the gradient of sum(output): ones, one sequence's worth serves all */
		ones = malloc(d->n_q * z.out_cols * sizeof(real));
		if (!ones)
			st = MHA_ERR_NOMEM;
		for (size_t i = 0; i < d->n_q * z.out_cols; i++)
			ones[i] = 1.0;
	} else if (!finite_all(dout, B * d->n_q * z.out_cols)) {
		st = MHA_ERR_RANGE;
	}

	/* the fast path (fast_heads) in place of back_head's loop when no
	 * per-head stage is watched, as mha_forward picks its own */
	z.fast = !cfg->exact && !(obs && obs->fn && grad_per_head(obs->wanted)) && !(obs && obs->edit);
	mha_progress_start(&z.progress, obs ? obs->progress : NULL, obs ? obs->progress_ctx : NULL,
			   obs && obs->progress ? backward_work(d, cfg, w) : 0);
	z.threads = mha_threads(cfg);
	z.k = mha_pick_kernels(IS_F32);

	for (size_t b = 0; b < B && st == MHA_OK; b++)
		st = back_sequence(&z, dout ? dout + b * d->n_q * z.out_cols : ones, b);
	free(ones);
	for (size_t i = 0; z.dwq && i < nq_w && st == MHA_OK; i++)
		g->dq_norm[i] = (real)z.dwq[i];
	for (size_t i = 0; z.dwk && i < nk_w && st == MHA_OK; i++)
		g->dk_norm[i] = (real)z.dwk[i];
	free(z.dwq);
	free(z.dwk);
	if (st != MHA_OK)
		return st;
	if (!finite_or_absent(g->dxq, B * d->n_q * d->d_q_in) ||
	    !finite_or_absent(g->dxk, B * d->n_kv * d->d_k_in) ||
	    !finite_or_absent(g->dxv, B * d->n_kv * d->d_v_in) ||
	    !finite_or_absent(w->W_Q ? g->dW_Q : NULL, d->d_q_in * hk) ||
	    !finite_or_absent(w->W_K ? g->dW_K : NULL, d->d_k_in * gk) ||
	    !finite_or_absent(w->W_V ? g->dW_V : NULL, d->d_v_in * gv) ||
	    !finite_or_absent(w->W_O ? g->dW_O : NULL, hv * d->d_out) ||
	    !finite_or_absent(g->db_Q, hk) || !finite_or_absent(g->db_K, gk) ||
	    !finite_or_absent(g->db_V, gv) || !finite_or_absent(w->W_O ? g->db_O : NULL, d->d_out) ||
	    !finite_or_absent(cfg->sinks ? g->dsinks : NULL, d->heads) ||
	    !finite_or_absent(cfg->norm.q_weight ? g->dq_norm : NULL, nq_w) ||
	    !finite_or_absent(cfg->norm.k_weight ? g->dk_norm : NULL, nk_w))
		return MHA_ERR_RANGE;
	if (rep) {
		rep->blocked_rows = z.blocked;
		rep->first_blocked_head = z.first_blocked_head;
		rep->first_blocked_row = z.first_blocked_row;
		rep->first_blocked_sequence = z.first_blocked_seq;
		rep->scale = mha_scale_of(d, cfg);
		rep->fast_path = z.fast;
	}
	mha_progress_end(&z.progress);
	return MHA_OK;
}

#ifdef MHA_F32
mha_status mha_backward_f32(const mha_grads_f32 *g, const float *dout, const mha_dims *d,
			    const mha_inputs_f32 *in, const mha_weights_f32 *w,
			    const mha_config *cfg, mha_report *rep)
{
	static const mha_config defaults = MHA_INIT(mha_config);
	mha_config fast;

	/* copied whole: refused first if it is not this library's size */
	if (cfg && !MHA_SIZED(cfg))
		return MHA_ERR_VERSION;
	fast = cfg ? *cfg : defaults;
	/* the fast path whatever cfg->exact says, as mha_forward_f32 */
	fast.exact = 0;
	return run_backward(g, dout, d, in, w, &fast, NULL, rep);
}
#else
mha_status mha_backward(const mha_grads *g, const double *dout, const mha_dims *d,
			const mha_inputs *in, const mha_weights *w, const mha_config *cfg,
			const mha_grad_observer *obs, mha_report *rep)
{
	return run_backward(g, dout, d, in, w, cfg, obs, rep);
}

/* a block of rows·cols doubles as the allocator sees it, saturating */
static size_t dbl_block(size_t rows, size_t cols)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), sizeof(real)), MHA_ALLOC_SLACK);
}

size_t mha_backward_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted)
{
	static const mha_config defaults = MHA_INIT(mha_config);
	size_t G, hk, gk, gv, hv, big, wide, t = 0;
	int squares = 0;

	if (!d || mha_check(d, cfg) != MHA_OK)
		return SIZE_MAX;
	if (cfg && cfg->mla.on)
		return mha_mla_backward_memory(d, cfg, wanted);
	/* one sequence at a time, every weight taken as given (Q, K, V and
	 * dconcat then are the run's own); the ones of a NULL dout not counted */
	if (!cfg)
		cfg = &defaults;
	G = mha_rule_kv_heads(d);
	hk = d->heads * d->d_k;
	gk = G * d->d_k;
	gv = G * d->d_v;
	hv = d->heads * d->d_v;
	big = d->n_q > d->n_kv ? d->n_q : d->n_kv;
	wide = d->d_k > d->d_v ? d->d_k : d->d_v;
	/* Q, K, V, dconcat, concat, dQ, dK, dV */
	t = mha_sat_add(t, dbl_block(d->n_q, hk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gv));
	t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hv)));
	t = mha_sat_add(t, dbl_block(d->n_q, hk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gv));
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		/* q_rot, k_rot, and dQ, dK turned back */
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hk)));
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_kv, gk)));
	}
	if (cfg->norm.kind != MHA_NORM_NONE) {
		/* q_norm, k_norm, dQ and dK through the norm, the weights' sums */
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hk)));
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_kv, gk)));
		t = mha_sat_add(t, mha_sat_add(mha_sat_mul(hk, sizeof(double)), MHA_ALLOC_SLACK));
		t = mha_sat_add(t, mha_sat_add(mha_sat_mul(gk, sizeof(double)), MHA_ALLOC_SLACK));
	}
	if (!cfg->exact && !grad_per_head(wanted)) {
		/* the fast path: each row's L and D, nothing per key; then the most
		 * one product takes at once (its transposed factor, its block, the
		 * kernel's panels), every weight taken as given */
		const struct mha_kernels *k = mha_pick_kernels(0);
		const int th = mha_threads(cfg);
		const size_t oc = mha_output_cols(d, 1);
		const size_t proj[4][3] = { { d->n_q, d->d_q_in, hk }, { d->n_kv, d->d_k_in, gk },
					    { d->n_kv, d->d_v_in, gv }, { d->n_q, hv, oc } };
		size_t most = 0, one, heads;
		struct mha_gemm gm;

		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->heads, d->n_q)));
		/* K and V, then Q and dconcat, packed per head (the tiles' products
		 * allocate nothing); then each thread's tiles, pass 1's or pass 2's */
		t = mha_sat_add(t, mha_sat_add(fast_pack_bytes(d, bwd_kernels(k)->packed_nr()),
					       MHA_ALLOC_SLACK));
		{
			const size_t qb = (d->n_q + FAST_QB - 1) / FAST_QB, kb = (d->n_kv + FAST_KB - 1) / FAST_KB;
			const size_t part = d->d_k > d->d_v ? d->d_k : d->d_v;
			const size_t team1 = th > 1 && d->heads * qb > 1 ? (size_t)th : 1;
			const size_t team2 = th > 1 && G * kb > 1 ? (size_t)th : 1;
			size_t one1, one2;

			one1 = dbl_block(1, fast_tiles_count(d->n_kv, 0, 1));
			if (fast_one_pass(d))
				one1 = mha_sat_add(one1, mha_sat_add(fast_one_bytes(d,
							bwd_kernels(k)->packed_nr()), MHA_ALLOC_SLACK));
			one2 = dbl_block(1, fast_tiles_count(d->n_q, part, 2));
			one1 = mha_sat_mul(team1, one1);
			/* no pass 2 with one pass */
			one2 = fast_one_pass(d) ? 0 : mha_sat_mul(team2, one2);
			/* the heads' tiles are freed before the products below run */
			heads = one1 > one2 ? one1 : one2;
		}
		for (int i = 0; i < 4; i++) {
			const size_t rows = proj[i][0], d_in = proj[i][1], cols = proj[i][2];

			if (i < 3) {
				/* the forward's x·W, and dx = dP·Wᵀ */
				gm = gemm_of(NULL, NULL, NULL, NULL, rows, cols, d_in, 0, 0, th);
				most = most > (one = k->gemm_bytes(&gm)) ? most : one;
				gm = gemm_of(NULL, NULL, NULL, NULL, rows, d_in, cols, 0, 1, th);
				most = most > (one = k->gemm_bytes(&gm)) ? most : one;
			}
			/* dW = xᵀ·dP, after the first sequence into a part of its own */
			gm = gemm_of(NULL, NULL, NULL, NULL, d_in, cols, rows, 1, 0, th);
			one = mha_sat_add(mha_rule_batch(d) > 1 ? dbl_block(d_in, cols) : 0,
					  k->gemm_bytes(&gm));
			most = most > one ? most : one;
		}
		/* dconcat = dO·W_Oᵀ */
		gm = gemm_of(NULL, NULL, NULL, NULL, d->n_q, hv, oc, 0, 1, th);
		most = most > (one = k->gemm_bytes(&gm)) ? most : one;
		return mha_sat_add(t, most > heads ? most : heads);
	}
	/* the rows, one head's blocks, D and the scratch */
	t = mha_sat_add(t, mha_sat_mul(5, dbl_block(d->n_kv, 1)));
	t = mha_sat_add(t, dbl_block(d->n_q, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_v));
	t = mha_sat_add(t, dbl_block(d->n_q, 1));
	t = mha_sat_add(t, dbl_block(big, wide));
	for (int s = 0; s < N_SQ; s++)
		if ((wanted & MHA_STAGE_BIT(sq_stage[s])) && (s != SQ_DSCALED || cfg->softcap > 0))
			squares++;
	return mha_sat_add(t, mha_sat_mul((size_t)squares, dbl_block(d->n_q, d->n_kv)));
}
#endif

/*
 * backward.h: what backward.c (the driver and the plain path) and
 * backward_fast.c (the fast path) share inside the library: the element
 * type, the state of a sequence's backward (struct bw) and the fast path's
 * entry points.  Each of the two is compiled twice, the second time with
 * -DMHA_F32 (mha_backward_f32; Makefile's F32_AGAIN): real is float there,
 * and BW() names the fast path's functions once per element type.
 */
#ifndef MHA_BACKWARD_H
#define MHA_BACKWARD_H

#include "mha.h"
#include "kernels/kernel.h"
#include "kernels/kernel_bwd.h"
#include "base/rules.h"

#include <math.h>
#include <stddef.h>

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

/* a function of the fast path, by element type: mha_bw64_… and mha_bw32_… */
#ifdef MHA_F32
#define BW(name) mha_bw32_##name
#else
#define BW(name) mha_bw64_##name
#endif

/* The per-head (n_q, n_kv) stages, kept row by row when watched. */
enum { SQ_P, SQ_DP, SQ_DS, SQ_DSCALED, SQ_DSCORES, N_SQ };

/* the stages that exist per head: only the plain path hands them over */
static inline int mha_grad_per_head(mha_stages wanted)
{
	mha_stages bits = 0;

	for (int s = MHA_GRAD_HEAD_P; s <= MHA_GRAD_HEAD_DK; s++)
		bits |= MHA_STAGE_SET(s);
	return (wanted & bits) != 0;
}

/* the stage each kept (n_q, n_kv) matrix is handed over as */
static inline mha_grad_stage mha_sq_stage(int sq)
{
	static const mha_grad_stage stage[N_SQ] = {
		[SQ_P] = MHA_GRAD_HEAD_P, [SQ_DP] = MHA_GRAD_HEAD_DP, [SQ_DS] = MHA_GRAD_HEAD_DS,
		[SQ_DSCALED] = MHA_GRAD_HEAD_DSCALED, [SQ_DSCORES] = MHA_GRAD_HEAD_DSCORES,
	};

	return stage[sq];
}

/* C (m, n) = A·B + bias as a product of the kernels (mha_gemm, kernel.h):
 * ta, tb: A and B stored transposed */
static inline struct mha_gemm mha_bw_gemm_of(real *C, const real *A, const real *B,
					     const real *bias, size_t m, size_t n, size_t k,
					     int ta, int tb, int threads)
{
	struct mha_gemm g = { .m = m, .n = n, .k = k, .A = A, .B = B, .bias = bias,
			      .lda = ta ? m : k, .ldb = tb ? k : n, .ldc = n, .C = C,
			      .threads = threads, .ta = ta, .tb = tb };

	return g;
}

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

/* every value finite (the checks both paths make of the inputs they read) */
static inline int finite_all(const real *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

/* a stage obs watches */
static inline int watches(const mha_grad_observer *obs, mha_grad_stage s)
{
	return obs && obs->fn && (obs->stages & MHA_STAGE_SET(s));
}

/* m (rows, cols) handed to obs; nonzero stops the run.  mha_backward_f32
 * has no observer (obs is NULL there) */
static inline int hand(const mha_grad_observer *obs, mha_grad_stage s, int head, const real *m,
		size_t rows, size_t cols)
{
#ifdef MHA_F32
	(void)obs, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 0;
#else
	return obs->fn(obs->ctx, s, head, m, rows, cols);
#endif
}

/* ---- the plain path (backward_plain.c) ---- */

/* one query head of the sequence r holds: its rows' forward, their
 * gradients, its dQ rows and what it adds to dK and dV; the per-head
 * stages handed to r's observer */
mha_status BW(plain_head)(struct bw *r, size_t h);

/* ---- the fast path (backward_fast.c) ---- */

/*
 * Its query blocks and key blocks: the tasks the threads share.  Each task owns
 * what it writes (dQ's rows of one head, or dK's and dV's rows of one key
 * block of one key/value head), and sums in a fixed order (its products on
 * one thread), so the bits are the same for any thread count.
 */
#define FAST_QB 96
#define FAST_KB 96


/* the elementwise kernels beside k (the same width), for this element type */
const struct mha_bwd_kernels *BW(kernels)(const struct mha_kernels *k);
/* 1: dK and dV in pass 1, no pass 2 (enough key/value heads) */
int BW(one_pass)(const mha_dims *d);
/* the bytes of the packed operands (pk), of one pass's per-task blocks
 * (one pass), and the elements of a thread's tiles (rows of n, wide) */
size_t BW(pack_bytes)(const mha_dims *d, size_t nr);
size_t BW(one_bytes)(const mha_dims *d, size_t nr);
size_t BW(tiles_count)(size_t n, size_t wide, int pass);
/* every head of one sequence: dQr, dKr and dV (r) from dcat */
mha_status BW(fast_heads)(struct bw *r, const struct mha_kernels *k, int threads);

#endif

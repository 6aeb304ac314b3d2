/*
 * kernel.c: the fast path's matrix product and fused attention, written
 * once and compiled for each element type and vector width:
 *
 *   -DREAL=double|float -DVB=64|32|16 -DSFX=f64_avx512 …
 *
 * Both kernels work on packed panels with a register-blocked micro-kernel
 * (MR rows by NR = 2 vectors), the way BLAS libraries do.  Each output
 * element is always summed in the same order by one thread, so the result
 * is the same bits whatever the number of threads.  The fused attention
 * keeps, for each query row, a running maximum and sum over blocks of keys
 * (online softmax), so that memory stays O((n_q + n_kv)·d).
 */
#include "isa.h"
#include "kernel.h"
#include "progress.h"
#include "team.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef MHA_F32
#define REAL float
#define REAL_IS_FLOAT 1
#define REAL_MAX FLT_MAX
#define DOT mha_dot_f32
#else
#define REAL double
#define REAL_IS_FLOAT 0
#define REAL_MAX DBL_MAX
#define DOT mha_dot_f64
#endif

typedef REAL vec __attribute__((vector_size(VB), aligned(VB)));
#define VL ((size_t)(VB / sizeof(REAL))) /* elements per vector */
/* micro-tile rows: 6 (12 accumulators of x86's 16 or 32 vector registers);
 * arm64's NEON build takes 8 (-DMR=8: 16 accumulators of its 32) */
#ifndef MR
#define MR 6
#endif
/* a loop over a tile's MR rows unrolled whole (#pragma takes no macro) */
#define PRAGMA_(x) _Pragma(#x)
#define PRAGMA(x) PRAGMA_(x)
#define UNROLL_MR PRAGMA(GCC unroll MR)
#define NR (2 * VL)                      /* micro-tile columns */
#define IS_F32 (sizeof(REAL) == 4)

/* lanes of comparisons: all ones or all zeros */
#if REAL_IS_FLOAT
typedef int32_t ivec __attribute__((vector_size(VB)));
#else
typedef int64_t ivec __attribute__((vector_size(VB)));
#endif

static inline vec splat(REAL x)
{
	return (vec){ 0 } + x;
}

/* m ? a : b, lane by lane (m all ones or all zeros, as comparisons give) */
static inline vec pick(ivec m, vec a, vec b)
{
	return (vec)((m & (ivec)a) | (~m & (ivec)b));
}

/* GEMM blocking: a (KC, NC) panel of B, an (MC, KC) block of A */
#define KC MHA_GEMM_KC
#define MC (MR * 16)
#define NC 4096
/* attention blocking: BQ queries against BK keys at a time */
#ifndef BQ
#define BQ (MR * 16)
#endif
#ifndef BK
#define BK 256
#endif

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static size_t round_up(size_t a, size_t b)
{
	return (a + b - 1) / b * b;
}

/*
 * What alloc_aligned(count) asks the allocator for: count elements and a
 * vector's worth past them, in whole cache lines; SIZE_MAX when too large.
 * The kernels' *_bytes functions count with it, so the estimate is the
 * allocation.
 */
static size_t aligned_bytes(size_t count)
{
	if (count > (SIZE_MAX - 128) / sizeof(REAL))
		return SIZE_MAX;
	return round_up(count * sizeof(REAL) + 64, 64);
}

static void *alloc_aligned(size_t count)
{
	const size_t bytes = aligned_bytes(count);

	return bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
}

/* alloc_aligned for the large blocks (a product's panel of B, the packs of
 * K and V): from MHA_BIG_MIN mapped, whole 2 MiB pieces in huge pages
 * (pages.c); free_big(p, count) frees */
static void *alloc_big(size_t count)
{
	const size_t bytes = aligned_bytes(count);

	return bytes == SIZE_MAX ? NULL : mha_big_alloc(bytes);
}

static void free_big(void *p, size_t count)
{
	mha_big_free(p, aligned_bytes(count));
}

/* aligned_bytes with the allocator's slack, as mha_memory counts a block */
static size_t counted_bytes(size_t count)
{
	return mha_sat_add(aligned_bytes(count), MHA_ALLOC_SLACK);
}

/* min(threads, tasks), at least 1: a thread with nothing to do still allocates its scratch */
static int threads_for(int threads, size_t tasks)
{
	if (threads < 1 || tasks < 1)
		return 1;
	return (size_t)threads < tasks ? threads : (int)tasks;
}

/*
 * The micro-kernel: c (mr, nr) (+)= a · b, where a's element (i, p) is at
 * a[p·ps + i·is] (packed: ps = MR, is = 1; plain rows: ps = 1, is = lda)
 * and b is NR columns packed row by row (b[p·NR + j]), both kc long.  The
 * MR·2 accumulators stay in registers; inlined, the strides are constants.
 * Without add, the sums are stored times mul (QKᵀ's scale, rounded once
 * as a separate product would be; 1 elsewhere, which changes nothing).
 * With rmax (QKᵀ's scores), row i's stored values also join rmax[i]'s
 * lanes by max, and rbad[i] += value·0 (0 if finite, NaN if not): the
 * softmax then needs no pass of its own for a row's max.
 */
static inline __attribute__((always_inline)) void
micro_strided(size_t kc, const REAL *restrict a, size_t ps, size_t is, const REAL *restrict b,
	      REAL *restrict c, size_t ldc, size_t mr, size_t nr, int add, REAL mul,
	      vec *restrict rmax, vec *restrict rbad)
{
	vec acc[MR][2];

	for (int i = 0; i < MR; i++)
		acc[i][0] = acc[i][1] = (vec){ 0 };
	for (size_t p = 0; p < kc; p++) {
		const vec b0 = *(const vec *)(b + p * NR), b1 = *(const vec *)(b + p * NR + VL);
		const REAL *ap = a + p * ps;

UNROLL_MR
		for (int i = 0; i < MR; i++) {
			acc[i][0] += ap[(size_t)i * is] * b0;
			acc[i][1] += ap[(size_t)i * is] * b1;
		}
	}
	if (mr == MR && nr == NR) {
		for (int i = 0; i < MR; i++) {
			REAL *ci = c + (size_t)i * ldc;
			vec c0, c1;

			if (add) {
				memcpy(&c0, ci, sizeof(vec));
				memcpy(&c1, ci + VL, sizeof(vec));
				c0 += acc[i][0];
				c1 += acc[i][1];
			} else {
				c0 = acc[i][0] * mul;
				c1 = acc[i][1] * mul;
			}
			if (rmax) {
				const vec zero = { 0 };

				/* a NaN is never greater: rbad finds it */
				rmax[i] = pick(c0 > rmax[i], c0, rmax[i]);
				rmax[i] = pick(c1 > rmax[i], c1, rmax[i]);
				rbad[i] += c0 * zero + c1 * zero;
			}
			memcpy(ci, &c0, sizeof(vec));
			memcpy(ci + VL, &c1, sizeof(vec));
		}
		return;
	}
	/* unrolled, each row's index a constant: acc is never indexed at run
	 * time, so its sums stay in registers (else all of them go through
	 * the stack on the way out, whole tiles too) */
UNROLL_MR
	for (size_t i = 0; i < MR; i++) {
		const vec a0 = acc[i][0], a1 = acc[i][1];
		REAL tmp[2 * (VB / sizeof(REAL))];

		if (i >= mr)
			break;

		memcpy(tmp, &a0, sizeof(vec));
		memcpy(tmp + VL, &a1, sizeof(vec));
		for (size_t j = 0; j < nr; j++) {
			c[i * ldc + j] = add ? c[i * ldc + j] + tmp[j] : tmp[j] * mul;
			if (rmax) {
				const REAL x = c[i * ldc + j];

				rmax[i][0] = x > rmax[i][0] ? x : rmax[i][0];
				rbad[i][0] += x * 0;
			}
		}
	}
}

/* a packed MR-row strip (pack_a) */
static void micro(size_t kc, const REAL *restrict a, const REAL *restrict b, REAL *restrict c,
		  size_t ldc, size_t mr, size_t nr, int add)
{
	micro_strided(kc, a, MR, 1, b, c, ldc, mr, nr, add, 1, NULL, NULL);
}

/* MR plain rows of lda; rows past the last are never read (mr < MR) only
 * when the caller pads them: here the row count is always a multiple of MR.
 * Inlined into the attention's inner loop, as the micro-kernel there is. */
static inline __attribute__((always_inline)) void
micro_rows(size_t kc, const REAL *restrict a, size_t lda, const REAL *restrict b,
		       REAL *restrict c, size_t ldc, size_t mr, size_t nr, int add)
{
	micro_strided(kc, a, 1, lda, b, c, ldc, mr, nr, add, 1, NULL, NULL);
}

/* rows [0, m) of A (lda), columns [k0, k0 + kc), into MR-row strips, zero-padded */
static void pack_a(REAL *dst, const REAL *A, size_t lda, size_t m, size_t k0, size_t kc)
{
	for (size_t i0 = 0; i0 < m; i0 += MR) {
		const size_t mr = min_size(MR, m - i0);

		for (size_t p = 0; p < kc; p++) {
			for (size_t i = 0; i < mr; i++)
				dst[p * MR + i] = A[(i0 + i) * lda + k0 + p];
			for (size_t i = mr; i < MR; i++)
				dst[p * MR + i] = 0;
		}
		dst += kc * MR;
	}
}

/* A given as Aᵀ (lda): A's rows [0, m) are Aᵀ's columns from At, columns
 * [k0, k0 + kc) its rows, into MR-row strips as pack_a, zero-padded */
static void pack_a_t(REAL *dst, const REAL *At, size_t lda, size_t m, size_t k0, size_t kc)
{
	for (size_t i0 = 0; i0 < m; i0 += MR) {
		const size_t mr = min_size(MR, m - i0);

		for (size_t p = 0; p < kc; p++) {
			const REAL *row = At + (k0 + p) * lda + i0;

			for (size_t i = 0; i < mr; i++)
				dst[p * MR + i] = row[i];
			for (size_t i = mr; i < MR; i++)
				dst[p * MR + i] = 0;
		}
		dst += kc * MR;
	}
}

/* B (ldb) rows [k0, k0 + kc), columns [j0, j0 + nc), into NR-column strips;
 * with tb, B given as Bᵀ (ldb): each of B's columns read along a row */
static void pack_b(REAL *dst, const REAL *B, size_t ldb, int tb, size_t k0, size_t kc, size_t j0,
		   size_t nc)
{
	for (size_t s = 0; s < nc; s += NR) {
		const size_t nr = min_size(NR, nc - s);

		for (size_t p = 0; p < kc; p++)
			for (size_t j = nr; j < NR; j++)
				dst[p * NR + j] = 0;
		if (tb) {
			for (size_t j = 0; j < nr; j++) {
				const REAL *col = B + (j0 + s + j) * ldb + k0;

				for (size_t p = 0; p < kc; p++)
					dst[p * NR + j] = col[p];
			}
		} else {
			for (size_t p = 0; p < kc; p++) {
				const REAL *row = B + (k0 + p) * ldb + j0 + s;

				for (size_t j = 0; j < nr; j++)
					dst[p * NR + j] = row[j];
			}
		}
		dst += kc * NR;
	}
}

/* the threads a product uses: one per MC rows of A at most, one for a single block */
static int gemm_threads(const struct mha_gemm *g)
{
	return g->m > MC ? threads_for(g->threads, (g->m + MC - 1) / MC) : 1;
}

/* elements of the packed B panel: KC rows by at most NC columns, padded to NR */
static size_t gemm_panel(const struct mha_gemm *g)
{
	return KC * min_size(NC, round_up(g->n, NR));
}

size_t NAME(mha_gemm_bytes_)(const struct mha_gemm *g)
{
	/* the B panel, and an (MC, KC) block of A per thread */
	return mha_sat_add(counted_bytes(gemm_panel(g)),
			   mha_sat_mul((size_t)gemm_threads(g), counted_bytes(MC * KC)));
}

/* the first row of thread t's share of m rows among threads: whole MR-row strips */
static size_t gemm_share(size_t m, int threads, int t)
{
	const size_t strips = (m + MR - 1) / MR;

	return min_size(m, strips * (size_t)t / (size_t)threads * MR);
}

/*
 * Rows [i0, i0 + mc) of C, columns [j0, j0 + nc), from the k0 panel of B
 * (packed in bpack): whole MR-row strips read from A where they are (no
 * copy); a last shorter strip packed, zero-padded, as the kernel reads MR
 * rows: the same products in the same order either way.  The bias joins
 * after the last panel (the same order as adding it at the end).
 */
static void gemm_block(const struct mha_gemm *g, REAL *apack, const REAL *bpack, size_t i0,
		       size_t mc, size_t j0, size_t nc, size_t k0, size_t kc, int last, int *finite)
{
	const REAL *A = g->A, *bias = g->bias;
	REAL *C = g->C;
	const size_t whole = mc / MR * MR;

	if (!apack)
		return;
	if (g->ta) {
		/* Aᵀ given: the block packed (MC·KC, as apack holds), then strip by
		 * strip as below, each strip's sums in the same order */
		pack_a_t(apack, A + i0, g->lda, mc, k0, kc);
		for (size_t i = 0; i < mc; i += MR)
			for (size_t s = 0; s < nc; s += NR)
				micro(kc, apack + i * kc, bpack + s * kc, C + (i0 + i) * g->ldc + j0 + s,
				      g->ldc, min_size(MR, mc - i), min_size(NR, nc - s), k0 > 0);
		goto bias;
	}
	if (whole < mc)
		pack_a(apack, A + (i0 + whole) * g->lda, g->lda, mc - whole, k0, kc);
	/* strip by strip of A (MR rows, in L1 for the whole sweep), across the
	 * packed panel (in L2): not panel strip by strip across A's block, whose
	 * strip of B (KC·NR, 32 KiB) filled L1 alone.  The same sums */
	for (size_t i = 0; i < whole; i += MR)
		for (size_t s = 0; s < nc; s += NR)
			micro_rows(kc, A + (i0 + i) * g->lda + k0, g->lda, bpack + s * kc,
				   C + (i0 + i) * g->ldc + j0 + s, g->ldc, MR, min_size(NR, nc - s),
				   k0 > 0);
	if (whole < mc)
		for (size_t s = 0; s < nc; s += NR)
			micro(kc, apack, bpack + s * kc, C + (i0 + whole) * g->ldc + j0 + s, g->ldc,
			      mc - whole, min_size(NR, nc - s), k0 > 0);
bias:
	/* after the last panel: the bias, and every sum's finiteness (branch-free,
	 * vectorised; a nan fails both compares), the block still in cache */
	if (last)
		for (size_t i = i0; i < i0 + mc; i++) {
			REAL *ci = C + i * g->ldc + j0;
			int ok = 1;

			if (bias)
				for (size_t j = 0; j < nc; j++)
					ci[j] += bias[j0 + j];
			for (size_t j = 0; j < nc; j++)
				ok &= (ci[j] <= REAL_MAX) & (ci[j] >= -REAL_MAX);
			*finite &= ok;
		}
}

/* one product's team: the B panel, shared; a thread that could not allocate sets failed */
struct gemm_team {
	const struct mha_gemm *g;
	REAL *bpack;
	atomic_int failed;
	atomic_int nonfinite;
};

/*
 * One team for the whole product: the B panel packed by all threads,
 * strip by strip, then A's rows shared out (gemm_block), each row's
 * sums and bias by one thread, in the same order whatever their number
 */
static void gemm_team(void *arg, int tid, int nthreads)
{
	struct gemm_team *r = arg;
	const struct mha_gemm *g = r->g;
	const REAL *B = g->B;
	REAL *bpack = r->bpack;

	{
		REAL *apack = alloc_aligned(MC * KC);
		int finite = 1;

		if (!apack)
			atomic_store(&r->failed, 1);
		for (size_t j0 = 0; j0 < g->n; j0 += NC) {
			const size_t nc = min_size(NC, g->n - j0);

			for (size_t k0 = 0; k0 < g->k; k0 += KC) {
				const size_t kc = min_size(KC, g->k - k0);
				const int last = k0 + KC >= g->k;
				const size_t strips = (nc + NR - 1) / NR;

				for (size_t s = team_share(strips, tid, nthreads) * NR;
				     s < team_share(strips, tid + 1, nthreads) * NR; s += NR)
					pack_b(bpack + s * kc, B, g->ldb, g->tb, k0, kc, j0 + s,
					       min_size(NR, nc - s));
				mha_team_barrier(nthreads);
				/* the rows in equal shares of whole MR-row strips, one share a
				 * thread (both busy to the end: 512 rows are 43 + 42 strips, not
				 * 6 blocks of MC shared 3 + 2.3), each walked MC rows at a time */
				{
					const int t = tid, threads = nthreads;
					const size_t lo = gemm_share(g->m, threads, t);
					const size_t hi = gemm_share(g->m, threads, t + 1);

					for (size_t i0 = lo; i0 < hi; i0 += MC) {
						const size_t mc = min_size(MC, hi - i0);

						gemm_block(g, apack, bpack, i0, mc, j0, nc, k0, kc, last,
							   &finite);
						mha_progress_add(g->progress, (uint64_t)mc * nc * kc);
						if (tid == 0)
							mha_progress_tell(g->progress);
					}
				}
				/* the panel is packed over again only when all are done with it;
				 * after the last, the team's end is the wait (one barrier fewer:
				 * each costs a time slice when another process holds a core) */
				if (!last || j0 + NC < g->n) {
					mha_team_barrier(nthreads);
				}
			}
		}
		free(apack);
		if (!finite)
			atomic_store(&r->nonfinite, 1);
	}
}

void NAME(mha_gemm_)(struct mha_gemm *g)
{
	struct gemm_team r = { g, alloc_big(gemm_panel(g)), 0, 0 };

	if (!r.bpack) {
		g->failed = 1;
		return;
	}
	mha_team_run(gemm_threads(g), gemm_team, &r);
	free_big(r.bpack, gemm_panel(g));
	g->failed = atomic_load(&r.failed);
	g->nonfinite = atomic_load(&r.nonfinite);
}

/* ---- exp, vectorisable ------------------------------------------------- */

/*
 * e^x for x <= 0 (and -inf), without a call (vexp.h, shared with
 * kernel_bwd.c): within 2 ulp, and 0 below the smallest normal result.
 */
static inline vec vexp_v(vec x);

/* one value through the vector version: the same numbers, one polynomial */
static inline REAL vexp(REAL x)
{
	const vec v = vexp_v((vec){ 0 } + x);

	return v[0];
}

/* e^x a vector at a time, as described above: the softmax's inner loop */
#include "vexp.h"

/* y = e^x, n values, a whole vector at a time as the softmax takes them */
void NAME(mha_exps_)(void *yv, const void *xv, size_t n)
{
	const REAL *x = xv;
	REAL *y = yv;

	for (size_t i = 0; i < n; i += VL) {
		const size_t m = min_size(VL, n - i);
		vec v = { 0 };

		memcpy(&v, x + i, m * sizeof(REAL));
		v = vexp_v(v);
		memcpy(y + i, &v, m * sizeof(REAL));
	}
}

/* ---- fused attention ---------------------------------------------------- */

/*
 * Kᵀ of one key/value head in NR-key strips, (dk, NR) each, keys zero-padded:
 * the strips of keys [j0, j1) (j0 a multiple of NR), into the whole pack dst
 */
static void pack_kt(REAL *dst, const REAL *K, size_t ldk, size_t n_kv, size_t dk, size_t j0,
		    size_t j1)
{
	for (size_t s = j0; s < j1 && s < n_kv; s += NR) {
		const size_t nr = min_size(NR, n_kv - s);
		REAL *d = dst + s * dk;

		for (size_t p = 0; p < dk; p++) {
			for (size_t j = 0; j < nr; j++)
				d[p * NR + j] = K[(s + j) * ldk + p];
			for (size_t j = nr; j < NR; j++)
				d[p * NR + j] = 0;
		}
	}
}

struct scratch {
	REAL *q;    /* (BQ, dk) packed */
	REAL *s;    /* (BQ, BK) scores, then weights in place */
	REAL *o;    /* (BQ, dv rounded to NR) running output */
	REAL *m, *l; /* (BQ) running max and sum */
};

enum { SCRATCH_Q, SCRATCH_S, SCRATCH_O, SCRATCH_M, SCRATCH_L, N_SCRATCH };

/* a thread's scratch in elements, as struct scratch lists it */
static void scratch_counts(const struct mha_attend *a, size_t c[N_SCRATCH])
{
	c[SCRATCH_Q] = mha_sat_mul(BQ + MR, a->dk);
	c[SCRATCH_S] = BQ * BK;
	c[SCRATCH_O] = mha_sat_mul(BQ, round_up(a->dv, NR));
	c[SCRATCH_M] = c[SCRATCH_L] = BQ;
}

/* Kᵀ and V of one key/value head, packed: keys padded to NR, V's columns too */
static size_t kt_count(const struct mha_attend *a)
{
	return mha_sat_mul(round_up(a->n_kv, NR), a->dk);
}

static size_t v_count(const struct mha_attend *a)
{
	return mha_sat_mul(round_up(a->n_kv, NR), round_up(a->dv, NR));
}

/* the tasks (query blocks of one head of one sequence) and the threads they keep busy */
static size_t attend_tasks(const struct mha_attend *a)
{
	return mha_sat_mul(mha_sat_mul(a->B, a->H), (a->n_q + BQ - 1) / BQ);
}

static int attend_threads(const struct mha_attend *a)
{
	return threads_for(a->threads, attend_tasks(a));
}

/*
 * In waves: Kᵀ and V packed for one (sequence, key/value head) at a time,
 * its tasks run by all threads, then the next; the packs then take memory
 * for one head rather than a second copy of the whole K and V (a long
 * sequence's n = 131072 in f32: 64 MiB rather than 512).  Chosen when each
 * pack has tasks enough to keep every thread busy (4 each); else all are
 * packed at once and all tasks shared, as a batch of short sequences needs.
 * Each task's numbers are the same either way.
 */
static int attend_waves(const struct mha_attend *a)
{
	const size_t per_pack = mha_sat_mul(a->H / a->G, (a->n_q + BQ - 1) / BQ);

	return mha_sat_mul(a->B, a->G) > 1 && per_pack >= 4 * (size_t)attend_threads(a);
}

/* the packs held at once: one in waves, else one per sequence and key/value head */
static size_t attend_packs(const struct mha_attend *a)
{
	return attend_waves(a) ? 1 : mha_sat_mul(a->B, a->G);
}

size_t NAME(mha_attend_bytes_)(const struct mha_attend *a)
{
	size_t c[N_SCRATCH], one = 0;
	const size_t packs = attend_packs(a);

	scratch_counts(a, c);
	for (int i = 0; i < N_SCRATCH; i++)
		one = mha_sat_add(one, counted_bytes(c[i]));
	return mha_sat_add(counted_bytes(mha_sat_mul(packs, mha_sat_add(kt_count(a), v_count(a)))),
			   mha_sat_mul((size_t)attend_threads(a), one));
}

/*
 * the largest |v| of key/value head g's values in sequence b: for the
 * rerun after an overflow.  Found in the element type (a maximum is
 * exact) and widened once: GCC 12's vectoriser stops with an internal
 * error on aarch64 at a float-to-double maximum in a loop (-O3, float)
 */
static __attribute__((noinline, cold)) double vmax_of(const struct mha_attend *a, size_t b,
						      size_t g)
{
	const REAL *V = (const REAL *)a->V + b * a->n_kv * a->ldv + g * a->dv;
	REAL m = 0;

	for (size_t j = 0; j < a->n_kv; j++)
		for (size_t t = 0; t < a->dv; t++) {
			const REAL v = V[j * a->ldv + t] < 0 ? -V[j * a->ldv + t] : V[j * a->ldv + t];

			/* a NaN is never greater: skipped, as fmax skips it */
			m = v > m ? v : m;
		}
	return (double)m;
}

/*
 * A scaled score that is not finite, at head h, query qi, key kj: a
 * masked-out key's never counts (0 here; the mask makes it -inf); else
 * the score again without overflowing partial sums (rules.h), an error
 * only when it, or it scaled, truly is not finite.  The query's row is
 * read from the task's packed copy q (stride MR): the output may already
 * have overwritten Q (fast.c writes the heads' outputs over Q).  Rare:
 * kept out of attend_block, which must stay small enough for the
 * micro-kernels to be inlined into it.
 */
static __attribute__((noinline, cold)) REAL
score_again(const struct mha_attend *a, const struct mha_rule *rule, const REAL *q, size_t b,
	    size_t h, size_t qi, size_t kj, int *error)
{
	const size_t g = mha_rule_kv_head(h, a->H, a->G);
	const REAL *k = (const REAL *)a->K + (b * a->n_kv + kj) * a->ldk + g * a->dk;
	REAL s, x;

	if (!mha_rule_sees(rule, h, qi, kj))
		return 0;
	s = (REAL)DOT(q, MR, k, 1, a->dk, 0.0);
	x = s * (REAL)a->scale;
	if (mha_rule_overflows(rule, h, qi, kj, s) || mha_rule_overflows(rule, h, qi, kj, x))
		*error = 2;
	return x;
}

/*
 * One task: query rows [q0, q0 + rows) of head h of sequence b, whose rule
 * is rule.  With pshift > 0 (a
 * rerun) the weights meet V scaled by 2^-pshift, so that their sum cannot
 * overflow, and the outputs are scaled back.  Returns 1 when an output
 * overflowed on a first run: the caller reruns the task.  Q's rows are
 * read once, into w->q, before any output is written (the outputs may
 * take their place), and a rerun reuses w->q.
 */
static int attend_block(struct mha_attend *a, const struct mha_rule *rule, struct scratch *w,
			const REAL *ktp, const REAL *vp, size_t b, size_t h, size_t q0, size_t rows,
			int pshift, size_t *blocked, size_t *first, int *error)
{
	const size_t dk = a->dk, dv = a->dv, dvr = round_up(dv, NR);
	const REAL *Q = (const REAL *)a->Q + b * a->n_q * a->ldq + h * dk;
	const REAL scale = (REAL)a->scale, cap = (REAL)a->softcap;
	const REAL pscale = (REAL)ldexp(1.0, -pshift);
	const int masked = rule->allow || rule->bias;
	const double slope = rule->alibi ? mha_rule_slope(rule, h) : 0;
	/*
	 * the keys any of these rows may see: blocks past the last row's end,
	 * and wholly before the first row's window, are skipped (cost ~ n·w)
	 */
	const size_t end = mha_rule_keys_end(rule, q0 + rows - 1);
	const size_t begin = mha_rule_keys_begin(rule, q0) / BK * BK;
	vec rmax[BQ], rbad[BQ]; /* each row's scores in this key block: max, finiteness (lanes) */
	int overflow = 0;

	if (!pshift)
		pack_a(w->q, Q + q0 * a->ldq, a->ldq, rows, 0, dk);
	for (size_t i = 0; i < rows; i++) {
		w->m[i] = -INFINITY;
		w->l[i] = 0;
	}
	memset(w->o, 0, BQ * dvr * sizeof(REAL));

	for (size_t k0 = begin; k0 < end; k0 += BK) {
		const size_t cols = min_size(BK, end - k0);

		/* S = Q_blk · K_blkᵀ · scale, scaled in the registers before the store,
		 * each row's max and finiteness found there too (no pass of their own);
		 * the micro-kernels inlined here (always_inline) */
		for (size_t i = 0; i < rows; i++) {
			rmax[i] = splat(-INFINITY);
			rbad[i] = splat(0);
		}
		for (size_t s = 0; s < cols; s += NR)
			for (size_t i = 0; i < rows; i += MR)
				micro_strided(dk, w->q + i * dk, MR, 1, ktp + (k0 + s) * dk,
					      w->s + i * BK + s, BK, min_size(MR, rows - i),
					      min_size(NR, cols - s), 0, scale, rmax + i, rbad + i);
		/* scale, softcap, mask; the running max and sum; the weights */
		for (size_t i = 0; i < rows; i++) {
			REAL *si = w->s + i * BK, mx, alpha, sum = 0, lanes[VB / sizeof(REAL)];
			const size_t qi = q0 + i, cv = round_up(cols, VL);
			const size_t seen = mha_rule_keys_end(rule, qi);
			const size_t from = mha_rule_keys_begin(rule, qi);
			vec vmx = rmax[i], vsum = splat(0);
			int any_bad = 0;
			/* no softcap, mask, ALiBi, edge of the causal or window rule or tail in
			 * this row's block: the scaled scores are the logits and their max is
			 * the micro-kernel's; else the passes below change them first */
			const int plain = cap == 0 && !masked && !rule->alibi && seen >= k0 + cols &&
					  from <= k0 && cols == cv;

			/* rbad: 0 where every score is finite, NaN where one is not */
			for (size_t l = 0; l < VL; l++)
				any_bad |= rbad[i][l] != 0;
			/* not finite: an error only where the key counts (rules.h), never a silent NaN */
			if (any_bad)
				for (size_t j = 0; j < cols; j++)
					if (!isfinite(si[j]))
						si[j] = score_again(a, rule,
								    w->q + i / MR * MR * dk + i % MR,
								    b, h, qi, k0 + j, error);
			if (cap > 0)
				for (size_t j = 0; j < cols; j++)
					si[j] = cap * (REAL)tanh((double)(si[j] / cap));
			if (!masked && rule->alibi) {
				/*
				 * ALiBi alone: slope·(j - p), linear in j, in one loop
				 * the compiler vectorises; a value that came out not
				 * finite counts only where the key is seen (rules.h)
				 */
				const double at = (double)k0 - mha_rule_position(rule, qi);
				int out_of_range = 0;

				for (size_t j = 0; j < cols; j++) {
					si[j] = (REAL)((double)si[j] + slope * (at + (double)j));
					out_of_range |= !(fabs(si[j]) <= REAL_MAX);
				}
				if (out_of_range)
					for (size_t j = 0; j < cols; j++)
						if (!isfinite(si[j]) &&
						    mha_rule_overflows(rule, h, qi, k0 + j, si[j]))
							*error = 2;
			} else if (masked) {
				/* the explicit mask, and ALiBi's term on it as mha_rule_mask adds it */
				const double pos = mha_rule_position(rule, qi);

				for (size_t j = 0; j < cols; j++) {
					double m = mha_rule_explicit(rule, h, qi, k0 + j);

					if (rule->alibi && m != -INFINITY)
						m += slope * ((double)(k0 + j) - pos);
					si[j] = (REAL)mha_rule_masked((double)si[j], m);
					if (!isfinite(si[j]) && mha_rule_overflows(rule, h, qi, k0 + j, si[j]))
						*error = 2;
				}
			}
			/* past the causal diagonal or the window (the block's last row may see further) */
			for (size_t j = seen > k0 ? seen - k0 : 0; j < cols; j++)
				si[j] = -INFINITY;
			/* before the window (the block's first row may see further back) */
			for (size_t j = 0; j < cols && k0 + j < from; j++)
				si[j] = -INFINITY;
			for (size_t j = cols; j < cv; j++)
				si[j] = -INFINITY;
			if (!plain || any_bad) {
				vmx = splat(-INFINITY);
				for (size_t j = 0; j < cv; j += VL) {
					const vec x = *(const vec *)(si + j);

					vmx = pick(x > vmx, x, vmx);
				}
			}
			memcpy(lanes, &vmx, sizeof(vmx));
			mx = w->m[i];
			for (size_t l = 0; l < VL; l++)
				mx = lanes[l] > mx ? lanes[l] : mx;
			if (mx == -INFINITY) {
				/* nothing seen yet: weights zero, nothing to rescale */
				memset(si, 0, cv * sizeof(REAL));
				continue;
			}
			alpha = vexp(w->m[i] - mx);
			for (size_t j = 0; j < cv; j += VL) {
				const vec p = vexp_v(*(const vec *)(si + j) - mx);

				*(vec *)(si + j) = p;
				vsum += p;
			}
			memcpy(lanes, &vsum, sizeof(vsum));
			for (size_t l = 0; l < VL; l++)
				sum += lanes[l];
			w->l[i] = w->l[i] * alpha + sum;
			w->m[i] = mx;
			if (alpha != 1)
				for (size_t t = 0; t < dv; t++)
					w->o[i * dvr + t] *= alpha;
			if (pshift)
				for (size_t j = 0; j < cv; j++)
					si[j] *= pscale;
		}
		/* O += P · V_blk, P read in place: rows past a short block are computed, never stored */
		for (size_t s = 0; s < dv; s += NR)
			for (size_t i = 0; i < rows; i += MR)
				micro_rows(cols, w->s + i * BK, BK,
					   vp + (s / NR) * round_up(a->n_kv, NR) * NR + k0 * NR,
					   w->o + i * dvr + s, dvr, min_size(MR, rows - i),
					   min_size(NR, dv - s), 1);
	}
	for (size_t i = 0; i < rows; i++) {
		REAL *o = (REAL *)a->O + (b * a->n_q + q0 + i) * a->ldo + h * dv;
		const size_t at = (b * a->H + h) * a->n_q + q0 + i;

		if (w->l[i] == 0) {
			/* every key blocked: zeros, as the exact path gives */
			memset(o, 0, dv * sizeof(REAL));
			if ((*blocked)++ == 0 || at < *first)
				*first = at;
			continue;
		}
		if (rule->sinks) {
			/*
			 * the sink joins the running max and sum once, after the
			 * last key block; in double, so that a large sink cannot
			 * overflow a float on the way
			 */
			const double s = rule->sinks[h], m = (double)w->m[i];
			const double mx = s > m ? s : m, alpha = exp(m - mx);

			w->l[i] = (REAL)((double)w->l[i] * alpha + exp(s - mx));
			if (alpha != 1)
				for (size_t t = 0; t < dv; t++)
					w->o[i * dvr + t] *= (REAL)alpha;
		}
		for (size_t t = 0; t < dv; t++)
			o[t] = w->o[i * dvr + t] / w->l[i];
		if (pshift) {
			for (size_t t = 0; t < dv; t++)
				o[t] = (REAL)mha_rescue_back((double)o[t], pshift, REAL_MAX);
		} else {
			int finite = 1;

			/* branch-free, vectorised: the common case pays one compare a value */
			for (size_t t = 0; t < dv; t++)
				finite &= fabs(o[t]) <= REAL_MAX;
			overflow |= !finite;
		}
	}
	return overflow;
}

/*
 * V of one key/value head as NR-column strips over all keys, (n_kv rounded,
 * NR) each: rows [j0, j1) of every strip, into the whole pack dst
 */
static void pack_v(REAL *dst, const REAL *V, size_t ldv, size_t n_kv, size_t dv, size_t j0,
		   size_t j1)
{
	const size_t rows = round_up(n_kv, NR);

	j1 = min_size(j1, rows);
	for (size_t s = 0; s < dv; s += NR) {
		const size_t nr = min_size(NR, dv - s);

		for (size_t j = j0; j < j1; j++)
			for (size_t t = 0; t < NR; t++)
				dst[j * NR + t] = (j < n_kv && t < nr) ? V[j * ldv + s + t] : 0;
		dst += rows * NR;
	}
}

/* rows of a pack each thread packs at a time (a multiple of every NR) */
#define PACK_ROWS 256

/* one attention's team: the packs, the task counter and what the threads found */
struct attend_team {
	struct mha_attend *a;
	REAL *kt, *vp;                /* the packs of Kᵀ and V (attend_packs of them) */
	struct team_counter next;     /* the next task of the wave */
	atomic_size_t blocked, first; /* rows with every key masked, the first of them */
	atomic_int error;
};

static void attend_team(void *arg, int tid, int nthreads)
{
	struct attend_team *r = arg;
	struct mha_attend *a = r->a;
	const size_t kt_size = kt_count(a), v_size = v_count(a);
	const size_t blocks = (a->n_q + BQ - 1) / BQ, packs = a->B * a->G;
	const int waves = attend_waves(a);
	const size_t per_head = a->H / a->G;
	/* tasks per wave: a pack's heads' query blocks, or all */
	const size_t tasks = waves ? per_head * blocks : attend_tasks(a);
	const size_t chunks = (round_up(a->n_kv, NR) + PACK_ROWS - 1) / PACK_ROWS;
	REAL *kt = r->kt, *vp = r->vp;

	{
		struct scratch w;
		size_t c[N_SCRATCH], my_first = (size_t)-1, my_blocked = 0;
		int my_error = 0;

		scratch_counts(a, c);
		w.q = alloc_aligned(c[SCRATCH_Q]);
		w.s = alloc_aligned(c[SCRATCH_S]);
		w.o = alloc_aligned(c[SCRATCH_O]);
		w.m = alloc_aligned(c[SCRATCH_M]);
		w.l = alloc_aligned(c[SCRATCH_L]);
		if (!w.q || !w.s || !w.o || !w.m || !w.l)
			my_error = 1;
		else
			memset(w.s, 0, c[SCRATCH_S] * sizeof(REAL)); /* never read uninitialised */
		for (size_t wave = 0; wave < (waves ? packs : 1); wave++) {
			const size_t n_ch = waves ? chunks : packs;

			/* the last wave's tasks are all taken (the barrier below): count afresh */
			if (tid == 0)
				atomic_store_explicit(&r->next.next, 0, memory_order_relaxed);
			/* pack: in waves this wave's pack, by rows among the threads; else every pack */
			for (size_t ch = team_share(n_ch, tid, nthreads);
			     ch < team_share(n_ch, tid + 1, nthreads); ch++) {
				const size_t p = waves ? wave : ch, b = p / a->G, g = p % a->G;
				const size_t j0 = waves ? ch * PACK_ROWS : 0;
				const size_t j1 = waves ? j0 + PACK_ROWS : SIZE_MAX;
				REAL *ktp = kt + (waves ? 0 : p) * kt_size, *vpp = vp + (waves ? 0 : p) * v_size;

				pack_kt(ktp, (const REAL *)a->K + b * a->n_kv * a->ldk + g * a->dk, a->ldk,
					a->n_kv, a->dk, j0, j1);
				pack_v(vpp, (const REAL *)a->V + b * a->n_kv * a->ldv + g * a->dv, a->ldv,
				       a->n_kv, a->dv, j0, j1);
			}
			mha_team_barrier(nthreads);
			/* the query blocks from the last: on causal shapes the largest first, so
			 * that the threads finish together (dynamic scheduling, longest first) */
			for (size_t t = team_next(&r->next); t < tasks; t = team_next(&r->next)) {
				const size_t blk = blocks - 1 - t % blocks, q0 = blk * BQ;
				const size_t rows = min_size(BQ, a->n_q - q0);
				const size_t b = waves ? wave / a->G : t / (a->H * blocks);
				const size_t h = waves ? wave % a->G * per_head + t / blocks
						       : t % (a->H * blocks) / blocks;
				const size_t p = waves ? 0 : b * a->G + mha_rule_kv_head(h, a->H, a->G);
				const struct mha_rule rule = mha_rule_seq(&a->rule, b);

				if (my_error)
					continue;
				if (attend_block(a, &rule, &w, kt + p * kt_size, vp + p * v_size, b, h, q0,
						 rows, 0, &my_blocked, &my_first, &my_error) && !my_error) {
					/* Σ p·v overflowed, though the output is at most max |v|: again, scaled */
					size_t again_blocked = 0, again_first = (size_t)-1;
					const int shift = mha_rescue_shift(
						vmax_of(a, b, mha_rule_kv_head(h, a->H, a->G)), a->n_kv, REAL_MAX);

					attend_block(a, &rule, &w, kt + p * kt_size, vp + p * v_size, b, h, q0,
						     rows, shift, &again_blocked, &again_first, &my_error);
				}
				if (a->progress) {
					/* the keys the rows see, as mha_progress_forward_work counts them */
					uint64_t seen = 0;

					for (size_t i = q0; i < q0 + rows; i++) {
						const size_t e = mha_rule_keys_end(&rule, i);
						const size_t s = mha_rule_keys_begin(&rule, i);

						seen += e > s ? e - s : 0;
					}
					mha_progress_add(a->progress, seen * (a->dk + a->dv));
					if (tid == 0)
						mha_progress_tell(a->progress);
				}
			}
			/* the next wave packs over this one's K and V once all are done with
			 * them; after the last, the team's end is the wait (a barrier fewer) */
			if (waves && wave + 1 < packs) {
				mha_team_barrier(nthreads);
			}
		}
		atomic_fetch_add(&r->blocked, my_blocked);
		if (my_blocked)
			team_min_size(&r->first, my_first);
		team_max_int(&r->error, my_error);
		free(w.q);
		free(w.s);
		free(w.o);
		free(w.m);
		free(w.l);
	}
}

void NAME(mha_attend_)(struct mha_attend *a)
{
	const size_t held = attend_packs(a);
	const size_t kt_n = mha_sat_mul(held, kt_count(a));
	const size_t n = mha_sat_add(kt_n, mha_sat_mul(held, v_count(a)));
	/* the packs of Kᵀ and V in one block: at 2 MiB together (512 keys of 8
	 * heads of 64 in f32) one huge page rather than 512 small ones;
	 * kt_count is whole vectors of NR·dk, so V's pack starts aligned */
	REAL *block = alloc_big(n);
	struct attend_team r = { a, block, block ? block + kt_n : NULL, { 0 }, 0, (size_t)-1, 0 };

	if (!block) {
		a->error = 1;
		return;
	}
	mha_team_run(attend_threads(a), attend_team, &r);
	free_big(block, n);
	a->blocked = atomic_load(&r.blocked);
	a->first_blocked = atomic_load(&r.first);
	a->error = atomic_load(&r.error);
}

/* ---- products on B packed once (the backward fast path's tiles) --------- */

/* the width of mha_pack_b's strips: the micro-kernel's NR */
size_t NAME(mha_packed_nr_)(void)
{
	return NR;
}

/*
 * B (k, n) into NR-column strips, strip s at dst + s·k·NR holding B's k
 * rows of NR (b[p·NR + j]), zero-padded past column n: a row range of B is
 * then an offset into each strip and a column range from a multiple of NR
 * whole strips.  B's element (p, j) is at src[p·rs + j·cs]: (ldb, 1) for B
 * as it is, (1, ld) for the transpose of a row-major matrix, read in place.
 * dst holds k·round_up(n, NR) elements, VB-aligned.
 */
void NAME(mha_pack_b_)(void *dst, const void *src, size_t rs, size_t cs, size_t k, size_t n)
{
	const REAL *B = src;
	REAL *d = dst;

	for (size_t s = 0; s < n; s += NR, d += k * NR) {
		const size_t nr = min_size(NR, n - s);

		for (size_t p = 0; p < k; p++)
			for (size_t j = nr; j < NR; j++)
				d[p * NR + j] = 0;
		if (cs == 1) {
			for (size_t p = 0; p < k; p++)
				for (size_t j = 0; j < nr; j++)
					d[p * NR + j] = B[p * rs + s + j];
		} else {
			/* the transpose: each of B's columns read along its row in memory */
			for (size_t j = 0; j < nr; j++)
				for (size_t p = 0; p < k; p++)
					d[p * NR + j] = B[p * rs + (s + j) * cs];
		}
	}
}

/*
 * C (m, n) = A (m, k; lda) · B on one thread, B packed by mha_pack_b: bp
 * points at the first row to use in the first strip to use, and strips are
 * bs elements apart.  Nothing allocated; each element summed in one fixed
 * order (KC-long runs, as mha_gemm).
 */
void NAME(mha_gemm_packed_)(void *Cv, size_t ldc, const void *Av, size_t lda, const void *bp,
			    size_t bs, size_t m, size_t n, size_t k, int add)
{
	const REAL *A = Av, *Bp = bp;
	REAL *C = Cv;
	/* a last strip of fewer than MR rows, zero-padded: the kernel reads MR */
	REAL tail[MR * KC] __attribute__((aligned(64)));

	if (!k) {
		for (size_t i = 0; i < m && !add; i++)
			memset(C + i * ldc, 0, n * sizeof(REAL));
		return;
	}
	for (size_t k0 = 0; k0 < k; k0 += KC) {
		const size_t kc = min_size(KC, k - k0);
		const int more = add || k0 > 0;

		for (size_t i0 = 0; i0 < m; i0 += MC) {
			const size_t mc = min_size(MC, m - i0), whole = mc / MR * MR;

			if (whole < mc)
				for (size_t p = 0; p < kc; p++)
					for (size_t i = 0; i < MR; i++)
						tail[p * MR + i] = whole + i < mc
								   ? A[(i0 + whole + i) * lda + k0 + p] : 0;
			/* one strip of A (MR rows, kept in L1) across all of B's
			 * strips, as gemm_block: the same sums in the same order */
			for (size_t i = 0; i < whole; i += MR)
				for (size_t j = 0; j < n; j += NR)
					micro_rows(kc, A + (i0 + i) * lda + k0, lda,
						   Bp + j / NR * bs + k0 * NR, C + (i0 + i) * ldc + j,
						   ldc, MR, min_size(NR, n - j), more);
			if (whole < mc)
				for (size_t j = 0; j < n; j += NR)
					micro(kc, tail, Bp + j / NR * bs + k0 * NR,
					      C + (i0 + whole) * ldc + j, ldc, mc - whole,
					      min_size(NR, n - j), more);
		}
	}
}

/*
 * C (m, n) += Aᵀ·B on one thread, A stored (k, m) with lda (the
 * transpose read in place by the micro-kernel; a last strip of fewer than
 * MR rows copied, zero-padded), B as
 * for mha_gemm_packed.  Nothing allocated; each element summed in one
 * fixed order, then added to C.
 */
void NAME(mha_gemm_packed_tadd_)(void *Cv, size_t ldc, const void *Av, size_t lda, const void *bp,
				 size_t bs, size_t m, size_t n, size_t k)
{
	const REAL *A = Av, *Bp = bp;
	REAL *C = Cv;
	REAL strip[MR * KC] __attribute__((aligned(64)));

	for (size_t k0 = 0; k0 < k; k0 += KC) {
		const size_t kc = min_size(KC, k - k0);

		for (size_t i0 = 0; i0 < m; i0 += MR) {
			const size_t mr = min_size(MR, m - i0);

			if (mr == MR) {
				/* a whole strip: Aᵀ's rows are A's columns, read in place
				 * (element (i, p) at A[(k0 + p)·lda + i0 + i]), no copy */
				for (size_t j = 0; j < n; j += NR)
					micro_strided(kc, A + k0 * lda + i0, lda, 1,
						      Bp + j / NR * bs + k0 * NR, C + i0 * ldc + j, ldc,
						      MR, min_size(NR, n - j), 1, 1, NULL, NULL);
				continue;
			}
			for (size_t p = 0; p < kc; p++)
				for (size_t i = 0; i < MR; i++)
					strip[p * MR + i] = i < mr ? A[(k0 + p) * lda + i0 + i] : 0;
			for (size_t j = 0; j < n; j += NR)
				micro(kc, strip, Bp + j / NR * bs + k0 * NR, C + i0 * ldc + j, ldc, mr,
				      min_size(NR, n - j), 1);
		}
	}
}

/*
 * kernel.c: the fast path's matrix products, written once and compiled for
 * each element type and vector width (as kernel_attend.c, the fused
 * attention, is):
 *
 *   -DMHA_F32 (float, else double) -DVB=64|32|16 -DSFX=f64_avx512 …
 *
 * The GEMM works on packed panels with a register-blocked micro-kernel
 * (MR rows by NR = 2 vectors, kernel_micro.h), the way BLAS libraries do;
 * e^x over an array; and the products on B packed once that the
 * backward's tiles run on.  Each output element is always summed in the
 * same order by one thread, so the result is the same bits whatever the
 * number of threads.
 */
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "base/progress.h"
#include "kernels/team.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_micro.h"

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

						if (mha_progress_stopped(g->progress))
							break; /* stopped: the rest skipped */
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

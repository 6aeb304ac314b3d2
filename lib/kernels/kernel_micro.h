/*
 * kernel_micro.h: what kernel.c (the matrix products) and kernel_attend.c
 * (the fused attention) are both made of: the element type and vector
 * width of the compiled copy, the blocking, the register-blocked
 * micro-kernel, the packing of A and B, the scratch allocations and e^x
 * (vexp.h).
 *
 * Not a header of its own: each of the two includes it once per compiled
 * copy (-DREAL… -DVB… -DSFX…, Makefile's kernel_variant), after isa.h and
 * kernel.h; everything here is static to that copy.
 */
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

static inline size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static inline size_t round_up(size_t a, size_t b)
{
	return (a + b - 1) / b * b;
}

/*
 * What alloc_aligned(count) asks the allocator for: count elements and a
 * vector's worth past them, in whole cache lines; SIZE_MAX when too large.
 * The kernels' *_bytes functions count with it, so the estimate is the
 * allocation.
 */
static inline size_t aligned_bytes(size_t count)
{
	if (count > (SIZE_MAX - 128) / sizeof(REAL))
		return SIZE_MAX;
	return round_up(count * sizeof(REAL) + 64, 64);
}

static inline void *alloc_aligned(size_t count)
{
	const size_t bytes = aligned_bytes(count);

	return bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
}

/* alloc_aligned for the large blocks (a product's panel of B, the packs of
 * K and V): from MHA_BIG_MIN mapped, whole 2 MiB pieces in huge pages
 * (pages.c); free_big(p, count) frees */
static inline void *alloc_big(size_t count)
{
	const size_t bytes = aligned_bytes(count);

	return bytes == SIZE_MAX ? NULL : mha_big_alloc(bytes);
}

static inline void free_big(void *p, size_t count)
{
	mha_big_free(p, aligned_bytes(count));
}

/* aligned_bytes with the allocator's slack, as mha_memory counts a block */
static inline size_t counted_bytes(size_t count)
{
	return mha_sat_add(aligned_bytes(count), MHA_ALLOC_SLACK);
}

/* min(threads, tasks), at least 1: a thread with nothing to do still allocates its scratch */
static inline int threads_for(int threads, size_t tasks)
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
static inline void micro(size_t kc, const REAL *restrict a, const REAL *restrict b, REAL *restrict c,
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
static inline void pack_a(REAL *dst, const REAL *A, size_t lda, size_t m, size_t k0, size_t kc)
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
static inline void pack_a_t(REAL *dst, const REAL *At, size_t lda, size_t m, size_t k0, size_t kc)
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
static inline void pack_b(REAL *dst, const REAL *B, size_t ldb, int tb, size_t k0, size_t kc, size_t j0,
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
#include "kernels/vexp.h"

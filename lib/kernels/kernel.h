/*
 * kernel.h: the fast path's kernels, inside the library only.
 *
 * kernel.c and kernel_attend.c are compiled once per element type (double,
 * float) and vector width (AVX-512, AVX2+FMA, NEON, baseline), each copy
 * with its own names;
 * machine.c picks the widest the processor runs.  The kernels take typeless
 * pointers so that one table can hold them all.
 */
#ifndef MHA_KERNEL_H
#define MHA_KERNEL_H

#include "base/rules.h"
#include "kernels/team.h"

#include <stddef.h>
#include <stdint.h>

/*
 * What the allocator may add to each block it hands out (glibc's header
 * and alignment): mha_memory counts it once per allocation.
 */
#define MHA_ALLOC_SLACK 64

/*
 * Blocks of MHA_BIG_MIN bytes or more as mappings of their own, kept when
 * freed for the next block of their length, their whole 2 MiB pieces in
 * transparent huge pages (pages.c: fewer page faults in a short run);
 * smaller ones from aligned_alloc.  64-byte aligned; NULL when out of
 * memory.  mha_big_free takes the size asked for and accepts NULL.
 */
#define MHA_BIG_MIN ((size_t)256 << 10)
void *mha_big_alloc(size_t bytes);
void mha_big_free(void *p, size_t bytes);

/* a + b and a·b, saturating at SIZE_MAX (mha_memory's arithmetic) */
static inline size_t mha_sat_add(size_t a, size_t b)
{
	return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static inline size_t mha_sat_mul(size_t a, size_t b)
{
	return a && b > SIZE_MAX / a ? SIZE_MAX : a * b;
}

/* a·b into *r, or 0 (*r untouched) when it does not fit in size_t */
static inline int mha_mul_fits(size_t a, size_t b, size_t *r)
{
	if (a && b > SIZE_MAX / a)
		return 0;
	*r = a * b;
	return 1;
}

/* C (m, n) = A (m, k) · B (k, n) + bias (n), row-major; bias may be NULL */
struct mha_gemm {
	size_t m, n, k;
	const void *A, *B, *bias;
	size_t lda, ldb, ldc;
	void *C;
	int threads;
	int failed; /* out: no memory for the packed panels */
	/* out: some entry of C's (m, n) was not finite (±inf or nan) when
	 * stored, found in the bias pass while C's block is in cache, so that
	 * the caller needs no pass of its own over C */
	int nonfinite;
	/* A given as Aᵀ: (k, m) rows of lda; B given as Bᵀ: (n, k) rows of ldb.
	 * Read in place while packing, no transposed copy: the same sums */
	int ta, tb;
	struct mha_progress *progress; /* told as blocks end (progress.h), or NULL */
};

/*
 * Every head of the attention, fused: for each query block, key blocks
 * with a running max and sum (online softmax), never an (n_q, n_kv)
 * matrix.  O (B·n_q, H·dv) receives the heads side by side.  A batch is B
 * sequences' rows one after another; the tasks are batch × heads × query
 * blocks, and sequence b obeys mha_rule_seq(&rule, b).
 */
struct mha_attend {
	size_t B, n_q, n_kv, H, G, dk, dv;
	const void *Q, *K, *V; /* (B·n_q, ldq), (B·n_kv, ldk), (B·n_kv, ldv) */
	size_t ldq, ldk, ldv, ldo;
	void *O;
	double scale, softcap;
	struct mha_rule rule;  /* which keys each query sees (rules.h) */
	int threads;           /* at most; never more than there are tasks */
	struct mha_progress *progress; /* told as tasks end (progress.h), or NULL */
	/* out */
	size_t blocked;        /* rows that saw no key */
	size_t first_blocked;  /* the first such, as (b·H + head)·n_q + row */
	int error;             /* 1: out of memory, 2: a value truly overflowed (rules.h) */
};

/*
 * gemm_bytes and attend_bytes: the most the kernel allocates at once for
 * that call (sizes and threads filled in), computed from the very block
 * sizes, paddings and thread count the kernel uses, allocator slack
 * included; SIZE_MAX when that does not fit.  mha_memory adds them up.
 */
struct mha_kernels {
	const char *name;
	void (*gemm)(struct mha_gemm *g);
	void (*attend)(struct mha_attend *a);
	size_t (*gemm_bytes)(const struct mha_gemm *g);
	size_t (*attend_bytes)(const struct mha_attend *a);
	/* y = e^x for x <= 0, n values, as the softmax computes it (test_lib checks it against libm) */
	void (*exps)(void *y, const void *x, size_t n);
};

#define MHA_DECLARE_KERNELS(sfx) \
	void mha_gemm_##sfx(struct mha_gemm *g); \
	void mha_attend_##sfx(struct mha_attend *a); \
	size_t mha_gemm_bytes_##sfx(const struct mha_gemm *g); \
	size_t mha_attend_bytes_##sfx(const struct mha_attend *a); \
	void mha_exps_##sfx(void *y, const void *x, size_t n)

MHA_DECLARE_KERNELS(f64_base);
MHA_DECLARE_KERNELS(f32_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_KERNELS(f64_avx2);
MHA_DECLARE_KERNELS(f32_avx2);
MHA_DECLARE_KERNELS(f64_avx512);
MHA_DECLARE_KERNELS(f32_avx512);
#endif
#if defined(MHA_ARM_KERNELS)
MHA_DECLARE_KERNELS(f64_neon);
MHA_DECLARE_KERNELS(f32_neon);
#endif

/* the kernels for doubles (is_f32 0) or floats, the widest this CPU runs */
const struct mha_kernels *mha_pick_kernels(int is_f32);

struct mha_config;

/* the threads a run may use: cfg->threads, else OMP_NUM_THREADS, else the CPUs allowed; 1 to MHA_MAX_THREADS */
int mha_threads(const struct mha_config *cfg);

/* One forward pass of either element type through the kernels. */
struct typed {
	size_t esize;      /* 8 (double) or 4 (float) */
	const struct mha_kernels *k;
	const void *x[3];  /* xq, xk, xv */
	const void *W[4];  /* W_Q, W_K, W_V, W_O */
	const void *b[4];  /* b_Q, b_K, b_V, b_O */
	struct mha_progress *progress; /* the call's (progress.h), or NULL */
};

struct mha_dims;
struct mha_observer;
struct mha_report;

/* the fast path, after mha.c has checked everything; obs only for doubles */
int mha_fast_forward(void *out, const struct typed *t, const struct mha_dims *d,
		     const struct mha_config *cfg, const struct mha_observer *obs,
		     struct mha_report *rep);

/*
 * The heads in groups (fast.c): how many key/value heads a group takes,
 * with their query heads, for these dims when an observer wants the stages
 * in wanted (every one, G, is the whole path: Q, K and V whole).  And what
 * the grouped path allocates at its peak, as mha_memory counts.
 */
size_t mha_stream_heads(const struct mha_dims *d, const struct mha_config *cfg, mha_stages wanted,
			size_t esize);
/*
 * For the unit tests and measurements, not the public interface (hidden in
 * libmha.so, reached by linking libmha.a): groups of per key/value heads
 * whenever no observer wants Q, K or V whole (0: all at once, the whole
 * path), or the policy again for per < 0.  Not thread-safe: set it
 * before the calls it is for.
 */
void mha_stream_force(long per);
size_t mha_stream_memory(const struct mha_dims *d, const struct mha_config *cfg, size_t per,
			 int f32);

/*
 * Products on a B packed once and used many times (backward.c's tiles):
 * mha_pack_b_SFX packs B (k, n), element (p, j) at src[p·rs + j·cs], into
 * strips of mha_packed_nr_SFX() columns (k·round_up(n, nr) elements, the
 * buffer 64-byte aligned); mha_gemm_packed_SFX(C, ldc, A, lda, bp, bs, m, n,
 * k, add) is C = A·B (add: C += A·B, each KC-long run's sum added to C as
 * the runs after the first are, so that a product split at multiples of
 * KC along k sums as the whole) on one thread, bp the first strip's first
 * row used, strips bs elements apart; mha_gemm_packed_tadd_SFX is C +=
 * Aᵀ·B, A stored (k, m) with lda.  Nothing allocated.
 */
/* the runs along k the GEMM kernels sum in registers before adding to C */
#define MHA_GEMM_KC 256
#define MHA_DECLARE_PACKED(sfx) \
	size_t mha_packed_nr_##sfx(void); \
	void mha_pack_b_##sfx(void *dst, const void *src, size_t rs, size_t cs, size_t k, size_t n); \
	void mha_gemm_packed_##sfx(void *C, size_t ldc, const void *A, size_t lda, const void *bp, \
				   size_t bs, size_t m, size_t n, size_t k, int add); \
	void mha_gemm_packed_tadd_##sfx(void *C, size_t ldc, const void *A, size_t lda, \
					const void *bp, size_t bs, size_t m, size_t n, size_t k)

MHA_DECLARE_PACKED(f64_base);
MHA_DECLARE_PACKED(f32_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_PACKED(f64_avx2);
MHA_DECLARE_PACKED(f32_avx2);
MHA_DECLARE_PACKED(f64_avx512);
MHA_DECLARE_PACKED(f32_avx512);
#endif
#if defined(MHA_ARM_KERNELS)
MHA_DECLARE_PACKED(f64_neon);
MHA_DECLARE_PACKED(f32_neon);
#endif

#endif

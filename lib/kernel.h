/*
 * kernel.h: the fast path's kernels, inside the library only.
 *
 * kernel.c is compiled once per element type (double, float) and vector
 * width (AVX-512, AVX2+FMA, baseline), each copy with its own names;
 * fast.c picks the widest the processor runs.  The kernels take typeless
 * pointers so that one table can hold them all.
 */
#ifndef MHA_KERNEL_H
#define MHA_KERNEL_H

#include <stddef.h>

/* C (m, n) = A (m, k) · B (k, n) + bias (n), row-major; bias may be NULL */
struct mha_gemm {
	size_t m, n, k;
	const void *A, *B, *bias;
	size_t lda, ldb, ldc;
	void *C;
	int threads;
	int failed; /* out: no memory for the packed panels */
};

/*
 * Every head of the attention, fused: for each query block, key blocks
 * with a running max and sum (online softmax), never an (n_q, n_kv)
 * matrix.  O (n_q, H·dv) receives the heads side by side.
 */
struct mha_attend {
	size_t n_q, n_kv, H, G, dk, dv;
	const void *Q, *K, *V; /* (n_q, ldq), (n_kv, ldk), (n_kv, ldv) */
	size_t ldq, ldk, ldv, ldo;
	void *O;
	double scale, softcap;
	int causal;            /* query i sees keys j <= i + offset */
	ptrdiff_t offset;
	size_t kv_len;         /* keys j >= kv_len are masked (n_kv when unset) */
	const unsigned char *allow; /* (n_q, n_kv) or (H, n_q, n_kv), or NULL */
	const double *bias;         /* the same, or NULL */
	int mask_per_head;
	int threads;
	/* out */
	size_t blocked;        /* rows that saw no key */
	size_t first_blocked;  /* the first such, as head·n_q + row */
	int error;             /* 1: out of memory, 2: a score overflowed */
};

struct mha_kernels {
	const char *name;
	void (*gemm)(struct mha_gemm *g);
	void (*attend)(struct mha_attend *a);
};

#define MHA_DECLARE_KERNELS(sfx) \
	void mha_gemm_##sfx(struct mha_gemm *g); \
	void mha_attend_##sfx(struct mha_attend *a)

MHA_DECLARE_KERNELS(f64_base);
MHA_DECLARE_KERNELS(f32_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_KERNELS(f64_avx2);
MHA_DECLARE_KERNELS(f32_avx2);
MHA_DECLARE_KERNELS(f64_avx512);
MHA_DECLARE_KERNELS(f32_avx512);
#endif

/* the kernels for doubles (is_f32 0) or floats, the widest this CPU runs */
const struct mha_kernels *mha_pick_kernels(int is_f32);

/* One forward pass of either element type through the kernels. */
struct typed {
	size_t esize;      /* 8 (double) or 4 (float) */
	const struct mha_kernels *k;
	const void *x[3];  /* xq, xk, xv */
	const void *W[4];  /* W_Q, W_K, W_V, W_O */
	const void *b[4];  /* b_Q, b_K, b_V, b_O */
};

struct mha_dims;
struct mha_config;
struct mha_observer;
struct mha_report;

/* the fast path, after mha.c has checked everything; obs only for doubles */
int mha_fast_forward(void *out, const struct typed *t, const struct mha_dims *d,
		     const struct mha_config *cfg, const struct mha_observer *obs,
		     struct mha_report *rep);

#endif

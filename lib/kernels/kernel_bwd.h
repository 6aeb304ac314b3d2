/*
 * kernel_bwd.h: the backward fast path's elementwise kernels (kernel_bwd.c),
 * inside the library only, one set per vector width; backward.c picks the
 * set matching the GEMM kernels mha_pick_kernels() chose, of its element
 * type.
 */
#ifndef MHA_KERNEL_BWD_H
#define MHA_KERNEL_BWD_H

#include <stddef.h>

/* the element type: float in a -DMHA_F32 build (kernel_bwd.c's f32 copies,
 * backward.c's float32 copy), else double */
#ifdef MHA_F32
typedef float bwd_real;
#else
typedef double bwd_real;
#endif

struct mha_bwd_kernels {
	/* pass 1, one query row (n keys): p = softmax(s·scale), the sink
	 * (may be NULL) in the sum, *lse its log-sum-exp; 1 when not finite */
	int (*softmax)(bwd_real *p, const bwd_real *s, size_t n, bwd_real scale, const double *sink,
		       bwd_real *lse);
	/* pass 1: dp = (p = 0 ? 0 : p·(dp − D))·scale, in place */
	void (*dscores)(bwd_real *dp, const bwd_real *p, size_t n, bwd_real D, bwd_real scale);
	/* pass 2, one key against n queries: p = exp(s·scale − L), dp = p·(dp − D)·scale; 1 when not finite */
	int (*keyrow)(bwd_real *p, bwd_real *dp, const bwd_real *s, const bwd_real *L, const bwd_real *D,
		      size_t n, bwd_real scale);
	/* the tiles' products on B packed once per head (kernel.h's mha_pack_b,
	 * mha_gemm_packed, mha_packed_nr: the GEMM kernel's, same vector width) */
	void (*pack_b)(void *dst, const void *src, size_t rs, size_t cs, size_t k, size_t n);
	void (*gemm_packed)(void *C, size_t ldc, const void *A, size_t lda, const void *bp,
			    size_t bs, size_t m, size_t n, size_t k, int add);
	size_t (*packed_nr)(void);
	void (*gemm_packed_tadd)(void *C, size_t ldc, const void *A, size_t lda, const void *bp,
				 size_t bs, size_t m, size_t n, size_t k);
};

#define MHA_DECLARE_BWD_KERNELS(sfx) \
	int mha_bwd_softmax_##sfx(bwd_real *p, const bwd_real *s, size_t n, bwd_real scale, \
				  const double *sink, bwd_real *lse); \
	void mha_bwd_dscores_##sfx(bwd_real *dp, const bwd_real *p, size_t n, bwd_real D, \
				   bwd_real scale); \
	int mha_bwd_keyrow_##sfx(bwd_real *p, bwd_real *dp, const bwd_real *s, const bwd_real *L, \
				 const bwd_real *D, size_t n, bwd_real scale)

#ifdef MHA_F32
MHA_DECLARE_BWD_KERNELS(f32_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_BWD_KERNELS(f32_avx2);
MHA_DECLARE_BWD_KERNELS(f32_avx512);
#endif
#if defined(MHA_ARM_KERNELS)
MHA_DECLARE_BWD_KERNELS(f32_neon);
#endif
#else
MHA_DECLARE_BWD_KERNELS(f64_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_BWD_KERNELS(f64_avx2);
MHA_DECLARE_BWD_KERNELS(f64_avx512);
#endif
#if defined(MHA_ARM_KERNELS)
MHA_DECLARE_BWD_KERNELS(f64_neon);
#endif
#endif

#endif

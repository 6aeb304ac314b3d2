/*
 * kernel_bwd.h: the backward fast path's elementwise kernels (kernel_bwd.c),
 * inside the library only, one set per vector width; backward.c picks the
 * set matching the GEMM kernels mha_pick_kernels(0) chose.
 */
#ifndef MHA_KERNEL_BWD_H
#define MHA_KERNEL_BWD_H

#include <stddef.h>

struct mha_bwd_kernels {
	/* pass 1, one query row (n keys): p = softmax(s·scale), the sink
	 * (may be NULL) in the sum, *lse its log-sum-exp; 1 when not finite */
	int (*softmax)(double *p, const double *s, size_t n, double scale, const double *sink,
		       double *lse);
	/* pass 1: dp = (p = 0 ? 0 : p·(dp − D))·scale, in place */
	void (*dscores)(double *dp, const double *p, size_t n, double D, double scale);
	/* pass 2, one key against n queries: p = exp(s·scale − L), dp = p·(dp − D)·scale; 1 when not finite */
	int (*keyrow)(double *p, double *dp, const double *s, const double *L, const double *D,
		      size_t n, double scale);
	/* the tiles' products on B packed once per head (kernel.h's mha_pack_b,
	 * mha_gemm_packed, mha_packed_nr: the GEMM kernel's, same vector width) */
	void (*pack_b)(void *dst, const void *src, size_t rs, size_t cs, size_t k, size_t n);
	void (*gemm_packed)(void *C, size_t ldc, const void *A, size_t lda, const void *bp,
			    size_t bs, size_t m, size_t n, size_t k);
	size_t (*packed_nr)(void);
	void (*gemm_packed_tadd)(void *C, size_t ldc, const void *A, size_t lda, const void *bp,
				 size_t bs, size_t m, size_t n, size_t k);
};

#define MHA_DECLARE_BWD_KERNELS(sfx) \
	int mha_bwd_softmax_##sfx(double *p, const double *s, size_t n, double scale, \
				  const double *sink, double *lse); \
	void mha_bwd_dscores_##sfx(double *dp, const double *p, size_t n, double D, double scale); \
	int mha_bwd_keyrow_##sfx(double *p, double *dp, const double *s, const double *L, \
				 const double *D, size_t n, double scale)

MHA_DECLARE_BWD_KERNELS(f64_base);
#if defined(MHA_X86_KERNELS)
MHA_DECLARE_BWD_KERNELS(f64_avx2);
MHA_DECLARE_BWD_KERNELS(f64_avx512);
#endif

#endif

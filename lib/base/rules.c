/*
 * rules.c: the one compiled copy of rules.h's recomputation of products
 * that overflowed on the way (mha_dot, mha_finish_product).
 *
 * Not inline on purpose: kernel.c is compiled with fused multiply-adds and
 * mha.c without, and the same inline code would round differently in each
 * (an FMA keeps a product's rounding error: big·big - big·big is then not
 * 0).  Every term is formed in a statement of its own, so that no compiler
 * fuses it into the sum.
 */
#include "base/rules.h"

#include <math.h>

double mha_dot_f64(const double *a, size_t sa, const double *b, size_t sb, size_t n, double bias)
{
	double amax = 0, bmax = 0, s = 0;
	int ea = 0, eb = 0, ec, e;

	for (size_t t = 0; t < n; t++) {
		amax = fmax(amax, fabs(a[t * sa]));
		bmax = fmax(bmax, fabs(b[t * sb]));
	}
	if (!isfinite(amax) || !isfinite(bmax) || !isfinite(bias))
		return NAN;
	if (amax > 0)
		(void)frexp(amax, &ea);
	if (bmax > 0)
		(void)frexp(bmax, &eb);
	/* each term below 1 in size, the bias below 2, whichever is larger */
	e = ea + eb;
	if (bias != 0) {
		(void)frexp(bias, &ec);
		if (ec > e)
			e = ec;
	}
	for (size_t t = 0; t < n; t++) {
		const double term = ldexp(a[t * sa], -ea) * ldexp(b[t * sb], -eb);

		s += ldexp(term, ea + eb - e);
	}
	return ldexp(s + ldexp(bias, -e), e);
}

double mha_dot_f32(const float *a, size_t sa, const float *b, size_t sb, size_t n, double bias)
{
	double s = 0;

	/* a product of floats is below 2^256: no double sum of them overflows */
	for (size_t t = 0; t < n; t++) {
		const double term = (double)a[t * sa] * (double)b[t * sb];

		s += term;
	}
	return s + bias;
}

int mha_finish_product(void *C, size_t m, size_t n, size_t ldc, const void *A, size_t lda,
		       const void *B, size_t ldb, const void *bias, size_t k, size_t esize)
{
	return mha_finish_strided(C, m, n, ldc, A, lda, 1, B, 1, ldb, bias, k, esize);
}

int mha_finish_strided(void *C, size_t m, size_t n, size_t ldc, const void *A, size_t a_row,
		       size_t a_k, const void *B, size_t b_col, size_t b_k, const void *bias,
		       size_t k, size_t esize)
{
	for (size_t i = 0; i < m; i++) {
		for (size_t j = 0; j < n; j++) {
			if (esize == 8) {
				double *c = (double *)C + i * ldc + j;
				const double *bs = bias;

				if (isfinite(*c))
					continue;
				if (!B)
					return -1;
				*c = mha_dot_f64((const double *)A + i * a_row, a_k,
						 (const double *)B + j * b_col, b_k, k, bs ? bs[j] : 0.0);
				if (!isfinite(*c))
					return -1;
			} else {
				float *c = (float *)C + i * ldc + j;
				const float *bs = bias;

				if (isfinite(*c))
					continue;
				if (!B)
					return -1;
				*c = (float)mha_dot_f32((const float *)A + i * a_row, a_k,
							(const float *)B + j * b_col, b_k, k,
							bs ? bs[j] : 0.0);
				if (!isfinite(*c))
					return -1;
			}
		}
	}
	return 0;
}

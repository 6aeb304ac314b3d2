/*
 * vexp.h: e^x a vector at a time for x <= 0 (and -inf), without a call,
 * shared by kernel_attend.c (the forward's softmax, through kernel_micro.h),
 * kernel.c (e^x over an array) and kernel_bwd.c (the backward's P).  Below the smallest normal result it gives 0, where libm's
 * exp would give a subnormal: those weights cannot change a sum that is at
 * least 1.  Within 2 ulp of libm's exp (test_exp_accuracy checks every
 * kernel's; 1 ulp at most on the values it tries).
 *
 * AVX-512: x = (16k + j)·ln2/16 + r with |r| <= ln2/32, e^x = 2^k ·
 * 2^(j/16) · e^r; 2^(j/16) comes from a table of 16 that fits one or two
 * registers (a permute picks each lane's entry), e^r − 1 from a polynomial
 * of degree 6 (f64, a Chebyshev fit) or 3 (f32, Taylor's), and 2^k from
 * scalef, whose zero-masking also gives the 0 below lo: about half the
 * operations of the plain form below, n = 4096 f64 4% faster in all.
 * AVX2: the same with a table of 8 (f32: one permute of 32-bit lanes)
 * or 4 (f64: two permutes within 128-bit halves and a blend), |r| <=
 * ln2/16 or ln2/8, polynomials of degree 4 and 8 (Chebyshev fits, as
 * e^r − 1 = r + r²·g(r)), and 2^k built in the exponent bits: 9 and 13
 * multiply-adds where the plain form takes 12 and 17, and a chain of
 * dependent ones half as long (AVX2 f64 forward 3% faster, on Zen 4).
 * The baseline has no such lookup: x = k·ln2 + r with |r| <= ln2/2, e^r
 * by its Taylor polynomial of degree 13 (f64) or 7 (f32), 2^k built in
 * the exponent bits.
 *
 * Not a header of its own: the includer defines REAL_IS_FLOAT, VB, the
 * vector types vec and ivec and splat() and pick() first, and it is
 * included once per compiled copy (per vector width and element type).
 */
#if VB == 64 && defined(__AVX512F__)
#include <immintrin.h>

static inline vec vexp_v(vec xv)
{
#if REAL_IS_FLOAT
	/* 2^(j/16), j = 0..15, each rounded to the nearest float */
	const __m512 tab = _mm512_setr_ps(0x1p+0f, 0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f,
					  0x1.306fe0p+0f, 0x1.3dea64p+0f, 0x1.4bfdaep+0f, 0x1.5ab07ep+0f,
					  0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f,
					  0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f);
	const __m512 lo = _mm512_set1_ps(-87.0f), shift = _mm512_set1_ps(0x1.8p23f);
	__m512 x = (__m512)xv, t, m, r, q, s;
	/* x <= lo (-inf too) gives 0, whatever the steps below make of it; nan stays nan */
	const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLE_UQ);

	/* m = round(x·16/ln2), its bits in t's low bits; ln2/16 in two parts, m·hi exact */
	t = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+4f), shift);
	m = _mm512_sub_ps(t, shift);
	r = _mm512_fnmadd_ps(m, _mm512_set1_ps(0x1.62ep-5f), x);
	r = _mm512_fnmadd_ps(m, _mm512_set1_ps(0x1.0bfbe8p-19f), r);
	/* e^r − 1 = r + r²/2 + r³/6 to 0.2 ulp here */
	q = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 6), _mm512_set1_ps(0.5f));
	q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.0f));
	q = _mm512_mul_ps(q, r);
	/* 2^(j/16), j = m mod 16: the permute reads an index's low 4 bits */
	s = _mm512_permutexvar_ps(_mm512_castps_si512(t), tab);
	/* 2^(j/16)·e^r, times 2^floor(m/16) */
	return (vec)_mm512_maskz_scalef_ps(keep, _mm512_fmadd_ps(s, q, s),
					   _mm512_mul_ps(m, _mm512_set1_ps(0x1p-4f)));
#else
	/* 2^(j/16), j = 0..15, each rounded to the nearest double */
	const __m512d tab0 = _mm512_setr_pd(0x1p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0,
					    0x1.2387a6e756238p+0, 0x1.306fe0a31b715p+0,
					    0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0,
					    0x1.5ab07dd485429p+0);
	const __m512d tab1 = _mm512_setr_pd(0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0,
					    0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
					    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0,
					    0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0);
	const __m512d lo = _mm512_set1_pd(-708.0), shift = _mm512_set1_pd(0x1.8p52);
	__m512d x = (__m512d)xv, t, m, r, g, q, s;
	/* x <= lo (-inf too) gives 0, whatever the steps below make of it; nan stays nan */
	const __mmask8 keep = _mm512_cmp_pd_mask(x, lo, _CMP_NLE_UQ);

	/* m = round(x·16/ln2), its bits in t's low bits; ln2/16 in two parts, m·hi exact */
	t = _mm512_fmadd_pd(x, _mm512_set1_pd(0x1.71547652b82fep+4), shift);
	m = _mm512_sub_pd(t, shift);
	r = _mm512_fnmadd_pd(m, _mm512_set1_pd(0x1.62e42feep-5), x);
	r = _mm512_fnmadd_pd(m, _mm512_set1_pd(0x1.a39ef35793c76p-37), r);
	/*
	 * e^r − 1 = r + r²·g(r), g a degree-4 fit of (e^r − 1 − r)/r² on
	 * |r| <= ln2/32 (Chebyshev, mpmath.chebyfit, coefficients rounded to
	 * double): 0.13 ulp of 1 at most, where Taylor needs degree 7
	 */
	g = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.6c17bb5ebddb4p-10), _mm512_set1_pd(0x1.11120b03cd855p-7));
	g = _mm512_fmadd_pd(g, r, _mm512_set1_pd(0x1.555555551946fp-5));
	g = _mm512_fmadd_pd(g, r, _mm512_set1_pd(0x1.55555554dd388p-3));
	g = _mm512_fmadd_pd(g, r, _mm512_set1_pd(0x1p-1));
	q = _mm512_fmadd_pd(_mm512_mul_pd(r, r), g, r);
	/* 2^(j/16), j = m mod 16: the permute reads an index's low 4 bits */
	s = _mm512_permutex2var_pd(tab0, _mm512_castpd_si512(t), tab1);
	/* 2^(j/16)·e^r, times 2^floor(m/16) */
	return (vec)_mm512_maskz_scalef_pd(keep, _mm512_fmadd_pd(s, q, s),
					   _mm512_mul_pd(m, _mm512_set1_pd(0x1p-4)));
#endif
}
#elif VB == 32 && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline vec vexp_v(vec xv)
{
#if REAL_IS_FLOAT
	/* 2^(j/8), j = 0..7, each rounded to the nearest float */
	const __m256 tab = _mm256_setr_ps(0x1p+0f, 0x1.172b84p+0f, 0x1.306fe0p+0f, 0x1.4bfdaep+0f,
					  0x1.6a09e6p+0f, 0x1.8ace54p+0f, 0x1.ae89fap+0f, 0x1.d5818ep+0f);
	const __m256 lo = _mm256_set1_ps(-87.0f), shift = _mm256_set1_ps(0x1.8p23f);
	const __m256 x = (__m256)xv;
	/* x <= lo (-inf too) gives 0, whatever the steps below make of it; nan stays nan */
	const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLE_UQ);
	__m256 t, m, r, g, q, s;
	__m256i ti, k;

	/* m = round(x·8/ln2), its bits in t's low bits; ln2/8 in two parts, m·hi exact */
	t = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+3f), shift);
	m = _mm256_sub_ps(t, shift);
	ti = _mm256_castps_si256(t);
	r = _mm256_fnmadd_ps(m, _mm256_set1_ps(0x1.62ep-4f), x);
	r = _mm256_fnmadd_ps(m, _mm256_set1_ps(0x1.0bfbe8p-18f), r);
	/* e^r − 1 = r + r²·g(r), g of degree 2 fitted on |r| <= ln2/16 */
	g = _mm256_fmadd_ps(r, _mm256_set1_ps(0x1.55596ep-5f), _mm256_set1_ps(0x1.555b7cp-3f));
	g = _mm256_fmadd_ps(g, r, _mm256_set1_ps(0.5f));
	q = _mm256_fmadd_ps(_mm256_mul_ps(r, r), g, r);
	/* 2^(j/8), j = m mod 8: the permute reads an index's low 3 bits; times
	 * 2^floor(m/8) built as a float's exponent */
	k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_srli_epi32(ti, 3), _mm256_set1_epi32(127)), 23);
	s = _mm256_mul_ps(_mm256_permutevar8x32_ps(tab, ti), _mm256_castsi256_ps(k));
	return (vec)_mm256_and_ps(keep, _mm256_fmadd_ps(s, q, s));
#else
	/* 2^(j/4), j = 0..3, each rounded to the nearest double: j's low bit
	 * picks within a 128-bit half, its high bit between the halves */
	const __m256d lo2 = _mm256_setr_pd(0x1p+0, 0x1.306fe0a31b715p+0, 0x1p+0, 0x1.306fe0a31b715p+0);
	const __m256d hi2 = _mm256_setr_pd(0x1.6a09e667f3bcdp+0, 0x1.ae89f995ad3adp+0,
					   0x1.6a09e667f3bcdp+0, 0x1.ae89f995ad3adp+0);
	const __m256d lo = _mm256_set1_pd(-708.0), shift = _mm256_set1_pd(0x1.8p52);
	const __m256d x = (__m256d)xv;
	/* x <= lo (-inf too) gives 0, whatever the steps below make of it; nan stays nan */
	const __m256d keep = _mm256_cmp_pd(x, lo, _CMP_NLE_UQ);
	__m256d t, m, r, g, q, s;
	__m256i ti, k;

	/* m = round(x·4/ln2), its bits in t's low bits; ln2/4 in two parts, m·hi exact */
	t = _mm256_fmadd_pd(x, _mm256_set1_pd(0x1.71547652b82fep+2), shift);
	m = _mm256_sub_pd(t, shift);
	ti = _mm256_castpd_si256(t);
	r = _mm256_fnmadd_pd(m, _mm256_set1_pd(0x1.62e42feep-3), x);
	r = _mm256_fnmadd_pd(m, _mm256_set1_pd(0x1.a39ef35793c76p-35), r);
	/* e^r − 1 = r + r²·g(r), g of degree 6 fitted on |r| <= ln2/8 (Chebyshev,
	 * mpmath.chebyfit, coefficients rounded to double) */
	g = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.a0298e7bb2eabp-16), _mm256_set1_pd(0x1.a02d71c4b5e0dp-13));
	g = _mm256_fmadd_pd(g, r, _mm256_set1_pd(0x1.6c16c13051822p-10));
	g = _mm256_fmadd_pd(g, r, _mm256_set1_pd(0x1.111110c65a277p-7));
	g = _mm256_fmadd_pd(g, r, _mm256_set1_pd(0x1.5555555555c83p-5));
	g = _mm256_fmadd_pd(g, r, _mm256_set1_pd(0x1.5555555556748p-3));
	g = _mm256_fmadd_pd(g, r, _mm256_set1_pd(0.5));
	q = _mm256_fmadd_pd(_mm256_mul_pd(r, r), g, r);
	/* 2^(j/4), j = m mod 4 (permutevar_pd reads an index's bit 1, blendv
	 * the sign bit); times 2^floor(m/4) built as a double's exponent */
	{
		const __m256i j1 = _mm256_add_epi64(ti, ti);

		s = _mm256_blendv_pd(_mm256_permutevar_pd(lo2, j1), _mm256_permutevar_pd(hi2, j1),
				     _mm256_castsi256_pd(_mm256_slli_epi64(ti, 62)));
	}
	k = _mm256_slli_epi64(_mm256_add_epi64(_mm256_srli_epi64(ti, 2), _mm256_set1_epi64x(1023)), 52);
	s = _mm256_mul_pd(s, _mm256_castsi256_pd(k));
	return (vec)_mm256_and_pd(keep, _mm256_fmadd_pd(s, q, s));
#endif
}
#else
static inline vec vexp_v(vec x)
{
#if REAL_IS_FLOAT
	const vec lo = splat(-87.0f), shift = splat(0x1.8p23f);
	const ivec under = x <= lo;
	vec t, k, r, p;

	x = pick(under, lo, x);
	t = x * 0x1.715476p+0f + shift;
	k = t - shift;
	r = (x - k * 0x1.62e4p-1f) - k * 0x1.7f7d1cp-20f;
	p = splat(1.0f / 5040);
	p = p * r + 1.0f / 720;
	p = p * r + 1.0f / 120;
	p = p * r + 1.0f / 24;
	p = p * r + 1.0f / 6;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	/* 2^k, or 0 where x was below lo (p is finite there: x was clamped) */
	return p * (vec)((((ivec)t + 127) << 23) & ~under);
#else
	const vec lo = splat(-708.0), shift = splat(0x1.8p52);
	const ivec under = x <= lo;
	vec t, k, r, p;

	x = pick(under, lo, x);
	t = x * 0x1.71547652b82fep+0 + shift;
	k = t - shift;
	r = (x - k * 0x1.62e42fefa3800p-1) - k * 0x1.ef35793c76730p-45;
	p = splat(1.0 / 6227020800.0);
	p = p * r + 1.0 / 479001600.0;
	p = p * r + 1.0 / 39916800.0;
	p = p * r + 1.0 / 3628800.0;
	p = p * r + 1.0 / 362880.0;
	p = p * r + 1.0 / 40320.0;
	p = p * r + 1.0 / 5040.0;
	p = p * r + 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r + 1.0;
	/* 2^k, or 0 where x was below lo (p is finite there: x was clamped) */
	return p * (vec)((((ivec)t + 1023) << 52) & ~under);
#endif
}
#endif

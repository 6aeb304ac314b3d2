/*
 * kernel_bwd.c: the elementwise steps of the backward fast path
 * (backward.c's fast_query_block and fast_key_block), vectorised; compiled
 * once per element type and vector width as kernel.c is (-DMHA_F32 for
 * floats, -DVB=64|32|16 -DSFX=f64_avx512 …), each copy with its own names.  Only the common case comes here: no
 * softcap, no mask term, no ALiBi, every score finite; a function answers
 * 1, having written nothing, when a value is not finite, and backward.c
 * then works the row one key at a time as before.  Not the products
 * (those are the GEMM kernel's) and nothing that allocates.
 *
 * Each result is summed in one fixed order for a given vector width, so
 * the bits are the same for any number of threads.  Built as kernel.c is,
 * multiply-adds fused, but for s·scale (scaled(), below).
 */
#include "kernels/isa.h"
#include "kernels/kernel_bwd.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* the element type: float with -DMHA_F32 (kernel_bwd.h's bwd_real), else double */
typedef bwd_real real;
#ifdef MHA_F32
#define REAL_IS_FLOAT 1
typedef int32_t ivec __attribute__((vector_size(VB), aligned(4)));
/* e^x overflows a float past 88.7: a score past its row's L by more is rounding gone wild */
#define EXP_ARG_MAX 80.0f
#else
#define REAL_IS_FLOAT 0
typedef int64_t ivec __attribute__((vector_size(VB), aligned(8)));
#define EXP_ARG_MAX 700.0
#endif
typedef real vec __attribute__((vector_size(VB), aligned(sizeof(real))));
/*
 * the same vector read from and written to any element's address: one
 * unaligned load or store of the whole width.  Not memcpy: GCC 12 copies
 * 32 bytes as two 16-byte halves, through the stack, and two stores read
 * back as one load cannot be forwarded (AVX2's elementwise steps ran about
 * twenty times slower than AVX-512's)
 */
typedef real uvec __attribute__((vector_size(VB), aligned(sizeof(real)), may_alias));
#define VL ((size_t)(VB / sizeof(real)))

static inline vec splat(real x)
{
	return (vec){ 0 } + x;
}

static inline vec load(const real *p)
{
	return *(const uvec *)p;
}

static inline void store(real *p, vec v)
{
	*(uvec *)p = v;
}

/* m ? a : b, lane by lane */
static inline vec pick(ivec m, vec a, vec b)
{
	return (vec)((m & (ivec)a) | (~m & (ivec)b));
}

/* every lane finite: x − x is 0 exactly then (NaN for ±inf and NaN) */
static inline int all_finite(vec x)
{
	const ivec ok = (x - x) == splat(0);

	for (size_t l = 0; l < VL; l++)
		if (!ok[l])
			return 0;
	return 1;
}

/*
 * every lane finite and at most EXP_ARG_MAX (700, floats 80: a score past
 * its row's log-sum-exp by more is the scores' rounding gone wild: exp() there overflows, which
 * the one-at-a-time code reports, and vexp's polynomial would not)
 */
static inline int in_range(vec x)
{
	const ivec ok = x <= splat(EXP_ARG_MAX);

	for (size_t l = 0; l < VL; l++)
		if (!ok[l])
			return 0;
	return all_finite(x);
}

/*
 * x·scale rounded to the element type, never fused with what follows: the
 * empty asm makes the compiler hold the product in a register, so that
 * s·scale − L is taken from s·scale rounded, as L was (exact, it could lie
 * above L by far for a huge score).  The rest of the arithmetic here may
 * fuse (the Makefile builds this file as kernel.c, contracting).
 */
static inline vec scaled(vec x, real scale)
{
	x *= scale;
	__asm__("" : "+x"(x));
	return x;
}

/* e^x, x <= about 0, as the forward takes it (vexp.h) */
#include "kernels/vexp.h"

/* the tail of a row (fewer than VL) in a padded vector: pad fills the rest */
static inline vec load_tail(const real *p, size_t n, real pad)
{
	vec v = splat(pad);

	for (size_t l = 0; l < n; l++)
		v[l] = p[l];
	return v;
}

static inline void store_tail(real *p, vec v, size_t n)
{
	for (size_t l = 0; l < n; l++)
		p[l] = v[l];
}

/*
 * Pass 1, one query row: p (n) = softmax(s·scale) over the row's keys, the
 * sink's term (sink not NULL) in the sum; *lse = m + log(sum).  1 (and p
 * untouched) when some s·scale is not finite.
 */
int NAME(mha_bwd_softmax_)(real *p, const real *s, size_t n, real scale, const double *sink,
			   real *lse)
{
	vec vm4[4] = { splat(-INFINITY), splat(-INFINITY), splat(-INFINITY), splat(-INFINITY) };
	vec vl = splat(0);
	ivec ok[4] = { ~(ivec){ 0 }, ~(ivec){ 0 }, ~(ivec){ 0 }, ~(ivec){ 0 } };
	real m = -INFINITY, l = 0.0;
	size_t j = 0;

	if (!n)
		return 1;
	/* x − x is 0 when x is finite, NaN when not (x rounded first: fused,
	 * s·scale − s·scale would be the product's rounding error): one test at
	 * the end.  Four maxima and checks side by side (short chains); the max
	 * is exact in any order */
	for (; j + 4 * VL <= n; j += 4 * VL) {
		const vec x0 = scaled(load(s + j), scale), x1 = scaled(load(s + j + VL), scale);
		const vec x2 = scaled(load(s + j + 2 * VL), scale);
		const vec x3 = scaled(load(s + j + 3 * VL), scale);

		ok[0] &= (x0 - x0) == splat(0);
		ok[1] &= (x1 - x1) == splat(0);
		ok[2] &= (x2 - x2) == splat(0);
		ok[3] &= (x3 - x3) == splat(0);
		vm4[0] = pick(x0 > vm4[0], x0, vm4[0]);
		vm4[1] = pick(x1 > vm4[1], x1, vm4[1]);
		vm4[2] = pick(x2 > vm4[2], x2, vm4[2]);
		vm4[3] = pick(x3 > vm4[3], x3, vm4[3]);
	}
	for (; j + VL <= n; j += VL) {
		const vec x = scaled(load(s + j), scale);

		ok[0] &= (x - x) == splat(0);
		vm4[0] = pick(x > vm4[0], x, vm4[0]);
	}
	for (int u = 0; u < 4; u++) {
		for (size_t t = 0; t < VL; t++) {
			if (!ok[u][t])
				return 1;
			if (vm4[u][t] > m)
				m = vm4[u][t];
		}
	}
	for (; j < n; j++) {
		const real x = s[j] * scale;

		if (!isfinite(x))
			return 1;
		if (x > m)
			m = x;
	}
	if (sink && *sink > m)
		m = *sink;
	/* subtract the row max: exp() of a large score would overflow.  Four
	 * vectors a turn: their polynomials are independent chains, which the
	 * processor then works side by side; the sum in the same order */
	for (j = 0; j + 4 * VL <= n; j += 4 * VL) {
		const vec e0 = vexp_v(scaled(load(s + j), scale) - m);
		const vec e1 = vexp_v(scaled(load(s + j + VL), scale) - m);
		const vec e2 = vexp_v(scaled(load(s + j + 2 * VL), scale) - m);
		const vec e3 = vexp_v(scaled(load(s + j + 3 * VL), scale) - m);

		store(p + j, e0);
		store(p + j + VL, e1);
		store(p + j + 2 * VL, e2);
		store(p + j + 3 * VL, e3);
		vl += e0;
		vl += e1;
		vl += e2;
		vl += e3;
	}
	for (; j + VL <= n; j += VL) {
		const vec e = vexp_v(scaled(load(s + j), scale) - m);

		store(p + j, e);
		vl += e;
	}
	if (j < n) {
		const vec e = vexp_v(scaled(load_tail(s + j, n - j, 0.0), scale) - m);

		store_tail(p + j, e, n - j);
		for (size_t t = 0; t < n - j; t++)
			l += e[t];
	}
	for (size_t t = 0; t < VL; t++)
		l += vl[t];
	if (sink)
		l += exp(*sink - m);
	/* times 1/l, not over l: a vector division costs ten multiplications,
	 * and the two differ by a rounding (the plain path divides) */
	{
		const real r = 1 / l;

		for (j = 0; j + VL <= n; j += VL)
			store(p + j, load(p + j) * r);
		for (; j < n; j++)
			p[j] *= r;
	}
	*lse = m + log(l);
	return 0;
}

/* pass 1: dp (n) = (p = 0 ? 0 : p·(dp − D))·scale, in place */
void NAME(mha_bwd_dscores_)(real *dp, const real *p, size_t n, real D, real scale)
{
	size_t j = 0;

	for (; j + VL <= n; j += VL) {
		const vec pv = load(p + j);

		store(dp + j, pick(pv == splat(0), splat(0), pv * (load(dp + j) - D)) * scale);
	}
	for (; j < n; j++)
		dp[j] = (p[j] == 0.0 ? 0.0 : p[j] * (dp[j] - D)) * scale;
}

/*
 * Pass 2, one key against n queries that all see it: p = exp(s·scale − L),
 * dp = p·(dp − D)·scale, L and D the queries' (n each).  1 (nothing
 * written) when some s·scale − L is not finite.
 */
int NAME(mha_bwd_keyrow_)(real *p, real *dp, const real *s, const real *L, const real *D,
			  size_t n, real scale)
{
	size_t j = 0;

	for (; j + VL <= n; j += VL)
		if (!in_range(scaled(load(s + j), scale) - load(L + j)))
			return 1;
	if (j < n &&
	    !in_range(scaled(load_tail(s + j, n - j, 0.0), scale) - load_tail(L + j, n - j, 0.0)))
		return 1;
	for (j = 0; j + VL <= n; j += VL) {
		const vec e = vexp_v(scaled(load(s + j), scale) - load(L + j));

		store(p + j, e);
		store(dp + j, e * (load(dp + j) - load(D + j)) * scale);
	}
	if (j < n) {
		const size_t r = n - j;
		const vec e = vexp_v(scaled(load_tail(s + j, r, 0.0), scale) - load_tail(L + j, r, 0.0));

		store_tail(p + j, e, r);
		store_tail(dp + j, e * (load_tail(dp + j, r, 0.0) - load_tail(D + j, r, 0.0)) * scale, r);
	}
	return 0;
}

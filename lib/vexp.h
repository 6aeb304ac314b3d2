/*
 * vexp.h: e^x a vector at a time for x <= 0 (and -inf), without a call,
 * shared by kernel.c (the forward's softmax) and kernel_bwd.c (the
 * backward's P): x = k·ln 2 + r with |r| <= ln2/2, e^r by its Taylor
 * polynomial (to 1 ulp or so), 2^k built in the exponent bits.  Below the
 * smallest normal result it gives 0, where libm's exp would give a
 * subnormal: those weights cannot change a sum that is at least 1.
 *
 * Not a header of its own: the includer defines REAL_IS_FLOAT, the vector
 * types vec and ivec and splat() and pick() first, and it is included once
 * per compiled copy (per vector width and element type).
 */
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

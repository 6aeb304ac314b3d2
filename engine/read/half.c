/*
 * half.c: 16-bit floats as doubles (half.h).
 */
#include "read/half.h"

#include <math.h>
#include <string.h>

double half_to_double(uint16_t h)
{
	const int e = (h >> 10) & 0x1f;
	const unsigned mant = h & 0x3ff;
	double v;

	if (e == 0)
		v = ldexp((double)mant, -24); /* subnormal, or zero */
	else if (e == 31)
		v = mant ? NAN : INFINITY;
	else
		v = ldexp((double)(mant | 0x400), e - 25);
	return (h & 0x8000) ? -v : v;
}

double f8_e4m3_to_double(uint8_t b)
{
	const int e = (b >> 3) & 0xf;
	const unsigned mant = b & 0x7;
	double v;

	if (e == 15 && mant == 7)
		v = NAN;
	else if (e == 0)
		v = ldexp((double)mant, -9); /* subnormal: mant/8 * 2^-6 */
	else
		v = ldexp((double)(mant | 0x8), e - 10);
	return (b & 0x80) ? -v : v;
}

double f8_e5m2_to_double(uint8_t b)
{
	/* float16's top byte */
	return half_to_double((uint16_t)(b << 8));
}

double bfloat16_to_double(uint16_t h)
{
	const uint32_t w = (uint32_t)h << 16;
	float x;

	memcpy(&x, &w, sizeof(x));
	return x;
}

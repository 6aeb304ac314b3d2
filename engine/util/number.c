/*
 * number.c: numbers as text (number.h): for reading, and the shortest text
 * that reads back exactly.  The shortest:
 *
 * printf's %.17g is correctly rounded but slow, and the shortest form
 * needs up to three of them and as many strtod calls.  Here the digits
 * come from long double arithmetic instead, which has 11 bits beyond a
 * double's: a value's first p digits are rounded from it (printf does
 * those few that fall too near a tie), and the candidate with 15, 16 or 17
 * digits (6 to 9 for a float) is accepted when it lies clearly inside the
 * interval of numbers that read back as v, rejected when clearly outside,
 * and settled by strtod when too close to call.  The text is the one
 * printf's %.{p}g gives for the first p that reads back.
 */
#include "util/number.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* printf's correctly rounded digits, checked by strtod: slow and sure */
static void shortest_by_printf(char *buf, size_t size, double v, int is_f32)
{
	/* the fewest digits tried always survive when the shortest form has
	 * that few or fewer, and %g drops the trailing zeros */
	for (int p = is_f32 ? 6 : 15; p <= (is_f32 ? 9 : 17); p++) {
		snprintf(buf, size, "%.*g", p, v);
		if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
			return;
	}
}

/* 10^e for -360 <= e <= 360 as long double, computed once */
static long double ten_to(int e)
{
	static long double table[721];
	static int ready;

	if (!ready) {
		for (int i = 0; i <= 720; i++)
			table[i] = powl(10.0L, (long double)(i - 360));
		ready = 1;
	}
	return table[e + 360];
}

static const uint64_t pow10_u64[] = {
	1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
	100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
	10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
	100000000000000000ULL,
};

/* c (p digits) times 10^(x - p + 1), written as printf's %.{p}g writes it */
static void write_g(char *buf, size_t size, int negative, uint64_t c, int p, int x)
{
	char digits[24], *o = buf;
	int n = p;

	for (int i = p - 1; i >= 0; i--, c /= 10)
		digits[i] = (char)('0' + c % 10);
	while (n > 1 && digits[n - 1] == '0')
		n--; /* %g drops trailing zeros */
	if (negative)
		*o++ = '-';
	if (x < -4 || x >= p) {
		*o++ = digits[0];
		if (n > 1) {
			*o++ = '.';
			memcpy(o, digits + 1, (size_t)n - 1);
			o += n - 1;
		}
		snprintf(o, size - (size_t)(o - buf), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
		return;
	}
	if (x < 0) {
		*o++ = '0';
		*o++ = '.';
		for (int i = 0; i < -x - 1; i++)
			*o++ = '0';
		memcpy(o, digits, (size_t)n);
		o += n;
	} else {
		for (int i = 0; i <= x; i++)
			*o++ = i < n ? digits[i] : '0';
		if (n > x + 1) {
			*o++ = '.';
			memcpy(o, digits + x + 1, (size_t)(n - x - 1));
			o += n - x - 1;
		}
	}
	*o = '\0';
}

/*
 * Whether long double really carries 64 bits here: the type may be wider
 * than double on paper and not at run time (x87 precision set to 53 bits,
 * or an emulator such as valgrind's).  Asked once.
 */
static int long_double_is_wide(void)
{
	static int known, wide;

	if (!known) {
#if LDBL_MANT_DIG >= 64
		volatile long double one = 1, tiny = LDBL_EPSILON;

		wide = one + tiny != one && LDBL_EPSILON <= 0x1p-63L;
#endif
		known = 1;
	}
	return wide;
}

static void shortest(char *buf, size_t size, double v, int is_f32)
{
	const int pmin = is_f32 ? 6 : 15, pmax = is_f32 ? 9 : 17;
	const double a = fabs(v);
	long double s, lo, hi;
	double up, dn;
	int e2, k;

	if (!(a > 0) || !isfinite(a) || size < 32 || !long_double_is_wide()) {
		shortest_by_printf(buf, size, v, is_f32);
		return;
	}
	/* s: a scaled to pmax digits before the point; k: the first digit's exponent */
	frexp(a, &e2);
	k = (int)floor((e2 - 1) * 0.30102999566398120); /* floor(log10(a)), or one less */
	s = (long double)a * ten_to(pmax - 1 - k);
	if (s >= (long double)pow10_u64[pmax]) {
		k++;
		s = (long double)a * ten_to(pmax - 1 - k);
	}
	/* what reads back as a lies between the midpoints to its neighbours */
	up = is_f32 ? nextafterf((float)a, INFINITY) : nextafter(a, INFINITY);
	dn = is_f32 ? nextafterf((float)a, 0) : nextafter(a, 0);
	lo = ((long double)a + dn) / 2;
	/* past the largest finite number, reading rounds to infinity at the mirror point */
	hi = isinf(up) ? (long double)a + ((long double)a - lo) : ((long double)a + up) / 2;
	for (int p = pmin; p <= pmax; p++) {
		const long double t = s / (long double)pow10_u64[pmax - p];
		const long double whole = floorl(t), frac = t - whole;
		long double val, margin;
		uint64_t c;
		int x = k;

		if (fabsl(frac - 0.5L) < 0.01L) {
			/* too near a tie to round here: printf rounds it rightly */
			snprintf(buf, size, "%.*g", p, v);
			if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
				return;
			continue;
		}
		c = (uint64_t)whole + (frac > 0.5L);
		if (c >= pow10_u64[p]) {
			c /= 10;
			x++;
		}
		val = (long double)c * ten_to(x - p + 1);
		margin = val * 1e-18L; /* far above the arithmetic's error, far below the interval */
		if (val < lo - margin || val > hi + margin)
			continue;
		write_g(buf, size, v < 0, c, p, x);
		if ((val > lo + margin && val < hi - margin) ||
		    (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v))
			return;
	}
	shortest_by_printf(buf, size, v, is_f32);
}

void format_shortest(char *buf, size_t size, double v)
{
	shortest(buf, size, v, 0);
}

void format_shortest_f32(char *buf, size_t size, double v)
{
	shortest(buf, size, v, 1);
}

void format_number(char *buf, size_t size, double v, int precision)
{
	if (isnan(v))
		snprintf(buf, size, "nan");
	else if (isinf(v))
		snprintf(buf, size, v < 0 ? "-inf" : "inf");
	else
		snprintf(buf, size, "%.*g", precision, v == 0 ? 0.0 : v); /* no "-0" */
}

/* a value as JSON and CSV write it: shortest exact text, or the non-finite spellings */
void number_exact(char *buf, size_t size, double v, int is_f32)
{
	if (isnan(v))
		snprintf(buf, size, "nan");
	else if (isinf(v))
		snprintf(buf, size, v < 0 ? "-inf" : "inf");
	else if (is_f32)
		format_shortest_f32(buf, size, v);
	else
		format_shortest(buf, size, v);
}

/* --json-nonfinite python: NaN, Infinity and -Infinity, as Python's json writes them */
static int bare_nonfinite;

int json_bare_nonfinite(int on)
{
	const int was = bare_nonfinite;

	bare_nonfinite = on;
	return was;
}

void json_number(FILE *fp, double v, int is_f32)
{
	char buf[40];

	if (isnan(v)) {
		fputs(bare_nonfinite ? "NaN" : "\"nan\"", fp);
	} else if (isinf(v)) {
		fputs(bare_nonfinite ? (v < 0 ? "-Infinity" : "Infinity")
				     : (v < 0 ? "\"-inf\"" : "\"inf\""), fp);
	} else {
		number_exact(buf, sizeof(buf), v, is_f32);
		fputs(buf, fp);
	}
}

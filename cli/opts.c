/*
 * opts.c: what every command's option parsing shares: whole numbers,
 * numbers, sizes and offsets as values, and getopt_long's complaints,
 * worded the same way everywhere.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int opt_count(const char *cmd, const char *opt, const char *arg, unsigned long long max,
	      size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (*arg == '-' || *arg == '+' || *arg == '\0')
		goto bad;
	v = strtoull(arg, &end, 10);
	if (errno || *end || v == 0 || v > max || v > SIZE_MAX)
		goto bad;
	*out = (size_t)v;
	return 0;
bad:
	if (max >= SIZE_MAX / 2)
		usage_error(cmd, "%s expects a whole number of at least 1, not '%s'", opt, arg);
	else
		usage_error(cmd, "%s expects a whole number from 1 to %llu, not '%s'", opt, max, arg);
	return -1;
}

void opt_error(const char *cmd, int c, char **argv)
{
	if (c == ':')
		usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
	else if (optopt)
		usage_error(cmd, "unknown option '-%c'", optopt);
	else
		usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
}

int opt_number(const char *arg, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	/* ERANGE is overflow (then infinite) or underflow: a subnormal such as
	 * 4.9e-324 is a finite number, only one that rounds to 0 is refused */
	return end != arg && !*end && isfinite(*out) && (errno != ERANGE || *out != 0);
}

size_t opt_memory_default(void)
{
	const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);

	if (pages <= 0 || page <= 0 || (unsigned long)pages > SIZE_MAX / (unsigned long)page)
		return SIZE_MAX;
	return (size_t)pages / 4 * 3 * (size_t)page;
}

int opt_bytes(const char *arg, size_t *out)
{
	static const char *const units = "KMGT";
	char *end;
	double v, mult = 1;

	if (!strcmp(arg, "none") || !strcmp(arg, "unlimited")) {
		*out = SIZE_MAX;
		return 0;
	}
	errno = 0;
	v = strtod(arg, &end);
	if (end == arg || errno || !(v > 0) || !isfinite(v))
		return -1;
	if (*end) {
		const char *u = strchr(units, *end & ~0x20);

		if (!u || !*u)
			return -1;
		mult = ldexp(1.0, 10 * (int)(u - units + 1));
		end++;
		if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") || !strcmp(end, "b"))
			end += strlen(end);
		if (*end)
			return -1;
	}
	v *= mult;
	*out = v >= (double)SIZE_MAX ? SIZE_MAX : (size_t)v;
	return *out ? 0 : -1;
}

int opt_offset(const char *arg, ptrdiff_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (end == arg || *end || errno || v < -(long long)(PTRDIFF_MAX / 2) ||
	    v > (long long)(PTRDIFF_MAX / 2))
		return 0;
	*out = (ptrdiff_t)v;
	return 1;
}

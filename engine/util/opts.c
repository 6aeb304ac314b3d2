/*
 * opts.c: what every command's option parsing shares: whole numbers,
 * numbers, sizes and offsets as values, getopt_long's complaints worded
 * the same way everywhere, and the "did you mean" for a name that is
 * nearly right.
 */
#include "util/msg.h"
#include "util/opts.h"

#include <ctype.h>
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

/* 0 for the same letter (case aside), 1 for look-alikes (0 and O, 1 and l),
 * else 2: a whole edit */
static size_t sub_cost(int a, int b)
{
	static const char *const alike[] = { "0o", "1li", "5s", "8b", "2z" };

	a = tolower(a);
	b = tolower(b);
	if (a == b)
		return 0;
	for (size_t i = 0; i < sizeof(alike) / sizeof(alike[0]); i++)
		if (strchr(alike[i], a) && strchr(alike[i], b))
			return 1;
	return 2;
}

/*
 * Edit distance between a and b in half edits: inserting, deleting,
 * changing a character or swapping two neighbours (--casual for --causal)
 * costs 2, changing it for a look-alike (W_0 for W_O) 1.  Names are
 * short: past 63 bytes they are not compared (SIZE_MAX).
 */
static size_t distance(const char *a, const char *b)
{
	enum { MAX = 64 };
	size_t d[MAX][MAX];
	const size_t n = strlen(a), m = strlen(b);

	if (n >= MAX || m >= MAX)
		return SIZE_MAX;
	for (size_t i = 0; i <= n; i++)
		d[i][0] = 2 * i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = 2 * j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t v = d[i - 1][j - 1] + sub_cost(a[i - 1], b[j - 1]);

			if (d[i - 1][j] + 2 < v)
				v = d[i - 1][j] + 2;
			if (d[i][j - 1] + 2 < v)
				v = d[i][j - 1] + 2;
			if (i > 1 && j > 1 && !sub_cost(a[i - 1], b[j - 2]) &&
			    !sub_cost(a[i - 2], b[j - 1]) && d[i - 2][j - 2] + 2 < v)
				v = d[i - 2][j - 2] + 2;
			d[i][j] = v;
		}
	return d[n][m];
}

const char *closest_name(const char *word, const char *const *names, size_t n)
{
	/* a typo, not another word: one edit in a short name, two in a longer
	 * one, three past ten characters (in half edits) */
	const size_t len = strlen(word), most = len <= 4 ? 2 : len <= 10 ? 4 : 6;
	const char *best = NULL;
	size_t best_d = SIZE_MAX, ties = 0;

	for (size_t i = 0; i < n; i++) {
		const size_t d = strcmp(word, names[i]) ? distance(word, names[i]) : SIZE_MAX;

		if (d < best_d) {
			best_d = d;
			best = names[i];
			ties = 0;
		} else if (d == best_d && best && strcmp(best, names[i])) {
			ties++; /* another name as near (the same name twice is one) */
		}
	}
	/* two names as near: no guess */
	return best_d <= most && !ties ? best : NULL;
}

/* the long option closest to arg ("--casual" or "--casual=1"), or NULL */
static const char *closest_option(const char *arg, const struct option *longopts)
{
	const char *names[128];
	char word[64];
	size_t n = 0, len;

	if (!longopts || strncmp(arg, "--", 2))
		return NULL;
	arg += 2;
	len = strcspn(arg, "=");
	if (len >= sizeof(word))
		return NULL;
	memcpy(word, arg, len);
	word[len] = '\0';
	for (; longopts[n].name && n < sizeof(names) / sizeof(names[0]); n++)
		names[n] = longopts[n].name;
	return closest_name(word, names, n);
}

void opt_error(const char *cmd, int c, char **argv, const struct option *longopts)
{
	const char *near;

	if (c == ':')
		usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
	else if (optopt)
		usage_error(cmd, "unknown option '-%c'", optopt);
	else if ((near = closest_option(argv[optind - 1], longopts)) != NULL)
		usage_error(cmd, "unknown option '%s': did you mean '--%s'?", argv[optind - 1], near);
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

/*
 * opts.c: what every command's option parsing shares: whole-number values
 * and getopt_long's complaints, worded the same way everywhere.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>

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

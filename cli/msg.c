/*
 * msg.c: the one place that formats messages for the user, the way git
 * writes them: "mha: " then the problem, lowercase, no full stop.
 */
#include "cli.h"

#include <stdio.h>

static void vreport(const char *prefix, const char *fmt, va_list ap)
{
	fflush(stdout);
	fputs(prefix, stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("mha: ", fmt, ap);
	va_end(ap);
	return -1;
}

void warning(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("mha: warning: ", fmt, ap);
	va_end(ap);
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("mha: ", fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "Try 'mha %s --help' for more information.\n", cmd);
	else
		fputs("Try 'mha --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

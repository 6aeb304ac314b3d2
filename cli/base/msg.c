/*
 * msg.c: the one place that formats messages for the user, the way git
 * writes them: "mha: " then the problem, lowercase, no full stop.
 */
#include "base/cli.h"
#include "base/progress.h"
#include "base/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A message quotes file names, labels and values read from files: it is
 * formatted whole, then written as text.h shows text, so none of them can
 * put a control character on the terminal or end the line early.
 */
static __attribute__((format(printf, 2, 0))) void vreport(const char *prefix, const char *fmt,
							      va_list ap)
{
	char small[512], *msg = small;
	va_list again;
	int n;

	va_copy(again, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	if (n >= (int)sizeof(small)) {
		msg = malloc((size_t)n + 1);
		if (msg)
			vsnprintf(msg, (size_t)n + 1, fmt, again);
		else
			msg = small; /* cut short rather than lost */
	}
	va_end(again);
	fflush(stdout);
	progress_clear(); /* a message never lands on the bar's line */
	fputs(prefix, stderr);
	text_put(stderr, n < 0 ? fmt : msg);
	fputc('\n', stderr);
	if (msg != small)
		free(msg);
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

void notice(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("mha: note: ", fmt, ap);
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

const char *path_shown(const char *path)
{
	return strcmp(path, "-") ? path : "<stdin>";
}

const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

int stdout_flush(void)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	return error("error writing to standard output: %s", errno ? strerror(errno) :
		     "write failed");
}

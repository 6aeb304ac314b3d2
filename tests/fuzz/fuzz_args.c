/*
 * fuzz_args.c: libFuzzer target for the option parsers of 'mha forward'
 * and 'mha init': forward_check_args() and init_check_args(), the command
 * lines checked as the commands check them, touching no file.
 *
 * The input is the arguments after the command's name, each ended by a
 * NUL or a newline (so a corpus file is one argument per line).  Usage
 * errors go to standard error and --help to standard output: run with
 * -close_fd_mask=3 to keep them quiet, as 'make fuzz' does.
 */
#include "fuzz.h"
#include "base/cli.h"

#include <getopt.h>

#define MOST_ARGS 64

/* 0 fine, 1 --help, 2 a usage error: nothing else */
static void check_status(int rc, const char *cmd)
{
	if (rc != 0 && rc != 1 && rc != EXIT_USAGE) {
		fprintf(stderr, "fuzz: %s_check_args returned %d\n", cmd, rc);
		abort();
	}
}

/* run check on a fresh argv: { cmd, the arguments } (getopt permutes it) */
static void run(int (*check)(int, char **), const char *cmd, char *const *args, int n)
{
	char *argv[MOST_ARGS + 2];

	argv[0] = (char *)cmd;
	for (int i = 0; i < n; i++)
		argv[i + 1] = args[i];
	argv[n + 1] = NULL;
	optind = 0; /* a full reset of glibc's getopt, as the commands do */
	check_status(check(n + 1, argv), cmd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *args[MOST_ARGS];
	int n = 0;
	size_t start = 0;

	/* each argument in a block of its own, so ASan sees a read past its end */
	for (size_t i = 0; i <= size && n < MOST_ARGS; i++) {
		if (i < size && data[i] != '\0' && data[i] != '\n')
			continue;
		if (i == size && i == start)
			break; /* no empty argument after a final newline */
		args[n] = malloc(i - start + 1);
		if (!args[n])
			abort();
		memcpy(args[n], data + start, i - start);
		args[n][i - start] = '\0';
		n++;
		start = i + 1;
	}
	run(forward_check_args, "forward", args, n);
	run(init_check_args, "init", args, n);
	run(compare_check_args, "compare", args, n);
	for (int i = 0; i < n; i++)
		free(args[i]);
	return 0;
}

/*
 * cli.h: what the pieces of the mha command share: exit statuses, messages
 * and the subcommands.  Nothing here does arithmetic; that is lib/mha.h.
 */
#ifndef MHA_CLI_H
#define MHA_CLI_H

#include <stdarg.h>
#include <stddef.h>

/* Exit statuses, documented in mha(1). */
enum {
	EXIT_OK = 0,
	EXIT_DATA = 1,  /* bad data: a file that cannot be read, parsed or used */
	EXIT_USAGE = 2  /* bad command line */
};

/* A path (up to PATH_MAX, 4096 bytes) and a few words around it: where a
 * matrix came from ("--mask <stdin>"), as messages and "meta" show it. */
#define PATH_TEXT 4200

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

/* "mha: MESSAGE" on stderr; returns -1 so callers can 'return error(...)'. */
int error(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "mha: warning: MESSAGE" on stderr. */
void warning(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "mha: note: MESSAGE" on stderr: nothing wrong, something assumed. */
void notice(const char *fmt, ...) CLI_PRINTF(1, 2);
/* "mha: MESSAGE" plus a hint to try --help; returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* Standard output flushed: 0, or -1 after "error writing to standard
 * output: ..." (a full disk, a closed pipe's EPIPE ignored) */
int stdout_flush(void);
/* "s" for a plural count: "%zu head%s" */
const char *plural(size_t n);
/* A file as messages, titles and "meta" name it: standard input ("-") is
 * "<stdin>", as the readers say. */
const char *path_shown(const char *path);


/* A whole number from 1 to max for cmd's option opt, or a usage error; 0 or -1. */
int opt_count(const char *cmd, const char *opt, const char *arg, unsigned long long max,
	      size_t *out);
/* getopt_long returned ':' (a value missing) or '?' (unknown): say so, and
 * for an unknown long option name the closest of longopts (may be NULL). */
struct option;
void opt_error(const char *cmd, int c, char **argv, const struct option *longopts);
/* Of names[0..n), the one word is most likely a typo of (a few edits away,
 * case aside, and nearer than any other), or NULL: for "did you mean". */
const char *closest_name(const char *word, const char *const *names, size_t n);
/* A finite number, the whole of arg (a subnormal too, not one that rounds
 * to 0): 1 and *out set, or 0. */
int opt_number(const char *arg, double *out);
/* "4096", "512M", "4G", "1.5GiB", "none": bytes (binary multiples, at least
 * 1; none: SIZE_MAX); 0, or -1 when arg is not a size. */
int opt_bytes(const char *arg, size_t *out);
/* "-3", "12": a whole number within ±PTRDIFF_MAX/2; 1, or 0 when not one. */
int opt_offset(const char *arg, ptrdiff_t *out);
/* The default --max-memory: 3/4 of the machine's memory, room for the rest. */
size_t opt_memory_default(void);

/* Subcommands: each parses its own argv (argv[0] is the command's name). */
int cmd_forward(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_heatmap(int argc, char **argv);
int cmd_backward(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_model(int argc, char **argv);

/* The command line alone, checked as the command would, reading and writing
 * no file: 0 fine, 1 after --help, 2 a usage error (for the fuzzers). */
int forward_check_args(int argc, char **argv);
int init_check_args(int argc, char **argv);
int compare_check_args(int argc, char **argv);

#endif

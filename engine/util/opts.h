/*
 * opts.h: option values as every command and every setting reads them
 * (whole numbers, numbers, sizes, offsets), getopt_long's complaints in
 * one wording, and the "did you mean" for a name that is nearly right.
 */
#ifndef MHA_ENGINE_OPTS_H
#define MHA_ENGINE_OPTS_H

#include <stddef.h>

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

#endif

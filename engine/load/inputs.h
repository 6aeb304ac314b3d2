/*
 * inputs.h: the files a problem_spec names, in one list (inputs.c): each
 * input's setting name (as mhe_run_set and the long option spell it), its
 * option as messages say it, and where its path sits in the spec.  What
 * notes the run's inputs, checks their sizes before reading, looks for
 * standard input among them and sets them by name all walk this list.
 */
#ifndef MHA_ENGINE_INPUTS_H
#define MHA_ENGINE_INPUTS_H

#include <stddef.h>

#include "load/spec.h"

struct spec_file {
	const char *name;   /* "x", "kv", "q-norm", "wq": the setting */
	const char *option; /* "-x", "--kv": as messages say it */
	size_t at;          /* offsetof the const char * in struct problem_spec */
	int plain;          /* the setting sets the path and nothing more */
};

/* in the order the inputs are noted and checked: -x first, -w last */
extern const struct spec_file spec_files[];
extern const size_t n_spec_files;

/* s's path of input f (NULL: not given) */
const char *spec_file_path(const struct problem_spec *s, const struct spec_file *f);
/* where f's path sits in s */
const char **spec_file_field(struct problem_spec *s, const struct spec_file *f);
/* the input called name, or NULL */
const struct spec_file *spec_file_named(const char *name);
/* f's option as this spec reads it: --kt for K given transposed */
const char *spec_file_option(const struct problem_spec *s, const struct spec_file *f);

#endif

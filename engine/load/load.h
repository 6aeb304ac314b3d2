/*
 * load.h: an attention problem (problem.h) read from the files a spec
 * names (spec.h), its shapes worked out (shapes.h) and the options'
 * matrices checked against them (checks.h), every mismatch explained with
 * the option and file each matrix came from.
 *
 * It knows nothing of argv: a test or a fuzzer can fill a problem_spec and
 * call problem_load().  Reading charges the memory budget (budget.h):
 * budget_init() comes first.
 */
#ifndef MHA_ENGINE_LOAD_H
#define MHA_ENGINE_LOAD_H

#include "load/problem.h"
#include "load/spec.h"

/*
 * Read every file the spec names (each refused first if larger than the
 * budget's limit), work out the shapes and check the mask and the labels.
 * EXIT_OK, EXIT_DATA (bad data, said) or EXIT_USAGE (--cell names no query
 * or key, said).  problem_free() after, whatever it returned.
 */
int problem_load(struct problem *p, const struct problem_spec *s);
void problem_free(struct problem *p);

/* Each file the spec reads (a -w directory: each it may read) noted among
 * the run's inputs (files.h) before any is read, so that an output over
 * one is refused up front.  0, or -1 said. */
int problem_note_inputs(const struct problem_spec *s);

#endif

/*
 * archive.h: results as one NumPy .npz archive (archive.c), for emit.c.
 */
#ifndef MHA_CLI_ARCHIVE_H
#define MHA_CLI_ARCHIVE_H

#include <stdio.h>

#include "load/problem.h"
#include "run/steps.h"
#include "run/meta.h"
#include "write/write.h"

/*
 * Every item of lists (batch sequences: 0 one) into fp as .npz members
 * named by their JSON keys (a batch's with the sequence's index), with the
 * meta and the tokens; compress: deflated.  0, or -1 said.
 */
int emit_write_npz(FILE *fp, int compress, const struct step_items *lists, size_t batch,
		   const struct labels *l, const struct run_meta *meta);

/*
 * Matrices under their names into the .npz at path (standard output for
 * "-"), as np.savez writes them (float32 kept where is_f32, else float64),
 * whole or not at all (outfile.h).  0, or -1 said.
 */
int emit_npz_named(const char *path, const char *const *names, const matrix *const *m, size_t n);

#endif

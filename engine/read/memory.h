/*
 * memory.h: arrays handed over in memory (mhe_run_set_array), read as the
 * files are: each stands under a name of its own ("<x>"), which a spec
 * names where it would name a file, and read_matrix() reads it from here,
 * held to the same read_spec (ranks, finite numbers, booleans for a mask)
 * and charged to the same memory budget.  Its numbers are widened to
 * double exactly (float32, float16, bfloat16) or kept as floats where the
 * run keeps floats (READ_F32).  The arrays are the caller's: borrowed while
 * a run reads them, never written.
 */
#ifndef MHA_ENGINE_MEMORY_H
#define MHA_ENGINE_MEMORY_H

#include <stddef.h>

#include "read/file.h"
#include "util/matrix.h"

/* an array's element type: mhe.h's MHE_F64 ... */
enum memory_type { MEM_F64, MEM_F32, MEM_F16, MEM_BF16, MEM_BOOL, N_MEM_TYPES };

/* One array in memory: row-major, rank 1 to 4 (dims past rank unused). */
struct memory_array {
	const void *data;
	enum memory_type type;
	size_t rank;
	size_t dim[4];
};

/* The arrays a run reads, under their names ("<x>"), for the call that
 * reads them: set before, cleared after (NULL, 0).  One run reads at a
 * time (the budget is the process's too). */
void memory_arrays(const char *const *names, const struct memory_array *arrays, size_t n);

/* name is an array in memory */
int memory_has(const char *name);

/* read_matrix() of an array in memory: 0, or -1 said */
int memory_read(matrix *m, const char *name, const read_spec *spec);

#endif

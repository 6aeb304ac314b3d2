/*
 * read_npy.c: NumPy .npy files into matrices (not written yet).
 */
#include "input.h"
#include "cli.h"

int read_npy(matrix *m, const input_file *f, const read_spec *spec)
{
	(void)m;
	return error("%s: %s: .npy input is not supported yet", f->name, spec->what);
}

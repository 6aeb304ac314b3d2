/*
 * read_csv.c: CSV files into matrices (not written yet).
 */
#include "input.h"
#include "cli.h"

int read_csv(matrix *m, const input_file *f, const read_spec *spec)
{
	(void)m;
	return error("%s: %s: CSV input is not supported yet", f->name, spec->what);
}

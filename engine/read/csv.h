/*
 * csv.h: CSV (and TSV) files into matrices (csv.c).
 */
#ifndef MHA_ENGINE_CSV_H
#define MHA_ENGINE_CSV_H

#include "read/file.h"

/* f as one matrix: a row a line; errors reported with line and field, -1. */
int read_csv(matrix *m, const input_file *f, const read_spec *spec);

#endif

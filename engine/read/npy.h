/*
 * npy.h: NumPy .npy files into matrices (npy.c), and the header parser
 * the .npz reader (npz.c) shares.
 */
#ifndef MHA_ENGINE_NPY_H
#define MHA_ENGINE_NPY_H

#include <stddef.h>

#include "read/file.h"

/* what the .npy reader accepts, for the messages about what it does not */
#define NPY_SUPPORTED "(float64, float32, float16, integers, or bool for a mask)"

/* A whole .npy file as one matrix; errors name the element, -1. */
int read_npy(matrix *m, const input_file *f, const read_spec *spec);
/* The same, where the values in f's own mapping (f->map: an .npz member
 * inflated) become the matrix's as they lie, when they need no conversion:
 * then the mapping and what it holds of the budget pass to m, and f no
 * longer has them (f->map, f->data NULL). */
int read_npy_take(matrix *m, input_file *f, const read_spec *spec);
/* A .npy file begun with input_begin(): native float64 and float32 (C
 * order, the host's byte order) read straight into the matrix, in one
 * read; any other dtype, or a file already whole in data, by read_npy(). */
int read_npy_rest(matrix *m, input_file *f, const read_spec *spec);

typedef struct npy_header {
	char descr[48];   /* as written, cut short if longer */
	int fortran;      /* values in column-major order */
	size_t rank;      /* entries in the shape, counted past 3 too */
	size_t dim[4];    /* the first four; 1 past rank */
	int zero_dim;     /* some entry is 0 */
} npy_header;

/* The magic, version and header dict of the .npy file f (what names the
 * array in messages); *start: where its values begin.  0, or -1 (reported). */
int npy_read_header(npy_header *h, size_t *start, const input_file *f, const char *what);

#endif

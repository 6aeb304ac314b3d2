/*
 * matrix.h: the CLI's dense arrays of double (1-D to 3-D, and 4-D for a
 * mask broadcast over a batch) and the readers that fill them.  The library sees only the data pointer and the sizes.
 * A matrix read with READ_MAP may hold its values in a read-only mapping of
 * its file (map): nobody writes into such a matrix.  A large one from
 * matrix_alloc_out is an anonymous mapping (map, writable); one read with
 * READ_MAP from an array in memory may borrow the caller's (borrowed).  Either way
 * matrix_free() or matrix_widen() are the only ways to let it go.
 */
#ifndef MHA_ENGINE_MATRIX_H
#define MHA_ENGINE_MATRIX_H

#include <stddef.h>

typedef struct matrix {
	size_t rank;   /* 1 to 4; 0 while empty */
	size_t dim[4]; /* dim[0] outermost; dimensions past rank are 1 */
	double *v;     /* row-major, dim[0]·dim[1]·dim[2] values, from malloc() */
	float *f;      /* instead of v (then NULL): the values as float32 read them,
			  for --dtype f32 (READ_F32, matrix_alloc_f32); from malloc() */
	int is_bool;   /* every entry was true or false (a boolean mask) */
	int is_f32;    /* the values are floats (widened): written as floats */
	int from_f32;  /* read from a file's float32 (or float16) values */
	int from_type; /* the type the file (or array) held them in: FROM_* */
	char **labels; /* a label (token) per row of a 2-D matrix, or NULL; owned */
	size_t n_labels;
	size_t held;   /* what v holds of the memory budget (budget.h) */
	void *map;     /* not NULL: v or f points into this mapping, map_len bytes,
			  unmapped by matrix_free: a read-only one of a .npy file
			  (READ_MAP), or matrix_alloc_out's own from 2 MiB */
	size_t map_len;
	int borrowed;  /* v or f is the caller's memory (an array handed over in
			  memory and read with READ_MAP): never written, never freed */
	size_t labels_held; /* and what the labels hold */
} matrix;

/* A matrix's numbers as its file held them: float64 (or numbers written
 * as text), float32, float16 or bfloat16 (each widened exactly). */
enum { FROM_F64 = 0, FROM_F32, FROM_F16, FROM_BF16 };

/* number of values */
size_t matrix_size(const matrix *m);
/* rows and columns of a rank-2 view: the last dimension is the columns */
size_t matrix_cols(const matrix *m);
size_t matrix_rows(const matrix *m);
/* "6x4", "2x6x6": into buf, which is returned */
const char *matrix_shape(const matrix *m, char *buf, size_t size);
/* allocate rank/dims, values zero, charged to the memory budget; 0 or -1 on
 * overflow, no memory or past the budget (reported) */
int matrix_alloc(matrix *m, size_t rank, size_t d0, size_t d1, size_t d2);
/* the same for any rank up to 4, the dimensions in dims */
int matrix_alloc_dims(matrix *m, size_t rank, const size_t *dims);
/* the same with floats at f (v NULL), not zeroed */
int matrix_alloc_f32(matrix *m, size_t rank, const size_t *dims);
/* matrix_alloc_dims (f32: matrix_alloc_f32) for an output the library
 * writes whole: from 2 MiB a mapping of its own in huge pages (map), one
 * fault per 2 MiB rather than per 4 KiB */
int matrix_alloc_out(matrix *m, size_t rank, const size_t *dims, int f32);
void matrix_free(matrix *m);
/* bytes of zeros in an anonymous mapping of their own (huge pages, as
 * matrix_alloc_out's), which a reader may fill and a matrix then take as
 * its map: from 2 MiB, else (and under AddressSanitizer, or when mmap says
 * no) NULL, for malloc.  *len: what to munmap.  Nothing charged. */
void *matrix_map_alloc(size_t bytes, size_t *len);
/* floats (m->f) made doubles (m->v), exactly, for code that takes doubles
 * alone; nothing when m holds doubles.  0, or -1 said (m unchanged). */
int matrix_widen(matrix *m);
/* m's last two dimensions swapped, over the first when m is 3-D (a
 * batch): (r, c) -> (c, r), (B, r, c) -> (B, c, r); doubles (widen
 * first), is_f32 kept.  0, or -1 said (m unchanged). */
int matrix_transpose(matrix *m);
/* a float copy of n doubles, each rounded once (NULL stays NULL), from
 * malloc(); *ok cleared when out of memory (said by the caller) */
float *floats_copy(const double *v, size_t n, int *ok);

/* What a reader accepts beyond finite numbers. */
enum {
	READ_NONFINITE = 1u << 0, /* -inf, inf, nan in their usual spellings (masks only) */
	READ_BOOL = 1u << 1,      /* true and false, all of them or none (masks only) */
	READ_LABELS = 1u << 2,    /* row labels: JSON "tokens", a CSV first column of names */
	READ_F32 = 1u << 3,       /* float32 values may stay floats (m->f): --dtype f32's inputs */
	READ_MAP = 1u << 4,       /* a native .npy file's values may be mapped, not read (m->map):
				     for callers that never write into the matrix */
	READ_FOUND = 1u << 5      /* a file mha found in a folder, not one the user named: a
				     regular file only (files.h's FILE_FOUND) */
};

#endif

/*
 * matrix.h: the CLI's dense arrays of double (1-D to 3-D) and the readers
 * that fill them.  The library sees only the data pointer and the sizes.
 */
#ifndef MHA_CLI_MATRIX_H
#define MHA_CLI_MATRIX_H

#include <stddef.h>

struct cJSON;

typedef struct matrix {
	size_t rank;   /* 1, 2 or 3; 0 while empty */
	size_t dim[3]; /* dim[0] outermost; dimensions past rank are 1 */
	double *v;     /* row-major, dim[0]·dim[1]·dim[2] values */
	int is_bool;   /* every entry was true or false (a boolean mask) */
} matrix;

/* number of values */
size_t matrix_size(const matrix *m);
/* rows and columns of a rank-2 view: the last dimension is the columns */
size_t matrix_cols(const matrix *m);
size_t matrix_rows(const matrix *m);
/* "6x4", "2x6x6": into buf, which is returned */
const char *matrix_shape(const matrix *m, char *buf, size_t size);
/* allocate rank/dims, values zero; 0 or -1 on overflow/no memory (reported) */
int matrix_alloc(matrix *m, size_t rank, size_t d0, size_t d1, size_t d2);
void matrix_free(matrix *m);

/* What a reader accepts beyond finite numbers. */
enum {
	READ_NONFINITE = 1u << 0, /* the strings "-inf", "inf", "nan" (masks only) */
	READ_BOOL = 1u << 1       /* true and false, all of them or none (masks only) */
};

/* A parsed JSON file: its display name, text and tree. */
typedef struct json_file {
	char *name;         /* as given, "-" shown as "<stdin>" */
	char *text;
	size_t len;
	struct cJSON *root;
} json_file;

/* Read and parse path ("-": standard input); errors name the file, line and column. */
int json_file_load(json_file *f, const char *path);
void json_file_free(json_file *f);

/*
 * Convert node to a matrix of rank min_rank..max_rank.  what names the
 * node in messages ("W_Q", "X").  Errors are reported and return -1.
 */
int json_matrix(matrix *m, const struct cJSON *node, const json_file *f,
		const char *what, size_t min_rank, size_t max_rank, unsigned flags);

/*
 * Read a matrix file: a bare array, or an object holding the array under
 * the first of keys[] it has (other keys are ignored, so mha's own JSON
 * output can be read back).
 */
int read_matrix_file(matrix *m, const char *path, const char *const *keys,
		     const char *what, size_t min_rank, size_t max_rank,
		     unsigned flags);

#endif

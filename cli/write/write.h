/*
 * write.h: printing matrices as titled text tables or as one JSON object.
 *
 * The caller walks the results in order and says where each matrix goes;
 * the writer keeps track of the JSON nesting and separators.
 */
#ifndef MHA_CLI_WRITE_H
#define MHA_CLI_WRITE_H

#include <stdio.h>

#include "util/matrix.h"
#include "util/number.h"

typedef enum {
	FORMAT_TEXT, FORMAT_JSON, FORMAT_CSV, FORMAT_MARKDOWN, FORMAT_NPY, FORMAT_HEATMAP, FORMAT_SVG,
	FORMAT_NPZ, FORMAT_HTML
} out_format;

typedef struct writer {
	FILE *fp;
	out_format format;
	int precision;    /* significant digits in text */
	int depth;        /* JSON: open objects */
	int need_comma;   /* JSON: something was written at this depth */
	int in_heads;     /* JSON: inside the "heads" array */
	int blocks;       /* text, CSV, Markdown: matrices written, for the separators */
	int single;       /* CSV: only one matrix, so no title lines */
	size_t head;      /* the head being written (1-based), 0 outside the heads */
	int no_title;     /* text: tables only, no title lines */
	int full;         /* text and Markdown: every entry (--full); else a matrix of
			     more than 1000 entries is summarised as NumPy prints it */
	/* labels for the next matrix's rows and columns (tokens), or NULL */
	const char *const *row_labels, *const *col_labels;
} writer;

/* json_number() and json_bare_nonfinite(): engine/util/number.h */

/* Text, JSON, CSV (a "# title" line before each matrix unless single) or
 * Markdown tables; .npy is written with npy_write(), one matrix a file. */
void out_begin(writer *w);
/* one matrix: key names it in JSON, title heads it elsewhere (shape added);
 * in text and Markdown summarised past 1000 entries unless w->full: the
 * first and last 3 rows and columns around "...", then a line saying so */
void out_matrix(writer *w, const char *key, const char *title, const matrix *m);
/* text and Markdown: one line standing for a matrix not written (a copy of
 * another); nothing in the other formats */
void out_note(writer *w, const char *line);
void out_heads_begin(writer *w);
void out_head_begin(writer *w, size_t head);
void out_head_end(writer *w);
void out_heads_end(writer *w);
void out_end(writer *w);
/* JSON: a batch's matrix, n parts of one shape (one per sequence) nested in
 * a leading dimension of n; nothing in the other formats, which write
 * each sequence's matrices under out_section() */
void out_matrix_batch(writer *w, const char *key, const matrix *const *parts, size_t n);
/* text, CSV and Markdown: a heading line before a sequence's matrices
 * ("sequence 2 of 3"); nothing in JSON */
void out_section(writer *w, const char *title);

/*
 * One matrix as a NumPy .npy file (format 1.0, '<f8', C order, its own
 * rank and shape); 0, or -1 on a write error (errno says why).
 */
int npy_write(FILE *fp, const matrix *m);
/* n matrices of one shape as one .npy array of shape (n, their shape): a batch */
int npy_write_batch(FILE *fp, const matrix *const *parts, size_t n);

/* Where .npy bytes go: put(ctx, bytes, n), in order.  A file, or the .npz
 * writer's CRC-32 and byte count before the same bytes go to the file. */
typedef struct npy_sink {
	void (*put)(void *ctx, const void *p, size_t n);
	void *ctx;
} npy_sink;
/*
 * n_parts matrices of one shape, in C order, as one .npy array of shape
 * (lead[0], …, lead[n_lead - 1], their shape), the product of lead being
 * n_parts: heads stacked (H, rows, cols), a batch's (B, H, rows, cols).
 * f4: as float32 ('<f4'), for values that are floats (matrix.h is_f32).
 */
void npy_put_parts(const npy_sink *s, const size_t *lead, size_t n_lead,
		   const matrix *const *parts, size_t n_parts, int f4);
/* n UTF-8 strings as NumPy Unicode ('<U' and the longest's length, UTF-32),
 * rank 1 (n of them) or rank 0 (n = 1: a 0-d array, np.load(...)[()] or
 * .item() gives the string); a byte that is not UTF-8 becomes U+FFFD. */
void npy_put_strings(const npy_sink *s, const char *const *v, size_t n, size_t rank);

/*
 * One matrix as plain CSV: a line per row, values comma-separated in the
 * shortest form that reads back exactly, -inf/inf/nan spelled so; a 3-D
 * matrix is its 2-D planes one after another.  0, or -1 on a write error.
 */
int csv_write(FILE *fp, const matrix *m);

/* One matrix as a bare JSON array (nested to its rank) and a newline. */
int json_write_array(writer *w, const matrix *m);
/* n matrices of one shape as one JSON array nested a level deeper: a batch */
int json_write_batch(writer *w, const matrix *const *parts, size_t n);

#endif

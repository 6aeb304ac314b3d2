/*
 * write.h: printing matrices as titled text tables or as one JSON object.
 *
 * The caller walks the results in order and says where each matrix goes;
 * the writer keeps track of the JSON nesting and separators.
 */
#ifndef MHA_CLI_WRITE_H
#define MHA_CLI_WRITE_H

#include <stdio.h>

#include "matrix.h"

typedef enum { FORMAT_TEXT, FORMAT_JSON } out_format;

typedef struct writer {
	FILE *fp;
	out_format format;
	int precision;    /* significant digits in text */
	int depth;        /* JSON: open objects */
	int need_comma;   /* JSON: something was written at this depth */
	int in_heads;     /* JSON: inside the "heads" array */
	int blocks;       /* text: matrices written, for the blank lines between */
} writer;

void out_begin(writer *w);
/* one matrix: key names it in JSON, title heads it in text (shape added) */
void out_matrix(writer *w, const char *key, const char *title, const matrix *m);
void out_heads_begin(writer *w);
void out_head_begin(writer *w, size_t head);
void out_head_end(writer *w);
void out_heads_end(writer *w);
void out_end(writer *w);

/*
 * One matrix as a NumPy .npy file (format 1.0, '<f8', C order, its own
 * rank and shape); 0, or -1 on a write error (errno says why).
 */
int npy_write(FILE *fp, const matrix *m);

/*
 * One matrix as plain CSV: a line per row, values comma-separated in the
 * shortest form that reads back exactly, -inf/inf/nan spelled so; a 3-D
 * matrix is its 2-D planes one after another.  0, or -1 on a write error.
 */
int csv_write(FILE *fp, const matrix *m);

/* Shortest text that strtod() reads back as exactly v (finite v). */
void format_shortest(char *buf, size_t size, double v);

#endif

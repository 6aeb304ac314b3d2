/*
 * input.h: reading matrices from files in any of mha's input formats.
 *
 * A file is read whole (standard input too, once), its format found (a .npy
 * file by its magic bytes under any name, a .npz by a zip's (npz.h); else a name ending .json, .csv or
 * .tsv is believed; else JSON by its first character, anything else CSV),
 * then parsed by that format's reader.  Every reader
 * reports its own errors in one line that starts with the file's name, and
 * where it can the line and column (JSON, CSV) or the element (.npy):
 *
 *   mha: weights.json:3:17: W_Q[2][1]: expected a number, found "0.4x"
 *   mha: x.csv:4: X[2] has 1 field but X[0] (line 2) has 2: rows must be equally long
 *   mha: x.npy: X[2][1] is nan: only a mask may hold nan or infinity
 */
#ifndef MHA_CLI_INPUT_H
#define MHA_CLI_INPUT_H

#include <stddef.h>

#include "files.h"
#include "matrix.h"

typedef struct input_file {
	char *name;          /* for messages: the path as given, or "<stdin>" */
	unsigned char *data; /* the whole file, with a NUL after the last byte */
	size_t len;          /* bytes, not counting that NUL */
	size_t held;         /* what data holds of the memory budget */
	/* while a file is read in parts (input_begin) */
	size_t cap;          /* bytes allocated at data */
	size_t size;         /* a regular file's length from where reading began */
	int sized;           /* size is known (a regular file) */
	int ended;           /* the file's last byte is in data */
	int fd;              /* open while read in parts; -1 (or 0, standard input) */
} input_file;

/* Read path ("-": standard input) whole, within the memory budget (budget.h):
 * a pipe or a device is read until it ends or the budget is spent.  Errors
 * are reported; -1.  input_load() reads a file the user named, which may
 * be a FIFO; input_load_found() one mha found itself (a folder's, an
 * index's), which must be a regular file (files.h). */
int input_load(input_file *f, const char *path);
int input_load_found(input_file *f, const char *path);
void input_free(input_file *f);

/* The same in parts: input_begin() reads the first head bytes (fewer if
 * the file is shorter) and leaves the file open; input_fill() reads on
 * until data holds want bytes or the file ends (ended); input_finish()
 * reads the rest and closes it.  A reader may instead read the rest
 * itself from fd, straight into its own memory (read_npy_rest).  Errors
 * are reported; -1.  input_free() closes what is still open. */
int input_begin(input_file *f, const char *path, size_t head, enum file_origin origin);
int input_fill(input_file *f, size_t want);
int input_finish(input_file *f);

typedef enum { FORMAT_IN_JSON, FORMAT_IN_CSV, FORMAT_IN_NPY, FORMAT_IN_NPZ } in_format;

/* What follows the last '.' of name, lower case, cut to size - 1 bytes; ""
 * when there is none or a '/' follows it.  The one rule by which mha tells
 * a format by a name: reading, and writing (emit.h). */
void file_extension(const char *name, char *ext, size_t size);

/* The format of f, from its content and its name (see above). */
in_format input_format(const input_file *f);

/* What the caller wants out of a file. */
typedef struct read_spec {
	const char *what;          /* names the matrix in messages: "X", "W_Q", "mask" */
	const char *const *keys;   /* JSON: object keys it may be under, NULL-terminated;
				      NULL: a JSON object is refused */
	size_t min_rank, max_rank; /* accepted ranks, 1 to 3 */
	unsigned flags;            /* READ_NONFINITE | READ_BOOL, from matrix.h */
} read_spec;

/* Load path and parse it in whichever format it is in. */
int read_matrix(matrix *m, const char *path, const read_spec *spec);
/* The same on a file already loaded (or made in memory: the fuzzers). */
int read_input(matrix *m, const input_file *f, const read_spec *spec);
/* The readers, on a loaded file; each reports its errors and returns -1. */
int read_json(matrix *m, const input_file *f, const read_spec *spec);
int read_csv(matrix *m, const input_file *f, const read_spec *spec);
int read_npy(matrix *m, const input_file *f, const read_spec *spec);
/* A .npy file begun with input_begin(): native float64 and float32 (C
 * order, the host's byte order) read straight into the matrix, in one
 * read; any other dtype, or a file already whole in data, by read_npy(). */
int read_npy_rest(matrix *m, input_file *f, const read_spec *spec);

/* The non-finite spellings a mask may use ("-inf", "Infinity", "nan", …,
 * any case, optional sign): 1 and *v set, or 0. */
int parse_nonfinite(const char *s, double *v);

#endif

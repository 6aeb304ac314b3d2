/*
 * file.h: what every reader starts from: an input file read whole (or in
 * parts, for a .npy file's values) within the memory budget (budget.h),
 * and what the caller wants out of it (read_spec).  The readers (json.h,
 * csv.h, npy.h, npz.h) take a loaded file; input.h tells which reader.
 */
#ifndef MHA_ENGINE_FILE_H
#define MHA_ENGINE_FILE_H

#include <stddef.h>

#include "util/files.h"
#include "util/matrix.h"

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
	void *map;           /* not NULL: data lies in this mapping of map_len bytes, not
				from malloc: the file's own, read-only, with no NUL
				after it (input_map), or an anonymous one (an .npz
				member inflated, map_own), which a reader may hand on
				to a matrix (read_npy_take) */
	size_t map_len;
	int map_own;         /* map is anonymous memory, writable */
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
/* input_finish(), where a regular file from 1 MiB, opened by its path, is
 * mapped read-only (MAP_POPULATE) rather than read: the page cache's pages,
 * no copy; data then has no NUL after it, for readers that never look past
 * len (an .npz archive).  A file whose size changed since it was opened is
 * read as any other. */
int input_map(input_file *f);

/* What follows the last '.' of name, lower case, cut to size - 1 bytes; ""
 * when there is none or a '/' follows it.  The one rule by which mha tells
 * a format by a name: reading, and writing (emit.h). */
void file_extension(const char *name, char *ext, size_t size);

/* What the caller wants out of a file. */
typedef struct read_spec {
	const char *what;          /* names the matrix in messages: "X", "W_Q", "mask" */
	const char *const *keys;   /* JSON: object keys it may be under, NULL-terminated;
				      NULL: a JSON object is refused */
	size_t min_rank, max_rank; /* accepted ranks, 1 to 3 */
	unsigned flags;            /* READ_NONFINITE | READ_BOOL, from matrix.h */
} read_spec;

/*
 * A PyTorch file (torch.save: a pickle, alone or in a ZIP archive beside its
 * tensors' bytes) refused, -1: a pickle is a program, which mha never runs;
 * the message says how to save the tensors as safetensors or .npz instead.
 */
int refuse_pickle(const char *name);

/* The non-finite spellings a mask may use ("-inf", "Infinity", "nan", …,
 * any case, optional sign): 1 and *v set, or 0. */
int parse_nonfinite(const char *s, double *v);

#endif

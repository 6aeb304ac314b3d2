/*
 * safetensors.h: reading tensors out of a safetensors file (Hugging Face's
 * checkpoint format) one at a time, without reading the rest of the file.
 *
 * The format: 8 bytes, a little-endian u64 N; N bytes of JSON, an object of
 * name -> {"dtype", "shape", "data_offsets": [begin, end]} (and an optional
 * "__metadata__" of strings); then the data, each tensor's bytes row-major
 * and little-endian at [begin, end) counted from the first byte after the
 * header.
 *
 * st_open() checks the whole header before anything is read past it: N
 * against the file's size, every dtype known, every range in bounds, as long
 * as dtype x shape says and overlapping no other.  st_read() then reads one
 * tensor with pread(), converting it exactly to float64: taking one layer of
 * a 10 GB checkpoint reads that layer; st_read_mask() a mask.  Not for
 * writing checkpoints.
 */
#ifndef MHA_ENGINE_SAFETENSORS_H
#define MHA_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/matrix.h"

enum { ST_MAX_RANK = 8 };

typedef struct st_tensor {
	char *name;               /* as in the header (a NUL inside is refused) */
	int dtype;                /* index into safetensors.c's table of dtypes */
	size_t rank;
	uint64_t dim[ST_MAX_RANK];
	uint64_t begin, end;      /* bytes, from the start of the file */
} st_tensor;

typedef struct st_file {
	char *path;      /* as given, for messages */
	int fd;          /* -1 when closed */
	uint64_t size;   /* of the whole file */
	st_tensor *t;    /* (n), sorted by name */
	size_t n;
	size_t held;     /* what the names and the table hold of the memory budget */
} st_file;

/* Open path and check its header (see above); errors are said, -1.
 * st_close() after, whatever it returned. */
int st_open(st_file *f, const char *path);
void st_close(st_file *f);

/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* "F32", "BF16", ... */
const char *st_dtype_name(int dtype);
/* "(2, 3)": the shape, into buf, which is returned */
const char *st_shape(const st_tensor *t, char *buf, size_t size);

/*
 * One tensor as float64, of rank 1 to 3, from F64, F32, F16 or BF16 (each
 * exact in a double); what is the tensor's name in messages.  Charged to the
 * memory budget; errors said, -1.
 */
int st_read(matrix *m, const st_file *f, const st_tensor *t);
/* One array of someone's results (mha compare --against FILE.safetensors):
 * rank 1 to 4, any float, integer or BOOL dtype, -inf and nan kept, and
 * the type it was in (from_type); else as st_read. */
int st_read_array(matrix *m, const st_file *f, const st_tensor *t);
/* path names a safetensors file: its extension, as -w tells a checkpoint */
int st_path(const char *path);
/* dtype (st_tensor's) is F8_E4M3 or F8_E5M2: an FP8 weight, whose block scales are its
 * loader's to apply */
int st_dtype_is_f8(int dtype);

/*
 * --mask FILE.safetensors: the file's one tensor (several: an error naming
 * them), of rank 1 to 4, as .npy masks are read: BOOL a boolean mask
 * (is_bool), integers and floats numbers added to the scores, -inf and nan
 * kept.  Charged to the memory budget; errors said, -1.
 */
int st_read_mask(matrix *m, const char *path);

#endif

/*
 * deflated.h: a raw deflate stream (a .npz's deflated member) inflated by
 * zlib, its state and window charged to the memory budget (budget.h).
 */
#ifndef MHA_CLI_DEFLATED_H
#define MHA_CLI_DEFLATED_H

#include <stddef.h>

/*
 * The raw deflate stream in[0..in_len) (RFC 1951, no zlib or gzip wrapper)
 * into out, which holds out_len bytes and one more (a stream that reaches
 * it inflates past the size declared).  0 when the stream ends with exactly
 * out_len bytes, *in_used then the bytes it took (the rest of in is the
 * caller's to judge).  Else -1 with *why a phrase for messages ("the data
 * inflates past its declared size", ...), or NULL when zlib's memory was
 * refused (by the budget, or malloc).  For read_npz.c and tests/npz_test.c.
 */
int npz_inflate(unsigned char *out, size_t out_len, const unsigned char *in, size_t in_len,
		size_t *in_used, const char **why);

#endif

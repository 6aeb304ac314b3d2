/*
 * deflated.h: a raw deflate stream (a .npz's deflated member) inflated by
 * libdeflate (zlib for a stream it refuses), its memory charged to the
 * budget (budget.h); and the CRC-32 a zip member carries.
 */
#ifndef MHA_ENGINE_DEFLATED_H
#define MHA_ENGINE_DEFLATED_H

#include <stddef.h>
#include <stdint.h>

/*
 * The raw deflate stream in[0..in_len) (RFC 1951, no zlib or gzip wrapper)
 * into out, which holds out_len bytes and one more (a stream that reaches
 * it inflates past the size declared).  0 when the stream ends with exactly
 * out_len bytes, *in_used then the bytes it took (the rest of in is the
 * caller's to judge).  Else -1 with *why a phrase for messages ("the data
 * inflates past its declared size", ...), or NULL when the memory was
 * refused (by the budget, or malloc).  For read/npz.c and tests/npz_test.c.
 */
int npz_inflate(unsigned char *out, size_t out_len, const unsigned char *in, size_t in_len,
		size_t *in_used, const char **why);

/* The CRC-32 of a zip member (ISO 3309, as zip and zlib's crc32 compute
 * it) carried on from crc over n bytes at p: 0 to start.  libdeflate's,
 * for reading and writing alike. */
uint32_t deflated_crc32(uint32_t crc, const void *p, size_t n);

#endif

/*
 * inflate.h: RFC 1951 DEFLATE decoding (a raw stream, no zlib or gzip
 * wrapper), for the deflated members of a .npz (np.savez_compressed).
 * Strict: every block type (stored, fixed and dynamic Huffman), a code
 * that is over-subscribed or incomplete refused (but the one-code distance
 * tree RFC 1951 allows), a distance before the start of the output
 * refused, and the output never past the size the caller says it is.
 * Not an encoder, and no streaming: the input is whole, the output a
 * buffer the caller allocated (and charged to the memory budget) first.
 */
#ifndef MHA_CLI_INFLATE_H
#define MHA_CLI_INFLATE_H

#include <stddef.h>

/*
 * Decode the stream in[0..in_len) into out, which holds exactly out_len
 * bytes: 0 when the stream's last block ends with out full, and *in_used
 * then the bytes it took (the rest of in is the caller's to judge); else
 * -1 with *why a constant phrase for messages ("an incomplete Huffman
 * code", "the data inflates past its declared size", ...).
 */
int inflate_raw(unsigned char *out, size_t out_len, const unsigned char *in, size_t in_len,
		size_t *in_used, const char **why);

#endif

/*
 * deflated.c: raw deflate streams inflated (deflated.h).  libdeflate
 * inflates a whole stream into a buffer of its known size faster than
 * zlib's stream interface (make bench-npz: an 8 MiB member inflated 9x
 * faster than mha's own inflate did, zlib 5.7x); a stream it refuses is
 * inflated again by zlib, whose messages say what is wrong with it, in
 * mha's words.  Both charge their memory to the budget.
 */
#include "read/deflated.h"
#include "util/budget.h"

#include <stdint.h>
#include <string.h>

#include <libdeflate.h>
#define ZLIB_CONST /* next_in points to const bytes */
#include <zlib.h>

/* zlib's state and window, charged to the budget as they are allocated */
static voidpf zlib_alloc(voidpf opaque, uInt items, uInt size)
{
	(void)opaque;
	return (size_t)items > SIZE_MAX / (size ? size : 1) ? NULL
							   : budget_malloc((size_t)items * size);
}

static void zlib_free(voidpf opaque, voidpf p)
{
	(void)opaque;
	budget_free(p);
}

/*
 * zlib's messages for a raw deflate stream (inflate.c, inffast.c) in the
 * words mha has always used; zlib gives one message where the cause was two
 * (over-subscribed or incomplete; a repeat before any length or past the
 * count), so those say both.
 */
static const char *data_error(const char *msg)
{
	static const char *const words[][2] = {
		{ "invalid block type", "a block of the reserved type 3" },
		{ "invalid stored block lengths",
		  "a stored block whose length and its complement disagree" },
		{ "too many length or distance symbols",
		  "a dynamic block with too many length or distance codes" },
		{ "invalid code lengths set", "an over-subscribed or incomplete Huffman code" },
		{ "invalid literal/lengths set", "an over-subscribed or incomplete Huffman code" },
		{ "invalid distances set", "an over-subscribed or incomplete Huffman code" },
		{ "invalid bit length repeat",
		  "a repeat of code lengths with none before it or past the block's count" },
		{ "invalid code -- missing end-of-block",
		  "a dynamic block without an end-of-block code" },
		{ "invalid literal/length code",
		  "an invalid length symbol (286 or 287, or a code not in the block's table)" },
		{ "invalid distance code",
		  "an invalid distance symbol (30 or 31, or a code not in the block's table)" },
		{ "invalid distance too far back", "a distance back past the start of the data" },
	};

	for (size_t i = 0; msg && i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(msg, words[i][0]))
			return words[i][1];
	return msg ? msg : "zlib could not inflate it";
}

/* zlib counts in uInt: a member past 4 GiB goes through in pieces */
#define PIECE ((size_t)1 << 30)

/* the stream by zlib: the same result, and the reason when it fails */
static int zlib_inflate(unsigned char *out, size_t out_len, const unsigned char *in,
			size_t in_len, size_t *in_used, const char **why)
{
	/* out holds one byte more than declared: a stream that fills it
	 * inflates past its declared size */
	const size_t room = out_len + 1;
	size_t fed_in = 0, fed_out = 0;
	z_stream s;
	int rc;

	memset(&s, 0, sizeof(s));
	s.zalloc = zlib_alloc;
	s.zfree = zlib_free;
	*why = NULL;
	if (inflateInit2(&s, -MAX_WBITS) != Z_OK)
		return -1; /* only its memory: the budget or malloc refused */
	for (;;) {
		size_t piece;

		if (s.avail_in == 0 && fed_in < in_len) {
			piece = in_len - fed_in < PIECE ? in_len - fed_in : PIECE;
			s.next_in = in + fed_in;
			s.avail_in = (uInt)piece;
			fed_in += piece;
		}
		if (s.avail_out == 0 && fed_out < room) {
			piece = room - fed_out < PIECE ? room - fed_out : PIECE;
			s.next_out = out + fed_out;
			s.avail_out = (uInt)piece;
			fed_out += piece;
		}
		/* Z_FINISH when all is given: no window then, the output is one */
		rc = inflate(&s, fed_in == in_len && fed_out == room ? Z_FINISH : Z_NO_FLUSH);
		if (rc == Z_STREAM_END) {
			if (fed_out - s.avail_out > out_len)
				*why = "the data inflates past its declared size";
			else if (fed_out - s.avail_out < out_len)
				*why = "the data inflates to fewer bytes than its declared size";
			break;
		}
		if (rc == Z_DATA_ERROR) {
			*why = data_error(s.msg);
			break;
		}
		/* out of room or of input: at the end of the call zlib may also
		 * have failed to allocate its window, which these come before */
		if (s.avail_out == 0 && fed_out == room) {
			*why = "the data inflates past its declared size";
			break;
		}
		if (s.avail_in == 0 && fed_in == in_len && s.avail_out > 0) {
			*why = "the deflated data ends early (truncated)";
			break;
		}
		if (rc != Z_OK && rc != Z_BUF_ERROR) {
			if (rc != Z_MEM_ERROR)
				*why = data_error(s.msg);
			break;
		}
		/* a piece used up: the next one is given above */
	}
	*in_used = fed_in - s.avail_in;
	inflateEnd(&s);
	return rc == Z_STREAM_END && !*why ? 0 : -1;
}

int npz_inflate(unsigned char *out, size_t out_len, const unsigned char *in, size_t in_len,
		size_t *in_used, const char **why)
{
	struct libdeflate_decompressor *dc;
	enum libdeflate_result r;
	size_t in_n = 0, out_n = 0;

	*why = NULL;
	libdeflate_set_memory_allocator(budget_malloc, budget_free);
	dc = libdeflate_alloc_decompressor();
	if (!dc)
		return -1; /* only its memory: the budget or malloc refused */
	/* the size known: out_len at the most, the size it came to told */
	r = libdeflate_deflate_decompress_ex(dc, in, in_len, out, out_len, &in_n, &out_n);
	libdeflate_free_decompressor(dc);
	if (r == LIBDEFLATE_SUCCESS && out_n == out_len) {
		*in_used = in_n;
		return 0;
	}
	if (r == LIBDEFLATE_SUCCESS) {
		*why = "the data inflates to fewer bytes than its declared size";
		return -1;
	}
	if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
		*why = "the data inflates past its declared size";
		return -1;
	}
	/* bad data: zlib says what is wrong (and decides, should the two differ) */
	return zlib_inflate(out, out_len, in, in_len, in_used, why);
}

uint32_t deflated_crc32(uint32_t crc, const void *p, size_t n)
{
	return libdeflate_crc32(crc, p, n);
}

/*
 * inflate.c: DEFLATE decoding (inflate.h), written from RFC 1951: bits
 * read least significant first, Huffman codes canonical (3.2.2), code
 * lengths of a dynamic block themselves Huffman-coded (3.2.7).  Decoding
 * walks the code a bit at a time by counts per length (as the RFC's own
 * construction suggests): slower than tables, but short and easy to check,
 * and a .npz member is read once.
 */
#include "read/inflate.h"

#include <string.h>

#define MAX_BITS 15
#define MAX_LITLEN 288
#define MAX_DIST 32

typedef struct bits {
	const unsigned char *in;
	size_t len, pos;   /* bytes; pos: the next byte to load */
	unsigned long buf; /* bits loaded, the next one lowest */
	int n;             /* how many */
	const char *why;
} bits;

typedef struct huffman {
	unsigned short count[MAX_BITS + 1]; /* codes of each length */
	unsigned short symbol[MAX_LITLEN];  /* symbols ordered by code */
} huffman;

/* n bits (up to 16), or -1 when the input ends first */
static long need(bits *b, int n)
{
	long v;

	while (b->n < n) {
		if (b->pos >= b->len) {
			b->why = "the deflated data ends early (truncated)";
			return -1;
		}
		b->buf |= (unsigned long)b->in[b->pos++] << b->n;
		b->n += 8;
	}
	v = (long)(b->buf & ((1ul << n) - 1));
	b->buf >>= n;
	b->n -= n;
	return v;
}

/*
 * The canonical code for lengths[0..n): 0, or -1 (why set) when it is
 * over-subscribed, or incomplete where that is not allowed (a code of one
 * symbol is: RFC 1951 lets a distance code have a single code of one bit).
 */
static int build(huffman *h, const unsigned char *lengths, int n, int one_allowed, bits *b)
{
	unsigned short offs[MAX_BITS + 1];
	long left = 1;
	int used = 0;

	memset(h->count, 0, sizeof(h->count));
	for (int s = 0; s < n; s++)
		h->count[lengths[s]]++;
	if (h->count[0] == n) {
		h->count[0] = 0;
		return 0; /* no codes: only an error if a symbol is then decoded */
	}
	for (int len = 1; len <= MAX_BITS; len++) {
		left = left * 2 - h->count[len];
		if (left < 0) {
			b->why = "an over-subscribed Huffman code";
			return -1;
		}
		used += h->count[len];
	}
	if (left > 0 && !(one_allowed && used == 1 && h->count[1] == 1)) {
		b->why = "an incomplete Huffman code";
		return -1;
	}
	offs[1] = 0;
	for (int len = 1; len < MAX_BITS; len++)
		offs[len + 1] = (unsigned short)(offs[len] + h->count[len]);
	for (int s = 0; s < n; s++)
		if (lengths[s])
			h->symbol[offs[lengths[s]]++] = (unsigned short)s;
	h->count[0] = 0;
	return 0;
}

/* the next symbol of code h, or -1 */
static int decode(bits *b, const huffman *h)
{
	int code = 0, first = 0, index = 0;

	for (int len = 1; len <= MAX_BITS; len++) {
		const long bit = need(b, 1);
		int count;

		if (bit < 0)
			return -1;
		code |= (int)bit;
		count = h->count[len];
		if (code - count < first)
			return h->symbol[index + (code - first)];
		index += count;
		first += count;
		first <<= 1;
		code <<= 1;
	}
	b->why = "a Huffman code that is not in the block's table";
	return -1;
}

static const unsigned short len_base[29] = {
	3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
	35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258 };
static const unsigned char len_extra[29] = {
	0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0 };
static const unsigned short dist_base[30] = {
	1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
	257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577 };
static const unsigned char dist_extra[30] = {
	0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
	13, 13 };

static const char *const past_end = "the data inflates past its declared size";

/* one Huffman-coded block's data, up to its end-of-block symbol */
static int codes(bits *b, const huffman *lit, const huffman *dist, unsigned char *out,
		 size_t out_len, size_t *at)
{
	for (;;) {
		int sym = decode(b, lit);
		long extra;
		size_t len, d;

		if (sym < 0)
			return -1;
		if (sym < 256) {
			if (*at >= out_len) {
				b->why = past_end;
				return -1;
			}
			out[(*at)++] = (unsigned char)sym;
			continue;
		}
		if (sym == 256)
			return 0;
		sym -= 257;
		if (sym >= 29) {
			b->why = "an invalid length symbol (286 or 287)";
			return -1;
		}
		if ((extra = need(b, len_extra[sym])) < 0)
			return -1;
		len = len_base[sym] + (size_t)extra;
		if ((sym = decode(b, dist)) < 0)
			return -1;
		if (sym >= 30) {
			b->why = "an invalid distance symbol (30 or 31)";
			return -1;
		}
		if ((extra = need(b, dist_extra[sym])) < 0)
			return -1;
		d = dist_base[sym] + (size_t)extra;
		if (d > *at) {
			b->why = "a distance back past the start of the data";
			return -1;
		}
		if (len > out_len - *at) {
			b->why = past_end;
			return -1;
		}
		/* byte by byte: a copy may overlap what it writes (a run) */
		for (size_t i = 0; i < len; i++, (*at)++)
			out[*at] = out[*at - d];
	}
}

static int stored(bits *b, unsigned char *out, size_t out_len, size_t *at)
{
	size_t len, nlen;

	/* to a byte boundary: the bits left of the current byte go */
	b->buf = 0;
	b->n = 0;
	if (b->len - b->pos < 4) {
		b->why = "the deflated data ends early (truncated)";
		return -1;
	}
	len = b->in[b->pos] | (size_t)b->in[b->pos + 1] << 8;
	nlen = b->in[b->pos + 2] | (size_t)b->in[b->pos + 3] << 8;
	b->pos += 4;
	if (len != (~nlen & 0xffff)) {
		b->why = "a stored block whose length and its complement disagree";
		return -1;
	}
	if (len > b->len - b->pos) {
		b->why = "the deflated data ends early (truncated)";
		return -1;
	}
	if (len > out_len - *at) {
		b->why = past_end;
		return -1;
	}
	memcpy(out + *at, b->in + b->pos, len);
	b->pos += len;
	*at += len;
	return 0;
}

static int fixed(bits *b, unsigned char *out, size_t out_len, size_t *at)
{
	static huffman lit, dist;
	static int ready;

	if (!ready) {
		unsigned char l[MAX_LITLEN];
		int s = 0;

		for (; s < 144; s++) l[s] = 8;
		for (; s < 256; s++) l[s] = 9;
		for (; s < 280; s++) l[s] = 7;
		for (; s < MAX_LITLEN; s++) l[s] = 8;
		build(&lit, l, MAX_LITLEN, 0, b);
		for (s = 0; s < MAX_DIST; s++) l[s] = 5;
		build(&dist, l, MAX_DIST, 0, b);
		ready = 1;
	}
	return codes(b, &lit, &dist, out, out_len, at);
}

static int dynamic(bits *b, unsigned char *out, size_t out_len, size_t *at)
{
	static const unsigned char order[19] = { 16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3,
						  13, 2, 14, 1, 15 };
	unsigned char lengths[MAX_LITLEN + MAX_DIST];
	huffman lencode, lit, dist;
	long nlen, ndist, ncode;
	int i;

	if ((nlen = need(b, 5)) < 0 || (ndist = need(b, 5)) < 0 || (ncode = need(b, 4)) < 0)
		return -1;
	nlen += 257;
	ndist += 1;
	ncode += 4;
	if (nlen > 286 || ndist > 30) {
		b->why = "a dynamic block with too many length or distance codes";
		return -1;
	}
	memset(lengths, 0, sizeof(lengths));
	for (i = 0; i < ncode; i++) {
		const long v = need(b, 3);

		if (v < 0)
			return -1;
		lengths[order[i]] = (unsigned char)v;
	}
	if (build(&lencode, lengths, 19, 0, b))
		return -1;
	for (i = 0; i < nlen + ndist;) {
		int sym = decode(b, &lencode);
		long rep;
		unsigned char v = 0;

		if (sym < 0)
			return -1;
		if (sym < 16) {
			lengths[i++] = (unsigned char)sym;
			continue;
		}
		if (sym == 16) {
			if (i == 0) {
				b->why = "a repeat of the previous code length with none before it";
				return -1;
			}
			v = lengths[i - 1];
			rep = need(b, 2);
			rep = rep < 0 ? rep : rep + 3;
		} else if (sym == 17) {
			rep = need(b, 3);
			rep = rep < 0 ? rep : rep + 3;
		} else {
			rep = need(b, 7);
			rep = rep < 0 ? rep : rep + 11;
		}
		if (rep < 0)
			return -1;
		if (i + rep > nlen + ndist) {
			b->why = "code lengths repeated past the block's count";
			return -1;
		}
		while (rep--)
			lengths[i++] = v;
	}
	if (lengths[256] == 0) {
		b->why = "a dynamic block without an end-of-block code";
		return -1;
	}
	if (build(&lit, lengths, (int)nlen, 0, b) ||
	    build(&dist, lengths + nlen, (int)ndist, 1, b))
		return -1;
	return codes(b, &lit, &dist, out, out_len, at);
}

int inflate_raw(unsigned char *out, size_t out_len, const unsigned char *in, size_t in_len,
		size_t *in_used, const char **why)
{
	bits b = { .in = in, .len = in_len, .pos = 0, .buf = 0, .n = 0, .why = NULL };
	size_t at = 0;
	long last;

	do {
		long type;
		int rc;

		if ((last = need(&b, 1)) < 0 || (type = need(&b, 2)) < 0) {
			*why = b.why;
			return -1;
		}
		if (type == 0)
			rc = stored(&b, out, out_len, &at);
		else if (type == 1)
			rc = fixed(&b, out, out_len, &at);
		else if (type == 2)
			rc = dynamic(&b, out, out_len, &at);
		else {
			b.why = "a block of the reserved type 3";
			rc = -1;
		}
		if (rc) {
			*why = b.why;
			return -1;
		}
	} while (!last);
	if (at != out_len) {
		*why = "the data inflates to fewer bytes than its declared size";
		return -1;
	}
	*in_used = b.pos; /* the last byte's unused bits are padding */
	return 0;
}

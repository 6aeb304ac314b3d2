/*
 * write/npy.c: matrices (and, for .npz's meta and tokens, strings) as NumPy
 * .npy data.
 *
 * Format 1.0, little-endian float64 (or float32 for an array of floats) in
 * C order, whatever the host: each value's bits are written least
 * significant byte first.  The header is laid out as NumPy's own np.save
 * lays it out (the same dict, the same spare room after it, the data
 * aligned to 64 bytes), so the file is the one np.save(path, array) would
 * write, byte for byte.  The bytes go to a sink: a file, or the .npz
 * writer's CRC-32 and count (zip.h), which needs them twice.
 */
#include "write/write.h"

#include <stdint.h>
#include <string.h>

/* NumPy leaves room after the dict for the first dimension to grow to 21
 * digits, so that a file can be appended to without moving its data */
#define GROWTH_AXIS_MAX_DIGITS 21
#define ARRAY_ALIGN 64

/* magic, version 1.0, the dict for descr and shape (dim, rank; rank 0: a
 * scalar), padded as np.save pads it */
static void put_header(const npy_sink *s, const char *descr, const size_t *dim, size_t rank)
{
	char head[400];
	size_t used = 10, total, pad;

	memcpy(head, "\x93NUMPY\x01\x00\x00\x00", 10);
	used += (size_t)snprintf(head + used, sizeof(head) - used,
				 "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
	for (size_t r = 0; r < rank; r++)
		used += (size_t)snprintf(head + used, sizeof(head) - used, "%s%zu", r ? ", " : "",
					 dim[r]);
	used += (size_t)snprintf(head + used, sizeof(head) - used, "%s), }", rank == 1 ? "," : "");
	if (rank > 0)
		for (int i = snprintf(NULL, 0, "%zu", dim[0]); i < GROWTH_AXIS_MAX_DIGITS; i++)
			head[used++] = ' ';
	/* spaces and a '\n' up to the next multiple of 64; NumPy adds a whole
	 * 64 when the header is already aligned, and so does this */
	total = used + 1;
	pad = ARRAY_ALIGN - total % ARRAY_ALIGN;
	memset(head + used, ' ', pad);
	used += pad;
	head[used++] = '\n';
	head[8] = (char)((used - 10) & 0xff);
	head[9] = (char)((used - 10) >> 8);
	s->put(s->ctx, head, used);
}

static int little_endian(void)
{
	const uint16_t one = 1;
	unsigned char first;

	memcpy(&first, &one, 1);
	return first == 1;
}

/* one part's n values: their own bytes in one piece where they are
 * already what the file holds (a little-endian host: float64 as doubles,
 * float32 as floats), else converted a block at a time */
static void put_values(const npy_sink *s, const matrix *m, size_t n, int f4)
{
	unsigned char buf[1 << 16];
	size_t k = 0;

	if (little_endian() && (f4 ? m->f != NULL : m->v != NULL)) {
		s->put(s->ctx, f4 ? (const void *)m->f : (const void *)m->v,
		       n * (f4 ? sizeof(float) : sizeof(double)));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (f4) {
			/* exact: the values are floats, widened (matrix.h is_f32) */
			const float f = m->f ? m->f[i] : (float)m->v[i];
			uint32_t u;

			memcpy(&u, &f, sizeof(u));
			for (int b = 0; b < 4; b++)
				buf[k++] = (unsigned char)(u >> (8 * b));
		} else {
			const double d = m->v ? m->v[i] : (double)m->f[i];
			uint64_t u;

			memcpy(&u, &d, sizeof(u));
			for (int b = 0; b < 8; b++)
				buf[k++] = (unsigned char)(u >> (8 * b));
		}
		if (k == sizeof(buf) || i + 1 == n) {
			s->put(s->ctx, buf, k);
			k = 0;
		}
	}
}

void npy_put_parts(const npy_sink *s, const size_t *lead, size_t n_lead,
		   const matrix *const *parts, size_t n_parts, int f4)
{
	const matrix *m = parts[0];
	size_t dim[8], rank = 0;
	const size_t n = matrix_size(m);

	for (size_t i = 0; i < n_lead; i++)
		dim[rank++] = lead[i];
	for (size_t r = 0; r < m->rank; r++)
		dim[rank++] = m->dim[r];
	put_header(s, f4 ? "<f4" : "<f8", dim, rank);
	for (size_t p = 0; p < n_parts; p++)
		put_values(s, parts[p], n, f4);
}

/* the next code point of UTF-8 text at *p, *p moved past it; a byte that
 * starts no valid sequence is U+FFFD, as JSON output shows it */
static uint32_t next_code_point(const unsigned char **p)
{
	const unsigned char *s = *p;
	uint32_t c = s[0];
	int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
		  (c & 0xf8) == 0xf0 ? 4 : 0;
	static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };

	if (len == 0) {
		*p = s + 1;
		return 0xfffd;
	}
	c &= len == 1 ? 0x7f : (0xffu >> (len + 1));
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*p = s + 1;
			return 0xfffd;
		}
		c = (c << 6) | (s[i] & 0x3f);
	}
	*p = s + len;
	/* overlong forms, surrogates and past U+10FFFF are not text */
	if (c < least[len] || (c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		return 0xfffd;
	return c;
}

static size_t code_points(const char *t)
{
	const unsigned char *p = (const unsigned char *)t;
	size_t n = 0;

	while (*p) {
		(void)next_code_point(&p);
		n++;
	}
	return n;
}

void npy_put_strings(const npy_sink *s, const char *const *v, size_t n, size_t rank)
{
	size_t width = 1, dim[1] = { n };
	char descr[32];
	unsigned char buf[4 * 256];
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (code_points(v[i]) > width)
			width = code_points(v[i]);
	snprintf(descr, sizeof(descr), "<U%zu", width);
	put_header(s, descr, dim, rank);
	/* UTF-32LE, each string padded with zeros to the width */
	for (size_t i = 0; i < n; i++) {
		const unsigned char *p = (const unsigned char *)v[i];

		for (size_t j = 0; j < width; j++) {
			const uint32_t c = *p ? next_code_point(&p) : 0;

			for (int b = 0; b < 4; b++)
				buf[k++] = (unsigned char)(c >> (8 * b));
			if (k == sizeof(buf)) {
				s->put(s->ctx, buf, k);
				k = 0;
			}
		}
	}
	if (k)
		s->put(s->ctx, buf, k);
}

static void put_file(void *ctx, const void *p, size_t n)
{
	fwrite(p, 1, n, ctx);
}

int npy_write(FILE *fp, const matrix *m)
{
	const npy_sink s = { put_file, fp };

	npy_put_parts(&s, NULL, 0, &m, 1, m->f != NULL || m->is_f32);
	return ferror(fp) ? -1 : 0;
}

int npy_write_batch(FILE *fp, const matrix *const *parts, size_t n)
{
	const npy_sink s = { put_file, fp };

	npy_put_parts(&s, &n, 1, parts, n, parts[0]->f != NULL || parts[0]->is_f32);
	return ferror(fp) ? -1 : 0;
}

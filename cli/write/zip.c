/*
 * zip.c: ZIP archives for .npz output (zip.h), members stored or deflated
 * by zlib.  The layout is PKWARE's APPNOTE.TXT (sections 4.3.7 local
 * header, 4.3.9 data descriptor, 4.3.12 central directory, 4.3.14-16 the
 * ZIP64 end records, 4.5.3 the ZIP64 extra field), little-endian
 * throughout.
 */
#include "write/zip.h"

#include "base/cli.h"
#include "read/deflated.h"

#include <stdlib.h>
#include <string.h>
#define ZLIB_CONST /* next_in points to const bytes */
#include <zlib.h>

#define LIMIT32 0xffffffffu
#define LIMIT16 0xffffu
#define ZIP64_VERSION 45     /* 4.5: what ZIP64 needs to extract */
#define FLAG_DESCRIPTOR 0x0008u /* sizes and CRC-32 in a data descriptor after the data */
#define METHOD_DEFLATE 8
/* zlib counts in uInt: more than 4 GiB goes through in pieces */
#define PIECE ((size_t)1 << 30)
/* 1980-01-01 00:00 in MS-DOS form: the earliest a zip holds, so that the
 * same run writes the same bytes */
#define DOS_TIME 0
#define DOS_DATE ((0 << 9) | (1 << 5) | 1)

/* little-endian fields into a header being built */
struct le {
	unsigned char b[128];
	size_t n;
};

static void le(struct le *h, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		h->b[h->n++] = (unsigned char)(v >> (8 * i));
}

static void put(zip_writer *z, const void *p, size_t n)
{
	fwrite(p, 1, n, z->fp);
	z->at += n;
}

/* the first pass: the member's CRC-32 and size */
struct measure {
	uint32_t crc;
	uint64_t size;
};

static void measure_put(void *ctx, const void *p, size_t n)
{
	struct measure *m = ctx;

	m->crc = deflated_crc32(m->crc, p, n);
	m->size += n;
}

static void file_put(void *ctx, const void *p, size_t n)
{
	put(ctx, p, n);
}

/* a member's bytes deflated on their way to the stream */
struct deflating {
	zip_writer *z;
	z_stream s;
	uint32_t crc;
	uint64_t size, csize;
	unsigned char out[1 << 16];
};

/* deflate what s holds, with flush, writing each buffer that fills */
static void deflate_out(struct deflating *d, int flush)
{
	int rc;

	do {
		d->s.next_out = d->out;
		d->s.avail_out = sizeof(d->out);
		rc = deflate(&d->s, flush);
		put(d->z, d->out, sizeof(d->out) - d->s.avail_out);
		d->csize += sizeof(d->out) - d->s.avail_out;
		/* a full buffer: there may be more; Z_FINISH: until the stream ends */
	} while (d->s.avail_out == 0 || (flush == Z_FINISH && rc == Z_OK));
}

static void deflate_put(void *ctx, const void *p, size_t n)
{
	struct deflating *d = ctx;
	const unsigned char *b = p;

	d->crc = deflated_crc32(d->crc, b, n);
	d->size += n;
	while (n > 0) {
		const size_t piece = n < PIECE ? n : PIECE;

		d->s.next_in = b;
		d->s.avail_in = (uInt)piece;
		deflate_out(d, Z_NO_FLUSH);
		b += piece;
		n -= piece;
	}
}

/* the local header: sizes in the ZIP64 extra field, as np.savez writes them,
 * or in the data descriptor after the data (all three 0 here) */
static void local_header(zip_writer *z, const zip_member *e, const char *name)
{
	const size_t len = strlen(name);
	const int deflated = z->compress;
	struct le h = { .n = 0 };

	le(&h, 0x04034b50, 4);
	le(&h, ZIP64_VERSION, 2);
	le(&h, deflated ? FLAG_DESCRIPTOR : 0, 2);
	le(&h, deflated ? METHOD_DEFLATE : 0, 2);
	le(&h, DOS_TIME, 2);
	le(&h, DOS_DATE, 2);
	le(&h, e->crc, 4);
	le(&h, LIMIT32, 4);      /* compressed and uncompressed sizes: in the extra field */
	le(&h, LIMIT32, 4);
	le(&h, len, 2);
	le(&h, 20, 2);           /* extra field length */
	put(z, h.b, h.n);
	put(z, name, len);
	h.n = 0;
	le(&h, 0x0001, 2);       /* ZIP64 extended information */
	le(&h, 16, 2);
	le(&h, e->size, 8);
	le(&h, e->csize, 8);
	put(z, h.b, h.n);
}

int zip_add(zip_writer *z, const char *name, void (*fill)(const npy_sink *s, void *arg),
	    void *arg)
{
	struct measure m = { 0, 0 };
	const npy_sink measuring = { measure_put, &m }, writing = { file_put, z };
	struct deflating *d = NULL;
	zip_member *e;

	if (z->n == z->cap) {
		const size_t cap = z->cap ? 2 * z->cap : 16;
		zip_member *v = realloc(z->v, cap * sizeof(*v));

		if (!v)
			return error("out of memory");
		z->v = v;
		z->cap = cap;
	}
	if (z->compress) {
		/* np.savez_compressed's settings (zipfile's): the default level, a
		 * raw stream with a 32 KiB window, so the same bytes as NumPy's */
		d = calloc(1, sizeof(*d));
		if (!d || deflateInit2(&d->s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8,
				       Z_DEFAULT_STRATEGY) != Z_OK) {
			free(d);
			return error("out of memory");
		}
		d->z = z;
	} else {
		fill(&measuring, arg);
	}
	e = &z->v[z->n];
	e->name = strdup(name);
	if (!e->name) {
		if (d)
			deflateEnd(&d->s);
		free(d);
		return error("out of memory");
	}
	e->crc = m.crc;
	e->size = e->csize = m.size;
	e->offset = z->at;
	z->n++;
	local_header(z, e, name);
	if (!d) {
		fill(&writing, arg);
		return 0;
	}
	fill(&(const npy_sink){ deflate_put, d }, arg);
	deflate_out(d, Z_FINISH);
	deflateEnd(&d->s);
	e->crc = d->crc;
	e->size = d->size;
	e->csize = d->csize;
	free(d);
	{
		struct le h = { .n = 0 };

		le(&h, 0x08074b50, 4);   /* the data descriptor, ZIP64's */
		le(&h, e->crc, 4);
		le(&h, e->csize, 8);
		le(&h, e->size, 8);
		put(z, h.b, h.n);
	}
	return 0;
}

void zip_finish(zip_writer *z)
{
	const uint64_t cd_start = z->at;
	uint64_t cd_size;
	int zip64;
	struct le h;

	for (size_t i = 0; i < z->n; i++) {
		const zip_member *e = &z->v[i];
		const int big = z->force_zip64 || e->size >= LIMIT32 || e->csize >= LIMIT32;
		const int far = z->force_zip64 || e->offset >= LIMIT32;
		const size_t len = strlen(e->name);

		h.n = 0;
		le(&h, 0x02014b50, 4);
		le(&h, (3 << 8) | ZIP64_VERSION, 2);  /* made by: Unix, 4.5 */
		le(&h, ZIP64_VERSION, 2);
		le(&h, z->compress ? FLAG_DESCRIPTOR : 0, 2);
		le(&h, z->compress ? METHOD_DEFLATE : 0, 2);
		le(&h, DOS_TIME, 2);
		le(&h, DOS_DATE, 2);
		le(&h, e->crc, 4);
		le(&h, big ? LIMIT32 : e->csize, 4);
		le(&h, big ? LIMIT32 : e->size, 4);
		le(&h, len, 2);
		le(&h, (big || far) ? 4 + 16 * big + 8 * far : 0, 2);
		le(&h, 0, 2);                         /* comment */
		le(&h, 0, 2);                         /* disk */
		le(&h, 0, 2);                         /* internal attributes */
		le(&h, (uint64_t)0100644 << 16, 4);   /* a regular file, rw-r--r-- */
		le(&h, far ? LIMIT32 : e->offset, 4);
		put(z, h.b, h.n);
		put(z, e->name, len);
		if (big || far) {
			/* only the fields set to 0xffffffff above, in this order */
			h.n = 0;
			le(&h, 0x0001, 2);
			le(&h, 16 * big + 8 * far, 2);
			if (big) {
				le(&h, e->size, 8);
				le(&h, e->csize, 8);
			}
			if (far)
				le(&h, e->offset, 8);
			put(z, h.b, h.n);
		}
	}
	cd_size = z->at - cd_start;
	zip64 = z->force_zip64 || z->n >= LIMIT16 || cd_size >= LIMIT32 || cd_start >= LIMIT32;
	if (zip64) {
		const uint64_t record = z->at;

		h.n = 0;
		le(&h, 0x06064b50, 4);                /* ZIP64 end of central directory */
		le(&h, 44, 8);                        /* the size of what follows */
		le(&h, (3 << 8) | ZIP64_VERSION, 2);
		le(&h, ZIP64_VERSION, 2);
		le(&h, 0, 4);
		le(&h, 0, 4);
		le(&h, z->n, 8);
		le(&h, z->n, 8);
		le(&h, cd_size, 8);
		le(&h, cd_start, 8);
		le(&h, 0x07064b50, 4);                /* its locator */
		le(&h, 0, 4);
		le(&h, record, 8);
		le(&h, 1, 4);
		put(z, h.b, h.n);
	}
	h.n = 0;
	le(&h, 0x06054b50, 4);                        /* end of central directory */
	le(&h, 0, 2);
	le(&h, 0, 2);
	/* what does not fit is in the ZIP64 record, which readers then take */
	le(&h, z->n >= LIMIT16 ? LIMIT16 : z->n, 2);
	le(&h, z->n >= LIMIT16 ? LIMIT16 : z->n, 2);
	le(&h, cd_size >= LIMIT32 ? LIMIT32 : cd_size, 4);
	le(&h, cd_start >= LIMIT32 ? LIMIT32 : cd_start, 4);
	le(&h, 0, 2);                                 /* comment */
	put(z, h.b, h.n);
}

void zip_free(zip_writer *z)
{
	for (size_t i = 0; i < z->n; i++)
		free(z->v[i].name);
	free(z->v);
	z->v = NULL;
	z->n = z->cap = 0;
}

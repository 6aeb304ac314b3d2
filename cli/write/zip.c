/*
 * zip.c: stored ZIP archives for .npz output (zip.h).  The layout is
 * PKWARE's APPNOTE.TXT (sections 4.3.7 local header, 4.3.12 central
 * directory, 4.3.14-16 the ZIP64 end records, 4.5.3 the ZIP64 extra
 * field), little-endian throughout.
 */
#include "write/zip.h"

#include "base/cli.h"

#include <stdlib.h>
#include <string.h>

#define LIMIT32 0xffffffffu
#define LIMIT16 0xffffu
#define ZIP64_VERSION 45     /* 4.5: what ZIP64 needs to extract */
/* 1980-01-01 00:00 in MS-DOS form: the earliest a zip holds, so that the
 * same run writes the same bytes */
#define DOS_TIME 0
#define DOS_DATE ((0 << 9) | (1 << 5) | 1)

uint32_t zip_crc32(uint32_t crc, const void *p, size_t n)
{
	static uint32_t table[256];
	static int ready;
	const unsigned char *b = p;

	if (!ready) {
		/* the reflected polynomial 0x04c11db7, one byte at a time */
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;

			for (int k = 0; k < 8; k++)
				c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
			table[i] = c;
		}
		ready = 1;
	}
	crc = ~crc;
	for (size_t i = 0; i < n; i++)
		crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

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

	m->crc = zip_crc32(m->crc, p, n);
	m->size += n;
}

static void file_put(void *ctx, const void *p, size_t n)
{
	put(ctx, p, n);
}

int zip_add(zip_writer *z, const char *name, void (*fill)(const npy_sink *s, void *arg),
	    void *arg)
{
	struct measure m = { 0, 0 };
	const npy_sink measuring = { measure_put, &m }, writing = { file_put, z };
	const size_t len = strlen(name);
	zip_member *e;
	struct le h = { .n = 0 };

	if (z->n == z->cap) {
		const size_t cap = z->cap ? 2 * z->cap : 16;
		zip_member *v = realloc(z->v, cap * sizeof(*v));

		if (!v)
			return error("out of memory");
		z->v = v;
		z->cap = cap;
	}
	fill(&measuring, arg);
	e = &z->v[z->n];
	e->name = strdup(name);
	if (!e->name)
		return error("out of memory");
	e->crc = m.crc;
	e->size = m.size;
	e->offset = z->at;
	z->n++;

	/* the local header: sizes in the ZIP64 extra field, as np.savez writes them */
	le(&h, 0x04034b50, 4);
	le(&h, ZIP64_VERSION, 2);
	le(&h, 0, 2);            /* flags: sizes known, no data descriptor */
	le(&h, 0, 2);            /* method: stored */
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
	le(&h, e->size, 8);
	put(z, h.b, h.n);

	fill(&writing, arg);
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
		const int big = z->force_zip64 || e->size >= LIMIT32;
		const int far = z->force_zip64 || e->offset >= LIMIT32;
		const size_t len = strlen(e->name);

		h.n = 0;
		le(&h, 0x02014b50, 4);
		le(&h, (3 << 8) | ZIP64_VERSION, 2);  /* made by: Unix, 4.5 */
		le(&h, ZIP64_VERSION, 2);
		le(&h, 0, 2);
		le(&h, 0, 2);
		le(&h, DOS_TIME, 2);
		le(&h, DOS_DATE, 2);
		le(&h, e->crc, 4);
		le(&h, big ? LIMIT32 : e->size, 4);
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
				le(&h, e->size, 8);
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

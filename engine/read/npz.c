/*
 * read/npz.c: .npz archives (npz.h), read from a file already in memory.
 * The ZIP layout is PKWARE's APPNOTE.TXT: 4.3.7 the local header, 4.3.12
 * the central directory, 4.3.14-16 the ZIP64 end record and its locator,
 * 4.5.3 the ZIP64 extra field; little-endian throughout.  Each member's
 * bytes go to the one .npy parser (read/npy.c) as a file of their own,
 * named "run.npz: member" in its messages.  Deflated members are inflated
 * by zlib, its memory charged to the budget like the rest.
 */
#include "read/npz.h"
#include "read/npy.h"
#include "read/deflated.h"

#include "util/budget.h"
#include "util/msg.h"

#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR 0x07064b50u
#define LOCAL_SIZE 30
#define CENTRAL_SIZE 46
#define END_SIZE 22
#define END64_SIZE 56
#define LOCATOR_SIZE 20
#define FLAG_ENCRYPTED 0x0001u
#define FLAG_DESCRIPTOR 0x0008u
#define FLAG_STRONG 0x0040u
/* deflate codes at most 258 bytes in a symbol of 1 bit: no honest member
 * inflates to more than about 1032 times its deflated size */
#define MAX_RATIO 1032u

typedef struct npz_member {
	char *name;        /* without ".npy", NUL-terminated (a NUL inside is refused) */
	unsigned method;   /* 0 stored, 8 deflated */
	unsigned flags;    /* the central directory's general purpose flags */
	uint32_t crc;      /* CRC-32 of the uncompressed bytes */
	uint64_t csize;    /* bytes in the archive */
	uint64_t usize;    /* bytes once inflated */
	uint64_t offset;   /* of the local header */
	uint64_t data;     /* of the member's first byte */
} npz_member;

struct npz_archive {
	const input_file *f;
	npz_member *v;     /* (n) in the central directory's order */
	size_t *by_name;   /* (n) indices into v, sorted by name */
	size_t n;
	size_t held;       /* what v, by_name and the names hold of the budget */
};

static uint64_t rd(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int is_npz(const input_file *f)
{
	return f->len >= 4 && (!memcmp(f->data, "PK\3\4", 4) || !memcmp(f->data, "PK\5\6", 4));
}

static int take(npz_archive *z, size_t n)
{
	const size_t need = budget_block(n);

	if (budget_take(need))
		return budget_refuse(z->f->name, n);
	z->held += need;
	return 0;
}

static const char *method_name(unsigned m)
{
	switch (m) {
	case 1: return "shrunk";
	case 6: return "imploded";
	case 9: return "deflate64";
	case 12: return "bzip2";
	case 14: return "lzma";
	case 93: return "zstandard";
	case 95: return "xz";
	case 98: return "ppmd";
	case 99: return "aes encrypted";
	default: return "unknown";
	}
}

/* The end record at the end of the file (after it only its comment). */
static int find_end(const input_file *f, size_t *at)
{
	const unsigned char *d = f->data;
	const size_t lowest = f->len > END_SIZE + 0xffff ? f->len - END_SIZE - 0xffff : 0;

	if (f->len >= END_SIZE)
		for (size_t p = f->len - END_SIZE;; p--) {
			if (rd(d + p, 4) == SIG_END && p + END_SIZE + rd(d + p + 20, 2) == f->len) {
				*at = p;
				return 0;
			}
			if (p == lowest)
				break;
		}
	return error("%s: not a whole zip archive: no end of central directory record "
		     "(truncated?)", f->name);
}

static int by_name_cmp(const void *a, const void *b, const npz_member *v)
{
	return strcmp(v[*(const size_t *)a].name, v[*(const size_t *)b].name);
}

/* qsort has no context argument: the members being sorted, for the comparators */
static const npz_member *sorting;

static int cmp_name(const void *a, const void *b)
{
	return by_name_cmp(a, b, sorting);
}

static int cmp_offset(const void *a, const void *b)
{
	const uint64_t x = sorting[*(const size_t *)a].offset, y = sorting[*(const size_t *)b].offset;

	return x < y ? -1 : x > y;
}

/* One central directory entry at *pos (moved past it) into e; its raw name
 * in name[0..nlen).  0 or -1 (reported). */
static int central_entry(npz_archive *z, size_t i, uint64_t *pos, uint64_t cd_end,
			 npz_member *e, const unsigned char **name, size_t *nlen)
{
	const input_file *f = z->f;
	const unsigned char *p = f->data + *pos, *x;
	size_t elen, clen, k;
	uint64_t disk;

	if (cd_end - *pos < CENTRAL_SIZE || rd(p, 4) != SIG_CENTRAL)
		return error("%s: central directory entry %zu is not one (a damaged archive)",
			     f->name, i + 1);
	e->flags = (unsigned)rd(p + 8, 2);
	e->method = (unsigned)rd(p + 10, 2);
	e->crc = (uint32_t)rd(p + 16, 4);
	e->csize = rd(p + 20, 4);
	e->usize = rd(p + 24, 4);
	*nlen = (size_t)rd(p + 28, 2);
	elen = (size_t)rd(p + 30, 2);
	clen = (size_t)rd(p + 32, 2);
	disk = rd(p + 34, 2);
	e->offset = rd(p + 42, 4);
	if (cd_end - *pos - CENTRAL_SIZE < (uint64_t)*nlen + elen + clen)
		return error("%s: central directory entry %zu runs past the directory's end",
			     f->name, i + 1);
	*name = p + CENTRAL_SIZE;
	/* the ZIP64 extra field: 8-byte values for the fields saturated above, in this order */
	x = p + CENTRAL_SIZE + *nlen;
	for (k = 0; k + 4 <= elen;) {
		const unsigned id = (unsigned)rd(x + k, 2);
		const size_t size = (size_t)rd(x + k + 2, 2);

		if (size > elen - k - 4)
			return error("%s: central directory entry %zu: an extra field runs past its "
				     "end", f->name, i + 1);
		if (id == 1) {
			const unsigned char *q = x + k + 4;
			size_t left = size;
			uint64_t *const fields[] = { &e->usize, &e->csize, &e->offset };

			for (int j = 0; j < 3; j++)
				if (*fields[j] == 0xffffffffu) {
					if (left < 8)
						return error("%s: central directory entry %zu: the ZIP64 "
							     "extra field is too short", f->name, i + 1);
					*fields[j] = rd(q, 8);
					q += 8;
					left -= 8;
				}
			if (disk == 0xffff && left >= 4)
				disk = rd(q, 4);
		}
		k += 4 + size;
	}
	*pos += CENTRAL_SIZE + *nlen + elen + clen;
	if (disk != 0)
		return error("%s: a multi-disk (split) archive is not supported", f->name);
	return 0;
}

/* the member's local header against its central directory entry */
static int local_header(npz_archive *z, npz_member *e, const unsigned char *name, size_t nlen,
			uint64_t cd_start)
{
	const input_file *f = z->f;
	const unsigned char *p;
	unsigned flags;

	if (e->offset > cd_start || cd_start - e->offset < LOCAL_SIZE ||
	    rd(f->data + e->offset, 4) != SIG_LOCAL)
		return error("%s: %s: no local header where the central directory puts it "
			     "(offset %llu)", f->name, e->name, (unsigned long long)e->offset);
	p = f->data + e->offset;
	flags = (unsigned)rd(p + 6, 2);
	if (rd(p + 8, 2) != e->method)
		return error("%s: %s: the local header's method (%u) differs from the central "
			     "directory's (%u)", f->name, e->name, (unsigned)rd(p + 8, 2), e->method);
	if (flags & (FLAG_ENCRYPTED | FLAG_STRONG))
		return error("%s: %s is encrypted: mha reads unencrypted members", f->name, e->name);
	if (rd(p + 26, 2) != nlen || cd_start - e->offset - LOCAL_SIZE < nlen ||
	    memcmp(p + LOCAL_SIZE, name, nlen))
		return error("%s: %s: the local header names another member", f->name, e->name);
	if (!(flags & FLAG_DESCRIPTOR)) {
		/* sizes given here must agree (0xffffffff: in its ZIP64 field) */
		const uint64_t crc = rd(p + 14, 4), cs = rd(p + 18, 4), us = rd(p + 22, 4);

		if (crc != e->crc || (cs != 0xffffffffu && cs != e->csize) ||
		    (us != 0xffffffffu && us != e->usize))
			return error("%s: %s: the local header's CRC-32 or sizes differ from the "
				     "central directory's", f->name, e->name);
	}
	e->data = e->offset + LOCAL_SIZE + nlen + rd(p + 28, 2);
	if (e->data > cd_start || cd_start - e->data < e->csize)
		return error("%s: %s: its %llu bytes run past the start of the central "
			     "directory", f->name, e->name, (unsigned long long)e->csize);
	return 0;
}

static int check_sizes(const npz_archive *z, const npz_member *e)
{
	const char *name = z->f->name;

	if (e->flags & (FLAG_ENCRYPTED | FLAG_STRONG))
		return error("%s: %s is encrypted: mha reads unencrypted members", name, e->name);
	if (e->method != 0 && e->method != 8)
		return error("%s: %s: method %u (%s): mha reads stored and deflated members", name,
			     e->name, e->method, method_name(e->method));
	if (e->method == 0 && e->csize != e->usize)
		return error("%s: %s: stored, but its sizes differ (%llu bytes, %llu uncompressed)",
			     name, e->name, (unsigned long long)e->csize,
			     (unsigned long long)e->usize);
	if (e->method == 8 && (e->usize / MAX_RATIO > e->csize || e->csize == 0))
		return error("%s: %s: declares %llu bytes from %llu deflated bytes: more than "
			     "deflate can produce", name, e->name, (unsigned long long)e->usize,
			     (unsigned long long)e->csize);
	return 0;
}

int npz_open(npz_archive **zp, const input_file *f)
{
	const unsigned char *d = f->data;
	npz_archive *z;
	size_t end = 0;
	uint64_t count, cd_size, cd_start, cd_limit, pos;

	*zp = NULL;
	if (find_end(f, &end))
		return -1;
	if (rd(d + end + 4, 2) != 0 || rd(d + end + 6, 2) != 0)
		return error("%s: a multi-disk (split) archive is not supported", f->name);
	count = rd(d + end + 10, 2);
	cd_size = rd(d + end + 12, 4);
	cd_start = rd(d + end + 16, 4);
	cd_limit = end;
	if (rd(d + end + 8, 2) != count)
		return error("%s: the end record counts %llu members on this disk but %llu in all",
			     f->name, (unsigned long long)rd(d + end + 8, 2),
			     (unsigned long long)count);
	if (end >= LOCATOR_SIZE && rd(d + end - LOCATOR_SIZE, 4) == SIG_LOCATOR) {
		const unsigned char *l = d + end - LOCATOR_SIZE, *r;
		const uint64_t at = rd(l + 8, 8);

		if (rd(l + 4, 4) != 0 || rd(l + 16, 4) > 1)
			return error("%s: a multi-disk (split) archive is not supported", f->name);
		if (at > end - LOCATOR_SIZE || end - LOCATOR_SIZE - at < END64_SIZE ||
		    rd(d + at, 4) != SIG_END64)
			return error("%s: the ZIP64 end record is not where its locator says "
				     "(offset %llu)", f->name, (unsigned long long)at);
		r = d + at;
		if (rd(r + 16, 4) != 0 || rd(r + 20, 4) != 0 || rd(r + 24, 8) != rd(r + 32, 8))
			return error("%s: a multi-disk (split) archive is not supported", f->name);
		/* the 16- and 32-bit fields either agree or say "see ZIP64" */
		if ((count != 0xffff && count != rd(r + 32, 8)) ||
		    (cd_size != 0xffffffffu && cd_size != rd(r + 40, 8)) ||
		    (cd_start != 0xffffffffu && cd_start != rd(r + 48, 8)))
			return error("%s: the end record and the ZIP64 end record disagree", f->name);
		count = rd(r + 32, 8);
		cd_size = rd(r + 40, 8);
		cd_start = rd(r + 48, 8);
		cd_limit = at;
	} else if (count == 0xffff || cd_size == 0xffffffffu || cd_start == 0xffffffffu) {
		return error("%s: the end record points to a ZIP64 end record that is not there",
			     f->name);
	}
	if (cd_start > cd_limit || cd_limit - cd_start != cd_size)
		return error("%s: the central directory (%llu bytes at offset %llu) does not end "
			     "where the end record begins (offset %llu)", f->name,
			     (unsigned long long)cd_size, (unsigned long long)cd_start,
			     (unsigned long long)cd_limit);
	/* every entry takes 46 bytes at least: a count the directory cannot
	 * hold is refused before anything is allocated for it */
	if (count > cd_size / CENTRAL_SIZE)
		return error("%s: the end record counts %llu members but the central directory "
			     "(%llu bytes) holds at most %llu", f->name, (unsigned long long)count,
			     (unsigned long long)cd_size,
			     (unsigned long long)(cd_size / CENTRAL_SIZE));

	z = calloc(1, sizeof(*z));
	if (!z)
		return error("out of memory");
	z->f = f;
	*zp = z;
	if (take(z, sizeof(*z)) ||
	    (count && take(z, (size_t)count * (sizeof(npz_member) + sizeof(size_t)))))
		goto fail;
	if (count) {
		z->v = calloc((size_t)count, sizeof(npz_member));
		z->by_name = calloc((size_t)count, sizeof(size_t));
		if (!z->v || !z->by_name) {
			error("out of memory");
			goto fail;
		}
	}
	pos = cd_start;
	for (size_t i = 0; i < count; i++) {
		npz_member *e = &z->v[i];
		const unsigned char *name = NULL;
		size_t nlen = 0, keep;

		if (central_entry(z, i, &pos, cd_limit, e, &name, &nlen))
			goto fail;
		if (nlen == 0) {
			error("%s: member %zu has an empty name", f->name, i + 1);
			goto fail;
		}
		if (memchr(name, '\0', nlen)) {
			error("%s: member %zu's name holds a NUL byte", f->name, i + 1);
			goto fail;
		}
		keep = nlen >= 4 && !memcmp(name + nlen - 4, ".npy", 4) ? nlen - 4 : nlen;
		if (take(z, keep + 1))
			goto fail;
		e->name = malloc(keep + 1);
		if (!e->name) {
			error("out of memory");
			goto fail;
		}
		memcpy(e->name, name, keep);
		e->name[keep] = '\0';
		z->n = i + 1;
		if (check_sizes(z, e) || local_header(z, e, name, nlen, cd_start))
			goto fail;
		z->by_name[i] = i;
	}
	if (pos != cd_limit) {
		error("%s: %llu bytes after the central directory's %llu entries", f->name,
		      (unsigned long long)(cd_limit - pos), (unsigned long long)count);
		goto fail;
	}
	sorting = z->v;
	/* no two members in the same bytes */
	if (z->n > 1) /* qsort takes no NULL, even for nothing */
		qsort(z->by_name, z->n, sizeof(size_t), cmp_offset);
	for (size_t i = 1; i < z->n; i++) {
		const npz_member *a = &z->v[z->by_name[i - 1]], *b = &z->v[z->by_name[i]];

		if (a->data + a->csize > b->offset) {
			error("%s: members %s and %s overlap", f->name, a->name, b->name);
			goto fail;
		}
	}
	/* nor two of one name, which np.load would take one of */
	if (z->n > 1)
		qsort(z->by_name, z->n, sizeof(size_t), cmp_name);
	for (size_t i = 1; i < z->n; i++)
		if (!strcmp(z->v[z->by_name[i - 1]].name, z->v[z->by_name[i]].name)) {
			error("%s: two members are named %s", f->name, z->v[z->by_name[i]].name);
			goto fail;
		}
	/* torch.save's archive: its tensors are described by a pickle, data.pkl */
	for (size_t i = 0; i < z->n; i++) {
		const size_t n = strlen(z->v[i].name);

		if (n >= 8 && !strcmp(z->v[i].name + n - 8, "data.pkl") &&
		    (n == 8 || z->v[i].name[n - 9] == '/')) {
			refuse_pickle(f->name);
			goto fail;
		}
	}
	return 0;
fail:
	npz_close(z);
	*zp = NULL;
	return -1;
}

void npz_close(npz_archive *z)
{
	if (!z)
		return;
	for (size_t i = 0; i < z->n; i++)
		free(z->v[i].name);
	free(z->v);
	free(z->by_name);
	budget_give(z->held);
	free(z);
}

size_t npz_count(const npz_archive *z)
{
	return z->n;
}

const char *npz_name(const npz_archive *z, size_t i)
{
	return i < z->n ? z->v[i].name : NULL;
}

static const npz_member *find(const npz_archive *z, const char *name)
{
	size_t lo = 0, hi = z->n;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const int c = strcmp(z->v[z->by_name[mid]].name, name);

		if (c == 0)
			return &z->v[z->by_name[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int npz_has(const npz_archive *z, const char *name)
{
	return find(z, name) != NULL;
}

/* "a, b, c" (the first dozen) into buf */
static const char *member_list(const npz_archive *z, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	if (z->n == 0)
		return "none";
	for (size_t i = 0; i < z->n && used < size; i++) {
		if (i == 12) {
			snprintf(buf + used, size - used, ", ... %zu in all", z->n);
			break;
		}
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 z->v[i].name);
	}
	return buf;
}

/*
 * The member's bytes as a file of their own named "run.npz: name": in
 * place when stored, else inflated into a buffer charged to the budget
 * (*held: what to give back).  Its CRC-32 checked.  0 or -1 (reported).
 */
static int member_bytes(const npz_archive *z, const char *name, input_file *out,
			const npz_member **ep)
{
	const input_file *f = z->f;
	const npz_member *e = find(z, name);
	unsigned char *buf = NULL;
	size_t label;
	char list[512];

	memset(out, 0, sizeof(*out));
	if (!e)
		return error("%s: no member %s (members: %s)", f->name, name,
			     member_list(z, list, sizeof(list)));
	*ep = e;
	label = strlen(f->name) + 2 + strlen(e->name) + 1;
	out->name = malloc(label);
	if (!out->name)
		return error("out of memory");
	snprintf(out->name, label, "%s: %s", f->name, e->name);
	if (e->method == 0) {
		out->data = f->data + e->data;
		out->len = (size_t)e->usize;
	} else {
		const char *why = NULL;
		const size_t refused = budget_refusals();
		size_t used = 0;

		if (e->usize >= SIZE_MAX - 64 || budget_take(out->held = budget_block((size_t)e->usize + 1))) {
			char a[48];

			out->held = 0;
			error("%s: inflates to %s, more than --max-memory leaves (%s)", out->name,
			      show_bytes(a, sizeof(a), (size_t)(e->usize < SIZE_MAX ? e->usize : SIZE_MAX)),
			      show_bytes(list, sizeof(list), budget_left()));
			goto fail;
		}
		/* a large member in a mapping of its own, which the matrix
		 * may take as it is (read_npy_take): no copy of its values */
		buf = matrix_map_alloc((size_t)e->usize + 1, &out->map_len);
		if (buf) {
			out->map = buf;
			out->map_own = 1;
		}
		else
			buf = malloc((size_t)e->usize + 1);
		if (!buf) {
			error("%s: out of memory", out->name);
			goto fail;
		}
		if (npz_inflate(buf, (size_t)e->usize, f->data + e->data, (size_t)e->csize, &used,
				&why)) {
			if (why)
				error("%s: bad deflated data: %s", out->name, why);
			else if (budget_refusals() > refused)
				budget_refuse(out->name, 0);
			else
				error("%s: out of memory", out->name);
			goto fail;
		}
		if (used != e->csize) {
			error("%s: %llu bytes after the deflated data", out->name,
			      (unsigned long long)(e->csize - used));
			goto fail;
		}
		buf[e->usize] = '\0';
		out->data = buf;
		out->len = (size_t)e->usize;
	}
	if (deflated_crc32(0, out->data, out->len) != e->crc) {
		error("%s: CRC-32 mismatch: the member is damaged", out->name);
		goto fail;
	}
	return 0;
fail:
	if (out->map)
		munmap(out->map, out->map_len);
	else
		free(buf);
	budget_give(out->held);
	free(out->name);
	memset(out, 0, sizeof(*out));
	return -1;
}

static void member_free(const npz_member *e, input_file *m)
{
	if (m->map)
		munmap(m->map, m->map_len);
	else if (e && e->method != 0)
		free(m->data);
	budget_give(m->held);
	free(m->name);
	memset(m, 0, sizeof(*m));
}

int npz_read(const npz_archive *z, const char *name, matrix *m, const read_spec *spec)
{
	const npz_member *e = NULL;
	input_file bytes;
	int rc;

	memset(m, 0, sizeof(*m));
	if (member_bytes(z, name, &bytes, &e))
		return -1;
	rc = read_npy_take(m, &bytes, spec);
	member_free(e, &bytes);
	return rc;
}

/* code point c as UTF-8 at p; the bytes written */
static size_t utf8(char *p, uint32_t c)
{
	if (c < 0x80) {
		p[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		p[0] = (char)(0xc0 | c >> 6);
		p[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		p[0] = (char)(0xe0 | c >> 12);
		p[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		p[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | c >> 18);
	p[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	p[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

static void free_strings(char **s, size_t n)
{
	if (s)
		for (size_t i = 0; i < n; i++)
			free(s[i]);
	free(s);
}

int npz_read_text(const npz_archive *z, const char *name, char ***out, size_t *n)
{
	const npz_member *e = NULL;
	input_file bytes;
	npy_header h;
	size_t start, width = 0, count, i;
	char **s = NULL;
	const char *d;
	int big;

	*out = NULL;
	*n = 0;
	if (member_bytes(z, name, &bytes, &e))
		return -1;
	if (npy_read_header(&h, &start, &bytes, name))
		goto fail;
	d = h.descr;
	big = *d == '>';
	if (*d == '<' || *d == '>' || *d == '=' || *d == '|')
		d++;
	if (*d != 'U' || d[1] < '1' || d[1] > '9') {
		error("%s: dtype '%s': expected unicode text ('<U')", bytes.name, h.descr);
		goto fail;
	}
	for (d++; *d >= '0' && *d <= '9' && width < SIZE_MAX / 40; d++)
		width = width * 10 + (size_t)(*d - '0');
	if (*d || width > SIZE_MAX / 4 / 16) {
		error("%s: dtype '%s' is not a unicode string type", bytes.name, h.descr);
		goto fail;
	}
	if (h.rank > 1) {
		error("%s: expected text (a 0-d or 1-d array), found a %zu-D array", bytes.name,
		      h.rank);
		goto fail;
	}
	count = h.rank == 0 ? 1 : h.dim[0];
	if (count > (bytes.len - start) / (4 * width) ||
	    count * 4 * width != bytes.len - start) {
		error("%s: %zu strings of %zu characters do not fill the %zu bytes after the "
		      "header", bytes.name, count, width, bytes.len - start);
		goto fail;
	}
	/* what the strings take at most, against what the run has left */
	if (count * (sizeof(char *) + 4 * width + 1 + 32) > budget_left()) {
		budget_refuse(bytes.name, count * (4 * width + 1));
		goto fail;
	}
	s = calloc(count ? count : 1, sizeof(*s));
	if (!s) {
		error("out of memory");
		goto fail;
	}
	for (i = 0; i < count; i++) {
		const unsigned char *p = bytes.data + start + i * 4 * width;
		size_t len = width, at = 0;

		while (len > 0 && rd(p + 4 * (len - 1), 4) == 0)
			len--; /* NumPy pads with NULs and drops them on reading */
		s[i] = malloc(4 * len + 1);
		if (!s[i]) {
			error("out of memory");
			goto fail_strings;
		}
		for (size_t k = 0; k < len; k++) {
			const unsigned char *q = p + 4 * k;
			const uint32_t c = big ? (uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 |
				(uint32_t)q[2] << 8 | q[3] : (uint32_t)rd(q, 4);

			if (c == 0 || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
				error("%s: string %zu, character %zu is %s (U+%04lX)", bytes.name, i,
				      k, c == 0 ? "a NUL" : "not a Unicode character",
				      (unsigned long)c);
				i++;
				goto fail_strings;
			}
			at += utf8(s[i] + at, c);
		}
		s[i][at] = '\0';
	}
	member_free(e, &bytes);
	*out = s;
	*n = count;
	return 0;
fail_strings:
	free_strings(s, i);
fail:
	member_free(e, &bytes);
	return -1;
}

/* a "tokens" member beside the matrix (as mha's -o run.npz writes): one label a row,
 * as read/json.c takes a JSON object's "tokens" */
static int npz_tokens(matrix *m, const npz_archive *z, const read_spec *spec)
{
	const size_t rows = matrix_rows(m);
	char **s;
	size_t n, held = 0;

	if (npz_read_text(z, "tokens", &s, &n))
		return -1;
	if (m->rank < 2 || n != rows) {
		free_strings(s, n);
		return error("%s: tokens has %zu label%s but %s has %zu row%s%s", z->f->name, n,
			     n == 1 ? "" : "s", spec->what, rows, rows == 1 ? "" : "s",
			     m->rank == 3 ? " in each sequence" : "");
	}
	held = budget_block((n ? n : 1) * sizeof(char *));
	for (size_t i = 0; i < n; i++)
		held += budget_block(strlen(s[i]) + 1);
	if (budget_take(held)) {
		free_strings(s, n);
		return budget_refuse(z->f->name, held);
	}
	m->labels = s;
	m->n_labels = n;
	m->labels_held = held;
	return 0;
}

int read_npz(matrix *m, const input_file *f, const read_spec *spec)
{
	npz_archive *z;
	const char *pick = NULL;
	int rc;

	memset(m, 0, sizeof(*m));
	if (npz_open(&z, f))
		return -1;
	for (const char *const *k = spec->keys; k && *k && !pick; k++)
		if (npz_has(z, *k))
			pick = *k;
	if (!pick && z->n == 1)
		pick = z->v[0].name;
	if (!pick) {
		char list[512];

		char want[128] = "";

		/* "output or X": the names the option takes, as a JSON object's keys */
		for (const char *const *k = spec->keys; k && *k; k++)
			snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s",
				 k == spec->keys ? "" : " or ", *k);
		rc = error("%s: no member %s (members: %s)", f->name, *want ? want : spec->what,
			   member_list(z, list, sizeof(list)));
	} else {
		rc = npz_read(z, pick, m, spec);
		if (!rc && (spec->flags & READ_LABELS) && npz_has(z, "tokens") &&
		    npz_tokens(m, z, spec))
			rc = -1;
		if (rc)
			matrix_free(m);
	}
	npz_close(z);
	return rc;
}

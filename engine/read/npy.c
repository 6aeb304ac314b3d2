/*
 * read/npy.c: NumPy .npy files (format 1.0, 2.0 and 3.0) into matrices.
 *
 * A .npy file is the magic "\x93NUMPY", a version, the header's length,
 * the header (npy_header.c), and the values.  Nothing in the header is
 * trusted: the byte size it
 * promises is checked against the bytes that follow before a matrix is
 * allocated.  Every value must convert to a double exactly: float64,
 * float32 and float16, integers that fit in 53 bits, and booleans where
 * the caller accepts them (a mask).
 */
#include "read/npy.h"
#include "read/half.h"
#include "util/msg.h"
#include "util/budget.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct npy_dtype {
	char kind;   /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
	size_t size; /* bytes per value */
	int big;     /* stored most significant byte first */
} npy_dtype;


/* ---- dtypes and values --------------------------------------------------- */

static int host_is_big_endian(void)
{
	const uint16_t one = 1;
	unsigned char first;

	memcpy(&first, &one, 1);
	return first == 0;
}

/* '<f8', '>i4', '|b1', '=u2', 'f8': 1 and *t set, or 0 if not supported */
static int parse_dtype(const char *descr, npy_dtype *t)
{
	const char *p = descr;
	char order = '=';
	unsigned long size = 0;

	if (*p == '<' || *p == '>' || *p == '=' || *p == '|')
		order = *p++;
	if (*p == '\0' || !strchr("fiub", *p))
		return 0;
	t->kind = *p++;
	if (!isdigit((unsigned char)*p))
		return 0;
	while (isdigit((unsigned char)*p) && size < 100)
		size = size * 10 + (unsigned long)(*p++ - '0');
	if (*p)
		return 0;
	switch (t->kind) {
	case 'f': if (size != 2 && size != 4 && size != 8) return 0; break;
	case 'b': if (size != 1) return 0; break;
	default: if (size != 1 && size != 2 && size != 4 && size != 8) return 0; break;
	}
	if (order == '|' && size > 1)
		return 0; /* '|' says byte order does not matter, which it does here */
	t->size = (size_t)size;
	t->big = order == '>' || (order != '<' && host_is_big_endian());
	return 1;
}

/* "X[2][1]": the element at idx in messages */
static const char *element_name(char *buf, size_t size, const char *what, size_t rank,
				const size_t *idx)
{
	size_t used = (size_t)snprintf(buf, size, "%s", what);

	for (size_t r = 0; r < rank && used < size; r++)
		used += (size_t)snprintf(buf + used, size - used, "[%zu]", idx[r]);
	return buf;
}

/* whether a double holds the integer of this magnitude exactly: its
 * significant bits, from the highest set to the lowest set, fit in 53 */
static int exact_in_double(uint64_t u)
{
	while (u > (UINT64_C(1) << 53) && !(u & 1))
		u >>= 1;
	return u <= (UINT64_C(1) << 53);
}

/*
 * The value at p as a double into *v; 0, or -1 when it has none (an
 * integer beyond what a double holds, a byte that is not a boolean),
 * reported for the element at idx.
 */
static int convert(const unsigned char *p, const npy_dtype *t, double *v, const input_file *f,
		   const read_spec *spec, size_t rank, const size_t *idx)
{
	const char *what = spec->what;
	uint64_t u = 0;
	char name[96];

	for (size_t i = 0; i < t->size; i++)
		u |= (uint64_t)p[t->big ? t->size - 1 - i : i] << (8 * i);
	switch (t->kind) {
	case 'f':
		if (t->size == 8) {
			memcpy(v, &u, sizeof(*v));
		} else if (t->size == 4) {
			const uint32_t w = (uint32_t)u;
			float x;

			memcpy(&x, &w, sizeof(x));
			*v = x;
		} else {
			*v = half_to_double((uint16_t)u);
		}
		return 0;
	case 'i': {
		int64_t s;

		if (t->size < 8 && (u >> (8 * t->size - 1)) & 1)
			u |= ~UINT64_C(0) << (8 * t->size); /* sign-extend */
		memcpy(&s, &u, sizeof(s));
		if (!exact_in_double(s < 0 ? UINT64_C(0) - u : u))
			return error("%s: %s is %" PRId64 ": a double cannot hold it exactly",
				     f->name, element_name(name, sizeof(name), what, rank, idx), s);
		*v = (double)s;
		return 0;
	}
	case 'u':
		if (!exact_in_double(u))
			return error("%s: %s is %" PRIu64 ": a double cannot hold it exactly",
				     f->name, element_name(name, sizeof(name), what, rank, idx), u);
		*v = (double)u;
		return 0;
	default:
		if (u > 1)
			return error("%s: %s is the byte 0x%02x, not a boolean (0 or 1)", f->name,
				     element_name(name, sizeof(name), what, rank, idx), (unsigned)u);
		*v = (double)u;
		return 0;
	}
}

/* "(6, 4)", "(4,)": the shape as NumPy prints it */
static const char *shape_text(char *buf, size_t size, const npy_header *h)
{
	size_t used = (size_t)snprintf(buf, size, "(");

	for (size_t r = 0; r < h->rank && r < 4 && used < size; r++)
		used += (size_t)snprintf(buf + used, size - used, "%s%zu", r ? ", " : "",
					 h->dim[r]);
	if (used < size)
		snprintf(buf + used, size - used, h->rank == 1 ? ",)" : ")");
	return buf;
}

static const char *const rank_names[] = { "a number", "a 1-D array", "a 2-D array", "a 3-D array",
					   "a 4-D array" };

/* ---- the file ------------------------------------------------------------ */

/* What the header says of the values, checked against everything but the
 * bytes that follow it. */
typedef struct npy_layout {
	npy_header h;
	npy_dtype t;
	size_t start; /* the values' offset in the file */
	size_t count; /* values */
	size_t bytes; /* count · t.size */
} npy_layout;

/* The header and what it says: 0, or -1 said.  f->data need hold only the
 * header (and may hold more). */
static int layout_of(npy_layout *L, const input_file *f, const read_spec *spec)
{
	size_t count;
	npy_header *h = &L->h;
	char buf[80], more[32] = "";

	if (npy_read_header(h, &L->start, f, spec->what))
		return -1;

	if (!parse_dtype(h->descr, &L->t))
		return error("%s: %s: dtype '%s' is not supported " NPY_SUPPORTED, f->name, spec->what,
			     h->descr);
	if (L->t.kind == 'b' && !(spec->flags & READ_BOOL))
		return error("%s: %s: dtype '%s' (booleans) is only accepted for a mask", f->name,
			     spec->what, h->descr);
	if (h->rank < spec->min_rank || h->rank > spec->max_rank) {
		const char *want = rank_names[spec->min_rank];

		if (spec->max_rank >= 3)
			snprintf(more, sizeof(more), " (up to %zu-D)", spec->max_rank);
		else if (spec->max_rank > spec->min_rank)
			snprintf(more, sizeof(more), " or a 2-D array");

		if (h->rank == 0)
			return error("%s: %s: expected %s%s, found a scalar (shape ())", f->name,
				     spec->what, want, more);
		if (h->rank > 4)
			return error("%s: %s: expected %s%s, found a %zu-D array", f->name,
				     spec->what, want, more, h->rank);
		return error("%s: %s: expected %s%s, found %s of shape %s", f->name, spec->what,
			     want, more, rank_names[h->rank], shape_text(buf, sizeof(buf), h));
	}
	if (h->zero_dim)
		return error("%s: %s: empty array: the shape %s has a zero dimension", f->name,
			     spec->what, shape_text(buf, sizeof(buf), h));

	/* the header's sizes, before anything is allocated */
	count = h->dim[0];
	if (count > SIZE_MAX / h->dim[1] || (count *= h->dim[1]) > SIZE_MAX / h->dim[2] ||
	    (count *= h->dim[2]) > SIZE_MAX / h->dim[3] || (count *= h->dim[3]) > SIZE_MAX / L->t.size)
		return error("%s: %s: the shape %s is too large to address", f->name, spec->what,
			     shape_text(buf, sizeof(buf), h));
	L->count = count;
	L->bytes = count * L->t.size;
	return 0;
}

/* the values' length against what follows the header: 0, or -1 said */
static int check_length(const npy_layout *L, const input_file *f, size_t follow)
{
	if (L->bytes > follow)
		return error("%s: truncated: the header promises %zu values (%zu bytes) but "
			     "%zu bytes follow", f->name, L->count, L->bytes, follow);
	if (L->bytes < follow)
		return error("%s: %zu bytes after the data: the header promises %zu values "
			     "(%zu bytes) but %zu bytes follow", f->name, follow - L->bytes,
			     L->count, L->bytes, follow);
	return 0;
}

/* C order, little-endian float64 or float32 on a little-endian host: the
 * bytes are the values, copied as they are */
static int is_native(const npy_layout *L)
{
	return !L->h.fortran && L->t.kind == 'f' && !L->t.big && !host_is_big_endian() &&
	       (L->t.size == 8 || L->t.size == 4);
}

/* native float32 kept as floats (m->f), not widened */
/* the type the file holds its numbers in (matrix.h's FROM_*) */
static int npy_from_type(const npy_layout *L)
{
	if (L->t.kind != 'f')
		return FROM_F64;
	return L->t.size == 2 ? FROM_F16 : L->t.size == 4 ? FROM_F32 : FROM_F64;
}

static int keeps_floats(const npy_layout *L, const read_spec *spec)
{
	return is_native(L) && L->t.size == 4 && (spec->flags & READ_F32);
}

/* the matrix for the layout: floats, or doubles; 0 or -1 said */
static int alloc_for(matrix *m, const npy_layout *L, const read_spec *spec)
{
	return keeps_floats(L, spec) ? matrix_alloc_f32(m, L->h.rank, L->h.dim)
				     : matrix_alloc_dims(m, L->h.rank, L->h.dim);
}

/* The first value of m that is nan or ±inf, in row-major order, reported
 * by its element; 0 when there is none, or when spec takes them. */
static int check_finite(const matrix *m, const input_file *f, const read_spec *spec,
			const npy_layout *L)
{
	const size_t n = L->count;
	size_t i = 0, idx[4];
	unsigned bad = 0;
	char name[96];
	double v = 0;

	if (spec->flags & READ_NONFINITE)
		return 0;
	/*
	 * An exponent of all ones is nan or infinity.  Adding one to the
	 * exponent's lowest bit carries into the sign bit for exactly those:
	 * no branch and no compare a value, four values a step.
	 */
	if (m->f) {
		const uint32_t E = 0x7f800000u, C = 0x00800000u;
		uint32_t acc[4] = { 0, 0, 0, 0 }, u[4];

		for (; i + 4 <= n; i += 4) {
			memcpy(u, m->f + i, sizeof(u));
			for (int k = 0; k < 4; k++)
				acc[k] |= (u[k] & E) + C;
		}
		for (; i < n; i++) {
			memcpy(u, m->f + i, sizeof(u[0]));
			acc[0] |= (u[0] & E) + C;
		}
		bad = ((acc[0] | acc[1] | acc[2] | acc[3]) >> 31) != 0;
	} else {
		const uint64_t E = UINT64_C(0x7ff0000000000000), C = UINT64_C(1) << 52;
		uint64_t acc[4] = { 0, 0, 0, 0 }, u[4];

		for (; i + 4 <= n; i += 4) {
			memcpy(u, m->v + i, sizeof(u));
			for (int k = 0; k < 4; k++)
				acc[k] |= (u[k] & E) + C;
		}
		for (; i < n; i++) {
			memcpy(u, m->v + i, sizeof(u[0]));
			acc[0] |= (u[0] & E) + C;
		}
		bad = ((acc[0] | acc[1] | acc[2] | acc[3]) >> 63) != 0;
	}
	if (!bad)
		return 0;
	for (i = 0; i < n; i++) {
		v = m->f ? m->f[i] : m->v[i];
		if (!isfinite(v))
			break;
	}
	/* the element's index, (d0, d1, d2, d3) with 0s past the rank */
	for (size_t r = 4, at = i; r-- > 0;) {
		idx[r] = at % L->h.dim[r];
		at /= L->h.dim[r];
	}
	element_name(name, sizeof(name), spec->what, L->h.rank, idx);
	return error("%s: %s is %s: only a mask may hold nan or infinity", f->name, name,
		     isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
}

/* n native values from p (little-endian float64 or float32) into m */
static void copy_native(matrix *m, size_t at, const unsigned char *p, size_t n,
			const npy_layout *L)
{
	if (m->f) {
		memcpy(m->f + at, p, n * sizeof(float));
	} else if (L->t.size == 8) {
		memcpy(m->v + at, p, n * sizeof(double));
	} else {
		for (size_t i = 0; i < n; i++) {
			float x;

			memcpy(&x, p + i * sizeof(float), sizeof(x));
			m->v[at + i] = x; /* exact */
		}
	}
}

/* every value, one at a time: other dtypes, byte orders, Fortran order */
static int convert_all(matrix *m, const input_file *f, const read_spec *spec, const npy_layout *L)
{
	const npy_header *h = &L->h;
	const unsigned char *d = f->data + L->start;
	size_t idx[4];

	/* walk the matrix in row-major order, so that the element named in a
	 * message is the first bad one however the file is laid out */
	for (idx[0] = 0; idx[0] < h->dim[0]; idx[0]++)
		for (idx[1] = 0; idx[1] < h->dim[1]; idx[1]++)
			for (idx[2] = 0; idx[2] < h->dim[2]; idx[2]++)
			for (idx[3] = 0; idx[3] < h->dim[3]; idx[3]++) {
				const size_t at = ((idx[0] * h->dim[1] + idx[1]) * h->dim[2] + idx[2]) *
						  h->dim[3] + idx[3];
				const size_t from = h->fortran
					? idx[0] + h->dim[0] * (idx[1] + h->dim[1] * (idx[2] + h->dim[2] * idx[3]))
					: at;
				double *v = &m->v[at];

				if (convert(d + from * L->t.size, &L->t, v, f, spec, h->rank, idx))
					return -1;
				if (!isfinite(*v) && !(spec->flags & READ_NONFINITE)) {
					char name[96];

					element_name(name, sizeof(name), spec->what, h->rank, idx);
					return error("%s: %s is %s: only a mask may hold nan or infinity",
						     f->name, name,
						     isnan(*v) ? "nan" : *v < 0 ? "-inf" : "inf");
				}
			}
	return 0;
}

/* m's values where they lie, in map (map_len bytes, m's to unmap), at
 * data: native values the matrix keeps as they are */
static void values_at(matrix *m, const npy_layout *L, const read_spec *spec, void *map,
		      size_t map_len, unsigned char *data)
{
	m->rank = L->h.rank;
	for (size_t r = 0; r < 4; r++)
		m->dim[r] = r < L->h.rank ? L->h.dim[r] : 1;
	m->map = map;
	m->map_len = map_len;
	if (keeps_floats(L, spec)) {
		m->f = (float *)(void *)data;
		m->is_f32 = 1;
	} else {
		m->v = (double *)(void *)data;
	}
}

/* read_npy, and with give the file's own mapping (f->map) may become m's */
static int read_from(matrix *m, const input_file *f, const read_spec *spec, input_file *give)
{
	npy_layout L;

	memset(m, 0, sizeof(*m));
	if (layout_of(&L, f, spec) || check_length(&L, f, f->len - L.start))
		return -1;
	if (give && give->map_own && L.bytes && (keeps_floats(&L, spec) || (is_native(&L) && L.t.size == 8)) &&
	    (uintptr_t)(f->data + L.start) % L.t.size == 0) {
		/* the values as they are: the mapping and its budget pass to m */
		values_at(m, &L, spec, give->map, give->map_len, give->data + L.start);
		m->held = give->held;
		give->map = NULL;
		give->map_len = 0;
		give->map_own = 0;
		give->held = 0;
		give->data = NULL;
		give->len = 0;
		if (check_finite(m, f, spec, &L))
			goto fail;
		m->from_f32 = L.t.kind == 'f' && L.t.size <= 4;
		m->from_type = npy_from_type(&L);
		return 0;
	}
	if (alloc_for(m, &L, spec))
		return -1;
	if (is_native(&L)) {
		copy_native(m, 0, f->data + L.start, L.count, &L);
		if (check_finite(m, f, spec, &L))
			goto fail;
	} else if (convert_all(m, f, spec, &L)) {
		goto fail;
	}
	m->is_bool = L.t.kind == 'b';
	m->from_f32 = L.t.kind == 'f' && L.t.size <= 4;
	m->from_type = npy_from_type(&L);
	return 0;
fail:
	matrix_free(m);
	return -1;
}

int read_npy(matrix *m, const input_file *f, const read_spec *spec)
{
	return read_from(m, f, spec, NULL);
}

int read_npy_take(matrix *m, input_file *f, const read_spec *spec)
{
	return read_from(m, f, spec, f);
}

static ssize_t read_some(int fd, void *p, size_t n)
{
	ssize_t got;

	do
		got = read(fd, p, n);
	while (got < 0 && errno == EINTR);
	return got;
}

/* Read until n bytes are at p or the file ends, how many in *came: 0, or
 * -1 said. */
static int read_full(const input_file *f, unsigned char *p, size_t n, size_t *came)
{
	*came = 0;
	while (*came < n) {
		/* at most 1 GiB a call: Linux moves no more than 2 GiB at once */
		const size_t ask = n - *came < ((size_t)1 << 30) ? n - *came : (size_t)1 << 30;
		const ssize_t got = read_some(f->fd, p + *came, ask);

		if (got < 0)
			return error("%s: read error: %s", f->name, strerror(errno));
		if (got == 0)
			break;
		*came += (size_t)got;
	}
	return 0;
}

/* bytes left in the file after what was read (counted on to 1 GiB past
 * what was promised, then "more than"), or -1 said */
static int count_rest(const input_file *f, size_t *rest, int *more)
{
	unsigned char scratch[1 << 14];
	size_t came;

	*rest = 0;
	*more = 0;
	do {
		if (read_full(f, scratch, sizeof(scratch), &came))
			return -1;
		*rest += came;
		if (*rest >= (size_t)1 << 30) {
			*more = 1;
			break;
		}
	} while (came == sizeof(scratch));
	return 0;
}

/*
 * The values of a regular file mapped rather than read (READ_MAP): page
 * cache pages, which the kernel need not zero, where read() would copy
 * them into fresh anonymous memory (about 0.75 ms a MiB on a VM).  Only
 * what needs no conversion: native values the caller keeps as they are,
 * at an offset aligned for their type, in a file opened by its path (not
 * standard input, whose offset need not be 0) whose size is what the
 * header promises, checked again once mapped: a file that changed size
 * since it was opened is read as any other, and says what is wrong.  (A
 * file truncated later, while mapped, would end the run with SIGBUS: as
 * with any program that maps its input, do not rewrite a file mha is
 * reading.)  The mapping is charged to the budget as the block read()
 * would have filled, so --max-memory refuses the same runs either way:
 * the mapped pages are in the process's resident memory as much.
 *
 * 0 mapped (m set, the values not yet checked), 1 not mapped (nothing
 * changed: read the file instead), -1 said.
 */
static int map_values(matrix *m, const npy_layout *L, input_file *f, const read_spec *spec)
{
	const size_t len = L->start + L->bytes;
	const int floats = keeps_floats(L, spec);
	struct stat st;
	void *p;

	if (!(spec->flags & READ_MAP) || f->fd <= STDIN_FILENO || !f->sized ||
	    (!floats && L->t.size != 8) || L->start % L->t.size ||
	    f->size < L->start || f->size - L->start != L->bytes)
		return 1;
	m->held = budget_block(L->bytes);
	if (budget_take(m->held)) {
		m->held = 0;
		return budget_refuse(NULL, L->bytes);
	}
	/* populated now: no fault per page later (madvise(MADV_WILLNEED)
	 * measured the same here, with a fault every 16 pages or so) */
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, f->fd, 0);
	if (p == MAP_FAILED) {
		budget_give(m->held);
		m->held = 0;
		return 1;
	}
	if (fstat(f->fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 0 ||
	    (unsigned long long)st.st_size != (unsigned long long)len) {
		munmap(p, len);
		budget_give(m->held);
		m->held = 0;
		return 1;
	}
	values_at(m, L, spec, p, len, (unsigned char *)p + L->start);
	return 0;
}

int read_npy_rest(matrix *m, input_file *f, const read_spec *spec)
{
	npy_layout L;
	size_t have, want, came, rest = 0;
	unsigned char *dst;
	int more = 0;

	memset(m, 0, sizeof(*m));
	/* the header whole in data: 10 or 12 bytes say how long it is */
	if (input_fill(f, 12))
		return -1;
	if (f->len >= 12 && !memcmp(f->data, "\x93NUMPY", 6) && f->data[7] == 0 &&
	    f->data[6] >= 1 && f->data[6] <= 3) {
		const size_t prefix = f->data[6] == 1 ? 10 : 12;
		size_t hlen = (size_t)f->data[8] | (size_t)f->data[9] << 8;

		if (prefix == 12)
			hlen |= (size_t)f->data[10] << 16 | (size_t)f->data[11] << 24;
		if (input_fill(f, prefix + hlen))
			return -1;
	}
	if (layout_of(&L, f, spec))
		return -1;
	if (!is_native(&L) || f->ended) {
		/* one value at a time, or all read already: from memory */
		return input_finish(f) ? -1 : read_npy(m, f, spec);
	}
	/* a regular file says how long it is: a short one is refused before
	 * anything is allocated (if it lied, the reading below finds out) */
	if (f->sized && f->size >= L.start && L.bytes > f->size - L.start)
		return check_length(&L, f, f->size - L.start);
	switch (map_values(m, &L, f, spec)) {
	case 0:
		if (check_finite(m, f, spec, &L))
			goto fail;
		m->from_f32 = L.t.kind == 'f' && L.t.size <= 4;
		m->from_type = npy_from_type(&L);
		return 0;
	case 1:
		break;
	default:
		return -1;
	}
	if (alloc_for(m, &L, spec))
		return -1;
	/* what followed the header in data, then the rest straight into the
	 * matrix: float64, and floats kept, are their own bytes; float32
	 * widened passes through a buffer */
	have = f->len - L.start < L.bytes ? f->len - L.start : L.bytes;
	want = L.bytes - have;
	came = 0;
	if (m->f || L.t.size == 8) {
		dst = m->f ? (unsigned char *)m->f : (unsigned char *)m->v;
		memcpy(dst, f->data + L.start, have);
		if (read_full(f, dst + have, want, &came))
			goto fail;
	} else {
		/* a value cut at the end of data continues in the file */
		unsigned char buf[1 << 16];
		size_t fill = have % 4, done = have / 4;

		copy_native(m, 0, f->data + L.start, done, &L);
		memcpy(buf, f->data + L.start + 4 * done, fill);
		while (came < want) {
			const size_t ask = want - came < sizeof(buf) - fill ? want - came
									 : sizeof(buf) - fill;
			size_t got, whole;

			if (read_full(f, buf + fill, ask, &got))
				goto fail;
			came += got;
			fill += got;
			whole = fill / 4;
			copy_native(m, done, buf, whole, &L);
			done += whole;
			fill -= 4 * whole;
			memmove(buf, buf + 4 * whole, fill);
			if (got < ask)
				break;
		}
	}
	if (came < want) {
		check_length(&L, f, have + came);
		goto fail;
	}
	/* nothing may follow the values */
	if (f->len - L.start > L.bytes)
		rest = f->len - L.start - L.bytes;
	{
		size_t after;

		if (count_rest(f, &after, &more))
			goto fail;
		rest += after;
	}
	if (rest) {
		if (more)
			error("%s: more than %zu bytes after the data: the header promises %zu values "
			      "(%zu bytes)", f->name, rest, L.count, L.bytes);
		else
			check_length(&L, f, L.bytes + rest);
		goto fail;
	}
	if (check_finite(m, f, spec, &L))
		goto fail;
	m->from_f32 = L.t.kind == 'f' && L.t.size <= 4;
	m->from_type = npy_from_type(&L);
	return 0;
fail:
	matrix_free(m);
	return -1;
}

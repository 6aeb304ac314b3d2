/*
 * read/npy.c: NumPy .npy files (format 1.0, 2.0 and 3.0) into matrices.
 *
 * A .npy file is the magic "\x93NUMPY", a version, the header's length,
 * the header, and the values.  The header is a Python dict literal such as
 *
 *   {'descr': '<f8', 'fortran_order': False, 'shape': (6, 4), }
 *
 * This is a parser for that one dict, not a Python evaluator: the three
 * keys in any order, each once, Python's spacing and trailing commas, and
 * nothing else.  Nothing in the header is trusted: the byte size it
 * promises is checked against the bytes that follow before a matrix is
 * allocated.  Every value must convert to a double exactly: float64,
 * float32 and float16, integers that fit in 53 bits, and booleans where
 * the caller accepts them (a mask).
 */
#include "read/npy.h"
#include "read/half.h"
#include "base/cli.h"
#include "base/budget.h"

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

/* what the .npy reader accepts, for the message about what it does not */
#define SUPPORTED "(float64, float32, float16, integers, or bool for a mask)"

typedef struct npy_dtype {
	char kind;   /* 'f' float, 'i' signed, 'u' unsigned, 'b' bool */
	size_t size; /* bytes per value */
	int big;     /* stored most significant byte first */
} npy_dtype;


/* ---- the header dict ----------------------------------------------------- */

typedef struct cursor {
	const input_file *f;
	const char *s; /* the header text, not NUL-terminated */
	size_t n, p;
	int py2;       /* format 1.0 or 2.0: Python 2's "6L" may appear */
} cursor;

static void skip_space(cursor *c)
{
	/* inside braces Python lets a literal span lines */
	while (c->p < c->n && (c->s[c->p] == ' ' || c->s[c->p] == '\t' || c->s[c->p] == '\n' ||
			       c->s[c->p] == '\r' || c->s[c->p] == '\f'))
		c->p++;
}

/* "'x'", "byte 0x93", "the end of the header": what the cursor is at */
static const char *found(const cursor *c, char *buf, size_t size)
{
	unsigned char ch;

	if (c->p >= c->n)
		return "the end of the header";
	ch = (unsigned char)c->s[c->p];
	if (isprint(ch))
		snprintf(buf, size, "'%c'", ch);
	else
		snprintf(buf, size, "byte 0x%02x", ch);
	return buf;
}

static int bad_header(const cursor *c, const char *expected)
{
	char buf[16];

	return error("%s: invalid .npy header: expected %s, found %s", c->f->name, expected,
		     found(c, buf, sizeof(buf)));
}

/* a quoted string without escapes (a key or the descr); its text into buf,
 * unprintable bytes as '?' */
static int quoted(cursor *c, char *buf, size_t size, const char *expected)
{
	char q;
	size_t start, len;

	if (c->p >= c->n || (c->s[c->p] != '\'' && c->s[c->p] != '"'))
		return bad_header(c, expected);
	q = c->s[c->p++];
	start = c->p;
	while (c->p < c->n && c->s[c->p] != q && c->s[c->p] != '\\' && c->s[c->p] != '\n')
		c->p++;
	if (c->p >= c->n || c->s[c->p] != q)
		return error("%s: invalid .npy header: a string that does not end "
			     "(or has an escape)", c->f->name);
	len = c->p - start;
	c->p++;
	if (len >= size) {
		/* too long for any key or supported dtype: keep a recognisable head */
		len = size - 4;
		memcpy(buf, c->s + start, len);
		memcpy(buf + len, "...", 4);
	} else {
		memcpy(buf, c->s + start, len);
		buf[len] = '\0';
	}
	/* it goes into messages; no valid key or dtype has such bytes anyway */
	for (char *b = buf; *b; b++)
		if (!isprint((unsigned char)*b))
			*b = '?';
	return 0;
}

static int word(cursor *c, const char *w)
{
	const size_t len = strlen(w);

	if (c->n - c->p < len || memcmp(c->s + c->p, w, len))
		return 0;
	if (c->n - c->p > len &&
	    (isalnum((unsigned char)c->s[c->p + len]) || c->s[c->p + len] == '_'))
		return 0; /* "Falsey" is a name, not False */
	c->p += len;
	return 1;
}

/* one non-negative Python integer of the shape */
static int dimension(cursor *c, size_t *d)
{
	const size_t start = c->p;
	size_t v = 0;

	if (c->p < c->n && c->s[c->p] == '-')
		return error("%s: invalid .npy header: a negative dimension in the shape",
			     c->f->name);
	if (c->p >= c->n || !isdigit((unsigned char)c->s[c->p]))
		return bad_header(c, "a dimension (an integer) in the shape");
	for (; c->p < c->n && isdigit((unsigned char)c->s[c->p]); c->p++) {
		const size_t digit = (size_t)(c->s[c->p] - '0');

		if (v > (SIZE_MAX - digit) / 10)
			return error("%s: invalid .npy header: a dimension in the shape is "
				     "too large", c->f->name);
		v = v * 10 + digit;
	}
	if (c->s[start] == '0' && c->p - start > 1 && v != 0)
		return error("%s: invalid .npy header: '%.*s' in the shape has a leading zero",
			     c->f->name, (int)(c->p - start), c->s + start);
	if (c->py2 && c->p < c->n && (c->s[c->p] == 'L' || c->s[c->p] == 'l'))
		c->p++; /* Python 2's long integers, as old NumPy wrote them */
	*d = v;
	return 0;
}

/* the tuple after 'shape': "(6, 4)", "(4,)", "()" */
static int shape(cursor *c, npy_header *h)
{
	int comma = 0;

	if (c->p >= c->n || c->s[c->p] != '(')
		return bad_header(c, "a tuple like (6, 4) for 'shape'");
	c->p++;
	skip_space(c);
	while (c->p < c->n && c->s[c->p] != ')') {
		size_t d = 0;

		if (dimension(c, &d))
			return -1;
		if (h->rank < 4)
			h->dim[h->rank] = d;
		h->rank++;
		h->zero_dim |= d == 0;
		skip_space(c);
		comma = c->p < c->n && c->s[c->p] == ',';
		if (comma) {
			c->p++;
			skip_space(c);
		} else if (c->p >= c->n || c->s[c->p] != ')') {
			return bad_header(c, "',' or ')' in the shape");
		}
	}
	if (c->p >= c->n)
		return bad_header(c, "')' to end the shape");
	c->p++;
	if (h->rank == 1 && !comma)
		return error("%s: invalid .npy header: the shape (%zu) is a number, not a tuple "
			     "(one dimension is written (%zu,))", c->f->name, h->dim[0], h->dim[0]);
	return 0;
}

static int parse_header(npy_header *h, const input_file *f, const char *what,
			const char *text, size_t len, int py2)
{
	static const char *const keys[] = { "descr", "fortran_order", "shape" };
	cursor c = { .f = f, .s = text, .n = len, .p = 0, .py2 = py2 };
	int seen[3] = { 0, 0, 0 };

	memset(h, 0, sizeof(*h));
	h->dim[0] = h->dim[1] = h->dim[2] = h->dim[3] = 1;
	skip_space(&c);
	if (c.p >= c.n || c.s[c.p] != '{')
		return bad_header(&c, "a Python dict starting with '{'");
	c.p++;
	skip_space(&c);
	while (c.p < c.n && c.s[c.p] != '}') {
		char key[32];
		size_t k;

		if (quoted(&c, key, sizeof(key), "a quoted key or '}'"))
			return -1;
		for (k = 0; k < 3 && strcmp(key, keys[k]); k++)
			;
		if (k == 3)
			return error("%s: invalid .npy header: unexpected key '%s' (expected "
				     "'descr', 'fortran_order' and 'shape')", f->name, key);
		if (seen[k]++)
			return error("%s: invalid .npy header: the key '%s' appears twice",
				     f->name, key);
		skip_space(&c);
		if (c.p >= c.n || c.s[c.p] != ':')
			return bad_header(&c, "':' after the key");
		c.p++;
		skip_space(&c);
		if (k == 0) {
			if (c.p < c.n && c.s[c.p] == '[')
				return error("%s: %s: a structured dtype (a list of fields) is not "
					     "supported " SUPPORTED, f->name, what);
			if (quoted(&c, h->descr, sizeof(h->descr), "a quoted dtype for 'descr'"))
				return -1;
		} else if (k == 1) {
			if (word(&c, "True"))
				h->fortran = 1;
			else if (word(&c, "False"))
				h->fortran = 0;
			else
				return bad_header(&c, "True or False for 'fortran_order'");
		} else if (shape(&c, h)) {
			return -1;
		}
		skip_space(&c);
		if (c.p < c.n && c.s[c.p] == ',') {
			c.p++;
			skip_space(&c);
		} else if (c.p >= c.n || c.s[c.p] != '}') {
			return bad_header(&c, "',' or '}' after a value");
		}
	}
	if (c.p >= c.n)
		return bad_header(&c, "'}' to end the dict");
	c.p++;
	skip_space(&c); /* NumPy pads with spaces and ends with '\n' */
	if (c.p < c.n)
		return bad_header(&c, "only padding after the dict");
	for (size_t k = 0; k < 3; k++)
		if (!seen[k])
			return error("%s: invalid .npy header: no '%s' key", f->name, keys[k]);
	return 0;
}

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

/* The magic, the version and the header dict (npz.h) */
int npy_read_header(npy_header *h, size_t *start, const input_file *f, const char *what)
{
	const unsigned char *d = f->data;
	size_t prefix, hlen;

	if (f->len < 6 || memcmp(d, "\x93NUMPY", 6))
		return error("%s: not a .npy file (it does not start with \\x93NUMPY)", f->name);
	if (f->len < 8)
		return error("%s: truncated: the file ends inside the .npy header", f->name);
	if ((d[6] != 1 && d[6] != 2 && d[6] != 3) || d[7] != 0)
		return error("%s: .npy format version %u.%u is not supported (1.0, 2.0 or 3.0)",
			     f->name, d[6], d[7]);
	/* 1.0: a 2-byte header length; 2.0 and 3.0: 4 bytes (both little-endian) */
	prefix = d[6] == 1 ? 10 : 12;
	if (f->len < prefix)
		return error("%s: truncated: the file ends inside the .npy header", f->name);
	hlen = (size_t)d[8] | (size_t)d[9] << 8;
	if (prefix == 12)
		hlen |= (size_t)d[10] << 16 | (size_t)d[11] << 24;
	if (hlen > f->len - prefix)
		return error("%s: truncated: the .npy header is %zu bytes long but only %zu "
			     "bytes follow its length", f->name, hlen, f->len - prefix);
	if (parse_header(h, f, what, (const char *)d + prefix, hlen, d[6] < 3))
		return -1;
	*start = prefix + hlen;
	return 0;
}

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
		return error("%s: %s: dtype '%s' is not supported " SUPPORTED, f->name, spec->what,
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

int read_npy(matrix *m, const input_file *f, const read_spec *spec)
{
	npy_layout L;

	memset(m, 0, sizeof(*m));
	if (layout_of(&L, f, spec) || check_length(&L, f, f->len - L.start) ||
	    alloc_for(m, &L, spec))
		return -1;
	if (is_native(&L)) {
		copy_native(m, 0, f->data + L.start, L.count, &L);
		if (check_finite(m, f, spec, &L))
			goto fail;
	} else if (convert_all(m, f, spec, &L)) {
		goto fail;
	}
	m->is_bool = L.t.kind == 'b';
	return 0;
fail:
	matrix_free(m);
	return -1;
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
	m->rank = L->h.rank;
	for (size_t r = 0; r < 4; r++)
		m->dim[r] = r < L->h.rank ? L->h.dim[r] : 1;
	m->map = p;
	m->map_len = len;
	if (floats) {
		m->f = (float *)(void *)((unsigned char *)p + L->start);
		m->is_f32 = 1;
	} else {
		m->v = (double *)(void *)((unsigned char *)p + L->start);
	}
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
	return 0;
fail:
	matrix_free(m);
	return -1;
}

/*
 * npy_header.c: a .npy file's header (npy.h): the magic "\x93NUMPY", a
 * version, the header's length and the header, a Python dict literal such
 * as
 *
 *   {'descr': '<f8', 'fortran_order': False, 'shape': (6, 4), }
 *
 * This is a parser for that one dict, not a Python evaluator: the three
 * keys in any order, each once, Python's spacing and trailing commas, and
 * nothing else.
 */
#include "read/npy.h"
#include "util/msg.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
					     "supported " NPY_SUPPORTED, f->name, what);
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

/* The magic, the version and the header dict */
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

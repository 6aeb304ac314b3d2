/*
 * read/csv.c: CSV files into matrices, for numbers that come from
 * spreadsheets, numpy.savetxt or pandas.
 *
 * A file holds one 2-D matrix, a row per line.  The reader takes what
 * spreadsheets write: commas, or semicolons or tabs when the first row has
 * none; fields in double quotes; a header row of names; CRLF (or CR alone,
 * as Excel for the Mac writes); a UTF-8 byte order mark; blank lines and
 * '#' comment lines (numpy.savetxt's header).  It does not take decimal
 * commas, quoted fields spanning lines, or more than one matrix.
 *
 * One pass over the text: the file ends in a NUL, so fields are looked at
 * where they lie, their shape checked here, their value found by strtod
 * (exactly rounded), and the values collected in one array that grows
 * geometrically and becomes the matrix's.
 */
#include "read/csv.h"
#include "util/budget.h"
#include "util/msg.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* what a field holds */
enum kind { K_EMPTY, K_NUMBER, K_NONFINITE, K_BOOL, K_OTHER };

/* how a field's text ended */
enum { FIELD_OK, FIELD_UNCLOSED, FIELD_JUNK };

/* One field of a line: its text is [s, e), without quotes and blanks. */
struct field {
	const char *at;  /* its first non-blank byte: the column in messages */
	const char *s, *e;
	const char *bad; /* FIELD_JUNK: the first byte after the closing quote */
	int escapes;     /* quoted, with "" inside: cannot be a number */
};

struct csv {
	const input_file *f;
	const read_spec *spec;
	char sep;               /* ',', ';' or '\t' */
	size_t line;            /* 1-based, of the line being read */
	const char *line_start; /* its first byte */
	double *v;              /* (rows, cols) values so far, row-major */
	size_t n, cap;          /* values in v, and room for */
	int bools;              /* -1 unknown yet, 0 numbers, 1 booleans */
	int labelled;           /* the first column holds labels (tokens), not numbers */
	char **labels;          /* one per row read so far */
	size_t n_labels, cap_labels;
	size_t labels_held;     /* what the labels hold of the memory budget */
};

/* '\0' ends the text: there is no other NUL in it */
static int is_end(char ch)
{
	return ch == '\n' || ch == '\r' || ch == '\0';
}

/* blanks around a field: a tab is the separator in a TSV file */
static int is_blank(char ch, char sep)
{
	return ch == ' ' || (ch == '\t' && sep != '\t');
}

/* the separator; ' ' stands for any run of spaces and tabs (numpy.savetxt) */
static int is_sep(char ch, char sep)
{
	return sep == ' ' ? (ch == ' ' || ch == '\t') : ch == sep;
}

/* *pp at a separator: past it (a whole run of blanks for ' ') */
static void skip_sep(const char **pp, char sep)
{
	if (sep == ' ')
		while (is_sep(**pp, sep))
			++*pp;
	else
		++*pp;
}

/* p at the end of a line: the start of the next (\n, \r\n or \r) */
static const char *next_line(const char *p)
{
	if (*p == '\r')
		p++;
	if (*p == '\n')
		p++;
	return p;
}

/*
 * *pp at the start of a field: fill fl and leave *pp at the separator that
 * ends it, or at the end of the line.  Numbers never span lines, so neither
 * does a quoted field.
 */
static int next_field(const char **pp, char sep, struct field *fl)
{
	const char *p = *pp;

	while (is_blank(*p, sep))
		p++;
	fl->at = p;
	fl->escapes = 0;
	if (*p != '"') {
		while (!is_sep(*p, sep) && !is_end(*p))
			p++;
		fl->s = fl->at;
		fl->e = p;
		while (fl->e > fl->s && is_blank(fl->e[-1], sep))
			fl->e--;
		*pp = p;
		return FIELD_OK;
	}
	for (p++; *p != '"' || p[1] == '"'; p++) {
		if (is_end(*p)) {
			*pp = p;
			return FIELD_UNCLOSED;
		}
		if (*p == '"') {
			fl->escapes = 1;
			p++;
		}
	}
	fl->s = fl->at + 1;
	fl->e = p;
	while (fl->s < fl->e && (*fl->s == ' ' || *fl->s == '\t'))
		fl->s++;
	while (fl->e > fl->s && (fl->e[-1] == ' ' || fl->e[-1] == '\t'))
		fl->e--;
	for (p++; sep != ' ' && is_blank(*p, sep); p++)
		;
	if (!is_sep(*p, sep) && !is_end(*p)) {
		fl->bad = p;
		while (!is_sep(*p, sep) && !is_end(*p))
			p++;
		*pp = p;
		return FIELD_JUNK;
	}
	*pp = p;
	return FIELD_OK;
}

static int is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/* [s, e) is a decimal number as strtod reads it: no hex, no inf, no junk */
static int is_decimal(const char *s, const char *e)
{
	size_t digits = 0;

	if (s < e && (*s == '+' || *s == '-'))
		s++;
	for (; s < e && is_digit(*s); s++)
		digits++;
	if (s < e && *s == '.')
		for (s++; s < e && is_digit(*s); s++)
			digits++;
	if (!digits)
		return 0;
	if (s < e && (*s == 'e' || *s == 'E')) {
		s++;
		if (s < e && (*s == '+' || *s == '-'))
			s++;
		if (s == e || !is_digit(*s))
			return 0;
		while (s < e && is_digit(*s))
			s++;
	}
	return s == e;
}

/* What fl holds, and its value unless K_EMPTY or K_OTHER (a number too
 * large for a double comes out infinite). */
static enum kind classify(const struct field *fl, double *v)
{
	const char *s = fl->s;
	const size_t len = (size_t)(fl->e - fl->s);
	char buf[16];

	if (!len)
		return K_EMPTY;
	if (fl->escapes)
		return K_OTHER;
	if (is_decimal(s, fl->e)) {
		char *end;

		/* what follows the text (a separator, blank, quote or line end)
		 * cannot continue a number, so strtod stops at fl->e */
		*v = strtod(s, &end);
		return end == fl->e ? K_NUMBER : K_OTHER;
	}
	if (len == 4 && !strncasecmp(s, "true", 4)) {
		*v = 1.0;
		return K_BOOL;
	}
	if (len == 5 && !strncasecmp(s, "false", 5)) {
		*v = 0.0;
		return K_BOOL;
	}
	if (len < sizeof(buf)) {
		size_t k = 0;

		memcpy(buf, s, len);
		buf[len] = '\0';
		if (parse_nonfinite(buf, v))
			return K_NONFINITE;
		if (buf[0] == '-' || buf[0] == '+')
			k = 1;
		if (!strcmp(buf + k, "\xE2\x88\x9E")) { /* U+221E INFINITY, "∞" */
			*v = buf[0] == '-' ? -INFINITY : INFINITY;
			return K_NONFINITE;
		}
	}
	return K_OTHER;
}

/* "0.5", "-inf", "\"0.4x\"", "an empty field": what was found, for messages */
static const char *describe(const struct field *fl, enum kind k, char *buf, size_t size)
{
	const size_t most = 40;
	size_t len = (size_t)(fl->e - fl->s), used = 0;
	int cut = 0;

	if (k == K_EMPTY)
		return "an empty field";
	if (len > most) {
		/* cut before a character, not inside one */
		for (len = most; len > 0 && ((unsigned char)fl->s[len] & 0xC0) == 0x80; len--)
			;
		cut = 1;
	}
	if (k == K_OTHER)
		buf[used++] = '"';
	for (size_t i = 0; i < len && used + 5 < size; i++) {
		const unsigned char ch = (unsigned char)fl->s[i];

		if (fl->escapes && ch == '"')
			i++; /* "" stands for " */
		buf[used++] = ch < 0x20 || ch == 0x7F ? '?' : (char)ch;
	}
	if (cut) {
		memcpy(buf + used, "...", 3);
		used += 3;
	}
	if (k == K_OTHER)
		buf[used++] = '"';
	buf[used] = '\0';
	return buf;
}

/* "1,5": a number written with a decimal comma */
static int decimal_comma(const struct field *fl)
{
	const char *comma = memchr(fl->s, ',', (size_t)(fl->e - fl->s));

	return comma && !fl->escapes && is_decimal(fl->s, comma) &&
	       comma + 1 < fl->e && is_digit(comma[1]) && is_decimal(comma + 1, fl->e);
}

/* "file:line:col: WHAT[i][j]: MESSAGE" about the field at, in row i, column j */
MSG_PRINTF(5, 6)
static int field_error(const struct csv *c, const char *at, size_t i, size_t j,
		       const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return error("%s:%zu:%zu: %s[%zu][%zu]: %s", c->f->name, c->line,
		     (size_t)(at - c->line_start) + 1, c->spec->what, i, j, msg);
}

static int grow(struct csv *c)
{
	const size_t most = SIZE_MAX / sizeof(double);
	size_t cap = c->cap ? c->cap * 2 : 4096;
	double *v;

	if (c->cap > most / 2)
		cap = most;
	if (cap <= c->cap)
		return error("%s: %s: too many numbers to address", c->f->name, c->spec->what);
	/* while the array moves, the old block and the new are both held */
	if (budget_take(budget_block(cap * sizeof(double))))
		return budget_refuse(c->f->name, cap * sizeof(double));
	v = realloc(c->v, cap * sizeof(double));
	if (!v) {
		budget_give(budget_block(cap * sizeof(double)));
		return error("%s: %s: out of memory for %zu numbers", c->f->name, c->spec->what,
			     cap);
	}
	if (c->cap)
		budget_give(budget_block(c->cap * sizeof(double)));
	c->v = v;
	c->cap = cap;
	return 0;
}

/* The value of fl, entry [i][j]: appended to c->v, or reported. */
static int store(struct csv *c, const struct field *fl, size_t i, size_t j)
{
	const unsigned flags = c->spec->flags;
	double v = 0.0;
	const enum kind k = classify(fl, &v);
	char buf[64];

	if (c->n == c->cap && grow(c))
		return -1;
	if (k == K_BOOL && (flags & READ_BOOL)) {
		if (c->bools == 0)
			return field_error(c, fl->at, i, j, "expected a number like the rest, found %s",
					   describe(fl, k, buf, sizeof(buf)));
		c->bools = 1;
		c->v[c->n++] = v;
		return 0;
	}
	if (c->bools == 1)
		return field_error(c, fl->at, i, j, "expected true or false like the rest, found %s",
				   describe(fl, k, buf, sizeof(buf)));
	if (k == K_NUMBER) {
		if (isinf(v))
			return field_error(c, fl->at, i, j,
					   "number out of range (beyond about 1.8e308)");
	} else if (k == K_NONFINITE) {
		if (!(flags & READ_NONFINITE))
			return field_error(c, fl->at, i, j,
					   "%s is not allowed here (only a mask may hold -inf, inf or nan)",
					   describe(fl, k, buf, sizeof(buf)));
	} else {
		const char *hint = "";

		if (decimal_comma(fl))
			hint = " (write decimals with a point)";
		else if (c->sep == ',' && memchr(fl->s, ';', (size_t)(fl->e - fl->s)))
			hint = " (with ';' between fields, write decimals with a point)";
		return field_error(c, fl->at, i, j, "expected %s, found %s%s",
				   (flags & READ_BOOL) ? "a number or a boolean" : "a number",
				   describe(fl, k, buf, sizeof(buf)), hint);
	}
	c->bools = 0;
	c->v[c->n++] = v;
	return 0;
}

static const char *plural_fields(size_t n)
{
	return n == 1 ? "field" : "fields";
}

/*
 * Read the line at *pp as row i: its values appended to c->v, *pp left at
 * the end of the line.  *cols is 0 for the first row, which sets it; rows
 * after it must have as many fields.
 */
/* the label in the first field of a labelled row, "" unescaped */
static int read_label(struct csv *c, const char **pp, size_t i)
{
	struct field fl;
	char *t, *o;

	if (next_field(pp, c->sep, &fl) != FIELD_OK)
		return field_error(c, fl.at, i, 0, "a label that is not closed or not followed by a separator");
	if (!is_sep(**pp, c->sep))
		return error("%s:%zu: %s[%zu]: a label (%.*s) and no numbers", c->f->name, c->line,
			     c->spec->what, i, (int)(fl.e - fl.s > 40 ? 40 : fl.e - fl.s), fl.s);
	skip_sep(pp, c->sep);
	if (c->n_labels == c->cap_labels) {
		size_t cap = c->cap_labels ? c->cap_labels * 2 : 64;
		char **more;

		if (budget_take(budget_block(cap * sizeof(*more))))
			return budget_refuse(c->f->name, cap * sizeof(*more));
		more = realloc(c->labels, cap * sizeof(*more));
		if (!more) {
			budget_give(budget_block(cap * sizeof(*more)));
			return error("%s: out of memory", c->f->name);
		}
		if (c->cap_labels) {
			budget_give(budget_block(c->cap_labels * sizeof(*more)));
			c->labels_held -= budget_block(c->cap_labels * sizeof(*more));
		}
		c->labels_held += budget_block(cap * sizeof(*more));
		c->labels = more;
		c->cap_labels = cap;
	}
	if (budget_take(budget_block((size_t)(fl.e - fl.s) + 1)))
		return budget_refuse(c->f->name, (size_t)(fl.e - fl.s) + 1);
	t = o = malloc((size_t)(fl.e - fl.s) + 1);
	if (!t) {
		budget_give(budget_block((size_t)(fl.e - fl.s) + 1));
		return error("%s: out of memory", c->f->name);
	}
	c->labels_held += budget_block((size_t)(fl.e - fl.s) + 1);
	for (const char *q = fl.s; q < fl.e; q++) {
		*o++ = *q;
		if (*q == '"' && fl.escapes && q + 1 < fl.e && q[1] == '"')
			q++;
	}
	*o = '\0';
	c->labels[c->n_labels++] = t;
	return 0;
}

static int read_row(struct csv *c, const char **pp, size_t i, size_t *cols, size_t first_line)
{
	const char *p = *pp;
	struct field fl;
	size_t j;

	if (c->labelled && read_label(c, &p, i))
		return -1;

	for (j = 0;; j++) {
		const int rc = next_field(&p, c->sep, &fl);

		if (*cols && j == *cols) {
			const char *extra = fl.at;
			size_t n = j + 1;

			while (is_sep(*p, c->sep)) {
				skip_sep(&p, c->sep);
				if (is_end(*p))
					break;
				next_field(&p, c->sep, &fl);
				n++;
			}
			return error("%s:%zu:%zu: %s[%zu] has %zu fields but %s[0] (line %zu) has %zu: "
				     "rows must be equally long", c->f->name, c->line,
				     (size_t)(extra - c->line_start) + 1, c->spec->what, i, n,
				     c->spec->what, first_line, *cols);
		}
		if (rc == FIELD_UNCLOSED)
			return field_error(c, fl.at, i, j, "the quote is not closed on this line");
		if (rc == FIELD_JUNK)
			return field_error(c, fl.bad, i, j,
					   "expected a separator after the closing quote");
		if (store(c, &fl, i, j))
			return -1;
		if (!is_sep(*p, c->sep))
			break;
		skip_sep(&p, c->sep);
		if (c->sep == ' ' && is_end(*p))
			break; /* blanks at the end of the line */
	}
	j++;
	if (!*cols)
		*cols = j;
	else if (j < *cols)
		return error("%s:%zu: %s[%zu] has %zu %s but %s[0] (line %zu) has %zu: "
			     "rows must be equally long", c->f->name, c->line, c->spec->what, i, j,
			     plural_fields(j), c->spec->what, first_line, *cols);
	*pp = p;
	return 0;
}

/*
 * The separator the line at p uses: ',', else ';', else a tab, else blanks
 * between fields (as numpy.savetxt writes by default); 0: one field only.
 */
static char find_sep(const char *p)
{
	int semicolon = 0, tab = 0, gap = 0, seen = 0;

	while (*p == ' ')
		p++;
	for (; !is_end(*p); p++) {
		if (*p == ',')
			return ',';
		semicolon |= *p == ';';
		tab |= *p == '\t';
		if (*p == ' ')
			gap |= seen;
		else if (gap && seen)
			gap = 2; /* something after the blanks: a second field */
		seen |= *p != ' ';
	}
	return semicolon ? ';' : tab ? '\t' : gap == 2 ? ' ' : 0;
}

/* The line at p is a header: no field in it is a number, a non-finite
 * spelling or a boolean (so a bad first row of numbers is never skipped). */
static int is_header(const struct csv *c, const char *p)
{
	struct field fl;

	for (;;) {
		double v;
		enum kind k;

		if (next_field(&p, c->sep, &fl) != FIELD_OK)
			return 0;
		k = classify(&fl, &v);
		if (k != K_EMPTY && k != K_OTHER)
			return 0;
		if (!is_sep(*p, c->sep))
			return 1;
		skip_sep(&p, c->sep);
		if (is_end(*p))
			return 1;
	}
}

/*
 * mha's own CSV output with several matrices: blocks, each after a line
 * "# NAME: TITLE (RxC)" or "# NAME (RxC)".  A line of that shape naming
 * the NAME at p (one of the keys the caller accepts) starts a block.
 */
static const char *block_header(const char *p)
{
	const char *q;

	if (p[0] != '#' || p[1] != ' ')
		return NULL;
	for (q = p + 2; *q == '_' || (*q >= '0' && *q <= '9') || (*q >= 'A' && *q <= 'Z') ||
		    (*q >= 'a' && *q <= 'z'); q++)
		;
	if (q == p + 2 || (*q != ':' && !(q[0] == ' ' && q[1] == '(')))
		return NULL;
	return q; /* the end of the name */
}

/*
 * Where the block for the first of spec->keys starts (the line after its
 * header, and that line's number) and ends; 0 when the file has none.
 */
static int find_block(const char *text, const read_spec *spec, const char **start,
		      size_t *start_line, const char **stop)
{
	for (size_t k = 0; spec->keys && spec->keys[k]; k++) {
		const size_t klen = strlen(spec->keys[k]);
		const char *p = text;

		for (size_t line = 1; *p; line++) {
			const char *end = block_header(p);

			if (end && (size_t)(end - p - 2) == klen && !memcmp(p + 2, spec->keys[k], klen)) {
				while (!is_end(*p))
					p++;
				*start = next_line(p);
				*start_line = line + 1;
				for (p = *start; *p && !block_header(p); p = next_line(p))
					while (!is_end(*p))
						p++;
				*stop = p;
				return 1;
			}
			while (!is_end(*p))
				p++;
			p = next_line(p);
		}
	}
	return 0;
}

/*
 * A label column: the row at p starts with a name and goes on with numbers,
 * and so does every row after it (up to stop), so that a typo in a first
 * number ("x0", "1,5") stays an error rather than becoming a label.
 */
static int labelled_rows(const struct csv *c, const char *p, const char *stop)
{
	struct field fl;
	double v;
	enum kind k;
	const char *q = p;

	if (next_field(&q, c->sep, &fl) != FIELD_OK || !is_sep(*q, c->sep))
		return 0;
	skip_sep(&q, c->sep);
	if (is_end(*q) || next_field(&q, c->sep, &fl) != FIELD_OK)
		return 0;
	k = classify(&fl, &v);
	if (k != K_NUMBER && k != K_NONFINITE && k != K_BOOL)
		return 0;
	for (; *p && (!stop || p < stop); p = next_line(p)) {
		const char *r = p;

		while (*r == ' ' || *r == '\t')
			r++;
		if (!is_end(*r) && *r != '#') {
			q = p;
			if (next_field(&q, c->sep, &fl) != FIELD_OK || classify(&fl, &v) != K_OTHER ||
			    decimal_comma(&fl))
				return 0;
		}
		while (!is_end(*p))
			p++;
	}
	return 1;
}

/* A NUL byte at nul: reported with its line and column. */
static int nul_error(const input_file *f, const char *text, const char *nul)
{
	size_t line = 1;
	const char *start = text;

	for (const char *p = text; p < nul; p++) {
		if (*p == '\n' || (*p == '\r' && p[1] != '\n')) {
			line++;
			start = p + 1;
		}
	}
	return error("%s:%zu:%zu: a NUL byte: not a CSV text file", f->name, line,
		     (size_t)(nul - start) + 1);
}

int read_csv(matrix *m, const input_file *f, const read_spec *spec)
{
	struct csv c = { .f = f, .spec = spec, .sep = ',', .bools = -1 };
	const char *text = (const char *)f->data, *p = text, *nul, *stop = NULL;
	size_t rows = 0, cols = 0, first_line = 0, line0 = 1;
	int header_checked = 0, sep_known = 0;
	double *v;

	memset(m, 0, sizeof(*m));
	nul = memchr(text, '\0', f->len);
	if (nul)
		return nul_error(f, text, nul);
	if (f->len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3))
		p += 3; /* a UTF-8 byte order mark, as Excel writes: skip it */
	/* several matrices, as mha writes them: read the one asked for, the
	 * way a JSON object is read under its key */
	if (!find_block(p, spec, &p, &line0, &stop))
		stop = NULL;

	for (c.line = line0; *p && (!stop || p < stop); c.line++, p = next_line(p)) {
		const char *q = p;

		c.line_start = p;
		while (*q == ' ' || *q == '\t')
			q++;
		if (is_end(*q) || *q == '#') {
			while (!is_end(*p))
				p++;
			continue;
		}
		if (!sep_known) {
			/* a header "x" with no separator says nothing: ask the first row */
			const char sep = find_sep(p);

			c.sep = sep ? sep : ',';
			sep_known = sep != 0;
		}
		if (!header_checked) {
			header_checked = 1;
			if (is_header(&c, p)) {
				while (!is_end(*p))
					p++;
				continue;
			}
		}
		if (!rows) {
			first_line = c.line;
			c.labelled = (spec->flags & READ_LABELS) && labelled_rows(&c, p, stop);
		}
		if (read_row(&c, &p, rows, &cols, first_line))
			goto fail;
		rows++;
		sep_known = 1;
	}

	if (!rows) {
		size_t i = f->len >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3) ? 3 : 0;

		while (i < f->len && f->data[i] && strchr(" \t\r\n\f\v", f->data[i]))
			i++;
		/* only a name ending .csv or .tsv brings a file starting so here */
		if (i < f->len && (f->data[i] == '[' || f->data[i] == '{'))
			error("%s: %s: no numbers found (its name says CSV, but it starts as JSON does)",
			      f->name, spec->what);
		else
			error("%s: %s: no numbers found (the file is empty, or holds only comments and "
			      "a header)", f->name, spec->what);
		goto fail;
	}
	if (spec->max_rank < 2) {
		if (rows != 1 && cols != 1) {
			error("%s: %s: expected one row or one column, found %zu rows of %zu", f->name,
			      spec->what, rows, cols);
			goto fail;
		}
	} else if (spec->min_rank > 2) {
		error("%s: %s: expected a %zu-D array, found a %zux%zu matrix (a CSV file holds one "
		      "2-D matrix)", f->name, spec->what, spec->min_rank, rows, cols);
		goto fail;
	}

	/* the array becomes the matrix's (matrix_free frees it), trimmed to size */
	v = realloc(c.v, c.n * sizeof(double));
	m->v = v ? v : c.v;
	m->held = budget_block(c.cap * sizeof(double));
	if (v) {
		budget_give(m->held);
		m->held = budget_block(c.n * sizeof(double));
		budget_take(m->held); /* less than was given back: never refused */
	}
	if (spec->max_rank < 2) {
		m->rank = 1;
		m->dim[0] = c.n;
		m->dim[1] = 1;
	} else {
		m->rank = 2;
		m->dim[0] = rows;
		m->dim[1] = cols;
	}
	m->dim[2] = m->dim[3] = 1;
	m->is_bool = c.bools == 1;
	if (c.labelled) {
		m->labels = c.labels;
		m->n_labels = c.n_labels;
		m->labels_held = c.labels_held;
	}
	return 0;

fail:
	free(c.v);
	if (c.cap)
		budget_give(budget_block(c.cap * sizeof(double)));
	for (size_t i = 0; i < c.n_labels; i++)
		free(c.labels[i]);
	free(c.labels);
	budget_give(c.labels_held);
	return -1;
}

/*
 * text.c: text from outside made safe to show, and its width on screen
 * (see text.h).  One decoder and one set of escapes for every writer (text,
 * Markdown, CSV, --explain, the heatmaps, SVG) and for the messages, so
 * that what a label can do to a terminal is decided in one place.
 */
#include "util/text.h"

#include <stdlib.h>
#include <string.h>

#include "util/width.h"

/* c in one of the sorted ranges of t */
static int in_table(const unsigned long (*t)[2], size_t n, unsigned long c)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;

		if (c < t[mid][0])
			hi = mid;
		else if (c > t[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

int text_char_width(unsigned long c)
{
	if (in_table(width_zero, sizeof(width_zero) / sizeof(width_zero[0]), c))
		return 0;
	if (in_table(width_wide, sizeof(width_wide) / sizeof(width_wide[0]), c))
		return 2;
	return 1;
}

/* the code point at p and its length in bytes, or TEXT_BYTE | p[0] and 1 */
static unsigned long decode(const unsigned char *p, size_t *len)
{
	unsigned long c;
	int more;

	*len = 1;
	if (p[0] < 0x80)
		return p[0];
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		c = p[0] & 0x1f;
		more = 1;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		c = p[0] & 0x0f;
		more = 2;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		c = p[0] & 0x07;
		more = 3;
	} else {
		return TEXT_BYTE | p[0]; /* a continuation byte, or one no UTF-8 has */
	}
	for (int k = 1; k <= more; k++) {
		/* a truncated sequence (the '\0' ends it too): the next byte starts afresh */
		if ((p[k] & 0xc0) != 0x80)
			return TEXT_BYTE | p[0];
		c = c << 6 | (p[k] & 0x3f);
	}
	/* overlong forms, UTF-16 surrogates, past U+10FFFF */
	if ((more == 2 && c < 0x800) || (more == 3 && (c < 0x10000 || c > 0x10FFFF)) ||
	    (c >= 0xD800 && c <= 0xDFFF))
		return TEXT_BYTE | p[0];
	*len = (size_t)more + 1;
	return c;
}

size_t text_utf8_prefix(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, len;

	while (i < n) {
		if (p[i] < 0x80) {
			i++; /* ASCII, most of any header: no decoding */
			continue;
		}
		if (decode(p + i, &len) & TEXT_BYTE)
			return i;
		i += len;
	}
	return n;
}

/* what may not reach a terminal, an SVG or a Markdown page as itself */
static int unsafe(unsigned long c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || (c >= 0x202A && c <= 0x202E) ||
	       (c >= 0x2066 && c <= 0x2069) || c == 0xFFFE || c == 0xFFFF || c >= TEXT_BYTE;
}

int text_next(const char **s, struct text_unit *u)
{
	const unsigned char *p = (const unsigned char *)*s;
	size_t len;

	if (!*p)
		return 0;
	u->c = decode(p, &len);
	*s += len;
	u->escaped = unsafe(u->c);
	if (!u->escaped) {
		memcpy(u->b, p, len);
		u->len = len;
		u->cols = text_char_width(u->c);
		return 1;
	}
	if (u->c == '\t' || u->c == '\n' || u->c == '\r') {
		u->b[0] = '\\';
		u->b[1] = u->c == '\t' ? 't' : u->c == '\n' ? 'n' : 'r';
		u->len = 2;
	} else if (u->c < 0x80 || u->c >= TEXT_BYTE) {
		/* a control byte, or a byte that is not UTF-8: the byte */
		static const char hex[] = "0123456789abcdef";
		const unsigned b = (unsigned)(u->c & 0xff);

		memcpy(u->b, "\\x", 2);
		u->b[2] = hex[b >> 4];
		u->b[3] = hex[b & 15];
		u->len = 4;
	} else {
		char tmp[8];

		snprintf(tmp, sizeof(tmp), "\\u%04lx", u->c);
		memcpy(u->b, tmp, 6);
		u->len = 6;
	}
	u->cols = (int)u->len;
	return 1;
}

size_t text_width(const char *s)
{
	struct text_unit u;
	size_t n = 0;

	while (text_next(&s, &u))
		n += (size_t)u.cols;
	return n;
}

void text_put(FILE *fp, const char *s)
{
	struct text_unit u;

	while (text_next(&s, &u))
		fwrite(u.b, 1, u.len, fp);
}

char *text_safe(const char *s)
{
	struct text_unit u;
	const char *p = s;
	size_t len = 0;
	char *out;

	while (text_next(&p, &u))
		len += u.len;
	out = malloc(len + 1);
	if (!out)
		return NULL;
	len = 0;
	while (text_next(&s, &u)) {
		memcpy(out + len, u.b, u.len);
		len += u.len;
	}
	out[len] = '\0';
	return out;
}

size_t text_shown(char *buf, size_t size, const char *s)
{
	struct text_unit u;
	size_t len = 0;

	while (text_next(&s, &u) && len + u.len < size) {
		memcpy(buf + len, u.b, u.len);
		len += u.len;
	}
	buf[len] = '\0';
	return len;
}

void text_put_json(FILE *fp, const char *s)
{
	struct text_unit u;

	fputc('"', fp);
	while (text_next(&s, &u)) {
		if (u.c >= TEXT_BYTE)
			fputs("\\ufffd", fp); /* not UTF-8: the replacement character */
		else if (u.c == '\n')
			fputs("\\n", fp);
		else if (u.c == '\t')
			fputs("\\t", fp);
		else if (u.c == '\r')
			fputs("\\r", fp);
		else if (u.escaped)
			fprintf(fp, "\\u%04lx", u.c); /* all in the BMP */
		else if (u.c == '"' || u.c == '\\')
			fprintf(fp, "\\%c", (int)u.c);
		else
			fwrite(u.b, 1, u.len, fp);
	}
	fputc('"', fp);
}

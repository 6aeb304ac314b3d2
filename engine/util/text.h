/*
 * text.h: text from outside (labels from files and --tokens, file names,
 * values quoted in messages) made safe to show, for every writer and for
 * msg.c: decoded as UTF-8, each character that could move the cursor,
 * retitle or recolour a terminal, reorder a line, or that is not UTF-8 at
 * all, shown as a visible escape; and the columns it takes on screen.
 *
 * Escaped: the C0 controls (\t, \n, \r, the others \x1b), DEL (\x7f), the
 * C1 controls U+0080 to U+009F (\u009b), the bidirectional embeddings,
 * overrides and isolates (U+202A to U+202E, U+2066 to U+2069), U+FFFE and
 * U+FFFF (not allowed in XML), and each byte that does not begin valid
 * UTF-8, overlong forms and encoded surrogates included (\xff).  A
 * backslash stays itself: the escapes are for reading, not for reading back.
 * Not for binary output; JSON has its own escapes (text_put_json).
 */
#ifndef MHA_ENGINE_TEXT_H
#define MHA_ENGINE_TEXT_H

#include <stdio.h>

/* a text_unit's c for a byte that does not begin valid UTF-8: TEXT_BYTE | the byte */
#define TEXT_BYTE 0x200000UL

/* One character as shown. */
struct text_unit {
	unsigned long c; /* its code point, or TEXT_BYTE | the byte */
	int escaped;     /* shown as an escape */
	int cols;        /* columns on a terminal: 0 (combining), 1, 2 (wide), an escape its length */
	size_t len;      /* bytes in b */
	char b[8];       /* what is shown: the character's own bytes, or its escape (not terminated) */
};

/* The next character of the string *s as shown, *s moved past it; 0 at its end. */
int text_next(const char **s, struct text_unit *u);
/* How many of the n bytes of s (s[n] a NUL) are valid UTF-8 from the
 * start, by the rule text_next() reads it with: n when all are. */
size_t text_utf8_prefix(const char *s, size_t n);
/* The columns code point c takes on a terminal shown as itself: 0, 1 or 2. */
int text_char_width(unsigned long c);
/* The columns s takes as shown. */
size_t text_width(const char *s);
/* s as shown, onto fp. */
void text_put(FILE *fp, const char *s);
/* s as shown, a new string (free() it), or NULL out of memory. */
char *text_safe(const char *s);
/* s as shown into buf (size at least 1, always terminated), cut before the
 * first character that does not fit whole; the bytes written. */
size_t text_shown(char *buf, size_t size, const char *s);
/* s as a JSON string with its quotes, valid UTF-8 whatever s holds: what
 * text_next escapes as \u escapes, a byte that is not UTF-8 as \ufffd. */
void text_put_json(FILE *fp, const char *s);

#endif

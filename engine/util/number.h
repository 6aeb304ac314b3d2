/*
 * number.h: numbers as text, the two forms every writer uses: for reading
 * (a precision) and exact (the shortest text that reads back).
 */
#ifndef MHA_ENGINE_NUMBER_H
#define MHA_ENGINE_NUMBER_H

#include <stddef.h>
#include <stdio.h>

/* v for reading: precision significant digits (%.*g), "nan", "inf" or
 * "-inf", never "-0"; the one form of a number in text, Markdown, the
 * heatmaps' legends and --explain. */
void format_number(char *buf, size_t size, double v, int precision);

/* Shortest text that strtod() reads back as exactly v (finite v), as
 * printf's %.15g, %.16g or %.17g gives it: the first that reads back. */
void format_shortest(char *buf, size_t size, double v);
/* The same for a float (widened to v): %.6g … %.9g, read back by strtof(). */
void format_shortest_f32(char *buf, size_t size, double v);

/* a value as JSON and CSV write it: the shortest exact text (a float's
 * when is_f32), or nan, inf, -inf */
void number_exact(char *buf, size_t size, double v, int is_f32);

/*
 * A value as JSON: number_exact's text; the values JSON has no number for
 * as the strings "nan", "inf" and "-inf" (strict JSON, which jq and every
 * parser read), or, after json_bare_nonfinite(1), as the bare tokens NaN,
 * Infinity and -Infinity that Python's json module writes and reads back
 * as floats (--json-nonfinite python).
 */
void json_number(FILE *fp, double v, int is_f32);
/* json_number's spelling of the non-finite values from now on: bare tokens
 * (on) or strings; returns the one before. */
int json_bare_nonfinite(int on);

#endif

/*
 * number.h: numbers as text, the two forms every writer uses: for reading
 * (a precision) and exact (the shortest text that reads back).
 */
#ifndef MHA_ENGINE_NUMBER_H
#define MHA_ENGINE_NUMBER_H

#include <stddef.h>

/* v for reading: precision significant digits (%.*g), "nan", "inf" or
 * "-inf", never "-0"; the one form of a number in text, Markdown, the
 * heatmaps' legends and --explain. */
void format_number(char *buf, size_t size, double v, int precision);

/* Shortest text that strtod() reads back as exactly v (finite v), as
 * printf's %.15g, %.16g or %.17g gives it: the first that reads back. */
void format_shortest(char *buf, size_t size, double v);
/* The same for a float (widened to v): %.6g … %.9g, read back by strtof(). */
void format_shortest_f32(char *buf, size_t size, double v);

#endif

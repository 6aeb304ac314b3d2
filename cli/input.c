/*
 * input.c: read an input file whole, tell its format, hand it to its reader.
 */
#include "input.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

int input_load(input_file *f, const char *path)
{
	const int from_stdin = !strcmp(path, "-");
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf;
	struct stat st;
	FILE *fp;

	memset(f, 0, sizeof(*f));
	f->name = strdup(from_stdin ? "<stdin>" : path);
	if (!f->name)
		return error("out of memory");
	if (from_stdin) {
		fp = stdin;
	} else {
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return error("%s: is a directory, expected a file", path);
		fp = fopen(path, "rb");
		if (!fp)
			return error("%s: %s", path, strerror(errno));
	}
	buf = malloc(cap);
	if (!buf) {
		if (fp != stdin)
			fclose(fp);
		return error("%s: out of memory", f->name);
	}
	for (;;) {
		size_t got;

		if (n + 1 >= cap) {
			unsigned char *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;

			if (!bigger) {
				free(buf);
				if (fp != stdin)
					fclose(fp);
				return error("%s: out of memory reading the file", f->name);
			}
			buf = bigger;
			cap *= 2;
		}
		got = fread(buf + n, 1, cap - 1 - n, fp);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(fp)) {
		int e = errno;

		free(buf);
		if (fp != stdin)
			fclose(fp);
		return error("%s: read error: %s", f->name, strerror(e));
	}
	if (fp != stdin)
		fclose(fp);
	buf[n] = '\0';
	f->data = buf;
	f->len = n;
	return 0;
}

void input_free(input_file *f)
{
	if (!f)
		return;
	free(f->data);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

/* the extension of a file name, lower case, or "" */
static void extension(const char *name, char *ext, size_t size)
{
	const char *dot = strrchr(name, '.');
	size_t n = 0;

	if (dot && !strchr(dot, '/'))
		for (const char *p = dot + 1; *p && n + 1 < size; p++)
			ext[n++] = (char)tolower((unsigned char)*p);
	ext[n] = '\0';
}

in_format input_format(const input_file *f)
{
	size_t i = 0;
	char ext[8];

	/* the magic bytes cannot be mistaken: a .npy file under any name */
	if (f->len >= 6 && !memcmp(f->data, "\x93NUMPY", 6))
		return FORMAT_IN_NPY;
	/* a name that says its format is believed, so that a broken file is
	 * reported in its own format's terms: x.csv holding "[1, 2]" gets the
	 * CSV reader's message, not a guess that it was JSON */
	extension(f->name, ext, sizeof(ext));
	if (!strcmp(ext, "json"))
		return FORMAT_IN_JSON;
	if (!strcmp(ext, "csv") || !strcmp(ext, "tsv"))
		return FORMAT_IN_CSV;
	/* any other name (x.txt, x.npy written by savetxt, <stdin>): the content */
	if (f->len >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3))
		i = 3; /* a UTF-8 byte order mark says nothing about the format */
	while (i < f->len && isspace(f->data[i]))
		i++;
	if (i < f->len && (f->data[i] == '[' || f->data[i] == '{'))
		return FORMAT_IN_JSON; /* no CSV row starts so */
	return FORMAT_IN_CSV;
}

/* nothing but white space (and perhaps a byte order mark) */
static int is_blank(const input_file *f)
{
	size_t i = f->len >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3) ? 3 : 0;

	while (i < f->len && isspace(f->data[i]))
		i++;
	return i == f->len;
}

int read_input(matrix *m, const input_file *f, const read_spec *spec)
{
	int rc;

	memset(m, 0, sizeof(*m));
	if (is_blank(f))
		return error("%s: empty file, expected %s", f->name, spec->what);
	switch (input_format(f)) {
	case FORMAT_IN_NPY: rc = read_npy(m, f, spec); break;
	case FORMAT_IN_JSON: rc = read_json(m, f, spec); break;
	default: rc = read_csv(m, f, spec); break;
	}
	if (rc)
		matrix_free(m);
	return rc;
}

int read_matrix(matrix *m, const char *path, const read_spec *spec)
{
	input_file f;
	int rc;

	memset(m, 0, sizeof(*m));
	if (input_load(&f, path)) {
		input_free(&f);
		return -1;
	}
	rc = read_input(m, &f, spec);
	input_free(&f);
	return rc;
}

int parse_nonfinite(const char *s, double *v)
{
	int neg = 0;

	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity")) {
		*v = neg ? -INFINITY : INFINITY;
		return 1;
	}
	if (!strcasecmp(s, "nan")) {
		*v = NAN;
		return 1;
	}
	return 0;
}

/*
 * input.c: read an input file whole, tell its format, hand it to its reader.
 */
#include "input.h"
#include "budget.h"
#include "cli.h"
#include "npz.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static ssize_t read_retry(int fd, void *p, size_t n)
{
	ssize_t got;

	do
		got = read(fd, p, n);
	while (got < 0 && errno == EINTR);
	return got;
}

/*
 * The buffer grows to at least want bytes, within the budget.  While it
 * moves, the old block and the new are both held: a stream is charged for
 * both, and when doubling does not fit, the buffer grows only as far as
 * what is left allows.
 */
static int grow(input_file *f, unsigned char **buf, size_t *cap, size_t want)
{
	/* a stream starts at 64 KiB and doubles; a file of known size is one
	 * block of that size */
	size_t size = *cap && *cap <= SIZE_MAX / 2 ? *cap * 2 : want > 2 ? want : 1 << 16, need;
	unsigned char *bigger;

	if (size < want)
		size = want;
	if (budget_take(need = budget_block(size))) {
		/* the most that fits beside the old block */
		size_t left = budget_left();

		size = left > 64 ? left - 64 : 0;
		need = budget_block(size);
		if (size < want || need > left || budget_take(need))
			return budget_refuse(f->name, 0);
	}
	bigger = realloc(*buf, size);
	if (!bigger) {
		budget_give(need);
		return error("%s: out of memory reading the file", f->name);
	}
	budget_give(f->held);
	f->held = need;
	*buf = bigger;
	*cap = size;
	return 0;
}

int input_load(input_file *f, const char *path)
{
	const int from_stdin = !strcmp(path, "-");
	size_t cap = 0, n = 0;
	unsigned char *buf = NULL;
	struct stat st;
	int fd;

	memset(f, 0, sizeof(*f));
	f->name = strdup(from_stdin ? "<stdin>" : path);
	if (!f->name)
		return error("out of memory");
	if (from_stdin) {
		fd = STDIN_FILENO;
	} else {
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return error("%s: is a directory, expected a file", path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return error("%s: %s", path, strerror(errno));
	}
	/* a regular file (standard input redirected from one too) says how long
	 * it is: one block of that size, or a refusal before reading anything */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		off_t at = lseek(fd, 0, SEEK_CUR);
		unsigned long long rest = (unsigned long long)st.st_size - (at > 0 ? (unsigned long long)at : 0);
		char a[48], b[48];

		if (at > st.st_size)
			rest = 0;
		if (rest >= budget_left() || rest >= SIZE_MAX - 64) {
			error("%s: the file is %s, more than --max-memory (%s)%s", f->name,
			      show_bytes(a, sizeof(a), (size_t)(rest < SIZE_MAX ? rest : SIZE_MAX)),
			      show_bytes(b, sizeof(b), budget_limit()),
			      budget_held() ? " leaves after the inputs before it" : "");
			goto fail;
		}
		if (grow(f, &buf, &cap, (size_t)rest + 1))
			goto fail;
	}
	for (;;) {
		ssize_t got;

		if (n + 1 >= cap) {
			/* full: before growing, learn whether the file ends here
			 * (a regular file read to its size does) */
			unsigned char probe;
			const int had = cap != 0;

			if (had) {
				got = read_retry(fd, &probe, 1);
				if (got < 0)
					goto read_error;
				if (got == 0)
					break;
			}
			if (grow(f, &buf, &cap, n + 2))
				goto fail;
			if (had)
				buf[n++] = probe;
			continue;
		}
		got = read_retry(fd, buf + n, cap - 1 - n);
		if (got < 0)
			goto read_error;
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (fd != STDIN_FILENO)
		close(fd);
	buf[n] = '\0';
	f->data = buf;
	f->len = n;
	budget_reading(f->name); /* what charges made while parsing it name */
	return 0;
read_error:
	error("%s: read error: %s", f->name, strerror(errno));
fail:
	if (fd != STDIN_FILENO)
		close(fd);
	free(buf);
	budget_give(f->held);
	f->held = 0;
	return -1;
}

void input_free(input_file *f)
{
	if (!f)
		return;
	free(f->data);
	budget_give(f->held);
	if (budget_current() == f->name)
		budget_reading(NULL);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

void file_extension(const char *name, char *ext, size_t size)
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
	if (is_npz(f))
		return FORMAT_IN_NPZ;
	/* a name that says its format is believed, so that a broken file is
	 * reported in its own format's terms: x.csv holding "[1, 2]" gets the
	 * CSV reader's message, not a guess that it was JSON */
	file_extension(f->name, ext, sizeof(ext));
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
	case FORMAT_IN_NPZ: rc = read_npz(m, f, spec); break;
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

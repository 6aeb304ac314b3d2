/*
 * file.c: an input file read whole or in parts, within the memory budget
 * (file.h); what every reader starts from.
 */
#include "read/file.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/files.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
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

/*
 * Open path ("-": standard input) for reading, as origin allows (files.h):
 * f->name set, f->fd open.  A regular file (standard input redirected from
 * one too) says how long it is: refused before anything is read when that
 * passes the budget, and remembered in f->size.  0, or -1 said (f->fd -1).
 */
static int input_open(input_file *f, const char *path, enum file_origin origin)
{
	const int from_stdin = !strcmp(path, "-");
	struct stat st;

	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->name = strdup(from_stdin ? "<stdin>" : path);
	if (!f->name)
		return error("out of memory");
	if (from_stdin) {
		f->fd = STDIN_FILENO;
		if (files_note_fd(NULL, path, f->fd))
			return -1;
	} else if ((f->fd = files_open(path, origin, NULL)) < 0) {
		return -1;
	}
	if (fstat(f->fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		off_t at = lseek(f->fd, 0, SEEK_CUR);
		unsigned long long rest = (unsigned long long)st.st_size - (at > 0 ? (unsigned long long)at : 0);
		char a[48], b[48];

		if (at > st.st_size)
			rest = 0;
		if (rest >= budget_left() || rest >= SIZE_MAX - 64)
			return error("%s: the file is %s, more than --max-memory (%s)%s", f->name,
				     show_bytes(a, sizeof(a), (size_t)(rest < SIZE_MAX ? rest : SIZE_MAX)),
				     show_bytes(b, sizeof(b), budget_limit()),
				     budget_held() ? " leaves after the inputs before it" : "");
		f->size = (size_t)rest;
		f->sized = 1;
	}
	return 0;
}

/*
 * Read on until f->data holds want bytes or the file has ended (f->ended):
 * a file of known size in one block of that size, a stream in a buffer
 * that doubles, both within the budget.  0, or -1 said.
 */
int input_fill(input_file *f, size_t want)
{
	size_t cap = f->cap, n = f->len;
	unsigned char *buf = f->data;
	ssize_t got;

	while (!f->ended && n < want) {
		if (n + 1 >= cap) {
			/* full: before growing, learn whether the file ends here
			 * (a regular file read to its size does) */
			unsigned char probe;
			const int had = cap != 0;
			size_t first = n + 2;

			if (had) {
				got = read_retry(f->fd, &probe, 1);
				if (got < 0)
					goto read_error;
				if (got == 0) {
					f->ended = 1;
					break;
				}
			}
			/* a file of known size: the rest in one block, not doubling */
			if (f->sized && f->size >= n && want > n + 1)
				first = (want < f->size ? want : f->size) + 1;
			if (first < n + 2)
				first = n + 2;
			if (grow(f, &buf, &cap, first))
				goto fail;
			if (had)
				buf[n++] = probe;
			continue;
		}
		got = read_retry(f->fd, buf + n, (want - n < cap - 1 - n ? want - n : cap - 1 - n));
		if (got < 0)
			goto read_error;
		if (got == 0)
			f->ended = 1;
		n += (size_t)got;
	}
	if (buf)
		buf[n] = '\0';
	f->data = buf;
	f->len = n;
	f->cap = cap;
	return 0;
read_error:
	error("%s: read error: %s", f->name, strerror(errno));
fail:
	f->data = buf;
	f->len = n;
	f->cap = cap;
	return -1;
}

static void input_close(input_file *f)
{
	if (f->fd > STDIN_FILENO)
		close(f->fd);
	f->fd = -1;
}

/* after a failure: the file closed and what was read given back (the name
 * stays, for input_free) */
static int input_drop(input_file *f)
{
	input_close(f);
	free(f->data);
	budget_give(f->held);
	f->data = NULL;
	f->held = f->len = f->cap = 0;
	return -1;
}

int input_begin(input_file *f, const char *path, size_t head, enum file_origin origin)
{
	if (input_open(f, path, origin) || input_fill(f, head))
		return input_drop(f);
	budget_reading(f->name); /* what charges made while parsing it name */
	return 0;
}

int input_finish(input_file *f)
{
	const int rc = input_fill(f, SIZE_MAX);

	input_close(f);
	return rc;
}

/* what input_map() maps rather than reads: below, read() is as fast */
#define MAP_FROM ((size_t)1 << 20)

int input_map(input_file *f)
{
	struct stat st;
	size_t held;
	void *p;

	if (f->ended || f->fd <= STDIN_FILENO || !f->sized || f->size < MAP_FROM ||
	    lseek(f->fd, 0, SEEK_CUR) != (off_t)f->len)
		return input_finish(f);
	held = budget_block(f->size);
	if (budget_take(held))
		return budget_refuse(f->name, f->size);
	/* populated now: the page cache's pages, no copy and no fault each */
	p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, f->fd, 0);
	if (p == MAP_FAILED) {
		budget_give(held);
		return input_finish(f);
	}
	/* a file that changed size since it was opened is read as any other,
	 * and says what is wrong with it */
	if (fstat(f->fd, &st) || !S_ISREG(st.st_mode) || st.st_size < 0 ||
	    (unsigned long long)st.st_size != (unsigned long long)f->size) {
		munmap(p, f->size);
		budget_give(held);
		return input_finish(f);
	}
	free(f->data);
	budget_give(f->held);
	f->data = p;
	f->len = f->map_len = f->size;
	f->map = p;
	f->held = held;
	f->cap = 0;
	f->ended = 1;
	input_close(f);
	return 0;
}

static int load(input_file *f, const char *path, enum file_origin origin)
{
	if (input_open(f, path, origin) || input_fill(f, SIZE_MAX))
		return input_drop(f);
	input_close(f);
	budget_reading(f->name); /* what charges made while parsing it name */
	return 0;
}

int input_load(input_file *f, const char *path)
{
	return load(f, path, FILE_GIVEN);
}

int input_load_found(input_file *f, const char *path)
{
	return load(f, path, FILE_FOUND);
}

void input_free(input_file *f)
{
	if (!f)
		return;
	input_close(f);
	if (f->map)
		munmap(f->map, f->map_len);
	else
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

int refuse_pickle(const char *name)
{
	return error("%s: a PyTorch file (torch.save's pickle), which mha does not read, as "
		     "loading a pickle runs code: save the tensors as safetensors "
		     "(safetensors.torch.save_file) or .npz (numpy.savez, each tensor's .numpy())",
		     name);
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

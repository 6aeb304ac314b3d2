/*
 * files.c: opening what a run reads, and the list of what it read (files.h).
 */
#include "util/files.h"
#include "util/msg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One input: a regular file, known by device and inode. */
struct input {
	dev_t dev;
	ino_t ino;
	const char *opt; /* the option it came from ("-x"), or NULL */
	char *path;      /* as given, or "<stdin>" */
};

/* the run's inputs, in the order noted: options before their readers, so
 * the first entry of a file read twice names its option.  Appended, never
 * searched on the way in: a folder may hold a hundred thousand shards */
static struct {
	struct input *v; /* [n] */
	size_t n, cap;
} inputs;

static struct input *find(dev_t dev, ino_t ino)
{
	for (size_t i = 0; i < inputs.n; i++)
		if (inputs.v[i].dev == dev && inputs.v[i].ino == ino)
			return &inputs.v[i];
	return NULL;
}

static int add(const struct stat *st, const char *opt, const char *path)
{
	struct input *in;

	if (!S_ISREG(st->st_mode))
		return 0; /* a FIFO, a device, a terminal: nothing to overwrite */
	if (inputs.n == inputs.cap) {
		size_t cap = inputs.cap ? inputs.cap * 2 : 16;
		struct input *more = realloc(inputs.v, cap * sizeof(*more));

		if (!more)
			return error("out of memory");
		inputs.v = more;
		inputs.cap = cap;
	}
	in = &inputs.v[inputs.n];
	in->dev = st->st_dev;
	in->ino = st->st_ino;
	in->opt = opt;
	if (!(in->path = strdup(path)))
		return error("out of memory");
	inputs.n++;
	return 0;
}

int files_note(const char *opt, const char *path)
{
	struct stat st;

	if (!strcmp(path, "-"))
		return files_note_fd(opt, path, STDIN_FILENO);
	if (stat(path, &st) != 0)
		return 0; /* not there: the reading will say so */
	return add(&st, opt, path);
}

int files_note_fd(const char *opt, const char *path, int fd)
{
	struct stat st;

	/* standard input redirected from a file is that file */
	if (fstat(fd, &st) != 0)
		return 0;
	return add(&st, opt, strcmp(path, "-") ? path : "<stdin>");
}

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
	       : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int files_open(const char *path, enum file_origin origin, const char *opt)
{
	struct stat st;
	int fd, e;

	/* A path the user gave is opened as a plain open would: a FIFO waits
	 * for its writer.  (Opening it without blocking first and again to
	 * wait lost a writer that came, wrote and left in between: the second
	 * open then waited for ever.)  Anything else must not block before its
	 * kind is known. */
	do
		fd = open(path, O_RDONLY | O_CLOEXEC | (origin == FILE_GIVEN ? 0 : O_NONBLOCK));
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return error("%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		e = errno;
		close(fd);
		return error("%s: %s", path, strerror(e));
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return error("%s: is a directory, expected a file", path);
	}
	if (origin != FILE_GIVEN && !S_ISREG(st.st_mode)) {
		close(fd);
		return error("%s: %s, not a regular file: %s", path, kind_of(st.st_mode),
			     origin == FILE_SEEKABLE ? "a safetensors file is read in place"
						     : "mha reads only regular files it finds itself");
	}
	if (origin != FILE_GIVEN && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		e = errno;
		close(fd);
		return error("%s: %s", path, strerror(e));
	}
	if (add(&st, opt, path)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* the input path leads to (links followed, as the writing will), or NULL */
static const struct input *input_at(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return NULL; /* not there yet: it cannot be an input */
	return find(st.st_dev, st.st_ino);
}

/* "-o 'x2.json' is the input 'x.json' (-x)", or for -o dir/ "-o 'd/': 'd/x.json' is …" */
static int refuse(const char *dir, const char *sep, const char *name, const struct input *in)
{
	char opt[64] = "";

	if (in->opt)
		snprintf(opt, sizeof(opt), " (%s)", in->opt);
	if (dir)
		return error("-o '%s': '%s%s%s' is the input '%s'%s: refusing to overwrite an input",
			     dir, dir, sep, name, in->path, opt);
	return error("-o '%s' is the input '%s'%s: refusing to overwrite an input", name, in->path,
		     opt);
}

int files_refuse_output(const char *path)
{
	const struct input *in;

	if (!path || !strcmp(path, "-") || !(in = input_at(path)))
		return 0;
	return refuse(NULL, NULL, path, in);
}

int files_refuse_output_in_dir(const char *dir, int (*may_write)(const char *name, void *ctx),
			       void *ctx)
{
	const size_t n = strlen(dir);
	const char *sep = n && dir[n - 1] == '/' ? "" : "/";
	const struct input *clash = NULL;
	char *first = NULL; /* of the clashing files, the first by name */
	DIR *d;
	struct dirent *e;
	int rc = 0;

	if (!inputs.n || !(d = opendir(dir)))
		return 0; /* no directory yet: the run makes it, empty */
	while ((e = readdir(d)) != NULL) {
		const struct input *in;
		char *path;

		if (!may_write(e->d_name, ctx) || (first && strcmp(e->d_name, first) >= 0))
			continue;
		path = malloc(n + strlen(sep) + strlen(e->d_name) + 1);
		if (!path) {
			rc = error("out of memory");
			break;
		}
		strcpy(path, dir);
		strcat(path, sep);
		strcat(path, e->d_name);
		in = input_at(path);
		free(path);
		if (in) {
			char *name = strdup(e->d_name);

			if (!name) {
				rc = error("out of memory");
				break;
			}
			free(first);
			first = name;
			clash = in;
		}
	}
	closedir(d);
	if (!rc && clash)
		rc = refuse(dir, sep, first, clash);
	free(first);
	return rc;
}

int is_dir(const char *path)
{
	struct stat st;

	return strcmp(path, "-") && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void files_list_free(char **names, size_t n)
{
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

int files_list_dir(const char *dir, int (*keep)(const char *name), char ***names, size_t *n)
{
	DIR *d = opendir(dir);
	const struct dirent *e;
	size_t cap = 0;

	*names = NULL;
	*n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || (keep && !keep(e->d_name)))
			continue;
		if (*n == cap) {
			char **more = realloc(*names, (cap = cap ? cap * 2 : 16) * sizeof(**names));

			if (!more)
				break;
			*names = more;
		}
		if (!((*names)[*n] = strdup(e->d_name)))
			break;
		(*n)++;
	}
	closedir(d);
	if (e) {
		files_list_free(*names, *n);
		*names = NULL;
		*n = 0;
		errno = ENOMEM;
		return -1;
	}
	if (*n > 1)
		qsort(*names, *n, sizeof(**names), by_name);
	return 0;
}

void files_forget(void)
{
	for (size_t i = 0; i < inputs.n; i++)
		free(inputs.v[i].path);
	free(inputs.v);
	memset(&inputs, 0, sizeof(inputs));
}

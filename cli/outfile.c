/*
 * outfile.c: write-to-temporary-then-rename output files, the signal
 * handler that removes the temporary ones when Ctrl-C stops a run, and the
 * check that no output replaces an input.
 */
#include "outfile.h"
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* temporary files not yet renamed or removed: what a signal must clean up */
#define MAX_PENDING 64
static char *volatile pending[MAX_PENDING];

static void remember(char *tmp)
{
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (!pending[i]) {
			pending[i] = tmp;
			return;
		}
}

static void forget(const char *tmp)
{
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (pending[i] == tmp)
			pending[i] = NULL;
}

/* the signals that remove pending temporary files before the process dies */
static const int cleanup_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

/* the thread that opens output files; the computation's threads are others */
static pthread_t main_thread;

/*
 * unlink is async-signal-safe; then die of the signal as if not caught.
 * A signal taken by one of the computation's threads is passed to the
 * main thread, which blocks the signals while a temporary file is created
 * and not yet remembered (pthread_kill and pthread_self are async-signal-safe).
 */
static void on_signal(int sig)
{
	if (!pthread_equal(pthread_self(), main_thread)) {
		pthread_kill(main_thread, sig);
		return;
	}
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (pending[i])
			unlink(pending[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

void outfile_cleanup_on_signals(void)
{
	struct sigaction sa;

	main_thread = pthread_self();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(cleanup_signals) / sizeof(cleanup_signals[0]); i++) {
		struct sigaction old;

		/* a signal the caller chose to ignore stays ignored (nohup, &) */
		if (sigaction(cleanup_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(cleanup_signals[i], &sa, NULL);
	}
}

/* the most links followed to a target, as Linux's own limit */
#define MAX_LINKS 40

/* a link in /proc (/proc/self/fd/1, where /dev/stdout leads): its text
 * names an open file, or "pipe:[…]", not a path to put a file beside */
static int in_proc(const struct stat *link)
{
	struct stat proc;

	return stat("/proc", &proc) == 0 && link->st_dev == proc.st_dev;
}

/* link's text, read whole; NULL (errno set) on failure */
static char *read_link(const char *link, size_t hint)
{
	for (size_t size = hint + 2 > 64 ? hint + 2 : 64; size <= ((size_t)1 << 20); size *= 2) {
		char *buf = malloc(size);
		ssize_t n;

		if (!buf)
			return NULL;
		n = readlink(link, buf, size);
		if (n < 0) {
			free(buf);
			return NULL;
		}
		if ((size_t)n < size) {
			buf[n] = '\0';
			return buf;
		}
		free(buf); /* cut short: try a larger buffer */
	}
	errno = ENAMETOOLONG;
	return NULL;
}

/*
 * Where writing to path lands, found as the kernel finds it for '>': the
 * symbolic links followed one by one to their end, which need not exist
 * yet (a dangling link's target is created).  A relative link is read from
 * the link's own directory.  1 and *target (to free) set; 0 when path is
 * to be written in place (a link through /proc); -1 reported.
 */
static int final_target(const char *path, char **target)
{
	char *cur = strdup(path);

	if (!cur)
		return error("out of memory");
	for (int hops = 0;; hops++) {
		const char *slash;
		struct stat st;
		char *link, *next;
		size_t dir;

		if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode)) {
			*target = cur; /* not a link, or not there (yet): the end */
			return 1;
		}
		if (in_proc(&st)) {
			free(cur);
			return 0;
		}
		if (hops == MAX_LINKS) {
			free(cur);
			return error("%s: cannot create: %s", path, strerror(ELOOP));
		}
		link = read_link(cur, (size_t)st.st_size);
		if (!link) {
			int e = errno;

			free(cur);
			return error("%s: cannot read the link: %s", path, strerror(e));
		}
		slash = strrchr(cur, '/');
		dir = link[0] != '/' && slash ? (size_t)(slash - cur) + 1 : 0;
		next = malloc(dir + strlen(link) + 1);
		if (!next) {
			free(link);
			free(cur);
			return error("out of memory");
		}
		memcpy(next, cur, dir);
		strcpy(next + dir, link);
		free(link);
		free(cur);
		cur = next;
	}
}

int outfile_open(outfile *o, const char *path)
{
	static const char suffix[] = ".mha-tmp-XXXXXX";
	struct stat st, end;
	int fd, exists, r;

	memset(o, 0, sizeof(*o));
	if (!path || !strcmp(path, "-")) {
		o->fp = stdout;
		return 0;
	}
	exists = stat(path, &st) == 0;
	if (exists && S_ISDIR(st.st_mode))
		return error("%s: is a directory", path);
	r = exists && !S_ISREG(st.st_mode) ? 0 : final_target(path, &o->target);
	if (r < 0)
		return -1;
	if (r && exists && (stat(o->target, &end) != 0 || end.st_dev != st.st_dev ||
			    end.st_ino != st.st_ino)) {
		/* the links' text does not lead where the kernel does: do not guess */
		free(o->target);
		o->target = NULL;
		r = 0;
	}
	if (!r) {
		/* a FIFO, a device, a terminal, /dev/stdout: write to it as it is
		 * (truncated, as '>' does), never replace it */
		o->fp = fopen(path, "w");
		if (!o->fp)
			return error("%s: %s", path, strerror(errno));
		o->path = path;
		return 0;
	}
	o->path = path;
	o->tmp = malloc(strlen(o->target) + sizeof(suffix));
	if (!o->tmp) {
		outfile_abort(o);
		return error("out of memory");
	}
	strcpy(o->tmp, o->target);
	strcat(o->tmp, suffix);
	/*
	 * The file exists from mkstemp on: a signal before remember() would
	 * leave it behind (a busy machine can preempt us right there), so the
	 * signals wait until its name is remembered.
	 */
	{
		sigset_t block, was;

		sigemptyset(&block);
		for (size_t i = 0; i < sizeof(cleanup_signals) / sizeof(cleanup_signals[0]); i++)
			sigaddset(&block, cleanup_signals[i]);
		pthread_sigmask(SIG_BLOCK, &block, &was);
		fd = mkstemp(o->tmp);
		if (fd >= 0)
			remember(o->tmp);
		pthread_sigmask(SIG_SETMASK, &was, NULL);
	}
	if (fd < 0) {
		int e = errno;

		free(o->tmp);
		o->tmp = NULL;
		outfile_abort(o);
		return error("%s: cannot create: %s", path, strerror(e));
	}
	/* mkstemp makes 0600; an output file gets the usual 0666 & ~umask */
	{
		mode_t mask = umask(0);

		umask(mask);
		fchmod(fd, 0666 & ~mask);
	}
	o->fp = fdopen(fd, "w");
	if (!o->fp) {
		int e = errno;

		close(fd);
		outfile_abort(o);
		return error("%s: %s", path, strerror(e));
	}
	return 0;
}

int outfile_commit(outfile *o)
{
	const char *name = o->path ? o->path : "standard output";
	int failed = ferror(o->fp);
	int e = errno;

	if (fflush(o->fp) != 0) {
		failed = 1;
		e = errno;
	}
	if (!o->tmp) {
		if (o->path && fclose(o->fp) != 0 && !failed) {
			failed = 1;
			e = errno;
		}
		o->fp = NULL;
		if (failed)
			return error("error writing to %s%s%s: %s", o->path ? "'" : "", name,
				     o->path ? "'" : "", strerror(e));
		return 0;
	}
	if (fclose(o->fp) != 0 && !failed) {
		failed = 1;
		e = errno;
	}
	o->fp = NULL;
	if (!failed && rename(o->tmp, o->target) != 0) {
		failed = 1;
		e = errno;
	}
	if (failed) {
		outfile_abort(o);
		return error("%s: write failed: %s", name, strerror(e));
	}
	forget(o->tmp);
	free(o->tmp);
	o->tmp = NULL;
	free(o->target);
	o->target = NULL;
	return 0;
}

void outfile_abort(outfile *o)
{
	if (!o->tmp && o->path && o->fp)
		fclose(o->fp);
	if (o->tmp) {
		if (o->fp)
			fclose(o->fp);
		unlink(o->tmp);
		forget(o->tmp);
		free(o->tmp);
	}
	free(o->target);
	o->fp = NULL;
	o->tmp = NULL;
	o->target = NULL;
}

/* ---- outputs that are inputs ------------------------------------------ */

int input_ids_add(input_ids *s, const char *opt, const char *path)
{
	const int from_stdin = !strcmp(path, "-");
	struct stat st;
	input_id *id;

	/* standard input redirected from a file is that file */
	if ((from_stdin ? fstat(STDIN_FILENO, &st) : stat(path, &st)) != 0 || !S_ISREG(st.st_mode))
		return 0; /* not there (the reading will say so), or nothing to overwrite */
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		input_id *more = realloc(s->v, cap * sizeof(*more));

		if (!more)
			return error("out of memory");
		s->v = more;
		s->cap = cap;
	}
	id = &s->v[s->n];
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	id->opt = opt;
	if (!(id->path = strdup(from_stdin ? "<stdin>" : path)))
		return error("out of memory");
	s->n++;
	return 0;
}

void input_ids_free(input_ids *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].path);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* the input path leads to (links followed, as the writing will), or NULL */
static const input_id *input_at(const char *path, const input_ids *s)
{
	struct stat st;

	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return NULL; /* not there yet: it cannot be an input */
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].dev == st.st_dev && s->v[i].ino == st.st_ino)
			return &s->v[i];
	return NULL;
}

int outfile_refuse_input(const char *path, const input_ids *s)
{
	const input_id *in;

	if (!path || !strcmp(path, "-") || !(in = input_at(path, s)))
		return 0;
	return error("-o '%s' is the input '%s' (%s): refusing to overwrite an input", path,
		     in->path, in->opt);
}

int outfile_refuse_input_in_dir(const char *dir, int (*may_write)(const char *name, void *ctx),
				void *ctx, const input_ids *s)
{
	const size_t n = strlen(dir);
	const char *sep = n && dir[n - 1] == '/' ? "" : "/";
	const input_id *clash = NULL;
	char *first = NULL; /* of the clashing files, the first by name: one message, always the same */
	DIR *d;
	struct dirent *e;
	int rc = 0;

	if (!s->n || !(d = opendir(dir)))
		return 0; /* no directory yet: the run makes it, empty */
	while ((e = readdir(d)) != NULL) {
		const input_id *in;
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
		in = input_at(path, s);
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
		rc = error("-o '%s': '%s%s%s' is the input '%s' (%s): refusing to overwrite an "
			   "input", dir, dir, sep, first, clash->path, clash->opt);
	free(first);
	return rc;
}

/*
 * outfile.c: write-to-temporary-then-rename output files, alone or as a
 * set, and the signal handler that removes the temporary ones when Ctrl-C
 * stops a run.
 */
#include "base/outfile.h"
#include "base/progress.h"
#include "base/cli.h"
#include "util/files.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the signals that remove pending temporary files before the process dies */
static const int cleanup_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };

/*
 * Temporary files not yet renamed or removed: what a signal must clean up.
 * Changed only while the main thread holds the signals (the handler runs
 * there alone), so the handler never sees the list half changed.
 */
static char **volatile pending; /* [n_pending] */
static volatile size_t n_pending;
static size_t pending_cap;

static void hold_signals(sigset_t *was)
{
	sigset_t block;

	sigemptyset(&block);
	for (size_t i = 0; i < sizeof(cleanup_signals) / sizeof(cleanup_signals[0]); i++)
		sigaddset(&block, cleanup_signals[i]);
	pthread_sigmask(SIG_BLOCK, &block, was);
}

static void release_signals(const sigset_t *was)
{
	pthread_sigmask(SIG_SETMASK, was, NULL);
}

/* with the signals held: 0, or -1 (out of memory) */
static int remember(char *tmp)
{
	if (n_pending == pending_cap) {
		const size_t cap = pending_cap ? 2 * pending_cap : 16;
		char **more = realloc((char **)pending, cap * sizeof(*more));

		if (!more)
			return -1;
		pending = more;
		pending_cap = cap;
	}
	pending[n_pending] = tmp;
	n_pending = n_pending + 1;
	return 0;
}

static void forget(const char *tmp)
{
	sigset_t was;

	hold_signals(&was);
	for (size_t i = 0; i < n_pending; i++)
		if (pending[i] == tmp) {
			pending[i] = pending[n_pending - 1];
			n_pending = n_pending - 1;
			break;
		}
	if (!n_pending) {
		free((char **)pending);
		pending = NULL;
		pending_cap = 0;
	}
	release_signals(&was);
}

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
	/* the progress bar off the terminal's line, then the temporary files */
	progress_clear_on_signal();
	for (size_t i = 0; i < n_pending; i++)
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


/* a FIFO, a device, a terminal, /dev/stdout: written as it is (truncated,
 * as '>' does), never replaced */
static int open_in_place(outfile *o)
{
	o->fp = fopen(o->path, "w");
	if (!o->fp)
		return error("%s: %s", o->path, strerror(errno));
	return 0;
}

/* o->tmp beside o->target, created and remembered before a signal can
 * come between (a busy machine can preempt us right there) */
static int create_temporary(outfile *o)
{
	static const char suffix[] = ".mha-tmp-XXXXXX";
	sigset_t was;
	mode_t mask;
	int fd, e = 0;

	o->tmp = malloc(strlen(o->target) + sizeof(suffix));
	if (!o->tmp)
		return error("out of memory");
	strcpy(o->tmp, o->target);
	strcat(o->tmp, suffix);
	hold_signals(&was);
	fd = mkstemp(o->tmp);
	if (fd < 0) {
		e = errno;
	} else if (remember(o->tmp)) {
		unlink(o->tmp);
		close(fd);
		fd = -1;
		e = ENOMEM;
	}
	release_signals(&was);
	if (fd < 0) {
		free(o->tmp);
		o->tmp = NULL;
		return error("%s: cannot create: %s", o->path, strerror(e));
	}
	/* mkstemp makes 0600; an output file gets the usual 0666 & ~umask */
	mask = umask(0);
	umask(mask);
	fchmod(fd, 0666 & ~mask);
	o->fp = fdopen(fd, "w");
	if (!o->fp) {
		e = errno;
		close(fd);
		return error("%s: %s", o->path, strerror(e));
	}
	return 0;
}

int outfile_open(outfile *o, const char *path)
{
	struct stat st, end;
	int exists, r;

	memset(o, 0, sizeof(*o));
	if (!path || !strcmp(path, "-")) {
		o->fp = stdout;
		return 0;
	}
	/* every file read so far is known by now: a shard an index named too */
	if (files_refuse_output(path))
		return -1;
	exists = stat(path, &st) == 0;
	if (exists && S_ISDIR(st.st_mode))
		return error("%s: is a directory", path);
	if (!(o->path = strdup(path)))
		return error("out of memory");
	r = exists && !S_ISREG(st.st_mode) ? 0 : final_target(path, &o->target);
	if (r < 0) {
		outfile_abort(o);
		return -1;
	}
	if (r && exists && (stat(o->target, &end) != 0 || end.st_dev != st.st_dev ||
			    end.st_ino != st.st_ino)) {
		/* the links' text does not lead where the kernel does: do not guess */
		free(o->target);
		o->target = NULL;
		r = 0;
	}
	if (r ? create_temporary(o) : open_in_place(o)) {
		outfile_abort(o);
		return -1;
	}
	return 0;
}

/* Flush and close, reporting a write error: 0, or -1 said (the file left
 * for the caller to throw away). */
static int finish(outfile *o)
{
	int failed = ferror(o->fp), e = errno;

	if (fflush(o->fp) != 0) {
		failed = 1;
		e = errno;
	}
	if (o->fp != stdout || o->path) {
		if (fclose(o->fp) != 0 && !failed) {
			failed = 1;
			e = errno;
		}
		o->fp = NULL;
	}
	if (!failed)
		return 0;
	if (!o->tmp)
		return error("error writing to %s%s%s: %s", o->path ? "'" : "",
			     o->path ? o->path : "standard output", o->path ? "'" : "", strerror(e));
	return error("%s: write failed: %s", o->path, strerror(e));
}

/* Rename a finished file into place: 0, or -1 said (the temporary left).
 * o->target stays, for a set that must take the file back. */
static int place(outfile *o)
{
	if (o->tmp && rename(o->tmp, o->target) != 0)
		return error("%s: write failed: %s", o->path, strerror(errno));
	if (o->tmp) {
		forget(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
	}
	return 0;
}

int outfile_commit(outfile *o)
{
	const int rc = finish(o) || place(o) ? -1 : 0;

	outfile_abort(o); /* frees what is left; removes the temporary after a failure */
	return rc;
}

void outfile_abort(outfile *o)
{
	if (o->fp && o->fp != stdout)
		fclose(o->fp);
	if (o->tmp) {
		unlink(o->tmp);
		forget(o->tmp);
		free(o->tmp);
	}
	free(o->target);
	free(o->path);
	o->fp = NULL;
	o->tmp = NULL;
	o->target = NULL;
	o->path = NULL;
}

/* ---- a set of files ------------------------------------------------------ */

outfile *outset_open(outset *s, const char *path)
{
	outfile *o;

	if (s->n == s->cap) {
		const size_t cap = s->cap ? 2 * s->cap : 16;
		outfile **more = realloc(s->v, cap * sizeof(*more));

		if (!more) {
			error("out of memory");
			return NULL;
		}
		s->v = more;
		s->cap = cap;
	}
	if (!(o = malloc(sizeof(*o)))) {
		error("out of memory");
		return NULL;
	}
	if (outfile_open(o, path)) {
		free(o);
		return NULL;
	}
	return s->v[s->n++] = o;
}

int outset_finish(outset *s, outfile *o)
{
	(void)s;
	return o->fp ? finish(o) : 0;
}

int outset_commit(outset *s)
{
	size_t placed = 0;
	int rc = 0;

	for (size_t i = 0; i < s->n && !rc; i++)
		rc = outset_finish(s, s->v[i]);
	if (!rc) {
		sigset_t was;

		hold_signals(&was);
		for (; placed < s->n && !rc; placed++)
			rc = place(s->v[placed]);
		/* a rename failed (said): none of the set stays in place */
		for (size_t i = 0; rc && i + 1 < placed; i++)
			if (s->v[i]->target)
				unlink(s->v[i]->target);
		release_signals(&was);
	}
	outset_abort(s); /* frees; removes the temporaries not renamed */
	return rc;
}

void outset_abort(outset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		outfile_abort(s->v[i]);
		free(s->v[i]);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

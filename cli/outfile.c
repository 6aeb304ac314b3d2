/*
 * outfile.c: write-to-temporary-then-rename output files, and the signal
 * handler that removes the temporary ones when Ctrl-C stops a run.
 */
#include "outfile.h"
#include "cli.h"

#include <errno.h>
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

/* unlink is async-signal-safe; then die of the signal as if not caught */
static void on_signal(int sig)
{
	for (size_t i = 0; i < MAX_PENDING; i++)
		if (pending[i])
			unlink(pending[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

void outfile_cleanup_on_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;

		/* a signal the caller chose to ignore stays ignored (nohup, &) */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
}

int outfile_open(outfile *o, const char *path)
{
	static const char suffix[] = ".mha-tmp-XXXXXX";
	struct stat st;
	int fd;

	memset(o, 0, sizeof(*o));
	if (!path || !strcmp(path, "-")) {
		o->fp = stdout;
		return 0;
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return error("%s: is a directory", path);
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a FIFO, a device, a terminal: write to it as it is, never replace it */
		o->fp = fopen(path, "w");
		if (!o->fp)
			return error("%s: %s", path, strerror(errno));
		o->path = path;
		return 0;
	}
	o->path = path;
	o->tmp = malloc(strlen(path) + sizeof(suffix));
	if (!o->tmp)
		return error("out of memory");
	strcpy(o->tmp, path);
	strcat(o->tmp, suffix);
	fd = mkstemp(o->tmp);
	if (fd >= 0)
		remember(o->tmp);
	if (fd < 0) {
		int e = errno;

		free(o->tmp);
		o->tmp = NULL;
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
	if (!failed && rename(o->tmp, o->path) != 0) {
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
	o->fp = NULL;
	o->tmp = NULL;
}

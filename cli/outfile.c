/*
 * outfile.c: write-to-temporary-then-rename output files.
 */
#include "outfile.h"
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
		free(o->tmp);
	}
	o->fp = NULL;
	o->tmp = NULL;
}

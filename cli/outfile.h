/*
 * outfile.h: where results go.  A named file is written under a temporary
 * name beside it and renamed into place only when everything was written,
 * so a failed run never leaves a half-written file or clobbers an old one.
 *
 * Symbolic links are written through, as the shell's '>' does: the
 * temporary file goes beside the link's final target (which need not exist
 * yet) and replaces that, so the link stays a link.  What is not a regular
 * file (a terminal, a FIFO, a device, /dev/stdout through /proc/self/fd) is
 * opened and written as it is, never replaced.
 */
#ifndef MHA_CLI_OUTFILE_H
#define MHA_CLI_OUTFILE_H

#include <stdio.h>

typedef struct outfile {
	FILE *fp;
	char *tmp;        /* the temporary path, NULL when written in place */
	char *target;     /* what tmp is renamed over: path with its links followed */
	const char *path; /* the path as given, for messages; NULL for standard output */
} outfile;

/* path NULL or "-": standard output.  Errors are reported; -1. */
int outfile_open(outfile *o, const char *path);
/* Flush, close and rename into place; reports write errors; -1 on failure.
 * Either way o->target is freed; a caller that may remove the file again
 * keeps a copy of it first. */
int outfile_commit(outfile *o);
/* Throw away whatever was written (nothing for standard output). */
void outfile_abort(outfile *o);
/* From now on SIGINT, SIGTERM, SIGHUP and SIGQUIT remove the temporary
 * files of outputs not yet committed before the process dies of them. */
void outfile_cleanup_on_signals(void);

#endif

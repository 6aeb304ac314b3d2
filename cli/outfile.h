/*
 * outfile.h: where results go.  A named file is written under a temporary
 * name beside it and renamed into place only when everything was written,
 * so a failed run never leaves a half-written file or clobbers an old one.
 */
#ifndef MHA_CLI_OUTFILE_H
#define MHA_CLI_OUTFILE_H

#include <stdio.h>

typedef struct outfile {
	FILE *fp;
	char *tmp;        /* the temporary path, NULL for standard output */
	const char *path; /* the final path, NULL for standard output */
} outfile;

/* path NULL or "-": standard output.  Errors are reported; -1. */
int outfile_open(outfile *o, const char *path);
/* Flush, close and rename into place; reports write errors; -1 on failure. */
int outfile_commit(outfile *o);
/* Throw away whatever was written (nothing for standard output). */
void outfile_abort(outfile *o);
/* From now on SIGINT, SIGTERM, SIGHUP and SIGQUIT remove the temporary
 * files of outputs not yet committed before the process dies of them. */
void outfile_cleanup_on_signals(void);

#endif

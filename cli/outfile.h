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
#include <sys/types.h>

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
/*
 * The files a run reads, known by device and inode: an output that leads
 * to one of them, under whatever name (./x.json, a hard link, a symbolic
 * link), is refused before anything is read.  Only regular files count:
 * writing to a terminal, a FIFO or a device that is also read loses nothing.
 */
typedef struct input_id {
	dev_t dev;
	ino_t ino;
	const char *opt; /* the option it came from: "-x", "--mask" */
	char *path;      /* as given, or "<stdin>" */
} input_id;

typedef struct input_ids {
	input_id *v; /* [n] */
	size_t n, cap;
} input_ids;

/* path ("-": standard input) is read for opt: remember it if it is a
 * regular file (links followed).  -1 only when out of memory (reported). */
int input_ids_add(input_ids *s, const char *opt, const char *path);
void input_ids_free(input_ids *s);
/* -o path would replace one of s's files: say which; -1.  Else 0. */
int outfile_refuse_input(const char *path, const input_ids *s);
/* -o dir/: the same for each file in dir that may_write(name, ctx) says
 * the run may write there. */
int outfile_refuse_input_in_dir(const char *dir, int (*may_write)(const char *name, void *ctx),
				void *ctx, const input_ids *s);

/* From now on SIGINT, SIGTERM, SIGHUP and SIGQUIT remove the temporary
 * files of outputs not yet committed before the process dies of them. */
void outfile_cleanup_on_signals(void);

#endif

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
	char *tmp;    /* the temporary path, NULL when written in place */
	char *target; /* what tmp is renamed over: path with its links followed */
	char *path;   /* a copy of the path as given, for messages; NULL for standard output */
} outfile;

/* path NULL or "-": standard output.  A path that leads to one of the
 * run's inputs (files.h) is refused.  Errors are reported; -1. */
int outfile_open(outfile *o, const char *path);
/* Flush, close and rename into place; reports write errors; -1 on failure.
 * Either way o's strings are freed; a caller that may remove the file
 * again keeps a copy of o->target first. */
int outfile_commit(outfile *o);
/* Throw away whatever was written (nothing for standard output). */
void outfile_abort(outfile *o);

/*
 * A set of files written as one (-o DIR/, mha init's files): each to its
 * temporary name; when every one is written, all are renamed into place
 * with the signals held, so that an interrupted run or a full disk leaves
 * the files of the run before, and a finished run every new one.  A rename
 * that fails (rare: the temporary is beside its target) removes the files
 * the set had already renamed, so no mix of old and new is left.  (A power
 * loss or SIGKILL in the renames, a few system calls, can still leave
 * some of each.)
 */
typedef struct outset {
	outfile **v; /* [n], each allocated: a member stays where it is */
	size_t n, cap;
} outset;

/* The next file of the set, open for writing (its fp), or NULL said. */
outfile *outset_open(outset *s, const char *path);
/* o, of s, written: flushed and closed now (a set may hold more files
 * than a process may keep open), not yet renamed; a write error said, -1. */
int outset_finish(outset *s, outfile *o);
/* Every file finished, then all renamed; on any failure (said) none is
 * left in place and the temporaries are removed: -1.  The set is empty
 * after, either way. */
int outset_commit(outset *s);
/* Throw every file away. */
void outset_abort(outset *s);

/* From now on SIGINT, SIGTERM, SIGHUP and SIGQUIT remove the temporary
 * files of outputs not yet committed before the process dies of them. */
void outfile_cleanup_on_signals(void);

#endif

/*
 * progress.h: the one-line progress bar on standard error, which the
 * library's progress reports (mha_observer.progress) drive:
 *
 *   mha: attention  43% [##########.............]  0:12, about 0:16 left
 *
 * On a terminal it is redrawn in place at most ten times a second and
 * cleared when the computation ends, so that nothing of it stays above the
 * results or a message; it shows only once a run looks like taking more
 * than about a second.  Off a terminal (--progress) it writes a line at
 * each tenth instead, for a log.  It never wraps: a narrow terminal gets
 * the words alone, or the percentage, or nothing; TERM=dumb gets no escape
 * sequences (blanks overwrite a frame).  Ctrl-C takes it off the screen.
 * Never on standard output, never in an output file.
 */
#ifndef MHA_CLI_PROGRESS_H
#define MHA_CLI_PROGRESS_H

enum progress_mode {
	PROGRESS_AUTO,  /* on a terminal (standard error), for runs past about a second */
	PROGRESS_ON,    /* --progress: wherever standard error goes, from the start */
	PROGRESS_OFF    /* --quiet */
};

/* The mode for this run (before any report). */
void progress_mode(enum progress_mode mode);

/* An mha_progress_fn (ctx unused): phase, and the fraction done. */
void progress_report(void *ctx, const char *phase, double done);

/* progress_report, or NULL when no bar will be drawn (--quiet, or standard
 * error not a terminal without --progress): the library then counts
 * nothing. */
void (*progress_listener(void))(void *ctx, const char *phase, double done);

/* The bar taken off the screen, if it is there (before a message). */
void progress_clear(void);

/* The same from a signal handler, before the process dies of the signal:
 * write(2) alone, async-signal-safe. */
void progress_clear_on_signal(void);

#endif

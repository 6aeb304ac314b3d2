/*
 * msg.h: how the engine says what went wrong, the way git words it: the
 * problem, lowercase, no full stop.  Each message becomes an mhe_message
 * (mhe.h) for the front's handler and, for an error, the thread's last
 * error; nothing here prints.  Also the exit statuses the calls return and
 * the small words messages share.
 */
#ifndef MHA_ENGINE_MSG_H
#define MHA_ENGINE_MSG_H

#include <stdarg.h>
#include <stddef.h>

#include "mhe.h"

/* Exit statuses, documented in mha(1): mhe.h's MHE_DATA and MHE_USAGE. */
enum {
	EXIT_OK = MHE_OK,
	EXIT_DATA = MHE_DATA,   /* bad data: a file that cannot be read, parsed or used */
	EXIT_USAGE = MHE_USAGE  /* bad command line, or a setting refused */
};

/* A path (up to PATH_MAX, 4096 bytes) and a few words around it: where a
 * matrix came from ("--mask <stdin>"), as messages and "meta" show it. */
#define PATH_TEXT 4200

#if defined(__GNUC__)
#define MSG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MSG_PRINTF(a, b)
#endif

/* An error (MHE_DATA); returns -1 so callers can 'return error(...)'. */
int error(const char *fmt, ...) MSG_PRINTF(1, 2);
/* A warning: the run goes on. */
void warning(const char *fmt, ...) MSG_PRINTF(1, 2);
/* A note: nothing wrong, something assumed. */
void notice(const char *fmt, ...) MSG_PRINTF(1, 2);
/* An error of the command line or a setting (MHE_USAGE), the front to
 * point to cmd's help (NULL: the program's); returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) MSG_PRINTF(2, 3);

/* The file being read, for the messages said meanwhile (mhe_message.file):
 * the previous one, to put back after (NULL: none). */
const char *msg_reading(const char *path);

/* The setting or config.json key the messages said meanwhile are about
 * (mhe_message.key): the previous one, to put back after (NULL: none). */
const char *msg_key(const char *key);

/* "s" for a plural count: "%zu head%s" */
const char *plural(size_t n);
/* A file as messages, titles and "meta" name it: standard input ("-") is
 * "<stdin>", as the readers say. */
const char *path_shown(const char *path);

/* The front's progress listener (mhe_set_progress_handler), or NULL: what
 * the engine hands the library's observer (mha_observer.progress). */
mhe_progress_fn *msg_progress(void **ctx);

/* The front's stop question (mhe_set_stop_handler) as the library asks it
 * (mha_observer.stop), held back until the call has run 50 ms and then
 * asked at most every 20 ms; NULL when none is set.  A call's clock starts
 * here. */
mhe_stop_fn *msg_stop(void **ctx);

/* Both handed to a library observer o (mha_observer, mha_grad_observer):
 * the front's progress bar and its stop question. */
#define MSG_LISTEN(o) ((o).progress = msg_progress(&(o).progress_ctx), \
		       (o).stop = msg_stop(&(o).stop_ctx))

#endif

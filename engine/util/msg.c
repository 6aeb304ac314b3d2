/*
 * msg.c: the engine's messages (msg.h): each formatted whole, made safe
 * (text.h: no control character from a file reaches a terminal), handed to
 * the front's handler and, for an error, kept as the thread's last error.
 */
#include "util/msg.h"
#include "util/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static mhe_message_fn *handler;
static void *handler_ctx;
static mhe_progress_fn *progress;
static void *progress_ctx;
static mhe_stop_fn *stop;
static void *stop_ctx;
static _Thread_local double call_began, last_asked; /* seconds, monotonic */

/* the thread's last error and the file it was reading */
static _Thread_local struct {
	mhe_message m;
	char text[2048];
	char file[PATH_TEXT];
	char command[32];
	char key[128];
} last;
static _Thread_local const char *reading, *about;

void mhe_set_message_handler(mhe_message_fn *fn, void *ctx)
{
	handler = fn;
	handler_ctx = ctx;
}

void mhe_set_progress_handler(mhe_progress_fn *fn, void *ctx)
{
	progress = fn;
	progress_ctx = ctx;
}

mhe_progress_fn *msg_progress(void **ctx)
{
	*ctx = progress_ctx;
	return progress;
}

void mhe_set_stop_handler(mhe_stop_fn *fn, void *ctx)
{
	stop = fn;
	stop_ctx = ctx;
}

static double seconds_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the library's question, put to the front now and then */
static int ask_front(void *ctx)
{
	const double now = seconds_now();

	(void)ctx;
	if (!stop || now - call_began < 0.05 || now - last_asked < 0.02)
		return 0;
	last_asked = now;
	return stop(stop_ctx);
}

mhe_stop_fn *msg_stop(void **ctx)
{
	*ctx = NULL;
	if (!stop)
		return NULL;
	call_began = seconds_now();
	last_asked = 0;
	return ask_front;
}

const mhe_message *mhe_last_error(void)
{
	if (!last.m.text)
		last.m.text = last.text;
	return &last.m;
}

const char *msg_reading(const char *path)
{
	const char *was = reading;

	reading = path;
	return was;
}

const char *msg_key(const char *key)
{
	const char *was = about;

	about = key;
	return was;
}

/* as much of src as fits in dst[size], ended */
static void keep(char *dst, size_t size, const char *src)
{
	const size_t n = src ? strlen(src) : 0;
	const size_t k = n < size ? n : size - 1;

	if (k)
		memcpy(dst, src, k);
	dst[k] = '\0';
}

static __attribute__((format(printf, 4, 0))) void say(enum mhe_severity severity, int status,
							  const char *command, const char *fmt,
							  va_list ap)
{
	char small[512], *raw = small, *safe;
	va_list again;
	int n;
	mhe_message m;

	va_copy(again, ap);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	if (n >= (int)sizeof(small)) {
		raw = malloc((size_t)n + 1);
		if (raw)
			vsnprintf(raw, (size_t)n + 1, fmt, again);
		else
			raw = small; /* cut short rather than lost */
	}
	va_end(again);
	safe = text_safe(n < 0 ? fmt : raw);
	m = (mhe_message){ .severity = severity, .status = status,
			   .text = safe ? safe : "out of memory",
			   .file = reading ? path_shown(reading) : NULL, .command = command,
			   .key = about };
	if (severity == MHE_ERROR) {
		keep(last.text, sizeof(last.text), m.text);
		keep(last.file, sizeof(last.file), m.file);
		keep(last.command, sizeof(last.command), command);
		keep(last.key, sizeof(last.key), about);
		last.m = m;
		last.m.text = last.text;
		last.m.file = m.file ? last.file : NULL;
		last.m.command = command ? last.command : NULL;
		last.m.key = about ? last.key : NULL;
	}
	if (handler)
		handler(handler_ctx, &m);
	free(safe);
	if (raw != small)
		free(raw);
}

int error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(MHE_ERROR, MHE_DATA, NULL, fmt, ap);
	va_end(ap);
	return -1;
}

void warning(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(MHE_WARNING, MHE_OK, NULL, fmt, ap);
	va_end(ap);
}

void notice(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(MHE_NOTE, MHE_OK, NULL, fmt, ap);
	va_end(ap);
}

int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(MHE_ERROR, MHE_USAGE, cmd, fmt, ap);
	va_end(ap);
	return EXIT_USAGE;
}

const char *path_shown(const char *path)
{
	return strcmp(path, "-") ? path : "<stdin>";
}

const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

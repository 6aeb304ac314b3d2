/*
 * progress.c: the progress bar on standard error (progress.h).
 */
#include "base/progress.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* the most a line of the bar takes, and blanks enough to cover it */
#define LINE_MAX_TEXT 600
static char blanks[LINE_MAX_TEXT + 2];

static struct {
	enum progress_mode mode;
	int tty;          /* standard error is a terminal: redraw in place */
	int plain;        /* TERM=dumb: no escape sequences, blanks instead */
	volatile sig_atomic_t shown; /* the bar is on the screen now, this many
				      columns wide (a signal handler reads it) */
	double start;     /* when the first report came, in seconds */
	double last_draw; /* when it was last drawn */
	int last_tenth;   /* off a terminal: the last tenth written */
	char phase[32];   /* the last phase written */
} bar = { .mode = PROGRESS_AUTO, .last_tenth = -1, .start = -1 };

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void progress_mode(enum progress_mode mode)
{
	const char *term = getenv("TERM");

	bar.mode = mode;
	bar.tty = isatty(STDERR_FILENO);
	bar.plain = !term || !strcmp(term, "dumb");
	blanks[0] = '\r';
	memset(blanks + 1, ' ', LINE_MAX_TEXT);
}

/* "1:05" or "2:03:45" */
static void clock_text(char *buf, size_t size, double s)
{
	const long t = s < 0 ? 0 : s > 359999 ? 359999 : (long)(s + 0.5);

	if (t >= 3600)
		snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, size, "%ld:%02ld", t / 60, t % 60);
}

/* the terminal's columns (80 when it does not say) */
static size_t terminal_width(void)
{
	struct winsize w;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0)
		return w.ws_col;
	return 80;
}

/* the line's text where the bar was: overwritten, the cursor back at its
 * start (async-signal-safe: write alone) */
static void wipe(void)
{
	const size_t n = (size_t)bar.shown;

	if (!n)
		return;
	if (bar.plain) {
		/* "\r", as many blanks as the text took, "\r" */
		if (write(STDERR_FILENO, blanks, n + 1) < 0 || write(STDERR_FILENO, "\r", 1) < 0)
			return;
	} else if (write(STDERR_FILENO, "\r\033[K", 4) < 0) {
		return;
	}
}

static void draw(const char *phase, double done, double elapsed)
{
	char took[32], left[32], line[320], cells[200];
	const int pct = (int)(done * 100);
	size_t width, n, fill;

	clock_text(took, sizeof(took), elapsed);
	clock_text(left, sizeof(left), done > 0 ? elapsed * (1 - done) / done : 0);
	if (!bar.tty) {
		const int mid = done > 0 && done < 1;

		fprintf(stderr, "mha: %s %3d%%, %s%s%s%s\n", phase, pct, took, mid ? ", about " : "",
			mid ? left : "", mid ? " left" : "");
		return;
	}
	/* the bar takes what the words leave of the terminal's width, less one
	 * column so that no terminal wraps the line; a narrower one gets the
	 * words alone, then the percentage alone, then nothing */
	n = (size_t)snprintf(line, sizeof(line), "mha: %-11s %3d%% ", phase, pct);
	width = terminal_width() - 1;
	{
		char tail[48], text[LINE_MAX_TEXT + 1];
		const size_t t = (size_t)snprintf(tail, sizeof(tail), "  %s, about %s left", took,
						  left);
		size_t cols = width > n + t + 4 ? width - n - t - 2 : 0, len, was;

		if (cols > sizeof(cells) - 1)
			cols = sizeof(cells) - 1;
		fill = (size_t)(done * (double)cols);
		for (size_t i = 0; i < cols; i++)
			cells[i] = i < fill ? '#' : '.';
		cells[cols] = '\0';
		if (cols)
			snprintf(text, sizeof(text), "%s[%s]%s", line, cells, tail);
		else if (n - 1 <= width)
			snprintf(text, sizeof(text), "%.*s", (int)(n - 1), line);
		else if (4 <= width)
			snprintf(text, sizeof(text), "%3d%%", pct);
		else
			text[0] = '\0';
		len = strlen(text);
		was = (size_t)bar.shown;
		if (!len && !was)
			return; /* too narrow for anything, and nothing to take off */
		if (bar.plain)
			/* no escapes: blanks over what the last frame left */
			fprintf(stderr, "\r%s%.*s", text, was > len ? (int)(was - len) : 0, blanks + 1);
		else
			fprintf(stderr, "\r%s\033[K", text);
		fflush(stderr);
		/* the columns the line holds now, which a clearing must cover */
		bar.shown = (sig_atomic_t)(bar.plain && was > len ? was : len);
	}
}

void progress_report(void *ctx, const char *phase, double done)
{
	const double t = now();
	double elapsed;

	(void)ctx;
	if (bar.mode == PROGRESS_OFF || (bar.mode == PROGRESS_AUTO && !bar.tty))
		return;
	if (bar.start < 0)
		bar.start = t;
	elapsed = t - bar.start;
	if (done >= 1) {
		if (bar.tty)
			progress_clear();
		else if (bar.last_tenth >= 0 || bar.mode == PROGRESS_ON)
			draw("done", 1, elapsed);
		bar.start = -1; /* a next computation starts its own count */
		bar.last_tenth = -1;
		bar.phase[0] = '\0';
		return;
	}
	if (!bar.tty) {
		/* a log: a line at each tenth */
		const int tenth = (int)(done * 10);

		if (tenth != bar.last_tenth) {
			bar.last_tenth = tenth;
			snprintf(bar.phase, sizeof(bar.phase), "%s", phase);
			draw(phase, done, elapsed);
		}
		return;
	}
	/* a terminal: once the run looks like taking a second, ten times a second */
	if (bar.mode == PROGRESS_AUTO && !bar.shown &&
	    (elapsed < 0.25 || (done > 0 && elapsed / done < 1.0)))
		return;
	if (bar.shown && t - bar.last_draw < 0.1 && !strcmp(phase, bar.phase))
		return;
	bar.last_draw = t;
	snprintf(bar.phase, sizeof(bar.phase), "%s", phase);
	draw(phase, done, elapsed);
}

void (*progress_listener(void))(void *ctx, const char *phase, double done)
{
	if (bar.mode == PROGRESS_OFF || (bar.mode == PROGRESS_AUTO && !bar.tty))
		return NULL;
	return progress_report;
}

void progress_clear(void)
{
	if (!bar.shown)
		return;
	fflush(stderr);
	wipe();
	bar.shown = 0;
}

void progress_clear_on_signal(void)
{
	wipe();
}

/*
 * heatmap.c: attention as coloured cells in a terminal (heatmap_terminal);
 * the ramp, the scale and the labels it shares with svg.c are heat.c's.
 *
 * Each cell is two columns wide: "██" in the ramp's colour (24-bit, or the
 * nearest of the 256-colour palette), or without colours a shade from "  "
 * to "██" by fifths of the scale.  Blocked cells are "··".  Given a width
 * (a terminal's), a panel wider than it has its keys pooled, a cell per
 * block of adjacent keys at the block's largest value, and panels that fit
 * side by side are drawn so; with none (a file, a pipe) every key is a cell
 * and the panels go one under another.  The output is the same bytes for
 * the same input and width: the tests compare it exactly.
 */
#include "write/heatmap.h"

#include "base/cli.h"
#include "util/number.h"
#include "util/text.h"
#include "write/write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the terminal ------------------------------------------------------ */

#define LABEL_COLS 16    /* longer labels are cut, with a "…" */
#define LABEL_SIZE (4 * LABEL_COLS + 8)
#define MAX_STEPS 10    /* column labels stair-step this high at most; then numbers */
#define KEY_WIDTH 78     /* the key of numbered columns wraps before this column */
#define GAP 4            /* columns between panels side by side */
#define GREY 0x767676 /* blocked cells; 243 in the 256-colour palette */
#define NO_COLOUR (-1L)
#define BOLD (-2L)       /* not a colour: bold text, which a reset ends too */

struct term {
	FILE *fp;
	enum heat_color color;
	long cur;     /* the foreground colour set (see set_colour), NO_COLOUR or BOLD */
	size_t width; /* the columns a panel is to fit in; 0: no limit */
	int pool;     /* keys pooled to fit width (not --full) */
	size_t wrap;  /* the key and the notes end before this column; 0: the key
			 at KEY_WIDTH, a note one line however long */
	int body;     /* the panel without its key and notes, to measure it */
};

/* an sRGB colour (0xRRGGBB) in CIELAB (D65): distances there are as the eye sees them */
static void to_lab(double lab[3], long rgb)
{
	double c[3], x, y, z;

	for (int k = 0; k < 3; k++) {
		const double v = (double)(rgb >> (16 - 8 * k) & 0xff) / 255;

		c[k] = v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4);
	}
	x = (0.4124 * c[0] + 0.3576 * c[1] + 0.1805 * c[2]) / 0.95047;
	y = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
	z = (0.0193 * c[0] + 0.1192 * c[1] + 0.9505 * c[2]) / 1.08883;
	x = x > 216.0 / 24389 ? cbrt(x) : (24389.0 / 27 * x + 16) / 116;
	y = y > 216.0 / 24389 ? cbrt(y) : (24389.0 / 27 * y + 16) / 116;
	z = z > 216.0 / 24389 ? cbrt(z) : (24389.0 / 27 * z + 16) / 116;
	lab[0] = 116 * y - 16;
	lab[1] = 500 * (x - y);
	lab[2] = 200 * (y - z);
}

/*
 * The 256-colour palette's entry nearest to rgb as the eye sees it (in
 * CIELAB): the 6x6x6 cube (16-231) or the greys (232-255).  Nearest in
 * plain RGB, the ramp's dark blues fell on one greyish entry (60) and its
 * legend showed two equal swatches; in CIELAB the legend's eight stops are
 * eight entries (the test heat-256-distinct).
 */
static int nearest_256(long rgb)
{
	static const int level[6] = { 0, 95, 135, 175, 215, 255 };
	static double pal[240][3];
	static int ready;
	double lab[3], best_d = -1;
	int best = 16;

	if (!ready) {
		for (int i = 0; i < 240; i++) {
			const long cr = i < 216 ? level[i / 36] : 8 + 10 * (i - 216);
			const long cg = i < 216 ? level[i / 6 % 6] : cr;
			const long cb = i < 216 ? level[i % 6] : cr;

			to_lab(pal[i], cr << 16 | cg << 8 | cb);
		}
		ready = 1;
	}
	to_lab(lab, rgb);
	for (int i = 0; i < 240; i++) {
		const double d = (lab[0] - pal[i][0]) * (lab[0] - pal[i][0]) +
				 (lab[1] - pal[i][1]) * (lab[1] - pal[i][1]) +
				 (lab[2] - pal[i][2]) * (lab[2] - pal[i][2]);

		if (best_d < 0 || d < best_d) { /* the first of equals: the cube */
			best_d = d;
			best = 16 + i;
		}
	}
	return best;
}

static void set_colour(struct term *t, long rgb)
{
	/* in 256 colours, what is compared is the palette entry: 1 << 24 | index */
	const long code = rgb == NO_COLOUR || t->color != HEAT_256 ? rgb
			  : 1L << 24 | nearest_256(rgb);

	if (t->color == HEAT_PLAIN || code == t->cur)
		return;
	if (code == NO_COLOUR)
		fputs("\033[0m", t->fp);
	else if (t->color == HEAT_TRUECOLOR)
		fprintf(t->fp, "\033[38;2;%ld;%ld;%ldm", rgb >> 16 & 0xff, rgb >> 8 & 0xff, rgb & 0xff);
	else
		fprintf(t->fp, "\033[38;5;%ldm", code & 0xff);
	t->cur = code;
}

/* the end of a line: colours reset first, so nothing leaks past it */
static void end_line(struct term *t)
{
	set_colour(t, NO_COLOUR);
	fputc('\n', t->fp);
}

static long ramp_colour(double pos)
{
	unsigned char rgb[3];

	heat_rgb(rgb, pos);
	return (long)rgb[0] << 16 | (long)rgb[1] << 8 | rgb[2];
}

/* without colours: a shade for each fifth of the scale */
static const char *const shade[5] = { "  ", "░░", "▒▒", "▓▓", "██" };

static const char *shade_of(double pos)
{
	const int k = (int)floor(pos * 5);

	return shade[k < 0 ? 0 : k > 4 ? 4 : k];
}

static void put_spaces(FILE *fp, size_t n)
{
	while (n--)
		fputc(' ', fp);
}

/* s right-aligned in width columns (s takes cols) */
static void put_right(FILE *fp, const char *s, size_t cols, size_t width)
{
	put_spaces(fp, width > cols ? width - cols : 0);
	fputs(s, fp);
}

/*
 * Cell (i, c), two columns: the block of keys c*k to c*k + k - 1 (fewer in
 * the last), drawn at the largest of its values that are not blocked;
 * blocked when all are, "??" when one of them is NaN (as NumPy's max).
 * k = 1: key c itself.
 */
static void put_cell(struct term *t, const struct heat_panel *p, const struct heat_scale *s,
		     size_t i, size_t c, size_t k)
{
	const size_t cols = matrix_cols(p->m), end = c * k + k < cols ? c * k + k : cols;
	double v = -INFINITY;
	int open = 0, nan = 0;

	for (size_t j = c * k; j < end; j++) {
		const double x = p->m->v[i * cols + j];

		if (heat_blocked(p, i, j))
			continue;
		open = 1;
		if (isnan(x))
			nan = 1;
		else if (x > v)
			v = x;
	}
	if (!open) {
		set_colour(t, GREY);
		fputs("··", t->fp);
	} else if (nan) {
		set_colour(t, NO_COLOUR);
		fputs("??", t->fp);
	} else if (t->color == HEAT_PLAIN) {
		fputs(shade_of(heat_position(s, v)), t->fp);
	} else {
		set_colour(t, ramp_colour(heat_position(s, v)));
		fputs("██", t->fp);
	}
}

/*
 * The column labels over the grid, each starting over its own cell: a label
 * that would run into the next columns' goes a line higher, with a "│"
 * down to its cell, so short labels share a line and long ones stair-step.
 * line[j] is column j's line, 1 being the one just above the grid.
 */
static size_t label_lines(size_t *line, const size_t *width, size_t cols)
{
	size_t top = 0;

	for (size_t j = cols; j-- > 0;) {
		line[j] = 1;
		/* column k starts at 2k: it must be past the label and a space */
		for (size_t k = j + 1; k < cols && 2 * k <= 2 * j + width[j]; k++)
			if (line[k] + 1 > line[j])
				line[j] = line[k] + 1;
		if (line[j] > top)
			top = line[j];
	}
	return top;
}

/* stair-stepped labels (label_lines), top lines high */
static void put_stairs(struct term *t, char (*label)[LABEL_SIZE], const size_t *width,
		       const size_t *line, size_t top, size_t cols, size_t indent)
{
	for (size_t l = top; l >= 1; l--) {
		size_t at = 0; /* columns written past the indent */

		put_spaces(t->fp, indent);
		for (size_t j = 0; j < cols; j++) {
			if (line[j] < l)
				continue;
			put_spaces(t->fp, 2 * j - at);
			if (line[j] == l) {
				fputs(label[j], t->fp);
				at = 2 * j + width[j];
			} else {
				fputs("│", t->fp);
				at = 2 * j + 1;
			}
		}
		end_line(t);
	}
}

/*
 * The cells numbered over the grid by the first key each holds (its own
 * without pooling, k = 1): each of them when there are fewer than 10, else
 * as on a ruler, so that numbers of two digits and more have room: keys 1,
 * 5, 10, 15, …, or pooled the first cell and every fifth (keys 1, 11, 21,
 * … two to a cell).  A number that would touch the one before, or end past
 * limit (0: no limit), is left out.  The keys numbered go to shown
 * (0-based): how many.
 */
static size_t put_ruler(struct term *t, size_t cells, size_t k, size_t indent, size_t limit,
			size_t *shown)
{
	size_t at = 0, n_shown = 0;

	put_spaces(t->fp, indent);
	for (size_t c = 0; c < cells; c++) {
		char num[32];
		const size_t n = (size_t)snprintf(num, sizeof(num), "%zu", c * k + 1);

		if ((cells >= 10 && (k > 1 ? c % 5 : c && (c + 1) % 5)) || (at && 2 * c < at + 1) ||
		    (limit && 2 * c + n > limit))
			continue;
		put_spaces(t->fp, 2 * c - at);
		fputs(num, t->fp);
		at = 2 * c + n;
		shown[n_shown++] = c * k;
	}
	end_line(t);
	return n_shown;
}

/*
 * Over the grid: the labels stair-stepped (label_lines) when not too high
 * nor, given a width, too wide, else the columns' numbers, and a key
 * (put_key) under the legend saying which is which (never a label written
 * downwards, a letter a line).  Cutting labels shorter would not help: any
 * label two columns wide runs into the next column's, so a run of them
 * climbs a line each however cut.  Without labels, the numbers.  Keys
 * pooled k to a cell: the numbers, of each cell's first key.  The keys the
 * key names go to shown, *n_shown of them.  1 when the key is wanted, 0,
 * -1 out of memory.
 */
static int put_column_labels(struct term *t, const struct heat_panel *p,
			     char (*label)[LABEL_SIZE], const size_t *width, size_t cols, size_t k,
			     size_t indent, size_t *shown, size_t *n_shown)
{
	size_t *line = malloc(cols * sizeof(*line));
	/* fitting a width: nothing past it */
	const size_t limit = !t->pool || !t->width ? 0 : t->width > indent + 2 ? t->width - indent : 2;
	size_t top, wide = 0;
	int rc = 0;

	if (!line)
		return -1;
	for (size_t j = 0; j < cols; j++)
		wide = 2 * j + width[j] > wide ? 2 * j + width[j] : wide;
	if (k > 1) {
		*n_shown = put_ruler(t, (cols + k - 1) / k, k, indent, limit, shown);
		rc = p->col_labels != NULL;
	} else if (!p->col_labels && cols >= 10) {
		put_ruler(t, cols, 1, indent, limit, shown); /* the numbers are the labels: no key */
	} else if ((top = label_lines(line, width, cols)) <= MAX_STEPS && (!limit || wide <= limit)) {
		put_stairs(t, label, width, line, top, cols, indent);
	} else {
		put_ruler(t, cols, 1, indent, limit, shown);
		for (size_t j = 0; j < cols; j++)
			shown[j] = j; /* the key names every column */
		*n_shown = cols;
		rc = 1;
	}
	free(line);
	return rc;
}

/* under the legend: which key each number stands for (keys[], n of them),
 * lines kept short */
static void put_key(struct term *t, char (*label)[LABEL_SIZE], const size_t *width,
		    const size_t *keys, size_t n, size_t indent)
{
	const size_t most = t->wrap && t->wrap < KEY_WIDTH ? t->wrap : KEY_WIDTH;
	size_t at;

	put_spaces(t->fp, indent);
	fputs("columns:", t->fp);
	at = indent + 8;
	for (size_t k = 0; k < n; k++) {
		const size_t j = keys[k];
		char num[32];
		const size_t d = (size_t)snprintf(num, sizeof(num), "%zu", j + 1);

		if (at + 2 + d + 1 + width[j] > most && at > indent + 8) {
			end_line(t);
			put_spaces(t->fp, indent + 8);
			at = indent + 8;
		}
		fprintf(t->fp, "  %s %s", num, label[j]);
		at += 2 + d + 1 + width[j];
	}
	end_line(t);
}

/* a note under the legend, its words wrapped at t->wrap (0: one line) */
static void put_note(struct term *t, size_t indent, const char *text)
{
	size_t at = indent;

	put_spaces(t->fp, indent);
	while (*text) {
		const size_t n = strcspn(text, " ");

		if (t->wrap && at > indent && at + 1 + n > t->wrap) {
			fputc('\n', t->fp);
			put_spaces(t->fp, indent);
			at = indent;
		} else if (at > indent) {
			fputc(' ', t->fp);
			at++;
		}
		fwrite(text, 1, n, t->fp);
		at += n;
		text += n + (text[n] == ' ');
	}
	fputc('\n', t->fp);
}

/* a swatch: ██ in the ramp's colour at pos, or the shade */
static void put_swatch(struct term *t, double pos)
{
	if (t->color == HEAT_PLAIN) {
		fputs(shade_of(pos), t->fp);
	} else {
		set_colour(t, ramp_colour(pos));
		fputs("██", t->fp);
		set_colour(t, NO_COLOUR);
	}
}

/*
 * Under the grid, from its first column: the scale from lo to hi (and
 * where it comes from, with --range), the blocked mark; then its ticks,
 * round values each after its colour (in colour) or the shades' bounds
 * (the notes under it are put_notes').
 */
static void put_legend(struct term *t, const struct heat_scale *s, size_t indent, int precision)
{
	char lo[64], hi[64], b[64];
	double tick[6];
	const size_t n_ticks = heat_ticks(tick, 6, s->lo, s->hi);

	format_number(lo, sizeof(lo), s->lo, precision);
	format_number(hi, sizeof(hi), s->hi, precision);
	put_spaces(t->fp, indent);
	if (s->finite && !(s->hi > s->lo)) {
		/* one value everywhere: drawn in the middle of the ramp */
		put_swatch(t, 0.5);
		fprintf(t->fp, " every value is %s", lo);
	} else if (s->finite) {
		fprintf(t->fp, "%s ", lo);
		if (t->color == HEAT_PLAIN) {
			for (int k = 0; k < 5; k++)
				fputs(shade[k], t->fp);
		} else {
			/* the ramp in eight steps, lo to hi */
			for (int k = 0; k < 8; k++) {
				set_colour(t, ramp_colour(k / 7.0));
				fputs("██", t->fp);
			}
			set_colour(t, NO_COLOUR);
		}
		fprintf(t->fp, " %s", hi);
		if (s->mode == HEAT_RANGE_AUTO)
			fputs(" (--range auto: the values shown)", t->fp);
		else if (s->mode == HEAT_RANGE_FIXED)
			fputs(" (--range)", t->fp);
	}
	if (s->blocked) {
		if (s->finite)
			fputs("   ", t->fp);
		set_colour(t, GREY);
		fputs("··", t->fp);
		set_colour(t, NO_COLOUR);
		fputs(" masked", t->fp);
	}
	end_line(t);
	if (s->finite && s->hi > s->lo && (t->color == HEAT_PLAIN || n_ticks)) {
		put_spaces(t->fp, indent);
		if (t->color == HEAT_PLAIN) {
			/* each shade from its fifth of the scale */
			for (int k = 1; k < 5; k++) {
				format_number(b, sizeof(b), s->lo + (s->hi - s->lo) * k / 5, precision);
				fprintf(t->fp, "%s%s ≥%s", k == 1 ? "" : "  ", shade[k], b);
			}
		} else {
			for (size_t k = 0; k < n_ticks; k++) {
				format_number(b, sizeof(b), tick[k], precision);
				fputs(k ? "  " : "", t->fp);
				put_swatch(t, heat_position(s, tick[k]));
				fprintf(t->fp, " %s", b);
			}
		}
		end_line(t);
	}
}

/*
 * Under the legend, each wrapped to t->wrap: what falls outside a range
 * given, the cells masked later, and keys pooled k to a cell (of cols).
 */
static void put_notes(struct term *t, const struct heat_scale *s, size_t indent, int precision,
		      size_t k, size_t cols)
{
	char lo[64], hi[64], note[400];

	format_number(lo, sizeof(lo), s->lo, precision);
	format_number(hi, sizeof(hi), s->hi, precision);
	if (s->outside) {
		snprintf(note, sizeof(note), "%zu value%s outside %s to %s, drawn at the nearer end",
			 s->outside, s->outside == 1 ? "" : "s", lo, hi);
		put_note(t, indent, note);
	}
	if (s->later) {
		snprintf(note, sizeof(note), "the mask blocks %zu of these cells later (at the masked "
			 "step); they are drawn as computed", s->later);
		put_note(t, indent, note);
	}
	if (k > 1) {
		char last[64] = "";

		if (cols % k)
			snprintf(last, sizeof(last), ", %zu in the last", cols % k);
		/* max: attention's peaks stay in sight, where a mean would wash them out */
		snprintf(note, sizeof(note), "keys pooled %zu to a cell%s (max), numbered by each "
			 "cell's first key", k, last);
		put_note(t, indent, note);
	}
}

/*
 * Keys pooled k to a cell so that the panel's grid fits t->width (never
 * fewer than one cell): 1 when it fits, when there is no width, or with
 * --full.  Rows are never pooled: a terminal scrolls down, not across.
 */
static size_t pool_factor(const struct term *t, size_t cols, size_t indent)
{
	size_t fit;

	if (!t->pool || !t->width || !cols)
		return 1;
	fit = t->width >= indent + 4 ? (t->width - indent) / 2 : 1;
	return cols > fit ? (cols + fit - 1) / fit : 1;
}

static int draw_panel(struct term *t, const struct heat_panel *p, int precision)
{
	const size_t rows = matrix_rows(p->m), cols = matrix_cols(p->m);
	char (*rl)[LABEL_SIZE] = malloc((rows ? rows : 1) * sizeof(*rl));
	char (*cl)[LABEL_SIZE] = malloc((cols ? cols : 1) * sizeof(*cl));
	size_t *rw = malloc((rows ? rows : 1) * sizeof(*rw));
	size_t *cw = malloc((cols ? cols : 1) * sizeof(*cw));
	size_t *shown = malloc((cols ? cols : 1) * sizeof(*shown)); /* the keys numbered */
	size_t lw = 0, k, n_shown = 0;
	struct heat_scale s;
	char shape[64];
	int rc = -1, key = 0;

	if (!rl || !cl || !rw || !cw || !shown)
		goto done;
	heat_scale_of(&s, p);
	for (size_t i = 0; i < rows; i++) {
		rw[i] = heat_label(rl[i], LABEL_SIZE, p->row_labels ? p->row_labels[i] : NULL, i,
				   LABEL_COLS);
		lw = rw[i] > lw ? rw[i] : lw;
	}
	for (size_t j = 0; j < cols; j++)
		cw[j] = heat_label(cl[j], LABEL_SIZE, p->col_labels ? p->col_labels[j] : NULL, j,
				   LABEL_COLS);
	k = pool_factor(t, cols, lw + 4);

	if (t->color != HEAT_PLAIN) {
		fputs("\033[1m", t->fp);
		t->cur = BOLD;
	}
	text_put(t->fp, p->title ? p->title : p->step ? p->step : "attention");
	fprintf(t->fp, " (%s)", matrix_shape(p->m, shape, sizeof(shape)));
	end_line(t);
	if (rows && cols) {
		key = put_column_labels(t, p, cl, cw, cols, k, lw + 4, shown, &n_shown);
		if (key < 0)
			goto done;
		for (size_t i = 0; i < rows; i++) {
			fputs("  ", t->fp);
			put_right(t->fp, rl[i], rw[i], lw);
			fputs("  ", t->fp);
			for (size_t c = 0; c * k < cols; c++)
				put_cell(t, p, &s, i, c, k);
			end_line(t);
		}
		fputc('\n', t->fp);
		put_legend(t, &s, lw + 4, precision);
		if (!t->body)
			put_notes(t, &s, lw + 4, precision, k, cols);
		if (key && !t->body)
			put_key(t, cl, cw, shown, n_shown, lw + 4);
	}
	rc = 0;
done:
	free(shown);
	free(rl);
	free(cl);
	free(rw);
	free(cw);
	return rc;
}

/* the columns a line of drawn text takes on screen, its colours' escapes
 * none; *end: where it ends (its '\n', or the string's end) */
static size_t line_width(const char *s, const char **end)
{
	struct text_unit u;
	size_t w = 0;

	while (*s && *s != '\n') {
		if (*s == '\033') {
			/* ESC [ parameters, ended by a byte from '@' to '~' (m) */
			s += 1 + (s[1] == '[');
			while (*s && (*s < '@' || *s > '~'))
				s++;
			s += *s != '\0';
			continue;
		}
		text_next(&s, &u);
		w += (size_t)u.cols;
	}
	*end = s;
	return w;
}

/* the widest line of text */
static size_t widest_line(const char *s)
{
	size_t most = 0;

	while (*s) {
		const size_t w = line_width(s, &s);

		most = w > most ? w : most;
		s += *s == '\n';
	}
	return most;
}

/* panel p drawn as t draws it, into a string from malloc; NULL when out of memory */
static char *panel_text(const struct term *like, const struct heat_panel *p, int precision)
{
	struct term t = *like;
	char *buf = NULL;
	size_t len = 0;
	int rc;

	t.fp = open_memstream(&buf, &len);
	if (!t.fp)
		return NULL;
	rc = draw_panel(&t, p, precision);
	if (fclose(t.fp) || rc) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* one panel under the other (t->wrap: the width, or 0 without one) */
static int draw_stacked(struct term *t, const struct heat_panel *p, size_t n, int precision)
{
	for (size_t k = 0; k < n; k++) {
		if (k)
			fputc('\n', t->fp);
		if (draw_panel(t, &p[k], precision))
			return -1;
	}
	return 0;
}

/* text[0..n), each panel as drawn, in rows of across, each padded to wide
 * columns and GAP between; a blank line between the rows */
static void put_across(FILE *fp, const char **text, size_t n, size_t across, size_t wide)
{
	for (size_t r = 0; r < n; r += across) {
		const size_t m = n - r < across ? n - r : across;
		const char **at = text + r; /* each panel's next line, moved along */

		if (r)
			fputc('\n', fp);
		for (;;) {
			/* panels with a line left; the last whose line is not empty */
			size_t left = 0, last = m;

			for (size_t q = 0; q < m; q++) {
				left += *at[q] != '\0';
				last = *at[q] && *at[q] != '\n' ? q : last;
			}
			if (!left)
				break;
			for (size_t q = 0; q < m; q++) {
				const char *end = at[q];
				const size_t w = *at[q] ? line_width(at[q], &end) : 0;

				if (last < m && q <= last)
					fwrite(at[q], 1, (size_t)(end - at[q]), fp);
				if (last < m && q < last)
					put_spaces(fp, wide - w + GAP);
				at[q] = end + (*end == '\n');
			}
			fputc('\n', fp);
		}
	}
}

int heatmap_terminal(FILE *fp, const struct heat_panel *p, size_t n, const struct heat_look *look)
{
	struct term t = { .fp = fp, .color = look->color, .cur = NO_COLOUR, .width = look->width,
			  .pool = !look->whole, .wrap = look->width };
	const char **text = NULL; /* each panel's text, read along by put_across */
	char **start = NULL;      /* the same, to free */
	size_t body = 0, wide = 0, across = 1, w;
	int rc = -1;

	if (look->width && n > 1) {
		/* how many fit across: the panels' bodies (title, labels, grid,
		 * legend) measured; the key and the notes then wrap to them */
		t.body = 1;
		for (size_t k = 0; k < n; k++) {
			char *s = panel_text(&t, &p[k], look->precision);

			if (!s)
				goto oom;
			w = widest_line(s);
			body = w > body ? w : body;
			free(s);
		}
		t.body = 0;
		across = (look->width + GAP) / (body + GAP);
	}
	if (across < 2)
		return draw_stacked(&t, p, n, look->precision) ? error("out of memory") : 0;
	t.wrap = body;
	text = calloc(n, sizeof(*text));
	start = calloc(n, sizeof(*start));
	if (!text || !start)
		goto oom;
	for (size_t k = 0; k < n; k++) {
		if (!(start[k] = panel_text(&t, &p[k], look->precision)))
			goto oom;
		text[k] = start[k];
		w = widest_line(text[k]);
		wide = w > wide ? w : wide;
	}
	across = (look->width + GAP) / (wide + GAP);
	if (across >= 2) {
		put_across(fp, text, n, across, wide);
		rc = 0;
	} else {
		/* a word longer than the bodies are wide: one under another after all */
		t.wrap = look->width;
		rc = draw_stacked(&t, p, n, look->precision) ? error("out of memory") : 0;
	}
	goto done;
oom:
	rc = error("out of memory");
done:
	for (size_t k = 0; start && k < n; k++)
		free(start[k]);
	free(text);
	free(start);
	return rc; /* a write error is fp's to report (ferror), with its name */
}

/*
 * heatmap.c: attention as coloured cells in a terminal, and what the SVG
 * picture (svg.c) shares with it: the colour ramp, a panel's scale, which
 * cells are blocked, and labels cut to fit (made safe by text.h).
 *
 * Each cell is two columns wide: "██" in the ramp's colour (24-bit, or the
 * nearest of the 256-colour palette), or without colours a shade from "  "
 * to "██" by fifths of the scale.  Blocked cells are "··".  The output is
 * the same bytes for the same input: the tests compare it exactly.
 */
#include "heatmap.h"

#include "cli.h"
#include "text.h"
#include "write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared with svg.c ------------------------------------------------- */

/* viridis (matplotlib's perceptually uniform ramp) at 0, 1/8, …, 1 */
const unsigned char heat_anchor[HEAT_ANCHORS][3] = {
	{ 0x44, 0x01, 0x54 }, { 0x47, 0x2d, 0x7b }, { 0x3b, 0x52, 0x8b },
	{ 0x2c, 0x72, 0x8e }, { 0x21, 0x90, 0x8c }, { 0x27, 0xad, 0x81 },
	{ 0x5d, 0xc8, 0x63 }, { 0xaa, 0xdc, 0x32 }, { 0xfd, 0xe7, 0x25 },
};

void heat_rgb(unsigned char rgb[3], double t)
{
	double x, f;
	int k;

	if (!(t > 0)) /* NaN too */
		t = 0;
	if (t > 1)
		t = 1;
	x = t * (HEAT_ANCHORS - 1);
	k = (int)x;
	if (k >= HEAT_ANCHORS - 1)
		k = HEAT_ANCHORS - 2;
	f = x - k;
	for (int c = 0; c < 3; c++) {
		const double a = heat_anchor[k][c], b = heat_anchor[k + 1][c];

		rgb[c] = (unsigned char)(a + (b - a) * f + 0.5);
	}
}

int heat_blocked(const struct heat_panel *p, size_t i, size_t j)
{
	const size_t cols = matrix_cols(p->m);
	const matrix *mk = p->mask;

	if (isinf(p->m->v[i * cols + j]) && p->m->v[i * cols + j] < 0)
		return 1;
	/* a mask of another shape cannot say which cell it blocks: not used */
	if (mk && matrix_rows(mk) == matrix_rows(p->m) && matrix_cols(mk) == cols &&
	    matrix_size(mk) == matrix_size(p->m))
		return isinf(mk->v[i * cols + j]) && mk->v[i * cols + j] < 0;
	return 0;
}

void heat_scale_of(struct heat_scale *s, const struct heat_panel *p)
{
	const size_t rows = matrix_rows(p->m), cols = matrix_cols(p->m);
	const int fixed = p->step && !strcmp(p->step, "softmax");

	s->lo = fixed ? 0 : INFINITY;
	s->hi = fixed ? 1 : -INFINITY;
	s->blocked = s->finite = 0;
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++) {
			const double v = p->m->v[i * cols + j];

			if (heat_blocked(p, i, j)) {
				s->blocked++;
			} else if (isfinite(v)) {
				s->finite++;
				if (!fixed && v < s->lo)
					s->lo = v;
				if (!fixed && v > s->hi)
					s->hi = v;
			}
		}
	if (!s->finite && !fixed)
		s->lo = s->hi = 0;
}

double heat_position(const struct heat_scale *s, double v)
{
	double t;

	if (!(s->hi > s->lo))
		return 0.5;
	t = (v - s->lo) / (s->hi - s->lo);
	return t < 0 ? 0 : t > 1 ? 1 : t; /* NaN: 1 */
}

size_t heat_label(char *buf, size_t size, const char *s, size_t n, size_t max_cols)
{
	char num[32];
	size_t cols = 0, len = 0, all_cols = 0, all_len = 0;
	struct text_unit u;
	int whole;

	if (!s) {
		snprintf(num, sizeof(num), "%zu", n + 1);
		s = num;
	}
	for (const char *q = s; text_next(&q, &u);) {
		all_cols += (size_t)u.cols;
		all_len += u.len;
	}
	/* all of it, or as much as leaves room for the "…" */
	whole = all_cols <= max_cols && all_len < size;
	for (const char *q = s; text_next(&q, &u);) {
		if (!whole && (cols + (size_t)u.cols + 1 > max_cols || len + u.len + 4 > size))
			break;
		memcpy(buf + len, u.b, u.len);
		len += u.len;
		cols += (size_t)u.cols;
	}
	if (!whole) {
		memcpy(buf + len, "\xe2\x80\xa6", 3); /* … */
		len += 3;
		cols++;
	}
	buf[len] = '\0';
	return cols;
}

/* ---- the terminal ------------------------------------------------------ */

#define LABEL_COLS 16    /* longer labels are cut, with a "…" */
#define LABEL_SIZE (4 * LABEL_COLS + 8)
#define MAX_STEPS 12    /* column labels stair-step this high at most; then downwards */
#define VERTICAL_COLS 10 /* downwards, labels are cut shorter */
#define GREY 0x767676 /* blocked cells; 243 in the 256-colour palette */
#define NO_COLOUR (-1L)
#define BOLD (-2L)       /* not a colour: bold text, which a reset ends too */

struct term {
	FILE *fp;
	enum heat_color color;
	long cur; /* the foreground colour set (see set_colour), NO_COLOUR or BOLD */
};

/* the 256-colour palette's nearest entry: the 6x6x6 cube (16-231) or the greys (232-255) */
static int nearest_256(long rgb)
{
	static const int level[6] = { 0, 95, 135, 175, 215, 255 };
	const int r = (int)(rgb >> 16 & 0xff), g = (int)(rgb >> 8 & 0xff), b = (int)(rgb & 0xff);
	int best = 16;
	long best_d = -1;

	for (int i = 0; i < 240; i++) {
		const int cr = i < 216 ? level[i / 36] : 8 + 10 * (i - 216);
		const int cg = i < 216 ? level[i / 6 % 6] : cr;
		const int cb = i < 216 ? level[i % 6] : cr;
		const long d = (long)(r - cr) * (r - cr) + (long)(g - cg) * (g - cg) +
			       (long)(b - cb) * (b - cb);

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

/* one cell, two columns */
static void put_cell(struct term *t, const struct heat_panel *p, const struct heat_scale *s,
		     size_t i, size_t j)
{
	const double v = p->m->v[i * matrix_cols(p->m) + j];

	if (heat_blocked(p, i, j)) {
		set_colour(t, GREY);
		fputs("··", t->fp);
	} else if (isnan(v)) {
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

/* the columns the character at q takes */
static int width_at(const char *q)
{
	struct text_unit u;

	return text_next(&q, &u) ? u.cols : 0;
}

/* q moved past its next character */
static void skip_char(const char **q)
{
	struct text_unit u;

	(void)text_next(q, &u);
}

/*
 * Column labels written downwards, a character a line over each cell: for
 * many columns, where stair-steps would climb too high, and for column
 * numbers past 9 (the digits of 10 one over the other).
 */
static void put_vertical_labels(struct term *t, char (*label)[LABEL_SIZE], size_t cols,
				size_t indent)
{
	size_t height = 0;

	for (size_t j = 0; j < cols; j++) {
		char cut[LABEL_SIZE];
		size_t n = 0;

		heat_label(cut, sizeof(cut), label[j], 0, VERTICAL_COLS);
		memcpy(label[j], cut, strlen(cut) + 1);
		for (const char *q = label[j]; *q; skip_char(&q))
			n += width_at(q) > 0;
		height = n > height ? n : height;
	}
	for (size_t l = 0; l < height; l++) {
		size_t at = 0; /* columns written past the indent */

		put_spaces(t->fp, indent);
		for (size_t j = 0; j < cols; j++) {
			const char *q = label[j], *from;
			size_t n = 0;

			/* the l-th character that takes a column, and the marks that follow it */
			while (*q && !(width_at(q) > 0 && n++ == l))
				skip_char(&q);
			if (!*q)
				continue;
			from = q;
			put_spaces(t->fp, 2 * j - at);
			at = 2 * j + (size_t)width_at(q);
			skip_char(&q);
			while (*q && !width_at(q))
				skip_char(&q);
			fwrite(from, 1, (size_t)(q - from), t->fp);
		}
		end_line(t);
	}
}

/* over the grid: stair-steps (see label_lines) if not too high, else downwards */
static void put_column_labels(struct term *t, const struct heat_panel *p,
			      char (*label)[LABEL_SIZE], const size_t *width, size_t cols,
			      size_t indent)
{
	size_t *line = malloc(cols * sizeof(*line));
	size_t top;

	if (!line || (top = label_lines(line, width, cols)) > MAX_STEPS ||
	    (!p->col_labels && cols >= 10)) {
		free(line);
		put_vertical_labels(t, label, cols, indent);
		return;
	}
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
	free(line);
}

/* under the grid, from its first column: the scale from lo to hi, and the blocked mark */
static void put_legend(struct term *t, const struct heat_scale *s, size_t indent, int precision)
{
	char lo[64], hi[64];

	format_number(lo, sizeof(lo), s->lo, precision);
	format_number(hi, sizeof(hi), s->hi, precision);
	put_spaces(t->fp, indent);
	if (s->finite && !(s->hi > s->lo)) {
		/* one value everywhere: drawn in the middle of the ramp */
		if (t->color == HEAT_PLAIN) {
			fputs(shade_of(0.5), t->fp);
		} else {
			set_colour(t, ramp_colour(0.5));
			fputs("██", t->fp);
			set_colour(t, NO_COLOUR);
		}
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
		if (t->color == HEAT_PLAIN)
			for (int k = 1; k < 5; k++) {
				char b[64];

				format_number(b, sizeof(b), s->lo + (s->hi - s->lo) * k / 5, precision);
				fprintf(t->fp, "%s%s ≥%s", k == 1 ? "   " : "  ", shade[k], b);
			}
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
}

static int draw_panel(struct term *t, const struct heat_panel *p, int precision)
{
	const size_t rows = matrix_rows(p->m), cols = matrix_cols(p->m);
	char (*rl)[LABEL_SIZE] = malloc((rows ? rows : 1) * sizeof(*rl));
	char (*cl)[LABEL_SIZE] = malloc((cols ? cols : 1) * sizeof(*cl));
	size_t *rw = malloc((rows ? rows : 1) * sizeof(*rw));
	size_t *cw = malloc((cols ? cols : 1) * sizeof(*cw));
	size_t lw = 0;
	struct heat_scale s;
	char shape[64];
	int rc = -1;

	if (!rl || !cl || !rw || !cw)
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

	if (t->color != HEAT_PLAIN) {
		fputs("\033[1m", t->fp);
		t->cur = BOLD;
	}
	text_put(t->fp, p->title ? p->title : p->step ? p->step : "attention");
	fprintf(t->fp, " (%s)", matrix_shape(p->m, shape, sizeof(shape)));
	end_line(t);
	if (rows && cols) {
		put_column_labels(t, p, cl, cw, cols, lw + 4);
		for (size_t i = 0; i < rows; i++) {
			fputs("  ", t->fp);
			put_right(t->fp, rl[i], rw[i], lw);
			fputs("  ", t->fp);
			for (size_t j = 0; j < cols; j++)
				put_cell(t, p, &s, i, j);
			end_line(t);
		}
		fputc('\n', t->fp);
		put_legend(t, &s, lw + 4, precision);
	}
	rc = 0;
done:
	free(rl);
	free(cl);
	free(rw);
	free(cw);
	return rc;
}

int heatmap_terminal(FILE *fp, const struct heat_panel *p, size_t n, enum heat_color color,
		     int precision)
{
	struct term t = { .fp = fp, .color = color, .cur = NO_COLOUR };

	for (size_t k = 0; k < n; k++) {
		if (k)
			fputc('\n', fp);
		if (draw_panel(&t, &p[k], precision)) {
			error("out of memory");
			return -1;
		}
	}
	return 0; /* a write error is fp's to report (ferror), with its name */
}

/*
 * svg.c: attention heatmaps as one standalone SVG 1.1 picture, the panels
 * (one per head) side by side, four to a row, for a browser, a README or a
 * paper.
 *
 * Each cell is a <rect> filled with the ramp's colour (heat.c), its
 * <title> the tooltip "query → key: value"; blocked cells are hatched grey.
 * Everything else (background, colour bars, the hatch) is a <path>, so the
 * cells are exactly the file's <rect> elements.  Text widths are estimated
 * (no fonts are read), generously, so that labels do not collide.
 */
#include "write/heatmap.h"

#include "base/cli.h"
#include "util/number.h"
#include "util/text.h"
#include "write/write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CELL 38        /* a cell's side, px: room for "-1.23" and "<0.01" */
#define FONT 12        /* labels */
#define TITLE_FONT 13  /* panel titles, bold */
#define PAD 16         /* around the picture */
#define GAP 40         /* between panels */
#define PER_ROW 4      /* panels in a row; more go on the rows under it */
#define ROW_GAP 28     /* between rows of panels */
#define BAR_H 10       /* the colour bar's height */
#define TICK 4         /* a tick's length under the bar */
#define LEGEND_H (14 + BAR_H + TICK + 14) /* the bar, its ticks and their values */
#define SHOW_COLS 20   /* labels drawn longer than this are cut, with a "…" */
#define TIP_COLS 80    /* the same in tooltips */
#define CAPTION "rows: queries \xc2\xb7 columns: keys" /* under the title */
#define CAPTION_LINE 17 /* the caption's baseline under the title's */
#define NOTE_FONT 10   /* the values written in the cells */
#define NOTE_CELLS 400 /* grids with more cells than this have none written */
#define SIN45 0.70710678

/* a label's width in px at size font as shown: wide characters an em, others 0.6 em */
static int text_px(const char *s, int font)
{
	struct text_unit u;
	double px = 0;

	while (text_next(&s, &u))
		px += u.cols == 2 && !u.escaped ? font : 0.6 * font * u.cols;
	return (int)ceil(px);
}

/* s as shown (text.h: always valid UTF-8 XML may hold) as XML character data or attribute text */
static void put_xml(FILE *fp, const char *s)
{
	struct text_unit u;

	while (text_next(&s, &u))
		switch (u.escaped ? 0 : u.c) {
		case '&': fputs("&amp;", fp); break;
		case '<': fputs("&lt;", fp); break;
		case '>': fputs("&gt;", fp); break;
		case '"': fputs("&quot;", fp); break;
		case '\'': fputs("&apos;", fp); break;
		default: fwrite(u.b, 1, u.len, fp);
		}
}

static void put_rgb(FILE *fp, const unsigned char rgb[3])
{
	fprintf(fp, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* One panel's labels (cut for drawing, and longer for tooltips) and layout. */
struct layout {
	const struct heat_panel *p;
	size_t rows, cols;
	struct heat_scale s;
	char (*row_show)[4 * SHOW_COLS + 8], (*col_show)[4 * SHOW_COLS + 8];
	char (*row_tip)[4 * TIP_COLS + 8], (*col_tip)[4 * TIP_COLS + 8];
	char lo[64], hi[64];   /* the colour bar's ends */
	char scale[200];       /* under the bar: "scale: 0 to 1", and where that came from */
	char notes[2][200];    /* under that: values outside --range, cells masked later */
	int below;             /* the height under the grid: bar, ticks, lines, swatch */
	int decimals;          /* the values written in the cells: their decimals, or -1: none */
	int rotate;            /* column labels at 45 degrees: one is wider than a cell */
	int label_w;           /* the row labels' column, px, right of which the grid starts */
	int top;               /* the column labels' height over the grid, px */
	int bar_w;             /* the colour bar's width */
	int width;             /* the whole panel's */
};

static void layout_free(struct layout *l)
{
	free(l->row_show);
	free(l->col_show);
	free(l->row_tip);
	free(l->col_tip);
}

/*
 * A value as written in its cell: decimals fixed, no "-0.00"; a value that
 * is not 0 but rounds to it is "<0.01" (or ">-0.01"), not "0.00".
 */
static void note_text(char *buf, size_t size, double v, int decimals)
{
	snprintf(buf, size, "%.*f", decimals, v);
	if (v != 0 && !strpbrk(buf, "123456789"))
		snprintf(buf, size, "%s%.*f", v > 0 ? "<" : ">-", decimals, pow(10, -decimals));
	else if (buf[0] == '-' && !strpbrk(buf, "123456789"))
		memmove(buf, buf + 1, strlen(buf));
}

/*
 * The cells of a small grid have their values written in them, as many
 * decimals as fit (two for a softmax): the tooltip has them all, with
 * --precision digits.  -1 when the grid is too large or a value too wide.
 */
static int note_decimals(const struct layout *l, int precision)
{
	const struct heat_panel *p = l->p;
	double big = 0;
	int d, widest = 0;

	if (l->rows * l->cols > NOTE_CELLS || !l->s.finite)
		return -1;
	for (size_t i = 0; i < l->rows * l->cols; i++)
		if (!heat_blocked(p, i / l->cols, i % l->cols) && isfinite(p->m->v[i]))
			big = fabs(p->m->v[i]) > big ? fabs(p->m->v[i]) : big;
	d = big < 10 ? 2 : big < 100 ? 1 : 0;
	d = d > precision ? precision : d;
	for (size_t i = 0; i < l->rows * l->cols; i++) {
		char buf[400];
		int w;

		if (heat_blocked(p, i / l->cols, i % l->cols) || !isfinite(p->m->v[i]))
			continue;
		note_text(buf, sizeof(buf), p->m->v[i], d);
		w = text_px(buf, NOTE_FONT);
		widest = w > widest ? w : widest;
	}
	return widest <= CELL - 6 ? d : -1;
}

/* the lines under the colour bar, and the height of all under the grid */
static void legend_text(struct layout *l)
{
	const struct heat_scale *s = &l->s;
	int lines = 0;

	l->scale[0] = l->notes[0][0] = l->notes[1][0] = '\0';
	if (s->finite && !(s->hi > s->lo))
		snprintf(l->scale, sizeof(l->scale), "every value is %s", l->lo);
	else if (s->finite)
		snprintf(l->scale, sizeof(l->scale), "scale: %s to %s%s", l->lo, l->hi,
			 s->mode == HEAT_RANGE_AUTO ? ", the values shown (--range auto)" :
			 s->mode == HEAT_RANGE_FIXED ? " (--range)" : "");
	if (s->outside)
		snprintf(l->notes[lines++], sizeof(l->notes[0]), "%zu value%s outside the scale, "
			 "drawn at the nearer end", s->outside, s->outside == 1 ? "" : "s");
	if (s->later)
		snprintf(l->notes[lines++], sizeof(l->notes[0]), "the mask blocks %zu of these "
			 "cells later (at the masked step)", s->later);
	l->below = (s->finite ? LEGEND_H + 14 : 8) + 14 * lines + (s->blocked ? 22 : 0);
}

static int layout_panel(struct layout *l, const struct heat_panel *p, int precision)
{
	const size_t r = matrix_rows(p->m), c = matrix_cols(p->m);
	int right = 0, w;

	memset(l, 0, sizeof(*l));
	l->p = p;
	l->rows = r;
	l->cols = c;
	l->row_show = malloc((r ? r : 1) * sizeof(*l->row_show));
	l->col_show = malloc((c ? c : 1) * sizeof(*l->col_show));
	l->row_tip = malloc((r ? r : 1) * sizeof(*l->row_tip));
	l->col_tip = malloc((c ? c : 1) * sizeof(*l->col_tip));
	if (!l->row_show || !l->col_show || !l->row_tip || !l->col_tip)
		return -1;
	heat_scale_of(&l->s, p);
	format_number(l->lo, sizeof(l->lo), l->s.lo, precision);
	format_number(l->hi, sizeof(l->hi), l->s.hi, precision);
	for (size_t i = 0; i < r; i++) {
		const char *s = p->row_labels ? p->row_labels[i] : NULL;

		heat_label(l->row_show[i], sizeof(l->row_show[i]), s, i, SHOW_COLS);
		heat_label(l->row_tip[i], sizeof(l->row_tip[i]), s, i, TIP_COLS);
		w = text_px(l->row_show[i], FONT);
		l->label_w = w > l->label_w ? w : l->label_w;
	}
	l->label_w += 8;
	for (size_t j = 0; j < c; j++) {
		const char *s = p->col_labels ? p->col_labels[j] : NULL;

		heat_label(l->col_show[j], sizeof(l->col_show[j]), s, j, SHOW_COLS);
		heat_label(l->col_tip[j], sizeof(l->col_tip[j]), s, j, TIP_COLS);
		if (text_px(l->col_show[j], FONT) > CELL - 4)
			l->rotate = 1;
	}
	l->decimals = note_decimals(l, precision);
	/* how high the column labels reach, and how far right of the grid */
	l->top = FONT + 6;
	for (size_t j = 0; l->rotate && j < c; j++) {
		const int px = text_px(l->col_show[j], FONT);
		const int up = (int)ceil((px + FONT) * SIN45) + 6;
		const int out = (int)ceil((double)j * CELL + CELL / 2.0 + (px + FONT) * SIN45) -
				(int)(c * CELL);

		l->top = up > l->top ? up : l->top;
		right = out > right ? out : right;
	}
	/* the colour bar: as wide as the grid, and at least 160 px for its ticks */
	l->bar_w = (int)(c * CELL);
	l->bar_w = l->bar_w < 160 ? 160 : l->bar_w;
	w = (int)(c * CELL) + right;
	l->width = l->label_w + (w > l->bar_w ? w : l->bar_w);
	legend_text(l);
	for (int k = -1; k < 2; k++) {
		w = l->label_w + text_px(k < 0 ? l->scale : l->notes[k], 11);
		l->width = w > l->width ? w : l->width;
	}
	w = text_px(p->title ? p->title : "", TITLE_FONT + 1); /* bold */
	l->width = w > l->width ? w : l->width;
	w = text_px(CAPTION, 11);
	l->width = w > l->width ? w : l->width;
	return 0;
}

/* the panel's cells, one <rect> each, at (0, 0) */
static void put_cells(FILE *fp, const struct layout *l, int precision)
{
	const struct heat_panel *p = l->p;

	fputs("<g stroke=\"#fff\">\n", fp);
	for (size_t i = 0; i < l->rows; i++)
		for (size_t j = 0; j < l->cols; j++) {
			const double v = p->m->v[i * l->cols + j];
			const int blocked = heat_blocked(p, i, j);
			char num[64];

			fprintf(fp, "<rect x=\"%zu\" y=\"%zu\" width=\"%d\" height=\"%d\" fill=\"",
				j * CELL, i * CELL, CELL, CELL);
			if (blocked) {
				fputs("url(#masked)", fp);
			} else if (isnan(v)) {
				fputs("#fff", fp);
			} else {
				unsigned char rgb[3];

				heat_rgb(rgb, heat_position(&l->s, v));
				put_rgb(fp, rgb);
			}
			fputs("\"><title>", fp);
			put_xml(fp, l->row_tip[i]);
			fputs(" → ", fp);
			put_xml(fp, l->col_tip[j]);
			format_number(num, sizeof(num), v, precision);
			/* a blocked cell's softmax is 0 and its masked score -inf: neither says more */
			if (blocked && (isinf(v) || (p->step && !strcmp(p->step, "softmax"))))
				fputs(": masked", fp);
			else if (blocked)
				fprintf(fp, ": %s, masked", num);
			else if (p->later_mask && p->later_mask->v[i * l->cols + j] == -INFINITY &&
				 matrix_size(p->later_mask) == matrix_size(p->m))
				fprintf(fp, ": %s, masked later", num);
			else
				fprintf(fp, ": %s", num);
			fputs("</title></rect>\n", fp);
		}
	fputs("</g>\n", fp);
	if (l->decimals < 0)
		return;
	/* the values, light on the dark colours and dark on the light ones; the
	 * pointer goes through them to the cell, for its tooltip */
	for (int light = 1; light >= 0; light--) {
		fprintf(fp, "<g fill=\"%s\" font-size=\"%d\" text-anchor=\"middle\" "
			"pointer-events=\"none\">\n", light ? "#fff" : "#222", NOTE_FONT);
		for (size_t i = 0; i < l->rows; i++)
			for (size_t j = 0; j < l->cols; j++) {
				const double v = p->m->v[i * l->cols + j];
				unsigned char rgb[3];
				char num[400];

				if (heat_blocked(p, i, j) || !isfinite(v))
					continue;
				heat_rgb(rgb, heat_position(&l->s, v));
				/* luma: the yellows and greens want dark text */
				if ((0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] < 128) != light)
					continue;
				note_text(num, sizeof(num), v, l->decimals);
				/* "<0.01" is markup: escaped */
				fprintf(fp, "<text x=\"%zu\" y=\"%zu\">", j * CELL + CELL / 2,
					i * CELL + CELL / 2 + NOTE_FONT * 7 / 20);
				put_xml(fp, num);
				fputs("</text>\n", fp);
			}
		fputs("</g>\n", fp);
	}
}

/*
 * The colour bar's ticks, from (gx, y) down: round values (heat_ticks),
 * each written under its mark unless it would run into the one before.
 */
static void put_ticks(FILE *fp, const struct layout *l, int gx, int y, int precision)
{
	/* about one tick every 30 px, 2 to 11 of them */
	const int want = l->bar_w / 30 < 2 ? 2 : l->bar_w / 30 > 11 ? 11 : l->bar_w / 30;
	double tick[11];
	const size_t n = heat_ticks(tick, (size_t)want, l->s.lo, l->s.hi);
	int right = -1000000; /* where the last value written ends */

	fputs("<path d=\"", fp);
	for (size_t k = 0; k < n; k++)
		fprintf(fp, "M%.1f %dv%d", gx + l->bar_w * heat_position(&l->s, tick[k]), y, TICK);
	fputs("\" stroke=\"#333\"/>\n<g fill=\"#333\" font-size=\"10\" text-anchor=\"middle\">\n", fp);
	for (size_t k = 0; k < n; k++) {
		char num[64];
		const double x = gx + l->bar_w * heat_position(&l->s, tick[k]);
		int w;

		format_number(num, sizeof(num), tick[k], precision);
		w = text_px(num, 10);
		if (x - w / 2.0 < right + 6)
			continue;
		fprintf(fp, "<text x=\"%.1f\" y=\"%d\">%s</text>\n", x, y + TICK + 11, num);
		right = (int)ceil(x + w / 2.0);
	}
	fputs("</g>\n", fp);
}

/* a panel, its title at y0, its grid's top left corner at (x + label_w, y) */
static void put_panel(FILE *fp, const struct layout *l, int x, int y0, int y, int precision)
{
	const int gx = x + l->label_w, gh = (int)(l->rows * CELL);
	const int bar_y = y + gh + 14;

	fprintf(fp, "<text x=\"%d\" y=\"%d\" font-size=\"%d\" font-weight=\"bold\">", x,
		y0 + TITLE_FONT, TITLE_FONT);
	put_xml(fp, l->p->title ? l->p->title : "");
	fputs("</text>\n", fp);
	fprintf(fp, "<text x=\"%d\" y=\"%d\" fill=\"#666\" font-size=\"11\">%s</text>\n", x,
		y0 + TITLE_FONT + CAPTION_LINE, CAPTION);

	/* row labels, right-aligned against the grid; column labels over it */
	fprintf(fp, "<g fill=\"#333\" text-anchor=\"end\">\n");
	for (size_t i = 0; i < l->rows; i++) {
		fprintf(fp, "<text x=\"%d\" y=\"%zu\">", gx - 6, y + i * CELL + CELL / 2 + FONT * 4 / 10);
		put_xml(fp, l->row_show[i]);
		fputs("</text>\n", fp);
	}
	fputs("</g>\n", fp);
	fprintf(fp, "<g fill=\"#333\" text-anchor=\"%s\">\n", l->rotate ? "start" : "middle");
	for (size_t j = 0; j < l->cols; j++) {
		const size_t cx = gx + j * CELL + CELL / 2;

		if (l->rotate)
			fprintf(fp, "<text transform=\"translate(%zu,%d) rotate(-45)\">", cx + FONT / 3,
				y - 6);
		else
			fprintf(fp, "<text x=\"%zu\" y=\"%d\">", cx, y - 6);
		put_xml(fp, l->col_show[j]);
		fputs("</text>\n", fp);
	}
	fputs("</g>\n", fp);

	fprintf(fp, "<g transform=\"translate(%d,%d)\">\n", gx, y);
	put_cells(fp, l, precision);
	fputs("</g>\n", fp);

	/* the colour bar (one value everywhere: its colour alone), its ticks, the scale */
	if (l->s.finite) {
		const int flat = !(l->s.hi > l->s.lo);
		int y_text = bar_y + BAR_H + TICK + 12;

		fprintf(fp, "<path d=\"M%d %dh%dv%dh-%dz\" fill=\"", gx, bar_y, l->bar_w, BAR_H, l->bar_w);
		if (flat) {
			unsigned char rgb[3];

			heat_rgb(rgb, 0.5);
			put_rgb(fp, rgb);
		} else {
			fputs("url(#ramp)", fp);
		}
		fputs("\"/>\n", fp);
		if (!flat)
			put_ticks(fp, l, gx, bar_y + BAR_H, precision);
		else
			y_text = bar_y + BAR_H + 13;
		fprintf(fp, "<g fill=\"#333\" font-size=\"11\">\n<text x=\"%d\" y=\"%d\">", gx,
			y_text + (flat ? 0 : 14));
		put_xml(fp, l->scale);
		fputs("</text>\n", fp);
		for (int k = 0; k < 2 && l->notes[k][0]; k++) {
			fprintf(fp, "<text x=\"%d\" y=\"%d\">", gx, y_text + (flat ? 0 : 14) + 14 * (k + 1));
			put_xml(fp, l->notes[k]);
			fputs("</text>\n", fp);
		}
		fputs("</g>\n", fp);
	}
	if (l->s.blocked) {
		const int my = y + gh + l->below - 16;

		fprintf(fp, "<path d=\"M%d %dh12v12h-12z\" fill=\"url(#masked)\" stroke=\"#999\" "
			"stroke-width=\"0.5\"/>\n", gx, my);
		fprintf(fp, "<text x=\"%d\" y=\"%d\" fill=\"#333\" font-size=\"11\">masked</text>\n",
			gx + 18, my + 10);
	}
}

int heatmap_svg(FILE *fp, const struct heat_panel *p, size_t n, int precision)
{
	struct layout *l = calloc(n ? n : 1, sizeof(*l));
	const size_t n_rows = n ? (n + PER_ROW - 1) / PER_ROW : 0;
	int *row_top = calloc(n_rows ? n_rows : 1, sizeof(*row_top)); /* each row's title line, y */
	int *grid_top = calloc(n_rows ? n_rows : 1, sizeof(*grid_top)); /* and its grids' top */
	int width = 2 * PAD, height = PAD, rc = 0;

	if (!l || !row_top || !grid_top) {
		rc = error("out of memory");
		goto done;
	}
	for (size_t k = 0; k < n; k++)
		if (layout_panel(&l[k], &p[k], precision)) {
			rc = error("out of memory");
			goto done;
		}
	/* rows of PER_ROW panels: each as high as its highest labels and grid */
	for (size_t r = 0; r < n_rows; r++) {
		int top = 0, bottom = 0, w = PAD;

		for (size_t k = r * PER_ROW; k < n && k < (r + 1) * PER_ROW; k++) {
			const int below = (int)(l[k].rows * CELL) + l[k].below;

			top = l[k].top > top ? l[k].top : top;
			bottom = below > bottom ? below : bottom;
			w += l[k].width + (k + 1 < n && k + 1 < (r + 1) * PER_ROW ? GAP : PAD);
		}
		width = w > width ? w : width;
		row_top[r] = height + (r ? ROW_GAP : 0);
		grid_top[r] = row_top[r] + TITLE_FONT + CAPTION_LINE + 8 + top;
		height = grid_top[r] + bottom;
	}
	height += PAD;

	fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", fp);
	fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"%d\">\n",
		width, height, width, height, FONT);
	fprintf(fp, "<title>attention heatmap: %s</title>\n", n && p[0].step ? p[0].step : "");
	fputs("<defs>\n<linearGradient id=\"ramp\">\n", fp);
	for (int a = 0; a < HEAT_ANCHORS; a++) {
		fprintf(fp, "<stop offset=\"%g\" stop-color=\"", (double)a / (HEAT_ANCHORS - 1));
		put_rgb(fp, heat_anchor[a]);
		fputs("\"/>\n", fp);
	}
	fputs("</linearGradient>\n"
	      "<pattern id=\"masked\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
	      "patternTransform=\"rotate(45)\">\n"
	      "<path d=\"M0 0h6v6h-6z\" fill=\"#ececec\"/>\n"
	      "<path d=\"M1.5 0v6\" stroke=\"#b8b8b8\" stroke-width=\"1.5\"/>\n"
	      "</pattern>\n</defs>\n", fp);
	fprintf(fp, "<path d=\"M0 0H%dV%dH0z\" fill=\"#fff\"/>\n", width, height);
	for (size_t r = 0; r < n_rows; r++) {
		int x = PAD;

		for (size_t k = r * PER_ROW; k < n && k < (r + 1) * PER_ROW; k++) {
			put_panel(fp, &l[k], x, row_top[r], grid_top[r], precision);
			x += l[k].width + GAP;
		}
	}
	fputs("</svg>\n", fp);
	rc = 0; /* a write error is fp's to report (ferror), with its name */
done:
	for (size_t k = 0; l && k < n; k++)
		layout_free(&l[k]);
	free(l);
	free(row_top);
	free(grid_top);
	return rc;
}

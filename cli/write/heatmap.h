/*
 * heatmap.h: attention drawn rather than printed: each head's weights (or
 * another (n_q, n_kv) step) as coloured cells, in the terminal or as SVG.
 */
#ifndef MHA_CLI_HEATMAP_H
#define MHA_CLI_HEATMAP_H

#include <stdio.h>

#include "util/matrix.h"

/*
 * --range: the values a heatmap's colours span.  One struct for every
 * picture mha draws (the terminal's, the SVG's, the HTML page's): the
 * option is parsed once into struct emit's range, and each panel points
 * to it.
 */
enum heat_range_mode {
	HEAT_RANGE_DEFAULT, /* no --range: softmax 0 to 1; another step its panel's lowest to highest */
	HEAT_RANGE_AUTO,    /* --range auto: each panel's lowest to highest value shown */
	HEAT_RANGE_FIXED,   /* --range MIN,MAX: lo to hi; values outside are drawn at the ends */
};

struct heat_range {
	enum heat_range_mode mode;
	double lo, hi;      /* HEAT_RANGE_FIXED: finite, lo < hi */
};

/* --range's argument ("auto" or "MIN,MAX") into r: 0, or -1 (nothing said:
 * the caller makes the usage error) */
int heat_range_parse(struct heat_range *r, const char *arg);

/* One panel: a head's (rows, cols) matrix, titled, its rows and columns labelled. */
struct heat_panel {
	const char *title;               /* "head 1: softmax(masked), row by row" */
	const matrix *m;                 /* (rows, cols), rank 2: the values drawn */
	const matrix *mask;              /* (rows, cols) what was added to the scores (0,
					    -inf: blocked), or NULL: blocked cells are drawn
					    apart from the rest */
	const char *const *row_labels;   /* rows (queries) labels, or NULL: 1, 2, … */
	const char *const *col_labels;   /* columns (keys) labels, or NULL */
	const char *step;                /* "softmax", "scores", …: what the values are */
	const struct heat_range *range;  /* --range, or NULL: the default */
	const matrix *later_mask;        /* a step before the mask (scores, scaled,
					    softcapped): the mask added later, for a
					    note of the cells it will block; or NULL */
};

enum heat_color { HEAT_PLAIN, HEAT_256, HEAT_TRUECOLOR };

/* How the terminal draws. */
struct heat_look {
	enum heat_color color;
	int precision;    /* the legend's numbers */
	size_t width;     /* the columns to fit (a terminal's width, or COLUMNS), or 0:
			     no limit, every key a cell and the panels one under another */
	int whole;        /* --full: every key its own cell, past width too */
};

/*
 * Panels in the terminal, one under the other or, when two or more fit
 * look->width, side by side (row by row, 4 columns apart, each panel's key
 * and notes wrapped to its width).  A panel whose grid is wider than the
 * width has its keys pooled k to a cell, k the fewest that fit: each cell
 * the largest value of its block of adjacent keys that is not blocked
 * (masked only when all are), the columns numbered by each block's first
 * key, a line under the legend saying so.  Rows are never pooled.  0, or
 * -1 when out of memory (reported); a write error is left in ferror(fp)
 * for the caller, who knows the file's name, to report.
 */
int heatmap_terminal(FILE *fp, const struct heat_panel *p, size_t n, const struct heat_look *look);

/* One standalone SVG picture, the panels side by side in rows of at most
 * four; returns as heatmap_terminal(). */
int heatmap_svg(FILE *fp, const struct heat_panel *p, size_t n, int precision);

/*
 * heat.c's, shared by heatmap.c and svg.c (not for other callers): the
 * colour ramp, a panel's scale, which cells are blocked, and labels cut to
 * fit.
 */

/* The values a panel's colours span (its range: struct heat_range):
 * softmax is [0, 1]; any other step, or --range auto, the lowest and
 * highest finite value of the cells not blocked; --range MIN,MAX those. */
struct heat_scale {
	double lo, hi;    /* lo == hi: every cell drawn in the middle colour */
	size_t blocked;   /* cells blocked (mask -inf, or a value of -inf) */
	size_t finite;    /* cells drawn on the ramp: not blocked, a finite value */
	size_t outside;   /* of those, below lo or above hi (--range MIN,MAX): drawn at the ends */
	size_t later;     /* cells the mask blocks at a later step (later_mask) */
	enum heat_range_mode mode; /* where lo and hi came from */
};

void heat_scale_of(struct heat_scale *s, const struct heat_panel *p);
/* cell (i, j) is blocked: the mask holds -inf there, or its value is -inf */
int heat_blocked(const struct heat_panel *p, size_t i, size_t j);
/* where v falls on the scale, 0 to 1 (clamped; the middle when lo == hi) */
double heat_position(const struct heat_scale *s, double v);
/* the viridis-like ramp: t in [0, 1] to an sRGB colour */
void heat_rgb(unsigned char rgb[3], double t);
/*
 * Round values for a colour bar's ticks: multiples of 1, 2 or 5 times a
 * power of ten between lo and hi, at most max of them (max >= 2), into t.
 * How many; 0 when lo == hi.
 */
size_t heat_ticks(double *t, size_t max, double lo, double hi);
/* the anchors heat_rgb() interpolates between, evenly spaced on [0, 1] */
#define HEAT_ANCHORS 9
extern const unsigned char heat_anchor[HEAT_ANCHORS][3];

/* A label as drawn: s as text.h shows it (control characters and bytes
 * that are not UTF-8 escaped, so it can neither move the cursor nor colour
 * the terminal, and is always valid XML text), or the 1-based number n + 1
 * when s is NULL, cut to max_cols columns with a final "…" when longer.
 * buf holds at least 4 * max_cols + 8 bytes.  The columns. */
size_t heat_label(char *buf, size_t size, const char *s, size_t n, size_t max_cols);

#endif

/*
 * heat.c: what every picture of attention shares (heatmap.h): the colour
 * ramp, a panel's scale and --range, which cells are blocked, round ticks,
 * and labels cut to fit (made safe by text.h).  The terminal's drawing is
 * heatmap.c's, the SVG's svg.c's; this file draws nothing.
 */
#include "write/heatmap.h"

#include "base/cli.h"
#include "util/text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int heat_range_parse(struct heat_range *r, const char *arg)
{
	const char *comma = strchr(arg, ',');
	char lo[64];

	if (!strcmp(arg, "auto")) {
		r->mode = HEAT_RANGE_AUTO;
		return 0;
	}
	if (!comma || (size_t)(comma - arg) >= sizeof(lo))
		return -1;
	memcpy(lo, arg, (size_t)(comma - arg));
	lo[comma - arg] = '\0';
	if (!opt_number(lo, &r->lo) || !opt_number(comma + 1, &r->hi) || !(r->lo < r->hi))
		return -1;
	r->mode = HEAT_RANGE_FIXED;
	return 0;
}

void heat_scale_of(struct heat_scale *s, const struct heat_panel *p)
{
	const size_t rows = matrix_rows(p->m), cols = matrix_cols(p->m);
	const enum heat_range_mode mode = p->range ? p->range->mode : HEAT_RANGE_DEFAULT;
	const int softmax = p->step && !strcmp(p->step, "softmax");
	const int fixed = mode == HEAT_RANGE_FIXED || (mode == HEAT_RANGE_DEFAULT && softmax);
	const matrix *lm = p->later_mask;

	s->mode = mode;
	s->lo = mode == HEAT_RANGE_FIXED ? p->range->lo : fixed ? 0 : INFINITY;
	s->hi = mode == HEAT_RANGE_FIXED ? p->range->hi : fixed ? 1 : -INFINITY;
	s->blocked = s->finite = s->outside = s->later = 0;
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++) {
			const double v = p->m->v[i * cols + j];

			if (heat_blocked(p, i, j)) {
				s->blocked++;
			} else if (isfinite(v)) {
				s->finite++;
				if (fixed && (v < s->lo || v > s->hi))
					s->outside++;
				if (!fixed && v < s->lo)
					s->lo = v;
				if (!fixed && v > s->hi)
					s->hi = v;
			}
		}
	/* the cells a mask of the same shape will block, at the masked step */
	if (lm && matrix_rows(lm) == rows && matrix_cols(lm) == cols &&
	    matrix_size(lm) == matrix_size(p->m))
		for (size_t i = 0; i < rows * cols; i++)
			s->later += isinf(lm->v[i]) && lm->v[i] < 0;
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

size_t heat_ticks(double *t, size_t max, double lo, double hi)
{
	static const int mant[3] = { 1, 2, 5 };
	const double span = hi - lo;
	double step = 0;
	long long first = 0, last = -1;
	size_t n = 0;

	/* ticks only where the round steps can be counted in a long long:
	 * always, but for a span far below the values' own size */
	if (!(span > 0) || !isfinite(span) || max < 2 || fmax(fabs(lo), fabs(hi)) / span > 1e15)
		return 0;
	/* the smallest round step that leaves at most max ticks, multiples of
	 * it counted as whole numbers (0 is exactly 0, not 1e-17) */
	for (int e = (int)floor(log10(span / (double)max)) - 1; !(step > 0); e++)
		for (int k = 0; k < 3; k++) {
			step = mant[k] * pow(10, e);
			first = (long long)ceil(lo / step - 1e-9);
			last = (long long)floor(hi / step + 1e-9);
			if (last - first + 1 <= (long long)max)
				break;
			step = 0;
		}
	for (long long k = first; k <= last && n < max; k++)
		t[n++] = (double)k * step;
	return n;
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

/*
 * pool.c: a heatmap's overview, blocks of cells as one (pool.h).
 */
#include "write/pool.h"
#include "base/cli.h"
#include "write/heatmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t pool_block(size_t k, size_t rows, size_t cols)
{
	const size_t side = rows > cols ? rows : cols;

	if (k)
		return k;
	return side > POOL_SIDE ? (side + POOL_SIDE - 1) / POOL_SIDE : 1;
}

int pool_panel_where(matrix *out, uint32_t *at, uint32_t *blocked, const matrix *m,
		     const matrix *mask, size_t k, enum pool_rule rule)
{
	const size_t rows = m->dim[0], cols = m->dim[1];
	const size_t pr = (rows + k - 1) / k, pc = (cols + k - 1) / k;

	if (matrix_alloc(out, 2, pr, pc, 1))
		return -1;
	for (size_t bi = 0; bi < pr; bi++)
		for (size_t bj = 0; bj < pc; bj++) {
			double best = -INFINITY, sum = 0;
			size_t seen = 0, where = 0, off = 0;

			for (size_t i = bi * k; i < rows && i < (bi + 1) * k; i++)
				for (size_t j = bj * k; j < cols && j < (bj + 1) * k; j++) {
					const double v = m->v[i * cols + j];

					off = (i - bi * k) * k + (j - bj * k);
					/* a blocked cell is not part of the block's value */
					if (mask && mask->v[i * cols + j] == -INFINITY)
						continue;
					/* the first of equals; a NaN, once met, stays */
					if (!seen || (!isnan(best) && (v > best || isnan(v)))) {
						best = v;
						where = off;
					}
					sum += v;
					seen++;
				}
			out->v[bi * pc + bj] = !seen ? -INFINITY : rule == POOL_MEAN ? sum / (double)seen
										 : best;
			if (at)
				at[bi * pc + bj] = (uint32_t)where;
			if (blocked) {
				const size_t r = (bi + 1) * k < rows ? k : rows - bi * k;
				const size_t c = (bj + 1) * k < cols ? k : cols - bj * k;

				blocked[bi * pc + bj] = (uint32_t)(r * c - seen);
			}
		}
	return 0;
}

int pool_panel(matrix *out, matrix *mask_out, const matrix *m, const matrix *mask, size_t k,
	       enum pool_rule rule)
{
	const size_t rows = m->dim[0], cols = m->dim[1];
	const size_t pr = (rows + k - 1) / k, pc = (cols + k - 1) / k;
	uint32_t *blocked = mask ? calloc(pr * pc, sizeof(*blocked)) : NULL;

	if ((mask && !blocked) || pool_panel_where(out, NULL, blocked, m, mask, k, rule) ||
	    (mask && matrix_alloc(mask_out, 2, pr, pc, 1))) {
		matrix_free(out);
		free(blocked);
		return mask && !blocked ? error("out of memory") : -1;
	}
	for (size_t b = 0; mask && b < pr * pc; b++) {
		const size_t bi = b / pc, bj = b % pc;
		const size_t r = (bi + 1) * k < rows ? k : rows - bi * k;
		const size_t c = (bj + 1) * k < cols ? k : cols - bj * k;

		mask_out->v[b] = blocked[b] == r * c ? -INFINITY : 0;
	}
	free(blocked);
	return 0;
}

char **pool_labels(const char *const *labels, size_t n, size_t k)
{
	const size_t blocks = (n + k - 1) / k;
	char **out = calloc(blocks + 1, sizeof(*out));

	for (size_t b = 0; out && b < blocks; b++) {
		const size_t first = b * k, last = (b + 1) * k < n ? (b + 1) * k - 1 : n - 1;
		char buf[200];

		if (labels && first == last)
			snprintf(buf, sizeof(buf), "%.190s", labels[first]);
		else if (labels)
			snprintf(buf, sizeof(buf), "%.90s–%.90s", labels[first], labels[last]);
		else if (first == last)
			snprintf(buf, sizeof(buf), "%zu", first + 1);
		else
			snprintf(buf, sizeof(buf), "%zu-%zu", first + 1, last + 1);
		if (!(out[b] = strdup(buf))) {
			pool_labels_free(out);
			return NULL;
		}
	}
	return out;
}

void pool_labels_free(char **l)
{
	for (size_t b = 0; l && l[b]; b++)
		free(l[b]);
	free(l);
}

/*
 * (pool.h) */
void pool_panels_free(struct heat_panel *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		pool_labels_free((char **)p[i].row_labels);
		pool_labels_free((char **)p[i].col_labels);
		matrix_free((matrix *)p[i].m);
		free((matrix *)p[i].m);
		if (p[i].mask) {
			matrix_free((matrix *)p[i].mask);
			free((matrix *)p[i].mask);
		}
		free((char *)p[i].title);
	}
}

int pool_panels(struct heat_panel *p, size_t n, enum pool_rule rule, size_t k0)
{
	for (size_t i = 0; i < n; i++) {
		const size_t rows = p[i].m->dim[0], cols = p[i].m->dim[1];
		const size_t k = pool_block(k0, rows, cols);
		matrix *m = calloc(1, sizeof(*m)), *mk = p[i].mask ? calloc(1, sizeof(*mk)) : NULL;
		char *title = malloc(strlen(p[i].title) + 64);
		char **rl = pool_labels(p[i].row_labels, rows, k);
		char **cl = pool_labels(p[i].col_labels, cols, k);

		const int ok = m && (!p[i].mask || mk) && title && rl && cl;

		if (!ok || pool_panel(m, mk, p[i].m, p[i].mask, k, rule)) {
			free(m);
			free(mk);
			free(title);
			pool_labels_free(rl);
			pool_labels_free(cl);
			if (i)
				pool_panels_free(p, i);
			return ok ? -1 : error("out of memory"); /* pool_panel said why */
		}
		p[i].row_labels = (const char *const *)rl;
		p[i].col_labels = (const char *const *)cl;
		sprintf(title, "%s, %s of %zux%zu blocks", p[i].title,
			rule == POOL_MEAN ? "mean" : "max", k, k);
		p[i].m = m;
		p[i].mask = mk;
		p[i].later_mask = NULL;
		p[i].title = title;
	}
	return 0;
}

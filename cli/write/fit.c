/*
 * fit.c: outputs people read cut to --rows and --cols, and refused past
 * their size without --force (fit.h).
 */
#include "write/fit.h"
#include "write/pool.h"
#include "util/budget.h"
#include "base/cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the range an axis keeps: [r[0], r[1]) of n, all of it for features */
static void range_of(const struct fit_ask *e, enum step_axis a, size_t n, size_t r[2])
{
	const size_t *want = a == AXIS_QUERY ? e->rows : a == AXIS_KEY ? e->cols : NULL;

	r[0] = 0;
	r[1] = n;
	/* an axis of another length (a step of one sequence's keys) stays whole */
	if (want && want[1] <= n) {
		r[0] = want[0];
		r[1] = want[1];
	}
}

/* m's rows r and columns c into out (each plane of a stacked one); 0 or -1 said */
static int cut_matrix(matrix *out, const matrix *m, const size_t r[2], const size_t c[2])
{
	const size_t planes = m->rank == 3 ? m->dim[0] : 1;
	const size_t rows = m->rank == 1 ? 1 : m->dim[m->rank - 2], cols = m->dim[m->rank - 1];
	const size_t nr = r[1] - r[0], nc = c[1] - c[0];
	size_t dims[4] = { 0 };
	int rc;

	if (m->rank == 1) {
		dims[0] = nc;
	} else {
		dims[m->rank - 2] = nr;
		dims[m->rank - 1] = nc;
		if (m->rank == 3)
			dims[0] = planes;
	}
	rc = m->v ? matrix_alloc_dims(out, m->rank, dims) : matrix_alloc_f32(out, m->rank, dims);
	if (rc)
		return -1;
	out->is_f32 = m->is_f32;
	out->is_bool = m->is_bool;
	out->from_f32 = m->from_f32;
	out->from_type = m->from_type;
	for (size_t p = 0; p < planes; p++)
		for (size_t i = 0; i < nr; i++) {
			const size_t from = (p * rows + r[0] + i) * cols + c[0], to = (p * nr + i) * nc;

			if (m->v)
				memcpy(out->v + to, m->v + from, nc * sizeof(double));
			else
				memcpy(out->f + to, m->f + from, nc * sizeof(float));
		}
	return 0;
}

/* ", queries 5-10 of 2048" (", query 5 of 2048") for an axis cut: what is "quer" or "key" */
static void say_cut(char *title, size_t size, const char *what, const size_t r[2], size_t n)
{
	const size_t len = strlen(title);
	const int key = !strcmp(what, "key");

	if (r[0] == 0 && r[1] == n)
		return;
	if (r[1] - r[0] == 1)
		snprintf(title + len, size - len, ", %s %zu of %zu", key ? "key" : "query", r[1], n);
	else
		snprintf(title + len, size - len, ", %s %zu-%zu of %zu", key ? "keys" : "queries",
			 r[0] + 1, r[1], n);
}

/* labels [r0, r1) of l, or the positions ("5", "6", …) kept in f's axis a when l is NULL */
static char **labels_cut(struct fit *f, int a, char **l, const size_t r[2])
{
	if (l)
		return l + r[0];
	f->numbers[a] = calloc(r[1] - r[0], sizeof(char *));
	if (!f->numbers[a])
		return NULL;
	for (size_t i = r[0]; i < r[1]; i++) {
		char buf[24];

		snprintf(buf, sizeof(buf), "%zu", i + 1);
		if (!(f->numbers[a][i - r[0]] = strdup(buf)))
			return NULL;
		f->n_numbers[a] = i - r[0] + 1;
	}
	return f->numbers[a];
}

static int cut_all(struct fit *f, const struct fit_ask *e, const struct step_items *lists,
		   size_t batch, const struct labels *l)
{
	const size_t B = batch ? batch : 1;
	size_t n = 0, k = 0;

	for (size_t b = 0; b < B; b++)
		n += lists[b].n;
	f->cut = calloc(B, sizeof(*f->cut));
	f->mats = calloc(n ? n : 1, sizeof(*f->mats));
	if (!f->cut || !f->mats)
		return error("out of memory");
	f->n_cut = B;
	for (size_t b = 0; b < B; b++) {
		struct step_items *c = &f->cut[b];

		c->v = calloc(lists[b].n ? lists[b].n : 1, sizeof(*c->v));
		if (!c->v)
			return error("out of memory");
		c->n = c->cap = lists[b].n;
		for (size_t i = 0; i < lists[b].n; i++) {
			const struct step_item *it = &lists[b].v[i];
			const matrix *m = it->m;
			const size_t rows = m->rank == 1 ? 1 : m->dim[m->rank - 2];
			const size_t cols = m->dim[m->rank - 1];
			size_t r[2], cc[2];

			range_of(e, m->rank == 1 ? AXIS_FEATURE : it->rows, rows, r);
			range_of(e, it->cols, cols, cc);
			c->v[i] = *it;
			if (cut_matrix(&f->mats[k], m, r, cc))
				return -1;
			c->v[i].m = &f->mats[k++];
			f->n_mats = k;
			say_cut(c->v[i].title, sizeof(c->v[i].title),
				it->rows == AXIS_KEY ? "key" : "quer", r, rows);
			if (it->cols != it->rows)
				say_cut(c->v[i].title, sizeof(c->v[i].title),
					it->cols == AXIS_KEY ? "key" : "quer", cc, cols);
		}
	}
	f->own = (struct labels){ 0 };
	f->own.n_query = e->rows[1] - e->rows[0];
	f->own.n_key = e->cols[1] - e->cols[0];
	/* labels for a cut axis: its own, or the positions it kept */
	if ((l->query || e->rows[1] - e->rows[0] < e->n_q) &&
	    !(f->own.query = labels_cut(f, 0, l->query, e->rows)))
		return error("out of memory");
	if ((l->key || e->cols[1] - e->cols[0] < e->n_kv) &&
	    !(f->own.key = labels_cut(f, 1, l->key, e->cols)))
		return error("out of memory");
	f->lists = f->cut;
	f->labels = &f->own;
	return 0;
}

/* entries of m */
static double entries(const matrix *m)
{
	return (double)matrix_size(m);
}

/* the entries text shows of m: past 1000, the first and last 3 of each
 * dimension longer than 6 (write.h, as NumPy prints), each plane of a stack */
static double shown(const matrix *m, int full)
{
	const size_t cols = m->dim[m->rank - 1], rows = m->rank == 1 ? 1 : m->dim[m->rank - 2];
	const double planes = m->rank == 3 ? (double)m->dim[0] : 1;

	if (full || (double)rows * (double)cols <= 1000)
		return entries(m);
	return planes * (double)(rows > 6 ? 6 : rows) * (double)(cols > 6 ? 6 : cols);
}

/* the bytes the output would take, roughly (each writer's own per entry) */
static double estimate(const struct fit_out *e, const struct step_items *lists, size_t batch,
		       const struct labels *l, double *limit, const char **what, double *cells,
		       size_t *panels)
{
	const enum fit_kind kind = e->kind;
	double bytes = 0;

	*cells = 0;
	*panels = 0;
	for (size_t b = 0; b < (batch ? batch : 1); b++)
		for (size_t i = 0; i < lists[b].n; i++) {
			const struct step_item *it = &lists[b].v[i];
			const int drawn = it->head && it->step == e->heat_step &&
					  (!e->head || it->head == e->head);

			if (kind == FIT_PAGE) {
				break; /* its own */
			} else if (kind == FIT_EXPLAIN || e->format == FORMAT_TEXT ||
				   e->format == FORMAT_MARKDOWN) {
				if (it->copy_of < 0)
					bytes += (double)(e->precision + 6) * shown(it->m, e->full);
			} else if (drawn) {
				/* a terminal's width pools the keys, two columns a cell */
				const matrix *m = it->m;
				const size_t k = e->pool ? pool_block(e->pool_k, m->dim[0], m->dim[1]) : 1;
				const double cols = (double)((m->dim[m->rank - 1] + k - 1) / k);
				const double rows = (double)((m->dim[0] + k - 1) / k);
				const double fit = e->format == FORMAT_HEATMAP && e->width && !e->full &&
						   cols > (double)e->width / 2 ? (double)e->width / 2 : cols;

				*cells += rows * fit;
				++*panels;
			}
		}
	if (kind == FIT_PAGE) {
		*what = "page";
		*limit = FIT_PAGE_LIMIT;
		return e->page_size(e->page_ctx, lists, l);
	}
	if (kind == FIT_EXPLAIN || e->format == FORMAT_TEXT || e->format == FORMAT_MARKDOWN) {
		*what = kind == FIT_EXPLAIN ? "walk-through" : e->format == FORMAT_TEXT ? "text"
											: "Markdown";
		*limit = FIT_TEXT_LIMIT;
		return bytes;
	}
	if (e->format == FORMAT_SVG) {
		*what = "SVG";
		*limit = FIT_SVG_LIMIT;
		return 110 * *cells + 10e3; /* a cell: its rect, colour and tooltip */
	}
	if (e->format == FORMAT_HEATMAP) {
		*what = "heatmap";
		*limit = FIT_TEXT_LIMIT;
		return 21 * *cells; /* a cell: its colour's escape and two characters */
	}
	*limit = 0; /* never cut, never refused */
	return 0;
}

static int refuse(const struct fit_out *e, double bytes, double limit, const char *what,
		  double cells, size_t panels, size_t batch)
{
	char est[48], lim[48], ways[400] = "";
	const int picture = !strcmp(what, "SVG") || !strcmp(what, "heatmap") || !strcmp(what, "page");

	show_bytes(est, sizeof(est), bytes > 1e18 ? SIZE_MAX : (size_t)bytes);
	show_bytes(lim, sizeof(lim), (size_t)limit);
	/* the page keeps every key, unless it draws an overview (attn_refuse_cut) */
	if (!strcmp(what, "page") && !e->pool)
		snprintf(ways, sizeof(ways), "draw an overview (--pool max or --pool mean), keep "
			 "fewer queries (--rows FIRST:LAST)");
	else if (e->pool)
		snprintf(ways, sizeof(ways), "draw larger blocks (--pool %s:K), keep fewer queries "
			 "and keys (--rows FIRST:LAST, --cols FIRST:LAST)",
			 e->pool == POOL_MEAN ? "mean" : "max");
	else
		snprintf(ways, sizeof(ways), "%skeep fewer queries and keys (--rows FIRST:LAST, "
			 "--cols FIRST:LAST)", picture ? "draw an overview (--pool max or --pool "
			 "mean), " : "");
	if (picture && panels > (batch ? batch : 1) && !e->head)
		snprintf(ways + strlen(ways), sizeof(ways) - strlen(ways), ", draw one head (--head N)");
	if (!picture)
		snprintf(ways + strlen(ways), sizeof(ways) - strlen(ways), ", print fewer steps");
	if (batch)
		snprintf(ways + strlen(ways), sizeof(ways) - strlen(ways),
			 ", one sequence (--sequence N)");
	if (cells > 0)
		return error("the %s would be about %s (%.0f cells), past the %s mha writes "
			     "without --force: %s, or write it all with --force", what, est, cells,
			     lim, ways);
	return error("the %s would be about %s, past the %s mha writes without --force: %s, or "
		     "write it all with --force", what, est, lim, ways);
}

int fit_output(struct fit *f, const struct fit_ask *a, const struct fit_out *o,
	       const struct step_items *lists, size_t batch, const struct labels *l)
{
	double limit, cells, bytes;
	size_t panels;
	const char *what = "";

	memset(f, 0, sizeof(*f));
	f->lists = lists;
	f->labels = l;
	if (a->cut && cut_all(f, a, lists, batch, l)) {
		fit_free(f);
		return -1;
	}
	bytes = estimate(o, f->lists, batch, f->labels, &limit, &what, &cells, &panels);
	if (limit > 0 && bytes > limit && !a->force) {
		refuse(o, bytes, limit, what, cells, panels, batch);
		fit_free(f);
		return -1;
	}
	return 0;
}

void fit_free(struct fit *f)
{
	for (size_t i = 0; i < f->n_mats; i++)
		matrix_free(&f->mats[i]);
	free(f->mats);
	for (size_t b = 0; b < f->n_cut; b++)
		free(f->cut[b].v);
	free(f->cut);
	for (int a = 0; a < 2; a++) {
		for (size_t i = 0; i < f->n_numbers[a]; i++)
			free(f->numbers[a][i]);
		free(f->numbers[a]);
	}
	memset(f, 0, sizeof(*f));
}

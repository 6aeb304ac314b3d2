/*
 * report.c: 'mha compare's report (compare.h): a table of the steps given,
 * or the same as JSON, and the diagnosis.
 */
#include "base/cli.h"
#include "base/number.h"
#include "base/text.h"
#include "cmd/compare.h"
#include "run/steps.h"
#include "write/write.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the report ---------------------------------------------------------- */

struct where {
	size_t head;      /* 1-based; 0: none */
	size_t row, col;  /* 1-based */
	const char *row_word, *col_word;  /* "query", "key", "row", "column" */
	const char *row_token, *col_token; /* or NULL */
};

static void locate(struct where *w, int id, const struct stat *st, const struct labels *l)
{
	const struct step *s = &steps[cmp_steps[id].step];
	const size_t plane = st->R * st->C;
	const size_t p = st->worst / plane, r = st->worst % plane / st->C, c = st->worst % st->C;

	memset(w, 0, sizeof(*w));
	w->head = st->P > 1 || cmp_steps[id].per_head ? p + 1 : 0;
	w->row = r + 1;
	w->col = c + 1;
	w->row_word = s->rows == AXIS_QUERY ? "query" : s->rows == AXIS_KEY ? "key" : "row";
	w->col_word = s->cols == AXIS_KEY ? "key" : "column";
	if (s->rows == AXIS_QUERY && l->query && r < l->n_query)
		w->row_token = l->query[r];
	if (s->rows == AXIS_KEY && l->key && r < l->n_key)
		w->row_token = l->key[r];
	if (s->cols == AXIS_KEY && l->key && c < l->n_key)
		w->col_token = l->key[c];
}

static void put_where(FILE *fp, const struct where *w)
{
	if (w->head)
		fprintf(fp, "head %zu, ", w->head);
	fprintf(fp, "%s %zu", w->row_word, w->row);
	if (w->row_token) {
		fputs(" \"", fp);
		text_put(fp, w->row_token);
		fputc('"', fp);
	}
	fprintf(fp, ", %s %zu", w->col_word, w->col);
	if (w->col_token) {
		fputs(" \"", fp);
		text_put(fp, w->col_token);
		fputc('"', fp);
	}
}

/* a number as %.3g, inf and nan spelled so */
static const char *g3(char *buf, size_t size, double v)
{
	snprintf(buf, size, "%.3g", v);
	return buf;
}

static void put_json_shape(FILE *fp, const matrix *m)
{
	fputc('[', fp);
	for (size_t i = 0; i < m->rank; i++)
		fprintf(fp, "%s%zu", i ? ", " : "", m->dim[i]);
	fputc(']', fp);
}

void report_text(FILE *fp, const struct report *r)
{
	char shape[64], mshape[64], b1[32], b2[32], b3[32];
	size_t given = 0, agree = 0, wshape = 5;

	for (int i = 0; i < C_COUNT; i++)
		if (r->st[i].given) {
			const size_t n = strlen(matrix_shape(&r->a->m[i], shape, sizeof(shape)));

			wshape = n > wshape ? n : wshape;
			given++;
			agree += r->st[i].pass;
		}
	fputs("mha compare: '", fp);
	text_put(fp, path_shown(r->against));
	fprintf(fp, "' against mha's float64 steps: rtol %g, atol %g%s\n\n", r->tol->rtol,
		r->tol->atol, r->f32 ? " (float32's; ULPs of float32)" : "");
	if (r->sequence)
		fprintf(fp, "sequence %zu of the batch\n\n", r->sequence);
	fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  %s\n", "step", "result", (int)wshape, "shape",
		"max |diff|", "max rel", "max ULP", "where (the largest |diff|)");
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		struct where w;

		if (!st->given)
			continue;
		matrix_shape(&r->a->m[i], shape, sizeof(shape));
		if (!st->shape_ok) {
			fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  mha's is %s\n", cmp_name(i),
				"SHAPE", (int)wshape, shape, "-", "-", "-",
				matrix_shape(&r->mine->m[i], mshape, sizeof(mshape)));
			continue;
		}
		fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  ", cmp_name(i),
			st->pass ? "ok" : "DIFFERS", (int)wshape, shape, g3(b1, sizeof(b1), st->max_abs),
			g3(b2, sizeof(b2), st->max_rel), g3(b3, sizeof(b3), st->max_ulp));
		if (st->max_abs > 0 || !st->pass) {
			locate(&w, i, st, r->l);
			put_where(fp, &w);
			fprintf(fp, ": %s, mha's %s", g3(b1, sizeof(b1), st->worst_theirs),
				g3(b2, sizeof(b2), st->worst_mha));
		} else {
			fputs("identical", fp);
		}
		fputc('\n', fp);
	}
	fputc('\n', fp);
	if (r->first < 0) {
		fprintf(fp, "every step given agrees (%zu of %zu)\n", agree, given);
		return;
	}
	{
		const struct stat *st = &r->st[r->first];

		fprintf(fp, "first difference: %s", cmp_name(r->first));
		if (!st->shape_ok) {
			fprintf(fp, ": theirs is %s, mha's %s\n",
				matrix_shape(&r->a->m[r->first], shape, sizeof(shape)),
				matrix_shape(&r->mine->m[r->first], mshape, sizeof(mshape)));
		} else {
			struct where w;

			locate(&w, r->first, st, r->l);
			fprintf(fp, " (%zu of %zu entries differ; the most at ", st->differing, st->entries);
			put_where(fp, &w);
			fprintf(fp, ": theirs %.17g, mha's %.17g)\n", st->worst_theirs, st->worst_mha);
		}
	}
	fputs("diagnosis: ", fp);
	if (!r->dg->found && r->first == C_X) {
		fputs("their X is not the X given (-x): the inputs differ, not the attention\n", fp);
		return;
	}
	if (!r->dg->found) {
		fprintf(fp, "none of the known mistakes reproduces %s (man mha lists them under "
			"COMPARE)\n", cmp_name(r->first));
		return;
	}
	text_put(fp, r->dg->message);
	fputc('\n', fp);
	if (!r->dg->later)
		fputs("           the steps given after it still differ: more than one mistake?\n", fp);
}

void report_json(FILE *fp, const struct report *r)
{
	int n = 0;

	fputs("{\n  \"against\": ", fp);
	text_put_json(fp, path_shown(r->against));
	fprintf(fp, ",\n  \"kind\": \"%s\",\n  \"dtype\": \"%s\",\n  \"rtol\": ", r->a->kind,
		r->f32 ? "f32" : "f64");
	json_number(fp, r->tol->rtol, 0);
	fputs(",\n  \"atol\": ", fp);
	json_number(fp, r->tol->atol, 0);
	if (r->sequence)
		fprintf(fp, ",\n  \"sequence\": %zu", r->sequence);
	else
		fputs(",\n  \"sequence\": null", fp);
	fprintf(fp, ",\n  \"agree\": %s,\n  \"first_difference\": ", r->first < 0 ? "true" : "false");
	if (r->first < 0)
		fputs("null", fp);
	else
		fprintf(fp, "\"%s\"", cmp_name(r->first));
	fputs(",\n  \"steps\": [", fp);
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		struct where w;

		if (!st->given)
			continue;
		fprintf(fp, "%s\n    {\"step\": \"%s\", \"agree\": %s, \"shape\": ", n++ ? "," : "",
			cmp_name(i), st->pass ? "true" : "false");
		put_json_shape(fp, &r->a->m[i]);
		fputs(", \"mha_shape\": ", fp);
		put_json_shape(fp, &r->mine->m[i]);
		fprintf(fp, ", \"shape_agrees\": %s", st->shape_ok ? "true" : "false");
		if (!st->shape_ok) {
			fputs(", \"max_abs\": null, \"max_rel\": null, \"max_ulp\": null, \"differing\": "
			      "null, \"entries\": null, \"where\": null}", fp);
			continue;
		}
		fputs(", \"max_abs\": ", fp);
		json_number(fp, st->max_abs, 0);
		fputs(", \"max_rel\": ", fp);
		json_number(fp, st->max_rel, 0);
		fputs(", \"max_ulp\": ", fp);
		json_number(fp, st->max_ulp, 0);
		fprintf(fp, ", \"differing\": %zu, \"entries\": %zu, \"where\": ", st->differing, st->entries);
		if (st->max_abs == 0) {
			fputs("null}", fp); /* identical: no place stands out */
			continue;
		}
		locate(&w, i, st, r->l);
		if (w.head)
			fprintf(fp, "{\"head\": %zu", w.head);
		else
			fputs("{\"head\": null", fp);
		fprintf(fp, ", \"row\": %zu, \"col\": %zu, \"row_token\": ", w.row, w.col);
		if (w.row_token)
			text_put_json(fp, w.row_token);
		else
			fputs("null", fp);
		fputs(", \"col_token\": ", fp);
		if (w.col_token)
			text_put_json(fp, w.col_token);
		else
			fputs("null", fp);
		fputs(", \"theirs\": ", fp);
		json_number(fp, st->worst_theirs, 0);
		fputs(", \"mha\": ", fp);
		json_number(fp, st->worst_mha, 0);
		fputs("}}", fp);
	}
	fputs("\n  ],\n  \"diagnosis\": ", fp);
	if (r->first < 0 || !r->dg->found) {
		fputs("null\n}\n", fp);
		return;
	}
	fprintf(fp, "{\"mistake\": \"%s\", \"option\": ", r->dg->m.id);
	if (r->dg->m.option[0])
		text_put_json(fp, r->dg->m.option);
	else
		fputs("null", fp);
	fprintf(fp, ", \"step\": \"%s\", \"later_steps_match\": %s, \"message\": ",
		cmp_name(r->dg->step), r->dg->later ? "true" : "false");
	text_put_json(fp, r->dg->message);
	fputs("}\n}\n", fp);
}


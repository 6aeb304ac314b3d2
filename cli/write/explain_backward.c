/*
 * explain_backward.c: 'mha backward --explain' (emit.h): the backward pass
 * told step by step, each step's formula (grad_steps[]'s title) and what it
 * is (its says), its matrix, and with --cell Q,K dS[Q][K] worked by hand in
 * each head from P, dO, O and dP.
 */
#include "write/emit.h"

#include "util/number.h"
#include "base/outfile.h"
#include "util/text.h"
#include "load/problem.h"
#include "run/steps.h"
#include "write/write.h"

#include <stdio.h>
#include <string.h>

static const char *label(const struct labels *l, int query, size_t i, char *buf, size_t size)
{
	char *const *names = query ? l->query : l->key;

	if (names && names[i]) {
		char shown[100];

		text_shown(shown, sizeof(shown), names[i]);
		snprintf(buf, size, "%zu ('%s')", i + 1, shown);
	} else
		snprintf(buf, size, "%zu", i + 1);
	return buf;
}

/* dS[i][j] of head h worked by hand from P, dO, O and dP */
static void explain_cell(FILE *fp, const struct step_results *k, size_t h, size_t i, size_t j,
			 const struct labels *l, int precision)
{
	const matrix *P = &k->per_head[GS_P][h], *dO = &k->per_head[GS_DO][h];
	const matrix *O = &k->per_head[GS_O][h], *dP = &k->per_head[GS_DP][h];
	const matrix *D = &k->per_head[GS_D][h], *dS = &k->per_head[GS_DS][h];
	const size_t n_kv = P->dim[1], dv = O->dim[1];
	char a[64], b[64], c[64], qi[160], kj[160];

	fprintf(fp, "head %zu, query %s, key %s, by hand:\n", h + 1,
		label(l, 1, i, qi, sizeof(qi)), label(l, 0, j, kj, sizeof(kj)));
	format_number(a, sizeof(a), dP->v[i * n_kv + j], precision);
	fprintf(fp, "  dP[%zu][%zu] = dO row %zu . V row %zu = %s\n", i + 1, j + 1, i + 1, j + 1, a);
	fputs("  D[", fp);
	fprintf(fp, "%zu] = dO row %zu . O row %zu =", i + 1, i + 1, i + 1);
	for (size_t t = 0; t < dv; t++) {
		format_number(a, sizeof(a), dO->v[i * dv + t], precision);
		format_number(b, sizeof(b), O->v[i * dv + t], precision);
		fprintf(fp, "%s %s*%s", t ? " +" : "", a, b);
	}
	format_number(a, sizeof(a), D->v[i], precision);
	fprintf(fp, " = %s\n", a);
	format_number(a, sizeof(a), P->v[i * n_kv + j], precision);
	format_number(b, sizeof(b), dP->v[i * n_kv + j], precision);
	format_number(c, sizeof(c), D->v[i], precision);
	if (P->v[i * n_kv + j] == 0 && dS->v[i * n_kv + j] == 0)
		fprintf(fp, "  dS[%zu][%zu] = P[%zu][%zu] * (dP - D) = 0 * (%s - %s) = 0%s\n", i + 1,
			j + 1, i + 1, j + 1, b, c, " (a weight of 0 passes nothing back)");
	else {
		char s[64];

		format_number(s, sizeof(s), dS->v[i * n_kv + j], precision);
		fprintf(fp, "  dS[%zu][%zu] = P[%zu][%zu] * (dP[%zu][%zu] - D[%zu]) = %s * (%s - %s) = %s\n",
			i + 1, j + 1, i + 1, j + 1, i + 1, j + 1, i + 1, a, b, c, s);
	}
}

/* one item's table, its rows and columns labelled as its axes say */
static void put_item(writer *wr, const struct step_item *it, const struct labels *l)
{
	wr->row_labels = (const char *const *)(it->rows == AXIS_QUERY ? l->query :
					       it->rows == AXIS_KEY ? l->key : NULL);
	wr->col_labels = (const char *const *)(it->cols == AXIS_KEY ? l->key : NULL);
	out_matrix(wr, it->key, it->title, it->m);
}

/* --cell alone: the items as plain text when printed, then each head's dS[Q][K] */
static void cells_alone(FILE *fp, const struct emit *e, const struct step_items *list,
			const struct step_results *k, const struct labels *l,
			const struct explain_ask *ask)
{
	if (ask->printed) {
		writer wr = { .fp = fp, .format = FORMAT_TEXT, .precision = e->precision,
			      .full = e->full };

		out_begin(&wr);
		for (size_t i = 0; i < list->n; i++)
			put_item(&wr, &list->v[i], l);
		out_end(&wr);
		fputc('\n', fp);
	}
	for (size_t h = 0; h < k->heads; h++) {
		if (h)
			fputc('\n', fp);
		explain_cell(fp, k, h, ask->cell[0], ask->cell[1], l, e->precision);
	}
}

int emit_explain_backward(const struct emit *e, const struct step_items *lists, size_t batch,
			  const struct step_results *keep, const struct labels *l,
			  const struct explain_ask *ask)
{
	const size_t *cell = ask->cell;
	outfile of;

	if (outfile_open(&of, e->output))
		return -1;
	for (size_t b = 0; b < (batch ? batch : 1); b++) {
		const struct step_items *list = &lists[b];
		writer wr = { .fp = of.fp, .format = FORMAT_TEXT, .precision = e->precision,
			      .full = e->full };

		if (batch)
			fprintf(of.fp, "%ssequence %zu of %zu\n\n", b ? "\n" : "", b + 1, batch);
		if (ask->cell_alone) {
			cells_alone(of.fp, e, list, &keep[b], l, ask);
			continue;
		}
		fputs("The backward pass: from dO, the gradient of the loss by the output, back to\n"
		      "every input and weight, one step at a time (the chain rule).  Per head:\n"
		      "dV = P^T*dO, dP = dO*V^T, D = rowsum(dO o O), dS = P o (dP - D), then back\n"
		      "through the softcap and the scale to dscores, and dQ = dscores*K,\n"
		      "dK = dscores^T*Q.  The heads' dK and dV add up per key/value head.\n\n", of.fp);
		out_begin(&wr);
		for (size_t i = 0; i < list->n; i++) {
			const struct step_item *it = &list->v[i];

			fprintf(of.fp, "%s%s: %s.\n", i ? "\n" : "", it->key,
				grad_steps[it->step - 1000].says);
			put_item(&wr, it, l);
			if (cell && it->step - 1000 == GS_DS) {
				fputc('\n', of.fp);
				explain_cell(of.fp, &keep[b], it->head - 1, cell[0], cell[1], l,
					     e->precision);
			}
		}
		out_end(&wr);
	}
	return outfile_commit(&of);
}


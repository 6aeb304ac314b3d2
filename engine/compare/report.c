/*
 * report.c: 'mha compare's report (compare.h): a table of the steps given,
 * or the same as JSON, and the diagnosis.
 */
#include "util/msg.h"
#include "util/number.h"
#include "util/text.h"
#include "compare/report.h"
#include "run/steps.h"
#include "util/number.h"

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
	const struct step *s = cmp_row(id);
	const size_t plane = st->R * st->C;
	const size_t p = st->worst / plane, r = st->worst % plane / st->C, c = st->worst % st->C;

	memset(w, 0, sizeof(*w));
	w->head = st->P > 1 || cmp_at(id)->per_head ? p + 1 : 0;
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

/* their shape as they gave it: "6x6", "3x6" for the first rows alone */
static const char *given_shape(char *buf, size_t size, const struct given *g)
{
	const matrix m = { .rank = g->rank, .dim = { g->dim[0], g->dim[1], g->dim[2], g->dim[3] } };

	return matrix_shape(&m, buf, size);
}

/* a number as %.3g, inf and nan spelled so */
static const char *g3(char *buf, size_t size, double v)
{
	snprintf(buf, size, "%.3g", v);
	return buf;
}

/* theirs and mha's with as few digits as tell them apart (3 at least) */
static void two(char *b1, char *b2, size_t size, double theirs, double mha)
{
	for (int p = 3; p <= 17; p++) {
		snprintf(b1, size, "%.*g", p, theirs);
		snprintf(b2, size, "%.*g", p, mha);
		if (strcmp(b1, b2) || theirs == mha || isnan(theirs) || isnan(mha))
			return;
	}
}

/* "heads.masked" and, when they named it otherwise, " (your scores)" */
static const char *step_shown(char *buf, size_t size, const struct report *r, int i)
{
	const int was = r->a->g[i].named_as;

	if (was >= 0)
		snprintf(buf, size, "%s (your %s)", cmp_name(i), cmp_key(was));
	else
		snprintf(buf, size, "%s", cmp_name(i));
	return buf;
}

/* "your SRC: what": a note of one array of theirs; 1 */
static int yours(FILE *fp, const struct given *g, const char *what)
{
	fputs("your ", fp);
	text_put(fp, g->src);
	fprintf(fp, ": %s\n", what);
	return 1;
}

/* the notes under the table: what dO was, steps they named otherwise, what
 * was compared of a step given in part, the precision their numbers had */
static void notes(FILE *fp, const struct report *r)
{
	char line[320];
	int any = 0;

	if (r->grads) {
		fprintf(fp, "gradients of dO = %s\n", r->dout_from ? r->dout_from :
			"all ones (the gradient of the output's sum; give --grad-output FILE or dO)");
		any = 1;
	}
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		const struct given *g = &r->a->g[i];

		if (!st->given)
			continue;
		if (g->per_kv)
			any = yours(fp, g, "one per key/value head (Hugging Face's before repeat_kv), "
				    "compared as each query head's");
		if (g->turned)
			any = yours(fp, g, "nn.Linear's weight's gradient, PyTorch's (out, in), "
				    "compared turned as this run's (in, out)");
		if (i == C_SOFTMAX_MEAN) {
			/* their weights were one plane for every head: a mean */
			snprintf(line, sizeof(line), "the softmax averaged over the %zu heads "
				 "(nn.MultiheadAttention's average_attn_weights=True), compared with "
				 "the mean of mha's", r->a->heads);
			any = yours(fp, g, line);
		}
		if (g->named_as >= 0) {
			snprintf(line, sizeof(line), "mha's %s, not its %s (compared as %s; name it %s)",
				 cmp_name(i), cmp_name(g->named_as), cmp_name(i), cmp_name(i));
			any = yours(fp, g, line);
		}
		if (st->shape_ok && (st->heads_given < st->P || st->rows_given < st->R)) {
			fprintf(fp, "%s: ", cmp_name(i));
			if (st->heads_given < st->P) {
				size_t n = 0;

				fprintf(fp, "head%s ", st->heads_given == 1 ? "" : "s");
				for (size_t h = 0; h < st->P; h++)
					if (!g->heads || g->heads[h])
						fprintf(fp, "%s%zu", n++ ? ", " : "", h + 1);
				fprintf(fp, " of %zu", st->P);
			}
			if (st->rows_given < st->R)
				fprintf(fp, "%srows 1-%zu of %zu", st->heads_given < st->P ? ", " : "",
					st->rows_given, st->R);
			fputs(" compared\n", fp);
			any = 1;
		}
		if (g->prec != PREC_FULL) {
			const char *kind = g->prec == PREC_DECIMALS ? "decimal" : "significant digit";

			fprintf(fp, "%s: given to %d %s%s: %s\n", cmp_name(i), g->digits, kind,
				g->digits == 1 ? "" : "s",
				!st->shape_ok ? "not compared" :
				st->pass && st->rounded ? "agrees to the digits you gave" :
				st->pass ? "agrees" : "differs beyond the digits you gave");
			any = 1;
		}
		if (st->lowest) {
			fprintf(fp, "%s: your blocked keys hold the type's lowest value (finfo.min, as "
				"Hugging Face masks), read as -inf\n", cmp_name(i));
			any = 1;
		}
		if (st->tol.f32 && !r->f32)
			fprintf(fp, "%s: float32 numbers: rtol %g, atol %g, ULPs of float32\n",
				cmp_name(i), st->tol.rtol, st->tol.atol), any = 1;
	}
	{
		/* their low-precision numbers held to tolerances they gave: said once */
		size_t held = 0;
		int type = 0;

		for (int i = 0; i < C_COUNT; i++)
			if (r->st[i].given && !r->st[i].lowp && lowp_of(r->a->g[i].type) &&
			    r->st[i].tol.fixed) {
				held++;
				type = lowp_of(r->a->g[i].type);
			}
		if (held) {
			fprintf(fp, "%s numbers (%zu step%s) held to --rtol and --atol, not to their "
				"precision\n", type == MHA_PRECISION_FP16 ? "float16" : "bfloat16", held,
				held == 1 ? "" : "s");
			any = 1;
		}
	}
	for (int p = MHA_PRECISION_BF16; p <= MHA_PRECISION_FP16; p++) {
		const size_t n = r->tol->refs ? r->tol->refs->readings[p - 1] : 0;
		int judged = 0;

		for (int i = 0; i < C_COUNT; i++)
			judged |= r->st[i].given && r->st[i].lowp == p;
		if (!judged)
			continue;
		fprintf(fp, "%s steps agree within %g times the reference's error plus a unit in "
			"the last place of their largest value\n",
			p == MHA_PRECISION_FP16 ? "float16" : "bfloat16", r->tol->factor);
		fprintf(fp, "the %s reference: mha forward --dtype %s (Hugging Face's eager attention "
			"in %s); %s\n", p == MHA_PRECISION_FP16 ? "float16" : "bfloat16",
			p == MHA_PRECISION_FP16 ? "fp16" : "bf16",
			p == MHA_PRECISION_FP16 ? "float16" : "bfloat16",
			n > 1 ? "its error, the largest over the ways of applying the scale (a float32 "
				"product, the scale rounded first, a division by its rounded inverse)"
			      : "the scale is a power of two, applied alike by every port");
		any = 1;
	}
	if (any)
		fputc('\n', fp);
}

static void put_json_shape(FILE *fp, const matrix *m)
{
	fputc('[', fp);
	for (size_t i = 0; i < m->rank; i++)
		fprintf(fp, "%s%zu", i ? ", " : "", m->dim[i]);
	fputc(']', fp);
}

/* a step judged by its precision: "bf16", else the tolerances' "f32" or "f64" */
static const char *judged_as(const struct stat *st)
{
	return st->lowp == MHA_PRECISION_BF16 ? "bf16" : st->lowp == MHA_PRECISION_FP16 ? "fp16"
	       : st->tol.f32 ? "f32" : "f64";
}

/* their error over the reference's, or NaN when the reference's is 0 */
static double ratio_of(const struct stat *st)
{
	return st->ref_err > 0 ? st->max_abs / st->ref_err : NAN;
}

/* the steps judged by their precision, in the report's first line */
static void head_precision(FILE *fp, const struct report *r)
{
	int seen[3] = { 0 }, others = 0;

	for (int i = 0; i < C_COUNT; i++)
		if (r->st[i].given) {
			seen[r->st[i].lowp] = 1;
			others += !r->st[i].lowp;
		}
	for (int p = MHA_PRECISION_BF16; p <= MHA_PRECISION_FP16; p++) {
		const char *t = p == MHA_PRECISION_FP16 ? "float16" : "bfloat16";

		if (!seen[p])
			continue;
		fprintf(fp, "; %s numbers by their precision (--factor %g)", t, r->tol->factor);
	}
	if (others)
		fprintf(fp, "; the others within rtol %g, atol %g", r->tol->rtol, r->tol->atol);
}

/* one step's row of the table by precision: its type, their error, the
 * reference's, their ratio, the normalised mean squared error, the cosine */
static void row_precision(FILE *fp, const struct stat *st, char *b[5], size_t size)
{
	const double q = ratio_of(st);

	g3(b[0], size, st->max_abs);
	if (st->lowp) {
		g3(b[1], size, st->ref_err);
		if (isnan(q))
			snprintf(b[2], size, "-");
		else
			snprintf(b[2], size, "%.2f", q);
	} else {
		snprintf(b[1], size, "-");
		snprintf(b[2], size, "-");
	}
	g3(b[3], size, st->nmse);
	snprintf(b[4], size, "%.7f", st->cosine);
	fprintf(fp, "%-4s  %10s  %9s  %6s  %8s  %9s  ", judged_as(st), b[0], b[1], b[2], b[3], b[4]);
}

void report_text(FILE *fp, const struct report *r)
{
	char shape[64], mshape[64], b1[32], b2[32], b3[32], b4[32], b5[32], name[96];
	char *cols[5] = { b1, b2, b3, b4, b5 };
	size_t given = 0, agree = 0, wshape = 5, wstep = 12;
	int lowp = 0;

	for (int i = 0; i < C_COUNT; i++)
		if (r->st[i].given) {
			const size_t n = strlen(given_shape(shape, sizeof(shape), &r->a->g[i]));
			const size_t k = strlen(step_shown(name, sizeof(name), r, i));

			wshape = n > wshape ? n : wshape;
			wstep = k > wstep ? k : wstep;
			given++;
			agree += r->st[i].pass;
			lowp |= r->st[i].lowp != 0;
		}
	fputs("mha compare: '", fp);
	text_put(fp, path_shown(r->against));
	if (lowp) {
		fputs("' against mha's float64 steps", fp);
		head_precision(fp, r);
		fputs("\n\n", fp);
	} else {
		fprintf(fp, "' against mha's float64 steps: rtol %g, atol %g%s\n\n", r->tol->rtol,
			r->tol->atol, r->f32 ? " (float32's; ULPs of float32)" : "");
	}
	if (r->sequence)
		fprintf(fp, "sequence %zu of the batch\n\n", r->sequence);
	if (lowp)
		fprintf(fp, "  %-*s  %-7s  %-*s  %-4s  %10s  %9s  %6s  %8s  %9s  %s\n", (int)wstep,
			"step", "result", (int)wshape, "shape", "type", "max |diff|", "reference",
			"ratio", "NMSE", "cosine", "where (the largest |diff|)");
	else
		fprintf(fp, "  %-*s  %-7s  %-*s  %10s  %9s  %9s  %s\n", (int)wstep, "step", "result",
			(int)wshape, "shape", "max |diff|", "max rel", "max ULP",
			"where (the largest |diff|)");
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		struct where w;

		if (!st->given)
			continue;
		given_shape(shape, sizeof(shape), &r->a->g[i]);
		if (!st->shape_ok) {
			fprintf(fp, "  %-*s  %-7s  %-*s  ", (int)wstep, step_shown(name, sizeof(name), r, i),
				"SHAPE", (int)wshape, shape);
			if (lowp)
				fprintf(fp, "%-4s  %10s  %9s  %6s  %8s  %9s  ", "-", "-", "-", "-", "-", "-");
			else
				fprintf(fp, "%10s  %9s  %9s  ", "-", "-", "-");
			fprintf(fp, "mha's is %s\n", matrix_shape(&r->mine->m[i], mshape, sizeof(mshape)));
			continue;
		}
		fprintf(fp, "  %-*s  %-7s  %-*s  ", (int)wstep, step_shown(name, sizeof(name), r, i),
			st->pass ? "ok" : "DIFFERS", (int)wshape, shape);
		if (lowp)
			row_precision(fp, st, cols, sizeof(b1));
		else
			fprintf(fp, "%10s  %9s  %9s  ", g3(b1, sizeof(b1), st->max_abs),
				g3(b2, sizeof(b2), st->max_rel), g3(b3, sizeof(b3), st->max_ulp));
		if (st->max_abs > 0 || !st->pass) {
			locate(&w, i, st, r->l);
			put_where(fp, &w);
			/* a difference shown as one: as many digits as tell them apart */
			if (st->pass) {
				g3(b1, sizeof(b1), st->worst_theirs);
				g3(b2, sizeof(b2), st->worst_mha);
			} else {
				two(b1, b2, sizeof(b1), st->worst_theirs, st->worst_mha);
			}
			fprintf(fp, ": %s, mha's %s", b1, b2);
		} else {
			fputs("identical", fp);
		}
		fputc('\n', fp);
	}
	fputc('\n', fp);
	notes(fp, r);
	if (r->first < 0) {
		fprintf(fp, "every step given agrees (%zu of %zu)\n", agree, given);
		return;
	}
	{
		const struct stat *st = &r->st[r->first];

		fprintf(fp, "first difference: %s", cmp_name(r->first));
		if (!st->shape_ok) {
			fprintf(fp, ": theirs is %s, mha's %s\n",
				given_shape(shape, sizeof(shape), &r->a->g[r->first]),
				matrix_shape(&r->mine->m[r->first], mshape, sizeof(mshape)));
		} else {
			struct where w;

			locate(&w, r->first, st, r->l);
			fprintf(fp, " (%zu of %zu entries differ; the most at ", st->differing, st->entries);
			put_where(fp, &w);
			fprintf(fp, ": theirs %.17g, mha's %.17g)\n", st->worst_theirs, st->worst_mha);
			if (st->lowp) {
				char q[32];

				if (isnan(ratio_of(st)))
					snprintf(q, sizeof(q), "more than");
				else
					snprintf(q, sizeof(q), "%.3g times", ratio_of(st));
				fprintf(fp, "                  their largest error, %.3g, is %s the %s "
					"reference's (%.3g); one within %g times it plus a unit in the last "
					"place (%.3g) agrees (--factor)\n", st->max_abs, q,
					st->lowp == MHA_PRECISION_FP16 ? "float16" : "bfloat16", st->ref_err,
					r->tol->factor, st->limit);
			}
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
		if (r->looks_lowp)
			fprintf(fp, "           every number of theirs at %s is a %s value, and mha's "
				"are not: if they were computed in %s, --dtype %s judges them by its "
				"precision\n", cmp_name(r->first),
				r->looks_lowp == MHA_PRECISION_FP16 ? "float16" : "bfloat16",
				r->looks_lowp == MHA_PRECISION_FP16 ? "float16" : "bfloat16",
				r->looks_lowp == MHA_PRECISION_FP16 ? "fp16" : "bf16");
		return;
	}
	text_put(fp, r->dg->message);
	fputc('\n', fp);
	if (!r->dg->later)
		fputs("           the steps given after it still differ: more than one mistake?\n", fp);
}

/* ', "key": v' in a JSON object, or null when it has no value */
static void json_field(FILE *fp, const char *key, int have, double v)
{
	fprintf(fp, ", \"%s\": ", key);
	if (have)
		json_number(fp, v, 0);
	else
		fputs("null", fp);
}

/* a step's "named_as", "heads", "rows", "precision", "rtol", "atol" */
static void json_given(FILE *fp, const struct report *r, int i)
{
	const struct stat *st = &r->st[i];
	const struct given *g = &r->a->g[i];

	fputs(", \"named_as\": ", fp);
	if (g->named_as >= 0)
		fprintf(fp, "\"%s\"", cmp_key(g->named_as));
	else
		fputs("null", fp);
	fputs(", \"heads\": ", fp);
	if (!st->shape_ok || !cmp_at(i)->per_head) {
		fputs("null", fp);
	} else {
		size_t n = 0;

		fputc('[', fp);
		for (size_t h = 0; h < st->P; h++)
			if (!g->heads || g->heads[h])
				fprintf(fp, "%s%zu", n++ ? ", " : "", h + 1);
		fputc(']', fp);
	}
	if (st->shape_ok)
		fprintf(fp, ", \"rows\": %zu", st->rows_given);
	else
		fputs(", \"rows\": null", fp);
	fputs(", \"precision\": ", fp);
	if (g->prec == PREC_FULL)
		fputs("null", fp);
	else
		fprintf(fp, "{\"%s\": %d}", g->prec == PREC_DECIMALS ? "decimals" : "significant",
			g->digits);
	fputs(", \"rtol\": ", fp);
	json_number(fp, st->tol.rtol, 0);
	fputs(", \"atol\": ", fp);
	json_number(fp, st->tol.atol, 0);
}

void report_json(FILE *fp, const struct report *r)
{
	int n = 0;

	fputs("{\n  \"against\": ", fp);
	text_put_json(fp, path_shown(r->against));
	fprintf(fp, ",\n  \"kind\": \"%s\",\n  \"dtype\": \"%s\",\n  \"rtol\": ", r->a->kind,
		r->precision == MHA_PRECISION_BF16 ? "bf16" : r->precision == MHA_PRECISION_FP16
		? "fp16" : r->f32 ? "f32" : "f64");
	json_number(fp, r->tol->rtol, 0);
	fputs(",\n  \"atol\": ", fp);
	json_number(fp, r->tol->atol, 0);
	fputs(",\n  \"factor\": ", fp);
	{
		int lowp = 0;

		for (int i = 0; i < C_COUNT; i++)
			lowp |= r->st[i].given && r->st[i].lowp;
		if (lowp)
			json_number(fp, r->tol->factor, 0);
		else
			fputs("null", fp);
	}
	if (r->sequence)
		fprintf(fp, ",\n  \"sequence\": %zu", r->sequence);
	else
		fputs(",\n  \"sequence\": null", fp);
	fputs(",\n  \"grad_output\": ", fp);
	if (!r->grads)
		fputs("null", fp);
	else if (r->dout_from)
		text_put_json(fp, r->dout_from);
	else
		fputs("\"ones\"", fp);
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
		{
			const matrix m = { .rank = r->a->g[i].rank, .dim = { r->a->g[i].dim[0],
					   r->a->g[i].dim[1], r->a->g[i].dim[2], r->a->g[i].dim[3] } };

			put_json_shape(fp, &m);
		}
		fputs(", \"mha_shape\": ", fp);
		put_json_shape(fp, &r->mine->m[i]);
		fprintf(fp, ", \"shape_agrees\": %s", st->shape_ok ? "true" : "false");
		json_given(fp, r, i);
		fprintf(fp, ", \"type\": \"%s\"", judged_as(st));
		if (!st->shape_ok) {
			fputs(", \"max_abs\": null, \"max_rel\": null, \"max_ulp\": null, "
			      "\"reference_error\": null, \"ratio\": null, \"limit\": null, \"nmse\": null, "
			      "\"cosine\": null, \"differing\": null, \"entries\": null, \"where\": null}", fp);
			continue;
		}
		json_field(fp, "max_abs", 1, st->max_abs);
		json_field(fp, "max_rel", 1, st->max_rel);
		json_field(fp, "max_ulp", 1, st->max_ulp);
		json_field(fp, "reference_error", st->lowp, st->ref_err);
		json_field(fp, "ratio", st->lowp && !isnan(ratio_of(st)), ratio_of(st));
		json_field(fp, "limit", st->lowp, st->limit);
		json_field(fp, "nmse", 1, st->nmse);
		json_field(fp, "cosine", 1, st->cosine);
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
	fputs("\n  ],\n  \"dtype_hint\": ", fp);
	if (r->looks_lowp)
		fprintf(fp, "\"%s\"", r->looks_lowp == MHA_PRECISION_FP16 ? "fp16" : "bf16");
	else
		fputs("null", fp);
	fputs(",\n  \"diagnosis\": ", fp);
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


/*
 * precision.c: their bfloat16 and float16 numbers judged by their
 * precision (compare.h).  The reference is the library's low-precision
 * path (mha_config.precision: Hugging Face's eager attention in the type)
 * on the same inputs; its error at a step is the largest |reference -
 * float64| over the entries compared.  Ports apply the scale in ways that
 * are all correct (a float32 product, the scale rounded to the type first,
 * a division by a rounded sqrt(d_k)): each is computed, and the reference's
 * error is the largest of them.  A step agrees when their error is at most
 * factor times it plus a unit in the last place of the step's largest value
 * in the type (match.c's compare_step applies it).
 */
#include "compare/compare.h"
#include "run/run.h"
#include "run/steps.h"
#include "util/budget.h"
#include "util/msg.h"

#include "mha.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the type's words in messages */
static const char *type_name(mha_precision p)
{
	return p == MHA_PRECISION_FP16 ? "float16" : "bfloat16";
}

/* the scale readings that differ from PyTorch's product for scale s in p:
 * the scale rounded first, unless the float is the type's already; the
 * division, unless s is a power of two (every reading then the same) */
static int reading_differs(int reading, double s, mha_precision p)
{
	int e;

	if (reading == MHA_LOWP_SCALE_ROUNDED)
		return (double)(float)s != mha_lowp_round(s, p);
	if (reading == MHA_LOWP_SCALE_DIVIDED)
		return frexp(s, &e) != 0.5;
	return 1;
}

/* fold ref's error at each step into L's rows for type k */
static int fold(struct lowp_refs *L, int k, const struct set *ref, const struct set *mine)
{
	for (int i = 0; i < C_COUNT; i++) {
		const matrix *a = &ref->m[i], *b = &mine->m[i];
		size_t P, R, C;

		if (!a->rank || !b->rank || matrix_size(a) != matrix_size(b))
			continue;
		shape3(b, &P, &R, &C);
		if (!L->row[k][i]) {
			/* charged to --max-memory, as every other allocation */
			const size_t n = P * R > 0 ? P * R : 1;

			if (!(L->row[k][i] = budget_malloc(n * sizeof(double)))) {
				char lim[48];

				return error("the reference's error, row by row, needs more than "
					     "--max-memory (%s): raise --max-memory",
					     show_bytes(lim, sizeof(lim), budget_limit()));
			}
			memset(L->row[k][i], 0, n * sizeof(double));
		}
		for (size_t r = 0; r < P * R; r++) {
			double worst = L->row[k][i][r];

			for (size_t c = 0; c < C; c++) {
				/* the reference's X is X rounded to the type, as it reads it */
				const double y = b->v[r * C + c];
				const double x = i == C_X ? mha_lowp_round(y, (mha_precision)(k + 1))
							  : a->v[r * C + c];
				const double d = x == y || (isnan(x) && isnan(y)) ? 0
						 : isnan(x - y) ? INFINITY : fabs(x - y);

				worst = d > worst ? d : worst;
			}
			L->row[k][i][r] = worst;
		}
	}
	return 0;
}

/* the type each step of theirs was given in (their data's, or --dtype's):
 * which low types are there, the first step of each */
static void types_given(const struct against *a, int first[2])
{
	first[0] = first[1] = -1;
	for (int i = 0; i < C_COUNT; i++) {
		const int p = a->g[i].m.rank ? lowp_of(a->g[i].type) : 0;

		if (p && first[p - 1] < 0)
			first[p - 1] = i;
	}
}

int lowp_references(struct lowp_refs *L, const struct ctx *x, const struct against *a)
{
	const struct problem *pb = x->p;
	int first[2];

	memset(L, 0, sizeof(*L));
	types_given(a, first);
	for (int k = 0; k < 2; k++) {
		const mha_precision p = (mha_precision)(k + 1);
		const char *lacks = run_lowp_lacks(&pb->cfg);
		const double s = mha_scale_of(&pb->d, &pb->cfg);
		struct ctx forward = *x;

		if (first[k] < 0)
			continue;
		if (lacks)
			return error("their %s is %s, and the %s reference does not compute %s yet: "
				     "give --rtol and --atol to hold it to tolerances of your own",
				     cmp_name(first[k]), type_name(p), type_name(p), lacks);
		forward.grads = 0; /* the reference is a forward */
		for (int reading = MHA_LOWP_SCALE_PRODUCT; reading <= MHA_LOWP_SCALE_DIVIDED;
		     reading++) {
			mha_config cfg = pb->cfg;
			struct set ref = { { { 0 } } };
			int rc;

			if (!reading_differs(reading, s, p))
				continue;
			cfg.precision = p;
			cfg.lowp_scale = (size_t)reading;
			rc = run_set(&ref, &forward, &pb->in, &pb->weights, &cfg, NULL, NULL);
			if (rc > 0)
				return error("the %s reference failed on these inputs", type_name(p));
			if (rc < 0)
				return -1;
			rc = fold(L, k, &ref, x->mine);
			set_free(&ref);
			if (rc)
				return -1;
			L->readings[k]++;
		}
		/* every step of theirs in the type needs the reference's */
		for (int i = 0; i < C_COUNT; i++)
			if (a->g[i].m.rank && lowp_of(a->g[i].type) == (int)p && x->mine->m[i].rank &&
			    !L->row[k][i])
				return error("their %s is %s, and the %s reference %s: give --rtol and "
					     "--atol to hold it to tolerances of your own", cmp_name(i),
					     type_name(p), type_name(p),
					     i >= C_GRAD ? "is a forward (it has no gradients)"
							 : "does not compute that step");
	}
	return 0;
}

void lowp_refs_free(struct lowp_refs *L)
{
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < C_COUNT; i++) {
			budget_free(L->row[k][i]);
			L->row[k][i] = NULL;
		}
}

/* every finite value of m is one of type p's */
static int all_of_type(const matrix *m, const struct given *g, mha_precision p)
{
	size_t P, R, C;

	shape3(m, &P, &R, &C);
	for (size_t i = 0; i < P * R * C; i++)
		if (given_at(g, i / (R * C), i % (R * C) / C) && isfinite(m->v[i]) &&
		    mha_lowp_round(m->v[i], p) != m->v[i])
			return 0;
	return 1;
}

int lowp_looks(const struct given *g, const matrix *mine)
{
	size_t P, R, C, tP, tR, tC;

	shape3(mine, &P, &R, &C);
	shape3(&g->m, &tP, &tR, &tC);
	if (!g->m.rank || !mine->rank || lowp_of(g->type) || tP != P || tR != R || tC != C)
		return 0;
	/* bfloat16 first: its values are float16's too, where in range */
	for (int p = MHA_PRECISION_BF16; p <= MHA_PRECISION_FP16; p++)
		if (all_of_type(&g->m, g, (mha_precision)p) && !all_of_type(mine, g, (mha_precision)p))
			return p;
	return 0;
}

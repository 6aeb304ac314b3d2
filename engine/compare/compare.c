/*
 * compare.c: one comparison, someone else's attention against mha's, on
 * a loaded problem: their arrays read (against.c), every step computed
 * with the library's plain path, forward and, when they gave a gradient,
 * backward (sets.c), each array told by its name (aliases.c) and shape,
 * the steps they gave compared in the order of the computation (match.c)
 * and, for the first that differs, the well-known mistakes tried
 * (diagnose.c).  What it found is the caller's to report.
 */
#include "compare/compare.h"
#include "compare/against.h"
#include "load/problem.h"
#include "load/shapes.h"
#include "run/grads.h"
#include "run/run.h"
#include "run/steps.h"
#include "util/budget.h"
#include "util/msg.h"

#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * mha's steps and one mistake's at a time, both whole, and the library's
 * scratch: refused up front when that passes the memory limit.  0, or -1
 * said.
 */
static int check_memory(const struct problem *p, int grads)
{
	const size_t held = budget_held();
	const size_t fwd = mha_memory_stages(&p->d, &p->cfg, ALL_STAGES, 0);
	const size_t bwd = grads ? mha_backward_memory_stages(&p->d, &p->cfg, ~0ull) : 0;
	const size_t lib = fwd > bwd ? fwd : bwd, set = set_bytes(p, grads);
	/* mha's set, a mistake's, and its run's largest step not yet moved over */
	const size_t step = (size_t)fmin((double)SIZE_MAX, (double)p->d.heads * (double)p->d.n_q *
					 (double)p->d.n_kv * sizeof(double));
	size_t total = held;
	struct run_need n = { .who = "comparing",
			      .part = { "the inputs and their results", "the computation",
					"mha's steps and a mistake's" },
			      .advice = "raise --max-memory" };

	if (budget_limit() == SIZE_MAX)
		return 0;
	total = lib > SIZE_MAX - total ? SIZE_MAX : total + lib;
	total = set > (SIZE_MAX - total) / 2 ? SIZE_MAX : total + 2 * set;
	total = step > SIZE_MAX - total ? SIZE_MAX : total + step;
	n.bytes[0] = held;
	n.bytes[1] = lib;
	n.bytes[2] = total - held - lib;
	return run_check_memory(&n);
}

/* the problem cut to the one sequence compared: 0, or -1 said */
static int one_sequence(struct problem *pb, size_t sequence)
{
	if (sequence && (!pb->batch || sequence > pb->batch))
		return usage_error("compare", "--sequence %zu, but the inputs hold %zu sequence%s",
				   sequence, pb->batch ? pb->batch : 1, pb->batch > 1 ? "s" : ""), -1;
	if (sequence && problem_keep_sequence(pb, sequence - 1))
		return -1;
	if (problem_sequences(pb) > 1)
		return usage_error("compare", "the inputs are a batch of %zu sequences: compare one "
				   "at a time with --sequence N", pb->batch), -1;
	return 0;
}

/* their numbers' tolerances and precision, as the request reads them */
static void read_as_asked(struct comparison *c, const struct compare_request *q)
{
	for (int i = 0; i < C_COUNT; i++) {
		struct given *g = &c->a.g[i];

		if (!g->m.rank)
			continue;
		/* float32 numbers (a .npy of <f4) at float32's tolerances (step_tol),
		 * unless --dtype says which; bfloat16 and float16 ones by their
		 * precision (precision.c), the type --dtype says or their data's */
		if (q->dtype_given) {
			g->f32 = 0;
			g->type = q->precision == MHA_PRECISION_BF16 ? FROM_BF16
				  : q->precision == MHA_PRECISION_FP16 ? FROM_F16
				  : q->f32 ? FROM_F32 : FROM_F64;
		}
		if (lowp_of(g->type)) {
			g->f32 = 0;
			g->prec = PREC_FULL; /* binary numbers: no digits to find */
			c->lowp = 1;
		} else if (q->digits_given) {
			g->prec = q->digits_sig ? PREC_SIGNIFICANT : PREC_DECIMALS;
			g->digits = q->digits;
		} else if (c->mine.m[i].rank) {
			detect_precision(g, &c->mine.m[i], i);
		}
	}
}

/* each step they gave against mha's; a step of theirs under another
 * name moved to it; then the diagnosis of the first that differs */
static int compare_steps(struct comparison *c, const struct ctx *x)
{
	const struct tol *tol = &c->tol;

	for (int pass = 0; pass < 2; pass++) {
		c->first = -1;
		for (int i = 0; i < C_COUNT; i++) {
			if (!c->a.g[i].m.rank) {
				c->st[i].given = 0;
				continue;
			}
			compare_step(&c->st[i], i, &c->a.g[i], &c->mine.m[i], tol);
			if (!c->st[i].pass && c->first < 0)
				c->first = i;
		}
		if (c->first < 0 || pass)
			break;
		find_named(&c->a, &c->mine, c->st, tol);
	}
	if (c->first >= 0 && diagnose(&c->dg, x, c->first))
		return -1;
	if (c->dg.found && c->dg.as_step != c->dg.step) {
		/* the mistake's numbers are theirs under another step's name (scores
		 * kept scaled and masked, with the scale wrong): compared as that step */
		const int as = c->dg.as_step;

		name_as(&c->a, c->dg.step, as);
		c->st[c->dg.step].given = 0;
		compare_step(&c->st[as], as, &c->a.g[as], &c->mine.m[as], tol);
		c->first = -1;
		for (int i = 0; i < C_COUNT && c->first < 0; i++)
			if (c->st[i].given && !c->st[i].pass)
				c->first = i;
		c->dg.step = c->first;
	}
	return 0;
}

int compare_problem(struct comparison *c, struct problem *pb, const struct compare_request *q)
{
	const int f32 = q->f32;
	const size_t out_cols = mha_output_cols(&pb->d, pb->weights.W_O != NULL);
	struct ctx x = { .p = pb, .mine = &c->mine, .a = &c->a, .rep = &c->rep, .f32 = f32 };

	c->tol = (struct tol){ q->rtol_given ? q->rtol : f32 ? 1e-4 : 1e-9,
			       q->atol_given ? q->atol : f32 ? 1e-5 : 1e-12, f32,
			       q->rtol_given || q->atol_given, q->factor_given ? q->factor : 2,
			       &c->refs };
	c->rep = (mha_report)MHA_INIT(mha_report);
	c->first = -1;
	x.tol = c->tol;
	if (one_sequence(pb, q->sequence) ||
	    (q->against ? against_read(&c->a, q->against, pb->d.heads)
			: against_read_arrays(&c->a, q->their_names, q->their_paths, q->n_theirs,
					      pb->d.heads)))
		return EXIT_USAGE;
	/* gradients: --grad-output, or their dO, or all ones (mha backward's) */
	c->grads = x.grads = pb->spec.grad_output || against_has_grads(&c->a);
	if (pb->spec.grad_output) {
		if (run_grad_output(&c->dout, pb, 0, out_cols))
			return EXIT_USAGE;
		snprintf(c->dout_from, sizeof(c->dout_from), "--grad-output %s",
			 path_shown(pb->spec.grad_output));
	} else if (x.grads && against_take_dout(&c->a, &c->dout, pb->d.n_q, out_cols)) {
		snprintf(c->dout_from, sizeof(c->dout_from), "their dO");
	}
	x.dout = &c->dout;
	if (check_memory(pb, x.grads))
		return EXIT_USAGE;
	{
		const int r = run_set(&c->mine, &x, &pb->in, &pb->weights, &pb->cfg, NULL, &c->rep);

		if (r) {
			if (r > 0)
				error("the run failed: %s", "the numbers overflow or a setting is out of "
				      "range (mha forward says which)");
			return EXIT_USAGE;
		}
	}
	c->a.torch = pb->spec.layout == LAYOUT_TORCH;
	if (against_resolve(&c->a, c->mine.m))
		return EXIT_USAGE;
	if (c->a.g[C_MASK].m.is_bool)
		/* their boolean mask as this run reads one (--mask-bool): what it adds */
		for (size_t i = 0; i < matrix_size(&c->a.g[C_MASK].m); i++)
			c->a.g[C_MASK].m.v[i] = (c->a.g[C_MASK].m.v[i] != 0) !=
						(pb->spec.mask_block != 0) ? 0 : -INFINITY;
	read_as_asked(c, q);
	if (q->factor_given && !c->lowp)
		return usage_error("compare", "--factor judges bfloat16 and float16 numbers, and none "
				   "of theirs is (--dtype bf16 or fp16 says they were)"), EXIT_USAGE;
	if (c->lowp && !c->tol.fixed && lowp_references(&c->refs, &x, &c->a))
		return EXIT_USAGE;
	x.tol = c->tol;
	if (compare_steps(c, &x))
		return EXIT_USAGE;
	if (c->first >= 0 && !c->dg.found && !q->dtype_given)
		c->looks_lowp = lowp_looks(&c->a.g[c->first], &c->mine.m[c->first]);
	return 0;
}

void comparison_free(struct comparison *c)
{
	set_free(&c->mine);
	against_free(&c->a);
	lowp_refs_free(&c->refs);
	matrix_free(&c->dout);
}

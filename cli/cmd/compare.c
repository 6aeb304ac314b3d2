/*
 * compare.c: 'mha compare', someone else's attention against mha's.
 *
 * It takes the attention commands' inputs and options (the skeleton,
 * attention.c, parses them, with --against, --rtol, --atol, --digits and
 * --grad-output added), reads their arrays (against.c), computes every
 * step with the library's plain path, forward and, when they gave a
 * gradient, backward (sets.c), tells which step each array is by its name
 * (aliases.c) and shape, and compares the steps they gave in the order of
 * the computation (match.c): shapes, the largest absolute, relative and
 * ULP differences, and where.  For the first step that differs
 * diagnose.c tries the well-known mistakes; report.c writes the table (or
 * JSON).
 *
 * Exit status as cmp and diff: 0 agree, 1 differ, 2 trouble (command
 * line, an input, their file).
 */
#include "base/budget.h"
#include "base/cli.h"
#include "cmd/against.h"
#include "cmd/aliases.h"
#include "cmd/attention.h"
#include "cmd/compare.h"
#include "load/problem.h"
#include "load/shapes.h"
#include "load/weights.h"
#include "run/grads.h"
#include "run/run.h"
#include "run/steps.h"

#include "mha.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char compare_usage[] =
	"usage: mha compare --against PATH -x FILE [-w FILE] [options]\n"
	"       mha compare --against PATH --q FILE --k FILE --v FILE [options]\n"
	"       mha compare --aliases\n"
	"\n"
	"Compare someone else's attention with mha's, step by step, forward and\n"
	"backward, and name the mistake that explains the first step that differs.\n"
	"\n"
	"Their results:\n"
	"      --against PATH    a JSON file of named arrays (mha's keys, or the names\n"
	"                        PyTorch, Hugging Face and the tutorials use: q,\n"
	"                        query_states, attn_weights, context, out, dX, ...;\n"
	"                        a head's as heads.scores, head2_scores or scores_h2,\n"
	"                        or under \"heads\"), a directory of files named so, a\n"
	"                        .npz archive of members named so (np.savez), or one\n"
	"                        matrix: the output.  Any subset of steps, heads and\n"
	"                        (first) rows\n"
	"      --aliases         print every step's names and stop\n"
	"      --grad-output FILE  dO, the gradient of the output: compare the\n"
	"                        gradients too (their dO among the arrays does the\n"
	"                        same; else a gradient given is of the output's sum)\n"
	"      --rtol R          relative tolerance (default 1e-9; 1e-4 with --dtype f32\n"
	"                        or their float32 .npy)\n"
	"      --atol A          absolute tolerance (default 1e-12; 1e-5 with float32);\n"
	"                        an entry agrees when |theirs - mha| <= A + R*|mha|\n"
	"      --digits N        their numbers are given to N decimals (Ns: N\n"
	"                        significant digits): agree within half the last\n"
	"                        one (default: detected, step by step)\n"
	"\n"
	ATTN_USAGE_SHARED
	"Computation:\n"
	"      --dtype T         f64 or f32: their numbers are float32's (f32); mha\n"
	"                        still computes in float64, and the tolerances and\n"
	"                        ULPs are float32's.  Default: float32 for an array\n"
	"                        read as float32, float64 for the others\n"
	ATTN_USAGE_RUN
	"      --sequence N      with a batch (3-D inputs): compare sequence N (from 1)\n"
	"\n"
	"Output:\n"
	"  -f, --format FMT      text (default: a table) or json (the report as data)\n"
	ATTN_USAGE_JSON
	ATTN_USAGE_HELP
	"\n"
	"Exit status: 0 every step given agrees, 1 a step differs, 2 trouble: a bad\n"
	"command line, or an input or --against file that cannot be read or used.\n";


/* ---- options ------------------------------------------------------------- */

struct compare_opts {
	const char *against;
	double rtol, atol;
	int rtol_given, atol_given;
	int digits, digits_sig; /* --digits N, --digits Ns */
	int digits_given;
};

enum { O_AGAINST = ATTN_EXTRA_BASE, O_RTOL, O_ATOL, O_DIGITS, O_ALIASES };

static const struct option compare_longopts[] = {
	{ "against", required_argument, NULL, O_AGAINST },
	{ "rtol", required_argument, NULL, O_RTOL },
	{ "atol", required_argument, NULL, O_ATOL },
	{ "digits", required_argument, NULL, O_DIGITS },
	{ "aliases", no_argument, NULL, O_ALIASES }, /* alone: cmd_compare */
	{ NULL, 0, NULL, 0 },
};

static int compare_opt(struct attn_options *o, int c, const char *arg)
{
	struct compare_opts *co = o->own;
	double v;

	if (c == O_AGAINST) {
		co->against = arg;
		return 0;
	}
	if (c == O_ALIASES) {
		usage_error("compare", "--aliases prints the names compare reads: give it alone");
		return -1;
	}
	if (c == O_DIGITS) {
		/* 1 to 15 decimals, or 1s to 15s significant digits */
		char *end;
		const long n = arg[0] >= '0' && arg[0] <= '9' ? strtol(arg, &end, 10) : -1;

		if (n < 0 || n > 15 || (*end && strcmp(end, "s")) || (n == 0 && *end)) {
			usage_error("compare", "--digits takes a number of decimals from 0 to 15, or of "
				    "significant digits from 1s to 15s, not '%s'", arg);
			return -1;
		}
		co->digits = (int)n;
		co->digits_sig = *end == 's';
		co->digits_given = 1;
		return 0;
	}
	if (!opt_number(arg, &v) || v < 0) {
		usage_error("compare", "--%s expects a number of at least 0, not '%s'",
			    c == O_RTOL ? "rtol" : "atol", arg);
		return -1;
	}
	if (c == O_RTOL) {
		co->rtol = v;
		co->rtol_given = 1;
	} else {
		co->atol = v;
		co->atol_given = 1;
	}
	return 0;
}

/* forward's options compare has no use for: a usage error */
static int refuse_forward_only(struct attn_options *o)
{
	const struct compare_opts *co = o->own;
	const char *opt = o->print_given ? "--print" : o->emit.output ? "--output" :
			  o->spec.cell ? "--cell" : o->explain ? "--explain" :
			  o->color_given ? "--color" : o->precision_given ? "--precision" :
			  o->emit.compress ? "--compress" : o->spec.rows ? "--rows" :
			  o->spec.cols ? "--cols" : o->emit.fit.force ? "--force" :
			  o->emit.full ? "--full" : NULL;

	if (opt)
		return usage_error("compare", "%s is forward's: compare writes its report to "
				   "standard output", opt);
	if (o->format_given && o->emit.format != FORMAT_TEXT && o->emit.format != FORMAT_JSON)
		return usage_error("compare", "compare's --format takes text or json");
	if (o->emit.bare_nonfinite && o->emit.format != FORMAT_JSON)
		return usage_error("compare", "--json-nonfinite is for the JSON report: add "
				   "--format json");
	if (!co->against)
		return usage_error("compare", "no --against PATH: their results to compare");
	if (!strcmp(co->against, "-")) {
		const struct problem_spec *s = &o->spec;
		const char *const files[] = { s->x, s->kv, s->xk, s->xv, s->w, s->q, s->k, s->v,
					      s->mask, s->positions, s->rope_cos, s->rope_sin, s->config,
					      s->sinks, s->alibi_slopes };

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			if (files[i] && !strcmp(files[i], "-"))
				return usage_error("compare", "only one input can be '-' (standard "
						   "input): --against - and another");
		for (int i = 0; i < N_WEIGHTS; i++)
			if (s->one[i] && !strcmp(s->one[i], "-"))
				return usage_error("compare", "only one input can be '-' (standard "
						   "input): --against - and another");
	}
	if (o->spec.cfg.exact)
		return usage_error("compare", "--exact is forward's: compare always takes the plain "
				   "path");
	return 0;
}

/*
 * mha's steps and one mistake's at a time, both whole, and the library's
 * scratch: refused up front when that passes --max-memory.  0, or -1 said.
 */
static int check_memory(const struct problem *p, int grads)
{
	const size_t held = budget_held();
	const size_t fwd = mha_memory(&p->d, &p->cfg, ALL_STAGES, 0);
	const size_t bwd = grads ? mha_backward_memory(&p->d, &p->cfg, ~0u) : 0;
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

/* ---- the command ------------------------------------------------------------ */

/* compare's output options: text or json to standard output, no picture */
static int compare_check(struct attn_options *o)
{
	return attn_refuse_picture_options(o);
}

static int compare_run(struct attn_options *o, struct problem *pb)
{
	const struct compare_opts *co = o->own;
	struct against a = { 0 };
	struct set mine = { 0 };
	static struct stat st[C_COUNT];
	struct diagnosis dg = { 0 };
	const int f32 = o->f32;
	const struct tol tol = { co->rtol_given ? co->rtol : f32 ? 1e-4 : 1e-9,
				 co->atol_given ? co->atol : f32 ? 1e-5 : 1e-12, f32,
				 co->rtol_given || co->atol_given };
	mha_report rep = MHA_INIT(mha_report);
	matrix dout = { 0 };
	const size_t out_cols = mha_output_cols(&pb->d, pb->weights.W_O != NULL);
	char dout_from[PATH_TEXT] = "";
	struct ctx x = { .p = pb, .mine = &mine, .a = &a, .rep = &rep, .tol = tol, .f32 = f32 };
	int rc = EXIT_USAGE, first = -1;

	/* every input problem is trouble here (2), as cmp and diff have it */
	if (o->sequence && (!pb->batch || o->sequence > pb->batch)) {
		usage_error("compare", "--sequence %zu, but the inputs hold %zu sequence%s", o->sequence,
			    pb->batch ? pb->batch : 1, pb->batch > 1 ? "s" : "");
		goto done;
	}
	if (o->sequence && problem_keep_sequence(pb, o->sequence - 1))
		goto done;
	if (problem_sequences(pb) > 1) {
		usage_error("compare", "the inputs are a batch of %zu sequences: compare one at a time "
			    "with --sequence N", pb->batch);
		goto done;
	}
	if (against_read(&a, co->against, pb->d.heads))
		goto done;
	/* gradients: --grad-output, or their dO, or all ones (mha backward's) */
	x.grads = pb->spec.grad_output || against_has_grads(&a);
	if (pb->spec.grad_output) {
		if (run_grad_output(&dout, pb, 0, out_cols))
			goto done;
		snprintf(dout_from, sizeof(dout_from), "--grad-output %s",
			 path_shown(pb->spec.grad_output));
	} else if (x.grads && against_take_dout(&a, &dout, pb->d.n_q, out_cols)) {
		snprintf(dout_from, sizeof(dout_from), "their dO");
	}
	x.dout = &dout;
	if (check_memory(pb, x.grads))
		goto done;
	{
		int r = run_set(&mine, &x, &pb->in, &pb->weights, &pb->cfg, NULL, &rep);

		if (r) {
			if (r > 0)
				error("the run failed: %s", "the numbers overflow or a setting is out of "
				      "range (mha forward says which)");
			goto done;
		}
	}
	a.torch = pb->spec.layout == LAYOUT_TORCH;
	if (against_resolve(&a, mine.m))
		goto done;
	if (a.g[C_MASK].m.is_bool)
		/* their boolean mask as this run reads one (--mask-bool): what it adds */
		for (size_t i = 0; i < matrix_size(&a.g[C_MASK].m); i++)
			a.g[C_MASK].m.v[i] = (a.g[C_MASK].m.v[i] != 0) != (pb->spec.mask_block != 0)
					     ? 0 : -INFINITY;
	for (int i = 0; i < C_COUNT; i++) {
		struct given *g = &a.g[i];

		if (!g->m.rank)
			continue;
		/* float32 numbers (a .npy of <f4) at float32's tolerances (step_tol),
		 * unless --dtype says which */
		if (o->dtype_given)
			g->f32 = 0;
		if (co->digits_given) {
			g->prec = co->digits_sig ? PREC_SIGNIFICANT : PREC_DECIMALS;
			g->digits = co->digits;
		} else if (mine.m[i].rank) {
			detect_precision(g, &mine.m[i], i);
		}
	}
	for (int pass = 0; pass < 2; pass++) {
		first = -1;
		for (int i = 0; i < C_COUNT; i++) {
			if (!a.g[i].m.rank) {
				st[i].given = 0;
				continue;
			}
			compare_step(&st[i], i, &a.g[i], &mine.m[i], &tol);
			if (!st[i].pass && first < 0)
				first = i;
		}
		if (first < 0 || pass)
			break;
		find_named(&a, &mine, st, &tol);
	}
	if (first >= 0 && diagnose(&dg, &x, first))
		goto done;
	if (dg.found && dg.as_step != dg.step) {
		/* the mistake's numbers are theirs under another step's name (scores
		 * kept scaled and masked, with the scale wrong): compared as that step */
		name_as(&a, dg.step, dg.as_step);
		st[dg.step].given = 0;
		compare_step(&st[dg.as_step], dg.as_step, &a.g[dg.as_step], &mine.m[dg.as_step], &tol);
		first = -1;
		for (int i = 0; i < C_COUNT && first < 0; i++)
			if (st[i].given && !st[i].pass)
				first = i;
		dg.step = first;
	}
	{
		const struct report r = { .against = co->against, .a = &a, .mine = &mine, .st = st,
					  .l = &pb->labels, .tol = &tol, .f32 = f32,
					  .sequence = o->sequence, .first = first, .dg = &dg,
					  .grads = x.grads, .dout_from = dout_from[0] ? dout_from : NULL };

		if (o->emit.format == FORMAT_JSON)
			report_json(stdout, &r);
		else
			report_text(stdout, &r);
	}
	/* a report that could not be written is trouble (2), never "differs" */
	rc = stdout_flush() ? EXIT_USAGE : first < 0 ? EXIT_OK : EXIT_DATA;
done:
	set_free(&mine);
	against_free(&a);
	matrix_free(&dout);
	return rc;
}

/* inputs that cannot be loaded are trouble (2), as cmp and diff have it */
const struct attn_command attn_compare = {
	.name = "compare", .usage = compare_usage, .load_failed = EXIT_USAGE, .takes = OPT_GRAD,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_DTYPE | OPT_JSON,
	.extra = compare_longopts, .extra_opt = compare_opt,
	.refuse = refuse_forward_only, .check = compare_check,
	.run = compare_run
};

int compare_check_args(int argc, char **argv)
{
	struct compare_opts co = { 0 };

	return attn_check_args(argc, argv, &attn_compare, &co);
}

int cmd_compare(int argc, char **argv)
{
	struct compare_opts co = { 0 };

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--aliases")) {
			if (argc != 2)
				return usage_error("compare", "--aliases prints the names compare reads: "
						   "give it alone");
			alias_print(stdout);
			/* trouble, as cmp(1) has it: 1 is "differs" */
			return stdout_flush() ? EXIT_USAGE : EXIT_OK;
		}

	return attn_main(argc, argv, &attn_compare, &co);
}


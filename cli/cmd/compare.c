/*
 * compare.c: 'mha compare', someone else's attention against mha's.
 *
 * It takes the attention commands' inputs and options (the skeleton,
 * attention.c, parses them, with --against, --rtol, --atol, --digits and
 * --grad-output added) and hands the loaded problem to the engine's
 * comparison (engine/compare/compare.c: their arrays read, every step
 * computed, forward and backward, compared in the order of the
 * computation, the first difference diagnosed); report.c writes the table
 * (or JSON).
 *
 * Exit status as cmp and diff: 0 agree, 1 differ, 2 trouble (command
 * line, an input, their file).
 */
#include "base/cli.h"
#include "cmd/attention.h"
#include "compare/report.h"
#include "compare/aliases.h"
#include "compare/compare.h"
#include "load/inputs.h"
#include "load/problem.h"

#include <getopt.h>
#include <math.h>
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
	"                        .npz archive or a .safetensors file of arrays named\n"
	"                        so (np.savez, safetensors' save_file), or one\n"
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
	"      --factor F        bfloat16 and float16 numbers: a step agrees when its\n"
	"                        largest |diff| is at most F times that of mha's\n"
	"                        reference in the type (Hugging Face's eager\n"
	"                        attention), plus a unit in the last place of the\n"
	"                        step's largest value (default 2)\n"
	"\n"
	ATTN_USAGE_SHARED
	"Computation:\n"
	"      --dtype T         the type their numbers were computed in: f64, f32\n"
	"                        (float32's tolerances and ULPs), bf16 or fp16 (judged\n"
	"                        by the precision of the type: --factor); mha still\n"
	"                        computes in float64.  Default: each array's own type\n"
	"                        (float32, float16 or bfloat16 in a .npy, a\n"
	"                        .safetensors file or a tensor), else float64\n"
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

enum { O_AGAINST = ATTN_EXTRA_BASE, O_RTOL, O_ATOL, O_DIGITS, O_ALIASES, O_FACTOR };

static const struct option compare_longopts[] = {
	{ "against", required_argument, NULL, O_AGAINST },
	{ "rtol", required_argument, NULL, O_RTOL },
	{ "atol", required_argument, NULL, O_ATOL },
	{ "digits", required_argument, NULL, O_DIGITS },
	{ "factor", required_argument, NULL, O_FACTOR },
	{ "aliases", no_argument, NULL, O_ALIASES }, /* alone: cmd_compare */
	{ NULL, 0, NULL, 0 },
};

static int compare_opt(struct attn_options *o, int c, const char *arg)
{
	struct compare_request *co = o->own;
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
	if (c == O_FACTOR) {
		if (!opt_number(arg, &v) || !(v > 0) || !isfinite(v)) {
			usage_error("compare", "--factor expects a number above 0, not '%s'", arg);
			return -1;
		}
		co->factor = v;
		co->factor_given = 1;
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
	const struct compare_request *co = o->own;
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
	if (!strcmp(co->against, "-"))
		for (size_t i = 0; i < n_spec_files; i++) {
			const char *path = spec_file_path(&o->spec, &spec_files[i]);

			if (path && !strcmp(path, "-"))
				return usage_error("compare", "only one input can be '-' (standard "
						   "input): --against - and another");
		}
	if (o->spec.cfg.exact)
		return usage_error("compare", "--exact is forward's: compare always takes the plain "
				   "path");
	return 0;
}

/* ---- the command ------------------------------------------------------------ */

/* compare's output options: text or json to standard output, no picture */
static int compare_check(struct attn_options *o)
{
	return attn_refuse_picture_options(o);
}

static int compare_run(struct attn_options *o, struct problem *pb)
{
	struct compare_request *q = o->own;
	struct comparison *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return error("out of memory"), EXIT_USAGE;
	q->f32 = o->f32;
	q->dtype_given = o->dtype_given;
	q->precision = o->dtype == 2 ? MHA_PRECISION_BF16 : o->dtype == 3 ? MHA_PRECISION_FP16 : 0;
	q->sequence = o->sequence;
	rc = compare_problem(c, pb, q);
	if (!rc) {
		const struct report r = { .against = q->against, .a = &c->a, .mine = &c->mine,
					  .st = c->st, .l = &pb->labels, .tol = &c->tol, .f32 = q->f32,
					  .precision = q->precision,
					  .sequence = o->sequence, .first = c->first, .dg = &c->dg,
					  .looks_lowp = c->looks_lowp,
					  .grads = c->grads,
					  .dout_from = c->dout_from[0] ? c->dout_from : NULL };

		if (o->emit.format == FORMAT_JSON)
			report_json(stdout, &r);
		else
			report_text(stdout, &r);
		/* a report that could not be written is trouble (2), never "differs" */
		rc = stdout_flush() ? EXIT_USAGE : c->first < 0 ? EXIT_OK : EXIT_DATA;
	}
	comparison_free(c);
	free(c);
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
	struct compare_request co = { 0 };

	return attn_check_args(argc, argv, &attn_compare, &co);
}

int cmd_compare(int argc, char **argv)
{
	struct compare_request co = { 0 };

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


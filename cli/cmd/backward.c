/*
 * backward.c: 'mha backward', every gradient of the layer from
 * forward's inputs and options and --grad-output (the upstream gradient).
 *
 * The command line is the skeleton's (attention.c parses and checks it,
 * loads the problem and hands it to this file's hooks): this file owns
 * what is backward's own: its steps (a table, as steps.c's
 * for forward), --print's names, --grad-output's reading and shape, the
 * run of mha_backward() with an observer keeping each step, the items the
 * writers print (emit.c), and --explain's narration with --cell working one
 * entry of dS by hand.
 */
#include "base/cli.h"
#include "util/number.h"
#include "util/budget.h"
#include "write/emit.h"
#include "cmd/attention.h"
#include "util/files.h"
#include "read/input.h"
#include "load/problem.h"
#include "load/weights.h"
#include "run/backward.h"
#include "run/run.h"
#include "util/text.h"

#include "mha.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char backward_usage[] =
	"usage: mha backward -x FILE [-w FILE] [--kv FILE] [--grad-output FILE] [options]\n"
	"       mha backward --q FILE --k FILE --v FILE [-w FILE] [--grad-output FILE]\n"
	"                    [options]\n"
	"\n"
	"Every gradient of multi-head attention: of the inputs (dX, dX_kv, or dQ, dK,\n"
	"dV), the weights and biases given (dW_Q ... db_O) and the sinks, and per\n"
	"head each step of the backward pass (dO, dV, dP, D, dS, ...), in float64\n"
	"(the gradients alone also in float32: --dtype f32).\n"
	"With no head step printed the fast path runs (FlashAttention-2's backward:\n"
	"no n_q x n_kv matrix, threads); it agrees with the plain path to rounding.\n"
	"The inputs and options are forward's: the gradients are those of the very\n"
	"computation 'mha forward' does with them.\n"
	"\n"
	"  --grad-output FILE    dO, the gradient of the loss by the output, shaped like\n"
	"                        the output (n_q x output columns; batch x n_q x ... for\n"
	"                        a batch); JSON (\"dO\" or \"grad_output\"), CSV or .npy.\n"
	"                        Default: all ones, the gradient of sum(output)\n"
	"\n"
	ATTN_USAGE_SHARED
	"Computation:\n"
	"      --max-memory SIZE the most a run may allocate, e.g. 512M, 4G, none\n"
	"                        (default: 3/4 of the memory)\n"
	"      --threads N       threads for the fast path (default: OMP_NUM_THREADS,\n"
	"                        else the cores mha may run on); the same bits for\n"
	"                        any number\n"
	ATTN_USAGE_PROGRESS
	"      --exact           the plain path even when no head step is printed:\n"
	"                        the very bits --print all shows\n"
	"      --dtype T         f64 (default) or f32: the inputs, weights and dO as\n"
	"                        float32, the gradients written as float32 (.npy <f4);\n"
	"                        prints the gradients only (no step, --exact, --explain)\n"
	"\n"
	"Output:\n"
	"  -p, --print LIST      comma-separated steps (their JSON keys, any case):\n"
	"                        grad_output, dconcat, the heads' P, O, dO, dV, dP, D,\n"
	"                        dS, dscaled, dscores, dQ, dK; dq_rot, dk_rot, dQ, dK,\n"
	"                        dV; dX, dX_kv, dX_k, dX_v, dW_Q, dW_K, dW_V, dW_O,\n"
	"                        db_Q, db_K, db_V, db_O, dsinks; heads (every head\n"
	"                        step), all.  Default: the gradients of the inputs,\n"
	"                        weights, biases and sinks\n"
	"  -f, --format FMT      text, json, csv, markdown, npy or npz; default from -o's\n"
	"                        name as forward's\n"
	"      --compress        npz: each member deflated, as np.savez_compressed\n"
	"                        writes them (smaller, slower to write and read)\n"
	ATTN_USAGE_JSON
	"      --precision N     significant digits in text and markdown (default 6)\n"
	ATTN_USAGE_FIT
	"      --full            every entry: in text and markdown a matrix of more\n"
	"                        than 1000 is otherwise cut to its first and last 3\n"
	"                        rows and columns, as NumPy prints it\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well); a\n"
	"                        directory gets one file per matrix: dX.csv,\n"
	"                        head1_dS.csv, ... (csv, npy or json)\n"
	"      --explain         the backward pass told step by step: each formula and\n"
	"                        its matrix\n"
	"      --cell Q,K        dS[Q][K] worked by hand in each head, alone (after\n"
	"                        --print's steps), or in --explain's walk-through\n"
	"                        (numbers from 1, or tokens)\n"
	"      --sequence N      with a batch: sequence N alone\n"
	ATTN_USAGE_HELP
	ATTN_USAGE_EXIT;

/* What 'mha backward' takes from the command line. */
struct backward_request {
	const char *hint;
	const struct emit *emit;
	const char *print;   /* --print as given, or NULL */
	int explain;         /* --explain (--cell: the problem's cell) */
	int has_cell;
	int cell_alone;      /* --cell without --explain: dS[Q][K] alone, after --print's */
	size_t sequence;     /* --sequence N, or 0 */
	int print_all;
	unsigned long long steps; /* set by backward_check: the steps asked for */
	int f32;             /* --dtype f32: the gradients alone, as floats */
};

/* ---- the steps ------------------------------------------------------------ */

/* --print's steps, or the defaults (run/backward.c reads the names) */
static int backward_check(struct backward_request *r, const struct problem_spec *s)
{
	const struct backward_ask ask = { .hint = r->hint, .print = r->print, .explain = r->explain,
					  .f32 = r->f32 };

	return backward_steps_asked(&ask, s, &r->steps, &r->print_all);
}

static int is_per_head(int s)
{
	return grad_steps[s].head_stage >= 0;
}

/* could a run write name into -o DIR/: meta.json, KEY.ext, headN_KEY.ext */
static int backward_may_write(const struct attn_options *o, const char *name)
{
	const char *ext = emit_dir_ext(o->emit.format);
	char buf[256];

	if (!strcmp(name, "meta.json"))
		return 1;
	for (int s = 0; s < GS_COUNT; s++) {
		const char *key = step_key(&grad_steps[s]);
		const char *p = name;

		if (!strcmp(name, step_file_name(buf, sizeof(buf), key, 0, 0, ext)))
			return 1;
		if (!is_per_head(s) || strncmp(p, "head", 4))
			continue;
		p += 4;
		if (*p < '1' || *p > '9')
			continue;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p == '_' && !strcmp(p + 1, step_file_name(buf, sizeof(buf), key, 0, 0, ext)))
			return 1;
	}
	return 0;
}

/* ---- the command ---------------------------------------------------------- */

/* the run (run/backward.c), its steps written as asked */
static int backward_run(struct problem *p, const struct backward_request *r)
{
	const struct backward_ask ask = { .hint = r->hint, .print = r->print, .explain = r->explain,
					  .has_cell = r->has_cell, .sequence = r->sequence,
					  .f32 = r->f32 };
	struct backward_run br;
	int rc = backward_steps(&br, p, &ask, r->steps) ? EXIT_DATA : EXIT_OK;
	const size_t batch = r->sequence ? 0 : p->batch;

	if (rc == EXIT_OK && (r->explain || r->cell_alone)) {
		const struct explain_ask ea = { .cell = r->has_cell ? p->cell : NULL,
						.cell_alone = r->cell_alone,
						.printed = r->print ? br.lists : NULL };

		if (emit_explain_backward(r->emit, br.lists, batch, br.keep, &p->labels, &ea))
			rc = EXIT_DATA;
	} else if (rc == EXIT_OK) {
		const struct run_meta meta = { .f = &br.facts, .rep = &br.rep, .f32 = r->f32,
					       .batch = r->sequence ? p->batch_read : p->batch,
					       .sequence = r->sequence };

		if (emit_items(r->emit, br.lists, batch, &p->labels, &meta))
			rc = EXIT_DATA;
	}
	backward_steps_free(&br);
	return rc;
}

/* --print is read by the check, which knows --softcap and --rope */
static int backward_print(struct attn_options *o, const char *arg)
{
	(void)o;
	(void)arg;
	return 0;
}

/* The output's name and format, then backward's own steps; the request
 * kept for the run (o->own). */
static int backward_check_options(struct attn_options *o)
{
	const char *hint = o->cmd->name;
	struct backward_request *r = o->own;
	char names[160]; /* the formats it writes, for messages */

	*r = (struct backward_request){ .hint = hint, .emit = &o->emit, .print = o->print_arg,
					.explain = o->explain, .has_cell = o->spec.cell != NULL,
					.cell_alone = o->spec.cell && !o->explain,
					.sequence = o->sequence, .f32 = o->f32 };
	if (!o->format_given && o->emit.output && !emit_known_name(o->emit.output))
		return usage_error(hint, "-o '%s': mha writes .json, .csv, .npy, .npz, .md and .txt "
				   "files (or text under a name with no extension); add --format to "
				   "write another name", o->emit.output);
	if (!o->format_given && o->emit.output)
		o->emit.format = emit_format_of_output(o->emit.output);
	if (o->emit.format == FORMAT_HEATMAP || o->emit.format == FORMAT_SVG)
		return usage_error(hint, "mha backward writes %s, not a heatmap",
				   emit_format_list(0, names, sizeof(names)));
	if (o->emit.compress && o->emit.format != FORMAT_NPZ)
		return usage_error(hint, ATTN_COMPRESS_NEEDS_NPZ);
	if (o->emit.bare_nonfinite && o->emit.format != FORMAT_JSON)
		return usage_error(hint, ATTN_NONFINITE_NEEDS_JSON);
	if (attn_refuse_cut(o))
		return -1;
	if (o->range_given || o->emit.head || o->emit.pool || o->color_given)
		return usage_error(hint, "%s draws pictures, and mha backward writes %s",
				   o->range_given ? "--range" : o->emit.head ? "--head" : o->emit.pool
				   ? "--pool" : "--color", emit_format_list(0, names, sizeof(names)));
	if (o->f32 && o->spec.cfg.exact)
		return usage_error(hint, "--exact is float64's plain path: leave out --dtype f32");
	/* --dtype f32: float32 inputs, weights and dO stay floats (no double copy) */
	o->spec.floats = o->f32 && !o->sequence;
	if (o->f32 && o->explain)
		return usage_error(hint, "--explain tells float64's steps: leave out --dtype f32");
	if (o->explain && o->emit.format != FORMAT_TEXT)
		return usage_error(hint, "--explain writes text: leave out --format");
	if (o->explain && o->print_arg)
		return usage_error(hint, "--explain shows every step: leave out --print");
	if (o->spec.cell && !o->explain && o->emit.format != FORMAT_TEXT)
		return usage_error(hint, "--cell writes text: leave out --format%s",
				   o->format_given ? "" : " and -o's other format");
	if (o->spec.cell && !o->explain && o->f32)
		return usage_error(hint, "--cell works float64's steps by hand: leave out --dtype f32");
	return backward_check(r, &o->spec) ? -1 : 0;
}

static int backward_cmd_run(struct attn_options *o, struct problem *p)
{
	const int rc = attn_pick_sequence(o, p);

	attn_fit_ranges(o, p);
	return rc ? rc : backward_run(p, o->own);
}

const struct attn_command attn_backward = {
	.name = "backward", .usage = backward_usage, .takes = OPT_GRAD,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_DTYPE | OPT_EXACT | OPT_PRINT |
		       OPT_EXPLAIN | OPT_GRAD | OPT_NPZ | OPT_JSON,
	.print = backward_print, .check = backward_check_options, .may_write = backward_may_write,
	.run = backward_cmd_run
};

int cmd_backward(int argc, char **argv)
{
	struct backward_request r = { 0 };

	return attn_main(argc, argv, &attn_backward, &r);
}

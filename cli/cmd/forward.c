/*
 * forward.c: 'mha forward', one multi-head attention from files, with any
 * of its intermediates printed (and 'mha heatmap', the same hooks drawing
 * by default: heatmap.c).
 *
 * The command line, its start-up and the loading are the skeleton's
 * (attention.c); this file holds forward's hooks: --print's steps, how the
 * output options combine, the files a run may write, and the run: the
 * library's mha_forward() with an observer keeping a copy of each step to
 * print (steps.c), emitted (emit.c).
 */
#include "base/cli.h"
#include "cmd/attention.h"
#include "cmd/forward.h"
#include "load/problem.h"
#include "run/forward.h"
#include "run/run.h"
#include "run/steps.h"
#include "write/emit.h"

#include "mha.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_usage[] =
	"usage: mha forward -x FILE [-w FILE] [--kv FILE] [options]\n"
	"       mha forward --q FILE --k FILE --v FILE [-w FILE] [options]\n"
	"\n"
	"Compute multi-head attention and print the output, or any step of it.\n"
	"\n"
	ATTN_USAGE_SHARED
	"Computation:\n"
	"      --dtype T         f64 (default: exact tutorial numbers, every step can be\n"
	"                        printed), f32 (faster; prints x and output only), or\n"
	"                        bf16 or fp16: every step as Hugging Face's eager\n"
	"                        attention computes it in that type (the low-precision\n"
	"                        reference: man mha, LOW PRECISION)\n"
	ATTN_USAGE_RUN
	"      --exact           the plain path even when no step is printed: the\n"
	"                        output then has the very bits --print all shows (the\n"
	"                        fast path agrees with it to rounding)\n"
	"\n"
	"Output:\n"
	"  -p, --print LIST      comma-separated steps to print (default: output):\n"
	"                        " ATTN_USAGE_STEPS "\n"
	"  -f, --format FMT      text, json, csv, markdown, npy, npz (every step in one\n"
	"                        NumPy archive), heatmap (coloured cells in the\n"
	"                        terminal), svg (a picture) or html (an interactive\n"
	"                        page); default: from -o's name, .json .csv .npy .npz\n"
	"                        .md .svg .html .txt, a directory is csv, no extension\n"
	"                        text (another is refused).\n"
	"                        heatmap and svg draw each head's softmax,\n"
	"                        or the one step --print names (scores, scaled,\n"
	"                        softcapped, masked)\n"
	"                        html (-o attn.html): one self-contained page, offline:\n"
	"                        every head's heatmap and token lines, any step, each\n"
	"                        cell worked out on hover or focus as --explain --cell\n"
	"                        does, SVG and PNG saving; --print names the step\n"
	"                        shown first (default softmax)\n"
	ATTN_USAGE_COLOR
	ATTN_USAGE_PICTURE
	ATTN_USAGE_JSON
	"      --precision N     significant digits in text and markdown (default 6)\n"
	ATTN_USAGE_FIT
	"      --full            every entry: in text and markdown a matrix of more\n"
	"                        than 1000 is otherwise cut to its first and last 3\n"
	"                        rows and columns, as NumPy prints it; in a heatmap\n"
	"                        every key its own cell, however wide\n"
	"      --compress        npz: each member deflated, as np.savez_compressed\n"
	"                        writes them (smaller, slower to write and read)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well); a\n"
	"                        directory (an existing one, or a name ending in '/')\n"
	"                        gets one file per matrix: X.csv, head1_scores.csv, ...\n"
	"                        (csv, npy or json)\n"
	"      --explain         the computation told step by step: each formula, its\n"
	"                        shapes and its matrix\n"
	"      --cell Q,K        one entry worked by hand in each head, query Q and\n"
	"                        key K (numbers from 1, or tokens): alone, after\n"
	"                        --print's steps, or in --explain's walk-through\n"
	"      --sequence N      with a batch (3-D inputs): print or explain sequence N\n"
	"                        (from 1) alone, as if it were given by itself\n"
	ATTN_USAGE_HELP
	ATTN_USAGE_EXIT;

/* What the options alone say of the steps: the weights are not read yet, so
 * W_O counts as given. */
static void option_facts(const struct attn_options *o, struct step_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->cfg = &o->spec.cfg;
	f->mask_file = o->spec.mask;
	f->mask_block = o->spec.mask_block;
	f->heads = o->spec.heads;
	f->weights = ~0u;
	f->direct = o->spec.q != NULL;
	f->cross = o->spec.kv != NULL || o->spec.xk != NULL;
	f->apart = o->spec.xk != NULL;
}

/* How forward's options combine, after the checks every command makes. */
int forward_check(struct attn_options *o)
{
	struct problem_spec *s = &o->spec;
	const char *hint = o->cmd->name;
	struct step_facts f;

	if ((o->print & STEP_BIT(STEP_SOFTCAPPED)) && !(s->cfg.softcap > 0))
		return usage_error(hint, "--print softcapped needs --softcap");
	if (!o->print && !o->print_all)
		o->print = STEP_BIT(STEP_OUTPUT);
	if (!o->format_given && o->emit.output && !emit_known_name(o->emit.output))
		return usage_error(hint, "-o '%s': mha writes .json, .csv, .npy, .npz, .md, .svg, .html and .txt "
				   "files (or text under a name with no extension); add --format to "
				   "write another name", o->emit.output);
	if (!o->format_given && o->emit.output)
		o->emit.format = emit_format_of_output(o->emit.output);
	if (!o->format_given && o->cmd->draw && o->emit.format != FORMAT_SVG &&
	    o->emit.format != FORMAT_HTML)
		o->emit.format = FORMAT_HEATMAP;
	if (o->emit.compress && o->emit.format != FORMAT_NPZ)
		return usage_error(hint, ATTN_COMPRESS_NEEDS_NPZ);
	if (o->emit.bare_nonfinite && o->emit.format != FORMAT_JSON)
		return usage_error(hint, ATTN_NONFINITE_NEEDS_JSON);
	if (o->spec.cell && !o->explain) {
		/* the cell alone, or after the steps --print names: every step is kept
		 * for it, the ones printed are picked again in the run */
		if (o->emit.format != FORMAT_TEXT)
			return o->format_given ? usage_error(hint, "--cell writes text: leave out "
							     "--format")
					       : usage_error(hint, "--cell writes text, and -o '%s' "
							     "names another format", o->emit.output);
		if (o->f32)
			return usage_error(hint, "--cell works float64's steps by hand: leave out "
					   "--dtype f32");
		o->cell_alone = 1;
		o->cell_print = o->print_given ? o->print : 0;
		o->cell_print_all = o->print_all;
		option_facts(o, &f);
		o->print = steps_every(&f);
		o->print_all = 0;
		o->every_step = 1;
	}
	if (o->explain) {
		if (o->emit.format != FORMAT_TEXT)
			return usage_error(hint, "--explain writes text: leave out --format");
		if (o->f32)
			return usage_error(hint, "--explain tells float64's steps: leave out --dtype "
					   "f32");
		if (o->print != STEP_BIT(STEP_OUTPUT) || o->print_all)
			return usage_error(hint, "--explain shows every step: leave out --print");
		/* every step; the mask only when there is one */
		option_facts(o, &f);
		o->print = steps_every(&f);
		o->every_step = 1;
	}
	if (o->emit.format == FORMAT_HTML) {
		/* the page holds every step; --print names the one it shows first */
		const unsigned drawable = steps_flagged(STEP_DRAWABLE);

		if (o->print == STEP_BIT(STEP_OUTPUT) && !o->print_all && !o->print_given)
			o->print = STEP_BIT(STEP_SOFTMAX);
		if (o->print_all || (o->print & ~drawable) || (o->print & (o->print - 1)))
			return usage_error(hint, "a page holds every step and shows one first: "
					   "--print scores, scaled, softcapped, masked or softmax "
					   "(the default)");
		o->emit.heat_step = 0;
		while (!(o->print & STEP_BIT(o->emit.heat_step)))
			o->emit.heat_step++;
		/* f32 keeps no steps: the page shows float64's, and says so */
		o->emit.html_f32 = o->f32;
		o->f32 = 0;
		option_facts(o, &f);
		o->print = steps_every(&f);
		o->every_step = 1;
	}
	if (o->emit.format == FORMAT_HEATMAP || o->emit.format == FORMAT_SVG) {
		/* one (n_q, n_kv) step is drawn, softmax unless --print names another */
		const unsigned drawable = steps_flagged(STEP_DRAWABLE);

		if (o->print == STEP_BIT(STEP_OUTPUT) && !o->print_all && !o->print_given)
			o->print = STEP_BIT(STEP_SOFTMAX);
		if (o->print_all || (o->print & ~drawable) || (o->print & (o->print - 1)))
			return usage_error(hint, "a heatmap draws one step: --print scores, scaled, "
					   "softcapped, masked or softmax (the default)");
		if (o->f32)
			return usage_error(hint, "a heatmap is drawn from float64's steps: leave "
					   "out --dtype f32");
		o->emit.heat_step = 0;
		while (!(o->print & STEP_BIT(o->emit.heat_step)))
			o->emit.heat_step++;
		/* the mask too, so that blocked cells can be told apart */
		o->print |= STEP_BIT(STEP_MASK);
	} else if (attn_refuse_picture_options(o)) {
		return -1;
	}
	if (attn_refuse_cut(o))
		return -1;
	if (o->f32 && s->cfg.exact)
		return usage_error(hint, "--exact is float64's plain path: leave out --dtype f32");
	if (o->f32 && (o->print_all || (o->print & ~steps_flagged(STEP_F32))))
		return usage_error(hint, "--dtype f32 prints x and output only: the steps "
				   "are shown in float64 (leave out --dtype)");
	/* --dtype f32 printing no step but the output: float32 inputs stay
	 * floats, and .npy and .npz get the output's floats as computed */
	s->floats = o->f32 && !o->print_all && !(o->print & STEP_BIT(STEP_X)) && !o->sequence;
	s->float_out = s->floats && (o->emit.format == FORMAT_NPY || o->emit.format == FORMAT_NPZ);
	/* the forward pass only reads its inputs: native .npy files mapped */
	s->map = 1;
	return 0;
}


/* -o DIR/: the steps printed, their heads' files, meta.json */
int forward_may_write(const struct attn_options *o, const char *name)
{
	struct step_facts f;

	option_facts(o, &f);
	return !strcmp(name, "meta.json") ||
	       steps_may_write(name, steps_print_set(o->print, o->print_all, &f), o->spec.heads,
			       emit_dir_ext(o->emit.format));
}

int forward_run(struct attn_options *o, struct problem *pb)
{
	struct forward_run fr;
	const struct forward_ask ask = { .hint = o->cmd->name, .print = o->print,
					 .print_all = o->print_all, .every = o->every_step,
					 .f32 = o->f32, .cell = o->cell_print || o->cell_print_all,
					 .cell_print = o->cell_print, .cell_print_all = o->cell_print_all };
	int rc = attn_pick_sequence(o, pb);

	if (rc)
		return rc;
	attn_fit_ranges(o, pb);
	rc = forward_steps(&fr, pb, &ask);
	if (rc)
		goto done;
	rc = EXIT_DATA;
	{
		/* --sequence N: that one, kept alone, printed as a run of its own */
		const size_t batch = o->sequence ? 0 : pb->batch;

		const struct run_meta meta = { .f = &fr.f, .rep = &fr.rep, .f32 = o->f32,
					       .batch = o->sequence ? pb->batch_read : pb->batch,
					       .sequence = o->sequence };

		if (o->explain || o->cell_alone) {
			const struct explain_ask ask_x = { .cell = o->spec.cell ? pb->cell : NULL,
							   .cell_alone = o->cell_alone,
							   .printed = fr.printed, .meta = &meta };

			if (emit_explain(&o->emit, fr.lists, batch, fr.fs, &pb->labels, &ask_x))
				goto done;
		} else if (o->emit.format == FORMAT_HTML) {
			if (emit_html(&o->emit, fr.lists, batch, fr.fs, &pb->labels, &meta))
				goto done;
		} else {
			if (emit_items(&o->emit, fr.lists, batch, &pb->labels, &meta))
				goto done;
		}
	}
	rc = EXIT_OK;
done:
	forward_steps_free(&fr);
	return rc;
}

const struct attn_command attn_forward = {
	.name = "forward", .usage = forward_usage,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_DTYPE | OPT_EXACT | OPT_PRINT |
		       OPT_EXPLAIN | OPT_PICTURE | OPT_NPZ | OPT_JSON,
	FORWARD_HOOKS
};

int forward_check_args(int argc, char **argv)
{
	return attn_check_args(argc, argv, &attn_forward, NULL);
}

int cmd_forward(int argc, char **argv)
{
	return attn_main(argc, argv, &attn_forward, NULL);
}

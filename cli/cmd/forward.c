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
	"                        printed) or f32 (faster; prints x and output only)\n"
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
	struct step_results *res = NULL;
	struct steps_batch keep;
	struct step_facts f, *fs = NULL;
	mha_config *cfgs = NULL;
	mha_observer obs = MHA_INIT(mha_observer);
	mha_report rep = MHA_INIT(mha_report);
	matrix out = { 0 }, *x = NULL, *outs = NULL;
	struct step_items *lists = NULL, *printed = NULL;
	size_t B = 0;
	unsigned p;
	int rc = attn_pick_sequence(o, pb);

	if (rc)
		return rc;
	attn_fit_ranges(o, pb);
	/* a norm comes from the options or the checkpoint's family: known now */
	if ((o->print & (STEP_BIT(STEP_Q_NORM) | STEP_BIT(STEP_K_NORM))) && !pb->cfg.norm.kind)
		return usage_error(o->cmd->name, "--print %s needs a q/k norm: --norm, --q-norm and "
				   "--k-norm, or a checkpoint whose family normalises",
				   o->print & STEP_BIT(STEP_Q_NORM) ? "q_norm" : "k_norm");
	/* latent attention's steps, each where the run makes it (known now, too) */
	for (int s = STEP_C_Q; s <= STEP_K_NOPE; s++)
		if ((o->print & STEP_BIT(s)) && !o->print_all && !o->every_step &&
		    !step_exists(&steps[s], &(struct step_facts){ .cfg = &pb->cfg }))
			return usage_error(o->cmd->name, "--print %s needs multi-head latent attention%s",
					   steps[s].name, !pb->cfg.mla.on ? " (--kv-b-proj and the rest)"
					   : steps[s].when == WHEN_MLA_Q ? " with --q-a-proj"
					   : steps[s].when == WHEN_MLA_ROPE ? " with --rope"
					   : " in its expanded form (not --absorb)");
	if ((o->print & (STEP_BIT(STEP_Q_ROT) | STEP_BIT(STEP_K_ROT))) && !o->print_all &&
	    !o->every_step && pb->cfg.mla.on)
		return usage_error(o->cmd->name, "--print %s: multi-head latent attention turns only "
				   "part of each head: print q_pe_rot and k_pe_rot",
				   o->print & STEP_BIT(STEP_Q_ROT) ? "q_rot" : "k_rot");
	rc = EXIT_DATA;
	/* the steps to print, and what the observer keeps for them: each sequence's */
	B = problem_sequences(pb);
	res = calloc(B, sizeof(*res));
	lists = calloc(B, sizeof(*lists));
	x = calloc(B, sizeof(*x));
	outs = calloc(B, sizeof(*outs));
	fs = calloc(B, sizeof(*fs));
	cfgs = calloc(B, sizeof(*cfgs));
	printed = o->cell_print || o->cell_print_all ? calloc(B, sizeof(*printed)) : NULL;
	if (!res || !lists || !x || !outs || !fs || !cfgs ||
	    (!printed && (o->cell_print || o->cell_print_all))) {
		error("out of memory");
		goto done;
	}
	problem_facts(pb, 0, &f);
	p = o->every_step ? steps_every(&f) : steps_print_set(o->print, o->print_all, &f);
	for (size_t b = 0; b < B; b++) {
		res[b].heads = pb->d.heads;
		res[b].mask_per_head = pb->cfg.mask.per_head || pb->cfg.alibi.on; /* ALiBi: a mask per head */
	}
	keep = (struct steps_batch){ .res = res };
	obs = (mha_observer){ .size = sizeof(mha_observer), .fn = steps_batch_keep, .ctx = &keep,
			      .sequence = steps_batch_sequence, .stages = steps_stages(p, pb->d.heads) };
	if (problem_check_memory(pb, obs.stages, o->f32) ||
	    problem_forward(&out, pb, &obs, o->f32, &rep))
		goto done;
	f.scale = rep.scale;
	for (size_t b = 0; b < B; b++) {
		/* a batch: sequence b's plane of X and of the output, titled with
		 * its own key length */
		x[b] = step_plane(&pb->x, b);
		outs[b] = step_plane(&out, b);
		cfgs[b] = pb->cfg;
		if (pb->cfg.kv_lens) {
			cfgs[b].kv_len = pb->cfg.kv_lens[b];
			cfgs[b].kv_lens = NULL;
		}
		fs[b] = f;
		fs[b].cfg = &cfgs[b];
		if (steps_stack(&res[b]) || steps_collect(&lists[b], &res[b], p, &fs[b], &x[b], &outs[b]))
			goto done;
		/* --cell after --print's steps: those, from every step kept */
		if (printed && steps_collect(&printed[b], &res[b],
					     steps_print_set(o->cell_print, o->cell_print_all, &fs[b]),
					     &fs[b], &x[b], &outs[b]))
			goto done;
	}
	{
		/* --sequence N: that one, kept alone, printed as a run of its own */
		const size_t batch = o->sequence ? 0 : pb->batch;

		const struct run_meta meta = { .f = &f, .rep = &rep, .f32 = o->f32,
					       .batch = o->sequence ? pb->batch_read : pb->batch,
					       .sequence = o->sequence };

		if (o->explain || o->cell_alone) {
			const struct explain_ask ask = { .cell = o->spec.cell ? pb->cell : NULL,
							 .cell_alone = o->cell_alone, .printed = printed,
							 .meta = &meta };

			if (emit_explain(&o->emit, lists, batch, fs, &pb->labels, &ask))
				goto done;
		} else if (o->emit.format == FORMAT_HTML) {
			if (emit_html(&o->emit, lists, batch, fs, &pb->labels, &meta))
				goto done;
		} else {
			if (emit_items(&o->emit, lists, batch, &pb->labels, &meta))
				goto done;
		}
	}
	rc = EXIT_OK;
done:
	for (size_t b = 0; b < B; b++) {
		if (lists)
			steps_items_free(&lists[b]);
		if (printed)
			steps_items_free(&printed[b]);
		if (res)
			steps_results_free(&res[b]);
	}
	free(lists);
	free(printed);
	free(res);
	free(x);
	free(outs);
	free(fs);
	free(cfgs);
	matrix_free(&out);
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

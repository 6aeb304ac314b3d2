/*
 * attention.c: the attention commands' one skeleton (attention.h): the
 * checks every command makes, and the start-up from argv (parsed by
 * options.c) to a loaded problem handed to the command's run.  What a
 * command prints, and how its own options combine, are its hooks'.
 */
#include "cmd/attention.h"

#include "util/budget.h"
#include "base/progress.h"
#include "base/cli.h"
#include "util/files.h"
#include "load/load.h"
#include "load/model.h"
#include "load/problem.h"
#include "load/shapes.h"
#include "read/checkpoint.h"
#include "run/steps.h"
#include "write/write.h"

#include "mha.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the checks every command makes ------------------------------------ */

/* Which inputs go together: everything here is known before reading a file. */
static int check_options(struct attn_options *o)
{
	struct problem_spec *s = &o->spec;
	const char *hint = o->cmd->name;
	const int direct = s->q || s->k || s->v;

	if (!s->x && !direct)
		return usage_error(hint, "no input: give -x FILE, or --q, --k and --v");
	if (s->x && direct)
		return usage_error(hint, "-x and --q/%s/--v cannot be used together",
				   s->k_transposed ? "--kt" : "--k");
	if (direct && !(s->q && s->k && s->v))
		return usage_error(hint, "--q, --k (or --kt) and --v go together: missing %s",
				   !s->q ? "--q" : !s->k ? "--k or --kt" : "--v");
	if (direct && s->kv)
		return usage_error(hint, "--kv cannot be used with --q/--k/--v (K and V are "
				   "given)");
	if (!s->xk != !s->xv)
		return usage_error(hint, "--xk and --xv go together: missing %s",
				   s->xk ? "--xv" : "--xk");
	if (s->xk && direct)
		return usage_error(hint, "--xk/--xv cannot be used with --q/--k/--v (K and V are "
				   "given)");
	if (s->xk && s->kv)
		return usage_error(hint, "--xk/--xv and --kv cannot be used together (--kv is "
				   "both at once)");
	for (int i = WQ; i < N_WEIGHTS; i++)
		if (direct && s->one[i] && i != WO && i != BO)
			return usage_error(hint, "--%c%c cannot be used with --q/--k/--v (they are "
					   "given directly); only --wo and --bo can",
					   i >= BQ ? 'b' : 'w', "qkvoqkvo"[i]);
	if (!s->cfg.rope.mode) {
		/* the rotary options are settings of --rope */
		const char *const alone = s->cfg.rope.theta ? "--rope-theta" : s->cfg.rope.dim ?
			"--rope-dim" : s->positions ? "--positions" : s->rope_cos ? "--rope-cos" :
			s->rope_sin ? "--rope-sin" : s->rope_scaling ? "--rope-scaling" : NULL;

		if (alone)
			return usage_error(hint, "%s needs --rope half or --rope interleaved", alone);
		if (o->print & (STEP_BIT(STEP_Q_ROT) | STEP_BIT(STEP_K_ROT)))
			return usage_error(hint, "--print %s needs --rope",
					   o->print & STEP_BIT(STEP_Q_ROT) ? "q_rot" : "k_rot");
	}
	if (!s->q_norm != !s->k_norm)
		return usage_error(hint, "%s without %s: give each side's weights, or neither (a "
				   "norm without weights: --norm)", s->q_norm ? "--q-norm" : "--k-norm",
				   s->q_norm ? "--k-norm" : "--q-norm");
	if (s->q_norm && (s->given & GIVEN_NORM) && !s->cfg.norm.kind)
		return usage_error(hint, "--q-norm and --k-norm give a q/k norm's weights, but --norm "
				   "none leaves the norm out");
	if ((s->given & (GIVEN_NORM_EPS | GIVEN_NORM_OVER)) && !(s->given & GIVEN_NORM) &&
	    !s->q_norm && !s->w)
		return usage_error(hint, "%s sets a q/k norm: give --norm (or --q-norm and --k-norm)",
				   s->given & GIVEN_NORM_EPS ? "--norm-eps" : "--norm-over");
	if (o->mask_bool && !s->mask)
		return usage_error(hint, "--mask-bool says what a --mask file's booleans mean: "
				   "give --mask FILE");
	if ((s->has_layer || s->prefix) && !s->w)
		return usage_error(hint, "%s picks a module of a checkpoint: give -w",
				   s->has_layer ? "--layer" : "--prefix");
	if ((s->given & GIVEN_BIASES) && !(s->w && ckpt_is_checkpoint(s->w)))
		return usage_error(hint, "--biases says which biases a checkpoint's attention adds: "
				   "give -w a checkpoint (other weights add the biases they hold)");
	if (!s->rope_cos != !s->rope_sin)
		return usage_error(hint, "--rope-cos and --rope-sin go together: missing %s",
				   s->rope_cos ? "--rope-sin" : "--rope-cos");
	if (s->rope_cos && s->cfg.rope.theta)
		return usage_error(hint, "--rope-theta cannot be used with --rope-cos/--rope-sin "
				   "(the tables give the angles)");
	{
		const char *const files[] = { s->x, s->kv, s->xk, s->xv, s->w, s->q, s->k, s->v,
					      s->mask, s->positions, s->rope_cos, s->rope_sin, s->config,
					      s->grad_output, s->sinks, s->alibi_slopes, s->q_norm,
					      s->k_norm };
		int stdin_uses = 0;

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			stdin_uses += files[i] && !strcmp(files[i], "-");
		for (int i = 0; i < N_WEIGHTS; i++)
			stdin_uses += s->one[i] && !strcmp(s->one[i], "-");
		if (stdin_uses > 1)
			return usage_error(hint, "only one input can be '-' (standard input)");
	}
	if (!s->kv_heads)
		s->kv_heads = s->heads;
	if (s->kv_heads > s->heads || s->heads % s->kv_heads)
		return usage_error(hint, "--kv-heads %zu does not divide --heads %zu",
				   s->kv_heads, s->heads);
	o->f32 = o->dtype == 1;
	if (o->dtype >= 2) {
		/* bf16, fp16: the low-precision reference, a forward of its own */
		const char *t = o->dtype == 2 ? "bf16" : "fp16";

		if (!strcmp(hint, "compare"))
			return o->cmd->check(o); /* their numbers' type: compare.c */
		if (strcmp(hint, "forward"))
			return usage_error(hint, "--dtype %s is mha forward's (the low-precision "
					   "reference) and compare's: mha %s takes f64 or f32", t, hint);
		if (o->explain || s->cell)
			return usage_error(hint, "--%s works float64's steps by hand: leave out "
					   "--dtype %s", o->explain ? "explain" : "cell", t);
		if (s->cfg.exact)
			return usage_error(hint, "--exact is float64's plain path: --dtype %s has a "
					   "path of its own", t);
		s->cfg.precision = o->dtype == 2 ? MHA_PRECISION_BF16 : MHA_PRECISION_FP16;
	}
	return o->cmd->check(o);
}

int attn_refuse_cut(const struct attn_options *o)
{
	const char *opt = o->spec.rows ? "--rows" : "--cols";
	const out_format f = o->emit.format;

	if (!o->spec.rows && !o->spec.cols)
		return 0;
	if (o->explain || o->spec.cell)
		return usage_error(o->cmd->name, "%s cuts printed and drawn matrices; %s works on "
				   "whole ones: leave one out", opt, o->explain ? "--explain" : "--cell");
	if ((f != FORMAT_TEXT && f != FORMAT_MARKDOWN && f != FORMAT_HEATMAP && f != FORMAT_SVG &&
	     f != FORMAT_HTML) || (o->emit.output && strcmp(o->emit.output, "-") &&
				   emit_is_dir(o->emit.output)))
		return usage_error(o->cmd->name, "%s cuts what people read (text, Markdown, "
				   "heatmaps, SVG, the page); JSON, CSV, .npy and .npz are never "
				   "cut: leave it out, and slice them in NumPy or jq", opt);
	if (f == FORMAT_HTML && o->spec.cols && !o->emit.pool)
		return usage_error(o->cmd->name, "--cols: the page works each cell's softmax by hand "
				   "over every key of its row: keep whole rows (--rows), draw an "
				   "overview (--pool max), or an SVG of the keys you want");
	return 0;
}

void attn_fit_ranges(struct attn_options *o, const struct problem *pb)
{
	struct fit_ask *e = &o->emit.fit;

	e->n_q = pb->d.n_q;
	e->n_kv = pb->d.n_kv;
	memcpy(e->rows, pb->rows, sizeof(e->rows));
	memcpy(e->cols, pb->cols, sizeof(e->cols));
	e->cut = e->rows[1] - e->rows[0] < e->n_q || e->cols[1] - e->cols[0] < e->n_kv;
}

int attn_refuse_picture_options(const struct attn_options *o)
{
	if (o->emit.pool && o->emit.format != FORMAT_HEATMAP && o->emit.format != FORMAT_SVG &&
	    o->emit.format != FORMAT_HTML)
		return usage_error(o->cmd->name, "--pool draws an overview of a heatmap, an SVG or "
				   "the page: add --format heatmap, svg or html");
	if ((o->range_given || o->emit.head) && o->emit.format != FORMAT_HTML &&
	    o->emit.format != FORMAT_HEATMAP && o->emit.format != FORMAT_SVG) {
		/* --head 2 typed for --heads 2 */
		if (o->emit.head > 1 && !o->range_given && !(o->spec.given & GIVEN_HEADS))
			return usage_error(o->cmd->name, "--head %zu draws head %zu alone in a picture "
					   "(--format heatmap, svg or html); for %zu heads, the "
					   "option is --heads %zu", o->emit.head, o->emit.head,
					   o->emit.head, o->emit.head);
		return usage_error(o->cmd->name, "%s is for pictures: add --format heatmap, svg or html",
				   o->range_given ? "--range" : "--head");
	}
	return 0;
}

int attn_pick_sequence(const struct attn_options *o, struct problem *pb)
{
	const char *hint = o->cmd->name;

	if (o->sequence && !pb->batch)
		return usage_error(hint, "--sequence %zu picks a sequence of a batch, but the inputs "
				   "are 2-D (one sequence)", o->sequence);
	if (o->sequence > pb->batch)
		return usage_error(hint, "--sequence %zu but the batch holds %zu sequence%s",
				   o->sequence, pb->batch, pb->batch == 1 ? "" : "s");
	if (o->emit.head > pb->d.heads)
		return usage_error(hint, "--head %zu but there %s %zu head%s%s", o->emit.head,
				   pb->d.heads == 1 ? "is" : "are", pb->d.heads, pb->d.heads == 1 ? "" : "s",
				   o->spec.given & GIVEN_HEADS ? ""
				   : " (--heads H splits the layer into H heads)");
	if (o->emit.format == FORMAT_SVG && pb->batch > 1 && !o->sequence)
		return usage_error(hint, "an SVG draws one sequence, and the batch holds %zu: add "
				   "--sequence N", pb->batch);
	/* --sequence N: that one alone, as if it had been given by itself */
	if (o->sequence && problem_keep_sequence(pb, o->sequence - 1))
		return EXIT_DATA;
	return 0;
}

/* ---- no output over an input ------------------------------------------ */

static int may_write(const char *name, void *ctx)
{
	const struct attn_options *o = ctx;

	return o->cmd->may_write(o, name);
}

/*
 * -o naming one of the inputs, by any name: refused before anything is
 * read, by device and inode.  -o DIR/ is checked for each file in DIR the
 * run may write.  0, or -1 said.
 */
static int refuse_output_over_input(const struct attn_options *o)
{
	if (!o->emit.output || !strcmp(o->emit.output, "-"))
		return 0;
	if (problem_note_inputs(&o->spec))
		return -1;
	return emit_is_dir(o->emit.output)
		? files_refuse_output_in_dir(o->emit.output, may_write, (void *)o)
		: files_refuse_output(o->emit.output);
}

/* ---- the command ------------------------------------------------------- */

int attn_check_args(int argc, char **argv, const struct attn_command *cmd, void *own)
{
	struct attn_options o = { .own = own };
	int rc;

	switch (attn_parse(argc, argv, &o, cmd)) {
	case 1: rc = 1; break;
	case 0: rc = (cmd->refuse && cmd->refuse(&o)) || check_options(&o) ? EXIT_USAGE : 0; break;
	default: rc = EXIT_USAGE; break;
	}
	free(o.kv_lens);
	return rc;
}

int attn_main(int argc, char **argv, const struct attn_command *cmd, void *own)
{
	struct attn_options o = { .own = own };
	struct problem pb;
	int rc;

	memset(&pb, 0, sizeof(pb));
	switch (attn_parse(argc, argv, &o, cmd)) {
	case 1: rc = EXIT_OK; goto done;
	case 0: break;
	default: rc = EXIT_USAGE; goto done;
	}
	budget_init(o.max_memory);
	json_bare_nonfinite(o.emit.bare_nonfinite);
	progress_mode((enum progress_mode)o.progress);
	mhe_set_progress_handler(progress_listener(), NULL);
	rc = EXIT_USAGE;
	if (cmd->refuse && cmd->refuse(&o))
		goto done;
	/* config.json's settings under the command line's, before they are
	 * checked: a bad file is bad data */
	rc = EXIT_DATA;
	if (model_config(&o.spec))
		goto done;
	rc = EXIT_USAGE;
	if (check_options(&o) || refuse_output_over_input(&o))
		goto done;
	/* one limit from the first byte read to the last written */
	budget_init(o.max_memory);
	rc = problem_load(&pb, &o.spec);
	if (rc) {
		rc = cmd->load_failed ? cmd->load_failed : rc;
		goto done;
	}
	rc = cmd->run(&o, &pb);
done:
	problem_free(&pb);
	free(o.kv_lens);
	return rc;
}

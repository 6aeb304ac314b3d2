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
#include "run/grads.h"
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

#define GS_BIT(s) (1ull << (s))

/* the library's stage of step s, whole or per head, or -1: a result of the run */
static int grad_stage(int s)
{
	return grad_steps[s].stage >= 0 ? grad_steps[s].stage : grad_steps[s].head_stage;
}

static int is_per_head(int s)
{
	return grad_steps[s].head_stage >= 0;
}

/* every step with that --print name (dQ: the whole and each head's); 0 if none */
static unsigned long long steps_named(const char *name)
{
	unsigned long long bits = 0;

	if (!strcasecmp(name, "all"))
		return ~0ull >> (64 - GS_COUNT);
	for (int s = 0; s < GS_COUNT; s++)
		if (!strcasecmp(name, step_key(&grad_steps[s])) || (!strcasecmp(name, "heads") && is_per_head(s)))
			bits |= GS_BIT(s);
	return bits;
}

/* "grad_output, dconcat, P, …": the --print names, into buf */
static const char *bstep_names(char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int s = 0; s < GS_COUNT && used < size; s++) {
		int n;

		if (s == GS_DQ || s == GS_DK || s == GS_DV)
			continue; /* named with the heads' */
		n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", step_key(&grad_steps[s]));
		used += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

static int backward_check(struct backward_request *r, const struct problem_spec *s)
{
	char known[400];

	r->steps = 0;
	r->print_all = r->explain;
	if (r->print && !r->explain) {
		char *copy = strdup(r->print), *save = NULL;
		int rc = 0;

		if (!copy)
			return error("out of memory");
		bstep_names(known, sizeof(known));
		for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
			const unsigned long long bits = steps_named(tok);
			const char *names[GS_COUNT + 2];

			if (!bits) {
				const char *near;

				for (int k = 0; k < GS_COUNT; k++)
					names[k] = step_key(&grad_steps[k]);
				names[GS_COUNT] = "all";
				names[GS_COUNT + 1] = "heads";
				near = closest_name(tok, names, GS_COUNT + 2);
				if (near)
					usage_error(r->hint, "--print: unknown step '%s': did you mean '%s'?",
						    tok, near);
				else
					usage_error(r->hint, "--print: unknown step '%s' (known: %s, heads, all)",
						    tok, known);
				rc = -1;
			}
			r->steps |= bits;
			r->print_all |= !strcasecmp(tok, "all");
		}
		free(copy);
		if (rc)
			return -1;
		if (!r->steps)
			return usage_error(r->hint, "--print needs at least one step (%s, heads, all)",
					   known), -1;
		if ((r->steps & GS_BIT(GS_DSCALED)) && !r->print_all && !(s->cfg.softcap > 0))
			return usage_error(r->hint, "--print dscaled needs --softcap"), -1;
		if ((r->steps & (GS_BIT(GS_DQ_ROT) | GS_BIT(GS_DK_ROT))) && !r->print_all && !s->cfg.rope.mode)
			return usage_error(r->hint, "--print %s needs --rope",
					   r->steps & GS_BIT(GS_DQ_ROT) ? "dq_rot" : "dk_rot"), -1;
	}
	if (!r->steps && !r->print_all) {
		for (int k = 0; k < GS_COUNT; k++)
			if ((grad_steps[k].flags & STEP_DEFAULT))
				r->steps |= GS_BIT(k);
		/* Q, K and V given: theirs are the inputs' gradients */
		if (s->q)
			r->steps |= GS_BIT(GS_DQ) | GS_BIT(GS_DK) | GS_BIT(GS_DV);
	}
	if (r->print_all)
		r->steps = ~0ull >> (64 - GS_COUNT);
	if (r->f32)
		/* float32 keeps no step: only the gradients themselves (Q, K, V's given) */
		for (int k = 0; k < GS_COUNT; k++)
			if ((r->steps & GS_BIT(k)) && grad_stage(k) >= 0 &&
			    !(s->q && (k == GS_DQ || k == GS_DK || k == GS_DV)))
				return usage_error(r->hint, "--dtype f32 prints the gradients only: "
						   "%s is shown in float64 (leave out --dtype)",
						   r->print_all ? "--print all" : step_key(&grad_steps[k])), -1;
	return 0;
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

/* ---- the run -------------------------------------------------------------- */

/* Where the run's inputs come from, and which steps it has. */
struct bfacts {
	struct step_facts sf; /* what step_exists reads */
	int direct, kv, apart; /* Q, K, V given; --kv; --xk and --xv */
};

static int run_has(const struct bfacts *f, int s)
{
	return step_exists(&grad_steps[s], &f->sf);
}

/* ---- the command ---------------------------------------------------------- */

static int backward_run(struct problem *p, const struct backward_request *r)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p), G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t out_cols = mha_output_cols(d, weights_has(&p->w, WO));
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	struct bfacts f = { .direct = p->direct, .kv = p->spec.kv != NULL,
			    .apart = p->spec.xk != NULL };
	struct run_grads gr = { 0 };
	struct step_results *keep = NULL;
	struct step_items *lists = NULL;
	matrix *res = NULL, dout = { 0 };
	struct steps_batch keeper;
	mha_grad_observer obs;
	mha_report rep = MHA_INIT(mha_report);
	struct step_facts facts;
	mha_status st;
	mha_stages wanted = 0;
	unsigned long long shown = 0; /* those asked for that the run has */
	int rc = EXIT_DATA;

	problem_facts(p, 0, &f.sf);
	/* the stages the steps asked for need */
	for (int s = 0; s < GS_COUNT; s++)
		if ((r->steps & GS_BIT(s)) && grad_stage(s) >= 0 && run_has(&f, s))
			wanted |= MHA_STAGE_SET(grad_stage(s));
	if (r->explain || r->has_cell)
		wanted |= MHA_STAGE_SET(MHA_GRAD_HEAD_P) | MHA_STAGE_SET(MHA_GRAD_HEAD_O) |
			  MHA_STAGE_SET(MHA_GRAD_HEAD_DO) | MHA_STAGE_SET(MHA_GRAD_HEAD_DP) |
			  MHA_STAGE_SET(MHA_GRAD_HEAD_D) | MHA_STAGE_SET(MHA_GRAD_HEAD_DS);
	if (p->spec.grad_output && run_grad_output(&dout, p, r->sequence, out_cols))
		goto done;
	{
		/* the library's scratch, with the ones, and the observer's copies, beside what is held */
		const size_t per = mha_backward_memory_stages(d, &p->cfg, wanted);
		size_t copies = 0, need;
		struct run_need n = { .who = "this run",
				      .advice = "print fewer steps, or raise --max-memory" };

		/* each watched stage at most (n_q, n_kv) or a whole projection's size,
		 * a head stage once per head; sizes fit (mha_check saw them) */
		for (int s = 0; s < MHA_GRAD_COUNT; s++)
			if (wanted & MHA_STAGE_SET(s)) {
				const int per_head = s >= MHA_GRAD_HEAD_P && s <= MHA_GRAD_HEAD_DK;
				const double big = ((double)d->n_q * (double)d->n_kv +
						    (double)(d->n_q + d->n_kv) * (double)(hk + hv + gk + gv)) *
						   (per_head ? (double)d->heads : 1.0);

				copies = (double)copies + big < (double)(SIZE_MAX / 16) ? copies + (size_t)big
											   : SIZE_MAX / 16;
			}
		need = per == SIZE_MAX || copies > SIZE_MAX / 8 / B ? SIZE_MAX : per + copies * 8 * B +
		       d->n_q * out_cols * 8;
		if (r->f32 && need != SIZE_MAX) {
			/* the floats made here: the inputs, weights and dO, and as many
			 * gradients (sizes fit, as above); the library's float run needs no
			 * more than mha_backward_memory's doubles */
			const double each = (double)B * (double)(d->n_q * d->d_q_in + d->n_kv * d->d_k_in +
								d->n_kv * d->d_v_in) +
					    (double)(d->d_q_in * hk + d->d_k_in * gk + d->d_v_in * gv +
						     hv * d->d_out + hk + gk + gv + d->d_out + d->heads);
			double lat = 0, more;

			for (int i = 0; i < N_LATENT; i++)
				lat += (double)matrix_size(&p->latent[i]);
			more = 4.0 * (2.0 * (each + lat) + (double)B * (double)(d->n_q * out_cols));

			need = more < (double)(SIZE_MAX / 2 - need) ? need + (size_t)more : SIZE_MAX;
		}
		n.bytes[0] = need;
		if (run_check_memory(&n))
			goto done;
	}
	keep = calloc(B, sizeof(*keep));
	lists = calloc(B, sizeof(*lists));
	res = calloc(B * GS_COUNT, sizeof(*res));
	if (!keep || !lists || !res) {
		error("out of memory");
		goto done;
	}
	for (size_t b = 0; b < B; b++)
		keep[b] = (struct step_results){ .table = grad_steps, .n = GS_COUNT, .heads = d->heads,
						 .item_base = 1000, .only_held = 1 };
	keeper = (struct steps_batch){ .res = keep };
	obs = (mha_grad_observer){ .size = sizeof(mha_grad_observer), .fn = steps_batch_keep_grad,
				   .ctx = &keeper, .stages = wanted, .sequence = steps_batch_sequence };
	if (problem_backward(&gr, p, NULL, NULL, NULL, &dout, &obs, r->f32, &rep,
			     &st))
		goto done;
	if (st == MHA_ERR_OBSERVER)
		goto done; /* said */
	if (st == MHA_ERR_RANGE) {
		error("the numbers overflow: Q, K, V, the scores, a head's output or a gradient went "
		      "past the largest %s; scale the inputs%s down",
		      r->f32 ? "float (about 3.4e38)" : "double (about 1.8e308)",
		      p->spec.grad_output ? " or --grad-output" : "");
		goto done;
	}
	if (st != MHA_OK) {
		error("%s", mha_strerror(st));
		goto done;
	}
	if (rep.blocked_rows)
		warning("%zu query row%s (the first: %shead %d, row %zu) %s every key masked: %s "
			"weights, output and gradients are zero", rep.blocked_rows,
			rep.blocked_rows == 1 ? "" : "s", "", rep.first_blocked_head + 1,
			rep.first_blocked_row + 1, rep.blocked_rows == 1 ? "has" : "have",
			rep.blocked_rows == 1 ? "its" : "their");
	problem_facts(p, rep.scale, &facts);
	facts.shared = gr.shared;
	for (int k = 0; k < GS_COUNT; k++)
		if ((r->steps & GS_BIT(k)) && run_has(&f, k))
			shown |= GS_BIT(k);
	for (size_t b = 0; b < B; b++) {
		matrix *rb = &res[b * GS_COUNT];
		const matrix *given[STEP_MAX] = { 0 };

		run_grads_plane(&gr, p, b, rb);
		/* the results; Q, K and V given: theirs are the inputs' gradients */
		for (int i = GS_DX; i < GS_COUNT; i++)
			given[i] = &rb[i];
		for (int i = GS_DQ; f.direct && i <= GS_DV; i++)
			given[i] = &rb[i];
		if (steps_collect_given(&lists[b], &keep[b], shown, &facts, given))
			goto done;
	}
	{
		const size_t batch = r->sequence ? 0 : p->batch;

		if (r->explain || r->cell_alone) {
			const struct explain_ask ask = { .cell = r->has_cell ? p->cell : NULL,
							 .cell_alone = r->cell_alone,
							 .printed = r->print ? lists : NULL };

			if (emit_explain_backward(r->emit, lists, batch, keep, &p->labels, &ask))
				goto done;
		} else {
			const struct run_meta meta = { .f = &facts, .rep = &rep, .f32 = r->f32,
						       .batch = r->sequence ? p->batch_read : p->batch,
						       .sequence = r->sequence };

			if (emit_items(r->emit, lists, batch, &p->labels, &meta))
				goto done;
		}
	}
	rc = EXIT_OK;
done:
	for (size_t b = 0; keep && b < B; b++)
		steps_results_free(&keep[b]);
	for (size_t b = 0; lists && b < B; b++)
		steps_items_free(&lists[b]);
	free(keep);
	free(lists);
	free(res);
	matrix_free(&dout);
	run_grads_free(&gr);
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

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
#include "base/number.h"
#include "base/budget.h"
#include "write/emit.h"
#include "cmd/attention.h"
#include "base/files.h"
#include "read/input.h"
#include "load/problem.h"
#include "run/run.h"
#include "base/text.h"

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
	"      --precision N     significant digits in text and markdown (default 6)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well); a\n"
	"                        directory gets one file per matrix: dX.csv,\n"
	"                        head1_dS.csv, ... (csv, npy or json)\n"
	"      --explain         the backward pass told step by step: each formula and\n"
	"                        its matrix\n"
	"      --cell Q,K        with --explain: dS[Q][K] worked by hand in each head\n"
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

/* The gradients mha_backward writes, as matrices (the budget's). */
struct bgrads {
	matrix dxq, dxk, dxv, dW[4], db[4], dsinks, dnorm[2];
	matrix dlat[N_LATENT];   /* multi-head latent attention's tensors' */
	matrix dX_kv;        /* --kv: dxk + dxv */
};

static void bgrads_free(struct bgrads *g)
{
	matrix_free(&g->dxq);
	matrix_free(&g->dxk);
	matrix_free(&g->dxv);
	matrix_free(&g->dX_kv);
	matrix_free(&g->dsinks);
	matrix_free(&g->dnorm[0]);
	matrix_free(&g->dnorm[1]);
	for (int i = 0; i < N_LATENT; i++)
		matrix_free(&g->dlat[i]);
	for (int i = 0; i < 4; i++) {
		matrix_free(&g->dW[i]);
		matrix_free(&g->db[i]);
	}
}

/* an input's gradient: (B, rows, cols) for a batch, else (rows, cols) */
static int alloc_input(matrix *m, const struct problem *p, size_t rows, size_t cols)
{
	return p->batch ? matrix_alloc(m, 3, p->batch, rows, cols) : matrix_alloc(m, 2, rows, cols, 1);
}

/* --grad-output read and checked against the output's shape: 0, or -1 said */
static int read_grad_output(matrix *g, const struct problem *p, size_t sequence, size_t out_cols)
{
	static const char *const keys[] = { "dO", "grad_output", NULL };
	const char *path = p->spec.grad_output;
	const size_t B = p->batch, read_B = sequence ? p->batch_read : p->batch;
	char shape[64];

	if (read_matrix(g, path, &(read_spec){ "dO", keys, 2, 3, 0 }))
		return -1;
	matrix_shape(g, shape, sizeof(shape));
	if (g->rank == 3 && !read_B)
		return error("%s: --grad-output is %s, but the inputs are one sequence: it takes the "
			     "output's shape, %zux%zu", path_shown(path), shape, p->d.n_q, out_cols);
	if (g->rank == 3 && g->dim[0] != read_B)
		return error("%s: --grad-output holds %zu sequences, but the batch holds %zu",
			     path_shown(path), g->dim[0], read_B);
	if (matrix_rows(g) != p->d.n_q || matrix_cols(g) != out_cols)
		return error("%s: --grad-output is %s, but the output is %zux%zu (n_q x output columns)",
			     path_shown(path), shape, p->d.n_q, out_cols);
	if (g->rank == 3 && sequence) {
		/* --sequence N: that sequence's plane alone */
		matrix one = { 0 };

		if (matrix_alloc(&one, 3, 1, p->d.n_q, out_cols))
			return -1;
		memcpy(one.v, g->v + (sequence - 1) * p->d.n_q * out_cols,
		       p->d.n_q * out_cols * sizeof(double));
		matrix_free(g);
		*g = one;
	} else if (g->rank == 2 && B) {
		/* a 2-D gradient beside a batch: every sequence's */
		matrix all = { 0 };

		if (matrix_alloc(&all, 3, B, p->d.n_q, out_cols))
			return -1;
		for (size_t b = 0; b < B; b++)
			memcpy(all.v + b * p->d.n_q * out_cols, g->v, p->d.n_q * out_cols * sizeof(double));
		matrix_free(g);
		*g = all;
	}
	return 0;
}

/* m (n) += a (n) */
static void add_to(double *m, const double *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		m[i] += a[i];
}

/* ---- --dtype f32 -------------------------------------------------------------- */

/*
 * --dtype f32: the inputs and weights as floats (run_floats_make), dO
 * rounded, the library's mha_backward_f32, the gradients widened back
 * (exactly) into g's arrays.
 */
static mha_status backward_f32(const mha_grads *g, const double *dout, const struct problem *p,
			       const size_t n[19], mha_report *rep)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p);
	const size_t oc = mha_output_cols(d, p->weights.W_O != NULL);
	double *const gd[19] = { g->dxq, g->dxk, g->dxv, g->dW_Q, g->dW_K, g->dW_V,
				 g->dW_O, g->db_Q, g->db_K, g->db_V, g->db_O, g->dsinks,
				 g->dq_norm, g->dk_norm, g->dW_QA, g->dW_KVA, g->dW_KVB,
				 g->dq_a_norm, g->dkv_a_norm };
	struct run_floats f;
	int ok = run_floats_make(&f, p) == 0;
	float *fo = floats_copy(dout, B * d->n_q * oc, &ok), *gf[19];
	mha_status st = MHA_ERR_NOMEM;

	for (int i = 0; i < 19; i++) {
		gf[i] = gd[i] ? malloc((n[i] ? n[i] : 1) * sizeof(float)) : NULL;
		if (gd[i] && !gf[i])
			ok = 0;
	}
	if (ok) {
		const mha_grads_f32 gg = { .size = sizeof(mha_grads_f32), gf[0], gf[1], gf[2], gf[3],
					   gf[4], gf[5], gf[6], gf[7], gf[8], gf[9], gf[10], gf[11],
					   gf[12], gf[13], gf[14], gf[15], gf[16], gf[17], gf[18] };

		st = mha_backward_f32(&gg, fo, d, &f.in, &f.w, &p->cfg, rep);
		for (int i = 0; st == MHA_OK && i < 19; i++)
			for (size_t k = 0; gf[i] && k < n[i]; k++)
				gd[i][k] = gf[i][k];
	}
	run_floats_free(&f);
	for (int i = 0; i < 19; i++)
		free(gf[i]);
	free(fo);
	return st;
}

/* m's entries rounded to float, and marked so for the writers */
static void round_f32(matrix *m)
{
	for (size_t i = 0; m->rank && i < matrix_size(m); i++)
		m->v[i] = (float)m->v[i];
	m->is_f32 = 1;
}

/* ---- the command ---------------------------------------------------------- */

static int backward_run(struct problem *p, const struct backward_request *r)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p), G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t out_cols = mha_output_cols(d, p->weights.W_O != NULL);
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	/* latent attention's W_Q follows q_a_proj's latent when there is one */
	const size_t q_in = p->cfg.mla.on && p->cfg.mla.q_rank ? p->cfg.mla.q_rank : d->d_q_in;
	struct bfacts f = { .direct = p->direct, .kv = p->spec.kv != NULL,
			    .apart = p->spec.xk != NULL };
	struct bgrads gr = { 0 };
	struct step_results *keep = NULL;
	struct step_items *lists = NULL;
	matrix *res = NULL, dout = { 0 };
	struct steps_batch keeper;
	mha_grad_observer obs;
	mha_grads g = { .size = sizeof(mha_grads) };
	mha_report rep = MHA_INIT(mha_report);
	struct step_facts facts;
	mha_status st;
	unsigned wanted = 0;
	unsigned long long shown = 0; /* those asked for that the run has */
	int shared[3] = { 0 }; /* dxq, dxk, dxv: of an input shared by a batch */
	int rc = EXIT_DATA;

	problem_facts(p, 0, &f.sf);
	/* the stages the steps asked for need */
	for (int s = 0; s < GS_COUNT; s++)
		if ((r->steps & GS_BIT(s)) && grad_stage(s) >= 0 && run_has(&f, s))
			wanted |= MHA_STAGE_BIT(grad_stage(s));
	if (r->explain)
		wanted |= MHA_STAGE_BIT(MHA_GRAD_HEAD_P) | MHA_STAGE_BIT(MHA_GRAD_HEAD_O) |
			  MHA_STAGE_BIT(MHA_GRAD_HEAD_DO) | MHA_STAGE_BIT(MHA_GRAD_HEAD_DP) |
			  MHA_STAGE_BIT(MHA_GRAD_HEAD_D) | MHA_STAGE_BIT(MHA_GRAD_HEAD_DS);
	if (p->spec.grad_output && read_grad_output(&dout, p, r->sequence, out_cols))
		goto done;
	{
		/* the library's scratch, with the ones, and the observer's copies, beside what is held */
		const size_t per = mha_backward_memory(d, &p->cfg, wanted);
		size_t copies = 0, need;
		struct run_need n = { .who = "this run",
				      .advice = "print fewer steps, or raise --max-memory" };

		/* each watched stage at most (n_q, n_kv) or a whole projection's size,
		 * a head stage once per head; sizes fit (mha_check saw them) */
		for (int s = 0; s < MHA_GRAD_COUNT; s++)
			if (wanted & MHA_STAGE_BIT(s)) {
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
	/* the gradients */
	if (alloc_input(&gr.dxq, p, d->n_q, d->d_q_in) || alloc_input(&gr.dxk, p, d->n_kv, d->d_k_in) ||
	    alloc_input(&gr.dxv, p, d->n_kv, d->d_v_in) ||
	    (p->weights.W_Q && matrix_alloc(&gr.dW[0], 2, q_in, hk, 1)) ||
	    (p->weights.W_K && matrix_alloc(&gr.dW[1], 2, d->d_k_in, gk, 1)) ||
	    (p->weights.W_V && matrix_alloc(&gr.dW[2], 2, d->d_v_in, gv, 1)) ||
	    (p->weights.W_O && matrix_alloc(&gr.dW[3], 2, hv, d->d_out, 1)) ||
	    (p->weights.b_Q && matrix_alloc(&gr.db[0], 2, 1, hk, 1)) ||
	    (p->weights.b_K && matrix_alloc(&gr.db[1], 2, 1, gk, 1)) ||
	    (p->weights.b_V && matrix_alloc(&gr.db[2], 2, 1, gv, 1)) ||
	    (p->weights.W_O && p->weights.b_O && matrix_alloc(&gr.db[3], 2, 1, d->d_out, 1)) ||
	    (p->cfg.sinks && matrix_alloc(&gr.dsinks, 2, 1, d->heads, 1)) ||
	    (p->cfg.norm.kind && p->cfg.norm.q_weight &&
	     (matrix_alloc_dims(&gr.dnorm[0], p->q_norm.rank, p->q_norm.dim) ||
	      matrix_alloc_dims(&gr.dnorm[1], p->k_norm.rank, p->k_norm.dim))))
		goto done;
	for (int i = 0; i < N_LATENT; i++)
		if (p->latent[i].rank &&
		    matrix_alloc_dims(&gr.dlat[i], p->latent[i].rank, p->latent[i].dim))
			goto done;
	g = (mha_grads){ .size = sizeof(mha_grads),
			 .dxq = gr.dxq.v, .dxk = gr.dxk.v, .dxv = gr.dxv.v, .dW_Q = gr.dW[0].v,
			 .dW_K = gr.dW[1].v, .dW_V = gr.dW[2].v, .dW_O = gr.dW[3].v, .db_Q = gr.db[0].v,
			 .db_K = gr.db[1].v, .db_V = gr.db[2].v, .db_O = gr.db[3].v,
			 .dsinks = gr.dsinks.v, .dq_norm = gr.dnorm[0].v, .dk_norm = gr.dnorm[1].v,
			 .dW_QA = gr.dlat[LAT_Q_A_PROJ].v, .dW_KVA = gr.dlat[LAT_KV_A_PROJ].v,
			 .dW_KVB = gr.dlat[LAT_KV_B_PROJ].v, .dq_a_norm = gr.dlat[LAT_Q_A_NORM].v,
			 .dkv_a_norm = gr.dlat[LAT_KV_A_NORM].v };
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
				   .ctx = &keeper, .wanted = wanted, .sequence = steps_batch_sequence };
	if (r->f32) {
		const size_t n[19] = { matrix_size(&gr.dxq), matrix_size(&gr.dxk), matrix_size(&gr.dxv),
				       matrix_size(&gr.dW[0]), matrix_size(&gr.dW[1]),
				       matrix_size(&gr.dW[2]), matrix_size(&gr.dW[3]),
				       matrix_size(&gr.db[0]), matrix_size(&gr.db[1]),
				       matrix_size(&gr.db[2]), matrix_size(&gr.db[3]),
				       matrix_size(&gr.dsinks), matrix_size(&gr.dnorm[0]),
				       matrix_size(&gr.dnorm[1]), matrix_size(&gr.dlat[LAT_Q_A_PROJ]),
				       matrix_size(&gr.dlat[LAT_KV_A_PROJ]),
				       matrix_size(&gr.dlat[LAT_KV_B_PROJ]),
				       matrix_size(&gr.dlat[LAT_Q_A_NORM]),
				       matrix_size(&gr.dlat[LAT_KV_A_NORM]) };

		st = backward_f32(&g, dout.rank ? dout.v : NULL, p, n, &rep);
	} else {
		st = mha_backward(&g, dout.rank ? dout.v : NULL, d, &p->in, &p->weights, &p->cfg, &obs,
				  &rep);
	}
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
	/* latent attention's values come from the keys' latent: no dxv of its own */
	if (p->cfg.mla.on)
		memset(gr.dxv.v, 0, matrix_size(&gr.dxv) * sizeof(double));
	/* self-attention's X is all three sources; --kv's X_kv both keys and values */
	if (!f.direct && !f.kv && !f.apart) {
		add_to(gr.dxq.v, gr.dxk.v, matrix_size(&gr.dxq));
		add_to(gr.dxq.v, gr.dxv.v, matrix_size(&gr.dxq));
	} else if (f.kv) {
		add_to(gr.dxk.v, gr.dxv.v, matrix_size(&gr.dxk));
	}
	/* an input given 2-D beside a batch is one matrix: its gradient the sequences' sum */
	{
		const int q_src = f.direct ? 4 : 0, k_src = f.direct ? 5 : f.kv ? 1 : f.apart ? 2 : 0;
		const int v_src = f.direct ? 6 : f.kv ? 1 : f.apart ? 3 : 0;
		matrix *const m[3] = { &gr.dxq, &gr.dxk, &gr.dxv };
		const int src[3] = { q_src, k_src, v_src };

		for (int i = 0; i < 3; i++) {
			const size_t n = matrix_size(m[i]) / B;

			if (!p->batch || !(p->shared & (1u << src[i])) || (i && src[i] == 0) ||
			    (i == 2 && f.kv))
				continue;
			for (size_t b = 1; b < B; b++)
				add_to(m[i]->v, m[i]->v + b * n, n);
			shared[i] = 1;
		}
	}
	if (r->f32) {
		/* the sums above made in double: each gradient a float again */
		round_f32(&gr.dxq);
		round_f32(&gr.dxk);
		round_f32(&gr.dxv);
		for (int i = 0; i < 4; i++) {
			round_f32(&gr.dW[i]);
			round_f32(&gr.db[i]);
		}
		round_f32(&gr.dsinks);
		round_f32(&gr.dnorm[0]);
		round_f32(&gr.dnorm[1]);
		for (int i = 0; i < N_LATENT; i++)
			round_f32(&gr.dlat[i]);
	}
	problem_facts(p, rep.scale, &facts);
	facts.shared = shared;
	for (int k = 0; k < GS_COUNT; k++)
		if ((r->steps & GS_BIT(k)) && run_has(&f, k))
			shown |= GS_BIT(k);
	for (size_t b = 0; b < B; b++) {
		matrix *rb = &res[b * GS_COUNT];
		const matrix *given[STEP_MAX] = { 0 };
		/* a shared input's total is plane 0, under every sequence */
		const matrix q = step_plane(&gr.dxq, shared[0] ? 0 : b);
		const matrix k = step_plane(&gr.dxk, shared[1] ? 0 : b);
		const matrix v = step_plane(&gr.dxv, shared[2] ? 0 : b);

		rb[GS_DQ] = q;
		rb[GS_DK] = k;
		rb[GS_DV] = v;
		rb[GS_DX] = q;
		rb[GS_DX_KV] = k;
		rb[GS_DX_K] = k;
		rb[GS_DX_V] = v;
		for (int i = 0; i < 4; i++) {
			rb[GS_DW_Q + i] = gr.dW[i];
			rb[GS_DB_Q + i] = gr.db[i];
		}
		rb[GS_DSINKS] = gr.dsinks;
		rb[GS_DQ_NORM_W] = gr.dnorm[0];
		rb[GS_DK_NORM_W] = gr.dnorm[1];
		for (int i = 0; i < N_LATENT; i++)
			rb[GS_DLATENT + i] = gr.dlat[i];
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

		if (r->explain) {
			if (emit_explain_backward(r->emit, lists, batch, keep, &p->labels,
						  r->has_cell ? p->cell : NULL))
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
	bgrads_free(&gr);
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

	*r = (struct backward_request){ .hint = hint, .emit = &o->emit, .print = o->print_arg,
					.explain = o->explain, .has_cell = o->spec.cell != NULL,
					.sequence = o->sequence, .f32 = o->f32 };
	if (!o->format_given && o->emit.output && !emit_known_name(o->emit.output))
		return usage_error(hint, "-o '%s': mha writes .json, .csv, .npy, .npz, .md and .txt "
				   "files (or text under a name with no extension); add --format to "
				   "write another name", o->emit.output);
	if (!o->format_given && o->emit.output)
		o->emit.format = emit_format_of_output(o->emit.output);
	if (o->emit.format == FORMAT_HEATMAP || o->emit.format == FORMAT_SVG)
		return usage_error(hint, "mha backward writes text, json, csv, markdown, npy or npz, "
				   "not a heatmap");
	if (o->emit.compress && o->emit.format != FORMAT_NPZ)
		return usage_error(hint, ATTN_COMPRESS_NEEDS_NPZ);
	if (o->f32 && o->spec.cfg.exact)
		return usage_error(hint, "--exact is float64's plain path: leave out --dtype f32");
	if (o->f32 && o->explain)
		return usage_error(hint, "--explain tells float64's steps: leave out --dtype f32");
	if (o->explain && o->emit.format != FORMAT_TEXT)
		return usage_error(hint, "--explain writes text: leave out --format");
	if (o->explain && o->print_arg)
		return usage_error(hint, "--explain shows every step: leave out --print");
	return backward_check(r, &o->spec) ? -1 : 0;
}

static int backward_cmd_run(struct attn_options *o, struct problem *p)
{
	const int rc = attn_pick_sequence(o, p);

	return rc ? rc : backward_run(p, o->own);
}

const struct attn_command attn_backward = {
	.name = "backward", .usage = backward_usage, .takes = OPT_GRAD,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_DTYPE | OPT_EXACT | OPT_PRINT |
		       OPT_EXPLAIN | OPT_GRAD | OPT_NPZ,
	.print = backward_print, .check = backward_check_options, .may_write = backward_may_write,
	.run = backward_cmd_run
};

int cmd_backward(int argc, char **argv)
{
	struct backward_request r = { 0 };

	return attn_main(argc, argv, &attn_backward, &r);
}

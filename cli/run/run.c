/*
 * run.c: the library on a loaded problem (run.h).
 */
#include "run/run.h"
#include "base/budget.h"
#include "base/cli.h"
#include "load/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the run ------------------------------------------------------------ */

/* *acc += count·size, saturating at SIZE_MAX */
static void add_bytes(size_t *acc, size_t count, size_t size)
{
	if (*acc == SIZE_MAX || (count && size > (SIZE_MAX - *acc) / count))
		*acc = SIZE_MAX;
	else
		*acc += count * size;
}

/*
 * What a run will hold at its peak: the inputs as read, the library's own
 * needs (mha_memory), the copies of the steps to print, and the output.
 */
static void run_memory(const struct problem *p, unsigned wanted, int f32, size_t out_cols,
		       size_t part[3])
{
	const mha_dims *d = &p->d;
	const matrix *held[] = { &p->x, &p->kv, &p->xk, &p->xv, &p->q, &p->k, &p->v, &p->mask };
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, nn = d->n_q * d->n_kv;
	const size_t B = problem_sequences(p);
	size_t lib;

	/* the inputs as read hold what the budget was charged for them; float32
	 * adds a float copy of each */
	part[0] = budget_held();
	part[1] = part[2] = 0;
	for (size_t i = 0; f32 && i < sizeof(held) / sizeof(held[0]); i++)
		if (!held[i]->f)
			add_bytes(&part[0], matrix_size(held[i]), sizeof(float));
	for (int i = 0; f32 && i < N_WEIGHTS; i++)
		if (!p->w.m[i].f)
			add_bytes(&part[0], matrix_size(&p->w.m[i]), sizeof(float));
	add_bytes(&part[0], matrix_size(&p->mask), 1);
	lib = mha_memory(d, &p->cfg, wanted, f32);
	add_bytes(&part[1], 1, lib);
	/* the copies kept for printing: every sequence's */
	/* the output: doubles, and the floats made first with --dtype f32;
	 * floats alone when they are what is written (spec.floats) */
	add_bytes(&part[2], B * d->n_q * out_cols,
		  !f32 ? sizeof(double) : p->spec.float_out ? sizeof(float) : sizeof(double) + sizeof(float));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_K))
		add_bytes(&part[2], B * d->n_kv * G * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_V))
		add_bytes(&part[2], B * d->n_kv * G * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_CONCAT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & (MHA_STAGE_BIT(MHA_STAGE_HEAD_K) | MHA_STAGE_BIT(MHA_STAGE_HEAD_V)))
		add_bytes(&part[2], B * d->n_kv * d->heads * (d->d_k + d->d_v), sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_OUTPUT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	for (int s = MHA_STAGE_SCORES; s <= MHA_STAGE_SOFTMAX; s++)
		if (wanted & MHA_STAGE_BIT(s))
			/* a per-head mask is kept per head and once more stacked */
			add_bytes(&part[2], B * nn, d->heads * sizeof(double) *
				  (s == MHA_STAGE_MASK && (p->cfg.mask.per_head || p->cfg.alibi.on)
				   ? 2 : 1));
}

int problem_check_memory(const struct problem *p, unsigned wanted, int f32)
{
	const size_t limit = budget_limit();
	size_t part[3], total = 0;
	char t[48], a[48], b[48], c[48], m[48];

	if (limit == SIZE_MAX)
		return 0;
	run_memory(p, wanted, f32, mha_output_cols(&p->d, weights_has(&p->w, WO)), part);
	for (int i = 0; i < 3; i++)
		add_bytes(&total, 1, part[i]);
	if (total <= limit)
		return 0;
	return error("this run needs about %s (the inputs %s, the computation %s, the output and "
		     "the steps to print %s), more than --max-memory (%s): print fewer steps, or "
		     "raise --max-memory", show_bytes(t, sizeof(t), total),
		     show_bytes(a, sizeof(a), part[0]), show_bytes(b, sizeof(b), part[1]),
		     show_bytes(c, sizeof(c), part[2]), show_bytes(m, sizeof(m), limit));
}

/*
 * --dtype f32: the inputs rounded to float, the library's float32 path,
 * the output widened back (exactly) and marked as floats for the writers.
 */
static mha_status forward_f32(matrix *out, const mha_dims *d, const mha_inputs *src,
			      const mha_inputs_f32 *srcf, const mha_weights *w,
			      const mha_weights_f32 *wf, const mha_config *cfg, mha_report *rep)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t n_out = matrix_size(out), out_cols = matrix_cols(out);
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	const size_t B = d->batch ? d->batch : 1;
	int ok = 1;
	/* inputs read as floats are used as they are; the rest rounded here */
	float *xq = srcf->xq ? NULL : floats_copy(src->xq, B * d->n_q * d->d_q_in, &ok);
	float *xk = src->xk == src->xq ? xq : srcf->xk ? NULL : floats_copy(src->xk, B * d->n_kv * d->d_k_in, &ok);
	float *xv = src->xv == src->xk ? xk : srcf->xv ? NULL : floats_copy(src->xv, B * d->n_kv * d->d_v_in, &ok);
	/* weights read as floats (wf) are used as they are; doubles rounded */
	float *W[8] = {
		floats_copy(w->W_Q, d->d_q_in * hk, &ok), floats_copy(w->W_K, d->d_k_in * gk, &ok),
		floats_copy(w->W_V, d->d_v_in * gv, &ok), floats_copy(w->W_O, hv * out_cols, &ok),
		floats_copy(w->b_Q, hk, &ok), floats_copy(w->b_K, gk, &ok), floats_copy(w->b_V, gv, &ok),
		floats_copy(w->b_O, out_cols, &ok),
	};
	const float *const Wf[8] = { wf->W_Q, wf->W_K, wf->W_V, wf->W_O, wf->b_Q, wf->b_K, wf->b_V,
				     wf->b_O };
	const float *Wu[8];
	/* the output's floats: out's own when it holds floats */
	float *o = out->f ? NULL : malloc((n_out ? n_out : 1) * sizeof(float));
	mha_status st = MHA_ERR_NOMEM;

	if (ok && (o || out->f)) {
		const mha_inputs_f32 in = { .size = sizeof(mha_inputs_f32),
					    srcf->xq ? srcf->xq : xq, srcf->xk ? srcf->xk : xk,
					    srcf->xv ? srcf->xv : xv };

		for (int i = 0; i < 8; i++)
			Wu[i] = Wf[i] ? Wf[i] : W[i];
		st = mha_forward_f32(out->f ? out->f : o, d, &in,
				     &(mha_weights_f32){ .size = sizeof(mha_weights_f32), Wu[0], Wu[1],
							 Wu[2], Wu[3], Wu[4], Wu[5], Wu[6], Wu[7] },
				     cfg, rep);
		for (size_t i = 0; st == MHA_OK && o && i < n_out; i++)
			out->v[i] = o[i];
		out->is_f32 = 1;
	}
	if (xv != xk)
		free(xv);
	if (xk != xq)
		free(xk);
	free(xq);
	for (int i = 0; i < 8; i++)
		free(W[i]);
	free(o);
	return st;
}

int problem_forward(matrix *out, const struct problem *p, const mha_observer *obs, int f32,
		    mha_report *rep)
{
	const mha_dims *d = &p->d;
	mha_status st;
	/* a PyTorch mask (true = blocked) read as mha's blocks the diagonal */
	const char *const hint = p->diag_blocked ? "; the boolean mask blocks every query's own "
		"key: if true means blocked there (PyTorch's nn.MultiheadAttention), add "
		"--mask-bool block" : "";

	const size_t cols = mha_output_cols(d, weights_has(&p->w, WO));

	/* a batch keeps its 3-D shape, B = 1 too: (B, n_q, cols); floats
	 * alone when those are what is written */
	if (f32 && p->spec.float_out) {
		const size_t dims[3] = { p->batch ? p->batch : d->n_q, p->batch ? d->n_q : cols, cols };

		if (matrix_alloc_out(out, p->batch ? 3 : 2, dims, 1))
			return -1;
	} else {
		const size_t dims[3] = { p->batch ? p->batch : d->n_q, p->batch ? d->n_q : cols,
					 p->batch ? cols : 1 };

		if (matrix_alloc_out(out, p->batch ? 3 : 2, dims, 0))
			return -1;
	}
	st = f32 ? forward_f32(out, d, &p->in, &p->in_f, &p->weights, &p->weights_f, &p->cfg, rep)
		 : mha_forward(out->v, d, &p->in, &p->weights, &p->cfg, obs, rep);
	if (st == MHA_ERR_OBSERVER)
		return -1; /* the observer said why */
	if (st == MHA_ERR_RANGE)
		/* the type the run computes in: --dtype f32 overflows near 3.4e38 */
		return error("the numbers overflow: Q, K, V, the scores or the output went past the "
			     "largest %s; scale the inputs down",
			     f32 ? "float (about 3.4e38)" : "double (about 1.8e308)");
	if (st != MHA_OK)
		return error("%s", mha_strerror(st));
	if (p->diag_blocked && !rep->blocked_rows)
		warning("the boolean mask from %s blocks every query's own key; if true means "
			"blocked there (PyTorch's nn.MultiheadAttention), add --mask-bool block",
			p->mask_src);
	if (rep->blocked_rows && p->batch > 1) {
		char seq[48];

		snprintf(seq, sizeof(seq), "sequence %zu, ", rep->first_blocked_sequence + 1);
		if (rep->blocked_rows == 1)
			warning("%shead %d, query row %zu: every key is masked; its softmax row and "
				"output are zero%s", seq, rep->first_blocked_head + 1, rep->first_blocked_row + 1,
				hint);
		else
			warning("%zu query rows have every key masked (the first: %shead %d, row %zu); "
				"their softmax rows and outputs are zero%s", rep->blocked_rows, seq,
				rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	} else if (rep->blocked_rows == 1) {
		warning("head %d, query row %zu: every key is masked; its softmax row and output "
			"are zero%s", rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	} else if (rep->blocked_rows > 1) {
		warning("%zu query rows have every key masked (the first: head %d, row %zu); their "
			"softmax rows and outputs are zero%s", rep->blocked_rows,
			rep->first_blocked_head + 1, rep->first_blocked_row + 1, hint);
	}
	return 0;
}

void problem_facts(const struct problem *p, double scale, struct step_facts *f)
{
	*f = (struct step_facts){ .cfg = &p->cfg, .d = &p->d, .scale = scale,
				  .mask_file = p->spec.mask, .mask_block = p->spec.mask_block,
				  .heads = p->d.heads,
				  .alibi_slopes = p->cfg.alibi.on ? p->alibi.v : NULL,
				  .direct = p->direct,
				  .cross = p->spec.kv != NULL || p->spec.xk != NULL,
				  .apart = p->spec.xk != NULL, .positions_file = p->spec.positions,
				  .rope_cos_file = p->spec.rope_cos, .rope_sin_file = p->spec.rope_sin,
				  .model_layer = -1 };
	if (p->allow)
		f->mask_bool = p->spec.mask_block ? "block" : "attend";
	if (p->spec.checkpoint) {
		f->model = model_family_name(p->spec.family);
		f->model_prefix = p->spec.module;
		f->model_config = p->spec.config_read[0] ? p->spec.config_read : NULL;
		f->model_layer = p->spec.has_layer ? (long long)p->spec.layer : -1;
	}
	for (int i = 0; i < N_WEIGHTS; i++)
		f->weights |= (unsigned)weights_has(&p->w, i) << i;
}

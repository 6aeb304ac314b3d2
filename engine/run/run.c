/*
 * run.c: the library on a loaded problem (run.h).
 */
/* the float32 functions told how far they have come (mha.h's experimental part) */
#define MHA_EXPERIMENTAL
#include "run/run.h"
#include "util/budget.h"
#include "util/msg.h"
#include "load/model.h"

#include <math.h>
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
static void run_memory(const struct problem *p, mha_stages wanted, int f32, size_t out_cols,
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
	lib = mha_memory_stages(d, &p->cfg, wanted, f32);
	add_bytes(&part[1], 1, lib);
	/* the copies kept for printing: every sequence's */
	/* the output: doubles, and the floats made first with --dtype f32;
	 * floats alone when they are what is written (spec.floats) */
	add_bytes(&part[2], B * d->n_q * out_cols,
		  !f32 ? sizeof(double) : p->spec.float_out ? sizeof(float) : sizeof(double) + sizeof(float));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_K))
		add_bytes(&part[2], B * d->n_kv * G * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_V))
		add_bytes(&part[2], B * d->n_kv * G * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_CONCAT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_HEAD_Q))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & (MHA_STAGE_SET(MHA_STAGE_HEAD_K) | MHA_STAGE_SET(MHA_STAGE_HEAD_V)))
		add_bytes(&part[2], B * d->n_kv * d->heads * (d->d_k + d->d_v), sizeof(double));
	if (wanted & MHA_STAGE_SET(MHA_STAGE_HEAD_OUTPUT))
		add_bytes(&part[2], B * d->n_q * d->heads * d->d_v, sizeof(double));
	for (int s = MHA_STAGE_SCORES; s <= MHA_STAGE_SOFTMAX; s++)
		if (wanted & MHA_STAGE_SET(s))
			/* a per-head mask is kept per head and once more stacked */
			add_bytes(&part[2], B * nn, d->heads * sizeof(double) *
				  (s == MHA_STAGE_MASK && (p->cfg.mask.per_head || p->cfg.alibi.on)
				   ? 2 : 1));
}

int run_check_memory(const struct run_need *n)
{
	const size_t limit = budget_limit();
	/* no parts named: the need is beside the inputs, against what they leave */
	const int beside = !n->part[0];
	size_t total = 0;
	char t[48], m[48], b[3][48];

	if (limit == SIZE_MAX)
		return 0;
	for (int i = 0; i < 3; i++)
		add_bytes(&total, 1, n->bytes[i]);
	if (total <= (beside ? budget_left() : limit))
		return 0;
	show_bytes(t, sizeof(t), total);
	show_bytes(m, sizeof(m), limit);
	if (beside)
		return error("%s needs about %s beside the inputs, more than --max-memory (%s) leaves: "
			     "%s", n->who, t, m, n->advice);
	for (int i = 0; i < 3; i++)
		show_bytes(b[i], sizeof(b[i]), n->bytes[i]);
	return error("%s needs about %s (%s %s, %s %s, %s %s), more than --max-memory (%s): %s",
		     n->who, t, n->part[0], b[0], n->part[1], b[1], n->part[2], b[2], m, n->advice);
}

int problem_check_memory(const struct problem *p, mha_stages wanted, int f32)
{
	struct run_need n = { .who = "this run",
			      .part = { "the inputs", "the computation", "the output and the steps to print" },
			      .advice = "print fewer steps, or raise --max-memory" };

	if (budget_limit() == SIZE_MAX)
		return 0;
	run_memory(p, wanted, f32, mha_output_cols(&p->d, weights_has(&p->w, WO)), n.bytes);
	return run_check_memory(&n);
}

const char *run_lowp_lacks(const mha_config *c)
{
	return c->alibi.on ? "ALiBi" : c->norm.kind ? "a q/k norm" : c->mla.on ? "latent attention"
	       : NULL;
}

/* ---- --dtype f32 ----------------------------------------------------------- */

/* one array as floats: those read as floats as they are, the rest rounded into a copy */
static const float *floats_of(struct run_floats *f, const double *v, const float *read, size_t n,
			      int *ok)
{
	float *copy;

	if (read || !v)
		return read;
	copy = floats_copy(v, n, ok);
	f->own[f->n_own++] = copy;
	return copy;
}

int run_floats_make(struct run_floats *f, const struct problem *p)
{
	const mha_dims *d = &p->d;
	const mha_inputs *in = &p->in;
	const mha_inputs_f32 *inf = &p->in_f;
	const mha_weights *w = &p->weights;
	const mha_weights_f32 *wf = &p->weights_f;
	const size_t B = problem_sequences(p), G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	/* weights read as floats alone have no doubles: W_O is there if either is */
	const int wo = w->W_O || wf->W_O;
	const size_t oc = mha_output_cols(d, wo);
	/* latent attention's W_Q follows q_a_proj's latent when there is one */
	const mha_mla *mla = &p->cfg.mla;
	const size_t q_in = mla->on && mla->q_rank ? mla->q_rank : d->d_q_in;
	int ok = 1;

	memset(f, 0, sizeof(*f));
	f->in.size = sizeof(f->in);
	/* an input that is another (self-attention's X for K and V, --kv's
	 * X_kv for V) is made once and handed over twice; inputs read as
	 * floats alone have no doubles (NULL), so only the floats tell them apart */
	f->in.xq = floats_of(f, in->xq, inf->xq, B * d->n_q * d->d_q_in, &ok);
	f->in.xk = inf->xk || !in->xk || in->xk != in->xq
		   ? floats_of(f, in->xk, inf->xk, B * d->n_kv * d->d_k_in, &ok) : f->in.xq;
	f->in.xv = inf->xv || !in->xv ? floats_of(f, in->xv, inf->xv, B * d->n_kv * d->d_v_in, &ok)
		   : in->xv == in->xk ? f->in.xk : in->xv == in->xq ? f->in.xq
		   : floats_of(f, in->xv, NULL, B * d->n_kv * d->d_v_in, &ok);
	f->w = (mha_weights_f32){
		.size = sizeof(mha_weights_f32),
		floats_of(f, w->W_Q, wf->W_Q, q_in * hk, &ok),
		floats_of(f, w->W_K, wf->W_K, d->d_k_in * gk, &ok),
		floats_of(f, w->W_V, wf->W_V, d->d_v_in * gv, &ok),
		floats_of(f, w->W_O, wf->W_O, hv * oc, &ok),
		floats_of(f, w->b_Q, wf->b_Q, hk, &ok),
		floats_of(f, w->b_K, wf->b_K, gk, &ok),
		floats_of(f, w->b_V, wf->b_V, gv, &ok),
		/* b_O counts only with W_O (mha.h) */
		floats_of(f, wo ? w->b_O : NULL, wo ? wf->b_O : NULL, oc, &ok),
	};
	if (mla->on) {
		f->w.W_QA = floats_of(f, w->W_QA, NULL, d->d_q_in * mla->q_rank, &ok);
		f->w.W_KVA = floats_of(f, w->W_KVA, NULL, d->d_k_in * (mla->kv_rank + mla->d_rope), &ok);
		f->w.W_KVB = floats_of(f, w->W_KVB, NULL,
				       mla->kv_rank * d->heads * (d->d_k - mla->d_rope + d->d_v), &ok);
	}
	if (!ok)
		run_floats_free(f);
	return ok ? 0 : -1;
}

void run_floats_free(struct run_floats *f)
{
	for (size_t i = 0; i < f->n_own; i++)
		free(f->own[i]);
	memset(f, 0, sizeof(*f));
}

/*
 * --dtype f32: the inputs as floats, the library's float32 path, the
 * output widened back (exactly) and marked as floats for the writers.
 */
static mha_status forward_f32(matrix *out, const struct problem *p, mha_report *rep)
{
	const size_t n_out = matrix_size(out);
	struct run_floats f;
	/* the output's floats: out's own when it holds floats */
	float *o = out->f ? NULL : malloc((n_out ? n_out : 1) * sizeof(float));
	mha_status st = MHA_ERR_NOMEM;

	if (run_floats_make(&f, p)) {
		free(o);
		return st;
	}
	if (o || out->f) {
		/* the bar on standard error, as the float64 run's */
		mha_observer watch = MHA_INIT(mha_observer);

		MSG_LISTEN(watch);
		st = mha_forward_f32_observed(out->f ? out->f : o, &p->d, &f.in, &f.w, &p->cfg, &watch,
					      rep);
		for (size_t i = 0; st == MHA_OK && o && i < n_out; i++)
			out->v[i] = o[i];
		out->is_f32 = 1;
	}
	run_floats_free(&f);
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
	if (f32) {
		st = forward_f32(out, p, rep);
	} else {
		/* the bar on standard error, whatever else is watched */
		mha_observer watch = obs ? *obs : (mha_observer)MHA_INIT(mha_observer);

		MSG_LISTEN(watch);
		st = mha_forward(out->v, d, &p->in, &p->weights, &p->cfg, &watch, rep);
	}
	if (st == MHA_ERR_OBSERVER)
		return -1; /* the observer said why */
	if (st == MHA_ERR_PRECISION) {
		const mha_config *c = &p->cfg;
		const char *lacks = run_lowp_lacks(c);

		return error("--dtype %s: the low-precision reference does not compute %s yet; the "
			     "float64 run does (leave out --dtype)",
			     c->precision == MHA_PRECISION_FP16 ? "fp16" : "bf16",
			     lacks ? lacks : "this layer");
	}
	if (st == MHA_ERR_RANGE)
		/* the type the run computes in: --dtype f32 overflows near 3.4e38 */
		return error("the numbers overflow: Q, K, V, the scores or the output went past the "
			     "largest %s; scale the inputs down",
			     f32 ? "float (about 3.4e38)" : "double (about 1.8e308)");
	if (st != MHA_OK)
		return error("%s", mha_strerror(st));
	if (p->cfg.precision != MHA_PRECISION_F64 && out->v) {
		/* the type's overflow is the reference's answer, as PyTorch's: said */
		const size_t n = matrix_size(out);
		size_t bad = 0;

		for (size_t i = 0; i < n; i++)
			bad += !isfinite(out->v[i]);
		if (bad)
			warning("--dtype %s: %zu output value%s not finite: a step passed the type's "
				"largest value (%s) and became infinity, as PyTorch computes it in "
				"that type (--print all shows where)", p->cfg.precision ==
				MHA_PRECISION_FP16 ? "fp16" : "bf16", bad, bad == 1 ? " is" : "s are",
				p->cfg.precision == MHA_PRECISION_FP16 ? "65504" : "about 3.39e38");
	}
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
				  .q_norm_file = p->spec.q_norm, .k_norm_file = p->spec.k_norm,
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

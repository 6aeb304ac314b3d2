/*
 * sets.c: mha's steps of one computation as 'mha compare' holds them
 * (compare.h): the forward's through an observer, each head's stacked, the
 * softmax's mean over the heads, and with gradients the backward's of the
 * same run (run/grads.c), each whole; and the memory such a set takes.
 */
#include "util/msg.h"
#include "compare/compare.h"
#include "load/problem.h"
#include "run/grads.h"
#include "run/run.h"
#include "run/steps.h"

#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void set_free(struct set *s)
{
	for (int i = 0; i < C_COUNT; i++)
		matrix_free(&s->m[i]);
}

int copy_matrix(matrix *dst, const matrix *src)
{
	if (!src->rank)
		return 0;
	if (matrix_alloc_dims(dst, src->rank, src->dim))
		return -1;
	memcpy(dst->v, src->v, matrix_size(src) * sizeof(double));
	return 0;
}

/* the heads' matrices of step s of r as one (H, rows, cols) */
static int stack_heads(matrix *dst, const struct step_results *r, int s)
{
	const matrix *per = r->per_head[s];
	size_t plane;

	if (!per || !per[0].rank)
		return 0;
	plane = matrix_size(&per[0]);
	if (matrix_alloc(dst, 3, r->heads, per[0].dim[0], per[0].dim[1]))
		return -1;
	for (size_t h = 0; h < r->heads; h++)
		memcpy(dst->v + h * plane, per[h].v, plane * sizeof(double));
	return 0;
}

/* the observer's copies, X and the output, as a set: the whole matrices
 * moved out of r and out, each head's freed once stacked, so that a set
 * and its run never hold two copies of much */
static int gather(struct set *s, struct step_results *r, const matrix *x, matrix *out)
{
	for (int i = 0; i < C_GRAD; i++) {
		const struct cmp_step *c = cmp_at(i);
		const int st = c->step;

		if (i == C_X) {
			if (x && copy_matrix(&s->m[i], x))
				return -1;
		} else if (i == C_OUTPUT) {
			s->m[i] = *out;
			memset(out, 0, sizeof(*out));
		} else if (i == C_SOFTMAX_MEAN) {
			continue; /* below, from the softmax */
		} else if (c->per_head) {
			if (stack_heads(&s->m[i], r, st))
				return -1;
			/* heads.Q, K, V and the heads' output share no list with another
			 * step: free each list once stacked */
			for (size_t h = 0; r->per_head[st] && h < r->heads; h++)
				matrix_free(&r->per_head[st][h]);
		} else {
			s->m[i] = r->whole[st];
			memset(&r->whole[st], 0, sizeof(r->whole[st]));
		}
	}
	{
		/* the softmax averaged over the heads (nn.MultiheadAttention's default weights) */
		const matrix *sm = &s->m[C_SOFTMAX];
		size_t P, R, C;

		shape3(sm, &P, &R, &C);
		if (sm->rank && matrix_alloc(&s->m[C_SOFTMAX_MEAN], 2, R, C, 1))
			return -1;
		for (size_t k = 0; sm->rank && k < R * C; k++) {
			double sum = 0;

			for (size_t h = 0; h < P; h++)
				sum += sm->v[h * R * C + k];
			s->m[C_SOFTMAX_MEAN].v[k] = sum / (double)P;
		}
	}
	return 0;
}

/* backward's steps as a set: each head's stacked, the whole ones moved, the
 * results (dX, dW_Q, ...) copied from g, each only where the run has it */
static int gather_grads(struct set *s, struct step_results *r, const struct run_grads *g,
			const struct problem *p, double scale)
{
	matrix rb[GS_COUNT] = { { 0 } };
	struct step_facts f;

	problem_facts(p, scale, &f);
	f.shared = g->shared;
	run_grads_plane(g, p, 0, rb);
	for (int gs = 0; gs < GS_COUNT; gs++) {
		const struct step *t = &grad_steps[gs];
		matrix *dst = &s->m[C_G(gs)];

		if (cmp_at(C_G(gs))->hidden || !step_exists(t, &f))
			continue;
		if (t->head_stage >= 0) {
			if (stack_heads(dst, r, gs))
				return -1;
		} else if ((t->flags & STEP_RESULT) || (p->direct && gs >= GS_DQ && gs <= GS_DV)) {
			if (rb[gs].rank && copy_matrix(dst, &rb[gs]))
				return -1;
		} else {
			*dst = r->whole[gs];
			memset(&r->whole[gs], 0, sizeof(r->whole[gs]));
		}
	}
	return 0;
}

/* Bytes a set of every step holds (doubles; the mask twice: per head and
 * stacked), with grads backward's too. */
size_t set_bytes(const struct problem *p, int grads)
{
	const mha_dims *d = &p->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, H = d->heads;
	const double nq = (double)d->n_q, nkv = (double)d->n_kv;
	double n = nq * (double)d->d_q_in + nq * (double)(H * d->d_k) * 3 +
		   nkv * (double)(G * (d->d_k + d->d_v)) + nkv * (double)(G * d->d_k) +
		   nkv * (double)(H * (d->d_k + d->d_v)) + 8.0 * (double)H * nq * nkv +
		   2.0 * nq * (double)(H * d->d_v) + nq * (double)mha_output_cols(d, 1) +
		   nq * (double)(H * d->d_v);
	double bytes;

	if (grads) {
		const double din = (double)(d->d_q_in + d->d_k_in + d->d_v_in);

		/* dP, dS, dscaled, dscores; each head's dO, dV, dQ, dK; the whole
		 * gradients twice (observed, and the results); the weights' */
		n += 4.0 * (double)H * nq * nkv +
		     (double)H * (nq * (double)(d->d_v + d->d_k) + nkv * (double)(d->d_v + d->d_k)) +
		     2.0 * (nq * (double)(H * (d->d_k + d->d_v) + d->d_out) +
			    nkv * (double)(G * (d->d_k + d->d_v)) + (nq + 2 * nkv) * din) +
		     din * (double)(H * d->d_k + G * (d->d_k + d->d_v)) +
		     (double)(H * d->d_v) * (double)d->d_out;
	}
	bytes = n * sizeof(double) + 64.0 * (double)(H * 40 + 128);
	return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/* a run's status: 0 done, 1 the library refused it (a mistaken
 * configuration may overflow), -1 said (the observer said why, or out of
 * memory) */
static int refused(mha_status st)
{
	if (st == MHA_ERR_NOMEM)
		return error("out of memory");
	return st == MHA_ERR_OBSERVER ? -1 : st != MHA_OK;
}

/* the backward of the run just made, its steps into s: 0, 1 refused, -1 said */
static int run_grads_into(struct set *s, const struct ctx *x, const mha_inputs *in,
			  const mha_weights *w, const mha_config *cfg, const struct bw_edit *edit,
			  double scale)
{
	struct step_results r = { .table = grad_steps, .n = GS_COUNT, .heads = x->p->d.heads,
				  .item_base = 1000, .only_held = 1 };
	struct steps_batch one = { .res = &r };
	mha_grad_observer obs = { .size = sizeof(mha_grad_observer), .fn = steps_batch_keep_grad,
				  .ctx = &one, .stages = ~0ull };
	struct run_grads g;
	mha_report rep = MHA_INIT(mha_report);
	mha_status st = MHA_OK;
	int rc = -1;

	if (edit) {
		obs.edit = edit->fn;
		obs.edit_ctx = edit->ctx;
	}
	if (problem_backward(&g, x->p, in, w, cfg, x->dout, &obs, 0, &rep, &st))
		goto done;
	rc = refused(st);
	if (!rc)
		rc = gather_grads(s, &r, &g, x->p, scale);
done:
	run_grads_free(&g);
	steps_results_free(&r);
	return rc;
}

int run_set(struct set *s, const struct ctx *x, const mha_inputs *in, const mha_weights *w,
	    const mha_config *cfg, const struct bw_edit *edit, mha_report *rep)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	struct step_results r = { .heads = d->heads, .mask_per_head = 1 };
	mha_observer obs = { .size = sizeof(mha_observer), .fn = steps_keep, .ctx = &r,
			     .stages = ALL_STAGES };
	matrix out = { 0 };
	mha_report local = MHA_INIT(mha_report);
	mha_status st;
	int rc = -1;

	MSG_LISTEN(obs);
	if (!rep)
		rep = &local;
	if (matrix_alloc(&out, 2, d->n_q, mha_output_cols(d, w->W_O != NULL), 1))
		return -1;
	st = mha_forward(out.v, d, in, w, cfg, &obs, rep);
	rc = refused(st);
	if (rc)
		goto done;
	rc = steps_stack(&r) || gather(s, &r, p->direct ? NULL : &p->x, &out) ? -1 : 0;
	if (!rc && x->grads)
		rc = run_grads_into(s, x, in, w, cfg, edit, rep->scale);
	if (rc)
		set_free(s);
done:
	steps_results_free(&r);
	matrix_free(&out);
	return rc;
}


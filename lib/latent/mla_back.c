/*
 * mla_back.c: multi-head latent attention's backward pass (mha.h's mha_mla,
 * mla.h's mha_mla_backward): the front again, the attention's gradients of
 * the assembled Q, K and V (mha_backward, as given inputs), then back
 * through the front: the turned parts turned back, the shared rope key's
 * gradient summed over the heads, kv_b_proj, the RMSNorms (norm.c) and the
 * latents' projections, on the kernels in the run's element type.
 */
#include "latent/mla.h"
#include "core/core.h"

#include "base/rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the gradients of the front's weights and inputs, from dQA, dKA, dVA */
static mha_status back_front(struct mla_run *r, const struct mla_grads *g, double *dwq, double *dwkv)
{
	const struct mla_shape *s = &r->s;
	const struct mla_io *io = r->io;
	const mha_dims *d = r->d;
	void **b = r->b;
	mha_status st = MHA_OK;

	/* queries: the turned part's gradient turned back, into dQ0 (in dQA) */
	mha_mla_take(r, b[DQPE], b[DQA], s->N, s->hk, s->H, s->dk, s->dn, s->dr);
	mha_mla_turn_back(r, b[DQPE], d->n_q, s->H, 0);
	mha_mla_put(r, b[DQA], s->hk, s->H, s->dk, s->dn, b[DQPE], s->N, s->dr);
	if (s->qr) {
		if (g->dW_Q)
			st = mha_mla_product(r, g->dW_Q, s->hk, b[CQN], s->qr, 1, b[DQA], s->hk, 0, s->qr,
				     s->hk, s->N);
		if (st == MHA_OK)
			st = mha_mla_product(r, b[DCQN], s->qr, b[DQA], s->hk, 0, io->W_Q, s->hk, 1, s->N,
				     s->qr, s->hk);
		if (st == MHA_OK)
			st = mha_norm_back(b[DCQ], b[DCQN], b[CQ], r->e, s->N, 1, s->qr, &r->qnorm, 0,
					   dwq);
		if (st == MHA_OK && g->dW_QA)
			st = mha_mla_product(r, g->dW_QA, s->qr, io->xq, d->d_q_in, 1, b[DCQ], s->qr, 0,
				     d->d_q_in, s->qr, s->N);
		if (st == MHA_OK && g->dxq)
			st = mha_mla_product(r, g->dxq, d->d_q_in, b[DCQ], s->qr, 0, io->W_QA, s->qr, 1, s->N,
				     d->d_q_in, s->qr);
	} else {
		if (g->dW_Q)
			st = mha_mla_product(r, g->dW_Q, s->hk, io->xq, d->d_q_in, 1, b[DQA], s->hk, 0,
				     d->d_q_in, s->hk, s->N);
		if (st == MHA_OK && g->dxq)
			st = mha_mla_product(r, g->dxq, d->d_q_in, b[DQA], s->hk, 0, io->W_Q, s->hk, 1, s->N,
				     d->d_q_in, s->hk);
	}
	if (st != MHA_OK)
		return st;

	/* the shared key part: every head's gradient summed (in double), turned back */
	for (size_t i = 0; i < s->M; i++)
		for (size_t t = 0; t < s->dr; t++) {
			double sum = 0;

			for (size_t h = 0; h < s->H; h++) {
				const size_t j = i * s->hk + h * s->dk + s->dn + t;

				sum += r->e == sizeof(double) ? ((const double *)b[DKA])[j]
							      : (double)((const float *)b[DKA])[j];
			}
			if (r->e == sizeof(double))
				((double *)b[DKPE])[i * s->dr + t] = sum;
			else
				((float *)b[DKPE])[i * s->dr + t] = (float)sum;
		}
	mha_mla_turn_back(r, b[DKPE], d->n_kv, 1, 1);

	/* each head's key and value parts back into W_KVB's columns, then the latent */
	for (size_t i = 0; i < s->M; i++)
		for (size_t h = 0; h < s->H; h++) {
			const size_t to = h * (s->dn + s->dv);

			memcpy(mha_mla_at(r, b[DKVB], i, s->kvb, to), mha_mla_at(r, b[DKA], i, s->hk, h * s->dk),
			       s->dn * r->e);
			memcpy(mha_mla_at(r, b[DKVB], i, s->kvb, to + s->dn), mha_mla_at(r, b[DVA], i, s->hv, h * s->dv),
			       s->dv * r->e);
		}
	if (g->dW_KVB)
		st = mha_mla_product(r, g->dW_KVB, s->kvb, b[CKVN], s->kr, 1, b[DKVB], s->kvb, 0, s->kr,
			     s->kvb, s->M);
	if (st == MHA_OK)
		st = mha_mla_product(r, b[DCKVN], s->kr, b[DKVB], s->kvb, 0, io->W_KVB, s->kvb, 1, s->M, s->kr,
			     s->kvb);
	if (st == MHA_OK)
		st = mha_norm_back(b[DCKR], b[DCKVN], b[CKR], r->e, s->M, 1, s->kr, &r->kvnorm, 1,
				   dwkv);
	if (st != MHA_OK)
		return st;
	mha_mla_put(r, b[DCKV], s->ka, 1, 0, 0, b[DCKR], s->M, s->kr);
	mha_mla_put(r, b[DCKV], s->ka, 1, 0, s->kr, b[DKPE], s->M, s->dr);
	if (g->dW_KVA)
		st = mha_mla_product(r, g->dW_KVA, s->ka, io->xk, d->d_k_in, 1, b[DCKV], s->ka, 0, d->d_k_in,
			     s->ka, s->M);
	if (st == MHA_OK && g->dxk)
		st = mha_mla_product(r, g->dxk, d->d_k_in, b[DCKV], s->ka, 0, io->W_KVA, s->ka, 1, s->M,
			     d->d_k_in, s->ka);
	return st;
}

/* the front's gradient stages, sequence by sequence (doubles only) */
static mha_status observe_back(const struct mla_run *r, const mha_grad_observer *obs)
{
	const struct mla_shape *s = &r->s;
	const size_t nq = r->d->n_q, nkv = r->d->n_kv;

	if (!obs || !obs->fn)
		return MHA_OK;
	for (size_t bq = 0; bq < s->B; bq++) {
		if (obs->sequence && obs->sequence(obs->ctx, bq))
			return MHA_ERR_OBSERVER;
		if (s->qr && (obs->stages & MHA_STAGE_SET(MHA_GRAD_DC_Q)) &&
		    obs->fn(obs->ctx, MHA_GRAD_DC_Q, -1, (const double *)r->b[DCQ] + bq * nq * s->qr,
			    nq, s->qr))
			return MHA_ERR_OBSERVER;
		if ((obs->stages & MHA_STAGE_SET(MHA_GRAD_DC_KV)) &&
		    obs->fn(obs->ctx, MHA_GRAD_DC_KV, -1,
			    (const double *)r->b[DCKR] + bq * nkv * s->kr, nkv, s->kr))
			return MHA_ERR_OBSERVER;
		if ((obs->stages & MHA_STAGE_SET(MHA_GRAD_DK_PE)) &&
		    obs->fn(obs->ctx, MHA_GRAD_DK_PE, -1,
			    (const double *)r->b[DKPE] + bq * nkv * s->dr, nkv, s->dr))
			return MHA_ERR_OBSERVER;
	}
	return MHA_OK;
}

/* n doubles into a double or float array; 0 if one is not finite there */
static int store(void *dst, size_t esize, const double *src, size_t n)
{
	int finite = 1;

	for (size_t i = 0; dst && i < n; i++) {
		if (esize == sizeof(double)) {
			((double *)dst)[i] = src[i];
			finite &= isfinite(src[i]);
		} else {
			((float *)dst)[i] = (float)src[i];
			finite &= isfinite(((float *)dst)[i]);
		}
	}
	return finite;
}

mha_status mha_mla_backward(const struct mla_grads *g, const void *dout, const struct mla_io *io,
			    const mha_dims *d, const mha_config *cfg,
			    const mha_grad_observer *obs, mha_report *rep)
{
	struct mla_run r;
	mha_dims d2;
	mha_config c2;
	double *dwq = NULL, *dwkv = NULL;
	mha_status st = mha_mla_validate(io, g, d, cfg, rep);

	if (st != MHA_OK)
		return st;
	st = mha_mla_run_init(&r, io, d, cfg, 0, 1);
	if (st == MHA_OK && cfg->mla.q_rank && cfg->mla.q_a_norm && g->dq_a_norm &&
	    !(dwq = calloc(cfg->mla.q_rank, sizeof(double))))
		st = MHA_ERR_NOMEM;
	if (st == MHA_OK && cfg->mla.kv_a_norm && g->dkv_a_norm &&
	    !(dwkv = calloc(cfg->mla.kv_rank, sizeof(double))))
		st = MHA_ERR_NOMEM;
	if (st == MHA_OK)
		st = mha_mla_front(&r);
	if (st == MHA_OK) {
		mha_mla_core_of(&r, &d2, &c2);
		if (r.e == sizeof(double)) {
			const mha_inputs in2 = { .size = sizeof(in2), .xq = r.b[QA], .xk = r.b[KA],
						 .xv = r.b[VA] };
			const mha_weights w2 = { .size = sizeof(w2), .W_O = io->W_O,
						 .b_O = io->W_O ? io->b_O : NULL };
			const mha_grads g2 = { .size = sizeof(g2), .dxq = r.b[DQA], .dxk = r.b[DKA],
					       .dxv = r.b[DVA], .dW_O = g->dW_O, .db_O = g->db_O,
					       .dsinks = g->dsinks };

			st = mha_bw64_core(&g2, dout, &d2, &in2, &w2, &c2, obs, rep);
		} else {
			const mha_inputs_f32 in2 = { .size = sizeof(in2), .xq = r.b[QA], .xk = r.b[KA],
						     .xv = r.b[VA] };
			const mha_weights_f32 w2 = { .size = sizeof(w2), .W_O = io->W_O,
						     .b_O = io->W_O ? io->b_O : NULL };
			const mha_grads_f32 g2 = { .size = sizeof(g2), .dxq = r.b[DQA],
						   .dxk = r.b[DKA], .dxv = r.b[DVA], .dW_O = g->dW_O,
						   .db_O = g->db_O, .dsinks = g->dsinks };

			st = mha_bw32_core(&g2, dout, &d2, &in2, &w2, &c2, obs, rep);
		}
	}
	if (st == MHA_OK)
		st = back_front(&r, g, dwq, dwkv);
	if (st == MHA_OK && r.e == sizeof(double))
		st = observe_back(&r, obs);
	if (st == MHA_OK && ((dwq && !store(g->dq_a_norm, r.e, dwq, cfg->mla.q_rank)) ||
			     (dwkv && !store(g->dkv_a_norm, r.e, dwkv, cfg->mla.kv_rank))))
		st = MHA_ERR_RANGE;
	free(dwq);
	free(dwkv);
	mha_mla_free_all(&r);
	return st;
}


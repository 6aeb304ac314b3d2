/*
 * mla.h: multi-head latent attention (mha.h's mha_mla), inside the library
 * only.  mla.c computes the latents, the two parts of each head's query
 * and key and the values, then hands them to the attention as directly
 * given Q, K and V (identity projections): every path and option of the
 * attention serves MLA unchanged.  The entry points below are called by
 * mha_forward, mha_forward_f32, mha_backward and mha_backward_f32 when
 * cfg->mla.on, after their structs' sizes are checked.
 */
#ifndef MHA_MLA_H
#define MHA_MLA_H

#include "mha.h"

/* One run's arrays, of either element type (esize 8: double, 4: float). */
struct mla_io {
	size_t esize;
	const void *xq, *xk;
	const void *W_QA, *W_Q, *W_KVA, *W_KVB, *W_O, *b_O;
	const void *W_K, *W_V, *b_Q, *b_K, *b_V; /* must be NULL */
};

/* the arrays of a call's inputs in and weights w (mha_inputs and mha_weights,
 * or their _f32), elements of esize bytes */
#define MHA_MLA_IO(es, in, w) { .esize = (es), .xq = (in)->xq, .xk = (in)->xk, \
	.W_QA = (w)->W_QA, .W_Q = (w)->W_Q, .W_KVA = (w)->W_KVA, .W_KVB = (w)->W_KVB, \
	.W_O = (w)->W_O, .b_O = (w)->b_O, .W_K = (w)->W_K, .W_V = (w)->W_V, .b_Q = (w)->b_Q, \
	.b_K = (w)->b_K, .b_V = (w)->b_V }

/* Where the backward writes, of the same element type; NULL: not wanted. */
struct mla_grads {
	void *dxq, *dxk, *dW_QA, *dW_Q, *dW_KVA, *dW_KVB, *dW_O, *db_O, *dsinks, *dq_a_norm,
		*dkv_a_norm;
};

/* The settings of cfg->mla for dims d: MHA_FAULT_NONE, or the rule broken
 * (*index: the weight at fault); *st the status (MHA_ERR_MLA, or
 * MHA_ERR_TOOBIG for sizes that do not fit). */
mha_fault_kind mha_mla_fault(const mha_dims *d, const mha_config *cfg, size_t *index,
			     mha_status *st);

mha_status mha_mla_forward(void *out, const struct mla_io *io, const mha_dims *d,
			   const mha_config *cfg, const mha_observer *obs, mha_report *rep);

mha_status mha_mla_backward(const struct mla_grads *g, const void *dout, const struct mla_io *io,
			    const mha_dims *d, const mha_config *cfg,
			    const mha_grad_observer *obs, mha_report *rep);

/* mha_memory's and mha_backward_memory's answers with cfg->mla.on */
size_t mha_mla_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted, int f32);
size_t mha_mla_backward_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted);

#endif

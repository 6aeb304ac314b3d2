/*
 * ref.h: a plain, obviously correct multi-head attention for the tests.
 *
 * Written from the formula, not from lib/core/forward.c: every matrix is built whole
 * (Q, K, V, each head's slices, Kᵀ, scores, mask, softmax), products are
 * textbook triple loops accumulated in long double, and nothing is fused
 * or skipped.  Slow and memory-hungry on purpose.
 */
#ifndef MHA_TESTS_REF_H
#define MHA_TESTS_REF_H

#include "../lib/mha.h"

/* Everything the reference computes, each a malloc'd row-major matrix. */
typedef struct ref_result {
	size_t H, G, n_q, n_kv, dk, dv, d_out;
	double *Q, *K, *V;                 /* (n_q, H·dk), (n_kv, G·dk), (n_kv, G·dv) */
	double *q_norm, *k_norm;           /* Q and K normalised (a q/k norm), or NULL */
	double *q_rot, *k_rot;             /* Q and K turned by position (rope), or NULL */
	double **head_q, **head_k, **head_v; /* [H] of (n_q, dk), (n_kv, dk), (n_kv, dv) */
	double **scores, **scaled, **softcapped, **mask, **masked, **softmax; /* [H] (n_q, n_kv) */
	double **head_out;                 /* [H] (n_q, dv) */
	double *concat;                    /* (n_q, H·dv) */
	double *output;                    /* (n_q, d_out) */
	size_t blocked;                    /* rows with every key masked */
} ref_result;

/* Same arguments as mha_forward (w and cfg may be NULL).  0 on success. */
int ref_forward(ref_result *r, const mha_dims *d, const mha_inputs *in,
		const mha_weights *w, const mha_config *cfg);
void ref_free(ref_result *r);

/*
 * The backward pass of one sequence, from the formula as the textbooks
 * write it and not from lib/core/backward.c: the softmax's Jacobian
 * diag(p) − p·pᵀ applied to each row (the sink one more logit whose value
 * gradient is 0), tanh' = 1 − tanh², the rotation's transpose as the
 * conjugate turn, every product a long double triple loop on whole
 * matrices.  Same arguments as ref_forward and dout (n_q, output columns),
 * NULL for ones.  Each field a malloc'd matrix (NULL where the weight is).
 */
typedef struct ref_grads {
	double *dxq, *dxk, *dxv;           /* (n_q, d_q_in), (n_kv, d_k_in), (n_kv, d_v_in) */
	double *dW_Q, *dW_K, *dW_V, *dW_O; /* as the weights, NULL without them */
	double *db_Q, *db_K, *db_V, *db_O; /* (cols) */
	double *dsinks;                    /* (H), NULL without sinks */
	double *dQ, *dK, *dV;              /* gradients of Q, K, V (before rope and norm) */
	double *dq_norm, *dk_norm;         /* gradients of q_norm, k_norm (a q/k norm), or NULL */
	double *dq_norm_w, *dk_norm_w;     /* of the norm's weights, NULL without them */
	double **dS;                       /* [H] (n_q, n_kv) the gradient of masked */
	size_t H;
} ref_grads;

int ref_backward(ref_grads *g, const mha_dims *d, const mha_inputs *in, const mha_weights *w,
		 const mha_config *cfg, const double *dout);
void ref_grads_free(ref_grads *g);

#endif

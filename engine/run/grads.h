/*
 * grads.h: a loaded problem's backward pass through the library, its
 * gradients as matrices: --grad-output read, the gradients allocated for
 * the weights given, mha_backward (watched) or mha_backward_f32, and the
 * sums the library leaves to its caller (self-attention's dX = dxq + dxk +
 * dxv, --kv's dX_kv, an input a batch shares).  'mha backward' writes
 * them; 'mha compare' compares them.
 */
#ifndef MHA_ENGINE_GRADS_H
#define MHA_ENGINE_GRADS_H

#include "load/problem.h"
#include "run/steps.h"
#include "mha.h"

/* The gradients mha_backward writes, as matrices (the budget's). */
struct run_grads {
	matrix dxq, dxk, dxv, dW[4], db[4], dsinks, dnorm[2];
	matrix dlat[N_LATENT];   /* multi-head latent attention's tensors' */
	int shared[3];           /* dxq, dxk, dxv: of an input a batch shares, summed
				    over the sequences into plane 0 */
};

void run_grads_free(struct run_grads *g);

/* --grad-output read and checked against the output's shape (sequence: a
 * batch's sequence N alone, or 0): 0, or -1 said */
int run_grad_output(matrix *g, const struct problem *p, size_t sequence, size_t out_cols);

/*
 * The backward pass of p, or of p with in, w, cfg instead of its own
 * (NULL: p's; float64 only), given dout (NULL or rank 0: all ones; floats
 * with f32 too), watched by obs (NULL: not), or with f32 in float32 (p's
 * own; each gradient a float, widened once the library is done): g
 * allocated for the weights given and filled, the sums made.
 * 0 with *st the library's status (g's values only when MHA_OK), or -1 said
 * (out of memory).  run_grads_free(g) after, either way.
 */
int problem_backward(struct run_grads *g, const struct problem *p, const mha_inputs *in,
		     const mha_weights *w, const mha_config *cfg, const matrix *dout,
		     const mha_grad_observer *obs, int f32, mha_report *rep, mha_status *st);

/* Sequence b's results as backward's steps (GS_DX on; dQ, dK, dV for Q, K,
 * V given): views into g, owned by it. */
void run_grads_plane(const struct run_grads *g, const struct problem *p, size_t b,
		     matrix rb[GS_COUNT]);

#endif

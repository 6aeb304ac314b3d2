/*
 * grads.c: a loaded problem's backward pass, its gradients as matrices
 * (grads.h).  The library writes each source's gradient apart (dxq, dxk,
 * dxv); what a source that is two or three of them gets is their sum, made
 * here, and so is a batch-shared input's sum over the sequences.
 */
#include "run/grads.h"

#include "base/cli.h"
#include "read/input.h"
#include "run/run.h"

#include <stdlib.h>
#include <string.h>

void run_grads_free(struct run_grads *g)
{
	matrix_free(&g->dxq);
	matrix_free(&g->dxk);
	matrix_free(&g->dxv);
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
int run_grad_output(matrix *g, const struct problem *p, size_t sequence, size_t out_cols)
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

/*
 * --dtype f32: the inputs and weights as floats (run_floats_make), dO
 * rounded, the library's mha_backward_f32, the gradients widened back
 * (exactly) into g's arrays.
 */
static mha_status grads_f32(const mha_grads *g, const double *dout, const struct problem *p,
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


/* g's matrices for p's weights: 0, or -1 said */
static int grads_alloc(struct run_grads *gr, const struct problem *p, const mha_weights *w)
{
	const mha_dims *d = &p->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	/* latent attention's W_Q follows q_a_proj's latent when there is one */
	const size_t q_in = p->cfg.mla.on && p->cfg.mla.q_rank ? p->cfg.mla.q_rank : d->d_q_in;

	if (alloc_input(&gr->dxq, p, d->n_q, d->d_q_in) || alloc_input(&gr->dxk, p, d->n_kv, d->d_k_in) ||
	    alloc_input(&gr->dxv, p, d->n_kv, d->d_v_in) ||
	    (w->W_Q && matrix_alloc(&gr->dW[0], 2, q_in, hk, 1)) ||
	    (w->W_K && matrix_alloc(&gr->dW[1], 2, d->d_k_in, gk, 1)) ||
	    (w->W_V && matrix_alloc(&gr->dW[2], 2, d->d_v_in, gv, 1)) ||
	    (w->W_O && matrix_alloc(&gr->dW[3], 2, hv, d->d_out, 1)) ||
	    (w->b_Q && matrix_alloc(&gr->db[0], 2, 1, hk, 1)) ||
	    (w->b_K && matrix_alloc(&gr->db[1], 2, 1, gk, 1)) ||
	    (w->b_V && matrix_alloc(&gr->db[2], 2, 1, gv, 1)) ||
	    (w->W_O && w->b_O && matrix_alloc(&gr->db[3], 2, 1, d->d_out, 1)) ||
	    (p->cfg.sinks && matrix_alloc(&gr->dsinks, 2, 1, d->heads, 1)) ||
	    (p->cfg.norm.kind && p->cfg.norm.q_weight &&
	     (matrix_alloc_dims(&gr->dnorm[0], p->q_norm.rank, p->q_norm.dim) ||
	      matrix_alloc_dims(&gr->dnorm[1], p->k_norm.rank, p->k_norm.dim))))
		return -1;
	for (int i = 0; i < N_LATENT; i++)
		if (p->latent[i].rank && matrix_alloc_dims(&gr->dlat[i], p->latent[i].rank, p->latent[i].dim))
			return -1;
	return 0;
}

/* the sums the library leaves to its caller, and with f32 each a float again */
static void grads_sum(struct run_grads *gr, const struct problem *p, int f32)
{
	const size_t B = problem_sequences(p);
	const int direct = p->direct, kv = p->spec.kv != NULL, apart = p->spec.xk != NULL;

	/* latent attention's values come from the keys' latent: no dxv of its own */
	if (p->cfg.mla.on)
		memset(gr->dxv.v, 0, matrix_size(&gr->dxv) * sizeof(double));
	/* self-attention's X is all three sources; --kv's X_kv both keys and values */
	if (!direct && !kv && !apart) {
		add_to(gr->dxq.v, gr->dxk.v, matrix_size(&gr->dxq));
		add_to(gr->dxq.v, gr->dxv.v, matrix_size(&gr->dxq));
	} else if (kv) {
		add_to(gr->dxk.v, gr->dxv.v, matrix_size(&gr->dxk));
	}
	/* an input given 2-D beside a batch is one matrix: its gradient the sequences' sum */
	{
		const int q_src = direct ? 4 : 0, k_src = direct ? 5 : kv ? 1 : apart ? 2 : 0;
		const int v_src = direct ? 6 : kv ? 1 : apart ? 3 : 0;
		matrix *const m[3] = { &gr->dxq, &gr->dxk, &gr->dxv };
		const int src[3] = { q_src, k_src, v_src };

		for (int i = 0; i < 3; i++) {
			const size_t n = matrix_size(m[i]) / B;

			if (!p->batch || !(p->shared & (1u << src[i])) || (i && src[i] == 0) ||
			    (i == 2 && kv))
				continue;
			for (size_t b = 1; b < B; b++)
				add_to(m[i]->v, m[i]->v + b * n, n);
			gr->shared[i] = 1;
		}
	}
	if (f32) {
		/* the sums above made in double: each gradient a float again */
		round_f32(&gr->dxq);
		round_f32(&gr->dxk);
		round_f32(&gr->dxv);
		for (int i = 0; i < 4; i++) {
			round_f32(&gr->dW[i]);
			round_f32(&gr->db[i]);
		}
		round_f32(&gr->dsinks);
		round_f32(&gr->dnorm[0]);
		round_f32(&gr->dnorm[1]);
		for (int i = 0; i < N_LATENT; i++)
			round_f32(&gr->dlat[i]);
	}
}

int problem_backward(struct run_grads *gr, const struct problem *p, const mha_inputs *in,
		     const mha_weights *w, const mha_config *cfg, const double *dout,
		     const mha_grad_observer *obs, int f32, mha_report *rep, mha_status *st)
{
	mha_grads g;

	memset(gr, 0, sizeof(*gr));
	in = in ? in : &p->in;
	w = w ? w : &p->weights;
	cfg = cfg ? cfg : &p->cfg;
	if (grads_alloc(gr, p, w))
		return -1;
	g = (mha_grads){ .size = sizeof(mha_grads),
			 .dxq = gr->dxq.v, .dxk = gr->dxk.v, .dxv = gr->dxv.v, .dW_Q = gr->dW[0].v,
			 .dW_K = gr->dW[1].v, .dW_V = gr->dW[2].v, .dW_O = gr->dW[3].v,
			 .db_Q = gr->db[0].v, .db_K = gr->db[1].v, .db_V = gr->db[2].v,
			 .db_O = gr->db[3].v, .dsinks = gr->dsinks.v, .dq_norm = gr->dnorm[0].v,
			 .dk_norm = gr->dnorm[1].v, .dW_QA = gr->dlat[LAT_Q_A_PROJ].v,
			 .dW_KVA = gr->dlat[LAT_KV_A_PROJ].v, .dW_KVB = gr->dlat[LAT_KV_B_PROJ].v,
			 .dq_a_norm = gr->dlat[LAT_Q_A_NORM].v,
			 .dkv_a_norm = gr->dlat[LAT_KV_A_NORM].v };
	if (f32) {
		const size_t n[19] = { matrix_size(&gr->dxq), matrix_size(&gr->dxk),
				       matrix_size(&gr->dxv), matrix_size(&gr->dW[0]),
				       matrix_size(&gr->dW[1]), matrix_size(&gr->dW[2]),
				       matrix_size(&gr->dW[3]), matrix_size(&gr->db[0]),
				       matrix_size(&gr->db[1]), matrix_size(&gr->db[2]),
				       matrix_size(&gr->db[3]), matrix_size(&gr->dsinks),
				       matrix_size(&gr->dnorm[0]), matrix_size(&gr->dnorm[1]),
				       matrix_size(&gr->dlat[LAT_Q_A_PROJ]),
				       matrix_size(&gr->dlat[LAT_KV_A_PROJ]),
				       matrix_size(&gr->dlat[LAT_KV_B_PROJ]),
				       matrix_size(&gr->dlat[LAT_Q_A_NORM]),
				       matrix_size(&gr->dlat[LAT_KV_A_NORM]) };

		*st = grads_f32(&g, dout, p, n, rep);
	} else {
		*st = mha_backward(&g, dout, &p->d, in, w, cfg, obs, rep);
	}
	if (*st == MHA_OK)
		grads_sum(gr, p, f32);
	return 0;
}

void run_grads_plane(const struct run_grads *g, const struct problem *p, size_t b,
		     matrix rb[GS_COUNT])
{
	/* a shared input's total is plane 0, under every sequence */
	const matrix q = step_plane(&g->dxq, g->shared[0] ? 0 : b);
	const matrix k = step_plane(&g->dxk, g->shared[1] ? 0 : b);
	const matrix v = step_plane(&g->dxv, g->shared[2] ? 0 : b);

	(void)p;
	rb[GS_DQ] = q;
	rb[GS_DK] = k;
	rb[GS_DV] = v;
	rb[GS_DX] = q;
	rb[GS_DX_KV] = k;
	rb[GS_DX_K] = k;
	rb[GS_DX_V] = v;
	for (int i = 0; i < 4; i++) {
		rb[GS_DW_Q + i] = g->dW[i];
		rb[GS_DB_Q + i] = g->db[i];
	}
	rb[GS_DSINKS] = g->dsinks;
	rb[GS_DQ_NORM_W] = g->dnorm[0];
	rb[GS_DK_NORM_W] = g->dnorm[1];
	for (int i = 0; i < N_LATENT; i++)
		rb[GS_DLATENT + i] = g->dlat[i];
}

/*
 * grads.c: a loaded problem's backward pass, its gradients as matrices
 * (grads.h).  The library writes each source's gradient apart (dxq, dxk,
 * dxv); what a source that is two or three of them gets is their sum, made
 * here, and so is a batch-shared input's sum over the sequences.
 */
/* the float32 functions told how far they have come (mha.h's experimental part) */
#define MHA_EXPERIMENTAL
#include "run/grads.h"

#include "util/msg.h"
#include "load/weights.h"
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

/* --grad-output read and checked against the output's shape: 0, or -1 said */
int run_grad_output(matrix *g, const struct problem *p, size_t sequence, size_t out_cols)
{
	static const char *const keys[] = { "dO", "grad_output", NULL };
	const char *path = p->spec.grad_output;
	const size_t B = p->batch, read_B = sequence ? p->batch_read : p->batch;
	char shape[64];

	if (read_matrix(g, path, &(read_spec){ "dO", keys, 2, 3, p->spec.floats ? READ_F32 : 0 }))
		return -1;
	/* floats as read, unless a plane is cut out or copied below */
	if (g->f && ((g->rank == 3 && sequence) || (g->rank == 2 && B)) && matrix_widen(g))
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

/* The gradients, in mha_grads' order: each one's matrix in g. */
#define N_GRAD_ARRAYS 19

static matrix *grad_slot(struct run_grads *g, int i)
{
	matrix *const m[N_GRAD_ARRAYS] = {
		&g->dxq, &g->dxk, &g->dxv, &g->dW[0], &g->dW[1], &g->dW[2], &g->dW[3], &g->db[0],
		&g->db[1], &g->db[2], &g->db[3], &g->dsinks, &g->dnorm[0], &g->dnorm[1],
		&g->dlat[LAT_Q_A_PROJ], &g->dlat[LAT_KV_A_PROJ], &g->dlat[LAT_KV_B_PROJ],
		&g->dlat[LAT_Q_A_NORM], &g->dlat[LAT_KV_A_NORM]
	};

	return m[i];
}

/* the shape of each gradient p's weights (w) have, in mha_grads' order: rank 0 for none */
struct grad_shape {
	size_t rank, dim[4];
};

static void grad_shapes(struct grad_shape s[N_GRAD_ARRAYS], const struct problem *p,
			const mha_weights *w)
{
	const mha_dims *d = &p->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	/* latent attention's W_Q follows q_a_proj's latent when there is one */
	const size_t q_in = p->cfg.mla.on && p->cfg.mla.q_rank ? p->cfg.mla.q_rank : d->d_q_in;
	const size_t in_rows[3] = { d->n_q, d->n_kv, d->n_kv };
	const size_t in_cols[3] = { d->d_q_in, d->d_k_in, d->d_v_in };
	/* p's own weights as read (floats for --dtype f32 too), or those given */
	const int own = w == &p->weights;
	const int has[8] = {
		own ? weights_has(&p->w, WQ) : w->W_Q != NULL, own ? weights_has(&p->w, WK) : w->W_K != NULL,
		own ? weights_has(&p->w, WV) : w->W_V != NULL, own ? weights_has(&p->w, WO) : w->W_O != NULL,
		own ? weights_has(&p->w, BQ) : w->b_Q != NULL, own ? weights_has(&p->w, BK) : w->b_K != NULL,
		own ? weights_has(&p->w, BV) : w->b_V != NULL,
		own ? weights_has(&p->w, WO) && weights_has(&p->w, BO) : w->W_O != NULL && w->b_O != NULL
	};
	const size_t wr[4] = { q_in, d->d_k_in, d->d_v_in, hv }, wc[4] = { hk, gk, gv, d->d_out };

	memset(s, 0, N_GRAD_ARRAYS * sizeof(*s));
	/* an input's gradient: (B, rows, cols) for a batch, else (rows, cols) */
	for (int i = 0; i < 3; i++)
		s[i] = p->batch ? (struct grad_shape){ 3, { p->batch, in_rows[i], in_cols[i] } }
				: (struct grad_shape){ 2, { in_rows[i], in_cols[i] } };
	for (int i = 0; i < 4; i++) {
		if (has[i])
			s[3 + i] = (struct grad_shape){ 2, { wr[i], wc[i] } };
		if (has[4 + i])
			s[7 + i] = (struct grad_shape){ 2, { 1, wc[i] } };
	}
	if (p->cfg.sinks)
		s[11] = (struct grad_shape){ 2, { 1, d->heads } };
	if (p->cfg.norm.kind && p->cfg.norm.q_weight) {
		s[12].rank = p->q_norm.rank;
		s[13].rank = p->k_norm.rank;
		memcpy(s[12].dim, p->q_norm.dim, sizeof(s[12].dim));
		memcpy(s[13].dim, p->k_norm.dim, sizeof(s[13].dim));
	}
	{
		static const int lat[5] = { LAT_Q_A_PROJ, LAT_KV_A_PROJ, LAT_KV_B_PROJ, LAT_Q_A_NORM,
					    LAT_KV_A_NORM };

		for (int i = 0; i < 5; i++) {
			s[14 + i].rank = p->latent[lat[i]].rank;
			memcpy(s[14 + i].dim, p->latent[lat[i]].dim, sizeof(s[14 + i].dim));
		}
	}
}

static size_t shape_size(const struct grad_shape *s)
{
	size_t n = s->rank ? 1 : 0;

	for (size_t i = 0; i < s->rank; i++)
		n *= s->dim[i];
	return n;
}

/* g's matrices (doubles) for the shapes: 0, or -1 said */
static int grads_alloc(struct run_grads *g, const struct grad_shape s[N_GRAD_ARRAYS])
{
	for (int i = 0; i < N_GRAD_ARRAYS; i++)
		if (s[i].rank && matrix_alloc_dims(grad_slot(g, i), s[i].rank, s[i].dim))
			return -1;
	return 0;
}

/*
 * --dtype f32: the inputs and weights as floats (run_floats_make: those read
 * as floats as they are), dO as floats, the library's mha_backward_f32 into
 * float arrays, and only then, the library's scratch gone, g's matrices
 * made and the gradients widened into them (exactly): the run's peak is
 * float32's.  -1 said (out of memory), else 0 and *st.
 */
static int grads_f32(struct run_grads *gr, const struct grad_shape s[N_GRAD_ARRAYS],
		     const matrix *dout, const struct problem *p, mha_report *rep, mha_status *st)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p);
	const size_t oc = mha_output_cols(d, weights_has(&p->w, WO));
	struct run_floats f;
	int ok = run_floats_make(&f, p) == 0, rc = -1;
	float *fo = NULL, *own_fo = NULL, *gf[N_GRAD_ARRAYS] = { NULL };

	if (dout && dout->rank)
		fo = dout->f ? dout->f : (own_fo = floats_copy(dout->v, B * d->n_q * oc, &ok));
	for (int i = 0; i < N_GRAD_ARRAYS; i++) {
		gf[i] = s[i].rank ? malloc((shape_size(&s[i]) ? shape_size(&s[i]) : 1) * sizeof(float))
				  : NULL;
		if (s[i].rank && !gf[i])
			ok = 0;
	}
	if (!ok) {
		error("out of memory");
		goto done;
	}
	{
		const mha_grads_f32 gg = { .size = sizeof(mha_grads_f32), gf[0], gf[1], gf[2], gf[3],
					   gf[4], gf[5], gf[6], gf[7], gf[8], gf[9], gf[10], gf[11],
					   gf[12], gf[13], gf[14], gf[15], gf[16], gf[17], gf[18] };

		/* the bar on standard error, as the float64 run's */
		mha_grad_observer watch = MHA_INIT(mha_grad_observer);

		MSG_LISTEN(watch);
		*st = mha_backward_f32_observed(&gg, fo, d, &f.in, &f.w, &p->cfg, &watch, rep);
	}
	run_floats_free(&f);
	free(own_fo);
	own_fo = NULL;
	if (grads_alloc(gr, s))
		goto done;
	for (int i = 0; *st == MHA_OK && i < N_GRAD_ARRAYS; i++)
		for (size_t k = 0; gf[i] && k < shape_size(&s[i]); k++)
			grad_slot(gr, i)->v[k] = gf[i][k];
	rc = 0;
done:
	if (rc)
		run_floats_free(&f);
	for (int i = 0; i < N_GRAD_ARRAYS; i++)
		free(gf[i]);
	free(own_fo);
	return rc;
}

/* m's entries rounded to float, and marked so for the writers */
static void round_f32(matrix *m)
{
	for (size_t i = 0; m->rank && i < matrix_size(m); i++)
		m->v[i] = (float)m->v[i];
	m->is_f32 = 1;
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
		     const mha_weights *w, const mha_config *cfg, const matrix *dout,
		     const mha_grad_observer *obs, int f32, mha_report *rep, mha_status *st)
{
	struct grad_shape s[N_GRAD_ARRAYS];
	mha_grads g;

	memset(gr, 0, sizeof(*gr));
	in = in ? in : &p->in;
	w = w ? w : &p->weights;
	cfg = cfg ? cfg : &p->cfg;
	grad_shapes(s, p, w);
	if (f32) {
		if (grads_f32(gr, s, dout, p, rep, st))
			return -1;
	} else {
		if (grads_alloc(gr, s))
			return -1;
		g = (mha_grads){ .size = sizeof(mha_grads),
				 .dxq = gr->dxq.v, .dxk = gr->dxk.v, .dxv = gr->dxv.v,
				 .dW_Q = gr->dW[0].v, .dW_K = gr->dW[1].v, .dW_V = gr->dW[2].v,
				 .dW_O = gr->dW[3].v, .db_Q = gr->db[0].v, .db_K = gr->db[1].v,
				 .db_V = gr->db[2].v, .db_O = gr->db[3].v, .dsinks = gr->dsinks.v,
				 .dq_norm = gr->dnorm[0].v, .dk_norm = gr->dnorm[1].v,
				 .dW_QA = gr->dlat[LAT_Q_A_PROJ].v, .dW_KVA = gr->dlat[LAT_KV_A_PROJ].v,
				 .dW_KVB = gr->dlat[LAT_KV_B_PROJ].v,
				 .dq_a_norm = gr->dlat[LAT_Q_A_NORM].v,
				 .dkv_a_norm = gr->dlat[LAT_KV_A_NORM].v };
		/* the bar on standard error, whatever else is watched */
		mha_grad_observer watch = obs ? *obs
					      : (mha_grad_observer)MHA_INIT(mha_grad_observer);

		MSG_LISTEN(watch);
		*st = mha_backward(&g, dout && dout->rank ? dout->v : NULL, &p->d, in, w, cfg,
				   &watch, rep);
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

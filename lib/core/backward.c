/*
 * backward.c: the core of mha_backward(), every gradient of the layer
 * (mha.h; api.c hands it every problem but latent attention's): the
 * checks, one sequence after another (back_sequence: the projections
 * recomputed, rope and norms, then every head, then the projections'
 * gradients and the whole-model stages handed over), and its memory.  The
 * heads run on one of two paths: the plain one (backward_plain.c), one head
 * and one query row at a time, when an observer wants a per-head stage or
 * cfg->exact is set; else the fast one (backward_fast.c, FlashAttention-2's
 * backward, on the threads).  Both share this file's checks, rope, the
 * projections and the stages handed over (backward.h).
 *
 * The float32 core is this file again, compiled with -DMHA_F32 (Makefile's
 * F32_AGAIN, as backward_fast.c): real is float there, the products run on
 * the float GEMM and packed kernels, the elementwise steps on
 * kernel_bwd.c's float copies, every value and sum a float, in the same
 * fixed order.  That copy takes the fast path only and defines BW(core)
 * alone (this one, the stage names and the memory too).
 */
#include "core/backward.h"
#include "core/core.h"
#include "core/plain.h"
#include "base/progress.h"
#include "base/rules.h"
#include "kernels/team.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef MHA_F32
#define GRAD_NAME(id, name) [MHA_GRAD_##id] = name,
static const char *const grad_names[MHA_GRAD_COUNT] = { MHA_GRAD_LIST(GRAD_NAME) };

const char *mha_grad_stage_name(mha_grad_stage stage)
{
	if ((unsigned)stage >= MHA_GRAD_COUNT)
		return "unknown";
	return grad_names[stage];
}
#endif

static real *alloc_n(size_t rows, size_t cols)
{
	size_t n;

	if (cols && rows > SIZE_MAX / cols)
		return NULL;
	n = rows * cols;
	if (n > SIZE_MAX / sizeof(real))
		return NULL;
	return malloc(n ? n * sizeof(real) : 1);
}

/*
 * Through one projection P = x·W + b (x (rows, d_in), W (d_in, cols)), given
 * dP (rows, cols): dx = dP·Wᵀ (dP without W), and dW += xᵀ·dP, db += the
 * column sums of dP, when asked (and W is there, for dW).
 */
static void back_projection(real *dx, real *dW, real *db, const real *x, const real *W,
			    const real *dP, size_t rows, size_t d_in, size_t cols)
{
	if (dx && W) {
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const real *w = W + k * cols, *g = dP + i * cols;
				real s = 0.0;

				for (size_t c = 0; c < cols; c++)
					s += g[c] * w[c];
				dx[i * d_in + k] = s;
			}
	} else if (dx) {
		memcpy(dx, dP, rows * cols * sizeof(real));
	}
	if (dW && W)
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const real a = x[i * d_in + k];
				real *w = dW + k * cols;

				for (size_t c = 0; c < cols; c++)
					w[c] += a * dP[i * cols + c];
			}
	if (db)
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				db[c] += dP[i * cols + c];
}

/* ---- the fast path's products (the forward's GEMM kernels) -------------- */

/* the product C (m, n) = A (m, k)·B (k, n) + bias as the kernels run it;
 * ta: A given as Aᵀ (k, m), tb: B given as Bᵀ (n, k), read in place */
/* C = A·B + bias on the kernels (ta, tb as mha_bw_gemm_of); an entry not finite
 * recomputed (rules.h) */
static mha_status fast_gemm(const struct mha_kernels *k, real *C, const real *A, int ta,
			    const real *B, int tb, const real *bias, size_t m, size_t n, size_t kk,
			    int threads)
{
	struct mha_gemm g = mha_bw_gemm_of(C, A, B, bias, m, n, kk, ta, tb, threads);

	if (!m || !n)
		return MHA_OK;
	k->gemm(&g);
	if (g.failed)
		return MHA_ERR_NOMEM;
	if (g.nonfinite &&
	    mha_finish_strided(C, m, n, n, A, ta ? 1 : kk, ta ? m : 1, B, tb ? kk : 1, tb ? 1 : n,
			       bias, kk, sizeof(real)))
		return MHA_ERR_RANGE;
	return MHA_OK;
}

/* x·W + b (W given) on the kernels into *owned; without W, x + b as the
 * plain path adds them (x itself without b) */
static mha_status fast_projection(const struct mha_kernels *k, int threads, const real **res,
				  real **owned, const real *x, size_t rows, size_t d_in,
				  const real *W, const real *b, size_t cols)
{
	*owned = NULL;
	*res = x;
	if (!W && !b)
		return MHA_OK;
	*owned = alloc_n(rows, cols);
	*res = *owned;
	if (!*owned)
		return MHA_ERR_NOMEM;
	if (!W) {
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				(*owned)[i * cols + c] = x[i * cols + c] + b[c];
		return MHA_OK;
	}
	return fast_gemm(k, *owned, x, 0, W, 0, b, rows, cols, d_in, threads);
}

/*
 * back_projection on the kernels: dx = dP·Wᵀ, dW += xᵀ·dP (Wᵀ and xᵀ
 * read in place by the GEMM's packing), db as there.  The first sequence
 * (first: dW all zeros) writes its product into dW, which 0 + part would
 * leave the same; later ones add a block of their own.  A gradient not
 * finite is found by mha_backward's last checks.
 */
static mha_status fast_back_projection(const struct mha_kernels *k, int threads, real *dx,
				       real *dW, real *db, const real *x, const real *W,
				       const real *dP, size_t rows, size_t d_in, size_t cols,
				       int first)
{
	mha_status st = MHA_OK;

	if (dx && W)
		st = fast_gemm(k, dx, dP, 0, W, 1, NULL, rows, d_in, cols, threads);
	else if (dx)
		memcpy(dx, dP, rows * cols * sizeof(real));
	if (st != MHA_ERR_NOMEM && dW && W && first) {
		st = fast_gemm(k, dW, x, 1, dP, 0, NULL, d_in, cols, rows, threads);
	} else if (st != MHA_ERR_NOMEM && dW && W) {
		real *part = alloc_n(d_in, cols);

		st = part ? fast_gemm(k, part, x, 1, dP, 0, NULL, d_in, cols, rows, threads)
			  : MHA_ERR_NOMEM;
		if (st != MHA_ERR_NOMEM)
			for (size_t i = 0; i < d_in * cols; i++)
				dW[i] += part[i];
		free(part);
	}
	if (st == MHA_OK && db)
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				db[c] += dP[i * cols + c];
	return st == MHA_ERR_RANGE ? MHA_OK : st;
}

/* What every sequence shares. */
struct bw_run {
	const grads_t *g;
	const mha_dims *d;
	const inputs_t *in;
	const weights_t *w;
	const mha_config *cfg;
	const mha_grad_observer *obs;
	struct mha_rule all;
	size_t out_cols;
	int fast, threads;         /* the fast path, on this many threads at most */
	const struct mha_kernels *k; /* the fast path's (of real) */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row, first_blocked_seq;
	double *dwq, *dwk;         /* the norm weights' gradients, summed in double */
	struct mha_progress progress; /* told to obs->progress (progress.h) */
};

/* The backward's multiply-adds, counted as three forwards': the forward
 * again, then each product's two gradients (as back_sequence adds them). */
static double backward_work(const mha_dims *d, const mha_config *cfg, const weights_t *w)
{
	const void *const W[4] = { w->W_Q, w->W_K, w->W_V, w->W_O };

	return 3 * mha_progress_forward_work(d, cfg, W);
}

static mha_status back_sequence(struct bw_run *z, const real *dout, size_t b)
{
	const mha_dims *d = z->d;
	const mha_config *cfg = z->cfg;
	const weights_t *w = z->w;
	const grads_t *g = z->g;
	const mha_grad_observer *obs = z->obs;
	const real *xq = z->in->xq + b * d->n_q * d->d_q_in;
	const real *xk = z->in->xk + b * d->n_kv * d->d_k_in;
	const real *xv = z->in->xv + b * d->n_kv * d->d_v_in;
	const int rope = cfg->rope.mode != MHA_ROPE_NONE, norm = cfg->norm.kind != MHA_NORM_NONE;
	const ptrdiff_t q_pos0 = mha_rule_offset_seq(d, cfg, b);
	struct bw r;
	real *owned_q = NULL, *owned_k = NULL, *owned_v = NULL, *q_rot = NULL, *k_rot = NULL;
	real *dcat_own = NULL, *dQ = NULL, *dK = NULL, *q_norm = NULL, *k_norm = NULL;
	real *dQp = NULL, *dKp = NULL;
	const real *dQn, *dKn, *dQf, *dKf;
	const real *Q = NULL, *K = NULL, *V = NULL;
	size_t hk, gk, gv, hv;
	double products; /* the sequence's projections' multiply-adds, W_O's too */
	mha_status st = MHA_OK;

	memset(&r, 0, sizeof(r));
	r.d = d;
	r.cfg = cfg;
	r.obs = obs;
	r.H = d->heads;
	r.G = mha_rule_kv_heads(d);
	r.dk = d->d_k;
	r.dv = d->d_v;
	r.scale = mha_scale_of(d, cfg);
	r.rule = mha_rule_seq(&z->all, b);
	r.progress = &z->progress;
	r.seen = mha_progress_listened(r.progress->fn, r.progress->stop) ? mha_progress_seen(&r.rule, d->n_q) : 0;
	r.first_blocked_head = -1;
	r.dsinks = cfg->sinks ? g->dsinks : NULL;
	hk = r.H * r.dk;
	gk = r.G * r.dk;
	gv = r.G * r.dv;
	hv = r.H * r.dv;
	/* as mha_progress_forward_work counts them: once forward, twice back */
	products = (w->W_Q ? (double)d->n_q * (double)d->d_q_in * (double)hk : 0) +
		   (w->W_K ? (double)d->n_kv * (double)d->d_k_in * (double)gk : 0) +
		   (w->W_V ? (double)d->n_kv * (double)d->d_v_in * (double)gv : 0) +
		   (w->W_O ? (double)d->n_q * (double)hv * (double)d->d_out : 0);

	if (obs && obs->fn && obs->sequence && obs->sequence(obs->ctx, b))
		return MHA_ERR_OBSERVER;
	mha_progress_phase(r.progress, "forward");
	if (z->fast) {
		st = fast_projection(z->k, z->threads, &Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q,
				     w->b_Q, hk);
		if (st == MHA_OK)
			st = fast_projection(z->k, z->threads, &K, &owned_k, xk, d->n_kv, d->d_k_in,
					     w->W_K, w->b_K, gk);
		if (st == MHA_OK)
			st = fast_projection(z->k, z->threads, &V, &owned_v, xv, d->n_kv, d->d_v_in,
					     w->W_V, w->b_V, gv);
	}
#ifndef MHA_F32
	/* (mha_backward_f32 has the fast path only) */
	else {
		st = mha_plain_projection(&Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q, w->b_Q, hk);
		if (st == MHA_OK)
			st = mha_plain_projection(&K, &owned_k, xk, d->n_kv, d->d_k_in, w->W_K, w->b_K,
						  gk);
		if (st == MHA_OK)
			st = mha_plain_projection(&V, &owned_v, xv, d->n_kv, d->d_v_in, w->W_V, w->b_V,
						  gv);
	}
#endif
	if (st != MHA_OK)
		goto done;
	if (!finite_all(Q, d->n_q * hk) || !finite_all(K, d->n_kv * gk) || !finite_all(V, d->n_kv * gv)) {
		st = MHA_ERR_RANGE;
		goto done;
	}
	r.Q = Q;
	r.K = K;
	r.V = V;
	if (norm) {
		/* the heads read Q and K normalised (and then turned) */
		q_norm = alloc_n(d->n_q, hk);
		k_norm = alloc_n(d->n_kv, gk);
		st = q_norm && k_norm ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_norm_turn(q_norm, Q, sizeof(real), d->n_q, r.H, r.dk, 0, &cfg->norm, 0);
		if (st == MHA_OK)
			st = mha_norm_turn(k_norm, K, sizeof(real), d->n_kv, r.G, r.dk, 0, &cfg->norm, 1);
		if (st != MHA_OK)
			goto done;
		r.Q = q_norm;
		r.K = k_norm;
	}
	if (rope) {
		/* the heads read Q and K turned by position */
		q_rot = alloc_n(d->n_q, hk);
		k_rot = alloc_n(d->n_kv, gk);
		st = q_rot && k_rot ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_rope_turn(q_rot, r.Q, sizeof(real), d->n_q, r.H, r.dk, &cfg->rope,
					   cfg->rope.q_pos, q_pos0);
		if (st == MHA_OK)
			st = mha_rope_turn(k_rot, r.K, sizeof(real), d->n_kv, r.G, r.dk, &cfg->rope,
					   cfg->rope.k_pos, 0);
		if (st != MHA_OK)
			goto done;
		r.Q = q_rot;
		r.K = k_rot;
	}

	/* dconcat = dO·W_Oᵀ; without W_O the concat is the output */
	if (w->W_O) {
		dcat_own = alloc_n(d->n_q, hv);
		if (!dcat_own) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		if (z->fast) {
			st = fast_gemm(z->k, dcat_own, dout, 0, w->W_O, 1, NULL, d->n_q, hv,
				       z->out_cols, z->threads);
			/* not finite: the last checks say so */
			if (st == MHA_ERR_NOMEM)
				goto done;
			st = MHA_OK;
		}
		for (size_t i = 0; i < d->n_q && !z->fast; i++)
			for (size_t c = 0; c < hv; c++) {
				const real *wc = w->W_O + c * z->out_cols, *gi = dout + i * z->out_cols;
				real s = 0.0;

				for (size_t k = 0; k < z->out_cols; k++)
					s += gi[k] * wc[k];
				dcat_own[i * hv + c] = s;
			}
		r.dcat = dcat_own;
	} else {
		r.dcat = dout;
	}
	if ((watches(obs, MHA_GRAD_DOUTPUT) &&
	     hand(obs, MHA_GRAD_DOUTPUT, -1, dout, d->n_q, z->out_cols)) ||
	    (watches(obs, MHA_GRAD_DCONCAT) &&
	     hand(obs, MHA_GRAD_DCONCAT, -1, r.dcat, d->n_q, hv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	r.concat = alloc_n(d->n_q, hv);
	r.dQr = calloc(d->n_q * hk, sizeof(real));
	r.dKr = calloc(d->n_kv * gk, sizeof(real));
	r.dV = calloc(d->n_kv * gv, sizeof(real));
	if (z->fast) {
		/* O(n·d): each row's L and D; K, V, then Q, dconcat packed per head */
		const size_t pk = BW(pack_bytes)(d, BW(kernels)(z->k)->packed_nr());

		r.nr = BW(kernels)(z->k)->packed_nr();
		r.one_pass = BW(one_pass)(d);
		r.lse = alloc_n(r.H, d->n_q);
		r.Dall = alloc_n(r.H, d->n_q);
		/* kept for the next call when large (pages.c): 32 MiB at n 2048,
		 * d_model 512, which malloc would map and fault in afresh */
		r.pk = pk == SIZE_MAX ? NULL : mha_big_alloc(pk);
		r.pk_bytes = pk;
		st = r.concat && r.dQr && r.dKr && r.dV && r.lse && r.Dall && r.pk ? MHA_OK
										   : MHA_ERR_NOMEM;
		if (st == MHA_OK) {
			mha_progress_phase(r.progress, "backward");
			st = BW(fast_heads)(&r, z->k, z->threads);
		}
		if (mha_progress_stopped(r.progress))
			st = MHA_ERR_STOPPED;
		if (st != MHA_OK)
			goto done;
		goto heads_done;
	}
	r.masked = alloc_n(d->n_kv, 1);
	r.tanh_of = alloc_n(d->n_kv, 1);
	r.p = alloc_n(d->n_kv, 1);
	r.dP = alloc_n(d->n_kv, 1);
	r.dscores = alloc_n(d->n_kv, 1);
	r.dQh = alloc_n(d->n_q, r.dk);
	r.dKh = alloc_n(d->n_kv, r.dk);
	r.dVh = alloc_n(d->n_kv, r.dv);
	r.Dv = alloc_n(d->n_q, 1);
	r.scratch = alloc_n(d->n_q > d->n_kv ? d->n_q : d->n_kv, r.dk > r.dv ? r.dk : r.dv);
	st = r.concat && r.dQr && r.dKr && r.dV && r.masked && r.tanh_of && r.p && r.dP &&
	     r.dscores && r.dQh && r.dKh && r.dVh && r.Dv && r.scratch ? MHA_OK : MHA_ERR_NOMEM;
	for (int s = 0; s < N_SQ && st == MHA_OK; s++) {
		if (s == SQ_DSCALED && !(cfg->softcap > 0))
			continue;
		if (watches(obs, mha_sq_stage(s)) && !(r.sq[s] = alloc_n(d->n_q, d->n_kv)))
			st = MHA_ERR_NOMEM;
	}
	mha_progress_phase(r.progress, "backward");
	for (size_t h = 0; h < r.H && st == MHA_OK; h++) {
		st = BW(plain_head)(&r, h);
		/* the head's attention forward and back: three times its keys */
		mha_progress_add(r.progress, (uint64_t)(3 * r.seen * (double)(r.dk + r.dv)));
		mha_progress_tell(r.progress);
		if (mha_progress_stopped(r.progress))
			st = MHA_ERR_STOPPED;
	}
	if (st != MHA_OK)
		goto done;
heads_done:
	mha_progress_phase(r.progress, "gradients");

	/* back through the rotation: the same angles, turned the other way */
	if (rope) {
		dQ = alloc_n(d->n_q, hk);
		dK = alloc_n(d->n_kv, gk);
		if (!dQ || !dK) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		mha_rope_turn_back(dQ, r.dQr, sizeof(real), d->n_q, r.H, r.dk, &cfg->rope,
				   cfg->rope.q_pos, q_pos0);
		mha_rope_turn_back(dK, r.dKr, sizeof(real), d->n_kv, r.G, r.dk, &cfg->rope,
				   cfg->rope.k_pos, 0);
	}
	/* back through the norm: Q and K as projected, the weights' sums in double */
	dQn = dQf = rope ? dQ : r.dQr;
	dKn = dKf = rope ? dK : r.dKr;
	if (norm) {
		dQp = alloc_n(d->n_q, hk);
		dKp = alloc_n(d->n_kv, gk);
		st = dQp && dKp ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_norm_back(dQp, dQn, Q, sizeof(real), d->n_q, r.H, r.dk, &cfg->norm, 0,
					   z->dwq);
		if (st == MHA_OK)
			st = mha_norm_back(dKp, dKn, K, sizeof(real), d->n_kv, r.G, r.dk, &cfg->norm, 1,
					   z->dwk);
		if (st != MHA_OK)
			goto done;
		dQf = dQp;
		dKf = dKp;
	}
	if ((rope && watches(obs, MHA_GRAD_DQ_ROT) &&
	     hand(obs, MHA_GRAD_DQ_ROT, -1, r.dQr, d->n_q, hk)) ||
	    (rope && watches(obs, MHA_GRAD_DK_ROT) &&
	     hand(obs, MHA_GRAD_DK_ROT, -1, r.dKr, d->n_kv, gk)) ||
	    (norm && watches(obs, MHA_GRAD_DQ_NORM) &&
	     hand(obs, MHA_GRAD_DQ_NORM, -1, dQn, d->n_q, hk)) ||
	    (norm && watches(obs, MHA_GRAD_DK_NORM) &&
	     hand(obs, MHA_GRAD_DK_NORM, -1, dKn, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DQ) && hand(obs, MHA_GRAD_DQ, -1, dQf, d->n_q, hk)) ||
	    (watches(obs, MHA_GRAD_DK) && hand(obs, MHA_GRAD_DK, -1, dKf, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DV) && hand(obs, MHA_GRAD_DV, -1, r.dV, d->n_kv, gv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	/* through the projections; the weights' gradients sum over the sequences */
	if (z->fast) {
		st = fast_back_projection(z->k, z->threads,
					  g->dxq ? g->dxq + b * d->n_q * d->d_q_in : NULL, g->dW_Q,
					  g->db_Q, xq, w->W_Q, dQf, d->n_q, d->d_q_in, hk, b == 0);
		if (st == MHA_OK)
			st = fast_back_projection(z->k, z->threads,
						  g->dxk ? g->dxk + b * d->n_kv * d->d_k_in : NULL,
						  g->dW_K, g->db_K, xk, w->W_K, dKf, d->n_kv,
						  d->d_k_in, gk, b == 0);
		if (st == MHA_OK)
			st = fast_back_projection(z->k, z->threads,
						  g->dxv ? g->dxv + b * d->n_kv * d->d_v_in : NULL,
						  g->dW_V, g->db_V, xv, w->W_V, r.dV, d->n_kv, d->d_v_in, gv,
						  b == 0);
		if (st == MHA_OK && w->W_O)
			st = fast_back_projection(z->k, z->threads, NULL, g->dW_O, g->db_O, r.concat,
						  w->W_O, dout, d->n_q, hv, z->out_cols, b == 0);
		goto done;
	}
	back_projection(g->dxq ? g->dxq + b * d->n_q * d->d_q_in : NULL, g->dW_Q, g->db_Q, xq,
			w->W_Q, dQf, d->n_q, d->d_q_in, hk);
	back_projection(g->dxk ? g->dxk + b * d->n_kv * d->d_k_in : NULL, g->dW_K, g->db_K, xk,
			w->W_K, dKf, d->n_kv, d->d_k_in, gk);
	back_projection(g->dxv ? g->dxv + b * d->n_kv * d->d_v_in : NULL, g->dW_V, g->db_V, xv,
			w->W_V, r.dV, d->n_kv, d->d_v_in, gv);
	if (w->W_O)
		back_projection(NULL, g->dW_O, g->db_O, r.concat, w->W_O, dout, d->n_q, hv,
				z->out_cols);

done:
	if (st == MHA_OK) {
		mha_progress_add(r.progress, (uint64_t)(3 * products));
		mha_progress_tell(r.progress);
	}
	if (st == MHA_OK && r.blocked && !z->blocked) {
		z->first_blocked_head = r.first_blocked_head;
		z->first_blocked_row = r.first_blocked_row;
		z->first_blocked_seq = b;
	}
	z->blocked += r.blocked;
	for (int s = 0; s < N_SQ; s++)
		free(r.sq[s]);
	free(r.concat);
	free(r.dQr);
	free(r.dKr);
	free(r.dV);
	free(r.masked);
	free(r.tanh_of);
	free(r.p);
	free(r.dP);
	free(r.dscores);
	free(r.dQh);
	free(r.dKh);
	free(r.dVh);
	free(r.Dv);
	free(r.lse);
	free(r.Dall);
	mha_big_free(r.pk, r.pk_bytes);
	free(r.scratch);
	free(dcat_own);
	free(dQ);
	free(dK);
	free(owned_q);
	free(owned_k);
	free(owned_v);
	free(q_rot);
	free(k_rot);
	free(q_norm);
	free(k_norm);
	free(dQp);
	free(dKp);
	return st;
}

/* n doubles at a, when a is given, set to 0 */
static void zero(real *a, size_t n)
{
	if (a)
		memset(a, 0, n * sizeof(real));
}

/* every entry of a (n, when a is given) finite */
static int finite_or_absent(const real *a, size_t n)
{
	return !a || finite_all(a, n);
}

/* the core backward in either element type (core.h): the checks, the sums
 * set to zero, the sequences, the last checks */
mha_status BW(core)(const grads_t *g, const real *dout, const mha_dims *d, const inputs_t *in,
		    const weights_t *w, const mha_config *cfg, const mha_grad_observer *obs,
		    mha_report *rep)
{
	static const weights_t no_weights = MHA_INIT(weights_t);
	static const mha_config defaults = MHA_INIT(mha_config);
	struct bw_run z;
	real *ones = NULL;
	size_t B, G, hk, gk, gv, hv, nq_w = 0, nk_w = 0;
	mha_status st = MHA_OK;

	if (!d || !in || !g)
		return MHA_ERR_NULL;
	if (!MHA_SIZED(g) || !MHA_SIZED(d) || !MHA_SIZED(in) || !MHA_SIZED(w) || !MHA_SIZED(cfg) ||
	    !MHA_SIZED(obs) || !MHA_SIZED(rep))
		return MHA_ERR_VERSION;
	if (!w)
		w = &no_weights;
	if (!cfg)
		cfg = &defaults;
	{
		const void *const x[3] = { in->xq, in->xk, in->xv };
		const void *const W[4] = { w->W_Q, w->W_K, w->W_V, w->W_O };

		st = mha_plain_validate(d, cfg, g, x, W, rep);
		if (st != MHA_OK)
			return st;
	}
	B = mha_rule_batch(d);
	G = mha_rule_kv_heads(d);
	hk = d->heads * d->d_k;
	gk = G * d->d_k;
	gv = G * d->d_v;
	hv = d->heads * d->d_v;
	memset(&z, 0, sizeof(z));
	z.g = g;
	z.d = d;
	z.in = in;
	z.w = w;
	z.cfg = cfg;
	z.obs = obs;
	z.all = mha_rule_of(d, cfg);
	z.out_cols = mha_output_cols(d, w->W_O != NULL);
	z.first_blocked_head = -1;

	/* the sums over the sequences start from zero */
	zero(w->W_Q ? g->dW_Q : NULL, d->d_q_in * hk);
	zero(w->W_K ? g->dW_K : NULL, d->d_k_in * gk);
	zero(w->W_V ? g->dW_V : NULL, d->d_v_in * gv);
	zero(g->dW_O, w->W_O ? hv * d->d_out : 0);
	zero(g->db_Q, hk);
	zero(g->db_K, gk);
	zero(g->db_V, gv);
	zero(g->db_O, w->W_O ? d->d_out : 0);
	zero(g->dsinks, cfg->sinks ? d->heads : 0);
	/* the norm weights' gradients: summed in double over the sequences */
	if (cfg->norm.kind != MHA_NORM_NONE) {
		const size_t per = cfg->norm.over_all || cfg->norm.per_head;

		nq_w = per ? hk : d->d_k;
		nk_w = per ? gk : d->d_k;
		if (cfg->norm.q_weight && g->dq_norm)
			z.dwq = calloc(nq_w, sizeof(double));
		if (cfg->norm.k_weight && g->dk_norm)
			z.dwk = calloc(nk_w, sizeof(double));
		if ((cfg->norm.q_weight && g->dq_norm && !z.dwq) ||
		    (cfg->norm.k_weight && g->dk_norm && !z.dwk)) {
			free(z.dwq);
			free(z.dwk);
			return MHA_ERR_NOMEM;
		}
	}

	if (!dout) {
		/* the gradient of sum(output): ones, one sequence's worth serves all */
		ones = malloc(d->n_q * z.out_cols * sizeof(real));
		if (!ones)
			st = MHA_ERR_NOMEM;
		for (size_t i = 0; i < d->n_q * z.out_cols; i++)
			ones[i] = 1.0;
	} else if (!finite_all(dout, B * d->n_q * z.out_cols)) {
		st = MHA_ERR_RANGE;
	}

	/* the fast path (fast_heads) in place of back_head's loop when no
	 * per-head stage is watched, as mha_forward picks its own */
	z.fast = !cfg->exact && !(obs && obs->fn && mha_grad_per_head(obs->stages)) && !(obs && obs->edit);
	mha_progress_start(&z.progress, obs ? obs->progress : NULL, obs ? obs->progress_ctx : NULL,
			   obs ? obs->stop : NULL, obs ? obs->stop_ctx : NULL,
			   obs && mha_progress_listened(obs->progress, obs->stop) ?
			   backward_work(d, cfg, w) : 0);
	z.threads = mha_threads(cfg);
	z.k = mha_pick_kernels(IS_F32);

	for (size_t b = 0; b < B && st == MHA_OK; b++)
		st = back_sequence(&z, dout ? dout + b * d->n_q * z.out_cols : ones, b);
	if (mha_progress_stopped(&z.progress))
		st = MHA_ERR_STOPPED; /* whatever the skipped work left */
	free(ones);
	for (size_t i = 0; z.dwq && i < nq_w && st == MHA_OK; i++)
		g->dq_norm[i] = (real)z.dwq[i];
	for (size_t i = 0; z.dwk && i < nk_w && st == MHA_OK; i++)
		g->dk_norm[i] = (real)z.dwk[i];
	free(z.dwq);
	free(z.dwk);
	if (st != MHA_OK)
		return st;
	if (!finite_or_absent(g->dxq, B * d->n_q * d->d_q_in) ||
	    !finite_or_absent(g->dxk, B * d->n_kv * d->d_k_in) ||
	    !finite_or_absent(g->dxv, B * d->n_kv * d->d_v_in) ||
	    !finite_or_absent(w->W_Q ? g->dW_Q : NULL, d->d_q_in * hk) ||
	    !finite_or_absent(w->W_K ? g->dW_K : NULL, d->d_k_in * gk) ||
	    !finite_or_absent(w->W_V ? g->dW_V : NULL, d->d_v_in * gv) ||
	    !finite_or_absent(w->W_O ? g->dW_O : NULL, hv * d->d_out) ||
	    !finite_or_absent(g->db_Q, hk) || !finite_or_absent(g->db_K, gk) ||
	    !finite_or_absent(g->db_V, gv) || !finite_or_absent(w->W_O ? g->db_O : NULL, d->d_out) ||
	    !finite_or_absent(cfg->sinks ? g->dsinks : NULL, d->heads) ||
	    !finite_or_absent(cfg->norm.q_weight ? g->dq_norm : NULL, nq_w) ||
	    !finite_or_absent(cfg->norm.k_weight ? g->dk_norm : NULL, nk_w))
		return MHA_ERR_RANGE;
	if (rep) {
		rep->blocked_rows = z.blocked;
		rep->first_blocked_head = z.first_blocked_head;
		rep->first_blocked_row = z.first_blocked_row;
		rep->first_blocked_sequence = z.first_blocked_seq;
		rep->scale = mha_scale_of(d, cfg);
		rep->fast_path = z.fast;
	}
	mha_progress_end(&z.progress);
	return MHA_OK;
}

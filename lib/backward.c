/*
 * backward.c: mha_backward(), every gradient of the layer (mha.h).
 *
 * This is the plain path: one sequence after another, one head after
 * another, one query row at a time.  Each row of the forward is recomputed
 * as mha.c computes it (scores, scaled, softcapped, masked, softmax, the
 * head's output), then its gradients are formed in the order mha.h writes
 * them (dP, D, dS, dscaled, dscores) and scattered into dQ_h, dK_h and
 * dV_h, every sum in ascending order.  An (n_q, n_kv) matrix exists only
 * for a stage an observer watches.  No blocking, no threads.
 *
 * Where the fast path goes (FlashAttention-2's backward): mha_backward()
 * below, at "the fast path plugs in here", when obs wants no per-head
 * stage (mha_grad_per_head() is 0) and cfg->exact is 0, as mha_forward()
 * picks its fast path.  It needs from a forward run, per sequence and
 * query head, each row's max m_i and log-sum-exp L_i = m_i + log(sum_i)
 * (the sink's term included), and the output O (or concat); then for each
 * key block it recomputes P = exp(masked − L_i) block by block (no
 * (n_q, n_kv) matrix), forms D = rowsum(dO ∘ O) once per row, and
 * accumulates dV, dK per key block and dQ per query block, threads over
 * (sequence, head, key block) with a fixed order of the sums so the bits do
 * not depend on the thread count.  Everything before the heads (the
 * projections, dconcat) and after them (rope turned back, the projections'
 * gradients) is shared with this file, and the whole-model stages
 * (doutput, dconcat, dq_rot, dk_rot, dQ, dK, dV) can still be handed over.
 * The rules (which keys are seen, the mask and ALiBi terms, the sink) come
 * from rules.h, as here.
 */
#include "mha.h"
#include "kernel.h"
#include "plain.h"
#include "rules.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const grad_names[MHA_GRAD_COUNT] = {
	[MHA_GRAD_DOUTPUT] = "doutput",
	[MHA_GRAD_DCONCAT] = "dconcat",
	[MHA_GRAD_HEAD_P] = "P",
	[MHA_GRAD_HEAD_O] = "O",
	[MHA_GRAD_HEAD_DO] = "dO",
	[MHA_GRAD_HEAD_DV] = "dV",
	[MHA_GRAD_HEAD_DP] = "dP",
	[MHA_GRAD_HEAD_D] = "D",
	[MHA_GRAD_HEAD_DS] = "dS",
	[MHA_GRAD_HEAD_DSCALED] = "dscaled",
	[MHA_GRAD_HEAD_DSCORES] = "dscores",
	[MHA_GRAD_HEAD_DQ] = "dQ",
	[MHA_GRAD_HEAD_DK] = "dK",
	[MHA_GRAD_DQ_ROT] = "dq_rot",
	[MHA_GRAD_DK_ROT] = "dk_rot",
	[MHA_GRAD_DQ] = "dQ",
	[MHA_GRAD_DK] = "dK",
	[MHA_GRAD_DV] = "dV",
};

const char *mha_grad_stage_name(mha_grad_stage stage)
{
	if ((unsigned)stage >= MHA_GRAD_COUNT)
		return "unknown";
	return grad_names[stage];
}

/* the stages that exist per head: only the plain path hands them over */
static int grad_per_head(unsigned wanted)
{
	unsigned bits = 0;

	for (int s = MHA_GRAD_HEAD_P; s <= MHA_GRAD_HEAD_DK; s++)
		bits |= MHA_STAGE_BIT(s);
	return (wanted & bits) != 0;
}

/* The per-head (n_q, n_kv) stages, kept row by row when watched. */
enum { SQ_P, SQ_DP, SQ_DS, SQ_DSCALED, SQ_DSCORES, N_SQ };
static const mha_grad_stage sq_stage[N_SQ] = {
	[SQ_P] = MHA_GRAD_HEAD_P, [SQ_DP] = MHA_GRAD_HEAD_DP, [SQ_DS] = MHA_GRAD_HEAD_DS,
	[SQ_DSCALED] = MHA_GRAD_HEAD_DSCALED, [SQ_DSCORES] = MHA_GRAD_HEAD_DSCORES,
};

struct bw {
	const mha_dims *d;
	const mha_config *cfg;
	const mha_grad_observer *obs;
	size_t H, G, dk, dv;
	double scale;
	struct mha_rule rule;      /* this sequence's (rules.h) */
	const double *Q, *K, *V;   /* what the heads read: (n_q, H·dk) (rotated with rope),
				      (n_kv, G·dk), (n_kv, G·dv) */
	const double *dcat;        /* (n_q, H·dv) the gradient of concat */
	double *concat;            /* (n_q, H·dv) the heads' outputs, recomputed */
	double *dQr, *dKr, *dV;    /* (n_q, H·dk), (n_kv, G·dk), (n_kv, G·dv): the gradients
				      of what the heads read */
	double *masked, *tanh_of, *p, *dscores; /* (n_kv) rows being worked on */
	double *dP;                /* (n_kv) */
	double *sq[N_SQ];          /* (n_q, n_kv) each, only for the watched stages */
	double *dQh, *dKh, *dVh;   /* (n_q, dk), (n_kv, dk), (n_kv, dv): one head's */
	double *Dv;                /* (n_q) one head's D */
	double *scratch;           /* (max(n_q, n_kv), max(dk, dv)) for head blocks */
	double *dsinks;            /* (H) the run's, summed over the sequences; or NULL */
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row;
};

static int watches(const mha_grad_observer *obs, mha_grad_stage s)
{
	return obs && obs->fn && (obs->wanted & MHA_STAGE_BIT(s));
}

/* hand over a column block (rows, width) at column col0 of m (rows, ld) */
static int show_block(const struct bw *r, mha_grad_stage s, int head, const double *m,
		      size_t rows, size_t ld, size_t col0, size_t width)
{
	for (size_t i = 0; i < rows; i++)
		memcpy(r->scratch + i * width, m + i * ld + col0, width * sizeof(double));
	return r->obs->fn(r->obs->ctx, s, head, r->scratch, rows, width);
}

static int finite_all(const double *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

static void keep(struct bw *r, int which, size_t i, const double *row)
{
	if (r->sq[which])
		memcpy(r->sq[which] + i * r->d->n_kv, row, r->d->n_kv * sizeof(double));
}

/*
 * Query row i of head h, forward: masked (n_kv) and, with a softcap,
 * tanh(scaled/c) of every key, then the softmax into p.  *psink the mass
 * the sink took (0 without one, or when every key is masked).  As mha.c's
 * run_head computes them, in the same order.
 */
static mha_status forward_row(struct bw *r, size_t h, size_t g, size_t i, double *psink)
{
	const mha_dims *d = r->d;
	const struct mha_rule *rule = &r->rule;
	const double *q = r->Q + i * r->H * r->dk + h * r->dk;
	const double c = r->cfg->softcap;
	double max = -INFINITY, sum = 0.0;

	for (size_t j = 0; j < d->n_kv; j++) {
		const double *k = r->K + j * r->G * r->dk + g * r->dk;
		double s = 0.0, x, m;

		for (size_t t = 0; t < r->dk; t++)
			s += q[t] * k[t];
		if (!isfinite(s)) {
			/* overflowing partial sums, or truly too large: rules.h decides */
			s = mha_dot_f64(q, 1, k, 1, r->dk, 0.0);
			if (mha_rule_overflows(rule, h, i, j, s))
				return MHA_ERR_RANGE;
		}
		x = s * r->scale;
		if (!isfinite(x) && mha_rule_overflows(rule, h, i, j, x))
			return MHA_ERR_RANGE;
		if (c > 0) {
			r->tanh_of[j] = tanh(x / c);
			x = c * r->tanh_of[j];
		}
		m = mha_rule_mask(rule, h, i, j);
		x = mha_rule_masked(x, m);
		if (!isfinite(x) && mha_rule_overflows(rule, h, i, j, x))
			return MHA_ERR_RANGE;
		r->masked[j] = x;
		if (x > max)
			max = x;
	}
	*psink = 0.0;
	if (max == -INFINITY) {
		/* every key blocked: weights 0, output 0, nothing flows back */
		memset(r->p, 0, d->n_kv * sizeof(double));
		if (!r->blocked++) {
			r->first_blocked_head = (int)h;
			r->first_blocked_row = i;
		}
		return MHA_OK;
	}
	{
		const double sink = rule->sinks ? rule->sinks[h] : -INFINITY;

		if (sink > max)
			max = sink;
		/* subtract the row max: exp() of a large score would overflow */
		for (size_t j = 0; j < d->n_kv; j++) {
			r->p[j] = exp(r->masked[j] - max);
			sum += r->p[j];
		}
		if (rule->sinks)
			sum += exp(sink - max);
		for (size_t j = 0; j < d->n_kv; j++)
			r->p[j] /= sum;
		if (rule->sinks)
			*psink = exp(sink - max) / sum;
	}
	return MHA_OK;
}

/* One query head: the forward row by row, its gradients, and what it adds to dK and dV. */
static mha_status back_head(struct bw *r, size_t h)
{
	const mha_dims *d = r->d;
	const size_t g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldk = r->G * r->dk, ldv = r->G * r->dv, ldc = r->H * r->dv;
	const double c = r->cfg->softcap;
	const mha_grad_observer *obs = r->obs;
	const int head = (int)h;
	double dsink = 0.0;
	mha_status st;

	memset(r->dKh, 0, d->n_kv * r->dk * sizeof(double));
	memset(r->dVh, 0, d->n_kv * r->dv * sizeof(double));
	for (size_t i = 0; i < d->n_q; i++) {
		const double *q = r->Q + i * ldq + h * r->dk;
		const double *dO = r->dcat + i * ldc + h * r->dv;
		double *o = r->concat + i * ldc + h * r->dv;
		double *dq = r->dQh + i * r->dk;
		double psink, D = 0.0;

		st = forward_row(r, h, g, i, &psink);
		if (st != MHA_OK)
			return st;
		/* the head's output row: softmax·V, keys ascending */
		memset(o, 0, r->dv * sizeof(double));
		for (size_t j = 0; j < d->n_kv; j++) {
			const double *v = r->V + j * ldv + g * r->dv;

			if (r->p[j] == 0.0)
				continue;
			for (size_t t = 0; t < r->dv; t++)
				o[t] += r->p[j] * v[t];
		}
		if (!finite_all(o, r->dv))
			return MHA_ERR_RANGE;
		/* D_i = rowsum(dO ∘ O) = Σ_j P_ij·dP_ij */
		for (size_t t = 0; t < r->dv; t++)
			D += dO[t] * o[t];
		r->Dv[i] = D;
		for (size_t j = 0; j < d->n_kv; j++) {
			const double *v = r->V + j * ldv + g * r->dv;
			double dp = 0.0, ds, dsc;

			for (size_t t = 0; t < r->dv; t++)
				dp += dO[t] * v[t];
			r->dP[j] = dp;
			/* a masked-out key gets nothing back, whatever its score */
			if (r->masked[j] == -INFINITY) {
				ds = dsc = r->dscores[j] = 0.0;
			} else {
				ds = r->p[j] * (dp - D);
				dsc = c > 0 ? ds * (1.0 - r->tanh_of[j] * r->tanh_of[j]) : ds;
				r->dscores[j] = dsc * r->scale;
			}
			if (r->sq[SQ_DS])
				r->sq[SQ_DS][i * d->n_kv + j] = ds;
			if (r->sq[SQ_DSCALED])
				r->sq[SQ_DSCALED][i * d->n_kv + j] = dsc;
		}
		keep(r, SQ_P, i, r->p);
		keep(r, SQ_DP, i, r->dP);
		keep(r, SQ_DSCORES, i, r->dscores);
		/* the sink: a logit whose value is 0, so its dP is 0 */
		dsink += -psink * D;
		/* dQ_h row i = Σ_j dscores_ij·K_j; dK_h, dV_h gather row i's part */
		memset(dq, 0, r->dk * sizeof(double));
		for (size_t j = 0; j < d->n_kv; j++) {
			const double *k = r->K + j * ldk + g * r->dk;
			const double ds = r->dscores[j], pj = r->p[j];
			double *dk = r->dKh + j * r->dk, *dv = r->dVh + j * r->dv;

			if (ds != 0.0)
				for (size_t t = 0; t < r->dk; t++) {
					dq[t] += ds * k[t];
					dk[t] += ds * q[t];
				}
			if (pj != 0.0)
				for (size_t t = 0; t < r->dv; t++)
					dv[t] += pj * dO[t];
		}
	}
	if (r->dsinks)
		r->dsinks[h] += dsink;

	/* into the whole: dQ's block h; dK's and dV's block g, query heads ascending */
	for (size_t i = 0; i < d->n_q; i++)
		memcpy(r->dQr + i * ldq + h * r->dk, r->dQh + i * r->dk, r->dk * sizeof(double));
	for (size_t j = 0; j < d->n_kv; j++) {
		for (size_t t = 0; t < r->dk; t++)
			r->dKr[j * ldk + g * r->dk + t] += r->dKh[j * r->dk + t];
		for (size_t t = 0; t < r->dv; t++)
			r->dV[j * ldv + g * r->dv + t] += r->dVh[j * r->dv + t];
	}

	if (!obs || !obs->fn)
		return MHA_OK;
	if ((r->sq[SQ_P] && obs->fn(obs->ctx, MHA_GRAD_HEAD_P, head, r->sq[SQ_P], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_O) &&
	     show_block(r, MHA_GRAD_HEAD_O, head, r->concat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DO) &&
	     show_block(r, MHA_GRAD_HEAD_DO, head, r->dcat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DV) &&
	     obs->fn(obs->ctx, MHA_GRAD_HEAD_DV, head, r->dVh, d->n_kv, r->dv)) ||
	    (r->sq[SQ_DP] && obs->fn(obs->ctx, MHA_GRAD_HEAD_DP, head, r->sq[SQ_DP], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_D) && obs->fn(obs->ctx, MHA_GRAD_HEAD_D, head, r->Dv, d->n_q, 1)) ||
	    (r->sq[SQ_DS] && obs->fn(obs->ctx, MHA_GRAD_HEAD_DS, head, r->sq[SQ_DS], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCALED] &&
	     obs->fn(obs->ctx, MHA_GRAD_HEAD_DSCALED, head, r->sq[SQ_DSCALED], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCORES] &&
	     obs->fn(obs->ctx, MHA_GRAD_HEAD_DSCORES, head, r->sq[SQ_DSCORES], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DQ) &&
	     obs->fn(obs->ctx, MHA_GRAD_HEAD_DQ, head, r->dQh, d->n_q, r->dk)) ||
	    (watches(obs, MHA_GRAD_HEAD_DK) &&
	     obs->fn(obs->ctx, MHA_GRAD_HEAD_DK, head, r->dKh, d->n_kv, r->dk)))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

static double *alloc_n(size_t rows, size_t cols)
{
	size_t n;

	if (cols && rows > SIZE_MAX / cols)
		return NULL;
	n = rows * cols;
	if (n > SIZE_MAX / sizeof(double))
		return NULL;
	return malloc(n ? n * sizeof(double) : 1);
}

/*
 * Through one projection P = x·W + b (x (rows, d_in), W (d_in, cols)), given
 * dP (rows, cols): dx = dP·Wᵀ (dP without W), and dW += xᵀ·dP, db += the
 * column sums of dP, when asked (and W is there, for dW).
 */
static void back_projection(double *dx, double *dW, double *db, const double *x, const double *W,
			    const double *dP, size_t rows, size_t d_in, size_t cols)
{
	if (dx && W) {
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const double *w = W + k * cols, *g = dP + i * cols;
				double s = 0.0;

				for (size_t c = 0; c < cols; c++)
					s += g[c] * w[c];
				dx[i * d_in + k] = s;
			}
	} else if (dx) {
		memcpy(dx, dP, rows * cols * sizeof(double));
	}
	if (dW && W)
		for (size_t i = 0; i < rows; i++)
			for (size_t k = 0; k < d_in; k++) {
				const double a = x[i * d_in + k];
				double *w = dW + k * cols;

				for (size_t c = 0; c < cols; c++)
					w[c] += a * dP[i * cols + c];
			}
	if (db)
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				db[c] += dP[i * cols + c];
}

/* What every sequence shares. */
struct bw_run {
	const mha_grads *g;
	const mha_dims *d;
	const mha_inputs *in;
	const mha_weights *w;
	const mha_config *cfg;
	const mha_grad_observer *obs;
	struct mha_rule all;
	size_t out_cols;
	size_t blocked;
	int first_blocked_head;
	size_t first_blocked_row, first_blocked_seq;
};

static mha_status back_sequence(struct bw_run *z, const double *dout, size_t b)
{
	const mha_dims *d = z->d;
	const mha_config *cfg = z->cfg;
	const mha_weights *w = z->w;
	const mha_grads *g = z->g;
	const mha_grad_observer *obs = z->obs;
	const double *xq = z->in->xq + b * d->n_q * d->d_q_in;
	const double *xk = z->in->xk + b * d->n_kv * d->d_k_in;
	const double *xv = z->in->xv + b * d->n_kv * d->d_v_in;
	const int rope = cfg->rope.mode != MHA_ROPE_NONE;
	const ptrdiff_t q_pos0 = mha_rule_offset_seq(d, cfg, b);
	struct bw r;
	double *owned_q = NULL, *owned_k = NULL, *owned_v = NULL, *q_rot = NULL, *k_rot = NULL;
	double *dcat_own = NULL, *dQ = NULL, *dK = NULL;
	const double *Q, *K, *V;
	size_t hk, gk, gv, hv;
	mha_status st;

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
	r.first_blocked_head = -1;
	r.dsinks = cfg->sinks ? g->dsinks : NULL;
	hk = r.H * r.dk;
	gk = r.G * r.dk;
	gv = r.G * r.dv;
	hv = r.H * r.dv;

	if (obs && obs->fn && obs->sequence && obs->sequence(obs->ctx, b))
		return MHA_ERR_OBSERVER;
	st = mha_plain_projection(&Q, &owned_q, xq, d->n_q, d->d_q_in, w->W_Q, w->b_Q, hk);
	if (st == MHA_OK)
		st = mha_plain_projection(&K, &owned_k, xk, d->n_kv, d->d_k_in, w->W_K, w->b_K, gk);
	if (st == MHA_OK)
		st = mha_plain_projection(&V, &owned_v, xv, d->n_kv, d->d_v_in, w->W_V, w->b_V, gv);
	if (st != MHA_OK)
		goto done;
	if (!finite_all(Q, d->n_q * hk) || !finite_all(K, d->n_kv * gk) || !finite_all(V, d->n_kv * gv)) {
		st = MHA_ERR_RANGE;
		goto done;
	}
	r.Q = Q;
	r.K = K;
	r.V = V;
	if (rope) {
		/* the heads read Q and K turned by position */
		q_rot = alloc_n(d->n_q, hk);
		k_rot = alloc_n(d->n_kv, gk);
		st = q_rot && k_rot ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK)
			st = mha_rope_turn(q_rot, Q, sizeof(double), d->n_q, r.H, r.dk, &cfg->rope,
					   cfg->rope.q_pos, q_pos0);
		if (st == MHA_OK)
			st = mha_rope_turn(k_rot, K, sizeof(double), d->n_kv, r.G, r.dk, &cfg->rope,
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
		for (size_t i = 0; i < d->n_q; i++)
			for (size_t c = 0; c < hv; c++) {
				const double *wc = w->W_O + c * z->out_cols, *gi = dout + i * z->out_cols;
				double s = 0.0;

				for (size_t k = 0; k < z->out_cols; k++)
					s += gi[k] * wc[k];
				dcat_own[i * hv + c] = s;
			}
		r.dcat = dcat_own;
	} else {
		r.dcat = dout;
	}
	if ((watches(obs, MHA_GRAD_DOUTPUT) &&
	     obs->fn(obs->ctx, MHA_GRAD_DOUTPUT, -1, dout, d->n_q, z->out_cols)) ||
	    (watches(obs, MHA_GRAD_DCONCAT) &&
	     obs->fn(obs->ctx, MHA_GRAD_DCONCAT, -1, r.dcat, d->n_q, hv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	r.concat = alloc_n(d->n_q, hv);
	r.dQr = calloc(d->n_q * hk, sizeof(double));
	r.dKr = calloc(d->n_kv * gk, sizeof(double));
	r.dV = calloc(d->n_kv * gv, sizeof(double));
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
		if (watches(obs, sq_stage[s]) && !(r.sq[s] = alloc_n(d->n_q, d->n_kv)))
			st = MHA_ERR_NOMEM;
	}
	for (size_t h = 0; h < r.H && st == MHA_OK; h++)
		st = back_head(&r, h);
	if (st != MHA_OK)
		goto done;

	/* back through the rotation: the same angles, turned the other way */
	if (rope) {
		dQ = alloc_n(d->n_q, hk);
		dK = alloc_n(d->n_kv, gk);
		if (!dQ || !dK) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		mha_rope_turn_back(dQ, r.dQr, d->n_q, r.H, r.dk, &cfg->rope, cfg->rope.q_pos, q_pos0);
		mha_rope_turn_back(dK, r.dKr, d->n_kv, r.G, r.dk, &cfg->rope, cfg->rope.k_pos, 0);
	}
	if ((rope && watches(obs, MHA_GRAD_DQ_ROT) &&
	     obs->fn(obs->ctx, MHA_GRAD_DQ_ROT, -1, r.dQr, d->n_q, hk)) ||
	    (rope && watches(obs, MHA_GRAD_DK_ROT) &&
	     obs->fn(obs->ctx, MHA_GRAD_DK_ROT, -1, r.dKr, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DQ) &&
	     obs->fn(obs->ctx, MHA_GRAD_DQ, -1, rope ? dQ : r.dQr, d->n_q, hk)) ||
	    (watches(obs, MHA_GRAD_DK) &&
	     obs->fn(obs->ctx, MHA_GRAD_DK, -1, rope ? dK : r.dKr, d->n_kv, gk)) ||
	    (watches(obs, MHA_GRAD_DV) && obs->fn(obs->ctx, MHA_GRAD_DV, -1, r.dV, d->n_kv, gv))) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}

	/* through the projections; the weights' gradients sum over the sequences */
	back_projection(g->dxq ? g->dxq + b * d->n_q * d->d_q_in : NULL, g->dW_Q, g->db_Q, xq,
			w->W_Q, rope ? dQ : r.dQr, d->n_q, d->d_q_in, hk);
	back_projection(g->dxk ? g->dxk + b * d->n_kv * d->d_k_in : NULL, g->dW_K, g->db_K, xk,
			w->W_K, rope ? dK : r.dKr, d->n_kv, d->d_k_in, gk);
	back_projection(g->dxv ? g->dxv + b * d->n_kv * d->d_v_in : NULL, g->dW_V, g->db_V, xv,
			w->W_V, r.dV, d->n_kv, d->d_v_in, gv);
	if (w->W_O)
		back_projection(NULL, g->dW_O, g->db_O, r.concat, w->W_O, dout, d->n_q, hv,
				z->out_cols);

done:
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
	free(r.scratch);
	free(dcat_own);
	free(dQ);
	free(dK);
	free(owned_q);
	free(owned_k);
	free(owned_v);
	free(q_rot);
	free(k_rot);
	return st;
}

/* n doubles at a, when a is given, set to 0 */
static void zero(double *a, size_t n)
{
	if (a)
		memset(a, 0, n * sizeof(double));
}

/* every entry of a (n, when a is given) finite */
static int finite_or_absent(const double *a, size_t n)
{
	return !a || finite_all(a, n);
}

mha_status mha_backward(const mha_grads *g, const double *dout, const mha_dims *d,
			const mha_inputs *in, const mha_weights *w, const mha_config *cfg,
			const mha_grad_observer *obs, mha_report *rep)
{
	static const mha_weights no_weights;
	static const mha_config defaults;
	struct bw_run z;
	double *ones = NULL;
	size_t B, G, hk, gk, gv, hv;
	mha_status st = MHA_OK;

	if (!w)
		w = &no_weights;
	if (!cfg)
		cfg = &defaults;
	if (!d || !in || !g)
		return MHA_ERR_NULL;
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

	if (!dout) {
		/* the gradient of sum(output): ones, one sequence's worth serves all */
		ones = malloc(d->n_q * z.out_cols * sizeof(double));
		if (!ones)
			return MHA_ERR_NOMEM;
		for (size_t i = 0; i < d->n_q * z.out_cols; i++)
			ones[i] = 1.0;
	} else if (!finite_all(dout, B * d->n_q * z.out_cols)) {
		return MHA_ERR_RANGE;
	}

	{
		/*
		 * The fast path plugs in here: when fast is 1, FlashAttention-2's
		 * backward (see the top of this file) in place of back_head's
		 * loop.  Until it exists the plain path computes every call
		 * (rep->fast_path stays 0).
		 */
		const int fast = !cfg->exact && !(obs && obs->fn && grad_per_head(obs->wanted));

		(void)fast;
	}

	for (size_t b = 0; b < B && st == MHA_OK; b++)
		st = back_sequence(&z, dout ? dout + b * d->n_q * z.out_cols : ones, b);
	free(ones);
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
	    !finite_or_absent(cfg->sinks ? g->dsinks : NULL, d->heads))
		return MHA_ERR_RANGE;
	if (rep) {
		rep->blocked_rows = z.blocked;
		rep->first_blocked_head = z.first_blocked_head;
		rep->first_blocked_row = z.first_blocked_row;
		rep->first_blocked_sequence = z.first_blocked_seq;
		rep->scale = mha_scale_of(d, cfg);
	}
	return MHA_OK;
}

/* a block of rows·cols doubles as the allocator sees it, saturating */
static size_t dbl_block(size_t rows, size_t cols)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), sizeof(double)), MHA_ALLOC_SLACK);
}

size_t mha_backward_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted)
{
	static const mha_config defaults;
	size_t G, hk, gk, gv, hv, big, wide, t = 0;
	int squares = 0;

	if (!d || mha_check(d, cfg) != MHA_OK)
		return SIZE_MAX;
	/* one sequence at a time, every weight taken as given (Q, K, V and
	 * dconcat then are the run's own); the ones of a NULL dout not counted */
	if (!cfg)
		cfg = &defaults;
	G = mha_rule_kv_heads(d);
	hk = d->heads * d->d_k;
	gk = G * d->d_k;
	gv = G * d->d_v;
	hv = d->heads * d->d_v;
	big = d->n_q > d->n_kv ? d->n_q : d->n_kv;
	wide = d->d_k > d->d_v ? d->d_k : d->d_v;
	/* Q, K, V, dconcat, concat, dQ, dK, dV */
	t = mha_sat_add(t, dbl_block(d->n_q, hk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gv));
	t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hv)));
	t = mha_sat_add(t, dbl_block(d->n_q, hk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gk));
	t = mha_sat_add(t, dbl_block(d->n_kv, gv));
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		/* q_rot, k_rot, and dQ, dK turned back */
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hk)));
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_kv, gk)));
	}
	/* the rows, one head's blocks, D and the scratch */
	t = mha_sat_add(t, mha_sat_mul(5, dbl_block(d->n_kv, 1)));
	t = mha_sat_add(t, dbl_block(d->n_q, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_v));
	t = mha_sat_add(t, dbl_block(d->n_q, 1));
	t = mha_sat_add(t, dbl_block(big, wide));
	for (int s = 0; s < N_SQ; s++)
		if ((wanted & MHA_STAGE_BIT(sq_stage[s])) && (s != SQ_DSCALED || cfg->softcap > 0))
			squares++;
	return mha_sat_add(t, mha_sat_mul((size_t)squares, dbl_block(d->n_q, d->n_kv)));
}

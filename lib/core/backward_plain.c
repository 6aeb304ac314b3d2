/*
 * backward_plain.c: mha_backward()'s plain path, one query head at a time
 * (backward.h; backward.c runs it when an observer wants a per-head stage
 * or cfg->exact is set).  Each row of the forward is recomputed as mha.c
 * computes it (scores, scaled, softcapped, masked, softmax, the head's
 * output), then its gradients are formed in the order mha.h writes them
 * (dP, D, dS, dscaled, dscores) and scattered into dQ_h, dK_h and dV_h,
 * every sum in ascending order.  An (n_q, n_kv) matrix exists only for a
 * stage an observer watches.  No blocking, no threads.
 *
 * Compiled twice, as backward.c is; the float copy never runs it
 * (mha_backward_f32 takes the fast path only).
 */
#include "core/backward.h"
#include "core/plain.h"

#include <string.h>

/* a stage's values (rows, cols) offered to obs's editor before the
 * backward goes on with them (row: the query row); nonzero stops the run */
static int edit(const mha_grad_observer *obs, mha_grad_stage s, int head, size_t row, real *m,
		size_t rows, size_t cols)
{
#ifdef MHA_F32
	(void)obs, (void)s, (void)head, (void)row, (void)m, (void)rows, (void)cols;
	return 0;
#else
	return obs && obs->edit ? obs->edit(obs->edit_ctx, s, head, row, m, rows, cols) : 0;
#endif
}

/* hand over a column block (rows, width) at column col0 of m (rows, ld) */
static int show_block(const struct bw *r, mha_grad_stage s, int head, const real *m,
		      size_t rows, size_t ld, size_t col0, size_t width)
{
	for (size_t i = 0; i < rows; i++)
		memcpy(r->scratch + i * width, m + i * ld + col0, width * sizeof(real));
	return hand(r->obs, s, head, r->scratch, rows, width);
}


static void keep(struct bw *r, int which, size_t i, const real *row)
{
	if (r->sq[which])
		memcpy(r->sq[which] + i * r->d->n_kv, row, r->d->n_kv * sizeof(real));
}

/*
 * Query row i of head h, forward: masked (n_kv) and, with a softcap,
 * tanh(scaled/c) of every key, then the softmax into p.  *psink the mass
 * the sink took (0 without one, or when every key is masked).  As mha.c's
 * run_head computes them, in the same order.
 */
static mha_status forward_row(struct bw *r, size_t h, size_t g, size_t i, real *psink)
{
	const mha_dims *d = r->d;
	const struct mha_rule *rule = &r->rule;
	const real *q = r->Q + i * r->H * r->dk + h * r->dk;
	const real c = r->cfg->softcap;
	real max = -INFINITY, sum = 0.0;

	for (size_t j = 0; j < d->n_kv; j++) {
		const real *k = r->K + j * r->G * r->dk + g * r->dk;
		real s = 0.0, x, m;

		for (size_t t = 0; t < r->dk; t++)
			s += q[t] * k[t];
		if (!isfinite(s)) {
			/* overflowing partial sums, or truly too large: rules.h decides */
			s = DOT(q, 1, k, 1, r->dk, 0.0);
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
		memset(r->p, 0, d->n_kv * sizeof(real));
		if (!r->blocked++) {
			r->first_blocked_head = (int)h;
			r->first_blocked_row = i;
		}
		return MHA_OK;
	}
	{
		const real sink = rule->sinks ? rule->sinks[h] : -INFINITY;

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
mha_status BW(plain_head)(struct bw *r, size_t h)
{
	const mha_dims *d = r->d;
	const size_t g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldk = r->G * r->dk, ldv = r->G * r->dv, ldc = r->H * r->dv;
	const real c = r->cfg->softcap;
	const mha_grad_observer *obs = r->obs;
	const int head = (int)h;
	real dsink = 0.0;
	mha_status st;

	memset(r->dKh, 0, d->n_kv * r->dk * sizeof(real));
	memset(r->dVh, 0, d->n_kv * r->dv * sizeof(real));
	for (size_t i = 0; i < d->n_q; i++) {
		const real *q = r->Q + i * ldq + h * r->dk;
		const real *dO = r->dcat + i * ldc + h * r->dv;
		real *o = r->concat + i * ldc + h * r->dv;
		real *dq = r->dQh + i * r->dk;
		real psink, D = 0.0;

		st = forward_row(r, h, g, i, &psink);
		if (st != MHA_OK)
			return st;
		/* the head's output row: softmax·V, keys ascending */
		memset(o, 0, r->dv * sizeof(real));
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *v = r->V + j * ldv + g * r->dv;

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
		/* an editor's what-ifs (mha.h): P as dV and dS use it, D, dP */
		if (edit(obs, MHA_GRAD_HEAD_P, head, i, r->p, 1, d->n_kv) ||
		    edit(obs, MHA_GRAD_HEAD_D, head, i, &D, 1, 1))
			return MHA_ERR_OBSERVER;
		r->Dv[i] = D;
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *v = r->V + j * ldv + g * r->dv;
			real dp = 0.0;

			for (size_t t = 0; t < r->dv; t++)
				dp += dO[t] * v[t];
			r->dP[j] = dp;
		}
		if (edit(obs, MHA_GRAD_HEAD_DP, head, i, r->dP, 1, d->n_kv))
			return MHA_ERR_OBSERVER;
		for (size_t j = 0; j < d->n_kv; j++) {
			const real dp = r->dP[j];
			real ds, dsc;

			/* a masked-out key gets nothing back, whatever its score (but a
			 * weight an editor gave it) */
			if (r->masked[j] == -INFINITY && r->p[j] == 0.0) {
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
		if (edit(obs, MHA_GRAD_HEAD_DSCORES, head, i, r->dscores, 1, d->n_kv))
			return MHA_ERR_OBSERVER;
		keep(r, SQ_P, i, r->p);
		keep(r, SQ_DP, i, r->dP);
		keep(r, SQ_DSCORES, i, r->dscores);
		/* the sink: a logit whose value is 0, so its dP is 0 */
		dsink += -psink * D;
		/* dQ_h row i = Σ_j dscores_ij·K_j; dK_h, dV_h gather row i's part */
		memset(dq, 0, r->dk * sizeof(real));
		for (size_t j = 0; j < d->n_kv; j++) {
			const real *k = r->K + j * ldk + g * r->dk;
			const real ds = r->dscores[j], pj = r->p[j];
			real *dk = r->dKh + j * r->dk, *dv = r->dVh + j * r->dv;

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
	if (edit(obs, MHA_GRAD_HEAD_DV, head, 0, r->dVh, d->n_kv, r->dv) ||
	    edit(obs, MHA_GRAD_HEAD_DQ, head, 0, r->dQh, d->n_q, r->dk) ||
	    edit(obs, MHA_GRAD_HEAD_DK, head, 0, r->dKh, d->n_kv, r->dk))
		return MHA_ERR_OBSERVER;

	/* into the whole: dQ's block h; dK's and dV's block g, query heads ascending */
	for (size_t i = 0; i < d->n_q; i++)
		memcpy(r->dQr + i * ldq + h * r->dk, r->dQh + i * r->dk, r->dk * sizeof(real));
	for (size_t j = 0; j < d->n_kv; j++) {
		for (size_t t = 0; t < r->dk; t++)
			r->dKr[j * ldk + g * r->dk + t] += r->dKh[j * r->dk + t];
		for (size_t t = 0; t < r->dv; t++)
			r->dV[j * ldv + g * r->dv + t] += r->dVh[j * r->dv + t];
	}

	if (!obs || !obs->fn)
		return MHA_OK;
	if ((r->sq[SQ_P] && hand(obs, MHA_GRAD_HEAD_P, head, r->sq[SQ_P], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_O) &&
	     show_block(r, MHA_GRAD_HEAD_O, head, r->concat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DO) &&
	     show_block(r, MHA_GRAD_HEAD_DO, head, r->dcat, d->n_q, ldc, h * r->dv, r->dv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DV) &&
	     hand(obs, MHA_GRAD_HEAD_DV, head, r->dVh, d->n_kv, r->dv)) ||
	    (r->sq[SQ_DP] && hand(obs, MHA_GRAD_HEAD_DP, head, r->sq[SQ_DP], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_D) && hand(obs, MHA_GRAD_HEAD_D, head, r->Dv, d->n_q, 1)) ||
	    (r->sq[SQ_DS] && hand(obs, MHA_GRAD_HEAD_DS, head, r->sq[SQ_DS], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCALED] &&
	     hand(obs, MHA_GRAD_HEAD_DSCALED, head, r->sq[SQ_DSCALED], d->n_q, d->n_kv)) ||
	    (r->sq[SQ_DSCORES] &&
	     hand(obs, MHA_GRAD_HEAD_DSCORES, head, r->sq[SQ_DSCORES], d->n_q, d->n_kv)) ||
	    (watches(obs, MHA_GRAD_HEAD_DQ) &&
	     hand(obs, MHA_GRAD_HEAD_DQ, head, r->dQh, d->n_q, r->dk)) ||
	    (watches(obs, MHA_GRAD_HEAD_DK) &&
	     hand(obs, MHA_GRAD_HEAD_DK, head, r->dKh, d->n_kv, r->dk)))
		return MHA_ERR_OBSERVER;
	return MHA_OK;
}

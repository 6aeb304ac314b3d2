/*
 * mla.c: multi-head latent attention (mha.h's mha_mla).
 *
 * The front: the latents c_q and c_kv from X, each normalised, each head's
 * query and key in two parts (the second turned by position, the key's
 * shared by every head) and its values.  They are assembled as directly
 * given Q, K and V and handed to mha_forward (or mha_forward_f32,
 * mha_backward, mha_backward_f32) with identity projections, no rope and
 * the scale worked out: every path and every option of the attention
 * (plain and fast, masks, windows, sinks, the grouped heads, threads)
 * serves MLA as it is.  The backward pass (mla_back.c) takes the
 * attention's gradients of Q, K and V back through the front; the run's
 * state and the helpers both files use are mla_run.h's.
 *
 * The products run on the fast path's kernels (the same bits on both
 * paths: the plain and fast runs differ only in the attention), in the
 * run's element type; the norms and the rotation are norm.c's and rope.c's.
 */
#include "latent/mla.h"
#include "core/core.h"

#include "kernels/kernel.h"
#include "base/rules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sizes ---------------------------------------------------------------- */

static struct mla_shape shape_of(const mha_dims *d, const mha_config *cfg, int has_wo)
{
	const mha_mla *m = &cfg->mla;
	struct mla_shape s;

	s.B = mha_rule_batch(d);
	s.N = s.B * d->n_q;
	s.M = s.B * d->n_kv;
	s.H = d->heads;
	s.dk = d->d_k;
	s.dv = d->d_v;
	s.dr = m->d_rope;
	s.dn = d->d_k - m->d_rope;
	s.qr = m->q_rank;
	s.kr = m->kv_rank;
	s.hk = s.H * s.dk;
	s.hv = s.H * s.dv;
	s.hr = s.H * s.dr;
	s.hn = s.H * s.dn;
	s.kvb = s.H * (s.dn + s.dv);
	s.ka = s.kr + s.dr;
	s.dout = has_wo ? d->d_out : s.hv;
	s.absorbed = m->absorbed != 0;
	s.turned = cfg->rope.mode != MHA_ROPE_NONE;
	return s;
}

/* ---- the buffers ------------------------------------------------------------ */

static void plan_of(struct mla_plan *p, const struct mla_shape *s, mha_stages wanted, int backward)
{
	memset(p, 0, sizeof(*p));
#define SET(b, r, c) (p->rows[b] = (r), p->cols[b] = (c))
	if (s->qr) {
		SET(CQ, s->N, s->qr);
		SET(CQN, s->N, s->qr);
	}
	SET(Q0, s->N, s->hk);
	SET(QPE, s->N, s->hr);
	SET(QPER, s->N, s->hr);
	SET(CKV, s->M, s->ka);
	SET(CKR, s->M, s->kr);
	SET(CKVN, s->M, s->kr);
	SET(KPE, s->M, s->dr);
	SET(KPER, s->M, s->dr);
	SET(ROW, 1, s->dr);
	if (s->absorbed) {
		SET(QN, s->N, s->hn);
		SET(QA, s->N, s->H * s->ka);
		SET(KA, s->M, s->ka);
		SET(WOA, s->H * s->kr, s->dout);
	} else {
		SET(KVB, s->M, s->kvb);
		if (wanted & MHA_STAGE_SET(MHA_STAGE_Q_NOPE))
			SET(QN, s->N, s->hn);
		if (wanted & MHA_STAGE_SET(MHA_STAGE_K_NOPE))
			SET(KN, s->M, s->hn);
		SET(QA, s->N, s->hk);
		SET(KA, s->M, s->hk);
		SET(VA, s->M, s->hv);
	}
	if (backward) {
		SET(DQA, s->N, s->hk);
		SET(DKA, s->M, s->hk);
		SET(DVA, s->M, s->hv);
		SET(DQPE, s->N, s->hr);
		if (s->qr) {
			SET(DCQN, s->N, s->qr);
			SET(DCQ, s->N, s->qr);
		}
		SET(DKPE, s->M, s->dr);
		SET(DKVB, s->M, s->kvb);
		SET(DCKVN, s->M, s->kr);
		SET(DCKR, s->M, s->kr);
		SET(DCKV, s->M, s->ka);
	}
#undef SET
}

/* a block of rows·cols elements as the allocator sees it, saturating */
static size_t block_bytes(size_t rows, size_t cols, size_t esize)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), esize), MHA_ALLOC_SLACK);
}

static size_t plan_bytes(const struct mla_plan *p, size_t esize)
{
	size_t t = 0;

	for (int b = 0; b < NBUF; b++)
		if (p->rows[b] && p->cols[b])
			t = mha_sat_add(t, block_bytes(p->rows[b], p->cols[b], esize));
	return t;
}

/* ---- one run ------------------------------------------------------------------ */

static mha_status alloc_all(struct mla_run *r)
{
	for (int b = 0; b < NBUF; b++) {
		if (!r->p.rows[b] || !r->p.cols[b])
			continue;
		r->b[b] = mha_big_alloc(r->p.rows[b] * r->p.cols[b] * r->e);
		if (!r->b[b])
			return MHA_ERR_NOMEM;
	}
	return MHA_OK;
}

void mha_mla_free_all(struct mla_run *r)
{
	for (int b = 0; b < NBUF; b++)
		if (r->b[b])
			mha_big_free(r->b[b], r->p.rows[b] * r->p.cols[b] * r->e);
}

/* what the attention reads of the front: the assembled Q, K, V (the absorbed
 * form's, with c_kv_norm its values and W_O') */
static int held_by_core(int b)
{
	return b == QA || b == KA || b == VA || b == CKVN || b == WOA;
}

/* the forward's front buffers the attention does not read, freed before it runs */
static void free_front(struct mla_run *r)
{
	for (int b = 0; b < DQA; b++)
		if (r->b[b] && !held_by_core(b)) {
			mha_big_free(r->b[b], r->p.rows[b] * r->p.cols[b] * r->e);
			r->b[b] = NULL;
		}
}

static size_t held_bytes(const struct mla_plan *p, size_t esize)
{
	size_t t = 0;

	for (int b = 0; b < DQA; b++)
		if (held_by_core(b) && p->rows[b] && p->cols[b])
			t = mha_sat_add(t, block_bytes(p->rows[b], p->cols[b], esize));
	return t;
}

mha_status mha_mla_run_init(struct mla_run *r, const struct mla_io *io, const mha_dims *d,
			   const mha_config *cfg, mha_stages wanted, int backward)
{
	memset(r, 0, sizeof(*r));
	r->io = io;
	r->d = d;
	r->cfg = cfg;
	r->e = io->esize;
	r->s = shape_of(d, cfg, io->W_O != NULL);
	if (backward)
		r->s.absorbed = 0;
	r->k = mha_pick_kernels(r->e == sizeof(float));
	r->threads = mha_threads(cfg);
	r->rope = cfg->rope;
	r->rope.dim = r->s.dr;
	r->qnorm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .eps = cfg->mla.eps,
				  .q_weight = cfg->mla.q_a_norm };
	r->kvnorm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .eps = cfg->mla.eps,
				   .k_weight = cfg->mla.kv_a_norm };
	plan_of(&r->p, &r->s, wanted, backward);
	return alloc_all(r);
}

/* element (i, j) of a matrix with rows of ld elements */
void *mha_mla_at(const struct mla_run *r, const void *m, size_t i, size_t ld, size_t j)
{
	return (char *)m + (i * ld + j) * r->e;
}

/*
 * C (m, n), rows of ldc = A (m, k)·B (k, n); ta: A given as (k, m) rows of
 * lda; tb: B given as (n, k) rows of ldb.  An entry that overflowed on the
 * way is summed again, rescaled (rules.h); MHA_ERR_RANGE if it truly does.
 */
mha_status mha_mla_product(const struct mla_run *r, void *C, size_t ldc, const void *A, size_t lda,
			  int ta, const void *B, size_t ldb, int tb, size_t m, size_t n, size_t k)
{
	struct mha_gemm g = { .m = m, .n = n, .k = k, .A = A, .B = B, .lda = lda, .ldb = ldb,
			      .ldc = ldc, .C = C, .threads = r->threads, .ta = ta, .tb = tb };

	r->k->gemm(&g);
	if (g.failed)
		return MHA_ERR_NOMEM;
	if (g.nonfinite && mha_finish_strided(C, m, n, ldc, A, ta ? 1 : lda, ta ? lda : 1, B,
					      tb ? ldb : 1, tb ? 1 : ldb, NULL, k, r->e))
		return MHA_ERR_RANGE;
	return MHA_OK;
}

/*
 * dst (rows, heads·w) = the w columns from off of each head's block (hstride
 * apart) of src (rows, ld); put: the other way round.
 */
void mha_mla_take(const struct mla_run *r, void *dst, const void *src, size_t rows, size_t ld,
		 size_t heads, size_t hstride, size_t off, size_t w)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t h = 0; h < heads; h++)
			memcpy(mha_mla_at(r, dst, i, heads * w, h * w), mha_mla_at(r, src, i, ld, h * hstride + off),
			       w * r->e);
}

void mha_mla_put(const struct mla_run *r, void *dst, size_t ld, size_t heads, size_t hstride,
		size_t off, const void *src, size_t rows, size_t w)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t h = 0; h < heads; h++)
			memcpy(mha_mla_at(r, dst, i, ld, h * hstride + off), mha_mla_at(r, src, i, heads * w, h * w),
			       w * r->e);
}

/*
 * DeepSeek-V3's layout of a turned block (MHA_ROPE_INTERLEAVED): the
 * pairs' first features, then their second; back: the inverse.
 */
static void relayout(const struct mla_run *r, void *m, size_t rows, size_t heads, int back)
{
	const size_t R = r->s.dr, half = R / 2;
	char *tmp = r->b[ROW];

	if (r->rope.mode != MHA_ROPE_INTERLEAVED)
		return;
	for (size_t i = 0; i < rows * heads; i++) {
		char *blk = (char *)m + i * R * r->e;

		for (size_t t = 0; t < half; t++) {
			const size_t a = back ? t : 2 * t, b = back ? half + t : 2 * t + 1;
			const size_t to_a = back ? 2 * t : t, to_b = back ? 2 * t + 1 : half + t;

			memcpy(tmp + to_a * r->e, blk + a * r->e, r->e);
			memcpy(tmp + to_b * r->e, blk + b * r->e, r->e);
		}
		memcpy(blk, tmp, R * r->e);
	}
}

/* src (B·n, heads·d_rope) turned into dst, each sequence from its own positions */
static mha_status turn(const struct mla_run *r, void *dst, const void *src, size_t n, size_t heads,
		       int keys)
{
	const size_t per = n * heads * r->s.dr;

	if (!r->s.turned) {
		memcpy(dst, src, r->s.B * per * r->e);
		return MHA_OK;
	}
	for (size_t b = 0; b < r->s.B; b++) {
		const mha_status st = mha_rope_turn(
			(char *)dst + b * per * r->e, (const char *)src + b * per * r->e, r->e, n, heads,
			r->s.dr, &r->rope, keys ? r->rope.k_pos : r->rope.q_pos,
			keys ? 0 : mha_rule_offset_seq(r->d, r->cfg, b));

		if (st != MHA_OK)
			return st;
	}
	relayout(r, dst, r->s.B * n, heads, 0);
	return MHA_OK;
}

/* the gradient of turn(): dst = src turned back, each sequence's by its positions */
void mha_mla_turn_back(const struct mla_run *r, void *m, size_t n, size_t heads, int keys)
{
	const size_t per = n * heads * r->s.dr;

	if (!r->s.turned)
		return;
	relayout(r, m, r->s.B * n, heads, 1);
	for (size_t b = 0; b < r->s.B; b++)
		mha_rope_turn_back((char *)m + b * per * r->e, (char *)m + b * per * r->e, r->e, n,
				   heads, r->s.dr, &r->rope, keys ? r->rope.k_pos : r->rope.q_pos,
				   keys ? 0 : mha_rule_offset_seq(r->d, r->cfg, b));
}

/* ---- the front ------------------------------------------------------------------ */

/* the latents, the parts, and Q, K, V (or the absorbed form's) assembled */
mha_status mha_mla_front(struct mla_run *r)
{
	const struct mla_shape *s = &r->s;
	const struct mla_io *io = r->io;
	const mha_dims *d = r->d;
	void **b = r->b;
	mha_status st;

	/* queries */
	if (s->qr) {
		st = mha_mla_product(r, b[CQ], s->qr, io->xq, d->d_q_in, 0, io->W_QA, s->qr, 0, s->N, s->qr,
			     d->d_q_in);
		if (st == MHA_OK)
			st = mha_norm_turn(b[CQN], b[CQ], r->e, s->N, 1, s->qr, 0, &r->qnorm, 0);
		if (st == MHA_OK)
			st = mha_mla_product(r, b[Q0], s->hk, b[CQN], s->qr, 0, io->W_Q, s->hk, 0, s->N, s->hk,
				     s->qr);
	} else {
		st = mha_mla_product(r, b[Q0], s->hk, io->xq, d->d_q_in, 0, io->W_Q, s->hk, 0, s->N, s->hk,
			     d->d_q_in);
	}
	if (st != MHA_OK)
		return st;
	mha_mla_take(r, b[QPE], b[Q0], s->N, s->hk, s->H, s->dk, s->dn, s->dr);
	if (b[QN])
		mha_mla_take(r, b[QN], b[Q0], s->N, s->hk, s->H, s->dk, 0, s->dn);
	st = turn(r, b[QPER], b[QPE], d->n_q, s->H, 0);
	if (st != MHA_OK)
		return st;

	/* the latent of the keys and values, and the shared key part */
	st = mha_mla_product(r, b[CKV], s->ka, io->xk, d->d_k_in, 0, io->W_KVA, s->ka, 0, s->M, s->ka,
		     d->d_k_in);
	if (st != MHA_OK)
		return st;
	mha_mla_take(r, b[CKR], b[CKV], s->M, s->ka, 1, 0, 0, s->kr);
	mha_mla_take(r, b[KPE], b[CKV], s->M, s->ka, 1, 0, s->kr, s->dr);
	st = mha_norm_turn(b[CKVN], b[CKR], r->e, s->M, 1, s->kr, 0, &r->kvnorm, 1);
	if (st == MHA_OK)
		st = turn(r, b[KPER], b[KPE], d->n_kv, 1, 1);
	if (st != MHA_OK)
		return st;

	if (!s->absorbed) {
		/* each head's key part and values from the latent; Q, K, V assembled */
		st = mha_mla_product(r, b[KVB], s->kvb, b[CKVN], s->kr, 0, io->W_KVB, s->kvb, 0, s->M,
			     s->kvb, s->kr);
		if (st != MHA_OK)
			return st;
		if (b[KN])
			mha_mla_take(r, b[KN], b[KVB], s->M, s->kvb, s->H, s->dn + s->dv, 0, s->dn);
		memcpy(b[QA], b[Q0], s->N * s->hk * r->e);
		mha_mla_put(r, b[QA], s->hk, s->H, s->dk, s->dn, b[QPER], s->N, s->dr);
		for (size_t i = 0; i < s->M; i++)
			for (size_t h = 0; h < s->H; h++) {
				const size_t src = h * (s->dn + s->dv);

				memcpy(mha_mla_at(r, b[KA], i, s->hk, h * s->dk), mha_mla_at(r, b[KVB], i, s->kvb, src),
				       s->dn * r->e);
				memcpy(mha_mla_at(r, b[KA], i, s->hk, h * s->dk + s->dn),
				       mha_mla_at(r, b[KPER], i, s->dr, 0), s->dr * r->e);
				memcpy(mha_mla_at(r, b[VA], i, s->hv, h * s->dv),
				       mha_mla_at(r, b[KVB], i, s->kvb, src + s->dn), s->dv * r->e);
			}
		return MHA_OK;
	}

	/* absorbed: q_nope_h·W_UK_hᵀ and the turned part per head; [c_kv_norm,
	 * k_pe_rot] the one key; W_UV_h folded into W_O */
	for (size_t h = 0; h < s->H && st == MHA_OK; h++)
		st = mha_mla_product(r, mha_mla_at(r, b[QA], 0, 0, h * s->ka), s->H * s->ka,
			     mha_mla_at(r, b[QN], 0, 0, h * s->dn), s->hn, 0,
			     mha_mla_at(r, io->W_KVB, 0, 0, h * (s->dn + s->dv)), s->kvb, 1, s->N, s->kr,
			     s->dn);
	if (st != MHA_OK)
		return st;
	mha_mla_put(r, b[QA], s->H * s->ka, s->H, s->ka, s->kr, b[QPER], s->N, s->dr);
	mha_mla_put(r, b[KA], s->ka, 1, 0, 0, b[CKVN], s->M, s->kr);
	mha_mla_put(r, b[KA], s->ka, 1, 0, s->kr, b[KPER], s->M, s->dr);
	if (io->W_O) {
		for (size_t h = 0; h < s->H && st == MHA_OK; h++)
			st = mha_mla_product(r, mha_mla_at(r, b[WOA], h * s->kr, s->dout, 0), s->dout,
				     mha_mla_at(r, io->W_KVB, 0, 0, h * (s->dn + s->dv) + s->dn), s->kvb, 0,
				     mha_mla_at(r, io->W_O, h * s->dv, d->d_out, 0), d->d_out, 0, s->kr,
				     d->d_out, s->dv);
	} else {
		memset(b[WOA], 0, s->H * s->kr * s->dout * r->e);
		for (size_t h = 0; h < s->H; h++)
			for (size_t t = 0; t < s->kr; t++)
				memcpy(mha_mla_at(r, b[WOA], h * s->kr + t, s->dout, h * s->dv),
				       mha_mla_at(r, io->W_KVB, t, s->kvb, h * (s->dn + s->dv) + s->dn),
				       s->dv * r->e);
	}
	return st;
}

/* the front's stages, sequence by sequence (doubles only) */
static mha_status observe_front(const struct mla_run *r, const mha_observer *obs)
{
	const struct mla_shape *s = &r->s;
	const size_t nq = r->d->n_q, nkv = r->d->n_kv;
	const struct {
		mha_stage stage;
		enum buf buf;
		size_t rows;
		int turned;
	} list[] = {
		{ MHA_STAGE_C_Q, CQ, nq, 0 },         { MHA_STAGE_C_Q_NORM, CQN, nq, 0 },
		{ MHA_STAGE_Q_NOPE, QN, nq, 0 },      { MHA_STAGE_Q_PE, QPE, nq, 0 },
		{ MHA_STAGE_Q_PE_ROT, QPER, nq, 1 },  { MHA_STAGE_C_KV, CKR, nkv, 0 },
		{ MHA_STAGE_C_KV_NORM, CKVN, nkv, 0 }, { MHA_STAGE_K_PE, KPE, nkv, 0 },
		{ MHA_STAGE_K_PE_ROT, KPER, nkv, 1 }, { MHA_STAGE_K_NOPE, KN, nkv, 0 },
	};

	if (!obs || !obs->fn)
		return MHA_OK;
	for (size_t bq = 0; bq < s->B; bq++) {
		if (obs->sequence && obs->sequence(obs->ctx, bq))
			return MHA_ERR_OBSERVER;
		for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
			const size_t cols = r->p.cols[list[i].buf];

			if (!(obs->stages & MHA_STAGE_SET(list[i].stage)) || !r->b[list[i].buf] ||
			    (list[i].turned && !s->turned))
				continue;
			if (obs->fn(obs->ctx, list[i].stage, -1,
				    (const double *)r->b[list[i].buf] + bq * list[i].rows * cols,
				    list[i].rows, cols))
				return MHA_ERR_OBSERVER;
		}
	}
	return MHA_OK;
}

/* the attention's dims and settings for the assembled (or absorbed) Q, K, V */
void mha_mla_core_of(const struct mla_run *r, mha_dims *d2, mha_config *c2)
{
	const struct mla_shape *s = &r->s;

	*d2 = *r->d;
	*c2 = *r->cfg;
	c2->scale = mha_scale_of(r->d, r->cfg);
	c2->scale_mode = MHA_SCALE_VALUE;
	memset(&c2->rope, 0, sizeof(c2->rope));
	memset(&c2->mla, 0, sizeof(c2->mla));
	d2->kv_heads = s->absorbed ? 1 : s->H;
	if (s->absorbed) {
		d2->d_k = s->ka;
		d2->d_v = s->kr;
		d2->d_q_in = s->H * s->ka;
		d2->d_k_in = s->ka;
		d2->d_v_in = s->kr;
		d2->d_out = s->dout;
	} else {
		d2->d_q_in = s->hk;
		d2->d_k_in = s->hk;
		d2->d_v_in = s->hv;
	}
}

/* what both directions check: the arrays MLA needs, and none it does not use */
mha_status mha_mla_validate(const struct mla_io *io, const void *out, const mha_dims *d,
			   const mha_config *cfg, mha_report *rep)
{
	const mha_status st = mha_check(d, cfg);

	if (rep) {
		*rep = (mha_report){ .size = sizeof(*rep), .first_blocked_head = -1, .scale = NAN };
	}
	if (st != MHA_OK)
		return st;
	if (!out || !io->xq || !io->xk)
		return MHA_ERR_NULL;
	if (!io->W_Q || !io->W_KVA || !io->W_KVB || (cfg->mla.q_rank && !io->W_QA))
		return MHA_ERR_MLA;
	if ((!cfg->mla.q_rank && io->W_QA) || io->W_K || io->W_V || io->b_Q || io->b_K || io->b_V)
		return MHA_ERR_MLA;
	if (io->W_O && !d->d_out)
		return MHA_ERR_DIM;
	if (!isfinite(mha_scale_of(d, cfg)))
		return MHA_ERR_SCALE;
	return MHA_OK;
}

mha_status mha_mla_forward(void *out, const struct mla_io *io, const mha_dims *d,
			   const mha_config *cfg, const mha_observer *obs, mha_report *rep)
{
	struct mla_run r;
	mha_dims d2;
	mha_config c2;
	mha_status st = mha_mla_validate(io, out, d, cfg, rep);

	if (st != MHA_OK)
		return st;
	st = mha_mla_run_init(&r, io, d, cfg, obs && obs->fn ? obs->stages : 0, 0);
	if (st == MHA_OK)
		st = mha_mla_front(&r);
	if (st == MHA_OK && r.e == sizeof(double))
		st = observe_front(&r, obs);
	if (st == MHA_OK) {
		free_front(&r);
		mha_mla_core_of(&r, &d2, &c2);
		if (r.e == sizeof(double)) {
			const mha_inputs in2 = { .size = sizeof(in2), .xq = r.b[QA], .xk = r.b[KA],
						 .xv = r.s.absorbed ? r.b[CKVN] : r.b[VA] };
			const mha_weights w2 = { .size = sizeof(w2),
						 .W_O = r.s.absorbed ? r.b[WOA] : io->W_O,
						 .b_O = io->W_O ? io->b_O : NULL };

			st = mha_core_forward(out, &d2, &in2, &w2, &c2, obs, rep);
		} else {
			const mha_inputs_f32 in2 = { .size = sizeof(in2), .xq = r.b[QA], .xk = r.b[KA],
						     .xv = r.s.absorbed ? r.b[CKVN] : r.b[VA] };
			const mha_weights_f32 w2 = { .size = sizeof(w2),
						     .W_O = r.s.absorbed ? r.b[WOA] : io->W_O,
						     .b_O = io->W_O ? io->b_O : NULL };

			st = mha_core_forward_f32(out, &d2, &in2, &w2, &c2, obs, rep);
		}
	}
	mha_mla_free_all(&r);
	return st;
}

/* ---- memory ---------------------------------------------------------------------- */

/* the largest product's own blocks (the kernels' packed panels) */
static size_t products_peak(const struct mla_shape *s, const mha_dims *d, int f32,
			    const mha_config *cfg, int backward)
{
	const struct mha_kernels *k = mha_pick_kernels(f32);
	const int threads = mha_threads(cfg);
	const size_t mnk[][3] = {
		{ s->N, s->qr, d->d_q_in }, { s->N, s->hk, s->qr ? s->qr : d->d_q_in },
		{ s->M, s->ka, d->d_k_in }, { s->M, s->kvb, s->kr },
		{ s->N, s->kr, s->dn },     { s->kr, s->dout, s->dv },
		/* backward's */
		{ s->qr, s->hk, s->N },     { s->N, s->qr, s->hk },
		{ d->d_q_in, s->qr, s->N }, { s->N, d->d_q_in, s->qr },
		{ d->d_q_in, s->hk, s->N }, { s->N, d->d_q_in, s->hk },
		{ s->kr, s->kvb, s->M },    { s->M, s->kr, s->kvb },
		{ d->d_k_in, s->ka, s->M }, { s->M, d->d_k_in, s->ka },
	};
	size_t peak = 0;

	for (size_t i = 0; i < (backward ? 16u : 6u); i++) {
		struct mha_gemm g = { .m = mnk[i][0], .n = mnk[i][1], .k = mnk[i][2],
				      .threads = threads };
		const size_t b = g.m && g.n && g.k ? k->gemm_bytes(&g) : 0;

		peak = b > peak ? b : peak;
	}
	return peak;
}

static size_t memory_of(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32,
			int backward)
{
	struct mla_run r;
	struct mla_io io = { .esize = f32 ? sizeof(float) : sizeof(double) };
	mha_dims d2;
	mha_config c2;
	size_t core, front_peak, t;

	if (!d || mha_check(d, cfg) != MHA_OK || !cfg)
		return SIZE_MAX;
	/* every weight taken as given: W_O's absorbed form is then its full size */
	memset(&r, 0, sizeof(r));
	r.d = d;
	r.cfg = cfg;
	r.e = io.esize;
	r.s = shape_of(d, cfg, d->d_out != 0);
	if (backward)
		r.s.absorbed = 0;
	plan_of(&r.p, &r.s, wanted, backward);
	mha_mla_core_of(&r, &d2, &c2);
	core = backward ? mha_core_backward_memory(&d2, &c2, wanted)
			: mha_core_memory(&d2, &c2, wanted, f32);
	front_peak = products_peak(&r.s, d, f32, cfg, backward);
	t = plan_bytes(&r.p, r.e);
	if (!backward) {
		/* the front with its products' blocks; then what the attention reads, and its own */
		const size_t front = mha_sat_add(t, front_peak);
		const size_t attend = mha_sat_add(held_bytes(&r.p, r.e), core);

		return front > attend ? front : attend;
	}
	/* the backward holds the front to the end; the norm weights' sums in double */
	t = mha_sat_add(t, mha_sat_add(block_bytes(1, r.s.qr + 1, sizeof(double)),
				       block_bytes(1, r.s.kr, sizeof(double))));
	return mha_sat_add(t, core > front_peak ? core : front_peak);
}

size_t mha_mla_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32)
{
	return memory_of(d, cfg, wanted, f32, 0);
}

size_t mha_mla_backward_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted)
{
	return memory_of(d, cfg, wanted, 0, 1);
}

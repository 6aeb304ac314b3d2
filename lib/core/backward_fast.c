/*
 * backward_fast.c: mha_backward()'s fast path, FlashAttention-2's backward
 * (backward.h; backward.c runs it, and the plain path beside it).
 *
 * It runs (BW(fast_heads)) when obs wants no per-head stage and
 * cfg->exact is 0, as mha_forward() picks its fast path.  Per sequence: pass 1, tasks (query
 * head, block of 96 query rows): S = Q·Kᵀ over the keys the block may see,
 * masked row by row, the softmax (the sink's term included) into P,
 * O = P·V, each row's log-sum-exp L_i = m_i + log(sum_i) (-inf for a row
 * that sees no key) and D_i = rowsum(dO_i ∘ O_i) kept, dP = dO·Vᵀ, dS and
 * dQ = dscores·K.  Pass 2, tasks (key/value head, block of 96 keys): Sᵀ and
 * dPᵀ again over the queries that may see the block, P = exp(masked − L)
 * from the saved L, and dK, dV summed over the group's query heads.  With
 * FAST_ONE_PASS_G key/value heads or more there is no pass 2: a task is a
 * whole key/value head, and pass 1 adds dscoresᵀ·Q and Pᵀ·dO to its dK and
 * dV block by block (6 products a block, not 8).  The tiles' products run
 * on the micro-kernels of the forward's GEMM (kernel.c's mha_gemm_packed,
 * the widest the CPU has) over K, V, Q and dO packed once per head, one
 * thread inside a task; the projections, dconcat and the weights'
 * gradients on the GEMM itself.  The softmax, P = exp(masked − L) and dS run
 * on kernel_bwd.c's vector loops (the same width as the GEMM's) where no
 * softcap, mask term or ALiBi applies and every value is finite; anything
 * else one entry at a time.  No (n_q, n_kv) matrix: each thread holds
 * four (96, n) tiles, O(n·d) memory in all.  Each task owns what it writes
 * and sums in a fixed order, so the bits are the same for any thread
 * count.  Rope turned back is shared with the plain path, and the
 * whole-model stages (doutput, dconcat, dq_rot, dk_rot, dQ, dK, dV) can
 * still be handed over.  The rules (which keys are seen, the mask and
 * ALiBi terms, the sink) come from rules.h, as on the plain path.
 *
 *
 * Compiled twice, as backward.c is: the second time with -DMHA_F32.
 */
#include "core/backward.h"
#include "base/progress.h"
#include "kernels/team.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fast path (FlashAttention-2's backward) ------------------------ */

/*
 * The masked value of query i (head h) and key j from its score s, as
 * forward_row goes on from it, with tanh(scaled/c) in *th under a
 * softcap: -inf for a key the query does not see.  j is within the row's
 * [keys_begin, keys_end).  A score that is not finite is recomputed (q, k
 * the rows).  MHA_ERR_RANGE as forward_row.
 */
static mha_status fast_masked(const struct bw *r, size_t h, size_t i, size_t j, real s,
			      const real *q, const real *k, real *out, real *th)
{
	const real c = r->cfg->softcap;
	real x, m;

	if (isfinite(s) && !(c > 0) && !r->rule.allow && !r->rule.bias && !r->rule.alibi) {
		/* the common case: within the row's keys the mask entry is 0 */
		x = s * r->scale;
		if (isfinite(x)) {
			*out = x;
			return MHA_OK;
		}
	}
	if (!isfinite(s)) {
		/* overflowing partial sums, or truly too large: rules.h decides */
		s = DOT(q, 1, k, 1, r->dk, 0.0);
		if (mha_rule_overflows(&r->rule, h, i, j, s))
			return MHA_ERR_RANGE;
	}
	x = s * r->scale;
	if (!isfinite(x) && mha_rule_overflows(&r->rule, h, i, j, x))
		return MHA_ERR_RANGE;
	if (c > 0) {
		*th = tanh(x / c);
		x = c * *th;
	}
	m = mha_rule_mask(&r->rule, h, i, j);
	x = mha_rule_masked(x, m);
	if (!isfinite(x) && mha_rule_overflows(&r->rule, h, i, j, x))
		return MHA_ERR_RANGE;
	*out = x;
	return MHA_OK;
}

/*
 * The tiles' products run on operands packed once per head (kernel.h's
 * mha_pack_b): for a key/value head Kᵀ (dk, n_kv), K (n_kv, dk), Vᵀ and V;
 * for a query head Qᵀ, Q, dOᵀ and dO over n_q.  A row range of a packed
 * operand is an offset, a column range whole strips of nr from a multiple
 * of nr: the tiles' first key (pass 1) or query (pass 2) is rounded down to
 * one, and the extra columns are keys or queries that weigh 0.  Offsets of
 * the four in one head's part of pk, and the part's size (elements).
 */
static size_t fast_pk_count(size_t k, size_t n, size_t nr)
{
	return mha_sat_mul(k, mha_sat_mul(mha_sat_add(n, nr - 1) / nr, nr));
}

static size_t fast_pack_head(size_t n, size_t dk, size_t dv, size_t nr, size_t off[4])
{
	off[0] = 0;
	off[1] = fast_pk_count(dk, n, nr);
	off[2] = mha_sat_add(off[1], fast_pk_count(n, dk, nr));
	off[3] = mha_sat_add(off[2], fast_pk_count(dv, n, nr));
	return mha_sat_add(off[3], fast_pk_count(n, dv, nr));
}

/*
 * One pass or two: with FAST_ONE_PASS_G key/value heads or more, a task is
 * a whole key/value head (its query heads' blocks in order), which then
 * owns its dK and dV and adds to them in pass 1: no pass 2, whose products
 * S and dP are pass 1's again (6 products a block, not 8).  Fewer heads
 * would leave threads idle; the choice is the shape's, never the threads'.
 */
#define FAST_ONE_PASS_G 4
int BW(one_pass)(const mha_dims *d)
{
	return mha_rule_kv_heads(d) >= FAST_ONE_PASS_G;
}

/* the bytes of pk (aligned_alloc's size, whole cache lines): pass 1's or
 * pass 2's, the larger (pass 1's with one pass); SIZE_MAX when too large */
size_t BW(pack_bytes)(const mha_dims *d, size_t nr)
{
	size_t off[4];
	const size_t a = mha_sat_mul(mha_rule_kv_heads(d),
				     fast_pack_head(d->n_kv, d->d_k, d->d_v, nr, off));
	const size_t b = BW(one_pass)(d) ? 0
			 : mha_sat_mul(d->heads, fast_pack_head(d->n_q, d->d_k, d->d_v, nr, off));
	const size_t bytes = mha_sat_mul(a > b ? a : b, sizeof(real));

	return bytes > SIZE_MAX - 64 ? SIZE_MAX : (bytes + 63) / 64 * 64;
}

/* the bytes of a thread's qp (fast_buf), whole cache lines */
static size_t fast_qp_bytes(size_t wide, size_t nr)
{
	return (fast_pk_count(FAST_QB, wide, nr) * sizeof(real) + 63) / 64 * 64;
}

/* n rows of w elements in whole cache lines: the bytes of a part of the one-pass block */
static size_t fast_lines(size_t n, size_t w)
{
	const size_t bytes = mha_sat_mul(mha_sat_mul(n, w), sizeof(real));

	return bytes > SIZE_MAX - 63 ? SIZE_MAX : (bytes + 63) / 64 * 64;
}

/* a thread's block with one pass: qp and qo, then its key/value head's dK
 * and dV (n_kv rows of dk, of dv) */
size_t BW(one_bytes)(const mha_dims *d, size_t nr)
{
	const size_t wide = d->d_k > d->d_v ? d->d_k : d->d_v;

	return mha_sat_add(mha_sat_mul(2, fast_qp_bytes(wide, nr)),
			   mha_sat_add(fast_lines(d->n_kv, d->d_k), fast_lines(d->n_kv, d->d_v)));
}


#define BWD_KERNELS(sfx) { mha_bwd_softmax_##sfx, mha_bwd_dscores_##sfx, mha_bwd_keyrow_##sfx, \
			   mha_pack_b_##sfx, mha_gemm_packed_##sfx, mha_packed_nr_##sfx, \
			   mha_gemm_packed_tadd_##sfx }
/* the element type's name in the kernels' suffixes (f32_avx2, f64_base …), expanded first */
#ifdef MHA_F32
#define BWD_ELEM(isa) f32_##isa
#else
#define BWD_ELEM(isa) f64_##isa
#endif
#define BWD_PASTE(a, b) a##b
#define BWD_NAME(f, sfx) BWD_PASTE(f, sfx)
#define BWD_KERNELS_OF(sfx) BWD_KERNELS(sfx)

/* the elementwise kernels (kernel_bwd.c) of the vector width k's GEMM has */
const struct mha_bwd_kernels *BW(kernels)(const struct mha_kernels *k)
{
	static const struct mha_bwd_kernels base = BWD_KERNELS_OF(BWD_ELEM(base));
#if defined(MHA_X86_KERNELS)
	static const struct mha_bwd_kernels avx2 = BWD_KERNELS_OF(BWD_ELEM(avx2));
	static const struct mha_bwd_kernels avx512 = BWD_KERNELS_OF(BWD_ELEM(avx512));

	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(avx512)))
		return &avx512;
	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(avx2)))
		return &avx2;
#endif
#if defined(MHA_ARM_KERNELS)
	static const struct mha_bwd_kernels neon = BWD_KERNELS_OF(BWD_ELEM(neon));

	if (k->gemm == BWD_NAME(mha_gemm_, BWD_ELEM(neon)))
		return &neon;
#endif
	(void)k;
	return &base;
}

/* no softcap, mask term or ALiBi: the rows the elementwise kernels take */
static int fast_plain_rule(const struct bw *r)
{
	return !(r->cfg->softcap > 0) && !r->rule.allow && !r->rule.bias && !r->rule.alibi;
}

/*
 * A tile's row stride for rows of n: whole cache lines, an odd number of
 * them.  Rows n·8 bytes apart are 4 KiB apart or a multiple for n = 512,
 * 1024 …: every row then falls in one set of L1 (a 4 KiB way), and a
 * product walking 6 rows, or 96 (the transposed reads of tadd), misses on
 * each.  An odd count of lines puts 64 rows in 64 different sets.
 */
static size_t fast_tile_ld(size_t n)
{
	const size_t line = 64 / sizeof(real), lines = (n + line - 1) / line;

	return (lines | 1) * line;
}

/*
 * Pass 1 works a block's backward half a chunk of keys at a time, MHA_GEMM_KC
 * of them (the GEMM kernels' runs along k: dQ summed chunk by chunk is the
 * same sum as in one product): dP and dS of a chunk, (96, 256), stay in L2
 * for the three products that read them.
 */
#define FAST_CHUNK MHA_GEMM_KC

/*
 * What a thread holds.  Pass 1: S, then P in its place, and th, (96, n_kv)
 * each; dP, then dS, of one chunk of keys (96, FAST_CHUNK).  Pass 2: S
 * then P, th and dP (96, n_q), and part.
 */
struct fast_buf {
	real *s, *th, *p, *dp;
	real *part;            /* pass 2: (96, max(dk, dv)) a head's part of dK or dV */
	real *qp, *qo;         /* one pass: (96, max(dk, dv)) rounded up to strips, a query
				    block of Q and of dO packed; 64-byte aligned */
	real *dKg, *dVg;       /* one pass: the task's dK (n_kv, dk) and dV (n_kv, dv), rows
				    contiguous: the products add to them a block at a time
				    (rows G·dk apart, 4 KiB for 8 heads of 64, each row's
				    lines would fall in one set of the caches) */
	size_t bytes, one;     /* the tiles' block and qp's, as mha_big_alloc was asked */
};

/* the elements of a thread's tiles (fast_buf) for rows of n, pass 1 or 2 */
size_t BW(tiles_count)(size_t n, size_t wide, int pass)
{
	const size_t ld = fast_tile_ld(n);

	if (pass == 1)
		return mha_sat_add(mha_sat_mul(2 * FAST_QB, ld), FAST_QB * fast_tile_ld(FAST_CHUNK));
	return mha_sat_add(mha_sat_mul(3 * FAST_KB, ld), mha_sat_mul(FAST_KB, wide));
}

/*
 * Pass 1, query rows [i0, i1) of head h, keys [kb, ke) (the block's union
 * of the rows' ranges): S = Q·Kᵀ, masked row by row, the softmax with the
 * sink into P, O = P·V (concat), L_i and D_i = rowsum(dO_i ∘ O_i) kept,
 * dP = dO·Vᵀ, dscores, dQ = dscores·K.  1 out of memory, 2 overflow.
 */
static int fast_query_block(struct bw *r, const struct mha_kernels *k, struct fast_buf *f,
			    size_t h, size_t i0, size_t i1)
{
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv, g = mha_rule_kv_head(h, r->H, r->G);
	const size_t ldq = r->H * r->dk, ldc = r->H * r->dv, ldk = r->G * r->dk, ldv = r->G * r->dv;
	const size_t ke = mha_rule_keys_end(&r->rule, i1 - 1), nr = r->nr;
	size_t kb = mha_rule_keys_begin(&r->rule, i0), off[4];
	const size_t nb = i1 - i0, per = fast_pack_head(n_kv, r->dk, r->dv, nr, off);
	const int capped = r->cfg->softcap > 0, vect = fast_plain_rule(r);
	const struct mha_bwd_kernels *bk = BW(kernels)(k);
	const real *pk = r->pk + g * per;
	size_t nk, ld;

	for (size_t i = i0; i < i1; i++) {
		memset(r->concat + i * ldc + h * r->dv, 0, r->dv * sizeof(real));
		memset(r->dQr + i * ldq + h * r->dk, 0, r->dk * sizeof(real));
		r->lse[h * n_q + i] = -INFINITY;
		r->Dall[h * n_q + i] = 0.0;
	}
	if (ke <= kb)
		return 0;
	kb = kb / nr * nr; /* whole strips of Kᵀ and Vᵀ */
	nk = ke - kb;
	ld = fast_tile_ld(nk);
	bk->gemm_packed(f->s, ld, r->Q + i0 * ldq + h * r->dk, ldq, pk + off[0] + kb / nr * r->dk * nr,
			r->dk * nr, nb, nk, r->dk, 0);
	for (size_t i = i0; i < i1; i++) {
		const size_t jb = mha_rule_keys_begin(&r->rule, i), je = mha_rule_keys_end(&r->rule, i);
		const real *q = r->Q + i * ldq + h * r->dk;
		real *s = f->s + (i - i0) * ld, *th = f->th + (i - i0) * ld, *p = f->p + (i - i0) * ld;
		real m = -INFINITY, l = 0.0;

		if (vect && jb < je &&
		    !bk->softmax(p + (jb - kb), s + (jb - kb), je - jb, r->scale,
				 r->rule.sinks ? r->rule.sinks + h : NULL, &r->lse[h * n_q + i])) {
			/* the common case, vectorised: keys outside the row's range weigh 0 */
			memset(p, 0, (jb - kb) * sizeof(real));
			memset(p + (je - kb), 0, (ke - je) * sizeof(real));
			continue;
		}
		for (size_t j = kb; j < ke; j++) {
			real x = -INFINITY, t = 0.0;

			if (j >= jb && j < je &&
			    fast_masked(r, h, i, j, s[j - kb], q, r->K + j * ldk + g * r->dk, &x, &t))
				return 2;
			s[j - kb] = x;
			th[j - kb] = t;
			if (x > m)
				m = x;
		}
		if (m == -INFINITY) {
			/* every key blocked: weights 0, output 0, nothing flows back */
			memset(p, 0, nk * sizeof(real));
			continue;
		}
		if (r->rule.sinks && r->rule.sinks[h] > m)
			m = r->rule.sinks[h];
		/* subtract the row max: exp() of a large score would overflow */
		for (size_t j = 0; j < nk; j++) {
			p[j] = exp(s[j] - m);
			l += p[j];
		}
		if (r->rule.sinks)
			l += exp(r->rule.sinks[h] - m);
		for (size_t j = 0; j < nk; j++)
			p[j] /= l;
		r->lse[h * n_q + i] = m + log(l);
	}
	/* O = P·V: a convex combination, finite unless a product's partial sums overflowed */
	bk->gemm_packed(r->concat + i0 * ldc + h * r->dv, ldc, f->p, ld, pk + off[3] + kb * nr,
			n_kv * nr, nb, r->dv, nk, 0);
	for (size_t i = i0; i < i1; i++) {
		real *o = r->concat + i * ldc + h * r->dv;
		const real *dO = r->dcat + i * ldc + h * r->dv;
		real D = 0.0;

		if (!finite_all(o, r->dv) &&
		    mha_finish_product(o, 1, r->dv, ldc, f->p + (i - i0) * ld, ld,
				       r->V + kb * ldv + g * r->dv, ldv, NULL, nk, sizeof(real)))
			return 2;
		for (size_t t = 0; t < r->dv; t++)
			D += dO[t] * o[t];
		r->Dall[h * n_q + i] = D;
	}
	if (r->one_pass) {
		/* the block's Q and dO, packed for dK += dscoresᵀ·Q and dV += Pᵀ·dO */
		bk->pack_b(f->qp, r->Q + i0 * ldq + h * r->dk, ldq, 1, nb, r->dk);
		bk->pack_b(f->qo, r->dcat + i0 * ldc + h * r->dv, ldc, 1, nb, r->dv);
	}
	/* a chunk of keys at a time: dP = dO·Vᵀ, then dS = P·(dP − D), tanh', the
	 * scale (dscores) in its place; dQ += dscores·K (the chunks are the
	 * product's runs: the same sums as in one); with one pass dK and dV of
	 * the chunk's keys, the task owning key/value head g and adding the
	 * blocks in a fixed order */
	for (size_t c = 0; c < nk; c += FAST_CHUNK) {
		const size_t cw = nk - c < FAST_CHUNK ? nk - c : FAST_CHUNK;
		const size_t lc = fast_tile_ld(FAST_CHUNK);

		bk->gemm_packed(f->dp, lc, r->dcat + i0 * ldc + h * r->dv, ldc,
				pk + off[2] + (kb + c) / nr * r->dv * nr, r->dv * nr, nb, cw, r->dv, 0);
		for (size_t i = 0; i < nb; i++) {
			const real D = r->Dall[h * n_q + i0 + i];
			real *dp = f->dp + i * lc;
			const real *p = f->p + i * ld + c, *th = f->th + i * ld + c;

			if (!capped) {
				bk->dscores(dp, p, cw, D, r->scale);
				continue;
			}
			for (size_t j = 0; j < cw; j++) {
				const real ds = p[j] == 0.0 ? 0.0 : p[j] * (dp[j] - D) * (1.0 - th[j] * th[j]);

				dp[j] = ds * r->scale;
			}
		}
		bk->gemm_packed(r->dQr + i0 * ldq + h * r->dk, ldq, f->dp, lc, pk + off[1] + (kb + c) * nr,
				n_kv * nr, nb, r->dk, cw, c > 0);
		if (r->one_pass) {
			bk->gemm_packed_tadd(f->dKg + (kb + c) * r->dk, r->dk, f->dp, lc, f->qp, nb * nr, cw,
					     r->dk, nb);
			bk->gemm_packed_tadd(f->dVg + (kb + c) * r->dv, r->dv, f->p + c, ld, f->qo, nb * nr,
					     cw, r->dv, nb);
		}
	}
	return 0;
}

/* the queries [*qa, *qb) whose key ranges meet [j0, j1) (both ends never decrease) */
static void fast_query_range(const struct bw *r, size_t j0, size_t j1, size_t *qa, size_t *qb)
{
	size_t a = 0, b = r->d->n_q;

	while (a < b && mha_rule_keys_end(&r->rule, a) <= j0)
		a++;
	while (b > a && mha_rule_keys_begin(&r->rule, b - 1) >= j1)
		b--;
	*qa = a;
	*qb = b;
}

/*
 * Pass 2, one entry (query i, key j) of head h from its score s, one at a
 * time: p = exp(masked − L), dp = dS·scale (dp holds dP on entry)
 */
static void fast_key_entry(const struct bw *r, size_t h, size_t g, size_t i, size_t j, real s,
			   real *p, real *dp)
{
	const size_t n_q = r->d->n_q, ldq = r->H * r->dk, ldk = r->G * r->dk;
	const size_t jb = mha_rule_keys_begin(&r->rule, i), je = mha_rule_keys_end(&r->rule, i);
	const real L = r->lse[h * n_q + i], D = r->Dall[h * n_q + i];
	real x = -INFINITY, t = 0.0, e, ds;

	/* the forward saw every value finite: no error here */
	if (L == -INFINITY || j < jb || j >= je ||
	    fast_masked(r, h, i, j, s, r->Q + i * ldq + h * r->dk, r->K + j * ldk + g * r->dk, &x,
			&t) || x == -INFINITY) {
		*p = *dp = 0.0;
		return;
	}
	e = exp(x - L);
	ds = e * (*dp - D);
	if (r->cfg->softcap > 0)
		ds *= 1.0 - t * t;
	*p = e;
	*dp = ds * r->scale;
}

/*
 * Pass 2, keys [j0, j1) of key/value head g: for each of its query heads h
 * ascending, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ over the queries that may see the
 * block, P and dS from the saved L and D, then dK += dSᵀ·Q and dV += Pᵀ·dO.
 * 1 out of memory.
 */
static int fast_key_block(struct bw *r, const struct mha_kernels *k, struct fast_buf *f,
			  size_t g, size_t j0, size_t j1)
{
	const size_t n_q = r->d->n_q, per = r->H / r->G, nb = j1 - j0;
	const size_t ldk = r->G * r->dk, ldv = r->G * r->dv;
	const int vect = fast_plain_rule(r);
	const struct mha_bwd_kernels *bk = BW(kernels)(k);
	size_t qa, qb, nq, off[4];
	const size_t nr = r->nr, per_h = fast_pack_head(n_q, r->dk, r->dv, nr, off);

	for (size_t j = j0; j < j1; j++) {
		memset(r->dKr + j * ldk + g * r->dk, 0, r->dk * sizeof(real));
		memset(r->dV + j * ldv + g * r->dv, 0, r->dv * sizeof(real));
	}
	fast_query_range(r, j0, j1, &qa, &qb);
	if (qb <= qa)
		return 0;
	qa = qa / nr * nr; /* whole strips of Qᵀ and dOᵀ */
	nq = qb - qa;
	for (size_t h = g * per; h < (g + 1) * per; h++) {
		const real *pk = r->pk + h * per_h;

		bk->gemm_packed(f->s, nq, r->K + j0 * ldk + g * r->dk, ldk,
				pk + off[0] + qa / nr * r->dk * nr, r->dk * nr, nb, nq, r->dk, 0);
		bk->gemm_packed(f->dp, nq, r->V + j0 * ldv + g * r->dv, ldv,
				pk + off[2] + qa / nr * r->dv * nr, r->dv * nr, nb, nq, r->dv, 0);
		for (size_t j = j0, ia = qa, ib = qa; j < j1; j++) {
			real *p = f->p + (j - j0) * nq, *dp = f->dp + (j - j0) * nq;

			if (vect) {
				/* the queries that see key j: [ia, ib), moving on with j */
				while (ia < qb && mha_rule_keys_end(&r->rule, ia) <= j)
					ia++;
				if (ib < ia)
					ib = ia;
				while (ib < qb && mha_rule_keys_begin(&r->rule, ib) <= j)
					ib++;
				if (ia == ib || !bk->keyrow(p + (ia - qa), dp + (ia - qa), f->s + (j - j0) * nq +
							   (ia - qa), r->lse + h * n_q + ia,
							   r->Dall + h * n_q + ia, ib - ia, r->scale)) {
					memset(p, 0, (ia - qa) * sizeof(real));
					memset(dp, 0, (ia - qa) * sizeof(real));
					memset(p + (ib - qa), 0, (qb - ib) * sizeof(real));
					memset(dp + (ib - qa), 0, (qb - ib) * sizeof(real));
					continue;
				}
			}
			for (size_t i = qa; i < qb; i++)
				fast_key_entry(r, h, g, i, j, f->s[(j - j0) * nq + (i - qa)], p + (i - qa),
					       dp + (i - qa));
		}
		/* dK += dSᵀ·Q, dV += Pᵀ·dO: each head's part, added in head order */
		bk->gemm_packed(f->part, r->dk, f->dp, nq, pk + off[1] + qa * nr, n_q * nr, nb, r->dk, nq,
				0);
		for (size_t j = 0; j < nb; j++)
			for (size_t t = 0; t < r->dk; t++)
				r->dKr[(j0 + j) * ldk + g * r->dk + t] += f->part[j * r->dk + t];
		bk->gemm_packed(f->part, r->dv, f->p, nq, pk + off[3] + qa * nr, n_q * nr, nb, r->dv, nq,
				0);
		for (size_t j = 0; j < nb; j++)
			for (size_t t = 0; t < r->dv; t++)
				r->dV[(j0 + j) * ldv + g * r->dv + t] += f->part[j * r->dv + t];
	}
	return 0;
}

/* a (rows, cols) transposed into t (cols, rows), in 32 x 32 tiles so
 * that neither side is walked a whole column at a time through the cache */
/*
 * One of the 4·heads packings of a pass (task t: head t / 4, operand
 * t % 4): x (n, heads·dk) and y (n, heads·dv) are K and V (pass 1) or Q and
 * dconcat (pass 2); Kᵀ and Vᵀ are read in place, never transposed first.
 */
static void fast_pack(const struct bw *r, const struct mha_bwd_kernels *bk, long t, size_t heads,
		      size_t n, const real *x, const real *y)
{
	const size_t h = (size_t)t / 4, dk = r->dk, dv = r->dv, nr = r->nr;
	size_t off[4];
	real *pk = r->pk + h * fast_pack_head(n, dk, dv, nr, off) + off[t % 4];

	switch (t % 4) {
	case 0:
		bk->pack_b(pk, x + h * dk, 1, heads * dk, dk, n);
		break;
	case 1:
		bk->pack_b(pk, x + h * dk, heads * dk, 1, n, dk);
		break;
	case 2:
		bk->pack_b(pk, y + h * dv, 1, heads * dv, dv, n);
		break;
	default:
		bk->pack_b(pk, y + h * dv, heads * dv, 1, n, dv);
	}
}

/* a thread's tiles for rows of n, pass 1 or 2 (fast_buf), or NULL; P
 * takes the place of S, the softmax working each row in place */
static real *fast_buf_alloc(struct fast_buf *f, size_t n, size_t wide, int pass)
{
	const size_t ld = fast_tile_ld(n), count = BW(tiles_count)(n, wide, pass);
	const size_t rows = pass == 1 ? FAST_QB : FAST_KB;
	real *b;

	/* rows whole cache lines from a 64-byte boundary (mapped from
	 * MHA_BIG_MIN up, whole 2 MiB pieces in huge pages: kernel.h) */
	f->bytes = count > SIZE_MAX / sizeof(real) ? SIZE_MAX : count * sizeof(real);
	b = f->bytes == SIZE_MAX ? NULL : mha_big_alloc(f->bytes);
	if (b) {
		f->s = f->p = b;
		f->th = b + rows * ld;
		f->dp = b + 2 * rows * ld;
		f->part = pass == 2 ? b + 3 * rows * ld : NULL;
	}
	return b;
}

/* one pass of fast_heads on the team: its tasks, counted out, and the worst error (1 memory) */
struct fast_team {
	struct bw *r;
	const struct mha_kernels *k;
	struct team_counter packs, tasks; /* the next pack, the next task */
	atomic_int err;
};

/* pass 1, tasks (head, query block), or one key/value head each in one pass */
static void fast_pass1(void *arg, int tid, int nthreads)
{
	struct fast_team *z = arg;
	struct bw *r = z->r;
	const struct mha_kernels *k = z->k;
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t qblocks = (n_q + FAST_QB - 1) / FAST_QB;
	const size_t wide = r->dk > r->dv ? r->dk : r->dv;
	const long t1 = r->one_pass ? (long)r->G : (long)(r->H * qblocks);
	const struct mha_bwd_kernels *bk = BW(kernels)(k);
	const size_t qp = fast_qp_bytes(wide, r->nr);

	{
		struct fast_buf f = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 };
		real *b = fast_buf_alloc(&f, n_kv, 0, 1);
		int e = b ? 0 : 1;

		if (r->one_pass) {
			f.one = BW(one_bytes)(r->d, r->nr);
			f.qp = f.one == SIZE_MAX ? NULL : mha_big_alloc(f.one);
			e = e || !f.qp;
			if (f.qp) {
				f.qo = f.qp + qp / sizeof(real);
				f.dKg = f.qo + qp / sizeof(real);
				f.dVg = f.dKg + fast_lines(n_kv, r->dk) / sizeof(real);
			}
		}
		/* each key/value head's K and V packed, both ways, once */
		for (long t = (long)team_next(&z->packs); t < (long)(4 * r->G); t = (long)team_next(&z->packs))
			fast_pack(r, bk, t, r->G, n_kv, r->K, r->V);
		mha_team_barrier(nthreads);
		for (long t = (long)team_next(&z->tasks); t < t1; t = (long)team_next(&z->tasks)) {
			if (mha_progress_stopped(r->progress))
				continue; /* stopped: the rest skipped */
			if (r->one_pass) {
				/* one key/value head: its query heads' blocks in order, dK and dV summed here */
				const size_t g = (size_t)t, per = r->H / r->G;

				if (e)
					continue;
				memset(f.dKg, 0, n_kv * r->dk * sizeof(real));
				memset(f.dVg, 0, n_kv * r->dv * sizeof(real));
				for (size_t i0 = 0; i0 < n_q && !e; i0 += FAST_QB)
					for (size_t h = g * per; h < (g + 1) * per && !e; h++)
						e = fast_query_block(r, k, &f, h, i0,
								     i0 + FAST_QB < n_q ? i0 + FAST_QB : n_q);
				for (size_t j = 0; j < n_kv; j++) {
					memcpy(r->dKr + j * r->G * r->dk + g * r->dk, f.dKg + j * r->dk,
					       r->dk * sizeof(real));
					memcpy(r->dV + j * r->G * r->dv + g * r->dv, f.dVg + j * r->dv,
					       r->dv * sizeof(real));
				}
				/* both passes of its query heads (backward_work's three shares) */
				mha_progress_add(r->progress, (uint64_t)(3 * r->seen * (double)per *
									 (double)(r->dk + r->dv)));
				if (tid == 0)
					mha_progress_tell(r->progress);
				continue;
			}
			const size_t h = (size_t)t / qblocks, i0 = (size_t)t % qblocks * FAST_QB;

			if (!e)
				e = fast_query_block(r, k, &f, h, i0, i0 + FAST_QB < n_q ? i0 + FAST_QB : n_q);
			/* pass 1 is two of a head's three shares (backward_work), a block its part */
			mha_progress_add(r->progress, (uint64_t)(2 * r->seen * (double)(r->dk + r->dv) /
								 (double)qblocks));
			if (tid == 0)
				mha_progress_tell(r->progress);
		}
		if (e)
			team_max_int(&z->err, e);
		mha_big_free(f.qp, f.one);
		mha_big_free(b, f.bytes);
	}
}

/* pass 2, tasks (key/value head, key block): dK and dV */
static void fast_pass2(void *arg, int tid, int nthreads)
{
	struct fast_team *z = arg;
	struct bw *r = z->r;
	const struct mha_kernels *k = z->k;
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t kblocks = (n_kv + FAST_KB - 1) / FAST_KB;
	const size_t wide = r->dk > r->dv ? r->dk : r->dv;
	const long t2 = (long)(r->G * kblocks);
	const struct mha_bwd_kernels *bk = BW(kernels)(k);

	{
		struct fast_buf f = { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0 };
		real *b = fast_buf_alloc(&f, n_q, wide, 2);
		int e = b ? 0 : 1;

		/* each head's Q and dconcat packed, both ways, once (K's and V's are done with) */
		for (long t = (long)team_next(&z->packs); t < (long)(4 * r->H); t = (long)team_next(&z->packs))
			fast_pack(r, bk, t, r->H, n_q, r->Q, r->dcat);
		mha_team_barrier(nthreads);
		for (long t = (long)team_next(&z->tasks); t < t2; t = (long)team_next(&z->tasks)) {
			const size_t g = (size_t)t / kblocks, j0 = (size_t)t % kblocks * FAST_KB;

			if (mha_progress_stopped(r->progress))
				continue; /* stopped: the rest skipped */
			if (!e)
				e = fast_key_block(r, k, &f, g, j0, j0 + FAST_KB < n_kv ? j0 + FAST_KB : n_kv);
			/* pass 2 the third share of its key/value head's query heads */
			mha_progress_add(r->progress, (uint64_t)(r->seen * (double)(r->dk + r->dv) *
								 (double)(r->H / r->G) /
								 (double)kblocks));
			if (tid == 0)
				mha_progress_tell(r->progress);
		}
		if (e)
			team_max_int(&z->err, e);
		mha_big_free(b, f.bytes);
	}
}

/*
 * Every head of one sequence on the fast path: O(n·d) memory, no (n_q, n_kv)
 * matrix.  Pass 1, tasks (head, query block): the forward, L, D and dQ.
 * Pass 2, tasks (key/value head, key block): dK and dV.  Then the sinks'
 * gradients and the blocked rows, in order.
 */
mha_status BW(fast_heads)(struct bw *r, const struct mha_kernels *k, int threads)
{
	const size_t n_q = r->d->n_q, n_kv = r->d->n_kv;
	const size_t qblocks = (n_q + FAST_QB - 1) / FAST_QB, kblocks = (n_kv + FAST_KB - 1) / FAST_KB;
	const long t1 = r->one_pass ? (long)r->G : (long)(r->H * qblocks), t2 = (long)(r->G * kblocks);
	struct fast_team z1 = { r, k, { 0 }, { 0 }, 0 }, z2 = { r, k, { 0 }, { 0 }, 0 };
	int err;

	mha_team_run(t1 > 1 ? threads : 1, fast_pass1, &z1);
	err = atomic_load(&z1.err);
	if (err)
		return err == 1 ? MHA_ERR_NOMEM : MHA_ERR_RANGE;
	if (r->one_pass)
		goto sinks;
	mha_team_run(t2 > 1 ? threads : 1, fast_pass2, &z2);
	if (atomic_load(&z2.err))
		return MHA_ERR_NOMEM;
sinks:
	for (size_t h = 0; h < r->H; h++) {
		real dsink = 0.0;

		for (size_t i = 0; i < n_q; i++) {
			const real L = r->lse[h * n_q + i];

			if (L == -INFINITY) {
				if (!r->blocked++) {
					r->first_blocked_head = (int)h;
					r->first_blocked_row = i;
				}
				continue;
			}
			/* the sink: a logit whose value is 0, so its dP is 0 */
			if (r->rule.sinks)
				dsink += -exp(r->rule.sinks[h] - L) * r->Dall[h * n_q + i];
		}
		if (r->dsinks)
			r->dsinks[h] += dsink;
	}
	return MHA_OK;
}

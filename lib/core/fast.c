/*
 * fast.c: the fast path of mha_forward() and all of mha_forward_f32().
 *
 * When nobody asks to see a per-head intermediate, the projections are
 * blocked matrix products and the attention is fused (kernel.c,
 * kernel_attend.c): no (n_q, n_kv) matrix is built, keys are taken in
 * blocks with a running max and sum, causal blocks past the diagonal are skipped, and the work
 * is shared among threads so that every output element is computed in the
 * same order whatever their number.  A batch's projections are one product
 * over all its rows, and its attention tasks are batch × heads × query
 * blocks, each sequence under its own rule (mha_rule_seq).  The kernels
 * and the threads are machine.c's choice.
 */
#include "mha.h"
#include "kernels/kernel.h"
#include "base/progress.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the one algorithm for both element types ------------------------- */

/* rows·cols elements; from MHA_BIG_MIN a mapping of its own, its whole 2 MiB
 * pieces in huge pages where the system has them (pages.c) */
static void *alloc_elems(size_t rows, size_t cols, size_t esize)
{
	size_t n;

	if (!mha_mul_fits(rows, cols, &n) || !mha_mul_fits(n, esize, &n))
		return NULL;
	return mha_big_alloc(n);
}

/* what alloc_elems(rows, cols, esize) gave; NULL accepted */
static void free_elems(void *p, size_t rows, size_t cols, size_t esize)
{
	mha_big_free(p, rows * cols * esize);
}

/* |each of the n values| <= max (NaN fails): no early exit, so that it vectorises */
static int finite_run_d(const double *d, size_t n)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= fabs(d[i]) <= DBL_MAX;
	return ok;
}

static int finite_run_f(const float *f, size_t n)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= fabsf(f[i]) <= FLT_MAX;
	return ok;
}

/*
 * Every value finite?  In blocks without an early exit inside, so that the
 * compiler vectorises the compare (a pass over X and the weights: was 3% of
 * a 512-token run's instructions, one branch a value); the first block with
 * a value not finite ends it (2.1M instructions rather than 7.3M there).
 */
static int finite_all(const void *m, size_t n, size_t esize)
{
	enum { BLOCK = 1024 };
	size_t i0 = 0;

	/* whole blocks of a constant length (vectorised at -O2 too), then the tail */
	for (; i0 + BLOCK <= n; i0 += BLOCK)
		if (esize == 8 ? !finite_run_d((const double *)m + i0, BLOCK)
			       : !finite_run_f((const float *)m + i0, BLOCK))
			return 0;
	return esize == 8 ? finite_run_d((const double *)m + i0, n - i0)
			  : finite_run_f((const float *)m + i0, n - i0);
}

/*
 * x (rows, d_in)·W + b, or x + b, or x itself: *res, into `into` when not
 * NULL, else into *owned to free.  MHA_ERR_RANGE when an entry truly is
 * not finite (rules.h).
 */
static mha_status project(const struct typed *t, int which, size_t rows, size_t d_in,
			  size_t cols, int threads, void *into, const void **res, void **owned)
{
	const void *x = t->x[which], *W = t->W[which], *b = t->b[which];

	*owned = NULL;
	if (!W && !b) {
		*res = x;
		return finite_all(x, rows * cols, t->esize) ? MHA_OK : MHA_ERR_RANGE;
	}
	*owned = into ? into : alloc_elems(rows, cols, t->esize);
	if (!*owned)
		return MHA_ERR_NOMEM;
	if (W) {
		struct mha_gemm g = { .m = rows, .n = cols, .k = d_in, .A = x, .B = W, .bias = b,
				      .lda = d_in, .ldb = cols, .ldc = cols, .C = *owned,
				      .threads = threads, .progress = t->progress };

		t->k->gemm(&g);
		*res = *owned;
		if (g.failed)
			return MHA_ERR_NOMEM;
		/* an entry not finite: its partial sums may have overflowed (rules.h) */
		if (g.nonfinite &&
		    mha_finish_product(*owned, rows, cols, cols, x, d_in, W, cols, b, d_in, t->esize))
			return MHA_ERR_RANGE;
		return MHA_OK;
	} else if (t->esize == 8) {
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				((double *)*owned)[i * cols + c] = ((const double *)x)[i * cols + c] +
								   ((const double *)b)[c];
	} else {
		for (size_t i = 0; i < rows; i++)
			for (size_t c = 0; c < cols; c++)
				((float *)*owned)[i * cols + c] = ((const float *)x)[i * cols + c] +
								  ((const float *)b)[c];
	}
	*res = *owned;
	return finite_all(*owned, rows * cols, t->esize) ? MHA_OK : MHA_ERR_RANGE;
}

/*
 * an f64 observer, asked only for whole-model stages here: m holds B
 * sequences of (rows, cols), handed over one at a time
 */
static int tell(const mha_observer *obs, mha_stage s, const void *m, size_t B, size_t rows,
		size_t cols)
{
	if (!obs || !obs->fn || !(obs->stages & MHA_STAGE_SET(s)))
		return 0;
	for (size_t b = 0; b < B; b++)
		if ((obs->sequence && obs->sequence(obs->ctx, b)) ||
		    obs->fn(obs->ctx, s, -1, (const double *)m + b * rows * cols, rows, cols))
			return 1;
	return 0;
}

/* every head at once: Q, K and V whole, as an observer of them wants */
static int whole_forward(void *out, const struct typed *t, const mha_dims *d,
			 const mha_config *cfg, const mha_observer *obs, mha_report *rep)
{
	const size_t H = d->heads, G = mha_rule_kv_heads(d);
	const size_t qw = H * d->d_k, kw = G * d->d_k, vw = G * d->d_v, cw = H * d->d_v;
	const size_t out_cols = mha_output_cols(d, t->W[3] != NULL);
	const int threads = mha_threads(cfg);
	/* a batch: the projections are one product over every sequence's rows */
	const size_t B = mha_rule_batch(d), nq = B * d->n_q, nkv = B * d->n_kv;
	const void *Q, *K, *V;
	void *owned[5] = { NULL, NULL, NULL, NULL, NULL }, *concat = NULL, *concat_owned = NULL;
	/*
	 * Q, K and V in one block when all three are computed: past 2 MiB
	 * sooner, so in huge pages (pages.c); n = 512, d_model 512, f32: one
	 * block of 3 MiB, 256 faults rather than 768
	 */
	const size_t qn = mha_sat_mul(nq, qw), kn = mha_sat_mul(nkv, kw);
	const size_t all = mha_sat_add(mha_sat_add(qn, kn), mha_sat_mul(nkv, vw));
	void *qkv = (t->W[0] || t->b[0]) && (t->W[1] || t->b[1]) && (t->W[2] || t->b[2])
			    ? alloc_elems(1, all, t->esize) : NULL;
	struct mha_attend a;
	mha_status st = MHA_OK;
	int out_bad;

	if (!qkv && (t->W[0] || t->b[0]) && (t->W[1] || t->b[1]) && (t->W[2] || t->b[2]))
		st = MHA_ERR_NOMEM;
	mha_progress_phase(t->progress, "projections");
	if (st == MHA_OK)
		st = project(t, 0, nq, d->d_q_in, qw, threads, qkv, &Q, &owned[0]);
	if (st == MHA_OK)
		st = project(t, 1, nkv, d->d_k_in, kw, threads,
			     qkv ? (char *)qkv + qn * t->esize : NULL, &K, &owned[1]);
	if (st == MHA_OK)
		st = project(t, 2, nkv, d->d_v_in, vw, threads,
			     qkv ? (char *)qkv + (qn + kn) * t->esize : NULL, &V, &owned[2]);
	if (qkv)
		owned[0] = owned[1] = owned[2] = NULL; /* parts of qkv, freed as one */
	if (st != MHA_OK)
		goto done;
	if (tell(obs, MHA_STAGE_Q, Q, B, d->n_q, qw) || tell(obs, MHA_STAGE_K, K, B, d->n_kv, kw) ||
	    tell(obs, MHA_STAGE_V, V, B, d->n_kv, vw)) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (cfg->rope.mode != MHA_ROPE_NONE || cfg->norm.kind != MHA_NORM_NONE) {
		/* Q and K normalised (norm.c), then turned by position (rope.c) in
		 * place, as on the plain path; a batch's sequences each from their
		 * own positions (the causal offset is each's) */
		const int norm = cfg->norm.kind != MHA_NORM_NONE;
		const int rope = cfg->rope.mode != MHA_ROPE_NONE;

		owned[3] = alloc_elems(nq, qw, t->esize);
		owned[4] = alloc_elems(nkv, kw, t->esize);
		st = owned[3] && owned[4] ? MHA_OK : MHA_ERR_NOMEM;
		if (st == MHA_OK && norm) {
			st = mha_norm_turn(owned[3], Q, t->esize, nq, H, d->d_k, 0, &cfg->norm, 0);
			if (st == MHA_OK)
				st = mha_norm_turn(owned[4], K, t->esize, nkv, G, d->d_k, 0, &cfg->norm, 1);
			if (st == MHA_OK && (tell(obs, MHA_STAGE_Q_NORM, owned[3], B, d->n_q, qw) ||
					     tell(obs, MHA_STAGE_K_NORM, owned[4], B, d->n_kv, kw)))
				st = MHA_ERR_OBSERVER;
		}
		for (size_t b = 0; rope && b < B && st == MHA_OK; b++) {
			const size_t qo = b * d->n_q * qw * t->esize, ko = b * d->n_kv * kw * t->esize;
			const char *qs = norm ? (const char *)owned[3] : (const char *)Q;
			const char *ks = norm ? (const char *)owned[4] : (const char *)K;

			st = mha_rope_turn((char *)owned[3] + qo, qs + qo, t->esize, d->n_q, H,
					   d->d_k, &cfg->rope, cfg->rope.q_pos,
					   mha_rule_offset_seq(d, cfg, b));
			if (st == MHA_OK)
				st = mha_rope_turn((char *)owned[4] + ko, ks + ko, t->esize,
						   d->n_kv, G, d->d_k, &cfg->rope, cfg->rope.k_pos, 0);
		}
		if (st != MHA_OK)
			goto done;
		Q = owned[3];
		K = owned[4];
		if (rope && (tell(obs, MHA_STAGE_Q_ROT, Q, B, d->n_q, qw) ||
			     tell(obs, MHA_STAGE_K_ROT, K, B, d->n_kv, kw))) {
			st = MHA_ERR_OBSERVER;
			goto done;
		}
	}

	/*
	 * The heads' outputs over Q when Q is ours and as wide: each attention
	 * task reads its rows of one head's Q before it writes that head's
	 * output there (kernel_attend.c), and nothing reads Q after (a long sequence:
	 * 256 MiB fewer at n = 131072, d_model 512, f32).  mha_memory counts so.
	 */
	if (!t->W[3])
		concat = out;
	else if (d->d_k == d->d_v && (Q == owned[0] || Q == owned[3] || (qkv && Q == qkv)))
		concat = (void *)(uintptr_t)Q;
	else
		concat = concat_owned = alloc_elems(nq, cw, t->esize);
	if (!concat) {
		st = MHA_ERR_NOMEM;
		goto done;
	}
	memset(&a, 0, sizeof(a));
	a.B = B;
	a.n_q = d->n_q;
	a.n_kv = d->n_kv;
	a.H = H;
	a.G = G;
	a.dk = d->d_k;
	a.dv = d->d_v;
	a.Q = Q;
	a.K = K;
	a.V = V;
	a.ldq = qw;
	a.ldk = kw;
	a.ldv = vw;
	a.O = concat;
	a.ldo = cw;
	a.scale = mha_scale_of(d, cfg);
	a.softcap = cfg->softcap;
	a.rule = mha_rule_of(d, cfg);
	a.threads = threads;
	a.progress = t->progress;
	mha_progress_phase(t->progress, "attention");
	t->k->attend(&a);
	if (a.error) {
		st = a.error == 1 ? MHA_ERR_NOMEM : MHA_ERR_RANGE;
		goto done;
	}
	if (rep) {
		/* first_blocked is (b·H + h)·n_q + row */
		rep->blocked_rows = a.blocked;
		rep->first_blocked_head = a.blocked ? (int)(a.first_blocked / d->n_q % H) : -1;
		rep->first_blocked_row = a.blocked ? a.first_blocked % d->n_q : 0;
		rep->first_blocked_sequence = a.blocked ? a.first_blocked / d->n_q / H : 0;
		rep->scale = a.scale;
	}
	if (tell(obs, MHA_STAGE_CONCAT, concat, B, d->n_q, cw)) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (t->W[3]) {
		struct mha_gemm g = { .m = nq, .n = out_cols, .k = cw, .A = concat,
				      .B = t->W[3], .bias = t->b[3], .lda = cw, .ldb = out_cols,
				      .ldc = out_cols, .C = out, .threads = threads,
				      .progress = t->progress };

		mha_progress_phase(t->progress, "output");

		t->k->gemm(&g);
		if (g.failed) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
		out_bad = g.nonfinite;
	} else {
		out_bad = !finite_all(out, nq * out_cols, t->esize);
	}
	/* not finite: with W_O, maybe partial sums that overflowed (rules.h) */
	if (out_bad &&
	    (!t->W[3] || mha_finish_product(out, nq, out_cols, out_cols, concat, cw, t->W[3],
					    out_cols, t->b[3], cw, t->esize)))
		st = MHA_ERR_RANGE;
	else if (tell(obs, MHA_STAGE_OUTPUT, out, B, d->n_q, out_cols))
		st = MHA_ERR_OBSERVER;
done:
	free_elems(qkv, 1, all, t->esize);
	free_elems(concat_owned, nq, cw, t->esize);
	free_elems(owned[0], nq, qw, t->esize);
	free_elems(owned[1], nkv, kw, t->esize);
	free_elems(owned[2], nkv, vw, t->esize);
	free_elems(owned[3], nq, qw, t->esize);
	free_elems(owned[4], nkv, kw, t->esize);
	return st;
}

/* ---- heads in groups: Q, K and V never whole ----------------------------- */

/*
 * Past a few MiB of Q, K and V, the heads are computed in groups: a group
 * is some key/value heads and their query heads; its columns of Q, K and
 * V are projected (column blocks of W_Q, W_K, W_V), turned (RoPE),
 * attended, and its heads' outputs written into their columns of the
 * concatenation, which is the output itself (W_O is then applied in place,
 * a block of rows at a time).  Memory: one group's Q, K and V, not three
 * whole matrices (a long sequence, n = 131072, d_model 512, 8 heads, f32:
 * ~170 MiB rather than ~830), and fewer fresh pages for a short run to
 * fault in.  Every entry is the same sum in the same order as on the whole
 * path (the kernels sum an entry along k alone), so the results are the
 * same bits.  The whole path stays for small problems and for observers of
 * Q, K or V whole.
 */

/* the stages only the whole path hands over */
#define WHOLE_STAGES (MHA_STAGE_SET(MHA_STAGE_Q) | MHA_STAGE_SET(MHA_STAGE_K) | \
		      MHA_STAGE_SET(MHA_STAGE_V) | MHA_STAGE_SET(MHA_STAGE_Q_ROT) | \
		      MHA_STAGE_SET(MHA_STAGE_K_ROT) | MHA_STAGE_SET(MHA_STAGE_Q_NORM) | \
		      MHA_STAGE_SET(MHA_STAGE_K_NORM))
/* Q, K and V up to this size are held whole (measured: bench/bench_mha) */
#define STREAM_BYTES ((size_t)8 << 20)
/* the narrowest projection a group makes: narrower, the product runs slower
 * (measured: ~5-10% at 64 columns); unless that takes more than STREAM_CAP */
#define STREAM_MIN_COLS 128
#define STREAM_CAP ((size_t)64 << 20)
/* the rows of the concatenation W_O takes at a time in place: about this many bytes */
#define WO_BLOCK_BYTES ((size_t)2 << 20)

/* rows·cols elements as mha_memory counts a block */
static size_t block_bytes(size_t rows, size_t cols, size_t esize)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), esize), MHA_ALLOC_SLACK);
}

static size_t min_of(size_t a, size_t b)
{
	return a < b ? a : b;
}

static size_t max_of(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* mha_stream_force's setting: -1 the policy below */
static long stream_forced = -1;

void mha_stream_force(long per)
{
	stream_forced = per < 0 ? -1 : per;
}

size_t mha_stream_heads(const mha_dims *d, const mha_config *cfg, mha_stages wanted, size_t esize)
{
	const size_t G = mha_rule_kv_heads(d), per_q = d->heads / G, B = mha_rule_batch(d);
	/* Q's, K's and V's bytes for one key/value head and its query heads */
	const size_t one = mha_sat_mul(esize, mha_sat_add(
		mha_sat_mul(mha_sat_mul(B, d->n_q), mha_sat_mul(per_q, d->d_k)),
		mha_sat_mul(mha_sat_mul(B, d->n_kv), mha_sat_add(d->d_k, d->d_v))));
	size_t per, groups, wide;

	/* a norm over the whole row of Q and K needs every head's columns */
	if ((wanted & WHOLE_STAGES) || (cfg && cfg->norm.kind != MHA_NORM_NONE && cfg->norm.over_all))
		return G;
	if (stream_forced >= 0) {
		/* for tests and measurements: this many key/value heads a group; 0 whole */
		per = (size_t)stream_forced;
		return per == 0 || per > G ? G : per;
	}
	if (mha_sat_mul(one, G) <= STREAM_BYTES)
		return G;
	per = max_of(STREAM_BYTES / one, 1);
	wide = (STREAM_MIN_COLS + per_q * d->d_k - 1) / (per_q * d->d_k);
	if (per < wide && mha_sat_mul(wide, one) <= STREAM_CAP)
		per = wide;
	if (per >= G)
		return G;
	/* groups as even as they come */
	groups = (G + per - 1) / per;
	return (G + groups - 1) / groups;
}

static size_t wo_rows(size_t rows, size_t cw, size_t esize)
{
	/* a multiple of the product's row blocks (kernel_micro.h's MC, 96) */
	const size_t r = max_of(WO_BLOCK_BYTES / mha_sat_mul(cw, esize) / 96 * 96, 96);

	return min_of(r, rows);
}

size_t mha_stream_memory(const mha_dims *d, const mha_config *cfg, size_t per, int f32)
{
	const struct mha_kernels *k = mha_pick_kernels(f32);
	const size_t e = f32 ? sizeof(float) : sizeof(double), H = d->heads;
	const size_t G = mha_rule_kv_heads(d), per_q = H / G, cw = H * d->d_v;
	const size_t B = mha_rule_batch(d), nq = mha_sat_mul(B, d->n_q), nkv = mha_sat_mul(B, d->n_kv);
	const int threads = mha_threads(cfg);
	/* the group's buffers, the slopes, a concatenation of its own: allocated first, held */
	size_t held = mha_sat_add(mha_sat_add(block_bytes(nq, per * per_q * d->d_k, e),
					      block_bytes(nkv, per * d->d_k, e)),
				  block_bytes(nkv, per * d->d_v, e));
	const size_t concat = d->d_out && d->d_out != cw ? block_bytes(nq, cw, e) : 0;
	size_t peak = 0;

	if (cfg->alibi.on && !cfg->alibi.slopes)
		held = mha_sat_add(held, block_bytes(H, 1, sizeof(double)));
	held = mha_sat_add(held, concat);
	/* the largest group, and a last smaller one */
	for (int last = 0; last < 2; last++) {
		const size_t gn = last ? G % per : per, hn = gn * per_q;
		struct mha_gemm gq = { .m = nq, .n = hn * d->d_k, .k = d->d_q_in, .threads = threads };
		struct mha_gemm gk = { .m = nkv, .n = gn * d->d_k, .k = d->d_k_in, .threads = threads };
		struct mha_gemm gv = { .m = nkv, .n = gn * d->d_v, .k = d->d_v_in, .threads = threads };
		struct mha_attend at = { .B = B, .n_q = d->n_q, .n_kv = d->n_kv, .H = hn, .G = gn,
					 .dk = d->d_k, .dv = d->d_v, .threads = threads };

		if (!gn)
			continue;
		peak = max_of(peak, mha_sat_add(held, k->gemm_bytes(&gq)));
		peak = max_of(peak, mha_sat_add(held, k->gemm_bytes(&gk)));
		peak = max_of(peak, mha_sat_add(held, k->gemm_bytes(&gv)));
		peak = max_of(peak, mha_sat_add(held, k->attend_bytes(&at)));
	}
	/* W_O after the group's buffers are freed: in place through a block of rows
	 * (in the group's Q buffer, which is kept, when that is large enough), or whole */
	if (d->d_out) {
		const size_t rows = d->d_out == cw ? wo_rows(nq, cw, e) : nq;
		const size_t qbuf = block_bytes(nq, per * per_q * d->d_k, e);
		struct mha_gemm go = { .m = rows, .n = d->d_out, .k = cw, .threads = threads };

		peak = max_of(peak, mha_sat_add(mha_sat_add(concat, d->d_out == cw ?
							    max_of(block_bytes(rows, cw, e), qbuf) : 0),
						k->gemm_bytes(&go)));
	}
	return peak;
}

/*
 * project() for columns [c0, c0 + cols) of a projection full wide: into buf
 * (rows, cols), or, without W and b and when copy is 0, x's columns where
 * they are.  *res and *ld: where they are and their row stride.
 */
static mha_status project_cols(const struct typed *t, int which, size_t rows, size_t d_in,
			       size_t full, size_t c0, size_t cols, int copy, void *buf,
			       int threads, const void **res, size_t *ld)
{
	const size_t e = t->esize;
	const char *x = t->x[which], *W = t->W[which], *b = t->b[which];

	if (!W && !b && !copy) {
		*res = x + c0 * e;
		*ld = full;
		for (size_t i = 0; i < rows; i++)
			if (!finite_all(x + (i * full + c0) * e, cols, e))
				return MHA_ERR_RANGE;
		return MHA_OK;
	}
	*res = buf;
	*ld = cols;
	if (W) {
		struct mha_gemm g = { .m = rows, .n = cols, .k = d_in, .A = x, .B = W + c0 * e,
				      .bias = b ? b + c0 * e : NULL, .lda = d_in, .ldb = full,
				      .ldc = cols, .C = buf, .threads = threads,
				      .progress = t->progress };

		t->k->gemm(&g);
		if (g.failed)
			return MHA_ERR_NOMEM;
		/* an entry not finite: its partial sums may have overflowed (rules.h) */
		if (g.nonfinite &&
		    mha_finish_product(buf, rows, cols, cols, x, d_in, g.B, full, g.bias, d_in, e))
			return MHA_ERR_RANGE;
		return MHA_OK;
	}
	/* x + b, or x's columns (full = d_in here) */
	for (size_t i = 0; i < rows; i++)
		for (size_t c = 0; c < cols; c++) {
			const size_t at = i * full + c0 + c;

			if (e == 8)
				((double *)buf)[i * cols + c] = b ? ((const double *)x)[at] +
								    ((const double *)b)[c0 + c]
								  : ((const double *)x)[at];
			else
				((float *)buf)[i * cols + c] = b ? ((const float *)x)[at] +
								   ((const float *)b)[c0 + c]
								 : ((const float *)x)[at];
		}
	return finite_all(buf, rows * cols, e) ? MHA_OK : MHA_ERR_RANGE;
}

/* the rule for query heads [h0, h0 + hn) and their gn key/value heads, numbered from 0 */
static struct mha_rule rule_of_heads(const struct mha_rule *all, size_t h0, size_t hn, size_t gn,
				     const double *slopes)
{
	struct mha_rule r = *all;

	r.H = hn;
	r.G = gn;
	if (all->per_head) {
		if (r.allow)
			r.allow += h0 * all->n_q * all->n_kv;
		if (r.bias)
			r.bias += h0 * all->n_q * all->n_kv;
	}
	if (r.sinks)
		r.sinks += h0;
	if (r.alibi)
		r.slopes = slopes + h0;
	return r;
}

/*
 * out (rows, cw) = out·W_O + b_O in place (d_out = cw): a block of rows at a
 * time copied to tmp and multiplied back into out, each block checked as
 * the whole product is.  The same sums as one product.  tmp is spare
 * (spare_bytes) when that is large enough: memory already touched, no
 * fresh pages to fault in (a group's Q, ~2 MiB at n = 2048).
 */
static mha_status wo_in_place(void *out, const struct typed *t, size_t rows, size_t cw,
			      int threads, void *spare, size_t spare_bytes)
{
	const size_t e = t->esize, blk = wo_rows(rows, cw, e);
	void *own = spare && spare_bytes >= blk * cw * e ? NULL : alloc_elems(blk, cw, e);
	void *tmp = own ? own : spare_bytes >= blk * cw * e ? spare : NULL;
	mha_status st = tmp ? MHA_OK : MHA_ERR_NOMEM;

	for (size_t r0 = 0; r0 < rows && st == MHA_OK; r0 += blk) {
		const size_t m = min_of(blk, rows - r0);
		char *c = (char *)out + r0 * cw * e;
		struct mha_gemm g = { .m = m, .n = cw, .k = cw, .A = tmp, .B = t->W[3],
				      .bias = t->b[3], .lda = cw, .ldb = cw, .ldc = cw, .C = c,
				      .threads = threads, .progress = t->progress };

		memcpy(tmp, c, m * cw * e);
		t->k->gemm(&g);
		if (g.failed)
			st = MHA_ERR_NOMEM;
		else if (g.nonfinite &&
			 mha_finish_product(c, m, cw, cw, tmp, cw, t->W[3], cw, t->b[3], cw, e))
			st = MHA_ERR_RANGE;
	}
	free_elems(own, blk, cw, e);
	return st;
}

static int streamed_forward(void *out, const struct typed *t, const mha_dims *d,
			    const mha_config *cfg, const mha_observer *obs, mha_report *rep,
			    size_t per)
{
	const size_t e = t->esize, H = d->heads, G = mha_rule_kv_heads(d), per_q = H / G;
	const size_t dk = d->d_k, dv = d->d_v, cw = H * dv;
	const size_t out_cols = mha_output_cols(d, t->W[3] != NULL);
	const size_t B = mha_rule_batch(d), nq = B * d->n_q, nkv = B * d->n_kv;
	const int threads = mha_threads(cfg), norm = cfg->norm.kind != MHA_NORM_NONE;
	const int rope = cfg->rope.mode != MHA_ROPE_NONE, own = rope || norm;
	const struct mha_rule all = mha_rule_of(d, cfg);
	/* a group's Q, K and V (the largest group's size), reused by each */
	void *qb = own || t->W[0] || t->b[0] ? alloc_elems(nq, per * per_q * dk, e) : NULL;
	void *kb = own || t->W[1] || t->b[1] ? alloc_elems(nkv, per * dk, e) : NULL;
	void *vb = t->W[2] || t->b[2] ? alloc_elems(nkv, per * dv, e) : NULL;
	double *press = all.alibi && !cfg->alibi.slopes ? malloc(H * sizeof(double)) : NULL;
	/* the heads' outputs side by side: in out when it is as wide (W_O then in place) */
	void *concat_owned = t->W[3] && out_cols != cw ? alloc_elems(nq, cw, e) : NULL;
	char *concat = concat_owned ? concat_owned : out;
	size_t blocked = 0, first = SIZE_MAX;
	mha_status st = MHA_OK;

	if (((own || t->W[0] || t->b[0]) && !qb) || ((own || t->W[1] || t->b[1]) && !kb) ||
	    ((t->W[2] || t->b[2]) && !vb) || (all.alibi && !cfg->alibi.slopes && !press) ||
	    (t->W[3] && out_cols != cw && !concat_owned))
		st = MHA_ERR_NOMEM;
	for (size_t h = 0; press && h < H; h++)
		press[h] = mha_rule_slope(&all, h);
	for (size_t g0 = 0; g0 < G && st == MHA_OK; g0 += per) {
		const size_t gn = min_of(per, G - g0), hn = gn * per_q, h0 = g0 * per_q;
		const void *Q, *K, *V;
		size_t ldq, ldk, ldv;
		struct mha_attend a;

		mha_progress_phase(t->progress, "projections");
		st = project_cols(t, 0, nq, d->d_q_in, H * dk, h0 * dk, hn * dk, own, qb, threads,
				  &Q, &ldq);
		if (st == MHA_OK)
			st = project_cols(t, 1, nkv, d->d_k_in, G * dk, g0 * dk, gn * dk, own, kb,
					  threads, &K, &ldk);
		/* normalised in place, the group's heads with their own weights */
		if (st == MHA_OK && norm)
			st = mha_norm_turn(qb, qb, e, nq, hn, dk, h0, &cfg->norm, 0);
		if (st == MHA_OK && norm)
			st = mha_norm_turn(kb, kb, e, nkv, gn, dk, g0, &cfg->norm, 1);
		if (st == MHA_OK)
			st = project_cols(t, 2, nkv, d->d_v_in, G * dv, g0 * dv, gn * dv, 0, vb,
					  threads, &V, &ldv);
		/* turned in place, each sequence from its own positions (as whole_forward) */
		for (size_t b = 0; rope && b < B && st == MHA_OK; b++) {
			char *q = (char *)qb + b * d->n_q * ldq * e, *k = (char *)kb + b * d->n_kv * ldk * e;

			st = mha_rope_turn(q, q, e, d->n_q, hn, dk, &cfg->rope, cfg->rope.q_pos,
					   mha_rule_offset_seq(d, cfg, b));
			if (st == MHA_OK)
				st = mha_rope_turn(k, k, e, d->n_kv, gn, dk, &cfg->rope, cfg->rope.k_pos, 0);
		}
		if (st != MHA_OK)
			break;
		memset(&a, 0, sizeof(a));
		a.B = B;
		a.n_q = d->n_q;
		a.n_kv = d->n_kv;
		a.H = hn;
		a.G = gn;
		a.dk = dk;
		a.dv = dv;
		a.Q = Q;
		a.K = K;
		a.V = V;
		a.ldq = ldq;
		a.ldk = ldk;
		a.ldv = ldv;
		a.O = concat + h0 * dv * e;
		a.ldo = cw;
		a.scale = mha_scale_of(d, cfg);
		a.softcap = cfg->softcap;
		a.rule = rule_of_heads(&all, h0, hn, gn, press ? press : cfg->alibi.slopes);
		a.threads = threads;
		a.progress = t->progress;
		mha_progress_phase(t->progress, "attention");
		t->k->attend(&a);
		if (a.error) {
			st = a.error == 1 ? MHA_ERR_NOMEM : MHA_ERR_RANGE;
			break;
		}
		if (a.blocked) {
			/* the group's (b·hn + h)·n_q + row as the whole's (b·H + h0 + h)·n_q + row */
			const size_t bh = a.first_blocked / d->n_q;
			const size_t at = (bh / hn * H + h0 + bh % hn) * d->n_q + a.first_blocked % d->n_q;

			blocked += a.blocked;
			first = at < first ? at : first;
		}
	}
	/* Q's buffer is kept for W_O's rows in place (wo_in_place), the others let go */
	if (!t->W[3] || concat_owned) {
		free_elems(qb, nq, per * per_q * dk, e);
		qb = NULL;
	}
	free_elems(kb, nkv, per * dk, e);
	free_elems(vb, nkv, per * dv, e);
	free(press);
	if (st != MHA_OK)
		goto done;
	if (rep) {
		rep->blocked_rows = blocked;
		rep->first_blocked_head = blocked ? (int)(first / d->n_q % H) : -1;
		rep->first_blocked_row = blocked ? first % d->n_q : 0;
		rep->first_blocked_sequence = blocked ? first / d->n_q / H : 0;
		rep->scale = mha_scale_of(d, cfg);
	}
	if (tell(obs, MHA_STAGE_CONCAT, concat, B, d->n_q, cw)) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (t->W[3] && !concat_owned) {
		mha_progress_phase(t->progress, "output");
		st = wo_in_place(out, t, nq, cw, threads, qb, qb ? nq * per * per_q * dk * e : 0);
	} else if (t->W[3]) {
		struct mha_gemm g = { .m = nq, .n = out_cols, .k = cw, .A = concat,
				      .B = t->W[3], .bias = t->b[3], .lda = cw, .ldb = out_cols,
				      .ldc = out_cols, .C = out, .threads = threads,
				      .progress = t->progress };

		mha_progress_phase(t->progress, "output");

		t->k->gemm(&g);
		if (g.failed)
			st = MHA_ERR_NOMEM;
		else if (g.nonfinite &&
			 mha_finish_product(out, nq, out_cols, out_cols, concat, cw, t->W[3],
					    out_cols, t->b[3], cw, e))
			st = MHA_ERR_RANGE;
	} else if (!finite_all(out, nq * out_cols, e)) {
		st = MHA_ERR_RANGE;
	}
	if (st == MHA_OK && tell(obs, MHA_STAGE_OUTPUT, out, B, d->n_q, out_cols))
		st = MHA_ERR_OBSERVER;
done:
	free_elems(qb, nq, per * per_q * dk, e);
	free_elems(concat_owned, nq, cw, e);
	return st;
}

int mha_fast_forward(void *out, const struct typed *t, const mha_dims *d,
		     const mha_config *cfg, const mha_observer *obs, mha_report *rep)
{
	const size_t per = mha_stream_heads(d, cfg, obs && obs->fn ? obs->stages : 0, t->esize);

	if (per < mha_rule_kv_heads(d))
		return streamed_forward(out, t, d, cfg, obs, rep, per);
	return whole_forward(out, t, d, cfg, obs, rep);
}

/*
 * fast.c: the fast path of mha_forward() and all of mha_forward_f32().
 *
 * When nobody asks to see a per-head intermediate, the projections are
 * blocked matrix products and the attention is fused (kernel.c): no
 * (n_q, n_kv) matrix is built, keys are taken in blocks with a running
 * max and sum, causal blocks past the diagonal are skipped, and the work
 * is shared among threads so that every output element is computed in the
 * same order whatever their number.  A batch's projections are one product
 * over all its rows, and its attention tasks are batch × heads × query
 * blocks, each sequence under its own rule (mha_rule_seq).  The kernels are compiled for several
 * vector widths; the widest the processor runs is used (MHA_KERNEL=base,
 * avx2 or avx512 in the environment chooses one, for testing).
 */
#include "mha.h"
#include "kernel.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define KERNELS(name, sfx) \
	{ name, mha_gemm_##sfx, mha_attend_##sfx, mha_gemm_bytes_##sfx, mha_attend_bytes_##sfx }

static const struct mha_kernels kernels_f64[] = {
	KERNELS("base", f64_base),
#if defined(MHA_X86_KERNELS)
	KERNELS("avx2", f64_avx2),
	KERNELS("avx512", f64_avx512),
#endif
};

static const struct mha_kernels kernels_f32[] = {
	KERNELS("base", f32_base),
#if defined(MHA_X86_KERNELS)
	KERNELS("avx2", f32_avx2),
	KERNELS("avx512", f32_avx512),
#endif
};

/* 0 base, 1 AVX2+FMA, 2 AVX-512F+FMA: what the CPU runs, or MHA_KERNEL says */
static int kernel_level(void)
{
	int level = 0;
	const char *want = getenv("MHA_KERNEL");

#if defined(MHA_X86_KERNELS)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		level = 1;
	if (level == 1 && __builtin_cpu_supports("avx512f"))
		level = 2;
#endif
	if (want && !strcmp(want, "base"))
		level = 0;
	else if (want && !strcmp(want, "avx2") && level >= 1)
		level = 1;
	return level;
}

const struct mha_kernels *mha_pick_kernels(int is_f32)
{
	const int level = kernel_level();

	return is_f32 ? &kernels_f32[level] : &kernels_f64[level];
}

const char *mha_kernel(void)
{
	return kernels_f64[kernel_level()].name;
}

int mha_threads(const mha_config *cfg)
{
	int n = 1;

#ifdef _OPENMP
	/* OMP_NUM_THREADS=100000 is taken at its word only up to the cap */
	n = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
#else
	(void)cfg;
#endif
	return n < 1 ? 1 : n > MHA_MAX_THREADS ? MHA_MAX_THREADS : n;
}

/* ---- the one algorithm for both element types ------------------------- */

static int mul_ok(size_t a, size_t b, size_t *r)
{
	if (a && b > SIZE_MAX / a)
		return 0;
	*r = a * b;
	return 1;
}

static void *alloc_elems(size_t rows, size_t cols, size_t esize)
{
	size_t n;

	if (!mul_ok(rows, cols, &n) || !mul_ok(n, esize, &n))
		return NULL;
	return malloc(n ? n : 1);
}

static int finite_all(const void *m, size_t n, size_t esize)
{
	if (esize == 8) {
		const double *d = m;

		for (size_t i = 0; i < n; i++)
			if (!isfinite(d[i]))
				return 0;
	} else {
		const float *f = m;

		for (size_t i = 0; i < n; i++)
			if (!isfinite(f[i]))
				return 0;
	}
	return 1;
}

/*
 * x (rows, d_in)·W + b, or x + b, or x itself: *res, with *owned to free.
 * MHA_ERR_RANGE when an entry truly is not finite (rules.h).
 */
static mha_status project(const struct typed *t, int which, size_t rows, size_t d_in,
			  size_t cols, int threads, const void **res, void **owned)
{
	const void *x = t->x[which], *W = t->W[which], *b = t->b[which];

	*owned = NULL;
	if (!W && !b) {
		*res = x;
		return finite_all(x, rows * cols, t->esize) ? MHA_OK : MHA_ERR_RANGE;
	}
	*owned = alloc_elems(rows, cols, t->esize);
	if (!*owned)
		return MHA_ERR_NOMEM;
	if (W) {
		struct mha_gemm g = { .m = rows, .n = cols, .k = d_in, .A = x, .B = W, .bias = b,
				      .lda = d_in, .ldb = cols, .ldc = cols, .C = *owned,
				      .threads = threads };

		t->k->gemm(&g);
		*res = *owned;
		if (g.failed)
			return MHA_ERR_NOMEM;
		/* an entry not finite: its partial sums may have overflowed (rules.h) */
		if (!finite_all(*owned, rows * cols, t->esize) &&
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
	if (!obs || !obs->fn || !(obs->wanted & MHA_STAGE_BIT(s)))
		return 0;
	for (size_t b = 0; b < B; b++)
		if ((obs->sequence && obs->sequence(obs->ctx, b)) ||
		    obs->fn(obs->ctx, s, -1, (const double *)m + b * rows * cols, rows, cols))
			return 1;
	return 0;
}

int mha_fast_forward(void *out, const struct typed *t, const mha_dims *d,
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
	struct mha_attend a;
	mha_status st;

	st = project(t, 0, nq, d->d_q_in, qw, threads, &Q, &owned[0]);
	if (st == MHA_OK)
		st = project(t, 1, nkv, d->d_k_in, kw, threads, &K, &owned[1]);
	if (st == MHA_OK)
		st = project(t, 2, nkv, d->d_v_in, vw, threads, &V, &owned[2]);
	if (st != MHA_OK)
		goto done;
	if (tell(obs, MHA_STAGE_Q, Q, B, d->n_q, qw) || tell(obs, MHA_STAGE_K, K, B, d->n_kv, kw) ||
	    tell(obs, MHA_STAGE_V, V, B, d->n_kv, vw)) {
		st = MHA_ERR_OBSERVER;
		goto done;
	}
	if (cfg->rope.mode != MHA_ROPE_NONE) {
		/* Q and K turned by position (rope.c), as on the plain path; a batch's
		 * sequences each from their own positions (the causal offset is each's) */
		owned[3] = alloc_elems(nq, qw, t->esize);
		owned[4] = alloc_elems(nkv, kw, t->esize);
		st = owned[3] && owned[4] ? MHA_OK : MHA_ERR_NOMEM;
		for (size_t b = 0; b < B && st == MHA_OK; b++) {
			const size_t qo = b * d->n_q * qw * t->esize, ko = b * d->n_kv * kw * t->esize;

			st = mha_rope_turn((char *)owned[3] + qo, (const char *)Q + qo, t->esize, d->n_q, H,
					   d->d_k, &cfg->rope, cfg->rope.q_pos,
					   mha_rule_offset_seq(d, cfg, b));
			if (st == MHA_OK)
				st = mha_rope_turn((char *)owned[4] + ko, (const char *)K + ko, t->esize,
						   d->n_kv, G, d->d_k, &cfg->rope, cfg->rope.k_pos, 0);
		}
		if (st != MHA_OK)
			goto done;
		Q = owned[3];
		K = owned[4];
		if (tell(obs, MHA_STAGE_Q_ROT, Q, B, d->n_q, qw) ||
		    tell(obs, MHA_STAGE_K_ROT, K, B, d->n_kv, kw)) {
			st = MHA_ERR_OBSERVER;
			goto done;
		}
	}

	/*
	 * The heads' outputs over Q when Q is ours and as wide: each attention
	 * task reads its rows of one head's Q before it writes that head's
	 * output there (kernel.c), and nothing reads Q after (a long sequence:
	 * 256 MiB fewer at n = 131072, d_model 512, f32).  mha_memory counts so.
	 */
	if (!t->W[3])
		concat = out;
	else if (d->d_k == d->d_v && (Q == owned[0] || Q == owned[3]))
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
				      .ldc = out_cols, .C = out, .threads = threads };

		t->k->gemm(&g);
		if (g.failed) {
			st = MHA_ERR_NOMEM;
			goto done;
		}
	}
	/* not finite: with W_O, maybe partial sums that overflowed (rules.h) */
	if (!finite_all(out, nq * out_cols, t->esize) &&
	    (!t->W[3] || mha_finish_product(out, nq, out_cols, out_cols, concat, cw, t->W[3],
					    out_cols, t->b[3], cw, t->esize)))
		st = MHA_ERR_RANGE;
	else if (tell(obs, MHA_STAGE_OUTPUT, out, B, d->n_q, out_cols))
		st = MHA_ERR_OBSERVER;
done:
	free(concat_owned);
	for (int i = 0; i < 5; i++)
		free(owned[i]);
	return st;
}

/*
 * backward_memory.c: the most the core backward (backward.c) allocates at
 * any one time, in float64 (core.h; mha_backward_memory() in api.c): one
 * sequence at a time, every allocation as the code makes it, the fast
 * path's kernels and packed blocks as they say.
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

/* a block of rows·cols doubles as the allocator sees it, saturating */
static size_t dbl_block(size_t rows, size_t cols)
{
	return mha_sat_add(mha_sat_mul(mha_sat_mul(rows, cols), sizeof(real)), MHA_ALLOC_SLACK);
}

size_t mha_core_backward_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted)
{
	static const mha_config defaults = MHA_INIT(mha_config);
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
	if (cfg->norm.kind != MHA_NORM_NONE) {
		/* q_norm, k_norm, dQ and dK through the norm, the weights' sums */
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_q, hk)));
		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->n_kv, gk)));
		t = mha_sat_add(t, mha_sat_add(mha_sat_mul(hk, sizeof(double)), MHA_ALLOC_SLACK));
		t = mha_sat_add(t, mha_sat_add(mha_sat_mul(gk, sizeof(double)), MHA_ALLOC_SLACK));
	}
	if (!cfg->exact && !mha_grad_per_head(wanted)) {
		/* the fast path: each row's L and D, nothing per key; then the most
		 * one product takes at once (its transposed factor, its block, the
		 * kernel's panels), every weight taken as given */
		const struct mha_kernels *k = mha_pick_kernels(0);
		const int th = mha_threads(cfg);
		const size_t oc = mha_output_cols(d, 1);
		const size_t proj[4][3] = { { d->n_q, d->d_q_in, hk }, { d->n_kv, d->d_k_in, gk },
					    { d->n_kv, d->d_v_in, gv }, { d->n_q, hv, oc } };
		size_t most = 0, one, heads;
		struct mha_gemm gm;

		t = mha_sat_add(t, mha_sat_mul(2, dbl_block(d->heads, d->n_q)));
		/* K and V, then Q and dconcat, packed per head (the tiles' products
		 * allocate nothing); then each thread's tiles, pass 1's or pass 2's */
		t = mha_sat_add(t, mha_sat_add(BW(pack_bytes)(d, BW(kernels)(k)->packed_nr()),
					       MHA_ALLOC_SLACK));
		{
			const size_t qb = (d->n_q + FAST_QB - 1) / FAST_QB, kb = (d->n_kv + FAST_KB - 1) / FAST_KB;
			const size_t part = d->d_k > d->d_v ? d->d_k : d->d_v;
			const size_t team1 = th > 1 && d->heads * qb > 1 ? (size_t)th : 1;
			const size_t team2 = th > 1 && G * kb > 1 ? (size_t)th : 1;
			size_t one1, one2;

			one1 = dbl_block(1, BW(tiles_count)(d->n_kv, 0, 1));
			if (BW(one_pass)(d))
				one1 = mha_sat_add(one1, mha_sat_add(BW(one_bytes)(d,
							BW(kernels)(k)->packed_nr()), MHA_ALLOC_SLACK));
			one2 = dbl_block(1, BW(tiles_count)(d->n_q, part, 2));
			one1 = mha_sat_mul(team1, one1);
			/* no pass 2 with one pass */
			one2 = BW(one_pass)(d) ? 0 : mha_sat_mul(team2, one2);
			/* the heads' tiles are freed before the products below run */
			heads = one1 > one2 ? one1 : one2;
		}
		for (int i = 0; i < 4; i++) {
			const size_t rows = proj[i][0], d_in = proj[i][1], cols = proj[i][2];

			if (i < 3) {
				/* the forward's x·W, and dx = dP·Wᵀ */
				gm = mha_bw_gemm_of(NULL, NULL, NULL, NULL, rows, cols, d_in, 0, 0, th);
				most = most > (one = k->gemm_bytes(&gm)) ? most : one;
				gm = mha_bw_gemm_of(NULL, NULL, NULL, NULL, rows, d_in, cols, 0, 1, th);
				most = most > (one = k->gemm_bytes(&gm)) ? most : one;
			}
			/* dW = xᵀ·dP, after the first sequence into a part of its own */
			gm = mha_bw_gemm_of(NULL, NULL, NULL, NULL, d_in, cols, rows, 1, 0, th);
			one = mha_sat_add(mha_rule_batch(d) > 1 ? dbl_block(d_in, cols) : 0,
					  k->gemm_bytes(&gm));
			most = most > one ? most : one;
		}
		/* dconcat = dO·W_Oᵀ */
		gm = mha_bw_gemm_of(NULL, NULL, NULL, NULL, d->n_q, hv, oc, 0, 1, th);
		most = most > (one = k->gemm_bytes(&gm)) ? most : one;
		return mha_sat_add(t, most > heads ? most : heads);
	}
	/* the rows, one head's blocks, D and the scratch */
	t = mha_sat_add(t, mha_sat_mul(5, dbl_block(d->n_kv, 1)));
	t = mha_sat_add(t, dbl_block(d->n_q, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_k));
	t = mha_sat_add(t, dbl_block(d->n_kv, d->d_v));
	t = mha_sat_add(t, dbl_block(d->n_q, 1));
	t = mha_sat_add(t, dbl_block(big, wide));
	for (int s = 0; s < N_SQ; s++)
		if ((wanted & MHA_STAGE_SET(mha_sq_stage(s))) && (s != SQ_DSCALED || cfg->softcap > 0))
			squares++;
	return mha_sat_add(t, mha_sat_mul((size_t)squares, dbl_block(d->n_q, d->n_kv)));
}

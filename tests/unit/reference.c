/*
 * reference.c: random cases, every stage against the plain reference in
 * ref.c; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- random cases against the reference -------------------------------- */

#define ROPE_ROWS 24

void make_case(struct random_case *c, unsigned seed)
{
	static const size_t heads_kv[][2] = { { 1, 1 }, { 2, 2 }, { 2, 1 }, { 3, 3 }, { 4, 2 }, { 4, 1 }, { 6, 3 } };
	const size_t *hk;
	mha_dims *d = &c->d;
	size_t n_mask;

	memset(c, 0, sizeof(*c));
	d->size = sizeof(*d);
	c->cfg.size = sizeof(c->cfg);
	rng_state = 0x9E3779B97F4A7C15ULL * (seed + 1);
	(void)rnd();
	hk = heads_kv[(size_t)((rnd() + 1) * 3.5) % 7];
	d->heads = hk[0];
	d->kv_heads = (seed % 3) ? hk[1] : 0; /* 0 means "as many as heads" when they match */
	if (d->kv_heads == 0 && hk[1] != hk[0])
		d->kv_heads = hk[1];
	c->direct = seed % 5 == 4;
	c->weights = !c->direct && seed % 4 != 3;
	c->biases = c->weights && seed % 2;
	c->wo = seed % 3 == 1;
	c->cross = !c->direct && seed % 4 == 2;
	d->n_q = 1 + (size_t)((rnd() + 1) * 4.5);
	d->n_kv = (c->cross || c->direct) ? 1 + (size_t)((rnd() + 1) * 5) : d->n_q;
	d->d_k = 1 + (size_t)((rnd() + 1) * 2.5);
	d->d_v = c->weights || c->direct ? 1 + (size_t)((rnd() + 1) * 2.5) : d->d_k;
	{
		const size_t G = d->kv_heads ? d->kv_heads : d->heads;

		if (c->weights) {
			d->d_q_in = 1 + (size_t)((rnd() + 1) * 4);
			d->d_k_in = d->d_v_in = c->cross ? 1 + (size_t)((rnd() + 1) * 4) : d->d_q_in;
		} else {
			d->d_q_in = d->heads * d->d_k;
			d->d_k_in = G * d->d_k;
			d->d_v_in = G * d->d_v;
		}
		c->xq = rnd_matrix(d->n_q * d->d_q_in);
		c->xk = c->cross || c->direct || d->d_k_in != d->d_q_in ? rnd_matrix(d->n_kv * d->d_k_in) : NULL;
		c->xv = c->direct || d->d_v_in != d->d_k_in ? rnd_matrix(d->n_kv * d->d_v_in) : NULL;
		if (!c->xk)
			c->xk = c->xq;
		if (!c->xv)
			c->xv = c->xk;
		if (c->weights) {
			c->W[0] = rnd_matrix(d->d_q_in * d->heads * d->d_k);
			c->W[1] = rnd_matrix(d->d_k_in * G * d->d_k);
			c->W[2] = rnd_matrix(d->d_v_in * G * d->d_v);
		}
		if (c->biases) {
			c->b[0] = rnd_matrix(d->heads * d->d_k);
			c->b[1] = rnd_matrix(G * d->d_k);
			c->b[2] = rnd_matrix(G * d->d_v);
		}
	}
	if (c->wo) {
		d->d_out = 1 + (size_t)((rnd() + 1) * 3);
		c->W[3] = rnd_matrix(d->heads * d->d_v * d->d_out);
		if (seed % 2)
			c->b[3] = rnd_matrix(d->d_out);
	}
	c->cfg.scale_mode = (mha_scale_mode)(seed % 5);
	c->cfg.scale = 0.3 + rnd();
	c->cfg.causal = (mha_causal)((seed / 5) % 4);
	c->cfg.causal_offset = (ptrdiff_t)((seed / 3) % 5) - 2;
	if (seed % 9 == 4)
		c->cfg.kv_len = 1 + (size_t)((rnd() + 1) / 2 * (double)d->n_kv) % d->n_kv;
	c->cfg.softcap = seed % 7 == 0 ? 0.5 + (rnd() + 1) : 0;
	c->cfg.mask.per_head = seed % 2 && d->heads > 1;
	n_mask = d->n_q * d->n_kv * (c->cfg.mask.per_head ? d->heads : 1);
	if (seed % 6 == 1 || seed % 6 == 2) {
		c->bias = rnd_matrix(n_mask);
		for (size_t i = 0; i < n_mask; i++)
			if (c->bias[i] < -0.7)
				c->bias[i] = -INFINITY;
		c->cfg.mask.bias = c->bias;
	}
	if (seed % 6 == 2 || seed % 6 == 3) {
		c->allow = malloc(n_mask);
		for (size_t i = 0; i < n_mask; i++)
			c->allow[i] = rnd() > -0.6;
		c->cfg.mask.allow = c->allow;
	}
	/* a sliding window in some cases, from the seed alone (the draws above stay) */
	if (seed % 4 == 1 || seed % 7 == 3) {
		static const ptrdiff_t sides[] = { -1, 0, 1, 2, 3, 20 };

		c->cfg.window.on = 1;
		c->cfg.window.left = sides[(seed / 4) % 6];
		c->cfg.window.right = sides[(seed / 24) % 6];
	}
	/* attention sinks in some cases, from the seed alone: with every other option */
	if (seed % 5 == 3) {
		for (size_t h = 0; h < d->heads; h++)
			c->sinks[h] = (double)((seed + 7 * h) % 9) * 0.5 - 2.0;
		c->cfg.sinks = c->sinks;
	}
	/* ALiBi in a third of the cases, Press et al.'s slopes or given ones
	 * (negative too): with windows, offsets, softcaps, sinks, GQA, cross */
	if (seed % 3 == 0) {
		c->cfg.alibi.on = 1;
		if ((seed / 3) % 2) {
			for (size_t h = 0; h < d->heads; h++)
				c->slopes[h] = (double)((int)((seed + 5 * h) % 7) - 3) * 0.25;
			c->cfg.alibi.slopes = c->slopes;
		}
	}
	/* rotary embeddings in a third of the cases (d_k >= 2): both pairings,
	 * partial R, θ default or not, positions given, tables given */
	if (seed % 3 == 0 && d->d_k >= 2) {
		mha_rope *rp = &c->cfg.rope;
		const size_t G = d->kv_heads ? d->kv_heads : d->heads;

		(void)G;
		rp->mode = (seed / 3) % 2 ? MHA_ROPE_HALF : MHA_ROPE_INTERLEAVED;
		rp->theta = seed % 4 == 0 ? 0 : 3.0 + (double)(seed % 17);
		rp->dim = d->d_k % 2 == 0 && seed % 2 ? 0 : 2 * (d->d_k / 2);
		if (seed % 7 == 3 || seed % 11 == 6) {
			for (size_t i = 0; i < d->n_q; i++)
				c->q_pos[i] = (ptrdiff_t)((seed * 7 + i * 5) % ROPE_ROWS);
			for (size_t j = 0; j < d->n_kv; j++)
				c->k_pos[j] = (ptrdiff_t)((seed * 3 + j * 11) % ROPE_ROWS);
			rp->q_pos = c->q_pos;
			rp->k_pos = c->k_pos;
		}
		if (seed % 11 == 6) {
			const size_t R = rp->dim ? rp->dim : d->d_k;

			c->rope_cos = rnd_matrix(ROPE_ROWS * R / 2);
			c->rope_sin = rnd_matrix(ROPE_ROWS * R / 2);
			rp->cos = c->rope_cos;
			rp->sin = c->rope_sin;
			rp->rows = ROPE_ROWS;
		}
		/* queries before the first key (a negative causal offset) turn backwards */
	}
	/* a q/k norm in a quarter of the cases: each kind, per head or over the
	 * whole row, shared or per-head weights or none, eps 0 or not */
	if (seed % 4 == 1) {
		mha_qk_norm *nm = &c->cfg.norm;
		const size_t G = d->kv_heads ? d->kv_heads : d->heads;

		nm->kind = (mha_norm_kind)(1 + (seed / 4) % 3);
		nm->over_all = (seed / 12) % 3 == 1;
		nm->per_head = (seed / 12) % 3 == 2;
		nm->eps = nm->kind != MHA_NORM_LAYER && seed % 8 == 1 ? 0 : 1e-6 * (double)(1 + seed % 5);
		if ((seed / 4) % 5 != 0) {
			const int per = nm->over_all || nm->per_head;

			c->norm_q = rnd_matrix(per ? d->heads * d->d_k : d->d_k);
			c->norm_k = rnd_matrix(per ? G * d->d_k : d->d_k);
			nm->q_weight = c->norm_q;
			nm->k_weight = c->norm_k;
		}
	}
	/* larger scores sometimes: peaked softmax rows.  (Much larger would test
	 * the conditioning of exp(), not the code: an error e in a score is a
	 * relative error e in its weight.) */
	if (seed % 8 == 5)
		for (size_t i = 0; i < d->n_q * d->d_q_in; i++)
			c->xq[i] *= 8;
}

void free_case(struct random_case *c)
{
	if (c->xv != c->xk)
		free(c->xv);
	if (c->xk != c->xq)
		free(c->xk);
	free(c->xq);
	for (int i = 0; i < 4; i++) {
		free(c->W[i]);
		free(c->b[i]);
	}
	free(c->bias);
	free(c->allow);
	free(c->rope_cos);
	free(c->rope_sin);
	free(c->norm_q);
	free(c->norm_k);
}

START_TEST(test_against_reference)
{
	struct random_case c;
	mha_weights w = MHA_INIT(mha_weights);
	mha_inputs in = MHA_INIT(mha_inputs);
	ref_result r;
	seen sn;
	mha_observer obs = MHA_INIT(mha_observer);
	mha_report rep = MHA_INIT(mha_report);
	double *out, *fast;
	char what[64];

	make_case(&c, (unsigned)_i);
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	in = (mha_inputs){ .size = sizeof(mha_inputs), c.xq, c.xk, c.xv };
	out = malloc(c.d.n_q * mha_output_cols(&c.d, c.wo) * sizeof(double));
	fast = malloc(c.d.n_q * mha_output_cols(&c.d, c.wo) * sizeof(double));
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &c.d, &in, &w, &c.cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(ref_forward(&r, &c.d, &in, &w, &c.cfg), 0);

	check_close("Q", sn.m[MHA_STAGE_Q][0], r.Q, r.n_q * r.H * r.dk);
	check_close("K", sn.m[MHA_STAGE_K][0], r.K, r.n_kv * r.G * r.dk);
	check_close("V", sn.m[MHA_STAGE_V][0], r.V, r.n_kv * r.G * r.dv);
	if (c.cfg.rope.mode) {
		snprintf(what, sizeof(what), "case %d q_rot", _i);
		check_close(what, sn.m[MHA_STAGE_Q_ROT][0], r.q_rot, r.n_q * r.H * r.dk);
		snprintf(what, sizeof(what), "case %d k_rot", _i);
		check_close(what, sn.m[MHA_STAGE_K_ROT][0], r.k_rot, r.n_kv * r.G * r.dk);
	} else {
		ck_assert_ptr_null(sn.m[MHA_STAGE_Q_ROT][0]);
		ck_assert_ptr_null(sn.m[MHA_STAGE_K_ROT][0]);
	}
	if (c.cfg.norm.kind) {
		snprintf(what, sizeof(what), "case %d q_norm", _i);
		check_close(what, sn.m[MHA_STAGE_Q_NORM][0], r.q_norm, r.n_q * r.H * r.dk);
		snprintf(what, sizeof(what), "case %d k_norm", _i);
		check_close(what, sn.m[MHA_STAGE_K_NORM][0], r.k_norm, r.n_kv * r.G * r.dk);
	} else {
		ck_assert_ptr_null(sn.m[MHA_STAGE_Q_NORM][0]);
	}
	for (size_t h = 0; h < r.H; h++) {
#define STAGE(s, field, n) do { \
		snprintf(what, sizeof(what), "case %d head %zu %s", _i, h, mha_stage_name(s)); \
		ck_assert_ptr_nonnull(sn.m[s][h + 1]); \
		check_close(what, sn.m[s][h + 1], r.field[h], n); \
	} while (0)
		STAGE(MHA_STAGE_HEAD_Q, head_q, r.n_q * r.dk);
		STAGE(MHA_STAGE_HEAD_K, head_k, r.n_kv * r.dk);
		STAGE(MHA_STAGE_HEAD_V, head_v, r.n_kv * r.dv);
		STAGE(MHA_STAGE_SCORES, scores, r.n_q * r.n_kv);
		STAGE(MHA_STAGE_SCALED, scaled, r.n_q * r.n_kv);
		if (c.cfg.softcap > 0)
			STAGE(MHA_STAGE_SOFTCAPPED, softcapped, r.n_q * r.n_kv);
		else
			ck_assert_ptr_null(sn.m[MHA_STAGE_SOFTCAPPED][h + 1]);
		STAGE(MHA_STAGE_MASK, mask, r.n_q * r.n_kv);
		STAGE(MHA_STAGE_MASKED, masked, r.n_q * r.n_kv);
		STAGE(MHA_STAGE_SOFTMAX, softmax, r.n_q * r.n_kv);
		STAGE(MHA_STAGE_HEAD_OUTPUT, head_out, r.n_q * r.dv);
#undef STAGE
	}
	check_close("concat", sn.m[MHA_STAGE_CONCAT][0], r.concat, r.n_q * r.H * r.dv);
	snprintf(what, sizeof(what), "case %d output", _i);
	check_close(what, out, r.output, r.n_q * r.d_out);
	check_close("observed output", sn.m[MHA_STAGE_OUTPUT][0], r.output, r.n_q * r.d_out);
	ck_assert_uint_eq(rep.blocked_rows, r.blocked);

	/* nobody watching: the fast path, the same numbers to rounding */
	ck_assert_int_eq(mha_forward(fast, &c.d, &in, &w, &c.cfg, NULL, &rep), MHA_OK);
	snprintf(what, sizeof(what), "case %d fast path", _i);
	check_close(what, fast, r.output, r.n_q * r.d_out);
	ck_assert_uint_eq(rep.blocked_rows, r.blocked);
	if (c.cfg.rope.mode) {
		/* the fast path hands over q_rot and k_rot too (its Q and K come
		 * from other products: the same to rounding) */
		seen fs;
		mha_observer fobs = watch_all(&fs);

		fobs.wanted = MHA_STAGE_BIT(MHA_STAGE_Q_ROT) | MHA_STAGE_BIT(MHA_STAGE_K_ROT);
		ck_assert_int_eq(mha_forward(fast, &c.d, &in, &w, &c.cfg, &fobs, &rep), MHA_OK);
		ck_assert_int_eq(rep.fast_path, 1);
		snprintf(what, sizeof(what), "case %d fast q_rot", _i);
		check_close(what, fs.m[MHA_STAGE_Q_ROT][0], r.q_rot, r.n_q * r.H * r.dk);
		snprintf(what, sizeof(what), "case %d fast k_rot", _i);
		check_close(what, fs.m[MHA_STAGE_K_ROT][0], r.k_rot, r.n_kv * r.G * r.dk);
		seen_free(&fs);
	}
	/* and with one thread or two, the same bits */
	{
		double *one = malloc(r.n_q * r.d_out * sizeof(double));
		mha_config cfg1 = c.cfg;

		cfg1.threads = 1;
		ck_assert_int_eq(mha_forward(one, &c.d, &in, &w, &cfg1, NULL, NULL), MHA_OK);
		cfg1.threads = 2;
		ck_assert_int_eq(mha_forward(fast, &c.d, &in, &w, &cfg1, NULL, NULL), MHA_OK);
		ck_assert(!memcmp(fast, one, r.n_q * r.d_out * sizeof(double)));
		free(one);
	}

	seen_free(&sn);
	ref_free(&r);
	free(out);
	free(fast);
	free_case(&c);
}
END_TEST

/* a larger case: accumulation over many keys and features */
START_TEST(test_large_against_reference)
{
	const size_t n = 96, dm = 48, H = 4;
	double *x = rnd_matrix(n * dm), *W[4], *out = malloc(n * dm * sizeof(double));
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_weights w = MHA_INIT(mha_weights);
	mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT };
	ref_result r;

	rng_state = 42;
	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(dm * dm);
	w = (mha_weights){ .size = sizeof(mha_weights),
			   .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
	ref_forward(&r, &d, &in, &w, &cfg);
	check_close("large output", out, r.output, n * dm);
	ref_free(&r);
	for (int i = 0; i < 4; i++)
		free(W[i]);
	free(x);
	free(out);
}
END_TEST

/*
 * Longer than the fast path's blocks (96 queries, 256 keys): the online
 * softmax across key blocks, causal blocks skipped, tails, grouped heads,
 * every kernel variant this CPU runs, one thread or two, and float32.
 */
START_TEST(test_fast_path_blocks)
{
	const size_t nq = 300, nkv = 613, dm = 24, H = 4, G = 2;
	double *xq = rnd_matrix(nq * dm), *xkv = rnd_matrix(nkv * dm), *W[4], *b[4];
	double *exact = malloc(nq * dm * sizeof(double)), *fast = malloc(nq * dm * sizeof(double));
	double *f32back = malloc(nq * dm * sizeof(double)), *bias = rnd_matrix(nq * nkv);
	float *fx = malloc(nq * dm * sizeof(float)), *fkv = malloc(nkv * dm * sizeof(float));
	float *fW[4], *fb[4], *fout = malloc(nq * dm * sizeof(float));
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .kv_heads = G, .d_k = 6, .d_v = 6, .d_out = dm };
	const size_t wsize[4] = { dm * H * 6, dm * G * 6, dm * G * 6, H * 6 * dm };
	const size_t bsize[4] = { H * 6, G * 6, G * 6, dm };
	mha_inputs in = { .size = sizeof(mha_inputs), xq, xkv, xkv };
	mha_weights w = MHA_INIT(mha_weights);
	mha_weights_f32 fw = MHA_INIT(mha_weights_f32);
	mha_report rep = MHA_INIT(mha_report);

	for (int i = 0; i < 4; i++) {
		W[i] = rnd_matrix(wsize[i]);
		b[i] = rnd_matrix(bsize[i]);
		fW[i] = malloc(wsize[i] * sizeof(float));
		fb[i] = malloc(bsize[i] * sizeof(float));
		for (size_t j = 0; j < wsize[i]; j++)
			fW[i][j] = (float)W[i][j];
		for (size_t j = 0; j < bsize[i]; j++)
			fb[i][j] = (float)b[i][j];
	}
	for (size_t i = 0; i < nq * dm; i++)
		fx[i] = (float)xq[i];
	for (size_t i = 0; i < nkv * dm; i++)
		fkv[i] = (float)xkv[i];
	for (size_t i = 0; i < nq * nkv; i++)
		bias[i] *= 2;
	w = (mha_weights){ .size = sizeof(mha_weights),
			   W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] };
	fw = (mha_weights_f32){ .size = sizeof(mha_weights_f32),
				fW[0], fW[1], fW[2], fW[3], fb[0], fb[1], fb[2], fb[3] };
	char *saved = env_save("MHA_KERNEL");

	/*
	 * 0-2: causal without a window; 3-8: sliding windows, whole key blocks
	 * skipped on both sides: with causal offsets, kv_len and a mask, the
	 * diagonal alone, unbounded left, wider than n_kv, no causal rule
	 */
	static const ptrdiff_t wins[][2] = { { 0, 0 }, { 0, 0 }, { 0, 0 }, { 100, -1 }, { 0, 0 },
					     { -1, 30 }, { 5000, 5000 }, { 250, 17 }, { 1, 0 },
					     { -1, -1 }, { 40, 3 }, { 2, 1 },
					     { -1, -1 }, { -1, -1 }, { 64, 0 },
					     { -1, -1 }, { 30, -1 }, { -1, -1 } };
	/* 9-11: attention sinks (one logit per head, some above every score) */
	static const double sinks[4] = { -1.5, 0.25, 3.0, 8.0 };
	/* 12-14: ALiBi: given small slopes without a causal rule (keys far
	 * ahead get large biases: float32 would round them coarsely), Press
	 * et al.'s with bottom-right and a bias, with an offset, kv_len, a
	 * window, sinks and a softcap */
	static const double slopes[4] = { 0.01, -0.005, 0.02, 0.001 };

	/* 15-17: rotary embeddings: rotate_half after a cache (bottom-right),
	 * interleaved over 4 of 6 features with a window, and given positions */
	ptrdiff_t *qpos = malloc(nq * sizeof(ptrdiff_t)), *kpos = malloc(nkv * sizeof(ptrdiff_t));

	for (size_t i = 0; i < nq; i++)
		qpos[i] = (ptrdiff_t)(3 * i + 100);
	for (size_t j = 0; j < nkv; j++)
		kpos[j] = (ptrdiff_t)(j / 2);
	for (int causal = 0; causal < 18; causal++) {
		const int cm = causal < 3 ? causal : causal % 3;
		mha_config cfg = { .size = sizeof(mha_config),
				   .causal = cm == 1 ? MHA_CAUSAL_BOTTOM_RIGHT :
				   cm == 2 ? MHA_CAUSAL_OFFSET : MHA_CAUSAL_NONE,
				   .causal_offset = causal == 5 ? -60 : 40,
				   .kv_len = cm == 2 ? 500 : causal == 7 ? 450 : 0,
				   .mask = { .bias = cm == 1 || causal == 6 ? bias : NULL },
				   .window = { causal >= 3, wins[causal][0], wins[causal][1] },
				   .sinks = causal >= 9 && causal != 12 && causal != 13 && causal < 15 ?
					    sinks : NULL,
				   .softcap = causal == 14 ? 5 : 0,
				   .alibi = { causal >= 12 && causal < 15, causal == 12 ? slopes : NULL } };
		char what[96];

		if (causal >= 15) {
			cfg.rope.mode = causal == 16 ? MHA_ROPE_INTERLEAVED : MHA_ROPE_HALF;
			cfg.rope.dim = causal == 16 ? 4 : 0;
			cfg.rope.theta = causal == 17 ? 500000 : 0;
			cfg.rope.q_pos = causal == 17 ? qpos : NULL;
			cfg.rope.k_pos = causal == 17 ? kpos : NULL;
		}

		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(exact, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
		cfg.exact = 0;
		if (causal >= 3) {
			/* the plain path against the reference, the window written the obvious way */
			ref_result r;

			ck_assert_int_eq(ref_forward(&r, &d, &in, &w, &cfg), 0);
			snprintf(what, sizeof(what), "window %d: exact against the reference", causal);
			check_close(what, exact, r.output, nq * dm);
			ref_free(&r);
		}
		for (size_t k = 0; k < sizeof(kernel_names) / sizeof(kernel_names[0]); k++) {
			double *one = malloc(nq * dm * sizeof(double));

			setenv("MHA_KERNEL", kernel_names[k], 1);
			cfg.threads = 1;
			ck_assert_int_eq(mha_forward(one, &d, &in, &w, &cfg, NULL, &rep), MHA_OK);
			cfg.threads = 2;
			ck_assert_int_eq(mha_forward(fast, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
			ck_assert_msg(!memcmp(one, fast, nq * dm * sizeof(double)),
				      "%s kernels: 1 and 2 threads differ", kernel_names[k]);
			/* 3 threads: Kᵀ and V packed all at once, not one key/value head
			 * at a time as for 1 and 2 (kernel.c's waves): the same numbers */
			cfg.threads = 3;
			ck_assert_int_eq(mha_forward(fast, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
			ck_assert_msg(!memcmp(one, fast, nq * dm * sizeof(double)),
				      "%s kernels: 1 and 3 threads differ", kernel_names[k]);
			cfg.threads = 2;
			ck_assert_int_eq(mha_forward(fast, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
			snprintf(what, sizeof(what), "fast (%s, %s) against exact", kernel_names[k], mha_kernel());
			check_close_norm(what, fast, exact, nq * dm);
			ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										      fx, fkv, fkv }, &fw,
							 &cfg, NULL), MHA_OK);
			for (size_t i = 0; i < nq * dm; i++)
				f32back[i] = fout[i];
			{
				/* float32 against float64: relative to the output's size */
				double worst = 0, maxabs = 0;

				for (size_t i = 0; i < nq * dm; i++)
					maxabs = fmax(maxabs, fabs(exact[i]));
				for (size_t i = 0; i < nq * dm; i++)
					worst = fmax(worst, fabs(f32back[i] - exact[i]) / maxabs);
				ck_assert_msg(worst < 1e-5, "float32 (%s): %.3g relative to float64",
					      kernel_names[k], worst);
			}
			free(one);
		}
		/* as it was: the tests after this one may run in this process */
		env_restore("MHA_KERNEL", saved);
	}
	free(saved);
	free(qpos);
	free(kpos);
	for (int i = 0; i < 4; i++) {
		free(W[i]);
		free(b[i]);
		free(fW[i]);
		free(fb[i]);
	}
	free(xq);
	free(xkv);
	free(exact);
	free(fast);
	free(f32back);
	free(bias);
	free(fx);
	free(fkv);
	free(fout);
}
END_TEST

void unit_add_reference(const struct unit_suite *u)
{
	tcase_add_loop_test(u->ref, test_against_reference, 0, 300);
	tcase_add_test(u->ref, test_large_against_reference);
	tcase_add_test(u->ref, test_fast_path_blocks);
}

/*
 * backward_fast.c: the backward's errors, its fast path, and its memory;
 * tests/unit/main.c runs them.
 */
#include "unit.h"

static int gstop(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)m;
	(void)rows;
	(void)cols;
	(void)head;
	return s == *(const mha_grad_stage *)ctx;
}

/* Errors as mha_forward's, an observer that stops, overflow, the names, the memory bound. */
START_TEST(test_backward_errors)
{
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double x[4] = { 1, 2, 3, 4 }, dout[4] = { 1, NAN, 0, 0 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_grads none = { .size = sizeof(mha_grads) };
	struct grad_set gs;
	mha_grad_stage at = MHA_GRAD_HEAD_DS;
	mha_grad_observer obs = { .size = sizeof(mha_grad_observer),
				  .fn = gstop, .ctx = &at, .wanted = ~0u };
	mha_config cfg = { .size = sizeof(mha_config), .softcap = -1 };
	mha_dims bad = d;

	grads_alloc(&gs, &d, 1);
	ck_assert_int_eq(mha_backward(NULL, NULL, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward(&gs.g, NULL, NULL, &in, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, NULL, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	/* nothing asked for is fine: the run still checks the forward */
	ck_assert_int_eq(mha_backward(&none, NULL, &d, &in, NULL, NULL, NULL, NULL), MHA_OK);
	bad.n_q = 0;
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &bad, &in, NULL, NULL, NULL, NULL), MHA_ERR_DIM);
	bad = d;
	bad.d_q_in = 3;
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &bad, &in, NULL, NULL, NULL, NULL), MHA_ERR_SHAPE);
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SOFTCAP);
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, NULL, &obs, NULL), MHA_ERR_OBSERVER);
	at = MHA_GRAD_DV;
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, NULL, &obs, NULL), MHA_ERR_OBSERVER);
	/* a NaN upstream gradient, an overflowing one */
	ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_RANGE);
	dout[1] = 1e308;
	dout[0] = 1e308;
	ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_RANGE);
	ck_assert_str_eq(mha_grad_stage_name(MHA_GRAD_HEAD_DS), "dS");
	ck_assert_str_eq(mha_grad_stage_name(MHA_GRAD_DK_ROT), "dk_rot");
	ck_assert_str_eq(mha_grad_stage_name(MHA_GRAD_COUNT), "unknown");
	for (int s = 0; s < MHA_GRAD_COUNT; s++)
		ck_assert_str_ne(mha_grad_stage_name((mha_grad_stage)s), "unknown");
	/* more watched squares need more; bad dims: SIZE_MAX */
	{
		/* the plain path's, unwatched (--exact) */
		const mha_config plain = { .size = sizeof(mha_config), .exact = 1 };

		ck_assert_uint_lt(mha_backward_memory(&d, &plain, 0), mha_backward_memory(&d, NULL, ~0u));
	}
	bad.n_q = 0;
	ck_assert_uint_eq(mha_backward_memory(&bad, NULL, 0), SIZE_MAX);
	grads_free(&gs);
}
END_TEST

/*
 * The fast path across its block edges (96 queries, 96 keys a task): larger
 * shapes than make_case's, each option in turn (GQA, cross-attention,
 * every causal alignment, windows, kv_len, a per-head bias and allow mask,
 * softcap, ALiBi, sinks, RoPE, a batch with kv_lens), against the plain path
 * at 1e-12 of the largest value, and on 1, 2 and 3 threads the same bits.
 */
START_TEST(test_backward_fast_blocks)
{
	static const size_t shapes[][4] = {
		/* n_q, n_kv, H, G */
		{ 33, 197, 4, 2 }, { 100, 37, 2, 2 }, { 192, 96, 3, 1 }, { 1, 97, 2, 1 },
		{ 97, 33, 4, 4 }, { 97, 130, 2, 1 }, { 40, 40, 4, 4 }, { 70, 100, 4, 2 },
	};
	const size_t *sh = shapes[_i % 8];
	const size_t B = _i % 8 == 7 ? 2 : 1;
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = sh[0], .n_kv = sh[1], .d_q_in = 6, .d_k_in = 5, .d_v_in = 5,
		       .heads = sh[2], .kv_heads = sh[3], .d_k = 4, .d_v = 3, .d_out = 5,
		       .batch = B == 2 ? 2 : 0 };
	const size_t G = sh[3];
	double *xq, *xk, *xv, *W[4], *bb[4], *dout, sinks[4] = { 0.3, -0.5, 2.0, 0.1 };
	double *bias;
	unsigned char *allow;
	size_t kv_lens[2] = { 50, 0 };
	mha_config cfg = { .size = sizeof(mha_config) }, exact, t[3];
	mha_weights w = MHA_INIT(mha_weights);
	mha_inputs in = MHA_INIT(mha_inputs);
	struct grad_set p, f[3];
	mha_report rep = MHA_INIT(mha_report);
	char what[64];

	rng_state = 4242 + (uint64_t)_i;
	xq = rnd_matrix(B * d.n_q * d.d_q_in);
	xk = rnd_matrix(B * d.n_kv * d.d_k_in);
	xv = rnd_matrix(B * d.n_kv * d.d_v_in);
	W[0] = rnd_matrix(d.d_q_in * d.heads * d.d_k);
	W[1] = rnd_matrix(d.d_k_in * G * d.d_k);
	W[2] = rnd_matrix(d.d_v_in * G * d.d_v);
	W[3] = rnd_matrix(d.heads * d.d_v * d.d_out);
	bb[0] = rnd_matrix(d.heads * d.d_k);
	bb[1] = rnd_matrix(G * d.d_k);
	bb[2] = rnd_matrix(G * d.d_v);
	bb[3] = rnd_matrix(d.d_out);
	dout = rnd_matrix(B * d.n_q * d.d_out);
	bias = rnd_matrix(d.heads * d.n_q * d.n_kv);
	allow = malloc(d.heads * d.n_q * d.n_kv);
	for (size_t i = 0; i < d.heads * d.n_q * d.n_kv; i++)
		allow[i] = (i * 7 + (size_t)_i) % 5 != 0;
	switch (_i % 8) {
	case 0: cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.softcap = 1.5; break;
	case 1: cfg.causal = MHA_CAUSAL_TOP_LEFT; cfg.sinks = sinks; cfg.rope.mode = MHA_ROPE_HALF; break;
	case 2: cfg.window = (mha_window){ 1, 10, 3 }; cfg.alibi.on = 1;
		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .eps = 1e-6, .q_weight = bb[0],
					  .k_weight = bb[1], .per_head = 1 }; break;
	case 3: cfg.mask.allow = allow; cfg.mask.bias = bias; cfg.mask.per_head = 1; cfg.sinks = sinks; break;
	case 4: cfg.causal = MHA_CAUSAL_OFFSET; cfg.causal_offset = -20; cfg.softcap = 0.7;
		cfg.rope.mode = MHA_ROPE_INTERLEAVED; break;
	case 5: cfg.kv_len = 90; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.window = (mha_window){ 1, 5, -1 };
		cfg.sinks = sinks; break;
	case 6: cfg.mask.allow = allow; cfg.alibi.on = 1; cfg.softcap = 3; cfg.rope.mode = MHA_ROPE_HALF;
		/* a q/k norm (no weights: nothing of theirs to sum) */
		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_LAYER, .over_all = 1, .eps = 1e-5 }; break;
	default: cfg.kv_lens = kv_lens; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.sinks = sinks;
		cfg.rope.mode = MHA_ROPE_HALF; cfg.softcap = 2; break;
	}
	w = (mha_weights){ .size = sizeof(mha_weights),
			   W[0], W[1], W[2], W[3], bb[0], bb[1], bb[2], bb[3] };
	in = (mha_inputs){ .size = sizeof(mha_inputs), xq, xk, xv };
	exact = cfg;
	exact.exact = 1;
	grads_alloc(&p, &d, B);
	ck_assert_int_eq(mha_backward(&p.g, dout, &d, &in, &w, &exact, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 0);
	/* the case's scale, as ref_grads_scale: db_K is 0 but for rounding */
	grad_floor = 0;
	for (int i = 0; i < 3; i++)
		for (size_t k = 0; k < p.n[i]; k++)
			grad_floor = fmax(grad_floor, fabs(p.all[i][k]));
	for (int k = 0; k < 3; k++) {
		size_t peak, bound;
		int tracked;

		t[k] = cfg;
		t[k].threads = k + 1;
		grads_alloc(&f[k], &d, B);
		tracked = track_works();
		if (tracked)
			track_start();
		ck_assert_int_eq(mha_backward(&f[k].g, dout, &d, &in, &w, &t[k], NULL, &rep), MHA_OK);
		ck_assert_int_eq(rep.fast_path, 1);
		if (!tracked)
			continue;
		/* the tiles' products on the GEMM kernel: their panels counted; on
		 * one thread within a quarter (threads need not overlap) */
		peak = track_stop();
		bound = mha_backward_memory(&d, &t[k], 0);
		ck_assert_msg(peak <= bound, "shape %d, %d threads: peak %zu above the bound %zu", _i,
			      k + 1, peak, bound);
		if (k == 0)
			ck_assert_msg(bound <= peak + peak / 4 + 4096, "shape %d: bound %zu far above "
				      "the peak %zu", _i, bound, peak);
	}
	for (int i = 0; i < N_GRADS; i++) {
		if ((i == 11 && !cfg.sinks) || (i >= 12 && !cfg.norm.q_weight))
			continue;
		snprintf(what, sizeof(what), "shape %d gradient %d", _i, i);
		grad_close(what, f[0].all[i], p.all[i], p.n[i], RTOL);
	}
	ck_assert_msg(grads_same(&f[0], &f[1]) && grads_same(&f[0], &f[2]),
		      "shape %d: the thread count changed the bits", _i);
	grads_free(&p);
	for (int k = 0; k < 3; k++)
		grads_free(&f[k]);
	free(xq);
	free(xk);
	free(xv);
	for (int i = 0; i < 4; i++) {
		free(W[i]);
		free(bb[i]);
	}
	free(dout);
	free(bias);
	free(allow);
}
END_TEST

/*
 * Extreme numbers on both paths: the same status (rules.h's overflow rule:
 * a seen score that truly overflows is an error, an unseen one is not,
 * huge values averaged are not), and when both succeed the same gradients
 * to 1e-12.
 */
START_TEST(test_backward_fast_extremes)
{
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 3, .n_kv = 4, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double xq[6] = { 0.5, -1, 0.25, 2, 1, 1 }, xk[8] = { 1, 0, 0, 1, -1, 0.5, 2, 2 };
	double xv[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, dout[6] = { 1, 0.5, -1, 2, 0.25, 1 };
	unsigned char allow[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	mha_config cfg = { .size = sizeof(mha_config), .mask.allow = allow }, exact;
	const mha_inputs in = { .size = sizeof(mha_inputs), xq, xk, xv };
	struct grad_set f, p;
	mha_status sf, sp;
	/* the values' gradients dP = dO·Vᵀ overflow in case 2 */
	const mha_status want[5] = { MHA_ERR_RANGE, MHA_OK, MHA_ERR_RANGE, MHA_OK, MHA_OK };
	char what[64];

	grads_alloc(&f, &d, 1);
	grads_alloc(&p, &d, 1);
	for (int k = 0; k < 5; k++) {
		switch (k) {
		case 0: xq[0] = 1e200; xk[0] = 1e200; break;            /* a seen score overflows */
		case 1: allow[0] = 0; break;                            /* the same, unseen */
		case 2: xq[0] = 0.5; xk[0] = 1; allow[0] = 1;
			for (int i = 0; i < 8; i++)
				xv[i] = (i % 2 ? -1.5 : 1.5) * 1e308; /* values near the largest */
			break;
		case 3: for (int i = 0; i < 8; i++)
				xv[i] = i + 1.0;
			xq[2] = 1e154; xk[2] = 1e154; xk[3] = -1e154; break; /* products near the edge */
		default: cfg.softcap = 5; xq[2] = 1e150; break;          /* 1e304, softcapped */
		}
		exact = cfg;
		exact.exact = 1;
		sf = mha_backward(&f.g, dout, &d, &in, NULL, &cfg, NULL, NULL);
		sp = mha_backward(&p.g, dout, &d, &in, NULL, &exact, NULL, NULL);
		ck_assert_msg(sf == sp, "extreme %d: fast %d, plain %d", k, (int)sf, (int)sp);
		ck_assert_msg(sf == want[k], "extreme %d: status %d, want %d", k, (int)sf, (int)want[k]);
		if (sf != MHA_OK)
			continue;
		grad_floor = 0;
		for (int i = 0; i < 3; i++) {
			snprintf(what, sizeof(what), "extreme %d gradient %d", k, i);
			grad_close(what, f.all[i], p.all[i], p.n[i], RTOL);
		}
	}
	grads_free(&f);
	grads_free(&p);
}
END_TEST

/*
 * mha_backward_memory against what a run allocates at its peak, measured
 * (the forward's tracker): never below, within a quarter and 4 KiB above.
 * Case i % 3: 0 every stage watched (the plain path), 1 nothing watched
 * (the fast path, 1 or 2 threads), 2 --exact (the plain path, unwatched).
 */
START_TEST(test_backward_memory_measured)
{
	struct random_case c;
	mha_weights w = MHA_INIT(mha_weights);
	struct grad_set gs;
	gseen sn;
	mha_grad_observer obs = MHA_INIT(mha_grad_observer);
	mha_report rep = MHA_INIT(mha_report);
	size_t peak, bound;
	double *dout;

	if (!track_works())
		return;
	make_case(&c, (unsigned)_i);
	c.cfg.exact = _i % 3 == 2;
	c.cfg.threads = 1 + _i % 2;
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	grads_alloc(&gs, &c.d, 1);
	memset(&sn, 0, sizeof(sn));
	obs = (mha_grad_observer){ .size = sizeof(mha_grad_observer),
				   .fn = gignore, .ctx = &sn, .wanted = _i % 3 == 0 ? ~0u : 0 };
	dout = rnd_matrix(c.d.n_q * mha_output_cols(&c.d, c.wo));
	track_start();
	ck_assert_int_eq(mha_backward(&gs.g, dout, &c.d, &(mha_inputs){ .size = sizeof(mha_inputs),
									c.xq, c.xk, c.xv }, &w, &c.cfg,
				      _i % 3 == 0 ? &obs : NULL, &rep), MHA_OK);
	peak = track_stop();
	ck_assert_int_eq(rep.fast_path, _i % 3 == 1);
	bound = mha_backward_memory(&c.d, &c.cfg, obs.wanted);
	ck_assert_msg(peak <= bound, "case %d: peak %zu above the bound %zu", _i, peak, bound);
	/* the bound takes every weight as given: without them Q, K and V are the caller's */
	if (c.weights && c.wo)
		ck_assert_msg(bound <= peak + peak / 4 + 4096, "case %d: bound %zu far above the peak %zu",
			      _i, bound, peak);
	grads_free(&gs);
	gseen_free(&sn);
	free(dout);
	free_case(&c);
}
END_TEST

/* the library's own (lib/kernels/kernel.h, not exported by libmha.so; libmha.a has it) */
int mha_threads(const mha_config *cfg);

void unit_add_backward_fast(const struct unit_suite *u)
{
	tcase_add_test(u->bw, test_backward_errors);
	tcase_add_loop_test(u->bw, test_backward_memory_measured, 0, 60);
	tcase_add_loop_test(u->bw, test_backward_fast_blocks, 0, 8);
	tcase_add_test(u->bw, test_backward_fast_extremes);
}

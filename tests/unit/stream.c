/*
 * stream.c: the heads in groups (fast.c's streamed path);
 * tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- the heads in groups (fast.c's streamed path) ---------------------- */

/*
 * The group size a test forces (mha_stream_force; NULL: the policy), and
 * the whole suite's: MHA_STREAM_HEADS=k in test_lib's environment (main
 * reads it; the library reads no such variable) runs every test with
 * groups of k key/value heads
 */
long stream_suite = -1;

static void stream_knob(const char *v)
{
	mha_stream_force(v ? strtol(v, NULL, 10) : -1);
}

static void stream_save(void)
{
}

static void stream_restore(void)
{
	mha_stream_force(stream_suite);
}

/* the concatenation an observer of the streamed path is handed, sequence by sequence */
struct concat_seen {
	double *m;
	size_t at;
};

static int concat_record(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	struct concat_seen *c = ctx;

	ck_assert_int_eq(head, -1);
	if (s == MHA_STAGE_CONCAT) {
		memcpy(c->m + c->at, m, rows * cols * sizeof(double));
		c->at += rows * cols;
	}
	return 0;
}

/*
 * The heads in groups of 1, 2 and 3 key/value heads against all at once
 * (MHA_STREAM_HEADS 0): the same bits, f64 and f32, 1 and 2 threads, the
 * same report, over cross attention in a batch, GQA, d_k != d_v, an
 * output as wide as the concatenation (W_O in place) or not or none, and
 * the options: causal rules, kv_lens, windows, per-head and per-sequence
 * masks with a blocked row, sinks, ALiBi (Press et al.'s and given),
 * softcap, RoPE, biases without weights, no weights.
 */
START_TEST(test_stream_groups)
{
	const size_t B = 2, nq = 130, nkv = 150, H = 6, dm = 12;
	static const size_t Gs[3] = { 6, 3, 2 }, dvs[3] = { 4, 6, 4 }, outs[3] = { 24, 12, 0 };
	const size_t kv_lens[2] = { 150, 97 };
	static const double slopes[6] = { 0.01, -0.02, 0.005, 0.03, 0.0, -0.001 };
	static const double sinks[6] = { -1, 0.5, 3, 8, 0, -2 };
	const int v = _i;
	const int noweights = v == 9, biasonly = v == 10;
	const size_t G = Gs[v % 3], dk = 4, dv = dvs[v % 3], cw = H * dv;
	const size_t d_out = noweights || biasonly ? 0 : outs[v % 3];
	const size_t din = noweights || biasonly ? H * dk : dm, dkin = noweights || biasonly ? G * dk : dm;
	const size_t dvin = noweights || biasonly ? G * dv : dm;
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = nq, .n_kv = nkv, .d_q_in = din, .d_k_in = dkin, .d_v_in = dvin,
		       .heads = H, .kv_heads = G, .d_k = dk, .d_v = dv, .d_out = d_out, .batch = B };
	const size_t oc = d_out ? d_out : cw, nout = B * nq * oc;
	double *xq, *xk, *xv, *W[4], *b[4], *bias = rnd_matrix(B * H * nq * nkv);
	float *fx[3], *fW[4], *fb[4];
	unsigned char *allow = malloc(B * H * nq * nkv);
	ptrdiff_t *qpos = malloc(nq * sizeof(ptrdiff_t));
	double *want = malloc(nout * sizeof(double)), *got = malloc(nout * sizeof(double));
	double *exact = malloc(nout * sizeof(double));
	float *fwant = malloc(nout * sizeof(float)), *fgot = malloc(nout * sizeof(float));
	const size_t wsize[4] = { dm * H * dk, dm * G * dk, dm * G * dv, cw * (d_out ? d_out : 1) };
	const size_t bsize[4] = { H * dk, G * dk, G * dv, d_out ? d_out : 1 };
	mha_config cfg = { .size = sizeof(mha_config) };
	mha_report rw = MHA_INIT(mha_report), rg = MHA_INIT(mha_report);
	double *norm_w;

	rng_state = 1500 + (uint64_t)v;
	norm_w = rnd_matrix(H * dk + 3);
	xq = rnd_matrix(B * nq * din);
	xk = rnd_matrix(B * nkv * dkin);
	xv = rnd_matrix(B * nkv * dvin);
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
	{
		const double *x[3] = { xq, xk, xv };
		const size_t n[3] = { B * nq * din, B * nkv * dkin, B * nkv * dvin };

		for (int i = 0; i < 3; i++) {
			fx[i] = malloc(n[i] * sizeof(float));
			for (size_t j = 0; j < n[i]; j++)
				fx[i][j] = (float)x[i][j];
		}
	}
	for (size_t i = 0; i < B * H * nq * nkv; i++)
		allow[i] = (i * 7919) % 5 != 0;
	/* sequence 1, head 4, row 7 sees no key (per head); sequence 0, head 1
	 * (per head) or sequence 1 (one for all heads), row 9 */
	memset(allow + ((1 * H + 4) * nq + 7) * nkv, 0, nkv);
	memset(allow + (1 * nq + 9) * nkv, 0, nkv);
	for (size_t i = 0; i < nq; i++)
		qpos[i] = (ptrdiff_t)(2 * i + 5);
	switch (v) {
	case 0: cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.kv_lens = kv_lens; break;
	case 1: cfg.causal = MHA_CAUSAL_TOP_LEFT; cfg.window = (mha_window){ 1, 20, 3 };
		cfg.softcap = 5; cfg.sinks = sinks; break;
	case 2: cfg.mask = (mha_mask){ .allow = allow, .bias = bias, .per_head = 1, .per_batch = 1 };
		cfg.alibi.on = 1; break;
	case 3: cfg.alibi = (mha_alibi){ 1, slopes }; cfg.causal = MHA_CAUSAL_OFFSET;
		cfg.causal_offset = 30; cfg.rope.mode = MHA_ROPE_HALF; cfg.rope.q_pos = qpos;
		/* a norm per head with a block of weights each: the group's own */
		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS1P, .per_head = 1, .eps = 1e-6,
					  .q_weight = norm_w, .k_weight = norm_w + 3 };
		break;
	case 4: cfg.rope.mode = MHA_ROPE_INTERLEAVED; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
		cfg.mask = (mha_mask){ .bias = bias, .per_head = 1 }; cfg.sinks = sinks; break;
	case 5: cfg.mask = (mha_mask){ .allow = allow, .per_batch = 1 }; cfg.kv_lens = kv_lens;
		cfg.scale = 0.3; cfg.scale_mode = MHA_SCALE_VALUE; break;
	case 6: cfg.window = (mha_window){ 1, -1, 10 }; cfg.alibi.on = 1; cfg.softcap = 2; break;
	case 7: cfg.causal = MHA_CAUSAL_TOP_LEFT; break;
	case 8: break;
	case 9: cfg.rope.mode = MHA_ROPE_HALF; cfg.causal = MHA_CAUSAL_TOP_LEFT;
		/* over the whole row: every head at once, in groups or not */
		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_LAYER, .over_all = 1, .eps = 1e-5,
					  .q_weight = norm_w, .k_weight = norm_w + 1 };
		break;
	case 10: cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .eps = 1e-6, .q_weight = norm_w,
					   .k_weight = norm_w + 2 };
		cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.kv_lens = kv_lens; break;
	default: cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.kv_lens = kv_lens; break;
	}
	stream_save();
	for (int f32 = 0; f32 < 2; f32++) {
		const mha_weights w = noweights ? (mha_weights){ .size = sizeof(mha_weights) } : biasonly ?
			(mha_weights){ .size = sizeof(mha_weights),
				       .b_Q = b[0], .b_K = b[1], .b_V = b[2] } :
			(mha_weights){ .size = sizeof(mha_weights),
				       W[0], W[1], W[2], d_out ? W[3] : NULL, b[0], b[1], b[2],
				       d_out ? b[3] : NULL };
		const mha_weights_f32 fw = noweights ? (mha_weights_f32){ .size = sizeof(mha_weights_f32) } : biasonly ?
			(mha_weights_f32){ .size = sizeof(mha_weights_f32),
					   .b_Q = fb[0], .b_K = fb[1], .b_V = fb[2] } :
			(mha_weights_f32){ .size = sizeof(mha_weights_f32),
					   fW[0], fW[1], fW[2], d_out ? fW[3] : NULL, fb[0], fb[1],
					   fb[2], d_out ? fb[3] : NULL };
		const mha_inputs in = { .size = sizeof(mha_inputs), xq, xk, xv };
		const mha_inputs_f32 fin = { .size = sizeof(mha_inputs_f32), fx[0], fx[1], fx[2] };
		static const char *const knobs[3] = { "1", "2", "3" };

		stream_knob("0");
		cfg.threads = 1;
		ck_assert_int_eq(f32 ? mha_forward_f32(fwant, &d, &fin, &fw, &cfg, &rw)
				     : mha_forward(want, &d, &in, &w, &cfg, NULL, &rw), MHA_OK);
		if (!f32) {
			/* the whole path's numbers are the exact path's, to rounding */
			cfg.exact = 1;
			ck_assert_int_eq(mha_forward(exact, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
			cfg.exact = 0;
			check_close_norm("whole against exact", want, exact, nout);
		}
		for (int k = 0; k < 3; k++)
			for (int threads = 1; threads <= 2; threads++) {
				stream_knob(knobs[k]);
				cfg.threads = threads;
				rg = (mha_report)MHA_INIT(mha_report);
				ck_assert_int_eq(f32 ? mha_forward_f32(fgot, &d, &fin, &fw, &cfg, &rg)
						     : mha_forward(got, &d, &in, &w, &cfg, NULL, &rg), MHA_OK);
				ck_assert_msg(f32 ? !memcmp(fgot, fwant, nout * sizeof(float))
						  : !memcmp(got, want, nout * sizeof(double)),
					      "case %d, %s, groups of %s, %d threads: not the whole "
					      "path's bits", v, f32 ? "f32" : "f64", knobs[k], threads);
				ck_assert_uint_eq(rg.blocked_rows, rw.blocked_rows);
				ck_assert_int_eq(rg.first_blocked_head, rw.first_blocked_head);
				ck_assert_uint_eq(rg.first_blocked_row, rw.first_blocked_row);
				ck_assert_uint_eq(rg.first_blocked_sequence, rw.first_blocked_sequence);
				ck_assert_int_eq(rg.fast_path, 1);
				ck_assert(rg.scale == rw.scale);
			}
		if (v == 2 || v == 5) {
			/* the blocked row is there to be found */
			ck_assert_uint_ge(rw.blocked_rows, v == 2 ? 2 : 1);
			ck_assert_int_eq(rw.first_blocked_head, v == 2 ? 1 : 0);
			ck_assert_uint_eq(rw.first_blocked_row, 9);
			ck_assert_uint_eq(rw.first_blocked_sequence, v == 2 ? 0 : 1);
		}
		if (!f32) {
			/* an observer of the concatenation and the output: the streamed path */
			double *seen_c = malloc(B * nq * cw * sizeof(double));
			struct concat_seen cs = { seen_c, 0 };
			const mha_observer obs = { .size = sizeof(mha_observer),
						   .fn = concat_record, .ctx = &cs,
						   .wanted = MHA_STAGE_BIT(MHA_STAGE_CONCAT) |
							     MHA_STAGE_BIT(MHA_STAGE_OUTPUT) };
			const unsigned wq = MHA_STAGE_BIT(MHA_STAGE_Q_ROT);

			stream_knob("1");
			ck_assert_int_eq(mha_forward(got, &d, &in, &w, &cfg, &obs, NULL), MHA_OK);
			ck_assert_uint_eq(cs.at, B * nq * cw);
			ck_assert(!memcmp(got, want, nout * sizeof(double)));
			if (!w.W_O)
				ck_assert(!memcmp(seen_c, want, nout * sizeof(double)));
			/* Q turned, wanted whole: the whole path whatever the knob */
			ck_assert_uint_eq(mha_memory(&d, &cfg, wq, 0), mha_memory(&d, &cfg, 0, 0) >
					  mha_memory(&d, &cfg, wq, 0) ? 0 : mha_memory(&d, &cfg, wq, 0));
			stream_knob("0");
			ck_assert_uint_eq(mha_memory(&d, &cfg, wq, 0), mha_memory(&d, &cfg, 0, 0));
			free(seen_c);
		}
	}
	stream_restore();
	for (int i = 0; i < 4; i++) {
		free(W[i]);
		free(b[i]);
		free(fW[i]);
		free(fb[i]);
	}
	for (int i = 0; i < 3; i++)
		free(fx[i]);
	free(xq);
	free(xk);
	free(xv);
	free(bias);
	free(allow);
	free(qpos);
	free(norm_w);
	free(want);
	free(got);
	free(exact);
	free(fwant);
	free(fgot);
}
END_TEST

/*
 * Out of range in a group: a value of V past the type's range is an error
 * on both paths; the same partial sums that overflowed, recomputed, are not.
 */
START_TEST(test_stream_range)
{
	const size_t n = 40, H = 4, dm = 8;
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .d_k = 2, .d_v = 2 };
	double *x = rnd_matrix(n * dm), *W = rnd_matrix(dm * dm), *Wv = calloc(dm * dm, sizeof(double));
	double *out = malloc(n * dm * sizeof(double)), *want = malloc(n * dm * sizeof(double));
	static const char *const knobs[3] = { "0", "1", "3" };
	const mha_weights w = { .size = sizeof(mha_weights), .W_Q = W, .W_K = W, .W_V = Wv };

	stream_save();
	/* x's first three features huge in row 0: Q and K do not read them */
	for (int i = 0; i < 3; i++) {
		x[i] = 1e308;
		for (size_t c = 0; c < dm; c++)
			W[(size_t)i * dm + c] = 0;
	}
	for (size_t i = 3; i < dm; i++)
		Wv[i * dm + 5] = Wv[i * dm + 1] = 0.5;
	/* head 2's V: 1e308 + 1e308 - 1e308, its partial sums overflow, the sum does not */
	Wv[0 * dm + 5] = 1;
	Wv[1 * dm + 5] = 1;
	Wv[2 * dm + 5] = -1;
	for (int k = 0; k < 3; k++) {
		stream_knob(knobs[k]);
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     x, x, x }, &w,
					     &(mha_config){ .size = sizeof(mha_config),
							    .threads = 2 }, NULL, NULL), MHA_OK);
		if (k == 0)
			memcpy(want, out, n * dm * sizeof(double));
		else
			ck_assert(!memcmp(want, out, n * dm * sizeof(double)));
	}
	/* 3e308: a true overflow in head 2's V, an error with either path */
	Wv[2 * dm + 5] = 1;
	for (int k = 0; k < 3; k++) {
		stream_knob(knobs[k]);
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     x, x, x }, &w,
					     &(mha_config){ .size = sizeof(mha_config),
							    .threads = 2 }, NULL, NULL), MHA_ERR_RANGE);
	}
	stream_restore();
	free(x);
	free(W);
	free(Wv);
	free(out);
	free(want);
}
END_TEST

/* which problems stream by default: the long one within its memory, a small one whole */
START_TEST(test_stream_policy)
{
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 131072, .n_kv = 131072, .d_q_in = 512, .d_k_in = 512,
		       .d_v_in = 512, .heads = 8, .d_k = 64, .d_v = 64, .d_out = 512 };
	const mha_config cfg = { .size = sizeof(mha_config),
				 .causal = MHA_CAUSAL_TOP_LEFT, .threads = 2 };
	const size_t mib = 1 << 20, whole = 3 * 131072 * 512 * sizeof(float);
	size_t m;

	stream_save();
	stream_knob(NULL);
	/* X and the output are 512 MiB: the library must leave room beside them under 1 GiB */
	m = mha_memory(&d, &cfg, 0, 1);
	ck_assert_msg(m < 200 * mib, "n = 131072 f32: %zu MiB", m / mib);
	ck_assert_uint_gt(m, 96 * mib);
	/* wanting Q whole: Q, K and V whole */
	ck_assert_uint_gt(mha_memory(&d, &cfg, MHA_STAGE_BIT(MHA_STAGE_Q), 1), whole);
	/* 512 tokens: Q, K and V (3 MiB) whole, as before */
	d.n_q = d.n_kv = 512;
	ck_assert_uint_gt(mha_memory(&d, &cfg, 0, 1), 3 * 512 * 512 * sizeof(float));
	stream_restore();
}
END_TEST

void unit_add_stream(const struct unit_suite *u)
{
	tcase_add_loop_test(u->ref, test_stream_groups, 0, 11);
	tcase_add_test(u->ref, test_stream_range);
	tcase_add_test(u->ref, test_stream_policy);
}

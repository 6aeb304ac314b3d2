/*
 * errors.c: every error status and the fault behind it (mha_check_fault),
 * names, versioned structs, and the CLI's
 * number text; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- errors ------------------------------------------------------------ */

START_TEST(test_errors)
{
	double x[4] = { 1, 2, 3, 4 }, out[4], big[2] = { 1e200, 1e200 };
	mha_dims ok = { .size = sizeof(mha_dims),
			.n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
			.heads = 1, .d_k = 2, .d_v = 2 };
	mha_dims d = MHA_INIT(mha_dims);
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config) };
	const double nan_bias[4] = { 0, NAN, 0, 0 }, inf_bias[4] = { 0, 0, INFINITY, 0 };
	seen sn;
	mha_observer obs = MHA_INIT(mha_observer);

	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, NULL, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward(NULL, &ok, &in, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_forward(out, NULL, &in, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_forward(out, &ok, NULL, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	d = ok;
	d.n_kv = 0;
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_DIM);
	d = ok;
	d.heads = 0;
	ck_assert_int_eq(mha_check(&d, NULL), MHA_ERR_HEADS);
	d = ok;
	d.heads = 2;
	d.kv_heads = 3;
	ck_assert_int_eq(mha_check(&d, NULL), MHA_ERR_HEADS);
	d.heads = 3;
	d.kv_heads = 2;
	ck_assert_int_eq(mha_check(&d, NULL), MHA_ERR_HEADS);
	d = ok;
	d.d_k = 1; /* no W_Q, so Q = X needs heads·d_k = 2 columns */
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_SHAPE);
	d = ok;
	d.n_q = SIZE_MAX / 2;
	ck_assert_int_eq(mha_check(&d, NULL), MHA_ERR_TOOBIG);
	cfg.scale_mode = MHA_SCALE_VALUE;
	cfg.scale = NAN;
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SCALE);
	cfg.scale = INFINITY;
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_ERR_SCALE);
	cfg = (mha_config){ .size = sizeof(mha_config), .softcap = -1 };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SOFTCAP);
	cfg = (mha_config){ .size = sizeof(mha_config), .mask = { .bias = nan_bias } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_MASK);
	cfg = (mha_config){ .size = sizeof(mha_config), .mask = { .bias = inf_bias } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_MASK);
	/* 1e200·1e200 overflows: an error, not infinities or NaN in the output */
	d = ok;
	d.d_q_in = d.d_k_in = d.d_v_in = 1;
	d.d_k = d.d_v = 1;
	in = (mha_inputs){ .size = sizeof(mha_inputs), big, big, big };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_RANGE);
	cfg = (mha_config){ .size = sizeof(mha_config), .kv_len = 3 };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_KV_LEN);
	/* a window side below -1; -1 and 0 are fine; off, any numbers are ignored */
	cfg = (mha_config){ .size = sizeof(mha_config), .window = { 1, -2, 0 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_ERR_WINDOW);
	cfg = (mha_config){ .size = sizeof(mha_config), .window = { 1, 3, -5 } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_WINDOW);
	cfg = (mha_config){ .size = sizeof(mha_config), .window = { 1, -1, 0 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
	cfg = (mha_config){ .size = sizeof(mha_config), .window = { 0, -7, -7 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
	/* a sink that is not a finite number, on either path and type */
	{
		const double bad_sinks[2][4] = { { 0, 0, 0, NAN }, { -INFINITY, 0, 0, 0 } };
		const float f[64] = { 0 };
		float fo[64];

		for (int k = 0; k < 2; k++) {
			cfg = (mha_config){ .size = sizeof(mha_config), .sinks = bad_sinks[k] };
			ck_assert_int_eq(mha_check(&ok, &cfg), ok.heads == 4 || k == 1 ? MHA_ERR_SINK : MHA_OK);
		}
		cfg = (mha_config){ .size = sizeof(mha_config), .sinks = bad_sinks[1] };
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SINK);
		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SINK);
		if (ok.n_q * ok.d_q_in <= 64 && ok.n_kv * ok.d_k_in <= 64 && ok.n_kv * ok.d_v_in <= 64)
			ck_assert_int_eq(mha_forward_f32(fo, &ok, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										     f, f, f }, NULL,
							 &cfg, NULL), MHA_ERR_SINK);
		/* an ALiBi slope that is not a finite number; ignored while ALiBi is off */
		for (int k = 0; k < 2; k++) {
			cfg = (mha_config){ .size = sizeof(mha_config),
					    .alibi = { 1, bad_sinks[k] } };
			ck_assert_int_eq(mha_check(&ok, &cfg), ok.heads == 4 || k == 1 ? MHA_ERR_ALIBI : MHA_OK);
		}
		cfg = (mha_config){ .size = sizeof(mha_config), .alibi = { 0, bad_sinks[1] } };
		ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
		cfg = (mha_config){ .size = sizeof(mha_config), .alibi = { 1, bad_sinks[1] } };
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_ALIBI);
		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_ALIBI);
		if (ok.n_q * ok.d_q_in <= 64 && ok.n_kv * ok.d_k_in <= 64 && ok.n_kv * ok.d_v_in <= 64)
			ck_assert_int_eq(mha_forward_f32(fo, &ok, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										     f, f, f }, NULL,
							 &cfg, NULL), MHA_ERR_ALIBI);
	}
	/* the observer can stop the run */
	in = (mha_inputs){ .size = sizeof(mha_inputs), x, x, x };
	obs = watch_all(&sn);
	sn.stop_at = 2;
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, NULL, &obs, NULL), MHA_ERR_OBSERVER);
	ck_assert_int_eq(sn.calls, 2);
	seen_free(&sn);
}
END_TEST

/* the memory estimate: plausible, larger when stages are watched, refusing overflow */
START_TEST(test_memory_estimate)
{
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 1000, .n_kv = 1000, .d_q_in = 64, .d_k_in = 64, .d_v_in = 64,
		       .heads = 4, .d_k = 16, .d_v = 16 };
	const unsigned scores = MHA_STAGE_BIT(MHA_STAGE_SCORES) | MHA_STAGE_BIT(MHA_STAGE_SOFTMAX);
	const size_t fast = mha_memory(&d, NULL, 0, 0), exact = mha_memory(&d, NULL, scores, 0);

	/* Q, K, V and the concatenation at least; the fast path builds no (n_q, n_kv) matrix */
	ck_assert_uint_ge(fast, 4 * 1000 * 64 * sizeof(double));
	ck_assert_uint_lt(fast, 100 * 1000 * 64 * sizeof(double));
	ck_assert_uint_ge(exact, 2 * 1000 * 1000 * sizeof(double));
	ck_assert_uint_lt(mha_memory(&d, NULL, 0, 1), fast);
	d.n_q = d.n_kv = SIZE_MAX / 4;
	ck_assert_uint_eq(mha_memory(&d, NULL, scores, 0), SIZE_MAX);
	ck_assert_uint_eq(mha_memory(NULL, NULL, 0, 0), SIZE_MAX);
}
END_TEST

/* threads beyond the cap or the work: the estimate and the run use the same, few */
START_TEST(test_threads_capped)
{
	double x[12] = { 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 1 }, out[12];
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 3, .n_kv = 3, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
			     .heads = 2, .d_k = 2, .d_v = 2 };
	mha_config one = { .size = sizeof(mha_config), .threads = 1 }, many = { .size = sizeof(mha_config), .threads = 100000 };
	size_t peak;

	/* two heads of one query block: two tasks, two threads at most */
	ck_assert_uint_eq(mha_memory(&d, &many, 0, 0), mha_memory(&d, &(mha_config){ .size = sizeof(mha_config),
										     .threads = 2 }, 0, 0));
	ck_assert_uint_lt(mha_memory(&d, &many, 0, 0), 2 * mha_memory(&d, &one, 0, 0));
	ck_assert_uint_lt(mha_memory(&d, &many, 0, 1), 1 << 20);
	if (!track_works())
		return;
	track_start();
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL, &many, NULL, NULL), MHA_OK);
	peak = track_stop();
	ck_assert_uint_le(peak, mha_memory(&d, &many, 0, 0));
}
END_TEST

START_TEST(test_names)
{
	for (int s = MHA_OK; s <= MHA_ERR_VERSION; s++) {
		ck_assert_ptr_nonnull(mha_strerror((mha_status)s));
		ck_assert_int_gt((int)strlen(mha_strerror((mha_status)s)), 3);
		for (int t = MHA_OK; t < s; t++)
			ck_assert_str_ne(mha_strerror((mha_status)s), mha_strerror((mha_status)t));
	}
	ck_assert_str_eq(mha_strerror((mha_status)999), "unknown status");
	ck_assert_str_eq(mha_strerror(MHA_ERR_WINDOW),
			 "a window side is below -1 (-1: unbounded; 0 and up: that many keys)");
	ck_assert_str_eq(mha_strerror(MHA_ERR_SINK), "a sink logit is not a finite number");
	ck_assert_str_eq(mha_strerror(MHA_ERR_ALIBI), "an ALiBi slope is not a finite number");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_SOFTMAX), "softmax");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_Q_ROT), "q_rot");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_K_ROT), "k_rot");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_COUNT), "unknown");
	ck_assert_str_eq(mha_version(), MHA_VERSION_STRING);
	/* the number says the string's three parts */
	{
		char s[32];
		const unsigned v = mha_version_number();

		ck_assert_uint_eq(v, MHA_VERSION_NUMBER);
		snprintf(s, sizeof(s), "%u.%u.%u", v / 10000, v / 100 % 100, v % 100);
		ck_assert_str_eq(s, mha_version());
	}
}
END_TEST

/*
 * Versioned structs (mha.h, "Versions"): a struct whose size field is
 * larger than this header's (from a newer mha.h), not whole size_t's, or
 * none, is refused with MHA_ERR_VERSION by every function that takes it,
 * before anything is read past its size or written (the report keeps its
 * bytes); one of an older, smaller version is read as far as it goes, the
 * fields it lacks their defaults (test_struct_older); the same call with
 * the sizes right succeeds.
 */
/* a size from a newer header (longer), one no version has, or none */
static size_t wrong_size(size_t right, int k)
{
	return k == 0 ? right - 4 : k == 1 ? right + 8 : 0;
}

START_TEST(test_struct_sizes)
{
	const double x[4] = { 1, 2, 3, 4 }, dout[4] = { 1, 1, 1, 1 };
	const float xf[4] = { 1, 2, 3, 4 };
	double out[4], dx[4];
	float outf[4], dxf[4];
	mha_dims d = { .size = sizeof(mha_dims), .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2,
		       .d_v_in = 2, .heads = 1, .d_k = 2, .d_v = 2 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_inputs_f32 inf = { .size = sizeof(mha_inputs_f32), xf, xf, xf };
	mha_weights w = MHA_INIT(mha_weights);
	mha_weights_f32 wf = MHA_INIT(mha_weights_f32);
	mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT };
	mha_observer obs = MHA_INIT(mha_observer);
	mha_grad_observer gobs = MHA_INIT(mha_grad_observer);
	mha_report rep = MHA_INIT(mha_report), before;
	mha_grads g = { .size = sizeof(mha_grads), .dxq = dx };
	mha_grads_f32 gf = { .size = sizeof(mha_grads_f32), .dxq = dxf };

	/* right: as ever */
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_OK);
	ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep), MHA_OK);
	ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_OK);
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 2, &cfg, NULL), MHA_OK);
	ck_assert_uint_eq(mha_output_cols(&d, 0), 2);
	ck_assert_uint_ne(mha_memory(&d, &cfg, 0, 0), SIZE_MAX);
	ck_assert_uint_ne(mha_backward_memory(&d, &cfg, 0), SIZE_MAX);
	ck_assert(mha_scale_of(&d, &cfg) == 1 / sqrt(2.0));

	for (int k = 0; k < 3; k++) {
		/* each struct wrong in turn, the others right */
		d.size = wrong_size(sizeof(d), k);
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_uint_eq(mha_output_cols(&d, 0), 0);
		ck_assert_uint_eq(mha_memory(&d, &cfg, 0, 0), SIZE_MAX);
		ck_assert_uint_eq(mha_backward_memory(&d, &cfg, 0), SIZE_MAX);
		ck_assert(isnan(mha_scale_of(&d, &cfg)));
		ck_assert_int_eq(mha_causal_offset(&d, &cfg, 0), 0);
		d.size = sizeof(d);

		cfg.size = wrong_size(sizeof(cfg), k);
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 2, &cfg, NULL), MHA_ERR_VERSION);
		ck_assert_uint_eq(mha_memory(&d, &cfg, 0, 0), SIZE_MAX);
		ck_assert(isnan(mha_scale_of(&d, &cfg)));
		cfg.size = sizeof(cfg);

		in.size = wrong_size(sizeof(in), k);
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		in.size = sizeof(in);
		inf.size = wrong_size(sizeof(inf), k);
		ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		inf.size = sizeof(inf);
		w.size = wrong_size(sizeof(w), k);
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		w.size = sizeof(w);
		wf.size = wrong_size(sizeof(wf), k);
		ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		wf.size = sizeof(wf);
		obs.size = wrong_size(sizeof(obs), k);
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		obs.size = sizeof(obs);
		gobs.size = wrong_size(sizeof(gobs), k);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		gobs.size = sizeof(gobs);
		g.size = wrong_size(sizeof(g), k);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		g.size = sizeof(g);
		gf.size = wrong_size(sizeof(gf), k);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		gf.size = sizeof(gf);

		/* a report of a size no version has: refused, and not one byte of it written */
		memset(&rep, 0xA5, sizeof(rep));
		rep.size = wrong_size(sizeof(rep), k);
		before = rep;
		ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep),
				 MHA_ERR_VERSION);
		ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_ERR_VERSION);
		ck_assert_mem_eq(&rep, &before, sizeof(rep));
		rep = (mha_report)MHA_INIT(mha_report);
	}
	/* NULL is still MHA_ERR_NULL, and the sizes right again run as before */
	ck_assert_int_eq(mha_check(NULL, &cfg), MHA_ERR_NULL);
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 2, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	ck_assert_str_eq(mha_strerror(MHA_ERR_VERSION),
			 "a struct's size is not the library's: "
			 "the program was built against another version of mha.h");
}
END_TEST

/* An older, smaller version of each struct (its last field gone, as a
 * program built against an older mha.h passes it): read as far as it goes,
 * the fields it lacks their defaults; a report of it written only as far. */
START_TEST(test_struct_older)
{
	const double x[4] = { 1, 2, 3, 4 }, dout[4] = { 1, 1, 1, 1 };
	const float xf[4] = { 1, 2, 3, 4 };
	double out[4], want[4], dx[4];
	float outf[4], dxf[4];
	mha_dims d = { .size = sizeof(mha_dims), .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2,
		       .d_v_in = 2, .heads = 1, .d_k = 2, .d_v = 2 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_inputs_f32 inf = { .size = sizeof(mha_inputs_f32), xf, xf, xf };
	mha_weights w = MHA_INIT(mha_weights);
	mha_weights_f32 wf = MHA_INIT(mha_weights_f32);
	mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT };
	mha_observer obs = MHA_INIT(mha_observer);
	mha_grad_observer gobs = MHA_INIT(mha_grad_observer);
	mha_report rep = MHA_INIT(mha_report);
	mha_grads g = { .size = sizeof(mha_grads), .dxq = dx };
	mha_grads_f32 gf = { .size = sizeof(mha_grads_f32), .dxq = dxf };
	unsigned char tail[8];

	ck_assert_int_eq(mha_forward(want, &d, &in, &w, &cfg, &obs, &rep), MHA_OK);
#define OLDER(s) ((s).size = sizeof(s) - sizeof(size_t))
#define ALL_OK() do { \
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK); \
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_OK); \
	ck_assert_mem_eq(out, want, sizeof(out)); \
	ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, &wf, &cfg, &rep), MHA_OK); \
	ck_assert_int_eq(mha_backward(&g, dout, &d, &in, &w, &cfg, &gobs, &rep), MHA_OK); \
	ck_assert_int_eq(mha_backward_f32(&gf, NULL, &d, &inf, &wf, &cfg, &rep), MHA_OK); \
	ck_assert_uint_ne(mha_memory(&d, &cfg, 0, 0), SIZE_MAX); \
	ck_assert_uint_ne(mha_backward_memory(&d, &cfg, 0), SIZE_MAX); \
	ck_assert(mha_scale_of(&d, &cfg) == 1 / sqrt(2.0)); \
	ck_assert_uint_eq(mha_output_cols(&d, 0), 2); \
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 2, &cfg, NULL), MHA_OK); \
} while (0)
	/* dims without batch (one sequence), a config without the latent
	 * attention's last field, weights without W_KVB, observers and grads
	 * without their last fields: all their defaults here */
	OLDER(d);
	ALL_OK();
	d.size = sizeof(d);
	OLDER(cfg);
	ALL_OK();
	cfg.size = sizeof(cfg);
	OLDER(w);
	OLDER(wf);
	ALL_OK();
	w.size = sizeof(w);
	wf.size = sizeof(wf);
	OLDER(obs);
	OLDER(gobs);
	OLDER(g);
	OLDER(gf);
	ALL_OK();
	obs.size = sizeof(obs);
	gobs.size = sizeof(gobs);
	g.size = sizeof(g);
	gf.size = sizeof(gf);
	/* inputs without xv: the values' source is missing (NULL), not a version */
	OLDER(in);
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_ERR_NULL);
	in.size = sizeof(in);
	/* an older report: written as far as its size, not a byte past */
	memset(&rep, 0xA5, sizeof(rep));
	OLDER(rep);
	memcpy(tail, (unsigned char *)&rep + rep.size, sizeof(tail));
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, &rep), MHA_OK);
	ck_assert_mem_eq((unsigned char *)&rep + rep.size, tail, sizeof(tail));
	ck_assert_uint_eq(rep.size, sizeof(rep) - sizeof(size_t));
	ck_assert(rep.scale == 1 / sqrt(2.0));
	ck_assert_uint_eq(rep.blocked_rows, 0);
#undef ALL_OK
#undef OLDER
}
END_TEST

/* ---- what mha_check_fault says: the rule broken and where ------------- */

/* mha_check_fault on d and cfg: its status is mha_check's, and the fault */
static mha_fault fault_of(const mha_dims *d, const mha_config *cfg, mha_status want)
{
	mha_fault f = { .size = sizeof(f), .kind = (mha_fault_kind)99, .index = 77 };

	ck_assert_int_eq(mha_check_fault(d, cfg, &f), want);
	ck_assert_int_eq(mha_check(d, cfg), want);
	ck_assert_int_eq(mha_check_fault(d, cfg, NULL), want);
	return f;
}

START_TEST(test_check_fault)
{
	/* 2 sequences of 3 queries and 4 keys, 2 heads of width 4 */
	const mha_dims d = { .size = sizeof(mha_dims), .batch = 2, .n_q = 3, .n_kv = 4,
			     .d_q_in = 8, .d_k_in = 8, .d_v_in = 8, .heads = 2, .d_k = 4, .d_v = 4 };
	double bias[2 * 2 * 3 * 4] = { 0 }, sinks[2] = { 0, 0 }, slopes[2] = { 0.5, 0.25 };
	const double cs[3 * 2] = { 1, 1, 1, 1, 1, 1 }, sn[3 * 2] = { 0 };
	const ptrdiff_t qpos[3] = { 0, 1, 2 }, kpos[4] = { 0, 1, -2, 3 }, kfar[4] = { 0, 1, 2, 3 };
	const size_t lens[2] = { 4, 2 };
	mha_config cfg = { .size = sizeof(mha_config) };
	mha_fault f;

	f = fault_of(&d, &cfg, MHA_OK);
	ck_assert_int_eq(f.kind, MHA_FAULT_NONE);
	ck_assert_uint_eq(f.size, sizeof(f));
	/* the mask's entry, as the library lays the mask out: per head and per
	 * sequence, sequence 1's head 0, query 2, key 1 */
	bias[((1 * 2 + 0) * 3 + 2) * 4 + 1] = NAN;
	cfg.mask = (mha_mask){ .bias = bias, .per_head = 1, .per_batch = 1 };
	f = fault_of(&d, &cfg, MHA_ERR_MASK);
	ck_assert_int_eq(f.kind, MHA_FAULT_MASK_ENTRY);
	ck_assert_uint_eq(f.index, ((1 * 2 + 0) * 3 + 2) * 4 + 1);
	bias[((1 * 2 + 0) * 3 + 2) * 4 + 1] = -INFINITY; /* -inf blocks: fine */
	bias[5] = INFINITY;
	f = fault_of(&d, &cfg, MHA_ERR_MASK);
	ck_assert_uint_eq(f.index, 5);
	bias[5] = 0;
	f = fault_of(&d, &cfg, MHA_OK);
	/* a head's sink and slope */
	sinks[1] = NAN;
	cfg.sinks = sinks;
	f = fault_of(&d, &cfg, MHA_ERR_SINK);
	ck_assert_int_eq(f.kind, MHA_FAULT_SINK);
	ck_assert_uint_eq(f.index, 1);
	cfg.sinks = NULL;
	slopes[0] = INFINITY;
	cfg.alibi = (mha_alibi){ .on = 1, .slopes = slopes };
	f = fault_of(&d, &cfg, MHA_ERR_ALIBI);
	ck_assert_int_eq(f.kind, MHA_FAULT_ALIBI_SLOPE);
	ck_assert_uint_eq(f.index, 0);
	cfg.alibi.on = 0;
	/* a sequence's key length */
	cfg.kv_lens = (const size_t[2]){ 4, 5 };
	f = fault_of(&d, &cfg, MHA_ERR_KV_LEN);
	ck_assert_int_eq(f.kind, MHA_FAULT_KV_LEN);
	ck_assert_uint_eq(f.index, 1);
	cfg.kv_lens = NULL;
	/* the rotary settings: the rule each breaks */
	cfg.rope = (mha_rope){ .mode = (mha_rope_mode)7 };
	ck_assert_int_eq(fault_of(&d, &cfg, MHA_ERR_ROPE).kind, MHA_FAULT_ROPE_MODE);
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .theta = -1 };
	ck_assert_int_eq(fault_of(&d, &cfg, MHA_ERR_ROPE).kind, MHA_FAULT_ROPE_THETA);
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .dim = 6 };
	ck_assert_int_eq(fault_of(&d, &cfg, MHA_ERR_ROPE).kind, MHA_FAULT_ROPE_DIM_WIDE);
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .dim = 3 };
	ck_assert_int_eq(fault_of(&d, &cfg, MHA_ERR_ROPE).kind, MHA_FAULT_ROPE_DIM_ODD);
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .cos = cs, .rows = 3 };
	ck_assert_int_eq(fault_of(&d, &cfg, MHA_ERR_ROPE).kind, MHA_FAULT_ROPE_TABLES);
	/* positions given: the key at index 2 is below 0 */
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .q_pos = qpos, .k_pos = kpos };
	f = fault_of(&d, &cfg, MHA_ERR_ROPE);
	ck_assert_int_eq(f.kind, MHA_FAULT_ROPE_KEY_POSITION);
	ck_assert_uint_eq(f.index, 2);
	ck_assert_int_eq(f.position, -2);
	/* tables of 3 rows: key 3 is past them */
	cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .cos = cs, .sin = sn, .rows = 3, .dim = 4,
			       .k_pos = kfar };
	f = fault_of(&d, &cfg, MHA_ERR_ROPE);
	ck_assert_int_eq(f.kind, MHA_FAULT_ROPE_KEY_POSITION);
	ck_assert_uint_eq(f.index, 3);
	ck_assert_int_eq(f.position, 3);
	/* default positions, bottom-right causal: sequence 1's 2 keys put its
	 * queries at -1, 0, 1, and query 0 has no row */
	cfg.rope.k_pos = qpos; /* keys within the rows, so the queries are reached */
	cfg.rope.q_pos = NULL;
	ck_assert_int_eq(fault_of(&(mha_dims){ .size = sizeof(mha_dims), .batch = 2, .n_q = 3,
					       .n_kv = 3, .d_q_in = 8, .d_k_in = 8, .d_v_in = 8,
					       .heads = 2, .d_k = 4, .d_v = 4 }, &cfg, MHA_OK).kind,
			 MHA_FAULT_NONE);
	cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
	cfg.kv_lens = lens;
	cfg.rope.k_pos = NULL;
	cfg.rope.rows = 4;
	cfg.rope.cos = (const double[8]){ 1, 1, 1, 1, 1, 1, 1, 1 };
	cfg.rope.sin = (const double[8]){ 0 };
	f = fault_of(&d, &cfg, MHA_ERR_ROPE);
	ck_assert_int_eq(f.kind, MHA_FAULT_ROPE_QUERY_POSITION);
	ck_assert_uint_eq(f.sequence, 1);
	ck_assert_uint_eq(f.index, 0);
	ck_assert_int_eq(f.position, -1);
	ck_assert_int_eq(mha_causal_offset(&d, &cfg, 1), -1);
	/* a fault struct of a newer, larger version is refused, untouched; an
	 * older, smaller one is written as far as its size */
	{
		struct { mha_fault f; size_t more; } newer = { .f = { .size = sizeof(mha_fault) +
								     sizeof(size_t), .index = 42 } };
		mha_fault older = { .size = sizeof(mha_fault) - sizeof(size_t) };
		size_t last;

		ck_assert_int_eq(mha_check_fault(&d, &cfg, &newer.f), MHA_ERR_VERSION);
		ck_assert_uint_eq(newer.f.index, 42);
		memset((char *)&older + older.size, 0x5A, sizeof(size_t));
		memcpy(&last, (char *)&older + older.size, sizeof(last));
		ck_assert_int_eq(mha_check_fault(&d, &cfg, &older), MHA_ERR_ROPE);
		ck_assert_int_eq(older.kind, MHA_FAULT_ROPE_QUERY_POSITION);
		ck_assert(!memcmp((char *)&older + older.size, &last, sizeof(last)));
	}
}
END_TEST

/* ---- the CLI's number text (engine/util/number.c), against printf's --- */

static void by_printf(char *buf, size_t size, double v, int is_f32)
{
	for (int p = is_f32 ? 6 : 15; p <= (is_f32 ? 9 : 17); p++) {
		snprintf(buf, size, "%.*g", p, v);
		if (is_f32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
			return;
	}
}

/* random bit patterns, ordinary numbers, short decimals, edges: the same text as printf's way */
START_TEST(test_shortest_text)
{
	static const double edges[] = { 0.1, 0.3, 1.01, 1e-7, 5e-324, 2.2250738585072014e-308,
					1.7976931348623157e308, 1e22, 1e21, 1e16, 123456789012345678.0,
					0.5, 100, -0.0, 9007199254740993.0, 1e-5, 1e-4, 1e15, 1e17 };
	char got[64], want[64];

	rng_state = 12345;
	for (int i = 0; i < 300000 + (int)(sizeof(edges) / sizeof(edges[0])); i++) {
		double v;
		float f;

		if (i >= 300000) {
			v = edges[i - 300000];
		} else if (i % 3 == 0) {
			uint64_t bits;

			rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
			bits = rng_state;
			memcpy(&v, &bits, sizeof(v));
			if (!isfinite(v))
				continue;
		} else if (i % 3 == 1) {
			v = rnd() * 7;
		} else {
			v = floor(rnd() * 1e5) / 1000;
		}
		format_shortest(got, sizeof(got), v);
		by_printf(want, sizeof(want), v, 0);
		ck_assert_msg(!strcmp(got, want), "%.17g: '%s', printf's way '%s'", v, got, want);
		f = (float)v;
		if (isfinite(f)) {
			format_shortest_f32(got, sizeof(got), f);
			by_printf(want, sizeof(want), f, 1);
			ck_assert_msg(!strcmp(got, want), "float %.9g: '%s', printf's way '%s'", f, got, want);
		}
	}
}
END_TEST

void unit_add_errors(const struct unit_suite *u)
{
	tcase_add_test(u->err, test_errors);
	tcase_add_test(u->err, test_names);
	tcase_add_test(u->err, test_struct_sizes);
	tcase_add_test(u->err, test_struct_older);
	tcase_add_test(u->err, test_check_fault);
	tcase_add_test(u->err, test_memory_estimate);
	tcase_add_test(u->err, test_threads_capped);
	tcase_add_test(u->err, test_shortest_text);
}

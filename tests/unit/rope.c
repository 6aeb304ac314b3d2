/*
 * rope.c: rotary embeddings by hand, and mha_rope_apply; tests/unit/main.c
 * runs them.
 */
#include "unit.h"

/*
 * Rotary embeddings by hand: one head, d_k = 2, Q = K = [1, 0] in every
 * row.  Pair 0's angle is p·θ^0 = p, so row p turns into [cos p, sin p]
 * and the score of query i and key j is cos(i)cos(j) + sin(i)sin(j) =
 * cos(i − j): only the distance counts.  Bottom-right with 2 queries over
 * 4 keys: the queries sit at 2 and 3.
 */
START_TEST(test_rope_by_hand)
{
	static const double q[4] = { 1, 0, 1, 0 }, k[8] = { 1, 0, 1, 0, 1, 0, 1, 0 };
	static const double v[4] = { 1, 2, 3, 4 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 4, .d_q_in = 2, .d_k_in = 2, .d_v_in = 1,
			     .heads = 1, .d_k = 2, .d_v = 1 };
	mha_config cfg = { .size = sizeof(mha_config),
			   .scale_mode = MHA_SCALE_NONE, .causal = MHA_CAUSAL_BOTTOM_RIGHT,
			   .rope = { .mode = MHA_ROPE_HALF } };
	seen sn;
	mha_observer obs = watch_all(&sn);
	double out[2];

	for (int mode = MHA_ROPE_HALF; mode <= MHA_ROPE_INTERLEAVED; mode++) {
		cfg.rope.mode = (mha_rope_mode)mode;
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     q, k, v }, NULL, &cfg, &obs, NULL),
				 MHA_OK);
		for (int i = 0; i < 2; i++) {
			ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_ROT][0][2 * i], cos(i + 2), 1e-15);
			ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_ROT][0][2 * i + 1], sin(i + 2), 1e-15);
			for (int j = 0; j <= i + 2; j++)
				ck_assert_double_eq_tol(sn.m[MHA_STAGE_SCORES][1][i * 4 + j], cos(i + 2 - j),
							1e-15);
		}
		for (int j = 0; j < 4; j++)
			ck_assert_double_eq_tol(sn.m[MHA_STAGE_K_ROT][0][2 * j + 1], sin(j), 1e-15);
		/* the unturned Q and K are still handed over as they were */
		ck_assert(sn.m[MHA_STAGE_Q][0][1] == 0 && sn.m[MHA_STAGE_K][0][3] == 0);
		seen_free(&sn);
	}
}
END_TEST

/* mha_rope_apply with tables, and every setting mha_check refuses */
START_TEST(test_rope_apply_and_errors)
{
	/* two rows of one head of 6 features, R = 4: pairs (0, 2), (1, 3) half, (0, 1), (2, 3) interleaved */
	static const double x[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
	static const double cs[6] = { 0.5, 0.25, 1, 0, 2, -1 }, sn_[6] = { 1, 2, 0, 1, 3, 4 };
	static const ptrdiff_t pos[2] = { 2, 0 }, past[2] = { 3, 0 }, neg[2] = { 0, -1 };
	mha_rope rope = { .mode = MHA_ROPE_HALF, .dim = 4, .cos = cs, .sin = sn_, .rows = 3 };
	double out[12];
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 6, .d_k_in = 6, .d_v_in = 6,
			     .heads = 1, .d_k = 6, .d_v = 6 };
	mha_config cfg = { .size = sizeof(mha_config), .rope = rope };

	/* row 0 at position 2: c = [2, -1], s = [3, 4]; (1, 3) → (2 - 9, 3 + 6); (2, 4) → (-2 - 16, 8 - 4) */
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, with_rope(&rope), pos), MHA_OK);
	ck_assert(out[0] == -7 && out[2] == 9 && out[1] == -18 && out[3] == 4 && out[4] == 5 &&
		  out[5] == 6);
	/* row 1 at position 0: c = [0.5, 0.25], s = [1, 2]; (7, 9) → (3.5 - 9, 7 + 4.5) */
	ck_assert(out[6] == -5.5 && out[8] == 11.5 && out[10] == 11 && out[11] == 12);
	rope.mode = MHA_ROPE_INTERLEAVED;
	/* in place; row 0: (1, 2) → (2 - 6, 3 + 4); (3, 4) → (-3 - 16, 12 - 4) */
	memcpy(out, x, sizeof(out));
	ck_assert_int_eq(mha_rope_apply(out, out, 2, 1, 6, with_rope(&rope), pos), MHA_OK);
	ck_assert(out[0] == -4 && out[1] == 7 && out[2] == -19 && out[3] == 8);
	/* without positions, row r at r */
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, with_rope(&rope), NULL), MHA_OK);
	ck_assert(out[0] == 0.5 * 1 - 1 * 2 && out[7] == 7 * 0 + 8 * 1);
	/* theta: pair t of R turns by p·θ^(-2t/R) */
	rope = (mha_rope){ .mode = MHA_ROPE_HALF, .theta = 100 };
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 2, 3 * 0 + 2, with_rope(&rope), past), MHA_OK);
	ck_assert_double_eq_tol(out[0], 1 * cos(3.0) - 2 * sin(3.0), 1e-15);
	ck_assert_double_eq_tol(out[3], 3 * sin(3.0) + 4 * cos(3.0), 1e-15);
	rope.dim = 4;
	ck_assert_int_eq(mha_rope_apply(out, x, 1, 1, 6, with_rope(&rope), past), MHA_OK);
	ck_assert_double_eq_tol(out[1], 2 * cos(0.3) - 4 * sin(0.3), 1e-15);
	ck_assert_double_eq_tol(out[3], 2 * sin(0.3) + 4 * cos(0.3), 1e-15);

	/* refused: by mha_rope_apply and by mha_check */
	rope = (mha_rope){ .mode = MHA_ROPE_HALF, .dim = 4, .cos = cs, .sin = sn_, .rows = 3 };
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, with_rope(&rope), past), MHA_ERR_ROPE);
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, with_rope(&rope), neg), MHA_ERR_ROPE);
	ck_assert_int_eq(mha_rope_apply(NULL, x, 2, 1, 6, with_rope(&rope), NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_rope_apply(out, x, 0, 1, 6, with_rope(&rope), NULL), MHA_ERR_DIM);
	{
		const mha_rope bad[] = {
			{ .mode = (mha_rope_mode)3 }, { .mode = MHA_ROPE_HALF, .dim = 3 },
			{ .mode = MHA_ROPE_HALF, .dim = 8 }, { .mode = MHA_ROPE_HALF, .theta = -1 },
			{ .mode = MHA_ROPE_HALF, .theta = NAN }, { .mode = MHA_ROPE_HALF, .theta = INFINITY },
			{ .mode = MHA_ROPE_HALF, .cos = cs, .rows = 3 },
			{ .mode = MHA_ROPE_HALF, .dim = 4, .cos = cs, .sin = sn_, .rows = 0 },
			{ .mode = MHA_ROPE_HALF, .q_pos = neg },
			{ .mode = MHA_ROPE_HALF, .k_pos = neg },
			{ .mode = MHA_ROPE_HALF, .dim = 4, .cos = cs, .sin = sn_, .rows = 3, .k_pos = past },
		};
		float f[12] = { 0 }, fo[12];

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			cfg.rope = bad[i];
			ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_ROPE);
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
									     x, x, x }, NULL, &cfg, NULL,
						     NULL), MHA_ERR_ROPE);
			cfg.exact = 1;
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
									     x, x, x }, NULL, &cfg, NULL,
						     NULL), MHA_ERR_ROPE);
			cfg.exact = 0;
			ck_assert_int_eq(mha_forward_f32(fo, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										    f, f, f }, NULL, &cfg,
							 NULL), MHA_ERR_ROPE);
			ck_assert_uint_eq(mha_memory(&d, &cfg, 0, 0), SIZE_MAX);
		}
		/* a query before key 0 (a negative causal offset) has no table row */
		cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .cos = cs, .sin = sn_, .rows = 3, .dim = 4 };
		cfg.causal = MHA_CAUSAL_OFFSET;
		cfg.causal_offset = -1;
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_ROPE);
		cfg.causal_offset = 1;
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
		/* without tables it simply turns backwards */
		cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF };
		cfg.causal_offset = -5;
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
		/* no rope: the rest is not looked at */
		cfg.rope = (mha_rope){ .mode = MHA_ROPE_NONE, .dim = 3, .theta = -1 };
		ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
	}
	/* a turned entry past the largest double */
	{
		const double huge[2] = { DBL_MAX, DBL_MAX };
		const ptrdiff_t one[1] = { 1 };

		rope = (mha_rope){ .mode = MHA_ROPE_HALF };
		ck_assert_int_eq(mha_rope_apply(out, huge, 1, 1, 2, with_rope(&rope), one), MHA_ERR_RANGE);
	}
}
END_TEST

/*
 * Rope scaling by hand, θ = 100, R = 4: the default frequencies are f_0 = 1
 * and f_1 = 100^(-1/2) = 0.1.
 */
START_TEST(test_rope_scaling_by_hand)
{
	static const double shortf[2] = { 1, 2 }, longf[2] = { 4, 5 };
	static const double x[4] = { 1, 2, 3, 4 };
	static const ptrdiff_t at3[1] = { 3 };
	mha_rope r = { .mode = MHA_ROPE_HALF, .theta = 100, .dim = 4 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 1, .n_kv = 1, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
			     .heads = 1, .d_k = 4, .d_v = 4 };
	mha_config cfg = { .size = sizeof(mha_config) };
	double out[4];

	/* none: θ^(-2t/R) to the bit */
	ck_assert(mha_rope_frequency(&r, 4, 1) == pow(100, -0.5));
	ck_assert(mha_rope_attention_factor(&r) == 1);
	/* linear: f / factor */
	r.scaling = (mha_rope_scaling){ .type = MHA_ROPE_SCALING_LINEAR, .factor = 4 };
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 0.025, 1e-17);
	/* llama3, original 16, low 1, high 2: wavelengths 2π (< 16/2: kept) and
	 * 20π (> 16/1: / factor) */
	r.scaling = (mha_rope_scaling){ .type = MHA_ROPE_SCALING_LLAMA3, .factor = 8,
					.original_max = 16, .low_freq_factor = 1,
					.high_freq_factor = 2 };
	ck_assert(mha_rope_frequency(&r, 4, 0) == 1);
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 0.1 / 8, 1e-17);
	/* and original 80, high 4: 20π lies between 20 and 80, s = (80/(20π) − 1)/3 */
	r.scaling.original_max = 80;
	r.scaling.high_freq_factor = 4;
	{
		const double s = (80 / (20 * M_PI) - 1) / 3;

		ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), (1 - s) * 0.1 / 8 + s * 0.1,
					1e-16);
	}
	/* dynamic: past original 2 at seq_len 5, the base 100·(2·5/2 − 1)^(4/2) = 1600 */
	r.scaling = (mha_rope_scaling){ .type = MHA_ROPE_SCALING_DYNAMIC, .factor = 2,
					.original_max = 2, .seq_len = 5 };
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 1.0 / 40, 1e-16);
	r.scaling.seq_len = 2;
	ck_assert(mha_rope_frequency(&r, 4, 1) == pow(100, -0.5));
	/* longrope: short below original, long past it; A = √(1 + ln 4 / ln 2) = √3 */
	r.scaling = (mha_rope_scaling){ .type = MHA_ROPE_SCALING_LONGROPE, .factor = 4,
					.original_max = 2, .short_factor = shortf,
					.long_factor = longf, .seq_len = 2 };
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 0.1 / 2, 1e-16);
	r.scaling.seq_len = 3;
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 0.1 / 5, 1e-16);
	ck_assert_double_eq_tol(mha_rope_attention_factor(&r), sqrt(3), 1e-15);
	/* yarn, factor e (so A = 0.1·ln e + 1 = 1.1), original 2π·100: lo = 4·ln(100/32)/(2 ln 100)
	 * floors to 0, hi = 4·ln(100)/(2 ln 100) = 2 ceils to 2 → min(2, 3) = 2; r_1 = 1/2 */
	r.scaling = (mha_rope_scaling){ .type = MHA_ROPE_SCALING_YARN, .factor = M_E,
					.original_max = 2 * M_PI * 100 };
	ck_assert_double_eq_tol(mha_rope_attention_factor(&r), 1.1, 1e-15);
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 0), 1, 1e-15);
	ck_assert_double_eq_tol(mha_rope_frequency(&r, 4, 1), 0.1 / M_E * 0.5 + 0.1 * 0.5, 1e-16);
	/* the rotation uses them: pair 1 of position 3 at 3·g_1, cos and sin times A */
	{
		const double g = mha_rope_frequency(&r, 4, 1), a = 1.1;

		ck_assert_int_eq(mha_rope_apply(out, x, 1, 1, 4, with_rope(&r), at3), MHA_OK);
		ck_assert_double_eq_tol(out[1], a * (2 * cos(3 * g) - 4 * sin(3 * g)), 1e-14);
		ck_assert_double_eq_tol(out[3], a * (2 * sin(3 * g) + 4 * cos(3 * g)), 1e-14);
	}
	/* mscale over mscale_all_dim */
	r.scaling.mscale = 2;
	r.scaling.mscale_all_dim = 1;
	ck_assert_double_eq_tol(mha_rope_attention_factor(&r), 1.2 / 1.1, 1e-15);
	/* refused: values out of range, and with tables given */
	{
		static const double cs[2] = { 1, 1 }, sn_[2] = { 0, 0 };
		static const double bad_f[2] = { 1, 0 };
		const mha_rope_scaling bad[] = {
			{ .type = (mha_rope_scaling_type)6, .factor = 1 },
			{ .type = MHA_ROPE_SCALING_LINEAR, .factor = 0 },
			{ .type = MHA_ROPE_SCALING_LINEAR, .factor = NAN },
			{ .type = MHA_ROPE_SCALING_DYNAMIC, .factor = 2 },
			{ .type = MHA_ROPE_SCALING_LLAMA3, .factor = 8, .original_max = 8,
			  .low_freq_factor = 1, .high_freq_factor = 1 },
			{ .type = MHA_ROPE_SCALING_YARN, .factor = 2, .original_max = 8, .beta_fast = -1 },
			{ .type = MHA_ROPE_SCALING_LONGROPE, .original_max = 8, .short_factor = shortf },
			{ .type = MHA_ROPE_SCALING_LONGROPE, .original_max = 8, .short_factor = shortf,
			  .long_factor = bad_f },
		};
		mha_fault f = { .size = sizeof(f) };

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .scaling = bad[i] };
			ck_assert_int_eq(mha_check_fault(&d, &cfg, &f), MHA_ERR_ROPE);
			ck_assert_int_eq(f.kind, MHA_FAULT_ROPE_SCALING);
		}
		cfg.rope = (mha_rope){ .mode = MHA_ROPE_HALF, .dim = 2, .cos = cs, .sin = sn_,
				       .rows = 2,
				       .scaling = { .type = MHA_ROPE_SCALING_LINEAR, .factor = 2 } };
		ck_assert_int_eq(mha_check_fault(&d, &cfg, &f), MHA_ERR_ROPE);
		ck_assert_int_eq(f.kind, MHA_FAULT_ROPE_SCALING);
	}
}
END_TEST

void unit_add_rope(const struct unit_suite *u)
{
	tcase_add_test(u->hand, test_rope_by_hand);
	tcase_add_test(u->hand, test_rope_scaling_by_hand);
	tcase_add_test(u->hand, test_rope_apply_and_errors);
}

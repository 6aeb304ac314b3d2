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

void unit_add_rope(const struct unit_suite *u)
{
	tcase_add_test(u->hand, test_rope_by_hand);
	tcase_add_test(u->hand, test_rope_apply_and_errors);
}

/*
 * forward.c: mha_forward on values worked by hand: softmax, causal rules,
 * kv_len, sinks, ALiBi, masks; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- values worked by hand -------------------------------------------- */

/* The worked example's X and W^Q: X·W^Q's first row is published as 1.01 0.36 -0.74 -0.09. */
START_TEST(test_tutorial_first_row_of_q)
{
	static const double X[6 * 4] = {
		0.1, -0.2, 0.1, 0.2,   0.8, 0.8, -0.9, 0.5,   -0.6, 0.4, 0.5, -0.9,
		0.9, -0.7, 0.8, 0.7,   0.4, 0.3, 0.4, 0.4,    0.8, 0.2, 0.9, -0.2,
	};
	static const double WQ[4 * 4] = {
		3.4, -2.1, 0.8, 1.9,   -1.2, 0.5, 3.7, -0.8,
		2.9, 1.1, -3.4, 0.6,   0.7, 2.8, 1.3, -2.5,
	};
	static const double want[4] = { 1.01, 0.36, -0.74, -0.09 };
	/* worked out by hand for the second row: -0.5, -0.87, 7.31, -0.91 (published: 4.49, -0.23) */
	static const double want2[4] = { -0.5, -0.87, 7.31, -0.91 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 6, .n_kv = 6, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
		       .heads = 1, .d_k = 4, .d_v = 4 };
	mha_inputs in = { .size = sizeof(mha_inputs), X, X, X };
	mha_weights w = { .size = sizeof(mha_weights), .W_Q = WQ, .W_K = WQ, .W_V = WQ };
	double out[24];
	seen sn;
	mha_observer obs = watch_all(&sn);

	obs.wanted = MHA_STAGE_BIT(MHA_STAGE_Q);
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, NULL, &obs, NULL), MHA_OK);
	check_close("Q[0]", sn.m[MHA_STAGE_Q][0], want, 4);
	check_close("Q[1]", sn.m[MHA_STAGE_Q][0] + 4, want2, 4);
	ck_assert_int_eq(sn.calls, 1);
	seen_free(&sn);
}
END_TEST

/* An observer's 64-bit set of stages (0.8.0) is read before the older 32-bit
 * wanted; an observer of 0.7.0's size, which has no set, is read by wanted. */
START_TEST(test_stage_set)
{
	static const double X[3 * 2] = { 1, 0, 0, 1, 1, 1 };
	mha_dims d = { .size = sizeof(mha_dims), .n_q = 3, .n_kv = 3, .d_q_in = 2, .d_k_in = 2,
		       .d_v_in = 2, .heads = 1, .d_k = 2, .d_v = 2 };
	mha_inputs in = { .size = sizeof(mha_inputs), X, X, X };
	double out[6];
	seen sn;
	mha_observer obs = watch_all(&sn);

	/* the set wins over wanted */
	obs.wanted = MHA_STAGE_BIT(MHA_STAGE_Q);
	obs.stages = MHA_STAGE_SET(MHA_STAGE_SOFTMAX);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &obs, NULL), MHA_OK);
	ck_assert_int_eq(sn.calls, 1);
	ck_assert_ptr_null(sn.m[MHA_STAGE_Q][0]);
	ck_assert_ptr_nonnull(sn.m[MHA_STAGE_SOFTMAX][1]);
	seen_free(&sn);
	/* 0.7.0's observer, its size before stages: wanted alone */
	obs = watch_all(&sn);
	obs.size = offsetof(mha_observer, stages);
	obs.wanted = MHA_STAGE_BIT(MHA_STAGE_Q);
	obs.stages = MHA_STAGE_SET(MHA_STAGE_SOFTMAX); /* past its size: never read */
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &obs, NULL), MHA_OK);
	ck_assert_int_eq(sn.calls, 1);
	ck_assert_ptr_nonnull(sn.m[MHA_STAGE_Q][0]);
	seen_free(&sn);
	/* the memory of a set is the memory of the same stages as wanted */
	ck_assert_uint_eq(mha_memory_stages(&d, NULL, MHA_STAGE_SET(MHA_STAGE_Q) |
					    MHA_STAGE_SET(MHA_STAGE_SOFTMAX), 0),
			  mha_memory(&d, NULL, MHA_STAGE_BIT(MHA_STAGE_Q) |
				     MHA_STAGE_BIT(MHA_STAGE_SOFTMAX), 0));
	ck_assert_uint_eq(mha_backward_memory_stages(&d, NULL, ~0ull),
			  mha_backward_memory(&d, NULL, ~0u));
	ck_assert_uint_ne(mha_memory_stages(&d, NULL, MHA_STAGE_SET(MHA_STAGE_SOFTMAX), 0),
			  mha_memory_stages(&d, NULL, 0, 0)); /* the plain path's, not the fast one's */
}
END_TEST

/* The classroom example: Monica·Chandler = 0.5·0.5 + 0.05·0.1 + 0.05·0.2 + 0.3·0.1 = 0.295. */
START_TEST(test_classroom_dot_product)
{
	static const double X[2 * 7] = {
		0.5, 0.05, 0.05, 0.3, 0.0, 0.0, 0.1,
		0.5, 0.1, 0.2, 0.1, 0.4, 0.2, 0.0,
	};
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 2, .d_q_in = 7, .d_k_in = 7, .d_v_in = 7,
		       .heads = 1, .d_k = 7, .d_v = 7 };
	mha_inputs in = { .size = sizeof(mha_inputs), X, X, X };
	mha_config cfg = { .size = sizeof(mha_config), .scale_mode = MHA_SCALE_DMODEL };
	double out[14];
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_report rep = MHA_INIT(mha_report);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, &rep), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SCORES][1][1], 0.295, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SCORES][1][2], 0.295, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SCALED][1][1], 0.295 / sqrt(7.0), 1e-15);
	ck_assert_double_eq_tol(rep.scale, 1 / sqrt(7.0), 1e-16);
	/* no weights: Q, K and V are X itself */
	for (int i = 0; i < 14; i++)
		ck_assert(sn.m[MHA_STAGE_Q][0][i] == X[i] && sn.m[MHA_STAGE_V][0][i] == X[i]);
	seen_free(&sn);
}
END_TEST

/* scores 0 and ln 3 give weights 1/4 and 3/4; with values 4 and 8 the output is 7 */
START_TEST(test_softmax_by_hand)
{
	const double q[1] = { 1.0 }, k[2] = { 0.0, log(3.0) }, v[2] = { 4.0, 8.0 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 1, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), q, k, v };
	mha_config cfg = { .size = sizeof(mha_config), .scale_mode = MHA_SCALE_NONE };
	double out[1];
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTMAX][1][0], 0.25, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTMAX][1][1], 0.75, 1e-15);
	ck_assert_double_eq_tol(out[0], 7.0, 1e-14);
	/* without a softcap there is no softcapped stage */
	ck_assert_ptr_null(sn.m[MHA_STAGE_SOFTCAPPED][1]);
	seen_free(&sn);
}
END_TEST

/* scores of 1000 and 1001: exp() alone would overflow; the weights are 1/(1+e) and e/(1+e) */
START_TEST(test_softmax_large_scores)
{
	const double q[1] = { 1.0 }, k[2] = { 1000.0, 1001.0 }, v[2] = { 0.0, 1.0 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 1, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), q, k, v };
	mha_config cfg = { .size = sizeof(mha_config), .scale_mode = MHA_SCALE_NONE };
	double out[1];
	const double e = exp(1.0);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
	ck_assert_double_eq_tol(out[0], e / (1 + e), 1e-15);
}
END_TEST

/* causal masks: top-left, and bottom-right with 2 queries over 4 keys */
START_TEST(test_causal_by_hand)
{
	double x[4] = { 1, 2, 3, 4 }, out[4];
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 4, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT };
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	/* the first query sees only the first key: weight 1, output = x[0] */
	ck_assert(sn.m[MHA_STAGE_SOFTMAX][1][0] == 1.0);
	for (int j = 1; j < 4; j++)
		ck_assert(sn.m[MHA_STAGE_SOFTMAX][1][j] == 0.0);
	ck_assert(out[0] == 1.0);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			ck_assert(sn.m[MHA_STAGE_MASK][1][i * 4 + j] == (j > i ? -INFINITY : 0.0));
	seen_free(&sn);

	/* bottom-right: query 0 of 2 lines up with key 2 of 4 */
	d.n_q = 2;
	in.xq = x + 2;
	cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][2] == 0.0 && sn.m[MHA_STAGE_MASK][1][3] == -INFINITY);
	ck_assert(sn.m[MHA_STAGE_MASK][1][4 + 3] == 0.0);
	seen_free(&sn);

	/* top-left with the same shapes: query 0 sees key 0 only */
	cfg.causal = MHA_CAUSAL_TOP_LEFT;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][0] == 0.0 && sn.m[MHA_STAGE_MASK][1][1] == -INFINITY);
	ck_assert(out[0] == 1.0);
	seen_free(&sn);
}
END_TEST

/* kv_len pads out keys; a causal offset moves the diagonal, and bottom-right follows kv_len */
START_TEST(test_kv_len_and_offset)
{
	double x[4] = { 1, 2, 3, 4 }, out[4];
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config), .kv_len = 3 };
	mha_report rep = MHA_INIT(mha_report);
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 4; j++)
			ck_assert(sn.m[MHA_STAGE_MASK][1][i * 4 + j] == (j >= 3 ? -INFINITY : 0.0));
	seen_free(&sn);

	/* bottom-right against the 3 valid keys: query 0 sees keys 0..1, query 1 keys 0..2 */
	cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][1] == 0.0 && sn.m[MHA_STAGE_MASK][1][2] == -INFINITY);
	ck_assert(sn.m[MHA_STAGE_MASK][1][4 + 2] == 0.0 && sn.m[MHA_STAGE_MASK][1][4 + 3] == -INFINITY);
	seen_free(&sn);

	/* an explicit offset of -1: query 0 sees nothing (zeros), query 1 sees key 0 */
	cfg = (mha_config){ .size = sizeof(mha_config),
			    .causal = MHA_CAUSAL_OFFSET, .causal_offset = -1 };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_uint_eq(rep.blocked_rows, 1);
	ck_assert(out[0] == 0.0 && out[1] == 1.0);
	/* offset 2: query 0 sees keys 0..2 */
	cfg.causal_offset = 2;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][2] == 0.0 && sn.m[MHA_STAGE_MASK][1][3] == -INFINITY);
	seen_free(&sn);
}
END_TEST

/* the report says which path ran and the causal offset it used */
START_TEST(test_report_path_and_offset)
{
	double x[4] = { 1, 2, 3, 4 }, out[4];
	float xf[4] = { 1, 2, 3, 4 }, outf[4];
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_inputs_f32 inf = { .size = sizeof(mha_inputs_f32), xf, xf, xf };
	mha_config cfg = { .size = sizeof(mha_config) };
	mha_report rep = MHA_INIT(mha_report);
	seen sn, sw;
	mha_observer obs = watch_all(&sn), whole = watch_all(&sw);

	whole.wanted = MHA_STAGE_BIT(MHA_STAGE_Q) | MHA_STAGE_BIT(MHA_STAGE_CONCAT);

	/* nobody watching, or only whole-model stages: the fast path */
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	ck_assert_int_eq(rep.causal_offset, 0);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &whole, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	seen_free(&sw);
	/* a per-head stage watched, or exact: the plain path */
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 0);
	seen_free(&sn);
	cfg.exact = 1;
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 0);
	/* float32 has only the fast path */
	ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, NULL, &cfg, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);

	/* bottom-right with 2 queries over 4 keys is offset 2, over kv_len 3 offset 1 */
	cfg = (mha_config){ .size = sizeof(mha_config), .causal = MHA_CAUSAL_BOTTOM_RIGHT };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, 2);
	cfg.kv_len = 3;
	ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, NULL, &cfg, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, 1);
	cfg = (mha_config){ .size = sizeof(mha_config),
			    .causal = MHA_CAUSAL_OFFSET, .causal_offset = -1 };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, -1);
	cfg = (mha_config){ .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, 0);
}
END_TEST

/* a row whose every key is masked: zeros, reported, never NaN */
/*
 * Attention sinks by hand: queries 0, so every score is 0; keys [1, 3]
 * (head 0) and [2, 4] (head 1); sinks 0 and log 2.  Causal: row 0 sees
 * key 0 alone, weight 1/(1 + e^0) = 1/2 (head 0), 1/(1 + 2) (head 1);
 * row 1 sees both, 1/3 each (head 0), 1/4 each (head 1).
 */
START_TEST(test_sinks_by_hand)
{
	static const double xq[4] = { 0, 0, 0, 0 }, xkv[4] = { 1, 2, 3, 4 };
	static const double want[4] = { 0.5, 2.0 / 3, 4.0 / 3, 1.5 };
	static const unsigned char allow[4] = { 0, 0, 1, 1 };
	static const float fxq[4] = { 0, 0, 0, 0 }, fxkv[4] = { 1, 2, 3, 4 };
	const double sinks[2] = { 0, log(2.0) }, huge[2] = { 1e300, -1e300 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
			     .heads = 2, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { .size = sizeof(mha_inputs), xq, xkv, xkv };
	const mha_inputs_f32 fin = { .size = sizeof(mha_inputs_f32), fxq, fxkv, fxkv };
	mha_config cfg = { .size = sizeof(mha_config),
			   .scale_mode = MHA_SCALE_NONE, .causal = MHA_CAUSAL_TOP_LEFT,
			   .sinks = sinks };
	double out[4];
	float fout[4];
	mha_report rep = MHA_INIT(mha_report);

	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
		ck_assert_int_eq(rep.fast_path, !exact);
		for (int i = 0; i < 4; i++)
			ck_assert_double_eq_tol(out[i], want[i], 1e-15);
	}
	ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_OK);
	for (int i = 0; i < 4; i++)
		ck_assert_double_eq_tol(fout[i], want[i], 1e-6);

	/* a row whose keys are all masked: zeros, never NaN, sink or not */
	cfg.mask.allow = allow;
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
		ck_assert_uint_eq(rep.blocked_rows, 2);
		ck_assert(out[0] == 0 && out[1] == 0);
		for (int i = 2; i < 4; i++)
			ck_assert_double_eq_tol(out[i], want[i], 1e-15);
	}
	ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_OK);
	ck_assert(fout[0] == 0 && fout[1] == 0);
	cfg.mask.allow = NULL;

	/* a sink far above every score takes all the mass (outputs 0); far
	 * below, none (plain softmax); neither overflows, not even in float32 */
	cfg.sinks = huge;
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
		ck_assert(out[0] == 0 && out[2] == 0);
		ck_assert_double_eq_tol(out[1], 2, 1e-15);
		ck_assert_double_eq_tol(out[3], 3, 1e-15);
	}
	ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_OK);
	ck_assert(fout[0] == 0 && fout[2] == 0 && fout[1] == 2 && fout[3] == 3);
}
END_TEST

/*
 * ALiBi by hand.  Press et al.'s slopes: 2^-1 … 2^-8 for 8 heads; for 3,
 * those of 2 heads (2^-4, 2^-8) and then the first of 4 heads' (2^-2); for
 * 6, those of 4 (2^-2, 2^-4, 2^-6, 2^-8) and the 1st and 3rd of 8 heads'
 * (2^-1, 2^-3); for 12, 2^-1 … 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
 */
START_TEST(test_alibi_slopes)
{
	double s[12];

	ck_assert_int_eq(mha_alibi_slopes(s, 8), MHA_OK);
	for (int h = 0; h < 8; h++)
		ck_assert(s[h] == ldexp(1, -(h + 1)));
	ck_assert_int_eq(mha_alibi_slopes(s, 1), MHA_OK);
	ck_assert(s[0] == ldexp(1, -8));
	ck_assert_int_eq(mha_alibi_slopes(s, 2), MHA_OK);
	ck_assert(s[0] == ldexp(1, -4) && s[1] == ldexp(1, -8));
	ck_assert_int_eq(mha_alibi_slopes(s, 3), MHA_OK);
	ck_assert(s[0] == ldexp(1, -4) && s[1] == ldexp(1, -8) && s[2] == ldexp(1, -2));
	ck_assert_int_eq(mha_alibi_slopes(s, 6), MHA_OK);
	ck_assert(s[0] == ldexp(1, -2) && s[1] == ldexp(1, -4) && s[2] == ldexp(1, -6) &&
		  s[3] == ldexp(1, -8) && s[4] == ldexp(1, -1) && s[5] == ldexp(1, -3));
	ck_assert_int_eq(mha_alibi_slopes(s, 12), MHA_OK);
	for (int h = 0; h < 8; h++)
		ck_assert(s[h] == ldexp(1, -(h + 1)));
	for (int h = 8; h < 12; h++)
		ck_assert_double_eq_tol(s[h], sqrt(0.5) * ldexp(1, -(h - 8)), 1e-16);
	ck_assert_int_eq(mha_alibi_slopes(s, 0), MHA_ERR_HEADS);
	ck_assert_int_eq(mha_alibi_slopes(NULL, 4), MHA_ERR_NULL);
}
END_TEST

/*
 * ALiBi by hand: queries 0, so every score is 0 and the mask is all there
 * is.  One head, slope ln 2, keys at 0 and 1 with values 1 and 4.  Not
 * causal: query 0 (p = 0) adds [0, ln 2], query 1 (p = 1) [-ln 2, 0]:
 * weights 1/3, 2/3 in both rows, output 1/3 + 8/3 = 3.  Causal: query 0
 * sees key 0 alone (output 1); query 1 as before.  A causal offset of 1
 * (p = i + 1) adds [-ln 2, 0] and [-2 ln 2, -ln 2]: the same weights.
 */
START_TEST(test_alibi_by_hand)
{
	static const double xq[2] = { 0, 0 }, xk[2] = { 0, 0 }, xv[2] = { 1, 4 };
	static const float fxq[2] = { 0, 0 }, fxk[2] = { 0, 0 }, fxv[2] = { 1, 4 };
	const double ln2 = log(2.0), slope[1] = { ln2 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { .size = sizeof(mha_inputs), xq, xk, xv };
	const mha_inputs_f32 fin = { .size = sizeof(mha_inputs_f32), fxq, fxk, fxv };
	mha_config cfg = { .size = sizeof(mha_config), .alibi = { 1, slope } };
	double out[2];
	float fout[2];
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][0] == 0 && sn.m[MHA_STAGE_MASK][1][1] == ln2);
	ck_assert(sn.m[MHA_STAGE_MASK][1][2] == -ln2 && sn.m[MHA_STAGE_MASK][1][3] == 0);
	ck_assert(sn.m[MHA_STAGE_MASKED][1][1] == ln2);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTMAX][1][0], 1.0 / 3, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTMAX][1][3], 2.0 / 3, 1e-15);
	ck_assert_double_eq_tol(out[0], 3, 1e-15);
	ck_assert_double_eq_tol(out[1], 3, 1e-15);
	seen_free(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
	ck_assert_double_eq_tol(out[0], 3, 1e-15);
	ck_assert_double_eq_tol(out[1], 3, 1e-15);
	ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_OK);
	ck_assert_double_eq_tol(fout[0], 3, 1e-6);
	ck_assert_double_eq_tol(fout[1], 3, 1e-6);

	cfg.causal = MHA_CAUSAL_TOP_LEFT;
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
		ck_assert(out[0] == 1);
		ck_assert_double_eq_tol(out[1], 3, 1e-15);
	}
	cfg.causal = MHA_CAUSAL_OFFSET;
	cfg.causal_offset = 1;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][0] == -ln2 && sn.m[MHA_STAGE_MASK][1][1] == 0);
	ck_assert(sn.m[MHA_STAGE_MASK][1][2] == -2 * ln2 && sn.m[MHA_STAGE_MASK][1][3] == -ln2);
	ck_assert_double_eq_tol(out[0], 3, 1e-15);
	ck_assert_double_eq_tol(out[1], 3, 1e-15);
	seen_free(&sn);

	/*
	 * slope·(j - p) past the largest double is an overflow where the key
	 * is seen (even at -inf: not a blocked key), on both paths and types;
	 * where the causal rule hides it, nothing
	 */
	{
		static const double big[1] = { 1e308 }, neg[1] = { -1e308 };
		static const unsigned char allow[4] = { 1, 0, 1, 1 };

		cfg = (mha_config){ .size = sizeof(mha_config), .alibi = { 1, big } };
		/* query 0, key 1: 1e308·1 is finite; with 2 keys nothing overflows */
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
		ck_assert(out[0] == 4 && out[1] == 4);
		cfg.alibi.slopes = neg;
		for (int exact = 0; exact < 2; exact++) {
			cfg.exact = exact;
			ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
			ck_assert(out[0] == 1 && out[1] == 1);
		}
		ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_ERR_RANGE);
		/* float32 holds -1e308 in a float: an overflow; the allow mask hides
		 * query 0's key 1, but query 1's key 0 still overflows */
		cfg.mask.allow = allow;
		ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_ERR_RANGE);
		/* the causal rule hides query 0's key 1; query 1 sees key 0 at +1e308: in
		 * double fine (all the weight), in float32 an overflow */
		cfg.mask.allow = NULL;
		cfg.causal = MHA_CAUSAL_TOP_LEFT;
		for (int exact = 0; exact < 2; exact++) {
			cfg.exact = exact;
			ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
			ck_assert(out[0] == 1 && out[1] == 1);
		}
		ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_ERR_RANGE);
		/* a causal offset of -1 puts query 1 at p = 0 and hides everything from
		 * query 0: 1e308 never matters, in either type */
		cfg.causal = MHA_CAUSAL_OFFSET;
		cfg.causal_offset = -1;
		cfg.alibi.slopes = big;
		ck_assert_int_eq(mha_forward_f32(fout, &d, &fin, NULL, &cfg, NULL), MHA_OK);
		ck_assert(fout[0] == 0 && fout[1] == 1);
	}
}
END_TEST

/*
 * A value not finite anywhere in a large input (no weights: Q = K = V = X)
 * is an error on both element types, wherever it sits against the blocks
 * of 1024 that the finiteness checks walk (first and last of a block, the
 * tail): NaN, +inf and -inf; the same input all finite runs
 */
START_TEST(test_not_finite_in_blocks)
{
	enum { N = 40, D = 64, ALL = N * D };
	static const size_t at[] = { 0, 1, 1023, 1024, 2047, 2048, 2300, ALL - 1 };
	const double bad[] = { NAN, INFINITY, -INFINITY };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = N, .n_kv = N, .d_q_in = D, .d_k_in = D, .d_v_in = D,
			     .heads = 2, .d_k = D / 2, .d_v = D / 2 };
	const mha_config cfg = { .size = sizeof(mha_config), .threads = 1 };
	double *x = malloc(ALL * sizeof(*x)), *out = malloc(ALL * sizeof(*out));
	float *fx = malloc(ALL * sizeof(*fx)), *fout = malloc(ALL * sizeof(*fout));

	ck_assert(x && out && fx && fout);
	for (size_t i = 0; i < ALL; i++)
		fx[i] = (float)(x[i] = (double)(i % 7) / 7 - 0.5);
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL, &cfg, NULL, NULL),
			 MHA_OK);
	ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								      fx, fx, fx }, NULL, &cfg,
					 NULL),
			 MHA_OK);
	for (size_t p = 0; p < sizeof(at) / sizeof(at[0]); p++)
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
			const double keep = x[at[p]];
			const float fkeep = fx[at[p]];

			x[at[p]] = bad[b];
			fx[at[p]] = (float)bad[b];
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
									     x, x, x }, NULL, &cfg,
						     NULL, NULL),
					 MHA_ERR_RANGE);
			ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										      fx, fx, fx },
							 NULL, &cfg, NULL),
					 MHA_ERR_RANGE);
			x[at[p]] = keep;
			fx[at[p]] = fkeep;
		}
	free(x);
	free(out);
	free(fx);
	free(fout);
}
END_TEST

/* ALiBi past the largest double: 1e308·(0 - 2) where the key is seen */
START_TEST(test_alibi_overflow)
{
	static const double x[3] = { 0, 0, 0 }, v[3] = { 1, 2, 3 }, big[1] = { 1e308 };
	static const float fx[3] = { 0, 0, 0 }, fv[3] = { 1, 2, 3 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 3, .n_kv = 3, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { .size = sizeof(mha_inputs), x, x, v };
	mha_config cfg = { .size = sizeof(mha_config),
			   .causal = MHA_CAUSAL_TOP_LEFT, .alibi = { 1, big } };
	double out[3];
	float fout[3];

	/* query 2, key 0: -2e308 is -inf, yet the key is seen: an error, not a mask */
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_ERR_RANGE);
	}
	ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								      fx, fx, fv }, NULL, &cfg,
					 NULL), MHA_ERR_RANGE);
	/* a window of one key back hides key 0 from query 2: fine */
	cfg.window = (mha_window){ 1, 1, 0 };
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_OK);
		ck_assert(out[0] == 1 && out[1] == 2 && out[2] == 3);
	}
}
END_TEST

START_TEST(test_fully_masked_row)
{
	double x[3 * 2] = { 0.1, 0.2, 0.3, 0.4, 0.5, 0.6 }, out[6];
	const unsigned char allow[9] = { 1, 1, 1,  0, 0, 0,  1, 0, 1 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 3, .n_kv = 3, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
		       .heads = 1, .d_k = 2, .d_v = 2 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config), .mask = { .allow = allow } };
	mha_report rep = MHA_INIT(mha_report);
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, &rep), MHA_OK);
	ck_assert_uint_eq(rep.blocked_rows, 1);
	ck_assert_int_eq(rep.first_blocked_head, 0);
	ck_assert_uint_eq(rep.first_blocked_row, 1);
	for (int j = 0; j < 3; j++)
		ck_assert(sn.m[MHA_STAGE_SOFTMAX][1][3 + j] == 0.0);
	ck_assert(out[2] == 0.0 && out[3] == 0.0);
	ck_assert(sn.m[MHA_STAGE_SOFTMAX][1][7] == 0.0);
	for (int i = 0; i < 6; i++)
		ck_assert(isfinite(out[i]));
	seen_free(&sn);

	/* bottom-right causal with more queries than keys blocks the first rows */
	d.n_q = 3;
	d.n_kv = 2;
	cfg = (mha_config){ .size = sizeof(mha_config), .causal = MHA_CAUSAL_BOTTOM_RIGHT };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_uint_eq(rep.blocked_rows, 1);
	ck_assert(out[0] == 0.0 && out[1] == 0.0);
}
END_TEST

START_TEST(test_softcap_and_scale_modes)
{
	const double q[1] = { 10.0 }, k[1] = { 1.0 }, v[1] = { 1.0 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 1, .n_kv = 1, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), q, k, v };
	mha_config cfg = { .size = sizeof(mha_config),
			   .scale_mode = MHA_SCALE_NONE, .softcap = 5.0 };
	double out[1];
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_dims big = { .size = sizeof(mha_dims),
			 .n_q = 3, .n_kv = 9, .d_q_in = 16, .d_k_in = 16, .d_v_in = 16,
			 .heads = 4, .d_k = 4, .d_v = 4 };

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTCAPPED][1][0], 5.0 * tanh(2.0), 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_MASKED][1][0], 5.0 * tanh(2.0), 1e-15);
	seen_free(&sn);

	cfg = (mha_config){ .size = sizeof(mha_config) };
	ck_assert_double_eq(mha_scale_of(&big, &cfg), 0.5);
	cfg.scale_mode = MHA_SCALE_DMODEL;
	ck_assert_double_eq(mha_scale_of(&big, &cfg), 0.25);
	cfg.scale_mode = MHA_SCALE_SEQLEN;
	ck_assert_double_eq_tol(mha_scale_of(&big, &cfg), 1.0 / 3.0, 1e-16);
	cfg.scale_mode = MHA_SCALE_NONE;
	ck_assert_double_eq(mha_scale_of(&big, &cfg), 1.0);
	cfg.scale_mode = MHA_SCALE_VALUE;
	cfg.scale = -0.125;
	ck_assert_double_eq(mha_scale_of(&big, &cfg), -0.125);
	ck_assert_double_eq(mha_scale_of(&big, NULL), 0.5);
}
END_TEST

/* grouped-query: with 4 query heads over 2 kv heads, heads 0,1 use block 0 and 2,3 block 1 */
START_TEST(test_grouped_query_mapping)
{
	const size_t nq = 2, nkv = 3;
	double *q = rnd_matrix(nq * 8), *kv = rnd_matrix(nkv * 4), out[2 * 8];
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = nq, .n_kv = nkv, .d_q_in = 8, .d_k_in = 4, .d_v_in = 4,
		       .heads = 4, .kv_heads = 2, .d_k = 2, .d_v = 2 };
	mha_inputs in = { .size = sizeof(mha_inputs), q, kv, kv };
	seen sn;
	mha_observer obs = watch_all(&sn);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &obs, NULL), MHA_OK);
	for (int h = 0; h < 4; h++) {
		const int g = h / 2;

		for (size_t j = 0; j < nkv; j++)
			for (int t = 0; t < 2; t++)
				ck_assert(sn.m[MHA_STAGE_HEAD_K][h + 1][j * 2 + t] == kv[j * 4 + g * 2 + t]);
	}
	/* multi-query: one kv head serves all */
	seen_free(&sn);
	d.kv_heads = 1;
	d.d_k_in = d.d_v_in = 2;
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &obs, NULL), MHA_OK);
	for (int h = 1; h < 4; h++)
		ck_assert(!memcmp(sn.m[MHA_STAGE_HEAD_K][h + 1], sn.m[MHA_STAGE_HEAD_K][1],
				  nkv * 2 * sizeof(double)));
	seen_free(&sn);
	free(q);
	free(kv);
}
END_TEST

/* W_O = I and b_O = 0 gives the concatenation back; a bias shifts every row */
START_TEST(test_output_projection)
{
	double x[2 * 4] = { 0.3, -0.1, 0.7, 0.2, -0.5, 0.9, 0.1, 0.4 }, I[16] = { 0 }, b[4] = { 1, 2, 3, 4 };
	double a[8], c[8];
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 2, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
		       .heads = 2, .d_k = 2, .d_v = 2, .d_out = 4 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_weights w = { .size = sizeof(mha_weights), .W_O = I };

	for (int i = 0; i < 4; i++)
		I[i * 5] = 1.0;
	ck_assert_int_eq(mha_forward(a, &d, &in, NULL, NULL, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward(c, &d, &in, &w, NULL, NULL, NULL), MHA_OK);
	ck_assert(!memcmp(a, c, sizeof(a)));
	w.b_O = b;
	ck_assert_int_eq(mha_forward(c, &d, &in, &w, NULL, NULL, NULL), MHA_OK);
	for (int i = 0; i < 8; i++)
		ck_assert_double_eq_tol(c[i], a[i] + b[i % 4], 1e-15);
	ck_assert_uint_eq(mha_output_cols(&d, 1), 4);
	ck_assert_uint_eq(mha_output_cols(&d, 0), 4);
}
END_TEST

/* boolean and additive parts of one mask, one matrix per head */
START_TEST(test_per_head_mask)
{
	double x[2 * 2] = { 1, 2, 3, 4 }, out[4];
	const unsigned char allow[2 * 2 * 2] = { 1, 0, 1, 1,   1, 1, 0, 1 };
	const double bias[2 * 2 * 2] = { 0.5, 0, -1, 2,   0, -INFINITY, 0, 0.25 };
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
		       .heads = 2, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config),
			   .mask = { .allow = allow, .bias = bias, .per_head = 1 } };
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_report rep = MHA_INIT(mha_report);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, &rep), MHA_OK);
	ck_assert(sn.m[MHA_STAGE_MASK][1][0] == 0.5 && sn.m[MHA_STAGE_MASK][1][1] == -INFINITY);
	ck_assert(sn.m[MHA_STAGE_MASK][1][2] == -1 && sn.m[MHA_STAGE_MASK][1][3] == 2);
	ck_assert(sn.m[MHA_STAGE_MASK][2][1] == -INFINITY && sn.m[MHA_STAGE_MASK][2][2] == -INFINITY);
	ck_assert(sn.m[MHA_STAGE_MASK][2][3] == 0.25);
	/* head 2, row 1 sees only key 0: weight 1 */
	ck_assert(sn.m[MHA_STAGE_SOFTMAX][2][0] == 1.0);
	ck_assert_uint_eq(rep.blocked_rows, 0);
	seen_free(&sn);
}
END_TEST

void unit_add_forward(const struct unit_suite *u)
{
	tcase_add_test(u->hand, test_tutorial_first_row_of_q);
	tcase_add_test(u->hand, test_stage_set);
	tcase_add_test(u->hand, test_classroom_dot_product);
	tcase_add_test(u->hand, test_softmax_by_hand);
	tcase_add_test(u->hand, test_softmax_large_scores);
	tcase_add_test(u->hand, test_causal_by_hand);
	tcase_add_test(u->hand, test_kv_len_and_offset);
	tcase_add_test(u->hand, test_report_path_and_offset);
	tcase_add_test(u->hand, test_fully_masked_row);
	tcase_add_test(u->hand, test_sinks_by_hand);
	tcase_add_test(u->hand, test_alibi_slopes);
	tcase_add_test(u->hand, test_alibi_by_hand);
	tcase_add_test(u->hand, test_alibi_overflow);
	tcase_add_test(u->hand, test_not_finite_in_blocks);
	tcase_add_test(u->hand, test_softcap_and_scale_modes);
	tcase_add_test(u->hand, test_grouped_query_mapping);
	tcase_add_test(u->hand, test_output_projection);
	tcase_add_test(u->hand, test_per_head_mask);
}

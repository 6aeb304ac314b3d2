/*
 * test_lib.c: Check unit tests for libmha.
 *
 * Three kinds: values worked by hand (from the tutorials and from small
 * cases whose softmax is exact), every stage of many random cases against
 * the plain reference in ref.c to 1e-12, and every error status.  A failed
 * comparison prints the largest difference and where it is.
 */
#include "ref.h"
#include "../cli/write.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-12

/* ---- helpers ----------------------------------------------------------- */

/* Every stage an observer saw: [stage][head + 1] (index 0: whole model). */
typedef struct seen {
	size_t heads;
	double *m[MHA_STAGE_COUNT][17];
	size_t rows[MHA_STAGE_COUNT][17], cols[MHA_STAGE_COUNT][17];
	int calls;
	int stop_at; /* stop when calls reaches this (0: never) */
} seen;

static int record(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	seen *sn = ctx;
	const size_t slot = (size_t)(head + 1);

	ck_assert_int_lt(head + 1, 17);
	ck_assert_ptr_null(sn->m[s][slot]); /* each stage once per head */
	sn->m[s][slot] = malloc(rows * cols * sizeof(double));
	ck_assert_ptr_nonnull(sn->m[s][slot]);
	memcpy(sn->m[s][slot], m, rows * cols * sizeof(double));
	sn->rows[s][slot] = rows;
	sn->cols[s][slot] = cols;
	sn->calls++;
	return sn->stop_at && sn->calls >= sn->stop_at;
}

static void seen_free(seen *sn)
{
	for (int s = 0; s < MHA_STAGE_COUNT; s++)
		for (int h = 0; h < 17; h++)
			free(sn->m[s][h]);
	memset(sn, 0, sizeof(*sn));
}

static mha_observer watch_all(seen *sn)
{
	memset(sn, 0, sizeof(*sn));
	return (mha_observer){ .fn = record, .ctx = sn, .wanted = ~0u };
}

/*
 * Compare n values: each within RTOL of the expected value, relative to
 * that value, with an absolute floor of 1e-3·RTOL·max|want| for entries
 * near zero (a dot product's cancellation); -inf must be -inf.
 */
static void check_close(const char *what, const double *got, const double *want, size_t n)
{
	double maxabs = 0, worst = 0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		if (isfinite(want[i]) && fabs(want[i]) > maxabs)
			maxabs = fabs(want[i]);
	for (size_t i = 0; i < n; i++) {
		double err;

		if (isinf(want[i]) || isinf(got[i])) {
			ck_assert_msg(got[i] == want[i], "%s[%zu]: got %.17g, want %.17g", what, i,
				      got[i], want[i]);
			continue;
		}
		ck_assert_msg(!isnan(got[i]), "%s[%zu] is NaN", what, i);
		err = fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-3 * maxabs + 1e-300);
		if (err > worst) {
			worst = err;
			at = i;
		}
	}
	ck_assert_msg(worst <= RTOL, "%s: max relative difference %.3g at [%zu]: got %.17g, want %.17g",
		      what, worst, at, got[at], want[at]);
}

/*
 * Norm-wise: every difference within RTOL of the largest expected value.
 * For two computations that round differently (the fast and the exact
 * path), where an output that cancels to near zero keeps the absolute
 * error of the terms it came from.
 */
static void check_close_norm(const char *what, const double *got, const double *want, size_t n)
{
	double maxabs = 0, worst = 0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		maxabs = fmax(maxabs, fabs(want[i]));
	for (size_t i = 0; i < n; i++) {
		const double err = fabs(got[i] - want[i]) / maxabs;

		ck_assert_msg(isfinite(got[i]), "%s[%zu] is %g", what, i, got[i]);
		if (err > worst) {
			worst = err;
			at = i;
		}
	}
	ck_assert_msg(worst <= RTOL, "%s: max difference %.3g of the largest value at [%zu]: got "
		      "%.17g, want %.17g", what, worst, at, got[at], want[at]);
}

/* a small deterministic generator, uniform in [-1, 1) */
static uint64_t rng_state;

static double rnd(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(rng_state >> 11) / (double)(1ULL << 52) - 1.0;
}

static double *rnd_matrix(size_t n)
{
	double *m = malloc((n ? n : 1) * sizeof(double));

	for (size_t i = 0; i < n; i++)
		m[i] = rnd();
	return m;
}

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
	mha_dims d = { .n_q = 6, .n_kv = 6, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
		       .heads = 1, .d_k = 4, .d_v = 4 };
	mha_inputs in = { X, X, X };
	mha_weights w = { .W_Q = WQ, .W_K = WQ, .W_V = WQ };
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

/* The classroom example: Monica·Chandler = 0.5·0.5 + 0.05·0.1 + 0.05·0.2 + 0.3·0.1 = 0.295. */
START_TEST(test_classroom_dot_product)
{
	static const double X[2 * 7] = {
		0.5, 0.05, 0.05, 0.3, 0.0, 0.0, 0.1,
		0.5, 0.1, 0.2, 0.1, 0.4, 0.2, 0.0,
	};
	mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 7, .d_k_in = 7, .d_v_in = 7,
		       .heads = 1, .d_k = 7, .d_v = 7 };
	mha_inputs in = { X, X, X };
	mha_config cfg = { .scale_mode = MHA_SCALE_DMODEL };
	double out[14];
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_report rep;

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
	mha_dims d = { .n_q = 1, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { q, k, v };
	mha_config cfg = { .scale_mode = MHA_SCALE_NONE };
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
	mha_dims d = { .n_q = 1, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { q, k, v };
	mha_config cfg = { .scale_mode = MHA_SCALE_NONE };
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
	mha_dims d = { .n_q = 4, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { x, x, x };
	mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT };
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
	mha_dims d = { .n_q = 2, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { x, x, x };
	mha_config cfg = { .kv_len = 3 };
	mha_report rep;
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
	cfg = (mha_config){ .causal = MHA_CAUSAL_OFFSET, .causal_offset = -1 };
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

/* a row whose every key is masked: zeros, reported, never NaN */
START_TEST(test_fully_masked_row)
{
	double x[3 * 2] = { 0.1, 0.2, 0.3, 0.4, 0.5, 0.6 }, out[6];
	const unsigned char allow[9] = { 1, 1, 1,  0, 0, 0,  1, 0, 1 };
	mha_dims d = { .n_q = 3, .n_kv = 3, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
		       .heads = 1, .d_k = 2, .d_v = 2 };
	mha_inputs in = { x, x, x };
	mha_config cfg = { .mask = { .allow = allow } };
	mha_report rep;
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
	cfg = (mha_config){ .causal = MHA_CAUSAL_BOTTOM_RIGHT };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_uint_eq(rep.blocked_rows, 1);
	ck_assert(out[0] == 0.0 && out[1] == 0.0);
}
END_TEST

START_TEST(test_softcap_and_scale_modes)
{
	const double q[1] = { 10.0 }, k[1] = { 1.0 }, v[1] = { 1.0 };
	mha_dims d = { .n_q = 1, .n_kv = 1, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { q, k, v };
	mha_config cfg = { .scale_mode = MHA_SCALE_NONE, .softcap = 5.0 };
	double out[1];
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_dims big = { .n_q = 3, .n_kv = 9, .d_q_in = 16, .d_k_in = 16, .d_v_in = 16,
			 .heads = 4, .d_k = 4, .d_v = 4 };

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SOFTCAPPED][1][0], 5.0 * tanh(2.0), 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_MASKED][1][0], 5.0 * tanh(2.0), 1e-15);
	seen_free(&sn);

	cfg = (mha_config){ 0 };
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
	mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = 8, .d_k_in = 4, .d_v_in = 4,
		       .heads = 4, .kv_heads = 2, .d_k = 2, .d_v = 2 };
	mha_inputs in = { q, kv, kv };
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
	mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
		       .heads = 2, .d_k = 2, .d_v = 2, .d_out = 4 };
	mha_inputs in = { x, x, x };
	mha_weights w = { .W_O = I };

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
	mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
		       .heads = 2, .d_k = 1, .d_v = 1 };
	mha_inputs in = { x, x, x };
	mha_config cfg = { .mask = { .allow = allow, .bias = bias, .per_head = 1 } };
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_report rep;

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

/* ---- random cases against the reference -------------------------------- */

struct random_case {
	mha_dims d;
	mha_config cfg;
	int weights, biases, wo, cross, direct;
	double *xq, *xk, *xv, *W[4], *b[4], *bias;
	unsigned char *allow;
};

static void make_case(struct random_case *c, unsigned seed)
{
	static const size_t heads_kv[][2] = { { 1, 1 }, { 2, 2 }, { 2, 1 }, { 3, 3 }, { 4, 2 }, { 4, 1 }, { 6, 3 } };
	const size_t *hk;
	mha_dims *d = &c->d;
	size_t n_mask;

	memset(c, 0, sizeof(*c));
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
	/* larger scores sometimes: peaked softmax rows.  (Much larger would test
	 * the conditioning of exp(), not the code: an error e in a score is a
	 * relative error e in its weight.) */
	if (seed % 8 == 5)
		for (size_t i = 0; i < d->n_q * d->d_q_in; i++)
			c->xq[i] *= 8;
}

static void free_case(struct random_case *c)
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
}

START_TEST(test_against_reference)
{
	struct random_case c;
	mha_weights w;
	mha_inputs in;
	ref_result r;
	seen sn;
	mha_observer obs;
	mha_report rep;
	double *out, *fast;
	char what[64];

	make_case(&c, (unsigned)_i);
	w = (mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	in = (mha_inputs){ c.xq, c.xk, c.xv };
	out = malloc(c.d.n_q * mha_output_cols(&c.d, c.wo) * sizeof(double));
	fast = malloc(c.d.n_q * mha_output_cols(&c.d, c.wo) * sizeof(double));
	obs = watch_all(&sn);
	ck_assert_int_eq(mha_forward(out, &c.d, &in, &w, &c.cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(ref_forward(&r, &c.d, &in, &w, &c.cfg), 0);

	check_close("Q", sn.m[MHA_STAGE_Q][0], r.Q, r.n_q * r.H * r.dk);
	check_close("K", sn.m[MHA_STAGE_K][0], r.K, r.n_kv * r.G * r.dk);
	check_close("V", sn.m[MHA_STAGE_V][0], r.V, r.n_kv * r.G * r.dv);
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
	mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
	mha_inputs in = { x, x, x };
	mha_weights w;
	mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT };
	ref_result r;

	rng_state = 42;
	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(dm * dm);
	w = (mha_weights){ .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
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
	static const char *const kernels[] = { "base", "avx2", "avx512" };
	const size_t nq = 300, nkv = 613, dm = 24, H = 4, G = 2;
	double *xq = rnd_matrix(nq * dm), *xkv = rnd_matrix(nkv * dm), *W[4], *b[4];
	double *exact = malloc(nq * dm * sizeof(double)), *fast = malloc(nq * dm * sizeof(double));
	double *f32back = malloc(nq * dm * sizeof(double)), *bias = rnd_matrix(nq * nkv);
	float *fx = malloc(nq * dm * sizeof(float)), *fkv = malloc(nkv * dm * sizeof(float));
	float *fW[4], *fb[4], *fout = malloc(nq * dm * sizeof(float));
	mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .kv_heads = G, .d_k = 6, .d_v = 6, .d_out = dm };
	const size_t wsize[4] = { dm * H * 6, dm * G * 6, dm * G * 6, H * 6 * dm };
	const size_t bsize[4] = { H * 6, G * 6, G * 6, dm };
	mha_inputs in = { xq, xkv, xkv };
	mha_weights w;
	mha_weights_f32 fw;
	mha_report rep;

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
	w = (mha_weights){ W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] };
	fw = (mha_weights_f32){ fW[0], fW[1], fW[2], fW[3], fb[0], fb[1], fb[2], fb[3] };
	const char *kernel_was = getenv("MHA_KERNEL");
	char *saved = kernel_was ? strdup(kernel_was) : NULL;

	for (int causal = 0; causal < 3; causal++) {
		mha_config cfg = { .causal = causal == 1 ? MHA_CAUSAL_BOTTOM_RIGHT :
				   causal == 2 ? MHA_CAUSAL_OFFSET : MHA_CAUSAL_NONE,
				   .causal_offset = 40, .kv_len = causal == 2 ? 500 : 0,
				   .mask = { .bias = causal == 1 ? bias : NULL } };
		char what[96];

		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(exact, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
		cfg.exact = 0;
		for (size_t k = 0; k < sizeof(kernels) / sizeof(kernels[0]); k++) {
			double *one = malloc(nq * dm * sizeof(double));

			setenv("MHA_KERNEL", kernels[k], 1);
			cfg.threads = 1;
			ck_assert_int_eq(mha_forward(one, &d, &in, &w, &cfg, NULL, &rep), MHA_OK);
			cfg.threads = 2;
			ck_assert_int_eq(mha_forward(fast, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
			ck_assert_msg(!memcmp(one, fast, nq * dm * sizeof(double)),
				      "%s kernels: 1 and 2 threads differ", kernels[k]);
			snprintf(what, sizeof(what), "fast (%s, %s) against exact", kernels[k], mha_kernel());
			check_close_norm(what, fast, exact, nq * dm);
			ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fkv, fkv }, &fw,
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
					      kernels[k], worst);
			}
			free(one);
		}
		/* as it was: the tests after this one may run in this process */
		if (saved)
			setenv("MHA_KERNEL", saved, 1);
		else
			unsetenv("MHA_KERNEL");
	}
	free(saved);
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

/* ---- errors ------------------------------------------------------------ */

START_TEST(test_errors)
{
	double x[4] = { 1, 2, 3, 4 }, out[4], big[2] = { 1e200, 1e200 };
	mha_dims ok = { .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
			.heads = 1, .d_k = 2, .d_v = 2 };
	mha_dims d;
	mha_inputs in = { x, x, x };
	mha_config cfg = { 0 };
	const double nan_bias[4] = { 0, NAN, 0, 0 }, inf_bias[4] = { 0, 0, INFINITY, 0 };
	seen sn;
	mha_observer obs;

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
	cfg = (mha_config){ .softcap = -1 };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SOFTCAP);
	cfg = (mha_config){ .mask = { .bias = nan_bias } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_MASK);
	cfg = (mha_config){ .mask = { .bias = inf_bias } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_MASK);
	/* 1e200·1e200 overflows: an error, not infinities or NaN in the output */
	d = ok;
	d.d_q_in = d.d_k_in = d.d_v_in = 1;
	d.d_k = d.d_v = 1;
	in = (mha_inputs){ big, big, big };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, NULL, NULL), MHA_ERR_RANGE);
	cfg = (mha_config){ .kv_len = 3 };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_KV_LEN);
	/* the observer can stop the run */
	in = (mha_inputs){ x, x, x };
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
	mha_dims d = { .n_q = 1000, .n_kv = 1000, .d_q_in = 64, .d_k_in = 64, .d_v_in = 64,
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

START_TEST(test_names)
{
	for (int s = MHA_OK; s <= MHA_ERR_KV_LEN; s++) {
		ck_assert_ptr_nonnull(mha_strerror((mha_status)s));
		ck_assert_int_gt((int)strlen(mha_strerror((mha_status)s)), 3);
		for (int t = MHA_OK; t < s; t++)
			ck_assert_str_ne(mha_strerror((mha_status)s), mha_strerror((mha_status)t));
	}
	ck_assert_str_eq(mha_strerror((mha_status)999), "unknown status");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_SOFTMAX), "softmax");
	ck_assert_str_eq(mha_stage_name(MHA_STAGE_COUNT), "unknown");
	ck_assert_str_eq(mha_version(), MHA_VERSION_STRING);
}
END_TEST

/* ---- the CLI's number text (cli/shortest.c), against printf's ---------- */

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

static Suite *mha_suite(void)
{
	Suite *s = suite_create("mha");
	TCase *hand = tcase_create("by hand"), *ref = tcase_create("reference"),
	      *err = tcase_create("errors");

	tcase_add_test(hand, test_tutorial_first_row_of_q);
	tcase_add_test(hand, test_classroom_dot_product);
	tcase_add_test(hand, test_softmax_by_hand);
	tcase_add_test(hand, test_softmax_large_scores);
	tcase_add_test(hand, test_causal_by_hand);
	tcase_add_test(hand, test_kv_len_and_offset);
	tcase_add_test(hand, test_fully_masked_row);
	tcase_add_test(hand, test_softcap_and_scale_modes);
	tcase_add_test(hand, test_grouped_query_mapping);
	tcase_add_test(hand, test_output_projection);
	tcase_add_test(hand, test_per_head_mask);
	tcase_add_loop_test(ref, test_against_reference, 0, 300);
	tcase_add_test(ref, test_large_against_reference);
	tcase_add_test(ref, test_fast_path_blocks);
	tcase_set_timeout(ref, 60);
	tcase_add_test(err, test_errors);
	tcase_add_test(err, test_names);
	tcase_add_test(err, test_memory_estimate);
	tcase_add_test(err, test_shortest_text);
	suite_add_tcase(s, hand);
	suite_add_tcase(s, ref);
	suite_add_tcase(s, err);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mha_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

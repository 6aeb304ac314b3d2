/*
 * test_lib.c: Check unit tests for libmha.
 *
 * Three kinds: values worked by hand (from the tutorials and from small
 * cases whose softmax is exact), every stage of many random cases against
 * the plain reference in ref.c to 1e-12, and every error status.  A failed
 * comparison prints the largest difference and where it is.
 */
/* sched_getaffinity: the CPUs the default thread count is checked against */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ref.h"
#include "../lib/kernel.h" /* the GEMM itself (libmha.a has it) */
#include "../cli/base/number.h"

#include <check.h>
#include <errno.h>
#include <sched.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <float.h>
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

/* an observer that stops the run at its first stage */
static int ignore_stop(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 1;
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

/* the kernel variants the tests run, each by MHA_KERNEL (the widest the CPU runs when it lacks one) */
static const char *const kernel_names[] = { "base", "avx2", "avx512" };

/* an environment variable's value to put back later (NULL: unset), and putting it back */
static char *env_save(const char *name)
{
	const char *v = getenv(name);

	return v ? strdup(v) : NULL;
}

static void env_restore(const char *name, const char *saved)
{
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
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

/* the report says which path ran and the causal offset it used */
START_TEST(test_report_path_and_offset)
{
	double x[4] = { 1, 2, 3, 4 }, out[4];
	float xf[4] = { 1, 2, 3, 4 }, outf[4];
	mha_dims d = { .n_q = 2, .n_kv = 4, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { x, x, x };
	mha_inputs_f32 inf = { xf, xf, xf };
	mha_config cfg = { 0 };
	mha_report rep;
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
	cfg = (mha_config){ .causal = MHA_CAUSAL_BOTTOM_RIGHT };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, 2);
	cfg.kv_len = 3;
	ck_assert_int_eq(mha_forward_f32(outf, &d, &inf, NULL, &cfg, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, 1);
	cfg = (mha_config){ .causal = MHA_CAUSAL_OFFSET, .causal_offset = -1 };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.causal_offset, -1);
	cfg = (mha_config){ .causal = MHA_CAUSAL_TOP_LEFT };
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
	const mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2,
			     .heads = 2, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { xq, xkv, xkv };
	const mha_inputs_f32 fin = { fxq, fxkv, fxkv };
	mha_config cfg = { .scale_mode = MHA_SCALE_NONE, .causal = MHA_CAUSAL_TOP_LEFT,
			   .sinks = sinks };
	double out[4];
	float fout[4];
	mha_report rep;

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
	const mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { xq, xk, xv };
	const mha_inputs_f32 fin = { fxq, fxk, fxv };
	mha_config cfg = { .alibi = { 1, slope } };
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

		cfg = (mha_config){ .alibi = { 1, big } };
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
	const mha_dims d = { .n_q = N, .n_kv = N, .d_q_in = D, .d_k_in = D, .d_v_in = D,
			     .heads = 2, .d_k = D / 2, .d_v = D / 2 };
	const mha_config cfg = { .threads = 1 };
	double *x = malloc(ALL * sizeof(*x)), *out = malloc(ALL * sizeof(*out));
	float *fx = malloc(ALL * sizeof(*fx)), *fout = malloc(ALL * sizeof(*fout));

	ck_assert(x && out && fx && fout);
	for (size_t i = 0; i < ALL; i++)
		fx[i] = (float)(x[i] = (double)(i % 7) / 7 - 0.5);
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL, NULL),
			 MHA_OK);
	ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fx, fx }, NULL, &cfg,
					 NULL),
			 MHA_OK);
	for (size_t p = 0; p < sizeof(at) / sizeof(at[0]); p++)
		for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
			const double keep = x[at[p]];
			const float fkeep = fx[at[p]];

			x[at[p]] = bad[b];
			fx[at[p]] = (float)bad[b];
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg,
						     NULL, NULL),
					 MHA_ERR_RANGE);
			ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fx, fx },
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
	const mha_dims d = { .n_q = 3, .n_kv = 3, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	const mha_inputs in = { x, x, v };
	mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT, .alibi = { 1, big } };
	double out[3];
	float fout[3];

	/* query 2, key 0: -2e308 is -inf, yet the key is seen: an error, not a mask */
	for (int exact = 0; exact < 2; exact++) {
		cfg.exact = exact;
		ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL), MHA_ERR_RANGE);
	}
	ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fx, fv }, NULL, &cfg,
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
	const mha_dims d = { .n_q = 2, .n_kv = 4, .d_q_in = 2, .d_k_in = 2, .d_v_in = 1,
			     .heads = 1, .d_k = 2, .d_v = 1 };
	mha_config cfg = { .scale_mode = MHA_SCALE_NONE, .causal = MHA_CAUSAL_BOTTOM_RIGHT,
			   .rope = { .mode = MHA_ROPE_HALF } };
	seen sn;
	mha_observer obs = watch_all(&sn);
	double out[2];

	for (int mode = MHA_ROPE_HALF; mode <= MHA_ROPE_INTERLEAVED; mode++) {
		cfg.rope.mode = (mha_rope_mode)mode;
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ q, k, v }, NULL, &cfg, &obs, NULL),
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
	const mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 6, .d_k_in = 6, .d_v_in = 6,
			     .heads = 1, .d_k = 6, .d_v = 6 };
	mha_config cfg = { .rope = rope };

	/* row 0 at position 2: c = [2, -1], s = [3, 4]; (1, 3) → (2 - 9, 3 + 6); (2, 4) → (-2 - 16, 8 - 4) */
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, &rope, pos), MHA_OK);
	ck_assert(out[0] == -7 && out[2] == 9 && out[1] == -18 && out[3] == 4 && out[4] == 5 &&
		  out[5] == 6);
	/* row 1 at position 0: c = [0.5, 0.25], s = [1, 2]; (7, 9) → (3.5 - 9, 7 + 4.5) */
	ck_assert(out[6] == -5.5 && out[8] == 11.5 && out[10] == 11 && out[11] == 12);
	rope.mode = MHA_ROPE_INTERLEAVED;
	/* in place; row 0: (1, 2) → (2 - 6, 3 + 4); (3, 4) → (-3 - 16, 12 - 4) */
	memcpy(out, x, sizeof(out));
	ck_assert_int_eq(mha_rope_apply(out, out, 2, 1, 6, &rope, pos), MHA_OK);
	ck_assert(out[0] == -4 && out[1] == 7 && out[2] == -19 && out[3] == 8);
	/* without positions, row r at r */
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, &rope, NULL), MHA_OK);
	ck_assert(out[0] == 0.5 * 1 - 1 * 2 && out[7] == 7 * 0 + 8 * 1);
	/* theta: pair t of R turns by p·θ^(-2t/R) */
	rope = (mha_rope){ .mode = MHA_ROPE_HALF, .theta = 100 };
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 2, 3 * 0 + 2, &rope, past), MHA_OK);
	ck_assert_double_eq_tol(out[0], 1 * cos(3.0) - 2 * sin(3.0), 1e-15);
	ck_assert_double_eq_tol(out[3], 3 * sin(3.0) + 4 * cos(3.0), 1e-15);
	rope.dim = 4;
	ck_assert_int_eq(mha_rope_apply(out, x, 1, 1, 6, &rope, past), MHA_OK);
	ck_assert_double_eq_tol(out[1], 2 * cos(0.3) - 4 * sin(0.3), 1e-15);
	ck_assert_double_eq_tol(out[3], 2 * sin(0.3) + 4 * cos(0.3), 1e-15);

	/* refused: by mha_rope_apply and by mha_check */
	rope = (mha_rope){ .mode = MHA_ROPE_HALF, .dim = 4, .cos = cs, .sin = sn_, .rows = 3 };
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, &rope, past), MHA_ERR_ROPE);
	ck_assert_int_eq(mha_rope_apply(out, x, 2, 1, 6, &rope, neg), MHA_ERR_ROPE);
	ck_assert_int_eq(mha_rope_apply(NULL, x, 2, 1, 6, &rope, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_rope_apply(out, x, 0, 1, 6, &rope, NULL), MHA_ERR_DIM);
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
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL,
						     NULL), MHA_ERR_ROPE);
			cfg.exact = 1;
			ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL,
						     NULL), MHA_ERR_ROPE);
			cfg.exact = 0;
			ck_assert_int_eq(mha_forward_f32(fo, &d, &(mha_inputs_f32){ f, f, f }, NULL, &cfg,
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
		ck_assert_int_eq(mha_rope_apply(out, huge, 1, 1, 2, &rope, one), MHA_ERR_RANGE);
	}
}
END_TEST

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
	double sinks[8]; /* (H) when cfg.sinks points here */
	double slopes[8]; /* (H) when cfg.alibi.slopes points here */
	ptrdiff_t q_pos[16], k_pos[16]; /* rope positions when cfg.rope's point here */
	double *rope_cos, *rope_sin;    /* (ROPE_ROWS, R/2) rope tables, or NULL */
};

#define ROPE_ROWS 24

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
	free(c->rope_cos);
	free(c->rope_sin);
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
	if (c.cfg.rope.mode) {
		snprintf(what, sizeof(what), "case %d q_rot", _i);
		check_close(what, sn.m[MHA_STAGE_Q_ROT][0], r.q_rot, r.n_q * r.H * r.dk);
		snprintf(what, sizeof(what), "case %d k_rot", _i);
		check_close(what, sn.m[MHA_STAGE_K_ROT][0], r.k_rot, r.n_kv * r.G * r.dk);
	} else {
		ck_assert_ptr_null(sn.m[MHA_STAGE_Q_ROT][0]);
		ck_assert_ptr_null(sn.m[MHA_STAGE_K_ROT][0]);
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
		mha_config cfg = { .causal = cm == 1 ? MHA_CAUSAL_BOTTOM_RIGHT :
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

/* ---- the heads in groups (fast.c's streamed path) ---------------------- */

/* MHA_STREAM_HEADS as a test sets it: NULL unsets */
static char *stream_was;

static void stream_knob(const char *v)
{
	if (v)
		setenv("MHA_STREAM_HEADS", v, 1);
	else
		unsetenv("MHA_STREAM_HEADS");
}

static void stream_save(void)
{
	const char *was = getenv("MHA_STREAM_HEADS");

	stream_was = was ? strdup(was) : NULL;
}

static void stream_restore(void)
{
	stream_knob(stream_was);
	free(stream_was);
	stream_was = NULL;
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
	mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = din, .d_k_in = dkin, .d_v_in = dvin,
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
	mha_config cfg = { 0 };
	mha_report rw, rg;

	rng_state = 1500 + (uint64_t)v;
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
		cfg.causal_offset = 30; cfg.rope.mode = MHA_ROPE_HALF; cfg.rope.q_pos = qpos; break;
	case 4: cfg.rope.mode = MHA_ROPE_INTERLEAVED; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
		cfg.mask = (mha_mask){ .bias = bias, .per_head = 1 }; cfg.sinks = sinks; break;
	case 5: cfg.mask = (mha_mask){ .allow = allow, .per_batch = 1 }; cfg.kv_lens = kv_lens;
		cfg.scale = 0.3; cfg.scale_mode = MHA_SCALE_VALUE; break;
	case 6: cfg.window = (mha_window){ 1, -1, 10 }; cfg.alibi.on = 1; cfg.softcap = 2; break;
	case 7: cfg.causal = MHA_CAUSAL_TOP_LEFT; break;
	case 8: break;
	case 9: cfg.rope.mode = MHA_ROPE_HALF; cfg.causal = MHA_CAUSAL_TOP_LEFT; break;
	default: cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.kv_lens = kv_lens; break;
	}
	stream_save();
	for (int f32 = 0; f32 < 2; f32++) {
		const mha_weights w = noweights ? (mha_weights){ 0 } : biasonly ?
			(mha_weights){ .b_Q = b[0], .b_K = b[1], .b_V = b[2] } :
			(mha_weights){ W[0], W[1], W[2], d_out ? W[3] : NULL, b[0], b[1], b[2],
				       d_out ? b[3] : NULL };
		const mha_weights_f32 fw = noweights ? (mha_weights_f32){ 0 } : biasonly ?
			(mha_weights_f32){ .b_Q = fb[0], .b_K = fb[1], .b_V = fb[2] } :
			(mha_weights_f32){ fW[0], fW[1], fW[2], d_out ? fW[3] : NULL, fb[0], fb[1],
					   fb[2], d_out ? fb[3] : NULL };
		const mha_inputs in = { xq, xk, xv };
		const mha_inputs_f32 fin = { fx[0], fx[1], fx[2] };
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
				memset(&rg, 0, sizeof(rg));
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
			const mha_observer obs = { .fn = concat_record, .ctx = &cs,
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
	const mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .d_k = 2, .d_v = 2 };
	double *x = rnd_matrix(n * dm), *W = rnd_matrix(dm * dm), *Wv = calloc(dm * dm, sizeof(double));
	double *out = malloc(n * dm * sizeof(double)), *want = malloc(n * dm * sizeof(double));
	static const char *const knobs[3] = { "0", "1", "3" };
	const mha_weights w = { .W_Q = W, .W_K = W, .W_V = Wv };

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
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, &w,
					     &(mha_config){ .threads = 2 }, NULL, NULL), MHA_OK);
		if (k == 0)
			memcpy(want, out, n * dm * sizeof(double));
		else
			ck_assert(!memcmp(want, out, n * dm * sizeof(double)));
	}
	/* 3e308: a true overflow in head 2's V, an error with either path */
	Wv[2 * dm + 5] = 1;
	for (int k = 0; k < 3; k++) {
		stream_knob(knobs[k]);
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, &w,
					     &(mha_config){ .threads = 2 }, NULL, NULL), MHA_ERR_RANGE);
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
	mha_dims d = { .n_q = 131072, .n_kv = 131072, .d_q_in = 512, .d_k_in = 512,
		       .d_v_in = 512, .heads = 8, .d_k = 64, .d_v = 64, .d_out = 512 };
	const mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT, .threads = 2 };
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

/* ---- batches: B sequences at once against each alone -------------------- */

/* what an observer of a batch saw: each sequence's output, and the order */
struct batch_seen {
	size_t B, n_q, cols, current, told;
	double *out;  /* (B, n_q, cols) from the output stage */
	int order_ok; /* the sequences came in order, each told before its stages */
	int heads;    /* per-head stages seen */
};

static int batch_sequence(void *ctx, size_t b)
{
	struct batch_seen *bs = ctx;

	if (b != bs->told % bs->B)
		bs->order_ok = 0;
	bs->current = b;
	bs->told++;
	return 0;
}

static int batch_record(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	struct batch_seen *bs = ctx;

	if (head >= 0)
		bs->heads++;
	if (s == MHA_STAGE_OUTPUT) {
		ck_assert_uint_eq(rows, bs->n_q);
		ck_assert_uint_eq(cols, bs->cols);
		memcpy(bs->out + bs->current * rows * cols, m, rows * cols * sizeof(double));
	}
	return 0;
}

/* B copies' worth of n values: the case's own first, then fresh random ones */
static double *batch_of(const double *first, size_t n, size_t B)
{
	double *m = malloc(B * n * sizeof(double));

	memcpy(m, first, n * sizeof(double));
	for (size_t i = n; i < B * n; i++)
		m[i] = rnd();
	return m;
}

/*
 * A random case (make_case) as a batch of 2 to 4 sequences: each with its
 * own inputs, sometimes its own key length (kv_lens) and its own mask
 * (per_batch).  The plain path watched and the fast path (1 and 2 threads,
 * the same bits), and float32, against the reference run on each sequence
 * alone; the fast path also gives the very bits of B separate runs.
 */
START_TEST(test_batch_against_reference)
{
	struct random_case c;
	const size_t B = 2 + (size_t)_i % 3;
	mha_weights w;
	mha_config cfg;
	mha_dims d;
	size_t kv_lens[4], n_mask, oc, nout;
	double *xq, *xk, *xv, *bias = NULL, *plain, *fast, *two, *alone;
	unsigned char *allow = NULL;
	struct batch_seen bs;
	mha_observer obs;
	mha_report rep;
	char what[96];

	make_case(&c, (unsigned)_i);
	d = c.d;
	d.batch = B;
	cfg = c.cfg;
	w = (mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	oc = mha_output_cols(&d, c.wo);
	nout = d.n_q * oc;
	xq = batch_of(c.xq, d.n_q * d.d_q_in, B);
	xk = c.xk == c.xq ? xq : batch_of(c.xk, d.n_kv * d.d_k_in, B);
	xv = c.xv == c.xk ? xk : batch_of(c.xv, d.n_kv * d.d_v_in, B);
	/* a length per sequence in some cases (0: all keys), bottom-right following it */
	if (_i % 3 == 0) {
		for (size_t b = 0; b < B; b++)
			kv_lens[b] = (size_t)((rnd() + 1) / 2 * (double)(d.n_kv + 1)) % (d.n_kv + 1);
		cfg.kv_lens = kv_lens;
	}
	/* one mask per sequence in some cases: the case's for sequence 0, fresh ones after */
	n_mask = d.n_q * d.n_kv * (cfg.mask.per_head ? d.heads : 1);
	if (_i % 2 && (cfg.mask.bias || cfg.mask.allow)) {
		cfg.mask.per_batch = 1;
		if (cfg.mask.bias) {
			bias = batch_of(c.bias, n_mask, B);
			for (size_t i = n_mask; i < B * n_mask; i++)
				if (bias[i] < -0.7)
					bias[i] = -INFINITY;
			cfg.mask.bias = bias;
		}
		if (cfg.mask.allow) {
			allow = malloc(B * n_mask);
			for (size_t i = 0; i < B * n_mask; i++)
				allow[i] = i < n_mask ? c.allow[i] : rnd() > -0.6;
			cfg.mask.allow = allow;
		}
	}
	plain = malloc(B * nout * sizeof(double));
	fast = malloc(B * nout * sizeof(double));
	two = malloc(B * nout * sizeof(double));
	alone = malloc(B * nout * sizeof(double));
	bs = (struct batch_seen){ .B = B, .n_q = d.n_q, .cols = oc, .out = malloc(B * nout * sizeof(double)),
				  .order_ok = 1 };
	obs = (mha_observer){ .fn = batch_record, .ctx = &bs, .sequence = batch_sequence,
			      .wanted = MHA_STAGE_BIT(MHA_STAGE_SOFTMAX) | MHA_STAGE_BIT(MHA_STAGE_OUTPUT) };
	ck_assert_int_eq(mha_forward(plain, &d, &(mha_inputs){ xq, xk, xv }, &w, &cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 0);
	ck_assert(bs.order_ok);
	ck_assert_uint_eq(bs.told, B);
	ck_assert_int_eq(bs.heads, (int)(B * d.heads));
	ck_assert(!memcmp(bs.out, plain, B * nout * sizeof(double)));
	{
		/* the reference, one sequence at a time */
		size_t blocked = 0;
		int first_seq = -1;

		for (size_t b = 0; b < B; b++) {
			mha_dims d1 = d;
			mha_config c1 = cfg;
			ref_result r;

			d1.batch = 0;
			c1.kv_lens = NULL;
			if (cfg.kv_lens)
				c1.kv_len = kv_lens[b];
			c1.mask.per_batch = 0;
			if (cfg.mask.per_batch) {
				c1.mask.bias = cfg.mask.bias ? cfg.mask.bias + b * n_mask : NULL;
				c1.mask.allow = cfg.mask.allow ? cfg.mask.allow + b * n_mask : NULL;
			}
			ck_assert_int_eq(ref_forward(&r, &d1, &(mha_inputs){ xq + b * d.n_q * d.d_q_in,
					 xk + b * d.n_kv * d.d_k_in, xv + b * d.n_kv * d.d_v_in }, &w, &c1), 0);
			snprintf(what, sizeof(what), "batch case %d sequence %zu of %zu", _i, b, B);
			check_close(what, plain + b * nout, r.output, nout);
			if (r.blocked && first_seq < 0)
				first_seq = (int)b;
			blocked += r.blocked;
			/* the fast path on this sequence alone, for the bits below */
			ck_assert_int_eq(mha_forward(alone + b * nout, &d1, &(mha_inputs){ xq + b * d.n_q * d.d_q_in,
					 xk + b * d.n_kv * d.d_k_in, xv + b * d.n_kv * d.d_v_in }, &w, &c1, NULL, NULL),
					 MHA_OK);
			ref_free(&r);
		}
		ck_assert_uint_eq(rep.blocked_rows, blocked);
		if (blocked)
			ck_assert_uint_eq(rep.first_blocked_sequence, (size_t)first_seq);
		cfg.threads = 1;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ xq, xk, xv }, &w, &cfg, NULL, &rep), MHA_OK);
		ck_assert_int_eq(rep.fast_path, 1);
		ck_assert_uint_eq(rep.blocked_rows, blocked);
		if (blocked)
			ck_assert_uint_eq(rep.first_blocked_sequence, (size_t)first_seq);
	}
	snprintf(what, sizeof(what), "batch case %d fast path", _i);
	check_close_norm(what, fast, plain, B * nout);
	cfg.threads = 2;
	ck_assert_int_eq(mha_forward(two, &d, &(mha_inputs){ xq, xk, xv }, &w, &cfg, NULL, NULL), MHA_OK);
	ck_assert_msg(!memcmp(fast, two, B * nout * sizeof(double)), "batch case %d: 1 and 2 threads differ", _i);
	ck_assert_msg(!memcmp(fast, alone, B * nout * sizeof(double)),
		      "batch case %d: the batch differs from its sequences run alone", _i);
	{
		/* float32: the same batch, to float precision */
		const size_t nx[3] = { B * d.n_q * d.d_q_in, B * d.n_kv * d.d_k_in, B * d.n_kv * d.d_v_in };
		const double *x64[3] = { xq, xk, xv };
		float *x32[3], *W32[4] = { 0 }, *b32[4] = { 0 }, *o32 = malloc(B * nout * sizeof(float));
		const size_t G = d.kv_heads ? d.kv_heads : d.heads;
		const size_t wn[4] = { d.d_q_in * d.heads * d.d_k, d.d_k_in * G * d.d_k,
				       d.d_v_in * G * d.d_v, d.heads * d.d_v * d.d_out };
		const size_t bn[4] = { d.heads * d.d_k, G * d.d_k, G * d.d_v, d.d_out };
		double maxabs = 0, worst = 0;

		for (int i = 0; i < 3; i++) {
			x32[i] = malloc(nx[i] * sizeof(float));
			for (size_t j = 0; j < nx[i]; j++)
				x32[i][j] = (float)x64[i][j];
		}
		for (int i = 0; i < 4; i++) {
			if (c.W[i]) {
				W32[i] = malloc(wn[i] * sizeof(float));
				for (size_t j = 0; j < wn[i]; j++)
					W32[i][j] = (float)c.W[i][j];
			}
			if (c.b[i]) {
				b32[i] = malloc(bn[i] * sizeof(float));
				for (size_t j = 0; j < bn[i]; j++)
					b32[i][j] = (float)c.b[i][j];
			}
		}
		ck_assert_int_eq(mha_forward_f32(o32, &d, &(mha_inputs_f32){ x32[0], x32[1], x32[2] },
						 &(mha_weights_f32){ W32[0], W32[1], W32[2], W32[3],
								     b32[0], b32[1], b32[2], b32[3] },
						 &cfg, NULL), MHA_OK);
		for (size_t i = 0; i < B * nout; i++)
			maxabs = fmax(maxabs, fabs(plain[i]));
		for (size_t i = 0; i < B * nout; i++)
			worst = fmax(worst, fabs(o32[i] - plain[i]) / (maxabs + 1e-300));
		ck_assert_msg(worst < 1e-4, "batch case %d float32: %.3g relative", _i, worst);
		for (int i = 0; i < 3; i++)
			free(x32[i]);
		for (int i = 0; i < 4; i++) {
			free(W32[i]);
			free(b32[i]);
		}
		free(o32);
	}
	free(bs.out);
	free(plain);
	free(fast);
	free(two);
	free(alone);
	free(bias);
	free(allow);
	if (xv != xk)
		free(xv);
	if (xk != xq)
		free(xk);
	free(xq);
	free_case(&c);
}
END_TEST

/*
 * A batch longer than the fast path's blocks: three sequences of 100
 * queries and 260 keys with lengths 260, 170 and 1, bottom-right causal
 * with a window, one bias per sequence and head; every kernel variant,
 * 1 and 2 threads the same bits, against the plain path and against each
 * sequence run alone (the same bits).
 */
START_TEST(test_batch_fast_blocks)
{
	const size_t B = 3, nq = 100, nkv = 260, dm = 12, H = 4, G = 2;
	const size_t kv_lens[3] = { 260, 170, 1 };
	double *xq = rnd_matrix(B * nq * dm), *xkv = rnd_matrix(B * nkv * dm), *W[4];
	double *bias = rnd_matrix(B * H * nq * nkv);
	double *exact = malloc(B * nq * dm * sizeof(double)), *fast = malloc(B * nq * dm * sizeof(double));
	double *one = malloc(B * nq * dm * sizeof(double)), *alone = malloc(B * nq * dm * sizeof(double));
	mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .kv_heads = G, .d_k = 3, .d_v = 3, .d_out = dm, .batch = B };
	const size_t wsize[4] = { dm * H * 3, dm * G * 3, dm * G * 3, H * 3 * dm };
	mha_weights w;
	mha_config cfg = { .causal = MHA_CAUSAL_BOTTOM_RIGHT, .kv_lens = kv_lens,
			   .window = { 1, 40, 0 },
			   .mask = { .bias = bias, .per_head = 1, .per_batch = 1 } };
	char *saved = env_save("MHA_KERNEL");
	mha_report rep;

	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(wsize[i]);
	w = (mha_weights){ .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
	cfg.exact = 1;
	ck_assert_int_eq(mha_forward(exact, &d, &(mha_inputs){ xq, xkv, xkv }, &w, &cfg, NULL, &rep), MHA_OK);
	/* the third sequence's single key is seen by its last query only */
	ck_assert_uint_eq(rep.blocked_rows, H * (nq - 1));
	ck_assert_uint_eq(rep.first_blocked_sequence, 2);
	ck_assert_int_eq(rep.first_blocked_head, 0);
	ck_assert_uint_eq(rep.first_blocked_row, 0);
	ck_assert_int_eq(mha_causal_offset(&d, &cfg, 1), 170 - 100);
	ck_assert_int_eq(mha_causal_offset(&d, &cfg, 2), 1 - 100);
	cfg.exact = 0;
	for (size_t k = 0; k < sizeof(kernel_names) / sizeof(kernel_names[0]); k++) {
		char what[64];

		setenv("MHA_KERNEL", kernel_names[k], 1);
		cfg.threads = 1;
		ck_assert_int_eq(mha_forward(one, &d, &(mha_inputs){ xq, xkv, xkv }, &w, &cfg, NULL, &rep), MHA_OK);
		ck_assert_uint_eq(rep.blocked_rows, H * (nq - 1));
		ck_assert_uint_eq(rep.first_blocked_sequence, 2);
		cfg.threads = 2;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ xq, xkv, xkv }, &w, &cfg, NULL, NULL), MHA_OK);
		ck_assert_msg(!memcmp(one, fast, B * nq * dm * sizeof(double)), "%s: 1 and 2 threads differ",
			      kernel_names[k]);
		snprintf(what, sizeof(what), "batch fast (%s) against exact", kernel_names[k]);
		check_close_norm(what, fast, exact, B * nq * dm);
		for (size_t b = 0; b < B; b++) {
			mha_dims d1 = d;
			mha_config c1 = cfg;

			d1.batch = 1;
			c1.kv_lens = NULL;
			c1.kv_len = kv_lens[b];
			c1.mask.per_batch = 0;
			c1.mask.bias = bias + b * H * nq * nkv;
			ck_assert_int_eq(mha_forward(alone + b * nq * dm, &d1,
						     &(mha_inputs){ xq + b * nq * dm, xkv + b * nkv * dm,
								    xkv + b * nkv * dm }, &w, &c1, NULL, NULL), MHA_OK);
		}
		ck_assert_msg(!memcmp(alone, fast, B * nq * dm * sizeof(double)),
			      "%s: the batch differs from its sequences alone", kernel_names[k]);
	}
	env_restore("MHA_KERNEL", saved);
	free(saved);
	for (int i = 0; i < 4; i++)
		free(W[i]);
	free(xq);
	free(xkv);
	free(bias);
	free(exact);
	free(fast);
	free(one);
	free(alone);
}
END_TEST

/*
 * The softmax's e^x (lib/vexp.h), each kernel's, against libm's exp:
 * within 2 ulp over [lo, 0] -- a dense sweep, the reduction's boundaries
 * (multiples of ln2/16, a value either side) and random values; exactly 1
 * at 0 and -0; 0 at and below lo (-708 double, -87 float) and at -inf;
 * nan stays nan.  Whole vectors, so that every lane takes its own table
 * entry.
 */
static double ulps_off(double got, double want, int f32)
{
	const double ulp = f32 ? (double)(nextafterf((float)want, INFINITY) - (float)want)
			       : nextafter(want, INFINITY) - want;

	return fabs(got - want) / ulp;
}

START_TEST(test_exp_accuracy)
{
	enum { N = 200000 };
	double *x = malloc(N * sizeof(double)), *y = malloc(N * sizeof(double));
	float *xf = malloc(N * sizeof(float)), *yf = malloc(N * sizeof(float));
	char *saved = env_save("MHA_KERNEL");

	for (int f32 = 0; f32 < 2; f32++) {
		const double lo = f32 ? -87.0 : -708.0, step = ldexp(log(2.0), -4);
		size_t n = 0;

		/* the specials first, then a sweep to below lo, boundaries, random values */
		x[n++] = 0.0;
		x[n++] = -0.0;
		x[n++] = -INFINITY;
		x[n++] = lo;
		x[n++] = nextafter(lo, 0);
		x[n++] = nextafter(lo, -INFINITY);
		x[n++] = -1e-300;
		x[n++] = -ldexp(1, -30);
		for (size_t i = 0; i < 60000; i++)
			x[n++] = (lo - 5) * (double)i / 60000;
		for (int k = 1; k < 16 * 1100 && -k * step > lo - 2; k++) {
			x[n++] = -k * step;
			x[n++] = nextafter(-k * step, 0);
			x[n++] = nextafter(-k * step, -INFINITY);
			x[n++] = -(k + 0.5) * step;
		}
		rng_state = 12345;
		while (n < N - 1)
			x[n++] = rnd() < 0 ? (rnd() - 1) / 2 : (rnd() - 1) * -lo / 2;
		x[n++] = NAN;
		for (size_t i = 0; i < n; i++) {
			xf[i] = (float)x[i];
			if (f32)
				x[i] = xf[i];
		}
		for (size_t k = 0; k < sizeof(kernel_names) / sizeof(kernel_names[0]); k++) {
			const struct mha_kernels *kern;
			double worst = 0;
			size_t at = 0;

			setenv("MHA_KERNEL", kernel_names[k], 1);
			kern = mha_pick_kernels(f32);
			if (f32)
				kern->exps(yf, xf, n);
			else
				kern->exps(y, x, n);
			for (size_t i = 0; i < n; i++) {
				const double got = f32 ? yf[i] : y[i];

				if (isnan(x[i])) {
					ck_assert_msg(isnan(got), "%s %s: e^nan gave %g", kern->name,
						      f32 ? "f32" : "f64", got);
				} else if (x[i] <= lo) {
					ck_assert_msg(got == 0, "%s %s: e^%.17g gave %g, want 0", kern->name,
						      f32 ? "f32" : "f64", x[i], got);
				} else {
					const double want = f32 ? (double)(float)exp(x[i]) : exp(x[i]);
					const double off = ulps_off(got, want, f32);

					if (off > worst) {
						worst = off;
						at = i;
					}
				}
			}
			ck_assert_msg(worst <= 2, "%s %s: e^%.17g gave %.17g, want %.17g (%.2f ulp)",
				      kern->name, f32 ? "f32" : "f64", x[at],
				      f32 ? (double)yf[at] : y[at], f32 ? (double)(float)exp(x[at]) : exp(x[at]),
				      worst);
			ck_assert(f32 ? yf[0] == 1 && yf[1] == 1 : y[0] == 1 && y[1] == 1);
			if (getenv("MHA_TEST_VERBOSE"))
				printf("exp %s %s: worst %.3f ulp at %.17g\n", kern->name, f32 ? "f32" : "f64",
				       worst, x[at]);
		}
	}
	env_restore("MHA_KERNEL", saved);
	free(saved);
	free(x);
	free(y);
	free(xf);
	free(yf);
}
END_TEST

/* what the fast path hands an observer of a batch: whole-model stages, one sequence at a time */
struct fast_seen {
	size_t cur, told, calls;
	double *q[3], *out[3]; /* per sequence */
	size_t q_rows, out_rows;
};

static int fast_sequence(void *ctx, size_t b)
{
	struct fast_seen *fs = ctx;

	fs->cur = b;
	fs->told++;
	return 0;
}

static int fast_record(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	struct fast_seen *fs = ctx;
	double **dst = s == MHA_STAGE_Q ? &fs->q[fs->cur] : s == MHA_STAGE_OUTPUT ? &fs->out[fs->cur] : NULL;

	ck_assert_int_eq(head, -1);
	fs->calls++;
	if (!dst)
		return 0;
	ck_assert_ptr_null(*dst);
	*dst = malloc(rows * cols * sizeof(double));
	memcpy(*dst, m, rows * cols * sizeof(double));
	return 0;
}

START_TEST(test_batch_fast_observer)
{
	const size_t B = 3, n = 5, dm = 4;
	double *x = rnd_matrix(B * n * dm), *W = rnd_matrix(dm * dm), out[3 * 5 * 4], one[5 * 4];
	mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = 2, .d_k = 2, .d_v = 2, .d_out = dm, .batch = B };
	mha_weights w = { .W_Q = W, .W_K = W, .W_V = W, .W_O = W };
	struct fast_seen fs = { 0 };
	mha_observer obs = { .fn = fast_record, .ctx = &fs, .sequence = fast_sequence,
			     .wanted = MHA_STAGE_BIT(MHA_STAGE_Q) | MHA_STAGE_BIT(MHA_STAGE_K) |
				       MHA_STAGE_BIT(MHA_STAGE_V) | MHA_STAGE_BIT(MHA_STAGE_CONCAT) |
				       MHA_STAGE_BIT(MHA_STAGE_OUTPUT) };
	mha_report rep;

	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, &w, NULL, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	/* Q, K, V of each sequence, then each concat, then each output: told before each */
	ck_assert_uint_eq(fs.calls, 5 * B);
	ck_assert_uint_eq(fs.told, 5 * B);
	for (size_t b = 0; b < B; b++) {
		mha_dims d1 = d;

		d1.batch = 0;
		ck_assert(!memcmp(fs.out[b], out + b * n * dm, n * dm * sizeof(double)));
		ck_assert_int_eq(mha_forward(one, &d1, &(mha_inputs){ x + b * n * dm, x + b * n * dm,
					     x + b * n * dm }, &w, NULL, NULL, NULL), MHA_OK);
		ck_assert(!memcmp(one, fs.out[b], n * dm * sizeof(double)));
		free(fs.q[b]);
		free(fs.out[b]);
	}
	/* an observer that stops: at once, in the batch too */
	obs.fn = ignore_stop;
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, &w, NULL, &obs, NULL),
			 MHA_ERR_OBSERVER);
	free(x);
	free(W);
}
END_TEST

/*
 * Everything at once: a batch whose sequences have key lengths of their
 * own, grouped-query heads, a window, rotary embeddings, ALiBi, sinks and
 * a softcap.  Bottom-right puts each sequence's queries at its own
 * positions (kv_lens[b] - n_q + i), which the window, ALiBi and RoPE all
 * take.  Plain and fast against the reference run on each sequence alone;
 * the fast path the very bits of each sequence alone, on 1 and 2 threads;
 * float32 close to float64.
 */
START_TEST(test_batch_rope_alibi)
{
	const size_t B = 3, nq = 4, nkv = 6, dm = 8;
	const size_t kv_lens[3] = { 6, 3, 5 };
	static const double sinks[2] = { 0.5, -1.0 };
	double *x = rnd_matrix(B * nq * dm), *kv = rnd_matrix(B * nkv * dm), *W[3];
	double plain[3 * 4 * 8], fast[3 * 4 * 8], one[4 * 8];
	mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = 2, .kv_heads = 1, .d_k = 4, .d_v = 4, .batch = B };
	mha_config cfg = { .causal = MHA_CAUSAL_BOTTOM_RIGHT, .kv_lens = kv_lens,
			   .alibi = { .on = 1 }, .rope = { .mode = MHA_ROPE_HALF },
			   .window = { 1, 2, -1 }, .sinks = sinks, .softcap = 4 };
	mha_weights w;
	char what[64];

	W[0] = rnd_matrix(dm * 8);
	W[1] = rnd_matrix(dm * 4);
	W[2] = rnd_matrix(dm * 4);
	w = (mha_weights){ .W_Q = W[0], .W_K = W[1], .W_V = W[2] };
	cfg.exact = 1;
	ck_assert_int_eq(mha_forward(plain, &d, &(mha_inputs){ x, kv, kv }, &w, &cfg, NULL, NULL), MHA_OK);
	cfg.exact = 0;
	ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ x, kv, kv }, &w, &cfg, NULL, NULL), MHA_OK);
	for (size_t b = 0; b < B; b++) {
		mha_dims d1 = d;
		mha_config c1 = cfg;
		const mha_inputs in1 = { x + b * nq * dm, kv + b * nkv * dm, kv + b * nkv * dm };
		ref_result r;

		d1.batch = 0;
		c1.kv_lens = NULL;
		c1.kv_len = kv_lens[b];
		ck_assert_int_eq(ref_forward(&r, &d1, &in1, &w, &c1), 0);
		snprintf(what, sizeof(what), "rope+alibi sequence %zu, plain", b);
		check_close(what, plain + b * nq * 8, r.output, nq * 8);
		snprintf(what, sizeof(what), "rope+alibi sequence %zu, fast", b);
		check_close_norm(what, fast + b * nq * 8, r.output, nq * 8);
		ck_assert_int_eq(mha_forward(one, &d1, &in1, &w, &c1, NULL, NULL), MHA_OK);
		ck_assert_msg(!memcmp(one, fast + b * nq * 8, sizeof(one)),
			      "sequence %zu: the batch's fast path differs from the sequence alone", b);
		ref_free(&r);
	}
	/* threads: the same bits; float32: close to float64 */
	{
		float fx[3 * 4 * 8], fkv[3 * 6 * 8], fW[3][8 * 8], fout[3 * 4 * 8];
		double two[3 * 4 * 8], worst = 0, maxabs = 0;
		const size_t wn[3] = { dm * 8, dm * 4, dm * 4 };

		cfg.threads = 2;
		ck_assert_int_eq(mha_forward(two, &d, &(mha_inputs){ x, kv, kv }, &w, &cfg, NULL, NULL),
				 MHA_OK);
		cfg.threads = 1;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ x, kv, kv }, &w, &cfg, NULL, NULL),
				 MHA_OK);
		ck_assert_msg(!memcmp(two, fast, sizeof(two)), "1 and 2 threads differ");
		for (size_t i = 0; i < B * nq * dm; i++)
			fx[i] = (float)x[i];
		for (size_t i = 0; i < B * nkv * dm; i++)
			fkv[i] = (float)kv[i];
		for (int m = 0; m < 3; m++)
			for (size_t i = 0; i < wn[m]; i++)
				fW[m][i] = (float)W[m][i];
		ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fkv, fkv },
						 &(mha_weights_f32){ .W_Q = fW[0], .W_K = fW[1],
								     .W_V = fW[2] }, &cfg, NULL),
				 MHA_OK);
		for (size_t i = 0; i < B * nq * 8; i++) {
			maxabs = fmax(maxabs, fabs(plain[i]));
			worst = fmax(worst, fabs((double)fout[i] - plain[i]));
		}
		ck_assert_msg(worst <= 1e-5 * maxabs, "float32 off by %g (largest %g)", worst, maxabs);
	}
	for (int i = 0; i < 3; i++)
		free(W[i]);
	free(x);
	free(kv);
}
END_TEST

/* a mask (n_q, n_kv) shared by a batch, and one of (B, 1, n_q, n_kv): by hand */
START_TEST(test_batch_mask_by_hand)
{
	/* two sequences of two tokens, one head of width 1: x = 1, 2 and 3, 4 */
	const double x[4] = { 1, 2, 3, 4 };
	const unsigned char shared[4] = { 1, 0, 1, 1 };
	const unsigned char each[8] = { 1, 0, 1, 1,   0, 1, 1, 1 };
	const size_t lens[2] = { 0, 1 };
	mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1, .batch = 2 };
	mha_config cfg = { .mask = { .allow = shared } };
	double out[4], fast[4];

	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL,
				     &(mha_config){ .mask = cfg.mask, .exact = 1 }, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	/* row 0 of each sequence sees its first key alone: its value */
	ck_assert(out[0] == 1 && out[2] == 3);
	ck_assert(fabs(fast[0] - 1) < 1e-15 && fabs(fast[2] - 3) < 1e-15);
	cfg.mask = (mha_mask){ .allow = each, .per_batch = 1 };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	/* sequence 1, row 0 sees key 1 alone: 4 */
	ck_assert(out[0] == 1 && out[2] == 4);
	/* per-sequence lengths: sequence 1 keeps key 0 alone (value 3), sequence 0 all */
	cfg = (mha_config){ .kv_lens = lens };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	ck_assert(out[2] == 3 && out[3] == 3);
	ck_assert(out[0] > 1 && out[0] < 2);
	/* a length past n_kv */
	cfg.kv_lens = (const size_t[]){ 1, 3 };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &cfg, NULL, NULL), MHA_ERR_KV_LEN);
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_KV_LEN);
	ck_assert_int_eq(mha_causal_offset(&d, &(mha_config){ .causal = MHA_CAUSAL_BOTTOM_RIGHT,
							     .kv_lens = lens }, 1), -1);
	ck_assert_int_eq(mha_causal_offset(&d, &(mha_config){ .kv_lens = lens }, 1), 0);
}
END_TEST


/* ---- one answer from both paths: extreme numbers ----------------------- */

/*
 * The numbers of one element type: big squared overflows, half squared
 * does not, max is the largest finite number, tiny the smallest normal
 * and sub a subnormal.  Every case below is written in these terms, so the
 * same case runs in float64 (both paths) and float32.
 */
struct xtype {
	const char *name;
	int f32;
	double big, half, max, tiny, sub;
};

static const struct xtype xtypes[4] = {
	{ "f64", 0, 0x1p600, 0x1p500, DBL_MAX, DBL_MIN, 0x3p-1074 },
	{ "f32", 1, 0x1p70, 0x1p62, FLT_MAX, FLT_MIN, 0x3p-149 },
	/* not powers of two: a fused multiply-add keeps a product's rounding error */
	{ "f64", 0, 1e200, 1e150, DBL_MAX, DBL_MIN, 1e-310 },
	{ "f32", 1, 1e25f, 1e18f, FLT_MAX, FLT_MIN, 1e-40f },
};

/* One case: Q, K, V given directly (no projections), maybe W_O; the answer worked by hand. */
struct xcase {
	size_t nq, nkv, dk, dv, dout;
	double *q, *k, *v;      /* (nq, dk), (nkv, dk), (nkv, dv) */
	double *wo;             /* (dv, dout) or NULL */
	unsigned char *allow;   /* (nq, nkv) or NULL */
	double *bias;           /* (nq, nkv) or NULL */
	mha_config cfg;
	mha_status status;      /* what every path must return */
	double *want;           /* (nq, dout or dv) when MHA_OK */
	double abs_tol;         /* besides RTOL (f64) or 1e-5 (f32) of max |want| */
	size_t blocked;         /* rows with every key masked */
};

static void xcase_shape(struct xcase *c, size_t nq, size_t nkv, size_t dk, size_t dv)
{
	memset(c, 0, sizeof(*c));
	c->nq = nq;
	c->nkv = nkv;
	c->dk = dk;
	c->dv = dv;
	c->dout = dv;
	c->q = calloc(nq * dk, sizeof(double));
	c->k = calloc(nkv * dk, sizeof(double));
	c->v = calloc(nkv * dv, sizeof(double));
	c->want = calloc(nq * dv, sizeof(double));
	c->cfg.scale_mode = MHA_SCALE_NONE;
}

static void xcase_free(struct xcase *c)
{
	free(c->q);
	free(c->k);
	free(c->v);
	free(c->wo);
	free(c->allow);
	free(c->bias);
	free(c->want);
}

/* q = [big; 1], k = [1; big], v = [1; 2]: query 1 · key 2 = big² overflows */
static void xc_two_by_two(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 2, 2, 1, 1);
	c->q[0] = t->big;
	c->q[1] = 1;
	c->k[0] = 1;
	c->k[1] = t->big;
	c->v[0] = 1;
	c->v[1] = 2;
	/* where key 2 counts for query 2 (score big, against 1): output 2 */
	c->want[0] = 1;
	c->want[1] = 2;
}

static void xc_huge_score_seen(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->status = MHA_ERR_RANGE;
}

/* key 2 past kv_len: query 1 sees key 1 alone (1), so does query 2 (1) */
static void xc_huge_score_kv_len(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->cfg.kv_len = 1;
	c->want[1] = 1;
}

static void xc_huge_score_allow(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->allow = malloc(4);
	memcpy(c->allow, (unsigned char[]){ 1, 0, 1, 1 }, 4);
	c->cfg.mask.allow = c->allow;
}

static void xc_huge_score_bias(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->bias = malloc(4 * sizeof(double));
	memcpy(c->bias, (double[]){ 0, -INFINITY, 0, 0 }, 4 * sizeof(double));
	c->cfg.mask.bias = c->bias;
}

static void xc_huge_score_causal(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->cfg.causal = MHA_CAUSAL_TOP_LEFT;
}

/*
 * 200 queries and keys, causal: query 11 is big, and so is key hk, which
 * query 11 may not see.  Values v_j = j.  Row i < hk averages keys 0..i
 * (i/2; query 11's scores are all big, equal); rows from hk on see key hk
 * with score big and the others with 1: output hk.  hk = 50 lies in query
 * 11's block of keys (computed, then masked), hk = 150 in a skipped one.
 */
static void xc_causal_200(struct xcase *c, const struct xtype *t, size_t hk)
{
	xcase_shape(c, 200, 200, 1, 1);
	for (size_t j = 0; j < 200; j++) {
		c->q[j] = c->k[j] = 1;
		c->v[j] = (double)j;
		c->want[j] = j < hk ? (double)j / 2 : (double)hk;
	}
	c->q[10] = c->k[hk] = t->big;
	c->cfg.causal = MHA_CAUSAL_TOP_LEFT;
}

static void xc_causal_block_computed(struct xcase *c, const struct xtype *t)
{
	xc_causal_200(c, t, 50);
}

static void xc_causal_block_skipped(struct xcase *c, const struct xtype *t)
{
	xc_causal_200(c, t, 150);
}

/*
 * Bottom-right with kv_len 3 of 4 keys: query 1 sees keys 1-2, query 2
 * keys 1-3.  Query 1 and keys 3 and 4 are big: query 1 · key 3 is causally
 * masked, key 4 past kv_len.  Query 1's two scores are equal (0.5), query 2
 * sees key 3 with score big (2).
 */
static void xc_bottom_right_kv_len(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 2, 4, 1, 1);
	c->q[0] = t->big;
	c->q[1] = 1;
	c->k[0] = c->k[1] = 1;
	c->k[2] = c->k[3] = t->big;
	for (int j = 0; j < 4; j++)
		c->v[j] = j;
	c->cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
	c->cfg.kv_len = 3;
	c->want[0] = 0.5;
	c->want[1] = 2;
}

/* Q = K = 0 and every value max/2 over 100 keys: the output is max/2 */
static void xc_huge_values(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 3, 100, 1, 2);
	for (size_t j = 0; j < 100; j++) {
		c->v[2 * j] = t->max / 2;
		c->v[2 * j + 1] = -t->max / 2;
	}
	for (size_t i = 0; i < 3; i++) {
		c->want[2 * i] = t->max / 2;
		c->want[2 * i + 1] = -t->max / 2;
	}
}

/* the largest finite value over 11 keys: its own average, not infinity */
static void xc_largest_values(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 11, 1, 1);
	for (size_t j = 0; j < 11; j++)
		c->v[j] = t->max;
	c->want[0] = t->max;
}

/* scores of tiny·tiny underflow to 0: equal weights, the mean of 0..3 */
static void xc_tiny_scores(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 4, 1, 1);
	c->q[0] = t->tiny;
	for (int j = 0; j < 4; j++) {
		c->k[j] = t->tiny;
		c->v[j] = j;
	}
	c->want[0] = 1.5;
}

/* subnormal values: the output is that subnormal, to a few of its units */
static void xc_subnormal_values(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 5, 1, 1);
	for (int j = 0; j < 5; j++)
		c->v[j] = t->sub;
	c->want[0] = t->sub;
	c->abs_tol = 8 * (t->f32 ? 0x1p-149 : 0x1p-1074); /* 8 units of the last place down there */
}

/* half·half is large but finite: that key takes all the weight */
static void xc_large_finite_score(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 2, 1, 1);
	c->q[0] = t->half;
	c->k[0] = t->half;
	c->v[0] = 5;
	c->v[1] = 7;
	c->want[0] = 5;
}

/* q·k0 = big² - big² = 0 exactly, though each product overflows: equal weights */
static void xc_cancelling_products(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 2, 2, 1);
	c->q[0] = c->q[1] = t->big;
	c->k[0] = t->big;
	c->k[1] = -t->big;
	c->v[0] = 1;
	c->v[1] = 3;
	c->want[0] = 2;
}

/* concat [0.75 max, 0.75 max, -0.75 max] · W_O = ones: a partial sum overflows, the sum does not */
static void xc_output_partial_sums(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 1, 1, 3);
	c->dout = 1;
	c->v[0] = c->v[1] = 0.75 * t->max;
	c->v[2] = -0.75 * t->max;
	c->wo = malloc(3 * sizeof(double));
	c->wo[0] = c->wo[1] = c->wo[2] = 1;
	c->want[0] = 0.75 * t->max;
}

/* 0.75 max · 2 truly overflows */
static void xc_output_overflows(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 1, 1, 1);
	c->v[0] = 0.75 * t->max;
	c->wo = malloc(sizeof(double));
	c->wo[0] = 2;
	c->status = MHA_ERR_RANGE;
}

/* score 0.75 max plus a bias of 0.75 max: a masked score past the largest number */
static void xc_bias_overflows(struct xcase *c, const struct xtype *t)
{
	xcase_shape(c, 1, 2, 1, 1);
	c->q[0] = 0.75 * t->max;
	c->k[0] = c->k[1] = 1;
	c->bias = calloc(2, sizeof(double));
	c->bias[0] = 0.75 * t->max;
	c->cfg.mask.bias = c->bias;
	c->status = MHA_ERR_RANGE;
}

/* the same sum on a key past kv_len: it never counts; key 1 alone (v = 4) */
static void xc_bias_overflows_masked(struct xcase *c, const struct xtype *t)
{
	xc_bias_overflows(c, t);
	c->bias[0] = 0;
	c->bias[1] = 0.75 * t->max;
	c->cfg.kv_len = 1;
	c->v[0] = 4;
	c->want[0] = 4;
	c->status = MHA_OK;
}

/* a row whose every key is masked (query 1: all; big scores there) gives zeros */
static void xc_row_all_masked(struct xcase *c, const struct xtype *t)
{
	xc_two_by_two(c, t);
	c->allow = malloc(4);
	memcpy(c->allow, (unsigned char[]){ 0, 0, 1, 1 }, 4);
	c->cfg.mask.allow = c->allow;
	c->want[0] = 0;
	c->blocked = 1;
}

static const struct {
	const char *name;
	void (*make)(struct xcase *c, const struct xtype *t);
} xcases[] = {
	{ "huge score, seen", xc_huge_score_seen },
	{ "huge score past kv_len", xc_huge_score_kv_len },
	{ "huge score, allow mask 0", xc_huge_score_allow },
	{ "huge score, bias -inf", xc_huge_score_bias },
	{ "huge score after the causal diagonal", xc_huge_score_causal },
	{ "causal, masked huge score in a computed block", xc_causal_block_computed },
	{ "causal, masked huge score in a skipped block", xc_causal_block_skipped },
	{ "bottom-right causal with kv_len", xc_bottom_right_kv_len },
	{ "values max/2", xc_huge_values },
	{ "values max over 11 keys", xc_largest_values },
	{ "tiny scores", xc_tiny_scores },
	{ "subnormal values", xc_subnormal_values },
	{ "large finite score", xc_large_finite_score },
	{ "products overflow, their sum is 0", xc_cancelling_products },
	{ "W_O partial sums overflow", xc_output_partial_sums },
	{ "W_O output overflows", xc_output_overflows },
	{ "score plus bias overflows", xc_bias_overflows },
	{ "score plus bias overflows past kv_len", xc_bias_overflows_masked },
	{ "a row with every key masked", xc_row_all_masked },
};

/* how a path did: its status, output (nq, dout) and blocked rows */
struct xresult {
	mha_status st;
	double out[200 * 3];
	size_t blocked;
};

static void xrun(struct xresult *r, const struct xcase *c, const struct xtype *t, int path)
{
	const mha_dims d = { .n_q = c->nq, .n_kv = c->nkv, .d_q_in = c->dk, .d_k_in = c->dk,
			     .d_v_in = c->dv, .heads = 1, .d_k = c->dk, .d_v = c->dv,
			     .d_out = c->wo ? c->dout : 0 };
	const size_t nout = c->nq * c->dout;
	mha_config cfg = c->cfg;
	mha_report rep;

	ck_assert_uint_le(nout, sizeof(r->out) / sizeof(r->out[0]));
	memset(r, 0, sizeof(*r));
	if (!t->f32) {
		/* 0: plain (--exact), 1: plain with every stage watched, 2 and 3: fast, 1 and 2 threads */
		seen sn;
		mha_observer obs = watch_all(&sn);

		cfg.exact = path == 0;
		cfg.threads = path == 3 ? 2 : 1;
		r->st = mha_forward(r->out, &d, &(mha_inputs){ c->q, c->k, c->v },
				    &(mha_weights){ .W_O = c->wo }, &cfg, path == 1 ? &obs : NULL, &rep);
		seen_free(&sn);
	} else {
		float *f[4], fout[200 * 3];
		const size_t n[4] = { c->nq * c->dk, c->nkv * c->dk, c->nkv * c->dv, c->dv * c->dout };
		const double *src[4] = { c->q, c->k, c->v, c->wo };

		for (int m = 0; m < 4; m++) {
			f[m] = src[m] ? malloc(n[m] * sizeof(float)) : NULL;
			for (size_t i = 0; src[m] && i < n[m]; i++)
				f[m][i] = (float)src[m][i];
		}
		cfg.threads = path == 3 ? 2 : 1;
		r->st = mha_forward_f32(fout, &d, &(mha_inputs_f32){ f[0], f[1], f[2] },
					&(mha_weights_f32){ .W_O = f[3] }, &cfg, &rep);
		for (size_t i = 0; i < nout; i++)
			r->out[i] = fout[i];
		for (int m = 0; m < 4; m++)
			free(f[m]);
	}
	r->blocked = r->st == MHA_OK ? rep.blocked_rows : 0;
}

START_TEST(test_extremes_both_paths)
{
	static const char *const paths[4] = { "plain", "plain, watched", "fast", "fast, 2 threads" };

	for (size_t ti = 0; ti < sizeof(xtypes) / sizeof(xtypes[0]); ti++) {
		const struct xtype *t = &xtypes[ti];

		for (size_t ci = 0; ci < sizeof(xcases) / sizeof(xcases[0]); ci++) {
			struct xcase c;
			struct xresult r, first;

			xcases[ci].make(&c, t);
			for (int path = 0; path < 4; path++) {
				/* float32 has the fast path only */
				if (t->f32 && path < 2)
					continue;
				xrun(&r, &c, t, path);
				ck_assert_msg(r.st == c.status, "%s, %s, %s path: %s, want %s", t->name,
					      xcases[ci].name, paths[path], mha_strerror(r.st),
					      mha_strerror(c.status));
				if (r.st != MHA_OK)
					continue;
				ck_assert_msg(r.blocked == c.blocked, "%s, %s, %s path: %zu blocked rows",
					      t->name, xcases[ci].name, paths[path], r.blocked);
				{
					const size_t n = c.nq * c.dout;
					double maxabs = 0, worst = 0;
					size_t at = 0;

					for (size_t i = 0; i < n; i++)
						maxabs = fmax(maxabs, fabs(c.want[i]));
					for (size_t i = 0; i < n; i++) {
						const double err = fabs(r.out[i] - c.want[i]);

						ck_assert_msg(isfinite(r.out[i]), "%s, %s, %s path: output[%zu] %g",
							      t->name, xcases[ci].name, paths[path], i, r.out[i]);
						if (err > worst) {
							worst = err;
							at = i;
						}
					}
					ck_assert_msg(worst <= (t->f32 ? 1e-5 : RTOL) * maxabs + c.abs_tol,
						      "%s, %s, %s path: output[%zu] = %.17g, want %.17g",
						      t->name, xcases[ci].name, paths[path], at, r.out[at], c.want[at]);
				}
				/* the fast path: the same bits whatever the threads */
				if (path == 2)
					first = r;
				if (path == 3)
					ck_assert_msg(!memcmp(first.out, r.out, c.nq * c.dout * sizeof(double)),
						      "%s, %s: 1 and 2 threads differ", t->name, xcases[ci].name);
			}
			xcase_free(&c);
		}
	}
}
END_TEST

/*
 * X·W_Q with X = [a, a, -a] and W_Q = ones: a + a overflows on the way, the
 * sum is a.  K = 0 (W_K = 0) and V = X·ones = a: every output is a, on
 * both paths and in float32 (a = 0.75 of each type's largest number).
 */
START_TEST(test_projection_partial_sums)
{
	const double a = 0.75 * DBL_MAX, x[6] = { a, a, -a, a, a, -a };
	const double ones[3] = { 1, 1, 1 }, zeros[3] = { 0, 0, 0 };
	const float af = 0.75f * FLT_MAX, xf[6] = { af, af, -af, af, af, -af };
	const float onesf[3] = { 1, 1, 1 }, zerosf[3] = { 0, 0, 0 };
	const mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 3, .d_k_in = 3, .d_v_in = 3,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	double out[2];
	float outf[2];

	for (int exact = 0; exact < 2; exact++) {
		const mha_config cfg = { .exact = exact };

		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x },
					     &(mha_weights){ .W_Q = ones, .W_K = zeros, .W_V = ones },
					     &cfg, NULL, NULL), MHA_OK);
		ck_assert_msg(out[0] == a && out[1] == a, "%s path: %g %g, want %g",
			      exact ? "plain" : "fast", out[0], out[1], a);
	}
	ck_assert_int_eq(mha_forward_f32(outf, &d, &(mha_inputs_f32){ xf, xf, xf },
					 &(mha_weights_f32){ .W_Q = onesf, .W_K = zerosf, .W_V = onesf },
					 NULL, NULL), MHA_OK);
	ck_assert_msg(outf[0] == af && outf[1] == af, "f32: %g %g, want %g", outf[0], outf[1], af);
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
	/* a window side below -1; -1 and 0 are fine; off, any numbers are ignored */
	cfg = (mha_config){ .window = { 1, -2, 0 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_ERR_WINDOW);
	cfg = (mha_config){ .window = { 1, 3, -5 } };
	ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_WINDOW);
	cfg = (mha_config){ .window = { 1, -1, 0 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
	cfg = (mha_config){ .window = { 0, -7, -7 } };
	ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
	/* a sink that is not a finite number, on either path and type */
	{
		const double bad_sinks[2][4] = { { 0, 0, 0, NAN }, { -INFINITY, 0, 0, 0 } };
		const float f[64] = { 0 };
		float fo[64];

		for (int k = 0; k < 2; k++) {
			cfg = (mha_config){ .sinks = bad_sinks[k] };
			ck_assert_int_eq(mha_check(&ok, &cfg), ok.heads == 4 || k == 1 ? MHA_ERR_SINK : MHA_OK);
		}
		cfg = (mha_config){ .sinks = bad_sinks[1] };
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SINK);
		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_SINK);
		if (ok.n_q * ok.d_q_in <= 64 && ok.n_kv * ok.d_k_in <= 64 && ok.n_kv * ok.d_v_in <= 64)
			ck_assert_int_eq(mha_forward_f32(fo, &ok, &(mha_inputs_f32){ f, f, f }, NULL,
							 &cfg, NULL), MHA_ERR_SINK);
		/* an ALiBi slope that is not a finite number; ignored while ALiBi is off */
		for (int k = 0; k < 2; k++) {
			cfg = (mha_config){ .alibi = { 1, bad_sinks[k] } };
			ck_assert_int_eq(mha_check(&ok, &cfg), ok.heads == 4 || k == 1 ? MHA_ERR_ALIBI : MHA_OK);
		}
		cfg = (mha_config){ .alibi = { 0, bad_sinks[1] } };
		ck_assert_int_eq(mha_check(&ok, &cfg), MHA_OK);
		cfg = (mha_config){ .alibi = { 1, bad_sinks[1] } };
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_ALIBI);
		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(out, &ok, &in, NULL, &cfg, NULL, NULL), MHA_ERR_ALIBI);
		if (ok.n_q * ok.d_q_in <= 64 && ok.n_kv * ok.d_k_in <= 64 && ok.n_kv * ok.d_v_in <= 64)
			ck_assert_int_eq(mha_forward_f32(fo, &ok, &(mha_inputs_f32){ f, f, f }, NULL,
							 &cfg, NULL), MHA_ERR_ALIBI);
	}
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

/* ---- the memory estimate against what is allocated --------------------- */

/*
 * Every malloc, calloc, realloc, aligned_alloc, posix_memalign and free of
 * this program and libmha.a, and libmha's mha_big_alloc and mha_big_free,
 * go through these (-Wl,--wrap=..., see the Makefile).  While measuring, each block asked for is noted with its size
 * in a small table, and the peak of their sum kept; blocks from before, or
 * from libc (not wrapped), are not counted.  The sizes are the
 * ones asked for: the allocator's own overhead is MHA_ALLOC_SLACK's part of
 * the estimate.  This works the same under ASan and valgrind, whose
 * allocators __real_malloc then reaches.
 */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void __wrap_free(void *p);

#define TRACK_SLOTS 4096 /* blocks alive at once while measuring; a power of 2 */

static struct {
	int measuring;
	char lock;
	size_t live, peak, blocks, lost; /* lost: blocks the table had no room for */
	void *p[TRACK_SLOTS];
	size_t n[TRACK_SLOTS];
} track;

static void track_lock(void)
{
	while (__atomic_test_and_set(&track.lock, __ATOMIC_ACQUIRE))
		;
}

static void track_unlock(void)
{
	__atomic_clear(&track.lock, __ATOMIC_RELEASE);
}

static size_t track_slot(const void *p)
{
	return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 52 & (TRACK_SLOTS - 1);
}

static void track_add(void *p, size_t n)
{
	if (!p || !__atomic_load_n(&track.measuring, __ATOMIC_RELAXED))
		return;
	track_lock();
	if (track.blocks + 1 >= TRACK_SLOTS) {
		track.lost++;
	} else {
		size_t s = track_slot(p);

		while (track.p[s])
			s = (s + 1) & (TRACK_SLOTS - 1);
		track.p[s] = p;
		track.n[s] = n;
		track.blocks++;
		track.live += n;
		if (track.live > track.peak)
			track.peak = track.live;
	}
	track_unlock();
}

/* forget p if it is noted; linear probing, so later entries of its run move up */
static void track_remove(void *p)
{
	size_t s, hole;

	if (!p)
		return;
	track_lock(); /* blocks read under the lock too: the team's threads free */
	if (!track.blocks) {
		track_unlock();
		return;
	}
	for (s = track_slot(p); track.p[s] && track.p[s] != p; s = (s + 1) & (TRACK_SLOTS - 1))
		;
	if (track.p[s] == p) {
		track.live -= track.n[s];
		track.blocks--;
		track.p[s] = NULL;
		hole = s;
		for (s = (s + 1) & (TRACK_SLOTS - 1); track.p[s]; s = (s + 1) & (TRACK_SLOTS - 1)) {
			const size_t home = track_slot(track.p[s]);

			/* move it into the hole unless its home lies between the hole and it */
			if ((s > hole && (home <= hole || home > s)) ||
			    (s < hole && home <= hole && home > s)) {
				track.p[hole] = track.p[s];
				track.n[hole] = track.n[s];
				track.p[s] = NULL;
				hole = s;
			}
		}
	}
	track_unlock();
}

void *__wrap_malloc(size_t n)
{
	void *p = __real_malloc(n);

	track_add(p, n);
	return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
	void *p = __real_calloc(n, size);

	track_add(p, n * size);
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	void *q;

	track_remove(p);
	q = __real_realloc(p, n);
	track_add(q, n);
	return q;
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	void *p = __real_aligned_alloc(align, n);

	track_add(p, n);
	return p;
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
	const int rc = __real_posix_memalign(p, align, n);

	if (!rc)
		track_add(*p, n);
	return rc;
}

void __wrap_free(void *p)
{
	track_remove(p);
	__real_free(p);
}

/*
 * The library's large blocks are mappings of their own (lib/pages.c), not
 * from malloc: counted here as they are asked for (the smaller ones come
 * from aligned_alloc and are counted there).  256 KiB is kernel.h's
 * MHA_BIG_MIN.
 */
#define BIG_MIN ((size_t)256 << 10)
void *mha_big_alloc(size_t n); /* lib/kernel.h's, inside libmha.a */
void mha_big_free(void *p, size_t n);
void *__real_mha_big_alloc(size_t n);
void __real_mha_big_free(void *p, size_t n);
void *__wrap_mha_big_alloc(size_t n);
void __wrap_mha_big_free(void *p, size_t n);

/* under ASan pages.c maps nothing: its blocks come from aligned_alloc, counted there */
#ifdef __SANITIZE_ADDRESS__
#define BIG_MAPPED(n) 0
#else
#define BIG_MAPPED(n) ((n) >= BIG_MIN)
#endif

void *__wrap_mha_big_alloc(size_t n)
{
	void *p = __real_mha_big_alloc(n);

	if (BIG_MAPPED(n))
		track_add(p, n);
	return p;
}

void __wrap_mha_big_free(void *p, size_t n)
{
	if (BIG_MAPPED(n))
		track_remove(p);
	__real_mha_big_free(p, n);
}

static void track_start(void)
{
	track_lock();
	track.live = track.peak = track.blocks = track.lost = 0;
	memset(track.p, 0, sizeof(track.p));
	track_unlock();
	__atomic_store_n(&track.measuring, 1, __ATOMIC_RELAXED);
}

/* the peak since track_start; every block noted since must be freed */
static size_t track_stop(void)
{
	__atomic_store_n(&track.measuring, 0, __ATOMIC_RELAXED);
	ck_assert_uint_eq(track.lost, 0);
	ck_assert_msg(track.blocks == 0, "%zu blocks (%zu bytes) not freed", track.blocks, track.live);
	return track.peak;
}

/* whether the wrappers are linked in (they are in the Makefile's builds) */
static int track_works(void)
{
	/* volatile: a malloc whose block is never used may be left out */
	void *volatile p;

	track_start();
	p = malloc(1000);
	free(p);
	return track_stop() == 1000;
}

/*
 * lib/pages.c: 64-byte aligned blocks, from MHA_BIG_MIN up mappings of their
 * own that start on a 2 MiB boundary (where huge pages can back them),
 * every byte writable, freed by size, counted by the memory measurement
 */
START_TEST(test_big_alloc)
{
	const size_t sizes[] = { 1, 100, BIG_MIN - 1, BIG_MIN, BIG_MIN + 5, 3 * BIG_MIN + 4097 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const size_t n = sizes[i];
		unsigned char *p = mha_big_alloc(n);

		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 64, 0);
#ifndef __SANITIZE_ADDRESS__ /* pages.c maps no blocks under ASan */
		if (n >= BIG_MIN)
			ck_assert_msg((uintptr_t)p % ((size_t)2 << 20) == 0, "%zu bytes at %p", n,
				      (void *)p);
#endif
		memset(p, 0xab, n);
		ck_assert_uint_eq(p[0], 0xab);
		ck_assert_uint_eq(p[n - 1], 0xab);
		mha_big_free(p, n);
	}
	mha_big_free(NULL, BIG_MIN);
	mha_big_free(NULL, 1);
#ifndef __SANITIZE_ADDRESS__
	{
		/* a freed block is kept: the same length (to a page) gets it back,
		 * its pages and their contents with it; another length does not */
		unsigned char *a = mha_big_alloc(BIG_MIN + 5), *b, *c;

		ck_assert_ptr_nonnull(a);
		memset(a, 0x5a, BIG_MIN + 5);
		mha_big_free(a, BIG_MIN + 5);
		b = mha_big_alloc(BIG_MIN + 7);
		ck_assert_ptr_eq(b, a);
		ck_assert_uint_eq(b[BIG_MIN + 4], 0x5a);
		mha_big_free(b, BIG_MIN + 7);
		c = mha_big_alloc(2 * BIG_MIN);
		ck_assert_ptr_nonnull(c);
		ck_assert_ptr_ne(c, a);
		c[2 * BIG_MIN - 1] = 1;
		mha_big_free(c, 2 * BIG_MIN);
	}
#endif
	if (track_works()) {
		void *volatile p;

		track_start();
		p = mha_big_alloc(3 * BIG_MIN);
		mha_big_free(p, 3 * BIG_MIN);
		ck_assert_uint_eq(track_stop(), 3 * BIG_MIN);
	}
}
END_TEST

/* an observer that keeps nothing: the plain path's own allocations alone */
static int ignore(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 0;
}

/*
 * Over a grid of shapes (one head and many, grouped heads, d_k = 1 and
 * wide heads, one key and hundreds, the fast path's block edges), both
 * element types, 1 and 2 threads, the fast path and the plain one with and
 * without (n_q, n_kv) stages watched: what mha_forward allocates at its
 * peak is at most mha_memory(), and mha_memory() at most a quarter more
 * plus 4 KiB (the allocator's slack counted for each block).  The ratios
 * are printed; MHA_MEMORY_VERBOSE=1 prints each run.
 */
START_TEST(test_memory_measured)
{
	static const size_t shapes[][6] = {
		/* n_q, n_kv, H, G, d_k, d_v */
		{ 1, 1, 1, 1, 1, 1 },     { 3, 4, 2, 2, 2, 2 },       { 7, 300, 16, 16, 1, 1 },
		{ 97, 257, 16, 2, 1, 1 }, { 200, 200, 8, 1, 8, 8 },   { 300, 613, 4, 2, 64, 32 },
		{ 96, 96, 16, 16, 4, 4 }, { 500, 20, 2, 1, 128, 128 }, { 40, 1000, 3, 3, 5, 11 },
	};
	const unsigned squares = MHA_STAGE_BIT(MHA_STAGE_SCORES) | MHA_STAGE_BIT(MHA_STAGE_MASK) |
				 MHA_STAGE_BIT(MHA_STAGE_SOFTMAX);
	double lo = 1e300, hi = 0, hi_big = 0;
	int runs = 0;

	if (!track_works()) {
		fputs("test_memory_measured: allocations are not wrapped in this build; skipped\n", stderr);
		return;
	}
	rng_state = 7;
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const size_t *s = shapes[si], dm = 16;
		const mha_dims d = { .n_q = s[0], .n_kv = s[1], .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
				     .heads = s[2], .kv_heads = s[3], .d_k = s[4], .d_v = s[5], .d_out = dm };
		const size_t n[8] = { s[0] * dm, s[1] * dm, dm * s[2] * s[4], dm * s[3] * s[4],
				      dm * s[3] * s[5], s[2] * s[5] * dm, s[0] * dm, 1 };
		double *m[7];
		float *f[7];

		for (int i = 0; i < 7; i++) {
			m[i] = rnd_matrix(n[i]);
			f[i] = malloc(n[i] * sizeof(float));
			for (size_t j = 0; j < n[i]; j++)
				f[i][j] = (float)m[i][j];
		}
		/* path 0: fast, 1: plain, 2: plain with (n_q, n_kv) stages watched */
		for (int f32 = 0; f32 < 2; f32++)
			for (int path = 0; path < (f32 ? 1 : 3); path++)
				for (int threads = 1; threads <= 2; threads++) {
					mha_config cfg = { .threads = threads, .exact = path == 1,
							   .causal = threads == 2 ? MHA_CAUSAL_BOTTOM_RIGHT : MHA_CAUSAL_NONE,
							   /* rope's q_rot and k_rot in some shapes */
							   .rope = { .mode = si % 2 && s[4] % 2 == 0 ? MHA_ROPE_HALF
											 : MHA_ROPE_NONE } };
					mha_observer obs = { .fn = ignore, .wanted = squares };
					const unsigned wanted = path == 2 ? squares : 0;
					const size_t est = mha_memory(&d, &cfg, wanted, f32);
					size_t peak;
					mha_status st;

					track_start();
					if (f32)
						st = mha_forward_f32(f[6], &d, &(mha_inputs_f32){ f[0], f[1], f[1] },
								     &(mha_weights_f32){ .W_Q = f[2], .W_K = f[3], .W_V = f[4], .W_O = f[5] },
								     &cfg, NULL);
					else
						st = mha_forward(m[6], &d, &(mha_inputs){ m[0], m[1], m[1] },
								 &(mha_weights){ .W_Q = m[2], .W_K = m[3], .W_V = m[4], .W_O = m[5] }, &cfg,
								 path == 2 ? &obs : NULL, NULL);
					peak = track_stop();
					ck_assert_int_eq(st, MHA_OK);
					if (getenv("MHA_MEMORY_VERBOSE"))
						fprintf(stderr, "%zux%zu, %zu heads (%zu kv), d_k %zu, d_v %zu, %s, "
							"path %d, %d threads: allocated %zu, estimated %zu (%.3f)\n",
							s[0], s[1], s[2], s[3], s[4], s[5], f32 ? "f32" : "f64",
							path, threads, peak, est, (double)est / (double)peak);
					ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096,
						      "%zux%zu, %zu heads (%zu kv), d_k %zu, d_v %zu, %s, path %d, "
						      "%d threads: allocated %zu, estimated %zu",
						      s[0], s[1], s[2], s[3], s[4], s[5], f32 ? "f32" : "f64", path,
						      threads, peak, est);
					lo = fmin(lo, (double)est / (double)peak);
					hi = fmax(hi, (double)est / (double)peak);
					if (peak >= 65536)
						hi_big = fmax(hi_big, (double)est / (double)peak);
					runs++;
				}
		for (int i = 0; i < 7; i++) {
			free(m[i]);
			free(f[i]);
		}
	}
	fprintf(stderr, "test_memory_measured: mha_memory / allocated peak from %.3f to %.3f over %d "
		"runs, at most %.3f from 64 KiB up (%s kernels)\n", lo, hi, runs, hi_big, mha_kernel());
}
END_TEST

/*
 * The run the issue measured at 3.2 times the estimate: 4000 queries, 16
 * heads, d_k = 1, float32, 2 threads; with weights, as mha_memory assumes.
 */
START_TEST(test_memory_measured_dk1)
{
	const size_t n = 4000, H = 16;
	const mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = H, .d_k_in = H, .d_v_in = H,
			     .heads = H, .d_k = 1, .d_v = 1, .d_out = H };
	float *x = malloc(n * H * sizeof(float)), *out = malloc(n * H * sizeof(float));
	float *W = malloc(H * H * sizeof(float));
	mha_config cfg = { .threads = 2 };
	size_t est, peak;

	for (size_t i = 0; i < n * H; i++)
		x[i] = (float)rnd();
	for (size_t i = 0; i < H * H; i++)
		W[i] = (float)rnd();
	if (track_works()) {
		est = mha_memory(&d, &cfg, 0, 1);
		track_start();
		ck_assert_int_eq(mha_forward_f32(out, &d, &(mha_inputs_f32){ x, x, x },
						 &(mha_weights_f32){ .W_Q = W, .W_K = W, .W_V = W, .W_O = W },
						 &cfg, NULL), MHA_OK);
		peak = track_stop();
		ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096, "%s kernels: allocated %zu, "
			      "estimated %zu", mha_kernel(), peak, est);
	}
	free(x);
	free(out);
	free(W);
}
END_TEST

/* what a batch allocates: at most mha_memory(), within a quarter, both paths and types */
START_TEST(test_memory_batch)
{
	const size_t B = 5, nq = 100, nkv = 130, dm = 16, H = 4;
	const mha_dims d = { .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .kv_heads = 2, .d_k = 4, .d_v = 4, .d_out = dm, .batch = B };
	double *x = rnd_matrix(B * nkv * dm), *W = rnd_matrix(dm * dm), *out = malloc(B * nq * dm * sizeof(double));
	float *fx = malloc(B * nkv * dm * sizeof(float)), *fW = malloc(dm * dm * sizeof(float));
	float *fout = malloc(B * nq * dm * sizeof(float));

	for (size_t i = 0; i < B * nkv * dm; i++)
		fx[i] = (float)x[i];
	for (size_t i = 0; i < dm * dm; i++)
		fW[i] = (float)W[i];
	if (track_works())
		for (int run = 0; run < 4; run++) {
			mha_config cfg = { .threads = 1 + run % 2, .exact = run == 2 };
			const size_t est = mha_memory(&d, &cfg, 0, run == 3);
			size_t peak;

			track_start();
			if (run == 3)
				ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ fx, fx, fx },
								 &(mha_weights_f32){ .W_Q = fW, .W_K = fW, .W_V = fW, .W_O = fW },
								 &cfg, NULL), MHA_OK);
			else
				ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x },
							     &(mha_weights){ .W_Q = W, .W_K = W, .W_V = W, .W_O = W },
							     &cfg, NULL, NULL), MHA_OK);
			peak = track_stop();
			ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096, "batch run %d: allocated %zu, "
				      "estimated %zu", run, peak, est);
		}
	free(x);
	free(W);
	free(out);
	free(fx);
	free(fW);
	free(fout);
}
END_TEST

/* threads beyond the cap or the work: the estimate and the run use the same, few */
START_TEST(test_threads_capped)
{
	double x[12] = { 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 1 }, out[12];
	const mha_dims d = { .n_q = 3, .n_kv = 3, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
			     .heads = 2, .d_k = 2, .d_v = 2 };
	mha_config one = { .threads = 1 }, many = { .threads = 100000 };
	size_t peak;

	/* two heads of one query block: two tasks, two threads at most */
	ck_assert_uint_eq(mha_memory(&d, &many, 0, 0), mha_memory(&d, &(mha_config){ .threads = 2 }, 0, 0));
	ck_assert_uint_lt(mha_memory(&d, &many, 0, 0), 2 * mha_memory(&d, &one, 0, 0));
	ck_assert_uint_lt(mha_memory(&d, &many, 0, 1), 1 << 20);
	if (!track_works())
		return;
	track_start();
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ x, x, x }, NULL, &many, NULL, NULL), MHA_OK);
	peak = track_stop();
	ck_assert_uint_le(peak, mha_memory(&d, &many, 0, 0));
}
END_TEST

START_TEST(test_names)
{
	for (int s = MHA_OK; s <= MHA_ERR_ROPE; s++) {
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
}
END_TEST

/* ---- the CLI's number text (cli/base/number.c), against printf's ---------- */

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

/* ---- the backward pass (mha_backward) ------------------------------------ */

/*
 * The case's scale: the largest entry of any of its gradients.  A gradient
 * that is zero in exact arithmetic (db_K: the softmax does not change when
 * every key's score moves alike, so Σ_j dS_ij = 0) comes out as the rounding
 * of the terms that cancel, which are of the case's size, not its own.
 */
static double grad_floor;

static double ref_grads_scale(const ref_grads *r, const mha_dims *d)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const double *m[] = { r->dxq, r->dxk, r->dxv, r->dQ, r->dK, r->dV };
	const size_t n[] = { d->n_q * d->d_q_in, d->n_kv * d->d_k_in, d->n_kv * d->d_v_in,
			     d->n_q * d->heads * d->d_k, d->n_kv * G * d->d_k, d->n_kv * G * d->d_v };
	double x = 0;

	for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++)
		for (size_t i = 0; i < n[k]; i++)
			x = fmax(x, fabs(m[k][i]));
	return x;
}

/* every difference within tol of the largest expected value (or of
 * grad_floor, the case's scale); no NaN */
static void grad_close(const char *what, const double *got, const double *want, size_t n, double tol)
{
	double maxabs = grad_floor, worst = 0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		maxabs = fmax(maxabs, fabs(want[i]));
	for (size_t i = 0; i < n; i++) {
		const double err = fabs(got[i] - want[i]) / (maxabs > 0 ? maxabs : 1);

		ck_assert_msg(isfinite(got[i]), "%s[%zu] is %g", what, i, got[i]);
		if (err > worst) {
			worst = err;
			at = i;
		}
	}
	ck_assert_msg(worst <= tol, "%s: max difference %.3g of the largest value at [%zu]: got "
		      "%.17g, want %.17g", what, worst, at, got[at], want[at]);
}

/* the gradients of a case, each array sized as mha.h says */
struct grad_set {
	mha_grads g;
	double *all[12];
	size_t n[12];
};

static void grads_alloc(struct grad_set *s, const mha_dims *d, size_t B)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t n[12] = { B * d->n_q * d->d_q_in, B * d->n_kv * d->d_k_in, B * d->n_kv * d->d_v_in,
			       d->d_q_in * d->heads * d->d_k, d->d_k_in * G * d->d_k,
			       d->d_v_in * G * d->d_v, d->heads * d->d_v * (d->d_out ? d->d_out : 1),
			       d->heads * d->d_k, G * d->d_k, G * d->d_v, d->d_out ? d->d_out : 1,
			       d->heads };

	for (int i = 0; i < 12; i++) {
		s->n[i] = n[i];
		s->all[i] = malloc(n[i] * sizeof(double));
		/* what the library must overwrite or leave: a NaN shows either way */
		for (size_t k = 0; k < n[i]; k++)
			s->all[i][k] = NAN;
	}
	s->g = (mha_grads){ s->all[0], s->all[1], s->all[2], s->all[3], s->all[4], s->all[5],
			    s->all[6], s->all[7], s->all[8], s->all[9], s->all[10], s->all[11] };
}

/* two runs' gradients, every array: the very same bits */
static int grads_same(const struct grad_set *a, const struct grad_set *b)
{
	for (int i = 0; i < 12; i++)
		if (a->n[i] != b->n[i] || memcmp(a->all[i], b->all[i], a->n[i] * sizeof(double)))
			return 0;
	return 1;
}

static void grads_free(struct grad_set *s)
{
	for (int i = 0; i < 12; i++)
		free(s->all[i]);
}

/* what the observer of a backward run saw: the last copy of each stage per head */
typedef struct gseen {
	double *m[MHA_GRAD_COUNT][9]; /* [stage][head + 1] */
	size_t rows[MHA_GRAD_COUNT], cols[MHA_GRAD_COUNT];
	int last;                      /* the stage before, for the order */
	int order_ok;
} gseen;

static int grecord(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows, size_t cols)
{
	gseen *sn = ctx;
	double **slot = &sn->m[s][head + 1];

	/* whole-model stages before and after the heads, head stages in enum order */
	free(*slot);
	*slot = malloc(rows * cols * sizeof(double));
	memcpy(*slot, m, rows * cols * sizeof(double));
	sn->rows[s] = rows;
	sn->cols[s] = cols;
	if (head >= 0 && (int)s <= sn->last && sn->last >= MHA_GRAD_HEAD_P &&
	    sn->last <= MHA_GRAD_HEAD_DK && (int)s != MHA_GRAD_HEAD_P)
		sn->order_ok = 0;
	sn->last = (int)s;
	return 0;
}

/* a backward observer that keeps nothing (allocates nothing) */
static int gignore(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx;
	(void)s;
	(void)head;
	(void)m;
	(void)rows;
	(void)cols;
	return 0;
}

static void gseen_free(gseen *sn)
{
	for (int s = 0; s < MHA_GRAD_COUNT; s++)
		for (int h = 0; h < 9; h++)
			free(sn->m[s][h]);
}

/*
 * Random cases (make_case: GQA, cross-attention, masks, causal with every
 * alignment, windows, kv_len, softcap, sinks, ALiBi, RoPE with tables and
 * positions, each scale, W_O or not, biases or not) against the reference
 * backward (ref.c), at 1e-12 of the largest value, dO random; watched (every
 * stage) and not (--exact), the same bits.  The fast path (nothing per head
 * watched) against the reference too, at 1e-12, with the whole-model stages
 * it hands over, and on 1, 2 and 3 threads the same bits.
 */
START_TEST(test_backward_against_reference)
{
	struct random_case c;
	mha_weights w;
	mha_inputs in;
	ref_grads r;
	struct grad_set a, b, e, t1, t3;
	gseen sn, sf;
	mha_grad_observer obs, fobs;
	mha_report rep, frep;
	mha_config exact, one, three;
	double *dout;
	size_t oc, G;
	char what[64];

	make_case(&c, (unsigned)_i);
	w = (mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	in = (mha_inputs){ c.xq, c.xk, c.xv };
	oc = mha_output_cols(&c.d, c.wo);
	G = c.d.kv_heads ? c.d.kv_heads : c.d.heads;
	dout = _i % 4 == 1 ? NULL : rnd_matrix(c.d.n_q * oc);
	grads_alloc(&a, &c.d, 1);
	grads_alloc(&b, &c.d, 1);
	grads_alloc(&e, &c.d, 1);
	grads_alloc(&t1, &c.d, 1);
	grads_alloc(&t3, &c.d, 1);
	memset(&sn, 0, sizeof(sn));
	memset(&sf, 0, sizeof(sf));
	sn.last = sf.last = -1;
	sn.order_ok = sf.order_ok = 1;
	obs = (mha_grad_observer){ .fn = grecord, .ctx = &sn, .wanted = ~0u };
	/* the fast path: whole-model stages only */
	fobs = (mha_grad_observer){ .fn = grecord, .ctx = &sf,
				    .wanted = MHA_STAGE_BIT(MHA_GRAD_DQ) | MHA_STAGE_BIT(MHA_GRAD_DK) |
					      MHA_STAGE_BIT(MHA_GRAD_DV) | MHA_STAGE_BIT(MHA_GRAD_DCONCAT) };
	exact = one = three = c.cfg;
	exact.exact = 1;
	one.threads = 1;
	three.threads = 3;
	ck_assert_int_eq(mha_backward(&a.g, dout, &c.d, &in, &w, &c.cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(mha_backward(&e.g, dout, &c.d, &in, &w, &exact, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_backward(&b.g, dout, &c.d, &in, &w, &c.cfg, &fobs, &frep), MHA_OK);
	ck_assert_int_eq(mha_backward(&t1.g, dout, &c.d, &in, &w, &one, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_backward(&t3.g, dout, &c.d, &in, &w, &three, NULL, NULL), MHA_OK);
	ck_assert_int_eq(ref_backward(&r, &c.d, &in, &w, &c.cfg, dout), 0);
	grad_floor = ref_grads_scale(&r, &c.d);
	ck_assert_int_eq(rep.fast_path, 0);
	ck_assert_int_eq(frep.fast_path, 1);
	ck_assert_uint_eq(frep.blocked_rows, rep.blocked_rows);
	ck_assert_int_eq(frep.first_blocked_head, rep.first_blocked_head);
	ck_assert_uint_eq(frep.first_blocked_row, rep.first_blocked_row);
	ck_assert(sn.order_ok);

#define GRAD(name, got, want, n) do { \
		snprintf(what, sizeof(what), "case %d %s", _i, name); \
		grad_close(what, got, want, n, RTOL); \
	} while (0)
	GRAD("dxq", a.g.dxq, r.dxq, c.d.n_q * c.d.d_q_in);
	GRAD("dxk", a.g.dxk, r.dxk, c.d.n_kv * c.d.d_k_in);
	GRAD("dxv", a.g.dxv, r.dxv, c.d.n_kv * c.d.d_v_in);
	if (c.W[0]) {
		GRAD("dW_Q", a.g.dW_Q, r.dW_Q, c.d.d_q_in * c.d.heads * c.d.d_k);
		GRAD("dW_K", a.g.dW_K, r.dW_K, c.d.d_k_in * G * c.d.d_k);
		GRAD("dW_V", a.g.dW_V, r.dW_V, c.d.d_v_in * G * c.d.d_v);
	} else {
		ck_assert(isnan(a.g.dW_Q[0])); /* no weight: left alone */
	}
	GRAD("db_Q", a.g.db_Q, r.db_Q, c.d.heads * c.d.d_k);
	GRAD("db_K", a.g.db_K, r.db_K, G * c.d.d_k);
	GRAD("db_V", a.g.db_V, r.db_V, G * c.d.d_v);
	if (c.wo) {
		GRAD("dW_O", a.g.dW_O, r.dW_O, c.d.heads * c.d.d_v * c.d.d_out);
		GRAD("db_O", a.g.db_O, r.db_O, c.d.d_out);
	}
	if (c.cfg.sinks)
		GRAD("dsinks", a.g.dsinks, r.dsinks, c.d.heads);
	GRAD("dQ", sn.m[MHA_GRAD_DQ][0], r.dQ, c.d.n_q * c.d.heads * c.d.d_k);
	GRAD("dK", sn.m[MHA_GRAD_DK][0], r.dK, c.d.n_kv * G * c.d.d_k);
	GRAD("dV", sn.m[MHA_GRAD_DV][0], r.dV, c.d.n_kv * G * c.d.d_v);
	/* the fast path: every gradient, and the whole-model stages, within RTOL */
	GRAD("fast dxq", b.g.dxq, r.dxq, c.d.n_q * c.d.d_q_in);
	GRAD("fast dxk", b.g.dxk, r.dxk, c.d.n_kv * c.d.d_k_in);
	GRAD("fast dxv", b.g.dxv, r.dxv, c.d.n_kv * c.d.d_v_in);
	if (c.W[0]) {
		GRAD("fast dW_Q", b.g.dW_Q, r.dW_Q, c.d.d_q_in * c.d.heads * c.d.d_k);
		GRAD("fast dW_K", b.g.dW_K, r.dW_K, c.d.d_k_in * G * c.d.d_k);
		GRAD("fast dW_V", b.g.dW_V, r.dW_V, c.d.d_v_in * G * c.d.d_v);
	}
	GRAD("fast db_Q", b.g.db_Q, r.db_Q, c.d.heads * c.d.d_k);
	GRAD("fast db_K", b.g.db_K, r.db_K, G * c.d.d_k);
	GRAD("fast db_V", b.g.db_V, r.db_V, G * c.d.d_v);
	if (c.wo) {
		GRAD("fast dW_O", b.g.dW_O, r.dW_O, c.d.heads * c.d.d_v * c.d.d_out);
		GRAD("fast db_O", b.g.db_O, r.db_O, c.d.d_out);
	}
	if (c.cfg.sinks)
		GRAD("fast dsinks", b.g.dsinks, r.dsinks, c.d.heads);
	GRAD("fast dQ", sf.m[MHA_GRAD_DQ][0], r.dQ, c.d.n_q * c.d.heads * c.d.d_k);
	GRAD("fast dK", sf.m[MHA_GRAD_DK][0], r.dK, c.d.n_kv * G * c.d.d_k);
	GRAD("fast dV", sf.m[MHA_GRAD_DV][0], r.dV, c.d.n_kv * G * c.d.d_v);
	ck_assert(sf.m[MHA_GRAD_DCONCAT][0] && !sf.m[MHA_GRAD_HEAD_DS][1]);
	/* any thread count, the same bits; watching whole stages changes nothing */
	ck_assert_msg(grads_same(&t1, &t3), "case %d: 1 and 3 threads differ", _i);
	ck_assert_msg(grads_same(&t1, &b), "case %d: the fast path watched differs", _i);
	for (size_t h = 0; h < c.d.heads; h++) {
		snprintf(what, sizeof(what), "case %d head %zu dS", _i, h);
		grad_close(what, sn.m[MHA_GRAD_HEAD_DS][h + 1], r.dS[h], c.d.n_q * c.d.n_kv, RTOL);
	}
	ck_assert_uint_eq(sn.rows[MHA_GRAD_HEAD_D], c.d.n_q);
	ck_assert_uint_eq(sn.cols[MHA_GRAD_HEAD_D], 1);
	ck_assert(!sn.m[MHA_GRAD_HEAD_DSCALED][1] == (c.cfg.softcap == 0));
	ck_assert(!sn.m[MHA_GRAD_DQ_ROT][0] == (c.cfg.rope.mode == MHA_ROPE_NONE));
#undef GRAD
	/* the plain path watched or not: the very same numbers */
	ck_assert_msg(grads_same(&a, &e), "case %d: the plain path watched differs", _i);
	ref_grads_free(&r);
	grads_free(&a);
	grads_free(&b);
	grads_free(&e);
	grads_free(&t1);
	grads_free(&t3);
	gseen_free(&sn);
	gseen_free(&sf);
	free(dout);
	free_case(&c);
}
END_TEST

/* L = Σ dout ∘ mha_forward(…) on the plain path */
static double loss(const double *dout, const mha_dims *d, const mha_inputs *in, const mha_weights *w,
		   const mha_config *cfg)
{
	const size_t B = d->batch ? d->batch : 1;
	const size_t n = B * d->n_q * mha_output_cols(d, w->W_O != NULL);
	double *out = malloc(n * sizeof(double)), s = 0;
	mha_config c = *cfg;

	c.exact = 1;
	ck_assert_int_eq(mha_forward(out, d, in, w, &c, NULL, NULL), MHA_OK);
	for (size_t i = 0; i < n; i++)
		s += dout[i] * out[i];
	free(out);
	return s;
}

/* every entry of v (n) nudged both ways: the central difference against grad */
static void check_fd(const char *what, double *v, size_t n, const double *grad, const double *dout,
		     const mha_dims *d, const mha_inputs *in, const mha_weights *w,
		     const mha_config *cfg)
{
	const double h = 1e-5;

	for (size_t i = 0; i < n; i++) {
		const double keep = v[i];
		double up, down, fd;

		v[i] = keep + h;
		up = loss(dout, d, in, w, cfg);
		v[i] = keep - h;
		down = loss(dout, d, in, w, cfg);
		v[i] = keep;
		fd = (up - down) / (2 * h);
		ck_assert_msg(fabs(fd - grad[i]) <= 1e-6 * (1 + fabs(fd)),
			      "%s[%zu]: finite difference %.12g, gradient %.12g", what, i, fd, grad[i]);
	}
}

/*
 * Finite differences on small cases, each option on: every input, weight,
 * bias and sink entry against (L(x+h) − L(x−h))/2h, L = Σ dout ∘ output.
 */
START_TEST(test_backward_finite_differences)
{
	const int k = _i;
	mha_dims d = { .n_q = 3, .n_kv = k % 2 ? 4 : 3, .d_q_in = 4, .d_k_in = k % 2 ? 3 : 4,
		       .d_v_in = k % 2 ? 3 : 4, .heads = 2, .kv_heads = k % 3 == 2 ? 1 : 2,
		       .d_k = 2, .d_v = 2, .d_out = 3 };
	const size_t G = d.kv_heads;
	double *xq, *xkv, *W[4], *b[4], *dout, sinks[2] = { 0.3, -0.5 }, slopes[2] = { 0.5, -0.25 };
	double bias[3 * 4];
	mha_config cfg = { 0 };
	mha_weights w;
	mha_inputs in;
	struct grad_set gs;

	rng_state = 777 + (uint64_t)k;
	xq = rnd_matrix(d.n_q * d.d_q_in);
	xkv = k % 2 ? rnd_matrix(d.n_kv * d.d_k_in) : xq;
	W[0] = rnd_matrix(d.d_q_in * d.heads * d.d_k);
	W[1] = rnd_matrix(d.d_k_in * G * d.d_k);
	W[2] = rnd_matrix(d.d_v_in * G * d.d_v);
	W[3] = rnd_matrix(d.heads * d.d_v * d.d_out);
	for (int i = 0; i < 4; i++)
		b[i] = rnd_matrix(i == 3 ? d.d_out : i == 0 ? d.heads * d.d_k : G * d.d_k);
	dout = rnd_matrix(d.n_q * d.d_out);
	for (size_t i = 0; i < 12; i++)
		bias[i] = rnd() * 0.5;
	switch (k % 7) {
	case 0: cfg.causal = MHA_CAUSAL_TOP_LEFT; cfg.softcap = 0.8; break;
	case 1: cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.sinks = sinks; break;
	case 2: cfg.window = (mha_window){ 1, 1, 0 }; cfg.alibi.on = 1; cfg.alibi.slopes = slopes; break;
	case 3: cfg.rope.mode = MHA_ROPE_HALF; cfg.rope.theta = 7; cfg.causal = MHA_CAUSAL_OFFSET;
		cfg.causal_offset = 1; break;
	case 4: cfg.rope.mode = MHA_ROPE_INTERLEAVED; cfg.mask.bias = bias; cfg.sinks = sinks;
		cfg.softcap = 2; break;
	case 5: cfg.kv_len = 2; cfg.alibi.on = 1; cfg.scale_mode = MHA_SCALE_VALUE; cfg.scale = 0.9; break;
	default: cfg.sinks = sinks; cfg.softcap = 1.5; cfg.rope.mode = MHA_ROPE_HALF; break;
	}
	/* the first seven on the fast path, the next seven on the plain one */
	cfg.exact = k >= 7;
	w = (mha_weights){ W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] };
	in = (mha_inputs){ xq, xkv, xkv };
	grads_alloc(&gs, &d, 1);
	if (k % 2 == 0) {
		/* self-attention, one array: its gradient is dxq + dxk + dxv */
		ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
		for (size_t i = 0; i < d.n_q * d.d_q_in; i++)
			gs.g.dxq[i] += gs.g.dxk[i] + gs.g.dxv[i];
		check_fd("dX", xq, d.n_q * d.d_q_in, gs.g.dxq, dout, &d, &in, &w, &cfg);
	} else {
		/* cross-attention, one X_kv for keys and values */
		ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
		for (size_t i = 0; i < d.n_kv * d.d_k_in; i++)
			gs.g.dxk[i] += gs.g.dxv[i];
		check_fd("dX", xq, d.n_q * d.d_q_in, gs.g.dxq, dout, &d, &in, &w, &cfg);
		check_fd("dX_kv", xkv, d.n_kv * d.d_k_in, gs.g.dxk, dout, &d, &in, &w, &cfg);
	}
	check_fd("dW_Q", W[0], d.d_q_in * d.heads * d.d_k, gs.g.dW_Q, dout, &d, &in, &w, &cfg);
	check_fd("dW_K", W[1], d.d_k_in * G * d.d_k, gs.g.dW_K, dout, &d, &in, &w, &cfg);
	check_fd("dW_V", W[2], d.d_v_in * G * d.d_v, gs.g.dW_V, dout, &d, &in, &w, &cfg);
	check_fd("dW_O", W[3], d.heads * d.d_v * d.d_out, gs.g.dW_O, dout, &d, &in, &w, &cfg);
	check_fd("db_Q", b[0], d.heads * d.d_k, gs.g.db_Q, dout, &d, &in, &w, &cfg);
	check_fd("db_K", b[1], G * d.d_k, gs.g.db_K, dout, &d, &in, &w, &cfg);
	check_fd("db_V", b[2], G * d.d_v, gs.g.db_V, dout, &d, &in, &w, &cfg);
	check_fd("db_O", b[3], d.d_out, gs.g.db_O, dout, &d, &in, &w, &cfg);
	if (cfg.sinks)
		check_fd("dsinks", sinks, d.heads, gs.g.dsinks, dout, &d, &in, &w, &cfg);
	grads_free(&gs);
	if (xkv != xq)
		free(xkv);
	free(xq);
	for (int i = 0; i < 4; i++) {
		free(W[i]);
		free(b[i]);
	}
	free(dout);
}
END_TEST

/*
 * A query row whose every key is masked (allow 0 over the row, a window
 * that misses every key, kv_len with an offset): its gradients are 0, never
 * NaN, even with huge scores and a sink; the rows around it are untouched
 * (against the reference).
 */
START_TEST(test_backward_fully_masked_rows)
{
	mha_dims d = { .n_q = 3, .n_kv = 3, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double x[6] = { 1e200, 2, 0.5, -1, 0.25, 0.75 }, sinks[1] = { 1.0 };
	unsigned char allow[9] = { 0, 0, 0, 1, 1, 0, 1, 1, 1 };
	mha_config cfg = { .mask.allow = allow, .sinks = sinks, .exact = _i };
	mha_inputs in = { x, x, x };
	struct grad_set gs;
	mha_report rep;
	ref_grads r;

	/* row 0's query is 1e200: its scores overflow, but no key is seen */
	x[0] = 1.0;
	grads_alloc(&gs, &d, 1);
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, !_i);
	ck_assert_uint_eq(rep.blocked_rows, 1);
	ck_assert_int_eq(ref_backward(&r, &d, &in, NULL, &cfg, NULL), 0);
	grad_floor = 0;
	/* row 0 of dxq: blocked, so 0 exactly */
	ck_assert(gs.g.dxq[0] == 0 && gs.g.dxq[1] == 0);
	grad_close("dxq", gs.g.dxq, r.dxq, 6, RTOL);
	grad_close("dxk", gs.g.dxk, r.dxk, 6, RTOL);
	grad_close("dxv", gs.g.dxv, r.dxv, 6, RTOL);
	grad_close("dsinks", gs.g.dsinks, r.dsinks, 1, RTOL);
	ref_grads_free(&r);

	/* a window that sees no key of row 2 (queries past the keys, offset) */
	cfg = (mha_config){ .causal = MHA_CAUSAL_OFFSET, .causal_offset = 5,
			    .window = { 1, 0, 0 }, .sinks = sinks, .exact = _i };
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	ck_assert_uint_eq(rep.blocked_rows, 3);
	for (int i = 0; i < 6; i++)
		ck_assert(gs.g.dxq[i] == 0 && gs.g.dxk[i] == 0 && gs.g.dxv[i] == 0);
	ck_assert(gs.g.dsinks[0] == 0);
	/* the same with a huge query: scores that overflow are not seen */
	x[0] = 1e200;
	ck_assert_int_eq(mha_backward(&gs.g, NULL, &d, &in, NULL, &cfg, NULL, &rep), MHA_OK);
	for (int i = 0; i < 6; i++)
		ck_assert(gs.g.dxq[i] == 0 && gs.g.dxk[i] == 0 && gs.g.dxv[i] == 0);
	grads_free(&gs);
}
END_TEST

/*
 * A batch: each sequence with its own inputs, key length and mask against
 * the reference run on it alone; the weights' and sinks' gradients are the
 * sums over the sequences.
 */
START_TEST(test_backward_batch)
{
	struct random_case c;
	const size_t B = 3;
	mha_dims d;
	mha_config cfg;
	mha_weights w;
	size_t kv_lens[3], oc, G, n_mask;
	double *xq, *xk, *xv, *dout, *bias = NULL, *sum[12] = { 0 };
	struct grad_set gs;
	char what[64];

	make_case(&c, (unsigned)_i);
	d = c.d;
	d.batch = B;
	cfg = c.cfg;
	cfg.exact = _i % 4 >= 2; /* half on the plain path, half on the fast one */
	G = d.kv_heads ? d.kv_heads : d.heads;
	oc = mha_output_cols(&d, c.wo);
	w = (mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	xq = batch_of(c.xq, d.n_q * d.d_q_in, B);
	xk = batch_of(c.xk, d.n_kv * d.d_k_in, B);
	xv = batch_of(c.xv, d.n_kv * d.d_v_in, B);
	dout = rnd_matrix(B * d.n_q * oc);
	if (_i % 2) {
		for (size_t b = 0; b < B; b++)
			kv_lens[b] = 1 + (b + (size_t)_i) % d.n_kv;
		cfg.kv_lens = kv_lens;
		cfg.kv_len = 0;
	}
	n_mask = d.n_q * d.n_kv * (cfg.mask.per_head ? d.heads : 1);
	if (cfg.mask.bias) {
		bias = batch_of(cfg.mask.bias, n_mask, B);
		cfg.mask.bias = bias;
		cfg.mask.per_batch = 1;
		if (cfg.mask.allow)
			cfg.mask.allow = NULL; /* one per batch only for the bias here */
	}
	grads_alloc(&gs, &d, B);
	ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &(mha_inputs){ xq, xk, xv }, &w, &cfg, NULL, NULL),
			 MHA_OK);
	for (size_t b = 0; b < B; b++) {
		mha_config one = cfg;
		mha_dims d1 = d;
		ref_grads r;
		const mha_inputs in1 = { xq + b * d.n_q * d.d_q_in, xk + b * d.n_kv * d.d_k_in,
					 xv + b * d.n_kv * d.d_v_in };

		d1.batch = 0;
		one.kv_lens = NULL;
		if (cfg.kv_lens)
			one.kv_len = kv_lens[b] == d.n_kv ? 0 : kv_lens[b];
		if (bias) {
			one.mask.bias = bias + b * n_mask;
			one.mask.per_batch = 0;
		}
		ck_assert_int_eq(ref_backward(&r, &d1, &in1, &w, &one, dout + b * d.n_q * oc), 0);
		grad_floor = fmax(b ? grad_floor : 0, ref_grads_scale(&r, &d1));
		snprintf(what, sizeof(what), "case %d seq %zu dxq", _i, b);
		grad_close(what, gs.g.dxq + b * d.n_q * d.d_q_in, r.dxq, d.n_q * d.d_q_in, RTOL);
		snprintf(what, sizeof(what), "case %d seq %zu dxk", _i, b);
		grad_close(what, gs.g.dxk + b * d.n_kv * d.d_k_in, r.dxk, d.n_kv * d.d_k_in, RTOL);
		snprintf(what, sizeof(what), "case %d seq %zu dxv", _i, b);
		grad_close(what, gs.g.dxv + b * d.n_kv * d.d_v_in, r.dxv, d.n_kv * d.d_v_in, RTOL);
		{
			double *parts[6] = { r.dW_Q, r.dW_K, r.dW_V, r.db_Q, r.db_K, r.db_V };
			const size_t n[6] = { d.d_q_in * d.heads * d.d_k, d.d_k_in * G * d.d_k,
					      d.d_v_in * G * d.d_v, d.heads * d.d_k, G * d.d_k, G * d.d_v };

			for (int k = 0; k < 6; k++) {
				if (!parts[k])
					continue;
				if (!sum[k])
					sum[k] = calloc(n[k], sizeof(double));
				for (size_t i = 0; i < n[k]; i++)
					sum[k][i] += parts[k][i];
			}
			if (c.wo) {
				if (!sum[6])
					sum[6] = calloc(d.heads * d.d_v * d.d_out, sizeof(double));
				for (size_t i = 0; i < d.heads * d.d_v * d.d_out; i++)
					sum[6][i] += r.dW_O[i];
			}
			if (cfg.sinks) {
				if (!sum[7])
					sum[7] = calloc(d.heads, sizeof(double));
				for (size_t i = 0; i < d.heads; i++)
					sum[7][i] += r.dsinks[i];
			}
		}
		ref_grads_free(&r);
	}
	if (sum[0]) {
		snprintf(what, sizeof(what), "case %d dW_Q", _i);
		grad_close(what, gs.g.dW_Q, sum[0], d.d_q_in * d.heads * d.d_k, RTOL);
		snprintf(what, sizeof(what), "case %d dW_V", _i);
		grad_close(what, gs.g.dW_V, sum[2], d.d_v_in * G * d.d_v, RTOL);
	}
	snprintf(what, sizeof(what), "case %d db_K", _i);
	grad_close(what, gs.g.db_K, sum[4], G * d.d_k, RTOL);
	if (sum[6]) {
		snprintf(what, sizeof(what), "case %d dW_O", _i);
		grad_close(what, gs.g.dW_O, sum[6], d.heads * d.d_v * d.d_out, RTOL);
	}
	if (sum[7]) {
		snprintf(what, sizeof(what), "case %d dsinks", _i);
		grad_close(what, gs.g.dsinks, sum[7], d.heads, RTOL);
	}
	for (int k = 0; k < 12; k++)
		free(sum[k]);
	grads_free(&gs);
	free(xq);
	free(xk);
	free(xv);
	free(dout);
	free(bias);
	free_case(&c);
}
END_TEST

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
	mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double x[4] = { 1, 2, 3, 4 }, dout[4] = { 1, NAN, 0, 0 };
	mha_inputs in = { x, x, x };
	mha_grads none = { 0 };
	struct grad_set gs;
	mha_grad_stage at = MHA_GRAD_HEAD_DS;
	mha_grad_observer obs = { .fn = gstop, .ctx = &at, .wanted = ~0u };
	mha_config cfg = { .softcap = -1 };
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
		const mha_config plain = { .exact = 1 };

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
	mha_dims d = { .n_q = sh[0], .n_kv = sh[1], .d_q_in = 6, .d_k_in = 5, .d_v_in = 5,
		       .heads = sh[2], .kv_heads = sh[3], .d_k = 4, .d_v = 3, .d_out = 5,
		       .batch = B == 2 ? 2 : 0 };
	const size_t G = sh[3];
	double *xq, *xk, *xv, *W[4], *bb[4], *dout, sinks[4] = { 0.3, -0.5, 2.0, 0.1 };
	double *bias;
	unsigned char *allow;
	size_t kv_lens[2] = { 50, 0 };
	mha_config cfg = { 0 }, exact, t[3];
	mha_weights w;
	mha_inputs in;
	struct grad_set p, f[3];
	mha_report rep;
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
	case 2: cfg.window = (mha_window){ 1, 10, 3 }; cfg.alibi.on = 1; break;
	case 3: cfg.mask.allow = allow; cfg.mask.bias = bias; cfg.mask.per_head = 1; cfg.sinks = sinks; break;
	case 4: cfg.causal = MHA_CAUSAL_OFFSET; cfg.causal_offset = -20; cfg.softcap = 0.7;
		cfg.rope.mode = MHA_ROPE_INTERLEAVED; break;
	case 5: cfg.kv_len = 90; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.window = (mha_window){ 1, 5, -1 };
		cfg.sinks = sinks; break;
	case 6: cfg.mask.allow = allow; cfg.alibi.on = 1; cfg.softcap = 3; cfg.rope.mode = MHA_ROPE_HALF; break;
	default: cfg.kv_lens = kv_lens; cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT; cfg.sinks = sinks;
		cfg.rope.mode = MHA_ROPE_HALF; cfg.softcap = 2; break;
	}
	w = (mha_weights){ W[0], W[1], W[2], W[3], bb[0], bb[1], bb[2], bb[3] };
	in = (mha_inputs){ xq, xk, xv };
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
	for (int i = 0; i < 12; i++) {
		if (i == 11 && !cfg.sinks)
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
	mha_dims d = { .n_q = 3, .n_kv = 4, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double xq[6] = { 0.5, -1, 0.25, 2, 1, 1 }, xk[8] = { 1, 0, 0, 1, -1, 0.5, 2, 2 };
	double xv[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, dout[6] = { 1, 0.5, -1, 2, 0.25, 1 };
	unsigned char allow[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	mha_config cfg = { .mask.allow = allow }, exact;
	const mha_inputs in = { xq, xk, xv };
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

/* n doubles rounded to floats (NULL stays NULL) */
static float *floats_of(const double *v, size_t n)
{
	float *f;

	if (!v)
		return NULL;
	f = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		f[i] = (float)v[i];
	return f;
}

/* n floats widened (NULL stays NULL) */
static double *doubles_of(const float *f, size_t n)
{
	double *v;

	if (!f)
		return NULL;
	v = malloc((n ? n : 1) * sizeof(double));
	for (size_t i = 0; i < n; i++)
		v[i] = f[i];
	return v;
}

/* float gradients sized as grad_set's, NaN where the library must write or leave */
struct grad_set_f32 {
	mha_grads_f32 g;
	float *all[12];
};

static void grads_alloc_f32(struct grad_set_f32 *s, const struct grad_set *like)
{
	for (int i = 0; i < 12; i++) {
		s->all[i] = malloc(like->n[i] * sizeof(float));
		for (size_t k = 0; k < like->n[i]; k++)
			s->all[i][k] = NAN;
	}
	s->g = (mha_grads_f32){ s->all[0], s->all[1], s->all[2], s->all[3], s->all[4], s->all[5],
				s->all[6], s->all[7], s->all[8], s->all[9], s->all[10], s->all[11] };
}

/* a case's inputs, weights (W_Q … W_O, b_Q … b_O) and dO rounded to
 * floats, and those floats widened back to doubles (NULL stays NULL) */
struct rounded_set {
	float *fx[3], *fw[8], *fdo;
	double *dx[3], *dw[8], *ddo;
};

static void rounded_of(struct rounded_set *r, const double *const x[3], const size_t nx[3],
		       const double *const w[8], const size_t nw[8], const double *dout, size_t ndo)
{
	for (int i = 0; i < 3; i++) {
		r->fx[i] = floats_of(x[i], nx[i]);
		r->dx[i] = doubles_of(r->fx[i], nx[i]);
	}
	for (int i = 0; i < 8; i++) {
		r->fw[i] = floats_of(w[i], nw[i]);
		r->dw[i] = doubles_of(r->fw[i], nw[i]);
	}
	r->fdo = floats_of(dout, ndo);
	r->ddo = doubles_of(r->fdo, ndo);
}

/* mha_backward on the widened doubles, and mha_backward_f32 on the floats */
static mha_status rounded_backward(const struct rounded_set *r, mha_grads *g, const mha_dims *d,
				   const mha_config *cfg)
{
	return mha_backward(g, r->ddo, d, &(mha_inputs){ r->dx[0], r->dx[1], r->dx[2] },
			    &(mha_weights){ r->dw[0], r->dw[1], r->dw[2], r->dw[3], r->dw[4],
					    r->dw[5], r->dw[6], r->dw[7] }, cfg, NULL, NULL);
}

static mha_status rounded_backward_f32(const struct rounded_set *r, mha_grads_f32 *g,
				       const mha_dims *d, const mha_config *cfg, mha_report *rep)
{
	return mha_backward_f32(g, r->fdo, d, &(mha_inputs_f32){ r->fx[0], r->fx[1], r->fx[2] },
				&(mha_weights_f32){ r->fw[0], r->fw[1], r->fw[2], r->fw[3], r->fw[4],
						    r->fw[5], r->fw[6], r->fw[7] }, cfg, rep);
}

static void rounded_free(struct rounded_set *r)
{
	for (int i = 0; i < 3; i++) {
		free(r->fx[i]);
		free(r->dx[i]);
	}
	for (int i = 0; i < 8; i++) {
		free(r->fw[i]);
		free(r->dw[i]);
	}
	free(r->fdo);
	free(r->ddo);
}

/*
 * mha_backward_f32 on the random cases (every option, as make_case makes
 * them): against mha_backward on the very same data at float32's
 * tolerance (1e-4 of the case's largest gradient), against mha_backward on
 * the values rounded to float at float arithmetic's (5e-5), the arrays of
 * absent weights left alone, and 1 and 3 threads the same bits.
 */
START_TEST(test_backward_f32)
{
	static const char *const names[12] = { "dxq", "dxk", "dxv", "dW_Q", "dW_K", "dW_V", "dW_O",
					       "db_Q", "db_K", "db_V", "db_O", "dsinks" };
	struct random_case c;
	struct grad_set full, rounded;
	struct grad_set_f32 f1, f3;
	mha_config one, three;
	mha_report rep;
	size_t oc, G, nx[3], nw[8];
	double *dout, scale = 0;
	struct rounded_set rs;
	char what[64];

	make_case(&c, (unsigned)_i);
	oc = mha_output_cols(&c.d, c.wo);
	G = c.d.kv_heads ? c.d.kv_heads : c.d.heads;
	nx[0] = c.d.n_q * c.d.d_q_in;
	nx[1] = c.d.n_kv * c.d.d_k_in;
	nx[2] = c.d.n_kv * c.d.d_v_in;
	nw[0] = c.d.d_q_in * c.d.heads * c.d.d_k;
	nw[1] = c.d.d_k_in * G * c.d.d_k;
	nw[2] = c.d.d_v_in * G * c.d.d_v;
	nw[3] = c.d.heads * c.d.d_v * oc;
	nw[4] = c.d.heads * c.d.d_k;
	nw[5] = G * c.d.d_k;
	nw[6] = G * c.d.d_v;
	nw[7] = oc;
	dout = _i % 4 == 1 ? NULL : rnd_matrix(c.d.n_q * oc);
	rounded_of(&rs, (const double *const[3]){ c.xq, c.xk, c.xv }, nx,
		   (const double *const[8]){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2],
					     c.b[3] }, nw, dout, c.d.n_q * oc);
	grads_alloc(&full, &c.d, 1);
	grads_alloc(&rounded, &c.d, 1);
	grads_alloc_f32(&f1, &full);
	grads_alloc_f32(&f3, &full);
	one = three = c.cfg;
	one.threads = 1;
	three.threads = 3;
	ck_assert_int_eq(mha_backward(&full.g, dout, &c.d, &(mha_inputs){ c.xq, c.xk, c.xv },
				      &(mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1],
						      c.b[2], c.b[3] }, &c.cfg, NULL, NULL), MHA_OK);
	ck_assert_int_eq(rounded_backward(&rs, &rounded.g, &c.d, &one), MHA_OK);
	{
		const int tracked = track_works();

		if (tracked)
			track_start();
		ck_assert_int_eq(rounded_backward_f32(&rs, &f1.g, &c.d, &one, &rep), MHA_OK);
		if (tracked) {
			/* floats: within what mha_backward_memory says for doubles */
			const size_t peak = track_stop(), bound = mha_backward_memory(&c.d, &one, 0);

			ck_assert_msg(peak <= bound, "case %d: f32 peak %zu above the bound %zu", _i,
				      peak, bound);
		}
		ck_assert_int_eq(rounded_backward_f32(&rs, &f3.g, &c.d, &three, NULL), MHA_OK);
	}
	ck_assert_int_eq(rep.fast_path, 1);
	/* the case's scale: its largest gradient of an input */
	for (int i = 0; i < 3; i++)
		for (size_t k = 0; k < full.n[i]; k++)
			scale = fmax(scale, fabs(full.all[i][k]));
	for (int i = 0; i < 12; i++) {
		const int absent = (i >= 3 && i <= 5 && !c.W[i - 3]) || ((i == 6 || i == 10) && !c.wo) ||
				   (i == 11 && !c.cfg.sinks);
		double *widened = doubles_of(f1.all[i], full.n[i]);

		ck_assert_msg(!memcmp(f1.all[i], f3.all[i], full.n[i] * sizeof(float)),
			      "case %d %s: 1 and 3 threads differ", _i, names[i]);
		if (absent) {
			ck_assert_msg(isnan(f1.all[i][0]), "case %d %s: written", _i, names[i]);
			free(widened);
			continue;
		}
		grad_floor = scale;
		/* float arithmetic on the same floats: each gradient is a chain of
		 * sums of up to a few hundred terms (n, d, d_model here), each term
		 * off by a few 2^-24 and the exponent of P by |score|·2^-24: 5e-5
		 * of the largest gradient (the worst of the 300 cases, on every
		 * kernel width, is 2.0e-5, dW_K of case 253) */
		snprintf(what, sizeof(what), "case %d f32 %s against f64 on its floats", _i, names[i]);
		grad_close(what, widened, rounded.all[i], full.n[i], 5e-5);
		snprintf(what, sizeof(what), "case %d f32 %s", _i, names[i]);
		grad_close(what, widened, full.all[i], full.n[i], 1e-4);
		free(widened);
	}
	rounded_free(&rs);
	for (int i = 0; i < 12; i++) {
		free(f1.all[i]);
		free(f3.all[i]);
	}
	grads_free(&full);
	grads_free(&rounded);
	free(dout);
	free_case(&c);
}
END_TEST

/*
 * mha_backward_f32 where a task is a whole key/value head (4 of them or
 * more: one pass, each task's dK and dV in a block of its own), on sizes
 * whose rows of floats end inside a cache line (n_kv·d_k·4 bytes not a
 * multiple of 64), cross-attention and GQA: against mha_backward on the
 * same floats widened at float arithmetic's 5e-5 of the largest gradient,
 * 1 and 2 threads the same bits, the peak within mha_backward_memory.
 */
START_TEST(test_backward_f32_one_pass)
{
	static const size_t shapes[][6] = {
		/* n_q, n_kv, H, G, d_k, d_v */
		{ 37, 29, 4, 4, 3, 5 }, { 101, 99, 8, 4, 5, 3 }, { 5, 131, 4, 4, 7, 1 },
	};
	const size_t *sh = shapes[_i];
	const mha_dims d = { .n_q = sh[0], .n_kv = sh[1], .d_q_in = 6, .d_k_in = 5, .d_v_in = 7,
			     .heads = sh[2], .kv_heads = sh[3], .d_k = sh[4], .d_v = sh[5],
			     .d_out = 4 };
	const size_t nx[3] = { d.n_q * d.d_q_in, d.n_kv * d.d_k_in, d.n_kv * d.d_v_in };
	const size_t nw[8] = { d.d_q_in * d.heads * d.d_k, d.d_k_in * sh[3] * d.d_k,
			       d.d_v_in * sh[3] * d.d_v, d.heads * d.d_v * d.d_out,
			       d.heads * d.d_k, sh[3] * d.d_k, sh[3] * d.d_v, d.d_out };
	double *v[12], scale = 0;
	struct rounded_set rs;
	struct grad_set want;
	struct grad_set_f32 f1, f2;
	mha_config one = { .threads = 1 }, two = { .threads = 2 };
	mha_report rep;
	char what[64];

	rng_state = 977 + (uint64_t)_i;
	for (int i = 0; i < 12; i++)
		v[i] = rnd_matrix(i < 3 ? nx[i] : i < 11 ? nw[i - 3] : d.n_q * d.d_out);
	rounded_of(&rs, (const double *const *)v, nx, (const double *const *)v + 3, nw, v[11],
		   d.n_q * d.d_out);
	for (int i = 0; i < 12; i++)
		free(v[i]);
	grads_alloc(&want, &d, 1);
	grads_alloc_f32(&f1, &want);
	grads_alloc_f32(&f2, &want);
	ck_assert_int_eq(rounded_backward(&rs, &want.g, &d, &one), MHA_OK);
	{
		const int tracked = track_works();

		if (tracked)
			track_start();
		ck_assert_int_eq(rounded_backward_f32(&rs, &f1.g, &d, &one, &rep), MHA_OK);
		if (tracked) {
			const size_t peak = track_stop(), bound = mha_backward_memory(&d, &one, 0);

			ck_assert_msg(peak <= bound, "shape %d: f32 peak %zu above the bound %zu", _i,
				      peak, bound);
		}
		ck_assert_int_eq(rounded_backward_f32(&rs, &f2.g, &d, &two, NULL), MHA_OK);
	}
	ck_assert_int_eq(rep.fast_path, 1);
	for (int i = 0; i < 3; i++)
		for (size_t k = 0; k < want.n[i]; k++)
			scale = fmax(scale, fabs(want.all[i][k]));
	grad_floor = scale;
	for (int i = 0; i < 11; i++) {
		double *widened = doubles_of(f1.all[i], want.n[i]);

		ck_assert_msg(!memcmp(f1.all[i], f2.all[i], want.n[i] * sizeof(float)),
			      "shape %d gradient %d: 1 and 2 threads differ", _i, i);
		snprintf(what, sizeof(what), "shape %d f32 gradient %d", _i, i);
		grad_close(what, widened, want.all[i], want.n[i], 5e-5);
		free(widened);
	}
	rounded_free(&rs);
	for (int i = 0; i < 12; i++) {
		free(f1.all[i]);
		free(f2.all[i]);
	}
	grads_free(&want);
}
END_TEST

/* mha_backward_f32's refusals: NULLs, bad dims, a gradient too large for a float */
START_TEST(test_backward_f32_errors)
{
	const mha_dims d = { .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
			     .d_k = 2, .d_v = 2 };
	mha_dims bad = d;
	const float x[4] = { 1, 2, 3, 4 };
	float dout[4] = { 1, 1, 1, 1 }, dx[4], dxk[4];
	const mha_inputs_f32 in = { x, x, x };
	mha_grads_f32 g = { .dxq = dx };

	ck_assert_int_eq(mha_backward_f32(NULL, NULL, &d, &in, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, NULL, &in, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &d, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &d, &(mha_inputs_f32){ x, NULL, x }, NULL, NULL,
					  NULL), MHA_ERR_NULL);
	bad.n_q = 0;
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &bad, &in, NULL, NULL, NULL), MHA_ERR_DIM);
	/* a shape refused before a float is read: x holds 4, not 6 */
	bad = d;
	bad.d_q_in = 3;
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &bad, &in, NULL, NULL, NULL), MHA_ERR_SHAPE);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &d, &in, NULL, NULL, NULL), MHA_OK);
	/* dxv = Pᵀ·dO: 2e38 from each of two rows is past FLT_MAX, not past DBL_MAX */
	dout[0] = dout[1] = dout[2] = dout[3] = 2e38f;
	g.dxk = dxk;
	ck_assert_int_eq(mha_backward_f32(&(mha_grads_f32){ .dxv = dxk }, dout, &d, &in, NULL, NULL,
					  NULL), MHA_ERR_RANGE);
	dout[0] = NAN;
	ck_assert_int_eq(mha_backward_f32(&g, dout, &d, &in, NULL, NULL, NULL), MHA_ERR_RANGE);
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
	mha_weights w;
	struct grad_set gs;
	gseen sn;
	mha_grad_observer obs;
	mha_report rep;
	size_t peak, bound;
	double *dout;

	if (!track_works())
		return;
	make_case(&c, (unsigned)_i);
	c.cfg.exact = _i % 3 == 2;
	c.cfg.threads = 1 + _i % 2;
	w = (mha_weights){ c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	grads_alloc(&gs, &c.d, 1);
	memset(&sn, 0, sizeof(sn));
	obs = (mha_grad_observer){ .fn = gignore, .ctx = &sn, .wanted = _i % 3 == 0 ? ~0u : 0 };
	dout = rnd_matrix(c.d.n_q * mha_output_cols(&c.d, c.wo));
	track_start();
	ck_assert_int_eq(mha_backward(&gs.g, dout, &c.d, &(mha_inputs){ c.xq, c.xk, c.xv }, &w, &c.cfg,
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

/* the library's own (lib/kernel.h, not exported by libmha.so; libmha.a has it) */
int mha_threads(const mha_config *cfg);

/*
 * C = A·B with A given as A or as Aᵀ (ta), B as B or Bᵀ (tb): the same
 * sums in the same order, so the four agree bit for bit, on 1 and 2
 * threads; and with a plain sum to rounding.  Shapes past one strip, one
 * (MC, KC) block and one panel of B, with ragged edges.
 */
START_TEST(test_gemm_transposed)
{
	static const size_t shapes[][3] = { { 1, 1, 1 }, { 7, 17, 5 }, { 97, 33, 300 },
					    { 200, 70, 513 }, { 13, 4100, 9 } };
	const int f32 = _i;
	const size_t es = f32 ? sizeof(float) : sizeof(double);

	rng_state = 77;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		double *a = rnd_matrix(m * k), *b = rnd_matrix(k * n), *bias = rnd_matrix(n);
		char *A = malloc(m * k * es), *At = malloc(m * k * es), *B = malloc(k * n * es);
		char *Bt = malloc(k * n * es), *Bias = malloc(n * es), *C[8];

		for (size_t i = 0; i < m; i++)
			for (size_t p = 0; p < k; p++) {
				if (f32) {
					((float *)A)[i * k + p] = (float)a[i * k + p];
					((float *)At)[p * m + i] = (float)a[i * k + p];
				} else {
					((double *)A)[i * k + p] = a[i * k + p];
					((double *)At)[p * m + i] = a[i * k + p];
				}
			}
		for (size_t p = 0; p < k; p++)
			for (size_t j = 0; j < n; j++) {
				if (f32) {
					((float *)B)[p * n + j] = (float)b[p * n + j];
					((float *)Bt)[j * k + p] = (float)b[p * n + j];
				} else {
					((double *)B)[p * n + j] = b[p * n + j];
					((double *)Bt)[j * k + p] = b[p * n + j];
				}
			}
		for (size_t j = 0; j < n; j++) {
			if (f32)
				((float *)Bias)[j] = (float)bias[j];
			else
				((double *)Bias)[j] = bias[j];
		}
		for (int v = 0; v < 8; v++) {
			const int ta = v & 1, tb = (v >> 1) & 1, threads = v < 4 ? 1 : 2;
			struct mha_gemm g = { .m = m, .n = n, .k = k, .A = ta ? At : A, .B = tb ? Bt : B,
					       .bias = Bias, .lda = ta ? m : k, .ldb = tb ? k : n,
					       .ldc = n, .threads = threads, .ta = ta, .tb = tb };

			C[v] = malloc(m * n * es);
			g.C = C[v];
			mha_pick_kernels(f32)->gemm(&g);
			ck_assert_int_eq(g.failed, 0);
			ck_assert_msg(memcmp(C[v], C[0], m * n * es) == 0,
				      "%s (%zu, %zu, %zu) ta %d tb %d threads %d: not the same bits",
				      f32 ? "f32" : "f64", m, n, k, ta, tb, threads);
		}
		for (size_t i = 0; i < m; i++)
			for (size_t j = 0; j < n; j++) {
				double want = bias[j], mag = fabs(bias[j]);
				const double got = f32 ? ((float *)C[0])[i * n + j] : ((double *)C[0])[i * n + j];

				for (size_t p = 0; p < k; p++) {
					const double ap = f32 ? (float)a[i * k + p] : a[i * k + p];
					const double bp = f32 ? (float)b[p * n + j] : b[p * n + j];

					want += ap * bp;
					mag += fabs(ap * bp);
				}
				ck_assert_msg(fabs(got - want) <= (f32 ? 1e-6 : 1e-14) * mag,
					      "(%zu, %zu, %zu) C[%zu][%zu] = %.17g, want %.17g", m, n, k, i,
					      j, got, want);
			}
		for (int v = 0; v < 8; v++)
			free(C[v]);
		free(a);
		free(b);
		free(bias);
		free(A);
		free(At);
		free(B);
		free(Bt);
		free(Bias);
	}
}
END_TEST

/*
 * mha_gemm's nonfinite flag, which spares the callers a pass over C: 0
 * when every stored entry is finite, 1 when one is not -- an inf or a nan
 * in A or B, a sum past the largest value, an infinite bias -- wherever
 * it lands (first and last rows and columns, across the KC panels, the MC
 * row blocks and the NR strips, a partial last tile), each kernel, 1 and
 * 2 threads, A and B as given or transposed.
 */
START_TEST(test_gemm_nonfinite)
{
	static const size_t shapes[][3] = { { 1, 1, 1 }, { 7, 17, 5 }, { 200, 70, 300 } };
	const int f32 = _i;
	const size_t es = f32 ? sizeof(float) : sizeof(double);
	const double huge = f32 ? 1e38 : 1e308;
	char *saved = env_save("MHA_KERNEL");

	rng_state = 91;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		char *A = malloc(m * k * es), *B = malloc(k * n * es), *Bias = malloc(n * es);
		char *C = malloc(m * n * es);
		/* (row, column) of C to spoil: first, last, and past the blocks' edges */
		const size_t at[][2] = { { 0, 0 }, { m - 1, n - 1 }, { m / 2, n / 3 },
					 { m > 97 ? 97 : 0, n > 16 ? 16 : 0 } };

#define SET(M, i, v) (f32 ? (void)(((float *)(M))[i] = (float)(v)) : (void)(((double *)(M))[i] = (v)))
#define GET(M, i) (f32 ? (double)((float *)(M))[i] : ((double *)(M))[i])
		for (size_t i = 0; i < m * k; i++)
			SET(A, i, rnd());
		for (size_t i = 0; i < k * n; i++)
			SET(B, i, rnd());
		for (size_t j = 0; j < n; j++)
			SET(Bias, j, rnd());
		for (size_t kn = 0; kn < sizeof(kernel_names) / sizeof(kernel_names[0]); kn++)
			for (int threads = 1; threads <= 2; threads++)
				for (int spoil = -1; spoil < 5; spoil++)
					for (size_t w = 0; w < (spoil < 0 ? 1 : sizeof at / sizeof at[0]); w++) {
						const size_t i = at[w][0], j = at[w][1], p = k - 1;
						struct mha_gemm g = { .m = m, .n = n, .k = k, .A = A, .B = B,
								       .bias = Bias, .lda = k, .ldb = n,
								       .ldc = n, .C = C, .threads = threads };
						const double ka = GET(A, i * k + p), ka0 = GET(A, i * k);
						const double kb = GET(B, p * n + j), kbias = GET(Bias, j);
						int want = spoil >= 0;

						/* 0: nan in A; 1: inf in B; 2: A·B past the largest value;
						 * 3: an infinite bias; 4: -inf in A's first column */
						if (spoil == 0)
							SET(A, i * k + p, NAN);
						else if (spoil == 1)
							SET(B, p * n + j, INFINITY);
						else if (spoil == 2) {
							SET(A, i * k + p, huge);
							SET(B, p * n + j, huge);
						} else if (spoil == 3)
							SET(Bias, j, -INFINITY);
						else if (spoil == 4)
							SET(A, i * k, -INFINITY);
						setenv("MHA_KERNEL", kernel_names[kn], 1);
						mha_pick_kernels(f32)->gemm(&g);
						ck_assert_int_eq(g.failed, 0);
						ck_assert_msg(g.nonfinite == want,
							      "%s %s (%zu, %zu, %zu), %d threads, spoil %d at "
							      "(%zu, %zu): nonfinite %d, want %d",
							      kernel_names[kn], f32 ? "f32" : "f64", m, n, k, threads,
							      spoil, i, j, g.nonfinite, want);
						if (want)
							ck_assert(!isfinite(GET(C, i * n + j)));
						SET(A, i * k, ka0);
						SET(A, i * k + p, ka);
						SET(B, p * n + j, kb);
						SET(Bias, j, kbias);
					}
#undef SET
#undef GET
		free(A);
		free(B);
		free(Bias);
		free(C);
	}
	env_restore("MHA_KERNEL", saved);
	free(saved);
}
END_TEST

/* the CPUs this process may run on, as sched_getaffinity counts them */
static int cpus_allowed(void)
{
	cpu_set_t set;

	ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
	return CPU_COUNT(&set) < 4096 ? CPU_COUNT(&set) : 4096;
}

/*
 * The default thread count: cfg->threads, else OMP_NUM_THREADS read as
 * OpenMP reads it, else the CPUs of the affinity mask; capped at 4096.
 */
START_TEST(test_threads_default)
{
	static const struct {
		const char *env; /* NULL: unset */
		int want;        /* 0: the CPUs allowed */
	} cases[] = {
		{ NULL, 0 }, { "2", 2 }, { " 3 ", 3 }, { "4,2", 4 }, { "5, 1", 5 }, { "100000", 4096 },
		{ "99999999999999999999999", 4096 }, { "0", 0 }, { "", 0 }, { "abc", 0 },
		{ "2x", 0 }, { "-3", 0 }, { ",2", 0 },
	};
	char *saved = env_save("OMP_NUM_THREADS");

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const int want = cases[i].want ? cases[i].want : cpus_allowed();

		if (cases[i].env)
			setenv("OMP_NUM_THREADS", cases[i].env, 1);
		else
			unsetenv("OMP_NUM_THREADS");
		ck_assert_msg(mha_threads(&(mha_config){ 0 }) == want, "OMP_NUM_THREADS='%s': %d threads, not %d",
			      cases[i].env ? cases[i].env : "(unset)", mha_threads(&(mha_config){ 0 }), want);
		/* cfg->threads first, whatever the environment */
		ck_assert_int_eq(mha_threads(&(mha_config){ .threads = 3 }), 3);
		ck_assert_int_eq(mha_threads(&(mha_config){ .threads = 100000 }), 4096);
	}
	env_restore("OMP_NUM_THREADS", saved);
	free(saved);
}
END_TEST

/* ---- the thread team: several callers at once, and fork ---------------- */

/* the threads of this process (Linux: /proc/self/task), 0 when unknown */
static int threads_now(void)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!dir)
		return 0;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * Every pthread_create of this program and libmha.a goes through this
 * (-Wl,--wrap=pthread_create): threads_allowed >= 0 lets only that many
 * more start, the rest failing as when a system is out of threads.
 */
int __real_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

static int threads_allowed = -1;

int __wrap_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (threads_allowed == 0)
		return EAGAIN;
	if (threads_allowed > 0)
		threads_allowed--;
	return __real_pthread_create(id, attr, fn, arg);
}

/* one problem several threads compute at once, each its own output */
struct concurrent {
	const mha_dims *d;
	const mha_inputs *in;
	const mha_weights *w;
	const double *want; /* the one-thread bits */
	size_t n;           /* elements of the output */
	int threads, rounds, differ;
};

static void *concurrent_calls(void *p)
{
	struct concurrent *c = p;
	double *out = malloc(c->n * sizeof(double));
	const mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT, .threads = c->threads };

	for (int r = 0; r < c->rounds && out; r++) {
		memset(out, 0, c->n * sizeof(double));
		if (mha_forward(out, c->d, c->in, c->w, &cfg, NULL, NULL) != MHA_OK ||
		    memcmp(out, c->want, c->n * sizeof(double)))
			c->differ++;
	}
	if (!out)
		c->differ++;
	free(out);
	return NULL;
}

/*
 * mha_forward from three threads at once, each asking for 2 threads: one
 * gets the team, the others run alone (mha.h), all the same bits as one
 * thread and close to the reference.  Then a child of fork, with the
 * parent's workers gone, computes them again on threads of its own.
 */
START_TEST(test_concurrent_calls)
{
	const size_t n = 300, dm = 64, H = 4;
	double *x = rnd_matrix(n * dm), *W[4], *want = malloc(n * dm * sizeof(double));
	const mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
	const mha_inputs in = { x, x, x };
	mha_weights w;
	const mha_config cfg = { .causal = MHA_CAUSAL_TOP_LEFT, .threads = 1 };
	struct concurrent c[3];
	pthread_t id[2];
	ref_result r;
	pid_t child;
	int status;

	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(dm * dm);
	w = (mha_weights){ .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
	ck_assert_int_eq(mha_forward(want, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
	ref_forward(&r, &d, &in, &w, &cfg);
	check_close("one thread", want, r.output, n * dm);
	for (int t = 0; t < 3; t++)
		c[t] = (struct concurrent){ &d, &in, &w, want, n * dm, 2, 20, 0 };
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_create(&id[t], NULL, concurrent_calls, &c[t]), 0);
	concurrent_calls(&c[2]);
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_join(id[t], NULL), 0);
	for (int t = 0; t < 3; t++)
		ck_assert_msg(!c[t].differ, "caller %d: %d of 20 calls not the one-thread bits", t,
			      c[t].differ);
	/* the team's worker stays, parked, for the next call (here, or none at all) */
	ck_assert(threads_now() == 0 || threads_now() >= 2);

	/* the team has been used: a child of fork starts its own */
	fflush(NULL); /* the child's exit() flushes nothing of ours twice */
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		c[0].differ = 0;
		concurrent_calls(&c[0]);
		/* _exit: Check's own files are the parent's (the worker is left unjoined) */
		_exit(c[0].differ ? 1 : threads_now() == 0 || threads_now() == 2 ? 0 : 2);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child of fork: status %d", status);
	ref_free(&r);
	for (int i = 0; i < 4; i++)
		free(W[i]);
	free(x);
	free(want);
}
END_TEST

/*
 * Threads that cannot be started: the team runs with those it has (none,
 * or one of three), and the numbers are the same bits.  In a child of
 * fork, whose team starts empty whatever the tests before did.
 */
START_TEST(test_threads_refused)
{
	const size_t n = 300, dm = 64, H = 4;
	double *x = rnd_matrix(n * dm), *W[4], *want = malloc(n * dm * sizeof(double));
	const mha_dims d = { .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
	const mha_inputs in = { x, x, x };
	mha_weights w;
	pid_t child;
	int status;

	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(dm * dm);
	w = (mha_weights){ .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
	ck_assert_int_eq(mha_forward(want, &d, &in, &w, &(mha_config){ .causal = MHA_CAUSAL_TOP_LEFT,
								     .threads = 1 }, NULL, NULL),
			 MHA_OK);
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		struct concurrent c = { &d, &in, &w, want, n * dm, 2, 3, 0 };
		int bad = 0;

		threads_allowed = 0; /* none: the caller alone */
		concurrent_calls(&c);
		bad |= c.differ || threads_now() > 1;
		threads_allowed = 1; /* one of the three 4 threads want */
		c.threads = 4;
		concurrent_calls(&c);
		bad |= c.differ || (threads_now() && threads_now() != 2);
		_exit(bad);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "threads refused: not the one-thread bits, or threads started (status %d)", status);
	for (int i = 0; i < 4; i++)
		free(W[i]);
	free(x);
	free(want);
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
	tcase_add_test(hand, test_report_path_and_offset);
	tcase_add_test(hand, test_fully_masked_row);
	tcase_add_test(hand, test_sinks_by_hand);
	tcase_add_test(hand, test_alibi_slopes);
	tcase_add_test(hand, test_alibi_by_hand);
	tcase_add_test(hand, test_alibi_overflow);
	tcase_add_test(hand, test_not_finite_in_blocks);
	tcase_add_test(hand, test_rope_by_hand);
	tcase_add_test(hand, test_rope_apply_and_errors);
	tcase_add_test(hand, test_softcap_and_scale_modes);
	tcase_add_test(hand, test_grouped_query_mapping);
	tcase_add_test(hand, test_output_projection);
	tcase_add_test(hand, test_per_head_mask);
	tcase_add_loop_test(ref, test_against_reference, 0, 300);
	tcase_add_test(ref, test_large_against_reference);
	tcase_add_test(ref, test_fast_path_blocks);
	tcase_add_loop_test(ref, test_stream_groups, 0, 11);
	tcase_add_test(ref, test_stream_range);
	tcase_add_test(ref, test_stream_policy);
	tcase_add_test(ref, test_extremes_both_paths);
	tcase_add_test(ref, test_projection_partial_sums);
	tcase_add_loop_test(ref, test_batch_against_reference, 0, 60);
	tcase_add_test(ref, test_batch_fast_blocks);
	tcase_add_test(ref, test_exp_accuracy);
	tcase_add_test(ref, test_batch_rope_alibi);
	tcase_add_test(hand, test_batch_mask_by_hand);
	tcase_add_test(hand, test_batch_fast_observer);
	tcase_add_test(ref, test_memory_batch);
	tcase_set_timeout(ref, 60);
	tcase_add_test(err, test_errors);
	tcase_add_test(err, test_names);
	tcase_add_test(err, test_memory_estimate);
	tcase_add_test(ref, test_memory_measured);
	tcase_add_test(ref, test_memory_measured_dk1);
	tcase_add_test(ref, test_big_alloc);
	tcase_add_test(err, test_threads_capped);
	tcase_add_test(ref, test_concurrent_calls);
	tcase_add_test(ref, test_threads_refused);
	tcase_add_test(err, test_threads_default);
	tcase_add_loop_test(err, test_gemm_transposed, 0, 2);
	tcase_add_loop_test(err, test_gemm_nonfinite, 0, 2);
	tcase_add_test(err, test_shortest_text);
	/* test_shortest_text checks 300000 numbers: about a second on a quiet
	 * machine, past Check's default 4 s on two busy cores */
	tcase_set_timeout(err, 60);
	suite_add_tcase(s, hand);
	suite_add_tcase(s, ref);
	suite_add_tcase(s, err);
	{
		/* CK_RUN_CASE=backward runs these alone (make test-backward) */
		TCase *bw = tcase_create("backward");

		tcase_add_loop_test(bw, test_backward_against_reference, 0, 300);
		tcase_add_loop_test(bw, test_backward_finite_differences, 0, 14);
		tcase_add_loop_test(bw, test_backward_fully_masked_rows, 0, 2);
		tcase_add_loop_test(bw, test_backward_batch, 0, 40);
		tcase_add_test(bw, test_backward_errors);
		tcase_add_loop_test(bw, test_backward_memory_measured, 0, 60);
		tcase_add_loop_test(bw, test_backward_fast_blocks, 0, 8);
		tcase_add_test(bw, test_backward_fast_extremes);
		tcase_add_loop_test(bw, test_backward_f32, 0, 300);
		tcase_add_loop_test(bw, test_backward_f32_one_pass, 0, 3);
		tcase_add_test(bw, test_backward_f32_errors);
		tcase_set_timeout(bw, 60);
		suite_add_tcase(s, bw);
	}
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

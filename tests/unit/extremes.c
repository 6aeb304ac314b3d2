/*
 * extremes.c: one answer from both paths: extreme numbers;
 * tests/unit/main.c runs them.
 */
#include "unit.h"

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
	c->cfg.size = sizeof(c->cfg);
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
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = c->nq, .n_kv = c->nkv, .d_q_in = c->dk, .d_k_in = c->dk,
			     .d_v_in = c->dv, .heads = 1, .d_k = c->dk, .d_v = c->dv,
			     .d_out = c->wo ? c->dout : 0 };
	const size_t nout = c->nq * c->dout;
	mha_config cfg = c->cfg;
	mha_report rep = MHA_INIT(mha_report);

	ck_assert_uint_le(nout, sizeof(r->out) / sizeof(r->out[0]));
	memset(r, 0, sizeof(*r));
	if (!t->f32) {
		/* 0: plain (--exact), 1: plain with every stage watched, 2 and 3: fast, 1 and 2 threads */
		seen sn;
		mha_observer obs = watch_all(&sn);

		cfg.exact = path == 0;
		cfg.threads = path == 3 ? 2 : 1;
		r->st = mha_forward(r->out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							       c->q, c->k, c->v },
				    &(mha_weights){ .size = sizeof(mha_weights),
						    .W_O = c->wo }, &cfg, path == 1 ? &obs : NULL, &rep);
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
		r->st = mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								     f[0], f[1], f[2] },
					&(mha_weights_f32){ .size = sizeof(mha_weights_f32),
							    .W_O = f[3] }, &cfg, &rep);
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
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 3, .d_k_in = 3, .d_v_in = 3,
			     .heads = 1, .d_k = 1, .d_v = 1 };
	double out[2];
	float outf[2];

	for (int exact = 0; exact < 2; exact++) {
		const mha_config cfg = { .size = sizeof(mha_config), .exact = exact };

		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     x, x, x },
					     &(mha_weights){ .size = sizeof(mha_weights),
							     .W_Q = ones, .W_K = zeros, .W_V = ones },
					     &cfg, NULL, NULL), MHA_OK);
		ck_assert_msg(out[0] == a && out[1] == a, "%s path: %g %g, want %g",
			      exact ? "plain" : "fast", out[0], out[1], a);
	}
	ck_assert_int_eq(mha_forward_f32(outf, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								      xf, xf, xf },
					 &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
							     .W_Q = onesf, .W_K = zerosf, .W_V = onesf },
					 NULL, NULL), MHA_OK);
	ck_assert_msg(outf[0] == af && outf[1] == af, "f32: %g %g, want %g", outf[0], outf[1], af);
}
END_TEST

void unit_add_extremes(const struct unit_suite *u)
{
	tcase_add_test(u->ref, test_extremes_both_paths);
	tcase_add_test(u->ref, test_projection_partial_sums);
}

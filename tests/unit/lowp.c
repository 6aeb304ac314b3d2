/*
 * lowp.c: the low-precision reference's rounding by hand (mha.h's
 * mha_lowp_round, mha_config's lowp_scale and lowp_sum, 0.10.0): each
 * stage worked again here from the stage before it, in float32 and the
 * type, and held to the library's bit for bit.  PyTorch's own steps are
 * tests/lowp_check.py's.
 */
#include "unit.h"

/* a value of the type rounded by hand: bits significant bits, ties to even */
static double round_to(double v, int bits, int emin)
{
	int e;
	double q;

	if (v == 0 || !isfinite(v))
		return v;
	e = ilogb(v);
	q = ldexp(1, (e < emin ? emin : e) - (bits - 1));
	return nearbyint(v / q) * q;
}

START_TEST(test_lowp_round)
{
	/* bfloat16: 8 significant bits; 1 + 2^-8 is half-way: to even, 1 */
	ck_assert(mha_lowp_round(1 + ldexp(1, -8), MHA_PRECISION_BF16) == 1);
	ck_assert(mha_lowp_round(1 + 3 * ldexp(1, -8), MHA_PRECISION_BF16) == 1 + ldexp(1, -6));
	ck_assert(mha_lowp_round(0.1, MHA_PRECISION_BF16) == 0.10009765625);
	/* float16: 11 bits, largest 65504, past it infinity */
	ck_assert(mha_lowp_round(0.1, MHA_PRECISION_FP16) == 0.0999755859375);
	ck_assert(mha_lowp_round(65504, MHA_PRECISION_FP16) == 65504);
	ck_assert(isinf(mha_lowp_round(65520, MHA_PRECISION_FP16)));
	/* float16's subnormals: steps of 2^-24 */
	ck_assert(mha_lowp_round(3 * ldexp(1, -26), MHA_PRECISION_FP16) == ldexp(1, -24));
	/* float64 and a type it does not know: as it is */
	ck_assert(mha_lowp_round(0.1, MHA_PRECISION_F64) == 0.1);
	ck_assert(mha_lowp_round(0.1, (mha_precision)7) == 0.1);
	for (int i = 0; i < 1000; i++) {
		const double v = (rnd() - 0.5) * ldexp(1, (int)(rnd() * 34) - 20); /* below 65504 */

		ck_assert(mha_lowp_round(v, MHA_PRECISION_BF16) == round_to(v, 8, -126));
		ck_assert(mha_lowp_round(v, MHA_PRECISION_FP16) == round_to(v, 11, -14));
	}
}
END_TEST

/* a small case: 5 tokens, d_model 6, 2 heads of d_k 3 (the scale 1/sqrt(3)
 * is no power of two, so that every reading of it differs) */
enum { N = 5, D = 6, H = 2, DK = 3 };

static void small_case(mha_dims *d, double *x, double *W[4])
{
	*d = (mha_dims){ .size = sizeof(mha_dims), .n_q = N, .n_kv = N, .d_q_in = D, .d_k_in = D,
			 .d_v_in = D, .heads = H, .d_k = DK, .d_v = DK, .d_out = D };
	for (size_t i = 0; i < N * D; i++)
		x[i] = 2 * rnd() - 1;
	for (int k = 0; k < 4; k++) {
		W[k] = rnd_matrix(D * D);
		for (size_t i = 0; i < D * D; i++)
			W[k][i] = (W[k][i] - 0.5) * 1.5;
	}
}

START_TEST(test_lowp_config_refused)
{
	mha_dims d;
	double x[N * D], *W[4], out[N * D];
	mha_weights w = MHA_INIT(mha_weights);
	mha_config cfg = MHA_INIT(mha_config);
	const mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };

	small_case(&d, x, W);
	w.W_Q = W[0];
	w.W_K = W[1];
	w.W_V = W[2];
	w.W_O = W[3];
	/* a reading of the scale, or a sum in the type, without a low precision */
	cfg.lowp_scale = MHA_LOWP_SCALE_ROUNDED;
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_ERR_PRECISION);
	cfg.lowp_scale = 0;
	cfg.lowp_sum = MHA_LOWP_SUM_TYPE;
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_ERR_PRECISION);
	/* values past the enums' */
	cfg.precision = MHA_PRECISION_BF16;
	cfg.lowp_sum = 2;
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_ERR_PRECISION);
	cfg.lowp_sum = 0;
	cfg.lowp_scale = 3;
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_ERR_PRECISION);
	cfg.lowp_scale = MHA_LOWP_SCALE_DIVIDED;
	ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, NULL, NULL), MHA_OK);
	for (int k = 0; k < 4; k++)
		free(W[k]);
}
END_TEST

/*
 * Each reading of the scale and each sum, in each type: the scaled scores
 * worked from the scores, the softmax from the masked scores, each head's
 * Q, K and V the blocks of Q, K and V, its output the block of the
 * concatenation; every value the library's own, bit for bit.
 */
START_TEST(test_lowp_readings)
{
	const mha_precision types[2] = { MHA_PRECISION_BF16, MHA_PRECISION_FP16 };
	const int bits[2] = { 8, 11 }, emin[2] = { -126, -14 };
	const double s = 1 / sqrt((double)DK);
	mha_dims d;
	double x[N * D], *W[4], out[N * D];
	mha_weights w = MHA_INIT(mha_weights);
	const mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };

	small_case(&d, x, W);
	w.W_Q = W[0];
	w.W_K = W[1];
	w.W_V = W[2];
	w.W_O = W[3];
	for (int t = 0; t < 2; t++)
		for (int reading = 0; reading < 3; reading++)
			for (int sum = 0; sum < 2; sum++) {
				mha_config cfg = MHA_INIT(mha_config);
				seen sn;
				mha_observer obs = watch_all(&sn);
				const double r1 = round_to(s, bits[t], emin[t]);
				const double inv = round_to(1 / s, bits[t], emin[t]);

				obs.stages = ~0ull; /* every stage, past the first 32 too */
				cfg.causal = MHA_CAUSAL_TOP_LEFT;
				cfg.precision = types[t];
				cfg.lowp_scale = (size_t)reading;
				cfg.lowp_sum = (size_t)sum;
				ck_assert_int_eq(mha_forward(out, &d, &in, &w, &cfg, &obs, NULL), MHA_OK);
				for (size_t h = 0; h < H; h++) {
					const double *sc = sn.m[MHA_STAGE_SCORES][h + 1];
					const double *sd = sn.m[MHA_STAGE_SCALED][h + 1];
					const double *mk = sn.m[MHA_STAGE_MASKED][h + 1];
					const double *p = sn.m[MHA_STAGE_SOFTMAX][h + 1];

					ck_assert(sc && sd && mk && p);
					for (size_t i = 0; i < N * N; i++) {
						const float f = (float)sc[i];
						const double want = round_to(
							reading == MHA_LOWP_SCALE_DIVIDED ? f / (float)inv
							: f * (float)(reading == MHA_LOWP_SCALE_ROUNDED ? r1 : s),
							bits[t], emin[t]);

						ck_assert_msg(sd[i] == want, "type %d reading %d: scaled[%zu] %.17g, "
							      "by hand %.17g", t, reading, i, sd[i], want);
					}
					for (size_t i = 0; i < N; i++) {
						const double *row = mk + i * N;
						float top = -INFINITY, total = 0, e[N];

						for (size_t j = 0; j < N; j++)
							top = row[j] > top ? (float)row[j] : top;
						for (size_t j = 0; j < N; j++) {
							e[j] = expf((float)row[j] - top);
							if (sum) {
								e[j] = (float)round_to(e[j], bits[t], emin[t]);
								total = (float)round_to(total + e[j], bits[t],
											emin[t]);
							} else {
								total += e[j];
							}
						}
						for (size_t j = 0; j < N; j++)
							ck_assert_msg(p[i * N + j] == round_to(e[j] / total, bits[t],
											       emin[t]),
								      "type %d sum %d: softmax[%zu][%zu]", t, sum,
								      i, j);
					}
					/* each head's blocks */
					for (size_t i = 0; i < N; i++)
						for (size_t c = 0; c < DK; c++) {
							ck_assert(sn.m[MHA_STAGE_HEAD_Q][h + 1][i * DK + c] ==
								  sn.m[MHA_STAGE_Q][0][i * H * DK + h * DK + c]);
							ck_assert(sn.m[MHA_STAGE_HEAD_K][h + 1][i * DK + c] ==
								  sn.m[MHA_STAGE_K][0][i * H * DK + h * DK + c]);
							ck_assert(sn.m[MHA_STAGE_HEAD_V][h + 1][i * DK + c] ==
								  sn.m[MHA_STAGE_V][0][i * H * DK + h * DK + c]);
							ck_assert(sn.m[MHA_STAGE_HEAD_OUTPUT][h + 1][i * DK + c] ==
								  sn.m[MHA_STAGE_CONCAT][0][i * H * DK + h * DK + c]);
						}
				}
				seen_free(&sn);
			}
	for (int k = 0; k < 4; k++)
		free(W[k]);
}
END_TEST

void unit_add_lowp(const struct unit_suite *u)
{
	tcase_add_test(u->hand, test_lowp_round);
	tcase_add_test(u->err, test_lowp_config_refused);
	tcase_add_test(u->hand, test_lowp_readings);
}

/*
 * norm.c: q/k normalisation by hand, its refusals and its float32 run;
 * tests/unit/main.c runs them.  (The random cases of reference.c and
 * backward.c hold every kind to the reference in ref.c.)
 */
#include "unit.h"

/*
 * One query, one key, two heads of d_k = 2, no weights (Q = K = the
 * inputs), no rope.  Row [3, 4 | 1, -1]:
 *   RMS per head, eps 0: [3, 4]/√12.5, [1, -1]/1;
 *   with weights [2, 0.5]: each head's pair times them; RMS1P: times 1 + w;
 *   LAYER per head: μ = 3.5, variance 0.25 → [-1, 1]; [1, -1] → [1, -1];
 *   RMS over the whole row: √((9 + 16 + 1 + 1)/4) = √6.75.
 */
START_TEST(test_norm_by_hand)
{
	static const double x[4] = { 3, 4, 1, -1 }, v[2] = { 1, 2 };
	static const double w2[2] = { 2, 0.5 }, w4[4] = { 1, 2, 3, 4 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 1, .n_kv = 1, .d_q_in = 4, .d_k_in = 4, .d_v_in = 2,
			     .heads = 2, .d_k = 2, .d_v = 1 };
	mha_config cfg = { .size = sizeof(mha_config), .norm = { .kind = MHA_NORM_RMS } };
	const mha_inputs in = { .size = sizeof(mha_inputs), x, x, v };
	seen sn;
	mha_observer obs = watch_all(&sn);
	double out[2];
	const double r = sqrt(12.5), a = sqrt(6.75);

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][0], 3 / r, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][1], 4 / r, 1e-15);
	ck_assert(sn.m[MHA_STAGE_K_NORM][0][2] == 1 && sn.m[MHA_STAGE_K_NORM][0][3] == -1);
	/* the heads read the normalised rows: head 0's score is 25/12.5 = 2 */
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_SCORES][1][0], 2, 1e-15);
	/* Q itself is handed over as projected */
	ck_assert(sn.m[MHA_STAGE_Q][0][0] == 3);
	seen_free(&sn);

	/* shared weights, then Gemma's 1 + w */
	cfg.norm.q_weight = cfg.norm.k_weight = w2;
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][0], 2 * 3 / r, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][3], 0.5 * -1, 1e-15);
	seen_free(&sn);
	cfg.norm.kind = MHA_NORM_RMS1P;
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_K_NORM][0][1], 1.5 * 4 / r, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_K_NORM][0][2], 3 * 1, 1e-15);
	seen_free(&sn);

	/* LayerNorm per head, a block of weights per head */
	cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_LAYER, .per_head = 1, .q_weight = w4, .k_weight = w4 };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][0], -1, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][1], 2, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][2], 3, 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][3], -4, 1e-15);
	seen_free(&sn);

	/* RMS over the whole row (OLMo 2), eps 0.25 added to the mean square */
	cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .over_all = 1, .eps = 0.25, .q_weight = w4 };
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, &cfg, &obs, NULL), MHA_OK);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][3], 4 * -1 / sqrt(7), 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_K_NORM][0][1], 4 / sqrt(7), 1e-15);
	ck_assert_double_eq_tol(sn.m[MHA_STAGE_K_NORM][0][0], 3 / sqrt(6.75 + 0.25), 1e-15);
	(void)a;
	seen_free(&sn);

	/* huge entries: the mean square overflows, the normalised row does not */
	{
		static const double big[4] = { 3e300, 4e300, 1e300, -1e300 };
		const mha_inputs bin = { .size = sizeof(mha_inputs), big, big, v };

		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS };
		ck_assert_int_eq(mha_forward(out, &d, &bin, NULL, &cfg, &obs, NULL), MHA_OK);
		ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][0], 3 / r, 1e-15);
		ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][3], -1, 1e-15);
		seen_free(&sn);
		cfg.norm.kind = MHA_NORM_LAYER;
		ck_assert_int_eq(mha_forward(out, &d, &bin, NULL, &cfg, &obs, NULL), MHA_OK);
		ck_assert_double_eq_tol(sn.m[MHA_STAGE_Q_NORM][0][0], -1, 1e-15);
		seen_free(&sn);
	}
	/* a row of zeros with eps 0 has no normalised value: refused, both paths */
	{
		static const double z[4] = { 0, 0, 1, 1 };
		const mha_inputs zin = { .size = sizeof(mha_inputs), z, z, v };
		const float fz[4] = { 0, 0, 1, 1 }, fv[2] = { 1, 2 };
		float fo[2];

		cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS };
		ck_assert_int_eq(mha_forward(out, &d, &zin, NULL, &cfg, NULL, NULL), MHA_ERR_RANGE);
		cfg.exact = 1;
		ck_assert_int_eq(mha_forward(out, &d, &zin, NULL, &cfg, NULL, NULL), MHA_ERR_RANGE);
		cfg.exact = 0;
		ck_assert_int_eq(mha_forward_f32(fo, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									    fz, fz, fv }, NULL, &cfg, NULL),
				 MHA_ERR_RANGE);
		/* with eps the zeros stay zeros */
		cfg.norm.eps = 1e-6;
		ck_assert_int_eq(mha_forward(out, &d, &zin, NULL, &cfg, NULL, NULL), MHA_OK);
	}
}
END_TEST

/* every setting mha_check refuses, with the fault it names */
START_TEST(test_norm_errors)
{
	static const double ok[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
	static const double bad[8] = { 1, 1, 1, NAN, 1, 1, 1, 1 };
	static const double inf[8] = { INFINITY, 1, 1, 1, 1, 1, 1, 1 };
	static const double x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 4, .d_k_in = 4, .d_v_in = 4,
			     .heads = 2, .kv_heads = 1, .d_k = 2, .d_v = 2 };
	const struct {
		mha_qk_norm n;
		mha_fault_kind kind;
		size_t index;
	} cases[] = {
		{ { .kind = (mha_norm_kind)4 }, MHA_FAULT_NORM_KIND, 0 },
		{ { .kind = (mha_norm_kind)-1 }, MHA_FAULT_NORM_KIND, 0 },
		{ { .kind = MHA_NORM_RMS, .eps = -1e-6 }, MHA_FAULT_NORM_EPS, 0 },
		{ { .kind = MHA_NORM_LAYER, .eps = NAN }, MHA_FAULT_NORM_EPS, 0 },
		{ { .kind = MHA_NORM_RMS1P, .eps = INFINITY }, MHA_FAULT_NORM_EPS, 0 },
		/* the weights' lengths by layout: a shared (2), per head (4 for Q, 2 for K) */
		{ { .kind = MHA_NORM_RMS, .q_weight = bad, .k_weight = ok, .per_head = 1 },
		  MHA_FAULT_NORM_Q_WEIGHT, 3 },
		{ { .kind = MHA_NORM_RMS, .k_weight = inf }, MHA_FAULT_NORM_K_WEIGHT, 0 },
		{ { .kind = MHA_NORM_RMS, .q_weight = inf + 0, .k_weight = ok }, MHA_FAULT_NORM_Q_WEIGHT, 0 },
	};
	mha_config cfg = { .size = sizeof(mha_config) };
	mha_fault f = { .size = sizeof(f) };
	double out[8];
	float fo[8], fx[8] = { 0 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cfg.norm = cases[i].n;
		ck_assert_int_eq(mha_check_fault(&d, &cfg, &f), MHA_ERR_NORM);
		ck_assert_int_eq(f.kind, cases[i].kind);
		ck_assert_uint_eq(f.index, cases[i].index);
		ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs), x, x, x },
					     NULL, &cfg, NULL, NULL), MHA_ERR_NORM);
		ck_assert_int_eq(mha_forward_f32(fo, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									    fx, fx, fx }, NULL, &cfg, NULL),
				 MHA_ERR_NORM);
		ck_assert_uint_eq(mha_memory(&d, &cfg, 0, 0), SIZE_MAX);
		ck_assert_uint_eq(mha_backward_memory(&d, &cfg, 0), SIZE_MAX);
	}
	/* a bad weight past a shared vector's length is not read; none: nothing read */
	cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .q_weight = bad, .k_weight = bad };
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
	cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_NONE, .eps = NAN, .q_weight = inf };
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_OK);
	ck_assert_str_eq(mha_strerror(MHA_ERR_NORM),
			 "a q/k norm setting is out of range (its kind, an eps that is finite and at "
			 "least 0, finite weights)");
}
END_TEST

/*
 * Float32: Qwen3's per-head RMS norm with rope, forward and backward,
 * against float64 on the same floats (the norm itself in double, rounded
 * once), and the weights' gradients.
 */
START_TEST(test_norm_f32)
{
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 9, .n_kv = 9, .d_q_in = 8, .d_k_in = 8, .d_v_in = 8,
			     .heads = 4, .kv_heads = 2, .d_k = 4, .d_v = 4, .d_out = 8 };
	const size_t nx = 9 * 8, nwq = 8 * 16, nwk = 8 * 8, nwo = 16 * 8;
	double *x, *W[4], *qw, *kw, out[72], dq[4], dk[4], *dx;
	float *fx, *fW[4], fout[72], fdq[4], fdk[4], *fdx;
	mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT,
			   .rope = { .mode = MHA_ROPE_HALF } };
	const size_t n[4] = { nwq, nwk, nwk, nwo };

	rng_state = 4242;
	x = rnd_matrix(nx);
	fx = floats_of(x, nx);
	free(x);
	x = doubles_of(fx, nx);
	for (int i = 0; i < 4; i++) {
		double *t = rnd_matrix(n[i]);

		fW[i] = floats_of(t, n[i]);
		W[i] = doubles_of(fW[i], n[i]);
		free(t);
	}
	qw = rnd_matrix(4);
	kw = rnd_matrix(4);
	cfg.norm = (mha_qk_norm){ .kind = MHA_NORM_RMS, .eps = 1e-6, .q_weight = qw, .k_weight = kw };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs), x, x, x },
				     &(mha_weights){ .size = sizeof(mha_weights), W[0], W[1], W[2], W[3] },
				     &cfg, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								      fx, fx, fx },
					 &(mha_weights_f32){ .size = sizeof(mha_weights_f32), fW[0], fW[1],
							     fW[2], fW[3] }, &cfg, NULL), MHA_OK);
	for (int i = 0; i < 72; i++)
		ck_assert_msg(fabs(fout[i] - out[i]) <= 1e-5 * (1 + fabs(out[i])), "output %d: %g, %g", i,
			      fout[i], out[i]);
	dx = malloc(nx * sizeof(double));
	fdx = malloc(nx * sizeof(float));
	ck_assert_int_eq(mha_backward(&(mha_grads){ .size = sizeof(mha_grads), .dxq = dx,
						    .dq_norm = dq, .dk_norm = dk }, NULL, &d,
				      &(mha_inputs){ .size = sizeof(mha_inputs), x, x, x },
				      &(mha_weights){ .size = sizeof(mha_weights), W[0], W[1], W[2], W[3] },
				      &cfg, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_backward_f32(&(mha_grads_f32){ .size = sizeof(mha_grads_f32), .dxq = fdx,
							    .dq_norm = fdq, .dk_norm = fdk }, NULL, &d,
					  &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32), fx, fx, fx },
					  &(mha_weights_f32){ .size = sizeof(mha_weights_f32), fW[0], fW[1],
							      fW[2], fW[3] }, &cfg, NULL), MHA_OK);
	for (int i = 0; i < 4; i++) {
		ck_assert_msg(fabs(fdq[i] - dq[i]) <= 1e-4 * (1 + fabs(dq[i])), "dq_norm %d", i);
		ck_assert_msg(fabs(fdk[i] - dk[i]) <= 1e-4 * (1 + fabs(dk[i])), "dk_norm %d", i);
	}
	for (size_t i = 0; i < nx; i++)
		ck_assert_msg(fabs(fdx[i] - dx[i]) <= 1e-4 * (1 + fabs(dx[i])), "dxq %zu", i);
	for (int i = 0; i < 4; i++) {
		free(W[i]);
		free(fW[i]);
	}
	free(x);
	free(fx);
	free(qw);
	free(kw);
	free(dx);
	free(fdx);
}
END_TEST

void unit_add_norm(const struct unit_suite *u)
{
	tcase_add_test(u->hand, test_norm_by_hand);
	tcase_add_test(u->err, test_norm_errors);
	tcase_add_test(u->hand, test_norm_f32);
}

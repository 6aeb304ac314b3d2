/*
 * backward_f32.c: mha_backward_f32 against mha_backward on the same
 * values; tests/unit/main.c runs them.
 */
#include "unit.h"

/* float gradients sized as grad_set's, NaN where the library must write or leave */
struct grad_set_f32 {
	mha_grads_f32 g;
	float *all[N_GRADS];
};

static void grads_alloc_f32(struct grad_set_f32 *s, const struct grad_set *like)
{
	for (int i = 0; i < N_GRADS; i++) {
		s->all[i] = malloc(like->n[i] * sizeof(float));
		for (size_t k = 0; k < like->n[i]; k++)
			s->all[i][k] = NAN;
	}
	s->g = (mha_grads_f32){ .size = sizeof(mha_grads_f32),
				s->all[0], s->all[1], s->all[2], s->all[3], s->all[4], s->all[5],
				s->all[6], s->all[7], s->all[8], s->all[9], s->all[10], s->all[11],
				s->all[12], s->all[13] };
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
	return mha_backward(g, r->ddo, d, &(mha_inputs){ .size = sizeof(mha_inputs),
							 r->dx[0], r->dx[1], r->dx[2] },
			    &(mha_weights){ .size = sizeof(mha_weights),
					    r->dw[0], r->dw[1], r->dw[2], r->dw[3], r->dw[4],
					    r->dw[5], r->dw[6], r->dw[7] }, cfg, NULL, NULL);
}

static mha_status rounded_backward_f32(const struct rounded_set *r, mha_grads_f32 *g,
				       const mha_dims *d, const mha_config *cfg, mha_report *rep)
{
	return mha_backward_f32(g, r->fdo, d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
								 r->fx[0], r->fx[1], r->fx[2] },
				&(mha_weights_f32){ .size = sizeof(mha_weights_f32),
						    r->fw[0], r->fw[1], r->fw[2], r->fw[3], r->fw[4],
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
	static const char *const names[N_GRADS] = { "dxq", "dxk", "dxv", "dW_Q", "dW_K", "dW_V",
						    "dW_O", "db_Q", "db_K", "db_V", "db_O", "dsinks",
						    "dq_norm", "dk_norm" };
	struct random_case c;
	struct grad_set full, rounded;
	struct grad_set_f32 f1, f3;
	mha_config one = MHA_INIT(mha_config), three = MHA_INIT(mha_config);
	mha_report rep = MHA_INIT(mha_report);
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
	ck_assert_int_eq(mha_backward(&full.g, dout, &c.d, &(mha_inputs){ .size = sizeof(mha_inputs),
									  c.xq, c.xk, c.xv },
				      &(mha_weights){ .size = sizeof(mha_weights),
						      c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1],
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
	for (int i = 0; i < N_GRADS; i++) {
		const int absent = (i >= 3 && i <= 5 && !c.W[i - 3]) || ((i == 6 || i == 10) && !c.wo) ||
				   (i == 11 && !c.cfg.sinks) || (i >= 12 && !c.norm_q);
		/* shared norm weights: d_k of the array's per-head length */
		const size_t n = i >= 12 && !c.cfg.norm.over_all && !c.cfg.norm.per_head ? c.d.d_k
											  : full.n[i];
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
		grad_close(what, widened, rounded.all[i], n, 5e-5);
		snprintf(what, sizeof(what), "case %d f32 %s", _i, names[i]);
		grad_close(what, widened, full.all[i], n, 1e-4);
		free(widened);
	}
	rounded_free(&rs);
	for (int i = 0; i < N_GRADS; i++) {
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
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = sh[0], .n_kv = sh[1], .d_q_in = 6, .d_k_in = 5, .d_v_in = 7,
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
	mha_config one = { .size = sizeof(mha_config), .threads = 1 }, two = { .size = sizeof(mha_config), .threads = 2 };
	mha_report rep = MHA_INIT(mha_report);
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
	for (int i = 0; i < N_GRADS; i++) {
		free(f1.all[i]);
		free(f2.all[i]);
	}
	grads_free(&want);
}
END_TEST

/* mha_backward_f32's refusals: NULLs, bad dims, a gradient too large for a float */
START_TEST(test_backward_f32_errors)
{
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = 2, .n_kv = 2, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
			     .d_k = 2, .d_v = 2 };
	mha_dims bad = d;
	const float x[4] = { 1, 2, 3, 4 };
	float dout[4] = { 1, 1, 1, 1 }, dx[4], dxk[4];
	const mha_inputs_f32 in = { .size = sizeof(mha_inputs_f32), x, x, x };
	mha_grads_f32 g = { .size = sizeof(mha_grads_f32), .dxq = dx };

	ck_assert_int_eq(mha_backward_f32(NULL, NULL, &d, &in, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, NULL, &in, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &d, NULL, NULL, NULL, NULL), MHA_ERR_NULL);
	ck_assert_int_eq(mha_backward_f32(&g, NULL, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									   x, NULL, x }, NULL, NULL,
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
	ck_assert_int_eq(mha_backward_f32(&(mha_grads_f32){ .size = sizeof(mha_grads_f32),
							    .dxv = dxk }, dout, &d, &in, NULL, NULL,
					  NULL), MHA_ERR_RANGE);
	dout[0] = NAN;
	ck_assert_int_eq(mha_backward_f32(&g, dout, &d, &in, NULL, NULL, NULL), MHA_ERR_RANGE);
}
END_TEST

void unit_add_backward_f32(const struct unit_suite *u)
{
	tcase_add_loop_test(u->bw, test_backward_f32, 0, 300);
	tcase_add_loop_test(u->bw, test_backward_f32_one_pass, 0, 3);
	tcase_add_test(u->bw, test_backward_f32_errors);
}

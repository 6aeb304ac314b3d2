/*
 * mla.c: multi-head latent attention (mha.h's mha_mla) held to a reference
 * written here from DeepSeek-V3's formulas (the latents and their norms in
 * long double, the rotation as Hugging Face's apply_rotary_pos_emb_interleave
 * writes it: the pairs' features gathered, then rotate_half), whose Q, K
 * and V go through ref.c's attention; the absorbed form, float32, the
 * memory estimate, the refusals, and the gradients against central
 * differences.  tests/unit/main.c runs them.
 */
#include "unit.h"

/* one MLA case: sizes, settings and random arrays */
struct mla_case {
	mha_dims d;
	mha_config cfg;
	size_t dn, dr, qr, kr;
	double *xq, *xk, *W_QA, *W_Q, *W_KVA, *W_KVB, *W_O, *b_O, *qan, *kvan;
	mha_weights w;
	mha_inputs in;
};

static void mla_make(struct mla_case *c, unsigned seed, size_t qr, int wo, mha_rope_mode mode,
		     size_t B)
{
	const size_t H = 3, dn = 3, dr = 4, dv = 2, kr = 5, dq = 7, dkin = seed % 2 ? 6 : 7;
	const size_t nq = seed % 2 ? 3 : 5, nkv = 5;

	memset(c, 0, sizeof(*c));
	rng_state = 0x9e3779b97f4a7c15ull ^ seed;
	c->dn = dn;
	c->dr = dr;
	c->qr = qr;
	c->kr = kr;
	c->d = (mha_dims){ .size = sizeof(mha_dims), .n_q = nq, .n_kv = nkv, .d_q_in = dq,
			   .d_k_in = dkin, .d_v_in = dkin, .heads = H, .d_k = dn + dr, .d_v = dv,
			   .d_out = wo ? 4 : 0, .batch = B };
	c->xq = rnd_matrix(B * nq * dq);
	c->xk = seed % 2 ? rnd_matrix(B * nkv * dkin) : c->xq;
	c->W_QA = qr ? rnd_matrix(dq * qr) : NULL;
	c->W_Q = rnd_matrix((qr ? qr : dq) * H * (dn + dr));
	c->W_KVA = rnd_matrix(dkin * (kr + dr));
	c->W_KVB = rnd_matrix(kr * H * (dn + dv));
	c->W_O = wo ? rnd_matrix(H * dv * 4) : NULL;
	c->b_O = wo ? rnd_matrix(4) : NULL;
	c->qan = qr ? rnd_matrix(qr) : NULL;
	c->kvan = rnd_matrix(kr);
	c->cfg = (mha_config){ .size = sizeof(mha_config), .causal = seed % 2 ? MHA_CAUSAL_BOTTOM_RIGHT
										: MHA_CAUSAL_TOP_LEFT };
	c->cfg.rope.mode = mode;
	c->cfg.rope.theta = 100;
	c->cfg.mla = (mha_mla){ .on = 1, .q_rank = qr, .kv_rank = kr, .d_rope = dr, .eps = 1e-6,
				.q_a_norm = c->qan, .kv_a_norm = c->kvan };
	c->w = (mha_weights){ .size = sizeof(mha_weights), .W_Q = c->W_Q, .W_O = c->W_O,
			      .b_O = c->b_O, .W_QA = c->W_QA, .W_KVA = c->W_KVA, .W_KVB = c->W_KVB };
	c->in = (mha_inputs){ .size = sizeof(mha_inputs), .xq = c->xq, .xk = c->xk, .xv = c->xk };
}

static void mla_free(struct mla_case *c)
{
	if (c->xk != c->xq)
		free(c->xk);
	free(c->xq);
	free(c->W_QA);
	free(c->W_Q);
	free(c->W_KVA);
	free(c->W_KVB);
	free(c->W_O);
	free(c->b_O);
	free(c->qan);
	free(c->kvan);
}

/* a case's inputs and weights rounded to floats, as the float32 calls take them */
struct mla_floats {
	float *x, *k, *wqa, *wq, *wkva, *wkvb, *wo, *bo;
	mha_inputs_f32 in;
	mha_weights_f32 w;
};

static void mla_floats_make(struct mla_floats *f, const struct mla_case *c)
{
	const size_t B = mha_rule_batch(&c->d), H = c->d.heads;

	f->x = floats_of(c->xq, B * c->d.n_q * c->d.d_q_in);
	f->k = c->xk == c->xq ? f->x : floats_of(c->xk, B * c->d.n_kv * c->d.d_k_in);
	f->wqa = floats_of(c->W_QA, c->d.d_q_in * c->qr);
	f->wq = floats_of(c->W_Q, (c->qr ? c->qr : c->d.d_q_in) * H * c->d.d_k);
	f->wkva = floats_of(c->W_KVA, c->d.d_k_in * (c->kr + c->dr));
	f->wkvb = floats_of(c->W_KVB, c->kr * H * (c->dn + c->d.d_v));
	f->wo = floats_of(c->W_O, H * c->d.d_v * 4);
	f->bo = floats_of(c->b_O, 4);
	f->in = (mha_inputs_f32){ .size = sizeof(f->in), .xq = f->x, .xk = f->k, .xv = f->k };
	f->w = (mha_weights_f32){ .size = sizeof(f->w), .W_Q = f->wq, .W_O = f->wo, .b_O = f->bo,
				  .W_QA = f->wqa, .W_KVA = f->wkva, .W_KVB = f->wkvb };
}

static void mla_floats_free(struct mla_floats *f)
{
	if (f->k != f->x)
		free(f->k);
	free(f->x);
	free(f->wqa);
	free(f->wq);
	free(f->wkva);
	free(f->wkvb);
	free(f->wo);
	free(f->bo);
}

/* out (rows, cols) = x (rows, k)·W (k, cols), long double sums */
static void ref_mul(double *out, const double *x, const double *W, size_t rows, size_t k,
		    size_t cols)
{
	for (size_t i = 0; i < rows; i++)
		for (size_t j = 0; j < cols; j++) {
			long double s = 0;

			for (size_t t = 0; t < k; t++)
				s += (long double)x[i * k + t] * W[t * cols + j];
			out[i * cols + j] = (double)s;
		}
}

/* each row's RMSNorm with weights w (NULL: ones), in place */
static void ref_rms(double *x, size_t rows, size_t m, const double *w, double eps)
{
	for (size_t i = 0; i < rows; i++) {
		long double ss = 0;

		for (size_t t = 0; t < m; t++)
			ss += (long double)x[i * m + t] * x[i * m + t];
		for (size_t t = 0; t < m; t++)
			x[i * m + t] = (double)(x[i * m + t] / sqrtl(ss / m + eps) * (w ? w[t] : 1));
	}
}

/*
 * Hugging Face's rotation of one block x (R) at position p: interleaved,
 * y = [x0, x2, …, x1, x3, …] and y·cos + rotate_half(y)·sin; half: x itself.
 */
static void ref_turn(double *x, size_t R, double p, double theta, mha_rope_mode mode)
{
	double y[16], o[16];

	for (size_t t = 0; t < R; t++)
		y[t] = mode == MHA_ROPE_INTERLEAVED ? (t < R / 2 ? x[2 * t] : x[2 * (t - R / 2) + 1])
						    : x[t];
	for (size_t t = 0; t < R; t++) {
		const size_t f = t % (R / 2);
		const double a = p * pow(theta, -(double)(2 * f) / (double)R);
		const double rot = t < R / 2 ? -y[t + R / 2] : y[t - R / 2];

		o[t] = y[t] * cos(a) + rot * sin(a);
	}
	memcpy(x, o, R * sizeof(double));
}

/* sequence b's Q, K, V as MLA builds them; then ref.c's attention */
static void ref_mla(const struct mla_case *c, size_t b, double *out)
{
	const mha_dims *d = &c->d;
	const size_t H = d->heads, dk = d->d_k, dv = d->d_v, nq = d->n_q, nkv = d->n_kv;
	const size_t kvb = H * (c->dn + dv), ka = c->kr + c->dr;
	const double *xq = c->xq + b * nq * d->d_q_in, *xk = c->xk + b * nkv * d->d_k_in;
	double *cq = malloc(nq * (c->qr + 1) * sizeof(double));
	double *q0 = malloc(nq * H * dk * sizeof(double));
	double *ckv = malloc(nkv * ka * sizeof(double)), *cn = malloc(nkv * c->kr * sizeof(double));
	double *kv = malloc(nkv * kvb * sizeof(double));
	double *K = malloc(nkv * H * dk * sizeof(double)), *V = malloc(nkv * H * dv * sizeof(double));
	const ptrdiff_t off = c->cfg.causal == MHA_CAUSAL_BOTTOM_RIGHT ? (ptrdiff_t)(nkv - nq) : 0;
	mha_dims d2 = *d;
	mha_config c2 = MHA_INIT(mha_config);
	ref_result r;

	if (c->qr) {
		ref_mul(cq, xq, c->W_QA, nq, d->d_q_in, c->qr);
		ref_rms(cq, nq, c->qr, c->qan, c->cfg.mla.eps);
		ref_mul(q0, cq, c->W_Q, nq, c->qr, H * dk);
	} else {
		ref_mul(q0, xq, c->W_Q, nq, d->d_q_in, H * dk);
	}
	ref_mul(ckv, xk, c->W_KVA, nkv, d->d_k_in, ka);
	for (size_t i = 0; i < nkv; i++)
		memcpy(cn + i * c->kr, ckv + i * ka, c->kr * sizeof(double));
	ref_rms(cn, nkv, c->kr, c->kvan, c->cfg.mla.eps);
	ref_mul(kv, cn, c->W_KVB, nkv, c->kr, kvb);
	for (size_t i = 0; i < nq; i++)
		for (size_t h = 0; h < H; h++)
			if (c->cfg.rope.mode)
				ref_turn(q0 + i * H * dk + h * dk + c->dn, c->dr, (double)i + (double)off,
					 c->cfg.rope.theta, c->cfg.rope.mode);
	for (size_t j = 0; j < nkv; j++) {
		double *pe = ckv + j * ka + c->kr;

		if (c->cfg.rope.mode)
			ref_turn(pe, c->dr, (double)j, c->cfg.rope.theta, c->cfg.rope.mode);
		for (size_t h = 0; h < H; h++) {
			memcpy(K + j * H * dk + h * dk, kv + j * kvb + h * (c->dn + dv),
			       c->dn * sizeof(double));
			memcpy(K + j * H * dk + h * dk + c->dn, pe, c->dr * sizeof(double));
			memcpy(V + j * H * dv + h * dv, kv + j * kvb + h * (c->dn + dv) + c->dn,
			       dv * sizeof(double));
		}
	}
	d2.batch = 1;
	d2.d_q_in = d2.d_k_in = H * dk;
	d2.d_v_in = H * dv;
	c2.causal = c->cfg.causal;
	c2.scale_mode = MHA_SCALE_VALUE;
	c2.scale = 1 / sqrt((double)dk);
	{
		const mha_inputs in = { .size = sizeof(in), .xq = q0, .xk = K, .xv = V };
		const mha_weights w = { .size = sizeof(w), .W_O = c->W_O, .b_O = c->b_O };

		ck_assert_int_eq(ref_forward(&r, &d2, &in, &w, &c2), 0);
	}
	memcpy(out, r.output, nq * mha_output_cols(d, c->W_O != NULL) * sizeof(double));
	ref_free(&r);
	free(cq);
	free(q0);
	free(ckv);
	free(cn);
	free(kv);
	free(K);
	free(V);
}

static size_t mla_out_n(const struct mla_case *c)
{
	return mha_rule_batch(&c->d) * c->d.n_q * mha_output_cols(&c->d, c->W_O != NULL);
}

/* every path and form of one case against the reference, sequence by sequence */
static void mla_check_case(struct mla_case *c)
{
	const size_t B = mha_rule_batch(&c->d), n = mla_out_n(c), per = n / B;
	double *want = malloc(n * sizeof(double)), *got = malloc(n * sizeof(double));
	float *outf = malloc(n * sizeof(float));
	struct mla_floats fl;
	seen sn;
	mha_observer obs = watch_all(&sn);
	mha_report rep = MHA_INIT(mha_report);

	for (size_t b = 0; b < mha_rule_batch(&c->d); b++)
		ref_mla(c, b, want + b * per);
	/* the plain path (an observer of every stage; with a batch, exact), then the fast one */
	c->cfg.exact = B > 1;
	ck_assert_int_eq(mha_forward(got, &c->d, &c->in, &c->w, &c->cfg, B > 1 ? NULL : &obs, &rep),
			 MHA_OK);
	c->cfg.exact = 0;
	ck_assert_int_eq(rep.fast_path, 0);
	check_close("mla plain", got, want, n);
	seen_free(&sn);
	ck_assert_int_eq(mha_forward(got, &c->d, &c->in, &c->w, &c->cfg, NULL, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	check_close("mla fast", got, want, n);
	/* the absorbed form, both paths */
	c->cfg.mla.absorbed = 1;
	ck_assert_int_eq(mha_forward(got, &c->d, &c->in, &c->w, &c->cfg, NULL, NULL), MHA_OK);
	check_close("mla absorbed", got, want, n);
	c->cfg.exact = 1;
	ck_assert_int_eq(mha_forward(got, &c->d, &c->in, &c->w, &c->cfg, B > 1 ? NULL : &obs, &rep),
			 MHA_OK);
	c->cfg.exact = 0;
	ck_assert_int_eq(rep.fast_path, 0);
	check_close("mla absorbed plain", got, want, n);
	/* the latent head outputs: kv_rank wide, one key/value head */
	if (B == 1) {
		ck_assert_uint_eq(sn.cols[MHA_STAGE_HEAD_OUTPUT][1], c->kr);
		ck_assert_uint_eq(sn.cols[MHA_STAGE_K][0], c->kr + c->dr);
	}
	seen_free(&sn);
	c->cfg.mla.absorbed = 0;
	/* float32 */
	mla_floats_make(&fl, c);
	{
		double maxabs = 0, err = 0;

		for (int form = 0; form < 2; form++) {
			c->cfg.mla.absorbed = form;
			ck_assert_int_eq(mha_forward_f32(outf, &c->d, &fl.in, &fl.w, &c->cfg, NULL), MHA_OK);
			for (size_t i = 0; i < n; i++) {
				maxabs = fmax(maxabs, fabs(want[i]));
				err = fmax(err, fabs(outf[i] - want[i]));
			}
			ck_assert_msg(err <= 2e-5 * maxabs, "mla f32 form %d: error %g of %g", form, err,
				      maxabs);
		}
		c->cfg.mla.absorbed = 0;
	}
	mla_floats_free(&fl);
	free(want);
	free(got);
	free(outf);
}

START_TEST(test_mla_reference)
{
	static const struct {
		size_t qr, B;
		int wo;
		mha_rope_mode mode;
	} cases[] = {
		{ 6, 1, 1, MHA_ROPE_INTERLEAVED }, { 0, 1, 1, MHA_ROPE_HALF },
		{ 6, 2, 0, MHA_ROPE_INTERLEAVED }, { 4, 2, 1, MHA_ROPE_NONE },
	};

	for (unsigned seed = 0; seed < 2; seed++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			struct mla_case c;

			mla_make(&c, seed * 7 + (unsigned)i, cases[i].qr, cases[i].wo, cases[i].mode,
				 cases[i].B);
			mla_check_case(&c);
			mla_free(&c);
		}
}
END_TEST

/* the front's stages: their shapes, and c_kv_norm's rows normalised */
START_TEST(test_mla_stages)
{
	struct mla_case c;
	seen sn;
	mha_observer obs = watch_all(&sn);
	double out[5 * 4];

	mla_make(&c, 2, 6, 1, MHA_ROPE_INTERLEAVED, 1);
	ck_assert_int_eq(mha_forward(out, &c.d, &c.in, &c.w, &c.cfg, &obs, NULL), MHA_OK);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_C_Q][0], 6);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_Q_NOPE][0], 3 * 3);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_Q_PE_ROT][0], 3 * 4);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_K_PE][0], 4);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_K_NOPE][0], 3 * 3);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_Q][0], 3 * 7);
	ck_assert_uint_eq(sn.cols[MHA_STAGE_V][0], 3 * 2);
	/* position 0 is not turned, but laid out as DeepSeek-V3's code: evens, then odds */
	ck_assert(sn.m[MHA_STAGE_K_PE_ROT][0][0] == sn.m[MHA_STAGE_K_PE][0][0]);
	ck_assert(sn.m[MHA_STAGE_K_PE_ROT][0][1] == sn.m[MHA_STAGE_K_PE][0][2]);
	ck_assert(sn.m[MHA_STAGE_K_PE_ROT][0][2] == sn.m[MHA_STAGE_K_PE][0][1]);
	/* each head's key: [k_nope_h, k_pe_rot] */
	ck_assert(sn.m[MHA_STAGE_K][0][7 + 3] == sn.m[MHA_STAGE_K_PE_ROT][0][0]);
	ck_assert(sn.m[MHA_STAGE_K][0][7] == sn.m[MHA_STAGE_K_NOPE][0][3]);
	for (size_t i = 0; i < 5; i++) {
		double ss = 0;

		for (size_t t = 0; t < 5; t++) {
			const double v = sn.m[MHA_STAGE_C_KV_NORM][0][i * 5 + t] / c.kvan[t];

			ss += v * v;
		}
		ck_assert_double_eq_tol(ss / 5, 1, 1e-4);
	}
	seen_free(&sn);
	mla_free(&c);
}
END_TEST

/* the refusals, each with its fault */
START_TEST(test_mla_refused)
{
	struct mla_case c;
	double out[5 * 4];
	mha_fault f = MHA_INIT(mha_fault);
	mha_weights w;

	mla_make(&c, 0, 6, 1, MHA_ROPE_INTERLEAVED, 1);
	w = c.w;
	w.W_KVB = NULL;
	ck_assert_int_eq(mha_forward(out, &c.d, &c.in, &w, &c.cfg, NULL, NULL), MHA_ERR_MLA);
	w = c.w;
	w.W_QA = NULL;
	ck_assert_int_eq(mha_forward(out, &c.d, &c.in, &w, &c.cfg, NULL, NULL), MHA_ERR_MLA);
	w = c.w;
	w.W_K = c.W_Q;
	ck_assert_int_eq(mha_forward(out, &c.d, &c.in, &w, &c.cfg, NULL, NULL), MHA_ERR_MLA);
	c.cfg.mla.d_rope = 3; /* odd, turned */
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	ck_assert_int_eq(f.kind, MHA_FAULT_MLA_SHAPE);
	c.cfg.mla.d_rope = 7; /* no unturned part left */
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	c.cfg.mla.d_rope = 4;
	c.cfg.mla.eps = -1;
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	ck_assert_int_eq(f.kind, MHA_FAULT_MLA_EPS);
	c.cfg.mla.eps = 1e-6;
	c.kvan[3] = NAN;
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	ck_assert_int_eq(f.kind, MHA_FAULT_MLA_KV_A_NORM);
	ck_assert_uint_eq(f.index, 3);
	c.kvan[3] = 1;
	c.cfg.norm.kind = MHA_NORM_RMS;
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	c.cfg.norm.kind = MHA_NORM_NONE;
	c.d.kv_heads = 1;
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_ERR_MLA);
	c.d.kv_heads = 0;
	ck_assert_int_eq(mha_check_fault(&c.d, &c.cfg, &f), MHA_OK);
	ck_assert_str_ne(mha_strerror(MHA_ERR_MLA), "unknown status");
	mla_free(&c);
}
END_TEST

/* what a run allocates stays within mha_memory's and mha_backward_memory's answers */
START_TEST(test_mla_memory)
{
	struct mla_case c;
	double *out;
	size_t peak, est;

	if (!track_works())
		return;
	mla_make(&c, 0, 6, 1, MHA_ROPE_INTERLEAVED, 2);
	out = malloc(mla_out_n(&c) * sizeof(double));
	for (int form = 0; form < 2; form++) {
		c.cfg.mla.absorbed = form;
		est = mha_memory(&c.d, &c.cfg, 0, 0);
		track_start();
		ck_assert_int_eq(mha_forward(out, &c.d, &c.in, &c.w, &c.cfg, NULL, NULL), MHA_OK);
		peak = track_stop();
		ck_assert_msg(peak <= est, "form %d: peak %zu over the estimate %zu", form, peak, est);
	}
	c.cfg.mla.absorbed = 0;
	{
		const size_t B = 2, H = 3;
		double *dq = malloc(B * 5 * 7 * sizeof(double)), *dwkvb = malloc(5 * H * 5 * sizeof(double));
		const mha_grads g = { .size = sizeof(g), .dxq = dq, .dW_KVB = dwkvb };

		est = mha_backward_memory(&c.d, &c.cfg, 0);
		track_start();
		ck_assert_int_eq(mha_backward(&g, out, &c.d, &c.in, &c.w, &c.cfg, NULL, NULL), MHA_OK);
		peak = track_stop();
		ck_assert_msg(peak <= est, "backward: peak %zu over the estimate %zu", peak, est);
		free(dq);
		free(dwkvb);
	}
	free(out);
	mla_free(&c);
}
END_TEST

/* the front's gradient stages a backward run handed over: their widths */
static int mla_grad_seen(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows,
			 size_t cols)
{
	size_t *cols_of = ctx;

	(void)head, (void)m, (void)rows;
	cols_of[s] = cols;
	return 0;
}

/* L = Σ out·r for fixed random r: its value, for the central differences */
static double mla_loss(const struct mla_case *c, const double *r)
{
	const size_t n = mla_out_n(c);
	double *out = malloc(n * sizeof(double));
	long double s = 0;

	ck_assert_int_eq(mha_forward(out, &c->d, &c->in, &c->w, &c->cfg, NULL, NULL), MHA_OK);
	for (size_t i = 0; i < n; i++)
		s += (long double)out[i] * r[i];
	free(out);
	return (double)s;
}

/* d L / d p[i] by central differences (h = 1e-5), every entry of p */
static void mla_numeric(struct mla_case *c, const double *r, double *p, size_t n, double *grad)
{
	for (size_t i = 0; i < n; i++) {
		const double keep = p[i], h = 1e-5 * fmax(1, fabs(keep));
		double up, down;

		p[i] = keep + h;
		up = mla_loss(c, r);
		p[i] = keep - h;
		down = mla_loss(c, r);
		p[i] = keep;
		grad[i] = (up - down) / (2 * h);
	}
}

/* every weight's, norm's and input's gradient against central differences,
 * then float32's against float64's */
START_TEST(test_mla_backward)
{
	static const struct {
		size_t qr, B;
		mha_rope_mode mode;
	} cases[] = { { 6, 1, MHA_ROPE_INTERLEAVED }, { 0, 2, MHA_ROPE_HALF } };

	for (size_t k = 0; k < 2; k++) {
		struct mla_case c;
		const size_t B = cases[k].B;
		size_t n_out, nw[9];
		double *r, *an[9], *nu[9], *param[9];
		mha_grads g = MHA_INIT(mha_grads);

		mla_make(&c, 3 + (unsigned)k, cases[k].qr, 1, cases[k].mode, B);
		n_out = mla_out_n(&c);
		r = rnd_matrix(n_out);
		param[0] = c.xq, nw[0] = B * c.d.n_q * c.d.d_q_in;
		param[1] = c.xk, nw[1] = B * c.d.n_kv * c.d.d_k_in;
		param[2] = c.W_QA, nw[2] = c.d.d_q_in * c.qr;
		param[3] = c.W_Q, nw[3] = (c.qr ? c.qr : c.d.d_q_in) * c.d.heads * c.d.d_k;
		param[4] = c.W_KVA, nw[4] = c.d.d_k_in * (c.kr + c.dr);
		param[5] = c.W_KVB, nw[5] = c.kr * c.d.heads * (c.dn + c.d.d_v);
		param[6] = c.W_O, nw[6] = c.d.heads * c.d.d_v * 4;
		param[7] = c.qan, nw[7] = c.qr;
		param[8] = c.kvan, nw[8] = c.kr;
		for (int i = 0; i < 9; i++) {
			an[i] = nw[i] ? calloc(nw[i], sizeof(double)) : NULL;
			nu[i] = nw[i] ? calloc(nw[i], sizeof(double)) : NULL;
		}
		g.dxq = an[0];
		g.dxk = an[1];
		g.dW_QA = an[2];
		g.dW_Q = an[3];
		g.dW_KVA = an[4];
		g.dW_KVB = an[5];
		g.dW_O = an[6];
		g.dq_a_norm = an[7];
		g.dkv_a_norm = an[8];
		ck_assert_int_eq(mha_backward(&g, r, &c.d, &c.in, &c.w, &c.cfg, NULL, NULL), MHA_OK);
		for (int i = 0; i < 9; i++) {
			if (!nw[i])
				continue;
			/* self-attention: X is both sources, its gradient their sum */
			if (i == 1 && c.xk == c.xq)
				continue;
			mla_numeric(&c, r, param[i], nw[i], nu[i]);
			if (i == 0 && c.xk == c.xq)
				for (size_t t = 0; t < nw[0]; t++)
					an[0][t] += an[1][t];
			grad_close("mla gradient", an[i], nu[i], nw[i], 2e-6);
		}
		/* the plain path (an observer of the heads) gives the same */
		{
			size_t gcols[MHA_GRAD_COUNT] = { 0 };
			mha_grad_observer go = { .size = sizeof(go), .fn = mla_grad_seen, .ctx = gcols,
						 .wanted = ~0u };
			double *dk2 = malloc(nw[5] * sizeof(double));
			mha_grads g2 = { .size = sizeof(g2), .dW_KVB = dk2 };
			mha_report rep = MHA_INIT(mha_report);

			ck_assert_int_eq(mha_backward(&g2, r, &c.d, &c.in, &c.w, &c.cfg, &go, &rep),
					 MHA_OK);
			ck_assert_int_eq(rep.fast_path, 0);
			check_close("mla plain dW_KVB", dk2, an[5], nw[5]);
			ck_assert_uint_eq(gcols[MHA_GRAD_DC_KV], c.kr);
			ck_assert_uint_eq(gcols[MHA_GRAD_DK_PE], c.dr);
			ck_assert_uint_eq(gcols[MHA_GRAD_DC_Q], c.qr);
			free(dk2);
		}
		/* float32's gradients of W_KVB and the kv norm */
		{
			struct mla_floats fl;
			float *rf = floats_of(r, n_out);
			float *g5 = malloc(nw[5] * sizeof(float)), *g8 = malloc(nw[8] * sizeof(float));
			const mha_grads_f32 gf = { .size = sizeof(gf), .dW_KVB = g5, .dkv_a_norm = g8 };
			double *d5, *d8;

			mla_floats_make(&fl, &c);
			ck_assert_int_eq(mha_backward_f32(&gf, rf, &c.d, &fl.in, &fl.w, &c.cfg, NULL),
					 MHA_OK);
			d5 = doubles_of(g5, nw[5]);
			d8 = doubles_of(g8, nw[8]);
			grad_close("mla f32 dW_KVB", d5, an[5], nw[5], 5e-5);
			grad_close("mla f32 dkv_a_norm", d8, an[8], nw[8], 5e-5);
			free(d5);
			free(d8);
			mla_floats_free(&fl);
			free(rf);
			free(g5);
			free(g8);
		}
		for (int i = 0; i < 9; i++) {
			free(an[i]);
			free(nu[i]);
		}
		free(r);
		mla_free(&c);
	}
}
END_TEST

void unit_add_mla(const struct unit_suite *u)
{
	tcase_add_test(u->ref, test_mla_reference);
	tcase_add_test(u->hand, test_mla_stages);
	tcase_add_test(u->err, test_mla_refused);
	tcase_add_test(u->ref, test_mla_memory);
	tcase_add_test(u->bw, test_mla_backward);
}

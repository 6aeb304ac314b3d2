/*
 * batch.c: batches: B sequences at once against each alone;
 * tests/unit/main.c runs them.
 */
#include "unit.h"

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
double *batch_of(const double *first, size_t n, size_t B)
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
	mha_weights w = MHA_INIT(mha_weights);
	mha_config cfg = MHA_INIT(mha_config);
	mha_dims d = MHA_INIT(mha_dims);
	size_t kv_lens[4], n_mask, oc, nout;
	double *xq, *xk, *xv, *bias = NULL, *plain, *fast, *two, *alone;
	unsigned char *allow = NULL;
	struct batch_seen bs;
	mha_observer obs = MHA_INIT(mha_observer);
	mha_report rep = MHA_INIT(mha_report);
	char what[96];

	make_case(&c, (unsigned)_i);
	d = c.d;
	d.batch = B;
	cfg = c.cfg;
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
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
	obs = (mha_observer){ .size = sizeof(mha_observer),
			      .fn = batch_record, .ctx = &bs, .sequence = batch_sequence,
			      .wanted = MHA_STAGE_BIT(MHA_STAGE_SOFTMAX) | MHA_STAGE_BIT(MHA_STAGE_OUTPUT) };
	ck_assert_int_eq(mha_forward(plain, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							       xq, xk, xv }, &w, &cfg, &obs, &rep), MHA_OK);
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
			ck_assert_int_eq(ref_forward(&r, &d1, &(mha_inputs){ .size = sizeof(mha_inputs),
									     xq + b * d.n_q * d.d_q_in,
					 xk + b * d.n_kv * d.d_k_in, xv + b * d.n_kv * d.d_v_in }, &w, &c1), 0);
			snprintf(what, sizeof(what), "batch case %d sequence %zu of %zu", _i, b, B);
			check_close(what, plain + b * nout, r.output, nout);
			if (r.blocked && first_seq < 0)
				first_seq = (int)b;
			blocked += r.blocked;
			/* the fast path on this sequence alone, for the bits below */
			ck_assert_int_eq(mha_forward(alone + b * nout, &d1, &(mha_inputs){ .size = sizeof(mha_inputs),
											   xq + b * d.n_q * d.d_q_in,
					 xk + b * d.n_kv * d.d_k_in, xv + b * d.n_kv * d.d_v_in }, &w, &c1, NULL, NULL),
					 MHA_OK);
			ref_free(&r);
		}
		ck_assert_uint_eq(rep.blocked_rows, blocked);
		if (blocked)
			ck_assert_uint_eq(rep.first_blocked_sequence, (size_t)first_seq);
		cfg.threads = 1;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								      xq, xk, xv }, &w, &cfg, NULL, &rep), MHA_OK);
		ck_assert_int_eq(rep.fast_path, 1);
		ck_assert_uint_eq(rep.blocked_rows, blocked);
		if (blocked)
			ck_assert_uint_eq(rep.first_blocked_sequence, (size_t)first_seq);
	}
	snprintf(what, sizeof(what), "batch case %d fast path", _i);
	check_close_norm(what, fast, plain, B * nout);
	cfg.threads = 2;
	ck_assert_int_eq(mha_forward(two, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     xq, xk, xv }, &w, &cfg, NULL, NULL), MHA_OK);
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
		ck_assert_int_eq(mha_forward_f32(o32, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									     x32[0], x32[1], x32[2] },
						 &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
								     W32[0], W32[1], W32[2], W32[3],
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
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = H, .kv_heads = G, .d_k = 3, .d_v = 3, .d_out = dm, .batch = B };
	const size_t wsize[4] = { dm * H * 3, dm * G * 3, dm * G * 3, H * 3 * dm };
	mha_weights w = MHA_INIT(mha_weights);
	mha_config cfg = { .size = sizeof(mha_config),
			   .causal = MHA_CAUSAL_BOTTOM_RIGHT, .kv_lens = kv_lens,
			   .window = { 1, 40, 0 },
			   .mask = { .bias = bias, .per_head = 1, .per_batch = 1 } };
	char *saved = env_save("MHA_KERNEL");
	mha_report rep = MHA_INIT(mha_report);

	for (int i = 0; i < 4; i++)
		W[i] = rnd_matrix(wsize[i]);
	w = (mha_weights){ .size = sizeof(mha_weights),
			   .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3] };
	cfg.exact = 1;
	ck_assert_int_eq(mha_forward(exact, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							       xq, xkv, xkv }, &w, &cfg, NULL, &rep), MHA_OK);
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
		ck_assert_int_eq(mha_forward(one, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     xq, xkv, xkv }, &w, &cfg, NULL, &rep), MHA_OK);
		ck_assert_uint_eq(rep.blocked_rows, H * (nq - 1));
		ck_assert_uint_eq(rep.first_blocked_sequence, 2);
		cfg.threads = 2;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								      xq, xkv, xkv }, &w, &cfg, NULL, NULL), MHA_OK);
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
						     &(mha_inputs){ .size = sizeof(mha_inputs),
								    xq + b * nq * dm, xkv + b * nkv * dm,
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
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = 2, .d_k = 2, .d_v = 2, .d_out = dm, .batch = B };
	mha_weights w = { .size = sizeof(mha_weights), .W_Q = W, .W_K = W, .W_V = W, .W_O = W };
	struct fast_seen fs = { 0 };
	mha_observer obs = { .size = sizeof(mha_observer),
			     .fn = fast_record, .ctx = &fs, .sequence = fast_sequence,
			     .wanted = MHA_STAGE_BIT(MHA_STAGE_Q) | MHA_STAGE_BIT(MHA_STAGE_K) |
				       MHA_STAGE_BIT(MHA_STAGE_V) | MHA_STAGE_BIT(MHA_STAGE_CONCAT) |
				       MHA_STAGE_BIT(MHA_STAGE_OUTPUT) };
	mha_report rep = MHA_INIT(mha_report);

	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, &w, NULL, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 1);
	/* Q, K, V of each sequence, then each concat, then each output: told before each */
	ck_assert_uint_eq(fs.calls, 5 * B);
	ck_assert_uint_eq(fs.told, 5 * B);
	for (size_t b = 0; b < B; b++) {
		mha_dims d1 = d;

		d1.batch = 0;
		ck_assert(!memcmp(fs.out[b], out + b * n * dm, n * dm * sizeof(double)));
		ck_assert_int_eq(mha_forward(one, &d1, &(mha_inputs){ .size = sizeof(mha_inputs),
								      x + b * n * dm, x + b * n * dm,
					     x + b * n * dm }, &w, NULL, NULL, NULL), MHA_OK);
		ck_assert(!memcmp(one, fs.out[b], n * dm * sizeof(double)));
		free(fs.q[b]);
		free(fs.out[b]);
	}
	/* an observer that stops: at once, in the batch too */
	obs.fn = ignore_stop;
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, &w, NULL, &obs, NULL),
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
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
		       .heads = 2, .kv_heads = 1, .d_k = 4, .d_v = 4, .batch = B };
	mha_config cfg = { .size = sizeof(mha_config),
			   .causal = MHA_CAUSAL_BOTTOM_RIGHT, .kv_lens = kv_lens,
			   .alibi = { .on = 1 }, .rope = { .mode = MHA_ROPE_HALF },
			   .window = { 1, 2, -1 }, .sinks = sinks, .softcap = 4 };
	mha_weights w = MHA_INIT(mha_weights);
	char what[64];

	W[0] = rnd_matrix(dm * 8);
	W[1] = rnd_matrix(dm * 4);
	W[2] = rnd_matrix(dm * 4);
	w = (mha_weights){ .size = sizeof(mha_weights), .W_Q = W[0], .W_K = W[1], .W_V = W[2] };
	cfg.exact = 1;
	ck_assert_int_eq(mha_forward(plain, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							       x, kv, kv }, &w, &cfg, NULL, NULL), MHA_OK);
	cfg.exact = 0;
	ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							      x, kv, kv }, &w, &cfg, NULL, NULL), MHA_OK);
	for (size_t b = 0; b < B; b++) {
		mha_dims d1 = d;
		mha_config c1 = cfg;
		const mha_inputs in1 = { .size = sizeof(mha_inputs),
					 x + b * nq * dm, kv + b * nkv * dm, kv + b * nkv * dm };
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
		ck_assert_int_eq(mha_forward(two, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								     x, kv, kv }, &w, &cfg, NULL, NULL),
				 MHA_OK);
		cfg.threads = 1;
		ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								      x, kv, kv }, &w, &cfg, NULL, NULL),
				 MHA_OK);
		ck_assert_msg(!memcmp(two, fast, sizeof(two)), "1 and 2 threads differ");
		for (size_t i = 0; i < B * nq * dm; i++)
			fx[i] = (float)x[i];
		for (size_t i = 0; i < B * nkv * dm; i++)
			fkv[i] = (float)kv[i];
		for (int m = 0; m < 3; m++)
			for (size_t i = 0; i < wn[m]; i++)
				fW[m][i] = (float)W[m][i];
		ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									      fx, fkv, fkv },
						 &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
								     .W_Q = fW[0], .W_K = fW[1],
								     .W_V = fW[2] }, &cfg, NULL),
				 MHA_OK);
		for (size_t i = 0; i < B * nq * 8; i++) {
			maxabs = fmax(maxabs, fabs(plain[i]));
			/* not fmax(worst, fabs((double)fout[i] - …)): GCC 12's aarch64
			 * vectoriser stops with an internal error at that reduction */
			const double off = fabs((double)fout[i] - plain[i]);

			worst = off > worst ? off : worst;
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
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 2, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1, .batch = 2 };
	mha_config cfg = { .size = sizeof(mha_config), .mask = { .allow = shared } };
	double out[4], fast[4];

	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL,
				     &(mha_config){ .size = sizeof(mha_config),
						    .mask = cfg.mask, .exact = 1 }, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward(fast, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							      x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	/* row 0 of each sequence sees its first key alone: its value */
	ck_assert(out[0] == 1 && out[2] == 3);
	ck_assert(fabs(fast[0] - 1) < 1e-15 && fabs(fast[2] - 3) < 1e-15);
	cfg.mask = (mha_mask){ .allow = each, .per_batch = 1 };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	/* sequence 1, row 0 sees key 1 alone: 4 */
	ck_assert(out[0] == 1 && out[2] == 4);
	/* per-sequence lengths: sequence 1 keeps key 0 alone (value 3), sequence 0 all */
	cfg = (mha_config){ .size = sizeof(mha_config), .kv_lens = lens };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL, &cfg, NULL, NULL), MHA_OK);
	ck_assert(out[2] == 3 && out[3] == 3);
	ck_assert(out[0] > 1 && out[0] < 2);
	/* a length past n_kv */
	cfg.kv_lens = (const size_t[]){ 1, 3 };
	ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							     x, x, x }, NULL, &cfg, NULL, NULL), MHA_ERR_KV_LEN);
	ck_assert_int_eq(mha_check(&d, &cfg), MHA_ERR_KV_LEN);
	ck_assert_int_eq(mha_causal_offset(&d, &(mha_config){ .size = sizeof(mha_config),
							      .causal = MHA_CAUSAL_BOTTOM_RIGHT,
							     .kv_lens = lens }, 1), -1);
	ck_assert_int_eq(mha_causal_offset(&d, &(mha_config){ .size = sizeof(mha_config),
							      .kv_lens = lens }, 1), 0);
}
END_TEST

void unit_add_batch(const struct unit_suite *u)
{
	tcase_add_loop_test(u->ref, test_batch_against_reference, 0, 60);
	tcase_add_test(u->ref, test_batch_fast_blocks);
	tcase_add_test(u->ref, test_exp_accuracy);
	tcase_add_test(u->ref, test_batch_rope_alibi);
	tcase_add_test(u->hand, test_batch_mask_by_hand);
	tcase_add_test(u->hand, test_batch_fast_observer);
}

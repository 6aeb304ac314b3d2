/*
 * backward.c: mha_backward against the reference and finite differences,
 * batches; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- the backward pass (mha_backward) ------------------------------------ */

/*
 * The case's scale: the largest entry of any of its gradients.  A gradient
 * that is zero in exact arithmetic (db_K: the softmax does not change when
 * every key's score moves alike, so Σ_j dS_ij = 0) comes out as the rounding
 * of the terms that cancel, which are of the case's size, not its own.
 */
double grad_floor;

double ref_grads_scale(const ref_grads *r, const mha_dims *d)
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
void grad_close(const char *what, const double *got, const double *want, size_t n, double tol)
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

void grads_alloc(struct grad_set *s, const mha_dims *d, size_t B)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t n[N_GRADS] = { B * d->n_q * d->d_q_in, B * d->n_kv * d->d_k_in,
				    B * d->n_kv * d->d_v_in, d->d_q_in * d->heads * d->d_k,
				    d->d_k_in * G * d->d_k, d->d_v_in * G * d->d_v,
				    d->heads * d->d_v * (d->d_out ? d->d_out : 1), d->heads * d->d_k,
				    G * d->d_k, G * d->d_v, d->d_out ? d->d_out : 1, d->heads,
				    d->heads * d->d_k, G * d->d_k };

	for (int i = 0; i < N_GRADS; i++) {
		s->n[i] = n[i];
		s->all[i] = malloc(n[i] * sizeof(double));
		/* what the library must overwrite or leave: a NaN shows either way */
		for (size_t k = 0; k < n[i]; k++)
			s->all[i][k] = NAN;
	}
	s->g = (mha_grads){ .size = sizeof(mha_grads),
			    s->all[0], s->all[1], s->all[2], s->all[3], s->all[4], s->all[5],
			    s->all[6], s->all[7], s->all[8], s->all[9], s->all[10], s->all[11],
			    s->all[12], s->all[13] };
}

/* two runs' gradients, every array: the very same bits */
int grads_same(const struct grad_set *a, const struct grad_set *b)
{
	for (int i = 0; i < N_GRADS; i++)
		if (a->n[i] != b->n[i] || memcmp(a->all[i], b->all[i], a->n[i] * sizeof(double)))
			return 0;
	return 1;
}

void grads_free(struct grad_set *s)
{
	for (int i = 0; i < N_GRADS; i++)
		free(s->all[i]);
}

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
int gignore(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx;
	(void)s;
	(void)head;
	(void)m;
	(void)rows;
	(void)cols;
	return 0;
}

void gseen_free(gseen *sn)
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
	mha_weights w = MHA_INIT(mha_weights);
	mha_inputs in = MHA_INIT(mha_inputs);
	ref_grads r;
	struct grad_set a, b, e, t1, t3;
	gseen sn, sf;
	mha_grad_observer obs = MHA_INIT(mha_grad_observer), fobs = MHA_INIT(mha_grad_observer);
	mha_report rep = MHA_INIT(mha_report), frep = MHA_INIT(mha_report);
	mha_config exact = MHA_INIT(mha_config), one = MHA_INIT(mha_config), three = MHA_INIT(mha_config);
	double *dout;
	size_t oc, G;
	char what[64];

	make_case(&c, (unsigned)_i);
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	in = (mha_inputs){ .size = sizeof(mha_inputs), c.xq, c.xk, c.xv };
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
	obs = (mha_grad_observer){ .size = sizeof(mha_grad_observer),
				   .fn = grecord, .ctx = &sn, .wanted = ~0u };
	/* the fast path: whole-model stages only */
	fobs = (mha_grad_observer){ .size = sizeof(mha_grad_observer), .fn = grecord, .ctx = &sf,
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
	if (c.cfg.norm.kind) {
		const size_t lq = c.cfg.norm.over_all || c.cfg.norm.per_head ? c.d.heads * c.d.d_k
									    : c.d.d_k;
		const size_t lk = c.cfg.norm.over_all || c.cfg.norm.per_head ? G * c.d.d_k : c.d.d_k;

		GRAD("dq_norm", sn.m[MHA_GRAD_DQ_NORM][0], r.dq_norm, c.d.n_q * c.d.heads * c.d.d_k);
		GRAD("dk_norm", sn.m[MHA_GRAD_DK_NORM][0], r.dk_norm, c.d.n_kv * G * c.d.d_k);
		if (c.norm_q) {
			GRAD("dq_norm weights", a.g.dq_norm, r.dq_norm_w, lq);
			GRAD("dk_norm weights", a.g.dk_norm, r.dk_norm_w, lk);
			GRAD("fast dq_norm weights", b.g.dq_norm, r.dq_norm_w, lq);
			GRAD("fast dk_norm weights", b.g.dk_norm, r.dk_norm_w, lk);
		} else {
			ck_assert(isnan(a.g.dq_norm[0]) && isnan(b.g.dk_norm[0]));
		}
	} else {
		ck_assert(!sn.m[MHA_GRAD_DQ_NORM][0] && isnan(a.g.dq_norm[0]));
	}
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
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 3, .n_kv = k % 2 ? 4 : 3, .d_q_in = 4, .d_k_in = k % 2 ? 3 : 4,
		       .d_v_in = k % 2 ? 3 : 4, .heads = 2, .kv_heads = k % 3 == 2 ? 1 : 2,
		       .d_k = 2, .d_v = 2, .d_out = 3 };
	const size_t G = d.kv_heads;
	double *xq, *xkv, *W[4], *b[4], *dout, sinks[2] = { 0.3, -0.5 }, slopes[2] = { 0.5, -0.25 };
	double bias[3 * 4];
	mha_config cfg = { .size = sizeof(mha_config) };
	mha_weights w = MHA_INIT(mha_weights);
	mha_inputs in = MHA_INIT(mha_inputs);
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
	w = (mha_weights){ .size = sizeof(mha_weights),
			   W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] };
	in = (mha_inputs){ .size = sizeof(mha_inputs), xq, xkv, xkv };
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
/* an editor (mha_grad_observer.edit): mode 0 changes nothing, 1 sets each
 * row's D to 0, 2 stops the run */
struct editing {
	int mode;
	size_t calls;
};

static int edit_stage(void *ctx, mha_grad_stage s, int head, size_t row, double *m, size_t rows,
		      size_t cols)
{
	struct editing *e = ctx;

	(void)head;
	(void)row;
	(void)rows;
	(void)cols;
	e->calls++;
	if (e->mode == 2)
		return 1;
	if (e->mode == 1 && s == MHA_GRAD_HEAD_D)
		m[0] = 0;
	return 0;
}

/*
 * The editor: one that changes nothing leaves the plain path's bits as they
 * are (and takes the plain path, though nothing per head is watched); one
 * that sets D to 0 makes dS = P o dP, entry by entry, as the observer sees
 * P, dP and dS; one that fails stops the run with MHA_ERR_OBSERVER.
 */
START_TEST(test_backward_editor)
{
	struct random_case c;
	mha_weights w;
	mha_inputs in;
	struct grad_set a, b, z;
	struct editing keep = { 0, 0 }, no_d = { 1, 0 }, fail = { 2, 0 };
	gseen sn;
	mha_grad_observer eobs, dobs;
	mha_report rep = MHA_INIT(mha_report);
	mha_config exact;
	double *dout;

	make_case(&c, (unsigned)_i);
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
	in = (mha_inputs){ .size = sizeof(mha_inputs), c.xq, c.xk, c.xv };
	dout = rnd_matrix(c.d.n_q * mha_output_cols(&c.d, c.wo));
	grads_alloc(&a, &c.d, 1);
	grads_alloc(&b, &c.d, 1);
	grads_alloc(&z, &c.d, 1);
	exact = c.cfg;
	exact.exact = 1;
	eobs = (mha_grad_observer){ .size = sizeof(mha_grad_observer), .edit = edit_stage,
				    .edit_ctx = &keep };
	ck_assert_int_eq(mha_backward(&a.g, dout, &c.d, &in, &w, &exact, NULL, NULL), MHA_OK);
	ck_assert_int_eq(mha_backward(&b.g, dout, &c.d, &in, &w, &c.cfg, &eobs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, 0);
	ck_assert(keep.calls > 0);
	ck_assert(grads_same(&a, &b));
	eobs.edit_ctx = &fail;
	ck_assert_int_eq(mha_backward(&b.g, dout, &c.d, &in, &w, &c.cfg, &eobs, NULL),
			 MHA_ERR_OBSERVER);
	memset(&sn, 0, sizeof(sn));
	sn.last = -1;
	sn.order_ok = 1;
	dobs = (mha_grad_observer){ .size = sizeof(mha_grad_observer), .fn = grecord, .ctx = &sn,
				    .wanted = ~0u, .edit = edit_stage, .edit_ctx = &no_d };
	ck_assert_int_eq(mha_backward(&z.g, dout, &c.d, &in, &w, &c.cfg, &dobs, NULL), MHA_OK);
	for (size_t h = 0; h < c.d.heads && h < 8; h++) {
		const double *P = sn.m[MHA_GRAD_HEAD_P][h + 1], *dP = sn.m[MHA_GRAD_HEAD_DP][h + 1];
		const double *dS = sn.m[MHA_GRAD_HEAD_DS][h + 1], *D = sn.m[MHA_GRAD_HEAD_D][h + 1];

		for (size_t i = 0; i < c.d.n_q; i++) {
			ck_assert(D[i] == 0);
			for (size_t j = 0; j < c.d.n_kv; j++)
				ck_assert_msg(dS[i * c.d.n_kv + j] == P[i * c.d.n_kv + j] * dP[i * c.d.n_kv + j],
					      "case %d head %zu (%zu, %zu)", _i, h, i, j);
		}
	}
	gseen_free(&sn);
	grads_free(&a);
	grads_free(&b);
	grads_free(&z);
	free(dout);
	free_case(&c);
}
END_TEST

START_TEST(test_backward_fully_masked_rows)
{
	mha_dims d = { .size = sizeof(mha_dims),
		       .n_q = 3, .n_kv = 3, .d_q_in = 2, .d_k_in = 2, .d_v_in = 2, .heads = 1,
		       .d_k = 2, .d_v = 2 };
	double x[6] = { 1e200, 2, 0.5, -1, 0.25, 0.75 }, sinks[1] = { 1.0 };
	unsigned char allow[9] = { 0, 0, 0, 1, 1, 0, 1, 1, 1 };
	mha_config cfg = { .size = sizeof(mha_config),
			   .mask.allow = allow, .sinks = sinks, .exact = _i };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	struct grad_set gs;
	mha_report rep = MHA_INIT(mha_report);
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
	cfg = (mha_config){ .size = sizeof(mha_config),
			    .causal = MHA_CAUSAL_OFFSET, .causal_offset = 5,
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
	mha_dims d = MHA_INIT(mha_dims);
	mha_config cfg = MHA_INIT(mha_config);
	mha_weights w = MHA_INIT(mha_weights);
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
	w = (mha_weights){ .size = sizeof(mha_weights),
			   c.W[0], c.W[1], c.W[2], c.W[3], c.b[0], c.b[1], c.b[2], c.b[3] };
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
	ck_assert_int_eq(mha_backward(&gs.g, dout, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
								      xq, xk, xv }, &w, &cfg, NULL, NULL),
			 MHA_OK);
	for (size_t b = 0; b < B; b++) {
		mha_config one = cfg;
		mha_dims d1 = d;
		ref_grads r;
		const mha_inputs in1 = { .size = sizeof(mha_inputs),
					 xq + b * d.n_q * d.d_q_in, xk + b * d.n_kv * d.d_k_in,
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

void unit_add_backward(const struct unit_suite *u)
{
	tcase_add_loop_test(u->bw, test_backward_against_reference, 0, 300);
	tcase_add_loop_test(u->bw, test_backward_finite_differences, 0, 14);
	tcase_add_loop_test(u->bw, test_backward_fully_masked_rows, 0, 2);
	tcase_add_loop_test(u->bw, test_backward_editor, 0, 24);
	tcase_add_loop_test(u->bw, test_backward_batch, 0, 40);
}

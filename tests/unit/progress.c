/*
 * progress.c: the progress an observer is told (mha_observer.progress,
 * mha_grad_observer.progress): from 0 to 1, never back, the last call 1,
 * on the calling thread only, a thousand calls at most, on the plain and
 * the fast path, forward and backward; and the same numbers as without.
 * tests/unit/main.c runs them.
 */
/* the float32 functions told how far they have come (mha.h's experimental part) */
#define MHA_EXPERIMENTAL
#include "unit.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

struct heard {
	size_t calls;
	double last;
	int backwards;   /* a fraction below the one before */
	int other_thread;
	int bad_phase;   /* NULL or empty */
	pthread_t caller;
	char phases[256];
};

static void listen(void *ctx, const char *phase, double done)
{
	struct heard *h = ctx;

	h->calls++;
	if (done < h->last || done > 1)
		h->backwards = 1;
	h->last = done;
	if (!pthread_equal(pthread_self(), h->caller))
		h->other_thread = 1;
	if (!phase || !*phase)
		h->bad_phase = 1;
	else if (!strstr(h->phases, phase) && strlen(h->phases) + strlen(phase) + 2 < sizeof(h->phases)) {
		strcat(h->phases, " ");
		strcat(h->phases, phase);
	}
}

static void check_heard(const struct heard *h, const char *what)
{
	ck_assert_msg(h->calls >= 2, "%s: told %zu times", what, h->calls);
	ck_assert_msg(h->calls <= 1100, "%s: told %zu times, past a thousand", what, h->calls);
	ck_assert_msg(!h->backwards, "%s: a fraction went back (or past 1)", what);
	ck_assert_msg(h->last == 1, "%s: the last fraction told is %g, not 1", what, h->last);
	ck_assert_msg(!h->other_thread, "%s: told from a thread not the caller's", what);
	ck_assert_msg(!h->bad_phase, "%s: a phase NULL or empty", what);
}

/* an observer that keeps nothing and lets the run go on */
static int look(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 0;
}

/* n tokens, d_model 64, 4 heads (2 key/value heads), causal, W_O */
static void make_big(struct random_case *c, size_t n)
{
	memset(c, 0, sizeof(*c));
	c->d = (mha_dims){ .size = sizeof(mha_dims), .n_q = n, .n_kv = n, .d_q_in = 64,
			   .d_k_in = 64, .d_v_in = 64, .heads = 4, .kv_heads = 2, .d_k = 16,
			   .d_v = 16, .d_out = 64 };
	c->cfg = (mha_config){ .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT,
			       .threads = 2 };
	c->xq = c->xk = c->xv = rnd_matrix(n * 64);
	c->W[0] = rnd_matrix(64 * 64);
	c->W[1] = rnd_matrix(64 * 32);
	c->W[2] = rnd_matrix(64 * 32);
	c->W[3] = rnd_matrix(64 * 64);
}

/* c's X and weights as floats, for the float32 functions (free_floats after) */
static void make_floats(const struct random_case *c, size_t n, mha_inputs_f32 *x,
			mha_weights_f32 *w, float *fw[4])
{
	float *fx = floats_of(c->xq, n * 64);

	for (int i = 0; i < 4; i++)
		fw[i] = floats_of(c->W[i], 64 * (i == 1 || i == 2 ? 32 : 64));
	x->xq = x->xk = x->xv = fx;
	w->W_Q = fw[0];
	w->W_K = fw[1];
	w->W_V = fw[2];
	w->W_O = fw[3];
}

static void free_floats(mha_inputs_f32 *x, float *fw[4])
{
	free((float *)x->xq);
	for (int i = 0; i < 4; i++)
		free(fw[i]);
}

static void free_big(struct random_case *c)
{
	free((double *)c->xq);
	for (int i = 0; i < 4; i++)
		free(c->W[i]);
}

START_TEST(test_progress_forward)
{
	/* 0: the fast path (no observer fn); 1: the plain path (a per-head stage watched) */
	const int plain = _i;
	struct random_case c;
	const size_t n = 700;
	double *out = malloc(n * 64 * sizeof(double)), *again = malloc(n * 64 * sizeof(double));
	struct heard h = { .caller = pthread_self() };
	mha_inputs x = { .size = sizeof(mha_inputs) };
	mha_weights w = MHA_INIT(mha_weights);
	mha_observer obs = { .size = sizeof(mha_observer), .progress = listen, .progress_ctx = &h };
	mha_report rep = MHA_INIT(mha_report);

	make_big(&c, n);
	x.xq = x.xk = x.xv = c.xq;
	w.W_Q = c.W[0];
	w.W_K = c.W[1];
	w.W_V = c.W[2];
	w.W_O = c.W[3];
	if (plain) {
		obs.fn = look;
		obs.wanted = MHA_STAGE_BIT(MHA_STAGE_SOFTMAX);
	}
	ck_assert_int_eq(mha_forward(out, &c.d, &x, &w, &c.cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, !plain);
	check_heard(&h, plain ? "forward, plain path" : "forward, fast path");
	ck_assert_msg(strstr(h.phases, "attention") && strstr(h.phases, "projections"),
		      "phases told:%s", h.phases);
	/* the same numbers as a run nobody listens to */
	obs.progress = NULL;
	ck_assert_int_eq(mha_forward(again, &c.d, &x, &w, &c.cfg, &obs, NULL), MHA_OK);
	ck_assert(!memcmp(out, again, n * 64 * sizeof(double)));
	free(out);
	free(again);
	free_big(&c);
}
END_TEST

START_TEST(test_progress_backward)
{
	/* 0: the fast path; 1: the plain path (cfg.exact) */
	const int plain = _i;
	struct random_case c;
	const size_t n = 500;
	struct heard h = { .caller = pthread_self() };
	struct grad_set a, b;
	mha_inputs x = { .size = sizeof(mha_inputs) };
	mha_weights w = MHA_INIT(mha_weights);
	mha_grad_observer obs = { .size = sizeof(mha_grad_observer), .progress = listen,
				  .progress_ctx = &h };
	mha_report rep = MHA_INIT(mha_report);

	make_big(&c, n);
	c.cfg.exact = plain;
	x.xq = x.xk = x.xv = c.xq;
	w.W_Q = c.W[0];
	w.W_K = c.W[1];
	w.W_V = c.W[2];
	w.W_O = c.W[3];
	grads_alloc(&a, &c.d, 1);
	grads_alloc(&b, &c.d, 1);
	ck_assert_int_eq(mha_backward(&a.g, NULL, &c.d, &x, &w, &c.cfg, &obs, &rep), MHA_OK);
	ck_assert_int_eq(rep.fast_path, !plain);
	check_heard(&h, plain ? "backward, plain path" : "backward, fast path");
	ck_assert_msg(strstr(h.phases, "backward"), "phases told:%s", h.phases);
	obs.progress = NULL;
	ck_assert_int_eq(mha_backward(&b.g, NULL, &c.d, &x, &w, &c.cfg, &obs, NULL), MHA_OK);
	ck_assert(grads_same(&a, &b));
	grads_free(&a);
	grads_free(&b);
	free_big(&c);
}
END_TEST

/* float32 told too: the forward (0) and the backward (1), the same numbers
 * as the calls without an observer */
START_TEST(test_progress_f32)
{
	const int back = _i;
	struct random_case c;
	const size_t n = 600;
	struct heard h = { .caller = pthread_self() };
	mha_observer obs = { .size = sizeof(mha_observer), .progress = listen, .progress_ctx = &h,
			     /* stages are not handed over in float32, and not looked at */
			     .fn = look, .wanted = MHA_STAGE_BIT(MHA_STAGE_SOFTMAX) };
	mha_grad_observer gobs = { .size = sizeof(mha_grad_observer), .progress = listen,
				   .progress_ctx = &h };
	mha_inputs_f32 x = { .size = sizeof(mha_inputs_f32) };
	mha_weights_f32 w = MHA_INIT(mha_weights_f32);
	float *fw[4];

	make_big(&c, n);
	make_floats(&c, n, &x, &w, fw);
	if (!back) {
		float *out = malloc(n * 64 * sizeof(float)), *again = malloc(n * 64 * sizeof(float));

		ck_assert_int_eq(mha_forward_f32_observed(out, &c.d, &x, &w, &c.cfg, &obs, NULL),
				 MHA_OK);
		check_heard(&h, "forward, float32");
		ck_assert_int_eq(mha_forward_f32(again, &c.d, &x, &w, &c.cfg, NULL), MHA_OK);
		ck_assert(!memcmp(out, again, n * 64 * sizeof(float)));
		free(out);
		free(again);
	} else {
		float *g1 = calloc(n * 64, sizeof(float)), *g2 = calloc(n * 64, sizeof(float));
		const mha_grads_f32 a = { .size = sizeof(mha_grads_f32), .dxq = g1 };
		const mha_grads_f32 b = { .size = sizeof(mha_grads_f32), .dxq = g2 };

		ck_assert_int_eq(mha_backward_f32_observed(&a, NULL, &c.d, &x, &w, &c.cfg, &gobs,
							   NULL), MHA_OK);
		check_heard(&h, "backward, float32");
		ck_assert_msg(strstr(h.phases, "backward"), "phases told:%s", h.phases);
		ck_assert_int_eq(mha_backward_f32(&b, NULL, &c.d, &x, &w, &c.cfg, NULL), MHA_OK);
		ck_assert(!memcmp(g1, g2, n * 64 * sizeof(float)));
		free(g1);
		free(g2);
	}
	free_floats(&x, fw);
	free_big(&c);
}
END_TEST

/* an observer of the size before 0.7.0 (without the progress fields) is
 * read as an older version: told nothing; one of a newer, larger size is
 * refused */
START_TEST(test_progress_old_size)
{
	const double x[4] = { 1, 0, 0, 1 };
	const float xf[4] = { 1, 0, 0, 1 };
	double out[4];
	float outf[4];
	const mha_dims d = { .size = sizeof(mha_dims), .n_q = 2, .n_kv = 2, .d_q_in = 2,
			     .d_k_in = 2, .d_v_in = 2, .heads = 1, .d_k = 2, .d_v = 2 };
	const mha_inputs in = { .size = sizeof(mha_inputs), .xq = x, .xk = x, .xv = x };
	const mha_inputs_f32 inf = { .size = sizeof(mha_inputs_f32), .xq = xf, .xk = xf,
				     .xv = xf };
	const mha_observer old = { .size = offsetof(mha_observer, progress) };
	const mha_grad_observer gold = { .size = offsetof(mha_grad_observer, progress) };
	/* 0.8.0's, without stop: told, never asked */
	struct heard h = { .caller = pthread_self() };
	const mha_observer o8 = { .size = offsetof(mha_observer, stop), .progress = listen,
				  .progress_ctx = &h };
	const mha_grads_f32 g = { .size = sizeof(mha_grads_f32), .dxq = outf };
	struct { mha_observer o; size_t more; } newer = { .o = { .size = sizeof(mha_observer) +
								  sizeof(size_t) } };

	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &old, NULL), MHA_OK);
	ck_assert_int_eq(mha_forward_f32_observed(outf, &d, &inf, NULL, NULL, &old, NULL), MHA_OK);
	ck_assert_int_eq(mha_backward_f32_observed(&g, NULL, &d, &inf, NULL, NULL, &gold, NULL),
			 MHA_OK);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &o8, NULL), MHA_OK);
	ck_assert_int_eq(h.last, 1);
	ck_assert_int_eq(mha_forward(out, &d, &in, NULL, NULL, &newer.o, NULL), MHA_ERR_VERSION);
	ck_assert_int_eq(mha_forward_f32_observed(outf, &d, &inf, NULL, NULL, &newer.o, NULL),
			 MHA_ERR_VERSION);
}
END_TEST

/* stop (0.9.0): asked on the calling thread; yes at the third question
 * stops the call there (MHA_ERR_STOPPED, the work left skipped: the
 * fraction told stays small); never yes: the same numbers as without */
struct asked {
	size_t calls, yes_at;
	int other_thread;
	pthread_t caller;
	const struct heard *h;
	double at_yes; /* the fraction told when the answer was yes */
};

static int ask(void *ctx)
{
	struct asked *a = ctx;

	if (!pthread_equal(pthread_self(), a->caller))
		a->other_thread = 1;
	if (++a->calls < a->yes_at)
		return 0;
	a->at_yes = a->h->last;
	return 1;
}

START_TEST(test_stop)
{
	/* 0, 1: forward fast and plain; 2, 3: backward fast and plain; 4: forward float32 */
	const int which = _i / 2, yes = _i % 2;
	static const char *const names[] = { "forward fast", "forward plain", "backward fast",
					     "backward plain", "forward float32" };
	struct random_case c;
	const size_t n = 600;
	struct heard h = { .caller = pthread_self() };
	struct asked a = { .yes_at = yes ? 3 : (size_t)-1, .caller = pthread_self(), .h = &h };
	double *out = malloc(n * 64 * sizeof(double)), *again = malloc(n * 64 * sizeof(double));
	float *fo = malloc(n * 64 * sizeof(float)), *fo2 = malloc(n * 64 * sizeof(float));
	float *fw[4] = { NULL };
	mha_inputs x = { .size = sizeof(mha_inputs) };
	mha_inputs_f32 xf = { .size = sizeof(mha_inputs_f32) };
	mha_weights w = MHA_INIT(mha_weights);
	mha_weights_f32 wf = MHA_INIT(mha_weights_f32);
	mha_observer obs = { .size = sizeof(mha_observer), .progress = listen, .progress_ctx = &h,
			     .stop = ask, .stop_ctx = &a };
	mha_grad_observer gobs = { .size = sizeof(mha_grad_observer), .progress = listen,
				   .progress_ctx = &h, .stop = ask, .stop_ctx = &a };
	struct grad_set g1, g2;
	mha_status st, want = yes ? MHA_ERR_STOPPED : MHA_OK;

	make_big(&c, n);
	x.xq = x.xk = x.xv = c.xq;
	w.W_Q = c.W[0];
	w.W_K = c.W[1];
	w.W_V = c.W[2];
	w.W_O = c.W[3];
	grads_alloc(&g1, &c.d, 1);
	grads_alloc(&g2, &c.d, 1);
	if (which == 1) {
		obs.fn = look;
		obs.wanted = MHA_STAGE_BIT(MHA_STAGE_SOFTMAX);
	}
	c.cfg.exact = which == 3;
	if (which <= 1) {
		st = mha_forward(out, &c.d, &x, &w, &c.cfg, &obs, NULL);
		if (!yes) {
			obs.stop = NULL; /* the same path, nobody asked */
			ck_assert_int_eq(mha_forward(again, &c.d, &x, &w, &c.cfg, &obs, NULL), MHA_OK);
			ck_assert(!memcmp(out, again, n * 64 * sizeof(double)));
		}
	} else if (which <= 3) {
		st = mha_backward(&g1.g, NULL, &c.d, &x, &w, &c.cfg, &gobs, NULL);
		if (!yes) {
			gobs.stop = NULL;
			ck_assert_int_eq(mha_backward(&g2.g, NULL, &c.d, &x, &w, &c.cfg, &gobs, NULL),
					 MHA_OK);
			ck_assert(grads_same(&g1, &g2));
		}
	} else {
		make_floats(&c, n, &xf, &wf, fw);
		st = mha_forward_f32_observed(fo, &c.d, &xf, &wf, &c.cfg, &obs, NULL);
		if (!yes) {
			ck_assert_int_eq(mha_forward_f32(fo2, &c.d, &xf, &wf, &c.cfg, NULL), MHA_OK);
			ck_assert(!memcmp(fo, fo2, n * 64 * sizeof(float)));
		}
	}
	ck_assert_msg(st == want, "%s: %s, not %s", names[which], mha_strerror(st),
		      mha_strerror(want));
	ck_assert_msg(!a.other_thread, "%s: asked from a thread not the caller's", names[which]);
	if (yes) {
		ck_assert_msg(a.calls == 3, "%s: asked %zu times, on after a yes", names[which],
			      a.calls);
		ck_assert_msg(h.last - a.at_yes < 0.05, "%s: %g of the work done after a yes at "
			      "%g", names[which], h.last, a.at_yes);
	} else {
		ck_assert_msg(a.calls >= 2, "%s: asked %zu times", names[which], a.calls);
	}
	grads_free(&g1);
	grads_free(&g2);
	free(out);
	free(again);
	free(fo);
	free(fo2);
	if (which == 4)
		free_floats(&xf, fw);
	free_big(&c);
}
END_TEST

void unit_add_progress(const struct unit_suite *u)
{
	tcase_add_loop_test(u->bw, test_stop, 0, 10);
	tcase_add_loop_test(u->ref, test_progress_forward, 0, 2);
	tcase_add_loop_test(u->bw, test_progress_backward, 0, 2);
	tcase_add_test(u->err, test_progress_old_size);
	tcase_add_loop_test(u->bw, test_progress_f32, 0, 2);
}

/*
 * bench_backward.c: time libmha's backward pass (mha_backward, the fast
 * path unless EXACT is 1, or mha_backward_f32 with DTYPE f32) on random
 * inputs, inside the process, as bench_backward.py times torch.autograd.
 * Self-attention with W_Q, W_K, W_V, W_O and their biases, every gradient
 * asked for, dO random.
 *
 *   bench_backward N D_MODEL HEADS CAUSAL(0|1) THREADS REPEATS [EXACT [DTYPE]]
 *
 * DTYPE is f64 (the default) or f32; f32 has the fast path only, and EXACT
 * is ignored there, as mha_backward_f32 ignores cfg->exact.
 *
 * Prints one line: "seconds=<best of REPEATS> maxrss_kib=<...> start_kib=<the
 * peak before the run: the program and libc> path=<...>
 * dtype=<...>".  Peak memory is the whole process's, inputs and gradients
 * included; in f32 every array is a float array, no double copy kept, so
 * that the peak is float32's.
 */
#include "../lib/mha.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static uint64_t state = 88172645463325252ULL;

static double uniform(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return (double)(state >> 11) / 9007199254740992.0 * 2 - 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *alloc(size_t n, size_t elem)
{
	void *p = malloc((n ? n : 1) * elem);

	if (!p) {
		perror("bench_backward");
		exit(2);
	}
	return p;
}

/* written, not calloc'ed: the pages count in maxrss as the library's would */
static double *fill(size_t n, double scale)
{
	double *p = alloc(n, sizeof(double));

	for (size_t i = 0; i < n; i++)
		p[i] = uniform() * scale;
	return p;
}

/* the same draws as fill(), rounded to float: f32 and f64 see the same data */
static float *fill_f32(size_t n, double scale)
{
	float *p = alloc(n, sizeof(float));

	for (size_t i = 0; i < n; i++)
		p[i] = (float)(uniform() * scale);
	return p;
}

/* rows of each gradient in g[] below: dxq, dxk, dxv (n, dm); dW_* (dm, dm); db_* (dm) */
static size_t grad_len(int i, size_t n, size_t dm)
{
	return i < 3 ? n * dm : i < 7 ? dm * dm : dm;
}

static void fail(mha_status st)
{
	fprintf(stderr, "bench_backward: %s\n", mha_strerror(st));
	exit(1);
}

static double run_f64(const mha_dims *d, const mha_config *cfg, int repeats, mha_report *rep)
{
	const size_t n = d->n_q, dm = d->d_out;
	double best = 1e300, *x, *W[4], *b[4], *dout, *g[11];

	x = fill(n * dm, 1.0);
	dout = fill(n * dm, 1.0);
	for (int i = 0; i < 4; i++) {
		W[i] = fill(dm * dm, 1.0 / 16);
		b[i] = fill(dm, 0.1);
	}
	for (int i = 0; i < 11; i++)
		g[i] = fill(grad_len(i, n, dm), 0);
	{
		const mha_grads gr = { .size = sizeof(mha_grads),
				       .dxq = g[0], .dxk = g[1], .dxv = g[2],
				       .dW_Q = g[3], .dW_K = g[4], .dW_V = g[5], .dW_O = g[6],
				       .db_Q = g[7], .db_K = g[8], .db_V = g[9], .db_O = g[10] };
		const mha_inputs in = { .size = sizeof(mha_inputs), .xq = x, .xk = x, .xv = x };
		const mha_weights w = { .size = sizeof(mha_weights),
					.W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3],
					.b_Q = b[0], .b_K = b[1], .b_V = b[2], .b_O = b[3] };

		for (int r = 0; r < repeats; r++) {
			const double t0 = now();
			const mha_status st = mha_backward(&gr, dout, d, &in, &w, cfg, NULL, rep);
			const double t = now() - t0;

			if (st != MHA_OK)
				fail(st);
			if (t < best)
				best = t;
		}
	}
	return best;
}

static double run_f32(const mha_dims *d, const mha_config *cfg, int repeats, mha_report *rep)
{
	const size_t n = d->n_q, dm = d->d_out;
	double best = 1e300;
	float *x, *W[4], *b[4], *dout, *g[11];

	/* drawn in the order run_f64 draws them */
	x = fill_f32(n * dm, 1.0);
	dout = fill_f32(n * dm, 1.0);
	for (int i = 0; i < 4; i++) {
		W[i] = fill_f32(dm * dm, 1.0 / 16);
		b[i] = fill_f32(dm, 0.1);
	}
	for (int i = 0; i < 11; i++)
		g[i] = fill_f32(grad_len(i, n, dm), 0);
	{
		const mha_grads_f32 gr = { .size = sizeof(mha_grads_f32),
					   .dxq = g[0], .dxk = g[1], .dxv = g[2],
					   .dW_Q = g[3], .dW_K = g[4], .dW_V = g[5], .dW_O = g[6],
					   .db_Q = g[7], .db_K = g[8], .db_V = g[9], .db_O = g[10] };
		const mha_inputs_f32 in = { .size = sizeof(mha_inputs_f32),
					    .xq = x, .xk = x, .xv = x };
		const mha_weights_f32 w = { .size = sizeof(mha_weights_f32),
					    .W_Q = W[0], .W_K = W[1], .W_V = W[2], .W_O = W[3],
					    .b_Q = b[0], .b_K = b[1], .b_V = b[2], .b_O = b[3] };

		for (int r = 0; r < repeats; r++) {
			const double t0 = now();
			const mha_status st = mha_backward_f32(&gr, dout, d, &in, &w, cfg, rep);
			const double t = now() - t0;

			if (st != MHA_OK)
				fail(st);
			if (t < best)
				best = t;
		}
	}
	return best;
}

int main(int argc, char **argv)
{
	size_t n, dm, H;
	int causal, threads, repeats, exact = 0, f32 = 0;
	double best;
	mha_report rep = { .size = sizeof(mha_report) };
	struct rusage ru, start;

	/* what the process holds before the run: the program and libc */
	getrusage(RUSAGE_SELF, &start);
	if (argc < 7 || argc > 9) {
		fputs("usage: bench_backward N D_MODEL HEADS CAUSAL THREADS REPEATS [EXACT [DTYPE]]\n",
		      stderr);
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	dm = strtoul(argv[2], NULL, 10);
	H = strtoul(argv[3], NULL, 10);
	causal = atoi(argv[4]);
	threads = atoi(argv[5]);
	repeats = atoi(argv[6]);
	if (argc >= 8)
		exact = atoi(argv[7]);
	if (argc == 9) {
		if (!strcmp(argv[8], "f32")) {
			f32 = 1;
		} else if (strcmp(argv[8], "f64")) {
			fprintf(stderr, "bench_backward: '%s': dtype is neither f64 nor f32\n", argv[8]);
			return 2;
		}
	}
	{
		const mha_dims d = { .size = sizeof(mha_dims),
				     .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
				     .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
		const mha_config cfg = { .size = sizeof(mha_config),
					 .causal = causal ? MHA_CAUSAL_TOP_LEFT : MHA_CAUSAL_NONE,
					 .threads = threads, .exact = exact };

		best = f32 ? run_f32(&d, &cfg, repeats, &rep) : run_f64(&d, &cfg, repeats, &rep);
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("seconds=%.6f maxrss_kib=%ld start_kib=%ld path=%s dtype=%s\n", best, ru.ru_maxrss,
	       start.ru_maxrss, rep.fast_path ? "fast" : "plain", f32 ? "f32" : "f64");
	return 0;
}

/*
 * bench_backward.c: time libmha's backward pass (mha_backward, the fast
 * path unless EXACT is 1) on random inputs, inside the process, as
 * bench_backward.py times torch.autograd.  Self-attention with W_Q, W_K,
 * W_V, W_O and their biases, every gradient asked for, dO random.
 *
 *   bench_backward N D_MODEL HEADS CAUSAL(0|1) THREADS REPEATS [EXACT]
 *
 * Prints one line: "seconds=<best of REPEATS> maxrss_kib=<...> path=<...>".
 * Peak memory is the whole process's, inputs and gradients included.
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

static double *fill(size_t n, double scale)
{
	double *p = malloc((n ? n : 1) * sizeof(double));

	if (!p) {
		perror("bench_backward");
		exit(2);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = uniform() * scale;
	return p;
}

int main(int argc, char **argv)
{
	size_t n, dm, H;
	int causal, threads, repeats, exact = 0;
	double best = 1e300, *x, *W[4], *b[4], *dout, *g[12];
	mha_report rep = { .size = sizeof(mha_report) };
	struct rusage ru;

	if (argc < 7 || argc > 8) {
		fputs("usage: bench_backward N D_MODEL HEADS CAUSAL THREADS REPEATS [EXACT]\n", stderr);
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	dm = strtoul(argv[2], NULL, 10);
	H = strtoul(argv[3], NULL, 10);
	causal = atoi(argv[4]);
	threads = atoi(argv[5]);
	repeats = atoi(argv[6]);
	if (argc == 8)
		exact = atoi(argv[7]);
	x = fill(n * dm, 1.0);
	dout = fill(n * dm, 1.0);
	for (int i = 0; i < 4; i++) {
		W[i] = fill(dm * dm, 1.0 / 16);
		b[i] = fill(dm, 0.1);
	}
	/* dxq, dxk, dxv, dW_Q, dW_K, dW_V, dW_O, db_Q, db_K, db_V, db_O */
	for (int i = 0; i < 11; i++)
		g[i] = fill(i < 3 ? n * dm : i < 7 ? dm * dm : dm, 0);
	{
		const mha_dims d = { .size = sizeof(mha_dims),
				     .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
				     .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
		const mha_config cfg = { .size = sizeof(mha_config),
					 .causal = causal ? MHA_CAUSAL_TOP_LEFT : MHA_CAUSAL_NONE,
					 .threads = threads, .exact = exact };
		const mha_grads gr = { .size = sizeof(mha_grads),
				       g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
				       g[10], NULL };

		for (int r = 0; r < repeats; r++) {
			const double t0 = now();
			mha_status st = mha_backward(&gr, dout, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
										   x, x, x },
						     &(mha_weights){ .size = sizeof(mha_weights),
								     W[0], W[1], W[2], W[3], b[0], b[1],
								     b[2], b[3] }, &cfg, NULL, &rep);

			if (st != MHA_OK) {
				fprintf(stderr, "bench_backward: %s\n", mha_strerror(st));
				return 1;
			}
			if (now() - t0 < best)
				best = now() - t0;
		}
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("seconds=%.6f maxrss_kib=%ld path=%s\n", best, ru.ru_maxrss,
	       rep.fast_path ? "fast" : "plain");
	return 0;
}

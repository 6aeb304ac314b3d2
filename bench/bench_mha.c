/*
 * bench_mha.c: time libmha's forward pass on random inputs, inside the
 * process (no file reading, no start-up), as bench.py times PyTorch.
 *
 *   bench_mha [--dump DIR] N D_MODEL HEADS CAUSAL(0|1) f32|f64 THREADS REPEATS [WINDOW [BATCH]]
 *
 * WINDOW w (with CAUSAL 1): a sliding window, each query sees itself and
 * the w keys before it (--causal --window w): about n·w of the work; -1:
 * none.  BATCH B: B sequences of N tokens in one call (mha_dims.batch),
 * B times the work of one.
 *
 * Prints one line: "seconds=<median of REPEATS> best=<...> gflops=<...>
 * maxrss_kib=<...> lib_peak_kib=<...> lib_bytes=<...> kernel=<...>".
 * maxrss is the whole process's peak, inputs included; lib_peak is what
 * the forward passes added to it (the library's own peak, in resident
 * pages), lib_bytes what mha_memory() says the library allocates.
 *
 * --dump DIR writes the inputs and the output as raw little-endian arrays
 * of the element type (DIR/x.bin (B·N, D), W_Q.bin … W_O.bin (D, D),
 * b_Q.bin … b_O.bin (D), out.bin (B·N, D)), for bench.py to give the peers
 * the same problem and check their outputs against this one.
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

static void dump(const char *dir, const char *name, const void *p, size_t n, int f32)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, f32 ? sizeof(float) : sizeof(double), n, f) != n || fclose(f)) {
		perror(path);
		exit(2);
	}
}

static int by_value(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static long maxrss_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

static void *fill(size_t n, int f32, double scale)
{
	void *p = malloc(n * (f32 ? sizeof(float) : sizeof(double)));

	if (!p) {
		perror("bench_mha");
		exit(2);
	}
	for (size_t i = 0; i < n; i++) {
		const double v = uniform() * scale;

		if (f32)
			((float *)p)[i] = (float)v;
		else
			((double *)p)[i] = v;
	}
	return p;
}

int main(int argc, char **argv)
{
	size_t n, dm, H;
	int causal, f32, threads, repeats;
	ptrdiff_t window = -1;
	size_t batch = 1, lib_bytes;
	double *times, flops;
	void *x, *W[4], *b[4], *out;
	const char *dir = NULL;
	long rss_before;

	if (argc > 2 && !strcmp(argv[1], "--dump")) {
		dir = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc < 8 || argc > 10) {
		fputs("usage: bench_mha [--dump DIR] N D_MODEL HEADS CAUSAL f32|f64 THREADS REPEATS "
		      "[WINDOW [BATCH]]\n", stderr);
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	dm = strtoul(argv[2], NULL, 10);
	H = strtoul(argv[3], NULL, 10);
	causal = atoi(argv[4]);
	f32 = !strcmp(argv[5], "f32");
	threads = atoi(argv[6]);
	repeats = atoi(argv[7]);
	if (argc >= 9)
		window = (ptrdiff_t)strtol(argv[8], NULL, 10);
	if (argc == 10)
		batch = strtoul(argv[9], NULL, 10);
	if (repeats < 1)
		repeats = 1;
	times = malloc((size_t)repeats * sizeof(*times));
	if (!times) {
		perror("bench_mha");
		return 2;
	}
	x = fill(batch * n * dm, f32, 1.0);
	for (int i = 0; i < 4; i++) {
		W[i] = fill(dm * dm, f32, 1.0 / 16);
		b[i] = fill(dm, f32, 0.1);
	}
	out = fill(batch * n * dm, f32, 0);
	rss_before = maxrss_kib();
	{
		const mha_dims d = { .size = sizeof(mha_dims),
				     .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
				     .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm,
				     .batch = batch };
		const mha_config cfg = { .size = sizeof(mha_config),
					 .causal = causal ? MHA_CAUSAL_TOP_LEFT : MHA_CAUSAL_NONE,
					 .threads = threads,
					 .window = { window >= 0, window, -1 } };

		lib_bytes = mha_memory(&d, &cfg, 0, f32);

		for (int r = 0; r < repeats; r++) {
			const double t0 = now();
			mha_status st;

			if (f32)
				st = mha_forward_f32(out, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
										 x, x, x },
						     &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
									 W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] },
						     &cfg, NULL);
			else
				st = mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
									 x, x, x },
						 &(mha_weights){ .size = sizeof(mha_weights),
								 W[0], W[1], W[2], W[3], b[0], b[1], b[2], b[3] },
						 &cfg, NULL, NULL);
			if (st != MHA_OK) {
				fprintf(stderr, "bench_mha: %s\n", mha_strerror(st));
				return 1;
			}
			times[r] = now() - t0;
		}
	}
	qsort(times, (size_t)repeats, sizeof(*times), by_value);
	if (dir) {
		static const char *const wn[4] = { "W_Q", "W_K", "W_V", "W_O" };
		static const char *const bn[4] = { "b_Q", "b_K", "b_V", "b_O" };

		dump(dir, "x", x, batch * n * dm, f32);
		for (int i = 0; i < 4; i++) {
			dump(dir, wn[i], W[i], dm * dm, f32);
			dump(dir, bn[i], b[i], dm, f32);
		}
		dump(dir, "out", out, batch * n * dm, f32);
	}
	/* projections 4·2·n·d², attention 2·2·n²·d (half of it when causal; n·w in a window) */
	flops = (double)batch * (8.0 * (double)n * (double)dm * (double)dm +
		4.0 * (double)n * (double)dm *
		(window >= 0 && (size_t)window < n ? (double)window + 1 : (double)n * (causal ? 0.5 : 1.0)));
	{
		/* the median: the lower middle one for an even count */
		const double med = times[(repeats - 1) / 2];
		const long rss = maxrss_kib();

		printf("seconds=%.6f best=%.6f gflops=%.2f maxrss_kib=%ld lib_peak_kib=%ld "
		       "lib_bytes=%zu kernel=%s\n", med, times[0], flops / med * 1e-9, rss,
		       rss - rss_before, lib_bytes, mha_kernel());
	}
	free(times);
	return 0;
}

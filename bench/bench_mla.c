/*
 * bench_mla.c: one layer's forward pass in float32, multi-head latent
 * attention (DeepSeek-V3's head dims) or the grouped-query layer of the same
 * heads and widths, on random inputs, inside this process: the median and
 * best of REPEATS calls, the library's estimate of its memory, the kernel.
 * bench_mla.py runs the forms in turns and writes the table.
 *
 * usage: bench_mla mla|absorbed|gqa N D_MODEL HEADS KV_HEADS THREADS REPEATS
 *
 * mla: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
 * qk_rope_head_dim 64, v_head_dim 128, causal, rope interleaved (YaRN left
 * out: it changes the angles, not the work); absorbed: the same in the
 * absorbed form; gqa: HEADS query heads of d_k 192 (128 + 64), KV_HEADS
 * key/value heads, d_v 128, W_O, causal, rope half on 64 features.
 */
#include "../lib/mha.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { QR = 1536, KR = 512, DN = 128, DR = 64, DV = 128 };

static uint64_t state = 0x9e3779b97f4a7c15ull;

static float uniform(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return (float)((double)(state >> 11) / 9007199254740992.0 * 2 - 1);
}

static float *fill(size_t n, float scale)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	if (!p) {
		perror("bench_mla");
		exit(2);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = uniform() * scale;
	return p;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t n, dm, H, G;
	int threads, repeats, mla, absorbed;
	double *times, flops, proj;
	mha_status st = MHA_OK;

	if (argc != 8 || (strcmp(argv[1], "mla") && strcmp(argv[1], "absorbed") &&
			  strcmp(argv[1], "gqa"))) {
		fputs("usage: bench_mla mla|absorbed|gqa N D_MODEL HEADS KV_HEADS THREADS REPEATS\n",
		      stderr);
		return 2;
	}
	mla = strcmp(argv[1], "gqa") != 0;
	absorbed = !strcmp(argv[1], "absorbed");
	n = strtoul(argv[2], NULL, 10);
	dm = strtoul(argv[3], NULL, 10);
	H = strtoul(argv[4], NULL, 10);
	G = strtoul(argv[5], NULL, 10);
	threads = atoi(argv[6]);
	repeats = atoi(argv[7]) < 1 ? 1 : atoi(argv[7]);
	times = malloc((size_t)repeats * sizeof(*times));
	if (!times)
		return 2;
	{
		const size_t dk = DN + DR;
		const mha_dims d = { .size = sizeof(d), .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm,
				     .d_v_in = dm, .heads = H, .kv_heads = mla ? H : G, .d_k = dk,
				     .d_v = DV, .d_out = dm };
		mha_config cfg = { .size = sizeof(cfg), .causal = MHA_CAUSAL_TOP_LEFT,
				   .threads = threads };
		float *x = fill(n * dm, 1), *out = fill(n * dm, 0);
		float *qa = NULL, *qb, *kva = NULL, *kvb = NULL, *wk = NULL, *wv = NULL, *wo;
		float *qan = NULL, *kvan = NULL;
		double *qn = NULL, *kvn = NULL;
		mha_weights_f32 w = { .size = sizeof(w) };
		const mha_inputs_f32 in = { .size = sizeof(in), .xq = x, .xk = x, .xv = x };

		wo = fill(H * DV * dm, 1.0f / 64);
		if (mla) {
			qa = fill(dm * QR, 1.0f / 32);
			qb = fill((size_t)QR * H * dk, 1.0f / 32);
			kva = fill(dm * (KR + DR), 1.0f / 32);
			kvb = fill((size_t)KR * H * (DN + DV), 1.0f / 16);
			qan = fill(QR, 1);
			kvan = fill(KR, 1);
			qn = malloc(QR * sizeof(double));
			kvn = malloc(KR * sizeof(double));
			for (size_t i = 0; i < QR; i++)
				qn[i] = 1 + 0.1 * qan[i];
			for (size_t i = 0; i < KR; i++)
				kvn[i] = 1 + 0.1 * kvan[i];
			w = (mha_weights_f32){ .size = sizeof(w), .W_Q = qb, .W_O = wo, .W_QA = qa,
					       .W_KVA = kva, .W_KVB = kvb };
			cfg.mla = (mha_mla){ .on = 1, .absorbed = absorbed, .q_rank = QR, .kv_rank = KR,
					     .d_rope = DR, .eps = 1e-6, .q_a_norm = qn, .kv_a_norm = kvn };
			cfg.rope.mode = MHA_ROPE_INTERLEAVED;
		} else {
			qb = fill(dm * H * dk, 1.0f / 32);
			wk = fill(dm * G * dk, 1.0f / 32);
			wv = fill(dm * G * DV, 1.0f / 32);
			w = (mha_weights_f32){ .size = sizeof(w), .W_Q = qb, .W_K = wk, .W_V = wv,
					       .W_O = wo };
			cfg.rope.mode = MHA_ROPE_HALF;
			cfg.rope.dim = DR;
		}
		for (int r = 0; r < repeats && st == MHA_OK; r++) {
			const double t0 = now();

			st = mha_forward_f32(out, &d, &in, &w, &cfg, NULL);
			times[r] = now() - t0;
		}
		if (st != MHA_OK) {
			fprintf(stderr, "bench_mla: %s\n", mha_strerror(st));
			return 1;
		}
		/* multiply-adds times 2: the projections, then the causal attention (half the
		 * keys) over d_k for the scores and d_v for the values */
		if (mla && absorbed)
			proj = (double)dm * QR + (double)QR * H * dk + (double)dm * (KR + DR) +
			       (double)H * DN * KR + (double)H * KR * dm;
		else if (mla)
			proj = (double)dm * QR + (double)QR * H * dk + (double)dm * (KR + DR) +
			       (double)KR * H * (DN + DV) + (double)H * DV * dm;
		else
			proj = (double)dm * H * dk + (double)dm * G * (dk + DV) + (double)H * DV * dm;
		flops = 2.0 * (double)n * proj +
			2.0 * 0.5 * (double)n * (double)n * (double)H *
			(absorbed ? (double)(KR + DR + KR) : (double)(dk + DV));
		qsort(times, (size_t)repeats, sizeof(*times), by_value);
		printf("seconds=%.6f best=%.6f gflops=%.2f lib_bytes=%zu kernel=%s\n",
		       times[(repeats - 1) / 2], times[0], flops / times[(repeats - 1) / 2] * 1e-9,
		       mha_memory(&d, &cfg, 0, 1), mha_kernel());
		free(x);
		free(out);
		free(qa);
		free(qb);
		free(kva);
		free(kvb);
		free(wk);
		free(wv);
		free(wo);
		free(qan);
		free(kvan);
		free(qn);
		free(kvn);
	}
	free(times);
	return 0;
}

/*
 * memory.c: the memory estimate against what is allocated: the allocation
 * wrappers; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- the memory estimate against what is allocated --------------------- */

/*
 * Every malloc, calloc, realloc, aligned_alloc, posix_memalign and free of
 * this program and libmha.a, and libmha's mha_big_alloc and mha_big_free,
 * go through these (-Wl,--wrap=..., see the Makefile).  While measuring, each block asked for is noted with its size
 * in a small table, and the peak of their sum kept; blocks from before, or
 * from libc (not wrapped), are not counted.  The sizes are the
 * ones asked for: the allocator's own overhead is MHA_ALLOC_SLACK's part of
 * the estimate.  This works the same under ASan and valgrind, whose
 * allocators __real_malloc then reaches.
 */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void __wrap_free(void *p);

#define TRACK_SLOTS 4096 /* blocks alive at once while measuring; a power of 2 */

static struct {
	int measuring;
	char lock;
	size_t live, peak, blocks, lost; /* lost: blocks the table had no room for */
	void *p[TRACK_SLOTS];
	size_t n[TRACK_SLOTS];
} track;

static void track_lock(void)
{
	while (__atomic_test_and_set(&track.lock, __ATOMIC_ACQUIRE))
		;
}

static void track_unlock(void)
{
	__atomic_clear(&track.lock, __ATOMIC_RELEASE);
}

static size_t track_slot(const void *p)
{
	return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 52 & (TRACK_SLOTS - 1);
}

static void track_add(void *p, size_t n)
{
	if (!p || !__atomic_load_n(&track.measuring, __ATOMIC_RELAXED))
		return;
	track_lock();
	if (track.blocks + 1 >= TRACK_SLOTS) {
		track.lost++;
	} else {
		size_t s = track_slot(p);

		while (track.p[s])
			s = (s + 1) & (TRACK_SLOTS - 1);
		track.p[s] = p;
		track.n[s] = n;
		track.blocks++;
		track.live += n;
		if (track.live > track.peak)
			track.peak = track.live;
	}
	track_unlock();
}

/* forget p if it is noted; linear probing, so later entries of its run move up */
static void track_remove(void *p)
{
	size_t s, hole;

	if (!p)
		return;
	track_lock(); /* blocks read under the lock too: the team's threads free */
	if (!track.blocks) {
		track_unlock();
		return;
	}
	for (s = track_slot(p); track.p[s] && track.p[s] != p; s = (s + 1) & (TRACK_SLOTS - 1))
		;
	if (track.p[s] == p) {
		track.live -= track.n[s];
		track.blocks--;
		track.p[s] = NULL;
		hole = s;
		for (s = (s + 1) & (TRACK_SLOTS - 1); track.p[s]; s = (s + 1) & (TRACK_SLOTS - 1)) {
			const size_t home = track_slot(track.p[s]);

			/* move it into the hole unless its home lies between the hole and it */
			if ((s > hole && (home <= hole || home > s)) ||
			    (s < hole && home <= hole && home > s)) {
				track.p[hole] = track.p[s];
				track.n[hole] = track.n[s];
				track.p[s] = NULL;
				hole = s;
			}
		}
	}
	track_unlock();
}

void *__wrap_malloc(size_t n)
{
	void *p = __real_malloc(n);

	track_add(p, n);
	return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
	void *p = __real_calloc(n, size);

	track_add(p, n * size);
	return p;
}

void *__wrap_realloc(void *p, size_t n)
{
	void *q;

	track_remove(p);
	q = __real_realloc(p, n);
	track_add(q, n);
	return q;
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	void *p = __real_aligned_alloc(align, n);

	track_add(p, n);
	return p;
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
	const int rc = __real_posix_memalign(p, align, n);

	if (!rc)
		track_add(*p, n);
	return rc;
}

void __wrap_free(void *p)
{
	track_remove(p);
	__real_free(p);
}

/*
 * The library's large blocks are mappings of their own (lib/kernels/pages.c), not
 * from malloc: counted here as they are asked for (the smaller ones come
 * from aligned_alloc and are counted there).  256 KiB is kernel.h's
 * MHA_BIG_MIN.
 */
#define BIG_MIN ((size_t)256 << 10)
void *mha_big_alloc(size_t n); /* lib/kernels/kernel.h's, inside libmha.a */
void mha_big_free(void *p, size_t n);
void *__real_mha_big_alloc(size_t n);
void __real_mha_big_free(void *p, size_t n);
void *__wrap_mha_big_alloc(size_t n);
void __wrap_mha_big_free(void *p, size_t n);

/* under ASan pages.c maps nothing: its blocks come from aligned_alloc, counted there */
#ifdef __SANITIZE_ADDRESS__
#define BIG_MAPPED(n) 0
#else
#define BIG_MAPPED(n) ((n) >= BIG_MIN)
#endif

void *__wrap_mha_big_alloc(size_t n)
{
	void *p = __real_mha_big_alloc(n);

	if (BIG_MAPPED(n))
		track_add(p, n);
	return p;
}

void __wrap_mha_big_free(void *p, size_t n)
{
	if (BIG_MAPPED(n))
		track_remove(p);
	__real_mha_big_free(p, n);
}

void track_start(void)
{
	track_lock();
	track.live = track.peak = track.blocks = track.lost = 0;
	memset(track.p, 0, sizeof(track.p));
	track_unlock();
	__atomic_store_n(&track.measuring, 1, __ATOMIC_RELAXED);
}

/* the peak since track_start; every block noted since must be freed */
size_t track_stop(void)
{
	__atomic_store_n(&track.measuring, 0, __ATOMIC_RELAXED);
	ck_assert_uint_eq(track.lost, 0);
	ck_assert_msg(track.blocks == 0, "%zu blocks (%zu bytes) not freed", track.blocks, track.live);
	return track.peak;
}

/* whether the wrappers are linked in (they are in the Makefile's builds) */
int track_works(void)
{
	/* volatile: a malloc whose block is never used may be left out */
	void *volatile p;

	track_start();
	p = malloc(1000);
	free(p);
	return track_stop() == 1000;
}

/*
 * lib/kernels/pages.c: 64-byte aligned blocks, from MHA_BIG_MIN up mappings of their
 * own that start on a 2 MiB boundary (where huge pages can back them),
 * every byte writable, freed by size, counted by the memory measurement
 */
START_TEST(test_big_alloc)
{
	const size_t sizes[] = { 1, 100, BIG_MIN - 1, BIG_MIN, BIG_MIN + 5, 3 * BIG_MIN + 4097 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const size_t n = sizes[i];
		unsigned char *p = mha_big_alloc(n);

		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 64, 0);
#ifndef __SANITIZE_ADDRESS__ /* pages.c maps no blocks under ASan */
		if (n >= BIG_MIN)
			ck_assert_msg((uintptr_t)p % ((size_t)2 << 20) == 0, "%zu bytes at %p", n,
				      (void *)p);
#endif
		memset(p, 0xab, n);
		ck_assert_uint_eq(p[0], 0xab);
		ck_assert_uint_eq(p[n - 1], 0xab);
		mha_big_free(p, n);
	}
	mha_big_free(NULL, BIG_MIN);
	mha_big_free(NULL, 1);
#ifndef __SANITIZE_ADDRESS__
	{
		/* a freed block is kept: the same length (to a page) gets it back,
		 * its pages and their contents with it; another length does not */
		unsigned char *a = mha_big_alloc(BIG_MIN + 5), *b, *c;

		ck_assert_ptr_nonnull(a);
		memset(a, 0x5a, BIG_MIN + 5);
		mha_big_free(a, BIG_MIN + 5);
		b = mha_big_alloc(BIG_MIN + 7);
		ck_assert_ptr_eq(b, a);
		ck_assert_uint_eq(b[BIG_MIN + 4], 0x5a);
		mha_big_free(b, BIG_MIN + 7);
		c = mha_big_alloc(2 * BIG_MIN);
		ck_assert_ptr_nonnull(c);
		ck_assert_ptr_ne(c, a);
		c[2 * BIG_MIN - 1] = 1;
		mha_big_free(c, 2 * BIG_MIN);
	}
#endif
	if (track_works()) {
		void *volatile p;

		track_start();
		p = mha_big_alloc(3 * BIG_MIN);
		mha_big_free(p, 3 * BIG_MIN);
		ck_assert_uint_eq(track_stop(), 3 * BIG_MIN);
	}
}
END_TEST

/* an observer that keeps nothing: the plain path's own allocations alone */
static int ignore(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 0;
}

/*
 * Over a grid of shapes (one head and many, grouped heads, d_k = 1 and
 * wide heads, one key and hundreds, the fast path's block edges), both
 * element types, 1 and 2 threads, the fast path and the plain one with and
 * without (n_q, n_kv) stages watched: what mha_forward allocates at its
 * peak is at most mha_memory(), and mha_memory() at most a quarter more
 * plus 4 KiB (the allocator's slack counted for each block).  The ratios
 * are printed; MHA_MEMORY_VERBOSE=1 prints each run.
 */
START_TEST(test_memory_measured)
{
	static const size_t shapes[][6] = {
		/* n_q, n_kv, H, G, d_k, d_v */
		{ 1, 1, 1, 1, 1, 1 },     { 3, 4, 2, 2, 2, 2 },       { 7, 300, 16, 16, 1, 1 },
		{ 97, 257, 16, 2, 1, 1 }, { 200, 200, 8, 1, 8, 8 },   { 300, 613, 4, 2, 64, 32 },
		{ 96, 96, 16, 16, 4, 4 }, { 500, 20, 2, 1, 128, 128 }, { 40, 1000, 3, 3, 5, 11 },
	};
	const unsigned squares = MHA_STAGE_BIT(MHA_STAGE_SCORES) | MHA_STAGE_BIT(MHA_STAGE_MASK) |
				 MHA_STAGE_BIT(MHA_STAGE_SOFTMAX);
	double lo = 1e300, hi = 0, hi_big = 0;
	int runs = 0;

	if (!track_works()) {
		fputs("test_memory_measured: allocations are not wrapped in this build; skipped\n", stderr);
		return;
	}
	rng_state = 7;
	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const size_t *s = shapes[si], dm = 16;
		const mha_dims d = { .size = sizeof(mha_dims),
				     .n_q = s[0], .n_kv = s[1], .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
				     .heads = s[2], .kv_heads = s[3], .d_k = s[4], .d_v = s[5], .d_out = dm };
		const size_t n[8] = { s[0] * dm, s[1] * dm, dm * s[2] * s[4], dm * s[3] * s[4],
				      dm * s[3] * s[5], s[2] * s[5] * dm, s[0] * dm, 1 };
		double *m[7];
		float *f[7];

		for (int i = 0; i < 7; i++) {
			m[i] = rnd_matrix(n[i]);
			f[i] = malloc(n[i] * sizeof(float));
			for (size_t j = 0; j < n[i]; j++)
				f[i][j] = (float)m[i][j];
		}
		/* path 0: fast, 1: plain, 2: plain with (n_q, n_kv) stages watched */
		for (int f32 = 0; f32 < 2; f32++)
			for (int path = 0; path < (f32 ? 1 : 3); path++)
				for (int threads = 1; threads <= 2; threads++) {
					mha_config cfg = { .size = sizeof(mha_config),
							   .threads = threads, .exact = path == 1,
							   .causal = threads == 2 ? MHA_CAUSAL_BOTTOM_RIGHT : MHA_CAUSAL_NONE,
							   /* rope's q_rot and k_rot in some shapes */
							   .rope = { .mode = si % 2 && s[4] % 2 == 0 ? MHA_ROPE_HALF
											 : MHA_ROPE_NONE },
							   /* a q/k norm in others, with rope or alone */
							   .norm = { .kind = si % 3 == 1 ? MHA_NORM_RMS : MHA_NORM_NONE,
								     .over_all = si % 2, .eps = 1e-6 } };
					mha_observer obs = { .size = sizeof(mha_observer),
							     .fn = ignore, .wanted = squares };
					const unsigned wanted = path == 2 ? squares : 0;
					const size_t est = mha_memory(&d, &cfg, wanted, f32);
					size_t peak;
					mha_status st;

					track_start();
					if (f32)
						st = mha_forward_f32(f[6], &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
												  f[0], f[1], f[1] },
								     &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
											 .W_Q = f[2], .W_K = f[3], .W_V = f[4], .W_O = f[5] },
								     &cfg, NULL);
					else
						st = mha_forward(m[6], &d, &(mha_inputs){ .size = sizeof(mha_inputs),
											  m[0], m[1], m[1] },
								 &(mha_weights){ .size = sizeof(mha_weights),
										 .W_Q = m[2], .W_K = m[3], .W_V = m[4], .W_O = m[5] }, &cfg,
								 path == 2 ? &obs : NULL, NULL);
					peak = track_stop();
					ck_assert_int_eq(st, MHA_OK);
					if (getenv("MHA_MEMORY_VERBOSE"))
						fprintf(stderr, "%zux%zu, %zu heads (%zu kv), d_k %zu, d_v %zu, %s, "
							"path %d, %d threads: allocated %zu, estimated %zu (%.3f)\n",
							s[0], s[1], s[2], s[3], s[4], s[5], f32 ? "f32" : "f64",
							path, threads, peak, est, (double)est / (double)peak);
					ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096,
						      "%zux%zu, %zu heads (%zu kv), d_k %zu, d_v %zu, %s, path %d, "
						      "%d threads: allocated %zu, estimated %zu",
						      s[0], s[1], s[2], s[3], s[4], s[5], f32 ? "f32" : "f64", path,
						      threads, peak, est);
					lo = fmin(lo, (double)est / (double)peak);
					hi = fmax(hi, (double)est / (double)peak);
					if (peak >= 65536)
						hi_big = fmax(hi_big, (double)est / (double)peak);
					runs++;
				}
		for (int i = 0; i < 7; i++) {
			free(m[i]);
			free(f[i]);
		}
	}
	fprintf(stderr, "test_memory_measured: mha_memory / allocated peak from %.3f to %.3f over %d "
		"runs, at most %.3f from 64 KiB up (%s kernels)\n", lo, hi, runs, hi_big, mha_kernel());
}
END_TEST

/*
 * The run the issue measured at 3.2 times the estimate: 4000 queries, 16
 * heads, d_k = 1, float32, 2 threads; with weights, as mha_memory assumes.
 */
START_TEST(test_memory_measured_dk1)
{
	const size_t n = 4000, H = 16;
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = n, .n_kv = n, .d_q_in = H, .d_k_in = H, .d_v_in = H,
			     .heads = H, .d_k = 1, .d_v = 1, .d_out = H };
	float *x = malloc(n * H * sizeof(float)), *out = malloc(n * H * sizeof(float));
	float *W = malloc(H * H * sizeof(float));
	mha_config cfg = { .size = sizeof(mha_config), .threads = 2 };
	size_t est, peak;

	for (size_t i = 0; i < n * H; i++)
		x[i] = (float)rnd();
	for (size_t i = 0; i < H * H; i++)
		W[i] = (float)rnd();
	if (track_works()) {
		est = mha_memory(&d, &cfg, 0, 1);
		track_start();
		ck_assert_int_eq(mha_forward_f32(out, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
									     x, x, x },
						 &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
								     .W_Q = W, .W_K = W, .W_V = W, .W_O = W },
						 &cfg, NULL), MHA_OK);
		peak = track_stop();
		ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096, "%s kernels: allocated %zu, "
			      "estimated %zu", mha_kernel(), peak, est);
	}
	free(x);
	free(out);
	free(W);
}
END_TEST

/* what a batch allocates: at most mha_memory(), within a quarter, both paths and types */
START_TEST(test_memory_batch)
{
	const size_t B = 5, nq = 100, nkv = 130, dm = 16, H = 4;
	const mha_dims d = { .size = sizeof(mha_dims),
			     .n_q = nq, .n_kv = nkv, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			     .heads = H, .kv_heads = 2, .d_k = 4, .d_v = 4, .d_out = dm, .batch = B };
	double *x = rnd_matrix(B * nkv * dm), *W = rnd_matrix(dm * dm), *out = malloc(B * nq * dm * sizeof(double));
	float *fx = malloc(B * nkv * dm * sizeof(float)), *fW = malloc(dm * dm * sizeof(float));
	float *fout = malloc(B * nq * dm * sizeof(float));

	for (size_t i = 0; i < B * nkv * dm; i++)
		fx[i] = (float)x[i];
	for (size_t i = 0; i < dm * dm; i++)
		fW[i] = (float)W[i];
	if (track_works())
		for (int run = 0; run < 4; run++) {
			mha_config cfg = { .size = sizeof(mha_config),
					   .threads = 1 + run % 2, .exact = run == 2 };
			const size_t est = mha_memory(&d, &cfg, 0, run == 3);
			size_t peak;

			track_start();
			if (run == 3)
				ck_assert_int_eq(mha_forward_f32(fout, &d, &(mha_inputs_f32){ .size = sizeof(mha_inputs_f32),
											      fx, fx, fx },
								 &(mha_weights_f32){ .size = sizeof(mha_weights_f32),
										     .W_Q = fW, .W_K = fW, .W_V = fW, .W_O = fW },
								 &cfg, NULL), MHA_OK);
			else
				ck_assert_int_eq(mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
										     x, x, x },
							     &(mha_weights){ .size = sizeof(mha_weights),
									     .W_Q = W, .W_K = W, .W_V = W, .W_O = W },
							     &cfg, NULL, NULL), MHA_OK);
			peak = track_stop();
			ck_assert_msg(peak <= est && est <= peak + peak / 4 + 4096, "batch run %d: allocated %zu, "
				      "estimated %zu", run, peak, est);
		}
	free(x);
	free(W);
	free(out);
	free(fx);
	free(fW);
	free(fout);
}
END_TEST

void unit_add_memory(const struct unit_suite *u)
{
	tcase_add_test(u->ref, test_memory_batch);
	tcase_add_test(u->ref, test_memory_measured);
	tcase_add_test(u->ref, test_memory_measured_dk1);
	tcase_add_test(u->ref, test_big_alloc);
}

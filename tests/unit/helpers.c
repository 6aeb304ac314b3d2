/*
 * helpers.c: helpers the unit tests share: observers that record,
 * comparisons, random numbers; tests/unit/main.c runs them.
 */
#include "unit.h"

/* ---- helpers ----------------------------------------------------------- */

static int record(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	seen *sn = ctx;
	const size_t slot = (size_t)(head + 1);

	ck_assert_int_lt(head + 1, 17);
	ck_assert_ptr_null(sn->m[s][slot]); /* each stage once per head */
	sn->m[s][slot] = malloc(rows * cols * sizeof(double));
	ck_assert_ptr_nonnull(sn->m[s][slot]);
	memcpy(sn->m[s][slot], m, rows * cols * sizeof(double));
	sn->rows[s][slot] = rows;
	sn->cols[s][slot] = cols;
	sn->calls++;
	return sn->stop_at && sn->calls >= sn->stop_at;
}

/* a configuration of rotary embeddings alone, for mha_rope_apply */
const mha_config *with_rope(const mha_rope *r)
{
	static mha_config cfg;

	cfg = (mha_config){ .size = sizeof(mha_config), .rope = *r };
	return &cfg;
}

void seen_free(seen *sn)
{
	for (int s = 0; s < MHA_STAGE_COUNT; s++)
		for (int h = 0; h < 17; h++)
			free(sn->m[s][h]);
	memset(sn, 0, sizeof(*sn));
}

/* an observer that stops the run at its first stage */
int ignore_stop(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols)
{
	(void)ctx, (void)s, (void)head, (void)m, (void)rows, (void)cols;
	return 1;
}

mha_observer watch_all(seen *sn)
{
	memset(sn, 0, sizeof(*sn));
	return (mha_observer){ .size = sizeof(mha_observer),
			       .fn = record, .ctx = sn, .wanted = ~0u };
}

/*
 * Compare n values: each within RTOL of the expected value, relative to
 * that value, with an absolute floor of 1e-3·RTOL·max|want| for entries
 * near zero (a dot product's cancellation); -inf must be -inf.
 */
void check_close(const char *what, const double *got, const double *want, size_t n)
{
	double maxabs = 0, worst = 0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		if (isfinite(want[i]) && fabs(want[i]) > maxabs)
			maxabs = fabs(want[i]);
	for (size_t i = 0; i < n; i++) {
		double err;

		if (isinf(want[i]) || isinf(got[i])) {
			ck_assert_msg(got[i] == want[i], "%s[%zu]: got %.17g, want %.17g", what, i,
				      got[i], want[i]);
			continue;
		}
		ck_assert_msg(!isnan(got[i]), "%s[%zu] is NaN", what, i);
		err = fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-3 * maxabs + 1e-300);
		if (err > worst) {
			worst = err;
			at = i;
		}
	}
	ck_assert_msg(worst <= RTOL, "%s: max relative difference %.3g at [%zu]: got %.17g, want %.17g",
		      what, worst, at, got[at], want[at]);
}

/*
 * Norm-wise: every difference within RTOL of the largest expected value.
 * For two computations that round differently (the fast and the exact
 * path), where an output that cancels to near zero keeps the absolute
 * error of the terms it came from.
 */
void check_close_norm(const char *what, const double *got, const double *want, size_t n)
{
	double maxabs = 0, worst = 0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		maxabs = fmax(maxabs, fabs(want[i]));
	for (size_t i = 0; i < n; i++) {
		const double err = fabs(got[i] - want[i]) / maxabs;

		ck_assert_msg(isfinite(got[i]), "%s[%zu] is %g", what, i, got[i]);
		if (err > worst) {
			worst = err;
			at = i;
		}
	}
	ck_assert_msg(worst <= RTOL, "%s: max difference %.3g of the largest value at [%zu]: got "
		      "%.17g, want %.17g", what, worst, at, got[at], want[at]);
}

/* the kernel variants the tests run, each by MHA_KERNEL (the widest the CPU runs when it lacks one) */
/* the kernels of this build's machine (MHA_KERNEL), the baseline first */
#if defined(__aarch64__)
const char *const kernel_names[N_KERNEL_NAMES] = { "base", "neon" };
#else
const char *const kernel_names[N_KERNEL_NAMES] = { "base", "avx2", "avx512" };
#endif

/* an environment variable's value to put back later (NULL: unset), and putting it back */
char *env_save(const char *name)
{
	const char *v = getenv(name);

	return v ? strdup(v) : NULL;
}

void env_restore(const char *name, const char *saved)
{
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
}

/* a small deterministic generator, uniform in [-1, 1) */
uint64_t rng_state;

double rnd(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(rng_state >> 11) / (double)(1ULL << 52) - 1.0;
}

double *rnd_matrix(size_t n)
{
	double *m = malloc((n ? n : 1) * sizeof(double));

	for (size_t i = 0; i < n; i++)
		m[i] = rnd();
	return m;
}

/* n doubles rounded to floats (NULL stays NULL) */
float *floats_of(const double *v, size_t n)
{
	float *f;

	if (!v)
		return NULL;
	f = malloc((n ? n : 1) * sizeof(float));
	for (size_t i = 0; i < n; i++)
		f[i] = (float)v[i];
	return f;
}

/* n floats widened (NULL stays NULL) */
double *doubles_of(const float *f, size_t n)
{
	double *v;

	if (!f)
		return NULL;
	v = malloc((n ? n : 1) * sizeof(double));
	for (size_t i = 0; i < n; i++)
		v[i] = f[i];
	return v;
}

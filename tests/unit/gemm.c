/*
 * gemm.c: the GEMM kernels: transposed operands, values that are not
 * finite; tests/unit/main.c runs them.
 */
#include "unit.h"

/*
 * C = A·B with A given as A or as Aᵀ (ta), B as B or Bᵀ (tb): the same
 * sums in the same order, so the four agree bit for bit, on 1 and 2
 * threads; and with a plain sum to rounding.  Shapes past one strip, one
 * (MC, KC) block and one panel of B, with ragged edges.
 */
START_TEST(test_gemm_transposed)
{
	static const size_t shapes[][3] = { { 1, 1, 1 }, { 7, 17, 5 }, { 97, 33, 300 },
					    { 200, 70, 513 }, { 13, 4100, 9 } };
	const int f32 = _i;
	const size_t es = f32 ? sizeof(float) : sizeof(double);

	rng_state = 77;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		double *a = rnd_matrix(m * k), *b = rnd_matrix(k * n), *bias = rnd_matrix(n);
		char *A = malloc(m * k * es), *At = malloc(m * k * es), *B = malloc(k * n * es);
		char *Bt = malloc(k * n * es), *Bias = malloc(n * es), *C[8];

		for (size_t i = 0; i < m; i++)
			for (size_t p = 0; p < k; p++) {
				if (f32) {
					((float *)A)[i * k + p] = (float)a[i * k + p];
					((float *)At)[p * m + i] = (float)a[i * k + p];
				} else {
					((double *)A)[i * k + p] = a[i * k + p];
					((double *)At)[p * m + i] = a[i * k + p];
				}
			}
		for (size_t p = 0; p < k; p++)
			for (size_t j = 0; j < n; j++) {
				if (f32) {
					((float *)B)[p * n + j] = (float)b[p * n + j];
					((float *)Bt)[j * k + p] = (float)b[p * n + j];
				} else {
					((double *)B)[p * n + j] = b[p * n + j];
					((double *)Bt)[j * k + p] = b[p * n + j];
				}
			}
		for (size_t j = 0; j < n; j++) {
			if (f32)
				((float *)Bias)[j] = (float)bias[j];
			else
				((double *)Bias)[j] = bias[j];
		}
		for (int v = 0; v < 8; v++) {
			const int ta = v & 1, tb = (v >> 1) & 1, threads = v < 4 ? 1 : 2;
			struct mha_gemm g = { .m = m, .n = n, .k = k, .A = ta ? At : A, .B = tb ? Bt : B,
					       .bias = Bias, .lda = ta ? m : k, .ldb = tb ? k : n,
					       .ldc = n, .threads = threads, .ta = ta, .tb = tb };

			C[v] = malloc(m * n * es);
			g.C = C[v];
			mha_pick_kernels(f32)->gemm(&g);
			ck_assert_int_eq(g.failed, 0);
			ck_assert_msg(memcmp(C[v], C[0], m * n * es) == 0,
				      "%s (%zu, %zu, %zu) ta %d tb %d threads %d: not the same bits",
				      f32 ? "f32" : "f64", m, n, k, ta, tb, threads);
		}
		for (size_t i = 0; i < m; i++)
			for (size_t j = 0; j < n; j++) {
				double want = bias[j], mag = fabs(bias[j]);
				const double got = f32 ? ((float *)C[0])[i * n + j] : ((double *)C[0])[i * n + j];

				for (size_t p = 0; p < k; p++) {
					const double ap = f32 ? (float)a[i * k + p] : a[i * k + p];
					const double bp = f32 ? (float)b[p * n + j] : b[p * n + j];

					want += ap * bp;
					mag += fabs(ap * bp);
				}
				ck_assert_msg(fabs(got - want) <= (f32 ? 1e-6 : 1e-14) * mag,
					      "(%zu, %zu, %zu) C[%zu][%zu] = %.17g, want %.17g", m, n, k, i,
					      j, got, want);
			}
		for (int v = 0; v < 8; v++)
			free(C[v]);
		free(a);
		free(b);
		free(bias);
		free(A);
		free(At);
		free(B);
		free(Bt);
		free(Bias);
	}
}
END_TEST

/*
 * mha_gemm's nonfinite flag, which spares the callers a pass over C: 0
 * when every stored entry is finite, 1 when one is not -- an inf or a nan
 * in A or B, a sum past the largest value, an infinite bias -- wherever
 * it lands (first and last rows and columns, across the KC panels, the MC
 * row blocks and the NR strips, a partial last tile), each kernel, 1 and
 * 2 threads, A and B as given or transposed.
 */
START_TEST(test_gemm_nonfinite)
{
	static const size_t shapes[][3] = { { 1, 1, 1 }, { 7, 17, 5 }, { 200, 70, 300 } };
	const int f32 = _i;
	const size_t es = f32 ? sizeof(float) : sizeof(double);
	const double huge = f32 ? 1e38 : 1e308;
	char *saved = env_save("MHA_KERNEL");

	rng_state = 91;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		const size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
		char *A = malloc(m * k * es), *B = malloc(k * n * es), *Bias = malloc(n * es);
		char *C = malloc(m * n * es);
		/* (row, column) of C to spoil: first, last, and past the blocks' edges */
		const size_t at[][2] = { { 0, 0 }, { m - 1, n - 1 }, { m / 2, n / 3 },
					 { m > 97 ? 97 : 0, n > 16 ? 16 : 0 } };

#define SET(M, i, v) (f32 ? (void)(((float *)(M))[i] = (float)(v)) : (void)(((double *)(M))[i] = (v)))
#define GET(M, i) (f32 ? (double)((float *)(M))[i] : ((double *)(M))[i])
		for (size_t i = 0; i < m * k; i++)
			SET(A, i, rnd());
		for (size_t i = 0; i < k * n; i++)
			SET(B, i, rnd());
		for (size_t j = 0; j < n; j++)
			SET(Bias, j, rnd());
		for (size_t kn = 0; kn < sizeof(kernel_names) / sizeof(kernel_names[0]); kn++)
			for (int threads = 1; threads <= 2; threads++)
				for (int spoil = -1; spoil < 5; spoil++)
					for (size_t w = 0; w < (spoil < 0 ? 1 : sizeof at / sizeof at[0]); w++) {
						const size_t i = at[w][0], j = at[w][1], p = k - 1;
						struct mha_gemm g = { .m = m, .n = n, .k = k, .A = A, .B = B,
								       .bias = Bias, .lda = k, .ldb = n,
								       .ldc = n, .C = C, .threads = threads };
						const double ka = GET(A, i * k + p), ka0 = GET(A, i * k);
						const double kb = GET(B, p * n + j), kbias = GET(Bias, j);
						int want = spoil >= 0;

						/* 0: nan in A; 1: inf in B; 2: A·B past the largest value;
						 * 3: an infinite bias; 4: -inf in A's first column */
						if (spoil == 0)
							SET(A, i * k + p, NAN);
						else if (spoil == 1)
							SET(B, p * n + j, INFINITY);
						else if (spoil == 2) {
							SET(A, i * k + p, huge);
							SET(B, p * n + j, huge);
						} else if (spoil == 3)
							SET(Bias, j, -INFINITY);
						else if (spoil == 4)
							SET(A, i * k, -INFINITY);
						setenv("MHA_KERNEL", kernel_names[kn], 1);
						mha_pick_kernels(f32)->gemm(&g);
						ck_assert_int_eq(g.failed, 0);
						ck_assert_msg(g.nonfinite == want,
							      "%s %s (%zu, %zu, %zu), %d threads, spoil %d at "
							      "(%zu, %zu): nonfinite %d, want %d",
							      kernel_names[kn], f32 ? "f32" : "f64", m, n, k, threads,
							      spoil, i, j, g.nonfinite, want);
						if (want)
							ck_assert(!isfinite(GET(C, i * n + j)));
						SET(A, i * k, ka0);
						SET(A, i * k + p, ka);
						SET(B, p * n + j, kb);
						SET(Bias, j, kbias);
					}
#undef SET
#undef GET
		free(A);
		free(B);
		free(Bias);
		free(C);
	}
	env_restore("MHA_KERNEL", saved);
	free(saved);
}
END_TEST

void unit_add_gemm(const struct unit_suite *u)
{
	tcase_add_loop_test(u->err, test_gemm_transposed, 0, 2);
	tcase_add_loop_test(u->err, test_gemm_nonfinite, 0, 2);
}

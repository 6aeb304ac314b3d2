/*
 * abi_client.c: a program built against this release's lib/mha.h, for
 * tests/abi_check.sh, which runs it against the library as built and
 * against a test build whose structs have grown a field (mha.h's
 * MHA_ABI_TEST_GROWN): it must print the same lines against both.  Built
 * with MHA_ABI_TEST_GROWN itself (a newer program) against today's library,
 * it must be refused, never read past.
 */
#include "mha.h"

#include <stdio.h>

static void told(void *ctx, const char *phase, double done)
{
	(void)phase;
	*(double *)ctx = done;
}

int main(void)
{
	const double x[12] = { 1, 0, 2, -1, 0.5, 1, -2, 1, 0, 3, 1, -1 };
	const double wq[16] = { 1, 0, 0, 1, 0.5, 1, 0, 0, 0, 0, 1, 0, 0, 2, 0, 1 };
	double out[12], last = 0;
	const mha_dims d = { .size = sizeof(mha_dims), .n_q = 3, .n_kv = 3, .d_q_in = 4,
			     .d_k_in = 4, .d_v_in = 4, .heads = 2, .d_k = 2, .d_v = 2 };
	const mha_inputs in = { .size = sizeof(mha_inputs), .xq = x, .xk = x, .xv = x };
	const mha_weights w = { .size = sizeof(mha_weights), .W_Q = wq, .W_K = wq };
	const mha_config cfg = { .size = sizeof(mha_config), .causal = MHA_CAUSAL_TOP_LEFT,
				 .rope = { .mode = MHA_ROPE_HALF, .theta = 100 } };
	const mha_observer obs = { .size = sizeof(mha_observer), .progress = told,
				   .progress_ctx = &last };
	mha_report rep = MHA_INIT(mha_report);
	const mha_status st = mha_forward(out, &d, &in, &w, &cfg, &obs, &rep);

	printf("mha_forward: %s\n", mha_strerror(st));
	if (st != MHA_OK)
		return 1;
	for (int i = 0; i < 12; i++)
		printf("%.17g%c", out[i], i % 4 == 3 ? '\n' : ' ');
	printf("scale %.17g, fast path %d, told %g\n", rep.scale, rep.fast_path, last);
	printf("mha_check: %s\n", mha_strerror(mha_check(&d, &cfg)));
	return 0;
}

/*
 * main.c: the Check unit tests for libmha, one file per subject in
 * tests/unit/, run as one suite.
 *
 * Four test cases: "by hand" (values from the tutorials and small cases
 * whose softmax is exact), "reference" (many random cases, every stage,
 * against the plain reference in ref.c to 1e-12), "errors" (every error
 * status) and "backward" (CK_RUN_CASE=backward runs it alone: make
 * test-backward).  A failed comparison prints the largest difference and
 * where it is.  Each file adds its tests with its unit_add_*() (unit.h).
 */
#include "unit.h"

static Suite *mha_suite(void)
{
	Suite *s = suite_create("mha");
	const struct unit_suite u = {
		.hand = tcase_create("by hand"), .ref = tcase_create("reference"),
		.err = tcase_create("errors"),
		/* CK_RUN_CASE=backward runs these alone (make test-backward) */
		.bw = tcase_create("backward"),
	};

	unit_add_forward(&u);
	unit_add_rope(&u);
	unit_add_norm(&u);
	unit_add_mla(&u);
	unit_add_reference(&u);
	unit_add_stream(&u);
	unit_add_extremes(&u);
	unit_add_batch(&u);
	unit_add_memory(&u);
	unit_add_errors(&u);
	unit_add_threads(&u);
	unit_add_gemm(&u);
	unit_add_backward(&u);
	unit_add_backward_fast(&u);
	unit_add_backward_f32(&u);
	unit_add_progress(&u);
	unit_add_lowp(&u);
	tcase_set_timeout(u.ref, 60);
	/* test_shortest_text checks 300000 numbers: about a second on a quiet
	 * machine, past Check's default 4 s on two busy cores */
	tcase_set_timeout(u.err, 60);
	tcase_set_timeout(u.bw, 60);
	suite_add_tcase(s, u.hand);
	suite_add_tcase(s, u.ref);
	suite_add_tcase(s, u.err);
	suite_add_tcase(s, u.bw);
	return s;
}

int main(void)
{
	const char *stream = getenv("MHA_STREAM_HEADS");
	SRunner *sr;
	int failed;

	/* groups of k key/value heads for the whole suite (stream.c) */
	if (stream && *stream >= '0' && *stream <= '9') {
		stream_suite = strtol(stream, NULL, 10);
		mha_stream_force(stream_suite);
	}
	sr = srunner_create(mha_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

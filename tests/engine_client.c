/*
 * engine_client.c: a program of its own over the engine alone (mhe.h,
 * libmhe and libmha, no object of the mha program), as the Python package
 * and anyone's tool would be: a checkpoint's layer run, a step read, a
 * comparison made, and the messages the engine says taken by a handler.
 *
 *   engine_client forward CHECKPOINT LAYER X STEP    the step's numbers, a row a line
 *   engine_client compare CHECKPOINT LAYER X THEIRS  the verdict, one line
 *   engine_client run CHECKPOINT LAYER X             the layer run, its messages alone
 *   engine_client array CHECKPOINT LAYER RAW TYPE ROWS COLS STEP
 *                                    X from memory: RAW's bytes, of TYPE f64, f32,
 *                                    f16, bf16 or bool, a ROWS x COLS array; STEP
 *                                    print=PRINT: the results, as "results", the
 *                                    array overwritten before they are read
 *   engine_client theirs CHECKPOINT LAYER X NAME RAW P ROWS COLS
 *                                    their array NAME in memory (RAW's float64
 *                                    bytes, P x ROWS x COLS) compared: the verdict
 *                                    and the report, as text and as JSON
 *   engine_client results CHECKPOINT LAYER X PRINT   the forward's results with
 *                                    print=PRINT: each name and shape, a line,
 *                                    then the meta's JSON
 *   engine_client model CHECKPOINT LAYER             the layer's tensors (as "results") and
 *                                    its description (the meta line)
 *   engine_client settings                           every setting's name and kind (mhe_settings)
 *   engine_client set NAME VALUE                     the setting taken, or its message
 *   engine_client set-array NAME                     a 1 x 2 array for input NAME
 *
 * Each message is printed as "message: SEVERITY STATUS [FILE] {KEY}", then
 * "text: TEXT", on standard output, so tests/engine_check.sh sees exactly what the engine
 * handed over; the exit status is the call's.
 */
#include "mhe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int said;

static void on_message(void *ctx, const mhe_message *m)
{
	(void)ctx;
	said++;
	printf("message: %s %d %s%s%s%s%s%s\n",
	       m->severity == MHE_ERROR ? "error" : m->severity == MHE_WARNING ? "warning" : "note",
	       m->status, m->file ? "[" : "", m->file ? m->file : "", m->file ? "] " : "",
	       m->key ? "{" : "", m->key ? m->key : "", m->key ? "} " : "");
	printf("text: %s\n", m->text);
}

/* a step: its shape, then its rows, every number exact */
/* each result's name, shape and sum, a line each, and the meta */
static int print_results(mhe_run *r)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < mhe_run_results(r); i++) {
		const char *name;
		mhe_tensor t;
		double sum = 0;
		size_t n = 1;

		rc = mhe_run_result(r, i, &name, &t);
		for (size_t d = 0; !rc && d < t.rank; d++)
			n *= t.dim[d];
		for (size_t k = 0; !rc && k < n; k++)
			sum += t.v[k];
		if (!rc) {
			printf("%s", name);
			for (size_t d = 0; d < t.rank; d++)
				printf(" %zu", t.dim[d]);
			printf(" %.17g\n", sum);
		}
	}
	if (!rc) {
		char *meta = mhe_run_meta(r);

		printf("meta: %s\n", meta ? meta : "(none)");
		mhe_free(meta);
	}
	return rc;
}

static void print_step(const mhe_matrix *m)
{
	printf("shape: %zu %zu %zu\n", m->planes, m->rows, m->cols);
	for (size_t i = 0; i < m->planes * m->rows; i++)
		for (size_t j = 0; j < m->cols; j++)
			printf("%.17g%c", m->v[i * m->cols + j], j + 1 < m->cols ? ' ' : '\n');
}

/* a checkpoint's layer on X, as mha forward -w CHECKPOINT --layer LAYER -x X */
static int open_layer(mhe_run *r, const char *checkpoint, const char *layer, const char *x)
{
	int rc = mhe_run_set(r, "weights", checkpoint);

	if (!rc)
		rc = mhe_run_set(r, "layer", layer);
	if (!rc)
		rc = mhe_run_set(r, "x", x);
	return rc;
}

int main(int argc, char **argv)
{
	mhe_run *r;
	int rc;

	if (mhe_version_number() != MHE_VERSION_NUMBER) {
		fprintf(stderr, "engine_client: built with engine %d, runs on %u\n",
			MHE_VERSION_NUMBER, mhe_version_number());
		return 3;
	}
	mhe_set_message_handler(on_message, NULL);
	r = mhe_run_new();
	if (!r)
		return 3;
	if (argc == 6 && !strcmp(argv[1], "forward")) {
		mhe_matrix m;

		rc = open_layer(r, argv[2], argv[3], argv[4]);
		if (!rc)
			rc = mhe_run_forward(r);
		if (!rc)
			rc = mhe_run_step(r, argv[5], &m);
		if (!rc)
			print_step(&m);
	} else if (argc == 6 && !strcmp(argv[1], "compare")) {
		mhe_verdict v;

		rc = open_layer(r, argv[2], argv[3], argv[4]);
		if (!rc)
			rc = mhe_run_compare(r, argv[5], -1, -1, &v);
		if (!rc)
			printf("verdict: agree=%d steps=%d first=%s mistake=%s\nwhy: %s\n", v.agree,
			       v.steps_compared, v.first_step[0] ? v.first_step : "-",
			       v.mistake[0] ? v.mistake : "-", v.why[0] ? v.why : "-");
	} else if (argc == 5 && !strcmp(argv[1], "run")) {
		/* a checkpoint's layer run, nothing shown */
		rc = open_layer(r, argv[2], argv[3], argv[4]);
		if (!rc)
			rc = mhe_run_forward(r);
	} else if (argc == 9 && !strcmp(argv[1], "array")) {
		static const char *const types[] = { "f64", "f32", "f16", "bf16", "bool" };
		static const size_t sizes[] = { 8, 4, 2, 2, 1 };
		mhe_array a = { .rank = 2, .dim = { strtoul(argv[6], NULL, 10),
						    strtoul(argv[7], NULL, 10) } };
		FILE *fp = fopen(argv[4], "rb");
		static unsigned char bytes[1 << 20];
		size_t t = 0, n;
		mhe_matrix m;

		while (t < 5 && strcmp(argv[5], types[t]))
			t++;
		n = fp ? fread(bytes, 1, sizeof(bytes), fp) : 0;
		if (fp)
			fclose(fp);
		if (t == 5 || n != a.dim[0] * a.dim[1] * sizes[t]) {
			fprintf(stderr, "engine_client: %s: not %s x %s of %s\n", argv[4], argv[6],
				argv[7], argv[5]);
			mhe_run_free(r);
			return 3;
		}
		a.data = bytes;
		a.dtype = (enum mhe_dtype)t;
		rc = mhe_run_set(r, "weights", argv[2]);
		if (!rc)
			rc = mhe_run_set(r, "layer", argv[3]);
		if (!rc)
			rc = mhe_run_set_array(r, "x", &a);
		if (!rc && !strncmp(argv[8], "print=", 6)) {
			/* the results outlive the array: it is overwritten after */
			rc = mhe_run_set(r, "print", argv[8] + 6);
			if (!rc)
				rc = mhe_run_forward(r);
			memset(bytes, 0xff, sizeof(bytes));
			if (!rc)
				rc = print_results(r);
		} else {
			if (!rc)
				rc = mhe_run_forward(r);
			if (!rc)
				rc = mhe_run_step(r, argv[8], &m);
			if (!rc)
				print_step(&m);
		}
	} else if (argc == 10 && !strcmp(argv[1], "theirs")) {
		static double values[1 << 17];
		mhe_array a = { values, MHE_F64, 3, { strtoul(argv[7], NULL, 10),
						       strtoul(argv[8], NULL, 10),
						       strtoul(argv[9], NULL, 10) } };
		FILE *fp = fopen(argv[6], "rb");
		const size_t n = fp ? fread(values, sizeof(double), 1 << 17, fp) : 0;
		mhe_verdict v;

		if (fp)
			fclose(fp);
		if (n != a.dim[0] * a.dim[1] * a.dim[2]) {
			fprintf(stderr, "engine_client: %s: not %zu doubles\n", argv[6],
				a.dim[0] * a.dim[1] * a.dim[2]);
			mhe_run_free(r);
			return 3;
		}
		rc = open_layer(r, argv[2], argv[3], argv[4]);
		if (!rc)
			rc = mhe_run_set_theirs(r, argv[5], &a);
		if (!rc)
			rc = mhe_run_compare(r, NULL, -1, -1, &v);
		if (!rc) {
			char *text = mhe_run_report(r, 0), *json = mhe_run_report(r, 1);

			printf("verdict: agree=%d steps=%d first=%s mistake=%s\n", v.agree,
			       v.steps_compared, v.first_step[0] ? v.first_step : "-",
			       v.mistake[0] ? v.mistake : "-");
			printf("%s----\n%s", text ? text : "(no report)\n", json ? json : "(no json)\n");
			mhe_free(text);
			mhe_free(json);
		}
	} else if (argc == 6 && !strcmp(argv[1], "results")) {
		rc = open_layer(r, argv[2], argv[3], argv[4]);
		if (!rc)
			rc = mhe_run_set(r, "print", argv[5]);
		if (!rc)
			rc = mhe_run_forward(r);
		if (!rc)
			rc = print_results(r);
	} else if (argc == 4 && !strcmp(argv[1], "model")) {
		/* a checkpoint's layer described: its tensors and its object */
		rc = mhe_run_set(r, "weights", argv[2]);
		if (!rc)
			rc = mhe_run_set(r, "layer", argv[3]);
		if (!rc)
			rc = mhe_run_model(r);
		if (!rc)
			rc = print_results(r);
	} else if (argc == 2 && !strcmp(argv[1], "settings")) {
		/* every setting's name and kind, a line each */
		static const char *const kinds[] = { "flag", "flag-or-word", "count", "number",
						     "number-or-word", "word", "array", "path" };
		const size_t n = mhe_settings(NULL, 0);
		mhe_setting *all = malloc(n * sizeof(*all));

		if (!all || mhe_settings(all, n) != n) {
			free(all);
			mhe_run_free(r);
			return 3;
		}
		for (size_t i = 0; i < n; i++)
			printf("%s %s\n", all[i].name, kinds[all[i].kind]);
		free(all);
		rc = MHE_OK;
	} else if (argc == 3 && !strcmp(argv[1], "set-array")) {
		/* a 1 x 2 array for the input called NAME */
		static const double two[2] = { 1, 2 };
		const mhe_array a = { two, MHE_F64, 2, { 1, 2 } };

		rc = mhe_run_set_array(r, argv[2], &a);
		if (!rc)
			printf("taken\n");
	} else if (argc == 4 && !strcmp(argv[1], "set")) {
		rc = mhe_run_set(r, argv[2], argv[3]);
		if (!rc)
			printf("taken\n");
	} else {
		fputs("usage: engine_client forward|compare CHECKPOINT LAYER X STEP|THEIRS\n"
		      "       engine_client set NAME VALUE\n", stderr);
		mhe_run_free(r);
		return 3;
	}
	/* the last error is the one the handler was given */
	if (rc && strcmp(mhe_last_error()->text, "") == 0) {
		fprintf(stderr, "engine_client: failed (%d) with no last error\n", rc);
		rc = 4;
	}
	if (rc && !said) {
		fprintf(stderr, "engine_client: failed (%d) with no message\n", rc);
		rc = 4;
	}
	mhe_run_free(r);
	return rc;
}

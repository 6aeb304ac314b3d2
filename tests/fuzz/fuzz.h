/*
 * fuzz.h: what the libFuzzer targets in tests/fuzz/ share: the fuzz input
 * as an input_file, the specs the commands read with, and the checks a
 * matrix a reader accepted must pass.
 *
 * Header-only (every function static inline) so that each target is one file;
 * not part of mha.  See tests/fuzz/README.md.
 */
#ifndef MHA_FUZZ_H
#define MHA_FUZZ_H

#include "util/budget.h"
#include "util/files.h"
#include "read/csv.h"
#include "read/input.h"
#include "read/json.h"
#include "read/npy.h"
#include "util/matrix.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The memory budget the readers run under, as --max-memory 64M would set
 * it: small enough that the fuzzer reaches its refusals. */
#define FUZZ_BUDGET ((size_t)64 << 20)

/* The specs 'mha forward' reads X (with its row labels, the tokens), a mask
 * and one weight file with. */
static const char *const fuzz_x_keys[] = { "output", "X", NULL };
static const char *const fuzz_mask_keys[] = { "mask", NULL };
static const char *const fuzz_weight_keys[] = { "W_Q", NULL };

static const read_spec fuzz_specs[] = {
	{ "X", fuzz_x_keys, 2, 2, READ_LABELS },
	{ "mask", fuzz_mask_keys, 2, 3, READ_NONFINITE | READ_BOOL },
	{ "W_Q", fuzz_weight_keys, 1, 3, 0 },
	/* --dtype f32's X: float32 kept as floats (matrix.f) */
	{ "X", fuzz_x_keys, 2, 3, READ_LABELS | READ_F32 },
};
#define FUZZ_N_SPECS (sizeof(fuzz_specs) / sizeof(fuzz_specs[0]))

/* Each input starts afresh: the memory budget full, and no file on the
 * list of the run's inputs (files.h), which takes every file a reader
 * opens and would otherwise grow over the run */
static inline void fuzz_start(void)
{
	budget_init(FUZZ_BUDGET);
	files_forget();
}

/* data[0, size) as a loaded file called name: the bytes, then a NUL */
static inline void fuzz_file(input_file *f, const char *name, const uint8_t *data, size_t size)
{
	fuzz_start();
	memset(f, 0, sizeof(*f));
	f->name = strdup(name);
	f->data = malloc(size + 1);
	if (!f->name || !f->data)
		abort();
	if (size)
		memcpy(f->data, data, size);
	f->data[size] = '\0';
	f->len = size;
}

/* a broken promise of the reader: a crash, so the fuzzer keeps the input */
static inline void fuzz_fail(const char *what)
{
	fprintf(stderr, "fuzz: a reader's result is wrong: %s\n", what);
	abort();
}

/*
 * What every matrix a reader returns must be: a rank the spec accepts,
 * every dimension at least 1 (and 1 past the rank), values all readable
 * (ASan checks the buffer holds them), finite unless the spec allows
 * otherwise, 0 or 1 when they were booleans, and labels only where the
 * spec asks for them, one a row, each a string (strlen reads it whole).
 */
static inline void fuzz_check_matrix(const matrix *m, const read_spec *spec)
{
	size_t n;

	if (m->rank < spec->min_rank || m->rank > spec->max_rank)
		fuzz_fail("a rank the spec does not accept");
	if (!m->v == !m->f)
		fuzz_fail("no values, or both doubles and floats");
	if (m->f && !(spec->flags & READ_F32))
		fuzz_fail("floats where the spec takes doubles");
	for (size_t r = 0; r < 4; r++)
		if (r < m->rank ? m->dim[r] == 0 : m->dim[r] != 1)
			fuzz_fail("a dimension of 0, or not 1 past the rank");
	if (m->is_bool && !(spec->flags & READ_BOOL))
		fuzz_fail("booleans where the spec takes none");
	if (m->labels || m->n_labels) {
		if (!(spec->flags & READ_LABELS))
			fuzz_fail("labels where the spec takes none");
		if (!m->labels || m->n_labels != matrix_rows(m))
			fuzz_fail("not one label a row");
		for (size_t i = 0; i < m->n_labels; i++)
			if (!m->labels[i] || strlen(m->labels[i]) == SIZE_MAX)
				fuzz_fail("a missing label");
	}
	n = matrix_size(m);
	for (size_t i = 0; i < n; i++) {
		const double v = m->f ? (double)m->f[i] : m->v[i];

		if (!isfinite(v) && !(spec->flags & READ_NONFINITE))
			fuzz_fail("a non-finite value where the spec takes none");
		if (m->is_bool && v != 0.0 && v != 1.0)
			fuzz_fail("a boolean matrix holding something else than 0 and 1");
	}
}

/* one reader on f with spec: checked on success, freed either way */
static inline void fuzz_read(int (*reader)(matrix *, const input_file *, const read_spec *),
		      const input_file *f, const read_spec *spec)
{
	matrix m;

	if (reader(&m, f, spec) == 0)
		fuzz_check_matrix(&m, spec);
	matrix_free(&m); /* after a failure too: nothing may leak either way */
	/* and every byte charged to the budget was given back */
	if (budget_held() != 0)
		fuzz_fail("the memory budget was not given back in full");
}

#endif

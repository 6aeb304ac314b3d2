/*
 * fuzz_weights.c: libFuzzer target for the weights file, 'mha forward -w
 * FILE': weights_load() on a JSON object (names matched loosely, PyTorch's
 * state_dict names, each weight 1-D to 3-D) and weights_finish() bringing
 * it to one layout, for several head counts, in mha's and PyTorch's layout.
 *
 * weights_load() takes a path, so each input is written to a private file
 * in memory and read back through it (fuzz_file.h).
 */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz_file.h"
#include "fuzz.h"
#include "load/weights.h"

static const struct {
	weight_layout layout;
	size_t heads, kv_heads;
} runs[] = {
	{ LAYOUT_MHA, 1, 1 }, { LAYOUT_MHA, 2, 2 }, { LAYOUT_MHA, 2, 1 }, { LAYOUT_MHA, 3, 3 },
	{ LAYOUT_TORCH, 1, 1 }, { LAYOUT_TORCH, 2, 1 },
};

/* what weights_finish() promises: matrices 2-D, biases 1-D */
static void check_finished(const weights *w)
{
	for (int i = 0; i < N_WEIGHTS; i++) {
		const matrix *m = &w->m[i];

		if (!m->rank)
			continue;
		if (m->rank != (i <= WO ? 2u : 1u) || !m->v || !w->src[i])
			fuzz_fail("weights_finish: a weight not in its layout");
		if (matrix_size(m) == 0)
			fuzz_fail("weights_finish: an empty weight");
		for (size_t k = 0; k < matrix_size(m); k++)
			if (!isfinite(m->v[k]))
				fuzz_fail("weights_finish: a non-finite weight");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file_path(data, size);

	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		weights w;

		memset(&w, 0, sizeof(w));
		fuzz_start();
		if (weights_load(&w, path, runs[r].layout) == 0 &&
		    weights_finish(&w, runs[r].heads, runs[r].kv_heads) == 0)
			check_finished(&w);
		weights_free(&w);
		if (budget_held() != 0)
			fuzz_fail("the memory budget was not given back in full");
	}
	return 0;
}

/*
 * fuzz_problem.c: libFuzzer target for problem_load() (engine/load/problem.h), the
 * reading and checking 'mha forward' does, driven without a command line:
 * a problem_spec naming an X file, with options picked by the input's
 * first byte.  When the problem loads, its shapes and labels are checked,
 * and a small one is run with every step kept (steps.h): each item must
 * have the rows and columns its step's axes say.
 *
 * The input: a byte of options, then (with bit 7) a second byte, then
 * (with bit 4) a line of --tokens, then (with bit 7) a --mask file ended by
 * a NUL, then the X file; each file in any format mha reads (told apart by
 * content: its path is /proc/self/fd/N, fuzz_file.h).
 *
 *   bits 0-1  --heads 1 to 4       bit 4  --tokens from the first line
 *   bit 2     --causal             bit 5  --cell 1,1
 *   bit 3     --kv-heads 1         bit 6  --kv-len 2
 *   bit 7     --mask, up to the first NUL; the second byte's bit 0:
 *             --mask-bool block (else attend)
 */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz_file.h"
#include "fuzz.h"
#include "base/cli.h"
#include "load/load.h"
#include "run/run.h"
#include "run/steps.h"

/* the most cells (queries x keys x heads) a loaded problem is run with */
#define MOST_CELLS 4096

/* a 2-D item's rows and columns, where they stand for the queries or keys */
static int shaped_as_axes(const struct step_item *it, const mha_dims *d)
{
	const size_t rows = matrix_rows(it->m), cols = matrix_cols(it->m);

	return it->m->rank != 2 ||
	       ((it->rows == AXIS_QUERY ? rows == d->n_q : rows == d->n_kv) &&
		(it->cols != AXIS_KEY || cols == d->n_kv));
}

/* what problem_load() promises of a problem it loaded */
static void check_problem(const struct problem *p)
{
	const mha_dims *d = &p->d;

	if (d->n_q != matrix_rows(&p->x) || d->d_q_in != matrix_cols(&p->x) ||
	    (p->x.rank == 3) != (p->batch != 0) || d->batch != p->batch ||
	    d->heads * d->d_k != d->d_q_in || p->in.xq != p->x.v)
		fuzz_fail("problem_load: shapes that are not X's");
	if ((p->labels.query && p->labels.n_query != d->n_q) ||
	    (p->labels.key && p->labels.n_key != d->n_kv))
		fuzz_fail("problem_load: not one label a query and a key");
	if (p->spec.cell && (p->cell[0] >= d->n_q || p->cell[1] >= d->n_kv))
		fuzz_fail("problem_load: a --cell outside the scores");
}

/* a boolean mask read as --mask-bool says: allow[i] is the file's value,
 * or its opposite with block; numbers refused under block */
static void check_mask(const struct problem *p)
{
	const size_t n = matrix_size(&p->mask);

	if (!p->spec.mask)
		return;
	if (!p->mask.is_bool) {
		if (p->spec.mask_block)
			fuzz_fail("problem_load: --mask-bool block took a mask of numbers");
		return;
	}
	if (!p->allow || p->cfg.mask.allow != p->allow)
		fuzz_fail("problem_load: a boolean mask not handed on as one");
	for (size_t i = 0; i < n; i++)
		if (p->allow[i] != ((p->mask.v[i] != 0) != (p->spec.mask_block != 0)))
			fuzz_fail("problem_load: a boolean mask's entry not read as --mask-bool says");
}

/* an item marked a copy holds its target's numbers, bit for bit, and the
 * copies fold into a line that moves past them */
static void check_copies(const struct step_items *list)
{
	char note[600];

	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i], *to;
		size_t next = i;

		if (it->copy_of < 0)
			continue;
		to = &list->v[it->copy_of];
		if (to->copy_of >= 0 || matrix_size(it->m) != matrix_size(to->m) ||
		    memcmp(it->m->v, to->m->v, matrix_size(it->m) * sizeof(double)))
			fuzz_fail("steps_collect: a copy that is not its target's numbers");
		if (!steps_fold_note(note, sizeof(note), list, &next)[0] || next <= i)
			fuzz_fail("steps_fold_note: no line, or stuck");
	}
}

/* a batch (3-D X): each sequence's steps kept apart, as 'mha forward' keeps them */
#define MOST_SEQUENCES 4

struct keep_batch {
	struct step_results res[MOST_SEQUENCES];
	size_t cur;
};

static int keep_sequence(void *ctx, size_t b)
{
	((struct keep_batch *)ctx)->cur = b;
	return 0;
}

static int keep_step(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols)
{
	struct keep_batch *k = ctx;

	return steps_keep(&k->res[k->cur], stage, head, m, rows, cols);
}

/* every step kept and collected: each item, of each sequence, as its step's axes say */
static void run_steps(const struct problem *p)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p);
	struct keep_batch kb;
	struct step_facts f;
	mha_observer obs = MHA_INIT(mha_observer);
	mha_report rep = MHA_INIT(mha_report);
	matrix out = { 0 };
	unsigned all;

	if (d->n_q * d->n_kv * d->heads * B > MOST_CELLS || B > MOST_SEQUENCES)
		return;
	memset(&kb, 0, sizeof(kb));
	for (size_t b = 0; b < B; b++) {
		kb.res[b].heads = d->heads;
		kb.res[b].mask_per_head = p->cfg.mask.per_head;
	}
	problem_facts(p, 0, &f);
	all = steps_print_set(0, 1, &f) | steps_every(&f);
	obs = (mha_observer){ .size = sizeof(mha_observer),
			      .fn = keep_step, .ctx = &kb, .sequence = keep_sequence,
			      .wanted = steps_stages(all, d->heads) };
	if (problem_check_memory(p, obs.wanted, 0) == 0 &&
	    problem_forward(&out, p, &obs, 0, &rep) == 0) {
		f.scale = rep.scale;
		for (size_t b = 0; b < B; b++) {
			struct step_items list = { 0 };
			const matrix x = step_plane(&p->x, b), o = step_plane(&out, b);

			if (steps_stack(&kb.res[b]) == 0 &&
			    steps_collect(&list, &kb.res[b], all, &f, &x, &o) == 0) {
				for (size_t i = 0; i < list.n; i++)
					if (!shaped_as_axes(&list.v[i], d))
						fuzz_fail("steps_collect: an item not shaped as its axes say");
				check_copies(&list);
			}
			steps_items_free(&list);
		}
	}
	for (size_t b = 0; b < B; b++)
		steps_results_free(&kb.res[b]);
	matrix_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct problem_spec s;
	struct problem p;
	char *tokens = NULL;
	uint8_t opts;
	int rc;

	if (size < 1)
		return 0;
	memset(&s, 0, sizeof(s));
	opts = data[0];
	s.heads = (size_t)(opts & 3) + 1;
	s.kv_heads = (opts & 8) ? 1 : s.heads;
	s.cfg.causal = (opts & 4) ? MHA_CAUSAL_TOP_LEFT : MHA_CAUSAL_NONE;
	s.cell = (opts & 32) ? "1,1" : NULL;
	s.cfg.kv_len = (opts & 64) ? 2 : 0;
	s.map = 1; /* as mha forward reads: a native .npy X past 4 KiB mapped */
	data++;
	size--;
	if (opts & 128) {
		if (size < 1)
			return 0;
		s.mask_block = data[0] & 1; /* --mask-bool block: PyTorch's true = blocked */
		data++;
		size--;
	}
	if (opts & 16) {
		const uint8_t *nl = memchr(data, '\n', size);
		const size_t n = nl ? (size_t)(nl - data) : size;

		tokens = strndup((const char *)data, n);
		if (!tokens)
			abort();
		s.tokens = tokens;
		data += nl ? n + 1 : n;
		size -= nl ? n + 1 : n;
	}
	if (opts & 128) {
		/* the mask, up to the first NUL: a file of its own */
		const uint8_t *nul = memchr(data, '\0', size);
		const size_t n = nul ? (size_t)(nul - data) : size;

		s.mask = fuzz_file_path_at(1, data, n);
		data += nul ? n + 1 : n;
		size -= nul ? n + 1 : n;
	}
	s.x = fuzz_file_path(data, size);
	fuzz_start();
	rc = problem_load(&p, &s);
	if (rc != EXIT_OK && rc != EXIT_DATA && rc != EXIT_USAGE)
		fuzz_fail("problem_load: an exit status that is none of 0, 1 and 2");
	if (rc == EXIT_OK) {
		check_problem(&p);
		check_mask(&p);
		run_steps(&p);
	}
	problem_free(&p);
	free(tokens);
	if (budget_held() != 0)
		fuzz_fail("the memory budget was not given back in full");
	return 0;
}

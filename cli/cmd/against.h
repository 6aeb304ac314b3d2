/*
 * against.h: the results 'mha compare --against PATH' reads: someone
 * else's attention, as a JSON file in mha's schema (any subset of its
 * keys), a directory named as 'mha forward -o DIR/' names its files, a
 * .npz archive named as '-o run.npz' names its members, or one matrix
 * (any format mha reads), taken as the output.
 *
 * Each step is kept whole: a per-head step as the heads stacked (H, rows,
 * cols), as .npz holds it.  Nothing here compares; cmd/compare.c does.
 */
#ifndef MHA_CLI_AGAINST_H
#define MHA_CLI_AGAINST_H

#include <stddef.h>

#include "base/matrix.h"

/* The steps compare knows, in the order of the computation. */
enum cmp_id {
	C_X, C_C_Q, C_C_Q_NORM, C_Q_NOPE, C_Q_PE, C_Q_PE_ROT, C_C_KV, C_C_KV_NORM, C_K_PE,
	C_K_PE_ROT, C_K_NOPE, C_Q, C_K, C_V, C_Q_NORM, C_K_NORM, C_Q_ROT, C_K_ROT, C_HEAD_Q, C_HEAD_K, C_HEAD_V, C_SCORES, C_SCALED,
	C_SOFTCAPPED, C_MASK, C_MASKED, C_SOFTMAX, C_HEAD_OUTPUT, C_CONCAT, C_OUTPUT, C_COUNT
};

/* A step compare reads: one of steps.h's, whole or each head's. */
struct cmp_step {
	int step;         /* enum step_id (steps.h) */
	int per_head;     /* under "heads": one matrix per query head */
};

extern const struct cmp_step cmp_steps[C_COUNT];

/* Its JSON key, steps.c's: top-level, or in each object of "heads". */
const char *cmp_key(int i);
/* Its name in the report: the key, "heads.KEY" for a head's matrix whose
 * key the whole model's has too ("heads.Q", "heads.output"). */
const char *cmp_name(int i);
/* The keys compare reads, "X, c_q, …, concat, output" (per_head 0: the top
 * level's, "heads" among them; 1: a head's), into buf. */
const char *cmp_keys_list(char *buf, size_t size, int per_head);

struct against {
	matrix m[C_COUNT];     /* rank 0: not given; per-head steps (H, rows, cols) */
	char src[C_COUNT][320]; /* where each came from, for messages */
	const char *kind;      /* "json", "dir", "npz" or "matrix" */
};

/*
 * Read path (a file, or a directory) for a run of heads query heads.  Every
 * problem with it (unreadable, a name or key that is not a step, heads
 * missing) is said in one line naming the file; -1.  Else 0, and at least
 * one step is given.  against_free() after, whatever it returned.
 */
int against_read(struct against *a, const char *path, size_t heads);
void against_free(struct against *a);

#endif

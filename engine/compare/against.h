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
#ifndef MHA_ENGINE_AGAINST_H
#define MHA_ENGINE_AGAINST_H

#include <stddef.h>

#include "util/matrix.h"
#include "compare/aliases.h"
#include "run/steps.h"

/* How their numbers were given, as detected (or --digits). */
enum { PREC_FULL, PREC_DECIMALS, PREC_SIGNIFICANT };

/* One step as they gave it. */
struct given {
	matrix m;               /* rank 0: not given; per-head steps (H, rows, cols), the
				   heads and rows not given zero */
	char src[320];          /* where it came from, for messages */
	unsigned char *heads;   /* per-head steps: [H], 1 for each head given; NULL: all */
	size_t rows;            /* the rows given (the first ones), 0: all */
	int prec, digits;       /* PREC_*: given to that many decimals or significant digits */
	int f32;                /* read as float32 (a .npy of <f4) */
	int type;               /* the type their numbers were in (matrix.h's FROM_*), or
				   with --dtype the type it says */
	int named_as;           /* -1, or the step they named it as before it was found
				   to be this one (their "scores" that are mha's masked) */
	size_t rank, dim[4];    /* their shape as read (of the last array, for a step
				   given head by head) */
	int per_kv;             /* given per key/value head, before repeat_kv */
	int turned;             /* PyTorch's (out, in) gradient of an nn.Linear weight,
				   read turned to the run's (in, out) */
};
struct against {
	struct given g[C_COUNT];
	const char *kind;      /* "json", "dir", "npz" or "matrix" */
	const char *path;
	size_t heads;
	int torch;             /* --layout torch: weights' gradients as PyTorch's (out, in) */
	struct raw *raw;       /* as read, before they are told apart (against.c) */
	size_t n_raw, cap_raw;
};

/*
 * Read path (a file, or a directory) for a run of heads query heads: every
 * array and its name, not yet told apart (that takes the run's shapes:
 * against_resolve).  Every problem with it (unreadable, names that are no
 * step's: all of them in one line, heads beyond the run's) is said in one
 * line naming the file; -1.  Else 0, and at least one array is read.
 * against_free() after, whatever it returned.
 */
int against_read(struct against *a, const char *path, size_t heads);

/* The same for arrays handed over in memory (mhe_run_set_theirs): names[i]
 * read from paths[i], an array of read/memory.h's. */
int against_read_arrays(struct against *a, const char *const *names, const char *const *paths,
			size_t n, size_t heads);

/* Whether a name read stands for a gradient (backward's steps). */
int against_has_grads(const struct against *a);

/* The upstream gradient among their arrays (dO, grad_output: (n_q, cols)),
 * moved into dout and out of theirs: 1; 0 when they gave none. */
int against_take_dout(struct against *a, matrix *dout, size_t rows, size_t cols);

/*
 * Each array read told apart by its name and shape against mine[C_COUNT]
 * (this run's steps: rank 0 for those it has not): a step's name whose
 * shape is the whole model's or each head's, a head's or the first rows
 * alone, the softmax averaged over the heads.  An array whose shape is no
 * step's of its name is kept as read (compare reports SHAPE).  -1 said (a
 * step this run has not, the same step twice); else 0.
 */
int against_resolve(struct against *a, const matrix *mine);

/* Whether head h (from 0) and row r of step i were given. */
int given_at(const struct given *g, size_t h, size_t r);

void against_free(struct against *a);

#endif

/*
 * problem.h: one attention problem, read and checked (load.h reads it): the inputs (X and
 * X_kv, or Q, K and V given directly), the weights, the mask and the
 * labels, with mha_dims worked out and every mismatch explained, naming
 * the option and file each matrix came from.  What 'mha forward' (and
 * 'mha heatmap') read, and what the commands after them will.
 *
 * It knows nothing of argv: a problem_spec names the files and options,
 * so a test or a fuzzer can fill one and call problem_load().  Reading
 * charges the memory budget (budget.h): budget_init() comes first.
 */
#ifndef MHA_ENGINE_PROBLEM_H
#define MHA_ENGINE_PROBLEM_H

#include <stddef.h>

#include "util/matrix.h"
#include "load/spec.h"
#include "load/weights.h"
#include "mha.h"

/* Token labels: one per query (row of X) and one per key. */
struct labels {
	char **query, **key; /* NULL: none; key may be query itself, or an input's labels */
	size_t n_query, n_key;
	int own_query, own_key; /* split from --tokens: freed with the problem */
};

struct problem {
	struct problem_spec spec;
	matrix x, kv, q, k, v, mask; /* as read; rank 0 where not given */
	matrix xk, xv;               /* --xk, --xv */
	matrix sinks;                /* --sinks: (H) or (1, H) or (H, 1) */
	matrix q_norm, k_norm;       /* --q-norm, --k-norm: (d_k), (H·d_k) or (H, d_k), ... */
	matrix latent[N_LATENT];     /* MLA's tensors (latent.h), rank 0 where not given */
	matrix alibi;                /* ALiBi's slopes as used: --alibi-slopes (H) or (1, H)
					or (H, 1), or Press et al.'s (H) for --alibi */
	matrix rope_cos, rope_sin;   /* --rope-cos, --rope-sin: (rows, R/2) */
	matrix pos_q, pos_k;         /* --positions as read: one list in pos_q, or "q" and "k" */
	int pos_apart;               /* --positions gave "q" and "k" apart (a JSON object) */
	ptrdiff_t *q_pos, *k_pos;    /* the positions as whole numbers: (n_q), (n_kv), or NULL */
	weights w;
	struct labels labels;
	/* where each came from, for messages: "-x x.json", "--mask <stdin>" */
	char *x_src, *kv_src, *q_src, *k_src, *v_src, *mask_src; /* malloc'd */
	char *xk_src, *xv_src;
	/* a batch: B sequences when an input is 3-D (B, rows, cols), 0 when all
	 * are 2-D; a 2-D input beside 3-D ones is shared by every sequence
	 * (copied B times), so the library sees every input as (B, rows, cols) */
	size_t batch;
	size_t batch_read;      /* after problem_keep_sequence: the batch as read */
	matrix mask_read;       /* the mask's rank and dims as read (no values) */
	unsigned char *allow;   /* the boolean mask as bytes, or NULL */
	int diag_blocked;       /* a boolean mask read as true = may attend blocks every
				   query's own key (square scores): PyTorch's, perhaps */
	int direct;             /* Q, K, V given directly */
	mha_dims d;
	mha_config cfg;         /* spec.cfg with the mask */
	mha_inputs in;          /* the library's view of the matrices above */
	mha_inputs_f32 in_f;    /* the same of those read as floats (matrix.f), else NULL */
	mha_weights weights;
	mha_weights_f32 weights_f; /* those read as floats (matrix.f), else NULL */
	size_t cell[2];         /* --cell: the query and key, 0-based */
	size_t rows[2], cols[2]; /* --rows, --cols: queries, keys [first, end), 0-based;
				    all of them when not given */
	unsigned shared;        /* a batch: the inputs given 2-D and copied to every
				   sequence, 1 << the index of X, X_kv, X_k, X_v, Q, K, V */
};

/* Sequences the run computes: the batch, or 1. */
static inline size_t problem_sequences(const struct problem *p)
{
	return p->batch ? p->batch : 1;
}

#endif

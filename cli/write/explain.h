/*
 * explain.h: 'mha forward --explain': the computation told as a tutorial
 * tells it, each step with its formula, its shapes and its matrix, and
 * with --cell I,J one entry of the attention worked through by hand.
 */
#ifndef MHA_CLI_EXPLAIN_H
#define MHA_CLI_EXPLAIN_H

#include <stdio.h>

#include "util/matrix.h"
#include "run/steps.h"
#include "mha.h"

/* how many terms of a sum a cell's hand computation writes out before "…"
 * (the page's narrative too: html.c hands it these) */
#define EXPLAIN_TERMS 12
/* a softmax's denominator: every term, masked ones as 0, up to this many keys */
#define EXPLAIN_SUM_TERMS 32

/* One query head's steps, each (rows, cols) as printed. */
struct explain_head {
	struct step_head s;                   /* its blocks of Q, K and V, scores … out */
	const matrix *mask;                   /* its plane of the mask, or NULL */
	size_t kv_head;                       /* 0-based */
};

struct explain {
	const mha_dims *d;
	const mha_config *cfg;
	double scale;
	const char *scale_how;                /* "1/sqrt(d_k), d_k = 2" */
	const char *mask_how;                 /* "causal", "m.json", … or NULL */
	const double *alibi_slopes;           /* (H) ALiBi's slopes, or NULL without ALiBi */
	const char *mask_file;                /* --mask as given, or NULL */
	const char *q_formula, *k_formula, *v_formula; /* "Q = X*W_Q + b_Q", "Q = X", "Q" */
	const char *out_formula;              /* "output = concat*W_O + b_O" or NULL */
	const matrix *x;                      /* NULL with Q, K, V given directly */
	const matrix *Q, *K, *V, *concat, *output;
	const matrix *q_norm, *k_norm;        /* Q and K normalised (a q/k norm), or NULL */
	const char *q_norm_formula, *k_norm_formula;
	const matrix *q_rot, *k_rot;          /* Q and K rotated (--rope), or NULL */
	const char *q_rot_formula, *k_rot_formula;
	/* multi-head latent attention's steps (STEP_C_Q … STEP_K_NOPE, less STEP_C_Q),
	 * or NULL each: its latents and each head's two parts */
	const matrix *latent[STEP_K_NOPE - STEP_C_Q + 1];
	const char *latent_formula[STEP_K_NOPE - STEP_C_Q + 1];
	const struct explain_head *heads;     /* [d->heads] */
	const char *const *q_labels, *const *k_labels; /* tokens, or NULL */
	int has_cell;
	int cell_alone;                       /* the cell's computation, nothing else */
	size_t cell_i, cell_j;                /* 0-based query and key */
	int precision;
	int full;                             /* --full: every entry of each table (else
						 summarised past 1000, as NumPy prints) */
};

/* Write the walk-through; 0, or -1 on a write error. */
int explain_write(FILE *fp, const struct explain *e);

/*
 * The walk-through of the steps collected in list (steps_every()'s, titled
 * with f): formulas from the items' titles, each head's matrices from its
 * items.  cell: the query and key (0-based) worked by hand, or NULL;
 * cell_alone: that cell's hand computation in each head, and nothing else;
 * full: every entry of each table (write.h's writer full).  0, or
 * -1 when out of memory (said); a write error is left in ferror(fp).
 */
int explain_steps(FILE *fp, const struct step_items *list, const struct step_facts *f,
		  const char *const *q_labels, const char *const *k_labels, const size_t *cell,
		  int cell_alone, int precision, int full);

#endif

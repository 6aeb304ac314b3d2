/*
 * aliases.h: the steps 'mha compare' knows (forward's and backward's, in
 * the order of the computation) and the names it reads each by.  mha's own keys
 * (steps.c's, "Q", "scores", "dW_Q"), the names PyTorch, Hugging Face and
 * the tutorials give the same arrays ("query_states", "attn_weights",
 * "context"), any case, and a head's forms: "heads.scores" or
 * "heads_scores" (every head, heads first), "head2_scores", "head2.scores",
 * "scores_h2", "scores_head2" (head 2 alone).  A name may stand for more
 * than one step ("attn_output": concat or output; "Q": the whole or each
 * head's): against.c picks by the array's shape.  Nothing here reads a file.
 */
#ifndef MHA_ENGINE_ALIASES_H
#define MHA_ENGINE_ALIASES_H

#include <stddef.h>
#include <stdio.h>

#include "run/steps.h"

/* The steps compare knows, in the order of the computation: forward's,
 * then backward's (C_GRAD + a grad_steps id, GS_*). */
enum cmp_id {
	C_X, C_C_Q, C_C_Q_NORM, C_Q_NOPE, C_Q_PE, C_Q_PE_ROT, C_C_KV, C_C_KV_NORM, C_K_PE,
	C_K_PE_ROT, C_K_NOPE, C_Q, C_K, C_V, C_Q_NORM, C_K_NORM, C_Q_ROT, C_K_ROT, C_HEAD_Q,
	C_HEAD_K, C_HEAD_V, C_SCORES, C_SCALED, C_SOFTCAPPED, C_MASK, C_MASKED, C_SOFTMAX,
	C_SOFTMAX_MEAN, /* the softmax averaged over the heads: nn.MultiheadAttention's weights */
	C_HEAD_OUTPUT, C_CONCAT, C_OUTPUT,
	C_GRAD,
	C_COUNT = C_GRAD + GS_COUNT
};

/* backward's step gs (grad_steps[gs]) as compare's */
#define C_G(gs) (C_GRAD + (gs))

/* A step compare reads: one of steps.h's (forward's or backward's), whole
 * or each head's. */
struct cmp_step {
	int step;         /* enum step_id, or enum grad_step_id for C_GRAD on */
	int per_head;     /* under "heads": one matrix per query head */
	int grad;         /* backward's */
	int hidden;       /* a copy of a forward step under another name (backward's P
			     and O): read under the forward step's */
};

/* compare's step i */
const struct cmp_step *cmp_at(int i);
/* its row of steps[] or grad_steps[] */
const struct step *cmp_row(int i);

/* Its JSON key, steps.c's: top-level, or in each object of "heads". */
const char *cmp_key(int i);
/* Its name in the report: the key, "heads.KEY" for a head's matrix whose
 * key the whole model's has too ("heads.Q", "heads.output"). */
const char *cmp_name(int i);


/* What a name says, its head form taken off. */
struct name_parse {
	char base[96];  /* the step's part ("scores"), as given */
	size_t head;    /* "head2_...", "..._h2": 2; 0 when no head is named */
	int heads;      /* "heads." or "heads_": every head, stacked */
};

/* A torch user's name of nn.MultiheadAttention's packed gradients: 1 for
 * in_proj_weight.grad (keys: dW_Q, dW_K, dW_V, its three blocks), 2 for
 * in_proj_bias.grad (db_Q, db_K, db_V); 0 for any other name.  keys may
 * be NULL. */
int alias_packed(const char *base, const char *keys[3]);

/* name's head form taken apart (a name with none: base is name); 0, or -1
 * when the name is too long to be a step's. */
int alias_parse(const char *name, struct name_parse *np);

/*
 * The steps (enum cmp_id) base may stand for, any case: every step under
 * mha's key of that name, or under the keys an alias names, the whole
 * model's before each head's, into ids[max].  Their number; 0: no step.
 */
size_t alias_steps(const char *base, int *ids, size_t max);

/* The known name nearest base (a key or an alias), for "did you mean"; or NULL. */
const char *alias_closest(const char *base);

/* The table as 'mha compare --aliases' prints it: a line per step, its
 * name and the other names it is read by. */
void alias_print(FILE *fp);

#endif

/*
 * weights.h: the weights file: one JSON object holding W_Q, W_K, W_V, W_O
 * and the biases b_Q, b_K, b_V, b_O, each optional here; the command
 * decides which combinations make sense.
 */
#ifndef MHA_CLI_WEIGHTS_H
#define MHA_CLI_WEIGHTS_H

#include "matrix.h"

enum { WQ, WK, WV, WO, BQ, BK, BV, BO, N_WEIGHTS };

/* canonical spellings, "W_Q" … "b_O", indexed by the enum above */
extern const char *const weight_names[N_WEIGHTS];

typedef struct weights {
	matrix m[N_WEIGHTS]; /* rank 0 where the file has no such key */
	char *file;          /* display name of the file, for messages */
} weights;

/* Read path into w (zeroed first); errors are reported and return -1. */
int weights_load(weights *w, const char *path);
void weights_free(weights *w);
static inline int weights_has(const weights *w, int which)
{
	return w->m[which].rank != 0;
}

#endif

/*
 * shapes.h: the problem's shapes: the batch, mha_dims from the matrices
 * read (every mismatch named with both shapes and where each came from),
 * the keys' lengths, and one sequence of a batch kept alone.
 */
#ifndef MHA_ENGINE_SHAPES_H
#define MHA_ENGINE_SHAPES_H

#include <stddef.h>

#include "load/problem.h"

/* A batch when some input is 3-D: the 2-D ones copied to every sequence
 * (p->batch, p->shared).  0, or -1 said. */
int shapes_batch(struct problem *p);
/* *d from the matrices read and the spec's heads; 0, or -1 said. */
int shapes_dims(const struct problem_spec *s, const struct problem *p, mha_dims *d);
/* --kv-len N, or one length per sequence: none past the keys.  0, or -1 said. */
int shapes_kv_len(const struct problem_spec *s, struct problem *p);
/* p->in and p->in_f, the library's view of the inputs read */
void shapes_inputs(struct problem *p);

/*
 * --sequence: keep sequence b (0-based) of a batch alone, as a batch of one
 * (its inputs, its mask, its key length); batch_read keeps the batch's
 * size.  0, or -1 said.
 */
int problem_keep_sequence(struct problem *p, size_t b);

#endif

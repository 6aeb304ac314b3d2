/*
 * plain.h: what the plain forward path (mha.c) lends the plain backward
 * path (backward.c), so that both check their arguments and project their
 * inputs with the same code.  Inside the library only.
 */
#ifndef MHA_PLAIN_H
#define MHA_PLAIN_H

#include "mha.h"

/* mha_forward's checks of dims, cfg, the output, the inputs x[3] and the
 * weights W[4]; rep reset (fast_path 0, scale NaN) and its causal offset set. */
mha_status mha_plain_validate(const mha_dims *d, const mha_config *cfg, const void *out,
			      const void *const x[3], const void *const W[4], mha_report *rep);

/* *res (rows, cols) = x·W + b as the plain path projects (x itself when W and
 * b are NULL, x + b without W); *owned what to free, or NULL. */
mha_status mha_plain_projection(const double **res, double **owned, const double *x, size_t rows,
				size_t d_in, const double *W, const double *b, size_t cols);

/* The stages mha_forward hands over only on its plain path. */
int mha_plain_per_head(mha_stages wanted);

#endif

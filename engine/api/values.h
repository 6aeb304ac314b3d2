/*
 * values.h: the values of the attention commands' options that are more
 * than a count or a file: numbers, an eps, a layer, a window, a scale.
 * Each returns 0, or -1 after a usage error naming the option (hint: the
 * command, for "Try 'mha NAME --help'").  Counts, sizes and offsets are
 * base/cli.h's opt_ functions.
 */
#ifndef MHA_ENGINE_VALUES_H
#define MHA_ENGINE_VALUES_H

#include <stddef.h>

#include "mha.h"

/* a finite number (--rope-theta, --softcap) */
int value_real(const char *hint, const char *opt, const char *arg, double *out);
/* an eps: a finite number from 0 (--norm-eps, --mla-eps) */
int value_eps(const char *hint, const char *opt, const char *arg, double *out);
/* --layer N: a layer's number, from 0 */
int value_layer(const char *hint, const char *arg, size_t *out);
/* --window L[,R] into w (on; R absent: -1, unbounded to the right) */
int value_window(const char *hint, const char *arg, mha_window *w);
/* --scale: dk, dmodel, seqlen, none or a number, into cfg's scale_mode and scale */
int value_scale(const char *hint, const char *arg, mha_config *cfg);
/* --biases: some of q,k,v,o (comma-separated, each once), or none, into
 * *out: bit i for weight BQ + i (weights.h) */
int value_biases(const char *hint, const char *arg, unsigned *out);

#endif

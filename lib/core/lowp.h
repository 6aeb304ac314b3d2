/*
 * lowp.h: the low-precision reference (lowp.c), mha_forward's path when
 * mha_config.precision is bfloat16 or float16.  Inside the library only.
 */
#ifndef MHA_LOWP_H
#define MHA_LOWP_H

#include "mha.h"
#include "base/progress.h"

/* mha_forward of a validated problem in the type cfg->precision names, the
 * stages the observer wants handed over (rounded values); MHA_ERR_PRECISION
 * for what it does not compute (ALiBi, a q/k norm, latent attention, RoPE
 * scaling) */
mha_status mha_lowp_forward(double *out, const mha_dims *d, const mha_inputs *in,
			    const mha_weights *w, const mha_config *cfg, const mha_observer *obs,
			    mha_report *rep, struct mha_progress *prog);

#endif

/*
 * latent.h: multi-head latent attention's tensors (DeepSeek's MLA, mha.h's
 * mha_mla) as the command line gives them, one file each, named after the
 * tensors (--q-a-proj, --kv-b-proj, …): their shapes checked against X and
 * each other, the dims they set, and the library's settings.
 */
#ifndef MHA_CLI_LATENT_H
#define MHA_CLI_LATENT_H

#include "load/problem.h"

/* The options, "--q-a-proj" …, and the tensors' names, "q_a_proj" …, by LAT_ index. */
extern const char *const latent_options[N_LATENT];
extern const char *const latent_names[N_LATENT];

/* The run is MLA: a latent tensor or --qk-rope-head-dim given. */
int latent_on(const struct problem_spec *s);
/* Read each tensor given (p->latent), in the library's (d_in, d_out) layout. 0, or -1 said. */
int latent_read(const struct problem_spec *s, struct problem *p);
/* *d from X (and X_kv), W_Q, the tensors and the heads, every mismatch
 * named with its file. 0, or -1 said. */
int latent_dims(const struct problem_spec *s, const struct problem *p, mha_dims *d);
/* p->cfg.mla from what latent_dims accepted; p->weights' latent pointers */
void latent_config(struct problem *p);
void latent_weights(struct problem *p);

#endif

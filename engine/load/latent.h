/*
 * latent.h: multi-head latent attention's tensors (DeepSeek's MLA, mha.h's
 * mha_mla) as the command line gives them, one file each, named after the
 * tensors (--q-a-proj, --kv-b-proj, …): their shapes checked against X and
 * each other, the dims they set, and the library's settings.
 */
#ifndef MHA_ENGINE_LATENT_H
#define MHA_ENGINE_LATENT_H

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
/*
 * config.json of a model type with multi-head latent attention (DeepSeek's
 * keys): the turned features (qk_rope_head_dim), the ranks and head dims
 * to hold the tensors to, rms_norm_eps, rope_interleave, YaRN's
 * mscale_all_dim on the scale, FP8's block size; what the command line
 * gave wins.  0, or -1 said (the file and the key named).
 */
struct cJSON;
int latent_apply_config(struct problem_spec *s, const struct cJSON *root, const char *path);

/* DeepSeek's YaRN: the scale times mscale(factor, mscale_all_dim)^2, as its
 * code takes them from rope_scaling (config.json's, or --rope-scaling's
 * over it), into s->mla_mscale2 (0: none) */
void latent_mscale(struct problem_spec *s);

/* p->cfg.mla from what latent_dims accepted; p->weights' latent pointers */
void latent_config(struct problem *p);
void latent_weights(struct problem *p);

#endif

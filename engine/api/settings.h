/*
 * settings.h: what a run reads and what its layer computes, set by name as
 * the program's long options spell them (settings.c): the command line,
 * mha model and the engine's mhe_run_set() all parse here.
 */
#ifndef MHA_ENGINE_SETTINGS_H
#define MHA_ENGINE_SETTINGS_H

#include "load/spec.h"
#include "mhe.h"

/*
 * The settings of what one layer computes (heads, kv-heads, scale, causal,
 * window, sinks, rope, rope-theta, rope-dim, rope-scaling, norm, norm-eps,
 * norm-over, softcap, biases, qk-rope-head-dim, mla-eps), which mha model
 * takes as well.  spec_setting: name set to arg in s (arg NULL for causal
 * alone): 1, 0 when name is not one of them, -1 a usage error (said;
 * hint: the command whose help it points to).
 */
int spec_is_setting(const char *name);
int spec_setting(const char *hint, const char *name, const char *arg, struct problem_spec *s);

/*
 * The inputs: the files a run reads (x, weights, kv, xk, xv, q, k, kt, v,
 * mask, positions, rope-cos, rope-sin, q-norm, k-norm, alibi-slopes, the
 * single weights wq ... bo and latent attention's tensors, config, tokens,
 * kv-tokens, grad-output), how to read them (mask-bool, layout, layer, prefix) and how
 * to compute (alibi, absorb, threads, exact).  As spec_setting.
 */
int spec_input(const char *hint, const char *name, const char *arg, struct problem_spec *s);

/* Of every name above, the one name is most likely a typo of, or NULL. */
const char *spec_closest(const char *name);

/* the input name stands for ("q-b-proj": "wq"), or name itself */
const char *spec_canonical(const char *name);

/* every name spec_setting and spec_input take, with its kind, into
 * out[at..cap) (mhe_settings): the count up to the last, at included */
size_t spec_settings_list(mhe_setting *out, size_t cap, size_t at);

#endif

/*
 * rope_params.h: transformers 5's rope_parameters (rope_params.c), read
 * as transformers 5 reads it and put back into the keys transformers 4
 * wrote (rope_theta, rope_scaling, partial_rotary_factor; Gemma 3's
 * rope_local_base_freq, ModernBERT's global_rope_theta and
 * local_rope_theta), which config.c gives their meaning, once.
 */
#ifndef MHA_ENGINE_ROPE_PARAMS_H
#define MHA_ENGINE_ROPE_PARAMS_H

#include <cjson/cJSON.h>

#include "load/spec.h"

/*
 * attn's rope_parameters (config.json's attention object, a copy the
 * caller owns), when it has one: one dict for every layer ({"rope_type",
 * "rope_theta", the scaling's keys, "partial_rotary_factor"}), or one per
 * layer type ({"full_attention": {...}, "sliding_attention": {...}}) for
 * the types whose layers turn by their kind (Gemma 3, ModernBERT).  Its
 * values replace it in attn under the older keys; an older key attn also
 * gives must say the same, or the run stops naming both.  A key, a layer
 * type or a rope_type mha does not read is refused by name.  version is
 * the transformers that saved the file (4, 5, 0 unsaid).  0, or -1 said
 * (path names the file).
 */
int config_rope_parameters(struct problem_spec *s, cJSON *attn, int version, const char *path);

#endif

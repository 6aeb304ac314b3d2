/*
 * layers.h: what config.json says of the one layer a run takes (s->layer),
 * by the model type's rule (families.h's enum slide_rule): each 0 or 1 as
 * said, or -1 said (a layer-dependent setting without --layer among them).
 */
#ifndef MHA_ENGINE_LAYERS_H
#define MHA_ENGINE_LAYERS_H

#include <cjson/cJSON.h>

#include "load/spec.h"

/* the layer slides its window (Mistral, Qwen2, Gemma 2, SmolLM3, gpt-oss) */
int layers_sliding(const cJSON *root, const char *path, const struct problem_spec *s);
/* the layer turns by position (SmolLM3's no_rope_layers) */
int layers_turns(const cJSON *root, const char *path, const struct problem_spec *s);
/* Gemma 3's and ModernBERT's local or global layer: its rotary base,
 * rope_scaling and window set in s->cfg, under the options given; 0 or -1 */
int layers_local_global(struct problem_spec *s, const cJSON *root, const char *path);
/* Cohere 2's: a local layer slides and turns, a global one does neither */
int layers_rope_local(struct problem_spec *s, const cJSON *root, const char *path);

#endif

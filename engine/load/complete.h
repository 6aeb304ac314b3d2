/*
 * complete.h: config.json's attention keys as transformers completes them
 * before the model sees them (complete.c): each key the model type's
 * attention reads that the file leaves out takes its configuration class's
 * default (families.c's table), never one of mha's own.
 */
#ifndef MHA_ENGINE_COMPLETE_H
#define MHA_ENGINE_COMPLETE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "load/spec.h"

/*
 * attn (config.json's object of the attention's keys: its root, or an
 * image-text model's text_config) with every key s->mtype reads and attn
 * leaves out (nor gives under another spelling) set to the class's
 * default, as a new object the caller cJSON_Deletes; each key so set is
 * noted in s->keys_defaulted.  root is the whole file, whose
 * transformers_version picks between the defaults of transformers 4 and 5
 * where they differ (none said: refused, naming the key).  NULL, said
 * (path names the file), on a refusal or no memory.
 */
cJSON *config_complete(struct problem_spec *s, const cJSON *attn, const cJSON *root,
		       const char *path);

/* what a message says after key's value: " (left out: model_type T's
 * default)" when config_complete gave it, into buf; else "" */
const char *config_default_note(const struct problem_spec *s, const char *key, char *buf,
				size_t size);

#endif

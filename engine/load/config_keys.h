/*
 * config_keys.h: config.json's values read by type, for config.c and
 * layers.c.  Each takes the object (root), the file's name for messages
 * (path) and the key; each returns 1 and sets *out when the key is there,
 * 0 when it is absent or null, -1 said (the file and the key named) when
 * it is of another type.
 */
#ifndef MHA_ENGINE_CONFIG_KEYS_H
#define MHA_ENGINE_CONFIG_KEYS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "load/spec.h"

/* "PATH: "KEY" is not WANT": -1 */
int config_bad_type(const char *path, const char *key, const char *want);
/* a whole number from 1 */
int config_count(const cJSON *root, const char *path, const char *key, size_t *out);
/* a finite number above 0 */
int config_number(const cJSON *root, const char *path, const char *key, double *out);
/* true or false */
int config_bool(const cJSON *root, const char *path, const char *key, int *out);
int config_string(const cJSON *root, const char *path, const char *key, const char **out);
/* the first of two spellings there (hidden_size, n_embd) */
int config_count2(const cJSON *root, const char *path, const char *a, const char *b,
		  size_t *out);
/* key a or its older name b, refused when both are there and differ */
int config_number2(const cJSON *root, const char *path, const char *a, const char *b,
		   double *out);
/* key's list entry for the layer the run takes (s->layer; --layer needed):
 * a whole number from 0 */
int config_layer_entry(const cJSON *root, const char *path, const char *key,
		       const struct problem_spec *s, size_t *out);

#endif

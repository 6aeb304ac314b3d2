/*
 * config_keys.c: config.json's values by type (config_keys.h), each refusal
 * naming the file and the key.
 */
#include "load/config_keys.h"
#include "util/msg.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int config_bad_type(const char *path, const char *key, const char *want)
{
	const char *was = msg_key(key);
	const int rc = error("%s: \"%s\" is not %s", path, key, want);

	msg_key(was);
	return rc;
}

/* key as a whole number from 1: 1 and *out, 0 absent or null, -1 said */
int config_count(const cJSON *root, const char *path, const char *key, size_t *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1) || e->valuedouble != floor(e->valuedouble))
		return config_bad_type(path, key, "a whole number from 1");
	if (e->valuedouble > 1e15)
		return error("%s: \"%s\" is %g, more than any model has", path, key, e->valuedouble);
	*out = (size_t)e->valuedouble;
	return 1;
}

int config_number(const cJSON *root, const char *path, const char *key, double *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || !(e->valuedouble > 0))
		return config_bad_type(path, key, "a number above 0");
	*out = e->valuedouble;
	return 1;
}

int config_bool(const cJSON *root, const char *path, const char *key, int *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsBool(e))
		return config_bad_type(path, key, "true or false");
	*out = cJSON_IsTrue(e);
	return 1;
}

int config_string(const cJSON *root, const char *path, const char *key, const char **out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsString(e))
		return config_bad_type(path, key, "a string");
	*out = e->valuestring;
	return 1;
}

/* the first of two spellings present (hidden_size, n_embd) */
int config_count2(const cJSON *root, const char *path, const char *a, const char *b,
			 size_t *out)
{
	const int rc = config_count(root, path, a, out);

	return rc ? rc : config_count(root, path, b, out);
}

/* key a, or its older name b (GPT-NeoX's rotary_pct for partial_rotary_factor):
 * 1 and *out, 0 absent, -1 said (both there and different) */
int config_number2(const cJSON *root, const char *path, const char *a, const char *b,
			  double *out)
{
	double va = 0, vb = 0;
	const int ra = config_number(root, path, a, &va), rb = config_number(root, path, b, &vb);

	if (ra < 0 || rb < 0)
		return -1;
	if (ra && rb && va != vb)
		return error("%s: \"%s\" is %g but \"%s\" %g: transformers' versions read one or the "
			     "other", path, a, va, b, vb);
	if (ra || rb)
		*out = ra ? va : vb;
	return ra || rb;
}

/* key of root as a list entry for the layer the run takes: a whole number
 * from 0 into *out; 1, 0 absent, -1 said */
int config_layer_entry(const cJSON *root, const char *path, const char *key,
			      const struct problem_spec *s, size_t *out)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, key), *e;

	if (!list || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list))
		return config_bad_type(path, key, "a list");
	if (!s->has_layer)
		return error("%s: %s differs by layer: give --layer", path, key);
	e = cJSON_GetArrayItem(list, (int)(s->layer < 1000000 ? s->layer : 1000000));
	if (!e)
		return error("%s: %s has no entry for layer %zu", path, key, s->layer);
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || e->valuedouble > 1e15 ||
	    e->valuedouble != floor(e->valuedouble))
		return error("%s: %s[%zu] is not a whole number from 0", path, key, s->layer);
	*out = (size_t)e->valuedouble;
	return 1;
}


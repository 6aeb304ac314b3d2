/*
 * complete.c: config.json completed with its configuration class's
 * defaults (complete.h), as transformers' PretrainedConfig fills a key a
 * file leaves out from the class's __init__ before the model reads it.
 * What each key then means is config.c's.
 */
#include "load/complete.h"
#include "load/families.h"
#include "load/rope_params.h"
#include "util/msg.h"

#include <stdio.h>
#include <string.h>

/* the major version of transformers that saved the file: 4, 5, or 0 unsaid */
static int saved_by(const cJSON *root)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "transformers_version");

	if (!cJSON_IsString(v))
		return 0;
	return !strncmp(v->valuestring, "4.", 2) ? 4 : !strncmp(v->valuestring, "5.", 2) ? 5 : 0;
}

/* "name=json" appended to s->keys_defaulted when it fits (it is for show) */
static void note(struct problem_spec *s, const char *name, const char *json)
{
	char *list = s->keys_defaulted;
	size_t at = 0;
	int n;

	while (list[at])
		at += strlen(list + at) + 1;
	n = snprintf(list + at, sizeof(s->keys_defaulted) - at, "%s=%s", name, json);
	if (n < 0 || (size_t)n + 2 > sizeof(s->keys_defaulted) - at)
		list[at] = '\0';
	else
		list[at + (size_t)n + 1] = '\0';
}

cJSON *config_complete(struct problem_spec *s, const cJSON *attn, const cJSON *root,
		       const char *path)
{
	const struct model_type *t = s->mtype;
	cJSON *out = cJSON_Duplicate(attn, 1);

	memset(s->keys_defaulted, 0, 2);
	if (!out) {
		error("out of memory");
		return NULL;
	}
	/* transformers 5's rope_parameters, as the keys below */
	if (config_rope_parameters(s, out, saved_by(root), path)) {
		cJSON_Delete(out);
		return NULL;
	}
	/* a model_type mha does not read: no class of its own is known, nothing
	 * is filled (--layout's family's class is another's) */
	for (const struct config_key *k = s->type_said[0] ? NULL : t->keys; k && k->name; k++) {
		const char *alias = config_key_alias(k->name), *json = k->dflt;
		cJSON *value;

		if (json && !strcmp(json, "?")) {
			/* the class keeps None, and its attention cannot run with it */
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(out, k->name);

			if (v && !cJSON_IsNull(v))
				continue;
			cJSON_Delete(out);
			error("%s: %s \"%s\": model_type \"%s\"'s configuration class keeps it "
			      "null, and its attention cannot run so (transformers stops there): give "
			      "\"%s\"", path, v ? "null" : "no", k->name, t->type, k->name);
			return NULL;
		}
		if (!json || cJSON_GetObjectItemCaseSensitive(out, k->name) ||
		    (alias && cJSON_GetObjectItemCaseSensitive(out, alias)))
			continue; /* said, or the class has no default of its own */
		if (!strcmp(json, "!")) {
			cJSON_Delete(out);
			error("%s: no \"%s\": model_type \"%s\"'s configuration class ships with its "
			      "checkpoint, and mha does not know its default: give \"%s\"", path,
			      k->name, t->type, k->name);
			return NULL;
		}
		if (k->v5 && strcmp(k->v5, k->dflt)) {
			const int v = saved_by(root);

			if (!v) {
				cJSON_Delete(out);
				error("%s: no \"%s\": model_type \"%s\"'s configuration class gives it "
				      "%s in transformers 4 but %s in transformers 5, and no "
				      "transformers_version says which saved the file: give \"%s\"",
				      path, k->name, t->type, k->dflt, k->v5, k->name);
				return NULL;
			}
			if (v == 5)
				json = k->v5;
		}
		if (!strcmp(json, "null"))
			continue; /* None: left out and derived, as the class does */
		value = cJSON_Parse(json);
		if (!value || !cJSON_AddItemToObject(out, k->name, value)) {
			cJSON_Delete(value);
			cJSON_Delete(out);
			error("out of memory");
			return NULL;
		}
		note(s, k->name, json);
	}
	return out;
}

const char *config_default_note(const struct problem_spec *s, const char *key, char *buf,
				size_t size)
{
	const size_t n = strlen(key);

	buf[0] = '\0';
	for (const char *e = s->keys_defaulted; *e; e += strlen(e) + 1)
		if (!strncmp(e, key, n) && e[n] == '=')
			snprintf(buf, size, " (left out: model_type %s's default)",
				 s->mtype ? s->mtype->type : "?");
	return buf;
}

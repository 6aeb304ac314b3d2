/*
 * rope_scaling.c: rope_scaling read as transformers reads it
 * (modeling_rope_utils.py), into mha_rope_scaling (rope_scaling.h).
 */
#include "load/rope_scaling.h"
#include "load/complete.h"
#include "util/msg.h"
#include "read/file.h"
#include "read/json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* each type's keys: every other is refused, for mha cannot know what it does */
static const struct {
	const char *type;
	mha_rope_scaling_type t;
	const char *keys[10];
} types[] = {
	{ "linear", MHA_ROPE_SCALING_LINEAR, { "factor" } },
	{ "dynamic", MHA_ROPE_SCALING_DYNAMIC, { "factor", "original_max_position_embeddings" } },
	{ "llama3", MHA_ROPE_SCALING_LLAMA3, { "factor", "low_freq_factor", "high_freq_factor",
					       "original_max_position_embeddings" } },
	{ "yarn", MHA_ROPE_SCALING_YARN, { "factor", "original_max_position_embeddings",
					   "attention_factor", "beta_fast", "beta_slow", "mscale",
					   "mscale_all_dim", "truncate" } },
	{ "longrope", MHA_ROPE_SCALING_LONGROPE, { "short_factor", "long_factor", "factor",
						   "attention_factor",
						   "original_max_position_embeddings" } },
};

/* key of sc: 1 and *v a finite number (above 0 where positive), 0 absent
 * or null, -1 said */
static int number(const cJSON *sc, const char *path, const char *what, const char *type,
		  const char *key, int positive, double *v)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(sc, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) ||
	    (positive ? !(e->valuedouble > 0) : e->valuedouble < 0))
		return error("%s: %s (\"%s\"): \"%s\" is not a number %s", path, what, type, key,
			     positive ? "above 0" : "from 0");
	*v = e->valuedouble;
	return 1;
}

static int required(const cJSON *sc, const char *path, const char *what, const char *type,
		    const char *key, double *v)
{
	const int rc = number(sc, path, what, type, key, 1, v);

	if (rc == 0)
		return error("%s: %s (\"%s\") needs \"%s\"", path, what, type, key);
	return rc < 0 ? -1 : 0;
}

/* LongRoPE's short_factor or long_factor into out (at most 256) */
static int factors(const cJSON *sc, const char *path, const char *what, const char *key,
		   double *out, size_t *n)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(sc, key), *e;
	size_t i = 0;

	if (!list || !cJSON_IsArray(list))
		return error("%s: %s (\"longrope\") needs \"%s\", a list of numbers", path, what,
			     key);
	cJSON_ArrayForEach(e, list) {
		if (i == 256)
			return error("%s: %s's %s has more than 256 entries, more than mha "
				     "reads (a head of 512 features)", path, what, key);
		if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || !(e->valuedouble > 0))
			return error("%s: %s's %s[%zu] is not a number above 0", path, what, key,
				     i);
		out[i++] = e->valuedouble;
	}
	if (*n != SIZE_MAX && i != *n)
		return error("%s: %s's short_factor has %zu entries but long_factor %zu",
			     path, what, *n, i);
	*n = i;
	return 0;
}

int rope_scaling_read(struct problem_spec *s, const cJSON *sc, const char *path, double max_pos,
		      double orig_top)
{
	mha_rope_scaling *c = &s->cfg.rope.scaling;
	/* the key the file gave it under: rope_parameters (rope_params.c) */
	const char *const what = s->rope_from[0] ? s->rope_from : "rope_scaling";
	const int v5 = s->rope_from[0] != '\0';
	const char *type = NULL;
	const cJSON *e, *k;
	double orig = 0;
	size_t i, n = SIZE_MAX;
	int has_orig;

	if (!cJSON_IsObject(sc))
		return error("%s: %s is not an object", path, what);
	k = cJSON_GetObjectItemCaseSensitive(sc, "rope_type");
	if (!k || cJSON_IsNull(k))
		k = cJSON_GetObjectItemCaseSensitive(sc, "type");
	if (!k || !cJSON_IsString(k))
		return error("%s: %s has no \"rope_type\" (or \"type\") string", path, what);
	type = k->valuestring;
	if (!strcmp(type, "default")) {
		memset(c, 0, sizeof(*c));
		return 0;
	}
	for (i = 0; i < sizeof(types) / sizeof(types[0]) && strcmp(types[i].type, type); i++)
		;
	if (i == sizeof(types) / sizeof(types[0]))
		return error("%s: %s's type \"%.40s\" is not one mha computes (default, "
			     "linear, dynamic, llama3, yarn, longrope)", path, what, type);
	cJSON_ArrayForEach(e, sc) {
		size_t j;

		if (!strcmp(e->string, "rope_type") || !strcmp(e->string, "type"))
			continue;
		for (j = 0; j < 10 && types[i].keys[j] && strcmp(types[i].keys[j], e->string); j++)
			;
		if (j == 10 || !types[i].keys[j])
			return error("%s: %s (\"%s\"): \"%.60s\" is a key mha does not know "
				     "for it, so the run stops rather than guess", path, what, type,
				     e->string);
	}
	memset(c, 0, sizeof(*c));
	c->type = types[i].t;
	if ((has_orig = number(sc, path, what, type, "original_max_position_embeddings", 1, &orig)) < 0)
		return -1;
	switch (c->type) {
	case MHA_ROPE_SCALING_LINEAR:
		return required(sc, path, what, type, "factor", &c->factor);
	case MHA_ROPE_SCALING_DYNAMIC:
		/* the base grows past config.json's max_position_embeddings */
		if (required(sc, path, what, type, "factor", &c->factor))
			return -1;
		if (has_orig && max_pos && orig != max_pos)
			return error("%s: %s (\"dynamic\"): original_max_position_embeddings "
				     "%g but max_position_embeddings %g: transformers' versions read "
				     "one or the other", path, what, orig, max_pos);
		c->original_max = has_orig ? orig : max_pos;
		break;
	case MHA_ROPE_SCALING_LLAMA3:
		if (required(sc, path, what, type, "factor", &c->factor) ||
		    required(sc, path, what, type, "low_freq_factor", &c->low_freq_factor) ||
		    required(sc, path, what, type, "high_freq_factor", &c->high_freq_factor) ||
		    required(sc, path, what, type, "original_max_position_embeddings", &c->original_max))
			return -1;
		if (c->low_freq_factor == c->high_freq_factor)
			return error("%s: %s (\"llama3\"): low_freq_factor and "
				     "high_freq_factor are equal", path, what);
		return 0;
	case MHA_ROPE_SCALING_YARN:
		if (required(sc, path, what, type, "factor", &c->factor) ||
		    number(sc, path, what, type, "attention_factor", 1, &c->attention_factor) < 0 ||
		    number(sc, path, what, type, "beta_fast", 1, &c->beta_fast) < 0 ||
		    number(sc, path, what, type, "beta_slow", 1, &c->beta_slow) < 0 ||
		    number(sc, path, what, type, "mscale", 1, &c->mscale) < 0 ||
		    number(sc, path, what, type, "mscale_all_dim", 1, &c->mscale_all_dim) < 0)
			return -1;
		k = cJSON_GetObjectItemCaseSensitive(sc, "truncate");
		if (k && !cJSON_IsNull(k) && !cJSON_IsBool(k))
			return error("%s: %s (\"yarn\"): \"truncate\" is not true or false",
				     path, what);
		c->no_truncate = k && cJSON_IsFalse(k);
		/* with original_max_position_embeddings, transformers 4 takes the
		 * factor as max_position_embeddings over it; 5 (rope_parameters)
		 * takes the factor said */
		if (!v5 && has_orig && max_pos && max_pos / orig != c->factor) {
			char note[96];

			return error("%s: %s (\"yarn\"): factor %g but max_position_embeddings"
				     "%s / original_max_position_embeddings is %g: transformers' "
				     "versions read one or the other", path, what, c->factor,
				     config_default_note(s, "max_position_embeddings", note,
							 sizeof(note)), max_pos / orig);
		}
		c->original_max = has_orig ? orig : max_pos;
		break;
	case MHA_ROPE_SCALING_LONGROPE:
		if (factors(sc, path, what, "short_factor", s->rope_factors[0], &n) ||
		    factors(sc, path, what, "long_factor", s->rope_factors[1], &n) ||
		    number(sc, path, what, type, "factor", 1, &c->factor) < 0 ||
		    number(sc, path, what, type, "attention_factor", 1, &c->attention_factor) < 0)
			return -1;
		s->n_rope_factors = n;
		c->short_factor = s->rope_factors[0];
		c->long_factor = s->rope_factors[1];
		/* Phi-3: the top level's original_max_position_embeddings, which
		 * transformers takes over the object's */
		if (orig_top) {
			orig = orig_top;
			has_orig = 1;
		}
		/* the factor max_position_embeddings over it: transformers 4's
		 * always, 5's when rope_parameters says none */
		if (has_orig && max_pos && !(v5 && c->factor))
			c->factor = max_pos / orig;
		c->original_max = has_orig ? orig : max_pos;
		break;
	default:
		break;
	}
	if (!c->original_max)
		return error("%s: %s (\"%s\") needs original_max_position_embeddings, or "
			     "config.json's max_position_embeddings", path, what, type);
	return 0;
}

const char *rope_scaling_name(mha_rope_scaling_type t)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].t == t)
			return types[i].type;
	return "";
}

int rope_scaling_option(struct problem_spec *s, double max_pos)
{
	const char *j = s->rope_scaling;
	input_file f;
	json_doc doc = { 0 };
	int rc;

	s->rope_from[0] = '\0'; /* its own object's, not config.json's */

	if (strchr("{[\"", j[strspn(j, " \t\r\n")]) && j[strspn(j, " \t\r\n")]) {
		/* the object itself, as config.json holds it */
		memset(&f, 0, sizeof(f));
		f.name = (char *)"--rope-scaling";
		f.data = (unsigned char *)(void *)(char *)j;
		f.len = strlen(j);
		f.fd = -1;
		rc = json_parse(&doc, &f) || rope_scaling_read(s, doc.root, "--rope-scaling", max_pos, 0);
		json_doc_free(&doc);
		return rc ? -1 : 0;
	}
	if (input_load(&f, j)) {
		input_free(&f);
		return -1;
	}
	rc = json_parse(&doc, &f) || rope_scaling_read(s, doc.root, f.name, max_pos, 0);
	json_doc_free(&doc);
	input_free(&f);
	return rc ? -1 : 0;
}

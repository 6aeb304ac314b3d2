/*
 * rope_params.c: transformers 5's rope_parameters put back into the keys
 * transformers 4 wrote (rope_params.h), as transformers 5's
 * RotaryEmbeddingConfigMixin reads them: rope_type from "rope_type", else
 * the older "type", else "default"; rope_theta inside the dict, else the
 * one beside it, else the class's; partial_rotary_factor in either place.
 */
#include "load/rope_params.h"
#include "load/families.h"
#include "util/msg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the keys of one dict that are not its scaling's */
static int own_key(const char *k)
{
	return !strcmp(k, "rope_theta") || !strcmp(k, "partial_rotary_factor");
}

/* a and b the same JSON value (numbers by value: 1e6 and 1000000.0 agree) */
static int same(const cJSON *a, const cJSON *b)
{
	const cJSON *x, *y;
	size_t n = 0;

	if (cJSON_IsNumber(a) || cJSON_IsNumber(b))
		return cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble;
	if (cJSON_IsString(a) || cJSON_IsString(b))
		return cJSON_IsString(a) && cJSON_IsString(b) && !strcmp(a->valuestring, b->valuestring);
	if ((a->type & 0xff) != (b->type & 0xff))
		return 0;
	if (cJSON_IsArray(a)) {
		for (x = a->child, y = b->child; x && y; x = x->next, y = y->next)
			if (!same(x, y))
				return 0;
		return !x && !y;
	}
	if (cJSON_IsObject(a)) {
		cJSON_ArrayForEach(x, a) {
			y = cJSON_GetObjectItemCaseSensitive(b, x->string);
			if (!y || !same(x, y))
				return 0;
			n++;
		}
		return (size_t)cJSON_GetArraySize(b) == n;
	}
	return 1; /* true, false, null */
}

/* v as JSON for a message, at most 60 characters of it */
static const char *shown(const cJSON *v, char *buf, size_t size)
{
	char *j = cJSON_PrintUnformatted(v);

	snprintf(buf, size, "%.60s%s", j ? j : "?", j && strlen(j) > 60 ? "..." : "");
	cJSON_free(j);
	return buf;
}

/*
 * key set to value (taken: freed on failure) in attn, where from (a
 * rope_parameters entry, for messages) said it; an older key attn gives
 * (or its older spelling, alias) must say the same.  A null older key is
 * not said, as transformers takes it.  0, or -1 said.
 */
static int put(cJSON *attn, const char *key, const char *alias, cJSON *value, const char *from,
	       const char *path)
{
	const cJSON *old = cJSON_GetObjectItemCaseSensitive(attn, key);
	const char *said = key;
	char a[80], b[80];

	if ((!old || cJSON_IsNull(old)) && alias) {
		old = cJSON_GetObjectItemCaseSensitive(attn, alias);
		said = alias;
	}
	if (!value) {
		error("out of memory");
		return -1;
	}
	if (old && !cJSON_IsNull(old) && !same(old, value)) {
		error("%s: %s is %s but %s is %s: transformers 5 reads the first, 4 the second; "
		      "give one", path, from, shown(value, a, sizeof(a)), said,
		      shown(old, b, sizeof(b)));
		cJSON_Delete(value);
		return -1;
	}
	if (cJSON_GetObjectItemCaseSensitive(attn, key))
		cJSON_ReplaceItemInObjectCaseSensitive(attn, key, value);
	else
		cJSON_AddItemToObject(attn, key, value);
	return 0;
}

/* one dict's rope_type ("default" when it says none); NULL said */
static const char *dict_type(const cJSON *d, const char *from, const char *path)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(d, "rope_type");

	if (!k || cJSON_IsNull(k))
		k = cJSON_GetObjectItemCaseSensitive(d, "type");
	if (!k || cJSON_IsNull(k))
		return "default";
	if (!cJSON_IsString(k)) {
		error("%s: %s's rope_type is not a string", path, from);
		return NULL;
	}
	return k->valuestring;
}

/*
 * One dict (from: "rope_parameters", "rope_parameters.full_attention")
 * into attn: its rope_theta under theta_key, its scaling (the dict less
 * its own keys) as rope_scaling when scaling is set (a layer kind that
 * takes none: a type other than "default" refused), its
 * partial_rotary_factor when partial is set.  0, or -1 said.
 */
static int one_dict(struct problem_spec *s, cJSON *attn, const cJSON *d, const char *from,
		    const char *theta_key, int scaling, int partial, int version, const char *path)
{
	const struct model_type *t = s->mtype;
	const cJSON *e;
	const char *type;

	if (!cJSON_IsObject(d))
		return error("%s: %s is not an object (rope_type, rope_theta and the scaling's keys)",
			     path, from);
	if (!(type = dict_type(d, from, path)))
		return -1;
	cJSON_ArrayForEach(e, d) {
		if (!strcmp(e->string, "rope_theta") &&
		    !(cJSON_IsNumber(e) && isfinite(e->valuedouble) && e->valuedouble > 0))
			return error("%s: %s's rope_theta is not a number above 0", path, from);
		if (!strcmp(e->string, "partial_rotary_factor") &&
		    !(cJSON_IsNumber(e) && e->valuedouble > 0 && e->valuedouble <= 1))
			return error("%s: %s's partial_rotary_factor is not a number above 0, to 1",
				     path, from);
		if (!strcmp(e->string, "partial_rotary_factor") && !partial)
			return error("%s: %s's partial_rotary_factor: model_type %s's layers of this "
				     "kind turn whole heads in mha, so the run stops rather than "
				     "guess", path, from, t->type);
		/* "default" carries nothing else: a key it has is one mha cannot place */
		if (!strcmp(type, "default") && !own_key(e->string) &&
		    strcmp(e->string, "rope_type") && strcmp(e->string, "type"))
			return error("%s: %s (\"default\"): \"%.60s\" is a key mha does not know for "
				     "it, so the run stops rather than guess", path, from, e->string);
	}
	if (strcmp(type, "default") && !scaling)
		return error("%s: %s's rope_type \"%.40s\": model_type %s's layers of this kind are "
			     "not scaled in mha, so the run stops rather than guess", path, from, type,
			     t->type);
	if ((e = cJSON_GetObjectItemCaseSensitive(d, "rope_theta")) &&
	    put(attn, theta_key, config_key_alias(theta_key), cJSON_Duplicate(e, 1), from, path))
		return -1;
	if ((e = cJSON_GetObjectItemCaseSensitive(d, "partial_rotary_factor"))) {
		const struct config_key *k = model_type_key(t, "partial_rotary_factor");

		/* transformers 5's own rope for a class without the key turns the whole
		 * head with some rope types and a part with others */
		if (version == 5 && (!k || !k->dflt) && e->valuedouble != 1 &&
		    !model_type_key(t, "rotary_pct"))
			return error("%s: %s's partial_rotary_factor %g: model_type %s's "
				     "configuration class has no such key, and transformers 5 turns "
				     "part of the head with some rope types only, so the run stops "
				     "rather than guess", path, from, e->valuedouble, t->type);
		if (put(attn, "partial_rotary_factor", "rotary_pct", cJSON_Duplicate(e, 1), from, path))
			return -1;
	}
	if (scaling) {
		cJSON *sc;

		if (!strcmp(type, "default")) {
			sc = cJSON_CreateNull();
		} else {
			sc = cJSON_Duplicate(d, 1);
			if (sc) {
				cJSON_DeleteItemFromObjectCaseSensitive(sc, "rope_theta");
				cJSON_DeleteItemFromObjectCaseSensitive(sc, "partial_rotary_factor");
			}
		}
		/* the old key said nothing, or the same */
		if (sc && cJSON_IsNull(sc)) {
			const cJSON *old = cJSON_GetObjectItemCaseSensitive(attn, "rope_scaling");
			char b[80];

			if (old && !cJSON_IsNull(old)) {
				cJSON_Delete(sc);
				return error("%s: %s's rope_type is \"default\" but rope_scaling is %s: "
					     "transformers 5 reads the first, 4 the second; give one",
					     path, from, shown(old, b, sizeof(b)));
			}
		}
		if (put(attn, "rope_scaling", NULL, sc, from, path))
			return -1;
		snprintf(s->rope_from, sizeof(s->rope_from), "%s", from);
	}
	return 0;
}

/* name is a layer type: layer_types lists it, or it is named as
 * transformers' models name theirs ("full_attention", "chunked_attention") */
static int layer_kind(const cJSON *attn, const char *name)
{
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(attn, "layer_types"), *e;
	const size_t n = strlen(name);

	if (n > 10 && !strcmp(name + n - 10, "_attention"))
		return 1;
	if (!cJSON_IsArray(lt))
		return 0;
	cJSON_ArrayForEach(e, lt)
		if (cJSON_IsString(e) && !strcmp(e->valuestring, name))
			return 1;
	return 0;
}

int config_rope_parameters(struct problem_spec *s, cJSON *attn, int version, const char *path)
{
	const struct model_type *t = s->mtype;
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(attn, "rope_parameters"), *e;
	/* the types whose layers turn by their kind: the keys each kind's base goes to */
	const int gemma = t->slide == SLIDE_PATTERN, modernbert = t->slide == SLIDE_EVERY_N;
	int nested = 1, rc = 0;

	s->rope_from[0] = '\0';
	if (!rp || cJSON_IsNull(rp))
		return 0;
	if (!cJSON_IsObject(rp) || !rp->child)
		return error("%s: rope_parameters is not an object of rope_type, rope_theta and the "
			     "scaling's keys (or one such object per layer type)", path);
	cJSON_ArrayForEach(e, rp)
		nested &= layer_kind(attn, e->string);
	if (!nested && (gemma || modernbert))
		return error("%s: rope_parameters: model_type %s's layers turn by their kind: "
			     "give one object per layer type (full_attention, sliding_attention)",
			     path, t->type);
	if (!nested) {
		rc = one_dict(s, attn, rp, "rope_parameters", "rope_theta", 1, 1, version, path);
	} else {
		if (!gemma && !modernbert)
			return error("%s: rope_parameters has one object per layer type, but model_type "
				     "%s's layers all turn alike: give one object", path, t->type);
		cJSON_ArrayForEach(e, rp) {
			const int full = !strcmp(e->string, "full_attention");
			char from[96];

			if (!full && strcmp(e->string, "sliding_attention"))
				return error("%s: rope_parameters.%.40s: model_type %s's layers are "
					     "full_attention or sliding_attention, so the run stops "
					     "rather than guess", path, e->string, t->type);
			snprintf(from, sizeof(from), "rope_parameters.%s", e->string);
			if (one_dict(s, attn, e, from, gemma ? (full ? "rope_theta" :
				     "rope_local_base_freq") : full ? "global_rope_theta" :
				     "local_rope_theta", gemma && full, 0, version, path))
				return -1;
		}
	}
	if (!rc)
		cJSON_DeleteItemFromObjectCaseSensitive(attn, "rope_parameters");
	return rc;
}

/*
 * layers.c: what config.json says of one layer (layers.h): whether it
 * slides its window, turns by position, and which rotary base and window a
 * local or a global layer takes, by the model type's rule (families.h).
 */
#include "load/layers.h"
#include "load/config_keys.h"
#include "load/families.h"
#include "load/rope_scaling.h"
#include "util/msg.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

/* layer_types' entry for the layer the run takes: 1 sliding, 0 not, -1 said */
static int layer_type(const cJSON *types, const char *path, const struct problem_spec *s)
{
	const cJSON *t;

	if (!cJSON_IsArray(types))
		return config_bad_type(path, "layer_types", "a list of strings");
	if (!s->has_layer)
		return error("%s: layer_types differ by layer: give --layer", path);
	t = cJSON_GetArrayItem(types, (int)(s->layer < 1000000 ? s->layer : 1000000));
	if (!t)
		return error("%s: layer_types has no entry for layer %zu", path, s->layer);
	if (!cJSON_IsString(t))
		return config_bad_type(path, "layer_types", "a list of strings");
	if (!strcmp(t->valuestring, "sliding_attention"))
		return 1;
	if (!strcmp(t->valuestring, "full_attention"))
		return 0;
	return error("%s: layer_types[%zu] is \"%.40s\", expected \"sliding_attention\" or "
		     "\"full_attention\"", path, s->layer, t->valuestring);
}

/*
 * Whether the layer the run takes slides its window, by the type's rule
 * (families.h): Mistral every layer; Qwen2 use_sliding_window, and layers
 * from max_window_layers, or layer_types; Gemma 2 layer_types, else the
 * even layers; SmolLM3 use_sliding_window and layer_types.  1, 0, or -1 said.
 */
int layers_sliding(const cJSON *root, const char *path, const struct problem_spec *s)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	const enum slide_rule rule = s->mtype->slide;
	size_t from = 0;
	int use = rule != SLIDE_TYPES, rc;

	if (rule == SLIDE_ALL)
		return 1;
	if (rule == SLIDE_BY_TYPES && (!types || cJSON_IsNull(types)))
		return error("%s: sliding_window without layer_types: which layers slide is not "
			     "said", path);
	if (rule == SLIDE_QWEN || rule == SLIDE_TYPES) {
		if (config_bool(root, path, "use_sliding_window", &use) < 0)
			return -1;
		if (!use)
			return 0;
	}
	if (types && !cJSON_IsNull(types))
		return layer_type(types, path, s);
	if (rule == SLIDE_EVEN) {
		if (!s->has_layer)
			return error("%s: %s slides its window on every other layer: give --layer",
				     path, s->mtype->type);
		return s->layer % 2 == 0;
	}
	if (rule == SLIDE_TYPES)
		return error("%s: use_sliding_window without layer_types: which layers slide is not "
			     "said; give --window, or leave it out with --window none", path);
	/* Qwen2: layers from max_window_layers (all without it) */
	if ((rc = config_count(root, path, "max_window_layers", &from)) < 0)
		return -1;
	if (rc && (!s->has_layer || s->layer < from))
		return s->has_layer ? 0 : error("%s: layers from max_window_layers slide their "
						"window: give --layer", path);
	return 1;
}

/* key's value, which config.c has filled from the type's class when the
 * file left it out: absent only in a file whose class is not known (or is
 * null), and then refused rather than given a value of mha's.  1, or -1 said. */
static int needed(int rc, const char *path, const char *key, const struct problem_spec *s)
{
	if (rc < 0)
		return -1;
	if (!rc)
		return error("%s: no \"%s\": model_type %s's layers need it", path, key,
			     s->mtype->type);
	return 1;
}

/*
 * Gemma 3's, Cohere 2's and ModernBERT's local layers (families.h's
 * SLIDE_PATTERN, SLIDE_ROPE_LOCAL and SLIDE_EVERY_N): 1 the layer the run
 * takes is local, 0 global, -1 said.
 */
static int local_layer(const cJSON *root, const char *path, const struct problem_spec *s)
{
	const int gemma = s->mtype->slide != SLIDE_EVERY_N;
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	const char *const key = gemma ? "sliding_window_pattern" : "global_attn_every_n_layers";
	size_t every = 0;

	if (gemma && types && !cJSON_IsNull(types))
		return layer_type(types, path, s);
	if (needed(config_count(root, path, key, &every), path, key, s) < 0)
		return -1;
	if (!s->has_layer)
		return error("%s: %s has a global layer every %zu and local ones between: give "
			     "--layer", path, s->mtype->type, every);
	return gemma ? (s->layer + 1) % every != 0 : s->layer % every != 0;
}

/*
 * A local or a global layer's rotary base, rope_scaling and window: Gemma
 * 3's local layers turn by rope_local_base_freq without rope_scaling and
 * see sliding_window keys up to the query; ModernBERT's local_rope_theta
 * (global_rope_theta when null) and local_attention/2 keys on each side,
 * its global ones global_rope_theta; transformers' defaults where a key is
 * left out.  0, or -1 said.
 */
int layers_local_global(struct problem_spec *s, const cJSON *root, const char *path)
{
	const int gemma = s->mtype->slide == SLIDE_PATTERN;
	const char *const local_key = gemma ? "rope_local_base_freq" : "local_rope_theta";
	const char *const window_key = gemma ? "sliding_window" : "local_attention";
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, local_key);
	const cJSON *wk = cJSON_GetObjectItemCaseSensitive(root, window_key);
	const cJSON *sc = gemma ? cJSON_GetObjectItemCaseSensitive(root, "rope_scaling") : NULL;
	const unsigned g = s->given;
	const char *const global_key = gemma ? "rope_theta" : "global_rope_theta";
	double theta = 0, local_theta = 0, max_pos = 0;
	size_t window = 0;
	int local, bidi = 0, rc;

	if ((local = local_layer(root, path, s)) < 0 ||
	    needed(config_number(root, path, global_key, &theta), path, global_key, s) < 0 ||
	    (rc = config_number(root, path, local_key, &local_theta)) < 0 ||
	    (!(lt && cJSON_IsNull(lt) && !gemma) && needed(rc, path, local_key, s) < 0) ||
	    (rc = config_count(root, path, window_key, &window)) < 0 ||
	    (!(wk && cJSON_IsNull(wk)) && needed(rc, path, window_key, s) < 0) ||
	    (gemma && config_bool(root, path, "use_bidirectional_attention", &bidi) < 0))
		return -1;
	if (bidi)
		return error("%s: use_bidirectional_attention: an encoder's attention (EmbeddingGemma's "
			     "windows on both sides), which mha does not read yet", path);
	if (!gemma && lt && cJSON_IsNull(lt))
		local_theta = theta;
	if (!(g & GIVEN_ROPE_THETA) && !s->rope_cos)
		s->cfg.rope.theta = local ? local_theta : theta;
	/* rope_scaling is the global layers' (Gemma 3's linear 8) */
	if (!local && sc && !cJSON_IsNull(sc) && !(g & GIVEN_ROPE_SCALING) && !s->rope_cos &&
	    (config_number(root, path, "max_position_embeddings", &max_pos) < 0 ||
	     rope_scaling_read(s, sc, path, max_pos, 0)))
		return -1;
	if (local && !(g & GIVEN_WINDOW) && !(wk && cJSON_IsNull(wk))) {
		s->cfg.window.on = 1;
		s->cfg.window.left = (ptrdiff_t)(gemma ? window - 1 : window / 2);
		s->cfg.window.right = gemma ? -1 : (ptrdiff_t)(window / 2);
	}
	return 0;
}

/*
 * Cohere 2 and EXAONE 4: their local layers see sliding_window keys up to
 * the query and turn by position; their global ones do neither.  With
 * sliding_window null, Cohere 2 turns no layer, EXAONE 4 every one (as
 * their modeling code has it).  0, or -1 said.
 */
int layers_rope_local(struct problem_spec *s, const cJSON *root, const char *path)
{
	const cJSON *wk = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
	size_t window = 0;
	int local = local_layer(root, path, s), rc;

	if (local < 0 || (rc = config_count(root, path, "sliding_window", &window)) < 0)
		return -1;
	if (wk && cJSON_IsNull(wk) && s->mtype->slide == SLIDE_NOPE_GLOBAL) {
		/* EXAONE 4 without a window: every layer turns; its class makes
		 * the layers' kinds from a pattern of 0 then, which it cannot */
		const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");

		if (!lt || cJSON_IsNull(lt))
			return error("%s: sliding_window null without layer_types: Exaone4Config "
				     "makes the layers' kinds from sliding_window_pattern 0 then, "
				     "which it cannot (give layer_types)", path);
		return 0;
	}
	if (wk && cJSON_IsNull(wk))
		local = 0;
	else if (needed(rc, path, "sliding_window", s) < 0)
		return -1;
	if (!local && !(s->given & GIVEN_ROPE)) {
		/* no rotation: what config.json set of it goes too */
		s->cfg.rope.mode = MHA_ROPE_NONE;
		if (!(s->given & GIVEN_ROPE_THETA))
			s->cfg.rope.theta = 0;
		if (!(s->given & GIVEN_ROPE_DIM))
			s->cfg.rope.dim = 0;
		memset(&s->cfg.rope.scaling, 0, sizeof(s->cfg.rope.scaling));
	}
	if (local && !(s->given & GIVEN_WINDOW)) {
		s->cfg.window.on = 1;
		s->cfg.window.left = (ptrdiff_t)(window - 1);
		s->cfg.window.right = -1;
	}
	return 0;
}

/* SmolLM3's layers without position encoding: no_rope_layers[layer] 0, or
 * (without the list) every no_rope_layer_interval-th layer.  1 the layer
 * turns, 0 not, -1 said. */
int layers_turns(const cJSON *root, const char *path, const struct problem_spec *s)
{
	size_t use = 1, every = 0;
	int rc = config_layer_entry(root, path, "no_rope_layers", s, &use);

	if (rc)
		return rc < 0 ? -1 : use != 0;
	if (needed(config_count(root, path, "no_rope_layer_interval", &every), path,
		   "no_rope_layer_interval", s) < 0)
		return -1;
	if (!s->has_layer)
		return error("%s: every %zu%s layer has no rotary embedding: give --layer", path,
			     every, every == 2 ? "nd" : every == 3 ? "rd" : "th");
	return (s->layer + 1) % every != 0;
}


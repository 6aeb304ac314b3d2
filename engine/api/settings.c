/*
 * settings.c: what a run reads and what its layer computes, set by name as
 * the program's options spell them ("heads", "rope-theta", "x", "layer"):
 * one parser for every front, so that mha forward's --heads, mha model's
 * and the Python package's heads= take the same values and refuse the
 * same ones in the same words.
 */
#include "api/settings.h"
#include "load/families.h"
#include "load/inputs.h"
#include "api/values.h"
#include "load/weights.h"
#include "run/steps.h"
#include "util/msg.h"
#include "util/opts.h"

#include "mha.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* the settings of what a layer computes, and their names */
enum setting {
	S_NONE = -1, S_HEADS, S_KV_HEADS, S_SCALE, S_CAUSAL, S_WINDOW, S_SINKS, S_ROPE,
	S_ROPE_THETA, S_ROPE_DIM, S_ROPE_SCALING, S_NORM, S_NORM_EPS, S_NORM_OVER, S_SOFTCAP,
	S_QK_ROPE, S_MLA_EPS, S_BIASES, N_SETTINGS
};
static const char *const setting_names[N_SETTINGS] = {
	[S_HEADS] = "heads",
	[S_KV_HEADS] = "kv-heads",
	[S_SCALE] = "scale",
	[S_CAUSAL] = "causal",
	[S_WINDOW] = "window",
	[S_SINKS] = "sinks",
	[S_ROPE] = "rope",
	[S_ROPE_THETA] = "rope-theta",
	[S_ROPE_DIM] = "rope-dim",
	[S_ROPE_SCALING] = "rope-scaling",
	[S_NORM] = "norm",
	[S_NORM_EPS] = "norm-eps",
	[S_NORM_OVER] = "norm-over",
	[S_SOFTCAP] = "softcap",
	[S_QK_ROPE] = "qk-rope-head-dim",
	[S_MLA_EPS] = "mla-eps",
	[S_BIASES] = "biases",
};
/* and what each value is (mhe_settings) */
static const enum mhe_kind setting_kinds[N_SETTINGS] = {
	[S_HEADS] = MHE_COUNT, [S_KV_HEADS] = MHE_COUNT, [S_SCALE] = MHE_NUMBER_OR_WORD,
	[S_CAUSAL] = MHE_FLAG_OR_WORD, [S_WINDOW] = MHE_NUMBER_OR_WORD, [S_SINKS] = MHE_ARRAY,
	[S_ROPE] = MHE_WORD, [S_ROPE_THETA] = MHE_NUMBER, [S_ROPE_DIM] = MHE_COUNT,
	[S_ROPE_SCALING] = MHE_WORD, [S_NORM] = MHE_WORD, [S_NORM_EPS] = MHE_NUMBER,
	[S_NORM_OVER] = MHE_WORD, [S_SOFTCAP] = MHE_NUMBER, [S_QK_ROPE] = MHE_COUNT,
	[S_MLA_EPS] = MHE_NUMBER, [S_BIASES] = MHE_WORD,
};
static enum setting setting_by_name(const char *name)
{
	if (!name)
		return S_NONE;
	for (int i = 0; i < N_SETTINGS; i++)
		if (!strcmp(name, setting_names[i]))
			return (enum setting)i;
	return S_NONE;
}

int spec_is_setting(const char *name)
{
	return setting_by_name(name) != S_NONE;
}

static int setting(const char *hint, const char *name, const char *arg, struct problem_spec *s)
{
	switch (setting_by_name(name)) {
	case S_HEADS:
		s->given |= GIVEN_HEADS;
		if (opt_count(hint, "--heads", arg, SIZE_MAX / 2, &s->heads))
			return -1;
		break;
	case S_KV_HEADS:
		s->given |= GIVEN_KV_HEADS;
		if (opt_count(hint, "--kv-heads", arg, SIZE_MAX / 2, &s->kv_heads))
			return -1;
		break;
	case S_SCALE:
		s->given |= GIVEN_SCALE;
		if (value_scale(hint, arg, &s->cfg))
			return -1;
		break;
	case S_CAUSAL:
		s->given |= GIVEN_CAUSAL;
		if (!arg || !strcmp(arg, "top-left")) {
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		} else if (!strcmp(arg, "bottom-right")) {
			s->cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
		} else if (opt_offset(arg, &s->cfg.causal_offset)) {
			s->cfg.causal = MHA_CAUSAL_OFFSET;
		} else {
			usage_error(hint, "--causal takes top-left, bottom-right or a whole "
				    "number, not '%s'", arg);
			return -1;
		}
		break;
	case S_WINDOW:
		/* none: every key, over a window config.json would set */
		s->given |= GIVEN_WINDOW;
		if (!strcmp(arg, "none")) {
			s->cfg.window = (mha_window){ 0 };
			break;
		}
		if (value_window(hint, arg, &s->cfg.window))
			return -1;
		break;
	case S_SINKS:
		/* none: the layer has none, said (where a model type would read them) */
		s->given |= GIVEN_SINKS;
		s->sinks = strcmp(arg, "none") ? arg : NULL;
		break;
	case S_ROPE:
		s->given |= GIVEN_ROPE;
		if (!strcmp(arg, "half")) {
			s->cfg.rope.mode = MHA_ROPE_HALF;
		} else if (!strcmp(arg, "interleaved")) {
			s->cfg.rope.mode = MHA_ROPE_INTERLEAVED;
		} else if (!strcmp(arg, "none")) {
			/* a layer without position encoding (SmolLM3's), over a
			 * family or config.json that would turn it */
			s->cfg.rope.mode = MHA_ROPE_NONE;
		} else {
			usage_error(hint, "--rope takes half, interleaved or none, not '%s'",
				    arg);
			return -1;
		}
		break;
	case S_ROPE_THETA:
		s->given |= GIVEN_ROPE_THETA;
		if (value_real(hint, "--rope-theta", arg, &s->cfg.rope.theta))
			return -1;
		if (s->cfg.rope.theta <= 0) {
			usage_error(hint, "--rope-theta expects a number above 0, not '%s'",
				    arg);
			return -1;
		}
		break;
	case S_ROPE_DIM:
		s->given |= GIVEN_ROPE_DIM;
		if (opt_count(hint, "--rope-dim", arg, SIZE_MAX / 2, &s->cfg.rope.dim))
			return -1;
		if (s->cfg.rope.dim % 2) {
			usage_error(hint, "--rope-dim turns pairs of features: %zu is odd",
				    s->cfg.rope.dim);
			return -1;
		}
		break;
	case S_ROPE_SCALING:
		/* none: the frequencies unscaled, over config.json's rope_scaling */
		s->given |= GIVEN_ROPE_SCALING;
		s->rope_scaling = strcmp(arg, "none") ? arg : NULL;
		break;
	case S_NORM: {
		unsigned i = MHA_NORM_NONE;

		while (i <= MHA_NORM_LAYER && strcmp(arg, step_norm_kind((mha_norm_kind)i)))
			i++;
		if (i > MHA_NORM_LAYER) {
			usage_error(hint, "--norm takes rms, rms1p, layer or none, not '%s'", arg);
			return -1;
		}
		s->cfg.norm.kind = (mha_norm_kind)i;
		s->given |= GIVEN_NORM;
		break;
	}
	case S_NORM_EPS:
		if (value_eps(hint, "--norm-eps", arg, &s->cfg.norm.eps))
			return -1;
		s->given |= GIVEN_NORM_EPS;
		break;
	case S_NORM_OVER:
		if (strcmp(arg, "head") && strcmp(arg, "all")) {
			usage_error(hint, "--norm-over takes head or all, not '%s'", arg);
			return -1;
		}
		s->cfg.norm.over_all = !strcmp(arg, "all");
		s->given |= GIVEN_NORM_OVER;
		break;
	case S_SOFTCAP:
		/* none: no cap, over config.json's */
		s->given |= GIVEN_SOFTCAP;
		s->cfg.softcap = 0;
		if (!strcmp(arg, "none"))
			break;
		if (value_real(hint, "--softcap", arg, &s->cfg.softcap))
			return -1;
		if (s->cfg.softcap <= 0) {
			usage_error(hint, "--softcap expects a number above 0, or none, not '%s'", arg);
			return -1;
		}
		break;
	case S_QK_ROPE:
		if (opt_count(hint, "--qk-rope-head-dim", arg, SIZE_MAX / 2,
			      &s->rope_head_dim))
			return -1;
		s->given |= GIVEN_QK_ROPE;
		break;
	case S_MLA_EPS:
		if (value_eps(hint, "--mla-eps", arg, &s->cfg.mla.eps))
			return -1;
		s->given |= GIVEN_MLA_EPS;
		break;
	case S_BIASES:
		if (value_biases(hint, arg, &s->biases))
			return -1;
		s->given |= GIVEN_BIASES;
		break;
	default:
		return 0;
	}
	return 1;
}


/* ---- the inputs ------------------------------------------------------------ */

/* the inputs that are words, not files: where each goes */
static const struct {
	const char *name;
	size_t at; /* offsetof a const char * of struct problem_spec */
} word_inputs[] = {
	{ "prefix", offsetof(struct problem_spec, prefix) },
	{ "tokens", offsetof(struct problem_spec, tokens) },
	{ "kv-tokens", offsetof(struct problem_spec, kv_tokens) },
};
#define N_WORDS (sizeof(word_inputs) / sizeof(word_inputs[0]))

/* other names of inputs: DeepSeek's q_b_proj is W_Q after q_a_proj */
static const struct {
	const char *name, *is;
} aliases[] = { { "q-b-proj", "wq" } };
#define N_ALIASES (sizeof(aliases) / sizeof(aliases[0]))

const char *spec_canonical(const char *name)
{
	for (size_t i = 0; name && i < N_ALIASES; i++)
		if (!strcmp(name, aliases[i].name))
			return aliases[i].is;
	return name;
}

/* the other inputs: how to read them, how to compute (input()'s cases) */
static const struct {
	const char *name;
	enum mhe_kind kind;
} others[] = {
	{ "kt", MHE_ARRAY }, { "mask-bool", MHE_WORD }, { "alibi", MHE_FLAG },
	{ "absorb", MHE_FLAG }, { "layout", MHE_WORD }, { "layer", MHE_COUNT },
	{ "threads", MHE_COUNT }, { "exact", MHE_FLAG },
};
#define N_OTHERS (sizeof(others) / sizeof(others[0]))

const char *spec_closest(const char *name)
{
	const char *all[N_SETTINGS + N_WORDS + N_OTHERS + 64];
	size_t n = 0;

	for (size_t i = 0; i < N_SETTINGS; i++)
		all[n++] = setting_names[i];
	for (size_t i = 0; i < n_spec_files && n < sizeof(all) / sizeof(all[0]); i++)
		all[n++] = spec_files[i].name;
	for (size_t i = 0; i < N_WORDS && n < sizeof(all) / sizeof(all[0]); i++)
		all[n++] = word_inputs[i].name;
	for (size_t i = 0; i < N_OTHERS && n < sizeof(all) / sizeof(all[0]); i++)
		all[n++] = others[i].name;
	return closest_name(name, all, n);
}

size_t spec_settings_list(mhe_setting *out, size_t cap, size_t at)
{
	size_t n = at;

#define PUT(nm, kd) (n < cap ? (out[n] = (mhe_setting){ (nm), (kd) }, n++) : n++)
	for (size_t i = 0; i < N_SETTINGS; i++)
		PUT(setting_names[i], setting_kinds[i]);
	for (size_t i = 0; i < n_spec_files; i++)
		PUT(spec_files[i].name, !strcmp(spec_files[i].name, "config") ||
			!strcmp(spec_files[i].name, "weights") ? MHE_PATH : MHE_ARRAY);
	for (size_t i = 0; i < N_WORDS; i++)
		PUT(word_inputs[i].name, MHE_WORD);
	for (size_t i = 0; i < N_OTHERS; i++)
		PUT(others[i].name, others[i].kind);
	for (size_t i = 0; i < N_ALIASES; i++)
		PUT(aliases[i].name, MHE_ARRAY);
#undef PUT
	return n;
}

/* where the input called name sits, when setting it is setting its path or
 * words and nothing more; NULL otherwise */
static const char **input_field(const char *name, struct problem_spec *s)
{
	const struct spec_file *f = spec_file_named(name);

	if (f)
		return f->plain ? spec_file_field(s, f) : NULL;
	for (size_t i = 0; i < N_WORDS; i++)
		if (!strcmp(name, word_inputs[i].name))
			return (const char **)(void *)((char *)s + word_inputs[i].at);
	return NULL;
}

static int input(const char *hint, const char *name, const char *arg, struct problem_spec *s)
{
	const char **field = name ? input_field(name, s) : NULL;
	size_t n;

	if (!name)
		return 0;
	if (field) {
		*field = arg;
	} else if (!strcmp(name, "k") || !strcmp(name, "kt")) {
		/* --kt FILE is --k with the file transposed: one or the other */
		const int kt = !strcmp(name, "kt");

		if (s->k && kt != s->k_transposed)
			return usage_error(hint, "--k and --kt cannot be used together (--kt gives "
					   "K transposed)"), -1;
		s->k = arg;
		s->k_transposed = kt;
	} else if (!strcmp(name, "mask-bool")) {
		if (strcmp(arg, "attend") && strcmp(arg, "block"))
			return usage_error(hint, "--mask-bool takes attend or block, not '%s'",
					   arg), -1;
		s->mask_block = !strcmp(arg, "block");
	} else if (!strcmp(name, "alibi")) {
		s->cfg.alibi.on = 1;
	} else if (!strcmp(name, "alibi-slopes")) {
		/* a slopes file is ALiBi with those slopes: with --alibi as well, the same */
		s->alibi_slopes = arg;
		s->cfg.alibi.on = 1;
	} else if (!strcmp(name, "absorb")) {
		s->cfg.mla.absorbed = 1;
	} else if (!strcmp(name, "layout")) {
		/* a family's checkpoint names and layout; torch is both */
		char words[128];

		if (family_by_layout(arg, 0, &s->family))
			return usage_error(hint, "--layout takes %s, not '%s'",
					   family_layouts(0, words, sizeof(words)), arg), -1;
		s->layout = s->family == FAMILY_NONE ? LAYOUT_MHA : families[s->family].layout;
		s->given |= GIVEN_LAYOUT;
	} else if (!strcmp(name, "layer")) {
		if (value_layer(hint, arg, &s->layer))
			return -1;
		s->has_layer = 1;
	} else if (!strcmp(name, "threads")) {
		if (opt_count(hint, "--threads", arg, 4096, &n))
			return -1;
		s->cfg.threads = (int)n;
	} else if (!strcmp(name, "exact")) {
		s->cfg.exact = 1;
	} else {
		return 0;
	}
	return 1;
}

/* each refusal about the setting by its name (mhe_message.key) */
int spec_setting(const char *hint, const char *name, const char *arg, struct problem_spec *s)
{
	const char *was = msg_key(name);
	const int rc = setting(hint, name, arg, s);

	msg_key(was);
	return rc;
}

int spec_input(const char *hint, const char *name, const char *arg, struct problem_spec *s)
{
	const char *was = msg_key(name);
	const int rc = input(hint, spec_canonical(name), arg, s);

	msg_key(was);
	return rc;
}

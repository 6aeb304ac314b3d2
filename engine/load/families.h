/*
 * families.h: the model families mha reads, as one table (families.c: the
 * model types; tensor_families.c: each tensor family's names and layout).
 *
 * Two levels.  A tensor family (model_family: llama, gpt2, bert, torch)
 * says what an attention module's tensors are called and how they are laid
 * out.  A model type (config.json's model_type: llama, mistral, gemma2,
 * granite, ...) is a row naming its tensor family, its rotary embedding and
 * which config.json keys its attention uses (model.c gives each key its
 * meaning, once) and which of its other keys are known to leave the
 * attention alone.  A key in neither list refuses the run, naming it: mha
 * is exact or says what it does not know, never a guess.  A model type
 * whose attention needs what mha does not compute has a row that says so.
 */
#ifndef MHA_ENGINE_FAMILIES_H
#define MHA_ENGINE_FAMILIES_H

#include <stddef.h>

#include "load/spec.h"
#include "load/weights.h"
#include "mha.h"

/* what a module's tensor becomes: one of mha's weights (WQ ... BO), or */
enum {
	T_PACKED_W = N_WEIGHTS, /* GPT-2's c_attn weight: Q | K | V side by side */
	T_PACKED_B,             /* and its bias */
	T_TORCH_KEY,            /* nn.MultiheadAttention's names, as weights.c reads them */
	T_INV_FREQ,             /* the rotary frequencies a checkpoint kept: checked */
	T_SINKS,                /* one logit per head (gpt-oss), where the type reads them */
	T_Q_NORM,               /* the q/k norm's weights, where the type normalises */
	T_K_NORM,
	T_FUSED_W,              /* Q, K and V in one projection (out x in), split as the
				   fused layout says */
	T_FUSED_B,              /* and its bias */
	T_IGNORED,              /* outside the attention mha computes (reason given) */
	T_LATENT                /* + LAT_Q_A_PROJ … LAT_KV_B_PROJ (spec.h): multi-head latent
				   attention's tensors, as --q-a-proj … would give them */
};

struct family_tensor {
	const char *suffix; /* after the module's name and '.' */
	int what;           /* WQ ... BO, or T_ */
	int required;
	const char *why;    /* T_IGNORED: why it does not change the attention */
};

/* How a fused projection's rows hold Q, K and V (H query heads, G
 * key/value heads of d features each). */
enum fused_layout {
	FUSED_NONE,
	FUSED_BLOCKS,    /* [Q (H*d) | K (G*d) | V (G*d)] (Phi-3, ModernBERT, BigCode's
			    multi-query, Falcon's multi_query) */
	FUSED_PER_HEAD,  /* head by head [q | k | v] (G = H: GPT-NeoX, BigCode, Falcon's
			    first models) */
	FUSED_GROUPED    /* group by group [H/G q heads | k | v] (Falcon's
			    new_decoder_architecture) */
};

struct family {
	const char *name;  /* --layout's word, or its model_type's */
	const char *layer; /* the module of layer N, "%zu" for N */
	const char *key;   /* a tensor every such module has */
	weight_layout layout;
	struct family_tensor t[16];
	enum fused_layout fused; /* T_FUSED_W's rows (model_type may say otherwise) */
};

/* indexed by model_family; [FAMILY_NONE] is empty */
extern const struct family families[];
extern const size_t n_families;

/* How a model type slides its window when config.json gives sliding_window. */
enum slide_rule {
	SLIDE_NONE,      /* the type has no sliding window */
	SLIDE_ALL,       /* every layer (Mistral, Mixtral) */
	SLIDE_QWEN,      /* use_sliding_window, from max_window_layers; layer_types (Qwen2) */
	SLIDE_EVEN,      /* layer_types, else layers 0, 2, 4, ... (Gemma 2) */
	SLIDE_TYPES,     /* use_sliding_window and layer_types only (SmolLM3) */
	SLIDE_BY_TYPES,  /* layer_types alone, which must be there (gpt-oss) */
	SLIDE_PATTERN,   /* layer_types, else all but every sliding_window_pattern-th
			    (6 when left out: Gemma 3); the local layers turn by
			    rope_local_base_freq, without rope_scaling */
	SLIDE_EVERY_N,   /* all but every global_attn_every_n_layers-th (3), from layer
			    0: a window of local_attention/2 keys on each side,
			    local_rope_theta; the others global_rope_theta (ModernBERT) */
	SLIDE_ROPE_LOCAL, /* layer_types, else all but every sliding_window_pattern-th
			    (4): the local layers slide and turn, the global ones do
			    neither (Cohere 2) */
	SLIDE_NOPE_GLOBAL /* the same kinds of layer, the global ones without rotation
			    while sliding_window is set; sliding_window null: every
			    layer turns and none slides, as layer_types (which must
			    be given) says (EXAONE 4) */
};

/* Which biases a model type's projections have. */
enum bias_rule {
	BIAS_ANY,        /* those the checkpoint holds (Conv1D, nn.Linear with bias) */
	BIAS_FLAG,       /* q, k, v and o when attention_bias is true, else none (Llama;
			    Falcon's key is bias) */
	BIAS_QKV,        /* q, k and v, never o (Qwen2) */
	BIAS_FLAG_QKV,   /* q, k and v when attention_bias is true, never o (GLM-4) */
	BIAS_ALL,        /* q, k, v and o, always (Phi) */
	BIAS_NONE        /* none (Mistral) */
};

/*
 * A config.json key a model type's attention reads, and the default its
 * Hugging Face configuration class gives it (the class's __init__ or field
 * default, as JSON text: "10000.0", "null"), which a config.json that
 * leaves the key out takes, as transformers fills it (config_complete.c).
 * dflt NULL: the class does not define the key (the modeling code's
 * fallback, which is mha's, applies); "!": the class is not known (it ships
 * with the checkpoint), and a file that leaves the key out is refused; "?":
 * the class keeps None and its attention cannot run with it (Nemotron's
 * num_key_value_heads), and a file that leaves it out or null is refused.  v5:
 * transformers 5's default where it differs from transformers 4's, else
 * NULL.
 */
struct config_key {
	const char *name;
	const char *dflt;
	const char *v5;
};

struct model_type {
	const char *type;          /* config.json's model_type */
	model_family family;       /* its tensors */
	enum bias_rule bias;
	const char *refused;       /* not NULL: what its attention does that mha does not
				      compute, for the message; the rest of the row unused */
	mha_rope_mode rope;        /* its rotation: MHA_ROPE_NONE for none */
	enum slide_rule slide;
	const struct config_key *keys; /* the keys its attention reads, with its class's
					  defaults (ended by a NULL name) */
	const char *const *harmless; /* its other keys, known not to change the attention */
	const char *text_config;   /* an image-text type: the text model's type when
				      text_config gives none ("llama"); its own keys
				      are harmless_wrapper's */
	int sinks;                 /* its attention has sinks (T_SINKS): read, not refused */
	enum fused_layout fused;   /* its fused projection's layout when config.json does
				      not say (FUSED_NONE: the family's) */
	struct {                   /* its q/k norm (T_Q_NORM, T_K_NORM); kind 0: none */
		mha_norm_kind kind;
		int over_all;      /* over the whole projection (OLMo 2), else per head */
		const char *eps_key; /* config.json's key for eps (its default: keys') */
		const char *flag;  /* a key that turns it on (Cohere's use_qk_norm), or NULL */
	} norm;
	const char *bias_key;      /* BIAS_FLAG's key where it is not attention_bias
				      (StarCoder2's and ERNIE 4.5's use_bias); NULL:
				      attention_bias (Falcon's bias) */
};

/* what a module's tensor mha does not read does, where it is known: a
 * phrase for the message, or NULL */
const char *family_tensor_unread(const char *suffix);

/* the config.json key that switches a BIAS_FLAG type's biases:
 * attention_bias, Falcon's bias, or the row's own (use_bias) */
const char *model_type_bias_key(const struct model_type *t);
/* config.json's model_type: its row, or NULL */
const struct model_type *model_type_find(const char *type);
/* the row a family reads with no model_type (--layout alone): "llama" for
 * llama, ...; for FAMILY_NONE (no model_type, no --layout) the generic row,
 * which reads the heads alone */
const struct model_type *model_type_of_family(model_family f);
/* every key t knows (common ones included), NULL-ended, into list (cap
 * entries at most): its count */
size_t model_type_known(const struct model_type *t, const char **list, size_t cap);
/* key is one t's attention reads (1), one known to leave it alone (2), or
 * unknown for t (0) */
int model_type_knows(const struct model_type *t, const char *key);
/* the entry of t's keys for key (its class's default), or NULL: t's attention
 * does not read it */
const struct config_key *model_type_key(const struct model_type *t, const char *key);
/* The other spelling of key that transformers reads in its place (an
 * attribute_map's, or an older name: "n_head" for "num_attention_heads",
 * "rotary_pct" for "partial_rotary_factor"), or NULL. */
const char *config_key_alias(const char *key);
/* --layout's word (checkpoint: one of the tensor families alone, not mha)
 * into *f: 0, or -1 not one of them */
int family_by_layout(const char *word, int checkpoint, model_family *f);
/* those words, "mha, llama, gpt2, bert or torch", into buf */
const char *family_layouts(int checkpoint, char *buf, size_t size);
/* the types mha reads, "llama, mistral, ...", into buf */
const char *model_types_read(char *buf, size_t size);

#endif

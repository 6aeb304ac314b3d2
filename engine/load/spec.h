/*
 * spec.h: what a run reads, as the command line (or a test, or a fuzzer)
 * names it: the files, the options, the model's checkpoint and config.json.
 * problem.h reads it; model.h fills in what config.json says.
 */
#ifndef MHA_ENGINE_SPEC_H
#define MHA_ENGINE_SPEC_H

#include <stddef.h>

#include "util/msg.h"
#include "load/weights.h"
#include "mha.h"

/* What the command line gave, so that config.json leaves it alone. */
enum {
	GIVEN_HEADS = 1u << 0, GIVEN_KV_HEADS = 1u << 1, GIVEN_ROPE = 1u << 2,
	GIVEN_ROPE_THETA = 1u << 3, GIVEN_ROPE_DIM = 1u << 4, GIVEN_WINDOW = 1u << 5,
	GIVEN_CAUSAL = 1u << 6, GIVEN_LAYOUT = 1u << 7, GIVEN_SCALE = 1u << 8,
	GIVEN_NORM = 1u << 9, GIVEN_NORM_EPS = 1u << 10, GIVEN_NORM_OVER = 1u << 11,
	GIVEN_MLA_EPS = 1u << 12, GIVEN_QK_ROPE = 1u << 13
};
/* Multi-head latent attention's tensors (latent.h), one file each. */
enum { LAT_Q_A_PROJ, LAT_Q_A_NORM, LAT_KV_A_PROJ, LAT_KV_A_NORM, LAT_KV_B_PROJ, N_LATENT };
struct model_type;
/* What config.json set, in the same bits (s->given): a value that does not
 * fit the weights is then blamed on the file, not on an option. */
enum { CONFIG_HEADS = 1u << 16, CONFIG_KV_HEADS = 1u << 17, CONFIG_ROPE_DIM = 1u << 18,
       CONFIG_NORM_EPS = 1u << 19, CONFIG_MLA_EPS = 1u << 20 };
/* More of what the command line gave (each may say none): --softcap,
 * --sinks, --rope-scaling, --biases. */
enum { GIVEN_SOFTCAP = 1u << 21, GIVEN_SINKS = 1u << 22, GIVEN_ROPE_SCALING = 1u << 23,
       GIVEN_BIASES = 1u << 24 };

/* What to read, as the command line gave it. */
struct problem_spec {
	const char *x, *kv, *w, *q, *k, *v, *mask; /* paths ("-": standard input), or NULL */
	int k_transposed;               /* --kt: k holds K^T, (d, n_kv) or (B, d, n_kv) */
	const char *xk, *xv;            /* --xk, --xv: keys' and values' sources apart, or NULL */
	const char *sinks;              /* --sinks: one logit per query head, or NULL; or
					   sinks_from, a checkpoint's (model.h) */
	char sinks_from[2 * PATH_TEXT];
	const char *alibi_slopes;       /* --alibi-slopes: one slope per query head, or NULL */
	const char *q_norm, *k_norm;    /* --q-norm, --k-norm: the q/k norm's weights, or NULL;
					   or norm_from's, a checkpoint's (model.h) */
	char norm_from[2][2 * PATH_TEXT];
	const char *latent[N_LATENT];   /* --q-a-proj, --q-a-layernorm, --kv-a-proj-with-mqa,
					   --kv-a-layernorm, --kv-b-proj, or NULL */
	size_t rope_head_dim;           /* --qk-rope-head-dim: MLA's turned features per head */
	char latent_from[N_LATENT][2 * PATH_TEXT]; /* a checkpoint's latent tensors (model.h) */
	/* config.json's MLA dims, held to the tensors (latent.c): q_lora_rank + 1 (1: null,
	 * 0: not said), kv_lora_rank, qk_nope_head_dim, v_head_dim; 0: not said */
	size_t mla_dims[4];
	size_t fp8_block[2];            /* quantization_config's weight_block_size (0: 128) */
	double mla_mscale2;             /* YaRN's mscale(factor, mscale_all_dim)^2 on the
					   scale (DeepSeek), or 0: none */
	const char *positions;          /* --positions: rope's positions, or NULL */
	const char *rope_cos, *rope_sin;/* --rope-cos, --rope-sin: rope's tables, or NULL */
	const char *rope_scaling;       /* --rope-scaling: a JSON object, or a file holding
					   one (config.json's rope_scaling), or NULL */
	double rope_factors[2][256];    /* LongRoPE's short_factor and long_factor as read
					   (cfg.rope.scaling points here: a copy of the
					   spec points at the original's) */
	size_t n_rope_factors;          /* entries in each */
	char rope_from[48];             /* the key config.json gave rope_scaling's settings
					   under, for messages: "rope_parameters" or
					   "rope_parameters.full_attention" (transformers
					   5's, rope_params.c); "": rope_scaling */
	const char *one[N_WEIGHTS];     /* --wq … --bo: one weight from its own file */
	weight_layout layout;
	model_family family;            /* --layout llama|gpt2|bert|torch, or config.json's */
	const struct model_type *mtype; /* config.json's model_type's row (families.h), or
					   the family's own; NULL: none (model.c) */
	int text_model;                 /* an image-text model's: the module is its text
					   model's (text_config) */
	int fused;                      /* a fused projection's layout config.json says
					   (families.h), or 0: the family's */
	int model_norm;                 /* the model type normalises q and k (config.c):
					   its q_norm and k_norm tensors are read */
	int config_bias;                /* config.json read: 1 + its attention_bias (false
					   when left out); 0: no config.json */
	size_t config_hidden;           /* config.json's hidden_size (or its class's default),
					   which the weights' input must be; 0: none */
	size_t config_head_dim;         /* and its head_dim, said or derived from
					   hidden_size as the class derives it; 0: none */
	int config_head_derived;        /* config_head_dim is hidden_size / heads */
	char kv_from[160];              /* Falcon's and BigCode's key/value heads as their
					   flags set them, for messages; or "" */
	const char *config;             /* --config: Hugging Face's config.json, or NULL */
	const char *prefix;             /* --prefix: the attention module's names' start */
	size_t layer;                   /* --layer, when has_layer */
	int has_layer;
	/* what a checkpoint's run used, for meta's "model": set by model_config
	 * and model_load */
	char config_read[PATH_TEXT];         /* the config.json read, or "" */
	char keys_used[1024];                /* the keys of it the attention reads (model_type
						knows them), each ended by a NUL, then "" */
	char keys_defaulted[1024];           /* those it left out that took their class's
						default: "name=JSON" each ended by a NUL,
						then "" (complete.c) */
	char module[PATH_TEXT];              /* the module's names' start, with its '.', or "" */
	int checkpoint;                 /* the weights came from a checkpoint */
	unsigned given;                 /* GIVEN_ bits (model.h): what config.json leaves alone */
	unsigned biases;                /* --biases: bit i for BQ + i, the biases the
					   checkpoint's attention adds (GIVEN_BIASES) */
	char type_said[64];             /* config.json's own model_type, when mha reads it
					   as another's (--layout): for messages and
					   'mha model'; else "" */
	size_t heads, kv_heads;         /* at least 1; kv_heads divides heads (0: heads) */
	mha_config cfg;                 /* the options; problem_load adds the mask */
	int mask_block;                 /* --mask-bool block: a boolean mask's true blocks
					   (PyTorch's nn.MultiheadAttention); 0: true attends */
	const char *tokens, *kv_tokens; /* --tokens, --kv-tokens, or NULL */
	const char *cell;               /* --cell QUERY,KEY, or NULL */
	const char *rows, *cols;        /* --rows, --cols FIRST:LAST, or NULL */
	const size_t *kv_lens;          /* --kv-len 5,3,4: one length per sequence, or NULL */
	int floats;                     /* --dtype f32 with X not printed: float32 inputs stay
					   floats (READ_F32) */
	int float_out;                  /* and the output is made and written as floats
					   (--format npy or npz) */
	int map;                        /* X, Q, K, V and the weights may be mapped from
					   native .npy files (READ_MAP): nothing writes
					   into them (mha forward) */
	size_t n_kv_lens;               /* their number (a single --kv-len N is cfg.kv_len) */
	const char *grad_output;        /* mha backward --grad-output: dO, or NULL */
	int probe;                      /* no X: one token of zeros as wide as the
					   checkpoint's layer takes, so that the layer is
					   resolved and checked as a run resolves it
					   (mha model) */
};

#endif

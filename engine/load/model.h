/*
 * model.h: one attention layer out of a model's published checkpoint
 * (model.c), and the config.json that describes it (config.c): a
 * safetensors file, a folder of them (sharded, with
 * model.safetensors.index.json), and Hugging Face's config.json beside it.
 *
 * A model family (--layout llama|gpt2|bert|torch, or config.json's
 * model_type) says what its attention's tensors are called and how they are
 * laid out; --layer N or --prefix P says which module; everything else in
 * the checkpoint (embeddings, MLPs, norms) is never read.  config.json sets
 * the heads, the rotary embedding, the window and causality the family
 * implies, under whatever the command line gave.  Not a model runner: one
 * attention, as mha computes it.
 */
#ifndef MHA_ENGINE_MODEL_H
#define MHA_ENGINE_MODEL_H

#include "load/spec.h"
#include "load/weights.h"

/*
 * --config FILE, or the config.json beside a checkpoint -w names: its keys
 * set s's family (model_type), heads, kv_heads, rope, window, causality and
 * scale where s->given says the command line did not, and marks in s->given
 * what it set (CONFIG_ bits).  No config: nothing.  0, or -1 said: a value
 * of the wrong type, or heads that do not divide, name the file and the key
 * (never an option that was not given); partial_rotary_factor turning no
 * feature turns the rotation off, an odd number of them is refused.
 */
int model_config(struct problem_spec *s);

/* The layers config.json counts (text_config's for an image-text model),
 * --config's or the one beside the checkpoint, into *n (0: it says none,
 * or there is no config.json): 0, or -1 said (a file that cannot be read,
 * a count that is not a whole number, more than 100000). */
int config_layer_count(const struct problem_spec *s, size_t *n);

/*
 * The attention weights of one module of the checkpoint at path (see
 * ckpt_is_checkpoint in checkpoint.h), in the family's layout, into w: s->family (found
 * from the tensors' names when none), s->layer or s->prefix.  s->layout is
 * set to the family's.  The heads and rotary dim config.json set are held
 * to the weights read, a mismatch blamed on config.json.  0, or -1 said (a
 * missing tensor's message lists the names nearest to it).  A shard's file
 * is open only while its header or one tensor is read.  A model type with
 * sinks (gpt-oss) puts them in *extra[MODEL_SINKS], and s->sinks names
 * where from; one with a q/k norm (Qwen3, OLMo 2, Gemma 3, Cohere R+) its
 * weights in *extra[MODEL_Q_NORM] and [MODEL_K_NORM], s->q_norm and
 * s->k_norm naming them; one with multi-head latent attention (DeepSeek) its
 * tensors in *extra[MODEL_LATENT + LAT_…], (d_in, d_out), s->latent naming
 * them.  An FP8 weight (F8_E4M3, F8_E5M2) is read with its block scales,
 * NAME_scale_inv, multiplied in exactly (quantization_config's
 * weight_block_size, 128 x 128 by default, the edge blocks partial).
 */
enum { MODEL_SINKS, MODEL_Q_NORM, MODEL_K_NORM, MODEL_LATENT /* + LAT_ … */,
       MODEL_EXTRA = MODEL_LATENT + N_LATENT };
int model_load(weights *w, matrix *const extra[MODEL_EXTRA], struct problem_spec *s,
	       const char *path);

/* The settings of the layer the command line stated (stated 1: their
 * options, "--rope", "--window", ...), or (stated 0) those families differ
 * in that it did not state and the others do not make moot: at most cap
 * into list, their count (config.c). */
size_t model_settings(const struct problem_spec *s, int stated, const char **list, size_t cap);

/* "llama", "gpt2", "bert", "torch"; NULL for FAMILY_NONE */
const char *model_family_name(model_family f);

struct ckpt;
/* Which family's attention the checkpoint's names hold: the only one with
 * modules, or FAMILY_NONE (model.c). */
model_family model_detect(const struct ckpt *c);

#endif

/*
 * said.h: what set a value of the layer, for the messages that find it
 * wrong (said.c): an option given, or config.json's key (its class's
 * default when the file left it out), so that a message blames what the
 * user can change, never an option they did not give.
 */
#ifndef MHA_ENGINE_SAID_H
#define MHA_ENGINE_SAID_H

#include <stddef.h>

#include "load/spec.h"

/*
 * The heads (kv: the key/value heads), n of them, as a message that finds
 * them wrong names what set them: "--heads 3", "--kv-heads 2", or the key
 * and config.json when the file set them ("num_attention_heads 3 of
 * 'ck/config.json'"), into buf.  Key and value heads neither given nor set
 * are the heads, and said so.
 */
const char *model_heads_said(const struct problem_spec *s, int kv, size_t n, char *buf,
			     size_t size);

/* The key the family's config.json gives its heads under ("n_head" for
 * GPT-2, else "num_attention_heads"), for messages. */
const char *model_heads_key(const struct problem_spec *s);
/* and its width's: n_embd (GPT-2, BigCode, GPT-J), else hidden_size */
const char *model_hidden_key(const struct problem_spec *s);

/* the turned features of multi-head latent attention: "--qk-rope-head-dim
 * 64", or "qk_rope_head_dim 64 of 'ck/config.json' (left out: ...)", into buf */
const char *model_rope_head_dim_said(const struct problem_spec *s, char *buf, size_t size);

#endif

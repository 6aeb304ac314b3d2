/*
 * said.c: what set a value of the layer, for messages (said.h).
 */
#include "load/said.h"
#include "load/complete.h"
#include "load/families.h"
#include "util/msg.h"

#include <stdio.h>

const char *model_heads_key(const struct problem_spec *s)
{
	const model_family f = s->mtype ? s->mtype->family : s->family;

	return f == FAMILY_GPT2 || f == FAMILY_BIGCODE || f == FAMILY_GPTJ ? "n_head"
									   : "num_attention_heads";
}

const char *model_hidden_key(const struct problem_spec *s)
{
	const model_family f = s->mtype ? s->mtype->family : s->family;

	return f == FAMILY_GPT2 || f == FAMILY_BIGCODE || f == FAMILY_GPTJ ? "n_embd"
									   : "hidden_size";
}

const char *model_heads_said(const struct problem_spec *s, int kv, size_t n, char *buf,
			     size_t size)
{
	const unsigned from_config = kv ? CONFIG_KV_HEADS : CONFIG_HEADS;
	const char *key = kv ? "num_key_value_heads" : model_heads_key(s);
	char note[96];

	if (kv && s->kv_from[0] && !(s->given & GIVEN_KV_HEADS))
		snprintf(buf, size, "%zu key/value head%s (%s of '%s')", n, n == 1 ? "" : "s",
			 s->kv_from, path_shown(s->config_read));
	else if (kv && !(s->given & (CONFIG_KV_HEADS | GIVEN_KV_HEADS)))
		return model_heads_said(s, 0, n, buf, size); /* as many as the heads */
	else if (!(s->given & from_config))
		snprintf(buf, size, "%s %zu", kv ? "--kv-heads" : "--heads", n);
	else
		snprintf(buf, size, "%s %zu of '%s'%s", key, n, path_shown(s->config_read),
			 config_default_note(s, key, note, sizeof(note)));
	return buf;
}

const char *model_rope_head_dim_said(const struct problem_spec *s, char *buf, size_t size)
{
	char note[96];

	if ((s->given & GIVEN_QK_ROPE) || !s->config_read[0])
		snprintf(buf, size, "--qk-rope-head-dim %zu", s->rope_head_dim);
	else
		snprintf(buf, size, "qk_rope_head_dim %zu of '%s'%s", s->rope_head_dim,
			 path_shown(s->config_read), config_default_note(s, "qk_rope_head_dim", note,
									 sizeof(note)));
	return buf;
}

/*
 * aliases.c: the steps 'mha compare' knows and the names it reads each by
 * (aliases.h).  The table below is the one place an alias is written: the
 * man page's list is checked against 'mha compare --aliases', which
 * prints it.
 */
#include "compare/aliases.h"

#include "util/msg.h"
#include "util/opts.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* what compare reads of forward's steps, in the order of the computation;
 * backward's follow (cmp_at): their names and keys are steps.c's */
static const struct cmp_step fwd_steps[C_GRAD] = {
	[C_X] = { STEP_X, 0, 0, 0 },
	[C_C_Q] = { STEP_C_Q, 0, 0, 0 },
	[C_C_Q_NORM] = { STEP_C_Q_NORM, 0, 0, 0 },
	[C_Q_NOPE] = { STEP_Q_NOPE, 0, 0, 0 },
	[C_Q_PE] = { STEP_Q_PE, 0, 0, 0 },
	[C_Q_PE_ROT] = { STEP_Q_PE_ROT, 0, 0, 0 },
	[C_C_KV] = { STEP_C_KV, 0, 0, 0 },
	[C_C_KV_NORM] = { STEP_C_KV_NORM, 0, 0, 0 },
	[C_K_PE] = { STEP_K_PE, 0, 0, 0 },
	[C_K_PE_ROT] = { STEP_K_PE_ROT, 0, 0, 0 },
	[C_K_NOPE] = { STEP_K_NOPE, 0, 0, 0 },
	[C_Q] = { STEP_Q, 0, 0, 0 },
	[C_K] = { STEP_K, 0, 0, 0 },
	[C_V] = { STEP_V, 0, 0, 0 },
	[C_Q_NORM] = { STEP_Q_NORM, 0, 0, 0 },
	[C_K_NORM] = { STEP_K_NORM, 0, 0, 0 },
	[C_Q_ROT] = { STEP_Q_ROT, 0, 0, 0 },
	[C_K_ROT] = { STEP_K_ROT, 0, 0, 0 },
	[C_HEAD_Q] = { STEP_Q, 1, 0, 0 },
	[C_HEAD_K] = { STEP_K, 1, 0, 0 },
	[C_HEAD_V] = { STEP_V, 1, 0, 0 },
	[C_SCORES] = { STEP_SCORES, 1, 0, 0 },
	[C_SCALED] = { STEP_SCALED, 1, 0, 0 },
	[C_SOFTCAPPED] = { STEP_SOFTCAPPED, 1, 0, 0 },
	[C_MASK] = { STEP_MASK, 0, 0, 0 },
	[C_MASKED] = { STEP_MASKED, 1, 0, 0 },
	[C_SOFTMAX] = { STEP_SOFTMAX, 1, 0, 0 },
	[C_SOFTMAX_MEAN] = { STEP_SOFTMAX, 0, 0, 0 },
	[C_HEAD_OUTPUT] = { STEP_HEADS, 1, 0, 0 },
	[C_CONCAT] = { STEP_CONCAT, 0, 0, 0 },
	[C_OUTPUT] = { STEP_OUTPUT, 0, 0, 0 },
};

const struct cmp_step *cmp_at(int i)
{
	static struct cmp_step grad[GS_COUNT];

	if (i < C_GRAD)
		return &fwd_steps[i];
	if (!grad[0].grad)
		for (int s = 0; s < GS_COUNT; s++)
			/* P and O are the forward's softmax and each head's output again */
			grad[s] = (struct cmp_step){ s, grad_steps[s].head_stage >= 0, 1,
						     s == GS_P || s == GS_O };
	return &grad[i - C_GRAD];
}

const struct step *cmp_row(int i)
{
	const struct cmp_step *c = cmp_at(i);

	return c->grad ? &grad_steps[c->step] : &steps[c->step];
}

const char *cmp_key(int i)
{
	return i == C_SOFTMAX_MEAN ? "softmax_mean" : step_key(cmp_row(i));
}

const char *cmp_name(int i)
{
	static char names[C_COUNT][40];

	if (!names[i][0]) {
		/* a head's matrix under a key the whole model has too: "heads.Q" */
		int whole_too = 0;

		for (int j = 0; j < C_COUNT; j++)
			whole_too |= cmp_at(i)->per_head && !cmp_at(j)->per_head &&
				     !strcmp(cmp_key(j), cmp_key(i));
		snprintf(names[i], sizeof(names[i]), "%s%s", whole_too ? "heads." : "", cmp_key(i));
	}
	return names[i];
}

/*
 * Other names for mha's steps: each alias and the keys it stands for, one
 * or more (the shapes choose).  Names people give the same arrays in
 * PyTorch (nn.MultiheadAttention, F.scaled_dot_product_attention),
 * Hugging Face's modeling code (query_states, attn_weights, attn_output),
 * FlashAttention's papers (S, P, dS, delta) and the tutorials (A, Z).
 */
static const struct alias {
	const char *name;
	const char *keys; /* mha's keys, space-separated */
} aliases[] = {
	{ "input", "X" }, { "inputs", "X" }, { "hidden_states", "X" }, { "embeddings", "X" },
	{ "query", "Q" }, { "queries", "Q" }, { "query_states", "Q" }, { "xq", "Q" },
	{ "key", "K" }, { "keys", "K" }, { "key_states", "K" }, { "xk", "K" },
	{ "value", "V" }, { "values", "V" }, { "value_states", "V" }, { "xv", "V" },
	{ "q_rope", "q_rot" }, { "q_rotary", "q_rot" }, { "q_embed", "q_rot" },
	{ "query_rot", "q_rot" },
	{ "k_rope", "k_rot" }, { "k_rotary", "k_rot" }, { "k_embed", "k_rot" },
	{ "key_rot", "k_rot" },
	{ "s", "scores" }, { "qk", "scores" }, { "logits", "scores" }, { "attn_scores", "scores" },
	{ "attention_scores", "scores" }, { "attn_logits", "scores" },
	{ "scaled_scores", "scaled" }, { "scores_scaled", "scaled" },
	{ "capped", "softcapped" }, { "softcapped_scores", "softcapped" },
	{ "attn_mask", "mask" }, { "attention_mask", "mask" }, { "causal_mask", "mask" },
	{ "masked_scores", "masked" }, { "scores_masked", "masked" },
	{ "p", "softmax" }, { "a", "softmax" }, { "probs", "softmax" }, { "attn", "softmax" },
	{ "attn_weights", "softmax" }, { "attn_probs", "softmax" },
	{ "attention_weights", "softmax" }, { "attention_probs", "softmax" },
	{ "weights_softmax", "softmax" },
	{ "o", "output" }, { "head_output", "output" }, { "head_outputs", "output" },
	{ "z", "output concat" },
	{ "concatenated", "concat" }, { "merged", "concat" }, { "heads_concat", "concat" },
	{ "context", "concat output" }, { "context_layer", "concat output" },
	{ "attn_output", "concat output" }, { "attention_output", "concat output" },
	{ "out", "output" }, { "y", "output" }, { "outputs", "output" }, { "result", "output" },
	{ "attn_out", "output" },
	/* backward's */
	{ "do", "grad_output" }, { "dout", "grad_output dO" }, { "d_out", "grad_output dO" },
	{ "grad_out", "grad_output" }, { "output_grad", "grad_output" }, { "dy", "grad_output" },
	{ "grad_y", "grad_output" }, { "upstream", "grad_output" },
	{ "d_concat", "dconcat" }, { "dcontext", "dconcat" }, { "grad_concat", "dconcat" },
	{ "grad_attn_output", "dconcat dO" },
	{ "da", "dP" }, { "dattn", "dP" }, { "grad_p", "dP" },
	{ "dattn_weights", "dP" }, { "grad_attn_weights", "dP" }, { "dprobs", "dP" },
	{ "delta", "D" }, { "di", "D" },
	{ "grad_s", "dS" }, { "dlogits", "dS" }, { "grad_masked", "dS" },
	{ "grad_scores", "dscores" }, { "dscores_raw", "dscores" }, { "dqk", "dscores" },
	{ "grad_q", "dQ" }, { "q_grad", "dQ" }, { "dquery", "dQ" }, { "grad_query", "dQ" },
	{ "dquery_states", "dQ" },
	{ "grad_k", "dK" }, { "k_grad", "dK" }, { "dkey", "dK" }, { "grad_key", "dK" },
	{ "dkey_states", "dK" },
	{ "grad_v", "dV" }, { "v_grad", "dV" }, { "dvalue", "dV" }, { "grad_value", "dV" },
	{ "dvalue_states", "dV" },
	{ "grad_x", "dX" }, { "x_grad", "dX" }, { "dinput", "dX" }, { "grad_input", "dX" },
	{ "dhidden_states", "dX" },
	{ "grad_w_q", "dW_Q" }, { "w_q_grad", "dW_Q" }, { "dwq", "dW_Q" },
	{ "q_proj.weight.grad", "dW_Q" }, { "dq_proj", "dW_Q" },
	{ "grad_w_k", "dW_K" }, { "w_k_grad", "dW_K" }, { "dwk", "dW_K" },
	{ "k_proj.weight.grad", "dW_K" }, { "dk_proj", "dW_K" },
	{ "grad_w_v", "dW_V" }, { "w_v_grad", "dW_V" }, { "dwv", "dW_V" },
	{ "v_proj.weight.grad", "dW_V" }, { "dv_proj", "dW_V" },
	{ "grad_w_o", "dW_O" }, { "w_o_grad", "dW_O" }, { "dwo", "dW_O" },
	{ "o_proj.weight.grad", "dW_O" }, { "out_proj.weight.grad", "dW_O" },
	{ "do_proj", "dW_O" },
	{ "grad_b_q", "db_Q" }, { "dbq", "db_Q" }, { "q_proj.bias.grad", "db_Q" },
	{ "grad_b_k", "db_K" }, { "dbk", "db_K" }, { "k_proj.bias.grad", "db_K" },
	{ "grad_b_v", "db_V" }, { "dbv", "db_V" }, { "v_proj.bias.grad", "db_V" },
	{ "grad_b_o", "db_O" }, { "dbo", "db_O" }, { "o_proj.bias.grad", "db_O" },
	{ "out_proj.bias.grad", "db_O" },
	{ "dsink", "dsinks" }, { "grad_sinks", "dsinks" }, { "sinks.grad", "dsinks" },
};

#define N_ALIASES (sizeof(aliases) / sizeof(aliases[0]))

/* whether word is one of list's space-separated words */
static int in_list(const char *list, const char *word)
{
	const size_t n = strlen(word);

	for (const char *p = list; *p;) {
		const size_t len = strcspn(p, " ");

		if (len == n && !strncmp(p, word, n))
			return 1;
		p += len;
		p += *p == ' ';
	}
	return 0;
}

/* "2_" -> 2 and the rest after it; 0 when s does not start with a head's number */
static size_t head_number(const char *s, const char **rest)
{
	size_t n = 0;

	if (*s < '1' || *s > '9')
		return 0;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > 100000000)
			return 0;
		n = n * 10 + (size_t)(*s - '0');
	}
	*rest = s;
	return n;
}

int alias_parse(const char *name, struct name_parse *np)
{
	const size_t len = strlen(name);
	const char *rest = NULL;
	size_t h;

	memset(np, 0, sizeof(*np));
	if (len >= sizeof(np->base))
		return -1;
	/* heads.KEY, heads_KEY: every head */
	if ((!strncasecmp(name, "heads.", 6) || !strncasecmp(name, "heads_", 6)) && name[6]) {
		np->heads = 1;
		snprintf(np->base, sizeof(np->base), "%s", name + 6);
		return 0;
	}
	/* headN_KEY, headN.KEY, head_N_KEY */
	if (!strncasecmp(name, "head", 4)) {
		const char *p = name + 4 + (name[4] == '_');

		h = head_number(p, &rest);
		if (h && (*rest == '_' || *rest == '.') && rest[1]) {
			np->head = h;
			snprintf(np->base, sizeof(np->base), "%s", rest + 1);
			return 0;
		}
	}
	/* KEY_hN, KEY_headN */
	for (const char *u = strrchr(name, '_'); u && u > name;) {
		const char *p = u + 1;

		if (!strncasecmp(p, "head", 4))
			p += 4;
		else if (*p == 'h' || *p == 'H')
			p++;
		else
			break;
		h = head_number(p, &rest);
		if (h && !*rest) {
			np->head = h;
			snprintf(np->base, sizeof(np->base), "%.*s", (int)(u - name), name);
			return 0;
		}
		break;
	}
	snprintf(np->base, sizeof(np->base), "%s", name);
	return 0;
}

/* the steps under key (exactly), whole first, added to ids */
static size_t add_key(const char *key, int *ids, size_t n, size_t max)
{
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < C_COUNT && n < max; i++) {
			const struct cmp_step *c = cmp_at(i);
			size_t k;

			if (c->hidden || c->per_head != pass || i == C_SOFTMAX_MEAN ||
			    strcmp(cmp_key(i), key))
				continue;
			for (k = 0; k < n && ids[k] != i; k++)
				;
			if (k == n)
				ids[n++] = i;
		}
	return n;
}

size_t alias_steps(const char *base, int *ids, size_t max)
{
	size_t n = 0;

	/* mha's own key, any case, then what an alias of that name stands for too
	 * ("do": each head's dO, or the whole grad_output) */
	for (int i = 0; i < C_COUNT; i++)
		if (!cmp_at(i)->hidden && i != C_SOFTMAX_MEAN && !strcasecmp(cmp_key(i), base)) {
			n = add_key(cmp_key(i), ids, 0, max);
			break;
		}
	for (size_t a = 0; a < N_ALIASES; a++) {
		if (strcasecmp(aliases[a].name, base))
			continue;
		for (const char *p = aliases[a].keys; *p;) {
			char key[40];
			const size_t len = strcspn(p, " ");

			snprintf(key, sizeof(key), "%.*s", (int)len, p);
			n = add_key(key, ids, n, max);
			p += len;
			p += *p == ' ';
		}
		break;
	}
	return n;
}

const char *alias_closest(const char *base)
{
	static const char *names[C_COUNT + N_ALIASES];
	static size_t n;

	if (!n) {
		for (int i = 0; i < C_COUNT; i++)
			if (!cmp_at(i)->hidden && i != C_SOFTMAX_MEAN)
				names[n++] = cmp_key(i);
		for (size_t a = 0; a < N_ALIASES; a++)
			names[n++] = aliases[a].name;
	}
	return closest_name(base, names, n);
}

/* nn.MultiheadAttention's packed gradients: each name and its three keys */
static const struct {
	const char *name;
	const char *keys[3];
} packed[] = {
	{ "in_proj_weight.grad", { "dW_Q", "dW_K", "dW_V" } },
	{ "in_proj_bias.grad", { "db_Q", "db_K", "db_V" } },
};

int alias_packed(const char *base, const char *keys[3])
{
	for (int p = 0; p < 2; p++)
		if (!strcmp(base, packed[p].name)) {
			for (int k = 0; keys && k < 3; k++)
				keys[k] = packed[p].keys[k];
			return p + 1;
		}
	return 0;
}

void alias_print(FILE *fp)
{
	for (int i = 0; i < C_COUNT; i++) {
		const char *key = cmp_key(i);
		int first = 1, seen = 0;

		/* a key once, where its first step is (Q: with the whole model's) */
		if (cmp_at(i)->hidden || i == C_SOFTMAX_MEAN)
			continue;
		for (int j = 0; j < i; j++)
			seen |= !cmp_at(j)->hidden && j != C_SOFTMAX_MEAN && !strcmp(cmp_key(j), key);
		if (seen)
			continue;
		fprintf(fp, "%s:", key);
		for (size_t a = 0; a < N_ALIASES; a++)
			if (in_list(aliases[a].keys, key)) {
				fprintf(fp, "%s %s", first ? "" : ",", aliases[a].name);
				first = 0;
			}
		for (int p = 0; p < 2; p++)
			for (int k = 0; k < 3; k++)
				if (!strcmp(packed[p].keys[k], key)) {
					fprintf(fp, "%s %s (its %c block)", first ? "" : ",",
						packed[p].name, "qkv"[k]);
					first = 0;
				}
		fputc('\n', fp);
	}
}

/*
 * grad_steps.c: backward's steps (steps.h's grad_steps[]), a table of the
 * same type as forward's and walked by the same code: each one's --print
 * name and JSON key (one: --print takes any case), the library's
 * mha_grad_stage it comes from, whole or per head, its axes, when a run
 * has it, its title's formula and what --explain says of it.
 */
#include "run/steps.h"

#include "util/number.h"
#include "load/weights.h"

#include "mha.h"

#include <stdio.h>
#include <string.h>

static int has(const struct step_facts *f, int weight)
{
	return (f->weights >> weight) & 1;
}

/* its formula, the head and its key/value head filled in (dO: the head twice) */
static void title_formula(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			  size_t head)
{
	const mha_dims *d = f->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t kv = head ? (head - 1) / (d->heads / G) + 1 : 0;

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
#endif
	if (s == &grad_steps[GS_DO])
		snprintf(buf, size, s->formula, head, head);
	else if (s->head_stage >= 0)
		snprintf(buf, size, s->formula, head, kv);
	else
		snprintf(buf, size, "%s", s->formula);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

/* "head 1: dscores = dS * 0.5": the scale as a number, what the scores were multiplied by */
static void title_dscores(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			  size_t head)
{
	char v[40];

	(void)s;
	format_shortest(v, sizeof(v), f->scale);
	snprintf(buf, size, "head %zu: dscores = %s * %s", head, f->cfg->softcap > 0 ? "dscaled" : "dS",
		 v);
}

/* dQ, dK, dV: of the Q, K, V given, or turned back from dq_rot and dk_rot */
static void title_qkv(char *buf, size_t size, const struct step *s, const struct step_facts *f,
		      size_t head)
{
	static const char *const direct[3] = { "dQ (the gradient of the Q given)",
					       "dK (the gradient of the K given)",
					       "dV (the gradient of the V given)" };
	const int i = (int)(s - &grad_steps[GS_DQ]);

	if (f->direct)
		snprintf(buf, size, "%s", f->shared && f->shared[i] ? "the gradient of the one matrix "
			 "every sequence shares: summed over them" : direct[i]);
	else if (f->cfg->mla.on)
		/* latent attention: of Q, K, V as the heads read them, nothing turned here */
		snprintf(buf, size, "%s", i == 0 ? "dQ = the heads' dQ side by side (of each head's "
			 "[q_nope, q_pe_rot])" : i == 1 ? "dK = the heads' dK side by side (of each "
			 "head's [k_nope, k_pe_rot])" : "dV = the heads' dV side by side");
	else if (i < 2 && f->cfg->norm.kind != MHA_NORM_NONE)
		snprintf(buf, size, "%s", i == 0 ? "dQ = dq_norm back through the norm (its Jacobian)"
			 : "dK = dk_norm back through the norm (its Jacobian)");
	else if (i < 2 && f->cfg->rope.mode != MHA_ROPE_NONE)
		snprintf(buf, size, "%s", i == 0 ? "dQ = dq_rot turned back (each pair by minus its angle)"
			 : "dK = dk_rot turned back (each pair by minus its angle)");
	else
		title_formula(buf, size, s, f, head);
}

/* dq_norm, dk_norm: what reached the normalised Q and K (turned back with rope) */
static void title_dnorm(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			size_t head)
{
	const int q = s == &grad_steps[GS_DQ_NORM];

	(void)head;
	if (f->cfg->rope.mode != MHA_ROPE_NONE)
		snprintf(buf, size, "%s = %s turned back (each pair by minus its angle)",
			 q ? "dq_norm" : "dk_norm", q ? "dq_rot" : "dk_rot");
	else
		snprintf(buf, size, "%s", q ? "dq_norm = the heads' dQ side by side"
			 : "dk_norm = each key/value head's dK summed over its query heads");
}

/* ", summed over the sequences (one matrix for all)" after a source's gradient a batch shares */
static void shared_sum(char *buf, size_t size, const struct step_facts *f, int source)
{
	const size_t n = strlen(buf);

	if (f->shared && f->shared[source])
		snprintf(buf + n, size - n, ", summed over the sequences (one matrix for all)");
}

/* the gradient of a source: through its weight, or itself without one */
static const char *through(const struct step_facts *f, char which)
{
	return which == 'Q' ? (has(f, WQ) ? "dQ*W_Q^T" : "dQ") : which == 'K' ?
	       (has(f, WK) ? "dK*W_K^T" : "dK") : (has(f, WV) ? "dV*W_V^T" : "dV");
}

static void title_dx(char *buf, size_t size, const struct step *s, const struct step_facts *f,
		     size_t head)
{
	(void)s;
	(void)head;
	if (f->cfg->mla.on)
		/* latent attention: through the queries' projection and the keys' and values' latent */
		snprintf(buf, size, "dX = %s%s", f->cfg->mla.q_rank ? "dc_q*q_a_proj^T"
			 : "dQ (q_pe's part turned back)*W_Q^T",
			 f->cross ? "" : " + [dc_kv, dk_pe]*kv_a_proj_with_mqa^T (X is the query, "
			 "key and value source)");
	else if (!f->cross)
		snprintf(buf, size, "dX = %s + %s + %s (X is the query, key and value source)",
			 through(f, 'Q'), through(f, 'K'), through(f, 'V'));
	else
		snprintf(buf, size, "dX = %s", through(f, 'Q'));
	shared_sum(buf, size, f, 0);
}

/* dW_Q: of the queries' projection, after q_a_proj's latent with MLA */
static void title_dw_q(char *buf, size_t size, const struct step *s, const struct step_facts *f,
		       size_t head)
{
	if (f->cfg->mla.on)
		snprintf(buf, size, "dW_Q = %s^T*dQ (q_pe's part turned back)",
			 f->cfg->mla.q_rank ? "c_q_norm" : "X");
	else
		title_formula(buf, size, s, f, head);
}

static void title_dx_kv(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			size_t head)
{
	(void)s;
	(void)head;
	if (f->cfg->mla.on)
		snprintf(buf, size, "dX_kv = [dc_kv, dk_pe]*kv_a_proj_with_mqa^T");
	else
		snprintf(buf, size, "dX_kv = %s + %s", through(f, 'K'), through(f, 'V'));
	shared_sum(buf, size, f, 1);
}

/* dX_k, dX_v: the keys' and the values' sources apart */
static void title_dx_apart(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			   size_t head)
{
	const int k = s == &grad_steps[GS_DX_K];

	(void)head;
	snprintf(buf, size, "%s = %s", step_key(s), through(f, k ? 'K' : 'V'));
	shared_sum(buf, size, f, k ? 1 : 2);
}

/* dW_K, dW_V: by the source of the keys or the values */
static void title_dw_kv(char *buf, size_t size, const struct step *s, const struct step_facts *f,
			size_t head)
{
	const int k = s == &grad_steps[GS_DW_K];

	(void)head;
	snprintf(buf, size, "%s = %s^T*%s", step_key(s),
		 f->apart ? (k ? "X_k" : "X_v") : f->cross ? "X_kv" : "X", k ? "dK" : "dV");
}

const struct step grad_steps[GS_COUNT] = {
	[GS_GRAD_OUTPUT] = { .key = "grad_output", .stage = MHA_GRAD_DOUTPUT, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "grad_output = dO, the gradient of the loss by the output",
		.says = "where the backward pass starts: how the loss changes with each output entry" },
	[GS_DCONCAT] = { .stage = MHA_GRAD_DCONCAT, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_WO,
		.title = title_formula, .formula = "dconcat = grad_output*W_O^T",
		.says = "back through the output projection: each head's block is its dO" },
	[GS_P] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_P,
		.rows = AXIS_QUERY, .cols = AXIS_KEY, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: P = softmax (recomputed)",
		.says = "the forward's attention weights, recomputed" },
	[GS_O] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_O,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: O = P*V%zu (recomputed)",
		.says = "the head's output, recomputed" },
	[GS_DO] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DO,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dO = dconcat's block %zu",
		.says = "the gradient of the head's output" },
	[GS_DV_H] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DV,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dV = P^T*dO",
		.says = "this head's part of the gradient of its V block" },
	[GS_DP] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DP,
		.rows = AXIS_QUERY, .cols = AXIS_KEY, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dP = dO*V%zu^T",
		.says = "the gradient of the attention weights" },
	[GS_D] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_D,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: D = rowsum(dO o O)",
		.says = "per query, sum_j P_ij*dP_ij: what the softmax takes back" },
	[GS_DS] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DS,
		.rows = AXIS_QUERY, .cols = AXIS_KEY, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dS = P o (dP - D)",
		.says = "the gradient of the masked scores (0 where a key is masked)" },
	[GS_DSCALED] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DSCALED,
		.rows = AXIS_QUERY, .cols = AXIS_KEY, .flags = STEP_GRAD, .when = WHEN_SOFTCAP,
		.title = title_formula, .formula = "head %zu: dscaled = dS o (1 - tanh(scaled/c)^2)",
		.says = "back through the softcap: tanh's derivative" },
	[GS_DSCORES] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DSCORES,
		.rows = AXIS_QUERY, .cols = AXIS_KEY, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_dscores, .formula = "head %zu: dscores = dscaled * scale",
		.says = "back through the scaling" },
	[GS_DQ_H] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DQ,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dQ = dscores*K%zu",
		.says = "the gradient of the head's block of Q (with rope: of q_rot)" },
	[GS_DK_H] = { .stage = -1, .head_stage = MHA_GRAD_HEAD_DK,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_formula, .formula = "head %zu: dK = dscores^T*Q",
		.says = "this head's part of the gradient of its K block (with rope: of k_rot)" },
	[GS_DQ_ROT] = { .stage = MHA_GRAD_DQ_ROT, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_ROPE,
		.title = title_formula, .formula = "dq_rot = the heads' dQ side by side",
		.says = "the gradient of q_rot" },
	[GS_DK_ROT] = { .stage = MHA_GRAD_DK_ROT, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_ROPE,
		.title = title_formula, .formula = "dk_rot = each key/value head's dK summed over its query heads",
		.says = "the gradient of k_rot" },
	[GS_DQ_NORM] = { .stage = MHA_GRAD_DQ_NORM, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_NORM,
		.title = title_dnorm, .formula = "dq_norm",
		.says = "the gradient of q_norm" },
	[GS_DK_NORM] = { .stage = MHA_GRAD_DK_NORM, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_NORM,
		.title = title_dnorm, .formula = "dk_norm",
		.says = "the gradient of k_norm" },
	[GS_DQ] = { .stage = MHA_GRAD_DQ, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_qkv, .formula = "dQ = the heads' dQ side by side",
		.says = "the gradient of Q" },
	[GS_DK] = { .stage = MHA_GRAD_DK, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_qkv, .formula = "dK = each key/value head's dK summed over its query heads",
		.says = "the gradient of K" },
	[GS_DV] = { .stage = MHA_GRAD_DV, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD, .when = WHEN_ALWAYS,
		.title = title_qkv, .formula = "dV = each key/value head's dV summed over its query heads",
		.says = "the gradient of V" },
	[GS_DC_Q] = { .stage = MHA_GRAD_DC_Q, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD,
		.when = WHEN_MLA_Q, .title = title_formula,
		.formula = "dc_q = the gradient of c_q: dQ (q_pe's part turned back) through W_Q and "
			   "q_a_layernorm's RMSNorm",
		.says = "the gradient of the queries' latent" },
	[GS_DC_KV] = { .stage = MHA_GRAD_DC_KV, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD,
		.when = WHEN_MLA, .title = title_formula,
		.formula = "dc_kv = the gradient of c_kv: dK's k_nope parts and dV through kv_b_proj "
			   "and kv_a_layernorm's RMSNorm",
		.says = "the gradient of the keys' and values' latent" },
	[GS_DK_PE] = { .stage = MHA_GRAD_DK_PE, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE, .flags = STEP_AFTER_HEADS | STEP_GRAD,
		.when = WHEN_MLA, .title = title_formula,
		.formula = "dk_pe = every head's k_pe_rot part of dK summed, turned back",
		.says = "the gradient of the shared rope key" },
	[GS_DX] = { .key = "dX", .stage = -1, .head_stage = -1,
		.rows = AXIS_QUERY, .cols = AXIS_FEATURE,
		.when = WHEN_PROJECTED, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dx, .formula = "dX",
		.says = "the gradient of X" },
	[GS_DX_KV] = { .key = "dX_kv", .stage = -1, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE,
		.when = WHEN_KV, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dx_kv, .formula = "dX_kv = dK*W_K^T + dV*W_V^T",
		.says = "the gradient of X_kv (keys and values)" },
	[GS_DX_K] = { .key = "dX_k", .stage = -1, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE,
		.when = WHEN_APART, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dx_apart, .formula = "dX_k = dK*W_K^T",
		.says = "the gradient of X_k" },
	[GS_DX_V] = { .key = "dX_v", .stage = -1, .head_stage = -1,
		.rows = AXIS_KEY, .cols = AXIS_FEATURE,
		.when = WHEN_APART, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dx_apart, .formula = "dX_v = dV*W_V^T",
		.says = "the gradient of X_v" },
	[GS_DW_Q] = { .key = "dW_Q", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = WQ, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dw_q, .formula = "dW_Q = X^T*dQ",
		.says = "the gradient of W_Q" },
	[GS_DW_K] = { .key = "dW_K", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = WK, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dw_kv, .formula = "dW_K = X_k^T*dK",
		.says = "the gradient of W_K" },
	[GS_DW_V] = { .key = "dW_V", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = WV, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_dw_kv, .formula = "dW_V = X_v^T*dV",
		.says = "the gradient of W_V" },
	[GS_DW_O] = { .key = "dW_O", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = WO, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "dW_O = concat^T*grad_output",
		.says = "the gradient of W_O" },
	[GS_DB_Q] = { .key = "db_Q", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = BQ, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "db_Q = column sums of dQ",
		.says = "the gradient of b_Q" },
	[GS_DB_K] = { .key = "db_K", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = BK, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "db_K = column sums of dK",
		.says = "the gradient of b_K" },
	[GS_DB_V] = { .key = "db_V", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = BV, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "db_V = column sums of dV",
		.says = "the gradient of b_V" },
	[GS_DB_O] = { .key = "db_O", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_WEIGHT, .weight = BO, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "db_O = column sums of grad_output",
		.says = "the gradient of b_O" },
	[GS_DSINKS] = { .key = "dsinks", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_SINKS, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "dsinks = -sum_i p_sink,i*D_i, per head",
		.says = "the gradient of each head's sink logit" },
	[GS_DQ_NORM_W] = { .key = "dq_norm_weight", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_NORM_W, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula,
		.formula = "dq_norm_weight = sum over the rows (and the heads sharing it) of dq_norm o "
			   "q_norm's input normalised",
		.says = "the gradient of the q norm's weights" },
	[GS_DK_NORM_W] = { .key = "dk_norm_weight", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE,
		.when = WHEN_NORM_W, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula,
		.formula = "dk_norm_weight = sum over the rows (and the heads sharing it) of dk_norm o "
			   "k_norm's input normalised",
		.says = "the gradient of the k norm's weights" },
	[GS_DLATENT + LAT_Q_A_PROJ] = { .key = "dq_a_proj", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE, .when = WHEN_LATENT,
		.weight = LAT_Q_A_PROJ, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "dq_a_proj = X^T*dc_q",
		.says = "the gradient of q_a_proj" },
	[GS_DLATENT + LAT_Q_A_NORM] = { .key = "dq_a_layernorm", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE, .when = WHEN_LATENT,
		.weight = LAT_Q_A_NORM, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula,
		.formula = "dq_a_layernorm = sum over the rows of dc_q_norm o c_q normalised",
		.says = "the gradient of q_a_layernorm's weights" },
	[GS_DLATENT + LAT_KV_A_PROJ] = { .key = "dkv_a_proj_with_mqa", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE, .when = WHEN_LATENT,
		.weight = LAT_KV_A_PROJ, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "dkv_a_proj_with_mqa = X^T*[dc_kv, dk_pe]",
		.says = "the gradient of kv_a_proj_with_mqa" },
	[GS_DLATENT + LAT_KV_A_NORM] = { .key = "dkv_a_layernorm", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE, .when = WHEN_LATENT,
		.weight = LAT_KV_A_NORM, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula,
		.formula = "dkv_a_layernorm = sum over the rows of dc_kv_norm o c_kv normalised",
		.says = "the gradient of kv_a_layernorm's weights" },
	[GS_DLATENT + LAT_KV_B_PROJ] = { .key = "dkv_b_proj", .stage = -1, .head_stage = -1,
		.rows = AXIS_FEATURE, .cols = AXIS_FEATURE, .when = WHEN_LATENT,
		.weight = LAT_KV_B_PROJ, .flags = STEP_AFTER_HEADS | STEP_DEFAULT | STEP_RESULT,
		.title = title_formula, .formula = "dkv_b_proj = c_kv_norm^T*[dk_nope, dV] per head",
		.says = "the gradient of kv_b_proj" },
};

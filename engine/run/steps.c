/*
 * steps.c: forward's table of printable steps (steps.h) and its titles, and
 * what derives from a table before and during a run: the names --print
 * takes, when a run has a step, the print set, the stages to observe, and
 * the observer and its copies (items.c: what is printed after).
 */
#include "run/steps.h"

#include "util/msg.h"
#include "util/opts.h"
#include "util/number.h"
#include "load/rope_scaling.h"
#include "load/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_weight(const struct step_facts *f, int which)
{
	return (f->weights >> which) & 1;
}

/* the scores go through a mask: causal, --window, --mask or --kv-len */
static int masked(const struct step_facts *f)
{
	return f->cfg->causal || f->cfg->window.on || f->mask_file || f->cfg->kv_len ||
	       f->cfg->kv_lens || f->cfg->alibi.on;
}

/* the key/value head (1-based) query head q uses */
static size_t kv_head(const struct step_facts *f, size_t q)
{
	return (q - 1) / (f->d->heads / f->d->kv_heads) + 1;
}

/* ---- titles ------------------------------------------------------------ */

void step_scale_words(char *buf, size_t size, const struct step_facts *f)
{
	const mha_dims *d = f->d;

	switch (f->cfg->scale_mode) {
	case MHA_SCALE_DK:
		snprintf(buf, size, "%.6g = 1/sqrt(d_k), d_k = %zu", f->scale, d->d_k);
		break;
	case MHA_SCALE_DMODEL:
		snprintf(buf, size, "%.6g = 1/sqrt(d_model), d_model = %zu", f->scale, d->d_q_in);
		break;
	case MHA_SCALE_SEQLEN:
		snprintf(buf, size, "%.6g = 1/sqrt(n_kv), n_kv = %zu", f->scale, d->n_kv);
		break;
	default:
		format_shortest(buf, size, f->scale);
		break;
	}
}

static void title_x(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                    size_t head)
{
	(void)st;
	(void)f;
	(void)head;
	snprintf(buf, size, "X");
}

/* latent attention's Q, K and V: each head's two parts side by side */
static int latent_title(char *buf, size_t size, const struct step_facts *f, size_t head, char name)
{
	const int abs = f->cfg->mla.absorbed;

	if (!f->cfg->mla.on)
		return 0;
	if (head) {
		/* the heads read Q, K and V as made: no rotation of their own */
		snprintf(buf, size, "head %zu: %c%zu", head, name, head);
		return 1;
	}
	if (name == 'Q')
		snprintf(buf, size, abs ? "Q = each head's [q_nope*W_UK^T, q_pe_rot] (absorbed: "
			 "W_UK, kv_b_proj's key block, folded in)" : "Q = each head's [q_nope, q_pe_rot]");
	else if (name == 'K')
		snprintf(buf, size, abs ? "K = [c_kv_norm, k_pe_rot] (absorbed: one key for every head)"
			 : "K = each head's [k_nope, k_pe_rot]");
	else
		snprintf(buf, size, abs ? "V = c_kv_norm (absorbed: one value for every head, W_UV "
			 "folded into W_O)" : "V = each head's value block of c_kv_norm*kv_b_proj");
	return 1;
}

/* "Q = X*W_Q + b_Q", "K = X_kv", "V = X_v", "V"; a head's block "head 2: K1" */
static void projection(char *buf, size_t size, const struct step_facts *f, size_t head, char name,
		       int w, int b)
{
	const char *src = (name == 'Q' || !f->cross) ? "X" : !f->apart ? "X_kv"
			  : name == 'K' ? "X_k" : "X_v";
	char bias[8] = "";

	if (has_weight(f, b))
		snprintf(bias, sizeof(bias), " + b_%c", name);
	if (latent_title(buf, size, f, head, name))
		return;
	if (head && name != 'V' && (f->cfg->rope.mode || f->cfg->norm.kind))
		/* the heads read Q and K turned (q_rot's and k_rot's blocks) or normalised */
		snprintf(buf, size, "head %zu: %c%zu %s", head, name,
			 name == 'Q' ? head : kv_head(f, head),
			 f->cfg->rope.mode ? "rotated" : "normalised");
	else if (head)
		snprintf(buf, size, "head %zu: %c%zu", head, name, name == 'Q' ? head : kv_head(f, head));
	else if (f->direct)
		snprintf(buf, size, "%c", name);
	else if (!has_weight(f, w))
		snprintf(buf, size, "%c = %s", name, src);
	else
		snprintf(buf, size, "%c = %s*W_%c%s", name, src, name, bias);
}

static void title_q(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                    size_t head)
{
	(void)st;
	projection(buf, size, f, head, 'Q', WQ, BQ);
}

static void title_k(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                    size_t head)
{
	(void)st;
	projection(buf, size, f, head, 'K', WK, BK);
}

static void title_v(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                    size_t head)
{
	(void)st;
	projection(buf, size, f, head, 'V', WV, BV);
}

/* a latent attention step's title: its formula, the keys' source named */
static void title_latent(char *buf, size_t size, const struct step *st, const struct step_facts *f,
			 size_t head)
{
	const char *at = strstr(st->formula, "{X}");

	(void)head;
	if (at)
		snprintf(buf, size, "%.*s%s%s", (int)(at - st->formula), st->formula,
			 f->cross ? "X_kv" : "X", at + 3);
	else
		snprintf(buf, size, "%s", st->formula);
}

/* "q_pe_rot = q_pe rotated by position (…)" */
static void title_latent_rot(char *buf, size_t size, const struct step *st,
			     const struct step_facts *f, size_t head)
{
	const mha_rope *r = &f->cfg->rope;
	const size_t R = f->cfg->mla.d_rope;
	const int q = st->stage == MHA_STAGE_Q_PE_ROT;
	char theta[40];

	(void)head;
	format_shortest(theta, sizeof(theta), r->theta ? r->theta : 10000);
	if (r->mode == MHA_ROPE_INTERLEAVED)
		snprintf(buf, size, "%s = %s rotated by position (rope interleaved: pairs (2i, 2i+1) "
			 "of R = %zu, angle p*%s^(-2i/%zu)%s; laid out as DeepSeek-V3: the pairs' first "
			 "features, then their second)", q ? "q_pe_rot" : "k_pe_rot", q ? "q_pe" : "k_pe",
			 R, theta, R, r->scaling.type ? " scaled" : "");
	else
		snprintf(buf, size, "%s = %s rotated by position (rope half: pairs (i, i+%zu) of R = "
			 "%zu, angle p*%s^(-2i/%zu)%s)", q ? "q_pe_rot" : "k_pe_rot", q ? "q_pe" : "k_pe",
			 R / 2, R, theta, R, r->scaling.type ? " scaled" : "");
}

/* "q_rot = Q rotated by position (rope half: pairs (i, i+2) of R = 4 of d_k = 4, angle p*10000^(-2i/4); queries at i + 2)" */
static void rope_title(char *buf, size_t size, const struct step_facts *f, char name)
{
	const mha_rope *r = &f->cfg->rope;
	const size_t dk = f->d ? f->d->d_k : 0, R = r->dim ? r->dim : dk;
	const int given = name == 'Q' ? r->q_pos != NULL : r->k_pos != NULL;
	char angle[160], theta[40], where[64], pairs[48];

	format_shortest(theta, sizeof(theta), r->theta ? r->theta : 10000);
	if (r->cos) {
		snprintf(angle, sizeof(angle), "cos and sin from the tables");
	} else if (r->scaling.type) {
		const double af = mha_rope_attention_factor(r);
		char fa[40];

		format_shortest(fa, sizeof(fa), af);
		snprintf(angle, sizeof(angle), "angle p*g_i, %s^(-2i/%zu) scaled %s%s%s", theta, R,
			 rope_scaling_name(r->scaling.type),
			 af != 1 ? ", cos and sin times " : "", af != 1 ? fa : "");
	} else {
		snprintf(angle, sizeof(angle), "angle p*%s^(-2i/%zu)", theta, R);
	}
	if (r->mode == MHA_ROPE_HALF)
		snprintf(pairs, sizeof(pairs), "pairs (i, i+%zu)", R / 2);
	else
		snprintf(pairs, sizeof(pairs), "pairs (2i, 2i+1)");
	if (given)
		snprintf(where, sizeof(where), "%s at the given positions", name == 'Q' ? "queries" : "keys");
	else if (name == 'K')
		snprintf(where, sizeof(where), "key j at j");
	else if (f->cfg->causal == MHA_CAUSAL_NONE || f->cfg->causal == MHA_CAUSAL_TOP_LEFT || !f->d)
		snprintf(where, sizeof(where), "query i at i");
	else
		snprintf(where, sizeof(where), "query i at i + %td", mha_causal_offset(f->d, f->cfg, 0));
	snprintf(buf, size, "%s = %s rotated by position (rope %s: %s of R = %zu of d_k = %zu, %s; %s)",
		 name == 'Q' ? "q_rot" : "k_rot",
		 f->cfg->norm.kind ? (name == 'Q' ? "q_norm" : "k_norm") : name == 'Q' ? "Q" : "K",
		 r->mode == MHA_ROPE_HALF ? "half" : "interleaved", pairs, R, dk, angle, where);
}

const char *step_norm_kind(mha_norm_kind kind)
{
	static const char *const names[] = { [MHA_NORM_NONE] = "none", [MHA_NORM_RMS] = "rms",
					     [MHA_NORM_RMS1P] = "rms1p", [MHA_NORM_LAYER] = "layer" };

	return (unsigned)kind <= MHA_NORM_LAYER ? names[kind] : "";
}

const char *step_norm_formula(char *buf, size_t size, const mha_qk_norm *n)
{
	char eps[40];

	format_shortest(eps, sizeof(eps), n->eps);
	if (n->kind == MHA_NORM_LAYER)
		snprintf(buf, size, "layer: (x - mean(x))/sqrt(var(x) + %s)*w", eps);
	else
		snprintf(buf, size, "%s: x/sqrt(mean(x^2) + %s)*%s", step_norm_kind(n->kind), eps,
			 n->kind == MHA_NORM_RMS1P ? "(1 + w)" : "w");
	return buf;
}

/* "q_norm = Q normalised per head (rms: x/sqrt(mean(x^2) + 1e-06)*w, w from q.json)" */
static void norm_title(char *buf, size_t size, const struct step_facts *f, char name)
{
	const mha_qk_norm *n = &f->cfg->norm;
	const char *from = name == 'Q' ? f->q_norm_file : f->k_norm_file;
	char how[96];

	snprintf(buf, size, "%s = %c normalised %s (%s, %s%s)", name == 'Q' ? "q_norm" : "k_norm",
		 name, n->over_all ? "over the whole row" : "per head",
		 step_norm_formula(how, sizeof(how), n), from ? "w from " : "no weights: w = ",
		 from ? path_shown(from) : n->kind == MHA_NORM_RMS1P ? "0" : "1");
}

static void title_q_norm(char *buf, size_t size, const struct step *st, const struct step_facts *f,
			 size_t head)
{
	(void)st;
	(void)head;
	norm_title(buf, size, f, 'Q');
}

static void title_k_norm(char *buf, size_t size, const struct step *st, const struct step_facts *f,
			 size_t head)
{
	(void)st;
	(void)head;
	norm_title(buf, size, f, 'K');
}

static void title_q_rot(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                        size_t head)
{
	(void)st;
	(void)head;
	rope_title(buf, size, f, 'Q');
}

static void title_k_rot(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                        size_t head)
{
	(void)st;
	(void)head;
	rope_title(buf, size, f, 'K');
}

static void title_scores(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                         size_t head)
{
	(void)st;
	snprintf(buf, size, "head %zu: scores = Q%zu*K%zu^T", head, head, kv_head(f, head));
}

static void title_scaled(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                         size_t head)
{
	(void)st;
	char how[96];

	step_scale_words(how, sizeof(how), f);
	snprintf(buf, size, "head %zu: scaled = scores * %s", head, how);
}

static void title_softcapped(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                             size_t head)
{
	(void)st;
	char cap[40];

	format_shortest(cap, sizeof(cap), f->cfg->softcap);
	snprintf(buf, size, "head %zu: softcapped = %s*tanh(scaled/%s)", head, cap, cap);
}

/* one side of the window: "2 keys left", "unbounded right" */
static void window_side_words(char *buf, size_t size, ptrdiff_t n, const char *side)
{
	if (n < 0)
		snprintf(buf, size, "unbounded %s", side);
	else
		snprintf(buf, size, "%td key%s %s", n, n == 1 ? "" : "s", side);
}

/*
 * ALiBi's part of the mask's title: "ALiBi slope*(j - p), slopes 0.0625,
 * 0.00390625" (the heads in order; "…" when they do not all fit)
 */
static void alibi_words(char *buf, size_t size, const struct step_facts *f)
{
	size_t n = (size_t)snprintf(buf, size, "ALiBi slope*(j - p)");

	for (size_t h = 0; f->alibi_slopes && h < f->heads; h++) {
		char v[40];

		format_shortest(v, sizeof(v), f->alibi_slopes[h]);
		if (n + strlen(v) + 12 >= size) {
			snprintf(buf + n, size - n, ", …");
			return;
		}
		n += (size_t)snprintf(buf + n, size - n, "%s%s", h ? ", " : ", slopes ", v);
	}
}

/*
 * "mask (added to the scores): causal; window 2 keys left, 0 keys right;
 * keys from 5 on are padding; m.json; ALiBi slope*(j - p), slopes 0.5, 0.25"
 */
static void title_mask(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                       size_t head)
{
	(void)st;
	const mha_config *cfg = f->cfg;
	const char *parts[5] = { NULL };
	char causal[64], kv[48], win[112], l[48], r[48], alibi[120];
	char file[200];
	size_t n = 0;

	(void)head;
	switch (cfg->causal) {
	case MHA_CAUSAL_TOP_LEFT: snprintf(causal, sizeof(causal), "causal"); break;
	case MHA_CAUSAL_BOTTOM_RIGHT: snprintf(causal, sizeof(causal), "causal, bottom-right"); break;
	case MHA_CAUSAL_OFFSET:
		snprintf(causal, sizeof(causal), "causal, offset %td", cfg->causal_offset);
		break;
	default: causal[0] = '\0'; break;
	}
	if (causal[0])
		parts[n++] = causal;
	if (cfg->window.on) {
		window_side_words(l, sizeof(l), cfg->window.left, "left");
		window_side_words(r, sizeof(r), cfg->window.right, "right");
		snprintf(win, sizeof(win), "window %s, %s", l, r);
		parts[n++] = win;
	}
	if (cfg->kv_len) {
		snprintf(kv, sizeof(kv), "keys from %zu on are padding", cfg->kv_len + 1);
		parts[n++] = kv;
	}
	if (f->mask_file) {
		/* --mask-bool block: the file read as PyTorch means it */
		snprintf(file, sizeof(file), "%s%s", path_shown(f->mask_file),
			 f->mask_block ? ", true = blocked" : "");
		parts[n++] = file;
	}
	if (cfg->alibi.on) {
		alibi_words(alibi, sizeof(alibi), f);
		parts[n++] = alibi;
	}
	snprintf(buf, size, "mask (added to the scores): %s%s%s%s%s%s%s%s%s", n ? parts[0] : "none",
		 n > 1 ? "; " : "", n > 1 ? parts[1] : "", n > 2 ? "; " : "", n > 2 ? parts[2] : "",
		 n > 3 ? "; " : "", n > 3 ? parts[3] : "", n > 4 ? "; " : "", n > 4 ? parts[4] : "");
}

static void title_masked(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                         size_t head)
{
	(void)st;
	snprintf(buf, size, "head %zu: masked = %s + mask", head,
		 f->cfg->softcap > 0 ? "softcapped" : "scaled");
}

/* "head 2: softmax(masked) with sink 0.5, row by row": the sink joins each row's denominator */
static void title_softmax(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                          size_t head)
{
	(void)st;
	char sink[64] = "";

	if (f->cfg->sinks && head >= 1) {
		char v[40];

		format_shortest(v, sizeof(v), f->cfg->sinks[head - 1]);
		snprintf(sink, sizeof(sink), " with sink %s", v);
	}
	snprintf(buf, size, "head %zu: softmax(%s)%s, row by row", head,
		 masked(f) ? "masked" : f->cfg->softcap > 0 ? "softcapped" : "scaled", sink);
}

static void title_heads(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                        size_t head)
{
	(void)st;
	snprintf(buf, size, "head %zu: output = softmax*V%zu", head, kv_head(f, head));
}

static void title_concat(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                         size_t head)
{
	(void)st;
	(void)f;
	(void)head;
	snprintf(buf, size, "concat (the heads' outputs side by side)");
}

static void title_output(char *buf, size_t size, const struct step *st, const struct step_facts *f,
                         size_t head)
{
	(void)st;
	(void)head;
	if (!has_weight(f, WO))
		snprintf(buf, size, "output");
	else
		snprintf(buf, size, "output = concat*W_O%s", has_weight(f, BO) ? " + b_O" : "");
}

/* ---- the table ---------------------------------------------------------- */

#define QK AXIS_QUERY, AXIS_KEY
#define QF AXIS_QUERY, AXIS_FEATURE
#define KF AXIS_KEY, AXIS_FEATURE

const struct step steps[STEP_COUNT] = {
	[STEP_X] = { "x", "X", -1, -1, QF, WHEN_ALWAYS, STEP_INPUT | STEP_F32, title_x },
	[STEP_C_Q] = { "c_q", NULL, MHA_STAGE_C_Q, -1, QF, WHEN_MLA_Q, 0, title_latent, 0,
		       "c_q = X*q_a_proj (the queries' latent, q_lora_rank wide)" },
	[STEP_C_Q_NORM] = { "c_q_norm", NULL, MHA_STAGE_C_Q_NORM, -1, QF, WHEN_MLA_Q, 0, title_latent,
			    0, "c_q_norm = c_q/sqrt(mean(c_q^2) + eps)*q_a_layernorm" },
	[STEP_Q_NOPE] = { "q_nope", NULL, MHA_STAGE_Q_NOPE, -1, QF, WHEN_MLA, 0, title_latent, 0,
			  "q_nope = each head's first qk_nope_head_dim columns of the queries' "
			  "projection (c_q_norm*W_Q, or X*W_Q)" },
	[STEP_Q_PE] = { "q_pe", NULL, MHA_STAGE_Q_PE, -1, QF, WHEN_MLA, 0, title_latent, 0,
			"q_pe = each head's last qk_rope_head_dim columns of the queries' projection" },
	[STEP_Q_PE_ROT] = { "q_pe_rot", NULL, MHA_STAGE_Q_PE_ROT, -1, QF, WHEN_MLA_ROPE, 0,
			    title_latent_rot },
	[STEP_C_KV] = { "c_kv", NULL, MHA_STAGE_C_KV, -1, KF, WHEN_MLA, 0, title_latent, 0,
			"c_kv = the first kv_lora_rank columns of {X}*kv_a_proj_with_mqa (the keys' and "
			"values' latent)" },
	[STEP_C_KV_NORM] = { "c_kv_norm", NULL, MHA_STAGE_C_KV_NORM, -1, KF, WHEN_MLA, 0,
			     title_latent, 0, "c_kv_norm = c_kv/sqrt(mean(c_kv^2) + eps)*kv_a_layernorm" },
	[STEP_K_PE] = { "k_pe", NULL, MHA_STAGE_K_PE, -1, KF, WHEN_MLA, 0, title_latent, 0,
			"k_pe = the last qk_rope_head_dim columns of {X}*kv_a_proj_with_mqa (one for "
			"every head)" },
	[STEP_K_PE_ROT] = { "k_pe_rot", NULL, MHA_STAGE_K_PE_ROT, -1, KF, WHEN_MLA_ROPE, 0,
			    title_latent_rot },
	[STEP_K_NOPE] = { "k_nope", NULL, MHA_STAGE_K_NOPE, -1, KF, WHEN_MLA_FULL, 0, title_latent,
			  0, "k_nope = each head's key block of c_kv_norm*kv_b_proj" },
	[STEP_Q] = { "q", NULL, MHA_STAGE_Q, MHA_STAGE_HEAD_Q, QF, WHEN_ALWAYS, STEP_BLOCKS, title_q },
	[STEP_K] = { "k", NULL, MHA_STAGE_K, MHA_STAGE_HEAD_K, KF, WHEN_ALWAYS, STEP_BLOCKS, title_k },
	[STEP_V] = { "v", NULL, MHA_STAGE_V, MHA_STAGE_HEAD_V, KF, WHEN_ALWAYS, STEP_BLOCKS, title_v },
	[STEP_Q_NORM] = { "q_norm", NULL, MHA_STAGE_Q_NORM, -1, QF, WHEN_NORM, 0, title_q_norm },
	[STEP_K_NORM] = { "k_norm", NULL, MHA_STAGE_K_NORM, -1, KF, WHEN_NORM, 0, title_k_norm },
	[STEP_Q_ROT] = { "q_rot", NULL, MHA_STAGE_Q_ROT, -1, QF, WHEN_ROPE, 0, title_q_rot },
	[STEP_K_ROT] = { "k_rot", NULL, MHA_STAGE_K_ROT, -1, KF, WHEN_ROPE, 0, title_k_rot },
	[STEP_SCORES] = { "scores", NULL, -1, MHA_STAGE_SCORES, QK, WHEN_ALWAYS, STEP_DRAWABLE,
			  title_scores },
	[STEP_SCALED] = { "scaled", NULL, -1, MHA_STAGE_SCALED, QK, WHEN_ALWAYS, STEP_DRAWABLE,
			  title_scaled },
	[STEP_SOFTCAPPED] = { "softcapped", NULL, -1, MHA_STAGE_SOFTCAPPED, QK,
			      WHEN_SOFTCAP, STEP_DRAWABLE, title_softcapped },
	[STEP_MASK] = { "mask", NULL, -1, MHA_STAGE_MASK, QK, WHEN_MASK, STEP_STACKED,
			title_mask },
	[STEP_MASKED] = { "masked", NULL, -1, MHA_STAGE_MASKED, QK, WHEN_MASK, STEP_DRAWABLE,
			  title_masked },
	[STEP_SOFTMAX] = { "softmax", NULL, -1, MHA_STAGE_SOFTMAX, QK, WHEN_ALWAYS,
			   STEP_DRAWABLE, title_softmax },
	[STEP_HEADS] = { "heads", "output", -1, MHA_STAGE_HEAD_OUTPUT, QF, WHEN_ALWAYS, 0,
			 title_heads },
	[STEP_CONCAT] = { "concat", NULL, MHA_STAGE_CONCAT, -1, QF, WHEN_ALWAYS,
			  STEP_AFTER_HEADS, title_concat },
	[STEP_OUTPUT] = { "output", NULL, MHA_STAGE_OUTPUT, -1, QF, WHEN_ALWAYS,
			  STEP_RESULT | STEP_AFTER_HEADS | STEP_F32, title_output },
};

int step_by_name(const char *name)
{
	for (int s = 0; s < STEP_COUNT; s++)
		if (!strcmp(name, steps[s].name))
			return s;
	return -1;
}

const char *step_closest(const char *name)
{
	const char *names[STEP_COUNT + 1];

	for (int s = 0; s < STEP_COUNT; s++)
		names[s] = steps[s].name;
	names[STEP_COUNT] = "all";
	return closest_name(name, names, STEP_COUNT + 1);
}

const char *step_names(char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int s = 0; s < STEP_COUNT && used < size; s++) {
		const int n = snprintf(buf + used, size - used, "%s%s", s ? ", " : "", steps[s].name);

		used += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

const char *step_key(const struct step *s)
{
	const int stage = s->stage >= 0 ? s->stage : s->head_stage;

	if (s->key)
		return s->key;
	return s->flags & STEP_GRAD ? mha_grad_stage_name((mha_grad_stage)stage)
				    : mha_stage_name((mha_stage)stage);
}

int step_exists(const struct step *s, const struct step_facts *f)
{
	switch (s->when) {
	case WHEN_SOFTCAP: return f->cfg->softcap > 0;
	case WHEN_MASK: return masked(f);
	case WHEN_ROPE: return f->cfg->rope.mode != MHA_ROPE_NONE && !f->cfg->mla.on;
	case WHEN_NORM: return f->cfg->norm.kind != MHA_NORM_NONE;
	case WHEN_WO: return has_weight(f, WO);
	case WHEN_PROJECTED: return !f->direct;
	case WHEN_KV: return f->cross && !f->apart;
	case WHEN_APART: return f->apart;
	case WHEN_WEIGHT: return has_weight(f, s->weight);
	case WHEN_SINKS: return f->cfg->sinks != NULL;
	case WHEN_NORM_W: return f->cfg->norm.kind != MHA_NORM_NONE && f->cfg->norm.q_weight;
	case WHEN_MLA: return f->cfg->mla.on;
	case WHEN_MLA_Q: return f->cfg->mla.on && f->cfg->mla.q_rank;
	case WHEN_MLA_ROPE: return f->cfg->mla.on && f->cfg->rope.mode != MHA_ROPE_NONE;
	case WHEN_MLA_FULL: return f->cfg->mla.on && !f->cfg->mla.absorbed;
	case WHEN_LATENT:
		return f->cfg->mla.on && (s->weight == LAT_Q_A_PROJ ? f->cfg->mla.q_rank != 0
					  : s->weight == LAT_Q_A_NORM ? f->cfg->mla.q_a_norm != NULL
					  : s->weight == LAT_KV_A_NORM ? f->cfg->mla.kv_a_norm != NULL : 1);
	default: return 1;
	}
}

unsigned steps_print_set(unsigned asked, int all, const struct step_facts *f)
{
	unsigned p = asked;

	for (int s = 0; s < STEP_COUNT; s++) {
		if (all && step_exists(&steps[s], f))
			p |= STEP_BIT(s);
		/* X is not an input when Q, K and V are */
		if (f->direct && (steps[s].flags & STEP_INPUT))
			p &= ~STEP_BIT(s);
	}
	return p;
}

unsigned steps_every(const struct step_facts *f)
{
	return steps_print_set(0, 1, f);
}

unsigned steps_flagged(unsigned flag)
{
	unsigned p = 0;

	for (int s = 0; s < STEP_COUNT; s++)
		if (steps[s].flags & flag)
			p |= STEP_BIT(s);
	return p;
}

mha_stages steps_stages(unsigned p, size_t heads)
{
	mha_stages bits = 0;

	for (int s = 0; s < STEP_COUNT; s++) {
		const struct step *st = &steps[s];

		if (!(p & STEP_BIT(s)))
			continue;
		/* the output is the run's own array, X the input: nothing to observe */
		if (st->stage >= 0 && !(st->flags & STEP_RESULT))
			bits |= MHA_STAGE_SET(st->stage);
		/* with several heads, each one's block of Q, K, V is shown too */
		if (st->head_stage >= 0 && (!(st->flags & STEP_BLOCKS) || heads > 1))
			bits |= MHA_STAGE_SET(st->head_stage);
		/* one head's Q and K block is Q or K, or q_norm and k_norm, or q_rot and
		 * k_rot (the library hands those over only with a norm, with rope) */
		if (heads == 1 && (s == STEP_Q || s == STEP_K))
			bits |= MHA_STAGE_SET(s == STEP_Q ? MHA_STAGE_Q_ROT : MHA_STAGE_K_ROT) |
				MHA_STAGE_SET(s == STEP_Q ? MHA_STAGE_Q_NORM : MHA_STAGE_K_NORM);
	}
	return bits;
}

/* ---- the observer ------------------------------------------------------- */

int steps_keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols)
{
	struct step_results *r = ctx;
	const struct step *t = r->table ? r->table : steps;
	const int n = r->n ? (int)r->n : STEP_COUNT;
	matrix *dst;
	int s;

	for (s = 0; s < n; s++)
		if (head < 0 ? t[s].stage == (int)stage && !(t[s].flags & STEP_RESULT)
			     : t[s].head_stage == (int)stage)
			break;
	if (s == n)
		return 0; /* not asked for */
	if (head < 0) {
		dst = &r->whole[s];
	} else if ((t[s].flags & STEP_STACKED) && !r->mask_per_head) {
		/* one mask for every head: keep the first copy as the whole-model mask */
		if (head > 0)
			return 0;
		dst = &r->whole[s];
	} else {
		if (!r->per_head[s]) {
			r->per_head[s] = calloc(r->heads, sizeof(matrix));
			if (!r->per_head[s])
				return error("out of memory"), 1;
		}
		dst = &r->per_head[s][head];
	}
	matrix_free(dst); /* a stage handed over again (an observer not told of sequences) */
	if (matrix_alloc(dst, 2, rows, cols, 1))
		return 1;
	memcpy(dst->v, m, rows * cols * sizeof(double));
	return 0;
}

int steps_batch_keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows,
		     size_t cols)
{
	struct steps_batch *k = ctx;

	return steps_keep(&k->res[k->cur], stage, head, m, rows, cols);
}

int steps_batch_keep_grad(void *ctx, mha_grad_stage stage, int head, const double *m, size_t rows,
			  size_t cols)
{
	struct steps_batch *k = ctx;

	/* the results' table says which kind of stage it is */
	return steps_keep(&k->res[k->cur], (mha_stage)stage, head, m, rows, cols);
}

int steps_batch_sequence(void *ctx, size_t b)
{
	((struct steps_batch *)ctx)->cur = b;
	return 0;
}

int steps_stack(struct step_results *r)
{
	const struct step *t = r->table ? r->table : steps;
	const size_t n = r->n ? r->n : STEP_COUNT;

	for (size_t s = 0; s < n; s++) {
		const matrix *per = r->per_head[s];
		matrix *all = &r->whole[s];
		size_t plane;

		if (!per || !(t[s].flags & STEP_STACKED))
			continue;
		plane = per[0].dim[0] * per[0].dim[1];
		if (matrix_alloc(all, 3, r->heads, per[0].dim[0], per[0].dim[1]))
			return -1;
		for (size_t h = 0; h < r->heads; h++)
			memcpy(all->v + h * plane, per[h].v, plane * sizeof(double));
	}
	return 0;
}

void steps_results_free(struct step_results *r)
{
	for (size_t s = 0; s < STEP_MAX; s++) {
		matrix_free(&r->whole[s]);
		if (r->per_head[s])
			for (size_t h = 0; h < r->heads; h++)
				matrix_free(&r->per_head[s][h]);
		free(r->per_head[s]);
		r->per_head[s] = NULL;
	}
}

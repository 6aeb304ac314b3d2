/*
 * meta.c: the "meta" object of JSON output (meta.h).  It says how the
 * numbers were made, not what they are: nothing here reads a matrix.
 */
#include "run/meta.h"

#include "util/msg.h"
#include "util/text.h"
#include "load/latent.h"
#include "load/rope_scaling.h"
#include "load/weights.h"
#include "util/number.h"

#include <string.h>

struct member {
	FILE *fp;
	int depth;
	int n; /* members written */
};

static void key(struct member *mb, const char *k)
{
	fputs(mb->n++ ? ",\n" : "\n", mb->fp);
	for (int i = 0; i <= mb->depth; i++)
		fputs("  ", mb->fp);
	fprintf(mb->fp, "\"%s\": ", k);
}

static void string(struct member *mb, const char *k, const char *v)
{
	key(mb, k);
	if (v)
		text_put_json(mb->fp, v); /* a file name may hold anything */
	else
		fputs("null", mb->fp);
}

static void count(struct member *mb, const char *k, size_t v)
{
	key(mb, k);
	fprintf(mb->fp, "%zu", v);
}

/* v as a JSON number; null when absent */
static void number(struct member *mb, const char *k, double v, int absent)
{
	key(mb, k);
	if (absent)
		fputs("null", mb->fp);
	else
		json_number(mb->fp, v, 0);
}

/* what --scale chose: the rule's words, as the titles give them */
const char *meta_scale_rule(mha_scale_mode mode)
{
	switch (mode) {
	case MHA_SCALE_DK: return "1/sqrt(d_k)";
	case MHA_SCALE_DMODEL: return "1/sqrt(d_model)";
	case MHA_SCALE_SEQLEN: return "1/sqrt(n_kv)";
	case MHA_SCALE_NONE: return "none";
	default: return "given";
	}
}

const char *meta_causal_name(mha_causal c)
{
	switch (c) {
	case MHA_CAUSAL_TOP_LEFT: return "top-left";
	case MHA_CAUSAL_BOTTOM_RIGHT: return "bottom-right";
	case MHA_CAUSAL_OFFSET: return "offset";
	default: return "none";
	}
}
/* the q/k norm: {"kind": "rms", "over": "head", "eps": 1e-06, "q": FILE, "k": FILE},
 * or null */
void meta_norm(FILE *fp, const mha_qk_norm *n, const char *q_file, const char *k_file)
{
	if (!n->kind) {
		fputs("null", fp);
		return;
	}
	fprintf(fp, "{\"kind\": \"%s\", \"over\": \"%s\", \"eps\": ", step_norm_kind(n->kind),
		n->over_all ? "all" : "head");
	json_number(fp, n->eps, 0);
	fputs(", \"q\": ", fp);
	if (q_file)
		text_put_json(fp, path_shown(q_file));
	else
		fputs("null", fp);
	fputs(", \"k\": ", fp);
	if (k_file)
		text_put_json(fp, path_shown(k_file));
	else
		fputs("null", fp);
	fputc('}', fp);
}

/* multi-head latent attention's dims and form: null, or {"q_lora_rank": 5,
 * "kv_lora_rank": 4, "qk_nope_head_dim": 3, "qk_rope_head_dim": 2,
 * "v_head_dim": 2, "eps": 1e-06, "form": "expanded"} */
void meta_mla(FILE *fp, const mha_config *cfg, const mha_dims *d)
{
	const mha_mla *m = &cfg->mla;

	if (!m->on) {
		fputs("null", fp);
		return;
	}
	fputs("{\"q_lora_rank\": ", fp);
	if (m->q_rank)
		fprintf(fp, "%zu", m->q_rank);
	else
		fputs("null", fp);
	fprintf(fp, ", \"kv_lora_rank\": %zu, \"qk_nope_head_dim\": %zu, \"qk_rope_head_dim\": %zu, "
		"\"v_head_dim\": %zu, \"eps\": ", m->kv_rank, d->d_k - m->d_rope, m->d_rope, d->d_v);
	json_number(fp, m->eps, 0);
	fprintf(fp, ", \"form\": \"%s\"}", m->absorbed ? "absorbed" : "expanded");
}

/* rope.scaling as the rotation used it: null, or {"type": "yarn", "factor":
 * 4, "original_max": 32768, "attention_factor": 1.1386…} (mha.h) */
void meta_rope_scaling(FILE *fp, const mha_rope *r)
{
	const mha_rope_scaling *c = &r->scaling;

	if (!*rope_scaling_name(c->type)) {
		fputs("null", fp);
		return;
	}
	fprintf(fp, "{\"type\": \"%s\", \"factor\": ", rope_scaling_name(c->type));
	json_number(fp, c->factor, 0);
	fputs(", \"original_max\": ", fp);
	if (c->type == MHA_ROPE_SCALING_LINEAR)
		fputs("null", fp);
	else
		json_number(fp, c->original_max, 0);
	fputs(", \"attention_factor\": ", fp);
	json_number(fp, mha_rope_attention_factor(r), 0);
	fputc('}', fp);
}


void meta_write_json(FILE *fp, const struct run_meta *m, int depth)
{
	const struct step_facts *f = m->f;
	const mha_config *cfg = f->cfg;
	const mha_dims *d = f->d;
	struct member mb = { fp, depth, 0 };
	int n = 0;

	fputc('{', fp);
	string(&mb, "version", mha_version());
	string(&mb, "inputs", f->direct ? "q, k, v" : f->apart ? "x, xk, xv" : f->cross ? "x, kv" : "x");
	key(&mb, "weights");
	fputc('[', fp);
	for (int i = 0; i < N_WEIGHTS; i++)
		if ((f->weights >> i) & 1)
			fprintf(fp, "%s\"%s\"", n++ ? ", " : "", weight_names[i]);
	/* multi-head latent attention's tensors, by DeepSeek's names */
	for (int i = 0; cfg->mla.on && i < N_LATENT; i++)
		if ((i != LAT_Q_A_PROJ || cfg->mla.q_rank) && (i != LAT_Q_A_NORM || cfg->mla.q_a_norm) &&
		    (i != LAT_KV_A_NORM || cfg->mla.kv_a_norm))
			fprintf(fp, "%s\"%s\"", n++ ? ", " : "", latent_names[i]);
	fputc(']', fp);
	/* a checkpoint's (-w a model folder): which module of it, and its config */
	key(&mb, "model");
	if (f->model) {
		fputs("{\"layout\": ", fp);
		text_put_json(fp, f->model);
		fputs(", \"layer\": ", fp);
		if (f->model_layer >= 0)
			fprintf(fp, "%lld", f->model_layer);
		else
			fputs("null", fp);
		fputs(", \"prefix\": ", fp);
		text_put_json(fp, f->model_prefix ? f->model_prefix : "");
		fputs(", \"config\": ", fp);
		if (f->model_config)
			text_put_json(fp, path_shown(f->model_config));
		else
			fputs("null", fp);
		fputc('}', fp);
	} else {
		fputs("null", fp);
	}
	/* a batch (3-D inputs): its sequences, and the one shown alone */
	key(&mb, "batch");
	if (m->batch)
		fprintf(fp, "%zu", m->batch);
	else
		fputs("null", fp);
	key(&mb, "sequence");
	if (m->sequence)
		fprintf(fp, "%zu", m->sequence);
	else
		fputs("null", fp);
	count(&mb, "n_q", d->n_q);
	count(&mb, "n_kv", d->n_kv);
	count(&mb, "d_model", d->d_q_in);
	count(&mb, "heads", d->heads);
	count(&mb, "kv_heads", d->kv_heads ? d->kv_heads : d->heads);
	count(&mb, "d_k", d->d_k);
	count(&mb, "d_v", d->d_v);
	count(&mb, "d_out", mha_output_cols(d, (f->weights >> WO) & 1));
	key(&mb, "scale");
	fputs("{\"value\": ", fp);
	json_number(fp, m->rep->scale, 0);
	fprintf(fp, ", \"rule\": \"%s\"}", meta_scale_rule(cfg->scale_mode));
	string(&mb, "causal", meta_causal_name(cfg->causal));
	key(&mb, "causal_offset");
	if (cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT && cfg->kv_lens) {
		/* each sequence's, from its own key length */
		for (size_t b = 0; b < d->batch; b++)
			fprintf(fp, "%s%td", b ? ", " : "[", mha_causal_offset(d, cfg, b));
		fputc(']', fp);
	} else if (cfg->causal != MHA_CAUSAL_NONE) {
		fprintf(fp, "%td", m->rep->causal_offset);
	} else {
		fputs("null", fp);
	}
	key(&mb, "kv_len");
	if (cfg->kv_lens) {
		for (size_t b = 0; b < d->batch; b++)
			fprintf(fp, "%s%zu", b ? ", " : "[", cfg->kv_lens[b]);
		fputc(']', fp);
	} else if (cfg->kv_len) {
		fprintf(fp, "%zu", cfg->kv_len);
	} else {
		fputs("null", fp);
	}
	key(&mb, "window");
	if (cfg->window.on)
		fprintf(fp, "[%td, %td]", cfg->window.left, cfg->window.right);
	else
		fputs("null", fp);
	key(&mb, "sinks");
	if (cfg->sinks) {
		for (size_t h = 0; h < d->heads; h++) {
			fputs(h ? ", " : "[", fp);
			json_number(fp, cfg->sinks[h], 0);
		}
		fputs("]", fp);
	} else {
		fputs("null", fp);
	}
	/* ALiBi: the slopes used, and whether given or Press et al.'s */
	key(&mb, "alibi");
	if (cfg->alibi.on && f->alibi_slopes) {
		fputs("{\"slopes\": ", fp);
		for (size_t h = 0; h < d->heads; h++) {
			fputs(h ? ", " : "[", fp);
			json_number(fp, f->alibi_slopes[h], 0);
		}
		fprintf(fp, "], \"rule\": \"%s\"}", cfg->alibi.slopes ? "given" : "press");
	} else {
		fputs("null", fp);
	}
	key(&mb, "rope");
	if (cfg->rope.mode) {
		/* one line, as scale: {"mode": "half", "theta": 10000, "dim": 4, "positions": null, …} */
		const char *const files[3] = { f->positions_file, f->rope_cos_file, f->rope_sin_file };
		static const char *const names[3] = { "positions", "cos", "sin" };

		fprintf(fp, "{\"mode\": \"%s\", \"theta\": ",
			cfg->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved");
		if (cfg->rope.cos)
			fputs("null", fp); /* the tables given, no theta */
		else
			json_number(fp, cfg->rope.theta ? cfg->rope.theta : 10000, 0);
		fprintf(fp, ", \"dim\": %zu", cfg->mla.on ? cfg->mla.d_rope
					     : cfg->rope.dim ? cfg->rope.dim : d->d_k);
		for (int i = 0; i < 3; i++) {
			fprintf(fp, ", \"%s\": ", names[i]);
			if (files[i])
				text_put_json(fp, path_shown(files[i]));
			else
				fputs("null", fp);
		}
		fputs(", \"scaling\": ", fp);
		meta_rope_scaling(fp, &cfg->rope);
		fputc('}', fp);
	} else {
		fputs("null", fp);
	}
	key(&mb, "norm");
	meta_norm(fp, &cfg->norm, f->q_norm_file, f->k_norm_file);
	key(&mb, "mla");
	meta_mla(fp, cfg, d);
	number(&mb, "softcap", cfg->softcap, !(cfg->softcap > 0));
	string(&mb, "mask", f->mask_file ? path_shown(f->mask_file) : NULL);
	string(&mb, "mask_bool", f->mask_bool); /* what the boolean mask's true meant */
	string(&mb, "dtype", m->f32 ? "f32" : cfg->precision == MHA_PRECISION_BF16 ? "bf16"
			     : cfg->precision == MHA_PRECISION_FP16 ? "fp16" : "f64");
	string(&mb, "path", m->rep->fast_path ? "fast" : "plain");
	fputc('\n', fp);
	for (int i = 0; i < depth; i++)
		fputs("  ", fp);
	fputc('}', fp);
}

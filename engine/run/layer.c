/*
 * layer.c: a checkpoint's layer as a run resolves it, described
 * (layer.h): its facts, its JSON object, its tensors by name.
 */
#include "run/layer.h"
#include "load/families.h"
#include "load/latent.h"
#include "load/model.h"
#include "load/weights.h"
#include "run/meta.h"
#include "util/number.h"
#include "util/text.h"

#include <math.h>
#include <string.h>

void layer_facts(const struct problem *pb, struct layer_facts *f)
{
	const struct problem_spec *s = &pb->spec;
	const mha_dims *d = &pb->d;
	const mha_config *c = &pb->cfg;

	memset(f, 0, sizeof(*f));
	/* config.json's own model_type, even one read as another family's */
	f->type = s->type_said[0] ? s->type_said : s->mtype ? s->mtype->type : "";
	f->n_stated = model_settings(s, 1, f->stated, sizeof(f->stated) / sizeof(f->stated[0]));
	f->H = d->heads;
	f->G = d->kv_heads ? d->kv_heads : f->H;
	f->dk = d->d_k;
	f->dv = d->d_v;
	f->din = c->mla.on ? pb->latent[LAT_KV_A_PROJ].dim[0] : d->d_q_in;
	f->dout = weights_has(&pb->w, WO) ? d->d_out : f->H * f->dv;
	f->R = c->mla.on ? c->mla.d_rope : c->rope.dim ? c->rope.dim : f->dk;
	f->scale = c->scale_mode == MHA_SCALE_VALUE ? c->scale : c->scale_mode == MHA_SCALE_NONE ? 1
		   : 1 / sqrt((double)f->dk);
}

void layer_json(FILE *fp, const struct problem *pb, const struct layer_facts *f)
{
	const struct problem_spec *s = &pb->spec;
	const mha_config *c = &pb->cfg;

	fputc('{', fp);
	if (s->has_layer)
		fprintf(fp, "\"layer\": %zu, ", s->layer);
	else
		fputs("\"layer\": null, ", fp);
	fputs("\"module\": ", fp);
	text_put_json(fp, s->module);
	fprintf(fp, ", \"family\": \"%s\", \"model_type\": ", model_family_name(s->family));
	if (*f->type)
		text_put_json(fp, f->type);
	else
		fputs("null", fp);
	fputs(", \"stated\": [", fp);
	for (size_t i = 0; i < f->n_stated; i++)
		fprintf(fp, "%s\"%s\"", i ? ", " : "", f->stated[i]);
	fputc(']', fp);
	fprintf(fp, ", \"heads\": %zu, \"kv_heads\": %zu, \"d_model\": %zu, \"d_k\": %zu, "
		"\"d_v\": %zu, \"d_out\": %zu, \"scale\": {\"value\": ", f->H, f->G, f->din, f->dk, f->dv, f->dout);
	json_number(fp, f->scale, 0);
	fprintf(fp, ", \"rule\": \"%s\"}, \"causal\": \"%s\", \"rope\": ",
		meta_scale_rule(c->scale_mode), meta_causal_name(c->causal));
	if (c->rope.mode) {
		fprintf(fp, "{\"mode\": \"%s\", \"theta\": ",
			c->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved");
		json_number(fp, c->rope.theta ? c->rope.theta : 10000, 0);
		fprintf(fp, ", \"dim\": %zu, \"scaling\": ", f->R);
		meta_rope_scaling(fp, &c->rope);
		fputc('}', fp);
	} else {
		fputs("null", fp);
	}
	fputs(", \"window\": ", fp);
	if (c->window.on)
		fprintf(fp, "[%td, %td]", c->window.left, c->window.right);
	else
		fputs("null", fp);
	fputs(", \"softcap\": ", fp);
	if (c->softcap > 0)
		json_number(fp, c->softcap, 0);
	else
		fputs("null", fp);
	fputs(", \"norm\": ", fp);
	meta_norm(fp, &c->norm, s->q_norm, s->k_norm);
	fputs(", \"mla\": ", fp);
	meta_mla(fp, c, &pb->d);
	fputs(", \"sinks\": ", fp);
	if (s->sinks)
		text_put_json(fp, s->sinks);
	else
		fputs("null", fp);
	fputs(", \"biases\": [", fp);
	for (int i = BQ, n = 0; i <= BO; i++)
		if (weights_has(&pb->w, i))
			fprintf(fp, "%s\"%s\"", n++ ? ", " : "", weight_names[i]);
	fputs("], \"config\": ", fp);
	if (s->config_read[0])
		text_put_json(fp, path_shown(s->config_read));
	else
		fputs("null", fp);
	fputs(", \"config_keys\": [", fp);
	for (size_t i = 0, n = 0; s->keys_used[i]; i += strlen(s->keys_used + i) + 1)
		fprintf(fp, "%s\"%s\"", n++ ? ", " : "", s->keys_used + i);
	/* the keys config.json left out, as their class's defaults filled them */
	fputs("], \"config_defaults\": {", fp);
	for (size_t i = 0, n = 0; s->keys_defaulted[i]; i += strlen(s->keys_defaulted + i) + 1) {
		const char *e = s->keys_defaulted + i, *eq = strchr(e, '=');

		fprintf(fp, "%s\"%.*s\": %s", n++ ? ", " : "", (int)(eq - e), e, eq + 1);
	}
	fputs("}}", fp);
}

size_t layer_tensors(const struct problem *p, const char **names, const matrix **m)
{
	static const char *const extra_names[] = { "sinks", "q_norm", "k_norm" };
	const matrix *const extra[] = { &p->sinks, &p->q_norm, &p->k_norm };
	size_t n = 0;

	for (int i = 0; i < N_WEIGHTS; i++)
		if (weights_has(&p->w, i)) {
			names[n] = weight_names[i];
			m[n++] = &p->w.m[i];
		}
	for (int i = 0; i < 3; i++)
		if (extra[i]->rank) {
			names[n] = extra_names[i];
			m[n++] = extra[i];
		}
	for (int i = 0; i < N_LATENT; i++)
		if (p->latent[i].rank) {
			names[n] = latent_names[i];
			m[n++] = &p->latent[i];
		}
	return n;
}

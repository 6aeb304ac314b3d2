/*
 * cmd/model.c: 'mha model CHECKPOINT', what mha reads of a checkpoint's
 * attention, layer by layer: its family and model type, heads and head
 * widths, scale, causal rule, rope, window, softcap, q/k norm, sinks,
 * biases, the config.json keys its attention used and those it left out
 * (their configuration class's defaults).
 *
 * It runs the very loader a run uses (load/model.h: model_config for the
 * layer, then model_load, which reads the layer's tensors), so what it says
 * is what 'mha forward -w CHECKPOINT --layer N' computes with, and a layer
 * a run would refuse is refused here with the same message.
 */
#include "base/budget.h"
#include "base/cli.h"
#include "base/number.h"
#include "base/text.h"
#include "load/families.h"
#include "load/latent.h"
#include "load/model.h"
#include "load/rope_scaling.h"
#include "read/checkpoint.h"
#include "read/file.h"
#include "read/json.h"
#include "write/emit.h"
#include "write/meta.h"
#include "write/write.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char model_usage[] =
	"usage: mha model CHECKPOINT [--layer N | --prefix P] [options]\n"
	"\n"
	"What mha reads of a checkpoint's attention, layer by layer: the family and\n"
	"model type, heads, key/value heads, head widths, scale, causal rule, rope\n"
	"(type, base, scaling, features turned), window, softcap, q/k norm, sinks,\n"
	"biases, the config.json keys its attention used, and those it left out\n"
	"(their configuration class's defaults, as transformers fills them).\n"
	"CHECKPOINT is what 'mha forward -w' takes: a .safetensors file, an index,\n"
	"or their folder, with config.json beside it.  Each layer is read as a run\n"
	"reads it, its tensors included: a layer a run would refuse is refused with\n"
	"its message.\n"
	"\n"
	"Options:\n"
	"      --layer N         layer N alone (default: every layer config.json's\n"
	"                        num_hidden_layers counts)\n"
	"      --prefix P        the module whose tensor names start with P (with\n"
	"                        --layer: layer N under it)\n"
	"      --config FILE     config.json, when it is not beside the checkpoint\n"
	"      --layout FAMILY   llama, gpt2, bert or torch: read a model_type mha does\n"
	"                        not know as that family\n"
	"  -f, --format FMT      text (the default) or json\n"
	"  -o, --output FILE     the layer's tensors as a run reads them into FILE.npz:\n"
	"                        W_Q, W_K, W_V, W_O and the biases as -w takes them\n"
	"                        (d_in x d_out), q_norm, k_norm, sinks and latent\n"
	"                        attention's under their options' names (one layer:\n"
	"                        --layer N or --prefix P); the description still\n"
	"                        goes to standard output\n"
	"      --max-memory SIZE the most memory a layer's tensors may take (as\n"
	"                        'mha forward')\n"
	"  -h, --help            show this help\n"
	"\n"
	"Exit status: 0 success, 1 a layer mha refuses (or a file it cannot read),\n"
	"2 bad command line.\n";

enum { O_LAYER = 256, O_PREFIX, O_CONFIG, O_LAYOUT, O_MAX_MEMORY };

struct model_opts {
	struct problem_spec base; /* the checkpoint, --config, --layout, --prefix */
	int layer_given;
	size_t layer;
	int json;
	size_t max_memory;
	const char *output; /* -o FILE.npz: the layer's tensors */
};

/* the layers config.json counts (text_config's for an image-text model): 0 none */
static size_t config_layers(const struct problem_spec *s)
{
	char dir[4096], path[PATH_TEXT];
	const char *cfg = s->config;
	input_file in;
	json_doc doc = { 0 };
	size_t n = 0;

	if (!cfg) {
		ckpt_folder_of(s->w, dir, sizeof(dir));
		snprintf(path, sizeof(path), "%s/config.json", dir);
		cfg = path;
	}
	/* model_config has read and checked it already: quietly, its count */
	if (input_load(&in, cfg) == 0 && json_parse(&doc, &in) == 0 && cJSON_IsObject(doc.root)) {
		const cJSON *text = cJSON_GetObjectItemCaseSensitive(doc.root, "text_config");
		const cJSON *o = cJSON_IsObject(text) ? text : doc.root;
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "num_hidden_layers");

		if (!cJSON_IsNumber(e))
			e = cJSON_GetObjectItemCaseSensitive(o, "n_layer");
		if (cJSON_IsNumber(e) && e->valuedouble >= 1 && e->valuedouble <= 100000)
			n = (size_t)e->valuedouble;
	}
	json_doc_free(&doc);
	input_free(&in);
	return n;
}

/* a weight's output features: (out, in) as mha reads a checkpoint's */
static size_t rows_of(const weights *w, int i, int in)
{
	const matrix *m = &w->m[i];

	if (!weights_has(w, i) || m->rank != 2)
		return 0;
	return w->layout == LAYOUT_TORCH ? m->dim[in ? 1 : 0] : m->dim[in ? 0 : 1];
}

/*
 * -o FILE.npz: the layer's tensors as a run computes with them: the weights
 * finished as -w's are (d_in x d_out, biases vectors), the others as read.
 * 0, or -1 said.
 */
static int write_tensors(const char *path, weights *w, matrix *const extra[MODEL_EXTRA], size_t H,
			 size_t G)
{
	static const char *const extra_names[MODEL_LATENT] = {
		[MODEL_SINKS] = "sinks", [MODEL_Q_NORM] = "q_norm", [MODEL_K_NORM] = "k_norm" };
	const char *names[N_WEIGHTS + MODEL_EXTRA];
	const matrix *m[N_WEIGHTS + MODEL_EXTRA];
	size_t n = 0;

	if (weights_finish(w, H, G))
		return -1;
	for (int i = 0; i < N_WEIGHTS; i++)
		if (weights_has(w, i)) {
			names[n] = weight_names[i];
			m[n++] = &w->m[i];
		}
	for (int i = 0; i < MODEL_EXTRA; i++)
		if (extra[i]->rank) {
			names[n] = i < MODEL_LATENT ? extra_names[i] : latent_names[i - MODEL_LATENT];
			m[n++] = extra[i];
		}
	return emit_npz_named(path, names, m, n);
}

/* one layer, read as a run reads it, described; 0, or -1 said */
static int describe(FILE *fp, const struct model_opts *o, const struct problem_spec *spec,
		    int first)
{
	struct problem_spec s = *spec;
	weights w = { 0 };
	matrix q_norm = { 0 }, k_norm = { 0 }, sinks = { 0 }, lat[N_LATENT] = { { 0 } };
	matrix *const extra[MODEL_EXTRA] = {
		[MODEL_SINKS] = &sinks, [MODEL_Q_NORM] = &q_norm, [MODEL_K_NORM] = &k_norm,
		[MODEL_LATENT + LAT_Q_A_PROJ] = &lat[LAT_Q_A_PROJ],
		[MODEL_LATENT + LAT_Q_A_NORM] = &lat[LAT_Q_A_NORM],
		[MODEL_LATENT + LAT_KV_A_PROJ] = &lat[LAT_KV_A_PROJ],
		[MODEL_LATENT + LAT_KV_A_NORM] = &lat[LAT_KV_A_NORM],
		[MODEL_LATENT + LAT_KV_B_PROJ] = &lat[LAT_KV_B_PROJ] };
	size_t H, G, dq, dk, dv, din, dout, R;
	mha_config *c = &s.cfg;
	mha_dims md = { .size = sizeof(md) };
	double scale;
	char num[40];
	int rc = -1;

	if (model_config(&s) || model_load(&w, extra, &s, s.w))
		goto done;
	H = s.heads;
	G = s.kv_heads ? s.kv_heads : H;
	dq = rows_of(&w, WQ, 0);
	dk = dq / H;
	dv = rows_of(&w, WV, 0) / G;
	din = rows_of(&w, WQ, 1);
	dout = rows_of(&w, WO, 0);
	R = c->rope.dim ? c->rope.dim : dk;
	if (lat[LAT_KV_A_PROJ].rank) {
		/* multi-head latent attention: the dims its tensors (d_in, d_out) make */
		const size_t dr = s.rope_head_dim;

		din = lat[LAT_KV_A_PROJ].dim[0];
		dv = lat[LAT_KV_B_PROJ].dim[1] / H - (dk - dr);
		G = H;
		R = dr;
		c->mla = (mha_mla){ .on = 1, .q_rank = lat[LAT_Q_A_PROJ].rank ? lat[LAT_Q_A_PROJ].dim[1] : 0,
				    .kv_rank = lat[LAT_KV_A_PROJ].dim[1] - dr, .d_rope = dr,
				    .eps = s.given & (GIVEN_MLA_EPS | CONFIG_MLA_EPS) ? c->mla.eps : 1e-6 };
		md.d_k = dk;
		md.d_v = dv;
		if (s.mla_mscale2 && !(s.given & GIVEN_SCALE)) {
			c->scale_mode = MHA_SCALE_VALUE;
			c->scale = s.mla_mscale2 / sqrt((double)dk);
		}
	}
	scale = c->scale_mode == MHA_SCALE_VALUE ? c->scale : c->scale_mode == MHA_SCALE_NONE ? 1
		: 1 / sqrt((double)dk);
	if (o->json) {
		fputs(first ? "\n    {" : ",\n    {", fp);
		if (s.has_layer)
			fprintf(fp, "\"layer\": %zu, ", s.layer);
		else
			fputs("\"layer\": null, ", fp);
		fputs("\"module\": ", fp);
		text_put_json(fp, s.module);
		fprintf(fp, ", \"family\": \"%s\", \"model_type\": ", model_family_name(s.family));
		if (s.mtype && *s.mtype->type)
			text_put_json(fp, s.mtype->type);
		else
			fputs("null", fp);
		fprintf(fp, ", \"heads\": %zu, \"kv_heads\": %zu, \"d_model\": %zu, \"d_k\": %zu, "
			"\"d_v\": %zu, \"d_out\": %zu, \"scale\": {\"value\": ", H, G, din, dk, dv, dout);
		json_number(fp, scale, 0);
		fprintf(fp, ", \"rule\": \"%s\"}, \"causal\": \"%s\", \"rope\": ",
			meta_scale_rule(c->scale_mode), meta_causal_name(c->causal));
		if (c->rope.mode) {
			fprintf(fp, "{\"mode\": \"%s\", \"theta\": ",
				c->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved");
			json_number(fp, c->rope.theta ? c->rope.theta : 10000, 0);
			fprintf(fp, ", \"dim\": %zu, \"scaling\": ", R);
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
		meta_norm(fp, &c->norm, s.q_norm, s.k_norm);
		fputs(", \"mla\": ", fp);
		meta_mla(fp, c, &md);
		fputs(", \"sinks\": ", fp);
		if (s.sinks)
			text_put_json(fp, s.sinks);
		else
			fputs("null", fp);
		fputs(", \"biases\": [", fp);
		for (int i = BQ, n = 0; i <= BO; i++)
			if (weights_has(&w, i))
				fprintf(fp, "%s\"%s\"", n++ ? ", " : "", weight_names[i]);
		fputs("], \"config\": ", fp);
		if (s.config_read[0])
			text_put_json(fp, path_shown(s.config_read));
		else
			fputs("null", fp);
		fputs(", \"config_keys\": [", fp);
		for (size_t i = 0, n = 0; s.keys_used[i]; i += strlen(s.keys_used + i) + 1)
			fprintf(fp, "%s\"%s\"", n++ ? ", " : "", s.keys_used + i);
		/* the keys config.json left out, as their class's defaults filled them */
		fputs("], \"config_defaults\": {", fp);
		for (size_t i = 0, n = 0; s.keys_defaulted[i]; i += strlen(s.keys_defaulted + i) + 1) {
			const char *e = s.keys_defaulted + i, *eq = strchr(e, '=');

			fprintf(fp, "%s\"%.*s\": %s", n++ ? ", " : "", (int)(eq - e), e, eq + 1);
		}
		fputs("}}", fp);
	} else {
		fprintf(fp, "%s", first ? "" : "\n");
		if (s.has_layer)
			fprintf(fp, "layer %zu: ", s.layer);
		fputs("module ", fp);
		text_put(fp, s.module);
		fprintf(fp, " (%s", model_family_name(s.family));
		if (s.mtype && *s.mtype->type)
			fprintf(fp, ", model_type %s", s.mtype->type);
		fputs(")\n", fp);
		fprintf(fp, "  heads %zu, key/value heads %zu, d_model %zu, d_k %zu, d_v %zu, d_out %zu\n",
			H, G, din, dk, dv, dout);
		format_shortest(num, sizeof(num), scale);
		fprintf(fp, "  scale %s (%s), causal %s\n", num, meta_scale_rule(c->scale_mode),
			meta_causal_name(c->causal));
		if (c->rope.mode) {
			format_shortest(num, sizeof(num), c->rope.theta ? c->rope.theta : 10000);
			fprintf(fp, "  rope %s, theta %s, R = %zu of d_k %zu",
				c->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved", num, R, dk);
			if (c->rope.scaling.type) {
				format_shortest(num, sizeof(num), c->rope.scaling.factor);
				fprintf(fp, ", scaling %s factor %s",
					rope_scaling_name(c->rope.scaling.type), num);
				format_shortest(num, sizeof(num), mha_rope_attention_factor(&c->rope));
				fprintf(fp, " (attention factor %s)", num);
			}
			fputc('\n', fp);
		} else {
			fputs("  rope none\n", fp);
		}
		if (c->window.on)
			fprintf(fp, "  window %td left, %td right (-1: unbounded)\n", c->window.left,
				c->window.right);
		else
			fputs("  window none\n", fp);
		format_shortest(num, sizeof(num), c->softcap);
		fprintf(fp, "  softcap %s\n", c->softcap > 0 ? num : "none");
		if (c->norm.kind) {
			format_shortest(num, sizeof(num), c->norm.eps);
			fprintf(fp, "  norm %s %s, eps %s, weights ", step_norm_kind(c->norm.kind),
				c->norm.over_all ? "over the whole row" : "per head", num);
			text_put(fp, s.q_norm ? s.q_norm : "none");
			fputs(" and ", fp);
			text_put(fp, s.k_norm ? s.k_norm : "none");
			fputc('\n', fp);
		} else {
			fputs("  norm none\n", fp);
		}
		if (c->mla.on) {
			format_shortest(num, sizeof(num), c->mla.eps);
			fputs("  latent attention: q_lora_rank ", fp);
			if (c->mla.q_rank)
				fprintf(fp, "%zu", c->mla.q_rank);
			else
				fputs("none (q_proj)", fp);
			fprintf(fp, ", kv_lora_rank %zu, qk_nope_head_dim %zu, qk_rope_head_dim %zu, "
				"v_head_dim %zu, eps %s\n", c->mla.kv_rank, dk - c->mla.d_rope,
				c->mla.d_rope, dv, num);
		} else {
			fputs("  latent attention none\n", fp);
		}
		fputs("  sinks ", fp);
		text_put(fp, s.sinks ? s.sinks : "none");
		fputs("\n  biases", fp);
		for (int i = BQ, n = 0; i <= BO; i++)
			if (weights_has(&w, i))
				fprintf(fp, "%s %s", n++ ? "," : "", weight_names[i]);
		if (!weights_has(&w, BQ) && !weights_has(&w, BK) && !weights_has(&w, BV) &&
		    !weights_has(&w, BO))
			fputs(" none", fp);
		fputs("\n  config.json keys read:", fp);
		for (size_t i = 0; s.keys_used[i]; i += strlen(s.keys_used + i) + 1)
			fprintf(fp, "%s %s", i ? "," : "", s.keys_used + i);
		fputs(s.keys_used[0] ? "\n" : " none\n", fp);
		fputs("  left out, their class's defaults:", fp);
		for (size_t i = 0; s.keys_defaulted[i]; i += strlen(s.keys_defaulted + i) + 1) {
			const char *e = s.keys_defaulted + i, *eq = strchr(e, '=');

			fprintf(fp, "%s %.*s %s", i ? "," : "", (int)(eq - e), e, eq + 1);
		}
		fputs(s.keys_defaulted[0] ? "\n" : " none\n", fp);
	}
	rc = o->output ? write_tensors(o->output, &w, extra, H, G) : 0;
done:
	weights_free(&w);
	matrix_free(&q_norm);
	matrix_free(&k_norm);
	matrix_free(&sinks);
	for (int i = 0; i < N_LATENT; i++)
		matrix_free(&lat[i]);
	return rc;
}

static int parse(int argc, char **argv, struct model_opts *o)
{
	static const struct option opts[] = {
		{ "layer", required_argument, NULL, O_LAYER },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "max-memory", required_argument, NULL, O_MAX_MEMORY },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->max_memory = opt_memory_default();
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":f:o:h", opts, NULL)) != -1) {
		switch (c) {
		case O_LAYER: {
			char *end;

			if (*optarg < '0' || *optarg > '9' ||
			    (o->layer = strtoull(optarg, &end, 10), *end) || o->layer > 1000000)
				return usage_error("model", "--layer expects a whole number from 0, not "
						   "'%s'", optarg);
			o->layer_given = 1;
			break;
		}
		case O_PREFIX: o->base.prefix = optarg; break;
		case O_CONFIG: o->base.config = optarg; break;
		case O_LAYOUT: {
			static const char *const names[] = { "llama", "gpt2", "bert", "torch" };
			size_t i = 0;

			while (i < 4 && strcmp(optarg, names[i]))
				i++;
			if (i == 4)
				return usage_error("model", "--layout takes llama, gpt2, bert or torch, "
						   "not '%s'", optarg);
			o->base.family = (model_family)(i + 1);
			o->base.given |= GIVEN_LAYOUT;
			break;
		}
		case 'f':
			if (strcmp(optarg, "text") && strcmp(optarg, "json"))
				return usage_error("model", "--format takes text or json, not '%s'",
						   optarg);
			o->json = !strcmp(optarg, "json");
			break;
		case 'o': o->output = optarg; break;
		case O_MAX_MEMORY:
			if (opt_bytes(optarg, &o->max_memory))
				return usage_error("model", "--max-memory expects a size such as 512M or "
						   "4G, not '%s'", optarg);
			break;
		case 'h':
			fputs(model_usage, stdout);
			return 1;
		case ':':
			return usage_error("model", "%s needs a value", argv[optind - 1]);
		default:
			return usage_error("model", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return usage_error("model", optind == argc ? "give the checkpoint: mha model "
				   "CHECKPOINT" : "one checkpoint at a time (give its folder)");
	o->base.w = argv[optind];
	if (o->output && (strlen(o->output) < 5 || strcmp(o->output + strlen(o->output) - 4, ".npz")))
		return usage_error("model", "-o %s: the layer's tensors go to a NumPy archive: name "
				   "it FILE.npz", o->output);
	if (o->output && !o->layer_given && !o->base.prefix)
		return usage_error("model", "-o writes one layer's tensors: give --layer N (or "
				   "--prefix P)");
	if (!ckpt_is_checkpoint(o->base.w))
		return usage_error("model", "'%s' is not a checkpoint: a .safetensors file, a "
				   "*.safetensors.index.json, or a folder holding either", o->base.w);
	o->base.layout = LAYOUT_TORCH;
	return 0;
}

int cmd_model(int argc, char **argv)
{
	struct model_opts o;
	size_t first = 0, last = 0, len = 0;
	char *text = NULL;
	FILE *out;
	int rc = parse(argc, argv, &o);

	if (rc) /* 1: --help; else usage_error's EXIT_USAGE */
		return rc == 1 ? EXIT_OK : EXIT_USAGE;
	budget_init(o.max_memory);
	if (o.layer_given) {
		first = last = o.layer;
	} else if (!o.base.prefix) {
		/* every layer config.json counts */
		last = config_layers(&o.base);
		if (!last) {
			error("%s: how many layers? no config.json's num_hidden_layers says: give "
			      "--layer N", path_shown(o.base.w));
			return EXIT_DATA;
		}
		last--;
	}
	/* all of it, or nothing: a layer refused after others leaves no half output */
	out = open_memstream(&text, &len);
	if (!out) {
		error("out of memory");
		return EXIT_DATA;
	}
	if (o.json) {
		fputs("{\n  \"checkpoint\": ", out);
		text_put_json(out, o.base.w);
		fputs(",\n  \"layers\": [", out);
	}
	for (size_t l = first; l <= last && !rc; l++) {
		struct problem_spec s = o.base;

		s.has_layer = o.layer_given || !o.base.prefix;
		s.layer = l;
		rc = describe(out, &o, &s, l == first);
	}
	if (o.json)
		fputs("\n  ]\n}\n", out);
	if (fclose(out) || !text)
		rc = error("out of memory");
	if (!rc)
		fwrite(text, 1, len, stdout);
	free(text);
	return rc ? EXIT_DATA : EXIT_OK;
}

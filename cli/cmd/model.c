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
#include "cmd/attention.h"

#include "util/budget.h"
#include "util/files.h"
#include "base/cli.h"
#include "util/number.h"
#include "util/text.h"
#include "load/families.h"
#include "load/latent.h"
#include "load/load.h"
#include "load/model.h"
#include "load/rope_scaling.h"
#include "api/settings.h"
#include "read/checkpoint.h"
#include "write/archive.h"
#include "write/emit.h"
#include "run/layer.h"
#include "run/meta.h"
#include "write/write.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	"                        not know by that family's tensor names, once every\n"
	"                        setting below that families differ in is given\n"
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
	"Settings, over what config.json says (as 'mha forward' takes them; each\n"
	"one given is listed as stated):\n";
static const char model_usage_end[] =
	"\n"
	"Exit status: 0 success, 1 a layer mha refuses (or a file it cannot read),\n"
	"2 bad command line.\n";

/* its own options' values, apart from the settings' (attention.h) */
enum { O_LAYER = ATTN_EXTRA_BASE, O_PREFIX, O_CONFIG, O_LAYOUT, O_MAX_MEMORY };

struct model_opts {
	struct problem_spec base; /* the checkpoint, --config, --layout, --prefix */
	int layer_given;
	size_t layer;
	int json;
	size_t max_memory;
	const char *output; /* -o FILE.npz: the layer's tensors */
};

/*
 * -o FILE.npz: the layer's tensors as a run computes with them: the weights
 * finished as -w's are (d_in x d_out, biases vectors), the others as read.
 * 0, or -1 said.
 */
static int write_tensors(const char *path, const struct problem *p)
{
	const char *names[LAYER_TENSORS];
	const matrix *m[LAYER_TENSORS];

	return emit_npz_named(path, names, m, layer_tensors(p, names, m));
}

/* one layer, read as a run reads it, described; 0, or -1 said */
static int describe(FILE *fp, const struct model_opts *o, const struct problem_spec *spec,
		    int first, struct problem *keep)
{
	struct problem_spec s = *spec;
	struct problem pb;
	struct layer_facts f;
	const mha_config *c = &pb.cfg;
	char num[40];
	int rc = -1;

	/* the layer as a run resolves it, every check made: one token of zeros
	 * for X (spec.h's probe) */
	memset(&pb, 0, sizeof(pb));
	s.probe = 1;
	if (model_config(&s) || problem_load(&pb, &s))
		goto done;
	s = pb.spec;
	layer_facts(&pb, &f);
	if (o->json) {
		fputs(first ? "\n    " : ",\n    ", fp);
		layer_json(fp, &pb, &f);
	} else {
		fprintf(fp, "%s", first ? "" : "\n");
		if (s.has_layer)
			fprintf(fp, "layer %zu: ", s.layer);
		fputs("module ", fp);
		text_put(fp, s.module);
		fprintf(fp, " (%s", model_family_name(s.family));
		if (*f.type) {
			fputs(", model_type ", fp);
			text_put(fp, f.type);
		}
		if (s.type_said[0])
			fprintf(fp, ", read as --layout %s", model_family_name(s.family));
		fputs(")\n", fp);
		fputs("  stated:", fp);
		for (size_t i = 0; i < f.n_stated; i++)
			fprintf(fp, "%s %s", i ? "," : "", f.stated[i]);
		fputs(f.n_stated ? "\n" : " none (config.json's and the family's)\n", fp);
		fprintf(fp, "  heads %zu, key/value heads %zu, d_model %zu, d_k %zu, d_v %zu, d_out %zu\n",
			f.H, f.G, f.din, f.dk, f.dv, f.dout);
		format_shortest(num, sizeof(num), f.scale);
		fprintf(fp, "  scale %s (%s), causal %s\n", num, meta_scale_rule(c->scale_mode),
			meta_causal_name(c->causal));
		if (c->rope.mode) {
			format_shortest(num, sizeof(num), c->rope.theta ? c->rope.theta : 10000);
			fprintf(fp, "  rope %s, theta %s, R = %zu of d_k %zu",
				c->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved", num, f.R, f.dk);
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
				"v_head_dim %zu, eps %s\n", c->mla.kv_rank, f.dk - c->mla.d_rope,
				c->mla.d_rope, f.dv, num);
		} else {
			fputs("  latent attention none\n", fp);
		}
		fputs("  sinks ", fp);
		text_put(fp, s.sinks ? s.sinks : "none");
		fputs("\n  biases", fp);
		for (int i = BQ, n = 0; i <= BO; i++)
			if (weights_has(&pb.w, i))
				fprintf(fp, "%s %s", n++ ? "," : "", weight_names[i]);
		if (!weights_has(&pb.w, BQ) && !weights_has(&pb.w, BK) && !weights_has(&pb.w, BV) &&
		    !weights_has(&pb.w, BO))
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
	rc = 0;
	if (keep) {
		/* -o: the layer kept, to be written once the description is out */
		*keep = pb;
		return 0;
	}
done:
	problem_free(&pb);
	return rc;
}

static int parse(int argc, char **argv, struct model_opts *o)
{
	static const struct option own[] = {
		{ "layer", required_argument, NULL, O_LAYER },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "max-memory", required_argument, NULL, O_MAX_MEMORY },
		{ "help", no_argument, NULL, 'h' },
	};
	struct option opts[sizeof(own) / sizeof(own[0]) + 32];
	const size_t n_own = sizeof(own) / sizeof(own[0]);
	size_t n;
	int c, rc;

	/* its own, then the layer's settings, as 'mha forward' takes them */
	memcpy(opts, own, sizeof(own));
	n = n_own + attn_setting_options(opts + n_own, sizeof(opts) / sizeof(opts[0]) - n_own - 1);
	memset(&opts[n], 0, sizeof(opts[0]));
	memset(o, 0, sizeof(*o));
	/* --list-options alone: the options as JSON, for programs */
	if (attn_list_options_asked(argc, argv) < 0)
		return usage_error("model", ATTN_LIST_OPTIONS_ALONE);
	if (attn_list_options_asked(argc, argv)) {
		char *help = NULL;
		size_t size = 0;
		FILE *fp = open_memstream(&help, &size);

		rc = !fp || fputs(model_usage, fp) < 0 || attn_setting_help(fp) ||
		     fputs(model_usage_end, fp) < 0 || fclose(fp) ? -1 : 0;
		if (!rc)
			rc = attn_list_options(stdout, "model", opts, help);
		free(help);
		return rc ? -1 : 1;
	}
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
			char words[128];

			if (family_by_layout(optarg, 1, &o->base.family))
				return usage_error("model", "--layout takes %s, not '%s'",
						   family_layouts(1, words, sizeof(words)), optarg);
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
			attn_setting_help(stdout);
			fputs(model_usage_end, stdout);
			return 1;
		case ':':
			return usage_error("model", "%s needs a value", argv[optind - 1]);
		default:
			rc = attn_row_name(c) ? spec_setting("model", attn_row_name(c), optarg,
							       &o->base) : 0;
			if (rc < 0)
				return -1;
			if (!rc)
				return usage_error("model", "unknown option '%s'", argv[optind - 1]);
			break;
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
	struct problem kept;
	FILE *out;
	int rc = parse(argc, argv, &o);

	if (rc) /* 1: --help; else usage_error's EXIT_USAGE */
		return rc == 1 ? EXIT_OK : EXIT_USAGE;
	budget_init(o.max_memory);
	/* -o onto any file the checkpoint names (a shard this layer does not
	 * read too, its index, config.json) is refused before anything is read */
	if (o.output && problem_note_inputs(&o.base))
		return EXIT_DATA;
	if (o.output && files_refuse_output(o.output))
		return EXIT_USAGE; /* as a run's -o over an input */
	if (o.layer_given) {
		first = last = o.layer;
	} else if (!o.base.prefix) {
		/* every layer config.json counts */
		if (config_layer_count(&o.base, &last))
			return EXIT_DATA;
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
	memset(&kept, 0, sizeof(kept));
	for (size_t l = first; l <= last && !rc; l++) {
		struct problem_spec s = o.base;

		s.has_layer = o.layer_given || !o.base.prefix;
		s.layer = l;
		rc = describe(out, &o, &s, l == first, o.output ? &kept : NULL);
	}
	if (o.json)
		fputs("\n  ]\n}\n", out);
	if (fclose(out) || !text)
		rc = error("out of memory");
	/* the description, then the tensors: a run that fails leaves no file */
	if (!rc && (fwrite(text, 1, len, stdout) != len || stdout_flush()))
		rc = -1;
	if (!rc && o.output)
		rc = write_tensors(o.output, &kept);
	problem_free(&kept);
	free(text);
	return rc ? EXIT_DATA : EXIT_OK;
}

/*
 * options.c: the attention commands' option table (attention.h), each
 * row's getopt entry, help group and, for the sections every help shares,
 * its lines; and the command line parsed into struct attn_options.
 */
#include "cmd/attention.h"
#include "cmd/table.h"
#include "cmd/values.h"

#include "base/cli.h"
#include "base/progress.h"
#include "load/families.h"
#include "load/problem.h"
#include "run/steps.h"

#include "mha.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- option values ----------------------------------------------------- */

/* a whole number from 1 up, digits only: 0, or -1 */
static int whole_number(const char *s, size_t *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > SIZE_MAX / 2)
		return -1;
	*out = (size_t)v;
	return 0;
}

/* --kv-len N, or N,N,…: one length for every sequence, or one per sequence */
static int parse_kv_len(const char *hint, const char *arg, struct attn_options *o)
{
	size_t n = 1, i = 0;
	const char *p;

	if (!strchr(arg, ','))
		return opt_count(hint, "--kv-len", arg, SIZE_MAX / 2, &o->spec.cfg.kv_len);
	for (p = arg; *p; p++)
		n += *p == ',';
	free(o->kv_lens);
	o->kv_lens = calloc(n, sizeof(*o->kv_lens));
	if (!o->kv_lens)
		return error("out of memory");
	for (p = arg; i < n; i++) {
		const size_t len = strcspn(p, ",");
		char one[32];

		if (len == 0 || len >= sizeof(one) ||
		    (memcpy(one, p, len), one[len] = '\0',
		     whole_number(one, &o->kv_lens[i])))
			return usage_error(hint, "--kv-len expects whole numbers of at least 1, one per "
					   "sequence (5,3,4), not '%s'", arg);
		p += len + (p[len] == ',');
	}
	o->spec.kv_lens = o->kv_lens;
	o->spec.n_kv_lens = n;
	o->spec.cfg.kv_len = 0;
	return 0;
}

/* --print LIST of the steps (steps.h), for a command with no print hook: 0, or -1 said */
static int print_steps(struct attn_options *o, const char *arg)
{
	char *copy = strdup(arg), *save = NULL, known[200];
	int rc = 0;

	if (!copy)
		return error("out of memory");
	step_names(known, sizeof(known));
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const int s = step_by_name(tok);

		if (!strcmp(tok, "all")) {
			o->print_all = 1;
			continue;
		}
		if (s < 0 && step_closest(tok)) {
			usage_error(o->cmd->name, "--print: unknown step '%s': did you mean '%s'?", tok,
				    step_closest(tok));
			rc = -1;
			break;
		}
		if (s < 0) {
			usage_error(o->cmd->name, "--print: unknown step '%s' (known: %s, all)",
				    tok, known);
			rc = -1;
			break;
		}
		o->print |= STEP_BIT(s);
	}
	free(copy);
	if (!rc && !o->print && !o->print_all) {
		usage_error(o->cmd->name, "--print needs at least one step (%s, all)", known);
		rc = -1;
	}
	return rc;
}

int attn_setting(const char *hint, int c, const char *arg, struct problem_spec *s)
{
	switch (c) {
	case O_HEADS:
		s->given |= GIVEN_HEADS;
		if (opt_count(hint, "--heads", arg, SIZE_MAX / 2, &s->heads))
			return -1;
		break;
	case O_KV_HEADS:
		s->given |= GIVEN_KV_HEADS;
		if (opt_count(hint, "--kv-heads", arg, SIZE_MAX / 2, &s->kv_heads))
			return -1;
		break;
	case O_SCALE:
		s->given |= GIVEN_SCALE;
		if (value_scale(hint, arg, &s->cfg))
			return -1;
		break;
	case O_CAUSAL:
		s->given |= GIVEN_CAUSAL;
		if (!arg || !strcmp(arg, "top-left")) {
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		} else if (!strcmp(arg, "bottom-right")) {
			s->cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
		} else if (opt_offset(arg, &s->cfg.causal_offset)) {
			s->cfg.causal = MHA_CAUSAL_OFFSET;
		} else {
			usage_error(hint, "--causal takes top-left, bottom-right or a whole "
				    "number, not '%s'", arg);
			return -1;
		}
		break;
	case O_WINDOW:
		/* none: every key, over a window config.json would set */
		s->given |= GIVEN_WINDOW;
		if (!strcmp(arg, "none")) {
			s->cfg.window = (mha_window){ 0 };
			break;
		}
		if (value_window(hint, arg, &s->cfg.window))
			return -1;
		break;
	case O_SINKS:
		/* none: the layer has none, said (where a model type would read them) */
		s->given |= GIVEN_SINKS;
		s->sinks = strcmp(arg, "none") ? arg : NULL;
		break;
	case O_ROPE:
		s->given |= GIVEN_ROPE;
		if (!strcmp(arg, "half")) {
			s->cfg.rope.mode = MHA_ROPE_HALF;
		} else if (!strcmp(arg, "interleaved")) {
			s->cfg.rope.mode = MHA_ROPE_INTERLEAVED;
		} else if (!strcmp(arg, "none")) {
			/* a layer without position encoding (SmolLM3's), over a
			 * family or config.json that would turn it */
			s->cfg.rope.mode = MHA_ROPE_NONE;
		} else {
			usage_error(hint, "--rope takes half, interleaved or none, not '%s'",
				    arg);
			return -1;
		}
		break;
	case O_ROPE_THETA:
		s->given |= GIVEN_ROPE_THETA;
		if (value_real(hint, "--rope-theta", arg, &s->cfg.rope.theta))
			return -1;
		if (s->cfg.rope.theta <= 0) {
			usage_error(hint, "--rope-theta expects a number above 0, not '%s'",
				    arg);
			return -1;
		}
		break;
	case O_ROPE_DIM:
		s->given |= GIVEN_ROPE_DIM;
		if (opt_count(hint, "--rope-dim", arg, SIZE_MAX / 2, &s->cfg.rope.dim))
			return -1;
		if (s->cfg.rope.dim % 2) {
			usage_error(hint, "--rope-dim turns pairs of features: %zu is odd",
				    s->cfg.rope.dim);
			return -1;
		}
		break;
	case O_ROPE_SCALING:
		/* none: the frequencies unscaled, over config.json's rope_scaling */
		s->given |= GIVEN_ROPE_SCALING;
		s->rope_scaling = strcmp(arg, "none") ? arg : NULL;
		break;
	case O_NORM: {
		unsigned i = MHA_NORM_NONE;

		while (i <= MHA_NORM_LAYER && strcmp(arg, step_norm_kind((mha_norm_kind)i)))
			i++;
		if (i > MHA_NORM_LAYER) {
			usage_error(hint, "--norm takes rms, rms1p, layer or none, not '%s'", arg);
			return -1;
		}
		s->cfg.norm.kind = (mha_norm_kind)i;
		s->given |= GIVEN_NORM;
		break;
	}
	case O_NORM_EPS:
		if (value_eps(hint, "--norm-eps", arg, &s->cfg.norm.eps))
			return -1;
		s->given |= GIVEN_NORM_EPS;
		break;
	case O_NORM_OVER:
		if (strcmp(arg, "head") && strcmp(arg, "all")) {
			usage_error(hint, "--norm-over takes head or all, not '%s'", arg);
			return -1;
		}
		s->cfg.norm.over_all = !strcmp(arg, "all");
		s->given |= GIVEN_NORM_OVER;
		break;
	case O_SOFTCAP:
		/* none: no cap, over config.json's */
		s->given |= GIVEN_SOFTCAP;
		s->cfg.softcap = 0;
		if (!strcmp(arg, "none"))
			break;
		if (value_real(hint, "--softcap", arg, &s->cfg.softcap))
			return -1;
		if (s->cfg.softcap <= 0) {
			usage_error(hint, "--softcap expects a number above 0, or none, not '%s'", arg);
			return -1;
		}
		break;
	case O_QK_ROPE:
		if (opt_count(hint, "--qk-rope-head-dim", arg, SIZE_MAX / 2,
			      &s->rope_head_dim))
			return -1;
		s->given |= GIVEN_QK_ROPE;
		break;
	case O_MLA_EPS:
		if (value_eps(hint, "--mla-eps", arg, &s->cfg.mla.eps))
			return -1;
		s->given |= GIVEN_MLA_EPS;
		break;
	case O_BIASES:
		if (value_biases(hint, arg, &s->biases))
			return -1;
		s->given |= GIVEN_BIASES;
		break;
	default:
		return 0;
	}
	return 1;
}

/*
 * The command line into o (o->own kept): 0, 1 after --help (printed), -1
 * a usage error (said).  free(o->kv_lens) after.
 */
int attn_parse(int argc, char **argv, struct attn_options *o, const struct attn_command *cmd)
{
	const char *hint = cmd->name;
	/* the shared options, then the command's own (compare's --against …) */
	struct option all[ATTN_MAX_ROWS + ATTN_MAX_EXTRA + 1];
	size_t n_extra = 0;
	int c;
	size_t n;

	memcpy(all, attn_option_table(NULL), attn_n_rows * sizeof(all[0]));
	while (cmd->extra && cmd->extra[n_extra].name && n_extra < ATTN_MAX_EXTRA)
		n_extra++;
	if (n_extra)
		memcpy(all + attn_n_rows, cmd->extra, n_extra * sizeof(all[0]));
	memset(&all[attn_n_rows + n_extra], 0, sizeof(all[0]));
	{
		void *own = o->own;

		memset(o, 0, sizeof(*o));
		o->own = own;
	}
	o->cmd = cmd;
	/* --list-options alone: the options the command takes (those of the groups
	 * its help describes, and its own), as JSON, for programs (the Python package) */
	if (attn_list_options_asked(argc, argv) < 0) {
		usage_error(hint, ATTN_LIST_OPTIONS_ALONE);
		return -1;
	}
	if (attn_list_options_asked(argc, argv)) {
		struct option takes[ATTN_MAX_ROWS + ATTN_MAX_EXTRA + 1];
		char *help = NULL;
		size_t size = 0, k = 0;
		FILE *fp = open_memstream(&help, &size);
		int rc = !fp || attn_help(fp, cmd) || fclose(fp) ? -1 : 0;

		for (size_t i = 0; i < attn_n_rows; i++)
			if (attn_rows[i].group & (cmd->help_groups | cmd->takes) & ~(unsigned)OPT_ALIAS)
				takes[k++] = attn_rows[i].o;
		for (size_t i = 0; i < n_extra; i++)
			takes[k++] = cmd->extra[i];
		memset(&takes[k], 0, sizeof(takes[0]));
		if (!rc)
			rc = attn_list_options(stdout, cmd->name, takes, help);
		free(help);
		return rc ? -1 : 1;
	}
	o->spec.heads = 1;
	o->emit.precision = 6;
	o->max_memory = opt_memory_default();
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:p:f:o:hq", all, NULL)) != -1) {
		if (c >= ATTN_EXTRA_BASE && cmd->extra_opt) {
			if (cmd->extra_opt(o, c, optarg))
				return -1;
			continue;
		}
		/* the layer's settings, 'mha model''s too */
		if (attn_is_setting(c)) {
			if (attn_setting(hint, c, optarg, &o->spec) < 0)
				return -1;
			continue;
		}
		switch (c) {
		case 'x': o->spec.x = optarg; break;
		case 'w': o->spec.w = optarg; break;
		case O_KV: o->spec.kv = optarg; break;
		case O_XK: o->spec.xk = optarg; break;
		case O_XV: o->spec.xv = optarg; break;
		case O_Q: o->spec.q = optarg; break;
		case O_K:
		case O_KT:
			/* --kt FILE is --k with the file transposed: one or the other */
			if (o->spec.k && (c == O_KT) != o->spec.k_transposed) {
				usage_error(hint, "--k and --kt cannot be used together (--kt gives "
					    "K transposed)");
				return -1;
			}
			o->spec.k = optarg;
			o->spec.k_transposed = c == O_KT;
			break;
		case O_RANGE:
			if (heat_range_parse(&o->emit.range, optarg)) {
				usage_error(hint, "--range takes auto or MIN,MAX (finite numbers, MIN "
					    "below MAX), not '%s'", optarg);
				return -1;
			}
			o->range_given = 1;
			break;
		case O_HEAD:
			if (opt_count(hint, "--head", optarg, SIZE_MAX / 2, &o->emit.head))
				return -1;
			break;
		case O_V: o->spec.v = optarg; break;
		case O_MASK: o->spec.mask = optarg; break;
		case O_MASK_BOOL:
			if (strcmp(optarg, "attend") && strcmp(optarg, "block")) {
				usage_error(hint, "--mask-bool takes attend or block, not '%s'", optarg);
				return -1;
			}
			o->spec.mask_block = !strcmp(optarg, "block");
			o->mask_bool = 1;
			break;
		/* a slopes file is ALiBi with those slopes: with --alibi as well, the same */
		case O_ALIBI: o->spec.cfg.alibi.on = 1; break;
		case O_ALIBI_SLOPES: o->spec.alibi_slopes = optarg; o->spec.cfg.alibi.on = 1; break;
		case O_POSITIONS: o->spec.positions = optarg; break;
		case O_ROPE_COS: o->spec.rope_cos = optarg; break;
		case O_ROPE_SIN: o->spec.rope_sin = optarg; break;
		case O_Q_NORM: o->spec.q_norm = optarg; break;
		case O_LATENT + LAT_Q_A_PROJ: case O_LATENT + LAT_Q_A_NORM:
		case O_LATENT + LAT_KV_A_PROJ: case O_LATENT + LAT_KV_A_NORM:
		case O_LATENT + LAT_KV_B_PROJ:
			o->spec.latent[c - O_LATENT] = optarg;
			break;
		case O_ABSORB: o->spec.cfg.mla.absorbed = 1; break;
		case O_K_NORM: o->spec.k_norm = optarg; break;
		case O_ONE + WQ: case O_ONE + WK: case O_ONE + WV: case O_ONE + WO:
		case O_ONE + BQ: case O_ONE + BK: case O_ONE + BV: case O_ONE + BO:
			o->spec.one[c - O_ONE] = optarg;
			break;
		case O_LAYOUT: {
			/* a family's checkpoint names and layout; torch is both */
			char words[128];

			if (family_by_layout(optarg, 0, &o->spec.family)) {
				usage_error(hint, "--layout takes %s, not '%s'",
					    family_layouts(0, words, sizeof(words)), optarg);
				return -1;
			}
			o->spec.layout = o->spec.family == FAMILY_NONE ? LAYOUT_MHA :
					 families[o->spec.family].layout;
			o->spec.given |= GIVEN_LAYOUT;
			break;
		}
		case O_CONFIG: o->spec.config = optarg; break;
		case O_PREFIX: o->spec.prefix = optarg; break;
		case O_LAYER:
			if (value_layer(hint, optarg, &o->spec.layer))
				return -1;
			o->spec.has_layer = 1;
			break;
		case 'o': o->emit.output = optarg; break;
		case O_FULL: o->emit.full = 1; break;
		case O_COMPRESS: o->emit.compress = 1; break;
		case O_PROGRESS: o->progress = PROGRESS_ON; break;
		case O_ROWS: o->spec.rows = optarg; break;
		case O_COLS: o->spec.cols = optarg; break;
		case O_FORCE: o->emit.fit.force = 1; break;
		case O_POOL: {
			/* max or mean, then :K, the block's side */
			const size_t len = strcspn(optarg, ":");
			const int max = len == 3 && !strncmp(optarg, "max", 3);
			const int mean = len == 4 && !strncmp(optarg, "mean", 4);

			o->emit.pool_k = 0;
			if ((!max && !mean) ||
			    (optarg[len] && opt_count(hint, "--pool's block", optarg + len + 1,
						      SIZE_MAX / 2, &o->emit.pool_k))) {
				if (!max && !mean)
					usage_error(hint, "--pool takes max or mean, then :K for blocks "
						    "of K by K cells (max:16), not '%s'", optarg);
				return -1;
			}
			o->emit.pool = max ? POOL_MAX : POOL_MEAN;
			break;
		}
		case 'q': o->progress = PROGRESS_OFF; break;
		case O_JSON_NONFINITE:
			if (strcmp(optarg, "strings") && strcmp(optarg, "python")) {
				usage_error(hint, "--json-nonfinite takes strings or python, not '%s'",
					    optarg);
				return -1;
			}
			o->emit.bare_nonfinite = !strcmp(optarg, "python");
			break;
		case O_DTYPE:
			o->dtype_given = 1;
			if (!strcmp(optarg, "f64") || !strcmp(optarg, "float64")) {
				o->f32 = 0;
			} else if (!strcmp(optarg, "f32") || !strcmp(optarg, "float32")) {
				o->f32 = 1;
			} else {
				usage_error(hint, "--dtype takes f64 or f32, not '%s'", optarg);
				return -1;
			}
			break;
		case O_THREADS:
			if (opt_count(hint, "--threads", optarg, 4096, &n))
				return -1;
			o->spec.cfg.threads = (int)n;
			break;
		case O_TOKENS: o->spec.tokens = optarg; break;
		case O_EXPLAIN: o->explain = 1; break;
		case O_CELL: o->spec.cell = optarg; break;
		case O_COLOR:
			o->color_given = 1;
			if (!optarg || !strcmp(optarg, "always")) {
				o->emit.color = 1;
			} else if (!strcmp(optarg, "auto")) {
				o->emit.color = 0;
			} else if (!strcmp(optarg, "never")) {
				o->emit.color = -1;
			} else {
				usage_error(hint, "--color takes auto, always or never, not '%s'",
					    optarg);
				return -1;
			}
			break;
		case O_KV_TOKENS: o->spec.kv_tokens = optarg; break;
		case O_MAX_MEMORY:
			if (opt_bytes(optarg, &o->max_memory)) {
				usage_error(hint, "--max-memory takes a size such as 512M, 4G or 1.5GiB, "
					    "or none, not '%s'", optarg);
				return -1;
			}
			break;
		case O_EXACT:
			o->spec.cfg.exact = 1;
			break;
		case O_KV_LEN:
			if (parse_kv_len(hint, optarg, o))
				return -1;
			break;
		case O_SEQUENCE:
			if (opt_count(hint, "--sequence", optarg, SIZE_MAX / 2, &o->sequence))
				return -1;
			break;
		case O_GRAD_OUTPUT:
			if (!(cmd->takes & OPT_GRAD)) {
				usage_error(hint, "--grad-output is an option of 'mha backward'");
				return -1;
			}
			o->spec.grad_output = optarg;
			break;
		case 'p':
			o->print_given = 1;
			o->print_arg = optarg;
			if (cmd->print ? cmd->print(o, optarg) : print_steps(o, optarg))
				return -1;
			break;
		case 'f':
			o->format_given = 1;
			if (emit_format_by_name(optarg, &o->emit.format)) {
				char names[160];

				usage_error(hint, "--format takes %s, not '%s'",
					    emit_format_list(1, names, sizeof(names)), optarg);
				return -1;
			}
			break;
		case O_PRECISION:
			o->precision_given = 1;
			if (opt_count(hint, "--precision", optarg, SIZE_MAX / 2, &n))
				return -1;
			if (n > 17) {
				usage_error(hint, "--precision takes 1 to 17 digits, not %zu", n);
				return -1;
			}
			o->emit.precision = (int)n;
			break;
		case 'h':
			attn_help(stdout, cmd);
			return 1;
		default: /* ':' or '?' */
			opt_error(hint, c, argv, all);
			return -1;
		}
	}
	if (optind < argc) {
		usage_error(hint, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

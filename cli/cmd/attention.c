/*
 * attention.c: the attention commands' one command line (attention.h):
 * the option table and its parsing, the checks every command makes, and
 * the start-up from argv to a loaded problem handed to the command's run.
 * What a command prints, and how its own options combine, are its hooks'.
 */
#include "cmd/attention.h"

#include "base/budget.h"
#include "base/cli.h"
#include "base/files.h"
#include "load/model.h"
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

static int parse_real(const char *hint, const char *opt, const char *arg, double *out)
{
	if (!opt_number(arg, out)) {
		usage_error(hint, "%s expects a finite number, not '%s'", opt, arg);
		return -1;
	}
	return 0;
}

/* --layer N: a layer's number, from 0 (digits only, so not opt_count's "from 1") */
static int parse_layer(const char *hint, const char *arg, size_t *out)
{
	size_t v = 0, i = 0;

	for (; arg[i] >= '0' && arg[i] <= '9' && v <= SIZE_MAX / 20; i++)
		v = v * 10 + (size_t)(arg[i] - '0');
	if (!i || arg[i]) {
		usage_error(hint, "--layer expects a whole number from 0, not '%s'", arg);
		return -1;
	}
	*out = v;
	return 0;
}

/* one side of --window: -1 or a whole number from 0, digits only (no blanks, no '+') */
static int window_side(const char *s, size_t len, ptrdiff_t *out)
{
	long long v = 0;
	size_t at = s[0] == '-';

	if (len == at || len > at + 18)
		return -1;
	for (size_t i = at; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (at && v != 1)
		return -1;
	*out = at ? -1 : (ptrdiff_t)v;
	return 0;
}

/* --window L[,R]: R absent is -1 (unbounded to the right) */
static int parse_window(const char *hint, const char *arg, mha_window *w)
{
	const char *comma = strchr(arg, ',');
	const size_t ll = comma ? (size_t)(comma - arg) : strlen(arg);

	w->on = 1;
	w->right = -1;
	if (window_side(arg, ll, &w->left) ||
	    (comma && window_side(comma + 1, strlen(comma + 1), &w->right))) {
		usage_error(hint, "--window takes L or L,R: whole numbers of keys from 0, or -1 "
			    "for unbounded, not '%s'", arg);
		return -1;
	}
	return 0;
}

static int parse_scale(const char *hint, const char *arg, mha_config *cfg)
{
	static const struct { const char *name; mha_scale_mode mode; } modes[] = {
		{ "dk", MHA_SCALE_DK }, { "dmodel", MHA_SCALE_DMODEL },
		{ "seqlen", MHA_SCALE_SEQLEN }, { "none", MHA_SCALE_NONE },
	};

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(arg, modes[i].name)) {
			cfg->scale_mode = modes[i].mode;
			return 0;
		}
	cfg->scale_mode = MHA_SCALE_VALUE;
	if (!opt_number(arg, &cfg->scale)) {
		usage_error(hint, "--scale takes dk, dmodel, seqlen, none or a number, not '%s'",
			    arg);
		return -1;
	}
	return 0;
}

/* ---- the options ----------------------------------------------------- */

enum { O_KV = 256, O_XK, O_XV, O_Q, O_K, O_V, O_MASK, O_MASK_BOOL, O_HEADS, O_KV_HEADS, O_SCALE,
       O_CAUSAL, O_WINDOW, O_SINKS, O_ALIBI, O_ALIBI_SLOPES, O_ROPE, O_ROPE_THETA, O_ROPE_DIM, O_POSITIONS,
       O_ROPE_COS, O_ROPE_SIN, O_SOFTCAP, O_PRECISION, O_LAYOUT, O_KV_LEN, O_DTYPE, O_THREADS,
       O_EXACT, O_CONFIG, O_LAYER, O_PREFIX,
       O_MAX_MEMORY, O_TOKENS, O_KV_TOKENS, O_COLOR, O_EXPLAIN, O_CELL, O_SEQUENCE,
       O_RANGE, O_HEAD, O_KT, O_GRAD_OUTPUT,
       O_ONE /* + WQ … BO */ };

/* Every shared option, once: getopt_long's row and the group a help describes it in. */
#define R required_argument
static const struct { struct option o; unsigned group; } rows[] = {
	{ { "x", R, NULL, 'x' }, OPT_INPUT },
	{ { "weights", R, NULL, 'w' }, OPT_INPUT },
	{ { "kv", R, NULL, O_KV }, OPT_INPUT },
	{ { "xk", R, NULL, O_XK }, OPT_INPUT },
	{ { "xv", R, NULL, O_XV }, OPT_INPUT },
	{ { "q", R, NULL, O_Q }, OPT_INPUT },
	{ { "k", R, NULL, O_K }, OPT_INPUT },
	{ { "v", R, NULL, O_V }, OPT_INPUT },
	{ { "mask", R, NULL, O_MASK }, OPT_INPUT },
	{ { "mask-bool", R, NULL, O_MASK_BOOL }, OPT_INPUT },
	{ { "wq", R, NULL, O_ONE + WQ }, OPT_INPUT },
	{ { "wk", R, NULL, O_ONE + WK }, OPT_INPUT },
	{ { "wv", R, NULL, O_ONE + WV }, OPT_INPUT },
	{ { "wo", R, NULL, O_ONE + WO }, OPT_INPUT },
	{ { "bq", R, NULL, O_ONE + BQ }, OPT_INPUT },
	{ { "bk", R, NULL, O_ONE + BK }, OPT_INPUT },
	{ { "bv", R, NULL, O_ONE + BV }, OPT_INPUT },
	{ { "bo", R, NULL, O_ONE + BO }, OPT_INPUT },
	{ { "layout", R, NULL, O_LAYOUT }, OPT_INPUT },
	{ { "config", R, NULL, O_CONFIG }, OPT_INPUT },
	{ { "layer", R, NULL, O_LAYER }, OPT_INPUT },
	{ { "prefix", R, NULL, O_PREFIX }, OPT_INPUT },
	{ { "heads", R, NULL, O_HEADS }, OPT_ATTN },
	{ { "kv-heads", R, NULL, O_KV_HEADS }, OPT_ATTN },
	{ { "scale", R, NULL, O_SCALE }, OPT_ATTN },
	{ { "causal", optional_argument, NULL, O_CAUSAL }, OPT_ATTN },
	{ { "kv-len", R, NULL, O_KV_LEN }, OPT_ATTN },
	{ { "window", R, NULL, O_WINDOW }, OPT_ATTN },
	{ { "sinks", R, NULL, O_SINKS }, OPT_ATTN },
	{ { "alibi", no_argument, NULL, O_ALIBI }, OPT_ATTN },
	{ { "alibi-slopes", R, NULL, O_ALIBI_SLOPES }, OPT_ATTN },
	{ { "rope", R, NULL, O_ROPE }, OPT_ATTN },
	{ { "rope-theta", R, NULL, O_ROPE_THETA }, OPT_ATTN },
	{ { "rope-dim", R, NULL, O_ROPE_DIM }, OPT_ATTN },
	{ { "positions", R, NULL, O_POSITIONS }, OPT_ATTN },
	{ { "rope-cos", R, NULL, O_ROPE_COS }, OPT_ATTN },
	{ { "rope-sin", R, NULL, O_ROPE_SIN }, OPT_ATTN },
	{ { "dtype", R, NULL, O_DTYPE }, OPT_DTYPE },
	{ { "threads", R, NULL, O_THREADS }, OPT_RUN },
	{ { "exact", no_argument, NULL, O_EXACT }, OPT_EXACT },
	{ { "max-memory", R, NULL, O_MAX_MEMORY }, OPT_RUN },
	{ { "tokens", R, NULL, O_TOKENS }, OPT_INPUT },
	{ { "explain", no_argument, NULL, O_EXPLAIN }, OPT_EXPLAIN },
	{ { "cell", R, NULL, O_CELL }, OPT_EXPLAIN },
	{ { "sequence", R, NULL, O_SEQUENCE }, OPT_RUN },
	{ { "color", optional_argument, NULL, O_COLOR }, OPT_PICTURE },
	{ { "colour", optional_argument, NULL, O_COLOR }, OPT_ALIAS },
	{ { "kv-tokens", R, NULL, O_KV_TOKENS }, OPT_INPUT },
	{ { "softcap", R, NULL, O_SOFTCAP }, OPT_ATTN },
	{ { "print", R, NULL, 'p' }, OPT_PRINT },
	{ { "format", R, NULL, 'f' }, OPT_RUN },
	{ { "precision", R, NULL, O_PRECISION }, OPT_PRINT },
	{ { "output", R, NULL, 'o' }, OPT_PRINT },
	{ { "help", no_argument, NULL, 'h' }, OPT_RUN },
	{ { "range", R, NULL, O_RANGE }, OPT_PICTURE },
	{ { "head", R, NULL, O_HEAD }, OPT_PICTURE },
	{ { "kt", R, NULL, O_KT }, OPT_INPUT },
	/* a command that does not take it refuses it, naming the one that does */
	{ { "grad-output", R, NULL, O_GRAD_OUTPUT }, OPT_GRAD },
};
#undef R

#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

const struct option *attn_option_table(const unsigned **groups)
{
	static struct option table[N_ROWS + 1];
	static unsigned group[N_ROWS + 1];

	for (size_t i = 0; i < N_ROWS; i++) {
		table[i] = rows[i].o;
		group[i] = rows[i].group;
	}
	if (groups)
		*groups = group;
	return table;
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

/*
 * The command line into o (o->own kept): 0, 1 after --help (printed), -1
 * a usage error (said).  free(o->kv_lens) after.
 */
static int attn_parse(int argc, char **argv, struct attn_options *o, const struct attn_command *cmd)
{
	const char *hint = cmd->name;
	/* the shared options, then the command's own (compare's --against …) */
	struct option all[N_ROWS + ATTN_MAX_EXTRA + 1];
	size_t n_extra = 0;
	int c;
	size_t n;

	memcpy(all, attn_option_table(NULL), N_ROWS * sizeof(all[0]));
	while (cmd->extra && cmd->extra[n_extra].name && n_extra < ATTN_MAX_EXTRA)
		n_extra++;
	if (n_extra)
		memcpy(all + N_ROWS, cmd->extra, n_extra * sizeof(all[0]));
	memset(&all[N_ROWS + n_extra], 0, sizeof(all[0]));
	{
		void *own = o->own;

		memset(o, 0, sizeof(*o));
		o->own = own;
	}
	o->cmd = cmd;
	o->spec.heads = 1;
	o->emit.precision = 6;
	o->max_memory = opt_memory_default();
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:p:f:o:h", all, NULL)) != -1) {
		if (c >= ATTN_EXTRA_BASE && cmd->extra_opt) {
			if (cmd->extra_opt(o, c, optarg))
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
		case O_SINKS: o->spec.sinks = optarg; break;
		/* a slopes file is ALiBi with those slopes: with --alibi as well, the same */
		case O_ALIBI: o->spec.cfg.alibi.on = 1; break;
		case O_ALIBI_SLOPES: o->spec.alibi_slopes = optarg; o->spec.cfg.alibi.on = 1; break;
		case O_ROPE:
			o->spec.given |= GIVEN_ROPE;
			if (!strcmp(optarg, "half")) {
				o->spec.cfg.rope.mode = MHA_ROPE_HALF;
			} else if (!strcmp(optarg, "interleaved")) {
				o->spec.cfg.rope.mode = MHA_ROPE_INTERLEAVED;
			} else {
				usage_error(hint, "--rope takes half or interleaved, not '%s'", optarg);
				return -1;
			}
			break;
		case O_ROPE_THETA:
			o->spec.given |= GIVEN_ROPE_THETA;
			if (parse_real(hint, "--rope-theta", optarg, &o->spec.cfg.rope.theta))
				return -1;
			if (o->spec.cfg.rope.theta <= 0) {
				usage_error(hint, "--rope-theta expects a number above 0, not '%s'",
					    optarg);
				return -1;
			}
			break;
		case O_ROPE_DIM:
			o->spec.given |= GIVEN_ROPE_DIM;
			if (opt_count(hint, "--rope-dim", optarg, SIZE_MAX / 2, &o->spec.cfg.rope.dim))
				return -1;
			if (o->spec.cfg.rope.dim % 2) {
				usage_error(hint, "--rope-dim turns pairs of features: %zu is odd",
					    o->spec.cfg.rope.dim);
				return -1;
			}
			break;
		case O_POSITIONS: o->spec.positions = optarg; break;
		case O_ROPE_COS: o->spec.rope_cos = optarg; break;
		case O_ROPE_SIN: o->spec.rope_sin = optarg; break;
		case O_ONE + WQ: case O_ONE + WK: case O_ONE + WV: case O_ONE + WO:
		case O_ONE + BQ: case O_ONE + BK: case O_ONE + BV: case O_ONE + BO:
			o->spec.one[c - O_ONE] = optarg;
			break;
		case O_LAYOUT: {
			/* a family's checkpoint names and layout; torch is both */
			static const char *const names[] = { "mha", "llama", "gpt2", "bert", "torch" };
			size_t i = 0;

			while (i < 5 && strcmp(optarg, names[i]))
				i++;
			if (i == 5) {
				usage_error(hint, "--layout takes mha, torch, llama, gpt2 or bert, not '%s'",
					    optarg);
				return -1;
			}
			o->spec.family = (model_family)i;
			o->spec.layout = i == FAMILY_GPT2 || i == FAMILY_NONE ? LAYOUT_MHA : LAYOUT_TORCH;
			o->spec.given |= GIVEN_LAYOUT;
			break;
		}
		case O_CONFIG: o->spec.config = optarg; break;
		case O_PREFIX: o->spec.prefix = optarg; break;
		case O_LAYER:
			if (parse_layer(hint, optarg, &o->spec.layer))
				return -1;
			o->spec.has_layer = 1;
			break;
		case 'o': o->emit.output = optarg; break;
		case O_HEADS:
			o->spec.given |= GIVEN_HEADS;
			if (opt_count(hint, "--heads", optarg, SIZE_MAX / 2, &o->spec.heads))
				return -1;
			break;
		case O_KV_HEADS:
			o->spec.given |= GIVEN_KV_HEADS;
			if (opt_count(hint, "--kv-heads", optarg, SIZE_MAX / 2, &o->spec.kv_heads))
				return -1;
			break;
		case O_SCALE:
			o->spec.given |= GIVEN_SCALE;
			if (parse_scale(hint, optarg, &o->spec.cfg))
				return -1;
			break;
		case O_CAUSAL:
			o->spec.given |= GIVEN_CAUSAL;
			if (!optarg || !strcmp(optarg, "top-left")) {
				o->spec.cfg.causal = MHA_CAUSAL_TOP_LEFT;
			} else if (!strcmp(optarg, "bottom-right")) {
				o->spec.cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
			} else if (opt_offset(optarg, &o->spec.cfg.causal_offset)) {
				o->spec.cfg.causal = MHA_CAUSAL_OFFSET;
			} else {
				usage_error(hint, "--causal takes top-left, bottom-right or a whole "
					    "number, not '%s'", optarg);
				return -1;
			}
			break;
		case O_DTYPE:
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
		case O_CELL: o->spec.cell = optarg; o->explain = 1; break;
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
		case O_WINDOW:
			o->spec.given |= GIVEN_WINDOW;
			if (parse_window(hint, optarg, &o->spec.cfg.window))
				return -1;
			break;
		case O_SOFTCAP:
			if (parse_real(hint, "--softcap", optarg, &o->spec.cfg.softcap))
				return -1;
			if (o->spec.cfg.softcap <= 0) {
				usage_error(hint, "--softcap expects a number above 0, not '%s'",
					    optarg);
				return -1;
			}
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
				usage_error(hint, "--format takes text, json, csv, markdown, npy, "
					    "npz, heatmap, svg or html, not '%s'", optarg);
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
			fputs(cmd->usage, stdout);
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

/* ---- the checks every command makes ------------------------------------ */

/* Which inputs go together: everything here is known before reading a file. */
static int check_options(struct attn_options *o)
{
	struct problem_spec *s = &o->spec;
	const char *hint = o->cmd->name;
	const int direct = s->q || s->k || s->v;

	if (!s->x && !direct)
		return usage_error(hint, "no input: give -x FILE, or --q, --k and --v");
	if (s->x && direct)
		return usage_error(hint, "-x and --q/%s/--v cannot be used together",
				   s->k_transposed ? "--kt" : "--k");
	if (direct && !(s->q && s->k && s->v))
		return usage_error(hint, "--q, --k (or --kt) and --v go together: missing %s",
				   !s->q ? "--q" : !s->k ? "--k or --kt" : "--v");
	if (direct && s->kv)
		return usage_error(hint, "--kv cannot be used with --q/--k/--v (K and V are "
				   "given)");
	if (!s->xk != !s->xv)
		return usage_error(hint, "--xk and --xv go together: missing %s",
				   s->xk ? "--xv" : "--xk");
	if (s->xk && direct)
		return usage_error(hint, "--xk/--xv cannot be used with --q/--k/--v (K and V are "
				   "given)");
	if (s->xk && s->kv)
		return usage_error(hint, "--xk/--xv and --kv cannot be used together (--kv is "
				   "both at once)");
	for (int i = WQ; i < N_WEIGHTS; i++)
		if (direct && s->one[i] && i != WO && i != BO)
			return usage_error(hint, "--%c%c cannot be used with --q/--k/--v (they are "
					   "given directly); only --wo and --bo can",
					   i >= BQ ? 'b' : 'w', "qkvoqkvo"[i]);
	if (!s->cfg.rope.mode) {
		/* the rotary options are settings of --rope */
		const char *const alone = s->cfg.rope.theta ? "--rope-theta" : s->cfg.rope.dim ?
			"--rope-dim" : s->positions ? "--positions" : s->rope_cos ? "--rope-cos" :
			s->rope_sin ? "--rope-sin" : NULL;

		if (alone)
			return usage_error(hint, "%s needs --rope half or --rope interleaved", alone);
		if (o->print & (STEP_BIT(STEP_Q_ROT) | STEP_BIT(STEP_K_ROT)))
			return usage_error(hint, "--print %s needs --rope",
					   o->print & STEP_BIT(STEP_Q_ROT) ? "q_rot" : "k_rot");
	}
	if (o->mask_bool && !s->mask)
		return usage_error(hint, "--mask-bool says what a --mask file's booleans mean: "
				   "give --mask FILE");
	if (s->has_layer && s->prefix)
		return usage_error(hint, "--layer and --prefix cannot be used together (--prefix "
				   "names the module whole)");
	if ((s->has_layer || s->prefix) && !s->w)
		return usage_error(hint, "%s picks a module of a checkpoint: give -w",
				   s->has_layer ? "--layer" : "--prefix");
	if (!s->rope_cos != !s->rope_sin)
		return usage_error(hint, "--rope-cos and --rope-sin go together: missing %s",
				   s->rope_cos ? "--rope-sin" : "--rope-cos");
	if (s->rope_cos && s->cfg.rope.theta)
		return usage_error(hint, "--rope-theta cannot be used with --rope-cos/--rope-sin "
				   "(the tables give the angles)");
	{
		const char *const files[] = { s->x, s->kv, s->xk, s->xv, s->w, s->q, s->k, s->v,
					      s->mask, s->positions, s->rope_cos, s->rope_sin, s->config,
					      s->grad_output };
		int stdin_uses = 0;

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			stdin_uses += files[i] && !strcmp(files[i], "-");
		for (int i = 0; i < N_WEIGHTS; i++)
			stdin_uses += s->one[i] && !strcmp(s->one[i], "-");
		if (stdin_uses > 1)
			return usage_error(hint, "only one input can be '-' (standard input)");
	}
	if (!s->kv_heads)
		s->kv_heads = s->heads;
	if (s->kv_heads > s->heads || s->heads % s->kv_heads)
		return usage_error(hint, "--kv-heads %zu does not divide --heads %zu",
				   s->kv_heads, s->heads);
	return o->cmd->check(o);
}

int attn_refuse_picture_options(const struct attn_options *o)
{
	if ((o->range_given || o->emit.head) && o->emit.format != FORMAT_HTML &&
	    o->emit.format != FORMAT_HEATMAP && o->emit.format != FORMAT_SVG)
		return usage_error(o->cmd->name, "%s is for pictures: add --format heatmap, svg or html",
				   o->range_given ? "--range" : "--head");
	return 0;
}

int attn_pick_sequence(const struct attn_options *o, struct problem *pb)
{
	const char *hint = o->cmd->name;

	if (o->sequence && !pb->batch)
		return usage_error(hint, "--sequence %zu picks a sequence of a batch, but the inputs "
				   "are 2-D (one sequence)", o->sequence);
	if (o->sequence > pb->batch)
		return usage_error(hint, "--sequence %zu but the batch holds %zu sequence%s",
				   o->sequence, pb->batch, pb->batch == 1 ? "" : "s");
	if (o->emit.head > pb->d.heads)
		return usage_error(hint, "--head %zu but there %s %zu head%s", o->emit.head,
				   pb->d.heads == 1 ? "is" : "are", pb->d.heads, pb->d.heads == 1 ? "" : "s");
	if (o->emit.format == FORMAT_SVG && pb->batch > 1 && !o->sequence)
		return usage_error(hint, "an SVG draws one sequence, and the batch holds %zu: add "
				   "--sequence N", pb->batch);
	/* --sequence N: that one alone, as if it had been given by itself */
	if (o->sequence && problem_keep_sequence(pb, o->sequence - 1))
		return EXIT_DATA;
	return 0;
}

/* ---- no output over an input ------------------------------------------ */

static int may_write(const char *name, void *ctx)
{
	const struct attn_options *o = ctx;

	return o->cmd->may_write(o, name);
}

/*
 * -o naming one of the inputs, by any name: refused before anything is
 * read, by device and inode.  -o DIR/ is checked for each file in DIR the
 * run may write.  0, or -1 said.
 */
static int refuse_output_over_input(const struct attn_options *o)
{
	if (!o->emit.output || !strcmp(o->emit.output, "-"))
		return 0;
	if (problem_note_inputs(&o->spec))
		return -1;
	return emit_is_dir(o->emit.output)
		? files_refuse_output_in_dir(o->emit.output, may_write, (void *)o)
		: files_refuse_output(o->emit.output);
}

/* ---- the command ------------------------------------------------------- */

int attn_check_args(int argc, char **argv, const struct attn_command *cmd, void *own)
{
	struct attn_options o = { .own = own };
	int rc;

	switch (attn_parse(argc, argv, &o, cmd)) {
	case 1: rc = 1; break;
	case 0: rc = (cmd->refuse && cmd->refuse(&o)) || check_options(&o) ? EXIT_USAGE : 0; break;
	default: rc = EXIT_USAGE; break;
	}
	free(o.kv_lens);
	return rc;
}

int attn_main(int argc, char **argv, const struct attn_command *cmd, void *own)
{
	struct attn_options o = { .own = own };
	struct problem pb;
	int rc;

	memset(&pb, 0, sizeof(pb));
	switch (attn_parse(argc, argv, &o, cmd)) {
	case 1: rc = EXIT_OK; goto done;
	case 0: break;
	default: rc = EXIT_USAGE; goto done;
	}
	budget_init(o.max_memory);
	rc = EXIT_USAGE;
	if (cmd->refuse && cmd->refuse(&o))
		goto done;
	/* config.json's settings under the command line's, before they are
	 * checked: a bad file is bad data */
	rc = EXIT_DATA;
	if (model_config(&o.spec))
		goto done;
	rc = EXIT_USAGE;
	if (check_options(&o) || refuse_output_over_input(&o))
		goto done;
	/* one limit from the first byte read to the last written */
	budget_init(o.max_memory);
	rc = problem_load(&pb, &o.spec);
	if (rc) {
		rc = cmd->load_failed ? cmd->load_failed : rc;
		goto done;
	}
	rc = cmd->run(&o, &pb);
done:
	problem_free(&pb);
	free(o.kv_lens);
	return rc;
}

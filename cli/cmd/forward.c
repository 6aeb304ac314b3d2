/*
 * cmd/forward.c: 'mha forward', one multi-head attention from files, with
 * any of its intermediates printed (and 'mha heatmap', the same command
 * drawing by default: cmd/heatmap.c).
 *
 * This file owns the command line: the help, the options and how they
 * combine.  Then it loads the problem (problem.c), plans the steps to print
 * (steps.c), runs the library's mha_forward() with an observer keeping a
 * copy of each, and emits them (emit.c).
 */
#include "base/cli.h"
#include "base/budget.h"
#include "write/emit.h"
#include "base/files.h"
#include "cmd/forward.h"
#include "load/model.h"
#include "load/load.h"
#include "load/shapes.h"
#include "run/run.h"
#include "run/steps.h"

#include "mha.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char forward_usage[] =
	"usage: mha forward -x FILE [-w FILE] [--kv FILE] [options]\n"
	"       mha forward --q FILE --k FILE --v FILE [-w FILE] [options]\n"
	"\n"
	"Compute multi-head attention and print the output, or any step of it.\n"
	"\n"
	FORWARD_USAGE_INPUTS
	FORWARD_USAGE_ATTENTION
	"Computation:\n"
	"      --dtype T         f64 (default: exact tutorial numbers, every step can be\n"
	"                        printed) or f32 (faster; prints x and output only)\n"
	FORWARD_USAGE_RUN
	"      --exact           the plain path even when no step is printed: the\n"
	"                        output then has the very bits --print all shows (the\n"
	"                        fast path agrees with it to rounding)\n"
	"\n"
	"Output:\n"
	"  -p, --print LIST      comma-separated steps to print: x, q, k, v, scores,\n"
	"                        scaled, softcapped, mask, masked, softmax, heads,\n"
	"                        concat, output; or all (default: output)\n"
	"  -f, --format FMT      text, json, csv, markdown, npy, npz (every step in one\n"
	"                        NumPy archive), heatmap (coloured cells in the\n"
	"                        terminal), svg (a picture) or html (an interactive\n"
	"                        page); default: from -o's name, .json .csv .npy .npz\n"
	"                        .md .svg .html .txt, a directory is csv, no extension\n"
	"                        text (another is refused).\n"
	"                        heatmap and svg draw each head's softmax,\n"
	"                        or the one step --print names (scores, scaled,\n"
	"                        softcapped, masked)\n"
	"                        html (-o attn.html): one self-contained page, offline:\n"
	"                        every head's heatmap and token lines, any step, each\n"
	"                        cell worked out on hover or focus as --explain --cell\n"
	"                        does, SVG and PNG saving; --print names the step\n"
	"                        shown first (default softmax)\n"
	FORWARD_USAGE_COLOR
	FORWARD_USAGE_PICTURE
	"      --precision N     significant digits in text and markdown (default 6)\n"
	"      --compress        npz: each member deflated, as np.savez_compressed\n"
	"                        writes them (smaller, slower to write and read)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well); a\n"
	"                        directory (an existing one, or a name ending in '/')\n"
	"                        gets one file per matrix: X.csv, head1_scores.csv, ...\n"
	"                        (csv, npy or json)\n"
	"      --explain         the computation told step by step: each formula, its\n"
	"                        shapes and its matrix\n"
	"      --cell Q,K        with --explain: one entry worked by hand in each head,\n"
	"                        query Q and key K (numbers from 1, or tokens)\n"
	"      --sequence N      with a batch (3-D inputs): print or explain sequence N\n"
	"                        (from 1) alone, as if it were given by itself\n"
	FORWARD_USAGE_HELP
	FORWARD_USAGE_EXIT;

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
static int parse_kv_len(const char *hint, const char *arg, struct forward_options *o)
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

/* ---- option values ----------------------------------------------------- */

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

static int parse_print(const char *arg, struct forward_options *o)
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
			usage_error(o->cmd->hint, "--print: unknown step '%s': did you mean '%s'?", tok,
				    step_closest(tok));
			rc = -1;
			break;
		}
		if (s < 0) {
			usage_error(o->cmd->hint, "--print: unknown step '%s' (known: %s, all)",
				    tok, known);
			rc = -1;
			break;
		}
		o->print |= STEP_BIT(s);
	}
	free(copy);
	if (!rc && !o->print && !o->print_all) {
		usage_error(o->cmd->hint, "--print needs at least one step (%s, all)", known);
		rc = -1;
	}
	return rc;
}

int forward_parse(int argc, char **argv, struct forward_options *o,
		  const struct forward_command *cmd)
{
	enum { O_KV = 256, O_XK, O_XV, O_Q, O_K, O_V, O_MASK, O_MASK_BOOL, O_HEADS, O_KV_HEADS, O_SCALE,
	       O_CAUSAL, O_WINDOW, O_SINKS, O_ALIBI, O_ALIBI_SLOPES, O_ROPE, O_ROPE_THETA, O_ROPE_DIM, O_POSITIONS,
	       O_ROPE_COS, O_ROPE_SIN, O_SOFTCAP, O_PRECISION, O_LAYOUT, O_KV_LEN, O_DTYPE, O_THREADS,
	       O_EXACT, O_CONFIG, O_LAYER, O_PREFIX,
	       O_MAX_MEMORY, O_TOKENS, O_KV_TOKENS, O_COLOR, O_EXPLAIN, O_CELL, O_SEQUENCE,
	       O_RANGE, O_HEAD, O_KT, O_GRAD_OUTPUT, O_COMPRESS,
	       O_ONE /* + WQ … BO */ };
	static const struct option longopts[] = {
		{ "x", required_argument, NULL, 'x' },
		{ "weights", required_argument, NULL, 'w' },
		{ "kv", required_argument, NULL, O_KV },
		{ "xk", required_argument, NULL, O_XK },
		{ "xv", required_argument, NULL, O_XV },
		{ "q", required_argument, NULL, O_Q },
		{ "k", required_argument, NULL, O_K },
		{ "v", required_argument, NULL, O_V },
		{ "mask", required_argument, NULL, O_MASK },
		{ "mask-bool", required_argument, NULL, O_MASK_BOOL },
		{ "wq", required_argument, NULL, O_ONE + WQ },
		{ "wk", required_argument, NULL, O_ONE + WK },
		{ "wv", required_argument, NULL, O_ONE + WV },
		{ "wo", required_argument, NULL, O_ONE + WO },
		{ "bq", required_argument, NULL, O_ONE + BQ },
		{ "bk", required_argument, NULL, O_ONE + BK },
		{ "bv", required_argument, NULL, O_ONE + BV },
		{ "bo", required_argument, NULL, O_ONE + BO },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "layer", required_argument, NULL, O_LAYER },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV_HEADS },
		{ "scale", required_argument, NULL, O_SCALE },
		{ "causal", optional_argument, NULL, O_CAUSAL },
		{ "kv-len", required_argument, NULL, O_KV_LEN },
		{ "window", required_argument, NULL, O_WINDOW },
		{ "sinks", required_argument, NULL, O_SINKS },
		{ "alibi", no_argument, NULL, O_ALIBI },
		{ "alibi-slopes", required_argument, NULL, O_ALIBI_SLOPES },
		{ "rope", required_argument, NULL, O_ROPE },
		{ "rope-theta", required_argument, NULL, O_ROPE_THETA },
		{ "rope-dim", required_argument, NULL, O_ROPE_DIM },
		{ "positions", required_argument, NULL, O_POSITIONS },
		{ "rope-cos", required_argument, NULL, O_ROPE_COS },
		{ "rope-sin", required_argument, NULL, O_ROPE_SIN },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "exact", no_argument, NULL, O_EXACT },
		{ "max-memory", required_argument, NULL, O_MAX_MEMORY },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "explain", no_argument, NULL, O_EXPLAIN },
		{ "cell", required_argument, NULL, O_CELL },
		{ "sequence", required_argument, NULL, O_SEQUENCE },
		{ "color", optional_argument, NULL, O_COLOR },
		{ "colour", optional_argument, NULL, O_COLOR },
		{ "kv-tokens", required_argument, NULL, O_KV_TOKENS },
		{ "softcap", required_argument, NULL, O_SOFTCAP },
		{ "print", required_argument, NULL, 'p' },
		{ "format", required_argument, NULL, 'f' },
		{ "precision", required_argument, NULL, O_PRECISION },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "range", required_argument, NULL, O_RANGE },
		{ "head", required_argument, NULL, O_HEAD },
		{ "kt", required_argument, NULL, O_KT },
		{ "grad-output", required_argument, NULL, O_GRAD_OUTPUT },
		{ "compress", no_argument, NULL, O_COMPRESS },
		{ NULL, 0, NULL, 0 },
	};
	const char *hint = cmd->hint;
	/* forward's options, then the command's own (compare's --against …) */
	struct option all[sizeof(longopts) / sizeof(longopts[0]) + FORWARD_MAX_EXTRA];
	size_t n_all = sizeof(longopts) / sizeof(longopts[0]) - 1, n_extra = 0;
	int c;
	size_t n;

	while (cmd->extra && cmd->extra[n_extra].name && n_extra < FORWARD_MAX_EXTRA)
		n_extra++;
	memcpy(all, longopts, n_all * sizeof(all[0]));
	if (n_extra)
		memcpy(all + n_all, cmd->extra, n_extra * sizeof(all[0]));
	memset(&all[n_all + n_extra], 0, sizeof(all[0]));
	{
		void *extra = o->extra;

		memset(o, 0, sizeof(*o));
		o->extra = extra;
	}
	o->cmd = cmd;
	o->spec.heads = 1;
	o->emit.precision = 6;
	o->max_memory = opt_memory_default();
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:p:f:o:h", all, NULL)) != -1) {
		if (c >= FORWARD_EXTRA_BASE && cmd->extra_opt) {
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
		case O_COMPRESS: o->emit.compress = 1; break;
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
			if (!cmd->backward) {
				usage_error(hint, "--grad-output is an option of 'mha backward'");
				return -1;
			}
			o->spec.grad_output = optarg;
			break;
		case 'p':
			o->print_given = 1;
			if (cmd->backward) {
				o->print_arg = optarg; /* backward's steps: backward_check */
				break;
			}
			if (parse_print(optarg, o))
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

/* What the options alone say of the steps: the weights are not read yet, so
 * W_O counts as given. */
static void option_facts(const struct forward_options *o, struct step_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->cfg = &o->spec.cfg;
	f->mask_file = o->spec.mask;
	f->mask_block = o->spec.mask_block;
	f->heads = o->spec.heads;
	f->weights = ~0u;
	f->direct = o->spec.q != NULL;
	f->cross = o->spec.kv != NULL || o->spec.xk != NULL;
	f->apart = o->spec.xk != NULL;
}

/* backward's request from the options */
static struct backward_request backward_request_of(const struct forward_options *o)
{
	return (struct backward_request){ .hint = o->cmd->hint, .emit = &o->emit, .print = o->print_arg,
					  .explain = o->explain, .has_cell = o->spec.cell != NULL,
					  .sequence = o->sequence, .f32 = o->f32 };
}

/* --compress without .npz output, in forward's words and backward's */
#define COMPRESS_NEEDS_NPZ "--compress is for .npz output: add --format npz, or give -o FILE.npz"

/* mha backward: the output's name and format, then its own steps (cmd/backward.c) */
static int check_backward_options(struct forward_options *o)
{
	const char *hint = o->cmd->hint;
	struct backward_request r = backward_request_of(o);

	if (!o->format_given && o->emit.output && !emit_known_name(o->emit.output))
		return usage_error(hint, "-o '%s': mha writes .json, .csv, .npy, .npz, .md and .txt "
				   "files (or text under a name with no extension); add --format to "
				   "write another name", o->emit.output);
	if (!o->format_given && o->emit.output)
		o->emit.format = emit_format_of_output(o->emit.output);
	if (o->emit.format == FORMAT_HEATMAP || o->emit.format == FORMAT_SVG)
		return usage_error(hint, "mha backward writes text, json, csv, markdown, npy or npz, "
				   "not a heatmap");
	if (o->emit.compress && o->emit.format != FORMAT_NPZ)
		return usage_error(hint, COMPRESS_NEEDS_NPZ);
	if (o->f32 && o->spec.cfg.exact)
		return usage_error(hint, "--exact is float64's plain path: leave out --dtype f32");
	if (o->f32 && o->explain)
		return usage_error(hint, "--explain tells float64's steps: leave out --dtype f32");
	if (o->explain && o->emit.format != FORMAT_TEXT)
		return usage_error(hint, "--explain writes text: leave out --format");
	if (o->explain && o->print_arg)
		return usage_error(hint, "--explain shows every step: leave out --print");
	return backward_check(&r, &o->spec) ? -1 : 0;
}

/* Which inputs go together: everything here is known before reading a file. */
int forward_check_options(struct forward_options *o)
{
	struct problem_spec *s = &o->spec;
	const char *hint = o->cmd->hint;
	const int direct = s->q || s->k || s->v;
	struct step_facts f;

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
	if (o->cmd->backward)
		return check_backward_options(o);
	if ((o->print & STEP_BIT(STEP_SOFTCAPPED)) && !(s->cfg.softcap > 0))
		return usage_error(hint, "--print softcapped needs --softcap");
	if (!o->print && !o->print_all)
		o->print = STEP_BIT(STEP_OUTPUT);
	if (!o->format_given && o->emit.output && !emit_known_name(o->emit.output))
		return usage_error(hint, "-o '%s': mha writes .json, .csv, .npy, .npz, .md, .svg, .html and .txt "
				   "files (or text under a name with no extension); add --format to "
				   "write another name", o->emit.output);
	if (!o->format_given && o->emit.output)
		o->emit.format = emit_format_of_output(o->emit.output);
	if (!o->format_given && o->cmd->draw && o->emit.format != FORMAT_SVG &&
	    o->emit.format != FORMAT_HTML)
		o->emit.format = FORMAT_HEATMAP;
	if (o->emit.compress && o->emit.format != FORMAT_NPZ)
		return usage_error(hint, COMPRESS_NEEDS_NPZ);
	if (o->explain) {
		if (o->emit.format != FORMAT_TEXT)
			return usage_error(hint, "--explain writes text: leave out --format");
		if (o->f32)
			return usage_error(hint, "--explain tells float64's steps: leave out --dtype "
					   "f32");
		if (o->print != STEP_BIT(STEP_OUTPUT) || o->print_all)
			return usage_error(hint, "--explain shows every step: leave out --print");
		/* every step; the mask only when there is one */
		option_facts(o, &f);
		o->print = steps_every(&f);
	}
	if (o->emit.format == FORMAT_HTML) {
		/* the page holds every step; --print names the one it shows first */
		const unsigned drawable = steps_flagged(STEP_DRAWABLE);

		if (o->print == STEP_BIT(STEP_OUTPUT) && !o->print_all && !o->print_given)
			o->print = STEP_BIT(STEP_SOFTMAX);
		if (o->print_all || (o->print & ~drawable) || (o->print & (o->print - 1)))
			return usage_error(hint, "a page holds every step and shows one first: "
					   "--print scores, scaled, softcapped, masked or softmax "
					   "(the default)");
		o->emit.heat_step = 0;
		while (!(o->print & STEP_BIT(o->emit.heat_step)))
			o->emit.heat_step++;
		/* f32 keeps no steps: the page shows float64's, and says so */
		o->emit.html_f32 = o->f32;
		o->f32 = 0;
		option_facts(o, &f);
		o->print = steps_every(&f);
	}
	if (o->emit.format == FORMAT_HEATMAP || o->emit.format == FORMAT_SVG) {
		/* one (n_q, n_kv) step is drawn, softmax unless --print names another */
		const unsigned drawable = steps_flagged(STEP_DRAWABLE);

		if (o->print == STEP_BIT(STEP_OUTPUT) && !o->print_all && !o->print_given)
			o->print = STEP_BIT(STEP_SOFTMAX);
		if (o->print_all || (o->print & ~drawable) || (o->print & (o->print - 1)))
			return usage_error(hint, "a heatmap draws one step: --print scores, scaled, "
					   "softcapped, masked or softmax (the default)");
		if (o->f32)
			return usage_error(hint, "a heatmap is drawn from float64's steps: leave "
					   "out --dtype f32");
		o->emit.heat_step = 0;
		while (!(o->print & STEP_BIT(o->emit.heat_step)))
			o->emit.heat_step++;
		/* the mask too, so that blocked cells can be told apart */
		o->print |= STEP_BIT(STEP_MASK);
	} else if ((o->range_given || o->emit.head) && o->emit.format != FORMAT_HTML) {
		return usage_error(hint, "%s is for pictures: add --format heatmap, svg or html",
				   o->range_given ? "--range" : "--head");
	}
	if (o->f32 && s->cfg.exact)
		return usage_error(hint, "--exact is float64's plain path: leave out --dtype f32");
	if (o->f32 && (o->print_all || (o->print & ~steps_flagged(STEP_F32))))
		return usage_error(hint, "--dtype f32 prints x and output only: the steps "
				   "are shown in float64 (leave out --dtype)");
	return 0;
}

/* ---- no output over an input ------------------------------------------ */

/*
 * -o naming one of the inputs, by any name: refused before anything is
 * read, by device and inode.  -o DIR/ is checked for each file in DIR the
 * run may write.  0, or -1 said.
 */
static int refuse_output_over_input(const struct forward_options *o)
{
	struct step_facts f;

	if (!o->emit.output || !strcmp(o->emit.output, "-"))
		return 0;
	if (problem_note_inputs(&o->spec))
		return -1;
	if (o->cmd->backward)
		return emit_is_dir(o->emit.output)
			? files_refuse_output_in_dir(o->emit.output, backward_may_write,
						     (void *)emit_dir_ext(o->emit.format))
			: files_refuse_output(o->emit.output);
	option_facts(o, &f);
	return emit_refuse_over_inputs(&o->emit, steps_print_set(o->print, o->print_all, &f),
				       o->spec.heads);
}

/* ---- the command ------------------------------------------------------- */

int forward_check(int argc, char **argv, const struct forward_command *cmd)
{
	struct forward_options o = { 0 };
	int rc;

	switch (forward_parse(argc, argv, &o, cmd)) {
	case 1: rc = 1; break;
	case 0: rc = forward_check_options(&o) ? EXIT_USAGE : 0; break;
	default: rc = EXIT_USAGE; break;
	}
	free(o.kv_lens);
	return rc;
}

/* The observer of a batch: each sequence's steps into its own results. */
struct batch_keep {
	struct step_results *res; /* [sequences] */
	size_t cur;               /* the sequence the library is on */
};

static int keep_sequence(void *ctx, size_t b)
{
	((struct batch_keep *)ctx)->cur = b;
	return 0;
}

static int keep_step(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols)
{
	struct batch_keep *k = ctx;

	return steps_keep(&k->res[k->cur], stage, head, m, rows, cols);
}

/* --sequence N and a heatmap's picture against the batch read: 0, or -1 said */
static int check_sequence(const struct forward_options *o, const struct problem *pb)
{
	const char *hint = o->cmd->hint;

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
	return 0;
}

int forward_run(int argc, char **argv, const struct forward_command *cmd)
{
	struct forward_options o = { 0 };
	struct problem pb;
	struct step_results *res = NULL;
	struct batch_keep keep;
	struct step_facts f, *fs = NULL;
	mha_config *cfgs = NULL;
	mha_observer obs = MHA_INIT(mha_observer);
	mha_report rep = MHA_INIT(mha_report);
	matrix out = { 0 }, *x = NULL, *outs = NULL;
	struct step_items *lists = NULL;
	size_t B = 0;
	unsigned p;
	int rc;

	switch (forward_parse(argc, argv, &o, cmd)) {
	case 1: free(o.kv_lens); return EXIT_OK;
	case 0: break;
	default: free(o.kv_lens); return EXIT_USAGE;
	}
	/* config.json's settings under the command line's, before they are checked */
	budget_init(o.max_memory);
	if (model_config(&o.spec)) {
		free(o.kv_lens);
		return EXIT_DATA;
	}
	if (forward_check_options(&o) || refuse_output_over_input(&o)) {
		free(o.kv_lens);
		return EXIT_USAGE;
	}

	/* --dtype f32 printing no step but the output: float32 inputs stay
	 * floats, and .npy and .npz get the output's floats as computed */
	o.spec.floats = o.f32 && !o.print_all && !(o.print & STEP_BIT(STEP_X)) && !o.sequence &&
			!o.cmd->backward; /* backward rounds its inputs itself */
	o.spec.float_out = o.spec.floats &&
			   (o.emit.format == FORMAT_NPY || o.emit.format == FORMAT_NPZ);
	/* the forward pass only reads its inputs: native .npy files mapped */
	o.spec.map = !o.cmd->backward;
	/* one limit from the first byte read to the last written */
	budget_init(o.max_memory);
	rc = problem_load(&pb, &o.spec);
	if (rc)
		goto done;
	rc = EXIT_USAGE;
	if (check_sequence(&o, &pb))
		goto done;
	rc = EXIT_DATA;
	/* --sequence N: that one alone, as if it had been given by itself */
	if (o.sequence && problem_keep_sequence(&pb, o.sequence - 1))
		goto done;
	if (cmd->backward) {
		struct backward_request r = backward_request_of(&o);

		rc = backward_check(&r, &o.spec) ? EXIT_USAGE : backward_run(&pb, &r);
		goto done;
	}
	/* the steps to print, and what the observer keeps for them: each sequence's */
	B = problem_sequences(&pb);
	res = calloc(B, sizeof(*res));
	lists = calloc(B, sizeof(*lists));
	x = calloc(B, sizeof(*x));
	outs = calloc(B, sizeof(*outs));
	fs = calloc(B, sizeof(*fs));
	cfgs = calloc(B, sizeof(*cfgs));
	if (!res || !lists || !x || !outs || !fs || !cfgs) {
		error("out of memory");
		goto done;
	}
	problem_facts(&pb, 0, &f);
	p = steps_print_set(o.print, o.print_all, &f);
	for (size_t b = 0; b < B; b++) {
		res[b].heads = pb.d.heads;
		res[b].mask_per_head = pb.cfg.mask.per_head || pb.cfg.alibi.on; /* ALiBi: a mask per head */
	}
	keep = (struct batch_keep){ .res = res };
	obs = (mha_observer){ .size = sizeof(mha_observer), .fn = keep_step, .ctx = &keep,
			      .sequence = keep_sequence, .wanted = steps_stages(p, pb.d.heads) };
	if (problem_check_memory(&pb, obs.wanted, o.f32) ||
	    problem_forward(&out, &pb, &obs, o.f32, &rep))
		goto done;
	f.scale = rep.scale;
	for (size_t b = 0; b < B; b++) {
		/* a batch: sequence b's plane of X and of the output, titled with
		 * its own key length */
		x[b] = step_plane(&pb.x, b);
		outs[b] = step_plane(&out, b);
		cfgs[b] = pb.cfg;
		if (pb.cfg.kv_lens) {
			cfgs[b].kv_len = pb.cfg.kv_lens[b];
			cfgs[b].kv_lens = NULL;
		}
		fs[b] = f;
		fs[b].cfg = &cfgs[b];
		if (steps_stack(&res[b]) || steps_collect(&lists[b], &res[b], p, &fs[b], &x[b], &outs[b]))
			goto done;
	}
	{
		/* --sequence N: that one, kept alone, printed as a run of its own */
		const size_t batch = o.sequence ? 0 : pb.batch;

		const struct run_meta meta = { .f = &f, .rep = &rep, .f32 = o.f32,
					       .batch = o.sequence ? pb.batch_read : pb.batch,
					       .sequence = o.sequence };

		if (o.explain) {
			if (emit_explain(&o.emit, lists, batch, fs, &pb.labels, o.spec.cell ? pb.cell : NULL))
				goto done;
		} else if (o.emit.format == FORMAT_HTML) {
			if (emit_html(&o.emit, lists, batch, fs, &pb.labels, &meta))
				goto done;
		} else {
			if (emit_items(&o.emit, lists, batch, &pb.labels, &meta))
				goto done;
		}
	}
	rc = EXIT_OK;
done:
	for (size_t b = 0; b < B; b++) {
		if (lists)
			steps_items_free(&lists[b]);
		if (res)
			steps_results_free(&res[b]);
	}
	free(lists);
	free(res);
	free(x);
	free(outs);
	free(fs);
	free(cfgs);
	matrix_free(&out);
	problem_free(&pb);
	free(o.kv_lens);
	return rc;
}

static const struct forward_command forward = { .hint = "forward", .usage = forward_usage };

int forward_check_args(int argc, char **argv)
{
	return forward_check(argc, argv, &forward);
}

int cmd_forward(int argc, char **argv)
{
	return forward_run(argc, argv, &forward);
}

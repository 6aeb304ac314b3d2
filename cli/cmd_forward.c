/*
 * cmd_forward.c: 'mha forward', one multi-head attention from files, with
 * any of its intermediates printed.
 *
 * This file owns the command line and the checks that need the files'
 * names to explain themselves (shapes, heads, masks).  The arithmetic is
 * the library's: one mha_forward() call, with an observer that keeps a
 * copy of each intermediate the user asked to see.
 */
#include "cli.h"
#include "budget.h"
#include "explain.h"
#include "heatmap.h"
#include "input.h"
#include "matrix.h"
#include "outfile.h"
#include "text.h"
#include "weights.h"
#include "write.h"

#include "../lib/mha.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char forward_usage[] =
	"usage: mha forward -x FILE [-w FILE] [--kv FILE] [options]\n"
	"       mha forward --q FILE --k FILE --v FILE [-w FILE] [options]\n"
	"\n"
	"Compute multi-head attention and print the output, or any step of it.\n"
	"\n"
	"Inputs (JSON, CSV or NumPy .npy, told apart by name and content; '-' reads\n"
	"standard input, for one of them):\n"
	"  -x, --x FILE          X, n x d_model: a 2-D array, or a JSON object holding it\n"
	"                        under \"output\" or \"X\" (mha's own JSON output works)\n"
	"  -w, --weights FILE    JSON object with W_Q, W_K, W_V and optionally W_O, b_Q,\n"
	"                        b_K, b_V, b_O (d_in x d_out, applied as x*W; or one\n"
	"                        d_in x d_k matrix per head, 3-D); or a directory of\n"
	"                        one file per weight (W_Q.csv, W_K.npy, ...); without\n"
	"                        -w, Q = K = V = X\n"
	"      --wq, --wk, --wv, --wo, --bq, --bk, --bv, --bo FILE\n"
	"                        one weight from its own file, over what -w gave\n"
	"      --layout L        mha (default): weights d_in x d_out; torch: PyTorch's\n"
	"                        d_out x d_in, applied as x*W^T, and the names of\n"
	"                        nn.MultiheadAttention's state_dict (in_proj_weight,\n"
	"                        in_proj_bias, out_proj.weight, out_proj.bias, ...)\n"
	"      --kv FILE         keys and values from this matrix (cross-attention)\n"
	"      --q FILE, --k FILE, --v FILE\n"
	"                        Q, K and V given directly: no projections (-w may\n"
	"                        then hold only W_O and b_O)\n"
	"      --tokens LIST     labels for X's rows (the queries), e.g. \"The bear eats\"\n"
	"                        (split at blanks, or at commas when there are any);\n"
	"                        they title rows and columns of what is printed\n"
	"      --kv-tokens LIST  labels for the keys, with --kv (else the queries')\n"
	"      --mask FILE       n_q x n_kv, or heads x n_q x n_kv: booleans (true =\n"
	"                        may attend) or numbers added to the scores (\"-inf\")\n"
	"\n"
	"Attention:\n"
	"      --heads H         query heads (default 1); each takes an equal block of\n"
	"                        Q's columns\n"
	"      --kv-heads G      key/value heads for grouped-query attention (G divides\n"
	"                        H; query head i uses key/value head i/(H/G))\n"
	"      --scale S         dk: 1/sqrt(d_k) (default), dmodel: 1/sqrt(d_model),\n"
	"                        seqlen: 1/sqrt(n_kv), none: 1, or a NUMBER multiplier\n"
	"      --causal[=ALIGN]  query i sees keys j <= i (top-left, the default), or\n"
	"                        j <= i + n_kv - n_q (bottom-right, as in decoding), or\n"
	"                        j <= i + N for a whole number N (after N cached keys)\n"
	"      --kv-len N        only the first N keys are valid (the rest is padding);\n"
	"                        bottom-right then aligns with key N\n"
	"      --softcap C       scores become C*tanh(scores/C) before the mask\n"
	"\n"
	"Computation:\n"
	"      --dtype T         f64 (default: exact tutorial numbers, every step can be\n"
	"                        printed) or f32 (faster; prints x and output only)\n"
	"      --threads N       threads for the fast path (default: all cores); the\n"
	"                        numbers are the same bits whatever N\n"
	"      --max-memory SIZE the most a run may allocate, e.g. 512M, 4G, none\n"
	"                        (default: 3/4 of the memory; a run that would need\n"
	"                        more is refused before it starts)\n"
	"      --exact           the plain path even when no step is printed: the\n"
	"                        output then has the very bits --print all shows (the\n"
	"                        fast path agrees with it to rounding)\n"
	"\n"
	"Output:\n"
	"  -p, --print LIST      comma-separated steps to print: x, q, k, v, scores,\n"
	"                        scaled, softcapped, mask, masked, softmax, heads,\n"
	"                        concat, output; or all (default: output)\n"
	"  -f, --format FMT      text, json, csv, markdown, npy, heatmap (coloured cells in\n"
	"                        the terminal) or svg (a picture); default: from -o's\n"
	"                        name, .json .csv .npy .md .svg, a directory is csv;\n"
	"                        else text.  heatmap and svg draw each head's softmax,\n"
	"                        or the one step --print names (scores, scaled,\n"
	"                        softcapped, masked)\n"
	"      --color[=WHEN]    heatmap colours: auto (a terminal, and NO_COLOR unset),\n"
	"                        always or never (shaded characters)\n"
	"      --precision N     significant digits in text and markdown (default 6)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well); a\n"
	"                        directory (an existing one, or a name ending in '/')\n"
	"                        gets one file per matrix: X.csv, head1_scores.csv, ...\n"
	"                        (csv, npy or json)\n"
	"      --explain         the computation told step by step: each formula, its\n"
	"                        shapes and its matrix\n"
	"      --cell Q,K        with --explain: one entry worked by hand in each head,\n"
	"                        query Q and key K (numbers from 1, or tokens)\n"
	"  -h, --help            show this help\n"
	"\n"
	"Exit status: 0 success, 1 bad data (files, shapes), 2 bad command line.\n";

enum print_item {
	P_X, P_Q, P_K, P_V, P_SCORES, P_SCALED, P_SOFTCAPPED, P_MASK, P_MASKED,
	P_SOFTMAX, P_HEADS, P_CONCAT, P_OUTPUT, P_COUNT
};

static const char *const print_names[P_COUNT] = {
	"x", "q", "k", "v", "scores", "scaled", "softcapped", "mask", "masked",
	"softmax", "heads", "concat", "output",
};

#define PBIT(p) (1u << (p))

struct options {
	const char *x, *kv, *w, *q, *k, *v, *mask, *output;
	const char *one[N_WEIGHTS]; /* --wq … --bo */
	weight_layout layout;
	size_t heads, kv_heads;
	mha_config cfg;
	unsigned print;
	int print_all;
	out_format format;
	int format_given;
	int print_given;
	int precision;
	int f32;  /* --dtype f32 */
	size_t max_memory; /* bytes; SIZE_MAX: no limit */
	const char *tokens, *kv_tokens; /* --tokens, --kv-tokens */
	int color;      /* -1 never, 0 auto, 1 always */
	int explain;    /* --explain */
	const char *cell; /* --cell */
	int heat_step;  /* heatmap/svg: the P_ item drawn */
};

/* Token labels: one per query (row of X) and one per key. */
struct labels {
	char **query, **key; /* NULL: none; key may be query itself, or an input's labels */
	size_t n_query, n_key;
	int own_query, own_key; /* split from --tokens: freed with the inputs */
};

struct inputs {
	matrix x, kv, q, k, v, mask;
	struct labels labels;
	char x_src[4200], kv_src[4200], q_src[4200], k_src[4200], v_src[4200], mask_src[4200];
	weights w;
	unsigned char *allow; /* the boolean mask as bytes, or NULL */
	int direct;           /* Q, K, V given directly */
};

/* A copy of every intermediate the user asked for. */
struct results {
	size_t heads;
	int mask_per_head;
	matrix whole[MHA_STAGE_COUNT];     /* Q, K, V, concat, output; and a shared mask */
	matrix *per_head[MHA_STAGE_COUNT]; /* [heads] for each per-head stage */
};

/* a file as messages name it: standard input is "<stdin>", as the readers say */
static const char *shown(const char *path)
{
	return strcmp(path, "-") ? path : "<stdin>";
}

/* "s" for a plural count: "%zu head%s" */
static const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

/* ---- option values ----------------------------------------------------- */

/* a finite number, the whole of arg: 1, or 0 when it is not one */
static int parse_number(const char *arg, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	/* ERANGE is overflow (then infinite) or underflow: a subnormal such as
	 * 4.9e-324 is a finite number, only one that rounds to 0 is refused */
	return end != arg && !*end && isfinite(*out) && (errno != ERANGE || *out != 0);
}

static int parse_real(const char *opt, const char *arg, double *out)
{
	if (!parse_number(arg, out)) {
		usage_error("forward", "%s expects a finite number, not '%s'", opt, arg);
		return -1;
	}
	return 0;
}

static int parse_scale(const char *arg, mha_config *cfg)
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
	if (!parse_number(arg, &cfg->scale)) {
		usage_error("forward", "--scale takes dk, dmodel, seqlen, none or a number, not '%s'", arg);
		return -1;
	}
	return 0;
}

static int parse_print(const char *arg, struct options *o)
{
	char *copy = strdup(arg), *save = NULL;
	int rc = 0;

	if (!copy)
		return error("out of memory");
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t i;

		if (!strcmp(tok, "all")) {
			o->print_all = 1;
			continue;
		}
		for (i = 0; i < P_COUNT && strcmp(tok, print_names[i]); i++)
			;
		if (i == P_COUNT) {
			usage_error("forward", "--print: unknown step '%s' (known: x, q, k, v, scores, scaled, "
				    "softcapped, mask, masked, softmax, heads, concat, output, all)", tok);
			rc = -1;
			break;
		}
		o->print |= PBIT(i);
	}
	free(copy);
	if (!rc && !o->print && !o->print_all) {
		usage_error("forward", "--print needs at least one step (x, q, k, v, scores, scaled, "
			    "softcapped, mask, masked, softmax, heads, concat, output, all)");
		rc = -1;
	}
	return rc;
}

/* 3/4 of the machine's memory: room for the rest of it */
static size_t default_max_memory(void)
{
	const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);

	if (pages <= 0 || page <= 0 || (unsigned long)pages > SIZE_MAX / (unsigned long)page)
		return SIZE_MAX;
	return (size_t)pages / 4 * 3 * (size_t)page;
}

/* "4096", "512M", "4G", "1.5GiB", "none": bytes (binary multiples); 0 or -1 */
static int parse_bytes(const char *arg, size_t *out)
{
	static const char *const units = "KMGT";
	char *end;
	double v, mult = 1;

	if (!strcmp(arg, "none") || !strcmp(arg, "unlimited")) {
		*out = SIZE_MAX;
		return 0;
	}
	errno = 0;
	v = strtod(arg, &end);
	if (end == arg || errno || !(v > 0) || !isfinite(v))
		return -1;
	if (*end) {
		const char *u = strchr(units, *end & ~0x20);

		if (!u || !*u)
			return -1;
		mult = ldexp(1.0, 10 * (int)(u - units + 1));
		end++;
		if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "ib") || !strcmp(end, "b"))
			end += strlen(end);
		if (*end)
			return -1;
	}
	v *= mult;
	*out = v >= (double)SIZE_MAX ? SIZE_MAX : (size_t)v;
	return *out ? 0 : -1;
}

/* "-3", "12": a causal offset; 1, or 0 when arg is not a whole number */
static int parse_offset(const char *arg, ptrdiff_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (end == arg || *end || errno || v < -(long long)(PTRDIFF_MAX / 2) ||
	    v > (long long)(PTRDIFF_MAX / 2))
		return 0;
	*out = (ptrdiff_t)v;
	return 1;
}

static int parse_options(int argc, char **argv, struct options *o)
{
	enum { O_KV = 256, O_Q, O_K, O_V, O_MASK, O_HEADS, O_KV_HEADS, O_SCALE,
	       O_CAUSAL, O_SOFTCAP, O_PRECISION, O_LAYOUT, O_KV_LEN, O_DTYPE, O_THREADS, O_EXACT,
	       O_MAX_MEMORY, O_TOKENS, O_KV_TOKENS, O_COLOR, O_EXPLAIN, O_CELL,
	       O_ONE /* + WQ … BO */ };
	static const struct option longopts[] = {
		{ "x", required_argument, NULL, 'x' },
		{ "weights", required_argument, NULL, 'w' },
		{ "kv", required_argument, NULL, O_KV },
		{ "q", required_argument, NULL, O_Q },
		{ "k", required_argument, NULL, O_K },
		{ "v", required_argument, NULL, O_V },
		{ "mask", required_argument, NULL, O_MASK },
		{ "wq", required_argument, NULL, O_ONE + WQ },
		{ "wk", required_argument, NULL, O_ONE + WK },
		{ "wv", required_argument, NULL, O_ONE + WV },
		{ "wo", required_argument, NULL, O_ONE + WO },
		{ "bq", required_argument, NULL, O_ONE + BQ },
		{ "bk", required_argument, NULL, O_ONE + BK },
		{ "bv", required_argument, NULL, O_ONE + BV },
		{ "bo", required_argument, NULL, O_ONE + BO },
		{ "layout", required_argument, NULL, O_LAYOUT },
		{ "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV_HEADS },
		{ "scale", required_argument, NULL, O_SCALE },
		{ "causal", optional_argument, NULL, O_CAUSAL },
		{ "kv-len", required_argument, NULL, O_KV_LEN },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "exact", no_argument, NULL, O_EXACT },
		{ "max-memory", required_argument, NULL, O_MAX_MEMORY },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "explain", no_argument, NULL, O_EXPLAIN },
		{ "cell", required_argument, NULL, O_CELL },
		{ "color", optional_argument, NULL, O_COLOR },
		{ "colour", optional_argument, NULL, O_COLOR },
		{ "kv-tokens", required_argument, NULL, O_KV_TOKENS },
		{ "softcap", required_argument, NULL, O_SOFTCAP },
		{ "print", required_argument, NULL, 'p' },
		{ "format", required_argument, NULL, 'f' },
		{ "precision", required_argument, NULL, O_PRECISION },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	size_t n;

	memset(o, 0, sizeof(*o));
	o->heads = 1;
	o->precision = 6;
	o->max_memory = default_max_memory();
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:p:f:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'x': o->x = optarg; break;
		case 'w': o->w = optarg; break;
		case O_KV: o->kv = optarg; break;
		case O_Q: o->q = optarg; break;
		case O_K: o->k = optarg; break;
		case O_V: o->v = optarg; break;
		case O_MASK: o->mask = optarg; break;
		case O_ONE + WQ: case O_ONE + WK: case O_ONE + WV: case O_ONE + WO:
		case O_ONE + BQ: case O_ONE + BK: case O_ONE + BV: case O_ONE + BO:
			o->one[c - O_ONE] = optarg;
			break;
		case O_LAYOUT:
			if (!strcmp(optarg, "mha")) {
				o->layout = LAYOUT_MHA;
			} else if (!strcmp(optarg, "torch")) {
				o->layout = LAYOUT_TORCH;
			} else {
				usage_error("forward", "--layout takes mha or torch, not '%s'", optarg);
				return -1;
			}
			break;
		case 'o': o->output = optarg; break;
		case O_HEADS:
			if (opt_count("forward", "--heads", optarg, SIZE_MAX / 2, &o->heads))
				return -1;
			break;
		case O_KV_HEADS:
			if (opt_count("forward", "--kv-heads", optarg, SIZE_MAX / 2, &o->kv_heads))
				return -1;
			break;
		case O_SCALE:
			if (parse_scale(optarg, &o->cfg))
				return -1;
			break;
		case O_CAUSAL:
			if (!optarg || !strcmp(optarg, "top-left")) {
				o->cfg.causal = MHA_CAUSAL_TOP_LEFT;
			} else if (!strcmp(optarg, "bottom-right")) {
				o->cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
			} else if (parse_offset(optarg, &o->cfg.causal_offset)) {
				o->cfg.causal = MHA_CAUSAL_OFFSET;
			} else {
				usage_error("forward", "--causal takes top-left, bottom-right or a whole "
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
				usage_error("forward", "--dtype takes f64 or f32, not '%s'", optarg);
				return -1;
			}
			break;
		case O_THREADS:
			if (opt_count("forward", "--threads", optarg, 4096, &n))
				return -1;
			o->cfg.threads = (int)n;
			break;
		case O_TOKENS: o->tokens = optarg; break;
		case O_EXPLAIN: o->explain = 1; break;
		case O_CELL: o->cell = optarg; o->explain = 1; break;
		case O_COLOR:
			if (!optarg || !strcmp(optarg, "always")) {
				o->color = 1;
			} else if (!strcmp(optarg, "auto")) {
				o->color = 0;
			} else if (!strcmp(optarg, "never")) {
				o->color = -1;
			} else {
				usage_error("forward", "--color takes auto, always or never, not '%s'", optarg);
				return -1;
			}
			break;
		case O_KV_TOKENS: o->kv_tokens = optarg; break;
		case O_MAX_MEMORY:
			if (parse_bytes(optarg, &o->max_memory)) {
				usage_error("forward", "--max-memory takes a size such as 512M, 4G or 1.5GiB, "
					    "or none, not '%s'", optarg);
				return -1;
			}
			break;
		case O_EXACT:
			o->cfg.exact = 1;
			break;
		case O_KV_LEN:
			if (opt_count("forward", "--kv-len", optarg, SIZE_MAX / 2, &o->cfg.kv_len))
				return -1;
			break;
		case O_SOFTCAP:
			if (parse_real("--softcap", optarg, &o->cfg.softcap))
				return -1;
			if (o->cfg.softcap <= 0) {
				usage_error("forward", "--softcap expects a number above 0, not '%s'", optarg);
				return -1;
			}
			break;
		case 'p':
			o->print_given = 1;
			if (parse_print(optarg, o))
				return -1;
			break;
		case 'f':
			o->format_given = 1;
			if (!strcmp(optarg, "text")) {
				o->format = FORMAT_TEXT;
			} else if (!strcmp(optarg, "json")) {
				o->format = FORMAT_JSON;
			} else if (!strcmp(optarg, "csv")) {
				o->format = FORMAT_CSV;
			} else if (!strcmp(optarg, "markdown") || !strcmp(optarg, "md")) {
				o->format = FORMAT_MARKDOWN;
			} else if (!strcmp(optarg, "npy")) {
				o->format = FORMAT_NPY;
			} else if (!strcmp(optarg, "heatmap")) {
				o->format = FORMAT_HEATMAP;
			} else if (!strcmp(optarg, "svg")) {
				o->format = FORMAT_SVG;
			} else {
				usage_error("forward", "--format takes text, json, csv, markdown, npy, "
					    "heatmap or svg, not '%s'", optarg);
				return -1;
			}
			break;
		case O_PRECISION:
			if (opt_count("forward", "--precision", optarg, SIZE_MAX / 2, &n))
				return -1;
			if (n > 17) {
				usage_error("forward", "--precision takes 1 to 17 digits, not %zu", n);
				return -1;
			}
			o->precision = (int)n;
			break;
		case 'h':
			fputs(forward_usage, stdout);
			return 1;
		default: /* ':' or '?' */
			opt_error("forward", c, argv, longopts);
			return -1;
		}
	}
	if (optind < argc) {
		usage_error("forward", "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

/* 'mha heatmap ARGS': 'mha forward ARGS' whose default format is heatmap (svg for -o x.svg) */
static int heatmap_by_default;

/* Without --format, the output's name says it: x.json, x.csv, x.npy, x.md; DIR/ is csv. */
static out_format format_for_output(const char *path)
{
	static const struct { const char *ext; out_format format; } names[] = {
		{ ".json", FORMAT_JSON }, { ".csv", FORMAT_CSV }, { ".npy", FORMAT_NPY },
		{ ".md", FORMAT_MARKDOWN }, { ".markdown", FORMAT_MARKDOWN }, { ".svg", FORMAT_SVG },
	};
	const size_t n = strlen(path);
	struct stat st;

	if ((n && path[n - 1] == '/') || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
		return FORMAT_CSV;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const size_t e = strlen(names[i].ext);

		if (n > e && !strcasecmp(path + n - e, names[i].ext))
			return names[i].format;
	}
	return FORMAT_TEXT;
}

/* Which inputs go together: everything here is known before reading a file. */
static int check_option_combinations(struct options *o)
{
	const int direct = o->q || o->k || o->v;

	if (!o->x && !direct)
		return usage_error("forward", "no input: give -x FILE, or --q, --k and --v");
	if (o->x && direct)
		return usage_error("forward", "-x and --q/--k/--v cannot be used together");
	if (direct && !(o->q && o->k && o->v))
		return usage_error("forward", "--q, --k and --v go together: missing %s",
				   !o->q ? "--q" : !o->k ? "--k" : "--v");
	if (direct && o->kv)
		return usage_error("forward", "--kv cannot be used with --q/--k/--v (K and V are given)");
	for (int i = WQ; i < N_WEIGHTS; i++)
		if (direct && o->one[i] && i != WO && i != BO)
			return usage_error("forward", "--%c%c cannot be used with --q/--k/--v (they are "
					   "given directly); only --wo and --bo can", i >= BQ ? 'b' : 'w',
					   "qkvoqkvo"[i]);
	{
		const char *const files[] = { o->x, o->kv, o->w, o->q, o->k, o->v, o->mask };
		int stdin_uses = 0;

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			stdin_uses += files[i] && !strcmp(files[i], "-");
		for (int i = 0; i < N_WEIGHTS; i++)
			stdin_uses += o->one[i] && !strcmp(o->one[i], "-");
		if (stdin_uses > 1)
			return usage_error("forward", "only one input can be '-' (standard input)");
	}
	if (!o->kv_heads)
		o->kv_heads = o->heads;
	if (o->kv_heads > o->heads || o->heads % o->kv_heads)
		return usage_error("forward", "--kv-heads %zu does not divide --heads %zu",
				   o->kv_heads, o->heads);
	if ((o->print & PBIT(P_SOFTCAPPED)) && !(o->cfg.softcap > 0))
		return usage_error("forward", "--print softcapped needs --softcap");
	if (!o->print && !o->print_all)
		o->print = PBIT(P_OUTPUT);
	if (!o->format_given && o->output)
		o->format = format_for_output(o->output);
	if (!o->format_given && heatmap_by_default && o->format != FORMAT_SVG)
		o->format = FORMAT_HEATMAP;
	if (o->explain) {
		if (o->format != FORMAT_TEXT)
			return usage_error("forward", "--explain writes text: leave out --format");
		if (o->f32)
			return usage_error("forward", "--explain tells float64's steps: leave out --dtype f32");
		if (o->print != PBIT(P_OUTPUT) || o->print_all)
			return usage_error("forward", "--explain shows every step: leave out --print");
		/* every step; the mask only when there is one */
		o->print = PBIT(P_X) | PBIT(P_Q) | PBIT(P_K) | PBIT(P_V) | PBIT(P_SCORES) |
			   PBIT(P_SCALED) | PBIT(P_SOFTMAX) | PBIT(P_HEADS) | PBIT(P_CONCAT) |
			   PBIT(P_OUTPUT);
		if (o->cfg.softcap > 0)
			o->print |= PBIT(P_SOFTCAPPED);
		if (o->cfg.causal || o->mask || o->cfg.kv_len)
			o->print |= PBIT(P_MASK) | PBIT(P_MASKED);
	}
	if (o->format == FORMAT_HEATMAP || o->format == FORMAT_SVG) {
		/* one (n_q, n_kv) step is drawn, softmax unless --print names another */
		const unsigned drawable = PBIT(P_SCORES) | PBIT(P_SCALED) | PBIT(P_SOFTCAPPED) |
					  PBIT(P_MASKED) | PBIT(P_SOFTMAX);

		if (o->print == PBIT(P_OUTPUT) && !o->print_all && !o->print_given)
			o->print = PBIT(P_SOFTMAX);
		if (o->print_all || (o->print & ~drawable) || (o->print & (o->print - 1)))
			return usage_error("forward", "a heatmap draws one step: --print scores, scaled, "
					   "softcapped, masked or softmax (the default)");
		if (o->f32)
			return usage_error("forward", "a heatmap is drawn from float64's steps: leave "
					   "out --dtype f32");
		for (o->heat_step = 0; !(o->print & PBIT(o->heat_step)); o->heat_step++)
			;
		/* the mask too, so that blocked cells can be told apart */
		o->print |= PBIT(P_MASK);
	}
	if (o->f32 && o->cfg.exact)
		return usage_error("forward", "--exact is float64's plain path: leave out --dtype f32");
	if (o->f32 && (o->print_all || (o->print & ~(PBIT(P_X) | PBIT(P_OUTPUT)))))
		return usage_error("forward", "--dtype f32 prints x and output only: the steps "
				   "are shown in float64 (leave out --dtype)");
	return 0;
}

/* ---- reading and checking the data ------------------------------------- */

static const char *const x_keys[] = { "output", "X", NULL };
static const char *const q_keys[] = { "Q", NULL };
static const char *const k_keys[] = { "K", NULL };
static const char *const v_keys[] = { "V", NULL };
static const char *const mask_keys[] = { "mask", NULL };

/* "The bear eats" or "New York, is, big": the labels, split at commas if any, else at blanks */
static char **split_tokens(const char *list, size_t *n)
{
	const int commas = strchr(list, ',') != NULL;
	char **out = NULL;
	size_t cap = 0;

	*n = 0;
	for (const char *p = list; *p;) {
		const char *start, *end;
		char *t;

		while (*p == ' ' || *p == '\t' || (!commas && *p == '\n'))
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && (commas ? *p != ',' : (*p != ' ' && *p != '\t' && *p != '\n')))
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (commas && *p == ',')
			p++;
		if (*n == cap) {
			char **more = realloc(out, (cap = cap ? cap * 2 : 16) * sizeof(*out));

			if (!more)
				goto nomem;
			out = more;
		}
		if (!(t = strndup(start, (size_t)(end - start))))
			goto nomem;
		out[(*n)++] = t;
	}
	return out;
nomem:
	for (size_t i = 0; i < *n; i++)
		free(out[i]);
	free(out);
	*n = 0;
	return NULL;
}

static void free_tokens(char **t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		free(t[i]);
	free(t);
}

/* --tokens and --kv-tokens, one label a row: checked once the shapes are known */
static int set_labels(const struct options *o, struct inputs *in, const mha_dims *d)
{
	struct labels *l = &in->labels;
	const char *xname = in->direct ? "Q" : "X", *kvname = in->direct ? "K" : o->kv ? "X_kv" : "X";

	const matrix *qm = in->direct ? &in->q : &in->x;
	const matrix *km = in->direct ? &in->k : o->kv ? &in->kv : NULL;

	if (o->tokens) {
		l->query = split_tokens(o->tokens, &l->n_query);
		l->own_query = 1;
		if (l->n_query != d->n_q)
			return error("--tokens gives %zu label%s but %s has %zu row%s", l->n_query,
				     plural(l->n_query), xname, d->n_q, plural(d->n_q));
	} else if (qm->labels) {
		/* "tokens" in the JSON file, or a first column of names in the CSV */
		l->query = qm->labels;
		l->n_query = qm->n_labels;
	}
	if (o->kv_tokens) {
		l->key = split_tokens(o->kv_tokens, &l->n_key);
		l->own_key = 1;
		if (l->n_key != d->n_kv)
			return error("--kv-tokens gives %zu label%s but %s has %zu row%s", l->n_key,
				     plural(l->n_key), kvname, d->n_kv, plural(d->n_kv));
	} else if (km && km->labels) {
		l->key = km->labels;
		l->n_key = km->n_labels;
	} else if (l->query && !o->kv && d->n_kv == d->n_q && !in->direct) {
		/* self-attention: the keys are the queries */
		l->key = l->query;
		l->n_key = l->n_query;
	}
	return 0;
}

/* A file larger than the run may use is refused before it is read. */
static int check_file_size(const struct options *o, const char *path)
{
	struct stat st;
	char a[48], b[48];

	if (!path || !strcmp(path, "-") || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (unsigned long long)st.st_size <= (unsigned long long)o->max_memory)
		return 0;
	return error("%s: the file is %s, more than --max-memory (%s)", path,
		     show_bytes(a, sizeof(a), (size_t)st.st_size), show_bytes(b, sizeof(b), o->max_memory));
}

static int read_inputs(const struct options *o, struct inputs *in)
{
	const read_spec xs = { "X", x_keys, 2, 2, READ_LABELS },
			kvs = { "X_kv", x_keys, 2, 2, READ_LABELS };
	const read_spec qs = { "Q", q_keys, 2, 2, READ_LABELS }, ks = { "K", k_keys, 2, 2, READ_LABELS };
	const read_spec vs = { "V", v_keys, 2, 2, 0 };
	const read_spec ms = { "mask", mask_keys, 2, 3, READ_NONFINITE | READ_BOOL };

	static const char *const one_opts[N_WEIGHTS] = {
		"--wq", "--wk", "--wv", "--wo", "--bq", "--bk", "--bv", "--bo",
	};

	snprintf(in->x_src, sizeof(in->x_src), "-x %s", o->x ? shown(o->x) : "");
	snprintf(in->kv_src, sizeof(in->kv_src), "--kv %s", o->kv ? shown(o->kv) : "");
	snprintf(in->q_src, sizeof(in->q_src), "--q %s", o->q ? shown(o->q) : "");
	snprintf(in->k_src, sizeof(in->k_src), "--k %s", o->k ? shown(o->k) : "");
	snprintf(in->v_src, sizeof(in->v_src), "--v %s", o->v ? shown(o->v) : "");
	snprintf(in->mask_src, sizeof(in->mask_src), "--mask %s", o->mask ? shown(o->mask) : "");
	{
		const char *const files[] = { o->x, o->kv, o->q, o->k, o->v, o->mask, o->w };

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			if (check_file_size(o, files[i]))
				return -1;
		for (int i = 0; i < N_WEIGHTS; i++)
			if (check_file_size(o, o->one[i]))
				return -1;
	}
	if (o->x && read_matrix(&in->x, o->x, &xs))
		return -1;
	if (o->kv && read_matrix(&in->kv, o->kv, &kvs))
		return -1;
	in->direct = o->q != NULL;
	if (in->direct && (read_matrix(&in->q, o->q, &qs) || read_matrix(&in->k, o->k, &ks) ||
			   read_matrix(&in->v, o->v, &vs)))
		return -1;
	in->w.layout = o->layout;
	if (o->w && weights_load(&in->w, o->w, o->layout))
		return -1;
	for (int i = 0; i < N_WEIGHTS; i++)
		if (o->one[i] && weights_load_one(&in->w, i, one_opts[i], o->one[i], o->layout))
			return -1;
	if (weights_finish(&in->w, o->heads, o->kv_heads))
		return -1;
	if (o->mask && read_matrix(&in->mask, o->mask, &ms))
		return -1;
	return 0;
}

/*
 * Shape errors name each matrix with the option and file it came from
 * ("W_Q from -w w.json is 4x3 but X from -x x.json has 5 columns") and
 * give both shapes.
 */

/* Bias lengths must match the columns of their weight. */
static int check_bias(const weights *w, int b, int wt)
{
	const size_t want = w->m[wt].dim[1];

	if (weights_has(w, b) && w->m[b].dim[0] != want)
		return error("%s from %s has %zu entr%s but %s from %s has %zu columns",
			     weight_names[b], w->src[b], w->m[b].dim[0], w->m[b].dim[0] == 1 ? "y" : "ies",
			     weight_names[wt], w->src[wt], want);
	return 0;
}

/* Work out mha_dims from the inputs, explaining any mismatch. */
static int derive_dims(const struct options *o, const struct inputs *in, mha_dims *d)
{
	const weights *w = &in->w;
	const size_t H = o->heads, G = o->kv_heads;

	memset(d, 0, sizeof(*d));
	d->heads = H;
	d->kv_heads = G;

	if (in->direct) {
		for (int i = WQ; i < N_WEIGHTS; i++)
			if (i != WO && i != BO && weights_has(w, i))
				return error("%s from %s cannot be used with --q/--k/--v (they are given "
					     "directly); only W_O and b_O can", weight_names[i], w->src[i]);
		d->n_q = in->q.dim[0];
		d->n_kv = in->k.dim[0];
		d->d_q_in = in->q.dim[1];
		d->d_k_in = in->k.dim[1];
		d->d_v_in = in->v.dim[1];
		if (d->d_q_in % H)
			return error("Q from %s has %zu columns, which --heads %zu does not divide",
				     in->q_src, d->d_q_in, H);
		d->d_k = d->d_q_in / H;
		if (d->d_k_in != G * d->d_k)
			return error("K from %s has %zu columns but needs %zu (%zu key/value head%s of "
				     "d_k %zu, as Q from %s has %zu columns for %zu head%s)", in->k_src,
				     d->d_k_in, G * d->d_k, G, plural(G), d->d_k, in->q_src, d->d_q_in,
				     H, plural(H));
		if (in->v.dim[0] != d->n_kv)
			return error("V from %s has %zu rows but K from %s has %zu: one value per key",
				     in->v_src, in->v.dim[0], in->k_src, d->n_kv);
		if (d->d_v_in % G)
			return error("V from %s has %zu columns, which --kv-heads %zu does not divide",
				     in->v_src, d->d_v_in, G);
		d->d_v = d->d_v_in / G;
	} else {
		const matrix *kv = o->kv ? &in->kv : &in->x;
		const char *kvname = o->kv ? "X_kv" : "X";
		const char *kvsrc = o->kv ? in->kv_src : in->x_src;
		const int n_proj = weights_has(w, WQ) + weights_has(w, WK) + weights_has(w, WV);

		d->n_q = in->x.dim[0];
		d->n_kv = kv->dim[0];
		d->d_q_in = in->x.dim[1];
		d->d_k_in = d->d_v_in = kv->dim[1];
		if (n_proj != 0 && n_proj != 3) {
			const int have = weights_has(w, WQ) ? WQ : weights_has(w, WK) ? WK : WV;

			return error("missing %s (W_Q, W_K and W_V go together; %s came from %s)",
				     !weights_has(w, WQ) ? "W_Q" : !weights_has(w, WK) ? "W_K" : "W_V",
				     weight_names[have], w->src[have]);
		}
		for (int b = BQ; b <= BV; b++)
			if (!n_proj && weights_has(w, b))
				return error("%s from %s without %s", weight_names[b], w->src[b],
					     weight_names[b - BQ + WQ]);
		if (n_proj) {
			const matrix *wq = &w->m[WQ], *wk = &w->m[WK], *wv = &w->m[WV];

			if (wq->dim[0] != d->d_q_in)
				return error("W_Q from %s is %zux%zu but X from %s has %zu columns: W_Q "
					     "needs %zu rows", w->src[WQ], wq->dim[0], wq->dim[1],
					     in->x_src, d->d_q_in, d->d_q_in);
			if (wq->dim[1] % H)
				return error("W_Q from %s has %zu columns, which --heads %zu does not "
					     "divide (each head takes an equal block)", w->src[WQ],
					     wq->dim[1], H);
			d->d_k = wq->dim[1] / H;
			for (int i = WK; i <= WV; i++)
				if (w->m[i].dim[0] != d->d_k_in)
					return error("%s from %s is %zux%zu but %s from %s has %zu columns: "
						     "%s needs %zu rows", weight_names[i], w->src[i],
						     w->m[i].dim[0], w->m[i].dim[1], kvname, kvsrc,
						     d->d_k_in, weight_names[i], d->d_k_in);
			if (wk->dim[1] != G * d->d_k)
				return error("W_K from %s has %zu columns but needs %zu (%zu key/value "
					     "head%s of d_k %zu, as W_Q from %s has %zu columns for %zu "
					     "head%s)", w->src[WK], wk->dim[1], G * d->d_k, G, plural(G),
					     d->d_k, w->src[WQ], wq->dim[1], H, plural(H));
			if (wv->dim[1] % G)
				return error("W_V from %s has %zu columns, which --kv-heads %zu does not "
					     "divide", w->src[WV], wv->dim[1], G);
			d->d_v = wv->dim[1] / G;
			if (check_bias(w, BQ, WQ) || check_bias(w, BK, WK) || check_bias(w, BV, WV))
				return -1;
		} else {
			/* Q = X, K = V = X_kv: the heads split X's own columns */
			if (d->d_q_in % H)
				return error("--heads %zu does not divide d_model %zu (the columns of X "
					     "from %s)", H, d->d_q_in, in->x_src);
			d->d_k = d->d_v = d->d_q_in / H;
			if (d->d_k_in != G * d->d_k && !o->kv)
				return error("--kv-heads %zu needs weights (-w) or --kv: without them K = V "
					     "= X, %zu columns wide, but %zu key/value head%s of %zu need%s %zu",
					     G, d->d_q_in, G, plural(G), d->d_k, G == 1 ? "s" : "", G * d->d_k);
			if (d->d_k_in != G * d->d_k)
				return error("X_kv from %s has %zu columns but without weights it needs "
					     "%zu (%zu key/value head%s of %zu, like the %zu columns of X "
					     "from %s)", kvsrc, d->d_k_in, G * d->d_k, G, plural(G), d->d_k,
					     d->d_q_in, in->x_src);
		}
	}

	if (weights_has(w, WO)) {
		const matrix *wo = &w->m[WO];

		if (wo->dim[0] != H * d->d_v)
			return error("W_O from %s is %zux%zu but the heads concatenate to %zu columns "
				     "(%zu head%s of d_v %zu): W_O needs %zu rows", w->src[WO],
				     wo->dim[0], wo->dim[1], H * d->d_v, H, plural(H), d->d_v, H * d->d_v);
		d->d_out = wo->dim[1];
		if (check_bias(w, BO, WO))
			return -1;
	} else if (weights_has(w, BO)) {
		return error("b_O from %s without W_O", w->src[BO]);
	}
	return 0;
}

/* The mask must fit the scores, and may only add numbers or -inf. */
static int check_mask(const struct options *o, struct inputs *in, const mha_dims *d,
		      mha_config *cfg)
{
	matrix *m = &in->mask;
	const size_t n = d->n_q * d->n_kv;
	char shape[64];

	if (!o->mask)
		return 0;
	if (m->rank == 3 && m->dim[0] != d->heads)
		return error("mask from %s has %zu per-head matrices but there %s %zu head%s",
			     in->mask_src, m->dim[0], d->heads == 1 ? "is" : "are", d->heads,
			     plural(d->heads));
	if (m->dim[m->rank - 2] != d->n_q || m->dim[m->rank - 1] != d->n_kv)
		return error("mask from %s is %s but the scores are %zux%zu (%zu quer%s x %zu key%s)%s",
			     in->mask_src, matrix_shape(m, shape, sizeof(shape)), d->n_q, d->n_kv,
			     d->n_q, d->n_q == 1 ? "y" : "ies", d->n_kv, plural(d->n_kv),
			     m->rank == 3 ? " for each head" : "");
	cfg->mask.per_head = m->rank == 3;
	if (m->is_bool) {
		const size_t count = matrix_size(m);

		in->allow = malloc(count ? count : 1);
		if (!in->allow)
			return error("out of memory");
		for (size_t i = 0; i < count; i++)
			in->allow[i] = m->v[i] != 0;
		cfg->mask.allow = in->allow;
		return 0;
	}
	for (size_t i = 0; i < matrix_size(m); i++) {
		if (isnan(m->v[i]) || m->v[i] == INFINITY) {
			const size_t h = i / n, r = i % n / d->n_kv, c = i % d->n_kv;

			if (m->rank == 3)
				return error("%s: mask[%zu][%zu][%zu] is %s: a mask adds numbers or -inf",
					     shown(o->mask), h, r, c, isnan(m->v[i]) ? "nan" : "inf");
			return error("%s: mask[%zu][%zu] is %s: a mask adds numbers or -inf",
				     shown(o->mask), r, c, isnan(m->v[i]) ? "nan" : "inf");
		}
	}
	cfg->mask.bias = m->v;
	return 0;
}

/* ---- collecting intermediates ------------------------------------------ */

static int keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols)
{
	struct results *r = ctx;
	matrix *dst;

	if (head < 0) {
		dst = &r->whole[stage];
	} else if (stage == MHA_STAGE_MASK && !r->mask_per_head) {
		/* one mask for every head: keep the first copy as the whole-model mask */
		if (head > 0)
			return 0;
		dst = &r->whole[stage];
	} else {
		if (!r->per_head[stage]) {
			r->per_head[stage] = calloc(r->heads, sizeof(matrix));
			if (!r->per_head[stage])
				return error("out of memory"), 1;
		}
		dst = &r->per_head[stage][head];
	}
	if (matrix_alloc(dst, 2, rows, cols, 1))
		return 1;
	memcpy(dst->v, m, rows * cols * sizeof(double));
	return 0;
}

static void results_free(struct results *r)
{
	for (int s = 0; s < MHA_STAGE_COUNT; s++) {
		matrix_free(&r->whole[s]);
		if (r->per_head[s])
			for (size_t h = 0; h < r->heads; h++)
				matrix_free(&r->per_head[s][h]);
		free(r->per_head[s]);
	}
}

/* Per-head masks are printed as one (H, n_q, n_kv) array, as they are read. */
static int stack_mask(struct results *r)
{
	matrix *per = r->per_head[MHA_STAGE_MASK];
	matrix *all = &r->whole[MHA_STAGE_MASK];
	size_t plane;

	if (!per)
		return 0;
	plane = per[0].dim[0] * per[0].dim[1];
	if (matrix_alloc(all, 3, r->heads, per[0].dim[0], per[0].dim[1]))
		return -1;
	for (size_t h = 0; h < r->heads; h++)
		memcpy(all->v + h * plane, per[h].v, plane * sizeof(double));
	return 0;
}

/* ---- printing ---------------------------------------------------------- */

static unsigned print_set(const struct options *o, int direct, int has_wo)
{
	unsigned p = o->print;

	if (o->print_all) {
		p |= PBIT(P_X) | PBIT(P_Q) | PBIT(P_K) | PBIT(P_V) | PBIT(P_SCORES) |
		     PBIT(P_SCALED) | PBIT(P_SOFTMAX) | PBIT(P_OUTPUT);
		if (o->cfg.softcap > 0)
			p |= PBIT(P_SOFTCAPPED);
		if (o->cfg.causal || o->mask || o->cfg.kv_len)
			p |= PBIT(P_MASK) | PBIT(P_MASKED);
		/* skip exact repeats: one head's output is the concat, which
		 * without W_O is the output */
		if (o->heads > 1)
			p |= PBIT(P_HEADS);
		if (has_wo)
			p |= PBIT(P_CONCAT);
	}
	if (direct)
		p &= ~PBIT(P_X);
	return p;
}

static unsigned stages_wanted(unsigned p, size_t heads)
{
	static const struct { int item; mha_stage stage, slice; } map[] = {
		{ P_Q, MHA_STAGE_Q, MHA_STAGE_HEAD_Q },
		{ P_K, MHA_STAGE_K, MHA_STAGE_HEAD_K },
		{ P_V, MHA_STAGE_V, MHA_STAGE_HEAD_V },
		{ P_SCORES, MHA_STAGE_SCORES, MHA_STAGE_SCORES },
		{ P_SCALED, MHA_STAGE_SCALED, MHA_STAGE_SCALED },
		{ P_SOFTCAPPED, MHA_STAGE_SOFTCAPPED, MHA_STAGE_SOFTCAPPED },
		{ P_MASK, MHA_STAGE_MASK, MHA_STAGE_MASK },
		{ P_MASKED, MHA_STAGE_MASKED, MHA_STAGE_MASKED },
		{ P_SOFTMAX, MHA_STAGE_SOFTMAX, MHA_STAGE_SOFTMAX },
		{ P_HEADS, MHA_STAGE_HEAD_OUTPUT, MHA_STAGE_HEAD_OUTPUT },
		{ P_CONCAT, MHA_STAGE_CONCAT, MHA_STAGE_CONCAT },
	};
	unsigned bits = 0;

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (p & PBIT(map[i].item)) {
			bits |= MHA_STAGE_BIT(map[i].stage);
			/* with several heads, each one's block of Q, K, V is shown too */
			if (heads > 1)
				bits |= MHA_STAGE_BIT(map[i].slice);
		}
	return bits;
}

/* How the scores were scaled, in words a tutorial would use. */
static void describe_scale(char *buf, size_t size, const mha_dims *d, const mha_config *cfg,
			   double scale)
{
	switch (cfg->scale_mode) {
	case MHA_SCALE_DK:
		snprintf(buf, size, "%.6g = 1/sqrt(d_k), d_k = %zu", scale, d->d_k);
		break;
	case MHA_SCALE_DMODEL:
		snprintf(buf, size, "%.6g = 1/sqrt(d_model), d_model = %zu", scale, d->d_q_in);
		break;
	case MHA_SCALE_SEQLEN:
		snprintf(buf, size, "%.6g = 1/sqrt(n_kv), n_kv = %zu", scale, d->n_kv);
		break;
	default:
		format_shortest(buf, size, scale);
		break;
	}
}

static void projection_title(char *buf, size_t size, char name, const struct options *o,
			     const struct inputs *in, int w, int b)
{
	const char *src = (name == 'Q' || !o->kv) ? "X" : "X_kv";

	if (in->direct)
		snprintf(buf, size, "%c", name);
	else if (!weights_has(&in->w, w))
		snprintf(buf, size, "%c = %s", name, src);
	else
		snprintf(buf, size, "%c = %s*W_%c%s%c", name, src, name,
			 weights_has(&in->w, b) ? " + b_" : "", weights_has(&in->w, b) ? name : '\0');
}

/* One matrix to print: its JSON key, its head (1-based; 0: the whole model) and title. */
enum axis { AXIS_NONE, AXIS_QUERY, AXIS_KEY };

struct item {
	const char *key;
	size_t head;
	char title[200];
	const matrix *m;
	enum axis rows, cols; /* what the rows and columns stand for, for labels */
};

struct items {
	struct item v[MHA_STAGE_COUNT * 16 + 8];
	size_t n;
	struct item *extra; /* beyond v when there are many heads */
	size_t cap;
};

static struct item *add_item(struct items *list, const char *key, size_t head, const matrix *m)
{
	struct item *it;
	const size_t fixed = sizeof(list->v) / sizeof(list->v[0]);

	if (list->n < fixed) {
		it = &list->v[list->n];
	} else {
		if (list->n - fixed == list->cap) {
			size_t cap = list->cap ? list->cap * 2 : 64;
			struct item *more = realloc(list->extra, cap * sizeof(*more));

			if (!more)
				return NULL;
			list->extra = more;
			list->cap = cap;
		}
		it = &list->extra[list->n - fixed];
	}
	list->n++;
	it->key = key;
	it->head = head;
	it->m = m;
	it->title[0] = '\0';
	/* most matrices have a row per query; K, V and their blocks a row per key,
	 * and the (n_q, n_kv) ones a column per key */
	it->rows = (!strcmp(key, "K") || !strcmp(key, "V")) ? AXIS_KEY : AXIS_QUERY;
	it->cols = (!strcmp(key, "mask") || !strcmp(key, "scores") || !strcmp(key, "scaled") ||
		    !strcmp(key, "softcapped") || !strcmp(key, "masked") || !strcmp(key, "softmax"))
			   ? AXIS_KEY : AXIS_NONE;
	return it;
}

static const struct item *item_at(const struct items *list, size_t i)
{
	const size_t fixed = sizeof(list->v) / sizeof(list->v[0]);

	return i < fixed ? &list->v[i] : &list->extra[i - fixed];
}

/* "mask (added to the scores): causal, keys past 4, m.json" */
static void mask_title(char *buf, size_t size, const struct options *o)
{
	const char *parts[3] = { NULL };
	char causal[64], kv[48];
	size_t n = 0;

	switch (o->cfg.causal) {
	case MHA_CAUSAL_TOP_LEFT: snprintf(causal, sizeof(causal), "causal"); break;
	case MHA_CAUSAL_BOTTOM_RIGHT: snprintf(causal, sizeof(causal), "causal, bottom-right"); break;
	case MHA_CAUSAL_OFFSET:
		snprintf(causal, sizeof(causal), "causal, offset %td", o->cfg.causal_offset);
		break;
	default: causal[0] = '\0'; break;
	}
	if (causal[0])
		parts[n++] = causal;
	if (o->cfg.kv_len) {
		snprintf(kv, sizeof(kv), "keys from %zu on are padding", o->cfg.kv_len + 1);
		parts[n++] = kv;
	}
	if (o->mask)
		parts[n++] = shown(o->mask);
	snprintf(buf, size, "mask (added to the scores): %s%s%s%s%s", n ? parts[0] : "none",
		 n > 1 ? "; " : "", n > 1 ? parts[1] : "", n > 2 ? "; " : "", n > 2 ? parts[2] : "");
}

/* Everything asked for, in the order of the computation, titled. */
static int collect(struct items *list, const struct options *o, const struct inputs *in,
		   const struct results *r, const mha_dims *d, const matrix *out, unsigned p,
		   double scale)
{
	static const struct { mha_stage s; const char *key; } order[] = {
		{ MHA_STAGE_HEAD_Q, "Q" }, { MHA_STAGE_HEAD_K, "K" }, { MHA_STAGE_HEAD_V, "V" },
		{ MHA_STAGE_SCORES, "scores" }, { MHA_STAGE_SCALED, "scaled" },
		{ MHA_STAGE_SOFTCAPPED, "softcapped" }, { MHA_STAGE_MASKED, "masked" },
		{ MHA_STAGE_SOFTMAX, "softmax" }, { MHA_STAGE_HEAD_OUTPUT, "output" },
	};
	const size_t per = d->heads / d->kv_heads;
	char how[96], cap[40];
	struct item *it;

#define ADD(key, head, m) do { if (!(it = add_item(list, key, head, m))) return error("out of memory"); } while (0)
	if (p & PBIT(P_X)) {
		ADD("X", 0, &in->x);
		snprintf(it->title, sizeof(it->title), "X");
	}
	if (p & PBIT(P_Q)) {
		ADD("Q", 0, &r->whole[MHA_STAGE_Q]);
		projection_title(it->title, sizeof(it->title), 'Q', o, in, WQ, BQ);
	}
	if (p & PBIT(P_K)) {
		ADD("K", 0, &r->whole[MHA_STAGE_K]);
		projection_title(it->title, sizeof(it->title), 'K', o, in, WK, BK);
	}
	if (p & PBIT(P_V)) {
		ADD("V", 0, &r->whole[MHA_STAGE_V]);
		projection_title(it->title, sizeof(it->title), 'V', o, in, WV, BV);
	}
	if (p & PBIT(P_MASK)) {
		ADD("mask", 0, &r->whole[MHA_STAGE_MASK]);
		mask_title(it->title, sizeof(it->title), o);
	}

	describe_scale(how, sizeof(how), d, &o->cfg, scale);
	format_shortest(cap, sizeof(cap), o->cfg.softcap);
	for (size_t h = 0; h < d->heads; h++) {
		const size_t q = h + 1, kv = h / per + 1;

		for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
			const mha_stage s = order[i].s;
			char *t;
			size_t n;

			if (!r->per_head[s])
				continue;
			ADD(order[i].key, q, &r->per_head[s][h]);
			t = it->title;
			n = sizeof(it->title);
			switch (s) {
			case MHA_STAGE_HEAD_Q: snprintf(t, n, "head %zu: Q%zu", q, q); break;
			case MHA_STAGE_HEAD_K: snprintf(t, n, "head %zu: K%zu", q, kv); break;
			case MHA_STAGE_HEAD_V: snprintf(t, n, "head %zu: V%zu", q, kv); break;
			case MHA_STAGE_SCORES: snprintf(t, n, "head %zu: scores = Q%zu*K%zu^T", q, q, kv); break;
			case MHA_STAGE_SCALED: snprintf(t, n, "head %zu: scaled = scores * %s", q, how); break;
			case MHA_STAGE_SOFTCAPPED:
				snprintf(t, n, "head %zu: softcapped = %s*tanh(scaled/%s)", q, cap, cap);
				break;
			case MHA_STAGE_MASKED:
				snprintf(t, n, "head %zu: masked = %s + mask", q,
					 o->cfg.softcap > 0 ? "softcapped" : "scaled");
				break;
			case MHA_STAGE_SOFTMAX:
				snprintf(t, n, "head %zu: softmax(%s), row by row", q,
					 (o->cfg.causal || o->mask || o->cfg.kv_len) ? "masked" :
					 o->cfg.softcap > 0 ? "softcapped" : "scaled");
				break;
			default:
				snprintf(t, n, "head %zu: output = softmax*V%zu", q, kv);
				break;
			}
		}
	}
	if (p & PBIT(P_CONCAT)) {
		ADD("concat", 0, &r->whole[MHA_STAGE_CONCAT]);
		snprintf(it->title, sizeof(it->title), "concat (the heads' outputs side by side)");
	}
	if (p & PBIT(P_OUTPUT)) {
		ADD("output", 0, out);
		if (!weights_has(&in->w, WO))
			snprintf(it->title, sizeof(it->title), "output");
		else
			snprintf(it->title, sizeof(it->title), "output = concat*W_O%s",
				 weights_has(&in->w, BO) ? " + b_O" : "");
	}
#undef ADD
	return 0;
}

static const char *const *axis_labels(const struct labels *l, enum axis a)
{
	return a == AXIS_QUERY ? (const char *const *)l->query
	       : a == AXIS_KEY ? (const char *const *)l->key : NULL;
}

/* JSON: the labels as a top-level "tokens" (and "kv_tokens" when they differ) */
static void json_tokens(writer *wr, const char *key, char **t, size_t n)
{
	fputs(wr->need_comma ? ",\n  \"" : "\n  \"", wr->fp);
	fputs(key, wr->fp);
	fputs("\": [", wr->fp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputs(", ", wr->fp);
		text_put_json(wr->fp, t[i]); /* valid UTF-8 whatever the label holds */
	}
	fputc(']', wr->fp);
	wr->need_comma = 1;
}

/* One stream (standard output or a file) in text, JSON, CSV or Markdown. */
static void write_stream(writer *wr, const struct items *list, const struct labels *l)
{
	size_t head = 0;

	wr->single = list->n == 1;
	out_begin(wr);
	if (wr->format == FORMAT_JSON && l->query)
		json_tokens(wr, "tokens", l->query, l->n_query);
	if (wr->format == FORMAT_JSON && l->key && l->key != l->query)
		json_tokens(wr, "kv_tokens", l->key, l->n_key);
	for (size_t i = 0; i < list->n; i++) {
		const struct item *it = item_at(list, i);

		if (it->head != head) {
			if (head)
				out_head_end(wr);
			else
				out_heads_begin(wr);
			if (it->head)
				out_head_begin(wr, it->head - 1);
			else
				out_heads_end(wr);
			head = it->head;
		}
		wr->row_labels = axis_labels(l, it->rows);
		wr->col_labels = axis_labels(l, it->cols);
		out_matrix(wr, it->key, it->title, it->m);
		wr->row_labels = wr->col_labels = NULL;
	}
	if (head) {
		out_head_end(wr);
		out_heads_end(wr);
	}
	out_end(wr);
}

/* Where a path names a directory to fill: it exists as one, or ends in '/'. */
static int is_dir_target(const char *path)
{
	struct stat st;
	const size_t n = strlen(path);

	return (n && path[n - 1] == '/') || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

/* One matrix into a file of its own: a JSON array, CSV or .npy. */
static int write_one(const char *path, out_format format, const matrix *m)
{
	outfile of;

	if (outfile_open(&of, path))
		return -1;
	/* a failed write leaves the stream in error, which the commit reports */
	if (format == FORMAT_NPY) {
		(void)npy_write(of.fp, m);
	} else if (format == FORMAT_CSV) {
		(void)csv_write(of.fp, m);
	} else {
		writer wr = { .fp = of.fp, .format = FORMAT_JSON };

		(void)json_write_array(&wr, m);
	}
	return outfile_commit(&of);
}

/* -o DIR/: one file per matrix, named after its key (head1_scores.csv). */
static int write_directory(const char *dir, out_format format, const struct items *list)
{
	const char *ext = format == FORMAT_NPY ? "npy" : format == FORMAT_CSV ? "csv" : "json";
	const size_t n = strlen(dir);
	const char *sep = n && dir[n - 1] == '/' ? "" : "/";
	char path[4400];

	if (format != FORMAT_NPY && format != FORMAT_CSV && format != FORMAT_JSON)
		return error("-o %s: a directory takes one file per matrix: use --format csv, npy "
			     "or json (or name a file)", dir);
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return error("%s: cannot create the directory: %s", dir, strerror(errno));
	for (size_t i = 0; i < list->n; i++) {
		const struct item *it = item_at(list, i);
		const matrix *m = it->m;

		if (format == FORMAT_CSV && m->rank == 3) {
			/* CSV holds 2-D: a per-head mask becomes one file per head */
			const size_t plane = m->dim[1] * m->dim[2];

			for (size_t h = 0; h < m->dim[0]; h++) {
				const matrix part = { .rank = 2, .dim = { m->dim[1], m->dim[2], 1 },
						      .v = m->v + h * plane };

				snprintf(path, sizeof(path), "%s%s%s_head%zu.%s", dir, sep, it->key, h + 1, ext);
				if (write_one(path, format, &part))
					return -1;
			}
			continue;
		}
		if (it->head)
			snprintf(path, sizeof(path), "%s%shead%zu_%s.%s", dir, sep, it->head, it->key, ext);
		else
			snprintf(path, sizeof(path), "%s%s%s.%s", dir, sep, it->key, ext);
		if (write_one(path, format, m))
			return -1;
	}
	return 0;
}

/* heatmap and svg: a panel per head of the step drawn, the mask beside it */
static int write_heatmaps(const struct options *o, const struct items *list,
			  const struct labels *l, FILE *fp)
{
	const char *step = print_names[o->heat_step];
	const matrix *mask = NULL;
	struct heat_panel *panels = calloc(list->n ? list->n : 1, sizeof(*panels));
	matrix *planes = calloc(list->n ? list->n : 1, sizeof(*planes));
	size_t n = 0;
	int rc;

	if (!panels || !planes) {
		free(panels);
		free(planes);
		return error("out of memory");
	}
	for (size_t i = 0; i < list->n; i++)
		if (!strcmp(item_at(list, i)->key, "mask"))
			mask = item_at(list, i)->m;
	for (size_t i = 0; i < list->n; i++) {
		const struct item *it = item_at(list, i);

		if (!it->head || strcmp(it->key, step))
			continue;
		panels[n].title = it->title;
		panels[n].m = it->m;
		panels[n].step = step;
		panels[n].row_labels = axis_labels(l, AXIS_QUERY);
		panels[n].col_labels = axis_labels(l, AXIS_KEY);
		if (mask && mask->rank == 3) {
			/* a per-head mask: this head's plane */
			const size_t plane = mask->dim[1] * mask->dim[2];

			planes[n] = (matrix){ .rank = 2, .dim = { mask->dim[1], mask->dim[2], 1 },
					      .v = mask->v + (it->head - 1) * plane };
			panels[n].mask = &planes[n];
		} else {
			panels[n].mask = mask;
		}
		n++;
	}
	if (o->format == FORMAT_SVG) {
		rc = heatmap_svg(fp, panels, n, o->precision);
	} else {
		enum heat_color color = HEAT_PLAIN;
		const char *no_color = getenv("NO_COLOR"), *term = getenv("COLORTERM");

		if (o->color > 0 || (o->color == 0 && isatty(fileno(fp)) && !(no_color && *no_color)))
			color = term && (!strcmp(term, "truecolor") || !strcmp(term, "24bit"))
					? HEAT_TRUECOLOR : HEAT_256;
		rc = heatmap_terminal(fp, panels, n, color, o->precision);
	}
	free(panels);
	free(planes);
	return rc;
}

static int write_results(const struct options *o, const struct items *list,
			 const struct labels *labels)
{
	outfile of;

	if (o->output && strcmp(o->output, "-") && is_dir_target(o->output))
		return write_directory(o->output, o->format, list);
	if (o->format == FORMAT_NPY) {
		if (list->n != 1)
			return error("--format npy writes one matrix per file, and %zu were asked for: "
				     "give -o DIR/ for one file each, or --print one step", list->n);
		if ((!o->output || !strcmp(o->output, "-")) && isatty(STDOUT_FILENO))
			return error("--format npy is binary: give -o FILE.npy, or redirect standard output");
	}
	if (outfile_open(&of, o->output))
		return -1;
	if (o->format == FORMAT_NPY) {
		(void)npy_write(of.fp, item_at(list, 0)->m); /* errors: see write_one() */
	} else if (o->format == FORMAT_HEATMAP || o->format == FORMAT_SVG) {
		if (write_heatmaps(o, list, labels, of.fp)) {
			outfile_abort(&of);
			return -1;
		}
	} else {
		writer wr = { .fp = of.fp, .format = o->format, .precision = o->precision };

		write_stream(&wr, list, labels);
	}
	return outfile_commit(&of);
}

/* ---- --explain ---------------------------------------------------------- */

static int write_explain(const struct options *o, const struct inputs *in, const struct results *r,
			 const mha_dims *d, const matrix *out, double scale)
{
	struct explain_head *heads = calloc(d->heads, sizeof(*heads));
	const size_t per = d->heads / d->kv_heads;
	char how[96], qf[64], kf[64], vf[64], of[64], mask_how[200];
	struct explain e;
	outfile f;
	int rc = -1;

	if (!heads)
		return error("out of memory");
	describe_scale(how, sizeof(how), d, &o->cfg, scale);
	projection_title(qf, sizeof(qf), 'Q', o, in, WQ, BQ);
	projection_title(kf, sizeof(kf), 'K', o, in, WK, BK);
	projection_title(vf, sizeof(vf), 'V', o, in, WV, BV);
	snprintf(of, sizeof(of), "output = concat*W_O%s", weights_has(&in->w, BO) ? " + b_O" : "");
	mask_title(mask_how, sizeof(mask_how), o);
	for (size_t h = 0; h < d->heads; h++) {
		struct explain_head *x = &heads[h];
		const matrix *const *ph = (const matrix *const *)r->per_head;

		x->kv_head = h / per;
		x->q = d->heads > 1 ? &r->per_head[MHA_STAGE_HEAD_Q][h] : &r->whole[MHA_STAGE_Q];
		x->k = d->heads > 1 ? &r->per_head[MHA_STAGE_HEAD_K][h] : &r->whole[MHA_STAGE_K];
		x->v = d->heads > 1 ? &r->per_head[MHA_STAGE_HEAD_V][h] : &r->whole[MHA_STAGE_V];
		x->scores = &r->per_head[MHA_STAGE_SCORES][h];
		x->scaled = &r->per_head[MHA_STAGE_SCALED][h];
		x->softcapped = ph[MHA_STAGE_SOFTCAPPED] ? &r->per_head[MHA_STAGE_SOFTCAPPED][h] : NULL;
		x->masked = ph[MHA_STAGE_MASKED] ? &r->per_head[MHA_STAGE_MASKED][h] : x->scaled;
		x->mask = ph[MHA_STAGE_MASK] ? &r->per_head[MHA_STAGE_MASK][h]
			  : r->whole[MHA_STAGE_MASK].rank == 2 ? &r->whole[MHA_STAGE_MASK] : NULL;
		x->softmax = &r->per_head[MHA_STAGE_SOFTMAX][h];
		x->out = &r->per_head[MHA_STAGE_HEAD_OUTPUT][h];
	}
	memset(&e, 0, sizeof(e));
	e.d = d;
	e.cfg = &o->cfg;
	e.scale = scale;
	e.scale_how = how;
	e.mask_how = strchr(mask_how, ':') ? strchr(mask_how, ':') + 2 : NULL;
	e.q_formula = qf;
	e.k_formula = kf;
	e.v_formula = vf;
	e.out_formula = weights_has(&in->w, WO) ? of : NULL;
	e.x = in->direct ? NULL : &in->x;
	e.Q = &r->whole[MHA_STAGE_Q];
	e.K = &r->whole[MHA_STAGE_K];
	e.V = &r->whole[MHA_STAGE_V];
	e.concat = &r->whole[MHA_STAGE_CONCAT];
	e.output = out;
	e.heads = heads;
	e.q_labels = (const char *const *)in->labels.query;
	e.k_labels = (const char *const *)in->labels.key;
	e.precision = o->precision;
	if (o->cell && explain_parse_cell(o->cell, e.q_labels, d->n_q, e.k_labels, d->n_kv,
					  &e.cell_i, &e.cell_j) == 0)
		e.has_cell = 1;
	if ((!o->cell || e.has_cell) && outfile_open(&f, o->output) == 0) {
		(void)explain_write(f.fp, &e); /* a write error shows in the commit */
		rc = outfile_commit(&f);
	}
	free(heads);
	return rc;
}

/* ---- no output over an input ------------------------------------------ */

struct dir_names {
	const struct options *o;
	unsigned p;         /* the steps that may be written (W_O unknown yet: concat too) */
	const char *ext;    /* "csv", "npy", "json" */
};

/* the head number at *s ("12" in head12_Q), from 1 to heads, or 0; *s moved past it */
static size_t head_number(const char **s, size_t heads)
{
	unsigned long long h = 0;
	const char *p = *s;

	if (*p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((h = h * 10 + (unsigned)(*p - '0')) > heads)
			return 0;
	*s = p;
	return (size_t)h;
}

/* Might write_directory() write name: KEY.ext, headN_KEY.ext or mask_headN.csv? */
static int may_write_in_dir(const char *name, void *ctx)
{
	/* as collect() names them: whole, or per head (2: only with several heads) */
	static const struct { const char *key; int item, whole, per_head; } keys[] = {
		{ "X", P_X, 1, 0 }, { "Q", P_Q, 1, 2 }, { "K", P_K, 1, 2 }, { "V", P_V, 1, 2 },
		{ "mask", P_MASK, 1, 0 }, { "scores", P_SCORES, 0, 1 }, { "scaled", P_SCALED, 0, 1 },
		{ "softcapped", P_SOFTCAPPED, 0, 1 }, { "masked", P_MASKED, 0, 1 },
		{ "softmax", P_SOFTMAX, 0, 1 }, { "output", P_HEADS, 0, 1 },
		{ "concat", P_CONCAT, 1, 0 }, { "output", P_OUTPUT, 1, 0 },
	};
	const struct dir_names *dn = ctx;
	const size_t heads = dn->o->heads;
	const char *dot = strrchr(name, '.'), *s = name;
	int per_head = 0;

	if (!dot || strcmp(dot + 1, dn->ext))
		return 0;
	if (!strncmp(s, "mask_head", 9)) {
		/* a mask per head: one CSV file each */
		s += 9;
		return !strcmp(dn->ext, "csv") && (dn->p & PBIT(P_MASK)) && head_number(&s, heads) &&
		       s == dot;
	}
	if (!strncmp(s, "head", 4)) {
		s += 4;
		if (!head_number(&s, heads) || *s++ != '_')
			return 0;
		per_head = 1;
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strlen(keys[i].key) == (size_t)(dot - s) && !strncmp(s, keys[i].key, (size_t)(dot - s)) &&
		    (dn->p & PBIT(keys[i].item)) &&
		    (per_head ? keys[i].per_head == 1 || (keys[i].per_head == 2 && heads > 1)
			      : keys[i].whole))
			return 1;
	return 0;
}

static int add_input(void *ctx, const char *file)
{
	return input_ids_add(ctx, "-w", file);
}

/*
 * -o naming one of the inputs, by any name: refused before anything is
 * read, by device and inode.  -o DIR/ is checked for each file in DIR the
 * run may write.  0, or -1 said.
 */
static int refuse_output_over_input(const struct options *o)
{
	static const char *const one_opts[N_WEIGHTS] = {
		"--wq", "--wk", "--wv", "--wo", "--bq", "--bk", "--bv", "--bo",
	};
	const struct { const char *opt, *path; } files[] = {
		{ "-x", o->x }, { "--kv", o->kv }, { "--q", o->q }, { "--k", o->k },
		{ "--v", o->v }, { "--mask", o->mask },
	};
	input_ids ids = { 0 };
	int rc = 0;

	if (!o->output || !strcmp(o->output, "-"))
		return 0;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]) && !rc; i++)
		if (files[i].path)
			rc = input_ids_add(&ids, files[i].opt, files[i].path);
	for (int i = 0; i < N_WEIGHTS && !rc; i++)
		if (o->one[i])
			rc = input_ids_add(&ids, one_opts[i], o->one[i]);
	if (!rc && o->w)
		rc = weights_files(o->w, add_input, &ids); /* a directory: every file it may read */
	if (!rc && is_dir_target(o->output)) {
		const struct dir_names dn = {
			.o = o, .p = print_set(o, o->q != NULL, 1),
			.ext = o->format == FORMAT_NPY ? "npy" : o->format == FORMAT_CSV ? "csv" : "json",
		};

		rc = outfile_refuse_input_in_dir(o->output, may_write_in_dir, (void *)&dn, &ids);
	} else if (!rc) {
		rc = outfile_refuse_input(o->output, &ids);
	}
	input_ids_free(&ids);
	return rc;
}

/* ---- memory ------------------------------------------------------------ */

/* *acc += count·size, saturating at SIZE_MAX */
static void add_bytes(size_t *acc, size_t count, size_t size)
{
	if (*acc == SIZE_MAX || (count && size > (SIZE_MAX - *acc) / count))
		*acc = SIZE_MAX;
	else
		*acc += count * size;
}

/*
 * What a run will hold at its peak: the inputs as read, the library's own
 * needs (mha_memory), the copies of the steps to print, and the output.
 */
static void run_memory(const struct options *o, const struct inputs *in, const mha_dims *d,
		       unsigned wanted, size_t out_cols, size_t part[3])
{
	const matrix *held[] = { &in->x, &in->kv, &in->q, &in->k, &in->v, &in->mask };
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, nn = d->n_q * d->n_kv;
	size_t lib;

	/* the inputs as read hold what the budget was charged for them; float32
	 * adds a float copy of each */
	part[0] = budget_held();
	part[1] = part[2] = 0;
	for (size_t i = 0; o->f32 && i < sizeof(held) / sizeof(held[0]); i++)
		add_bytes(&part[0], matrix_size(held[i]), sizeof(float));
	for (int i = 0; o->f32 && i < N_WEIGHTS; i++)
		add_bytes(&part[0], matrix_size(&in->w.m[i]), sizeof(float));
	add_bytes(&part[0], matrix_size(&in->mask), 1);
	lib = mha_memory(d, &o->cfg, wanted, o->f32);
	add_bytes(&part[1], 1, lib);
	add_bytes(&part[2], d->n_q * out_cols, sizeof(double) * (o->f32 ? 2 : 1));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_Q))
		add_bytes(&part[2], d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_K))
		add_bytes(&part[2], d->n_kv * G * d->d_k, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_V))
		add_bytes(&part[2], d->n_kv * G * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_CONCAT))
		add_bytes(&part[2], d->n_q * d->heads * d->d_v, sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_Q))
		add_bytes(&part[2], d->n_q * d->heads * d->d_k, sizeof(double));
	if (wanted & (MHA_STAGE_BIT(MHA_STAGE_HEAD_K) | MHA_STAGE_BIT(MHA_STAGE_HEAD_V)))
		add_bytes(&part[2], d->n_kv * d->heads * (d->d_k + d->d_v), sizeof(double));
	if (wanted & MHA_STAGE_BIT(MHA_STAGE_HEAD_OUTPUT))
		add_bytes(&part[2], d->n_q * d->heads * d->d_v, sizeof(double));
	for (int s = MHA_STAGE_SCORES; s <= MHA_STAGE_SOFTMAX; s++)
		if (wanted & MHA_STAGE_BIT(s))
			/* a per-head mask is kept per head and once more stacked */
			add_bytes(&part[2], nn, d->heads * sizeof(double) *
				  (s == MHA_STAGE_MASK && o->cfg.mask.per_head ? 2 : 1));
}

static int check_memory(const struct options *o, const struct inputs *in, const mha_dims *d,
			unsigned wanted, size_t out_cols)
{
	size_t part[3], total = 0;
	char t[48], a[48], b[48], c[48], m[48];

	if (o->max_memory == SIZE_MAX)
		return 0;
	run_memory(o, in, d, wanted, out_cols, part);
	for (int i = 0; i < 3; i++)
		add_bytes(&total, 1, part[i]);
	if (total <= o->max_memory)
		return 0;
	return error("this run needs about %s (the inputs %s, the computation %s, the output and "
		     "the steps to print %s), more than --max-memory (%s): print fewer steps, or "
		     "raise --max-memory", show_bytes(t, sizeof(t), total),
		     show_bytes(a, sizeof(a), part[0]), show_bytes(b, sizeof(b), part[1]),
		     show_bytes(c, sizeof(c), part[2]), show_bytes(m, sizeof(m), o->max_memory));
}

/* ---- the command ------------------------------------------------------- */

static void inputs_free(struct inputs *in)
{
	matrix_free(&in->x);
	matrix_free(&in->kv);
	matrix_free(&in->q);
	matrix_free(&in->k);
	matrix_free(&in->v);
	matrix_free(&in->mask);
	weights_free(&in->w);
	free(in->allow);
	if (in->labels.own_key)
		free_tokens(in->labels.key, in->labels.n_key);
	if (in->labels.own_query)
		free_tokens(in->labels.query, in->labels.n_query);
}

/* a float copy of n doubles (NULL stays NULL); *ok cleared when out of memory */
static float *to_f32(const double *v, size_t n, int *ok)
{
	float *f;

	if (!v)
		return NULL;
	f = malloc((n ? n : 1) * sizeof(float));
	if (!f) {
		*ok = 0;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		f[i] = (float)v[i];
	return f;
}

/*
 * --dtype f32: the inputs rounded to float, the library's float32 path,
 * the output widened back (exactly) and marked as floats for the writers.
 */
static mha_status forward_f32(matrix *out, const mha_dims *d, const mha_inputs *src,
			      const mha_weights *w, const mha_config *cfg, mha_report *rep)
{
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t n_out = matrix_size(out), out_cols = matrix_cols(out);
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	int ok = 1;
	float *xq = to_f32(src->xq, d->n_q * d->d_q_in, &ok);
	float *xk = src->xk == src->xq ? xq : to_f32(src->xk, d->n_kv * d->d_k_in, &ok);
	float *xv = src->xv == src->xk ? xk : to_f32(src->xv, d->n_kv * d->d_v_in, &ok);
	float *W[8] = {
		to_f32(w->W_Q, d->d_q_in * hk, &ok), to_f32(w->W_K, d->d_k_in * gk, &ok),
		to_f32(w->W_V, d->d_v_in * gv, &ok), to_f32(w->W_O, hv * out_cols, &ok),
		to_f32(w->b_Q, hk, &ok), to_f32(w->b_K, gk, &ok), to_f32(w->b_V, gv, &ok),
		to_f32(w->b_O, out_cols, &ok),
	};
	float *o = malloc((n_out ? n_out : 1) * sizeof(float));
	mha_status st = MHA_ERR_NOMEM;

	if (ok && o) {
		st = mha_forward_f32(o, d, &(mha_inputs_f32){ xq, xk, xv },
				     &(mha_weights_f32){ W[0], W[1], W[2], W[3], W[4], W[5], W[6], W[7] },
				     cfg, rep);
		for (size_t i = 0; st == MHA_OK && i < n_out; i++)
			out->v[i] = o[i];
		out->is_f32 = 1;
	}
	if (xv != xk)
		free(xv);
	if (xk != xq)
		free(xk);
	free(xq);
	for (int i = 0; i < 8; i++)
		free(W[i]);
	free(o);
	return st;
}

static const double *weight_ptr(const weights *w, int i)
{
	return weights_has(w, i) ? w->m[i].v : NULL;
}

int cmd_heatmap(int argc, char **argv)
{
	int rc;

	heatmap_by_default = 1;
	rc = cmd_forward(argc, argv);
	heatmap_by_default = 0;
	return rc;
}

int forward_check_args(int argc, char **argv)
{
	struct options o;

	switch (parse_options(argc, argv, &o)) {
	case 1: return 1;
	case 0: break;
	default: return EXIT_USAGE;
	}
	return check_option_combinations(&o) ? EXIT_USAGE : 0;
}

int cmd_forward(int argc, char **argv)
{
	struct options o;
	struct inputs in;
	struct results res;
	mha_dims d;
	mha_inputs src;
	mha_weights mw;
	mha_observer obs;
	mha_report rep;
	mha_status st;
	matrix out = { 0 };
	struct items list = { .n = 0 };
	unsigned p;
	int rc = EXIT_DATA;

	switch (parse_options(argc, argv, &o)) {
	case 1: return EXIT_OK;
	case 0: break;
	default: return EXIT_USAGE;
	}
	if (check_option_combinations(&o) || refuse_output_over_input(&o))
		return EXIT_USAGE;

	memset(&in, 0, sizeof(in));
	memset(&res, 0, sizeof(res));
	/* one limit from the first byte read to the last written */
	budget_init(o.max_memory);
	if (read_inputs(&o, &in) || derive_dims(&o, &in, &d) || check_mask(&o, &in, &d, &o.cfg))
		goto done;
	if (set_labels(&o, &in, &d))
		goto done;
	/* --cell names a query and a key: a command-line error, known once the labels are */
	if (o.cell && explain_parse_cell(o.cell, (const char *const *)in.labels.query, d.n_q,
					 (const char *const *)in.labels.key, d.n_kv, &(size_t){ 0 },
					 &(size_t){ 0 })) {
		rc = EXIT_USAGE;
		goto done;
	}
	if (o.cfg.kv_len > d.n_kv) {
		error("--kv-len %zu but %s gives %zu key%s", o.cfg.kv_len,
		      in.direct ? in.k_src : o.kv ? in.kv_src : in.x_src, d.n_kv, plural(d.n_kv));
		goto done;
	}

	src.xq = in.direct ? in.q.v : in.x.v;
	src.xk = in.direct ? in.k.v : (o.kv ? in.kv.v : in.x.v);
	src.xv = in.direct ? in.v.v : src.xk;
	mw = (mha_weights){
		.W_Q = weight_ptr(&in.w, WQ), .W_K = weight_ptr(&in.w, WK),
		.W_V = weight_ptr(&in.w, WV), .W_O = weight_ptr(&in.w, WO),
		.b_Q = weight_ptr(&in.w, BQ), .b_K = weight_ptr(&in.w, BK),
		.b_V = weight_ptr(&in.w, BV), .b_O = weight_ptr(&in.w, BO),
	};
	p = print_set(&o, in.direct, weights_has(&in.w, WO));
	res.heads = d.heads;
	res.mask_per_head = o.cfg.mask.per_head;
	obs = (mha_observer){ .fn = keep, .ctx = &res, .wanted = stages_wanted(p, d.heads) };
	if (check_memory(&o, &in, &d, obs.wanted, mha_output_cols(&d, mw.W_O != NULL)) ||
	    matrix_alloc(&out, 2, d.n_q, mha_output_cols(&d, mw.W_O != NULL), 1))
		goto done;

	st = o.f32 ? forward_f32(&out, &d, &src, &mw, &o.cfg, &rep)
		   : mha_forward(out.v, &d, &src, &mw, &o.cfg, &obs, &rep);
	if (st == MHA_ERR_OBSERVER)
		goto done; /* keep() said why */
	if (st == MHA_ERR_RANGE) {
		/* the type the run computes in: --dtype f32 overflows near 3.4e38 */
		error("the numbers overflow: Q, K, V, the scores or the output went past the "
		      "largest %s; scale the inputs down",
		      o.f32 ? "float (about 3.4e38)" : "double (about 1.8e308)");
		goto done;
	}
	if (st != MHA_OK) {
		error("%s", mha_strerror(st));
		goto done;
	}
	if (rep.blocked_rows == 1)
		warning("head %d, query row %zu: every key is masked; its softmax row and output "
			"are zero", rep.first_blocked_head + 1, rep.first_blocked_row + 1);
	else if (rep.blocked_rows > 1)
		warning("%zu query rows have every key masked (the first: head %d, row %zu); their "
			"softmax rows and outputs are zero", rep.blocked_rows,
			rep.first_blocked_head + 1, rep.first_blocked_row + 1);
	if (stack_mask(&res))
		goto done;

	if (o.explain) {
		if (write_explain(&o, &in, &res, &d, &out, rep.scale))
			goto done;
	} else if (collect(&list, &o, &in, &res, &d, &out, p, rep.scale) ||
		   write_results(&o, &list, &in.labels))
		goto done;
	rc = EXIT_OK;
done:
	free(list.extra);
	matrix_free(&out);
	results_free(&res);
	inputs_free(&in);
	return rc;
}

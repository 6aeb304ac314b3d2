/*
 * options.c: the attention commands' option table (attention.h), each
 * row's getopt entry, help group and, for the sections every help shares,
 * its lines; and the command line parsed into struct attn_options.
 */
#include "cmd/attention.h"
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

/* ---- the options ----------------------------------------------------- */

enum { O_KV = 256, O_XK, O_XV, O_Q, O_K, O_V, O_MASK, O_MASK_BOOL, O_HEADS, O_KV_HEADS, O_SCALE,
       O_CAUSAL, O_WINDOW, O_SINKS, O_ALIBI, O_ALIBI_SLOPES, O_ROPE, O_ROPE_THETA, O_ROPE_DIM, O_POSITIONS,
       O_ROPE_COS, O_ROPE_SIN, O_ROPE_SCALING, O_SOFTCAP, O_PRECISION, O_LAYOUT, O_KV_LEN, O_DTYPE, O_THREADS,
       O_EXACT, O_CONFIG, O_LAYER, O_PREFIX,
       O_MAX_MEMORY, O_TOKENS, O_KV_TOKENS, O_COLOR, O_EXPLAIN, O_CELL, O_SEQUENCE,
       O_RANGE, O_HEAD, O_KT, O_GRAD_OUTPUT, O_COMPRESS, O_JSON_NONFINITE, O_PROGRESS, O_QUIET,
       O_ROWS, O_COLS, O_FORCE, O_POOL, O_NORM, O_NORM_EPS, O_NORM_OVER, O_Q_NORM, O_K_NORM, O_FULL,
       O_ONE /* + WQ … BO */,
       O_LATENT = O_ONE + N_WEIGHTS /* + LAT_Q_A_PROJ … LAT_KV_B_PROJ */,
       O_QK_ROPE = O_LATENT + N_LATENT, O_MLA_EPS, O_ABSORB, O_BIASES };

/* Every shared option, once: getopt_long's row and the group a help describes it in. */
#define R required_argument
static const struct {
	struct option o;
	unsigned group;
	const char *help; /* its lines in the help (a group of options: the first's), or NULL */
} rows[] = {
	{ { "x", R, NULL, 'x' }, OPT_INPUT,
	  "  -x, --x FILE          X, n x d_model: a 2-D array, or a JSON object holding it\n"
	  "                        under \"output\" or \"X\" (mha's own JSON output works);\n"
	  "                        3-D, batch x n x d_model, is a batch of sequences (so\n"
	  "                        are --kv, --xk, --xv, --q, --k and --v; a 2-D one\n"
	  "                        beside them is shared by every sequence)\n" },
	{ { "weights", R, NULL, 'w' }, OPT_INPUT,
	  "  -w, --weights FILE    JSON object (or .npz archive) with W_Q, W_K, W_V and\n"
	  "                        optionally W_O, b_Q, b_K, b_V, b_O (d_in x d_out,\n"
	  "                        applied as x*W; or one d_in x d_k matrix per head,\n"
	  "                        3-D); or a directory of one file per weight (W_Q.csv,\n"
	  "                        W_K.npy, ...); without -w, Q = K = V = X; a missing\n"
	  "                        W_Q, W_K or W_V (W_Q alone) is the identity, said in\n"
	  "                        a note\n" },
	{ { "wq", R, NULL, O_ONE + WQ }, OPT_INPUT,
	  "      --wq, --wk, --wv, --wo, --bq, --bk, --bv, --bo FILE\n"
	  "                        one weight from its own file, over what -w gave\n" },
	{ { "wk", R, NULL, O_ONE + WK }, OPT_INPUT, NULL },
	{ { "wv", R, NULL, O_ONE + WV }, OPT_INPUT, NULL },
	{ { "wo", R, NULL, O_ONE + WO }, OPT_INPUT, NULL },
	{ { "bq", R, NULL, O_ONE + BQ }, OPT_INPUT, NULL },
	{ { "bk", R, NULL, O_ONE + BK }, OPT_INPUT, NULL },
	{ { "bv", R, NULL, O_ONE + BV }, OPT_INPUT, NULL },
	{ { "bo", R, NULL, O_ONE + BO }, OPT_INPUT, NULL },
	{ { "layout", R, NULL, O_LAYOUT }, OPT_INPUT,
	  "      --layout L        mha (default): weights d_in x d_out; torch: PyTorch's\n"
	  "                        d_out x d_in, applied as x*W^T, and the names of\n"
	  "                        nn.MultiheadAttention's state_dict (in_proj_weight,\n"
	  "                        in_proj_bias, out_proj.weight, out_proj.bias, ...);\n"
	  "                        llama, gpt2, bert: that model family's safetensors\n"
	  "                        checkpoint (-w a .safetensors file, its index.json or\n"
	  "                        their folder; default: config.json's model_type, or\n"
	  "                        the tensors' names)\n" },
	{ { "layer", R, NULL, O_LAYER }, OPT_INPUT,
	  "      --layer N         the checkpoint's attention layer N (from 0)\n" },
	{ { "prefix", R, NULL, O_PREFIX }, OPT_INPUT,
	  "      --prefix P        the attention module whose tensor names start with P;\n"
	  "                        with --layer, layer N's module under P\n" },
	{ { "config", R, NULL, O_CONFIG }, OPT_INPUT,
	  "      --config FILE     Hugging Face's config.json (default: the one beside\n"
	  "                        the checkpoint): heads, key/value heads, rope, window\n"
	  "                        and causality, under the options given here\n" },
	{ { "kv", R, NULL, O_KV }, OPT_INPUT,
	  "      --kv FILE         keys and values from this matrix (cross-attention)\n" },
	{ { "xk", R, NULL, O_XK }, OPT_INPUT,
	  "      --xk FILE, --xv FILE\n"
	  "                        keys from one matrix and values from another (as\n"
	  "                        kdim and vdim apart); the two go together\n" },
	{ { "xv", R, NULL, O_XV }, OPT_INPUT, NULL },
	{ { "q", R, NULL, O_Q }, OPT_INPUT,
	  "      --q FILE, --k FILE, --v FILE\n"
	  "                        Q, K and V given directly: no projections (-w may\n"
	  "                        then hold only W_O and b_O)\n" },
	{ { "k", R, NULL, O_K }, OPT_INPUT, NULL },
	{ { "v", R, NULL, O_V }, OPT_INPUT, NULL },
	{ { "kt", R, NULL, O_KT }, OPT_INPUT,
	  "      --kt FILE         K transposed (d_k x n_kv), as tutorials print it,\n"
	  "                        instead of --k\n" },
	{ { "tokens", R, NULL, O_TOKENS }, OPT_INPUT,
	  "      --tokens LIST     labels for X's rows (the queries), e.g. \"The bear eats\"\n"
	  "                        (split at blanks, or at commas when there are any);\n"
	  "                        they title rows and columns of what is printed\n" },
	{ { "kv-tokens", R, NULL, O_KV_TOKENS }, OPT_INPUT,
	  "      --kv-tokens LIST  labels for the keys, with --kv (else the queries')\n" },
	{ { "mask", R, NULL, O_MASK }, OPT_INPUT,
	  "      --mask FILE       n_q x n_kv, heads x n_q x n_kv or batch x heads x n_q x\n"
	  "                        n_kv, batch, heads and n_q also 1, or n_kv alone (as\n"
	  "                        ONNX broadcasts a mask): booleans (true = may attend)\n"
	  "                        or numbers added to the scores (\"-inf\"); JSON, CSV,\n"
	  "                        .npy or a .safetensors file's one tensor\n" },
	{ { "mask-bool", R, NULL, O_MASK_BOOL }, OPT_INPUT,
	  "      --mask-bool M     what a boolean mask's true means: attend (default; SDPA,\n"
	  "                        ONNX) or block (nn.MultiheadAttention's attn_mask and\n"
	  "                        key_padding_mask)\n" },
	{ { "heads", R, NULL, O_HEADS }, OPT_ATTN,
	  "      --heads H         query heads (default 1); each takes an equal block of\n"
	  "                        Q's columns\n" },
	{ { "kv-heads", R, NULL, O_KV_HEADS }, OPT_ATTN,
	  "      --kv-heads G      key/value heads for grouped-query attention (G divides\n"
	  "                        H; query head i uses key/value head i/(H/G))\n" },
	{ { "scale", R, NULL, O_SCALE }, OPT_ATTN,
	  "      --scale S         dk: 1/sqrt(d_k) (default), dmodel: 1/sqrt(d_model),\n"
	  "                        seqlen: 1/sqrt(n_kv), none: 1, or a NUMBER multiplier\n" },
	{ { "causal", optional_argument, NULL, O_CAUSAL }, OPT_ATTN,
	  "      --causal[=ALIGN]  query i sees keys j <= i (top-left, the default), or\n"
	  "                        j <= i + n_kv - n_q (bottom-right, as in decoding), or\n"
	  "                        j <= i + N for a whole number N (after N cached keys)\n" },
	{ { "kv-len", R, NULL, O_KV_LEN }, OPT_ATTN,
	  "      --kv-len N        only the first N keys are valid (the rest is padding);\n"
	  "                        bottom-right then aligns with key N; N,N,...: one\n"
	  "                        length per sequence of a batch\n" },
	{ { "window", R, NULL, O_WINDOW }, OPT_ATTN,
	  "      --window L[,R]    sliding window: the query at position p (i, plus the\n"
	  "                        causal offset) sees keys p-L to p+R only; R absent or\n"
	  "                        -1: unbounded right; L = -1: unbounded left; none:\n"
	  "                        every key, where a model's family would slide\n" },
	{ { "sinks", R, NULL, O_SINKS }, OPT_ATTN,
	  "      --sinks FILE      attention sinks: one logit per query head, added to\n"
	  "                        each softmax's denominator as exp(sink - max); none:\n"
	  "                        no sinks, where a model's family would add its own\n" },
	{ { "alibi", no_argument, NULL, O_ALIBI }, OPT_ATTN,
	  "      --alibi           ALiBi: head h adds slope_h*(j - p) to its scores (p the\n"
	  "                        query's position, as for --window); Press et al.'s\n"
	  "                        slopes for H heads\n" },
	{ { "alibi-slopes", R, NULL, O_ALIBI_SLOPES }, OPT_ATTN,
	  "      --alibi-slopes FILE  ALiBi with these slopes, one per query head\n" },
	{ { "rope", R, NULL, O_ROPE }, OPT_ATTN,
	  "      --rope MODE       rotary embeddings: Q and K turn by position after the\n"
	  "                        projections; half pairs feature i with i+R/2 (Llama,\n"
	  "                        GPT-NeoX), interleaved 2i with 2i+1 (GPT-J, Cohere);\n"
	  "                        none: no rotation, where a model's family would turn\n"
	  "                        (SmolLM3's layers without position encoding)\n" },
	{ { "rope-theta", R, NULL, O_ROPE_THETA }, OPT_ATTN,
	  "      --rope-theta T    the base: pair i turns by position*T^(-2i/R)\n"
	  "                        (default 10000)\n" },
	{ { "rope-dim", R, NULL, O_ROPE_DIM }, OPT_ATTN,
	  "      --rope-dim R      the first R features of each head turn (even; default\n"
	  "                        d_k); the rest pass through\n" },
	{ { "positions", R, NULL, O_POSITIONS }, OPT_ATTN,
	  "      --positions FILE  whole numbers from 0: one list for queries and keys\n"
	  "                        alike, or JSON {\"q\": [..], \"k\": [..]}; default: keys\n"
	  "                        at j, queries at i plus the causal offset\n" },
	{ { "rope-cos", R, NULL, O_ROPE_COS }, OPT_ATTN,
	  "      --rope-cos FILE, --rope-sin FILE\n"
	  "                        the cos and sin tables as given (positions x R/2),\n"
	  "                        row p for position p (ONNX RotaryEmbedding)\n" },
	{ { "rope-sin", R, NULL, O_ROPE_SIN }, OPT_ATTN, NULL },
	{ { "rope-scaling", R, NULL, O_ROPE_SCALING }, OPT_ATTN,
	  "      --rope-scaling J  the frequencies scaled as transformers does for\n"
	  "                        config.json's rope_scaling, given as is: a JSON\n"
	  "                        object or a file holding one (linear, dynamic,\n"
	  "                        llama3, yarn, longrope); none: unscaled\n" },
	{ { "norm", R, NULL, O_NORM }, OPT_ATTN,
	  "      --norm KIND       normalise Q and K after the projections, before the\n"
	  "                        rotation: rms x/sqrt(mean(x^2) + eps)*w (Qwen3, OLMo\n"
	  "                        2), rms1p the same times 1 + w (Gemma 3), layer\n"
	  "                        (x - mean)/sqrt(variance + eps)*w (Cohere R+); none\n" },
	{ { "q-norm", R, NULL, O_Q_NORM }, OPT_ATTN,
	  "      --q-norm FILE, --k-norm FILE\n"
	  "                        the norm's weights w for Q and for K: one vector of\n"
	  "                        d_k for every head, or one per head (heads x d_k);\n"
	  "                        alone they mean --norm rms\n" },
	{ { "k-norm", R, NULL, O_K_NORM }, OPT_ATTN, NULL },
	{ { "norm-eps", R, NULL, O_NORM_EPS }, OPT_ATTN,
	  "      --norm-eps E      added to the mean square (variance); default 1e-6\n" },
	{ { "norm-over", R, NULL, O_NORM_OVER }, OPT_ATTN,
	  "      --norm-over WHAT  head: each head's d_k features (the default); all: the\n"
	  "                        whole row of Q and of K (OLMo 2)\n" },
	{ { "kv-b-proj", R, NULL, O_LATENT + LAT_KV_B_PROJ }, OPT_ATTN,
	  "      --kv-a-proj-with-mqa FILE, --kv-b-proj FILE, --q-a-proj FILE,\n"
	  "      --kv-a-layernorm FILE, --q-a-layernorm FILE, --q-b-proj FILE\n"
	  "                        multi-head latent attention (DeepSeek's MLA), each\n"
	  "                        tensor d_in x d_out: [c_kv, k_pe] = X*kv_a_proj_with_mqa,\n"
	  "                        each head's [k_nope, v] = RMSNorm(c_kv)*kv_b_proj, the\n"
	  "                        queries X*W_Q or RMSNorm(X*q_a_proj)*W_Q (--q-b-proj\n"
	  "                        is --wq); the norms' weights default to ones\n" },
	{ { "kv-a-proj-with-mqa", R, NULL, O_LATENT + LAT_KV_A_PROJ }, OPT_ATTN, NULL },
	{ { "q-a-proj", R, NULL, O_LATENT + LAT_Q_A_PROJ }, OPT_ATTN, NULL },
	{ { "kv-a-layernorm", R, NULL, O_LATENT + LAT_KV_A_NORM }, OPT_ATTN, NULL },
	{ { "q-a-layernorm", R, NULL, O_LATENT + LAT_Q_A_NORM }, OPT_ATTN, NULL },
	{ { "q-b-proj", R, NULL, O_ONE + WQ }, OPT_ATTN, NULL },
	{ { "qk-rope-head-dim", R, NULL, O_QK_ROPE }, OPT_ATTN,
	  "      --qk-rope-head-dim R  MLA: the last R features of each head's query\n"
	  "                        and key turn by position (--rope), the key's shared\n"
	  "                        by every head\n" },
	{ { "mla-eps", R, NULL, O_MLA_EPS }, OPT_ATTN,
	  "      --mla-eps E       the latents' RMSNorm eps (default 1e-6)\n" },
	{ { "absorb", no_argument, NULL, O_ABSORB }, OPT_ATTN,
	  "      --absorb          MLA in the absorbed form inference engines run: the\n"
	  "                        same numbers, attention over the latent\n" },
	{ { "softcap", R, NULL, O_SOFTCAP }, OPT_ATTN,
	  "      --softcap C       scores become C*tanh(scores/C) before the mask; none:\n"
	  "                        no cap, where a model's family would cap\n" },
	{ { "biases", R, NULL, O_BIASES }, OPT_ATTN,
	  "      --biases LIST     the biases a checkpoint's attention adds, said: some\n"
	  "                        of q,k,v,o, or none; its tensors must be those\n" },
	{ { "dtype", R, NULL, O_DTYPE }, OPT_DTYPE, NULL },
	{ { "threads", R, NULL, O_THREADS }, OPT_RUN, NULL },
	{ { "exact", no_argument, NULL, O_EXACT }, OPT_EXACT, NULL },
	{ { "max-memory", R, NULL, O_MAX_MEMORY }, OPT_RUN, NULL },
	{ { "explain", no_argument, NULL, O_EXPLAIN }, OPT_EXPLAIN, NULL },
	{ { "cell", R, NULL, O_CELL }, OPT_EXPLAIN, NULL },
	{ { "sequence", R, NULL, O_SEQUENCE }, OPT_RUN, NULL },
	{ { "color", optional_argument, NULL, O_COLOR }, OPT_PICTURE, NULL },
	{ { "colour", optional_argument, NULL, O_COLOR }, OPT_ALIAS, NULL },
	{ { "print", R, NULL, 'p' }, OPT_PRINT, NULL },
	{ { "format", R, NULL, 'f' }, OPT_RUN, NULL },
	{ { "precision", R, NULL, O_PRECISION }, OPT_PRINT, NULL },
	{ { "full", no_argument, NULL, O_FULL }, OPT_PRINT, NULL },
	{ { "output", R, NULL, 'o' }, OPT_PRINT, NULL },
	{ { "help", no_argument, NULL, 'h' }, OPT_RUN, NULL },
	{ { "range", R, NULL, O_RANGE }, OPT_PICTURE, NULL },
	{ { "head", R, NULL, O_HEAD }, OPT_PICTURE, NULL },
	{ { "compress", no_argument, NULL, O_COMPRESS }, OPT_NPZ, NULL },
	{ { "json-nonfinite", R, NULL, O_JSON_NONFINITE }, OPT_JSON, NULL },
	{ { "progress", no_argument, NULL, O_PROGRESS }, OPT_RUN, NULL },
	{ { "rows", R, NULL, O_ROWS }, OPT_PRINT, NULL },
	{ { "cols", R, NULL, O_COLS }, OPT_PRINT, NULL },
	{ { "force", no_argument, NULL, O_FORCE }, OPT_PRINT, NULL },
	{ { "pool", R, NULL, O_POOL }, OPT_PICTURE, NULL },
	{ { "quiet", no_argument, NULL, 'q' }, OPT_RUN, NULL },
	/* a command that does not take it refuses it, naming the one that does */
	{ { "grad-output", R, NULL, O_GRAD_OUTPUT }, OPT_GRAD, NULL },
};
#undef R

#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

/* The sections of the help every command prints, made from the rows above. */
static const struct { unsigned group; const char *head; } sections[] = {
	{ OPT_INPUT, "Inputs (JSON, CSV or NumPy .npy, told apart by name and content; '-' reads\n"
	  "standard input, for one of them; a NumPy .npz gives the member named as the\n"
	  "JSON object's key, or its only member):\n" },
	{ OPT_ATTN, "Attention:\n" },
};

/* The steps' names from their table, wrapped at 80 columns, the lines
 * after the first at the help's second column (col: where the first starts) */
static void help_steps(FILE *fp, size_t col)
{
	char names[1024], *save = NULL;

	step_names(names, sizeof(names));
	strncat(names, "; or all", sizeof(names) - strlen(names) - 1);
	for (char *w = strtok_r(names, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		if (col + 1 + strlen(w) > 79) {
			fputs("\n                        ", fp);
			col = 24;
		} else if (col > 24) {
			fputc(' ', fp);
			col++;
		}
		fputs(w, fp);
		col += strlen(w);
	}
}

int attn_help(FILE *fp, const struct attn_command *cmd)
{
	size_t col = 0;

	for (const char *p = cmd->usage; *p; p++) {
		if (*p == ATTN_USAGE_STEPS[0]) {
			help_steps(fp, col);
			continue;
		}
		if (*p != ATTN_USAGE_SHARED[0]) {
			fputc(*p, fp);
			col = *p == '\n' ? 0 : col + 1;
			continue;
		}
		for (size_t s = 0; s < sizeof(sections) / sizeof(sections[0]); s++) {
			fputs(sections[s].head, fp);
			for (size_t i = 0; i < N_ROWS; i++)
				if (rows[i].group == sections[s].group && rows[i].help)
					fputs(rows[i].help, fp);
			fputc('\n', fp);
		}
	}
	return ferror(fp) ? -1 : 0;
}

/* the word after "--name " in help (FILE, N, LIST...), into arg; "" none */
static void placeholder(const char *help, const char *name, char *arg, size_t size)
{
	const size_t n = strlen(name);

	arg[0] = '\0';
	for (const char *p = strstr(help, "--"); p; p = strstr(p + 2, "--")) {
		const char *q = p + 2 + n;
		size_t k = 0;

		if (strncmp(p + 2, name, n) || (*q != ' ' && *q != '=' && *q != ',' && *q != '['))
			continue;
		/* "--wq, --wk, --wv FILE": the list's word */
		while (q[0] == ',' && q[1] == ' ' && q[2] == '-' && q[3] == '-')
			for (q += 4; (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-';)
				q++;
		if (q[0] == '[' && q[1] == '=')
			q++; /* "--causal[=ALIGN]": the word after the '=' */
		else if (*q != ' ' && *q != '=')
			continue;
		else if (*q == '=' || q[1] == '[')
			q++;
		while (q[1 + k] >= 'A' && q[1 + k] <= 'Z' && k + 1 < size)
			k++;
		if (k) {
			memcpy(arg, q + 1, k);
			arg[k] = '\0';
			return;
		}
	}
}

int attn_list_options(FILE *fp, const char *command, const struct option *opts, const char *help)
{
	fprintf(fp, "{\"command\": \"%s\", \"options\": [", command);
	for (size_t i = 0; opts[i].name; i++) {
		char arg[32];

		placeholder(help, opts[i].name, arg, sizeof(arg));
		fprintf(fp, "%s\n  {\"name\": \"%s\", \"short\": ", i ? "," : "", opts[i].name);
		if (opts[i].val > 0 && opts[i].val < 128)
			fprintf(fp, "\"%c\"", opts[i].val);
		else
			fputs("null", fp);
		fprintf(fp, ", \"value\": \"%s\", \"arg\": ", opts[i].has_arg == no_argument ? "none"
			: opts[i].has_arg == required_argument ? "required" : "optional");
		if (arg[0])
			fprintf(fp, "\"%s\"", arg);
		else
			fputs("null", fp);
		fputc('}', fp);
	}
	fputs("\n]}\n", fp);
	return ferror(fp) ? -1 : 0;
}

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

/* ---- the layer's settings ---------------------------------------------- */

/* the options that set what a layer computes, which 'mha model' takes too */
static int layer_setting(int c)
{
	switch (c) {
	case O_HEADS: case O_KV_HEADS: case O_SCALE: case O_CAUSAL: case O_WINDOW: case O_SINKS:
	case O_ROPE: case O_ROPE_THETA: case O_ROPE_DIM: case O_ROPE_SCALING: case O_NORM:
	case O_NORM_EPS: case O_NORM_OVER: case O_SOFTCAP: case O_BIASES: case O_QK_ROPE:
	case O_MLA_EPS:
		return 1;
	default:
		return 0;
	}
}

size_t attn_setting_options(struct option *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < N_ROWS && n < cap; i++)
		if (layer_setting(rows[i].o.val))
			out[n++] = rows[i].o;
	return n;
}

int attn_setting_help(FILE *fp)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (layer_setting(rows[i].o.val) && rows[i].help)
			fputs(rows[i].help, fp);
	return ferror(fp) ? -1 : 0;
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
	/* --list-options alone: the options the command takes (those of the groups
	 * its help describes, and its own), as JSON, for programs (the Python package) */
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--list-options") || (i == 2 && !strcmp(argv[1], "--list-options"))) {
			usage_error(hint, "--list-options prints the options the command takes: give "
				    "it alone");
			return -1;
		}
	if (argc == 2 && !strcmp(argv[1], "--list-options")) {
		struct option takes[N_ROWS + ATTN_MAX_EXTRA + 1];
		char *help = NULL;
		size_t size = 0, k = 0;
		FILE *fp = open_memstream(&help, &size);
		int rc = !fp || attn_help(fp, cmd) || fclose(fp) ? -1 : 0;

		for (size_t i = 0; i < N_ROWS; i++)
			if (rows[i].group & (cmd->help_groups | cmd->takes) & ~(unsigned)OPT_ALIAS)
				takes[k++] = rows[i].o;
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
		if (layer_setting(c)) {
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

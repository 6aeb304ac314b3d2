/*
 * table.c: the attention commands' option table (table.h), and what is
 * made from it: the help's shared sections, --list-options, the layer
 * settings' rows for 'mha model'.  Parsing by it is options.c's.
 */
#include "cmd/table.h"
#include "cmd/attention.h"

#include "api/settings.h"
#include "base/progress.h"
#include "run/steps.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* how an option is taken (struct row_take), by where its value goes */
#define AT(field) offsetof(struct attn_options, field)
#define SET(field, v) (&(const struct row_take){ ROW_SET, AT(field), 0, v, NULL })
#define STRING(field) (&(const struct row_take){ ROW_STRING, AT(field), 0, 0, NULL })
#define COUNT(field) (&(const struct row_take){ ROW_COUNT, AT(field), 0, 0, NULL })
/* given: AT() of the int set to 1 when given, or 0 */
#define CHOICE(field, given, absent, ...) (&(const struct row_take){ ROW_CHOICE, AT(field), \
	given, absent, (const struct row_choice[]){ __VA_ARGS__, { NULL, 0, 0 } } })

/* Every shared option, once: getopt_long's row and the group a help describes it in. */
#define R required_argument
const struct option_row attn_rows[] = {
	{ { "x", R, NULL, 'x' }, OPT_INPUT,
	  "  -x, --x FILE          X, n x d_model: a 2-D array, or a JSON object holding it\n"
	  "                        under \"output\" or \"X\" (mha's own JSON output works);\n"
	  "                        3-D, batch x n x d_model, is a batch of sequences (so\n"
	  "                        are --kv, --xk, --xv, --q, --k and --v; a 2-D one\n"
	  "                        beside them is shared by every sequence)\n", NULL },
	{ { "weights", R, NULL, 'w' }, OPT_INPUT,
	  "  -w, --weights FILE    JSON object (or .npz archive) with W_Q, W_K, W_V and\n"
	  "                        optionally W_O, b_Q, b_K, b_V, b_O (d_in x d_out,\n"
	  "                        applied as x*W; or one d_in x d_k matrix per head,\n"
	  "                        3-D); or a directory of one file per weight (W_Q.csv,\n"
	  "                        W_K.npy, ...); without -w, Q = K = V = X; a missing\n"
	  "                        W_Q, W_K or W_V (W_Q alone) is the identity, said in\n"
	  "                        a note\n", NULL },
	{ { "wq", R, NULL, O_ONE + WQ }, OPT_INPUT,
	  "      --wq, --wk, --wv, --wo, --bq, --bk, --bv, --bo FILE\n"
	  "                        one weight from its own file, over what -w gave\n", NULL },
	{ { "wk", R, NULL, O_ONE + WK }, OPT_INPUT, NULL, NULL },
	{ { "wv", R, NULL, O_ONE + WV }, OPT_INPUT, NULL, NULL },
	{ { "wo", R, NULL, O_ONE + WO }, OPT_INPUT, NULL, NULL },
	{ { "bq", R, NULL, O_ONE + BQ }, OPT_INPUT, NULL, NULL },
	{ { "bk", R, NULL, O_ONE + BK }, OPT_INPUT, NULL, NULL },
	{ { "bv", R, NULL, O_ONE + BV }, OPT_INPUT, NULL, NULL },
	{ { "bo", R, NULL, O_ONE + BO }, OPT_INPUT, NULL, NULL },
	{ { "layout", R, NULL, O_LAYOUT }, OPT_INPUT,
	  "      --layout L        mha (default): weights d_in x d_out; torch: PyTorch's\n"
	  "                        d_out x d_in, applied as x*W^T, and the names of\n"
	  "                        nn.MultiheadAttention's state_dict (in_proj_weight,\n"
	  "                        in_proj_bias, out_proj.weight, out_proj.bias, ...);\n"
	  "                        llama, gpt2, bert: that model family's safetensors\n"
	  "                        checkpoint (-w a .safetensors file, its index.json or\n"
	  "                        their folder; default: config.json's model_type, or\n"
	  "                        the tensors' names)\n", NULL },
	{ { "layer", R, NULL, O_LAYER }, OPT_INPUT,
	  "      --layer N         the checkpoint's attention layer N (from 0)\n", NULL },
	{ { "prefix", R, NULL, O_PREFIX }, OPT_INPUT,
	  "      --prefix P        the attention module whose tensor names start with P;\n"
	  "                        with --layer, layer N's module under P\n", NULL },
	{ { "config", R, NULL, O_CONFIG }, OPT_INPUT,
	  "      --config FILE     Hugging Face's config.json (default: the one beside\n"
	  "                        the checkpoint): heads, key/value heads, rope, window\n"
	  "                        and causality, under the options given here\n", NULL },
	{ { "kv", R, NULL, O_KV }, OPT_INPUT,
	  "      --kv FILE         keys and values from this matrix (cross-attention)\n", NULL },
	{ { "xk", R, NULL, O_XK }, OPT_INPUT,
	  "      --xk FILE, --xv FILE\n"
	  "                        keys from one matrix and values from another (as\n"
	  "                        kdim and vdim apart); the two go together\n", NULL },
	{ { "xv", R, NULL, O_XV }, OPT_INPUT, NULL, NULL },
	{ { "q", R, NULL, O_Q }, OPT_INPUT,
	  "      --q FILE, --k FILE, --v FILE\n"
	  "                        Q, K and V given directly: no projections (-w may\n"
	  "                        then hold only W_O and b_O)\n", NULL },
	{ { "k", R, NULL, O_K }, OPT_INPUT, NULL, NULL },
	{ { "v", R, NULL, O_V }, OPT_INPUT, NULL, NULL },
	{ { "kt", R, NULL, O_KT }, OPT_INPUT,
	  "      --kt FILE         K transposed (d_k x n_kv), as tutorials print it,\n"
	  "                        instead of --k\n", NULL },
	{ { "tokens", R, NULL, O_TOKENS }, OPT_INPUT,
	  "      --tokens LIST     labels for X's rows (the queries), e.g. \"The bear eats\"\n"
	  "                        (split at blanks, or at commas when there are any);\n"
	  "                        they title rows and columns of what is printed\n", NULL },
	{ { "kv-tokens", R, NULL, O_KV_TOKENS }, OPT_INPUT,
	  "      --kv-tokens LIST  labels for the keys, with --kv (else the queries')\n", NULL },
	{ { "mask", R, NULL, O_MASK }, OPT_INPUT,
	  "      --mask FILE       n_q x n_kv, heads x n_q x n_kv or batch x heads x n_q x\n"
	  "                        n_kv, batch, heads and n_q also 1, or n_kv alone (as\n"
	  "                        ONNX broadcasts a mask): booleans (true = may attend)\n"
	  "                        or numbers added to the scores (\"-inf\"); JSON, CSV,\n"
	  "                        .npy or a .safetensors file's one tensor\n", NULL },
	{ { "mask-bool", R, NULL, O_MASK_BOOL }, OPT_INPUT,
	  "      --mask-bool M     what a boolean mask's true means: attend (default; SDPA,\n"
	  "                        ONNX) or block (nn.MultiheadAttention's attn_mask and\n"
	  "                        key_padding_mask)\n", NULL },
	{ { "heads", R, NULL, O_HEADS }, OPT_ATTN,
	  "      --heads H         query heads (default 1); each takes an equal block of\n"
	  "                        Q's columns\n", NULL },
	{ { "kv-heads", R, NULL, O_KV_HEADS }, OPT_ATTN,
	  "      --kv-heads G      key/value heads for grouped-query attention (G divides\n"
	  "                        H; query head i uses key/value head i/(H/G))\n", NULL },
	{ { "scale", R, NULL, O_SCALE }, OPT_ATTN,
	  "      --scale S         dk: 1/sqrt(d_k) (default), dmodel: 1/sqrt(d_model),\n"
	  "                        seqlen: 1/sqrt(n_kv), none: 1, or a NUMBER multiplier\n", NULL },
	{ { "causal", optional_argument, NULL, O_CAUSAL }, OPT_ATTN,
	  "      --causal[=ALIGN]  query i sees keys j <= i (top-left, the default), or\n"
	  "                        j <= i + n_kv - n_q (bottom-right, as in decoding), or\n"
	  "                        j <= i + N for a whole number N (after N cached keys)\n", NULL },
	{ { "kv-len", R, NULL, O_KV_LEN }, OPT_ATTN,
	  "      --kv-len N        only the first N keys are valid (the rest is padding);\n"
	  "                        bottom-right then aligns with key N; N,N,...: one\n"
	  "                        length per sequence of a batch\n", NULL },
	{ { "window", R, NULL, O_WINDOW }, OPT_ATTN,
	  "      --window L[,R]    sliding window: the query at position p (i, plus the\n"
	  "                        causal offset) sees keys p-L to p+R only; R absent or\n"
	  "                        -1: unbounded right; L = -1: unbounded left; none:\n"
	  "                        every key, where a model's family would slide\n", NULL },
	{ { "sinks", R, NULL, O_SINKS }, OPT_ATTN,
	  "      --sinks FILE      attention sinks: one logit per query head, added to\n"
	  "                        each softmax's denominator as exp(sink - max); none:\n"
	  "                        no sinks, where a model's family would add its own\n", NULL },
	{ { "alibi", no_argument, NULL, O_ALIBI }, OPT_ATTN,
	  "      --alibi           ALiBi: head h adds slope_h*(j - p) to its scores (p the\n"
	  "                        query's position, as for --window); Press et al.'s\n"
	  "                        slopes for H heads\n", NULL },
	{ { "alibi-slopes", R, NULL, O_ALIBI_SLOPES }, OPT_ATTN,
	  "      --alibi-slopes FILE  ALiBi with these slopes, one per query head\n", NULL },
	{ { "rope", R, NULL, O_ROPE }, OPT_ATTN,
	  "      --rope MODE       rotary embeddings: Q and K turn by position after the\n"
	  "                        projections; half pairs feature i with i+R/2 (Llama,\n"
	  "                        GPT-NeoX), interleaved 2i with 2i+1 (GPT-J, Cohere);\n"
	  "                        none: no rotation, where a model's family would turn\n"
	  "                        (SmolLM3's layers without position encoding)\n", NULL },
	{ { "rope-theta", R, NULL, O_ROPE_THETA }, OPT_ATTN,
	  "      --rope-theta T    the base: pair i turns by position*T^(-2i/R)\n"
	  "                        (default 10000)\n", NULL },
	{ { "rope-dim", R, NULL, O_ROPE_DIM }, OPT_ATTN,
	  "      --rope-dim R      the first R features of each head turn (even; default\n"
	  "                        d_k); the rest pass through\n", NULL },
	{ { "positions", R, NULL, O_POSITIONS }, OPT_ATTN,
	  "      --positions FILE  whole numbers from 0: one list for queries and keys\n"
	  "                        alike, or JSON {\"q\": [..], \"k\": [..]}; default: keys\n"
	  "                        at j, queries at i plus the causal offset\n", NULL },
	{ { "rope-cos", R, NULL, O_ROPE_COS }, OPT_ATTN,
	  "      --rope-cos FILE, --rope-sin FILE\n"
	  "                        the cos and sin tables as given (positions x R/2),\n"
	  "                        row p for position p (ONNX RotaryEmbedding)\n", NULL },
	{ { "rope-sin", R, NULL, O_ROPE_SIN }, OPT_ATTN, NULL, NULL },
	{ { "rope-scaling", R, NULL, O_ROPE_SCALING }, OPT_ATTN,
	  "      --rope-scaling J  the frequencies scaled as transformers does for\n"
	  "                        config.json's rope_scaling, given as is: a JSON\n"
	  "                        object or a file holding one (linear, dynamic,\n"
	  "                        llama3, yarn, longrope); none: unscaled\n", NULL },
	{ { "norm", R, NULL, O_NORM }, OPT_ATTN,
	  "      --norm KIND       normalise Q and K after the projections, before the\n"
	  "                        rotation: rms x/sqrt(mean(x^2) + eps)*w (Qwen3, OLMo\n"
	  "                        2), rms1p the same times 1 + w (Gemma 3), layer\n"
	  "                        (x - mean)/sqrt(variance + eps)*w (Cohere R+); none\n", NULL },
	{ { "q-norm", R, NULL, O_Q_NORM }, OPT_ATTN,
	  "      --q-norm FILE, --k-norm FILE\n"
	  "                        the norm's weights w for Q and for K: one vector of\n"
	  "                        d_k for every head, or one per head (heads x d_k);\n"
	  "                        alone they mean --norm rms\n", NULL },
	{ { "k-norm", R, NULL, O_K_NORM }, OPT_ATTN, NULL, NULL },
	{ { "norm-eps", R, NULL, O_NORM_EPS }, OPT_ATTN,
	  "      --norm-eps E      added to the mean square (variance); default 1e-6\n", NULL },
	{ { "norm-over", R, NULL, O_NORM_OVER }, OPT_ATTN,
	  "      --norm-over WHAT  head: each head's d_k features (the default); all: the\n"
	  "                        whole row of Q and of K (OLMo 2)\n", NULL },
	{ { "kv-b-proj", R, NULL, O_LATENT + LAT_KV_B_PROJ }, OPT_ATTN,
	  "      --kv-a-proj-with-mqa FILE, --kv-b-proj FILE, --q-a-proj FILE,\n"
	  "      --kv-a-layernorm FILE, --q-a-layernorm FILE, --q-b-proj FILE\n"
	  "                        multi-head latent attention (DeepSeek's MLA), each\n"
	  "                        tensor d_in x d_out: [c_kv, k_pe] = X*kv_a_proj_with_mqa,\n"
	  "                        each head's [k_nope, v] = RMSNorm(c_kv)*kv_b_proj, the\n"
	  "                        queries X*W_Q or RMSNorm(X*q_a_proj)*W_Q (--q-b-proj\n"
	  "                        is --wq); the norms' weights default to ones\n", NULL },
	{ { "kv-a-proj-with-mqa", R, NULL, O_LATENT + LAT_KV_A_PROJ }, OPT_ATTN, NULL, NULL },
	{ { "q-a-proj", R, NULL, O_LATENT + LAT_Q_A_PROJ }, OPT_ATTN, NULL, NULL },
	{ { "kv-a-layernorm", R, NULL, O_LATENT + LAT_KV_A_NORM }, OPT_ATTN, NULL, NULL },
	{ { "q-a-layernorm", R, NULL, O_LATENT + LAT_Q_A_NORM }, OPT_ATTN, NULL, NULL },
	{ { "q-b-proj", R, NULL, O_ONE + WQ }, OPT_ATTN, NULL, NULL },
	{ { "qk-rope-head-dim", R, NULL, O_QK_ROPE }, OPT_ATTN,
	  "      --qk-rope-head-dim R  MLA: the last R features of each head's query\n"
	  "                        and key turn by position (--rope), the key's shared\n"
	  "                        by every head\n", NULL },
	{ { "mla-eps", R, NULL, O_MLA_EPS }, OPT_ATTN,
	  "      --mla-eps E       the latents' RMSNorm eps (default 1e-6)\n", NULL },
	{ { "absorb", no_argument, NULL, O_ABSORB }, OPT_ATTN,
	  "      --absorb          MLA in the absorbed form inference engines run: the\n"
	  "                        same numbers, attention over the latent\n", NULL },
	{ { "softcap", R, NULL, O_SOFTCAP }, OPT_ATTN,
	  "      --softcap C       scores become C*tanh(scores/C) before the mask; none:\n"
	  "                        no cap, where a model's family would cap\n", NULL },
	{ { "biases", R, NULL, O_BIASES }, OPT_ATTN,
	  "      --biases LIST     the biases a checkpoint's attention adds, said: some\n"
	  "                        of q,k,v,o, or none; its tensors must be those\n", NULL },
	{ { "dtype", R, NULL, O_DTYPE }, OPT_DTYPE, NULL,
	  CHOICE(dtype, AT(dtype_given), 0, { "f64", 0, 0 }, { "f32", 1, 0 }, { "bf16", 2, 0 },
		 { "fp16", 3, 0 }, { "float64", 0, 1 }, { "float32", 1, 1 }, { "bfloat16", 2, 1 },
		 { "float16", 3, 1 }) },
	{ { "threads", R, NULL, O_THREADS }, OPT_RUN, NULL, NULL },
	{ { "exact", no_argument, NULL, O_EXACT }, OPT_EXACT, NULL, NULL },
	{ { "max-memory", R, NULL, O_MAX_MEMORY }, OPT_RUN, NULL, NULL },
	{ { "explain", no_argument, NULL, O_EXPLAIN }, OPT_EXPLAIN, NULL, SET(explain, 1) },
	{ { "cell", R, NULL, O_CELL }, OPT_EXPLAIN, NULL, STRING(spec.cell) },
	{ { "sequence", R, NULL, O_SEQUENCE }, OPT_RUN, NULL, COUNT(sequence) },
	{ { "color", optional_argument, NULL, O_COLOR }, OPT_PICTURE, NULL,
	  CHOICE(emit.color, AT(color_given), 1, { "auto", 0, 0 }, { "always", 1, 0 }, { "never", -1, 0 }) },
	{ { "colour", optional_argument, NULL, O_COLOR }, OPT_ALIAS, NULL, NULL },
	{ { "print", R, NULL, 'p' }, OPT_PRINT, NULL, NULL },
	{ { "format", R, NULL, 'f' }, OPT_RUN, NULL, NULL },
	{ { "precision", R, NULL, O_PRECISION }, OPT_PRINT, NULL, NULL },
	{ { "full", no_argument, NULL, O_FULL }, OPT_PRINT, NULL, SET(emit.full, 1) },
	{ { "output", R, NULL, 'o' }, OPT_PRINT, NULL, STRING(emit.output) },
	{ { "help", no_argument, NULL, 'h' }, OPT_RUN, NULL, NULL },
	{ { "range", R, NULL, O_RANGE }, OPT_PICTURE, NULL, NULL },
	{ { "head", R, NULL, O_HEAD }, OPT_PICTURE, NULL, COUNT(emit.head) },
	{ { "compress", no_argument, NULL, O_COMPRESS }, OPT_NPZ, NULL, SET(emit.compress, 1) },
	{ { "json-nonfinite", R, NULL, O_JSON_NONFINITE }, OPT_JSON, NULL,
	  CHOICE(emit.bare_nonfinite, 0, 0, { "strings", 0, 0 }, { "python", 1, 0 }) },
	{ { "progress", no_argument, NULL, O_PROGRESS }, OPT_RUN, NULL, SET(progress, PROGRESS_ON) },
	{ { "rows", R, NULL, O_ROWS }, OPT_PRINT, NULL, STRING(spec.rows) },
	{ { "cols", R, NULL, O_COLS }, OPT_PRINT, NULL, STRING(spec.cols) },
	{ { "force", no_argument, NULL, O_FORCE }, OPT_PRINT, NULL, SET(emit.fit.force, 1) },
	{ { "pool", R, NULL, O_POOL }, OPT_PICTURE, NULL, NULL },
	{ { "quiet", no_argument, NULL, 'q' }, OPT_RUN, NULL, SET(progress, PROGRESS_OFF) },
	/* a command that does not take it refuses it, naming the one that does */
	{ { "grad-output", R, NULL, O_GRAD_OUTPUT }, OPT_GRAD, NULL, NULL },
};
#undef R


const size_t attn_n_rows = sizeof(attn_rows) / sizeof(attn_rows[0]);
_Static_assert(sizeof(attn_rows) / sizeof(attn_rows[0]) <= ATTN_MAX_ROWS,
	       "more shared options than ATTN_MAX_ROWS");

#define N_ROWS (sizeof(attn_rows) / sizeof(attn_rows[0]))
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
				if (attn_rows[i].group == sections[s].group && attn_rows[i].help)
					fputs(attn_rows[i].help, fp);
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
		table[i] = attn_rows[i].o;
		group[i] = attn_rows[i].group;
	}
	if (groups)
		*groups = group;
	return table;
}

/* ---- the layer's settings ---------------------------------------------- */

const struct option_row *attn_row(int c)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (attn_rows[i].o.val == c)
			return &attn_rows[i];
	return NULL;
}

const char *attn_row_name(int c)
{
	const struct option_row *r = attn_row(c);

	return r ? r->o.name : NULL;
}

/* the options that set what a layer computes, which 'mha model' takes too
 * (the engine's settings, engine/load/settings.h) */
int attn_is_setting(int c)
{
	const char *name = attn_row_name(c);

	return name && spec_is_setting(name);
}

size_t attn_setting_options(struct option *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < N_ROWS && n < cap; i++)
		if (attn_is_setting(attn_rows[i].o.val))
			out[n++] = attn_rows[i].o;
	return n;
}

int attn_setting_help(FILE *fp)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (attn_is_setting(attn_rows[i].o.val) && attn_rows[i].help)
			fputs(attn_rows[i].help, fp);
	return ferror(fp) ? -1 : 0;
}

int attn_list_options_asked(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--list-options"))
			return argc == 2 ? 1 : -1;
	return 0;
}

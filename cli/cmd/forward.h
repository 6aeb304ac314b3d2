/*
 * forward.h: what 'mha forward' shares with 'mha heatmap' (cmd/heatmap.c),
 * which is forward with a heatmap as its default format: the command run
 * as either of them, and the parts of the help both print.
 */
#ifndef MHA_CLI_FORWARD_H
#define MHA_CLI_FORWARD_H

#include <stddef.h>

#include "write/emit.h"
#include "load/problem.h"

struct option;
struct forward_options;

/* A command's own options beside forward's take getopt values from here on. */
#define FORWARD_EXTRA_BASE 1000
#define FORWARD_MAX_EXTRA 8

/* Which command 'mha forward' runs as. */
struct forward_command {
	const char *hint;  /* usage errors end "Try 'mha HINT --help'" */
	const char *usage; /* --help */
	int draw;          /* without --format: a heatmap (svg for -o FILE.svg) */
	int backward;      /* 'mha backward': --grad-output, its steps (cmd/backward.c) */
	/* options of the command's own (mha compare's), NULL-terminated, their
	 * values from FORWARD_EXTRA_BASE; extra_opt takes each: 0, or -1 said */
	const struct option *extra;
	int (*extra_opt)(struct forward_options *o, int c, const char *arg);
};

/* What forward's command line says. */
struct forward_options {
	const struct forward_command *cmd;
	struct problem_spec spec; /* what to read */
	struct emit emit;         /* where to write, how */
	unsigned print;           /* STEP_BIT()s of the steps asked for */
	int print_all;
	int format_given;
	int print_given;
	int f32;  /* --dtype f32 */
	size_t max_memory; /* bytes; SIZE_MAX: no limit */
	int explain;    /* --explain */
	size_t sequence; /* --sequence N: a batch's sequence N alone (1-based); 0: all */
	size_t *kv_lens; /* --kv-len 5,3,4: from malloc, or NULL */
	int mask_bool;   /* --mask-bool given */
	int range_given; /* --range given */
	const char *print_arg; /* mha backward: --print as given (its own steps) */
	int color_given; /* --color given */
	int precision_given; /* --precision given */
	void *extra;     /* the command's own options (extra_opt's) */
};

/* The command line into o (o->extra set by the caller is kept): 0, 1 after
 * --help (printed), -1 a usage error (said).  free(o->kv_lens) after. */
int forward_parse(int argc, char **argv, struct forward_options *o,
		  const struct forward_command *c);
/* Which options go together, known before reading a file: 0, or -1 said. */
int forward_check_options(struct forward_options *o);

/* The command on argv (argv[0] its name): an exit status. */
int forward_run(int argc, char **argv, const struct forward_command *c);
/* Its command line alone, reading and writing no file: 0 fine, 1 after
 * --help, 2 a usage error. */
int forward_check(int argc, char **argv, const struct forward_command *c);

/* What 'mha backward' takes from forward's command line (cmd/backward.c). */
struct emit;
struct problem;
struct problem_spec;
struct backward_request {
	const char *hint;
	const struct emit *emit;
	const char *print;   /* --print as given, or NULL */
	int explain;         /* --explain (--cell: the problem's cell) */
	int has_cell;
	size_t sequence;     /* --sequence N, or 0 */
	unsigned wanted;     /* set by backward_check: the steps' stages */
	int print_all;
	unsigned long long steps; /* set by backward_check: the steps asked for */
	int f32;             /* --dtype f32: the gradients alone, as floats */
};
/* --print's steps and how the options combine: 0, or -1 said (a usage error). */
int backward_check(struct backward_request *r, const struct problem_spec *s);
/* The run on a loaded problem: an exit status. */
int backward_run(struct problem *p, struct backward_request *r);
/* Could 'mha backward' write a file called name into a directory? (meta.json too) */
int backward_may_write(const char *name, void *ctx);

/* The help's sections both commands print. */
#define FORWARD_USAGE_INPUTS \
	"Inputs (JSON, CSV or NumPy .npy, told apart by name and content; '-' reads\n" \
	"standard input, for one of them; a NumPy .npz gives the member named as the\n" \
	"JSON object's key, or its only member):\n" \
	"  -x, --x FILE          X, n x d_model: a 2-D array, or a JSON object holding it\n" \
	"                        under \"output\" or \"X\" (mha's own JSON output works);\n" \
	"                        3-D, batch x n x d_model, is a batch of sequences (so\n" \
	"                        are --kv, --xk, --xv, --q, --k and --v; a 2-D one\n" \
	"                        beside them is shared by every sequence)\n" \
	"  -w, --weights FILE    JSON object (or .npz archive) with W_Q, W_K, W_V and\n" \
	"                        optionally W_O, b_Q, b_K, b_V, b_O (d_in x d_out,\n" \
	"                        applied as x*W; or one d_in x d_k matrix per head,\n" \
	"                        3-D); or a directory of one file per weight (W_Q.csv,\n" \
	"                        W_K.npy, ...); without -w, Q = K = V = X; a missing\n" \
	"                        W_Q, W_K or W_V (W_Q alone) is the identity, said in\n" \
	"                        a note\n" \
	"      --wq, --wk, --wv, --wo, --bq, --bk, --bv, --bo FILE\n" \
	"                        one weight from its own file, over what -w gave\n" \
	"      --layout L        mha (default): weights d_in x d_out; torch: PyTorch's\n" \
	"                        d_out x d_in, applied as x*W^T, and the names of\n" \
	"                        nn.MultiheadAttention's state_dict (in_proj_weight,\n" \
	"                        in_proj_bias, out_proj.weight, out_proj.bias, ...);\n" \
	"                        llama, gpt2, bert: that model family's safetensors\n" \
	"                        checkpoint (-w a .safetensors file, its index.json or\n" \
	"                        their folder; default: config.json's model_type, or\n" \
	"                        the tensors' names)\n" \
	"      --layer N         the checkpoint's attention layer N (from 0)\n" \
	"      --prefix P        the attention module whose tensor names start with P\n" \
	"      --config FILE     Hugging Face's config.json (default: the one beside\n" \
	"                        the checkpoint): heads, key/value heads, rope, window\n" \
	"                        and causality, under the options given here\n" \
	"      --kv FILE         keys and values from this matrix (cross-attention)\n" \
	"      --xk FILE, --xv FILE\n" \
	"                        keys from one matrix and values from another (as\n" \
	"                        kdim and vdim apart); the two go together\n" \
	"      --q FILE, --k FILE, --v FILE\n" \
	"                        Q, K and V given directly: no projections (-w may\n" \
	"                        then hold only W_O and b_O)\n" \
	"      --kt FILE         K transposed (d_k x n_kv), as tutorials print it,\n" \
	"                        instead of --k\n" \
	"      --tokens LIST     labels for X's rows (the queries), e.g. \"The bear eats\"\n" \
	"                        (split at blanks, or at commas when there are any);\n" \
	"                        they title rows and columns of what is printed\n" \
	"      --kv-tokens LIST  labels for the keys, with --kv (else the queries')\n" \
	"      --mask FILE       n_q x n_kv, heads x n_q x n_kv or batch x heads x n_q x\n" \
	"                        n_kv, batch, heads and n_q also 1, or n_kv alone (as\n" \
	"                        ONNX broadcasts a mask): booleans (true = may attend)\n" \
	"                        or numbers added to the scores (\"-inf\"); JSON, CSV,\n" \
	"                        .npy or a .safetensors file's one tensor\n" \
	"      --mask-bool M     what a boolean mask's true means: attend (default; SDPA,\n" \
	"                        ONNX) or block (nn.MultiheadAttention's attn_mask and\n" \
	"                        key_padding_mask)\n" \
	"\n"

#define FORWARD_USAGE_ATTENTION \
	"Attention:\n" \
	"      --heads H         query heads (default 1); each takes an equal block of\n" \
	"                        Q's columns\n" \
	"      --kv-heads G      key/value heads for grouped-query attention (G divides\n" \
	"                        H; query head i uses key/value head i/(H/G))\n" \
	"      --scale S         dk: 1/sqrt(d_k) (default), dmodel: 1/sqrt(d_model),\n" \
	"                        seqlen: 1/sqrt(n_kv), none: 1, or a NUMBER multiplier\n" \
	"      --causal[=ALIGN]  query i sees keys j <= i (top-left, the default), or\n" \
	"                        j <= i + n_kv - n_q (bottom-right, as in decoding), or\n" \
	"                        j <= i + N for a whole number N (after N cached keys)\n" \
	"      --kv-len N        only the first N keys are valid (the rest is padding);\n" \
	"                        bottom-right then aligns with key N; N,N,...: one\n" \
	"                        length per sequence of a batch\n" \
	"      --window L[,R]    sliding window: the query at position p (i, plus the\n" \
	"                        causal offset) sees keys p-L to p+R only; R absent or\n" \
	"                        -1: unbounded right; L = -1: unbounded left\n" \
	"      --sinks FILE      attention sinks: one logit per query head, added to\n" \
	"                        each softmax's denominator as exp(sink - max)\n" \
	"      --alibi           ALiBi: head h adds slope_h*(j - p) to its scores (p the\n" \
	"                        query's position, as for --window); Press et al.'s\n" \
	"                        slopes for H heads\n" \
	"      --alibi-slopes FILE  ALiBi with these slopes, one per query head\n" \
	"      --rope MODE       rotary embeddings: Q and K turn by position after the\n" \
	"                        projections; half pairs feature i with i+R/2 (Llama,\n" \
	"                        GPT-NeoX), interleaved 2i with 2i+1 (GPT-J)\n" \
	"      --rope-theta T    the base: pair i turns by position*T^(-2i/R)\n" \
	"                        (default 10000)\n" \
	"      --rope-dim R      the first R features of each head turn (even; default\n" \
	"                        d_k); the rest pass through\n" \
	"      --positions FILE  whole numbers from 0: one list for queries and keys\n" \
	"                        alike, or JSON {\"q\": [..], \"k\": [..]}; default: keys\n" \
	"                        at j, queries at i plus the causal offset\n" \
	"      --rope-cos FILE, --rope-sin FILE\n" \
	"                        the cos and sin tables as given (positions x R/2),\n" \
	"                        row p for position p (ONNX RotaryEmbedding)\n" \
	"      --softcap C       scores become C*tanh(scores/C) before the mask\n" \
	"\n"

/* in the "Computation:" section */
#define FORWARD_USAGE_RUN \
	"      --threads N       threads for the fast path (default: OMP_NUM_THREADS,\n" \
	"                        else the cores mha may run on); the numbers are the\n" \
	"                        same bits whatever N\n" \
	"      --max-memory SIZE the most a run may allocate, e.g. 512M, 4G, none\n" \
	"                        (default: 3/4 of the memory; a run that would need\n" \
	"                        more is refused before it starts)\n"

#define FORWARD_USAGE_COLOR \
	"      --color[=WHEN]    heatmap colours: auto (a terminal, and NO_COLOR unset),\n" \
	"                        always or never (shaded characters)\n"

/* the pictures' own options, in both helps */
#define FORWARD_USAGE_PICTURE \
	"      --range R         the colours' scale of a heatmap, SVG or page: auto\n" \
	"                        (each panel's lowest to highest value) or MIN,MAX;\n" \
	"                        default: 0,1 for softmax, auto for the other steps\n" \
	"      --head N          draw head N alone (from 1; a page starts on it)\n"

#define FORWARD_USAGE_HELP \
	"  -h, --help            show this help\n"

#define FORWARD_USAGE_EXIT \
	"\n" \
	"Exit status: 0 success, 1 bad data (files, shapes), 2 bad command line.\n"

#endif

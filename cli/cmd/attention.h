/*
 * attention.h: the command line the attention commands share (forward,
 * heatmap, backward, compare), written once: the option table, parsing,
 * the checks every one of them makes, the start-up (the memory limit,
 * config.json, no output over an input, loading the problem) and the help's
 * shared sections.
 *
 * A command is a struct attn_command: its name and help, its own options,
 * and hooks the skeleton calls in order (git's builtins over
 * parse-options).  The skeleton never knows which command it runs, and no
 * command calls another.  To add a command: a file of its hooks, a
 * cmd_NAME() that hands them to attn_main(), and a row in main.c.  To add
 * an option: a row in attention.c's table (its group says which helps must
 * describe it: tests/options_test.c checks them), its case in attn_parse(),
 * and its line in the helps.
 */
#ifndef MHA_CLI_ATTENTION_H
#define MHA_CLI_ATTENTION_H

#include <stddef.h>

#include "write/emit.h"
#include "load/problem.h"

struct option;
struct attn_options;

/* A command's own options take getopt values from here on. */
#define ATTN_EXTRA_BASE 1000
#define ATTN_MAX_EXTRA 8

/*
 * The groups of the shared options: a command's help describes some of
 * them (help_groups); the others it takes all the same, and refuses or
 * ignores in its check.
 */
enum {
	OPT_INPUT = 1u << 0,   /* the files and what they hold: -x, -w, --mask, --tokens … */
	OPT_ATTN = 1u << 1,    /* the attention's settings: --heads, --causal, --rope … */
	OPT_RUN = 1u << 2,     /* --threads, --max-memory, --sequence, --format, --help */
	OPT_DTYPE = 1u << 3,   /* --dtype */
	OPT_EXACT = 1u << 4,   /* --exact */
	OPT_PRINT = 1u << 5,   /* --print, --output, --precision */
	OPT_EXPLAIN = 1u << 6, /* --explain, --cell */
	OPT_PICTURE = 1u << 7, /* --color, --range, --head */
	OPT_GRAD = 1u << 8,    /* --grad-output: only a command that takes OPT_GRAD */
	OPT_ALIAS = 1u << 9    /* --colour: another spelling, in no help */
};

/* One command plugged into the skeleton. */
struct attn_command {
	const char *name;  /* "forward": usage errors end "Try 'mha NAME --help'" */
	const char *usage; /* --help */
	unsigned help_groups; /* OPT_ groups its help describes (tests/options_test.c) */
	unsigned takes;    /* OPT_GRAD: the groups only some commands take */
	int draw;          /* without --format: a heatmap (svg for -o FILE.svg) */
	int load_failed;   /* the exit status of inputs that cannot be loaded; 0: the
			      loader's own (1 bad data, 2 a bad --cell) */
	/* its own options, NULL-terminated, their values from ATTN_EXTRA_BASE;
	 * extra_opt takes each: 0, or -1 said */
	const struct option *extra;
	int (*extra_opt)(struct attn_options *o, int c, const char *arg);
	/* --print LIST as given: 0, or -1 said (NULL: the steps of steps.h) */
	int (*print)(struct attn_options *o, const char *arg);
	/* before config.json is read: the options it refuses (NULL: none) */
	int (*refuse)(struct attn_options *o);
	/* after the checks every command makes: how its options combine, what
	 * it will print, how the inputs are read (o->spec.floats, map) */
	int (*check)(struct attn_options *o);
	/* -o DIR/: could the run write a file called name there? */
	int (*may_write)(const struct attn_options *o, const char *name);
	/* the run on the loaded problem: an exit status */
	int (*run)(struct attn_options *o, struct problem *p);
};

/* What the command line says. */
struct attn_options {
	const struct attn_command *cmd;
	struct problem_spec spec; /* what to read */
	struct emit emit;         /* where to write, how */
	unsigned print;           /* STEP_BIT()s of the steps asked for (forward's --print) */
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
	const char *print_arg; /* --print as given */
	int color_given; /* --color given */
	int precision_given; /* --precision given */
	void *own;       /* the command's own state (its options, its steps) */
};

/* The commands plugged in, each in its own file (for tests/options_test.c;
 * main.c reaches them through cmd_NAME()). */
extern const struct attn_command attn_forward, attn_heatmap, attn_backward, attn_compare;

/* The command on argv (argv[0] its name), own its state: an exit status. */
int attn_main(int argc, char **argv, const struct attn_command *c, void *own);
/* Its command line alone, reading and writing no file: 0 fine, 1 after
 * --help, 2 a usage error. */
int attn_check_args(int argc, char **argv, const struct attn_command *c, void *own);

/* The shared option table as getopt_long's, NULL-terminated, and each
 * row's OPT_ group (tests/options_test.c). */
const struct option *attn_option_table(const unsigned **groups);

/* Helpers the hooks share. */

/* --range or --head without a picture to draw: a usage error (-1), else 0. */
int attn_refuse_picture_options(const struct attn_options *o);
/* --sequence N, --head N and an SVG's one sequence against the batch read,
 * then the batch cut to sequence N: 0, or an exit status (said). */
int attn_pick_sequence(const struct attn_options *o, struct problem *p);

/* The help's sections every command prints. */
#define ATTN_USAGE_INPUTS \
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

#define ATTN_USAGE_ATTENTION \
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
#define ATTN_USAGE_RUN \
	"      --threads N       threads for the fast path (default: OMP_NUM_THREADS,\n" \
	"                        else the cores mha may run on); the numbers are the\n" \
	"                        same bits whatever N\n" \
	"      --max-memory SIZE the most a run may allocate, e.g. 512M, 4G, none\n" \
	"                        (default: 3/4 of the memory; a run that would need\n" \
	"                        more is refused before it starts)\n"

#define ATTN_USAGE_COLOR \
	"      --color[=WHEN]    heatmap colours: auto (a terminal, and NO_COLOR unset),\n" \
	"                        always or never (shaded characters)\n"

/* the pictures' own options, in both helps */
#define ATTN_USAGE_PICTURE \
	"      --range R         the colours' scale of a heatmap, SVG or page: auto\n" \
	"                        (each panel's lowest to highest value) or MIN,MAX;\n" \
	"                        default: 0,1 for softmax, auto for the other steps\n" \
	"      --head N          draw head N alone (from 1; a page starts on it)\n"

#define ATTN_USAGE_HELP \
	"  -h, --help            show this help\n"

#define ATTN_USAGE_EXIT \
	"\n" \
	"Exit status: 0 success, 1 bad data (files, shapes), 2 bad command line.\n"

#endif

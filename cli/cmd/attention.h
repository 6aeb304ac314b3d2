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
 * command calls another.  The table is table.c's, the parsing options.c's, the
 * checks and the start-up attention.c's.
 *
 * To add a command: a file of its hooks and its struct attn_command, a
 * cmd_NAME() that hands them to attn_main(), its row in main.c (and in
 * tests/options_test.c's list).  To add an option: a row in table.c's
 * table (its group says which helps describe it; an Inputs or Attention
 * row carries its help lines, printed in every help) and how it is taken:
 * its row_take (a flag, a string, a count or a choice of words, and where
 * it goes), its name in the engine's settings (what the run reads or its
 * layer computes), or, for a value of its own kind, a case in
 * attn_parse(); another group's option, its line in the helps that
 * describe that group (tests/options_test.c checks them all).
 */
#ifndef MHA_CLI_ATTENTION_H
#define MHA_CLI_ATTENTION_H

#include <stddef.h>
#include <stdio.h>

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
	OPT_PRINT = 1u << 5,   /* --print, --output, --precision, --full */
	OPT_EXPLAIN = 1u << 6, /* --explain, --cell */
	OPT_PICTURE = 1u << 7, /* --color, --range, --head */
	OPT_GRAD = 1u << 8,    /* --grad-output: only a command that takes OPT_GRAD */
	OPT_ALIAS = 1u << 9,   /* --colour: another spelling, in no help */
	OPT_NPZ = 1u << 10,    /* --compress: how .npz output is written */
	OPT_JSON = 1u << 11    /* --json-nonfinite: how JSON output spells inf and nan */
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
	int every_step;           /* --explain, a page: every step the run has, as the
				     files read say (a checkpoint's rope and norm too) */
	int print_all;
	int format_given;
	int print_given;
	int f32;  /* --dtype f32 */
	int dtype; /* --dtype: 0 f64, 1 f32, 2 bf16, 3 fp16 (the low-precision reference) */
	int dtype_given; /* --dtype given */
	size_t max_memory; /* bytes; SIZE_MAX: no limit */
	int explain;    /* --explain */
	int progress;   /* enum progress_mode: --progress, --quiet, or on a terminal */
	/* --cell without --explain: the cell's hand computation alone, after the
	 * steps --print names (STEP_BIT()s; 0: none) */
	int cell_alone;
	unsigned cell_print;
	int cell_print_all;
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

/*
 * The command line into o (o->own kept), by options.c for the skeleton: 0,
 * 1 after --help (printed), -1 a usage error (said).  free(o->kv_lens) after.
 */
int attn_parse(int argc, char **argv, struct attn_options *o, const struct attn_command *cmd);

/* The command on argv (argv[0] its name), own its state: an exit status. */
int attn_main(int argc, char **argv, const struct attn_command *c, void *own);
/* Its command line alone, reading and writing no file: 0 fine, 1 after
 * --help, 2 a usage error. */
int attn_check_args(int argc, char **argv, const struct attn_command *c, void *own);

/* A command's help, its usage with the shared sections filled in: 0, or -1
 * on a write error. */
int attn_help(FILE *fp, const struct attn_command *c);

/*
 * The options that set what one layer computes (--heads, --scale,
 * --window, --sinks, --rope…, --norm…, --softcap, --biases, MLA's), which
 * 'mha model' takes as well: their getopt rows into out (cap at most, their
 * values options.c's own: a command's own options must take others), their
 * help lines, and one parsed into s: 1, 0 when c is not one of them, -1
 * a usage error (said; hint: the command).
 */
size_t attn_setting_options(struct option *out, size_t cap);

/*
 * --list-options: opts (ended by a NULL name) as JSON on fp, for programs:
 * {"command": C, "options": [{"name", "short" (or null), "value": "none",
 * "required" or "optional", "arg": the word help shows after it (FILE,
 * N, ...) or null}]}.  0, or -1 when fp fails.
 */
int attn_list_options(FILE *fp, const char *command, const struct option *opts,
		      const char *help);
/* argv (the command's) asks for --list-options alone: 1; with anything
 * else: -1 (say ATTN_LIST_OPTIONS_ALONE); not at all: 0 */
int attn_list_options_asked(int argc, char **argv);
#define ATTN_LIST_OPTIONS_ALONE "--list-options prints the options the command takes: give it alone"
int attn_setting_help(FILE *fp);
/* the long name of the shared option whose getopt value is c (a setting's:
 * what load/settings.h takes), or NULL */
const char *attn_row_name(int c);

/* The shared option table as getopt_long's, NULL-terminated, and each
 * row's OPT_ group (tests/options_test.c). */
const struct option *attn_option_table(const unsigned **groups);

/* Helpers the hooks share. */

/* --compress without .npz output, in every command's words */
#define ATTN_COMPRESS_NEEDS_NPZ \
	"--compress is for .npz output: add --format npz, or give -o FILE.npz"
/* the options of the outputs people read, after -f or --precision */
#define ATTN_USAGE_FIT \
	"      --rows FIRST:LAST the queries every printed or drawn matrix keeps\n" \
	"                        (numbers from 1 or tokens; '5:' from 5, ':100' to 100)\n" \
	"      --cols FIRST:LAST the keys they keep, likewise (JSON, CSV, .npy and\n" \
	"                        .npz are never cut)\n" \
	"      --force           write a picture, page or text past the size mha\n" \
	"                        refuses (4 MiB of text, 32 MiB of SVG, 64 MiB page)\n"

/* --rows and --cols with an output that is never cut, or a walk-through; else 0 */
int attn_refuse_cut(const struct attn_options *o);
/* the queries and keys --rows and --cols keep, from the problem to the writers */
void attn_fit_ranges(struct attn_options *o, const struct problem *pb);

/* --json-nonfinite without JSON output */
#define ATTN_NONFINITE_NEEDS_JSON \
	"--json-nonfinite is for JSON output: add --format json, or give -o FILE.json"

/* --range or --head without a picture to draw: a usage error (-1), else 0. */
int attn_refuse_picture_options(const struct attn_options *o);
/* --sequence N, --head N and an SVG's one sequence against the batch read,
 * then the batch cut to sequence N: 0, or an exit status (said). */
int attn_pick_sequence(const struct attn_options *o, struct problem *p);

/* The help's sections every command prints. */
/* Where a command's usage has the help's sections every command prints
 * (Inputs, Attention), made from the option table's rows by attn_help. */
#define ATTN_USAGE_SHARED "\001"
/* Where it has the names of forward's steps (run/steps.c's table), each
 * line after the first indented to the help's second column, then "; or
 * all" */
#define ATTN_USAGE_STEPS "\002"

/* in the "Computation:" section */
#define ATTN_USAGE_RUN \
	"      --threads N       threads for the fast path (default: OMP_NUM_THREADS,\n" \
	"                        else the cores mha may run on); the numbers are the\n" \
	"                        same bits whatever N\n" \
	"      --max-memory SIZE the most a run may allocate, e.g. 512M, 4G, none\n" \
	"                        (default: 3/4 of the memory; a run that would need\n" \
	"                        more is refused before it starts)\n" \
	ATTN_USAGE_PROGRESS

/* in every "Computation:" section */
#define ATTN_USAGE_PROGRESS \
	"      --progress        a progress bar on standard error even when it is not\n" \
	"                        a terminal (a line a tenth); on a terminal a run past\n" \
	"                        about a second shows one, cleared at its end\n" \
	"  -q, --quiet           no progress bar\n"

#define ATTN_USAGE_COLOR \
	"      --color[=WHEN]    heatmap colours: auto (a terminal, and NO_COLOR unset),\n" \
	"                        always or never (shaded characters)\n"

/* the pictures' own options, in both helps */
#define ATTN_USAGE_PICTURE \
	"      --range R         the colours' scale of a heatmap, SVG or page: auto\n" \
	"                        (each panel's lowest to highest value) or MIN,MAX;\n" \
	"                        default: 0,1 for softmax, auto for the other steps\n" \
	"      --head N          draw head N alone (from 1; a page starts on it)\n" \
	"      --pool RULE[:K]   an overview (heatmap, SVG, page): blocks of K by K cells\n" \
	"                        drawn as one, their max or mean (unblocked cells), K by\n" \
	"                        default the fewest that keep a panel within 64 cells\n" \
	"                        a side\n"

/* after -f in the helps of the commands that write JSON */
#define ATTN_USAGE_JSON \
	"      --json-nonfinite HOW\n" \
	"                        JSON's -inf, inf and nan: strings (default; strict\n" \
	"                        JSON, as jq reads it) or python (bare -Infinity,\n" \
	"                        Infinity, NaN, which Python's json reads as floats)\n"

#define ATTN_USAGE_HELP \
	"  -h, --help            show this help\n"

#define ATTN_USAGE_EXIT \
	"\n" \
	"Exit status: 0 success, 1 bad data (files, shapes), 2 bad command line.\n"

#endif

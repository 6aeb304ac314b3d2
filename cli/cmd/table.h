/*
 * table.h: the attention commands' option table (table.c), one row per
 * shared option: getopt_long's entry, the help group it belongs to and, for
 * the sections every help shares, its lines.  options.c parses by it,
 * table.c makes the helps and --list-options from it.
 */
#ifndef MHA_CLI_TABLE_H
#define MHA_CLI_TABLE_H

#include <getopt.h>
#include <stddef.h>

#include "load/spec.h"

/* the shared options' values (a command's own take ATTN_EXTRA_BASE on) */
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

/* A word an option takes, and the value it stands for (row_take's CHOICE). */
struct row_choice {
	const char *word;  /* NULL ends the list */
	int value;
	int hidden;        /* another spelling, not named in the refusal (float64) */
};

/*
 * How attn_parse takes an option without a case of its own (git's
 * parse-options): where its value goes in struct attn_options, and how it
 * is read.  The inputs and the layer's settings have none: the engine takes
 * them by name (engine/api/settings.c).
 */
struct row_take {
	enum { ROW_SET, ROW_STRING, ROW_COUNT, ROW_CHOICE } kind;
	size_t at;        /* offsetof the destination: an int (SET, CHOICE), a
			     const char * (STRING), a size_t (COUNT) */
	size_t given_at;  /* an int set to 1 when given, or 0 for none */
	int value;        /* SET: what is stored; CHOICE: what an optional
			     value's absence stores */
	const struct row_choice *choices; /* CHOICE */
};

struct option_row {
	struct option o;
	unsigned group; /* OPT_ (attention.h): the helps that describe it */
	const char *help; /* its lines in the help (a group of options: the first's), or NULL */
	const struct row_take *take; /* how it is taken, or NULL: a case of attn_parse's
					or the engine's */
};

/* the row of the shared option whose getopt value is c, or NULL */
const struct option_row *attn_row(int c);

/* every shared option, once; attn_n_rows of them, at most ATTN_MAX_ROWS */
#define ATTN_MAX_ROWS 128
extern const struct option_row attn_rows[];
extern const size_t attn_n_rows;

/* c is one of the options that set what a layer computes (mha model's too) */
int attn_is_setting(int c);

#endif

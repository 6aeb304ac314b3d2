/*
 * steps.h: the steps of the computation a user can print, in tables of one
 * type: forward's (steps[], steps.c) and backward's (grad_steps[],
 * grad_steps.c).  A row holds a step's --print name, the library stage(s)
 * it comes from, whether it is one matrix or one per head, its JSON key
 * (and file name; by default the library's name of its stage), what its
 * rows and columns stand for, its title, and when a run has it.
 *
 * Everything that chooses, keeps, orders, titles or names a step derives
 * from its table: the print set, the stages the observer asks for, the
 * observer itself (either table), the list of items the writers, --explain
 * and the heatmaps read (items.c, either table), the file names of -o
 * DIR/, and the steps 'mha compare' reads (against.c).  A new step is its
 * stage in the library (mha.h and its name there), an id and a row here;
 * compare reads it once it is a row of cmp_steps.  Nothing here reads or
 * writes a file.
 */
#ifndef MHA_ENGINE_STEPS_H
#define MHA_ENGINE_STEPS_H

#include <stddef.h>

#include "util/matrix.h"
#include "load/spec.h"
#include "mha.h"

/* In the order of the computation, which is the order they are printed in. */
enum step_id {
	STEP_X, STEP_C_Q, STEP_C_Q_NORM, STEP_Q_NOPE, STEP_Q_PE, STEP_Q_PE_ROT, STEP_C_KV,
	STEP_C_KV_NORM, STEP_K_PE, STEP_K_PE_ROT, STEP_K_NOPE, STEP_Q, STEP_K, STEP_V, STEP_Q_NORM, STEP_K_NORM, STEP_Q_ROT, STEP_K_ROT, STEP_SCORES,
	STEP_SCALED, STEP_SOFTCAPPED, STEP_MASK,
	STEP_MASKED, STEP_SOFTMAX, STEP_HEADS, STEP_CONCAT, STEP_OUTPUT, STEP_COUNT
};

#define STEP_BIT(s) (1u << (s))

/* What a matrix's rows or columns stand for: labels (tokens) go on queries and keys. */
enum step_axis { AXIS_FEATURE, AXIS_QUERY, AXIS_KEY };

/* When a run has a step (and --print all includes it): always, or only when
 * the run has what it comes from (softcapped needs a softcap; mask and
 * masked a mask, --causal or --kv-len; q_rot and k_rot --rope; q_norm and
 * k_norm a q/k norm; a weight's
 * gradient that weight; …).
 * A step that is an exact copy of another in this run (one head's output is
 * the concat) is included all the same: the machine formats always hold it
 * under its key, and text says which it repeats (struct step_item). */
enum step_when {
	WHEN_ALWAYS, WHEN_SOFTCAP, WHEN_MASK, WHEN_ROPE, WHEN_NORM,
	WHEN_WO,        /* W_O given */
	WHEN_PROJECTED, /* X projected (not Q, K, V given) */
	WHEN_KV,        /* --kv: keys and values from one X_kv */
	WHEN_APART,     /* --xk and --xv */
	WHEN_WEIGHT,    /* the step's weight given */
	WHEN_SINKS,     /* --sinks */
	WHEN_NORM_W,    /* a q/k norm with weights */
	WHEN_MLA,       /* multi-head latent attention */
	WHEN_MLA_Q,     /* MLA with q_a_proj (a query latent) */
	WHEN_MLA_ROPE,  /* MLA with --rope */
	WHEN_MLA_FULL,  /* MLA not absorbed (each head's keys and values made) */
	WHEN_LATENT     /* MLA with the step's latent tensor (.weight: LAT_ index) */
};

/* A step's flags. */
enum {
	STEP_INPUT = 1u << 0,       /* X, the input itself; never there when Q, K, V are given */
	STEP_RESULT = 1u << 1,      /* the output array of the run, not an observed copy */
	STEP_BLOCKS = 1u << 2,      /* whole, plus each head's block (one head: the whole) */
	STEP_STACKED = 1u << 3,     /* handed over per head, written as one: shared (n_q, n_kv),
				       or per head (H, n_q, n_kv) */
	STEP_AFTER_HEADS = 1u << 4, /* whole, made from the heads: written after them */
	STEP_DRAWABLE = 1u << 5,    /* (n_q, n_kv) per head: a heatmap can draw it */
	STEP_F32 = 1u << 6,         /* --dtype f32 can print it */
	STEP_DEFAULT = 1u << 7,     /* printed when --print is not given (backward's) */
	STEP_GRAD = 1u << 8         /* its stages are mha_grad_stage's (backward's) */
};

/* What a step's presence and title depend on, besides the step itself. */
struct step_facts {
	const mha_config *cfg;   /* scale mode, causal, softcap, kv_len */
	const mha_dims *d;       /* the shapes; titles only (NULL before reading) */
	double scale;            /* what the run multiplied the scores by; titles only */
	const char *mask_file;   /* --mask as given ("-": standard input), or NULL */
	int mask_block;          /* --mask-bool block: the file's true blocks */
	size_t heads;
	unsigned weights;        /* 1 << WQ … 1 << BO (weights.h): the weights given */
	int direct;              /* Q, K and V given directly (--q, --k, --v) */
	int cross;               /* keys and values from --kv (or --xk and --xv) */
	int apart;               /* keys from --xk, values from --xv */
	const double *alibi_slopes; /* (H) ALiBi's slopes, given or Press et al.'s; NULL
				       without ALiBi, and before the files are read */
	const char *positions_file;          /* --positions as given, or NULL */
	const char *q_norm_file, *k_norm_file; /* the q/k norm's weights (--q-norm, a
						  checkpoint's), or NULL */
	const char *rope_cos_file, *rope_sin_file; /* --rope-cos, --rope-sin, or NULL */
	const char *mask_bool;   /* a boolean mask was read: "attend" or "block"; else NULL */
	const char *model;       /* the checkpoint's family ("llama"), or NULL: no checkpoint */
	const char *model_prefix; /* its module's names' start ("model.layers.1.self_attn.") */
	const char *model_config; /* the config.json read, or NULL */
	long long model_layer;   /* --layer N, or -1 */
	const int *shared;       /* backward's: [3] of X (or Q), of the keys', of the
				    values' source: one matrix a batch shares, its
				    gradient summed over the sequences; or NULL */
};

/*
 * A step: one row of a table of them, forward's (steps[]) or backward's
 * (grad_steps[], grad_steps.c), the same code walking both.
 */
struct step {
	const char *name;        /* for --print (backward's: the key) */
	const char *key;         /* JSON key; the file's name under -o DIR/; NULL: the
				    library's name of its stage (step_key) */
	int stage;               /* the library's stage of the whole-model matrix
				    (mha_stage; backward's: mha_grad_stage), or -1 */
	int head_stage;          /* of each head's matrix, or -1 */
	enum step_axis rows, cols;
	enum step_when when;
	unsigned flags;
	/* its title: head 0 the whole-model matrix, else that head's (1-based) */
	void (*title)(char *buf, size_t size, const struct step *s, const struct step_facts *f,
		      size_t head);
	int weight;              /* WHEN_WEIGHT: the weight (weights.h) it needs */
	const char *formula;     /* its formula, for a title that prints it (backward's:
				    %zu the head, and its kv head) */
	const char *says;        /* --explain: what it is, in a line (backward's) */
};

extern const struct step steps[STEP_COUNT];

/* Backward's steps (grad_steps.c), in the order of the computation. */
enum grad_step_id {
	GS_GRAD_OUTPUT, GS_DCONCAT,
	GS_P, GS_O, GS_DO, GS_DV_H, GS_DP, GS_D, GS_DS, GS_DSCALED, GS_DSCORES, GS_DQ_H, GS_DK_H,
	GS_DQ_ROT, GS_DK_ROT, GS_DQ_NORM, GS_DK_NORM, GS_DQ, GS_DK, GS_DV, GS_DC_Q, GS_DC_KV, GS_DK_PE,
	GS_DX, GS_DX_KV, GS_DX_K, GS_DX_V, GS_DW_Q, GS_DW_K, GS_DW_V, GS_DW_O, GS_DB_Q, GS_DB_K, GS_DB_V,
	GS_DB_O, GS_DSINKS, GS_DQ_NORM_W, GS_DK_NORM_W,
	GS_DLATENT, /* + LAT_Q_A_PROJ … LAT_KV_B_PROJ: the latent tensors' gradients */
	GS_COUNT = GS_DLATENT + N_LATENT
};

extern const struct step grad_steps[GS_COUNT];

/* The most steps a table holds. */
#define STEP_MAX 48

/* Its key: the table's, or the library's name of its stage (mha_stage_name,
 * mha_grad_stage_name), so that a name the library gives is written once. */
const char *step_key(const struct step *s);
/* Whether a run with these facts has step s (its when). */
int step_exists(const struct step *s, const struct step_facts *f);

/* A q/k norm's kind by name: "none", "rms", "rms1p", "layer" (--norm's
 * words, meta's); and its formula, "rms: x/sqrt(mean(x^2) + 1e-06)*w", into
 * buf. */
const char *step_norm_kind(mha_norm_kind kind);
const char *step_norm_formula(char *buf, size_t size, const mha_qk_norm *n);

/* The step called name ("scores"), or -1. */
int step_by_name(const char *name);
/* "x, q, k, …, output": every step's name, into buf, which is returned. */
const char *step_names(char *buf, size_t size);
/* The step (or "all") name is nearly, for "did you mean"; NULL if none. */
const char *step_closest(const char *name);
/* The steps written: those asked for, and with all those --print all shows. */
unsigned steps_print_set(unsigned asked, int all, const struct step_facts *f);
/* Every step the run has (--print all, --explain): softcapped only with a
 * softcap, the mask only with one. */
unsigned steps_every(const struct step_facts *f);
/* The steps a flag (STEP_DRAWABLE, STEP_F32) marks. */
unsigned steps_flagged(unsigned flag);
/* The MHA_STAGE_SET()s an observer asks for to print the steps in p. */
mha_stages steps_stages(unsigned p, size_t heads);
/* "0.5 = 1/sqrt(d_k), d_k = 4": how the scores were scaled, in words. */
void step_scale_words(char *buf, size_t size, const struct step_facts *f);

/* ---- what the observer keeps ------------------------------------------ */

/* A copy of every intermediate asked for, by step of its table. */
struct step_results {
	const struct step *table;          /* steps (NULL) or grad_steps */
	size_t n;                          /* its number of steps (0: STEP_COUNT) */
	int item_base;                     /* the items' step ids start here (backward's
					      1000: apart from forward's) */
	int only_held;                     /* collect no step without a matrix */
	size_t heads;
	int mask_per_head;                 /* the mask is (H, n_q, n_kv) (or ALiBi: one per head) */
	matrix whole[STEP_MAX];            /* whole-model matrices; a stacked step's too */
	matrix *per_head[STEP_MAX];        /* [heads] for each step kept per head */
};

/* An mha_observe_fn: ctx is a struct step_results, zeroed but for table,
 * heads and mask_per_head.  Copies go through matrix_alloc (the memory
 * budget).  stage is the table's kind (mha_stage or mha_grad_stage). */
int steps_keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols);

/* The observer of a batch: each sequence's steps into its own results. */
struct steps_batch {
	struct step_results *res; /* [sequences] */
	size_t cur;               /* the sequence the library is on */
};
/* mha_observer's and mha_grad_observer's fn and sequence, ctx a struct steps_batch */
int steps_batch_keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows,
		     size_t cols);
int steps_batch_keep_grad(void *ctx, mha_grad_stage stage, int head, const double *m, size_t rows,
			  size_t cols);
int steps_batch_sequence(void *ctx, size_t b);
/* After the run: per-head copies of a stacked step as one (H, rows, cols). */
int steps_stack(struct step_results *r);
void steps_results_free(struct step_results *r);

/* ---- what is printed --------------------------------------------------- */

/* One matrix to print. */
struct step_item {
	int step;                /* enum step_id; backward's: 1000 + enum grad_step_id */
	const char *key;         /* steps[step].key */
	size_t head;             /* 1-based; 0: the whole model */
	char title[200];
	const matrix *m;
	enum step_axis rows, cols;
	/* an exact copy of the item at this index, by how the run is made (one
	 * head: its Q block is Q; no W_O: the concat is the output); -1 if not.
	 * Text and Markdown fold copies into a line (steps_fold_note). */
	long copy_of;
	const char *copy_why;    /* "one head", "no W_O", "one head, no W_O" */
};

struct step_items {
	struct step_item *v;     /* [n], from malloc */
	size_t n, cap;
};

/*
 * Every step of p there is, in the order of the computation: the whole
 * model's first (those made from the heads last), then each head's, titled,
 * each step of p under every key it has (one head's Q, K, V blocks are the
 * whole Q, K, V; its output is asked for from the library), exact copies
 * marked.  x is the input X, out the output.  0, or -1 when out of memory
 * (said).
 */
int steps_collect(struct step_items *list, const struct step_results *r, unsigned p,
		  const struct step_facts *f, const matrix *x, const matrix *out);
/*
 * The same for any table (r->table): given[s] (of STEP_MAX) is step s's
 * whole matrix where the caller holds it (an input, the run's results), or
 * NULL for the observer's copy in r.  Forward's table alone marks copies.
 */
int steps_collect_given(struct step_items *list, const struct step_results *r,
			unsigned long long p, const struct step_facts *f, const matrix *const *given);
void steps_items_free(struct step_items *list);
/* a new item at list's end, zeroed (copy_of -1), or NULL when out of memory (said) */
struct step_item *steps_push(struct step_items *list);
/*
 * The line that stands for the copies from list->v[*i] on (those of one
 * head, copies for one reason), in buf: "head 1: Q1, K1, V1 are the Q, K, V
 * above (one head)".  *i moves past them.  buf is returned.
 */
const char *steps_fold_note(char *buf, size_t size, const struct step_items *list, size_t *i);
/* --print LIST (forward's steps by name, comma-separated, or all) added to
 * *print (STEP_BIT()s) and *all: 0, or -1 a usage error of hint (said). */
int steps_parse_print(const char *hint, const char *arg, unsigned *print, int *all);

/* A 2-D view of plane h of a stacked (H, rows, cols) m, or m itself when 2-D. */
matrix step_plane(const matrix *m, size_t h);

/* One query head's matrices among a run's steps; NULL where not collected. */
struct step_head {
	const matrix *q, *k, *v, *scores, *scaled, *softcapped, *masked, *softmax, *out;
};
/*
 * heads[0 .. H) from list's per-head items (the whole model's are the
 * caller's); a head without blocks of its own (one head) gets the whole
 * Q (q_rot when the rotation ran), K (k_rot) and V.
 */
void steps_heads(const struct step_items *list, struct step_head *heads, size_t H);

/* ---- their files under -o DIR/ --------------------------------------- */

/*
 * The file an item goes to in a directory: KEY.ext for the whole model,
 * headN_KEY.ext for head N, and KEY_headN.ext for plane N of a stacked
 * matrix CSV cannot hold whole (plane 0: none).  Into buf, returned.
 */
const char *step_file_name(char *buf, size_t size, const char *key, size_t head, size_t plane,
			   const char *ext);
/* Could a run writing the steps p of heads heads into a directory write a
 * file called name?  (A CSV run writes the planes of a stacked step.) */
int steps_may_write(const char *name, unsigned p, size_t heads, const char *ext);

#endif

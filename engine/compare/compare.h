/*
 * compare.h: a comparison, the engine's (compare.c the whole of one,
 * sets.c mha's steps, match.c a step compared, diagnose.c and mistakes_bw.c
 * the mistakes): a full set of steps, one step compared, the tolerances,
 * the diagnosis.  The program's 'mha compare' writes its report
 * (cli/cmd/report.c); the Python package reads c's figures.
 */
#ifndef MHA_ENGINE_COMPARE_H
#define MHA_ENGINE_COMPARE_H

#include <stddef.h>
#include <stdio.h>

#include "util/matrix.h"
#include "compare/against.h"
#include "load/problem.h"

#include "mha.h"

/* every stage the library hands over */
#define ALL_STAGES (MHA_STAGE_SET(MHA_STAGE_COUNT) - 1u)

/* Every step of one computation, each whole (per-head steps (H, rows, cols)). */
struct set {
	matrix m[C_COUNT];
};

void set_free(struct set *s);
int copy_matrix(matrix *dst, const matrix *src);

struct ctx;

/* A backward mistake's edit of the library's stages (diagnose.c), or none. */
struct bw_edit {
	mha_grad_edit_fn fn;
	void *ctx;
};

/*
 * One computation through the library, every step kept: the forward, and
 * with x->grads the backward of it (given x->dout, or all ones; edit:
 * a backward mistake's, or NULL).  0, 1 when the library refuses it (a
 * mistaken configuration may overflow), -1 said.
 */
int run_set(struct set *s, const struct ctx *x, const mha_inputs *in, const mha_weights *w,
	    const mha_config *cfg, const struct bw_edit *edit, mha_report *rep);

/* Bytes a set of every step holds (sets.c), with grads the backward's too. */
size_t set_bytes(const struct problem *p, int grads);

/* ---- comparing one step (match.c) ------------------------------------------ */

/* The low-precision references their bfloat16 or float16 steps are judged
 * by (precision.c): for each type, each step's largest |reference -
 * float64| row by row, the largest over the scale readings. */
struct lowp_refs {
	double *row[2][C_COUNT];  /* [type - 1][step]: (planes * rows), or NULL */
	size_t readings[2];       /* the scale readings computed (mha_lowp_scale) */
};

struct tol {
	double rtol, atol;
	int f32;   /* ULPs of float */
	int fixed; /* --rtol or --atol given: float32 numbers keep them, and
		      bfloat16 and float16 ones are held to them */
	double factor;                 /* --factor: their error against the reference's */
	const struct lowp_refs *refs;  /* for their bfloat16 and float16 steps */
};

struct stat {
	int given;          /* they gave the step */
	int shape_ok;       /* their shape is mha's (a mask: one plane for every head too) */
	int pass;
	size_t P, R, C;     /* mha's, as (planes, rows, cols) */
	double max_abs, max_rel, max_ulp;
	size_t worst;       /* mha's flat index of the largest |diff| */
	double worst_theirs, worst_mha;
	size_t differing, entries;
	size_t heads_given, rows_given; /* of P and R: what was compared */
	struct tol tol;     /* the tolerances this step was held to */
	int prec, digits;   /* PREC_*: their numbers' precision, and the rounding allowed */
	int rounded;        /* an entry agreed only to their precision */
	/* judged by precision (their numbers bfloat16 or float16, precision.c) */
	int lowp;           /* the mha_precision they were judged in, or 0 */
	double ref_err;     /* the reference's largest |error| over the entries compared */
	double floor;       /* a unit in the last place of the step's largest |value| */
	double limit;       /* factor * ref_err + floor: the largest error that agrees */
	double nmse, cosine; /* sum (theirs - mha)^2 / sum mha^2; their cosine with mha's */
	int lowest;         /* a blocked key they wrote as their type's lowest value */
};

/* (P, R, C): the last two dimensions, and the planes before them */
void shape3(const matrix *m, size_t *P, size_t *R, size_t *C);
/* theirs (g) against mine at step id (enum cmp_id), within base's tolerances
 * or their numbers' precision */
void compare_step(struct stat *st, int id, const struct given *g, const matrix *mine,
		  const struct tol *base);
/* whether set c reproduces theirs at step id within t */
int reproduces(const struct set *c, const struct against *a, int id, const struct tol *t);
/* the step of c their step i reproduces: i, or a later one it is often
 * called by (scores kept scaled and masked: masked), or -1 */
int reproduced_as(const struct set *c, const struct against *a, int i, const struct tol *t);
/* their step i moved to step j (named_as i) */
void name_as(struct against *a, int i, int j);
/* their numbers of step id given to k decimals or significant digits
 * (g->prec, g->digits), when they are */
void detect_precision(struct given *g, const matrix *mine, int id);
/* a step of theirs that differs but equals the step it is another name of
 * (their scores, mha's masked): moved there (name_as), st[] updated */
void find_named(struct against *a, const struct set *mine, struct stat *st, const struct tol *t);

/* ---- verdicts by precision: the figures (match.c), the references (precision.c) */

/* the mha_precision of their numbers' type (matrix.h's FROM_*): bfloat16 or
 * float16, else 0 */
int lowp_of(int from_type);
/* a unit in the last place of |v| in the type p (bfloat16 or float16) */
double lowp_ulp(double v, mha_precision p);
/* the largest |error| of the reference over step id's entries of g that
 * are compared (rows per plane of P * R), or -1 when there is none */
double lowp_ref_err(const struct lowp_refs *L, mha_precision p, int id, const struct given *g,
		    size_t P, size_t R);
/* The references for each low type among their steps given, into L; a
 * step of theirs the reference has not (a gradient, or a setting it does
 * not compute) refused by name.  0, or -1 said. */
struct ctx;
int lowp_references(struct lowp_refs *L, const struct ctx *x, const struct against *a);
void lowp_refs_free(struct lowp_refs *L);
/* their float64 or float32 numbers g, every one a value of bfloat16 (or
 * float16) where mha's are not: that type (computed in it and saved
 * wider?), else 0 */
int lowp_looks(const struct given *g, const matrix *mine);

/* ---- the mistakes (diagnose.c) -------------------------------------------- */

struct mistake {
	const char *id;   /* JSON "mistake" */
	char option[64];  /* the mha option that computes it, or "" */
	char with[96];    /* "--scale dmodel", "W_Q transposed": after "matches mha's with" */
	char why[320];    /* "you divided by sqrt(d_model) = 4; this layer divides by ..." */
};

struct ctx {
	const struct problem *p;
	const struct set *mine;
	const struct against *a;
	const mha_report *rep;
	struct tol tol;
	int f32;
	int grads;          /* backward's steps compared too */
	const matrix *dout; /* their dO (n_q, output columns); rank 0: all ones */
};

struct diagnosis {
	int found;
	int step;         /* the step it explains: the first difference, or with float32
			     numbers the first beyond float32's rounding */
	int as_step;      /* the step of mha's their step is (step itself, or masked for
			     their scores kept scaled and masked) */
	struct mistake m;
	int later;        /* every step they gave after the first difference matches it too */
	char message[640];
};

/* The backward's mistakes (mistakes_bw.c): how many, and mistake k
 * recomputed into c and described in m: 0, 1 when it does not apply to
 * this run, -1 said. */
int bw_mistake_count(void);
int bw_candidate(int k, const struct ctx *x, struct mistake *m, struct set *c);

/* The mistakes of porting today's models (mistakes_port.c): how many, and
 * mistake k recomputed into c and described in m, as bw_candidate. */
int port_mistake_count(void);
int port_candidate(int k, const struct ctx *x, struct mistake *m, struct set *c);

/* The mistake that explains their first differing step, if one does: 0, or -1 said. */
int diagnose(struct diagnosis *dg, const struct ctx *x, int first);

/* ---- a comparison (compare.c) ---------------------------------------------- */

/* What compare is asked: their results, the tolerances, how to read them. */
struct compare_request {
	const char *against;    /* --against PATH; NULL: the arrays below */
	const char *const *their_names, *const *their_paths; /* in memory (read/memory.h) */
	size_t n_theirs;
	double rtol, atol;      /* when given */
	int rtol_given, atol_given;
	int digits, digits_sig, digits_given; /* --digits N or Ns */
	int f32;                /* --dtype f32 */
	int dtype_given;        /* --dtype said which: their numbers' own type not looked at */
	int precision;          /* --dtype bf16 or fp16: an mha_precision, else 0 */
	double factor;          /* --factor F: 0 for the default, 2 */
	int factor_given;
	size_t sequence;        /* --sequence N (from 1), or 0 */
};

/* A comparison made: theirs, mha's, each step's figures, the diagnosis. */
struct comparison {
	struct against a;
	struct set mine;
	struct stat st[C_COUNT];
	struct diagnosis dg;
	struct tol tol;
	struct lowp_refs refs;     /* for their bfloat16 and float16 steps */
	int lowp;                  /* a step was judged by precision */
	mha_report rep;
	matrix dout;
	char dout_from[PATH_TEXT]; /* "--grad-output FILE", "their dO", or "" (all ones) */
	int first;                 /* the first differing step, or -1 */
	int grads;                 /* backward's steps compared */
	int looks_lowp;            /* their first differing step's numbers are all of this
				      mha_precision's (lowp_looks), no --dtype given; or 0 */
};

/*
 * Their results against mha's on the loaded problem pb (compare_request
 * q): c filled in (calloc'd by the caller, comparison_free() after).  0,
 * whether they agree or not (c->first); else an exit status, said: every
 * problem is trouble (EXIT_USAGE), as cmp and diff have it.
 */
int compare_problem(struct comparison *c, struct problem *pb, const struct compare_request *q);
void comparison_free(struct comparison *c);

#endif

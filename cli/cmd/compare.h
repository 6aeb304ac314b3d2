/*
 * compare.h: what the files of 'mha compare' share (compare.c the command,
 * diagnose.c the mistakes, report.c the report): a full set of steps, one
 * step compared, the tolerances, the diagnosis.  No other command includes it.
 */
#ifndef MHA_CLI_COMPARE_H
#define MHA_CLI_COMPARE_H

#include <stddef.h>
#include <stdio.h>

#include "base/matrix.h"
#include "cmd/against.h"
#include "load/problem.h"

#include "mha.h"

/* every stage the library hands over */
#define ALL_STAGES ((1u << MHA_STAGE_COUNT) - 1u)

/* Every step of one computation, each whole (per-head steps (H, rows, cols)). */
struct set {
	matrix m[C_COUNT];
};

void set_free(struct set *s);
int copy_matrix(matrix *dst, const matrix *src);
/*
 * One computation through the library, every step kept: 0, 1 when the
 * library refuses it (a mistaken configuration may overflow), -1 said.
 */
int run_set(struct set *s, const struct problem *p, const mha_dims *d, const mha_inputs *in,
	    const mha_weights *w, const mha_config *cfg, mha_report *rep);

/* ---- comparing one step ---------------------------------------------------- */

struct tol {
	double rtol, atol;
	int f32; /* ULPs of float */
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
};

/* (P, R, C): the last two dimensions, and the planes before them */
void shape3(const matrix *m, size_t *P, size_t *R, size_t *C);
/* theirs against mine at step id (enum cmp_id) */
void compare_step(struct stat *st, int id, const matrix *theirs, const matrix *mine,
		  const struct tol *t);
/* whether set c reproduces theirs at step id within t */
int reproduces(const struct set *c, const struct against *a, int id, const struct tol *t);

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
};

struct diagnosis {
	int found;
	int step;         /* the step it explains: the first difference, or with float32
			     numbers the first beyond float32's rounding */
	struct mistake m;
	int later;        /* every step they gave after the first difference matches it too */
	char message[640];
};

/* The mistake that explains their first differing step, if one does: 0, or -1 said. */
int diagnose(struct diagnosis *dg, const struct ctx *x, int first);

/* ---- the report (report.c) ------------------------------------------------ */

struct report {
	const char *against;
	const struct against *a;
	const struct set *mine;
	const struct stat *st;  /* [C_COUNT] */
	const struct labels *l;
	const struct tol *tol;
	int f32;
	size_t sequence;        /* --sequence N, or 0 */
	int first;              /* the first differing step, or -1 */
	const struct diagnosis *dg;
};

void report_text(FILE *fp, const struct report *r);
void report_json(FILE *fp, const struct report *r);

#endif

/*
 * run.h: a loaded problem (problem.h) run through the library: the memory
 * it will need, checked before it starts; the forward computation, in
 * float64 watched by an observer or in float32; and what the steps'
 * presence and titles depend on (steps.h).
 */
#ifndef MHA_ENGINE_RUN_H
#define MHA_ENGINE_RUN_H

#include "load/problem.h"
#include "run/steps.h"
#include "mha.h"

/* What the steps' presence and titles depend on (scale: the run's). */
void problem_facts(const struct problem *p, double scale, struct step_facts *f);

/*
 * What a run will hold at its peak, in three parts, and the words of a
 * refusal: "WHO needs about TOTAL (PART0 B0, PART1 B1, PART2 B2), more than
 * --max-memory (LIMIT): ADVICE", the parts holding the inputs read; or,
 * with no parts named, the need beside the inputs: "WHO needs about TOTAL
 * beside the inputs, more than --max-memory (LIMIT) leaves: ADVICE".
 */
struct run_need {
	const char *who;     /* "this run", "comparing" */
	const char *part[3]; /* each part's words, or all NULL */
	size_t bytes[3];     /* each part's bytes (saturating at SIZE_MAX) */
	const char *advice;  /* "print fewer steps, or raise --max-memory" */
};

/* The one memory pre-check: a need past --max-memory said (-1), else 0. */
int run_check_memory(const struct run_need *n);

/* A forward run that would need more than the budget's limit, asking the
 * library for the stages wanted and printing their copies: said; -1.  Else 0. */
/* What of c the low-precision reference (mha_config.precision) does not
 * compute yet, in words ("ALiBi", "RoPE scaling"), or NULL: it does. */
const char *run_lowp_lacks(const mha_config *c);

int problem_check_memory(const struct problem *p, mha_stages wanted, int f32);

/*
 * --dtype f32's inputs and weights, for mha_forward_f32 and
 * mha_backward_f32: those read as floats used as they are, the others
 * rounded into copies (an input that is another, as self-attention's X,
 * rounded once).  0, or -1 out of memory (nothing held).  Free with
 * run_floats_free.
 */
struct run_floats {
	mha_inputs_f32 in;
	mha_weights_f32 w;
	float *own[14];   /* the copies made: 3 inputs, 8 weights and 3 latent ones at most */
	size_t n_own;
};
int run_floats_make(struct run_floats *f, const struct problem *p);
void run_floats_free(struct run_floats *f);

/*
 * The computation: out allocated (n_q, output columns) and filled (a batch:
 * (B, n_q, output columns)), in
 * float64 with obs watching, or with f32 in float32 (no steps; the output
 * widened back, marked is_f32).  Overflow and other failures are said, as
 * is a warning for query rows with every key masked; 0 or -1.
 */
int problem_forward(matrix *out, const struct problem *p, const mha_observer *obs, int f32,
		    mha_report *rep);

#endif

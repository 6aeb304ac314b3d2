/*
 * run.h: a loaded problem (problem.h) run through the library: the memory
 * it will need, checked before it starts; the forward computation, in
 * float64 watched by an observer or in float32; and what the steps'
 * presence and titles depend on (steps.h).
 */
#ifndef MHA_CLI_RUN_H
#define MHA_CLI_RUN_H

#include "load/problem.h"
#include "run/steps.h"
#include "mha.h"

/* What the steps' presence and titles depend on (scale: the run's). */
void problem_facts(const struct problem *p, double scale, struct step_facts *f);

/* A run that would need more than the budget's limit, asking the library
 * for the stages wanted and printing their copies: said; -1.  Else 0. */
int problem_check_memory(const struct problem *p, unsigned wanted, int f32);

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

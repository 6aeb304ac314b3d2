/*
 * forward.h: the forward run of a loaded problem with the steps asked for
 * kept (forward.c): each sequence's steps titled and in the order of the
 * computation (step_items), ready for any writer, the program's or the
 * engine's callers'.  What mha forward prints is made here; how it is
 * written is the program's.
 */
#ifndef MHA_ENGINE_FORWARD_H
#define MHA_ENGINE_FORWARD_H

#include <stddef.h>

#include "load/problem.h"
#include "run/steps.h"
#include "util/matrix.h"

#include "mha.h"

/* What is asked of the run. */
struct forward_ask {
	const char *hint;          /* the command whose help a usage error points to */
	unsigned print;            /* STEP_BIT()s of --print's steps */
	int print_all;             /* --print all */
	int every;                 /* every step the run has (--explain, a page) */
	int f32;                   /* --dtype f32 */
	int cell;                  /* --cell's own print set below, kept apart too */
	unsigned cell_print;
	int cell_print_all;
};

/* What the run made: B sequences' steps. */
struct forward_run {
	size_t B;
	struct step_results *res;   /* [B] the observer's copies */
	struct step_items *lists;   /* [B] the steps asked for, titled */
	struct step_items *printed; /* [B] --cell's print set's, or NULL */
	matrix *x, *outs;           /* [B] views of X and of the output */
	struct step_facts f;        /* the run's facts (its scale known) */
	struct step_facts *fs;      /* [B] each sequence's (its own key length) */
	mha_config *cfgs;           /* [B] */
	matrix out;
	matrix x_typed;             /* X rounded to the low-precision reference's type,
				       as it computes with it; empty in float64 */
	mha_report rep;
};

/*
 * The forward of pb, the steps asked kept, into fr (zeroed here;
 * forward_steps_free after, whatever it returned): 0; EXIT_USAGE for a
 * step this run does not have (said, a usage error of ask->hint); EXIT_DATA
 * when the run fails (said).
 */
int forward_steps(struct forward_run *fr, const struct problem *pb, const struct forward_ask *ask);
void forward_steps_free(struct forward_run *fr);

#endif

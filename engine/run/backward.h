/*
 * backward.h: the backward pass of a loaded problem with the steps asked
 * for kept (backward.c), as forward.h's forward: --print's names of
 * backward's steps read, the memory the run needs checked, mha_backward
 * watched, and each sequence's steps titled (step_items) for any writer,
 * the program's or the engine's callers'.
 */
#ifndef MHA_ENGINE_BACKWARD_H
#define MHA_ENGINE_BACKWARD_H

#include <stddef.h>

#include "load/problem.h"
#include "run/grads.h"
#include "run/steps.h"
#include "util/matrix.h"

#include "mha.h"

#define GS_BIT(s) (1ull << (s))

/* What is asked of the run. */
struct backward_ask {
	const char *hint;          /* the command whose help a usage error points to */
	const char *print;         /* --print's names as given, or NULL: the defaults */
	int explain;               /* --explain: every step, and the cell's stages */
	int has_cell;              /* --cell: the stages that work dS by hand */
	size_t sequence;           /* --sequence N, or 0 */
	int f32;                   /* --dtype f32: the gradients alone, as floats */
};

/*
 * --print's names (ask->print, any case; "heads", "all") as the steps of
 * backward (GS_BIT()s) for a problem of spec s; the defaults (the
 * gradients of what was given) without: 0 with *asked and *all set, or -1
 * said (a usage error of ask->hint, the nearest name suggested).
 */
int backward_steps_asked(const struct backward_ask *ask, const struct problem_spec *s,
			 unsigned long long *asked, int *all);

/* What the run made: B sequences' steps. */
struct backward_run {
	size_t B;
	struct step_results *keep;  /* [B] the observer's copies */
	struct step_items *lists;   /* [B] the steps asked for, titled */
	matrix *res;                /* [B * GS_COUNT] views of the gradients */
	matrix dout;                /* --grad-output as read */
	struct run_grads gr;
	struct step_facts facts;    /* the run's facts (its scale known) */
	mha_report rep;
};

/*
 * The backward pass of p, the steps asked (backward_steps_asked's) kept, into br
 * (zeroed here; backward_steps_free after, whatever it returned): 0, or
 * -1 said (the memory past the limit, an overflow, the library's refusal).
 */
int backward_steps(struct backward_run *br, struct problem *p, const struct backward_ask *ask,
		   unsigned long long asked);
void backward_steps_free(struct backward_run *br);

#endif

/*
 * report.h: a comparison's report (report.c), as 'mha compare' prints it and the engine
 * hands it to other fronts (mhe_run_report): the table, or JSON.
 */
#ifndef MHA_ENGINE_REPORT_H
#define MHA_ENGINE_REPORT_H

#include <stdio.h>

#include "compare/compare.h"

struct report {
	const char *against;
	const struct against *a;
	const struct set *mine;
	const struct stat *st;  /* [C_COUNT] */
	const struct labels *l;
	const struct tol *tol;
	int f32;
	int precision;          /* --dtype bf16 or fp16: an mha_precision, or 0 */
	size_t sequence;        /* --sequence N, or 0 */
	int first;              /* the first differing step, or -1 */
	int looks_lowp;         /* comparison's looks_lowp: their numbers all of a low type */
	const struct diagnosis *dg;
	int grads;              /* backward's steps compared */
	const char *dout_from;  /* where dO came from: "--grad-output FILE", their "dO",
				   or NULL: all ones */
};

void report_text(FILE *fp, const struct report *r);
void report_json(FILE *fp, const struct report *r);

#endif

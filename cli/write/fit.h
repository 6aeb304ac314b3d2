/*
 * fit.h: what people read, kept to a size they can read.  Before a
 * picture, a page or text is written: every matrix cut to the queries and
 * keys --rows and --cols keep (their labels too, or the positions they
 * had when there are none), then the output's size estimated from its
 * cells and refused past a limit unless --force, with the estimate and the
 * ways to shrink it.  JSON, CSV, .npy and .npz are never cut nor refused.
 *
 * The limits, documented in the man page (OUTPUT):
 */
#ifndef MHA_CLI_FIT_H
#define MHA_CLI_FIT_H

#include "load/problem.h"
#include "run/steps.h"
#include "write/write.h"

#define FIT_TEXT_LIMIT ((double)(4u << 20))  /* text, Markdown, the terminal heatmap, --explain */
#define FIT_SVG_LIMIT ((double)(32u << 20))  /* an SVG picture */
#define FIT_PAGE_LIMIT ((double)(64u << 20)) /* the interactive page */

/* What the command line asks of the outputs people read (in struct emit). */
struct fit_ask {
	/* --rows, --cols: the queries and keys (0-based [first, end) of n_q, n_kv)
	 * every matrix printed or drawn keeps, when cut */
	size_t rows[2], cols[2], n_q, n_kv;
	int cut;
	int force;   /* --force: no size refused */
};

enum fit_kind { FIT_ITEMS, FIT_EXPLAIN, FIT_PAGE };

/* The output about to be written: its format and what the writers draw. */
struct fit_out {
	enum fit_kind kind;  /* its items, --explain's walk-through, or the page */
	out_format format;
	int precision;
	int heat_step;       /* the step a picture draws (its per-head items) */
	size_t head;         /* --head: the one head drawn, or 0 */
	int full;            /* --full: text whole, a terminal heatmap unpooled */
	size_t width;        /* a terminal heatmap's columns (0: no limit) */
	int pool;            /* a picture's --pool (pool.h): POOL_NONE or its rule */
	size_t pool_k;
	/* the page: its size from what it is to hold (html_size), with ctx */
	double (*page_size)(const void *ctx, const struct step_items *lists,
			    const struct labels *l);
	const void *page_ctx;
};

/* What is about to be written: the items and labels to write (cut or not). */
struct fit {
	const struct step_items *lists; /* batch or 1 of them */
	const struct labels *labels;
	/* owned when cut: */
	struct step_items *cut;
	size_t n_cut;
	matrix *mats;
	size_t n_mats;
	struct labels own;
	/* positions as labels ("5", "6", …) for an axis cut that had none: queries, keys */
	char **numbers[2];
	size_t n_numbers[2];
};

/*
 * lists and l as a's --rows and --cols cut them, into f (f->lists, f->labels
 * what to write), and refused when the output o would pass its limit
 * without --force.  0, or -1 said (f freed).
 */
int fit_output(struct fit *f, const struct fit_ask *a, const struct fit_out *o,
	       const struct step_items *lists, size_t batch, const struct labels *l);
void fit_free(struct fit *f);

#endif

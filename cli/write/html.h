/*
 * html.h: -o attn.html (--format html): one self-contained page per run.
 * The page's script and style (cli/write/html/page.*, embedded at build time)
 * draw every head's attention as heatmaps and as BertViz-like lines and
 * narrate any cell as --explain --cell would, from the intermediates this
 * file embeds as JSON.  The page references no URL; nothing from the data
 * can end the script element or become markup (see html.c).
 */
#ifndef MHA_CLI_HTML_H
#define MHA_CLI_HTML_H

#include <stdio.h>

#include "run/meta.h"
#include "load/problem.h"
#include "run/steps.h"

struct html_run {
	const struct step_items *lists; /* [batch ? batch : 1]: every step (steps_every) */
	size_t batch;                   /* sequences, 0 for 2-D inputs */
	const struct step_facts *f;     /* [batch ? batch : 1]: each sequence's facts */
	const struct labels *labels;
	const struct run_meta *meta;
	int precision;                  /* significant digits of the page's numbers */
	int step;                       /* enum step_id: the step shown first */
	int f32;                        /* --dtype f32: the page shows float64's steps */
	/* the colours' scale and the head the page starts on, from --range and
	 * --head; the page has its own controls for both */
	enum html_range { HTML_RANGE_DEFAULT, /* softmax 0 to 1, another step the values shown */
			  HTML_RANGE_AUTO,    /* the values shown */
			  HTML_RANGE_FIXED    /* range_lo to range_hi */
	} range;
	double range_lo, range_hi;      /* HTML_RANGE_FIXED: finite, lo < hi */
	size_t head;                    /* the head shown first (from 1); 0: all side by side */
	/* --rows: the queries the lists hold, [first_row, first_row + n_rows) of the
	 * run's (n_rows 0: all of them); the page numbers them as the run does */
	size_t first_row, n_rows;
	/* --cols, the overview's only: the keys they hold, the same way */
	size_t first_col, n_cols;
	/* --pool: the overview, each step the page draws in blocks of pool_k
	 * (0: pool.h's auto side) by its enum pool_rule, 0 for every cell */
	int pool;
	size_t pool_k;
};

/* the page's bytes, about (the size fit.h checks before it is written) */
double html_size(const struct html_run *r);

/* The page onto fp.  0, or -1 when out of memory (said); a write error is
 * left in ferror(fp) for the caller, who knows the file's name. */
int html_write(FILE *fp, const struct html_run *r);

#endif

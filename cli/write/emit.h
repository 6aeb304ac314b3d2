/*
 * emit.h: where results go and in what format: standard output, a file
 * (written whole or not at all: outfile.h) or a directory of one file per
 * matrix, the format given or told by the file's name.  Shared by every
 * command that writes ('mha forward', 'mha heatmap', 'mha init').
 */
#ifndef MHA_CLI_EMIT_H
#define MHA_CLI_EMIT_H

#include "write/fit.h"
#include "write/heatmap.h"
#include "write/pool.h"
#include "run/meta.h"
#include "base/outfile.h"
#include "load/problem.h"
#include "run/steps.h"
#include "write/write.h"

/* The formats --format takes, "text, json, ... or html", from the one table
 * of their names (pictures 0: those a command that draws nothing writes,
 * no heatmap, svg or html), into buf. */
const char *emit_format_list(int pictures, char *buf, size_t size);
/* The format --format names ("md" is markdown); 0, or -1 when none. */
int emit_format_by_name(const char *name, out_format *format);
/* The format a file's name says by its extension, as the readers see it
 * (file_extension: x.json, x.CSV, x.npy, x.md, x.markdown, x.svg, x.html, and .json
 * alone too), or FORMAT_TEXT when it says none. */
out_format emit_format_of_name(const char *path);
/* Without --format: a directory is CSV, else the name says (text if not). */
out_format emit_format_of_output(const char *path);
/* Whether -o path says what to write without --format: a directory, '-',
 * no extension, or one of .json .csv .npy .md .markdown .svg .html .htm .txt .text
 * (0 for hm.png, which mha would fill with text). */
int emit_known_name(const char *path);
/* A path naming a directory to fill: an existing one, or a name ending in '/'. */
int emit_is_dir(const char *path);
/* The extension of a directory's files in format: "csv", "npy", else "json". */
const char *emit_dir_ext(out_format format);
/* mkdir dir, unless it exists; *made (if not NULL) says whether this did.
 * 0, or -1 said. */
int emit_make_dir(const char *dir, int *made);
/* "dir/name" (one '/' between them), from malloc; NULL when out of memory. */
char *emit_path(const char *dir, const char *name);

/* How and where a command writes its items. */
struct emit {
	const char *output;  /* -o: a file, a directory (emit_is_dir), or NULL or "-": stdout */
	int html_f32;        /* html: --dtype f32 was asked for; the page shows float64's
				steps (heat_step: the step it shows first) */
	out_format format;
	int precision;       /* text, markdown and the heatmaps' legends */
	int full;            /* --full: text and Markdown tables whole (else summarised
				past 1000 entries, as NumPy prints), a terminal heatmap's
				keys each its own cell (else pooled to fit the width) */
	int color;           /* heatmap: -1 never, 0 auto, 1 always */
	int heat_step;       /* heatmap and svg: the step drawn (its per-head items) */
	struct heat_range range; /* --range: the colours' scale of every picture (heatmap,
				    svg, and the HTML page): see heatmap.h */
	size_t head;         /* --head N: the pictures draw head N alone (from 1); 0: all */
	int compress;        /* npz: --compress, members deflated (np.savez_compressed) */
	int bare_nonfinite;  /* JSON: --json-nonfinite python, NaN and ±Infinity bare */
	struct fit_ask fit;  /* --rows, --cols, --force (fit.h) */
	int pool;            /* heatmap and svg: --pool's enum pool_rule (pool.h) */
	size_t pool_k;       /* its block side, 0: the fewest within POOL_SIDE cells */
};

/*
 * The items, labelled, to where e says, in its format: one stream, one
 * file per item (a directory, with meta.json), a .npy file or a heatmap.
 * JSON, CSV and directories hold every item under its key; text and
 * Markdown fold exact copies into a line saying which they repeat, and a
 * .npy file takes one item but for its copies.  JSON starts with meta's
 * object.  A batch (batch > 0): lists holds one list per sequence, the
 * same items in each; JSON, .npy and directories give each matrix a leading
 * batch dimension, text, CSV, Markdown and heatmaps write each sequence
 * under a heading "sequence 2 of 3".  batch 0: lists is one list, as ever.
 * 0, or -1 said.
 */
int emit_items(const struct emit *e, const struct step_items *lists, size_t batch,
	       const struct labels *l, const struct run_meta *meta);
/* What emit_explain() tells. */
struct explain_ask {
	const size_t *cell;    /* --cell: the query and key (0-based), or NULL */
	int cell_alone;        /* --cell without --explain: the cell's hand computation
				  alone, after the printed steps if any */
	const struct step_items *printed; /* with cell_alone: the steps --print named, one
					     list per sequence, written first; or NULL */
	const struct run_meta *meta;      /* for printed */
};

/* --explain's walk-through of the items (explain_steps) to e's output, or
 * --cell's hand computation alone; a batch, each sequence under its heading
 * (f: one per sequence). */
int emit_explain(const struct emit *e, const struct step_items *lists, size_t batch,
		 const struct step_facts *f, const struct labels *l, const struct explain_ask *ask);
/*
 * mha backward --explain: lists[b] is sequence b's items (of grad_steps[]),
 * keep[b] its heads' steps; ask->cell the query and key (0-based) whose dS
 * each head works by hand, or NULL; ask->cell_alone: only that, after the
 * items as plain text when ask->printed.  0, or -1 said.
 */
int emit_explain_backward(const struct emit *e, const struct step_items *lists, size_t batch,
			  const struct step_results *keep, const struct labels *l,
			  const struct explain_ask *ask);
/* -o attn.html: the interactive page (html.h) of every sequence's steps
 * (steps_every), f one per sequence.  0, or -1 said. */

int emit_html(const struct emit *e, const struct step_items *lists, size_t batch,
	      const struct step_facts *f, const struct labels *l, const struct run_meta *meta);

#endif

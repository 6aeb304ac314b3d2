/*
 * emit.c: results to standard output, a file or a directory (emit.h), in
 * the format asked for or the one the file's name says.
 */
#include "write/emit.h"

#include "base/cli.h"
#include "write/explain.h"
#include "write/heatmap.h"
#include "write/html.h"
#include "read/input.h"
#include "util/text.h"
#include "write/archive.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h> /* TIOCGWINSZ */
#include <sys/stat.h> /* mkdir */
#include <unistd.h>

/* ---- names and places ---------------------------------------------------- */

static const struct { const char *name; out_format format; } format_names[] = {
	{ "text", FORMAT_TEXT }, { "json", FORMAT_JSON }, { "csv", FORMAT_CSV },
	{ "markdown", FORMAT_MARKDOWN }, { "md", FORMAT_MARKDOWN }, { "npy", FORMAT_NPY },
	{ "npz", FORMAT_NPZ }, { "heatmap", FORMAT_HEATMAP }, { "svg", FORMAT_SVG },
	{ "html", FORMAT_HTML },
};

const char *emit_format_list(int pictures, char *buf, size_t size)
{
	const char *names[sizeof(format_names) / sizeof(format_names[0])];
	size_t n = 0, at = 0;

	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++) {
		const out_format f = format_names[i].format;

		/* one name a format ("md" is markdown's other), pictures and pages if asked */
		if ((i && format_names[i - 1].format == f) ||
		    (!pictures && (f == FORMAT_HEATMAP || f == FORMAT_SVG || f == FORMAT_HTML)))
			continue;
		names[n++] = format_names[i].name;
	}
	buf[0] = '\0';
	for (size_t i = 0; i < n && at < size; i++) {
		const int k = snprintf(buf + at, size - at, "%s%s", i == 0 ? "" : i + 1 == n ? " or " :
				       ", ", names[i]);

		at += k > 0 ? (size_t)k : 0;
	}
	return buf;
}

int emit_format_by_name(const char *name, out_format *format)
{
	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++)
		if (!strcmp(name, format_names[i].name)) {
			*format = format_names[i].format;
			return 0;
		}
	return -1;
}

/* the extensions mha writes, and what it writes under each; "" (no
 * extension) is text too */
static const struct { const char *ext; out_format format; } ext_names[] = {
	{ "json", FORMAT_JSON }, { "csv", FORMAT_CSV }, { "npy", FORMAT_NPY },
	{ "npz", FORMAT_NPZ }, { "md", FORMAT_MARKDOWN }, { "markdown", FORMAT_MARKDOWN }, { "svg", FORMAT_SVG },
	{ "txt", FORMAT_TEXT }, { "text", FORMAT_TEXT }, { "", FORMAT_TEXT },
	{ "html", FORMAT_HTML }, { "htm", FORMAT_HTML },
};

/* 1 and *format set when the name's extension is one mha writes */
static int format_of_ext(const char *path, out_format *format)
{
	char ext[16];

	/* as the readers tell a file's format by its name (input.h) */
	file_extension(path, ext, sizeof(ext));
	for (size_t i = 0; i < sizeof(ext_names) / sizeof(ext_names[0]); i++)
		if (!strcmp(ext, ext_names[i].ext)) {
			*format = ext_names[i].format;
			return 1;
		}
	return 0;
}

out_format emit_format_of_name(const char *path)
{
	out_format f = FORMAT_TEXT;

	format_of_ext(path, &f);
	return f;
}

int emit_known_name(const char *path)
{
	out_format f;

	return emit_is_dir(path) || !strcmp(path, "-") || format_of_ext(path, &f);
}

int emit_is_dir(const char *path)
{
	const size_t n = strlen(path);

	/* "dir/" names one to be made; "-" is standard output, never a folder */
	return (n && path[n - 1] == '/') || is_dir(path);
}

out_format emit_format_of_output(const char *path)
{
	return emit_is_dir(path) ? FORMAT_CSV : emit_format_of_name(path);
}

const char *emit_dir_ext(out_format format)
{
	return format == FORMAT_NPY ? "npy" : format == FORMAT_CSV ? "csv" : "json";
}

int emit_make_dir(const char *dir, int *made)
{
	const int ok = mkdir(dir, 0777) == 0;

	if (made)
		*made = ok;
	if (!ok && errno != EEXIST)
		return error("%s: cannot create the directory: %s", dir, strerror(errno));
	return 0;
}

char *emit_path(const char *dir, const char *name)
{
	const size_t n = strlen(dir), size = n + 1 + strlen(name) + 1;
	char *path = malloc(size);

	if (path)
		snprintf(path, size, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
	return path;
}

/* ---- writing ---------------------------------------------------------------- */

static const char *const *axis_labels(const struct labels *l, enum step_axis a)
{
	return a == AXIS_QUERY ? (const char *const *)l->query
	       : a == AXIS_KEY ? (const char *const *)l->key : NULL;
}

/* JSON: the labels as a top-level "tokens" (and "kv_tokens" when they differ) */
static void json_tokens(writer *wr, const char *key, char **t, size_t n)
{
	fputs(wr->need_comma ? ",\n  \"" : "\n  \"", wr->fp);
	fputs(key, wr->fp);
	fputs("\": [", wr->fp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputs(", ", wr->fp);
		text_put_json(wr->fp, t[i]); /* valid UTF-8 whatever the label holds */
	}
	fputc(']', wr->fp);
	wr->need_comma = 1;
}

/* text and Markdown, for reading, show a copy as a line, not again in full */
static int folds(out_format format)
{
	return format == FORMAT_TEXT || format == FORMAT_MARKDOWN;
}

/* "sequence 2 of 3": a batch's heading, into buf */
static const char *sequence_title(char *buf, size_t size, size_t b, size_t batch)
{
	snprintf(buf, size, "sequence %zu of %zu", b + 1, batch);
	return buf;
}

/* One list's items, its heads nested (JSON) or folded (text); a JSON
 * batch (batch > 0) item by item from every list of all.  0, or -1 said. */
static int write_list(writer *wr, const struct step_items *list, const struct labels *l,
		      const struct step_items *all, size_t batch)
{
	const matrix **parts = NULL;
	size_t head = 0;
	char note[600];

	if (batch && wr->format == FORMAT_JSON && !(parts = calloc(batch, sizeof(*parts))))
		return error("out of memory");
	for (size_t i = 0; i < list->n;) {
		const struct step_item *it = &list->v[i];

		if (it->head != head) {
			if (head)
				out_head_end(wr);
			else
				out_heads_begin(wr);
			if (it->head)
				out_head_begin(wr, it->head - 1);
			else
				out_heads_end(wr);
			head = it->head;
		}
		if (it->copy_of >= 0 && folds(wr->format)) {
			out_note(wr, steps_fold_note(note, sizeof(note), list, &i));
			continue;
		}
		wr->row_labels = axis_labels(l, it->rows);
		wr->col_labels = axis_labels(l, it->cols);
		if (parts) {
			/* JSON: item i of every sequence, under one key */
			for (size_t b = 0; b < batch; b++)
				parts[b] = all[b].v[i].m;
			out_matrix_batch(wr, it->key, parts, batch);
		} else {
			out_matrix(wr, it->key, it->title, it->m);
		}
		wr->row_labels = wr->col_labels = NULL;
		i++;
	}
	if (head) {
		out_head_end(wr);
		out_heads_end(wr);
	}
	free(parts);
	return 0;
}

/*
 * One stream (standard output or a file) in text, JSON, CSV or Markdown.
 * A batch (batch > 0 lists): JSON nests each matrix in a leading batch
 * dimension; the others write each sequence under a heading.
 */
static int write_stream(writer *wr, const struct step_items *lists, size_t batch,
			const struct labels *l, const struct run_meta *meta)
{
	char title[64];

	wr->single = !batch && lists[0].n == 1;
	out_begin(wr);
	if (wr->format == FORMAT_JSON) {
		fputs("\n  \"meta\": ", wr->fp);
		meta_write_json(wr->fp, meta, 1);
		wr->need_comma = 1;
	}
	if (wr->format == FORMAT_JSON && l->query)
		json_tokens(wr, "tokens", l->query, l->n_query);
	if (wr->format == FORMAT_JSON && l->key && l->key != l->query)
		json_tokens(wr, "kv_tokens", l->key, l->n_key);
	if (!batch || wr->format == FORMAT_JSON) {
		if (write_list(wr, &lists[0], l, lists, batch))
			return -1;
	} else {
		for (size_t b = 0; b < batch; b++) {
			out_section(wr, sequence_title(title, sizeof(title), b, batch));
			if (write_list(wr, &lists[b], l, lists, 0))
				return -1;
		}
	}
	out_end(wr);
	return 0;
}

/* One matrix into a file of its own in dir: a JSON array, CSV or .npy; or,
 * m NULL, meta.json, how the run was made.  batch > 0: parts, one matrix
 * per sequence, as one array with a leading batch dimension (m unused but
 * for not being NULL). */
/* one file of -o DIR/, written into the set (committed as one) */
static int write_one(outset *set, const char *dir, const char *name, out_format format,
		     const matrix *m, const matrix *const *parts, size_t batch,
		     const struct run_meta *meta)
{
	char *path = emit_path(dir, name);
	outfile *of;

	if (!path)
		return error("out of memory");
	of = outset_open(set, path);
	free(path); /* the outfile keeps its own copy */
	if (!of)
		return -1;
	/* a failed write leaves the stream in error, which the commit reports */
	if (!m) {
		meta_write_json(of->fp, meta, 0);
		fputc('\n', of->fp);
	} else if (format == FORMAT_NPY) {
		(void)(batch ? npy_write_batch(of->fp, parts, batch) : npy_write(of->fp, m));
	} else if (format == FORMAT_CSV) {
		/* a batch: each sequence's matrix after the one before */
		for (size_t b = 0; b < (batch ? batch : 1); b++)
			(void)csv_write(of->fp, batch ? parts[b] : m);
	} else {
		writer wr = { .fp = of->fp, .format = FORMAT_JSON };

		(void)(batch ? json_write_batch(&wr, parts, batch) : json_write_array(&wr, m));
	}
	return outset_finish(set, of);
}

/* -o DIR/: one file per matrix, named after its key (head1_scores.csv),
 * and meta.json; all of them or, after a failure, none (outset). */
static int write_directory(const char *dir, out_format format, const struct step_items *lists,
			   size_t batch, const struct run_meta *meta)
{
	const struct step_items *list = &lists[0];
	const char *ext = emit_dir_ext(format);
	const matrix **parts = calloc(batch ? batch : 1, sizeof(*parts));
	outset set = { 0 };
	char name[256];
	int rc = -1;

	if (!parts)
		return error("out of memory");

	if (format != FORMAT_NPY && format != FORMAT_CSV && format != FORMAT_JSON) {
		free(parts);
		return error("-o %s: a directory takes one file per matrix: use --format csv, npy "
			     "or json (or name a file)", dir);
	}
	if (emit_make_dir(dir, NULL) || write_one(&set, dir, "meta.json", format, NULL, NULL, 0, meta))
		goto done;
	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];
		const matrix *m = it->m;

		if (format == FORMAT_CSV && m->rank == 3) {
			/* CSV holds 2-D: a per-head mask becomes one file per head */
			for (size_t h = 0; h < m->dim[0]; h++) {
				const matrix part = step_plane(m, h);
				matrix *planes = calloc(batch ? batch : 1, sizeof(*planes));

				if (!planes) {
					error("out of memory");
					goto done;
				}
				/* a batch: that head's plane of each sequence, one after another */
				for (size_t b = 0; b < batch; b++) {
					planes[b] = step_plane(lists[b].v[i].m, h);
					parts[b] = &planes[b];
				}
				step_file_name(name, sizeof(name), it->key, 0, h + 1, ext);
				rc = write_one(&set, dir, name, format, &part, parts, batch, NULL);
				free(planes);
				if (rc)
					goto done;
				rc = -1;
			}
			continue;
		}
		for (size_t b = 0; b < batch; b++)
			parts[b] = lists[b].v[i].m;
		step_file_name(name, sizeof(name), it->key, it->head, 0, ext);
		if (write_one(&set, dir, name, format, m, parts, batch, NULL))
			goto done;
	}
	rc = outset_commit(&set);
done:
	outset_abort(&set); /* after a failure: every temporary removed */
	free(parts);
	return rc;
}

/*
 * The columns a terminal heatmap fits in: a terminal's own width (asked of
 * the output), else COLUMNS when it is a whole number from 1, else 80 for a
 * terminal.  Not a terminal and no COLUMNS (a file, a pipe): 0, no limit,
 * every key drawn, since output kept is read whole (less -S scrolls across).
 */
static size_t heat_width(int fd)
{
	const char *env = getenv("COLUMNS");
	const int tty = fd >= 0 && isatty(fd);
	struct winsize ws;

	if (tty && !ioctl(fd, TIOCGWINSZ, &ws) && ws.ws_col)
		return ws.ws_col;
	/* digits only, at most 6 of them: "80", not " 80", "80x" or "-1" */
	if (env && *env && strlen(env) <= 6 && !env[strspn(env, "0123456789")] &&
	    strtoul(env, NULL, 10) > 0)
		return strtoul(env, NULL, 10);
	return tty ? 80 : 0;
}

/* heatmap and svg: a panel per head of the step drawn, the mask beside it */
static int write_heatmaps(const struct emit *o, const struct step_items *list,
			  const struct labels *l, FILE *fp)
{
	const char *step = steps[o->heat_step].name;
	const matrix *mask = NULL;
	struct heat_panel *panels = calloc(list->n ? list->n : 1, sizeof(*panels));
	matrix *planes = calloc(list->n ? list->n : 1, sizeof(*planes));
	size_t n = 0;
	int rc;

	if (!panels || !planes) {
		free(panels);
		free(planes);
		return error("out of memory");
	}
	for (size_t i = 0; i < list->n; i++)
		if (list->v[i].step == STEP_MASK)
			mask = list->v[i].m;
	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];

		if (!it->head || it->step != o->heat_step || (o->head && it->head != o->head))
			continue;
		panels[n].title = it->title;
		panels[n].m = it->m;
		panels[n].step = step;
		panels[n].range = &o->range;
		panels[n].row_labels = axis_labels(l, AXIS_QUERY);
		panels[n].col_labels = axis_labels(l, AXIS_KEY);
		if (mask) {
			/* a per-head mask: this head's plane; before the masked step
			 * it blocks nothing yet, and is only counted for a note */
			planes[n] = step_plane(mask, it->head - 1);
			if (o->heat_step == STEP_MASKED || o->heat_step == STEP_SOFTMAX)
				panels[n].mask = &planes[n];
			else
				panels[n].later_mask = &planes[n];
		}
		n++;
	}
	if (o->pool && n && pool_panels(panels, n, (enum pool_rule)o->pool, o->pool_k)) {
		free(panels);
		free(planes);
		return -1;
	}
	if (o->format == FORMAT_SVG) {
		rc = heatmap_svg(fp, panels, n, o->precision);
	} else {
		struct heat_look look = { .color = HEAT_PLAIN, .precision = o->precision,
					  .width = heat_width(fileno(fp)), .whole = o->full };
		const char *no_color = getenv("NO_COLOR"), *term = getenv("COLORTERM");

		if (o->color > 0 || (o->color == 0 && isatty(fileno(fp)) && !(no_color && *no_color)))
			look.color = term && (!strcmp(term, "truecolor") || !strcmp(term, "24bit"))
					     ? HEAT_TRUECOLOR : HEAT_256;
		rc = heatmap_terminal(fp, panels, n, &look);
	}
	if (o->pool && n)
		pool_panels_free(panels, n);
	free(panels);
	free(planes);
	return rc;
}

static int write_items(const struct emit *o, const struct step_items *lists, size_t batch,
		       const struct labels *labels, const struct run_meta *meta);

int emit_items(const struct emit *o, const struct step_items *lists, size_t batch,
	       const struct labels *labels, const struct run_meta *meta)
{
	struct fit f;
	int rc;

	/* what people read: cut to --rows and --cols, refused past its size */
	if (o->format != FORMAT_TEXT && o->format != FORMAT_MARKDOWN &&
	    o->format != FORMAT_HEATMAP && o->format != FORMAT_SVG)
		return write_items(o, lists, batch, labels, meta);
	if (fit_output(&f, &o->fit, &(struct fit_out){ FIT_ITEMS, o->format, o->precision,
						       o->heat_step, o->head, o->full,
						       heat_width(!o->output || !strcmp(o->output, "-")
								  ? STDOUT_FILENO : -1), o->pool,
						       o->pool_k, NULL, NULL },
		       lists, batch, labels))
		return -1;
	rc = write_items(o, f.lists, batch, f.labels, meta);
	fit_free(&f);
	return rc;
}

static int write_items(const struct emit *o, const struct step_items *lists, size_t batch,
		       const struct labels *labels, const struct run_meta *meta)
{
	const struct step_items *list = &lists[0];
	size_t one = 0, n = 0;
	outfile of;
	int rc = 0;

	if (o->output && strcmp(o->output, "-") && emit_is_dir(o->output))
		return write_directory(o->output, o->format, lists, batch, meta);
	if (o->format == FORMAT_NPY) {
		/* one matrix: its copies (one head's block of Q is Q) are the same */
		for (size_t i = 0; i < list->n; i++)
			if (list->v[i].copy_of < 0) {
				one = i;
				n++;
			}
		if (n != 1)
			return error("--format npy writes one matrix per file, and %zu were asked for: "
				     "give -o DIR/ for one file each, or --print one step", n);
		if ((!o->output || !strcmp(o->output, "-")) && isatty(STDOUT_FILENO))
			return error("--format npy is binary: give -o FILE.npy, or redirect standard output");
	}
	if (o->format == FORMAT_NPZ && (!o->output || !strcmp(o->output, "-")) &&
	    isatty(STDOUT_FILENO))
		return error("--format npz is binary: give -o FILE.npz, or redirect standard output");
	if (outfile_open(&of, o->output))
		return -1;
	if (o->format == FORMAT_NPY && batch) {
		/* a batch: (B, …), item one of each sequence */
		const matrix **parts = calloc(batch, sizeof(*parts));

		if (!parts) {
			outfile_abort(&of);
			return error("out of memory");
		}
		for (size_t b = 0; b < batch; b++)
			parts[b] = lists[b].v[one].m;
		(void)npy_write_batch(of.fp, parts, batch);
		free(parts);
	} else if (o->format == FORMAT_NPY) {
		(void)npy_write(of.fp, list->v[one].m); /* errors: see write_one() */
	} else if (o->format == FORMAT_NPZ) {
		if (emit_write_npz(of.fp, o->compress, lists, batch, labels, meta)) {
			outfile_abort(&of);
			return -1;
		}
	} else if (o->format == FORMAT_HEATMAP || o->format == FORMAT_SVG) {
		/* a batch: each sequence's panels under its heading (svg: one sequence, said before) */
		for (size_t b = 0; b < (batch ? batch : 1) && !rc; b++) {
			if (batch && o->format == FORMAT_HEATMAP)
				fprintf(of.fp, "%ssequence %zu of %zu\n", b ? "\n" : "", b + 1, batch);
			rc = write_heatmaps(o, &lists[b], labels, of.fp);
		}
		if (rc) {
			outfile_abort(&of);
			return -1;
		}
	} else {
		writer wr = { .fp = of.fp, .format = o->format, .precision = o->precision,
			      .full = o->full };

		if (write_stream(&wr, lists, batch, labels, meta)) {
			outfile_abort(&of);
			return -1;
		}
	}
	return outfile_commit(&of);
}

int emit_explain(const struct emit *o, const struct step_items *lists, size_t batch,
		 const struct step_facts *f, const struct labels *l, const struct explain_ask *ask)
{
	struct fit fit;
	outfile of;

	/* refused past its size (never cut: --rows and --cols are refused with it) */
	if (fit_output(&fit, &o->fit, &(struct fit_out){ ask->cell_alone && !ask->printed ? FIT_ITEMS
							 : FIT_EXPLAIN, FORMAT_TEXT, o->precision,
							 o->heat_step, o->head, o->full, 0, 0, 0,
							 NULL, NULL },
		       ask->printed ? ask->printed : lists, batch, l))
		return -1;
	fit_free(&fit);
	if (outfile_open(&of, o->output))
		return -1;
	if (ask->printed) {
		/* --print's steps as text, then the cell */
		writer wr = { .fp = of.fp, .format = FORMAT_TEXT, .precision = o->precision,
			      .full = o->full };

		if (write_stream(&wr, ask->printed, batch, l, ask->meta)) {
			outfile_abort(&of);
			return -1;
		}
		fputc('\n', of.fp);
	}
	for (size_t b = 0; b < (batch ? batch : 1); b++) {
		if (batch) {
			/* a batch: each sequence told in turn, under its heading */
			char title[64];

			sequence_title(title, sizeof(title), b, batch);
			fprintf(of.fp, "%s%s\n", b ? "\n" : "", title);
			for (size_t i = strlen(title); i > 0; i--)
				fputc('=', of.fp);
			fputs("\n\n", of.fp);
		}
		if (explain_steps(of.fp, &lists[b], &f[b], (const char *const *)l->query,
				  (const char *const *)l->key, ask->cell, ask->cell_alone,
				  o->precision, o->full)) {
			outfile_abort(&of);
			return -1;
		}
	}
	return outfile_commit(&of); /* a write error shows in the commit */
}

/* the page's size as fit.h asks it: the run r (struct html_run) holding lists and l */
static double page_size(const void *r, const struct step_items *lists, const struct labels *l)
{
	struct html_run page = *(const struct html_run *)r;

	page.lists = lists;
	page.labels = l;
	return html_size(&page);
}

int emit_html(const struct emit *o, const struct step_items *lists, size_t batch,
	      const struct step_facts *f, const struct labels *l, const struct run_meta *meta)
{
	/* --range and --head: the scale and the head the page starts on */
	const enum html_range range = o->range.mode == HEAT_RANGE_AUTO ? HTML_RANGE_AUTO
				      : o->range.mode == HEAT_RANGE_FIXED ? HTML_RANGE_FIXED
				      : HTML_RANGE_DEFAULT;
	const struct html_run r = { .lists = lists, .batch = batch, .f = f, .labels = l,
				    .meta = meta, .precision = o->precision, .step = o->heat_step,
				    .f32 = o->html_f32, .range = range, .range_lo = o->range.lo,
				    .range_hi = o->range.hi, .head = o->head, .pool = o->pool,
				    .pool_k = o->pool_k };
	struct fit fit;
	struct html_run cut = r;
	struct labels tokens;
	outfile of;
	int rc;

	if (o->output && strcmp(o->output, "-") && emit_is_dir(o->output))
		return error("-o %s: a directory takes one file per matrix; the page is one file: "
			     "name it (-o attn.html)", o->output);
	if (o->fit.cut) {
		/* whole key rows, unless pooled (attn_refuse_cut): each cell's sum is
		 * over every key */
		cut.first_row = o->fit.rows[0];
		cut.n_rows = o->fit.rows[1] - o->fit.rows[0];
		cut.first_col = o->fit.cols[0];
		cut.n_cols = o->fit.cols[1] - o->fit.cols[0];
	}
	if (fit_output(&fit, &o->fit, &(struct fit_out){ FIT_PAGE, o->format, o->precision,
							 o->heat_step, o->head, o->full, 0, o->pool,
							 o->pool_k, page_size, &cut },
		       lists, batch, l))
		return -1;
	cut.lists = fit.lists;
	cut.labels = fit.labels;
	if (o->pool) {
		/* blocks are numbered by the page itself: tokens only, when there are any */
		tokens = *fit.labels;
		if (!l->query)
			tokens.query = NULL;
		if (!l->key)
			tokens.key = NULL;
		cut.labels = &tokens;
	}
	if (outfile_open(&of, o->output)) {
		fit_free(&fit);
		return -1;
	}
	rc = html_write(of.fp, &cut);
	fit_free(&fit);
	if (rc) {
		outfile_abort(&of);
		return -1;
	}
	return outfile_commit(&of); /* a write error shows in the commit */
}

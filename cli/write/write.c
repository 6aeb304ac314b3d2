/*
 * write.c: matrices as text tables, JSON, CSV and Markdown.
 *
 * Text is for reading: each matrix titled with its name and shape, columns
 * right-aligned, --precision significant digits.  JSON is for programs:
 * strict RFC 8259, every number in the shortest form that reads back to
 * the same double, and the non-finite values a mask can hold as strings.
 * CSV keeps the shortest round-trip numbers too, one block per matrix;
 * Markdown makes GitHub tables as the tutorials print them.  Labels and
 * titles go out as text.h shows them, control characters escaped, and are
 * aligned by the columns they take on screen.
 */
#include "write/write.h"
#include "util/number.h"
#include "util/text.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int csv_write(FILE *fp, const matrix *m)
{
	const size_t cols = matrix_cols(m), rows = matrix_size(m) / (cols ? cols : 1);
	char buf[40];

	for (size_t i = 0; i < rows; i++) {
		for (size_t j = 0; j < cols; j++) {
			number_exact(buf, sizeof(buf), m->v[i * cols + j], m->is_f32);
			if (j)
				fputc(',', fp);
			fputs(buf, fp);
		}
		fputc('\n', fp);
	}
	return ferror(fp) ? -1 : 0;
}

static void indent(writer *w)
{
	for (int i = 0; i < w->depth; i++)
		fputs("  ", w->fp);
}

/* JSON: the separator and indentation before a new member or element */
static void next_member(writer *w)
{
	fputs(w->need_comma ? ",\n" : "\n", w->fp);
	indent(w);
	w->need_comma = 1;
}

void out_begin(writer *w)
{
	w->depth = 0;
	w->need_comma = 0;
	w->in_heads = 0;
	w->blocks = 0;
	if (w->format == FORMAT_JSON) {
		fputc('{', w->fp);
		w->depth = 1;
	}
}

void out_end(writer *w)
{
	if (w->format == FORMAT_JSON)
		fputs(w->need_comma ? "\n}\n" : "}\n", w->fp);
}

static void json_rows(writer *w, const double *v, size_t rows, size_t cols, int is_f32)
{
	fputc('[', w->fp);
	for (size_t i = 0; i < rows; i++) {
		fputs(i ? ",\n" : "\n", w->fp);
		indent(w);
		fputs("  [", w->fp);
		for (size_t j = 0; j < cols; j++) {
			if (j)
				fputs(", ", w->fp);
			json_number(w->fp, v[i * cols + j], is_f32);
		}
		fputc(']', w->fp);
	}
	fputc('\n', w->fp);
	indent(w);
	fputc(']', w->fp);
}

static void json_value_out(writer *w, const matrix *m)
{
	if (m->rank == 1) {
		fputc('[', w->fp);
		for (size_t j = 0; j < m->dim[0]; j++) {
			if (j)
				fputs(", ", w->fp);
			json_number(w->fp, m->v[j], m->is_f32);
		}
		fputc(']', w->fp);
	} else if (m->rank == 2) {
		json_rows(w, m->v, m->dim[0], m->dim[1], m->is_f32);
	} else {
		const size_t plane = m->dim[1] * m->dim[2];

		fputc('[', w->fp);
		w->depth++;
		for (size_t h = 0; h < m->dim[0]; h++) {
			fputs(h ? ",\n" : "\n", w->fp);
			indent(w);
			json_rows(w, m->v + h * plane, m->dim[1], m->dim[2], m->is_f32);
		}
		w->depth--;
		fputc('\n', w->fp);
		indent(w);
		fputc(']', w->fp);
	}
}

static void json_matrix_out(writer *w, const char *key, const matrix *m)
{
	next_member(w);
	fprintf(w->fp, "\"%s\": ", key);
	json_value_out(w, m);
}

/* a batch: each sequence's matrix, one level deeper */
static void json_batch_out(writer *w, const matrix *const *parts, size_t n)
{
	fputc('[', w->fp);
	w->depth++;
	for (size_t b = 0; b < n; b++) {
		fputs(b ? ",\n" : "\n", w->fp);
		indent(w);
		json_value_out(w, parts[b]);
	}
	w->depth--;
	fputc('\n', w->fp);
	indent(w);
	fputc(']', w->fp);
}

void out_matrix_batch(writer *w, const char *key, const matrix *const *parts, size_t n)
{
	if (w->format != FORMAT_JSON)
		return;
	next_member(w);
	fprintf(w->fp, "\"%s\": ", key);
	json_batch_out(w, parts, n);
}

int json_write_batch(writer *w, const matrix *const *parts, size_t n)
{
	w->depth = 0;
	json_batch_out(w, parts, n);
	fputc('\n', w->fp);
	return ferror(w->fp) ? -1 : 0;
}

int json_write_array(writer *w, const matrix *m)
{
	w->depth = 0;
	json_value_out(w, m);
	fputc('\n', w->fp);
	return ferror(w->fp) ? -1 : 0;
}

/* s as shown, right-aligned (or left, with left set) in width columns */
static void pad(FILE *fp, const char *s, size_t width, int left)
{
	const size_t n = text_width(s);

	if (left)
		text_put(fp, s);
	for (size_t i = n; i < width; i++)
		fputc(' ', fp);
	if (!left)
		text_put(fp, s);
}

/*
 * A matrix of more than SUMMARY_THRESHOLD entries is summarised as NumPy
 * prints one (np.set_printoptions' threshold=1000 and edgeitems=3): each
 * axis longer than twice SUMMARY_EDGE shows its first and last SUMMARY_EDGE
 * entries around a "...".  Text and Markdown only, and not with --full
 * (writer's full); JSON, CSV and the binary formats always hold everything.
 */
#define SUMMARY_THRESHOLD 1000
#define SUMMARY_EDGE 3
#define SKIPPED SIZE_MAX /* cut_index(): the place of the "..." */

/* one axis of a table as shown: every entry, or both ends around a gap */
struct axis_cut {
	size_t n; /* the axis's length */
	int cut;  /* its middle left out */
};

static void table_cut(const writer *w, size_t rows, size_t cols, struct axis_cut *r,
		      struct axis_cut *c)
{
	const int over = !w->full && rows * cols > SUMMARY_THRESHOLD;

	r->n = rows;
	r->cut = over && rows > 2 * SUMMARY_EDGE;
	c->n = cols;
	c->cut = over && cols > 2 * SUMMARY_EDGE;
}

/* the places an axis shows, its gap one of them */
static size_t cut_places(const struct axis_cut *a)
{
	return a->cut ? 2 * SUMMARY_EDGE + 1 : a->n;
}

/* the entry at place k, or SKIPPED */
static size_t cut_index(const struct axis_cut *a, size_t k)
{
	if (!a->cut || k < SUMMARY_EDGE)
		return k;
	return k == SUMMARY_EDGE ? SKIPPED : a->n - (2 * SUMMARY_EDGE + 1 - k);
}

/* one axis's entries left out, "rows 4 to 37" ("row 4" for one) */
static int cut_range(char *buf, size_t size, const char *what, const struct axis_cut *a)
{
	const size_t last = a->n - SUMMARY_EDGE;

	return last == SUMMARY_EDGE + 1 ? snprintf(buf, size, "%s %zu", what, last)
		: snprintf(buf, size, "%ss %d to %zu", what, SUMMARY_EDGE + 1, last);
}

/* "rows 4 to 37 and columns 4 to 37 not shown: --full prints every entry" */
static const char *cut_note(char *buf, size_t size, const struct axis_cut *r,
			    const struct axis_cut *c)
{
	int n = 0;

	if (r->cut)
		n = cut_range(buf, size, "row", r);
	if (c->cut && n >= 0 && (size_t)n < size)
		n += snprintf(buf + n, size - (size_t)n, "%s", n ? " and " : "");
	if (c->cut && n >= 0 && (size_t)n < size)
		n += cut_range(buf + n, size - (size_t)n, "column", c);
	if (n >= 0 && (size_t)n < size)
		snprintf(buf + n, size - (size_t)n, " not shown: --full prints every entry");
	return buf;
}

static void text_table(writer *w, const double *v, size_t rows, size_t cols)
{
	const char *const *rl = w->row_labels, *const *cl = w->col_labels;
	struct axis_cut rc, cc;
	size_t nr, nc, *width, lw = 0;
	char buf[64], note[160];

	table_cut(w, rows, cols, &rc, &cc);
	nr = cut_places(&rc);
	nc = cut_places(&cc);
	width = calloc(nc ? nc : 1, sizeof(*width));
	/* two passes: widths first, so each column lines up */
	for (size_t k = 0; rl && k < nr; k++) {
		const size_t i = cut_index(&rc, k), n = i == SKIPPED ? 3 : text_width(rl[i]);

		lw = n > lw ? n : lw;
	}
	for (size_t l = 0; cl && width && l < nc; l++)
		width[l] = cut_index(&cc, l) == SKIPPED ? 3 : text_width(cl[cut_index(&cc, l)]);
	for (size_t k = 0; k < nr; k++)
		for (size_t l = 0; l < nc; l++) {
			const size_t i = cut_index(&rc, k), j = cut_index(&cc, l);
			size_t n = 3;

			if (i != SKIPPED && j != SKIPPED) {
				format_number(buf, sizeof(buf), v[i * cols + j], w->precision);
				n = strlen(buf);
			}
			if (width && n > width[l])
				width[l] = n;
		}
	if (cl) {
		if (rl)
			pad(w->fp, "", lw + 2, 1);
		for (size_t l = 0; l < nc; l++) {
			const size_t j = cut_index(&cc, l);

			fputs("  ", w->fp);
			pad(w->fp, j == SKIPPED ? "..." : cl[j], width ? width[l] : 0, 0);
		}
		fputc('\n', w->fp);
	}
	for (size_t k = 0; k < nr; k++) {
		const size_t i = cut_index(&rc, k);

		if (rl) {
			fputs("  ", w->fp);
			pad(w->fp, i == SKIPPED ? "..." : rl[i], lw, 1);
		}
		for (size_t l = 0; l < nc; l++) {
			const size_t j = cut_index(&cc, l);

			if (i == SKIPPED || j == SKIPPED)
				snprintf(buf, sizeof(buf), "...");
			else
				format_number(buf, sizeof(buf), v[i * cols + j], w->precision);
			fprintf(w->fp, "  %*s", width ? (int)width[l] : 0, buf);
		}
		fputc('\n', w->fp);
	}
	if (rc.cut || cc.cut)
		fprintf(w->fp, "  (%s)\n", cut_note(note, sizeof(note), &rc, &cc));
	free(width);
}

/* Markdown text as shown, with a backslash before each of the characters in special */
static void md_text(FILE *fp, const char *s, const char *special)
{
	struct text_unit u;

	while (text_next(&s, &u)) {
		if (!u.escaped && u.c < 0x80 && strchr(special, (int)u.c))
			fputc('\\', fp);
		fwrite(u.b, 1, u.len, fp);
	}
}

/* a Markdown table cell's text: '|' and '\\' escaped */
static void md_cell(FILE *fp, const char *s)
{
	md_text(fp, s, "|\\");
}

/* a CSV field as shown, quoted when it must be (RFC 4180); a line break is
 * shown as \n, not quoted, so that each row stays one line */
static void csv_field(FILE *fp, const char *s)
{
	struct text_unit u;

	if (!strpbrk(s, ",\"#") && s[0] != ' ' && (!*s || s[strlen(s) - 1] != ' ')) {
		text_put(fp, s);
		return;
	}
	fputc('"', fp);
	while (text_next(&s, &u)) {
		if (u.c == '"')
			fputc('"', fp);
		fwrite(u.b, 1, u.len, fp);
	}
	fputc('"', fp);
}

/* Markdown: a bold title, then a GitHub table with 1-based row and column
 * numbers; summarised as text is, "…" for the entries left out */
static void markdown_matrix_out(writer *w, const char *title, const matrix *m)
{
	const size_t rows = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	const size_t cols = m->dim[m->rank - 1];
	const size_t planes = m->rank == 3 ? m->dim[0] : 1;
	struct axis_cut rc, cc;
	char buf[64], note[160];

	table_cut(w, rows, cols, &rc, &cc);
	for (size_t h = 0; h < planes; h++) {
		const double *v = m->v + h * rows * cols;

		if (w->blocks++)
			fputc('\n', w->fp);
		fputs("**", w->fp);
		md_text(w->fp, title, "*_|\\"); /* literal, not emphasis */
		if (m->rank == 3)
			fprintf(w->fp, ", head %zu", h + 1);
		fprintf(w->fp, "** (%zu×%zu)\n\n|   |", rows, cols);
		for (size_t l = 0; l < cut_places(&cc); l++) {
			const size_t j = cut_index(&cc, l);

			if (j == SKIPPED) {
				fputs(" … |", w->fp);
			} else if (w->col_labels) {
				fputc(' ', w->fp);
				md_cell(w->fp, w->col_labels[j]);
				fputs(" |", w->fp);
			} else {
				fprintf(w->fp, " %zu |", j + 1);
			}
		}
		fputs("\n|---|", w->fp);
		for (size_t l = 0; l < cut_places(&cc); l++)
			fputs("---:|", w->fp);
		fputc('\n', w->fp);
		for (size_t k = 0; k < cut_places(&rc); k++) {
			const size_t i = cut_index(&rc, k);

			if (i == SKIPPED) {
				fputs("| … |", w->fp);
			} else if (w->row_labels) {
				fputs("| **", w->fp);
				md_cell(w->fp, w->row_labels[i]);
				fputs("** |", w->fp);
			} else {
				fprintf(w->fp, "| **%zu** |", i + 1);
			}
			for (size_t l = 0; l < cut_places(&cc); l++) {
				const size_t j = cut_index(&cc, l);
				const double x = i == SKIPPED || j == SKIPPED ? 0 : v[i * cols + j];

				if (i == SKIPPED || j == SKIPPED) {
					fputs(" … |", w->fp);
				} else if (isinf(x)) {
					fputs(x < 0 ? " -∞ |" : " ∞ |", w->fp);
				} else {
					format_number(buf, sizeof(buf), x, w->precision);
					fprintf(w->fp, " %s |", buf);
				}
			}
			fputc('\n', w->fp);
		}
		/* a blank line first: a line right under a table would be its row */
		if (rc.cut || cc.cut)
			fprintf(w->fp, "\n*%s*\n", cut_note(note, sizeof(note), &rc, &cc));
	}
}

/* A block's title, its commas as semicolons: a CSV reader that does not
 * skip "#" lines sees the whole line as one cell ("row by row, head 1"
 * would split in two) */
static void csv_title_put(FILE *fp, const char *title)
{
	char buf[256];
	size_t n = 0;

	for (const char *p = title;; p++) {
		if (!*p || n + 1 == sizeof(buf)) {
			buf[n] = '\0';
			text_put(fp, buf);
			n = 0;
			if (!*p)
				break;
		}
		buf[n++] = *p == ',' ? ';' : *p;
	}
}

/* CSV: plain rows for one matrix; several are blocks, each after a "# title" line */
static void csv_matrix_out(writer *w, const char *key, const char *title, const matrix *m)
{
	if (!w->single) {
		if (w->blocks)
			fputc('\n', w->fp);
		/* the name is the file name -o DIR/ would give it, to split on */
		if (w->head)
			fprintf(w->fp, "# head%zu_%s: ", w->head, key);
		else if (strcmp(key, title))
			fprintf(w->fp, "# %s: ", key);
		else
			fputs("# ", w->fp);
		csv_title_put(w->fp, title);
		fputs(" (", w->fp);
		for (size_t r = 0; r < m->rank; r++)
			fprintf(w->fp, "%s%zu", r ? "x" : "", m->dim[r]);
		fputs(")\n", w->fp);
	}
	w->blocks++;
	if (!w->row_labels && !w->col_labels) {
		csv_write(w->fp, m);
		return;
	}
	{
		/* labels: a header row of the columns' and a first column of the rows' */
		const size_t cols = matrix_cols(m), rows = matrix_size(m) / (cols ? cols : 1);
		const size_t per = m->rank == 3 ? m->dim[1] : rows;
		char buf[40];

		if (w->col_labels) {
			if (w->row_labels)
				fputs("token", w->fp);
			for (size_t j = 0; j < cols; j++) {
				if (j || w->row_labels)
					fputc(',', w->fp);
				csv_field(w->fp, w->col_labels[j]);
			}
			fputc('\n', w->fp);
		}
		for (size_t i = 0; i < rows; i++) {
			if (w->row_labels) {
				csv_field(w->fp, w->row_labels[i % per]);
				fputc(',', w->fp);
			}
			for (size_t j = 0; j < cols; j++) {
				number_exact(buf, sizeof(buf), m->v[i * cols + j], m->is_f32);
				if (j)
					fputc(',', w->fp);
				fputs(buf, w->fp);
			}
			fputc('\n', w->fp);
		}
	}
}

static void text_matrix_out(writer *w, const char *title, const matrix *m)
{
	const size_t rows = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	const size_t cols = m->dim[m->rank - 1];
	const size_t planes = m->rank == 3 ? m->dim[0] : 1;

	for (size_t h = 0; h < planes; h++) {
		if (w->blocks++)
			fputc('\n', w->fp);
		if (!w->no_title) {
			text_put(w->fp, title);
			if (m->rank == 3)
				fprintf(w->fp, ", head %zu", h + 1);
			fprintf(w->fp, " (%zux%zu)\n", rows, cols);
		}
		text_table(w, m->v + h * rows * cols, rows, cols);
	}
}

void out_matrix(writer *w, const char *key, const char *title, const matrix *m)
{
	switch (w->format) {
	case FORMAT_JSON: json_matrix_out(w, key, m); break;
	case FORMAT_CSV: csv_matrix_out(w, key, title, m); break;
	case FORMAT_MARKDOWN: markdown_matrix_out(w, title, m); break;
	default: text_matrix_out(w, title, m); break;
	}
}

void out_section(writer *w, const char *title)
{
	if (w->format == FORMAT_JSON)
		return;
	if (w->blocks++)
		fputc('\n', w->fp);
	if (w->format == FORMAT_MARKDOWN) {
		fputs("## ", w->fp);
		md_text(w->fp, title, "*_|\\#");
		fputc('\n', w->fp);
	} else if (w->format == FORMAT_CSV) {
		fputs("# ", w->fp);
		csv_title_put(w->fp, title);
		fputc('\n', w->fp);
		w->blocks = 0; /* the sequence's first matrix follows its heading directly */
	} else {
		text_put(w->fp, title);
		fputc('\n', w->fp);
		for (size_t i = strlen(title); i > 0; i--)
			fputc('=', w->fp);
		fputc('\n', w->fp);
	}
}

void out_note(writer *w, const char *line)
{
	if (w->format != FORMAT_TEXT && w->format != FORMAT_MARKDOWN)
		return;
	if (w->blocks++)
		fputc('\n', w->fp);
	if (w->format == FORMAT_MARKDOWN) {
		fputc('*', w->fp);
		md_text(w->fp, line, "*_|\\"); /* literal, inside the emphasis */
		fputs("*\n", w->fp);
	} else {
		text_put(w->fp, line);
		fputc('\n', w->fp);
	}
}

void out_heads_begin(writer *w)
{
	if (w->format != FORMAT_JSON)
		return;
	next_member(w);
	fputs("\"heads\": [", w->fp);
	w->depth++;
	w->need_comma = 0;
	w->in_heads = 1;
}

void out_head_begin(writer *w, size_t head)
{
	w->head = head + 1;
	if (w->format != FORMAT_JSON)
		return;
	next_member(w);
	fputc('{', w->fp);
	w->depth++;
	w->need_comma = 0;
}

void out_head_end(writer *w)
{
	w->head = 0;
	if (w->format != FORMAT_JSON)
		return;
	w->depth--;
	fputc('\n', w->fp);
	indent(w);
	fputc('}', w->fp);
	w->need_comma = 1;
}

void out_heads_end(writer *w)
{
	if (w->format != FORMAT_JSON)
		return;
	w->depth--;
	fputc('\n', w->fp);
	indent(w);
	fputc(']', w->fp);
	w->need_comma = 1;
	w->in_heads = 0;
}

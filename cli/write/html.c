/*
 * html.c: the interactive page (html.h).  This file writes the page's
 * frame, its style and script (cli/write/html/page.css, page.html, page.js,
 * turned into C strings at build time by cli/write/html/embed.sh) and the run's
 * data as one JSON object in a <script type="application/json"> element.
 *
 * The data: each head's Q, K and V blocks, its scores, softcapped values,
 * mask and softmax as float64 bits in base64 (exact, and about half the
 * size of decimal text); scaled and masked are re-derived by the script as
 * the library made them (scores * scale; -inf where the mask is -inf, else
 * value + mask: lib/base/rules.h), so a 200-token, 8-head page stays near 7 MB.
 * Labels are embedded as text.h shows them, as --explain prints them.
 *
 * Not an HTML or JavaScript generator: the only text from the user (labels,
 * file names in meta) goes into JSON strings with '<', '>', '&', U+2028 and
 * U+2029 escaped, so it can neither close the script element nor break
 * the JSON; the script puts it in the page with textContent only.
 */
#include "write/html.h"

#include "base/cli.h"
#include "write/explain.h"
#include "write/heatmap.h"
#include "write/pool.h"
#include "util/text.h"
#include "write/write.h"

#include "html_page.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* JSON text onto fp with what could end the script element escaped */
static void put_safe(FILE *fp, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const unsigned char c = (unsigned char)s[i];

		if (c == '<' || c == '>' || c == '&') {
			fprintf(fp, "\\u%04x", c);
		} else if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
			   ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
			/* U+2028, U+2029: line ends to older JavaScript */
			fprintf(fp, "\\u%04x", 0x2000 + ((unsigned char)s[i + 2] - 0x80));
			i += 2;
		} else {
			fputc(c, fp);
		}
	}
}

/* a string as shown (text.h), as a JSON string made safe */
static int put_label(FILE *fp, const char *s)
{
	char *json = NULL, *shown;
	size_t len = 0, size = 8 * strlen(s) + 16;
	FILE *mf;

	shown = malloc(size);
	if (!shown)
		return error("out of memory");
	text_shown(shown, size, s);
	mf = open_memstream(&json, &len);
	if (!mf) {
		free(shown);
		return error("out of memory");
	}
	text_put_json(mf, shown);
	free(shown);
	if (fclose(mf)) {
		free(json);
		return error("out of memory");
	}
	put_safe(fp, json, len);
	free(json);
	return 0;
}

static int put_labels(FILE *fp, const char *key, char **t, size_t n)
{
	fprintf(fp, ",\n\"%s\": ", key);
	if (!t) {
		fputs("null", fp);
		return 0;
	}
	fputc('[', fp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(',', fp);
		if (put_label(fp, t[i]))
			return -1;
	}
	fputc(']', fp);
	return 0;
}

/* bytes into base64 text, three at a time */
static const char b64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

struct b64 {
	FILE *fp;
	unsigned char b[3];
	int k;
};

/* the bytes held as four digits, the last 3 - n of them '=' (n: how many are real) */
static void b64_flush(struct b64 *e, int n)
{
	const unsigned char *b = e->b;
	const char out[4] = { b64_digits[b[0] >> 2], b64_digits[((b[0] & 3) << 4) | (b[1] >> 4)],
			      n > 1 ? b64_digits[((b[1] & 15) << 2) | (b[2] >> 6)] : '=',
			      n > 2 ? b64_digits[b[2] & 63] : '=' };

	fwrite(out, 1, sizeof(out), e->fp);
	e->k = 0;
}

static void b64_byte(struct b64 *e, unsigned char c)
{
	e->b[e->k++] = c;
	if (e->k == 3)
		b64_flush(e, 3);
}

/* the last one or two bytes, padded, and the closing quote */
static void b64_end(struct b64 *e)
{
	if (e->k) {
		memset(e->b + e->k, 0, (size_t)(3 - e->k));
		b64_flush(e, e->k);
	}
	fputc('"', e->fp);
}

/* the first cols of each row of m (row-major) as float64 little-endian bytes in base64 */
static void put_base64_cols(FILE *fp, const matrix *m, size_t cols)
{
	const size_t n = matrix_size(m), w = m->dim[m->rank - 1];
	struct b64 e = { fp, { 0 }, 0 };

	fputc('"', fp);
	for (size_t i = 0; i < n; i++) {
		uint64_t u;

		if (i % w >= cols)
			continue;
		memcpy(&u, &m->v[i], sizeof(u));
		for (int byte = 0; byte < 8; byte++)
			b64_byte(&e, (unsigned char)(u >> (8 * byte)));
	}
	b64_end(&e);
}

static void put_base64(FILE *fp, const matrix *m)
{
	put_base64_cols(fp, m, m->dim[m->rank - 1]);
}

/* n unsigned 32-bit numbers as little-endian bytes in base64 */
static void put_base64_u32(FILE *fp, const uint32_t *v, size_t n)
{
	struct b64 e = { fp, { 0 }, 0 };

	fputc('"', fp);
	for (size_t i = 0; i < n; i++)
		for (int byte = 0; byte < 4; byte++)
			b64_byte(&e, (unsigned char)(v[i] >> (8 * byte)));
	b64_end(&e);
}

/* the columns of K and V a cell's narrative reads: the terms it writes out
 * (latent attention sums each part of the score: all of K) */
static size_t k_cols(const struct step_facts *f)
{
	const size_t dk = f->d->d_k;

	return f->cfg->mla.on || dk <= EXPLAIN_TERMS + 1 ? dk : EXPLAIN_TERMS;
}

static size_t v_cols(const struct step_facts *f)
{
	return f->d->d_v < EXPLAIN_TERMS ? f->d->d_v : EXPLAIN_TERMS;
}

/* the steps the page draws, in its order */
static const int page_steps[] = { STEP_SCORES, STEP_SCALED, STEP_SOFTCAPPED, STEP_MASKED,
				  STEP_SOFTMAX };
#define PAGE_STEPS (sizeof(page_steps) / sizeof(page_steps[0]))

static const matrix *head_step(const struct step_head *x, int step)
{
	switch (step) {
	case STEP_SCORES: return x->scores;
	case STEP_SCALED: return x->scaled;
	case STEP_SOFTCAPPED: return x->softcapped;
	case STEP_MASKED: return x->masked;
	default: return x->softmax;
	}
}

/*
 * One head's overview (--pool): each step the page draws in blocks of k,
 * its block values and, for max, where each block's largest cell lies;
 * then how many cells of each block the mask blocks.  The mask counts from
 * the masked step on (pool.h); a step before it pools every cell.
 */
static int put_pooled_head(FILE *fp, const struct step_head *x, const matrix *plane,
			   enum pool_rule rule, size_t k)
{
	const size_t rows = x->scores->dim[0], cols = x->scores->dim[1];
	const size_t blocks = ((rows + k - 1) / k) * ((cols + k - 1) / k);
	uint32_t *at = calloc(blocks, sizeof(*at)), *blocked = calloc(blocks, sizeof(*blocked));
	int first = 1;

	if (!at || !blocked) {
		free(at);
		free(blocked);
		return error("out of memory");
	}
	fputs(", \"steps\": {", fp);
	for (size_t s = 0; s < PAGE_STEPS; s++) {
		const matrix *m = head_step(x, page_steps[s]);
		const int masks = page_steps[s] == STEP_MASKED || page_steps[s] == STEP_SOFTMAX;
		matrix p = { 0 };

		if (!m)
			continue;
		if (pool_panel_where(&p, rule == POOL_MAX ? at : NULL, blocked, m,
				     masks && plane->rank ? plane : NULL, k, rule)) {
			free(at);
			free(blocked);
			return -1;
		}
		fprintf(fp, "%s\"%s\": {\"value\": ", first ? "" : ", ", steps[page_steps[s]].name);
		first = 0;
		put_base64(fp, &p);
		matrix_free(&p);
		if (rule == POOL_MAX) {
			fputs(", \"at\": ", fp);
			put_base64_u32(fp, at, blocks);
		}
		fputc('}', fp);
	}
	fputc('}', fp);
	if (plane->rank) {
		/* the last pooled step's (softmax's): the mask's own count */
		fputs(", \"blocked\": ", fp);
		put_base64_u32(fp, blocked, blocks);
	}
	free(at);
	free(blocked);
	return 0;
}

/* one sequence's heads, as explain.c gathers them: their matrices, or their
 * overview (r->pool) */
static int put_sequence(FILE *fp, const struct html_run *r, size_t b, size_t k)
{
	const struct step_items *list = &r->lists[b];
	const struct step_facts *f = &r->f[b];
	const size_t batch = r->batch, first_row = r->first_row;
	const mha_dims *d = f->d;
	const size_t H = d->heads, G = d->kv_heads ? d->kv_heads : H;
	struct step_head *hd = calloc(H, sizeof(*hd));
	const matrix *mask = NULL;

	if (!hd)
		return error("out of memory");
	steps_heads(list, hd, H);
	for (size_t i = 0; i < list->n; i++)
		if (!list->v[i].head && list->v[i].step == STEP_MASK)
			mask = list->v[i].m;
	fprintf(fp, "%s\n{\"title\": ", b ? "," : "");
	if (batch)
		fprintf(fp, "\"sequence %zu of %zu\"", b + 1, batch);
	else
		fputs("\"\"", fp);
	/* query 0's position as ALiBi and the window take it: the causal offset
	 * (f: this sequence's own facts, its key length in cfg->kv_len) */
	fprintf(fp, ", \"offset\": %td, \"mask_how\": ",
		mha_causal_offset(f->d, f->cfg, 0) + (ptrdiff_t)first_row);
	if (mask) {
		/* each sequence's own: its --kv-len */
		char how[400];

		steps[STEP_MASK].title(how, sizeof(how), &steps[STEP_MASK], f, 0);
		if (put_label(fp, strchr(how, ':') + 2)) {
			free(hd);
			return -1;
		}
	} else {
		fputs("null", fp);
	}
	if (mask && mask->rank == 2 && !r->pool) {
		/* one mask for every head: once */
		fputs(", \"mask\": ", fp);
		put_base64(fp, mask);
	}
	fputs(", \"heads\": [", fp);
	for (size_t h = 0; h < H; h++) {
		const struct step_head *x = &hd[h];
		/* its plane of a per-head mask (H, n_q, n_kv); rank 0: none or shared */
		const matrix plane = mask ? step_plane(mask, h) : (matrix){ 0 };

		if (!x->q || !x->k || !x->v || !x->scores || !x->softmax) {
			free(hd);
			return error("html: head %zu's steps are missing", h + 1);
		}
		fprintf(fp, "%s\n {\"kv_head\": %zu", h ? "," : "", h / (H / G));
		if (r->pool) {
			if (put_pooled_head(fp, x, &plane, (enum pool_rule)r->pool, k)) {
				free(hd);
				return -1;
			}
			fputc('}', fp);
			continue;
		}
		fputs(", \"q\": ", fp);
		put_base64(fp, x->q);
		fputs(", \"k\": ", fp);
		put_base64_cols(fp, x->k, k_cols(f));
		fputs(", \"v\": ", fp);
		put_base64_cols(fp, x->v, v_cols(f));
		fputs(", \"scores\": ", fp);
		put_base64(fp, x->scores);
		if (x->softcapped) {
			fputs(", \"softcapped\": ", fp);
			put_base64(fp, x->softcapped);
		}
		if (plane.rank && mask->rank == 3) {
			fputs(", \"mask\": ", fp);
			put_base64(fp, &plane);
		}
		fputs(", \"softmax\": ", fp);
		put_base64(fp, x->softmax);
		fputc('}', fp);
	}
	fputs("]}", fp);
	free(hd);
	return 0;
}

static int put_meta(FILE *fp, const struct run_meta *m)
{
	char *json = NULL;
	size_t len = 0;
	FILE *mf = open_memstream(&json, &len);

	if (!mf)
		return error("out of memory");
	meta_write_json(mf, m, 0);
	if (fclose(mf)) {
		free(json);
		return error("out of memory");
	}
	fputs(",\n\"meta\": ", fp);
	put_safe(fp, json, len);
	free(json);
	return 0;
}

/* the overview's block side (pool.h's; one that holds a whole axis, no more),
 * the same for every head and sequence; 1 without --pool */
static size_t page_block(const struct html_run *r, size_t n_q, size_t n_kv)
{
	const size_t k = r->pool ? pool_block(r->pool_k, n_q, n_kv) : 1;
	const size_t side = n_q > n_kv ? n_q : n_kv;

	return k < side ? k : side;
}

/* the run's data: everything the script reads */
static int put_data(FILE *fp, const struct html_run *r)
{
	const struct step_facts *f = &r->f[0];
	const mha_dims *d = f->d;
	const struct labels *l = r->labels;
	char how[200], mask_how[400];
	int has_mask = 0;
	const size_t n_q = r->n_rows ? r->n_rows : d->n_q, n_kv = r->n_cols ? r->n_cols : d->n_kv;
	/* the overview's block side, the same for every head and sequence */
	const size_t k = page_block(r, n_q, n_kv);
	const size_t bq = (n_q + k - 1) / k, bkv = (n_kv + k - 1) / k;

	if (k > POOL_PAGE_K)
		return error("--pool's block of %zu: the page takes blocks up to %u cells a side", k,
			     POOL_PAGE_K);

	for (size_t i = 0; i < r->lists[0].n; i++)
		has_mask |= r->lists[0].v[i].step == STEP_MASK;
	fprintf(fp, "{\"format\": \"mha-html 1\", \"version\": \"%s\"", MHA_VERSION_STRING);
	fprintf(fp, ",\n\"n_q\": %zu, \"n_kv\": %zu, \"heads\": %zu, \"kv_heads\": %zu, "
		"\"d_k\": %zu, \"d_v\": %zu, \"precision\": %d, \"f32\": %s, \"first_row\": %zu",
		bq, bkv, d->heads, d->kv_heads ? d->kv_heads : d->heads, d->d_k, d->d_v, r->precision,
		r->f32 ? "true" : "false", r->first_row);
	fprintf(fp, ", \"first_col\": %zu", r->first_col);
	/* the narrative's terms (explain.h), and the K and V columns it reads */
	fprintf(fp, ", \"terms\": %d, \"sum_terms\": %d, \"k_cols\": %zu, \"v_cols\": %zu",
		EXPLAIN_TERMS, EXPLAIN_SUM_TERMS, k_cols(f), v_cols(f));
	fputs(", \"pool\": ", fp);
	if (r->pool)
		fprintf(fp, "{\"rule\": \"%s\", \"k\": %zu, \"n_q\": %zu, \"n_kv\": %zu}",
			r->pool == POOL_MAX ? "max" : "mean", k, n_q, n_kv);
	else
		fputs("null", fp);
	fputs(",\n\"scale\": ", fp);
	json_number(fp, f->scale, 0);
	step_scale_words(how, sizeof(how), f);
	fputs(", \"scale_how\": ", fp);
	if (put_label(fp, how))
		return -1;
	steps[STEP_MASK].title(mask_how, sizeof(mask_how), &steps[STEP_MASK], f, 0);
	fputs(", \"mask_how\": ", fp);
	if (has_mask) {
		if (put_label(fp, strchr(mask_how, ':') + 2))
			return -1;
	} else {
		fputs("null", fp);
	}
	fputs(", \"softcap\": ", fp);
	json_number(fp, f->cfg->softcap > 0 ? f->cfg->softcap : 0, 0);
	/* latent attention: each head's last mla features turned (its score in two parts) */
	fprintf(fp, ", \"mask_file\": %s, \"rope\": %s, \"norm\": %s, \"mla\": %zu",
		f->mask_file ? "true" : "false", f->cfg->rope.mode ? "true" : "false",
		f->cfg->norm.kind ? "true" : "false", f->cfg->mla.on ? f->cfg->mla.d_rope : 0);
	fputs(",\n\"sinks\": ", fp);
	if (f->cfg->sinks) {
		for (size_t h = 0; h < d->heads; h++) {
			fputs(h ? ", " : "[", fp);
			json_number(fp, f->cfg->sinks[h], 0);
		}
		fputc(']', fp);
	} else {
		fputs("null", fp);
	}
	fputs(", \"alibi\": ", fp);
	if (f->cfg->alibi.on && f->alibi_slopes) {
		for (size_t h = 0; h < d->heads; h++) {
			fputs(h ? ", " : "[", fp);
			json_number(fp, f->alibi_slopes[h], 0);
		}
		fputc(']', fp);
	} else {
		fputs("null", fp);
	}
	fprintf(fp, ",\n\"step\": \"%s\", \"head\": %zu, \"range\": ", steps[r->step].name,
		r->head <= d->heads ? r->head : 0);
	if (r->range == HTML_RANGE_FIXED) {
		fputc('[', fp);
		json_number(fp, r->range_lo, 0);
		fputs(", ", fp);
		json_number(fp, r->range_hi, 0);
		fputc(']', fp);
	} else {
		fputs(r->range == HTML_RANGE_AUTO ? "\"auto\"" : "null", fp);
	}
	fputs(", \"anchors\": [", fp);
	for (int a = 0; a < HEAT_ANCHORS; a++)
		fprintf(fp, "%s[%d, %d, %d]", a ? ", " : "", heat_anchor[a][0], heat_anchor[a][1],
			heat_anchor[a][2]);
	fputc(']', fp);
	if (r->pool) {
		/* a block's tokens: its first's and its last's (pool.h) */
		char **q = l->query ? pool_labels((const char *const *)l->query, n_q, k) : NULL;
		char **kv = l->key ? pool_labels((const char *const *)l->key, n_kv, k) : NULL;
		int rc;

		if ((l->query && !q) || (l->key && !kv)) {
			pool_labels_free(q);
			pool_labels_free(kv);
			return error("out of memory");
		}
		rc = put_labels(fp, "tokens", q, bq) || put_labels(fp, "kv_tokens", kv, bkv);
		pool_labels_free(q);
		pool_labels_free(kv);
		if (rc)
			return -1;
	} else if (put_labels(fp, "tokens", l->query, l->n_query) ||
		   put_labels(fp, "kv_tokens", l->key, l->n_key)) {
		return -1;
	}
	if (put_meta(fp, r->meta))
		return -1;
	fputs(",\n\"sequences\": [", fp);
	for (size_t b = 0; b < (r->batch ? r->batch : 1); b++)
		if (put_sequence(fp, r, b, k))
			return -1;
	fputs("]}\n", fp);
	return 0;
}

/* base64's characters for n bytes */
static double b64_size(double n)
{
	return 4 * ((uint64_t)n / 3 + ((uint64_t)n % 3 != 0)) + 2;
}

double html_size(const struct html_run *r)
{
	const struct labels *l = r->labels;
	const mha_dims *d = r->f[0].d;
	const size_t n_q = r->n_rows ? r->n_rows : d->n_q, n_kv = r->n_cols ? r->n_cols : d->n_kv;
	const size_t k = page_block(r, n_q, n_kv);
	const double blocks = (double)((n_q + k - 1) / k) * (double)((n_kv + k - 1) / k);
	/* the frame, the meta and the numbers besides the matrices, about */
	double bytes = (double)(strlen(html_page_css) + strlen(html_page_html) +
				strlen(html_page_js) + strlen(html_page_screen_js)) + 8000;

	for (size_t i = 0; l->query && i < l->n_query; i++)
		bytes += (double)strlen(l->query[i]) + 4;
	for (size_t i = 0; l->key && i < l->n_key; i++)
		bytes += (double)strlen(l->key[i]) + 4;
	for (size_t b = 0; b < (r->batch ? r->batch : 1); b++) {
		const struct step_items *list = &r->lists[b];
		const struct step_facts *f = &r->f[b];
		const size_t H = f->d->heads;
		const matrix *mask = NULL;
		struct step_head *hd = calloc(H, sizeof(*hd));

		if (!hd)
			return 0; /* a size it cannot tell: the writing says */
		steps_heads(list, hd, H);
		for (size_t i = 0; i < list->n; i++)
			if (!list->v[i].head && list->v[i].step == STEP_MASK)
				mask = list->v[i].m;
		for (size_t h = 0; h < H; h++) {
			const struct step_head *x = &hd[h];

			if (!x->q || !x->k || !x->v || !x->scores || !x->softmax)
				continue;
			if (r->pool) {
				for (size_t s = 0; s < PAGE_STEPS; s++)
					if (head_step(x, page_steps[s]))
						bytes += b64_size(8 * blocks) +
							 (r->pool == POOL_MAX ? b64_size(4 * blocks) : 0);
				bytes += mask ? b64_size(4 * blocks) : 0;
				continue;
			}
			bytes += b64_size(8 * (double)matrix_size(x->q)) +
				 b64_size(8 * (double)x->k->dim[0] * (double)k_cols(f)) +
				 b64_size(8 * (double)x->v->dim[0] * (double)v_cols(f)) +
				 b64_size(8 * (double)matrix_size(x->scores)) * (x->softcapped ? 3 : 2);
			if (mask && mask->rank == 3)
				bytes += b64_size(8 * (double)matrix_size(x->scores));
		}
		if (mask && mask->rank == 2 && !r->pool)
			bytes += b64_size(8 * (double)matrix_size(mask));
		free(hd);
	}
	return bytes;
}

int html_write(FILE *fp, const struct html_run *r)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
	      /* nothing is ever loaded: the page is whole */
	      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
	      "script-src 'unsafe-inline'; style-src 'unsafe-inline';\">\n"
	      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
	      "<meta name=\"generator\" content=\"mha " MHA_VERSION_STRING "\">\n"
	      "<title>mha: attention</title>\n<style>\n", fp);
	fputs(html_page_css, fp);
	fputs("</style>\n</head>\n<body>\n", fp);
	fputs(html_page_html, fp);
	fputs("<script id=\"mha-data\" type=\"application/json\">\n", fp);
	{
		/* the page reads its data with JSON.parse, which takes no bare NaN */
		const int was = json_bare_nonfinite(0);
		const int rc = put_data(fp, r);

		json_bare_nonfinite(was);
		if (rc)
			return -1;
	}
	fputs("</script>\n<script>\n", fp);
	/* one script, kept in two files (html/page.js: the data, the words, the
	 * colours, the painters; html/page_screen.js: the screen, saving, the
	 * controls), each under 800 lines */
	fputs(html_page_js, fp);
	fputs(html_page_screen_js, fp);
	fputs("</script>\n</body>\n</html>\n", fp);
	return 0;
}

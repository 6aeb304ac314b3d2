/*
 * conformance.c: the ONNX Attention operator's backend test cases, run
 * through libmha and through the mha command, compared with the outputs
 * ONNX's reference implementation gave.
 *
 *   conformance [--mha PATH] [DIR]    (DIR: ../shared/conformance/onnx-attention-opset25)
 *
 * The cases are ONNX's, converted to JSON (DIR/README.md says how); none
 * is copied here.  What this file does is only ONNX's input conventions:
 * its tensors are batched and, in 4-D form, heads-first, so the whole
 * batch becomes one mha problem of B sequences (mha_dims.batch, 3-D inputs
 * on the command line) with heads side by side as column blocks;
 * past_key/past_value go before K/V (present_key/value are those
 * concatenations, which mha prints as K and V); a mask is padded on the
 * right to the key length (its batch and head dimensions broadcast in mha,
 * as ONNX's do).  The attention semantics are mha's own options:
 * --heads/--kv-heads, --mask (shared, per head, per sequence), --causal
 * (top-left; after P cached keys, --causal=P; with nonpad_kv_seqlen,
 * bottom-right against --kv-len), --kv-len (one per sequence), --window
 * (opset 25's left/right_window_size), --scale, --softcap, and the
 * intermediates scaled, softcapped, masked and softmax for
 * qk_matmul_output's modes 0 to 3.
 *
 *
 * The RotaryEmbedding cases (../shared/conformance/onnx-rotary-embedding:
 * a case with an "input") are run the same way: each batch element's
 * (S, H·d) rows through mha_rope_apply(), through mha_forward() with the
 * rope settings (its q_rot), and through 'mha forward --rope ... -p q_rot'
 * with the tables as --rope-cos/--rope-sin and position_ids as --positions
 * (without position_ids, the batch element's own (S, R/2) tables, rows by
 * position 0 to S-1).
 *
 * One line per case, then "N passed, N failed"; exit 1 if any failed.
 */
#include "../lib/mha.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tensor {
	size_t rank, shape[4];
	double *v;
	int is_bool, half; /* booleans; computed in float16 */
} tensor;

static char failure[512]; /* why the current case failed */

static int fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(failure, sizeof(failure), fmt, ap);
	va_end(ap);
	return -1;
}

static char *slurp(const char *path)
{
	FILE *fp = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!fp)
		return NULL;
	if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) != NULL) {
		if (fread(buf, 1, (size_t)n, fp) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = '\0';
		}
	}
	fclose(fp);
	return buf;
}

static double number(const cJSON *e)
{
	if (cJSON_IsNumber(e))
		return e->valuedouble;
	if (cJSON_IsBool(e))
		return cJSON_IsTrue(e) ? 1.0 : 0.0;
	if (cJSON_IsString(e)) {
		if (!strcmp(e->valuestring, "-inf"))
			return -INFINITY;
		if (!strcmp(e->valuestring, "inf"))
			return INFINITY;
	}
	return NAN;
}

/* {"shape": [...], "dtype": ..., "data": [...]}; t->rank 0 when absent */
static int load_tensor(tensor *t, const cJSON *parent, const char *name)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(parent, name), *e;
	const char *dtype;
	size_t n = 1, i = 0;

	memset(t, 0, sizeof(*t));
	if (!j)
		return 0;
	dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "dtype"));
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "shape")) {
		if (t->rank == 4)
			return fail("%s has more than 4 dimensions", name);
		t->shape[t->rank++] = (size_t)e->valuedouble;
		n *= (size_t)e->valuedouble;
	}
	t->is_bool = dtype && !strcmp(dtype, "bool");
	t->half = dtype && !strcmp(dtype, "float16");
	t->v = malloc((n ? n : 1) * sizeof(double));
	if (!t->v)
		return fail("out of memory");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "data")) {
		if (i == n)
			return fail("%s has more data than its shape", name);
		t->v[i++] = number(e);
	}
	if (i != n)
		return fail("%s has less data than its shape", name);
	return 0;
}

/* ---- one case, as one mha problem of B sequences ------------------------ */

struct problem {
	size_t B, Hq, Hkv, Sq, Skv, P, dk, dv; /* Skv counts the past keys too */
	mha_config cfg;
	int mode;                 /* qk_matmul_output_mode */
	mha_stage qk_stage;
	tensor q, k, v, mask, past_k, past_v, nonpad;
	tensor y, present_k, present_v, qk;
	/* the batch, as mha takes it */
	double *Qb, *Kb, *Vb;     /* (B, Sq, Hq·dk), (B, Skv, Hkv·dk), (B, Skv, Hkv·dv) */
	double *bias;             /* (B or 1, Hq or 1, Sq, Skv) */
	unsigned char *allow;
	size_t mask_heads;        /* 0: no mask, 1: shared, Hq: per head */
	size_t mask_batch;        /* 1: shared by the sequences, B: one each */
	size_t *kv_lens;          /* (B) from nonpad_kv_seqlen, or NULL */
	mha_dims d;
};

static double attr(const cJSON *attrs, const char *name, double dflt)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(attrs, name);

	return cJSON_IsNumber(a) ? a->valuedouble : dflt;
}

/* element (b, h, s, t) of a batched tensor: 4-D heads first, or 3-D heads side by side */
static double at(const tensor *t, size_t heads, size_t b, size_t h, size_t s, size_t x)
{
	if (t->rank == 4)
		return t->v[((b * t->shape[1] + h) * t->shape[2] + s) * t->shape[3] + x];
	return t->v[(b * t->shape[1] + s) * t->shape[2] + h * (t->shape[2] / heads) + x];
}

static size_t seq_len(const tensor *t)
{
	return t->rank == 4 ? t->shape[2] : t->shape[1];
}

/*
 * The whole batch as one mha problem: each sequence's heads side by side,
 * past keys first; the mask (B or 1, H or 1, Sq, Skv) padded on the right;
 * a key length per sequence.
 */
static void build_batch(struct problem *p)
{
	for (size_t b = 0; b < p->B; b++) {
		double *Qb = p->Qb + b * p->Sq * p->Hq * p->dk;
		double *Kb = p->Kb + b * p->Skv * p->Hkv * p->dk, *Vb = p->Vb + b * p->Skv * p->Hkv * p->dv;

		for (size_t s = 0; s < p->Sq; s++)
			for (size_t h = 0; h < p->Hq; h++)
				for (size_t t = 0; t < p->dk; t++)
					Qb[s * p->Hq * p->dk + h * p->dk + t] = at(&p->q, p->Hq, b, h, s, t);
		for (size_t j = 0; j < p->Skv; j++)
			for (size_t g = 0; g < p->Hkv; g++) {
				for (size_t t = 0; t < p->dk; t++)
					Kb[j * p->Hkv * p->dk + g * p->dk + t] = j < p->P
						? at(&p->past_k, p->Hkv, b, g, j, t)
						: at(&p->k, p->Hkv, b, g, j - p->P, t);
				for (size_t t = 0; t < p->dv; t++)
					Vb[j * p->Hkv * p->dv + g * p->dv + t] = j < p->P
						? at(&p->past_v, p->Hkv, b, g, j, t)
						: at(&p->v, p->Hkv, b, g, j - p->P, t);
			}
		if (p->nonpad.rank)
			p->kv_lens[b] = (size_t)p->nonpad.v[b];
	}
	memset(&p->cfg.mask, 0, sizeof(p->cfg.mask));
	if (p->mask_heads) {
		const tensor *m = &p->mask;
		const size_t Sm = m->shape[3], Sqm = m->shape[2];

		for (size_t mb = 0; mb < p->mask_batch; mb++)
			for (size_t h = 0; h < p->mask_heads; h++)
				for (size_t i = 0; i < p->Sq; i++)
					for (size_t j = 0; j < p->Skv; j++) {
						const size_t o = ((mb * p->mask_heads + h) * p->Sq + i) * p->Skv + j;
						/* narrower than the keys: padded with false / -inf */
						const double x = j < Sm
							? m->v[((mb * m->shape[1] + h) * Sqm +
								(Sqm == 1 ? 0 : i)) * Sm + j]
							: (m->is_bool ? 0.0 : -INFINITY);

						p->allow[o] = x != 0;
						p->bias[o] = x;
					}
		p->cfg.mask.per_head = p->mask_heads > 1;
		p->cfg.mask.per_batch = p->mask_batch > 1;
		if (m->is_bool)
			p->cfg.mask.allow = p->allow;
		else
			p->cfg.mask.bias = p->bias;
	}
	p->cfg.kv_lens = p->nonpad.rank ? p->kv_lens : NULL;
	p->d = (mha_dims){ .size = sizeof(mha_dims),
			   .n_q = p->Sq, .n_kv = p->Skv, .d_q_in = p->Hq * p->dk,
			   .d_k_in = p->Hkv * p->dk, .d_v_in = p->Hkv * p->dv, .heads = p->Hq,
			   .kv_heads = p->Hkv, .d_k = p->dk, .d_v = p->dv, .batch = p->B };
}

static int setup(struct problem *p, const cJSON *c)
{
	const cJSON *ins = cJSON_GetObjectItemCaseSensitive(c, "inputs");
	const cJSON *outs = cJSON_GetObjectItemCaseSensitive(c, "outputs");
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(c, "attributes");

	if (load_tensor(&p->q, ins, "Q") || load_tensor(&p->k, ins, "K") ||
	    load_tensor(&p->v, ins, "V") || load_tensor(&p->mask, ins, "attn_mask") ||
	    load_tensor(&p->past_k, ins, "past_key") || load_tensor(&p->past_v, ins, "past_value") ||
	    load_tensor(&p->nonpad, ins, "nonpad_kv_seqlen") || load_tensor(&p->y, outs, "Y") ||
	    load_tensor(&p->present_k, outs, "present_key") ||
	    load_tensor(&p->present_v, outs, "present_value") ||
	    load_tensor(&p->qk, outs, "qk_matmul_output"))
		return -1;
	p->B = p->q.shape[0];
	if (p->q.rank == 4) {
		p->Hq = p->q.shape[1];
		p->Hkv = p->k.shape[1];
		p->dk = p->q.shape[3];
		p->dv = p->v.shape[3];
	} else {
		p->Hq = (size_t)attr(attrs, "q_num_heads", 0);
		p->Hkv = (size_t)attr(attrs, "kv_num_heads", 0);
		if (!p->Hq || !p->Hkv)
			return fail("3-D inputs without q_num_heads/kv_num_heads");
		p->dk = p->q.shape[2] / p->Hq;
		p->dv = p->v.shape[2] / p->Hkv;
	}
	p->Sq = seq_len(&p->q);
	p->P = p->past_k.rank ? p->past_k.shape[2] : 0;
	p->Skv = p->P + seq_len(&p->k);

	if (cJSON_GetObjectItemCaseSensitive(attrs, "scale")) {
		p->cfg.scale_mode = MHA_SCALE_VALUE;
		p->cfg.scale = attr(attrs, "scale", 1);
	}
	p->cfg.softcap = attr(attrs, "softcap", 0);
	if (attr(attrs, "is_causal", 0)) {
		/* query i may see key j <= i + offset: the past length, or, with
		 * a per-batch key length and no past, that length minus Sq */
		if (p->P) {
			p->cfg.causal = MHA_CAUSAL_OFFSET;
			p->cfg.causal_offset = (ptrdiff_t)p->P;
		} else if (p->nonpad.rank) {
			p->cfg.causal = MHA_CAUSAL_BOTTOM_RIGHT;
		} else {
			p->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		}
	}
	if (cJSON_GetObjectItemCaseSensitive(attrs, "left_window_size") ||
	    cJSON_GetObjectItemCaseSensitive(attrs, "right_window_size")) {
		/* opset 25: p - left <= j <= p + right, -1 unbounded */
		p->cfg.window.on = 1;
		p->cfg.window.left = (ptrdiff_t)attr(attrs, "left_window_size", -1);
		p->cfg.window.right = (ptrdiff_t)attr(attrs, "right_window_size", -1);
		/* ONNX's positions start after the cache even without is_causal; mha's
		 * window follows the causal rule's offset, 0 when not causal */
		if (!p->cfg.causal && (p->P || p->nonpad.rank) &&
		    (p->cfg.window.left >= 0 || p->cfg.window.right >= 0))
			return fail("a window after a cache without is_causal: not expressible");
	}
	p->mode = (int)attr(attrs, "qk_matmul_output_mode", 0);
	p->qk_stage = p->mode == 3 ? MHA_STAGE_SOFTMAX : p->mode == 2 ? MHA_STAGE_MASKED :
		      p->mode == 1 && p->cfg.softcap > 0 ? MHA_STAGE_SOFTCAPPED : MHA_STAGE_SCALED;
	if (p->mask.rank == 3) {
		/* (H or 1, Sq, Sm) broadcasts like (1, H or 1, Sq, Sm) */
		memmove(p->mask.shape + 1, p->mask.shape, 3 * sizeof(size_t));
		p->mask.shape[0] = 1;
		p->mask.rank = 4;
	}
	if (p->mask.rank == 1) {
		/* (Sm,) broadcasts over queries (opset 25) */
		p->mask.shape[3] = p->mask.shape[0];
		p->mask.shape[0] = p->mask.shape[1] = p->mask.shape[2] = 1;
		p->mask.rank = 4;
	}
	if (p->mask.rank == 2) {
		p->mask.shape[2] = p->mask.shape[0];
		p->mask.shape[3] = p->mask.shape[1];
		p->mask.shape[0] = p->mask.shape[1] = 1;
		p->mask.rank = 4;
	}
	p->mask_heads = p->mask.rank ? (p->mask.shape[1] == 1 ? 1 : p->Hq) : 0;
	p->mask_batch = p->mask.rank && p->mask.shape[0] != 1 ? p->B : 1;
	p->Qb = malloc(p->B * p->Sq * p->Hq * p->dk * sizeof(double));
	p->Kb = malloc(p->B * p->Skv * p->Hkv * p->dk * sizeof(double));
	p->Vb = malloc(p->B * p->Skv * p->Hkv * p->dv * sizeof(double));
	p->bias = malloc(p->mask_batch * (p->mask_heads ? p->mask_heads : 1) * p->Sq * p->Skv *
			 sizeof(double));
	p->allow = malloc(p->mask_batch * (p->mask_heads ? p->mask_heads : 1) * p->Sq * p->Skv);
	p->kv_lens = calloc(p->B, sizeof(size_t));
	if (!p->Qb || !p->Kb || !p->Vb || !p->bias || !p->allow || !p->kv_lens)
		return fail("out of memory");
	build_batch(p);
	return 0;
}

/* ---- comparing ----------------------------------------------------------- */

struct tol {
	double atol, rtol, worst;
};

static int close_enough(struct tol *tl, double got, double want)
{
	double err;

	if (isinf(want) || isinf(got))
		return got == want;
	if (isnan(got) || isnan(want))
		return 0;
	err = fabs(got - want) / (tl->atol + tl->rtol * fabs(want));
	if (err > tl->worst)
		tl->worst = err;
	return err <= 1;
}

/* what (S, H·d) from mha, against batch b of a batched ONNX tensor */
static int compare_blocks(struct tol *tl, const char *what, const double *got, const tensor *want,
			  size_t b, size_t heads, size_t rows, size_t d)
{
	for (size_t s = 0; s < rows; s++)
		for (size_t h = 0; h < heads; h++)
			for (size_t t = 0; t < d; t++) {
				const double g = got[s * heads * d + h * d + t];
				const double w = at(want, heads, b, h, s, t);

				if (!close_enough(tl, g, w))
					return fail("%s[%zu][head %zu][%zu][%zu]: mha %.9g, ONNX %.9g",
						    what, b, h, s, t, g, w);
			}
	return 0;
}

/* a per-head (Sq, Skv) matrix against qk_matmul_output[b][h] */
static int compare_scores(struct tol *tl, const struct problem *p, const double *got, size_t b,
			  size_t h)
{
	for (size_t i = 0; i < p->Sq; i++)
		for (size_t j = 0; j < p->Skv; j++) {
			const double g = got[i * p->Skv + j];
			const double w = p->qk.v[((b * p->Hq + h) * p->Sq + i) * p->Skv + j];

			if (!close_enough(tl, g, w))
				return fail("qk_matmul_output[%zu][%zu][%zu][%zu] (mode %d): mha %.9g, ONNX %.9g",
					    b, h, i, j, p->mode, g, w);
		}
	return 0;
}

/* ---- through the library ------------------------------------------------- */

/* what the observer kept, per sequence: K, V and each head's qk stage */
struct seen {
	const struct problem *p;
	size_t cur;             /* the sequence the library is on */
	double **K, **V, **qk;  /* [B], [B], [B·Hq] */
};

static int keep_sequence(void *ctx, size_t b)
{
	((struct seen *)ctx)->cur = b;
	return 0;
}

static int keep(void *ctx, mha_stage stage, int head, const double *m, size_t rows, size_t cols)
{
	struct seen *s = ctx;
	double **dst = stage == MHA_STAGE_K ? &s->K[s->cur] : stage == MHA_STAGE_V ? &s->V[s->cur]
		       : &s->qk[s->cur * s->p->Hq + (size_t)head];

	free(*dst);
	*dst = malloc(rows * cols * sizeof(double));
	if (!*dst)
		return 1;
	memcpy(*dst, m, rows * cols * sizeof(double));
	return 0;
}

/* the whole batch in one call: mha_dims.batch, a key length and a mask per sequence */
static int run_library(struct problem *p, struct tol *tl)
{
	double *out = malloc(p->B * p->Sq * p->Hq * p->dv * sizeof(double));
	struct seen s = { .p = p, .K = calloc(p->B, sizeof(double *)),
			  .V = calloc(p->B, sizeof(double *)),
			  .qk = calloc(p->B * p->Hq, sizeof(double *)) };
	mha_observer obs = { .size = sizeof(mha_observer),
			     .fn = keep, .ctx = &s, .sequence = keep_sequence,
			     .wanted = MHA_STAGE_BIT(MHA_STAGE_K) | MHA_STAGE_BIT(MHA_STAGE_V) |
				       (p->qk.rank ? MHA_STAGE_BIT(p->qk_stage) : 0) };
	mha_status st;
	int rc = 0;

	if (!out || !s.K || !s.V || !s.qk)
		return fail("out of memory");
	st = mha_forward(out, &p->d, &(mha_inputs){ .size = sizeof(mha_inputs),
						    p->Qb, p->Kb, p->Vb }, NULL, &p->cfg, &obs, NULL);
	if (st != MHA_OK)
		rc = fail("library: %s", mha_strerror(st));
	for (size_t b = 0; b < p->B && !rc; b++) {
		rc = compare_blocks(tl, "Y", out + b * p->Sq * p->Hq * p->dv, &p->y, b, p->Hq, p->Sq,
				    p->dv);
		if (!rc && p->present_k.rank)
			rc = compare_blocks(tl, "present_key", s.K[b], &p->present_k, b, p->Hkv, p->Skv, p->dk);
		if (!rc && p->present_v.rank)
			rc = compare_blocks(tl, "present_value", s.V[b], &p->present_v, b, p->Hkv, p->Skv, p->dv);
		for (size_t h = 0; h < p->Hq && !rc && p->qk.rank; h++)
			rc = compare_scores(tl, p, s.qk[b * p->Hq + h], b, h);
	}
	free(out);
	for (size_t b = 0; b < p->B; b++) {
		free(s.K[b]);
		free(s.V[b]);
		for (size_t h = 0; h < p->Hq; h++)
			free(s.qk[b * p->Hq + h]);
	}
	free(s.K);
	free(s.V);
	free(s.qk);
	return rc;
}

/* ---- through the command line --------------------------------------------- */

static void write_value(FILE *fp, double x, int is_bool)
{
	if (is_bool)
		fputs(x != 0 ? "true" : "false", fp);
	else if (isinf(x))
		fputs(x < 0 ? "\"-inf\"" : "\"inf\"", fp);
	else
		fprintf(fp, "%.17g", x);
}

/* the nested JSON array of v, of rank dimensions dims, from depth r on */
static void write_nested(FILE *fp, const double *v, const size_t *dims, size_t rank, size_t r,
			 int is_bool)
{
	size_t inner = 1;

	for (size_t k = r + 1; k < rank; k++)
		inner *= dims[k];
	fputc('[', fp);
	for (size_t i = 0; i < dims[r]; i++) {
		if (i)
			fputc(',', fp);
		if (r + 1 == rank)
			write_value(fp, v[i], is_bool);
		else
			write_nested(fp, v + i * inner, dims, rank, r + 1, is_bool);
	}
	fputc(']', fp);
}

/* an array of rank dimensions as a JSON file */
static int write_json(const char *path, const double *v, const size_t *dims, size_t rank, int is_bool)
{
	FILE *fp = fopen(path, "w");

	if (!fp)
		return fail("%s: %s", path, strerror(errno));
	write_nested(fp, v, dims, rank, 0, is_bool);
	fputc('\n', fp);
	return fclose(fp) ? fail("%s: write error", path) : 0;
}

/* the numbers (and "-inf") of a nested JSON array, in order, into dst[*n…] */
static int read_numbers(const cJSON *a, double *dst, size_t *n, size_t want)
{
	const cJSON *e;

	if (!cJSON_IsArray(a)) {
		if (*n == want)
			return -1;
		dst[(*n)++] = number(a);
		return 0;
	}
	cJSON_ArrayForEach(e, a)
		if (read_numbers(e, dst, n, want))
			return -1;
	return 0;
}

/* a 2-D (rows, cols) array as a JSON file */
static int write_rows(const char *path, const double *v, size_t rows, size_t cols)
{
	const size_t dims[2] = { rows, cols };

	return write_json(path, v, dims, 2, 0);
}

/* a JSON array of count numbers into dst */
static int read_all(const cJSON *a, double *dst, size_t count, const char *what)
{
	size_t n = 0;

	if (!a || read_numbers(a, dst, &n, count))
		return fail("command line: %s is missing or larger than expected", what);
	return n == count ? 0 : fail("command line: %s is %zu numbers, expected %zu", what, n, count);
}

/* the whole batch in one command: 3-D Q, K, V, a 4-D mask, --kv-len one per sequence */
static int run_cli(struct problem *p, struct tol *tl, const char *mha, const char *tmp)
{
	static const char *const stage_key[] = {
		[MHA_STAGE_SCALED] = "scaled", [MHA_STAGE_SOFTCAPPED] = "softcapped",
		[MHA_STAGE_MASKED] = "masked", [MHA_STAGE_SOFTMAX] = "softmax",
	};
	const size_t kvw = p->Hkv * (p->dk > p->dv ? p->dk : p->dv);
	const size_t qdims[3] = { p->B, p->Sq, p->Hq * p->dk }, kdims[3] = { p->B, p->Skv, p->Hkv * p->dk };
	const size_t vdims[3] = { p->B, p->Skv, p->Hkv * p->dv };
	const size_t mdims[4] = { p->mask_batch, p->mask_heads, p->Sq, p->Skv };
	double *out = malloc(p->B * p->Sq * p->Hq * p->dv * sizeof(double));
	double *kv = malloc(p->B * p->Skv * kvw * sizeof(double));
	double *qk = malloc(p->B * p->Sq * p->Skv * sizeof(double));
	char path[4][512], cmd[4096], opts[1024];
	char *text;
	cJSON *doc;
	size_t n;
	int rc = 0;

	if (!out || !kv || !qk) {
		rc = fail("out of memory");
		goto done;
	}
	snprintf(path[0], sizeof(path[0]), "%s/q.json", tmp);
	snprintf(path[1], sizeof(path[1]), "%s/k.json", tmp);
	snprintf(path[2], sizeof(path[2]), "%s/v.json", tmp);
	snprintf(path[3], sizeof(path[3]), "%s/mask.json", tmp);
	if (write_json(path[0], p->Qb, qdims, 3, 0) || write_json(path[1], p->Kb, kdims, 3, 0) ||
	    write_json(path[2], p->Vb, vdims, 3, 0) ||
	    (p->mask_heads && write_json(path[3], p->bias, /* raw values: 0/1 for booleans */
					 mdims, 4, p->mask.is_bool))) {
		rc = -1;
		goto done;
	}
	n = (size_t)snprintf(opts, sizeof(opts), "--heads %zu --kv-heads %zu", p->Hq, p->Hkv);
	if (p->mask_heads)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --mask %s", path[3]);
	if (p->cfg.causal == MHA_CAUSAL_TOP_LEFT)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --causal");
	else if (p->cfg.causal == MHA_CAUSAL_BOTTOM_RIGHT)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --causal=bottom-right");
	else if (p->cfg.causal == MHA_CAUSAL_OFFSET)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --causal=%td",
				      p->cfg.causal_offset);
	for (size_t b = 0; p->cfg.kv_lens && b < p->B; b++)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, "%s%zu", b ? "," : " --kv-len ",
				      p->kv_lens[b]);
	if (p->cfg.window.on)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --window=%td,%td",
				      p->cfg.window.left, p->cfg.window.right);
	if (p->cfg.scale_mode == MHA_SCALE_VALUE)
		n += (size_t)snprintf(opts + n, sizeof(opts) - n, " --scale %.17g", p->cfg.scale);
	if (p->cfg.softcap > 0)
		(void)snprintf(opts + n, sizeof(opts) - n, " --softcap %.17g", p->cfg.softcap);
	snprintf(cmd, sizeof(cmd),
		 "%s forward --q %s --k %s --v %s %s -p output,k,v%s%s -f json -o %s/out.json "
		 "2>%s/err", mha, path[0], path[1], path[2], opts, p->qk.rank ? "," : "",
		 p->qk.rank ? stage_key[p->qk_stage] : "", tmp, tmp);
	if (system(cmd) != 0) {
		snprintf(path[0], sizeof(path[0]), "%s/err", tmp);
		text = slurp(path[0]);
		rc = fail("command line failed: %s: %.200s", cmd, text ? text : "");
		free(text);
		goto done;
	}
	snprintf(path[0], sizeof(path[0]), "%s/out.json", tmp);
	text = slurp(path[0]);
	doc = text ? cJSON_Parse(text) : NULL;
	free(text);
	if (!doc) {
		rc = fail("command line: its JSON output does not parse");
		goto done;
	}
	/* each matrix (B, …): the batch's first dimension */
	rc = read_all(cJSON_GetObjectItemCaseSensitive(doc, "output"), out, p->B * p->Sq * p->Hq * p->dv,
		      "output");
	for (size_t b = 0; b < p->B && !rc; b++)
		rc = compare_blocks(tl, "Y (command line)", out + b * p->Sq * p->Hq * p->dv, &p->y, b,
				    p->Hq, p->Sq, p->dv);
	if (!rc && p->present_k.rank &&
	    !(rc = read_all(cJSON_GetObjectItemCaseSensitive(doc, "K"), kv, p->B * p->Skv * p->Hkv * p->dk,
			    "K")))
		for (size_t b = 0; b < p->B && !rc; b++)
			rc = compare_blocks(tl, "present_key (command line)",
					    kv + b * p->Skv * p->Hkv * p->dk, &p->present_k, b, p->Hkv,
					    p->Skv, p->dk);
	if (!rc && p->present_v.rank &&
	    !(rc = read_all(cJSON_GetObjectItemCaseSensitive(doc, "V"), kv, p->B * p->Skv * p->Hkv * p->dv,
			    "V")))
		for (size_t b = 0; b < p->B && !rc; b++)
			rc = compare_blocks(tl, "present_value (command line)",
					    kv + b * p->Skv * p->Hkv * p->dv, &p->present_v, b, p->Hkv,
					    p->Skv, p->dv);
	for (size_t h = 0; h < p->Hq && !rc && p->qk.rank; h++) {
		const cJSON *head = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(doc, "heads"),
						       (int)h);

		rc = read_all(cJSON_GetObjectItemCaseSensitive(head, stage_key[p->qk_stage]), qk,
			      p->B * p->Sq * p->Skv, stage_key[p->qk_stage]);
		for (size_t b = 0; b < p->B && !rc; b++)
			rc = compare_scores(tl, p, qk + b * p->Sq * p->Skv, b, h);
	}
	cJSON_Delete(doc);
done:
	free(out);
	free(kv);
	free(qk);
	return rc;
}

/* ---- RotaryEmbedding ------------------------------------------------------ */

struct rope_case {
	tensor in, cos, sin, pos, out;
	size_t B, H, S, d, R, half; /* half: R/2, the tables' columns */
	mha_rope rope;
	double *x, *y, *cb, *sb;    /* one batch element: (S, H·d) in and out, its tables */
	ptrdiff_t *p;               /* (S) its positions, or NULL */
	size_t rows;                /* the tables' rows */
};

static int rope_setup(struct rope_case *r, const cJSON *c)
{
	const cJSON *ins = cJSON_GetObjectItemCaseSensitive(c, "inputs");
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(c, "attributes");

	if (load_tensor(&r->in, ins, "input") || load_tensor(&r->cos, ins, "cos_cache") ||
	    load_tensor(&r->sin, ins, "sin_cache") || load_tensor(&r->pos, ins, "position_ids") ||
	    load_tensor(&r->out, cJSON_GetObjectItemCaseSensitive(c, "outputs"), "output"))
		return -1;
	r->B = r->in.shape[0];
	if (r->in.rank == 4) {
		r->H = r->in.shape[1];
		r->S = r->in.shape[2];
		r->d = r->in.shape[3];
	} else {
		r->H = (size_t)attr(attrs, "num_heads", 0);
		if (!r->H)
			return fail("3-D input without num_heads");
		r->S = r->in.shape[1];
		r->d = r->in.shape[2] / r->H;
	}
	r->R = (size_t)attr(attrs, "rotary_embedding_dim", 0);
	if (!r->R)
		r->R = r->d;
	r->half = r->R / 2;
	r->rope.mode = attr(attrs, "interleaved", 0) ? MHA_ROPE_INTERLEAVED : MHA_ROPE_HALF;
	r->rope.dim = r->R;
	/* (max_position, R/2) with position_ids, else (B, S, R/2) */
	r->rows = r->pos.rank ? r->cos.shape[0] : r->S;
	if (r->cos.shape[r->cos.rank - 1] != r->half)
		return fail("cos_cache has %zu columns, expected R/2 = %zu", r->cos.shape[r->cos.rank - 1],
			    r->half);
	r->x = malloc(r->S * r->H * r->d * sizeof(double));
	r->y = malloc(r->S * r->H * r->d * sizeof(double));
	r->cb = malloc(r->rows * r->half * sizeof(double));
	r->sb = malloc(r->rows * r->half * sizeof(double));
	r->p = malloc(r->S * sizeof(ptrdiff_t));
	if (!r->x || !r->y || !r->cb || !r->sb || !r->p)
		return fail("out of memory");
	return 0;
}

/* batch element b: its rows, tables and positions */
static void rope_batch(struct rope_case *r, size_t b)
{
	const size_t n = r->rows * r->half, off = r->pos.rank ? 0 : b * n;

	for (size_t s = 0; s < r->S; s++)
		for (size_t h = 0; h < r->H; h++)
			for (size_t t = 0; t < r->d; t++)
				r->x[s * r->H * r->d + h * r->d + t] = at(&r->in, r->H, b, h, s, t);
	memcpy(r->cb, r->cos.v + off, n * sizeof(double));
	memcpy(r->sb, r->sin.v + off, n * sizeof(double));
	for (size_t s = 0; s < r->S; s++)
		r->p[s] = r->pos.rank ? (ptrdiff_t)r->pos.v[b * r->S + s] : (ptrdiff_t)s;
	r->rope.cos = r->cb;
	r->rope.sin = r->sb;
	r->rope.rows = r->rows;
}

static int keep_q_rot(void *ctx, mha_stage stage, int head, const double *m, size_t rows,
		      size_t cols)
{
	(void)head;
	if (stage == MHA_STAGE_Q_ROT)
		memcpy(ctx, m, rows * cols * sizeof(double));
	return 0;
}

static int rope_library(struct rope_case *r, struct tol *tl)
{
	double *out = malloc(r->S * r->H * r->d * sizeof(double));
	int rc = 0;

	if (!out)
		return fail("out of memory");
	for (size_t b = 0; b < r->B && !rc; b++) {
		const size_t w = r->H * r->d;
		const mha_dims d = { .size = sizeof(mha_dims),
				     .n_q = r->S, .n_kv = r->S, .d_q_in = w, .d_k_in = w, .d_v_in = w,
				     .heads = r->H, .d_k = r->d, .d_v = r->d };
		mha_config cfg = { .size = sizeof(mha_config) };
		mha_observer obs = { .size = sizeof(mha_observer), .fn = keep_q_rot, .ctx = r->y,
				     .wanted = MHA_STAGE_BIT(MHA_STAGE_Q_ROT) };
		mha_status st;

		rope_batch(r, b);
		cfg.rope = r->rope;
		st = mha_rope_apply(r->y, r->x, r->S, r->H, r->d, &cfg, r->p);
		if (st != MHA_OK) {
			rc = fail("mha_rope_apply: %s", mha_strerror(st));
			break;
		}
		rc = compare_blocks(tl, "output (mha_rope_apply)", r->y, &r->out, b, r->H, r->S, r->d);
		if (rc)
			break;
		/* and inside attention: Q = K = V = the input, q_rot observed */
		cfg.rope.q_pos = cfg.rope.k_pos = r->p;
		memset(r->y, 0, r->S * w * sizeof(double));
		st = mha_forward(out, &d, &(mha_inputs){ .size = sizeof(mha_inputs),
							 r->x, r->x, r->x }, NULL, &cfg, &obs, NULL);
		if (st != MHA_OK) {
			rc = fail("mha_forward: %s", mha_strerror(st));
			break;
		}
		rc = compare_blocks(tl, "output (mha_forward q_rot)", r->y, &r->out, b, r->H, r->S, r->d);
	}
	free(out);
	return rc;
}

static int rope_cli(struct rope_case *r, struct tol *tl, const char *mha, const char *tmp)
{
	char path[5][512], cmd[4096];
	int rc = 0;

	snprintf(path[0], sizeof(path[0]), "%s/x.json", tmp);
	snprintf(path[1], sizeof(path[1]), "%s/cos.json", tmp);
	snprintf(path[2], sizeof(path[2]), "%s/sin.json", tmp);
	snprintf(path[3], sizeof(path[3]), "%s/pos.json", tmp);
	snprintf(path[4], sizeof(path[4]), "%s/out.json", tmp);
	for (size_t b = 0; b < r->B && !rc; b++) {
		char *text;
		cJSON *doc;
		char pos_opt[600] = "";

		rope_batch(r, b);
		if (write_rows(path[0], r->x, r->S, r->H * r->d) ||
		    write_rows(path[1], r->cb, r->rows, r->half) ||
		    write_rows(path[2], r->sb, r->rows, r->half))
			return -1;
		if (r->pos.rank) {
			double *pv = malloc(r->S * sizeof(double));

			if (!pv)
				return fail("out of memory");
			for (size_t s = 0; s < r->S; s++)
				pv[s] = (double)r->p[s];
			rc = write_rows(path[3], pv, 1, r->S);
			free(pv);
			if (rc)
				return -1;
			snprintf(pos_opt, sizeof(pos_opt), " --positions %s", path[3]);
		}
		snprintf(cmd, sizeof(cmd),
			 "%s forward --q %s --k %s --v %s --heads %zu --rope %s --rope-dim %zu "
			 "--rope-cos %s --rope-sin %s%s -p q_rot -f json -o %s 2>%s/err", mha, path[0],
			 path[0], path[0], r->H, r->rope.mode == MHA_ROPE_HALF ? "half" : "interleaved",
			 r->R, path[1], path[2], pos_opt, path[4], tmp);
		if (system(cmd) != 0) {
			snprintf(path[4], sizeof(path[4]), "%s/err", tmp);
			text = slurp(path[4]);
			rc = fail("command line failed: %s: %.200s", cmd, text ? text : "");
			free(text);
			break;
		}
		text = slurp(path[4]);
		doc = text ? cJSON_Parse(text) : NULL;
		free(text);
		if (!doc)
			return fail("command line: its JSON output does not parse");
		rc = read_all(cJSON_GetObjectItemCaseSensitive(doc, "q_rot"), r->y, r->S * r->H * r->d,
			      "q_rot");
		if (!rc)
			rc = compare_blocks(tl, "output (command line)", r->y, &r->out, b, r->H, r->S, r->d);
		cJSON_Delete(doc);
	}
	return rc;
}

static void rope_free(struct rope_case *r)
{
	tensor *all[] = { &r->in, &r->cos, &r->sin, &r->pos, &r->out };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]->v);
	free(r->x);
	free(r->y);
	free(r->cb);
	free(r->sb);
	free(r->p);
}

/* One RotaryEmbedding case; its line printed. */
static int run_rope_case(const cJSON *c, const char *name, const char *mha, const char *tmp)
{
	struct rope_case r;
	struct tol lib = { .atol = 1e-5, .rtol = 1e-5 }, cli = { .atol = 1e-5, .rtol = 1e-5 };
	int rc;

	memset(&r, 0, sizeof(r));
	rc = rope_setup(&r, c);
	if (!rc)
		rc = rope_library(&r, &lib);
	if (!rc)
		rc = rope_cli(&r, &cli, mha, tmp);
	if (rc)
		printf("FAIL %s: %s\n", name, failure);
	else
		printf("ok %s (RotaryEmbedding, %s, B=%zu H=%zu d=%zu R=%zu%s; worst error %.2g of the "
		       "1e-5 tolerance)\n", name, r.rope.mode == MHA_ROPE_HALF ? "half" : "interleaved",
		       r.B, r.H, r.d, r.R, r.pos.rank ? ", position_ids" : "",
		       lib.worst > cli.worst ? lib.worst : cli.worst);
	rope_free(&r);
	return rc;
}

static void free_problem(struct problem *p)
{
	tensor *all[] = { &p->q, &p->k, &p->v, &p->mask, &p->past_k, &p->past_v, &p->nonpad,
			  &p->y, &p->present_k, &p->present_v, &p->qk };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]->v);
	free(p->Qb);
	free(p->Kb);
	free(p->Vb);
	free(p->bias);
	free(p->allow);
	free(p->kv_lens);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	const char *dir = "../shared/conformance/onnx-attention-opset25", *mha = "./mha";
	char tmp[] = "/tmp/mha-conformance-XXXXXX", **names = NULL;
	size_t n = 0, cap = 0, passed = 0, failed = 0;
	struct dirent *e;
	DIR *d;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mha") && i + 1 < argc)
			mha = argv[++i];
		else
			dir = argv[i];
	}
	d = opendir(dir);
	if (!d) {
		printf("conformance cases not found in %s: skipped\n", dir);
		return 0;
	}
	while ((e = readdir(d)) != NULL) {
		const size_t len = strlen(e->d_name);

		if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
			continue;
		if (n == cap && !(names = realloc(names, (cap = cap ? 2 * cap : 128) * sizeof(*names))))
			return perror("conformance"), 2;
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), by_name);
	if (!mkdtemp(tmp))
		return perror("conformance: mkdtemp"), 2;

	for (size_t i = 0; i < n; i++) {
		char path[4096];
		char *text;
		cJSON *c;
		struct problem p;
		int half = 0;
		struct tol lib = { 0 }, cli = { 0 };
		int rc;

		memset(&p, 0, sizeof(p));
		p.cfg.size = sizeof(p.cfg);
		failure[0] = '\0';
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		text = slurp(path);
		c = text ? cJSON_Parse(text) : NULL;
		free(text);
		if (c && cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "inputs"),
							  "input")) {
			/* a RotaryEmbedding case */
			names[i][strlen(names[i]) - 5] = '\0';
			if (run_rope_case(c, names[i], mha, tmp))
				failed++;
			else
				passed++;
			fflush(stdout);
			cJSON_Delete(c);
			free(names[i]);
			continue;
		}
		rc = c ? setup(&p, c) : fail("cannot read or parse the case");
		if (!rc) {
			/* float16 cases were computed in float16: about 1e-2; float32 about 1e-5 */
			half = p.q.half || p.k.half || p.v.half;
			lib.atol = cli.atol = half ? 1e-2 : 1e-5;
			lib.rtol = cli.rtol = half ? 1e-2 : 1e-5;
			rc = run_library(&p, &lib);
		}
		if (!rc)
			rc = run_cli(&p, &cli, mha, tmp);
		names[i][strlen(names[i]) - 5] = '\0';
		if (rc) {
			failed++;
			printf("FAIL %s: %s\n", names[i], failure);
		} else {
			passed++;
			printf("ok %s (%s, B=%zu Hq=%zu Hkv=%zu; worst error %.2g of the %s tolerance)\n",
			       names[i], half ? "float16" : "float32", p.B, p.Hq, p.Hkv,
			       lib.worst > cli.worst ? lib.worst : cli.worst, half ? "1e-2" : "1e-5");
		}
		fflush(stdout);
		free_problem(&p);
		cJSON_Delete(c);
		free(names[i]);
	}
	free(names);
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
		if (system(cmd) != 0)
			fprintf(stderr, "conformance: could not remove %s\n", tmp);
	}
	printf("%zu passed, %zu failed\n", passed, failed);
	return failed ? 1 : 0;
}

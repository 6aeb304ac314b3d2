/*
 * cmd/compare.c: 'mha compare', someone else's attention against mha's.
 *
 * It takes forward's inputs and options (cmd/forward.c parses them, with
 * --against, --rtol and --atol added), computes every step with the
 * library's plain path, reads their results (against.c) and compares the
 * steps they gave in the order of the computation: shapes, the largest
 * absolute, relative and ULP differences, and where.  For the first step
 * that differs it tries the well-known mistakes, each recomputed, through
 * the library with the configuration changed where an mha option or a
 * rearranged weight expresses the mistake, and with a small tail of the
 * computation here (scores on) for those no configuration can (K·Qᵀ, the
 * softmax over queries), and names the one that reproduces their numbers.
 *
 * Exit status as cmp and diff: 0 agree, 1 differ, 2 trouble (command
 * line, an input, their file).
 */
#include "base/cli.h"
#include "base/number.h"
#include "cmd/against.h"
#include "base/budget.h"
#include "cmd/forward.h"
#include "load/model.h"
#include "load/load.h"
#include "load/shapes.h"
#include "run/steps.h"
#include "base/text.h"
#include "write/write.h"

#include "mha.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char compare_usage[] =
	"usage: mha compare --against PATH -x FILE [-w FILE] [options]\n"
	"       mha compare --against PATH --q FILE --k FILE --v FILE [options]\n"
	"\n"
	"Compare someone else's attention with mha's, step by step, and name the\n"
	"mistake that explains the first step that differs.\n"
	"\n"
	"Their results:\n"
	"      --against PATH    a JSON file in mha's schema (any subset of its keys:\n"
	"                        Q, K, V, q_rot, k_rot, mask, heads[h].scores, ...,\n"
	"                        concat, output), a directory named as 'mha forward -o\n"
	"                        DIR/' names its files (head1_scores.npy, ...), a .npz\n"
	"                        archive named as '-o run.npz' names its members\n"
	"                        (heads.scores, ...), or one matrix: the output\n"
	"      --rtol R          relative tolerance (default 1e-9; 1e-4 with --dtype f32)\n"
	"      --atol A          absolute tolerance (default 1e-12; 1e-5 with --dtype\n"
	"                        f32); an entry agrees when |theirs - mha| <= A +\n"
	"                        R*|mha|\n"
	"\n"
	FORWARD_USAGE_INPUTS
	FORWARD_USAGE_ATTENTION
	"Computation:\n"
	"      --dtype T         f64 (default) or f32: their numbers are float32's;\n"
	"                        mha still computes in float64, and the tolerances and\n"
	"                        ULPs are float32's\n"
	FORWARD_USAGE_RUN
	"      --sequence N      with a batch (3-D inputs): compare sequence N (from 1)\n"
	"\n"
	"Output:\n"
	"  -f, --format FMT      text (default: a table) or json (the report as data)\n"
	FORWARD_USAGE_HELP
	"\n"
	"Exit status: 0 every step given agrees, 1 a step differs, 2 trouble: a bad\n"
	"command line, or an input or --against file that cannot be read or used.\n";

/* ---- options ------------------------------------------------------------- */

struct compare_opts {
	const char *against;
	double rtol, atol;
	int rtol_given, atol_given;
};

enum { O_AGAINST = FORWARD_EXTRA_BASE, O_RTOL, O_ATOL };

static const struct option compare_longopts[] = {
	{ "against", required_argument, NULL, O_AGAINST },
	{ "rtol", required_argument, NULL, O_RTOL },
	{ "atol", required_argument, NULL, O_ATOL },
	{ NULL, 0, NULL, 0 },
};

static int compare_opt(struct forward_options *o, int c, const char *arg)
{
	struct compare_opts *co = o->extra;
	double v;

	if (c == O_AGAINST) {
		co->against = arg;
		return 0;
	}
	if (!opt_number(arg, &v) || v < 0) {
		usage_error("compare", "--%s expects a number of at least 0, not '%s'",
			    c == O_RTOL ? "rtol" : "atol", arg);
		return -1;
	}
	if (c == O_RTOL) {
		co->rtol = v;
		co->rtol_given = 1;
	} else {
		co->atol = v;
		co->atol_given = 1;
	}
	return 0;
}

static const struct forward_command compare_cmd = {
	.hint = "compare", .usage = compare_usage, .extra = compare_longopts, .extra_opt = compare_opt
};

/* forward's options compare has no use for: a usage error */
static int refuse_forward_only(const struct forward_options *o, const struct compare_opts *co)
{
	const char *opt = o->print_given ? "--print" : o->emit.output ? "--output" :
			  o->spec.cell ? "--cell" : o->explain ? "--explain" :
			  o->color_given ? "--color" : o->precision_given ? "--precision" :
			  o->emit.compress ? "--compress" : NULL;

	if (opt)
		return usage_error("compare", "%s is forward's: compare writes its report to "
				   "standard output", opt);
	if (o->format_given && o->emit.format != FORMAT_TEXT && o->emit.format != FORMAT_JSON)
		return usage_error("compare", "compare's --format takes text or json");
	if (!co->against)
		return usage_error("compare", "no --against PATH: their results to compare");
	if (!strcmp(co->against, "-")) {
		const struct problem_spec *s = &o->spec;
		const char *const files[] = { s->x, s->kv, s->xk, s->xv, s->w, s->q, s->k, s->v,
					      s->mask, s->positions, s->rope_cos, s->rope_sin, s->config,
					      s->sinks, s->alibi_slopes };

		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			if (files[i] && !strcmp(files[i], "-"))
				return usage_error("compare", "only one input can be '-' (standard "
						   "input): --against - and another");
		for (int i = 0; i < N_WEIGHTS; i++)
			if (s->one[i] && !strcmp(s->one[i], "-"))
				return usage_error("compare", "only one input can be '-' (standard "
						   "input): --against - and another");
	}
	if (o->spec.cfg.exact)
		return usage_error("compare", "--exact is forward's: compare always takes the plain "
				   "path");
	return 0;
}

/* ---- a full set of steps -------------------------------------------------- */

/* every stage the library hands over */
#define ALL_STAGES ((1u << MHA_STAGE_COUNT) - 1u)

/* Every step of one computation, each whole (per-head steps (H, rows, cols)). */
struct set {
	matrix m[C_COUNT];
};

static void set_free(struct set *s)
{
	for (int i = 0; i < C_COUNT; i++)
		matrix_free(&s->m[i]);
}

static int copy_matrix(matrix *dst, const matrix *src)
{
	if (!src->rank)
		return 0;
	if (matrix_alloc_dims(dst, src->rank, src->dim))
		return -1;
	memcpy(dst->v, src->v, matrix_size(src) * sizeof(double));
	return 0;
}

/* the heads' matrices of step s as one (H, rows, cols) */
static int stack_heads(matrix *dst, const struct step_results *r, int s)
{
	const matrix *per = r->per_head[s];
	size_t plane;

	if (!per || !per[0].rank)
		return 0;
	plane = matrix_size(&per[0]);
	if (matrix_alloc(dst, 3, r->heads, per[0].dim[0], per[0].dim[1]))
		return -1;
	for (size_t h = 0; h < r->heads; h++)
		memcpy(dst->v + h * plane, per[h].v, plane * sizeof(double));
	return 0;
}

/* the observer's copies, X and the output, as a set: the whole matrices
 * moved out of r and out, each head's freed once stacked, so that a set
 * and its run never hold two copies of much */
static int gather(struct set *s, struct step_results *r, const matrix *x, matrix *out)
{
	for (int i = 0; i < C_COUNT; i++) {
		const int st = cmp_steps[i].step;

		if (i == C_X) {
			if (x && copy_matrix(&s->m[i], x))
				return -1;
		} else if (i == C_OUTPUT) {
			s->m[i] = *out;
			memset(out, 0, sizeof(*out));
		} else if (cmp_steps[i].per_head) {
			if (stack_heads(&s->m[i], r, st))
				return -1;
			/* heads.Q, K, V and the heads' output share no list with another
			 * step: free each list once stacked */
			for (size_t h = 0; r->per_head[st] && h < r->heads; h++)
				matrix_free(&r->per_head[st][h]);
		} else {
			s->m[i] = r->whole[st];
			memset(&r->whole[st], 0, sizeof(r->whole[st]));
		}
	}
	return 0;
}

/* Bytes a set of every step holds (doubles; the mask twice: per head and stacked). */
static size_t set_bytes(const struct problem *p)
{
	const mha_dims *d = &p->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, H = d->heads;
	const double nq = (double)d->n_q, nkv = (double)d->n_kv;
	double n = nq * (double)d->d_q_in + nq * (double)(H * d->d_k) * 3 +
		   nkv * (double)(G * (d->d_k + d->d_v)) + nkv * (double)(G * d->d_k) +
		   nkv * (double)(H * (d->d_k + d->d_v)) + 7.0 * (double)H * nq * nkv +
		   2.0 * nq * (double)(H * d->d_v) + nq * (double)mha_output_cols(d, 1) +
		   nq * (double)(H * d->d_v);
	const double bytes = n * sizeof(double) + 64.0 * (double)(H * 16 + 64);

	return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/*
 * mha's steps and one mistake's at a time, both whole, and the library's
 * scratch: refused up front when that passes --max-memory.  0, or -1 said.
 */
static int check_memory(const struct problem *p)
{
	const size_t limit = budget_limit(), held = budget_held();
	const size_t lib = mha_memory(&p->d, &p->cfg, ALL_STAGES, 0), set = set_bytes(p);
	char t[48], a[48], b[48], c[48], m[48];
	size_t total = held;

	if (limit == SIZE_MAX)
		return 0;
	/* mha's set, a mistake's, and its run's largest step not yet moved over */
	const size_t step = (size_t)fmin((double)SIZE_MAX, (double)p->d.heads * (double)p->d.n_q *
					 (double)p->d.n_kv * sizeof(double));

	total = lib > SIZE_MAX - total ? SIZE_MAX : total + lib;
	total = set > (SIZE_MAX - total) / 2 ? SIZE_MAX : total + 2 * set;
	total = step > SIZE_MAX - total ? SIZE_MAX : total + step;
	if (total <= limit)
		return 0;
	return error("comparing needs about %s (the inputs and their results %s, the computation "
		     "%s, mha's steps and a mistake's %s), more than --max-memory (%s): raise "
		     "--max-memory", show_bytes(t, sizeof(t), total), show_bytes(a, sizeof(a), held),
		     show_bytes(b, sizeof(b), lib), show_bytes(c, sizeof(c), total - held - lib),
		     show_bytes(m, sizeof(m), limit));
}

/*
 * One computation through the library, every step kept: 0, 1 when the
 * library refuses it (a mistaken configuration may overflow), -1 said.
 */
static int run_set(struct set *s, const struct problem *p, const mha_dims *d, const mha_inputs *in,
		   const mha_weights *w, const mha_config *cfg, mha_report *rep)
{
	struct step_results r = { .heads = d->heads, .mask_per_head = 1 };
	const mha_observer obs = { .size = sizeof(mha_observer), .fn = steps_keep, .ctx = &r,
				   .wanted = ALL_STAGES };
	matrix out = { 0 };
	mha_report local = MHA_INIT(mha_report);
	mha_status st;
	int rc = -1;

	if (matrix_alloc(&out, 2, d->n_q, mha_output_cols(d, w->W_O != NULL), 1))
		return -1;
	st = mha_forward(out.v, d, in, w, cfg, &obs, rep ? rep : &local);
	if (st == MHA_ERR_OBSERVER || st == MHA_ERR_NOMEM) {
		if (st == MHA_ERR_NOMEM)
			error("out of memory");
		goto done;
	}
	if (st != MHA_OK) {
		rc = 1;
		goto done;
	}
	rc = steps_stack(&r) || gather(s, &r, p->direct ? NULL : &p->x, &out) ? -1 : 0;
	if (rc < 0)
		set_free(s);
done:
	steps_results_free(&r);
	matrix_free(&out);
	return rc;
}

/* ---- comparing one step ---------------------------------------------------- */

/* (P, R, C): the last two dimensions, and the planes before them */
static void shape3(const matrix *m, size_t *P, size_t *R, size_t *C)
{
	*C = m->rank ? m->dim[m->rank - 1] : 0;
	*R = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	*P = 1;
	for (size_t i = 0; i + 2 < m->rank; i++)
		*P *= m->dim[i];
}

/* distance in units in the last place of a double, or of a float */
static double ulps(double a, double b, int f32)
{
	if (a == b)
		return 0;
	if (!isfinite(a) || !isfinite(b))
		return INFINITY;
	if (f32) {
		const float fa = (float)a, fb = (float)b;
		int32_t ia, ib;

		if (fa == fb)
			return 0;
		memcpy(&ia, &fa, sizeof(ia));
		memcpy(&ib, &fb, sizeof(ib));
		/* the bit patterns in the order of the numbers they stand for */
		return fabs((double)(ia < 0 ? (int64_t)INT32_MIN - ia : ia) -
			    (double)(ib < 0 ? (int64_t)INT32_MIN - ib : ib));
	} else {
		int64_t ia, ib;

		memcpy(&ia, &a, sizeof(ia));
		memcpy(&ib, &b, sizeof(ib));
		ia = ia < 0 ? INT64_MIN - ia : ia;
		ib = ib < 0 ? INT64_MIN - ib : ib;
		/* same sign: exact; else the sum of two distances from zero */
		return (ia >= 0) == (ib >= 0) ? (double)(ia > ib ? (uint64_t)(ia - ib) : (uint64_t)(ib - ia))
					      : fabs((double)ia) + fabs((double)ib);
	}
}

struct tol {
	double rtol, atol;
	int f32; /* ULPs of float */
};

struct stat {
	int given;          /* they gave the step */
	int shape_ok;       /* their shape is mha's (a mask: one plane for every head too) */
	int pass;
	size_t P, R, C;     /* mha's, as (planes, rows, cols) */
	double max_abs, max_rel, max_ulp;
	size_t worst;       /* mha's flat index of the largest |diff| */
	double worst_theirs, worst_mha;
	size_t differing, entries;
};

/*
 * theirs against mine; a 2-D mask of theirs stands for every head's.  Their
 * NaN where mha has one agrees, as does the same infinity.
 */
static void compare_step(struct stat *st, int id, const matrix *theirs, const matrix *mine,
			 const struct tol *t)
{
	size_t tP, tR, tC;

	memset(st, 0, sizeof(*st));
	st->given = 1;
	shape3(mine, &st->P, &st->R, &st->C);
	shape3(theirs, &tP, &tR, &tC);
	st->shape_ok = mine->rank && tR == st->R && tC == st->C &&
		       (tP == st->P || (id == C_MASK && tP == 1));
	if (!st->shape_ok)
		return;
	st->entries = st->P * st->R * st->C;
	for (size_t i = 0; i < st->entries; i++) {
		const double m = mine->v[i];
		const double y = theirs->v[tP == 1 ? i % (st->R * st->C) : i];
		const int same = m == y || (isnan(m) && isnan(y));
		const double ad = same ? 0 : isnan(m - y) ? INFINITY : fabs(m - y);
		const double rel = ad == 0 ? 0 : m != 0 && isfinite(m) ? ad / fabs(m) : INFINITY;
		const double u = same ? 0 : ulps(m, y, t->f32);

		/* an infinity agrees only with itself: inf <= rtol*inf must not pass */
		if (!same && (!isfinite(ad) || !isfinite(m) || !(ad <= t->atol + t->rtol * fabs(m))))
			st->differing++;
		if (!i || ad > st->max_abs) {
			st->worst = i;
			st->worst_theirs = y;
			st->worst_mha = m;
			st->max_abs = ad;
		}
		if (rel > st->max_rel)
			st->max_rel = rel;
		if (u > st->max_ulp)
			st->max_ulp = u;
	}
	st->pass = !st->differing;
}

/* whether set c reproduces theirs at step id within t */
static int reproduces(const struct set *c, const struct against *a, int id, const struct tol *t)
{
	struct stat st;

	if (!c->m[id].rank)
		return 0;
	compare_step(&st, id, &a->m[id], &c->m[id], t);
	return st.pass;
}

/* ---- the mistakes ----------------------------------------------------------- */

struct mistake {
	const char *id;   /* JSON "mistake" */
	char option[64];  /* the mha option that computes it, or "" */
	char with[96];    /* "--scale dmodel", "W_Q transposed": after "matches mha's with" */
	char why[320];    /* "you divided by sqrt(d_model) = 4; this layer divides by ..." */
};

struct ctx {
	const struct problem *p;
	const struct set *mine;
	const struct against *a;
	const mha_report *rep;
	struct tol tol;
	int f32;
};

/* "divides by sqrt(d_k) = 2" for a config of these dims */
static void scale_words(char *buf, size_t size, const mha_dims *d, const mha_config *cfg, int you)
{
	const double s = mha_scale_of(d, cfg);
	const char *verb = you ? "divided" : "divides";

	switch (cfg->scale_mode) {
	case MHA_SCALE_DK:
		snprintf(buf, size, "%s by sqrt(d_k) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_DMODEL:
		snprintf(buf, size, "%s by sqrt(d_model) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_SEQLEN:
		snprintf(buf, size, "%s by sqrt(n_kv) = %.6g", verb, 1 / s);
		break;
	case MHA_SCALE_NONE:
		snprintf(buf, size, "%s", you ? "did not scale the scores" : "does not scale the scores");
		break;
	default:
		snprintf(buf, size, "%s by %.6g", you ? "multiplied" : "multiplies", s);
		break;
	}
}

/*
 * Scratch memory of a mistake's recomputation (weights rearranged, masks
 * inverted), charged to --max-memory as a matrix is: the charge in front of
 * the block.  NULL said (out of memory, or past the limit).
 */
static void *charged_alloc(size_t n)
{
	const size_t held = budget_block(n + sizeof(size_t));
	size_t *p;
	char lim[48];

	if (n > SIZE_MAX / 2 || budget_take(held)) {
		error("recomputing the mistakes needs more than --max-memory (%s): raise "
		      "--max-memory", show_bytes(lim, sizeof(lim), budget_limit()));
		return NULL;
	}
	p = malloc(n + sizeof(size_t));
	if (!p) {
		budget_give(held);
		error("out of memory");
		return NULL;
	}
	p[0] = held;
	return p + 1;
}

static void charged_free(void *q)
{
	if (q) {
		size_t *p = (size_t *)q - 1;

		budget_give(p[0]);
		free(p);
	}
}

/* a weight's transpose, in place of the square original: (n, n) */
static double *transposed(const double *w, size_t n)
{
	double *t = charged_alloc(n * n * sizeof(*t));

	for (size_t i = 0; t && i < n; i++)
		for (size_t j = 0; j < n; j++)
			t[j * n + i] = w[i * n + j];
	return t;
}

/* perm[b*dk + i] = i*H + b: the column of the whole that interleaved head b's i-th is */
static size_t *interleave_perm(size_t H, size_t dk)
{
	size_t *perm = malloc(H * dk * sizeof(*perm));

	for (size_t b = 0; perm && b < H; b++)
		for (size_t i = 0; i < dk; i++)
			perm[b * dk + i] = i * H + b;
	return perm;
}

/* m (rows, cols) with column j taken from column perm[j] of src */
static double *permute_cols(const double *src, size_t rows, size_t cols, const size_t *perm)
{
	double *m = charged_alloc(rows * cols * sizeof(*m));

	for (size_t r = 0; m && r < rows; r++)
		for (size_t j = 0; j < cols; j++)
			m[r * cols + j] = src[r * cols + perm[j]];
	return m;
}

/* back to the whole's column order: m's column j was the whole's perm[j] */
static int unpermute(matrix *m, const size_t *perm, size_t cols)
{
	double *tmp;
	size_t rows;

	if (!m->rank || matrix_cols(m) != cols)
		return 0;
	rows = matrix_size(m) / cols;
	tmp = charged_alloc(matrix_size(m) * sizeof(*tmp));
	if (!tmp)
		return -1;
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++)
			tmp[r * cols + perm[j]] = m->v[r * cols + j];
	memcpy(m->v, tmp, matrix_size(m) * sizeof(double));
	charged_free(tmp);
	return 0;
}

/*
 * The tail of the computation from mine's scores on, the scores transposed
 * (K·Qᵀ) or the softmax taken over each column (the queries): what no
 * configuration of the library computes.  0, 1 not possible, -1 said.
 */
static int tail_set(struct set *c, const struct ctx *x, int transpose, int by_query)
{
	const struct problem *p = x->p;
	const struct set *mine = x->mine;
	const mha_dims *d = &p->d;
	const size_t H = d->heads, nq = d->n_q, nkv = d->n_kv, dv = d->d_v;
	const size_t R = transpose ? nkv : nq, C = transpose ? nq : nkv;
	const double scale = x->rep->scale, cap = p->cfg.softcap;
	const matrix *mask = &mine->m[C_MASK], *V = &mine->m[C_HEAD_V];
	size_t mP, mR, mC;
	int full;

	if (!mine->m[C_SCORES].rank || !V->rank || !mask->rank)
		return 1;
	shape3(mask, &mP, &mR, &mC);
	full = mR == R && mC == C;
	for (int i = 0; i <= C_HEAD_V; i++)
		if (copy_matrix(&c->m[i], &mine->m[i]))
			return -1;
	if (matrix_alloc(&c->m[C_SCORES], 3, H, R, C))
		return -1;
	for (size_t h = 0; h < H; h++)
		for (size_t i = 0; i < R; i++)
			for (size_t j = 0; j < C; j++)
				c->m[C_SCORES].v[(h * R + i) * C + j] =
					mine->m[C_SCORES].v[(h * nq + (transpose ? j : i)) * nkv +
							    (transpose ? i : j)];
	if (!full)
		return 0; /* K·Qᵀ of another shape than Q·Kᵀ goes no further */
	if (copy_matrix(&c->m[C_MASK], mask) ||
	    matrix_alloc(&c->m[C_SCALED], 3, H, R, C) || matrix_alloc(&c->m[C_MASKED], 3, H, R, C) ||
	    matrix_alloc(&c->m[C_SOFTMAX], 3, H, R, C) ||
	    (cap > 0 && matrix_alloc(&c->m[C_SOFTCAPPED], 3, H, R, C)) ||
	    matrix_alloc(&c->m[C_HEAD_OUTPUT], 3, H, R, dv) || matrix_alloc(&c->m[C_CONCAT], 2, R, H * dv, 1))
		return -1;
	for (size_t h = 0; h < H; h++) {
		double *sc = c->m[C_SCALED].v + h * R * C, *mk = c->m[C_MASKED].v + h * R * C;
		double *sm = c->m[C_SOFTMAX].v + h * R * C;
		const double *mh = mask->v + (mP > 1 ? h : 0) * R * C;

		for (size_t k = 0; k < R * C; k++) {
			double v = c->m[C_SCORES].v[h * R * C + k] * scale;

			sc[k] = v;
			if (cap > 0) {
				v = cap * tanh(v / cap);
				c->m[C_SOFTCAPPED].v[h * R * C + k] = v;
			}
			mk[k] = mh[k] == -INFINITY ? -INFINITY : v + mh[k];
		}
		/* the softmax along rows (keys), or down columns (queries) */
		for (size_t a = 0; a < (by_query ? C : R); a++) {
			const size_t n = by_query ? R : C, stride = by_query ? C : 1;
			const size_t at = by_query ? a : a * C;
			const double sink = !by_query && p->cfg.sinks ? p->cfg.sinks[h] : -INFINITY;
			double mx = sink, sum = 0;

			for (size_t k = 0; k < n; k++)
				mx = fmax(mx, mk[at + k * stride]);
			for (size_t k = 0; k < n; k++) {
				const double e = mx == -INFINITY ? 0 : exp(mk[at + k * stride] - mx);

				sm[at + k * stride] = e;
				sum += e;
			}
			if (sink > -INFINITY && mx > -INFINITY)
				sum += exp(sink - mx);
			for (size_t k = 0; k < n; k++)
				sm[at + k * stride] = sum > 0 ? sm[at + k * stride] / sum : 0;
		}
		for (size_t i = 0; i < R; i++)
			for (size_t e = 0; e < dv; e++) {
				double acc = 0;

				for (size_t j = 0; j < C; j++)
					acc += sm[i * C + j] * V->v[(h * nkv + j) * dv + e];
				c->m[C_HEAD_OUTPUT].v[(h * R + i) * dv + e] = acc;
				c->m[C_CONCAT].v[i * H * dv + h * dv + e] = acc;
			}
	}
	if (!p->weights.W_O)
		return copy_matrix(&c->m[C_OUTPUT], &c->m[C_CONCAT]);
	if (matrix_alloc(&c->m[C_OUTPUT], 2, R, d->d_out, 1))
		return -1;
	for (size_t i = 0; i < R; i++)
		for (size_t o = 0; o < d->d_out; o++) {
			double acc = 0;

			for (size_t k = 0; k < H * dv; k++)
				acc += c->m[C_CONCAT].v[i * H * dv + k] * p->weights.W_O[k * d->d_out + o];
			c->m[C_OUTPUT].v[i * d->d_out + o] = acc + (p->weights.b_O ? p->weights.b_O[o] : 0);
		}
	return 0;
}

/* heads split by interleaved columns, and merged back the same way */
static int interleaved_set(struct set *c, const struct ctx *x)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	mha_inputs in = p->in;
	mha_weights w = p->weights;
	size_t *pq = interleave_perm(d->heads, d->d_k), *pk = interleave_perm(d->kv_heads, d->d_k);
	size_t *pv = interleave_perm(d->kv_heads, d->d_v), *po = interleave_perm(d->heads, d->d_v);
	double *bufs[8] = { NULL };
	size_t nb = 0;
	int rc = -1;

	if (!pq || !pk || !pv || !po) {
		error("out of memory");
		goto done;
	}
	/* each projection's columns, or its input's where there is no weight */
#define PERMUTE(W, b, X, rows_in, xrows, perm, cols)                                         \
	do {                                                                                  \
		if (W) {                                                                      \
			W = bufs[nb++] = permute_cols(W, rows_in, cols, perm);               \
			if (b)                                                                \
				b = bufs[nb++] = permute_cols(b, 1, cols, perm);              \
		} else {                                                                      \
			X = bufs[nb++] = permute_cols(X, xrows, cols, perm);                  \
		}                                                                             \
	} while (0)
	PERMUTE(w.W_Q, w.b_Q, in.xq, d->d_q_in, d->n_q, pq, d->heads * d->d_k);
	PERMUTE(w.W_K, w.b_K, in.xk, d->d_k_in, d->n_kv, pk, d->kv_heads * d->d_k);
	PERMUTE(w.W_V, w.b_V, in.xv, d->d_v_in, d->n_kv, pv, d->kv_heads * d->d_v);
#undef PERMUTE
	if (w.W_O) {
		/* concat's column j is theirs po[j]: W_O's rows follow */
		double *wo = charged_alloc(d->heads * d->d_v * d->d_out * sizeof(*wo));

		bufs[nb++] = wo;
		for (size_t j = 0; wo && j < d->heads * d->d_v; j++)
			memcpy(wo + j * d->d_out, p->weights.W_O + po[j] * d->d_out,
			       d->d_out * sizeof(*wo));
		w.W_O = wo;
	}
	for (size_t i = 0; i < nb; i++)
		if (!bufs[i])
			goto done; /* said */
	rc = run_set(c, p, d, &in, &w, &p->cfg, NULL);
	if (rc)
		goto done;
	/* the whole matrices in their order again: only the split was wrong (X
	 * permuted for a projection without weight is X itself to them) */
	matrix_free(&c->m[C_X]);
	rc = copy_matrix(&c->m[C_X], &x->mine->m[C_X]);
	if (!rc)
		rc = unpermute(&c->m[C_Q], pq, d->heads * d->d_k) ||
		     unpermute(&c->m[C_Q_ROT], pq, d->heads * d->d_k) ||
		     unpermute(&c->m[C_K], pk, d->kv_heads * d->d_k) ||
		     unpermute(&c->m[C_K_ROT], pk, d->kv_heads * d->d_k) ||
		     unpermute(&c->m[C_V], pv, d->kv_heads * d->d_v) ||
		     unpermute(&c->m[C_CONCAT], po, d->heads * d->d_v) ||
		     (!w.W_O && unpermute(&c->m[C_OUTPUT], po, d->heads * d->d_v)) ? -1 : 0;
done:
	for (size_t i = 0; i < nb; i++)
		charged_free(bufs[i]);
	free(pq);
	free(pk);
	free(pv);
	free(po);
	return rc;
}

/* the causal rule inverted, as a boolean mask: query i sees exactly the keys it should not */
static unsigned char *anti_causal(const struct problem *p)
{
	const mha_dims *d = &p->d;
	const ptrdiff_t off = mha_causal_offset(d, &p->cfg, 0);
	unsigned char *allow = charged_alloc(d->n_q * d->n_kv);

	for (size_t i = 0; allow && i < d->n_q; i++)
		for (size_t j = 0; j < d->n_kv; j++)
			allow[i * d->n_kv + j] = (ptrdiff_t)j > (ptrdiff_t)i + off;
	return allow;
}

enum {
	M_F32, M_SCALE_DMODEL, M_SCALE_SEQLEN, M_SCALE_NONE, M_SCALE_DK, M_WQ_T, M_WK_T, M_WV_T, M_WO_T, M_KQ,
	M_INTERLEAVED, M_MASK_INVERTED, M_CAUSAL_INVERTED, M_CAUSAL_ALIGN, M_NO_MASK, M_NO_CAUSAL,
	M_NO_KV_LEN, M_SOFTMAX_QUERIES, M_NO_BQ, M_NO_BK, M_NO_BV, M_NO_BO, M_ROPE, M_COUNT
};

/*
 * Mistake k recomputed into c, and described in m: 0, 1 when it does not
 * apply to this run (or cannot differ from mha's), -1 said.
 */
static int candidate(int k, const struct ctx *x, struct mistake *m, struct set *c)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	mha_config cfg = p->cfg;
	mha_weights w = p->weights;
	mha_inputs in = p->in;
	char ours[120], theirs[120];
	double *tmp = NULL;
	unsigned char *allow = NULL;
	int rc;

	memset(m, 0, sizeof(*m));
	switch (k) {
	case M_SCALE_DMODEL: case M_SCALE_SEQLEN: case M_SCALE_NONE: case M_SCALE_DK: {
		static const char *const names[] = { "dmodel", "seqlen", "none", "dk" };
		static const char *const ids[] = { "scale-dmodel", "scale-seqlen", "scale-none",
						   "scale-dk" };
		const int i = k - M_SCALE_DMODEL;

		/* scale-dk: the run itself scales otherwise (--scale dmodel, a number) */
		cfg.scale_mode = k == M_SCALE_DMODEL ? MHA_SCALE_DMODEL : k == M_SCALE_SEQLEN ?
				 MHA_SCALE_SEQLEN : k == M_SCALE_NONE ? MHA_SCALE_NONE : MHA_SCALE_DK;
		if (mha_scale_of(d, &cfg) == x->rep->scale)
			return 1;
		m->id = ids[i];
		snprintf(m->option, sizeof(m->option), "--scale %s", names[i]);
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		scale_words(theirs, sizeof(theirs), d, &cfg, 1);
		scale_words(ours, sizeof(ours), d, &p->cfg, 0);
		snprintf(m->why, sizeof(m->why), "you %s; this layer %s", theirs, ours);
		break;
	}
	case M_WQ_T: case M_WK_T: case M_WV_T: case M_WO_T: {
		static const char *const names[] = { "W_Q", "W_K", "W_V", "W_O" };
		const double **slot = k == M_WQ_T ? &w.W_Q : k == M_WK_T ? &w.W_K : k == M_WV_T ? &w.W_V
				      : &w.W_O;
		const size_t rows = k == M_WQ_T ? d->d_q_in : k == M_WK_T ? d->d_k_in : k == M_WV_T ?
				    d->d_v_in : d->heads * d->d_v;
		const size_t cols = k == M_WQ_T ? d->heads * d->d_k : k == M_WK_T ? d->kv_heads * d->d_k
				    : k == M_WV_T ? d->kv_heads * d->d_v : d->d_out;
		const char *name = names[k - M_WQ_T];

		/* only a square weight can be applied the wrong way round */
		if (!*slot || rows != cols)
			return 1;
		tmp = transposed(*slot, rows);
		if (!tmp)
			return -1;
		*slot = tmp;
		m->id = "weight-transposed";
		snprintf(m->with, sizeof(m->with), "%s transposed", name);
		snprintf(m->why, sizeof(m->why), "you applied %s the wrong way round, x*%s^T where this "
			 "layer computes x*%s (%s), as %s", name, name, name,
			 p->spec.layout == LAYOUT_TORCH ? "--layout torch: x*W^T of PyTorch's weight"
			 : "weights stored d_in x d_out", p->spec.layout == LAYOUT_TORCH ?
			 "nn.Linear does" : "the tutorials write it");
		break;
	}
	case M_KQ:
		m->id = "scores-transposed";
		snprintf(m->with, sizeof(m->with), "the scores transposed");
		snprintf(m->why, sizeof(m->why), "you computed K*Q^T; the scores are Q*K^T, a row per "
			 "query and a column per key");
		return tail_set(c, x, 1, 0);
	case M_INTERLEAVED:
		if (d->heads == 1)
			return 1;
		m->id = "heads-interleaved";
		snprintf(m->with, sizeof(m->with), "the heads split by interleaved columns");
		snprintf(m->why, sizeof(m->why), "you gave head h the columns h, h+%zu, h+%zu, ... of Q, "
			 "K and V; this layer gives it a block of d_k = %zu columns side by side, "
			 "h*%zu to h*%zu+%zu", d->heads, 2 * d->heads, d->d_k, d->d_k, d->d_k, d->d_k - 1);
		return interleaved_set(c, x);
	case M_MASK_INVERTED: {
		const size_t n = matrix_size(&p->mask);

		if (!p->allow)
			return 1;
		allow = charged_alloc(n + 1);
		if (!allow)
			return -1;
		for (size_t i = 0; i < n; i++)
			allow[i] = !p->allow[i];
		cfg.mask.allow = allow;
		m->id = "mask-inverted";
		snprintf(m->option, sizeof(m->option), "--mask-bool %s",
			 p->spec.mask_block ? "attend" : "block");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you read the boolean mask's true as %s; this run "
			 "reads it as %s", p->spec.mask_block ? "may attend" : "blocked",
			 p->spec.mask_block ? "blocked (PyTorch's attn_mask)" : "may attend (SDPA, ONNX)");
		break;
	}
	case M_CAUSAL_INVERTED:
		if (!cfg.causal || cfg.mask.allow || cfg.window.on || cfg.alibi.on || cfg.kv_lens)
			return 1;
		allow = anti_causal(p);
		if (!allow)
			return -1;
		cfg.causal = MHA_CAUSAL_NONE;
		cfg.mask.allow = allow;
		cfg.mask.per_head = cfg.mask.per_batch = 0;
		m->id = "causal-inverted";
		snprintf(m->with, sizeof(m->with), "the causal mask inverted");
		snprintf(m->why, sizeof(m->why), "your causal mask lets each query see the keys after "
			 "it and blocks those up to it: true read as blocked where it meant may attend, "
			 "or the reverse");
		break;
	case M_CAUSAL_ALIGN: {
		const ptrdiff_t was = mha_causal_offset(d, &p->cfg, 0);

		if (cfg.causal != MHA_CAUSAL_TOP_LEFT && cfg.causal != MHA_CAUSAL_BOTTOM_RIGHT)
			return 1;
		cfg.causal = cfg.causal == MHA_CAUSAL_TOP_LEFT ? MHA_CAUSAL_BOTTOM_RIGHT
							      : MHA_CAUSAL_TOP_LEFT;
		if (mha_causal_offset(d, &cfg, 0) == was)
			return 1;
		m->id = "causal-alignment";
		snprintf(m->option, sizeof(m->option), "--causal=%s",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "top-left" : "bottom-right");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you aligned the causal mask %s (query i sees keys j "
			 "<= i%s); this run aligns it %s (j <= i%s)",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "top-left" : "bottom-right",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "" : " + n_kv - n_q",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? "bottom-right" : "top-left",
			 cfg.causal == MHA_CAUSAL_TOP_LEFT ? " + n_kv - n_q" : "");
		break;
	}
	case M_NO_MASK:
		if (!cfg.mask.allow && !cfg.mask.bias)
			return 1;
		cfg.mask.allow = NULL;
		cfg.mask.bias = NULL;
		m->id = "mask-missing";
		snprintf(m->with, sizeof(m->with), "no --mask");
		text_shown(ours, sizeof(ours), path_shown(p->spec.mask));
		snprintf(m->why, sizeof(m->why), "you left out the mask (--mask %s)", ours);
		break;
	case M_NO_CAUSAL:
		if (!cfg.causal)
			return 1;
		cfg.causal = MHA_CAUSAL_NONE;
		m->id = "causal-missing";
		snprintf(m->with, sizeof(m->with), "no --causal");
		snprintf(m->why, sizeof(m->why), "you left out the causal mask: each query saw every "
			 "key, the later ones too");
		break;
	case M_NO_KV_LEN:
		if (!cfg.kv_len && !cfg.kv_lens)
			return 1;
		cfg.kv_len = 0;
		cfg.kv_lens = NULL;
		m->id = "padding-missing";
		snprintf(m->with, sizeof(m->with), "no --kv-len");
		snprintf(m->why, sizeof(m->why), "you left out the padding mask: the keys past --kv-len "
			 "took part");
		break;
	case M_SOFTMAX_QUERIES:
		if (p->cfg.sinks)
			return 1;
		m->id = "softmax-over-queries";
		snprintf(m->with, sizeof(m->with), "the softmax over the queries");
		snprintf(m->why, sizeof(m->why), "you took the softmax down each column (over the "
			 "queries: axis 0, or dim=-2); it runs along each row, over the keys (axis -1), "
			 "so that each query's weights sum to 1");
		return tail_set(c, x, 0, 1);
	case M_NO_BQ: case M_NO_BK: case M_NO_BV: case M_NO_BO: {
		static const char *const names[] = { "b_Q", "b_K", "b_V", "b_O" };
		static const char *const what[] = { "query", "key", "value", "output" };
		const double **slot = k == M_NO_BQ ? &w.b_Q : k == M_NO_BK ? &w.b_K : k == M_NO_BV ?
				      &w.b_V : &w.b_O;
		const int i = k - M_NO_BQ;

		if (!*slot || (k == M_NO_BO && !w.W_O))
			return 1;
		*slot = NULL;
		m->id = "bias-missing";
		snprintf(m->with, sizeof(m->with), "no %s", names[i]);
		snprintf(m->why, sizeof(m->why), "you left out %s, the bias of the %s projection",
			 names[i], what[i]);
		break;
	}
	case M_ROPE:
		if (!cfg.rope.mode)
			return 1;
		cfg.rope.mode = cfg.rope.mode == MHA_ROPE_HALF ? MHA_ROPE_INTERLEAVED : MHA_ROPE_HALF;
		m->id = "rope-pairs";
		snprintf(m->option, sizeof(m->option), "--rope %s",
			 cfg.rope.mode == MHA_ROPE_HALF ? "half" : "interleaved");
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "you paired RoPE's features %s; this run pairs them %s",
			 cfg.rope.mode == MHA_ROPE_HALF ? "half-split, i with i + R/2 (Llama, GPT-NeoX)"
			 : "interleaved, 2i with 2i + 1 (GPT-J)",
			 cfg.rope.mode == MHA_ROPE_HALF ? "interleaved, 2i with 2i + 1 (--rope "
			 "interleaved)" : "half-split, i with i + R/2 (--rope half)");
		break;
	default:
		return 1;
	}
	rc = run_set(c, p, d, &in, &w, &cfg, NULL);
	charged_free(tmp);
	charged_free(allow);
	return rc;
}

struct diagnosis {
	int found;
	int step;         /* the step it explains: the first difference, or with float32
			     numbers the first beyond float32's rounding */
	struct mistake m;
	int later;        /* every step they gave after the first difference matches it too */
	char message[640];
};

/*
 * The mistake that reproduces their first differing step (and agrees with
 * every step they gave before it): the first, in the order above, that
 * matches all their later steps too, else the first that matches.
 */
static int diagnose_with(struct diagnosis *dg, const struct ctx *x, int first,
			 const struct tol *tol)
{
	const struct tol f32tol = { 1e-4, 1e-5, 1 };
	struct mistake best = { 0 };
	int have = 0, best_later = 0;

	memset(dg, 0, sizeof(*dg));
	for (int k = 0; k < M_COUNT && !(have && best_later); k++) {
		struct set c = { 0 };
		struct mistake m;
		int ok = 1, later = 1, rc;

		if (k == M_F32) {
			/* float32 rounding is no recomputation: their numbers within its tolerance */
			if (x->f32 || tol->f32)
				continue;
			for (int s = 0; s <= first && ok; s++)
				ok = !x->a->m[s].rank || reproduces(x->mine, x->a, s, &f32tol);
			for (int s = first + 1; s < C_COUNT && ok; s++)
				later &= !x->a->m[s].rank || reproduces(x->mine, x->a, s, &f32tol);
			if (ok) {
				best = (struct mistake){ .id = "float32", .option = "--dtype f32" };
				snprintf(best.with, sizeof(best.with), "--dtype f32");
				snprintf(best.why, sizeof(best.why), "your numbers agree within float32 "
					 "rounding (rtol 1e-4, atol 1e-5): you computed in float32; "
					 "compare with --dtype f32");
				have = 1;
				best_later = later;
			}
			continue;
		}
		rc = candidate(k, x, &m, &c);
		if (rc < 0) {
			set_free(&c);
			return -1;
		}
		if (rc == 0) {
			for (int s = 0; s <= first && ok; s++)
				ok = !x->a->m[s].rank || reproduces(&c, x->a, s, tol);
			for (int s = first + 1; s < C_COUNT && ok; s++)
				later &= !x->a->m[s].rank || reproduces(&c, x->a, s, tol);
			if (ok && (!have || (later && !best_later))) {
				best = m;
				have = 1;
				best_later = later;
			}
		}
		set_free(&c);
	}
	if (!have)
		return 0;
	dg->found = 1;
	dg->step = first;
	dg->m = best;
	dg->later = best_later;
	if (!strcmp(best.id, "float32"))
		snprintf(dg->message, sizeof(dg->message), "%s: %s", cmp_steps[first].name, best.why);
	else
		snprintf(dg->message, sizeof(dg->message), "%s matches mha's with %s: %s%s",
			 cmp_steps[first].name, best.with, best.why, tol->f32 && !x->f32 ?
			 " (within float32 rounding: your numbers are float32's, compare with --dtype "
			 "f32)" : "");
	return 0;
}

/* at the run's tolerance; without --dtype f32 at float32's too, for float32
 * numbers that carry a mistake as well */
static int diagnose(struct diagnosis *dg, const struct ctx *x, int first)
{
	const struct tol f32tol = { fmax(1e-4, x->tol.rtol), fmax(1e-5, x->tol.atol), 1 };

	int first32 = -1;

	if (diagnose_with(dg, x, first, &x->tol))
		return -1;
	if (x->f32 || (dg->found && (strcmp(dg->m.id, "float32") || dg->later)))
		return 0;
	/* float32 numbers, and then a mistake: the first step past float32's rounding */
	for (int s = 0; s < C_COUNT && first32 < 0; s++)
		if (x->a->m[s].rank && !reproduces(x->mine, x->a, s, &f32tol))
			first32 = s;
	if (first32 < 0)
		return 0;
	{
		struct diagnosis d32;

		if (diagnose_with(&d32, x, first32, &f32tol))
			return -1;
		if (d32.found)
			*dg = d32;
	}
	return 0;
}

/* ---- the report ---------------------------------------------------------- */

struct where {
	size_t head;      /* 1-based; 0: none */
	size_t row, col;  /* 1-based */
	const char *row_word, *col_word;  /* "query", "key", "row", "column" */
	const char *row_token, *col_token; /* or NULL */
};

static void locate(struct where *w, int id, const struct stat *st, const struct labels *l)
{
	const struct step *s = &steps[cmp_steps[id].step];
	const size_t plane = st->R * st->C;
	const size_t p = st->worst / plane, r = st->worst % plane / st->C, c = st->worst % st->C;

	memset(w, 0, sizeof(*w));
	w->head = st->P > 1 || cmp_steps[id].per_head ? p + 1 : 0;
	w->row = r + 1;
	w->col = c + 1;
	w->row_word = s->rows == AXIS_QUERY ? "query" : s->rows == AXIS_KEY ? "key" : "row";
	w->col_word = s->cols == AXIS_KEY ? "key" : "column";
	if (s->rows == AXIS_QUERY && l->query && r < l->n_query)
		w->row_token = l->query[r];
	if (s->rows == AXIS_KEY && l->key && r < l->n_key)
		w->row_token = l->key[r];
	if (s->cols == AXIS_KEY && l->key && c < l->n_key)
		w->col_token = l->key[c];
}

static void put_where(FILE *fp, const struct where *w)
{
	if (w->head)
		fprintf(fp, "head %zu, ", w->head);
	fprintf(fp, "%s %zu", w->row_word, w->row);
	if (w->row_token) {
		fputs(" \"", fp);
		text_put(fp, w->row_token);
		fputc('"', fp);
	}
	fprintf(fp, ", %s %zu", w->col_word, w->col);
	if (w->col_token) {
		fputs(" \"", fp);
		text_put(fp, w->col_token);
		fputc('"', fp);
	}
}

/* a number as %.3g, inf and nan spelled so */
static const char *g3(char *buf, size_t size, double v)
{
	snprintf(buf, size, "%.3g", v);
	return buf;
}

static void put_json_shape(FILE *fp, const matrix *m)
{
	fputc('[', fp);
	for (size_t i = 0; i < m->rank; i++)
		fprintf(fp, "%s%zu", i ? ", " : "", m->dim[i]);
	fputc(']', fp);
}

struct report {
	const char *against;
	const struct against *a;
	const struct set *mine;
	const struct stat *st;  /* [C_COUNT] */
	const struct labels *l;
	const struct tol *tol;
	int f32;
	size_t sequence;        /* --sequence N, or 0 */
	int first;              /* the first differing step, or -1 */
	const struct diagnosis *dg;
};

static void report_text(FILE *fp, const struct report *r)
{
	char shape[64], mshape[64], b1[32], b2[32], b3[32];
	size_t given = 0, agree = 0, wshape = 5;

	for (int i = 0; i < C_COUNT; i++)
		if (r->st[i].given) {
			const size_t n = strlen(matrix_shape(&r->a->m[i], shape, sizeof(shape)));

			wshape = n > wshape ? n : wshape;
			given++;
			agree += r->st[i].pass;
		}
	fputs("mha compare: '", fp);
	text_put(fp, path_shown(r->against));
	fprintf(fp, "' against mha's float64 steps: rtol %g, atol %g%s\n\n", r->tol->rtol,
		r->tol->atol, r->f32 ? " (float32's; ULPs of float32)" : "");
	if (r->sequence)
		fprintf(fp, "sequence %zu of the batch\n\n", r->sequence);
	fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  %s\n", "step", "result", (int)wshape, "shape",
		"max |diff|", "max rel", "max ULP", "where (the largest |diff|)");
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		struct where w;

		if (!st->given)
			continue;
		matrix_shape(&r->a->m[i], shape, sizeof(shape));
		if (!st->shape_ok) {
			fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  mha's is %s\n", cmp_steps[i].name,
				"SHAPE", (int)wshape, shape, "-", "-", "-",
				matrix_shape(&r->mine->m[i], mshape, sizeof(mshape)));
			continue;
		}
		fprintf(fp, "  %-12s  %-7s  %-*s  %10s  %9s  %9s  ", cmp_steps[i].name,
			st->pass ? "ok" : "DIFFERS", (int)wshape, shape, g3(b1, sizeof(b1), st->max_abs),
			g3(b2, sizeof(b2), st->max_rel), g3(b3, sizeof(b3), st->max_ulp));
		if (st->max_abs > 0 || !st->pass) {
			locate(&w, i, st, r->l);
			put_where(fp, &w);
			fprintf(fp, ": %s, mha's %s", g3(b1, sizeof(b1), st->worst_theirs),
				g3(b2, sizeof(b2), st->worst_mha));
		} else {
			fputs("identical", fp);
		}
		fputc('\n', fp);
	}
	fputc('\n', fp);
	if (r->first < 0) {
		fprintf(fp, "every step given agrees (%zu of %zu)\n", agree, given);
		return;
	}
	{
		const struct stat *st = &r->st[r->first];

		fprintf(fp, "first difference: %s", cmp_steps[r->first].name);
		if (!st->shape_ok) {
			fprintf(fp, ": theirs is %s, mha's %s\n",
				matrix_shape(&r->a->m[r->first], shape, sizeof(shape)),
				matrix_shape(&r->mine->m[r->first], mshape, sizeof(mshape)));
		} else {
			struct where w;

			locate(&w, r->first, st, r->l);
			fprintf(fp, " (%zu of %zu entries differ; the most at ", st->differing, st->entries);
			put_where(fp, &w);
			fprintf(fp, ": theirs %.17g, mha's %.17g)\n", st->worst_theirs, st->worst_mha);
		}
	}
	fputs("diagnosis: ", fp);
	if (!r->dg->found && r->first == C_X) {
		fputs("their X is not the X given (-x): the inputs differ, not the attention\n", fp);
		return;
	}
	if (!r->dg->found) {
		fprintf(fp, "none of the known mistakes reproduces %s (man mha lists them under "
			"COMPARE)\n", cmp_steps[r->first].name);
		return;
	}
	text_put(fp, r->dg->message);
	fputc('\n', fp);
	if (!r->dg->later)
		fputs("           the steps given after it still differ: more than one mistake?\n", fp);
}

static void report_json(FILE *fp, const struct report *r)
{
	int n = 0;

	fputs("{\n  \"against\": ", fp);
	text_put_json(fp, path_shown(r->against));
	fprintf(fp, ",\n  \"kind\": \"%s\",\n  \"dtype\": \"%s\",\n  \"rtol\": ", r->a->kind,
		r->f32 ? "f32" : "f64");
	json_number(fp, r->tol->rtol, 0);
	fputs(",\n  \"atol\": ", fp);
	json_number(fp, r->tol->atol, 0);
	if (r->sequence)
		fprintf(fp, ",\n  \"sequence\": %zu", r->sequence);
	else
		fputs(",\n  \"sequence\": null", fp);
	fprintf(fp, ",\n  \"agree\": %s,\n  \"first_difference\": ", r->first < 0 ? "true" : "false");
	if (r->first < 0)
		fputs("null", fp);
	else
		fprintf(fp, "\"%s\"", cmp_steps[r->first].name);
	fputs(",\n  \"steps\": [", fp);
	for (int i = 0; i < C_COUNT; i++) {
		const struct stat *st = &r->st[i];
		struct where w;

		if (!st->given)
			continue;
		fprintf(fp, "%s\n    {\"step\": \"%s\", \"agree\": %s, \"shape\": ", n++ ? "," : "",
			cmp_steps[i].name, st->pass ? "true" : "false");
		put_json_shape(fp, &r->a->m[i]);
		fputs(", \"mha_shape\": ", fp);
		put_json_shape(fp, &r->mine->m[i]);
		fprintf(fp, ", \"shape_agrees\": %s", st->shape_ok ? "true" : "false");
		if (!st->shape_ok) {
			fputs(", \"max_abs\": null, \"max_rel\": null, \"max_ulp\": null, \"differing\": "
			      "null, \"entries\": null, \"where\": null}", fp);
			continue;
		}
		fputs(", \"max_abs\": ", fp);
		json_number(fp, st->max_abs, 0);
		fputs(", \"max_rel\": ", fp);
		json_number(fp, st->max_rel, 0);
		fputs(", \"max_ulp\": ", fp);
		json_number(fp, st->max_ulp, 0);
		fprintf(fp, ", \"differing\": %zu, \"entries\": %zu, \"where\": ", st->differing, st->entries);
		if (st->max_abs == 0) {
			fputs("null}", fp); /* identical: no place stands out */
			continue;
		}
		locate(&w, i, st, r->l);
		if (w.head)
			fprintf(fp, "{\"head\": %zu", w.head);
		else
			fputs("{\"head\": null", fp);
		fprintf(fp, ", \"row\": %zu, \"col\": %zu, \"row_token\": ", w.row, w.col);
		if (w.row_token)
			text_put_json(fp, w.row_token);
		else
			fputs("null", fp);
		fputs(", \"col_token\": ", fp);
		if (w.col_token)
			text_put_json(fp, w.col_token);
		else
			fputs("null", fp);
		fputs(", \"theirs\": ", fp);
		json_number(fp, st->worst_theirs, 0);
		fputs(", \"mha\": ", fp);
		json_number(fp, st->worst_mha, 0);
		fputs("}}", fp);
	}
	fputs("\n  ],\n  \"diagnosis\": ", fp);
	if (r->first < 0 || !r->dg->found) {
		fputs("null\n}\n", fp);
		return;
	}
	fprintf(fp, "{\"mistake\": \"%s\", \"option\": ", r->dg->m.id);
	if (r->dg->m.option[0])
		text_put_json(fp, r->dg->m.option);
	else
		fputs("null", fp);
	fprintf(fp, ", \"step\": \"%s\", \"later_steps_match\": %s, \"message\": ",
		cmp_steps[r->dg->step].name, r->dg->later ? "true" : "false");
	text_put_json(fp, r->dg->message);
	fputs("}\n}\n", fp);
}

/* ---- the command ------------------------------------------------------------ */

/* Each step they gave must be one this run has: 0, or -1 said. */
static int check_given(const struct against *a, const struct set *mine, const char *path)
{
	for (int i = 0; i < C_COUNT; i++) {
		const char *why;

		if (!a->m[i].rank || mine->m[i].rank)
			continue;
		why = i == C_X ? "there is no X with --q/--k/--v" :
		      i == C_SOFTCAPPED ? "the run has no softcap: add --softcap C" :
		      (i == C_Q_ROT || i == C_K_ROT) ? "the run turns nothing: add --rope" :
		      "this run has no such step";
		return error("'%s': %s (%s) is given, but %s", path_shown(path), cmp_steps[i].name,
			     a->src[i], why);
	}
	return 0;
}

int compare_check_args(int argc, char **argv)
{
	struct compare_opts co = { 0 };
	struct forward_options o = { .extra = &co };
	int rc;

	switch (forward_parse(argc, argv, &o, &compare_cmd)) {
	case 1: rc = 1; break;
	case 0: rc = refuse_forward_only(&o, &co) || forward_check_options(&o) ? EXIT_USAGE : 0; break;
	default: rc = EXIT_USAGE; break;
	}
	free(o.kv_lens);
	return rc;
}

int cmd_compare(int argc, char **argv)
{
	struct compare_opts co = { 0 };
	struct forward_options o = { .extra = &co };
	struct problem pb;
	struct against a = { 0 };
	struct set mine = { 0 };
	struct stat st[C_COUNT];
	struct diagnosis dg = { 0 };
	struct tol tol;
	mha_report rep = MHA_INIT(mha_report);
	int rc = EXIT_USAGE, first = -1, loaded = 0;

	memset(&pb, 0, sizeof(pb));
	switch (forward_parse(argc, argv, &o, &compare_cmd)) {
	case 1: free(o.kv_lens); return EXIT_OK;
	case 0: break;
	default: free(o.kv_lens); return EXIT_USAGE;
	}
	budget_init(o.max_memory);
	if (refuse_forward_only(&o, &co)) {
		free(o.kv_lens);
		return EXIT_USAGE;
	}
	/* config.json's settings under the command line's: a bad file is bad data */
	if (model_config(&o.spec)) {
		free(o.kv_lens);
		return EXIT_DATA;
	}
	if (forward_check_options(&o)) {
		free(o.kv_lens);
		return EXIT_USAGE;
	}
	tol = (struct tol){ co.rtol_given ? co.rtol : o.f32 ? 1e-4 : 1e-9,
			    co.atol_given ? co.atol : o.f32 ? 1e-5 : 1e-12, o.f32 };
	budget_init(o.max_memory);
	loaded = 1;
	/* every input problem is trouble here (2), as cmp and diff have it */
	if (problem_load(&pb, &o.spec))
		goto done;
	if (o.sequence && (!pb.batch || o.sequence > pb.batch)) {
		usage_error("compare", "--sequence %zu, but the inputs hold %zu sequence%s", o.sequence,
			    pb.batch ? pb.batch : 1, pb.batch > 1 ? "s" : "");
		goto done;
	}
	if (o.sequence && problem_keep_sequence(&pb, o.sequence - 1))
		goto done;
	if (problem_sequences(&pb) > 1) {
		usage_error("compare", "the inputs are a batch of %zu sequences: compare one at a time "
			    "with --sequence N", pb.batch);
		goto done;
	}
	if (against_read(&a, co.against, pb.d.heads))
		goto done;
	if (check_memory(&pb))
		goto done;
	{
		int r = run_set(&mine, &pb, &pb.d, &pb.in, &pb.weights, &pb.cfg, &rep);

		if (r) {
			if (r > 0)
				error("the run failed: %s", "the numbers overflow or a setting is out of "
				      "range (mha forward says which)");
			goto done;
		}
	}
	if (check_given(&a, &mine, co.against))
		goto done;
	if (a.m[C_MASK].is_bool)
		/* their boolean mask as this run reads one (--mask-bool): what it adds */
		for (size_t i = 0; i < matrix_size(&a.m[C_MASK]); i++)
			a.m[C_MASK].v[i] = (a.m[C_MASK].v[i] != 0) != (pb.spec.mask_block != 0) ? 0
											 : -INFINITY;
	for (int i = 0; i < C_COUNT; i++) {
		if (!a.m[i].rank) {
			st[i].given = 0;
			continue;
		}
		compare_step(&st[i], i, &a.m[i], &mine.m[i], &tol);
		if (!st[i].pass && first < 0)
			first = i;
	}
	if (first >= 0) {
		const struct ctx x = { .p = &pb, .mine = &mine, .a = &a, .rep = &rep, .tol = tol,
				       .f32 = o.f32 };

		if (diagnose(&dg, &x, first))
			goto done;
	}
	{
		const struct report r = { .against = co.against, .a = &a, .mine = &mine, .st = st,
					  .l = &pb.labels, .tol = &tol, .f32 = o.f32,
					  .sequence = o.sequence, .first = first, .dg = &dg };

		if (o.emit.format == FORMAT_JSON)
			report_json(stdout, &r);
		else
			report_text(stdout, &r);
	}
	rc = first < 0 ? EXIT_OK : EXIT_DATA;
done:
	set_free(&mine);
	against_free(&a);
	if (loaded)
		problem_free(&pb);
	free(o.kv_lens);
	return rc;
}

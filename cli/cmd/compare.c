/*
 * compare.c: 'mha compare', someone else's attention against mha's.
 *
 * It takes the attention commands' inputs and options (the skeleton,
 * attention.c, parses them, with --against, --rtol and --atol added),
 * computes every step with the library's plain path, reads their results
 * (against.c) and compares the steps they gave in the order of the
 * computation: shapes, the largest absolute, relative and ULP differences,
 * and where.  For the first step that differs diagnose.c tries the
 * well-known mistakes; report.c writes the table (or JSON).
 *
 * Exit status as cmp and diff: 0 agree, 1 differ, 2 trouble (command
 * line, an input, their file).
 */
#include "base/budget.h"
#include "base/cli.h"
#include "cmd/against.h"
#include "cmd/attention.h"
#include "cmd/compare.h"
#include "load/problem.h"
#include "load/shapes.h"
#include "run/run.h"
#include "run/steps.h"

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
	ATTN_USAGE_SHARED
	"Computation:\n"
	"      --dtype T         f64 (default) or f32: their numbers are float32's;\n"
	"                        mha still computes in float64, and the tolerances and\n"
	"                        ULPs are float32's\n"
	ATTN_USAGE_RUN
	"      --sequence N      with a batch (3-D inputs): compare sequence N (from 1)\n"
	"\n"
	"Output:\n"
	"  -f, --format FMT      text (default: a table) or json (the report as data)\n"
	ATTN_USAGE_HELP
	"\n"
	"Exit status: 0 every step given agrees, 1 a step differs, 2 trouble: a bad\n"
	"command line, or an input or --against file that cannot be read or used.\n";


/* ---- options ------------------------------------------------------------- */

struct compare_opts {
	const char *against;
	double rtol, atol;
	int rtol_given, atol_given;
};

enum { O_AGAINST = ATTN_EXTRA_BASE, O_RTOL, O_ATOL };

static const struct option compare_longopts[] = {
	{ "against", required_argument, NULL, O_AGAINST },
	{ "rtol", required_argument, NULL, O_RTOL },
	{ "atol", required_argument, NULL, O_ATOL },
	{ NULL, 0, NULL, 0 },
};

static int compare_opt(struct attn_options *o, int c, const char *arg)
{
	struct compare_opts *co = o->own;
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

/* forward's options compare has no use for: a usage error */
static int refuse_forward_only(struct attn_options *o)
{
	const struct compare_opts *co = o->own;
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

void set_free(struct set *s)
{
	for (int i = 0; i < C_COUNT; i++)
		matrix_free(&s->m[i]);
}

int copy_matrix(matrix *dst, const matrix *src)
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
	const size_t held = budget_held();
	const size_t lib = mha_memory(&p->d, &p->cfg, ALL_STAGES, 0), set = set_bytes(p);
	/* mha's set, a mistake's, and its run's largest step not yet moved over */
	const size_t step = (size_t)fmin((double)SIZE_MAX, (double)p->d.heads * (double)p->d.n_q *
					 (double)p->d.n_kv * sizeof(double));
	size_t total = held;
	struct run_need n = { .who = "comparing",
			      .part = { "the inputs and their results", "the computation",
					"mha's steps and a mistake's" },
			      .advice = "raise --max-memory" };

	if (budget_limit() == SIZE_MAX)
		return 0;
	total = lib > SIZE_MAX - total ? SIZE_MAX : total + lib;
	total = set > (SIZE_MAX - total) / 2 ? SIZE_MAX : total + 2 * set;
	total = step > SIZE_MAX - total ? SIZE_MAX : total + step;
	n.bytes[0] = held;
	n.bytes[1] = lib;
	n.bytes[2] = total - held - lib;
	return run_check_memory(&n);
}

/*
 * One computation through the library, every step kept: 0, 1 when the
 * library refuses it (a mistaken configuration may overflow), -1 said.
 */
int run_set(struct set *s, const struct problem *p, const mha_dims *d, const mha_inputs *in,
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
void shape3(const matrix *m, size_t *P, size_t *R, size_t *C)
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

/*
 * theirs against mine; a 2-D mask of theirs stands for every head's.  Their
 * NaN where mha has one agrees, as does the same infinity.
 */
void compare_step(struct stat *st, int id, const matrix *theirs, const matrix *mine,
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
int reproduces(const struct set *c, const struct against *a, int id, const struct tol *t)
{
	struct stat st;

	if (!c->m[id].rank)
		return 0;
	compare_step(&st, id, &a->m[id], &c->m[id], t);
	return st.pass;
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
		      (i == C_Q_NORM || i == C_K_NORM) ? "the run normalises nothing: add --norm" :
		      i >= C_C_Q && i <= C_K_NOPE && !mine->m[C_C_KV].rank ? "the run has no latent attention "
		      "(--kv-b-proj and the rest, or a DeepSeek checkpoint)" :
		      i == C_K_NOPE ? "the absorbed form makes none: leave out --absorb" :
		      i >= C_C_Q && i <= C_K_NOPE ? "the run's latent attention has no such part "
		      "(q_a_proj, or --rope)" :
		      "this run has no such step";
		return error("'%s': %s (%s) is given, but %s", path_shown(path), cmp_name(i),
			     a->src[i], why);
	}
	return 0;
}

/* compare's output options: text or json to standard output, no picture */
static int compare_check(struct attn_options *o)
{
	return attn_refuse_picture_options(o);
}

static int compare_run(struct attn_options *o, struct problem *pb)
{
	const struct compare_opts *co = o->own;
	struct against a = { 0 };
	struct set mine = { 0 };
	struct stat st[C_COUNT];
	struct diagnosis dg = { 0 };
	const struct tol tol = { co->rtol_given ? co->rtol : o->f32 ? 1e-4 : 1e-9,
				 co->atol_given ? co->atol : o->f32 ? 1e-5 : 1e-12, o->f32 };
	mha_report rep = MHA_INIT(mha_report);
	int rc = EXIT_USAGE, first = -1;

	/* every input problem is trouble here (2), as cmp and diff have it */
	if (o->sequence && (!pb->batch || o->sequence > pb->batch)) {
		usage_error("compare", "--sequence %zu, but the inputs hold %zu sequence%s", o->sequence,
			    pb->batch ? pb->batch : 1, pb->batch > 1 ? "s" : "");
		goto done;
	}
	if (o->sequence && problem_keep_sequence(pb, o->sequence - 1))
		goto done;
	if (problem_sequences(pb) > 1) {
		usage_error("compare", "the inputs are a batch of %zu sequences: compare one at a time "
			    "with --sequence N", pb->batch);
		goto done;
	}
	if (against_read(&a, co->against, pb->d.heads))
		goto done;
	if (check_memory(pb))
		goto done;
	{
		int r = run_set(&mine, pb, &pb->d, &pb->in, &pb->weights, &pb->cfg, &rep);

		if (r) {
			if (r > 0)
				error("the run failed: %s", "the numbers overflow or a setting is out of "
				      "range (mha forward says which)");
			goto done;
		}
	}
	if (check_given(&a, &mine, co->against))
		goto done;
	if (a.m[C_MASK].is_bool)
		/* their boolean mask as this run reads one (--mask-bool): what it adds */
		for (size_t i = 0; i < matrix_size(&a.m[C_MASK]); i++)
			a.m[C_MASK].v[i] = (a.m[C_MASK].v[i] != 0) != (pb->spec.mask_block != 0) ? 0
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
		const struct ctx x = { .p = pb, .mine = &mine, .a = &a, .rep = &rep, .tol = tol,
				       .f32 = o->f32 };

		if (diagnose(&dg, &x, first))
			goto done;
	}
	{
		const struct report r = { .against = co->against, .a = &a, .mine = &mine, .st = st,
					  .l = &pb->labels, .tol = &tol, .f32 = o->f32,
					  .sequence = o->sequence, .first = first, .dg = &dg };

		if (o->emit.format == FORMAT_JSON)
			report_json(stdout, &r);
		else
			report_text(stdout, &r);
	}
	rc = first < 0 ? EXIT_OK : EXIT_DATA;
done:
	set_free(&mine);
	against_free(&a);
	return rc;
}

/* inputs that cannot be loaded are trouble (2), as cmp and diff have it */
const struct attn_command attn_compare = {
	.name = "compare", .usage = compare_usage, .load_failed = EXIT_USAGE,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_DTYPE,
	.extra = compare_longopts, .extra_opt = compare_opt,
	.refuse = refuse_forward_only, .check = compare_check,
	.run = compare_run
};

int compare_check_args(int argc, char **argv)
{
	struct compare_opts co = { 0 };

	return attn_check_args(argc, argv, &attn_compare, &co);
}

int cmd_compare(int argc, char **argv)
{
	struct compare_opts co = { 0 };

	return attn_main(argc, argv, &attn_compare, &co);
}


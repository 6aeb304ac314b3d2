/*
 * match.c: one step of theirs against mha's (compare.h): the tolerances
 * (float64's, float32's for float32 numbers), the heads and rows they
 * gave, the precision their numbers were given to (found from the numbers,
 * or --digits), and which step an array is when its name says another
 * (scores kept scaled and masked).
 */
#include "compare/compare.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- bfloat16 and float16 numbers (precision.c computes the references) ---- */

int lowp_of(int from_type)
{
	return from_type == FROM_BF16 ? MHA_PRECISION_BF16
	       : from_type == FROM_F16 ? MHA_PRECISION_FP16 : 0;
}

double lowp_ulp(double v, mha_precision p)
{
	const int bits = p == MHA_PRECISION_FP16 ? 11 : 8;
	const int emin = p == MHA_PRECISION_FP16 ? -14 : -126;
	int e = v == 0 || !isfinite(v) ? emin : ilogb(v);

	if (e < emin)
		e = emin;
	return ldexp(1, e - (bits - 1));
}

double lowp_ref_err(const struct lowp_refs *L, mha_precision p, int id, const struct given *g,
		    size_t P, size_t R)
{
	const double *row = L && (p == MHA_PRECISION_BF16 || p == MHA_PRECISION_FP16)
			    ? L->row[p - 1][id] : NULL;
	double worst = 0;

	if (!row)
		return -1;
	for (size_t h = 0; h < P; h++)
		for (size_t r = 0; r < R; r++)
			if (given_at(g, h, r) && row[h * R + r] > worst)
				worst = row[h * R + r];
	return worst;
}

/* sum (t - m)^2 / sum m^2 and the cosine, over the finite entries compared,
 * finished from the sums */
static void lowp_figures(struct stat *st, double tt, double mm, double tm, double dd)
{
	st->nmse = mm > 0 ? dd / mm : dd > 0 ? INFINITY : 0;
	st->cosine = tt > 0 && mm > 0 ? tm / sqrt(tt * mm) : tt == mm ? 1 : 0;
}

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

/* half a unit of the last digit they gave of y: 0.0005 for 3 decimals, or of 3
 * significant digits of 0.0123, 0.00005 */
static double half_unit(double y, int prec, int digits)
{
	if (prec == PREC_DECIMALS)
		return 0.5 * pow(10, -digits);
	if (y == 0 || !isfinite(y))
		return 0;
	return 0.5 * pow(10, floor(log10(fabs(y))) - digits + 1);
}

/* the tolerances step id of theirs (g) is held to: base's, or float32's for
 * numbers read as float32 (base->f32 then set by the caller) */
static struct tol step_tol(const struct tol *base, const struct given *g)
{
	if (g->f32 && !base->f32 && !base->fixed)
		return (struct tol){ 1e-4, 1e-5, 1, 0, base->factor, base->refs };
	return *base;
}

/*
 * A blocked key (mha's -inf) of the mask or the masked scores that they
 * wrote as their type's lowest value, as Hugging Face masks (finfo.min):
 * bfloat16's, float32's or float64's (a score added to it is lost), or
 * float16's -65504 with the score added and rounded (within 2048 of it).
 */
static int lowest_as_inf(int id, double m, double y)
{
	return (id == C_MASK || id == C_MASKED) && m == -INFINITY &&
	       (y <= -1e37 || (y >= -65504.0 && y <= -65504.0 + 2048));
}

/*
 * Bfloat16 or float16 numbers of theirs judged by their precision
 * (precision.c): the largest error that agrees, factor times the
 * reference's over the entries compared plus a unit in the last place of
 * the step's largest |value| in the type; -1 when they are judged by the
 * tolerances (float64 or float32 numbers, or --rtol and --atol given).
 */
static double lowp_limit(struct stat *st, int id, const struct given *g, const matrix *mine,
			 const struct tol *t)
{
	const mha_precision p = (mha_precision)lowp_of(g->type);
	double ref, top = 0;

	if (!p || t->fixed || !t->refs ||
	    (ref = lowp_ref_err(t->refs, p, id, g, st->P, st->R)) < 0)
		return -1;
	for (size_t i = 0; i < st->P * st->R * st->C; i++)
		if (given_at(g, i / (st->R * st->C), i % (st->R * st->C) / st->C) &&
		    isfinite(mine->v[i]) && fabs(mine->v[i]) > top)
			top = fabs(mine->v[i]);
	st->lowp = p;
	st->ref_err = ref;
	st->floor = lowp_ulp(top, p);
	st->limit = t->factor * ref + st->floor;
	return st->limit;
}

/*
 * theirs against mine; a 2-D mask of theirs stands for every head's.  Their
 * NaN where mha has one agrees, as does the same infinity.  Only the heads
 * and rows they gave are compared; numbers they gave to k decimals or
 * significant digits agree within half a unit of the last one; bfloat16
 * and float16 numbers within their precision's limit (lowp_limit).
 */
void compare_step(struct stat *st, int id, const struct given *g, const matrix *mine,
		  const struct tol *base)
{
	const matrix *theirs = &g->m;
	size_t tP, tR, tC;
	const struct tol t = step_tol(base, g);
	double limit, tt = 0, mm = 0, tm = 0, dd = 0;

	memset(st, 0, sizeof(*st));
	st->given = 1;
	st->tol = t;
	st->prec = g->prec;
	st->digits = g->digits;
	shape3(mine, &st->P, &st->R, &st->C);
	shape3(theirs, &tP, &tR, &tC);
	st->shape_ok = mine->rank && tR == st->R && tC == st->C &&
		       (tP == st->P || (id == C_MASK && tP == 1));
	if (!st->shape_ok)
		return;
	for (size_t h = 0; h < st->P; h++)
		st->heads_given += !g->heads || g->heads[h];
	st->rows_given = g->rows ? g->rows : st->R;
	limit = lowp_limit(st, id, g, mine, &t);
	for (size_t i = 0; i < st->P * st->R * st->C; i++) {
		const size_t h = i / (st->R * st->C), r = i % (st->R * st->C) / st->C;
		const double m = mine->v[i];
		const double y = theirs->v[tP == 1 ? i % (st->R * st->C) : i];
		int same, within;
		double ad, rel, u;

		if (!given_at(g, h, r))
			continue;
		st->entries++;
		same = m == y || (isnan(m) && isnan(y));
		if (!same && lowest_as_inf(id, m, y))
			same = st->lowest = 1;
		ad = same ? 0 : isnan(m - y) ? INFINITY : fabs(m - y);
		rel = ad == 0 ? 0 : m != 0 && isfinite(m) ? ad / fabs(m) : INFINITY;
		u = same ? 0 : ulps(m, y, t.f32);
		/* an infinity agrees only with itself: inf <= rtol*inf must not pass */
		if (limit >= 0)
			within = same || (isfinite(ad) && ad <= limit);
		else
			within = same || (isfinite(ad) && isfinite(m) && ad <= t.atol + t.rtol * fabs(m));
		if (isfinite(m) && isfinite(y)) {
			tt += y * y;
			mm += m * m;
			tm += y * m;
			dd += (y - m) * (y - m);
		}
		if (!within && g->prec != PREC_FULL && isfinite(ad) && isfinite(m) &&
		    ad <= half_unit(y, g->prec, g->digits) * (1 + 1e-9) + 1e-12 * fabs(m)) {
			within = 1;
			st->rounded = 1;
		}
		if (!within)
			st->differing++;
		if (st->entries == 1 || ad > st->max_abs) {
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
	lowp_figures(st, tt, mm, tm, dd);
}

/* whether set c reproduces theirs at step id within t */
int reproduces(const struct set *c, const struct against *a, int id, const struct tol *t)
{
	struct stat st;

	if (!c->m[id].rank)
		return 0;
	compare_step(&st, id, &a->g[id], &c->m[id], t);
	return st.pass;
}

/* ---- their numbers' precision ----------------------------------------------- */

/* the fewest digits (decimals, or significant with sig) that write v back
 * exactly (as a float for f32), up to max; max + 1 when more are needed */
static int digits_of(double v, int sig, int f32, int max)
{
	char buf[64];

	for (int k = sig; k <= max; k++) {
		double back;

		if (sig)
			snprintf(buf, sizeof(buf), "%.*e", k - 1, v);
		else
			snprintf(buf, sizeof(buf), "%.*f", k, v);
		back = strtod(buf, NULL);
		if (f32 ? (float)back == (float)v : back == v)
			return k;
	}
	return max + 1;
}

/* v rounded to the precision: as they would have written it */
static double rounded_to(double v, int prec, int digits)
{
	char buf[64];

	if (prec == PREC_DECIMALS)
		snprintf(buf, sizeof(buf), "%.*f", digits, v);
	else
		snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
	return strtod(buf, NULL);
}

/*
 * How well "rounded to k (decimals or significant digits)" explains their
 * numbers of a step: the share of them that are mha's own rounded so
 * (within a double's noise: 0.29500000000000004 is 0.295); 0 when the
 * rounding changes none of mha's numbers (exact numbers that happen to be
 * short say nothing).
 */
static double fit_of(const struct given *g, const matrix *mine, int prec, int k, size_t limit)
{
	size_t P, R, C, changed = 0, same = 0, seen = 0;

	shape3(mine, &P, &R, &C);
	for (size_t i = 0; i < P * R * C && seen < limit; i++) {
		const double y = g->m.v[i], m = mine->v[i];
		double r;

		if (!given_at(g, i / (R * C), i % (R * C) / C) || !isfinite(y) || !isfinite(m))
			continue;
		seen++;
		r = rounded_to(m, prec, k);
		changed += fabs(r - m) > 1e-9 * fabs(m) + 1e-12;
		same += g->f32 ? (float)y == (float)r : fabs(y - r) <= 1e-9 * fabs(r) + 1e-12;
	}
	return changed ? (double)same / (double)seen : 0;
}

/*
 * Their numbers of step id given to k decimals or k significant digits, as
 * a learner's table is: the fewest digits that write every one of them
 * back (the first 100000) is k, for decimals and for significant digits,
 * and the one that explains more of them (fit_of, at least half) wins;
 * decimals on a tie.  Integers and one significant digit prove nothing.
 */
void detect_precision(struct given *g, const matrix *mine, int id)
{
	const int maxd = g->f32 ? 6 : 8;
	const size_t limit = 100000;
	size_t P, R, C, seen = 0;
	int dmax = 0, smax = 0;
	double fd, fs;

	if (id == C_MASK || !g->m.rank || g->m.is_bool)
		return;
	shape3(mine, &P, &R, &C);
	if (matrix_size(&g->m) != P * R * C)
		return;
	for (size_t i = 0; i < P * R * C && seen < limit; i++) {
		const double y = g->m.v[i];
		int dd, ss;

		if (!given_at(g, i / (R * C), i % (R * C) / C) || !isfinite(y))
			continue;
		seen++;
		dd = digits_of(y, 0, g->f32, maxd);
		ss = digits_of(y, 1, g->f32, maxd);
		if (dd > maxd && ss > maxd)
			return; /* full precision */
		dmax = dd > dmax ? dd : dmax;
		smax = ss > smax ? ss : smax;
	}
	fd = dmax >= 1 && dmax <= maxd ? fit_of(g, mine, PREC_DECIMALS, dmax, limit) : 0;
	fs = smax >= 2 && smax <= maxd ? fit_of(g, mine, PREC_SIGNIFICANT, smax, limit) : 0;
	if (fd >= 0.5 && fd >= fs) {
		g->prec = PREC_DECIMALS;
		g->digits = dmax;
	} else if (fs >= 0.5) {
		g->prec = PREC_SIGNIFICANT;
		g->digits = smax;
	}
}

/* ---- which step is it? ------------------------------------------------------ */

/* A step their arrays may hold under an earlier step's name: scores most
 * code keeps scaled and masked, an output before W_O, a Q already turned. */
static const struct { int from, to; } also_named[] = {
	{ C_Q, C_Q_NORM }, { C_Q, C_Q_ROT }, { C_K, C_K_NORM }, { C_K, C_K_ROT },
	{ C_Q_NORM, C_Q_ROT }, { C_K_NORM, C_K_ROT },
	{ C_SCORES, C_SCALED }, { C_SCORES, C_SOFTCAPPED }, { C_SCORES, C_MASKED },
	{ C_SCALED, C_SOFTCAPPED }, { C_SCALED, C_MASKED }, { C_SOFTCAPPED, C_MASKED },
	{ C_OUTPUT, C_CONCAT },
	{ C_G(GS_DS), C_G(GS_DSCALED) }, { C_G(GS_DS), C_G(GS_DSCORES) },
	{ C_G(GS_DSCALED), C_G(GS_DSCORES) },
	{ C_G(GS_DQ), C_G(GS_DQ_ROT) }, { C_G(GS_DQ), C_G(GS_DQ_NORM) },
	{ C_G(GS_DK), C_G(GS_DK_ROT) }, { C_G(GS_DK), C_G(GS_DK_NORM) },
};

int reproduced_as(const struct set *c, const struct against *a, int i, const struct tol *t)
{
	if (reproduces(c, a, i, t))
		return i;
	for (size_t k = 0; k < sizeof(also_named) / sizeof(also_named[0]); k++) {
		const int j = also_named[k].to;
		size_t P1, R1, C1, P2, R2, C2;
		struct stat st;

		if (also_named[k].from != i || a->g[j].m.rank || !c->m[j].rank || !c->m[i].rank)
			continue;
		shape3(&c->m[i], &P1, &R1, &C1);
		shape3(&c->m[j], &P2, &R2, &C2);
		if (P1 != P2 || R1 != R2 || C1 != C2)
			continue;
		compare_step(&st, j, &a->g[i], &c->m[j], t);
		if (st.pass)
			return j;
	}
	return -1;
}

void name_as(struct against *a, int i, int j)
{
	a->g[j] = a->g[i];
	a->g[j].named_as = i;
	memset(&a->g[i], 0, sizeof(a->g[i]));
	a->g[i].named_as = -1;
}

/*
 * A step of theirs that differs but equals the step it is another name of
 * (their "scores", mha's masked): moved there, and said in the report.
 */
void find_named(struct against *a, const struct set *mine, struct stat *st,
		const struct tol *t)
{
	for (size_t k = 0; k < sizeof(also_named) / sizeof(also_named[0]); k++) {
		const int i = also_named[k].from, j = also_named[k].to;
		struct stat s2;

		if (!st[i].given || !st[i].shape_ok || st[i].pass || a->g[j].m.rank ||
		    !mine->m[j].rank || a->g[i].named_as >= 0)
			continue;
		{
			size_t P1, R1, C1, P2, R2, C2;

			shape3(&mine->m[i], &P1, &R1, &C1);
			shape3(&mine->m[j], &P2, &R2, &C2);
			if (P1 != P2 || R1 != R2 || C1 != C2)
				continue;
		}
		compare_step(&s2, j, &a->g[i], &mine->m[j], t);
		if (!s2.pass)
			continue;
		name_as(a, i, j);
		st[i].given = 0;
		st[j] = s2;
	}
}


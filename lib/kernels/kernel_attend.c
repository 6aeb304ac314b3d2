/*
 * kernel_attend.c: the fast path's fused attention, compiled for each
 * element type and vector width as kernel.c is (kernel_micro.h): for each
 * block of BQ queries of one head, the keys in blocks of BK, S = Q·Kᵀ on
 * the micro-kernel, the online softmax (a running maximum and sum per
 * row), O += P·V; memory O((n_q + n_kv)·d), each output row summed in the
 * same order by one thread whatever the number of threads.
 */
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "base/progress.h"
#include "kernels/team.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_micro.h"

/* ---- fused attention ---------------------------------------------------- */

/*
 * Kᵀ of one key/value head in NR-key strips, (dk, NR) each, keys zero-padded:
 * the strips of keys [j0, j1) (j0 a multiple of NR), into the whole pack dst
 */
static void pack_kt(REAL *dst, const REAL *K, size_t ldk, size_t n_kv, size_t dk, size_t j0,
		    size_t j1)
{
	for (size_t s = j0; s < j1 && s < n_kv; s += NR) {
		const size_t nr = min_size(NR, n_kv - s);
		REAL *d = dst + s * dk;

		for (size_t p = 0; p < dk; p++) {
			for (size_t j = 0; j < nr; j++)
				d[p * NR + j] = K[(s + j) * ldk + p];
			for (size_t j = nr; j < NR; j++)
				d[p * NR + j] = 0;
		}
	}
}

struct scratch {
	REAL *q;    /* (BQ, dk) packed */
	REAL *s;    /* (BQ, BK) scores, then weights in place */
	REAL *o;    /* (BQ, dv rounded to NR) running output */
	REAL *m, *l; /* (BQ) running max and sum */
};

enum { SCRATCH_Q, SCRATCH_S, SCRATCH_O, SCRATCH_M, SCRATCH_L, N_SCRATCH };

/* a thread's scratch in elements, as struct scratch lists it */
static void scratch_counts(const struct mha_attend *a, size_t c[N_SCRATCH])
{
	c[SCRATCH_Q] = mha_sat_mul(BQ + MR, a->dk);
	c[SCRATCH_S] = BQ * BK;
	c[SCRATCH_O] = mha_sat_mul(BQ, round_up(a->dv, NR));
	c[SCRATCH_M] = c[SCRATCH_L] = BQ;
}

/* Kᵀ and V of one key/value head, packed: keys padded to NR, V's columns too */
static size_t kt_count(const struct mha_attend *a)
{
	return mha_sat_mul(round_up(a->n_kv, NR), a->dk);
}

static size_t v_count(const struct mha_attend *a)
{
	return mha_sat_mul(round_up(a->n_kv, NR), round_up(a->dv, NR));
}

/* the tasks (query blocks of one head of one sequence) and the threads they keep busy */
static size_t attend_tasks(const struct mha_attend *a)
{
	return mha_sat_mul(mha_sat_mul(a->B, a->H), (a->n_q + BQ - 1) / BQ);
}

/* Below this many multiply-adds the attention runs on the calling thread
 * alone: waking the team and meeting at its barrier cost some microseconds,
 * as much as a quarter of a million multiply-adds on one core (a tutorial's
 * 8 tokens: 2 thousand).  Every task's numbers are the same either way. */
#define ATTEND_ALONE 262144.0

static int attend_threads(const struct mha_attend *a)
{
	const double work = (double)a->B * (double)a->H * (double)a->n_q * (double)a->n_kv *
			    (double)(a->dk + a->dv);

	return work < ATTEND_ALONE ? 1 : threads_for(a->threads, attend_tasks(a));
}

/*
 * In waves: Kᵀ and V packed for one (sequence, key/value head) at a time,
 * its tasks run by all threads, then the next; the packs then take memory
 * for one head rather than a second copy of the whole K and V (a long
 * sequence's n = 131072 in f32: 64 MiB rather than 512).  Chosen when each
 * pack has tasks enough to keep every thread busy (4 each); else all are
 * packed at once and all tasks shared, as a batch of short sequences needs.
 * Each task's numbers are the same either way.
 */
static int attend_waves(const struct mha_attend *a)
{
	const size_t per_pack = mha_sat_mul(a->H / a->G, (a->n_q + BQ - 1) / BQ);

	return mha_sat_mul(a->B, a->G) > 1 && per_pack >= 4 * (size_t)attend_threads(a);
}

/* the packs held at once: one in waves, else one per sequence and key/value head */
static size_t attend_packs(const struct mha_attend *a)
{
	return attend_waves(a) ? 1 : mha_sat_mul(a->B, a->G);
}

size_t NAME(mha_attend_bytes_)(const struct mha_attend *a)
{
	size_t c[N_SCRATCH], one = 0;
	const size_t packs = attend_packs(a);

	scratch_counts(a, c);
	for (int i = 0; i < N_SCRATCH; i++)
		one = mha_sat_add(one, counted_bytes(c[i]));
	return mha_sat_add(counted_bytes(mha_sat_mul(packs, mha_sat_add(kt_count(a), v_count(a)))),
			   mha_sat_mul((size_t)attend_threads(a), one));
}

/*
 * the largest |v| of key/value head g's values in sequence b: for the
 * rerun after an overflow.  Found in the element type (a maximum is
 * exact) and widened once: GCC 12's vectoriser stops with an internal
 * error on aarch64 at a float-to-double maximum in a loop (-O3, float)
 */
static __attribute__((noinline, cold)) double vmax_of(const struct mha_attend *a, size_t b,
						      size_t g)
{
	const REAL *V = (const REAL *)a->V + b * a->n_kv * a->ldv + g * a->dv;
	REAL m = 0;

	for (size_t j = 0; j < a->n_kv; j++)
		for (size_t t = 0; t < a->dv; t++) {
			const REAL v = V[j * a->ldv + t] < 0 ? -V[j * a->ldv + t] : V[j * a->ldv + t];

			/* a NaN is never greater: skipped, as fmax skips it */
			m = v > m ? v : m;
		}
	return (double)m;
}

/*
 * A scaled score that is not finite, at head h, query qi, key kj: a
 * masked-out key's never counts (0 here; the mask makes it -inf); else
 * the score again without overflowing partial sums (rules.h), an error
 * only when it, or it scaled, truly is not finite.  The query's row is
 * read from the task's packed copy q (stride MR): the output may already
 * have overwritten Q (fast.c writes the heads' outputs over Q).  Rare:
 * kept out of attend_block, which must stay small enough for the
 * micro-kernels to be inlined into it.
 */
static __attribute__((noinline, cold)) REAL
score_again(const struct mha_attend *a, const struct mha_rule *rule, const REAL *q, size_t b,
	    size_t h, size_t qi, size_t kj, int *error)
{
	const size_t g = mha_rule_kv_head(h, a->H, a->G);
	const REAL *k = (const REAL *)a->K + (b * a->n_kv + kj) * a->ldk + g * a->dk;
	REAL s, x;

	if (!mha_rule_sees(rule, h, qi, kj))
		return 0;
	s = (REAL)DOT(q, MR, k, 1, a->dk, 0.0);
	x = s * (REAL)a->scale;
	if (mha_rule_overflows(rule, h, qi, kj, s) || mha_rule_overflows(rule, h, qi, kj, x))
		*error = 2;
	return x;
}

/*
 * One task: query rows [q0, q0 + rows) of head h of sequence b, whose rule
 * is rule.  With pshift > 0 (a
 * rerun) the weights meet V scaled by 2^-pshift, so that their sum cannot
 * overflow, and the outputs are scaled back.  Returns 1 when an output
 * overflowed on a first run: the caller reruns the task.  Q's rows are
 * read once, into w->q, before any output is written (the outputs may
 * take their place), and a rerun reuses w->q.
 */
static int attend_block(struct mha_attend *a, const struct mha_rule *rule, struct scratch *w,
			const REAL *ktp, const REAL *vp, size_t b, size_t h, size_t q0, size_t rows,
			int pshift, size_t *blocked, size_t *first, int *error)
{
	const size_t dk = a->dk, dv = a->dv, dvr = round_up(dv, NR);
	const REAL *Q = (const REAL *)a->Q + b * a->n_q * a->ldq + h * dk;
	const REAL scale = (REAL)a->scale, cap = (REAL)a->softcap;
	const REAL pscale = (REAL)ldexp(1.0, -pshift);
	const int masked = rule->allow || rule->bias;
	const double slope = rule->alibi ? mha_rule_slope(rule, h) : 0;
	/*
	 * the keys any of these rows may see: blocks past the last row's end,
	 * and wholly before the first row's window, are skipped (cost ~ n·w)
	 */
	const size_t end = mha_rule_keys_end(rule, q0 + rows - 1);
	const size_t begin = mha_rule_keys_begin(rule, q0) / BK * BK;
	vec rmax[BQ], rbad[BQ]; /* each row's scores in this key block: max, finiteness (lanes) */
	int overflow = 0;

	if (!pshift)
		pack_a(w->q, Q + q0 * a->ldq, a->ldq, rows, 0, dk);
	for (size_t i = 0; i < rows; i++) {
		w->m[i] = -INFINITY;
		w->l[i] = 0;
	}
	memset(w->o, 0, BQ * dvr * sizeof(REAL));

	for (size_t k0 = begin; k0 < end; k0 += BK) {
		const size_t cols = min_size(BK, end - k0);

		/* S = Q_blk · K_blkᵀ · scale, scaled in the registers before the store,
		 * each row's max and finiteness found there too (no pass of their own);
		 * the micro-kernels inlined here (always_inline) */
		for (size_t i = 0; i < rows; i++) {
			rmax[i] = splat(-INFINITY);
			rbad[i] = splat(0);
		}
		for (size_t s = 0; s < cols; s += NR)
			for (size_t i = 0; i < rows; i += MR)
				micro_strided(dk, w->q + i * dk, MR, 1, ktp + (k0 + s) * dk,
					      w->s + i * BK + s, BK, min_size(MR, rows - i),
					      min_size(NR, cols - s), 0, scale, rmax + i, rbad + i);
		/* scale, softcap, mask; the running max and sum; the weights */
		for (size_t i = 0; i < rows; i++) {
			REAL *si = w->s + i * BK, mx, alpha, sum = 0, lanes[VB / sizeof(REAL)];
			const size_t qi = q0 + i, cv = round_up(cols, VL);
			const size_t seen = mha_rule_keys_end(rule, qi);
			const size_t from = mha_rule_keys_begin(rule, qi);
			vec vmx = rmax[i], vsum = splat(0);
			int any_bad = 0;
			/* no softcap, mask, ALiBi, edge of the causal or window rule or tail in
			 * this row's block: the scaled scores are the logits and their max is
			 * the micro-kernel's; else the passes below change them first */
			const int plain = cap == 0 && !masked && !rule->alibi && seen >= k0 + cols &&
					  from <= k0 && cols == cv;

			/* rbad: 0 where every score is finite, NaN where one is not */
			for (size_t l = 0; l < VL; l++)
				any_bad |= rbad[i][l] != 0;
			/* not finite: an error only where the key counts (rules.h), never a silent NaN */
			if (any_bad)
				for (size_t j = 0; j < cols; j++)
					if (!isfinite(si[j]))
						si[j] = score_again(a, rule,
								    w->q + i / MR * MR * dk + i % MR,
								    b, h, qi, k0 + j, error);
			if (cap > 0)
				for (size_t j = 0; j < cols; j++)
					si[j] = cap * (REAL)tanh((double)(si[j] / cap));
			if (!masked && rule->alibi) {
				/*
				 * ALiBi alone: slope·(j - p), linear in j, in one loop
				 * the compiler vectorises; a value that came out not
				 * finite counts only where the key is seen (rules.h)
				 */
				const double at = (double)k0 - mha_rule_position(rule, qi);
				int out_of_range = 0;

				for (size_t j = 0; j < cols; j++) {
					si[j] = (REAL)((double)si[j] + slope * (at + (double)j));
					out_of_range |= !(fabs(si[j]) <= REAL_MAX);
				}
				if (out_of_range)
					for (size_t j = 0; j < cols; j++)
						if (!isfinite(si[j]) &&
						    mha_rule_overflows(rule, h, qi, k0 + j, si[j]))
							*error = 2;
			} else if (masked) {
				/* the explicit mask, and ALiBi's term on it as mha_rule_mask adds it */
				const double pos = mha_rule_position(rule, qi);

				for (size_t j = 0; j < cols; j++) {
					double m = mha_rule_explicit(rule, h, qi, k0 + j);

					if (rule->alibi && m != -INFINITY)
						m += slope * ((double)(k0 + j) - pos);
					si[j] = (REAL)mha_rule_masked((double)si[j], m);
					if (!isfinite(si[j]) && mha_rule_overflows(rule, h, qi, k0 + j, si[j]))
						*error = 2;
				}
			}
			/* past the causal diagonal or the window (the block's last row may see further) */
			for (size_t j = seen > k0 ? seen - k0 : 0; j < cols; j++)
				si[j] = -INFINITY;
			/* before the window (the block's first row may see further back) */
			for (size_t j = 0; j < cols && k0 + j < from; j++)
				si[j] = -INFINITY;
			for (size_t j = cols; j < cv; j++)
				si[j] = -INFINITY;
			if (!plain || any_bad) {
				vmx = splat(-INFINITY);
				for (size_t j = 0; j < cv; j += VL) {
					const vec x = *(const vec *)(si + j);

					vmx = pick(x > vmx, x, vmx);
				}
			}
			memcpy(lanes, &vmx, sizeof(vmx));
			mx = w->m[i];
			for (size_t l = 0; l < VL; l++)
				mx = lanes[l] > mx ? lanes[l] : mx;
			if (mx == -INFINITY) {
				/* nothing seen yet: weights zero, nothing to rescale */
				memset(si, 0, cv * sizeof(REAL));
				continue;
			}
			alpha = vexp(w->m[i] - mx);
			for (size_t j = 0; j < cv; j += VL) {
				const vec p = vexp_v(*(const vec *)(si + j) - mx);

				*(vec *)(si + j) = p;
				vsum += p;
			}
			memcpy(lanes, &vsum, sizeof(vsum));
			for (size_t l = 0; l < VL; l++)
				sum += lanes[l];
			w->l[i] = w->l[i] * alpha + sum;
			w->m[i] = mx;
			if (alpha != 1)
				for (size_t t = 0; t < dv; t++)
					w->o[i * dvr + t] *= alpha;
			if (pshift)
				for (size_t j = 0; j < cv; j++)
					si[j] *= pscale;
		}
		/* O += P · V_blk, P read in place: rows past a short block are computed, never stored */
		for (size_t s = 0; s < dv; s += NR)
			for (size_t i = 0; i < rows; i += MR)
				micro_rows(cols, w->s + i * BK, BK,
					   vp + (s / NR) * round_up(a->n_kv, NR) * NR + k0 * NR,
					   w->o + i * dvr + s, dvr, min_size(MR, rows - i),
					   min_size(NR, dv - s), 1);
	}
	for (size_t i = 0; i < rows; i++) {
		REAL *o = (REAL *)a->O + (b * a->n_q + q0 + i) * a->ldo + h * dv;
		const size_t at = (b * a->H + h) * a->n_q + q0 + i;

		if (w->l[i] == 0) {
			/* every key blocked: zeros, as the exact path gives */
			memset(o, 0, dv * sizeof(REAL));
			if ((*blocked)++ == 0 || at < *first)
				*first = at;
			continue;
		}
		if (rule->sinks) {
			/*
			 * the sink joins the running max and sum once, after the
			 * last key block; in double, so that a large sink cannot
			 * overflow a float on the way
			 */
			const double s = rule->sinks[h], m = (double)w->m[i];
			const double mx = s > m ? s : m, alpha = exp(m - mx);

			w->l[i] = (REAL)((double)w->l[i] * alpha + exp(s - mx));
			if (alpha != 1)
				for (size_t t = 0; t < dv; t++)
					w->o[i * dvr + t] *= (REAL)alpha;
		}
		for (size_t t = 0; t < dv; t++)
			o[t] = w->o[i * dvr + t] / w->l[i];
		if (pshift) {
			for (size_t t = 0; t < dv; t++)
				o[t] = (REAL)mha_rescue_back((double)o[t], pshift, REAL_MAX);
		} else {
			int finite = 1;

			/* branch-free, vectorised: the common case pays one compare a value */
			for (size_t t = 0; t < dv; t++)
				finite &= fabs(o[t]) <= REAL_MAX;
			overflow |= !finite;
		}
	}
	return overflow;
}

/*
 * V of one key/value head as NR-column strips over all keys, (n_kv rounded,
 * NR) each: rows [j0, j1) of every strip, into the whole pack dst
 */
static void pack_v(REAL *dst, const REAL *V, size_t ldv, size_t n_kv, size_t dv, size_t j0,
		   size_t j1)
{
	const size_t rows = round_up(n_kv, NR);

	j1 = min_size(j1, rows);
	for (size_t s = 0; s < dv; s += NR) {
		const size_t nr = min_size(NR, dv - s);

		for (size_t j = j0; j < j1; j++)
			for (size_t t = 0; t < NR; t++)
				dst[j * NR + t] = (j < n_kv && t < nr) ? V[j * ldv + s + t] : 0;
		dst += rows * NR;
	}
}

/* rows of a pack each thread packs at a time (a multiple of every NR) */
#define PACK_ROWS 256

/* one attention's team: the packs, the task counter and what the threads found */
struct attend_team {
	struct mha_attend *a;
	REAL *kt, *vp;                /* the packs of Kᵀ and V (attend_packs of them) */
	struct team_counter next;     /* the next task of the wave */
	atomic_size_t blocked, first; /* rows with every key masked, the first of them */
	atomic_int error;
};

static void attend_team(void *arg, int tid, int nthreads)
{
	struct attend_team *r = arg;
	struct mha_attend *a = r->a;
	const size_t kt_size = kt_count(a), v_size = v_count(a);
	const size_t blocks = (a->n_q + BQ - 1) / BQ, packs = a->B * a->G;
	const int waves = attend_waves(a);
	const size_t per_head = a->H / a->G;
	/* tasks per wave: a pack's heads' query blocks, or all */
	const size_t tasks = waves ? per_head * blocks : attend_tasks(a);
	const size_t chunks = (round_up(a->n_kv, NR) + PACK_ROWS - 1) / PACK_ROWS;
	REAL *kt = r->kt, *vp = r->vp;

	{
		struct scratch w;
		size_t c[N_SCRATCH], my_first = (size_t)-1, my_blocked = 0;
		int my_error = 0;

		scratch_counts(a, c);
		w.q = alloc_aligned(c[SCRATCH_Q]);
		w.s = alloc_aligned(c[SCRATCH_S]);
		w.o = alloc_aligned(c[SCRATCH_O]);
		w.m = alloc_aligned(c[SCRATCH_M]);
		w.l = alloc_aligned(c[SCRATCH_L]);
		if (!w.q || !w.s || !w.o || !w.m || !w.l)
			my_error = 1;
		else
			memset(w.s, 0, c[SCRATCH_S] * sizeof(REAL)); /* never read uninitialised */
		for (size_t wave = 0; wave < (waves ? packs : 1); wave++) {
			const size_t n_ch = waves ? chunks : packs;

			/* the last wave's tasks are all taken (the barrier below): count afresh */
			if (tid == 0)
				atomic_store_explicit(&r->next.next, 0, memory_order_relaxed);
			/* pack: in waves this wave's pack, by rows among the threads; else every pack */
			for (size_t ch = team_share(n_ch, tid, nthreads);
			     ch < team_share(n_ch, tid + 1, nthreads); ch++) {
				const size_t p = waves ? wave : ch, b = p / a->G, g = p % a->G;
				const size_t j0 = waves ? ch * PACK_ROWS : 0;
				const size_t j1 = waves ? j0 + PACK_ROWS : SIZE_MAX;
				REAL *ktp = kt + (waves ? 0 : p) * kt_size, *vpp = vp + (waves ? 0 : p) * v_size;

				pack_kt(ktp, (const REAL *)a->K + b * a->n_kv * a->ldk + g * a->dk, a->ldk,
					a->n_kv, a->dk, j0, j1);
				pack_v(vpp, (const REAL *)a->V + b * a->n_kv * a->ldv + g * a->dv, a->ldv,
				       a->n_kv, a->dv, j0, j1);
			}
			mha_team_barrier(nthreads);
			/* the query blocks from the last: on causal shapes the largest first, so
			 * that the threads finish together (dynamic scheduling, longest first) */
			for (size_t t = team_next(&r->next); t < tasks; t = team_next(&r->next)) {
				const size_t blk = blocks - 1 - t % blocks, q0 = blk * BQ;
				const size_t rows = min_size(BQ, a->n_q - q0);
				const size_t b = waves ? wave / a->G : t / (a->H * blocks);
				const size_t h = waves ? wave % a->G * per_head + t / blocks
						       : t % (a->H * blocks) / blocks;
				const size_t p = waves ? 0 : b * a->G + mha_rule_kv_head(h, a->H, a->G);
				const struct mha_rule rule = mha_rule_seq(&a->rule, b);

				if (my_error || mha_progress_stopped(a->progress))
					continue; /* stopped: the rest skipped */
				if (attend_block(a, &rule, &w, kt + p * kt_size, vp + p * v_size, b, h, q0,
						 rows, 0, &my_blocked, &my_first, &my_error) && !my_error) {
					/* Σ p·v overflowed, though the output is at most max |v|: again, scaled */
					size_t again_blocked = 0, again_first = (size_t)-1;
					const int shift = mha_rescue_shift(
						vmax_of(a, b, mha_rule_kv_head(h, a->H, a->G)), a->n_kv, REAL_MAX);

					attend_block(a, &rule, &w, kt + p * kt_size, vp + p * v_size, b, h, q0,
						     rows, shift, &again_blocked, &again_first, &my_error);
				}
				if (a->progress) {
					/* the keys the rows see, as mha_progress_forward_work counts them */
					uint64_t seen = 0;

					for (size_t i = q0; i < q0 + rows; i++) {
						const size_t e = mha_rule_keys_end(&rule, i);
						const size_t s = mha_rule_keys_begin(&rule, i);

						seen += e > s ? e - s : 0;
					}
					mha_progress_add(a->progress, seen * (a->dk + a->dv));
					if (tid == 0)
						mha_progress_tell(a->progress);
				}
			}
			/* the next wave packs over this one's K and V once all are done with
			 * them; after the last, the team's end is the wait (a barrier fewer) */
			if (waves && wave + 1 < packs) {
				mha_team_barrier(nthreads);
			}
		}
		atomic_fetch_add(&r->blocked, my_blocked);
		if (my_blocked)
			team_min_size(&r->first, my_first);
		team_max_int(&r->error, my_error);
		free(w.q);
		free(w.s);
		free(w.o);
		free(w.m);
		free(w.l);
	}
}

void NAME(mha_attend_)(struct mha_attend *a)
{
	const size_t held = attend_packs(a);
	const size_t kt_n = mha_sat_mul(held, kt_count(a));
	const size_t n = mha_sat_add(kt_n, mha_sat_mul(held, v_count(a)));
	/* the packs of Kᵀ and V in one block: at 2 MiB together (512 keys of 8
	 * heads of 64 in f32) one huge page rather than 512 small ones;
	 * kt_count is whole vectors of NR·dk, so V's pack starts aligned */
	REAL *block = alloc_big(n);
	struct attend_team r = { a, block, block ? block + kt_n : NULL, { 0 }, 0, (size_t)-1, 0 };

	if (!block) {
		a->error = 1;
		return;
	}
	mha_team_run(attend_threads(a), attend_team, &r);
	free_big(block, n);
	a->blocked = atomic_load(&r.blocked);
	a->first_blocked = atomic_load(&r.first);
	a->error = atomic_load(&r.error);
}

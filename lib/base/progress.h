/*
 * progress.h: a call's progress told to its observer's progress function
 * (mha_observer.progress, mha_grad_observer.progress), inside the library
 * only.
 *
 * The work is counted in multiply-adds: the call's whole is estimated up
 * front from the dims and the rule of which keys each query sees
 * (mha_progress_forward_work), and each piece adds what it did as it ends
 * (a block of a product, a task of the attention), from any thread.  Only
 * the calling thread tells (participant 0 of a team, or the plain path's
 * own loop), and only when the fraction has grown by a thousandth, so that
 * the listener is called at most about a thousand times a call and never
 * from two threads.  Nobody listening (fn NULL): every call here is one
 * test.
 */
#ifndef MHA_PROGRESS_H
#define MHA_PROGRESS_H

#include "mha.h"
#include "base/rules.h"

#include <stdatomic.h>
#include <stdint.h>

struct mha_progress {
	mha_progress_fn fn;            /* NULL: nobody listens */
	void *ctx;
	mha_stop_fn stop;              /* NULL: never stopped (asked where fn is told) */
	void *stop_ctx;
	atomic_int stopped;            /* stop said yes: every thread skips the work left */
	const char *phase;             /* what the call is doing now */
	double total;                  /* the call's work, in multiply-adds (an estimate) */
	atomic_uint_least64_t done;    /* the work done so far, added from any thread */
	double told;                   /* the fraction last told */
};

/* p for a call of total multiply-adds, told to fn(ctx, …) and asked
 * stop(stop_ctx): an observer's (NULL: nobody); total is counted when
 * someone listens (mha_progress_listened). */
void mha_progress_start(struct mha_progress *p, mha_progress_fn fn, void *ctx,
			mha_stop_fn stop, void *stop_ctx, double total);

/* fn or stop is set: the work is worth counting */
#define mha_progress_listened(fn, stop) ((fn) != NULL || (stop) != NULL)

/* units more done (any thread; p may be NULL) */
static inline void mha_progress_add(struct mha_progress *p, uint64_t units)
{
	if (p && (p->fn || p->stop))
		atomic_fetch_add_explicit(&p->done, units, memory_order_relaxed);
}

/* stop said yes: the work not begun is skipped (any thread; p may be NULL) */
static inline int mha_progress_stopped(struct mha_progress *p)
{
	return p && p->stop && atomic_load_explicit(&p->stopped, memory_order_relaxed);
}

/* The phase from now on, told (the calling thread only; p may be NULL). */
void mha_progress_phase(struct mha_progress *p, const char *phase);

/* Tell the listener when the fraction has grown by 1/1000 since last told,
 * and ask stop then (the calling thread only: participant 0 of a team; p
 * may be NULL). */
void mha_progress_tell(struct mha_progress *p);

/* The call is done: the fraction 1, told once. */
void mha_progress_end(struct mha_progress *p);

/* The keys the first n_q queries see under rule r, counted row by row (the
 * attention's work over d_k + d_v). */
double mha_progress_seen(const struct mha_rule *r, size_t n_q);

/* A forward's multiply-adds: the projections whose weight W[0..3] (W_Q,
 * W_K, W_V, W_O) is given, the attention (scores and values over the keys
 * each query sees). */
double mha_progress_forward_work(const mha_dims *d, const mha_config *cfg, const void *const W[4]);

#endif

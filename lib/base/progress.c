/*
 * progress.c: a call's progress told to its listener (progress.h).
 */
#include "base/progress.h"

void mha_progress_start(struct mha_progress *p, mha_progress_fn fn, void *ctx,
			mha_stop_fn stop, void *stop_ctx, double total)
{
	p->fn = fn;
	p->ctx = ctx;
	p->stop = stop;
	p->stop_ctx = stop_ctx;
	atomic_init(&p->stopped, 0);
	p->phase = "starting";
	p->total = total > 0 ? total : 1;
	atomic_init(&p->done, 0);
	p->told = -1;
}

/* the fraction f reached: told, and stop asked */
static void tell_now(struct mha_progress *p, double f)
{
	p->told = f;
	if (p->fn)
		p->fn(p->ctx, p->phase, f);
	if (p->stop && !atomic_load_explicit(&p->stopped, memory_order_relaxed) &&
	    p->stop(p->stop_ctx))
		atomic_store_explicit(&p->stopped, 1, memory_order_relaxed);
}

static double fraction(const struct mha_progress *p)
{
	const double f = (double)atomic_load_explicit(&p->done, memory_order_relaxed) / p->total;

	/* the total is an estimate: the last stretch waits for the end */
	return f < 0.999 ? f : 0.999;
}

void mha_progress_phase(struct mha_progress *p, const char *phase)
{
	if (!p || (!p->fn && !p->stop))
		return;
	p->phase = phase;
	tell_now(p, fraction(p) > p->told ? fraction(p) : p->told);
}

void mha_progress_tell(struct mha_progress *p)
{
	double f;

	if (!p || (!p->fn && !p->stop))
		return;
	f = fraction(p);
	if (f >= p->told + 0.001)
		tell_now(p, f);
}

void mha_progress_end(struct mha_progress *p)
{
	if (!p || !p->fn || p->told >= 1)
		return;
	p->phase = "done";
	p->told = 1;
	p->fn(p->ctx, p->phase, 1);
}

double mha_progress_seen(const struct mha_rule *r, size_t n_q)
{
	double seen = 0;

	for (size_t i = 0; i < n_q; i++) {
		const size_t end = mha_rule_keys_end(r, i), begin = mha_rule_keys_begin(r, i);

		seen += end > begin ? (double)(end - begin) : 0;
	}
	return seen;
}

double mha_progress_forward_work(const mha_dims *d, const mha_config *cfg, const void *const W[4])
{
	const double B = (double)mha_rule_batch(d), H = (double)d->heads;
	const double G = (double)mha_rule_kv_heads(d), dk = (double)d->d_k, dv = (double)d->d_v;
	const struct mha_rule all = mha_rule_of(d, cfg);
	double seen = 0;

	/* the keys each query sees, row by row: the attention's own count */
	for (size_t b = 0; b < mha_rule_batch(d); b++) {
		const struct mha_rule r = mha_rule_seq(&all, b);

		seen += mha_progress_seen(&r, d->n_q);
	}
	/* a projection without its weight (the identity) costs nothing */
	return B * ((W[0] ? (double)d->n_q * (double)d->d_q_in * H * dk : 0) +
		    (W[1] ? (double)d->n_kv * (double)d->d_k_in * G * dk : 0) +
		    (W[2] ? (double)d->n_kv * (double)d->d_v_in * G * dv : 0) +
		    (W[3] ? (double)d->n_q * H * dv * (double)d->d_out : 0)) +
	       seen * H * (dk + dv);
}

/*
 * shapes.c: the problem's shapes (shapes.h): a batch spread from 2-D inputs,
 * mha_dims worked out from what was read, the keys' lengths, and one
 * sequence of a batch kept alone.
 */
#include "load/shapes.h"
#include "util/budget.h"
#include "util/msg.h"
#include "load/latent.h"
#include "load/model.h"
#include "load/said.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* m, 2-D, as B copies of itself: (B, rows, cols), its labels kept */
static int spread(matrix *m, size_t B)
{
	matrix b;
	const size_t n = matrix_size(m), dims[3] = { B, m->dim[0], m->dim[1] };

	if (m->f ? matrix_alloc_f32(&b, 3, dims) : matrix_alloc(&b, 3, B, m->dim[0], m->dim[1]))
		return -1;
	for (size_t i = 0; i < B; i++)
		if (m->f)
			memcpy(b.f + i * n, m->f, n * sizeof(float));
		else
			memcpy(b.v + i * n, m->v, n * sizeof(double));
	b.is_bool = m->is_bool;
	b.is_f32 = m->is_f32;
	b.labels = m->labels;
	b.n_labels = m->n_labels;
	b.labels_held = m->labels_held;
	m->labels = NULL;
	m->n_labels = 0;
	m->labels_held = 0;
	matrix_free(m);
	*m = b;
	return 0;
}

/*
 * A batch: the 3-D inputs must agree on B; a 2-D one beside them is the
 * same for every sequence.  Sets p->batch (0: every input 2-D).
 */
int shapes_batch(struct problem *p)
{
	struct { matrix *m; const char *name, *src; } in[] = {
		{ &p->x, "X", p->x_src }, { &p->kv, "X_kv", p->kv_src }, { &p->xk, "X_k", p->xk_src },
		{ &p->xv, "X_v", p->xv_src }, { &p->q, "Q", p->q_src }, { &p->k, "K", p->k_src },
		{ &p->v, "V", p->v_src },
	};
	const size_t n = sizeof(in) / sizeof(in[0]);
	size_t first = n;

	for (size_t i = 0; i < n; i++) {
		if (in[i].m->rank != 3)
			continue;
		if (first == n) {
			first = i;
		} else if (in[i].m->dim[0] != in[first].m->dim[0]) {
			const size_t a = in[first].m->dim[0], b = in[i].m->dim[0];

			return error("%s from %s holds %zu sequence%s but %s from %s holds %zu: the "
				     "inputs of a batch must hold as many", in[first].name,
				     in[first].src, a, plural(a), in[i].name, in[i].src, b);
		}
	}
	if (first == n)
		return 0;
	p->batch = in[first].m->dim[0];
	for (size_t i = 0; i < n; i++) {
		/* a shared input: its gradient (mha backward) is the sequences' sum */
		if (in[i].m->rank == 2)
			p->shared |= 1u << i;
		if (in[i].m->rank == 2 && spread(in[i].m, p->batch))
			return -1;
	}
	return 0;
}

/* Bias lengths must match the columns of their weight. */
static int check_bias(const weights *w, int b, int wt)
{
	const size_t want = w->m[wt].dim[1];

	if (weights_has(w, b) && w->m[b].dim[0] != want)
		return error("%s from %s has %zu entr%s but %s from %s has %zu columns",
			     weight_names[b], w->src[b], w->m[b].dim[0], w->m[b].dim[0] == 1 ? "y" : "ies",
			     weight_names[wt], w->src[wt], want);
	return 0;
}

/* Work out mha_dims from the inputs, explaining any mismatch. */
int shapes_dims(const struct problem_spec *s, const struct problem *p, mha_dims *d)
{
	const weights *w = &p->w;
	const size_t H = s->heads, G = s->kv_heads;
	char said[4400]; /* what set the heads, for a message */

	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	d->heads = H;
	d->kv_heads = G;
	d->batch = p->batch;

	if (latent_on(s)) {
		if (latent_dims(s, p, d))
			return -1;
	} else if (p->direct) {
		for (int i = WQ; i < N_WEIGHTS; i++)
			if (i != WO && i != BO && weights_has(w, i))
				return error("%s from %s cannot be used with --q/--k/--v (they are given "
					     "directly); only W_O and b_O can", weight_names[i], w->src[i]);
		d->n_q = matrix_rows(&p->q);
		d->n_kv = matrix_rows(&p->k);
		d->d_q_in = matrix_cols(&p->q);
		d->d_k_in = matrix_cols(&p->k);
		d->d_v_in = matrix_cols(&p->v);
		if (d->d_q_in % H)
			return error("Q from %s has %zu columns, which %s does not divide",
				     p->q_src, d->d_q_in, model_heads_said(s, 0, H, said, sizeof(said)));
		d->d_k = d->d_q_in / H;
		if (d->d_k_in != G * d->d_k)
			return error("K from %s has %zu columns but needs %zu (%zu key/value head%s of "
				     "d_k %zu, as Q from %s has %zu columns for %zu head%s)", p->k_src,
				     d->d_k_in, G * d->d_k, G, plural(G), d->d_k, p->q_src, d->d_q_in,
				     H, plural(H));
		if (matrix_rows(&p->v) != d->n_kv)
			return error("V from %s has %zu rows but K from %s has %zu: one value per key",
				     p->v_src, matrix_rows(&p->v), p->k_src, d->n_kv);
		if (d->d_v_in % G)
			return error("V from %s has %zu columns, which %s does not divide",
				     p->v_src, d->d_v_in, model_heads_said(s, 1, G, said, sizeof(said)));
		d->d_v = d->d_v_in / G;
	} else {
		/* the keys' source, and the values' (the same but with --xk/--xv) */
		const matrix *kv = s->xk ? &p->xk : s->kv ? &p->kv : &p->x;
		const char *kvname = s->xk ? "X_k" : s->kv ? "X_kv" : "X";
		const char *kvsrc = s->xk ? p->xk_src : s->kv ? p->kv_src : p->x_src;
		const matrix *vm = s->xv ? &p->xv : kv;
		const char *vname = s->xv ? "X_v" : kvname, *vsrc = s->xv ? p->xv_src : kvsrc;
		const int n_proj = weights_has(w, WQ) + weights_has(w, WK) + weights_has(w, WV);

		d->n_q = matrix_rows(&p->x);
		d->n_kv = matrix_rows(kv);
		d->d_q_in = matrix_cols(&p->x);
		d->d_k_in = matrix_cols(kv);
		d->d_v_in = matrix_cols(vm);
		if (matrix_rows(vm) != d->n_kv)
			return error("%s from %s has %zu rows but %s from %s has %zu: one value per key",
				     vname, vsrc, matrix_rows(vm), kvname, kvsrc, d->n_kv);
		if (n_proj != 0 && n_proj != 3) {
			const int have = weights_has(w, WQ) ? WQ : weights_has(w, WK) ? WK : WV;

			return error("missing %s (W_Q, W_K and W_V go together; %s came from %s)",
				     !weights_has(w, WQ) ? "W_Q" : !weights_has(w, WK) ? "W_K" : "W_V",
				     weight_names[have], w->src[have]);
		}
		for (int b = BQ; b <= BV; b++)
			if (!n_proj && weights_has(w, b))
				return error("%s from %s without %s", weight_names[b], w->src[b],
					     weight_names[b - BQ + WQ]);
		if (n_proj) {
			const matrix *wq = &w->m[WQ], *wk = &w->m[WK], *wv = &w->m[WV];

			if (wq->dim[0] != d->d_q_in)
				return error("W_Q from %s is %zux%zu but X from %s has %zu columns: W_Q "
					     "needs %zu rows", w->src[WQ], wq->dim[0], wq->dim[1],
					     p->x_src, d->d_q_in, d->d_q_in);
			if (wq->dim[1] % H)
				return error("W_Q from %s has %zu columns, which %s does not "
					     "divide (each head takes an equal block)", w->src[WQ],
					     wq->dim[1], model_heads_said(s, 0, H, said, sizeof(said)));
			d->d_k = wq->dim[1] / H;
			for (int i = WK; i <= WV; i++) {
				const size_t in = i == WK ? d->d_k_in : d->d_v_in;

				if (w->m[i].dim[0] != in)
					return error("%s from %s is %zux%zu but %s from %s has %zu columns: "
						     "%s needs %zu rows", weight_names[i], w->src[i],
						     w->m[i].dim[0], w->m[i].dim[1],
						     i == WK ? kvname : vname, i == WK ? kvsrc : vsrc, in,
						     weight_names[i], in);
			}
			if (wk->dim[1] != G * d->d_k)
				return error("W_K from %s has %zu columns but needs %zu (%zu key/value "
					     "head%s of d_k %zu, as W_Q from %s has %zu columns for %zu "
					     "head%s)", w->src[WK], wk->dim[1], G * d->d_k, G, plural(G),
					     d->d_k, w->src[WQ], wq->dim[1], H, plural(H));
			if (wv->dim[1] % G)
				return error("W_V from %s has %zu columns, which %s does not "
					     "divide", w->src[WV], wv->dim[1],
					     model_heads_said(s, 1, G, said, sizeof(said)));
			d->d_v = wv->dim[1] / G;
			if (check_bias(w, BQ, WQ) || check_bias(w, BK, WK) || check_bias(w, BV, WV))
				return -1;
		} else {
			/* Q = X, K = V = X_kv: the heads split X's own columns */
			if (d->d_q_in % H)
				return error("%s does not divide d_model %zu (the columns of X "
					     "from %s)", model_heads_said(s, 0, H, said, sizeof(said)),
					     d->d_q_in, p->x_src);
			d->d_k = d->d_v = d->d_q_in / H;
			if (d->d_k_in != G * d->d_k && !s->kv && !s->xk)
				return error("--kv-heads %zu needs weights (-w) or --kv: without them K = V "
					     "= X, %zu columns wide, but %zu key/value head%s of %zu need%s %zu",
					     G, d->d_q_in, G, plural(G), d->d_k, G == 1 ? "s" : "", G * d->d_k);
			if (d->d_k_in != G * d->d_k)
				return error("%s from %s has %zu columns but without weights it needs "
					     "%zu (%zu key/value head%s of %zu, like the %zu columns of X "
					     "from %s)", kvname, kvsrc, d->d_k_in, G * d->d_k, G, plural(G), d->d_k,
					     d->d_q_in, p->x_src);
			if (s->xv) {
				/* V = X_v: its own width, split among the key/value heads */
				if (d->d_v_in % G)
					return error("X_v from %s has %zu columns, which %s "
						     "does not divide", vsrc, d->d_v_in,
						     model_heads_said(s, 1, G, said, sizeof(said)));
				d->d_v = d->d_v_in / G;
			}
		}
	}

	if (weights_has(w, WO)) {
		const matrix *wo = &w->m[WO];

		if (wo->dim[0] != H * d->d_v)
			return error("W_O from %s is %zux%zu but the heads concatenate to %zu columns "
				     "(%zu head%s of d_v %zu): W_O needs %zu rows", w->src[WO],
				     wo->dim[0], wo->dim[1], H * d->d_v, H, plural(H), d->d_v, H * d->d_v);
		d->d_out = wo->dim[1];
		if (check_bias(w, BO, WO))
			return -1;
	} else if (weights_has(w, BO)) {
		return error("b_O from %s without W_O", w->src[BO]);
	}
	return 0;
}

/* --kv-len N, or 5,3,4: one length per sequence of the batch; none past the keys */
int shapes_kv_len(const struct problem_spec *s, struct problem *p)
{
	const size_t B = problem_sequences(p), n_kv = p->d.n_kv;
	const char *keys = p->direct ? p->k_src : s->xk ? p->xk_src : s->kv ? p->kv_src : p->x_src;

	if (s->cfg.kv_len > n_kv)
		return error("--kv-len %zu but %s gives %zu key%s", s->cfg.kv_len, keys, n_kv,
			     plural(n_kv));
	if (!s->kv_lens)
		return 0;
	if (s->n_kv_lens != B)
		return error("--kv-len gives %zu lengths but %s %zu sequence%s (%s)", s->n_kv_lens,
			     p->batch ? "the batch holds" : "there is", B, plural(B),
			     p->batch ? "the inputs' first dimension" : "the inputs are 2-D");
	for (size_t b = 0; b < B; b++)
		if (s->kv_lens[b] > n_kv)
			return error("--kv-len: sequence %zu's length is %zu but %s gives %zu key%s", b + 1,
				     s->kv_lens[b], keys, n_kv, plural(n_kv));
	p->cfg.kv_lens = s->kv_lens;
	return 0;
}

/* the library's view of the inputs read */
void shapes_inputs(struct problem *p)
{
	const struct problem_spec *s = &p->spec;

	p->in.size = sizeof(p->in);
	p->in_f.size = sizeof(p->in_f);
	p->in.xq = p->direct ? p->q.v : p->x.v;
	p->in.xk = p->direct ? p->k.v : s->xk ? p->xk.v : s->kv ? p->kv.v : p->x.v;
	p->in.xv = p->direct ? p->v.v : s->xv ? p->xv.v : p->in.xk;
	p->in_f.xq = p->direct ? p->q.f : p->x.f;
	p->in_f.xk = p->direct ? p->k.f : s->xk ? p->xk.f : s->kv ? p->kv.f : p->x.f;
	p->in_f.xv = p->direct ? p->v.f : s->xv ? p->xv.f : p->in_f.xk;
}

int problem_keep_sequence(struct problem *p, size_t b)
{
	matrix *in[] = { &p->x, &p->kv, &p->xk, &p->xv, &p->q, &p->k, &p->v };

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		matrix *m = in[i], one;
		const size_t n = m->dim[1] * m->dim[2];

		if (m->rank != 3)
			continue;
		if (matrix_alloc(&one, 3, 1, m->dim[1], m->dim[2]))
			return -1;
		memcpy(one.v, m->v + b * n, n * sizeof(double));
		one.is_f32 = m->is_f32;
		one.labels = m->labels;
		one.n_labels = m->n_labels;
		one.labels_held = m->labels_held;
		m->labels = NULL;
		m->n_labels = m->labels_held = 0;
		matrix_free(m);
		*m = one;
	}
	if (p->cfg.mask.per_batch) {
		/* sequence b's mask, moved to the front of the arrays the config points at */
		const size_t n = p->d.n_q * p->d.n_kv * (p->cfg.mask.per_head ? p->d.heads : 1);

		if (p->allow)
			memmove(p->allow, p->allow + b * n, n);
		else
			memmove(p->mask.v, p->mask.v + b * n, n * sizeof(double));
		p->cfg.mask.per_batch = 0;
	}
	if (p->cfg.kv_lens) {
		p->cfg.kv_len = p->cfg.kv_lens[b];
		p->cfg.kv_lens = NULL;
	}
	p->batch_read = p->batch;
	p->batch = p->d.batch = 1;
	shapes_inputs(p);
	return 0;
}

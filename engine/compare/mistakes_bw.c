/*
 * mistakes_bw.c: the backward's classic mistakes, for 'mha compare's
 * diagnosis (compare.h): each recomputed through the library's plain
 * backward with an editor (mha_grad_observer.edit) that changes one stage
 * the way the mistake does (D left out, the scale, P without the mask, the
 * group's sum, a product not transposed), the rest of the backward then
 * exact; or, for a weight's gradient transposed, mha's own turned.  The
 * values an editor needs (the softmax, the scores, each head's dO) come
 * from mha's own set of the same run.
 */
#include "util/msg.h"
#include "compare/compare.h"
#include "load/problem.h"
#include "load/weights.h"

#include "mha.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
	B_NO_D, B_SCALE, B_LEAK_LSE, B_LEAK_SOFTMAX, B_GQA_FIRST, B_GQA_LAST, B_DP_V, B_DV_P,
	B_DW_T, B_COUNT
};

/* what an editor reads: the mistake, and mha's own steps of the run */
struct bw_what {
	int k;
	const struct set *mine;
	size_t H, G, nq, nkv, dv;
	double scale;
	const double *sinks; /* (H), or NULL */
};

/* the plane of head h of a (H, rows, cols) step of mine, row i */
static const double *at(const struct bw_what *w, int id, size_t h, size_t i, size_t cols,
			size_t rows)
{
	return w->mine->m[id].v + (h * rows + i) * cols;
}

static int bw_edit_fn(void *ctx, mha_grad_stage stage, int head, size_t row, double *m,
		      size_t rows, size_t cols)
{
	const struct bw_what *w = ctx;
	const size_t h = (size_t)head, ratio = w->H / w->G;

	(void)rows;
	switch (w->k) {
	case B_NO_D:
		if (stage == MHA_GRAD_HEAD_D)
			m[0] = 0;
		break;
	case B_SCALE:
		if (stage == MHA_GRAD_HEAD_DSCORES)
			for (size_t j = 0; j < cols; j++)
				m[j] /= w->scale;
		break;
	case B_LEAK_LSE: case B_LEAK_SOFTMAX:
		if (stage == MHA_GRAD_HEAD_P) {
			/* the scores before the mask: softcapped, or scaled */
			const int pre = w->mine->m[C_SOFTCAPPED].rank ? C_SOFTCAPPED : C_SCALED;
			const double *x = at(w, pre, h, row, w->nkv, w->nq);
			const double *mk = at(w, C_MASKED, h, row, w->nkv, w->nq);
			double mx = -INFINITY, sum = 0;

			/* the log-sum-exp of the masked row (FlashAttention's L), or
			 * of the unmasked one (a softmax recomputed without the mask) */
			for (size_t j = 0; j < cols; j++)
				mx = fmax(mx, w->k == B_LEAK_LSE ? mk[j] : x[j]);
			if (mx == -INFINITY)
				break;
			if (w->sinks)
				mx = fmax(mx, w->sinks[h]);
			for (size_t j = 0; j < cols; j++)
				sum += exp((w->k == B_LEAK_LSE ? mk[j] : x[j]) - mx);
			if (w->sinks)
				sum += exp(w->sinks[h] - mx);
			for (size_t j = 0; j < cols; j++)
				m[j] = exp(x[j] - mx) / sum;
		}
		break;
	case B_GQA_FIRST: case B_GQA_LAST:
		/* each key/value head's gradient from one of its query heads alone */
		if ((stage == MHA_GRAD_HEAD_DK || stage == MHA_GRAD_HEAD_DV) &&
		    h % ratio != (w->k == B_GQA_FIRST ? 0 : ratio - 1))
			memset(m, 0, rows * cols * sizeof(double));
		break;
	case B_DP_V:
		if (stage == MHA_GRAD_HEAD_DP) {
			/* dO·V, which runs only when d_v = n_kv: dP_ij = Σ_t dO_it·V_tj */
			const double *dO = at(w, C_G(GS_DO), h, row, w->dv, w->nq);
			const double *V = w->mine->m[C_HEAD_V].v + h * w->nkv * w->dv;

			for (size_t j = 0; j < cols; j++) {
				double acc = 0;

				for (size_t t = 0; t < w->dv; t++)
					acc += dO[t] * V[t * w->dv + j];
				m[j] = acc;
			}
		}
		break;
	case B_DV_P:
		if (stage == MHA_GRAD_HEAD_DV) {
			/* P·dO_h, which runs only when n_q = n_kv */
			const double *P = at(w, C_SOFTMAX, h, 0, w->nkv, w->nq);
			const double *dO = at(w, C_G(GS_DO), h, 0, w->dv, w->nq);

			for (size_t i = 0; i < w->nkv; i++)
				for (size_t t = 0; t < w->dv; t++) {
					double acc = 0;

					for (size_t j = 0; j < w->nq; j++)
						acc += P[i * w->nkv + j] * dO[j * w->dv + t];
					m[i * w->dv + t] = acc;
				}
		}
		break;
	default:
		break;
	}
	return 0;
}

/* mha's set with every square weight's gradient transposed: 0, 1 none, -1 said */
static int transposed_set(struct set *c, const struct ctx *x)
{
	int any = 0;

	for (int i = 0; i < C_COUNT; i++)
		if (copy_matrix(&c->m[i], &x->mine->m[i]))
			return -1;
	for (int gs = GS_DW_Q; gs <= GS_DW_O; gs++) {
		matrix *m = &c->m[C_G(gs)];

		if (m->rank != 2 || m->dim[0] != m->dim[1])
			continue;
		for (size_t i = 0; i < m->dim[0]; i++)
			for (size_t j = i + 1; j < m->dim[1]; j++) {
				const double t = m->v[i * m->dim[1] + j];

				m->v[i * m->dim[1] + j] = m->v[j * m->dim[1] + i];
				m->v[j * m->dim[1] + i] = t;
			}
		any = 1;
	}
	return any ? 0 : 1;
}

int bw_mistake_count(void)
{
	return B_COUNT;
}

int bw_candidate(int k, const struct ctx *x, struct mistake *m, struct set *c)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	const struct set *mine = x->mine;
	struct bw_what w = { .k = k, .mine = mine, .H = d->heads, .G = G, .nq = d->n_q,
			     .nkv = d->n_kv, .dv = d->d_v, .scale = x->rep->scale,
			     .sinks = p->cfg.sinks };
	const struct bw_edit edit = { bw_edit_fn, &w };
	int masks = 0;

	memset(m, 0, sizeof(*m));
	if (!x->grads || !mine->m[C_G(GS_DO)].rank)
		return 1;
	for (size_t i = 0; i < matrix_size(&mine->m[C_MASKED]) && !masks; i++)
		masks = mine->m[C_MASKED].v[i] == -INFINITY;
	switch (k) {
	case B_NO_D:
		m->id = "softmax-backward-no-d";
		snprintf(m->with, sizeof(m->with), "D left out of dS");
		snprintf(m->why, sizeof(m->why), "your softmax backward left out D: dS = P o dP, where "
			 "it is P o (dP - D), D = rowsum(dO o O) (the Jacobian's -p*p^T part)");
		break;
	case B_SCALE:
		if (x->rep->scale == 1)
			return 1;
		m->id = "dscores-scale-missing";
		snprintf(m->with, sizeof(m->with), "the scale left out of dscores");
		snprintf(m->why, sizeof(m->why), "you left the scale out of the scores' gradient: "
			 "dscores = dS, where the forward multiplied the scores by %.6g, so dscores = "
			 "dS * %.6g", x->rep->scale, x->rep->scale);
		break;
	case B_LEAK_LSE: case B_LEAK_SOFTMAX:
		if (!masks)
			return 1;
		m->id = p->cfg.causal ? "causal-gradient-leak" : "mask-missing-in-backward";
		snprintf(m->with, sizeof(m->with), "P recomputed without the mask in the backward (%s)",
			 k == B_LEAK_LSE ? "exp(scores - L)" : "a softmax of the unmasked scores");
		snprintf(m->why, sizeof(m->why), "your backward recomputed P without the %s, as %s: the "
			 "keys it hides got gradient (dS nonzero where the forward masked), though "
			 "the forward masked them", p->cfg.causal ? "causal mask" : "mask",
			 k == B_LEAK_LSE ? "exp(scores - L) with the forward's log-sum-exp L" :
			 "softmax(scores)");
		break;
	case B_GQA_FIRST: case B_GQA_LAST:
		if (G == d->heads)
			return 1;
		m->id = "gqa-gradient-not-summed";
		snprintf(m->with, sizeof(m->with), "dK and dV of %s query head of each group alone",
			 k == B_GQA_FIRST ? "the first" : "the last");
		snprintf(m->why, sizeof(m->why), "you did not sum dK and dV over the %zu query heads "
			 "that share each key/value head: you kept %s", d->heads / G,
			 k == B_GQA_FIRST ? "the first one's (a slice, [:, ::group])" :
			 "the last one's (dK[g] = ... in a loop over the heads, not +=)");
		break;
	case B_DP_V:
		if (d->d_v != d->n_kv)
			return 1;
		m->id = "dp-v-not-transposed";
		snprintf(m->with, sizeof(m->with), "dP = dO*V");
		snprintf(m->why, sizeof(m->why), "you computed dP = dO*V; it is dO*V^T (the shapes "
			 "let it run: d_v = n_kv = %zu)", d->n_kv);
		break;
	case B_DV_P:
		if (d->n_q != d->n_kv)
			return 1;
		m->id = "dv-p-not-transposed";
		snprintf(m->with, sizeof(m->with), "dV = P*dO");
		snprintf(m->why, sizeof(m->why), "you computed dV = P*dO; it is P^T*dO (the shapes let "
			 "it run: n_q = n_kv = %zu)", d->n_q);
		break;
	case B_DW_T: {
		const int rc = transposed_set(c, x);

		if (rc)
			return rc;
		m->id = "dweight-transposed";
		snprintf(m->with, sizeof(m->with), "the weights' gradients transposed");
		snprintf(m->why, sizeof(m->why), "your weights' gradients are transposed: dQ^T*X where "
			 "this layer's dW_Q is X^T*dQ (%s)", p->spec.layout == LAYOUT_TORCH ?
			 "--layout torch: your gradients as PyTorch's (out, in) weights" :
			 "weights stored d_in x d_out; PyTorch's (out, in) gradients want --layout torch");
		return 0;
	}
	default:
		return 1;
	}
	{
		const int rc = run_set(c, x, &p->in, &p->weights, &p->cfg, &edit, NULL);

		if (rc || (k != B_GQA_FIRST && k != B_GQA_LAST))
			return rc;
		/* each query head's dK and dV are right; only their sum over the
		 * group was not made: heads.dK and heads.dV stay mha's own */
		for (int id = C_G(GS_DV_H); id <= C_G(GS_DK_H); id++)
			if ((id == C_G(GS_DV_H) || id == C_G(GS_DK_H)) && c->m[id].rank &&
			    x->mine->m[id].rank) {
				matrix_free(&c->m[id]);
				if (copy_matrix(&c->m[id], &x->mine->m[id]))
					return -1;
			}
		return 0;
	}
}

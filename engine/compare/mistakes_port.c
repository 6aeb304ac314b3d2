/*
 * mistakes_port.c: the mistakes of porting today's models, for 'mha
 * compare's diagnosis (compare.h), each recomputed in float64 through the
 * library with the configuration changed the way the mistake changes it,
 * and judged as the first differing step is (their bfloat16 or float16
 * numbers by their precision):
 *   causal-inverted: each query sees the keys after it, the query left with
 *     no key a row of zeros (as mha and FlashAttention give it), or as
 *     PyTorch gives it, of NaN (a mask of -inf) or of equal weights (the
 *     type's lowest);
 *   gqa-repeat: torch's repeat where repeat_interleave is meant (query head
 *     h reads key/value head h mod G, not h / (H/G));
 *   window-off-by-one: the window one key wider or narrower (Hugging Face's
 *     sliding_window counts the query's own key, FlashAttention's (W, 0)
 *     does not);
 *   sinks-missing, sinks-wrong-head: gpt-oss's sinks left out, or each
 *     query head given its key/value head's or its neighbour's;
 *   rope-partial-denominator: partial rotary's frequencies over d_k where
 *     the R features turned make them;
 *   rope-position-offset: the queries turned at 0, 1, ... (a decode step
 *     at the wrong position), or one off;
 *   yarn-attention-factor-missing: YaRN's (or LongRoPE's) factor on cos and
 *     sin left out;
 *   softmax-sum-low-precision: a softmax row summed in the type itself (the
 *     low-precision reference with its sums in the type).
 */
#include "util/budget.h"
#include "util/msg.h"
#include "compare/compare.h"
#include "load/problem.h"
#include "run/run.h"

#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
	P_CAUSAL_ZERO, P_CAUSAL_NAN, P_CAUSAL_UNIFORM, P_GQA_REPEAT, P_WINDOW_WIDER, P_WINDOW_NARROWER,
	P_SINKS_MISSING, P_SINKS_KV_HEAD, P_SINKS_NEXT_HEAD, P_ROPE_DENOMINATOR, P_ROPE_FROM_ZERO,
	P_ROPE_ONE_BEFORE, P_ROPE_ONE_AFTER, P_YARN_FACTOR, P_SOFTMAX_SUM, P_COUNT
};

int port_mistake_count(void)
{
	return P_COUNT;
}

/* the type their numbers of the first step are in, or 0 */
static mha_precision their_type(const struct ctx *x)
{
	for (int i = 0; i < C_COUNT; i++)
		if (x->a->g[i].m.rank && lowp_of(x->a->g[i].type))
			return (mha_precision)lowp_of(x->a->g[i].type);
	return MHA_PRECISION_F64;
}

/* the lowest finite value of the type their numbers are in (finfo.min) */
static double lowest(const struct ctx *x)
{
	const mha_precision p = their_type(x);

	if (p == MHA_PRECISION_BF16)
		return -ldexp(2 - ldexp(1, -7), 127);
	if (p == MHA_PRECISION_FP16)
		return -65504.0;
	return x->f32 || x->tol.f32 ? -(double)3.4028234663852886e38 : -1.7976931348623157e308;
}

/* the causal rule inverted, as a boolean mask: query i sees exactly the keys it should not */
static unsigned char *anti_causal(const struct problem *p)
{
	const mha_dims *d = &p->d;
	const ptrdiff_t off = mha_causal_offset(d, &p->cfg, 0);
	unsigned char *allow = malloc(d->n_q * d->n_kv);

	for (size_t i = 0; allow && i < d->n_q; i++)
		for (size_t j = 0; j < d->n_kv; j++)
			allow[i * d->n_kv + j] = (ptrdiff_t)j > (ptrdiff_t)i + off;
	return allow;
}

/*
 * c's rows whose every key is masked, as PyTorch gives them: masked at the
 * lowest value (uniform) or -inf, softmax NaN or 1/n_kv, and each head's
 * output, the concatenation and the output from it.
 */
static void torch_blocked_rows(struct set *c, const struct problem *p, int uniform, double low)
{
	const mha_dims *d = &p->d;
	const size_t H = d->heads, nq = d->n_q, nkv = d->n_kv, dv = d->d_v, G = d->kv_heads;
	const size_t out_cols = c->m[C_OUTPUT].rank ? matrix_cols(&c->m[C_OUTPUT]) : 0;

	for (size_t i = 0; i < nq; i++) {
		int blocked = 1;

		for (size_t j = 0; j < nkv && blocked; j++)
			blocked = c->m[C_MASKED].v[i * nkv + j] == -INFINITY;
		if (!blocked)
			continue;
		for (size_t h = 0; h < H; h++) {
			double *mk = c->m[C_MASKED].v + (h * nq + i) * nkv;
			double *sm = c->m[C_SOFTMAX].v + (h * nq + i) * nkv;
			double *ho = c->m[C_HEAD_OUTPUT].v + (h * nq + i) * dv;
			double *cc = c->m[C_CONCAT].v + i * H * dv + h * dv;

			for (size_t j = 0; j < nkv; j++) {
				if (uniform)
					mk[j] = low;
				sm[j] = uniform ? 1.0 / (double)nkv : NAN;
			}
			for (size_t e = 0; e < dv; e++) {
				double acc = 0;

				/* the mean of the head's values: V's block of head h */
				for (size_t j = 0; uniform && j < nkv; j++)
					acc += c->m[C_V].v[j * G * dv + h / (H / G) * dv + e];
				ho[e] = cc[e] = uniform ? acc / (double)nkv : NAN;
			}
		}
		for (size_t o = 0; o < out_cols; o++) {
			double acc = 0;

			if (!p->weights.W_O) {
				c->m[C_OUTPUT].v[i * out_cols + o] = c->m[C_CONCAT].v[i * H * dv + o];
				continue;
			}
			for (size_t k = 0; k < H * dv; k++)
				acc += c->m[C_CONCAT].v[i * H * dv + k] * p->weights.W_O[k * d->d_out + o];
			c->m[C_OUTPUT].v[i * out_cols + o] = acc + (p->weights.b_O ? p->weights.b_O[o] : 0);
		}
		if (c->m[C_SOFTMAX_MEAN].rank)
			for (size_t j = 0; j < nkv; j++)
				c->m[C_SOFTMAX_MEAN].v[i * nkv + j] = uniform ? 1.0 / (double)nkv : NAN;
	}
}

/*
 * GQA repeated with torch's repeat: query head h reads key/value head h mod
 * G.  Computed as H key/value heads, block h of W_K and W_V (and their
 * biases) key/value head h mod G's; K, V and k_rot then cut back to G
 * blocks (the first G are the right ones).  0, 1 not possible, -1 said.
 */
static int repeat_set(struct set *c, const struct ctx *x)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	const size_t H = d->heads, G = d->kv_heads, dk = d->d_k, dv = d->d_v;
	struct problem q = *p;
	struct ctx y = *x;
	mha_weights w = p->weights;
	double *buf[4] = { NULL };
	const double *src[4] = { w.W_K, w.W_V, w.b_K, w.b_V };
	const size_t rows[4] = { d->d_k_in, d->d_v_in, 1, 1 }, width[4] = { dk, dv, dk, dv };
	int rc = -1;

	if (p->direct || !w.W_K || !w.W_V || G >= H || G < 2 || p->cfg.mla.on)
		return 1;
	for (int k = 0; k < 4; k++) {
		if (!src[k])
			continue;
		buf[k] = malloc(rows[k] * H * width[k] * sizeof(double));
		if (!buf[k]) {
			error("out of memory");
			goto done;
		}
		for (size_t r = 0; r < rows[k]; r++)
			for (size_t h = 0; h < H; h++)
				memcpy(buf[k] + (r * H + h) * width[k],
				       src[k] + (r * G + h % G) * width[k], width[k] * sizeof(double));
	}
	w.W_K = buf[0];
	w.W_V = buf[1];
	w.b_K = buf[2];
	w.b_V = buf[3];
	q.d.kv_heads = H;
	y.p = &q;
	rc = run_set(c, &y, &p->in, &w, &p->cfg, NULL, NULL);
	/* K, V, k_rot: the first G blocks of each row */
	for (int id = C_K; !rc && id <= C_K_ROT; id++) {
		matrix *m = &c->m[id];
		const size_t wd = id == C_V ? dv : dk;
		size_t n;

		if ((id != C_K && id != C_V && id != C_K_ROT) || !m->rank)
			continue;
		n = matrix_rows(m);
		for (size_t r = 0; r < n; r++)
			memmove(m->v + r * G * wd, m->v + r * H * wd, G * wd * sizeof(double));
		m->dim[m->rank - 1] = G * wd;
	}
done:
	for (int k = 0; k < 4; k++)
		free(buf[k]);
	return rc;
}

/* cos and sin tables (rows, R/2) whose frequencies are θ^(−2t/d_k), for
 * positions 0 to rows − 1: partial rotary's with the wrong denominator */
static int denominator_tables(double **cs, double **sn, size_t rows, const mha_rope *r, size_t dk)
{
	const size_t R = r->dim ? r->dim : dk;
	const double theta = r->theta == 0 ? 10000.0 : r->theta;

	*cs = malloc(rows * (R / 2) * sizeof(double));
	*sn = malloc(rows * (R / 2) * sizeof(double));
	if (!*cs || !*sn)
		return error("out of memory");
	for (size_t p = 0; p < rows; p++)
		for (size_t t = 0; t < R / 2; t++) {
			const double a = (double)p * pow(theta, -2.0 * (double)t / (double)dk);

			(*cs)[p * (R / 2) + t] = cos(a);
			(*sn)[p * (R / 2) + t] = sin(a);
		}
	return 0;
}

/* the largest position a run turns: queries and keys */
static size_t last_position(const struct problem *p)
{
	const mha_dims *d = &p->d;
	const ptrdiff_t off = mha_causal_offset(d, &p->cfg, 0);
	ptrdiff_t top = (ptrdiff_t)d->n_kv - 1;

	for (size_t i = 0; i < d->n_q; i++) {
		const ptrdiff_t at = p->cfg.rope.q_pos ? p->cfg.rope.q_pos[i] : off + (ptrdiff_t)i;

		top = at > top ? at : top;
	}
	for (size_t j = 0; p->cfg.rope.k_pos && j < d->n_kv; j++)
		top = p->cfg.rope.k_pos[j] > top ? p->cfg.rope.k_pos[j] : top;
	return (size_t)(top < 0 ? 0 : top);
}

int port_candidate(int k, const struct ctx *x, struct mistake *m, struct set *c)
{
	const struct problem *p = x->p;
	const mha_dims *d = &p->d;
	mha_config cfg = p->cfg;
	const size_t H = d->heads, G = d->kv_heads ? d->kv_heads : d->heads;
	void *own[2] = { NULL, NULL };
	double *sinks = NULL;
	int rc = 1;

	memset(m, 0, sizeof(*m));
	switch (k) {
	case P_CAUSAL_ZERO: case P_CAUSAL_NAN: case P_CAUSAL_UNIFORM: {
		/* the rows left without a key: zeros (as mha gives them), or as
		 * PyTorch fills them (its own mask alone: no other mask, no sinks) */
		const int torch = k != P_CAUSAL_ZERO, uniform = k == P_CAUSAL_UNIFORM;

		if (!cfg.causal || cfg.mask.allow || cfg.window.on || cfg.alibi.on || cfg.kv_lens ||
		    (torch && (cfg.mask.bias || cfg.sinks || p->direct)))
			return 1;
		if (!(own[0] = anti_causal(p)))
			return error("out of memory");
		cfg.causal = MHA_CAUSAL_NONE;
		cfg.mask.allow = own[0];
		cfg.mask.per_head = cfg.mask.per_batch = 0;
		m->id = "causal-inverted";
		snprintf(m->with, sizeof(m->with), "the causal mask inverted%s", !torch ? ""
			 : uniform ? ", blocked rows uniform" : ", blocked rows NaN");
		snprintf(m->why, sizeof(m->why), "your causal mask lets each query see the keys after "
			 "it and blocks those up to it (a boolean mask read the other way, or triu "
			 "where tril is meant)%s", !torch ? ""
			 : uniform ? "; the query left with no key gets equal weights, as PyTorch gives "
				     "for a mask of the type's lowest value (finfo.min)"
				   : "; the query left with no key gets a row of NaN, as PyTorch's "
				     "softmax gives for a row of -inf");
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		if (!rc && torch)
			torch_blocked_rows(c, p, uniform, lowest(x));
		break;
	}
	case P_GQA_REPEAT:
		m->id = "gqa-repeat";
		snprintf(m->with, sizeof(m->with), "key/value head h mod %zu for query head h", G);
		snprintf(m->why, sizeof(m->why), "you repeated the %zu key/value heads with repeat "
			 "(query head h reads head h mod %zu); each serves %zu query heads side by side, "
			 "as repeat_interleave (Hugging Face's repeat_kv) gives: head h reads h / %zu",
			 G, G, H / G, H / G);
		rc = repeat_set(c, x);
		break;
	case P_WINDOW_WIDER: case P_WINDOW_NARROWER: {
		const int wider = k == P_WINDOW_WIDER;

		if (!cfg.window.on || cfg.window.left < 0 || (!wider && cfg.window.left == 0))
			return 1;
		cfg.window.left += wider ? 1 : -1;
		m->id = "window-off-by-one";
		snprintf(m->option, sizeof(m->option), "--window %td,%td", cfg.window.left,
			 cfg.window.right);
		snprintf(m->with, sizeof(m->with), "%s", m->option);
		snprintf(m->why, sizeof(m->why), "your window lets each query see %td key%s before it; "
			 "this layer's sees %td (Hugging Face's sliding_window W counts the query's own "
			 "key: W - 1 before it; FlashAttention's window (W, 0) sees W before it)",
			 cfg.window.left, cfg.window.left == 1 ? "" : "s", p->cfg.window.left);
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	}
	case P_SINKS_MISSING:
		if (!cfg.sinks)
			return 1;
		cfg.sinks = NULL;
		m->id = "sinks-missing";
		snprintf(m->option, sizeof(m->option), "--sinks none");
		snprintf(m->with, sizeof(m->with), "no sinks");
		snprintf(m->why, sizeof(m->why), "you left out the attention sinks: each head's sink "
			 "logit joins its softmax's denominator (gpt-oss), and yours sums to 1 without it");
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	case P_SINKS_KV_HEAD: case P_SINKS_NEXT_HEAD: {
		const int kv = k == P_SINKS_KV_HEAD;

		if (!cfg.sinks || H < 2 || (kv && G == H))
			return 1;
		if (!(sinks = malloc(H * sizeof(double))))
			return error("out of memory");
		for (size_t h = 0; h < H; h++)
			sinks[h] = cfg.sinks[kv ? h / (H / G) : (h + 1) % H];
		cfg.sinks = sinks;
		m->id = "sinks-wrong-head";
		snprintf(m->with, sizeof(m->with), "each head's sink taken from %s",
			 kv ? "its key/value head's index" : "the next head");
		snprintf(m->why, sizeof(m->why), "you gave query head h the sink of %s; the sinks are "
			 "one per query head, in the order of the heads",
			 kv ? "head h / (H/G), its key/value head's number" : "head h + 1");
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	}
	case P_ROPE_DENOMINATOR: {
		const size_t R = cfg.rope.dim ? cfg.rope.dim : d->d_k, rows = last_position(p) + 1;
		double *cs, *sn;

		if (!cfg.rope.mode || R == d->d_k || cfg.rope.cos || cfg.rope.scaling.type ||
		    cfg.mla.on || rows > (SIZE_MAX / 2) / (R / 2 + 1) / sizeof(double))
			return 1;
		if (denominator_tables(&cs, &sn, rows, &cfg.rope, d->d_k)) {
			free(cs);
			free(sn);
			return -1;
		}
		own[0] = cs;
		own[1] = sn;
		cfg.rope.cos = cs;
		cfg.rope.sin = sn;
		cfg.rope.rows = rows;
		m->id = "rope-partial-denominator";
		snprintf(m->with, sizeof(m->with), "RoPE's frequencies theta^(-2i/%zu)", d->d_k);
		snprintf(m->why, sizeof(m->why), "you made partial rotary's frequencies over head_dim, "
			 "theta^(-2i/%zu); this layer turns the first %zu features and makes them over "
			 "those, theta^(-2i/%zu) (the denominator is the rotated dims, --rope-dim)",
			 d->d_k, R, R);
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	}
	case P_ROPE_FROM_ZERO: case P_ROPE_ONE_BEFORE: case P_ROPE_ONE_AFTER: {
		const ptrdiff_t off = mha_causal_offset(d, &p->cfg, 0);
		const ptrdiff_t shift = k == P_ROPE_ONE_BEFORE ? -1 : k == P_ROPE_ONE_AFTER ? 1 : 0;
		ptrdiff_t *pos;

		if (!cfg.rope.mode || cfg.rope.q_pos || cfg.mla.on || p->batch > 1 ||
		    (k == P_ROPE_FROM_ZERO && off == 0) || (shift < 0 && off == 0))
			return 1;
		if (!(pos = malloc(d->n_q * sizeof(*pos))))
			return error("out of memory");
		for (size_t i = 0; i < d->n_q; i++)
			pos[i] = (k == P_ROPE_FROM_ZERO ? 0 : off) + (ptrdiff_t)i + shift;
		own[0] = pos;
		cfg.rope.q_pos = pos;
		m->id = "rope-position-offset";
		if (k == P_ROPE_FROM_ZERO)
			snprintf(m->with, sizeof(m->with), "the queries turned from position 0");
		else
			snprintf(m->with, sizeof(m->with), "the queries turned one position %s",
				 shift < 0 ? "early" : "late");
		snprintf(m->why, sizeof(m->why), "you turned query i at position %s; it stands at "
			 "%td + i (after %td keys before it: a decode step's position is the cache's "
			 "length)", k == P_ROPE_FROM_ZERO ? "i" : shift < 0 ? "i + offset - 1"
							       : "i + offset + 1", off, off);
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	}
	case P_YARN_FACTOR:
		if ((cfg.rope.scaling.type != MHA_ROPE_SCALING_YARN &&
		     cfg.rope.scaling.type != MHA_ROPE_SCALING_LONGROPE) ||
		    mha_rope_attention_factor(&cfg.rope) == 1)
			return 1;
		/* the factor 1 given: none */
		cfg.rope.scaling.attention_factor = 1;
		cfg.rope.scaling.mscale = cfg.rope.scaling.mscale_all_dim = 0;
		m->id = "yarn-attention-factor-missing";
		snprintf(m->with, sizeof(m->with), "no attention factor on cos and sin");
		snprintf(m->why, sizeof(m->why), "you left out %s's attention factor, %.6g on cos and "
			 "sin (0.1*ln(factor) + 1 unless the config gives it)",
			 p->cfg.rope.scaling.type == MHA_ROPE_SCALING_YARN ? "YaRN" : "LongRoPE",
			 mha_rope_attention_factor(&p->cfg.rope));
		rc = run_set(c, x, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	case P_SOFTMAX_SUM: {
		const mha_precision t = their_type(x);
		struct ctx y = *x;

		if (!t || run_lowp_lacks(&cfg))
			return 1;
		cfg.precision = t;
		cfg.lowp_sum = MHA_LOWP_SUM_TYPE;
		y.grads = 0;
		m->id = "softmax-sum-low-precision";
		snprintf(m->with, sizeof(m->with), "each softmax row summed in %s",
			 t == MHA_PRECISION_FP16 ? "float16" : "bfloat16");
		snprintf(m->why, sizeof(m->why), "you summed each softmax row's exponentials in %s "
			 "(each addition rounded); PyTorch's softmax sums them in float32 and rounds "
			 "the weights once", t == MHA_PRECISION_FP16 ? "float16" : "bfloat16");
		rc = run_set(c, &y, &p->in, &p->weights, &cfg, NULL, NULL);
		break;
	}
	default:
		return 1;
	}
	free(own[0]);
	free(own[1]);
	free(sinks);
	return rc;
}

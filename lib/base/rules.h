/*
 * rules.h: the rules of the computation that both paths obey, written once.
 *
 * Which keys a query may see (the causal rule with its offset, the sliding
 * window, kv_len, the explicit mask, each per sequence of a batch:
 * mha_rule_seq), what the mask adds for the keys it sees (the bias,
 * ALiBi's slope·(j - p)), which key/value head a query head reads, and when a
 * number that came out infinite or NaN is an error.  The plain path
 * (mha.c) and the fast path (fast.c, kernel.c) call these and nothing
 * else for those decisions, so that they cannot disagree.  Inside the
 * library only: static inline, but for the recomputation of an overflowed
 * product (rules.c), which must be one compiled copy.
 *
 * The overflow rule: an error (MHA_ERR_RANGE) only when a value the run
 * produces or must hold is truly not finite.  Concretely:
 *   - Q, K, V, the concatenation and the output: every entry.  A product
 *     whose partial sums overflowed is recomputed rescaled (mha_dot) before
 *     it counts as infinite.
 *   - the scores, scaled, softcapped and masked values, and the mask
 *     entry (ALiBi's slope·(j - p) may overflow): only those of keys
 *     the query may see.  A masked-out key (mask -inf, past kv_len, after
 *     the causal diagonal) never counts, whatever its score, and whether or
 *     not the fast path skipped its block.
 *   - softmax and the head outputs: never; a convex combination of finite
 *     values is finite, so the paths must compute it without overflowing
 *     (mha_rescue_shift).
 */
#ifndef MHA_RULES_H
#define MHA_RULES_H

#include "mha.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* What decides which keys a query sees, taken once from dims and config. */
struct mha_rule {
	size_t n_q, n_kv, H, G;
	int causal;                 /* 0: no causal rule */
	ptrdiff_t offset;           /* causal: query i sees keys j <= i + offset */
	size_t kv_len;              /* keys j >= kv_len are masked (n_kv when unset) */
	int window;                 /* 0: no window rule */
	ptrdiff_t left, right;      /* window: i + offset - left <= j <= i + offset + right;
				       -1 unbounded */
	const unsigned char *allow; /* (n_q, n_kv) or (H, n_q, n_kv), or NULL */
	const double *bias;         /* the same, or NULL */
	int per_head;               /* allow and bias: one matrix per query head */
	const double *sinks;        /* (H) a logit per query head in the softmax's
				       denominator, or NULL */
	/* a batch: what differs between sequences (mha_rule_seq) */
	size_t B;                   /* sequences, at least 1 */
	const size_t *kv_lens;      /* (B) each sequence's key length (0: n_kv), or NULL */
	int bottom_right;           /* the causal offset follows the key length */
	size_t mask_stride;         /* elements from one sequence's mask to the next:
				       0 when every sequence shares one */
	int alibi;                  /* 0: no ALiBi */
	const double *slopes;       /* alibi: (H) a slope per query head, or NULL:
				       Press et al.'s (mha_rule_press_slope) */
};

/*
 * A caller's struct as this library declares it (mha.h, "Versions"): NULL,
 * or its size field the size of its type here.  Checked before any other
 * field of any argument is read or written.
 */
#define MHA_SIZED(p) (!(p) || (p)->size == sizeof(*(p)))

/*
 * A caller's struct at a public entry point (mha.h, "Versions"): this
 * header's size, or an older, smaller version's (a struct grows only at
 * its end, by whole size_t's), copied into local (full bytes) with the
 * fields it lacks zero (their defaults) and local's size set to full.  0,
 * or -1 for a size this library cannot read (larger than its own, not
 * whole size_t's, or not even the size field), nothing read past it.
 * NULL: 0, nothing copied.
 */
static inline int mha_take(const void *p, void *local, size_t full)
{
	size_t n;

	if (!p)
		return 0;
	memcpy(&n, p, sizeof(n));
	if (n > full || n < sizeof(size_t) || n % sizeof(size_t))
		return -1;
	memset(local, 0, full);
	memcpy(local, p, n);
	memcpy(local, &full, sizeof(full));
	return 0;
}

/* p, a pointer to a caller's struct, pointed at its copy local (NULL stays
 * NULL): 0, or -1 for a size mha_take refuses */
#define MHA_TAKE(p, local) (mha_take((p), &(local), sizeof(local)) ? -1 : \
			    ((p) = (p) ? &(local) : NULL, 0))

/* what the library wrote into local handed back to the caller's struct p
 * (taken by MHA_TAKE): the fields its version has, its size kept */
static inline void mha_give(void *p, const void *local)
{
	size_t n;

	if (!p)
		return;
	memcpy(&n, p, sizeof(n));
	memcpy((char *)p + sizeof(size_t), (const char *)local + sizeof(size_t),
	       n - sizeof(size_t));
}

static inline size_t mha_rule_batch(const mha_dims *d)
{
	return d->batch ? d->batch : 1;
}

static inline size_t mha_rule_kv_heads(const mha_dims *d)
{
	return d->kv_heads ? d->kv_heads : d->heads;
}

/* The key/value head query head h reads: H/G query heads share one. */
static inline size_t mha_rule_kv_head(size_t h, size_t H, size_t G)
{
	return h / (H / G);
}

/*
 * The causal rule as one number: query i sees key j when j <= i + offset.
 * Bottom-right lines the last query up with the last valid key.  Sizes are
 * far below PTRDIFF_MAX (mha_check saw them addressable).
 */
/* sequence b's key length: kv_lens[b], else kv_len, else n_kv (0 means n_kv) */
static inline size_t mha_rule_keys_of(const mha_dims *d, const mha_config *cfg, size_t b)
{
	if (cfg->kv_lens && cfg->kv_lens[b])
		return cfg->kv_lens[b];
	if (cfg->kv_lens)
		return d->n_kv;
	return cfg->kv_len ? cfg->kv_len : d->n_kv;
}

static inline ptrdiff_t mha_rule_offset_seq(const mha_dims *d, const mha_config *cfg, size_t b)
{
	const size_t keys = mha_rule_keys_of(d, cfg, b);

	switch (cfg->causal) {
	case MHA_CAUSAL_BOTTOM_RIGHT: return (ptrdiff_t)keys - (ptrdiff_t)d->n_q;
	case MHA_CAUSAL_OFFSET: return cfg->causal_offset;
	default: return 0;
	}
}

/* sequence 0's (the only one without a batch) */
static inline ptrdiff_t mha_rule_offset(const mha_dims *d, const mha_config *cfg)
{
	return mha_rule_offset_seq(d, cfg, 0);
}

static inline struct mha_rule mha_rule_of(const mha_dims *d, const mha_config *cfg)
{
	struct mha_rule r = {
		.n_q = d->n_q, .n_kv = d->n_kv, .H = d->heads, .G = mha_rule_kv_heads(d),
		.causal = cfg->causal != MHA_CAUSAL_NONE, .offset = mha_rule_offset(d, cfg),
		.kv_len = cfg->kv_len ? cfg->kv_len : d->n_kv,
		.allow = cfg->mask.allow, .bias = cfg->mask.bias, .per_head = cfg->mask.per_head,
		.window = cfg->window.on, .left = cfg->window.left, .right = cfg->window.right,
		.sinks = cfg->sinks,
		.B = mha_rule_batch(d), .kv_lens = cfg->kv_lens,
		.bottom_right = cfg->causal == MHA_CAUSAL_BOTTOM_RIGHT,
		.mask_stride = cfg->mask.per_batch
			? d->n_q * d->n_kv * (cfg->mask.per_head ? d->heads : 1) : 0,
		.alibi = cfg->alibi.on, .slopes = cfg->alibi.slopes,
	};

	if (r.kv_lens) {
		r.kv_len = mha_rule_keys_of(d, cfg, 0);
		if (r.bottom_right)
			r.offset = (ptrdiff_t)r.kv_len - (ptrdiff_t)r.n_q;
	}
	return r;
}

/*
 * The rule of sequence b of a batch, from the whole batch's (mha_rule_of):
 * its own key length (and with it the bottom-right offset) and its own
 * mask matrices.  Each sequence is then computed as if alone.
 */
static inline struct mha_rule mha_rule_seq(const struct mha_rule *all, size_t b)
{
	struct mha_rule r = *all;

	if (all->kv_lens) {
		r.kv_len = all->kv_lens[b] ? all->kv_lens[b] : all->n_kv;
		if (all->bottom_right)
			r.offset = (ptrdiff_t)r.kv_len - (ptrdiff_t)all->n_q;
	}
	if (all->allow)
		r.allow = all->allow + b * all->mask_stride;
	if (all->bias)
		r.bias = all->bias + b * all->mask_stride;
	r.B = 1;
	r.kv_lens = NULL;
	return r;
}

/* a + b, held at PTRDIFF_MIN / PTRDIFF_MAX instead of overflowing (offsets and windows are the caller's) */
static inline ptrdiff_t mha_rule_add(ptrdiff_t a, ptrdiff_t b)
{
	ptrdiff_t s;

	if (__builtin_add_overflow(a, b, &s))
		return b > 0 ? PTRDIFF_MAX : PTRDIFF_MIN;
	return s;
}

/* [0, kv_len) clamped: a key index, or kv_len for "past the last" */
static inline size_t mha_rule_clamp(const struct mha_rule *r, ptrdiff_t j)
{
	if (j <= 0)
		return 0;
	return (size_t)j < r->kv_len ? (size_t)j : r->kv_len;
}

/*
 * Query i may see keys [begin, end) by the causal rule, the window and
 * kv_len (the explicit mask may block more).  Both never decrease in i:
 * the fast path skips the key blocks before a block's first row's begin
 * and at and past its last row's end.
 */
static inline size_t mha_rule_keys_begin(const struct mha_rule *r, size_t i)
{
	if (!r->window || r->left < 0)
		return 0;
	/* p - left, p = i + offset */
	return mha_rule_clamp(r, mha_rule_add(mha_rule_add((ptrdiff_t)i, r->offset), -r->left));
}

static inline size_t mha_rule_keys_end(const struct mha_rule *r, size_t i)
{
	const ptrdiff_t p = mha_rule_add((ptrdiff_t)i, r->offset);
	size_t end = r->kv_len;

	if (r->causal)
		end = mha_rule_clamp(r, mha_rule_add(p, 1));
	if (r->window && r->right >= 0) {
		const size_t w = mha_rule_clamp(r, mha_rule_add(mha_rule_add(p, r->right), 1));

		end = w < end ? w : end;
	}
	return end;
}

/* The explicit mask for head h, query i, key j: -inf (not allowed), the bias, or 0. */
static inline double mha_rule_explicit(const struct mha_rule *r, size_t h, size_t i, size_t j)
{
	size_t at = i * r->n_kv + j;

	if (r->per_head)
		at += h * r->n_q * r->n_kv;
	if (r->allow && !r->allow[at])
		return -INFINITY;
	return r->bias ? r->bias[at] : 0.0;
}

/*
 * Press et al.'s ALiBi slope for query head h of H (BLOOM's
 * build_alibi_tensor): with n the largest power of two <= H, head h < n
 * has 2^(-8(h+1)/n); the H - n heads after them take every other slope of
 * the sequence for 2n heads, 2^(-8(2k+1)/(2n)), k = h - n.  The exponent
 * is exact (n is a power of two), so each slope is exp2 of it, rounded once.
 */
static inline double mha_rule_press_slope(size_t h, size_t H)
{
	size_t n = 1;

	while (n <= H / 2)
		n *= 2;
	if (h < n)
		return exp2(-8.0 * (double)(h + 1) / (double)n);
	return exp2(-8.0 * (double)(2 * (h - n) + 1) / (double)(2 * n));
}

/* ALiBi's slope for query head h (given, or Press et al.'s) */
static inline double mha_rule_slope(const struct mha_rule *r, size_t h)
{
	return r->slopes ? r->slopes[h] : mha_rule_press_slope(h, r->H);
}

/*
 * The query's position p = i + offset (as for the window), as a double:
 * ALiBi adds slope·(j - p).  Exact below 2^53.
 */
static inline double mha_rule_position(const struct mha_rule *r, size_t i)
{
	return (double)mha_rule_add((ptrdiff_t)i, r->offset);
}

/* ALiBi's term for head h, query i, key j: slope_h·(j - p) */
static inline double mha_rule_alibi(const struct mha_rule *r, size_t h, size_t i, size_t j)
{
	return mha_rule_slope(r, h) * ((double)j - mha_rule_position(r, i));
}

/* Whether query i of head h sees key j at all (causal, window, kv_len, the explicit mask). */
static inline int mha_rule_sees(const struct mha_rule *r, size_t h, size_t i, size_t j)
{
	return j >= mha_rule_keys_begin(r, i) && j < mha_rule_keys_end(r, i) &&
	       mha_rule_explicit(r, h, i, j) != -INFINITY;
}

/*
 * The whole mask entry (the mask stage): -inf where the query may not see
 * the key, else the bias plus ALiBi's term (the fast path adds the same
 * two numbers in the same order).
 */
static inline double mha_rule_mask(const struct mha_rule *r, size_t h, size_t i, size_t j)
{
	double m;

	if (j < mha_rule_keys_begin(r, i) || j >= mha_rule_keys_end(r, i))
		return -INFINITY;
	m = mha_rule_explicit(r, h, i, j);
	if (r->alibi && m != -INFINITY)
		m += mha_rule_alibi(r, h, i, j);
	return m;
}

/* masked = softcapped + mask; a masked-out key is -inf whatever its score (never NaN) */
static inline double mha_rule_masked(double softcapped, double mask)
{
	return mask == -INFINITY ? -INFINITY : softcapped + mask;
}

/*
 * The overflow rule for a per-key value v (score, scaled, softcapped, mask,
 * masked).  Whether the key is seen does not come from the mask entry: an
 * ALiBi term that overflowed to -inf is an error, not a blocked key.
 */
static inline int mha_rule_overflows(const struct mha_rule *r, size_t h, size_t i, size_t j,
				     double v)
{
	return !isfinite(v) && mha_rule_sees(r, h, i, j);
}

/*
 * Σ a[t·sa]·b[t·sb] + bias, n terms, for an entry of a product that came
 * out infinite or NaN: recomputed with both factors scaled by powers of two
 * (exact) so that no term and no partial sum can overflow, then scaled
 * back.  Infinite only when the sum truly is, to rounding.  Floats are
 * summed in double and rounded once.  In rules.c, compiled once, without
 * the kernels' fused multiply-adds: both paths get the very same number.
 */
double mha_dot_f64(const double *a, size_t sa, const double *b, size_t sb, size_t n, double bias);
double mha_dot_f32(const float *a, size_t sa, const float *b, size_t sb, size_t n, double bias);

/*
 * C (m, n) = A (m, k)·B (k, n) + bias, already computed: each entry that
 * is not finite is recomputed with mha_dot.  0 when every entry is now
 * finite, -1 when one truly overflows.  B NULL: C = A + bias, where an
 * infinity is a true one.  esize 8 (double) or 4 (float).
 */
int mha_finish_product(void *C, size_t m, size_t n, size_t ldc, const void *A, size_t lda,
		       const void *B, size_t ldb, const void *bias, size_t k, size_t esize);
/* the same with A's element (i, t) at A[i·a_row + t·a_k] and B's (t, j) at
 * B[j·b_col + t·b_k]: (lda, 1) and (1, ldb) as above, or a transpose in place */
int mha_finish_strided(void *C, size_t m, size_t n, size_t ldc, const void *A, size_t a_row,
		       size_t a_k, const void *B, size_t b_col, size_t b_k, const void *bias,
		       size_t k, size_t esize);

/*
 * Rotary embeddings (rope.c, mha.h's mha_rope), one compiled copy for both
 * paths.  mha_rope_check: the settings for heads of width d.
 * mha_rope_positions_ok: n rows at pos[i] (or pos0 + i) are in range.
 * mha_rope_turn: out (rows, heads·d) = x turned, esize 8 or 4 (out may be
 * x); MHA_ERR_RANGE when a result is not finite.
 */
mha_status mha_rope_check(const mha_rope *r, size_t d);
mha_status mha_rope_positions_ok(const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0, size_t n);
/* The same, saying what: the rule a setting breaks (MHA_FAULT_NONE: none),
 * and the first of the n rows out of range (n: none). */
mha_fault_kind mha_rope_fault(const mha_rope *r, size_t d);
size_t mha_rope_position_fault(const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0, size_t n);
mha_status mha_rope_turn(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			 size_t d, const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0);
/* mha_rope_turn's gradient: x (rows, heads·d) turned back, esize 8 or 4 (out may be x) */
void mha_rope_turn_back(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			size_t d, const mha_rope *r, const ptrdiff_t *pos, ptrdiff_t pos0);

/*
 * Q/K normalisation (norm.c, mha.h's mha_qk_norm), one compiled copy for
 * both paths.  mha_norm_fault: the settings for H query and G key/value
 * heads of width d (the first weight not finite at *index).
 * mha_norm_turn: out (rows, heads·d) = x normalised, x's first head being
 * head h0 (over_all: every head, h0 0), Q's weights or, k_side, K's; esize
 * 8 or 4, out may be x.  mha_norm_back: dx (rows, heads·d, every head) the
 * gradient of x from dy, the normalised rows' gradient; dw (the weights'
 * length, doubles) += the weights' gradient when dw and the weights are
 * there.  Both MHA_ERR_RANGE when a result is not finite.
 */
mha_fault_kind mha_norm_fault(const mha_qk_norm *n, size_t H, size_t G, size_t d, size_t *index);
mha_status mha_norm_turn(void *out, const void *x, size_t esize, size_t rows, size_t heads,
			 size_t d, size_t h0, const mha_qk_norm *n, int k_side);
mha_status mha_norm_back(void *dx, const void *dy, const void *x, size_t esize, size_t rows,
			 size_t heads, size_t d, const mha_qk_norm *n, int k_side, double *dw);

/*
 * A softmax-weighted sum of values that overflowed, though it is at most
 * the largest |v| (the weights sum to 1; unnormalised, to l <= n):
 * recomputed with the weights scaled by 2^-shift, then scaled back.  The
 * shift for values up to vmax over n keys, in a type whose largest finite
 * number is max: at least 1, enough that n·vmax·2^-shift stays below max/4.
 */
static inline int mha_rescue_shift(double vmax, size_t n, double max)
{
	int ev, en, em, e;

	(void)frexp(vmax > 0 ? vmax : 1, &ev);
	(void)frexp((double)n, &en);
	(void)frexp(max, &em);
	e = ev + en - em + 2;
	return e < 1 ? 1 : e;
}

/*
 * A rescued output entry scaled back: o·2^shift.  It is a convex combination
 * of finite values, so past the largest finite number only by rounding:
 * then the largest finite number, with o's sign.
 */
static inline double mha_rescue_back(double o, int shift, double max)
{
	o = ldexp(o, shift);
	return fabs(o) > max ? copysign(max, o) : o;
}

#endif

/*
 * check.c: a problem told apart before any arithmetic (mha.h): mha_check
 * and mha_check_fault (the dims, the settings, the mask's entries, the
 * rotary tables and positions, the norms' weights), and the numbers a
 * caller derives from a problem as the library does: ALiBi's slopes, the
 * output's columns, the scale, a sequence's causal offset.  The rules
 * themselves are rules.h's.
 */
#include "mha.h"
#include "kernels/kernel.h"
#include "base/rules.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* whether a (rows, cols) matrix of doubles fits in size_t bytes */
static int bytes_fit(size_t rows, size_t cols)
{
	size_t n;

	return mha_mul_fits(rows, cols, &n) && mha_mul_fits(n, sizeof(double), &n);
}

/* latent attention's settings (cfg->mla): the fault, *index the element
 * (a norm's weight), *st the status; MHA_FAULT_NONE when they hold */
static mha_fault_kind mla_fault(const mha_dims *d, const mha_config *cfg, size_t *index,
				 mha_status *st)
{
	const mha_mla *m = &cfg->mla;
	size_t t;

	*index = 0;
	*st = MHA_ERR_MLA;
	if (!m->kv_rank || !m->d_rope || m->d_rope >= d->d_k ||
	    (cfg->rope.mode != MHA_ROPE_NONE && m->d_rope % 2) ||
	    (cfg->rope.dim && cfg->rope.dim != m->d_rope) ||
	    mha_rule_kv_heads(d) != d->heads || d->d_v_in != d->d_k_in ||
	    cfg->norm.kind != MHA_NORM_NONE)
		return MHA_FAULT_MLA_SHAPE;
	if (!isfinite(m->eps) || m->eps < 0)
		return MHA_FAULT_MLA_EPS;
	/* every matrix the front makes or reads addressable */
	if (!mha_mul_fits(d->heads, d->d_k + d->d_v, &t) || !bytes_fit(d->d_q_in, m->q_rank) ||
	    !bytes_fit(m->q_rank, d->heads * d->d_k) || !bytes_fit(d->d_k_in, m->kv_rank + m->d_rope) ||
	    m->kv_rank > SIZE_MAX - m->d_rope || !bytes_fit(m->kv_rank, t) ||
	    !bytes_fit(d->n_q * mha_rule_batch(d), m->q_rank) ||
	    !bytes_fit(d->n_kv * mha_rule_batch(d), t) ||
	    !bytes_fit(d->n_kv * mha_rule_batch(d), m->kv_rank + m->d_rope) ||
	    !bytes_fit(d->heads, m->kv_rank + m->d_rope) ||
	    !bytes_fit(d->n_q * mha_rule_batch(d), d->heads * (m->kv_rank + m->d_rope)) ||
	    !bytes_fit(d->heads * m->kv_rank, d->d_out > d->heads * d->d_v ? d->d_out
				       : d->heads * d->d_v)) {
		*st = MHA_ERR_TOOBIG;
		return MHA_FAULT_MLA_SHAPE;
	}
	for (size_t i = 0; m->q_a_norm && i < m->q_rank; i++)
		if (!isfinite(m->q_a_norm[i])) {
			*index = i;
			return MHA_FAULT_MLA_Q_A_NORM;
		}
	for (size_t i = 0; m->kv_a_norm && i < m->kv_rank; i++)
		if (!isfinite(m->kv_a_norm[i])) {
			*index = i;
			return MHA_FAULT_MLA_KV_A_NORM;
		}
	*st = MHA_OK;
	return MHA_FAULT_NONE;
}

/* what mha_check_fault() says: the status, and the fault when asked */
static mha_status fault_at(mha_fault *f, mha_status st, mha_fault_kind kind, size_t index)
{
	if (f) {
		f->kind = kind;
		f->index = index;
	}
	return st;
}

/* the mask's entries: numbers or -inf (the boolean allow needs no check) */
static mha_status check_mask(const mha_dims *d, const mha_mask *m, mha_fault *f)
{
	size_t n;

	if (!m->bias)
		return MHA_OK;
	if (!mha_mul_fits(d->n_q, d->n_kv, &n) || (m->per_head && !mha_mul_fits(n, d->heads, &n)) ||
	    (m->per_batch && !mha_mul_fits(n, mha_rule_batch(d), &n)))
		return MHA_ERR_TOOBIG;
	for (size_t i = 0; i < n; i++)
		if (isnan(m->bias[i]) || m->bias[i] == INFINITY)
			return fault_at(f, MHA_ERR_MASK, MHA_FAULT_MASK_ENTRY, i);
	return MHA_OK;
}

/* the rotary settings, then each key's and query's position */
static mha_status check_rope(const mha_dims *d, const mha_config *cfg, mha_fault *f)
{
	mha_rope mla_rope = cfg->rope;
	const mha_rope *r = &cfg->rope;
	mha_fault_kind kind;

	/* latent attention turns only each head's last d_rope features */
	if (cfg->mla.on) {
		mla_rope.dim = cfg->mla.d_rope;
		r = &mla_rope;
	}
	kind = mha_rope_fault(r, d->d_k);
	size_t at;

	if (kind != MHA_FAULT_NONE)
		return fault_at(f, MHA_ERR_ROPE, kind, 0);
	at = mha_rope_position_fault(r, r->k_pos, 0, d->n_kv);
	if (at < d->n_kv) {
		if (f)
			f->position = r->k_pos ? r->k_pos[at] : (ptrdiff_t)at;
		return fault_at(f, MHA_ERR_ROPE, MHA_FAULT_ROPE_KEY_POSITION, at);
	}
	/* each sequence's queries from its own causal offset (its key length) */
	for (size_t b = 0; b < (cfg->kv_lens ? mha_rule_batch(d) : 1); b++) {
		const ptrdiff_t pos0 = mha_rule_offset_seq(d, cfg, b);

		at = mha_rope_position_fault(r, r->q_pos, pos0, d->n_q);
		if (at < d->n_q) {
			if (f) {
				f->sequence = b;
				f->position = r->q_pos ? r->q_pos[at] : mha_rule_add(pos0, (ptrdiff_t)at);
			}
			return fault_at(f, MHA_ERR_ROPE, MHA_FAULT_ROPE_QUERY_POSITION, at);
		}
	}
	return MHA_OK;
}

mha_status mha_check(const mha_dims *d, const mha_config *cfg)
{
	return mha_check_fault(d, cfg, NULL);
}

/* mha_check_fault on structs of this library's version */
static mha_status check_fault(const mha_dims *d, const mha_config *cfg, mha_fault *f);

mha_status mha_check_fault(const mha_dims *d, const mha_config *cfg, mha_fault *f)
{
	mha_dims d_;
	mha_config c_;
	mha_fault f_, *const caller = f;
	mha_status st;

	/* a fault of a size not this library's or older is neither read nor written */
	if (MHA_TAKE(f, f_))
		return MHA_ERR_VERSION;
	if (f)
		*f = (mha_fault){ .size = sizeof(*f), .kind = MHA_FAULT_NONE };
	if (!d)
		st = MHA_ERR_NULL;
	else if (MHA_TAKE(d, d_) || MHA_TAKE(cfg, c_))
		st = MHA_ERR_VERSION;
	else
		st = check_fault(d, cfg, f);
	mha_give(caller, &f_);
	return st;
}

static mha_status check_fault(const mha_dims *d, const mha_config *cfg, mha_fault *f)
{
	size_t g, hk, hv, gk, gv, nq, nkv;

	if (!d->n_q || !d->n_kv || !d->d_q_in || !d->d_k_in || !d->d_v_in ||
	    !d->d_k || !d->d_v)
		return MHA_ERR_DIM;
	if (!d->heads)
		return MHA_ERR_HEADS;
	g = mha_rule_kv_heads(d);
	if (g > d->heads || d->heads % g)
		return MHA_ERR_HEADS;
	/* every matrix the computation reads or builds must be addressable */
	/* a batch: all sequences' rows, one after another */
	if (!mha_mul_fits(d->heads, d->d_k, &hk) || !mha_mul_fits(d->heads, d->d_v, &hv) ||
	    !mha_mul_fits(g, d->d_k, &gk) || !mha_mul_fits(g, d->d_v, &gv) ||
	    !mha_mul_fits(mha_rule_batch(d), d->n_q, &nq) || !mha_mul_fits(mha_rule_batch(d), d->n_kv, &nkv) ||
	    !bytes_fit(nq, d->d_q_in) || !bytes_fit(nkv, d->d_k_in) ||
	    !bytes_fit(nkv, d->d_v_in) || !bytes_fit(nq, hk) ||
	    !bytes_fit(nkv, gk) || !bytes_fit(nkv, gv) ||
	    !bytes_fit(nq, hv) || !bytes_fit(nq, d->n_kv) ||
	    !bytes_fit(nq, d->d_out) || !bytes_fit(d->d_q_in, hk) ||
	    !bytes_fit(d->d_k_in, gk) || !bytes_fit(d->d_v_in, gv) || !bytes_fit(hv, d->d_out))
		return MHA_ERR_TOOBIG;
	if (!cfg)
		return MHA_OK;
	if (cfg->precision > MHA_PRECISION_FP16 || cfg->lowp_scale > MHA_LOWP_SCALE_DIVIDED ||
	    cfg->lowp_sum > MHA_LOWP_SUM_TYPE ||
	    (cfg->precision == MHA_PRECISION_F64 && (cfg->lowp_scale || cfg->lowp_sum)))
		return MHA_ERR_PRECISION;
	if (cfg->scale_mode == MHA_SCALE_VALUE && !isfinite(cfg->scale))
		return MHA_ERR_SCALE;
	if ((unsigned)cfg->scale_mode > MHA_SCALE_VALUE)
		return MHA_ERR_SCALE;
	if (!isfinite(cfg->softcap) || cfg->softcap < 0)
		return MHA_ERR_SOFTCAP;
	if (cfg->kv_len > d->n_kv)
		return fault_at(f, MHA_ERR_KV_LEN, MHA_FAULT_KV_LEN, 0);
	if (cfg->kv_lens)
		for (size_t b = 0; b < mha_rule_batch(d); b++)
			if (cfg->kv_lens[b] > d->n_kv)
				return fault_at(f, MHA_ERR_KV_LEN, MHA_FAULT_KV_LEN, b);
	if ((unsigned)cfg->causal > MHA_CAUSAL_OFFSET)
		return MHA_ERR_DIM;
	if (cfg->window.on && (cfg->window.left < -1 || cfg->window.right < -1))
		return MHA_ERR_WINDOW;
	if (cfg->sinks)
		for (size_t h = 0; h < d->heads; h++)
			if (!isfinite(cfg->sinks[h]))
				return fault_at(f, MHA_ERR_SINK, MHA_FAULT_SINK, h);
	if (cfg->alibi.on && cfg->alibi.slopes)
		for (size_t h = 0; h < d->heads; h++)
			if (!isfinite(cfg->alibi.slopes[h]))
				return fault_at(f, MHA_ERR_ALIBI, MHA_FAULT_ALIBI_SLOPE, h);
	if (cfg->mla.on) {
		size_t at;
		mha_status st;
		const mha_fault_kind mk = mla_fault(d, cfg, &at, &st);

		if (mk != MHA_FAULT_NONE)
			return fault_at(f, st, mk, at);
	}
	{
		const mha_status st = check_rope(d, cfg, f);
		size_t at;
		const mha_fault_kind nk = mha_norm_fault(&cfg->norm, d->heads, g, d->d_k, &at);

		if (st != MHA_OK)
			return st;
		if (nk != MHA_FAULT_NONE)
			return fault_at(f, MHA_ERR_NORM, nk, at);
	}
	return check_mask(d, &cfg->mask, f);
}

mha_status mha_alibi_slopes(double *out, size_t H)
{
	if (!out)
		return MHA_ERR_NULL;
	if (!H)
		return MHA_ERR_HEADS;
	for (size_t h = 0; h < H; h++)
		out[h] = mha_rule_press_slope(h, H);
	return MHA_OK;
}

size_t mha_output_cols(const mha_dims *d, int has_wo)
{
	mha_dims d_;

	if (!d || MHA_TAKE(d, d_))
		return 0;
	return has_wo ? d->d_out : d->heads * d->d_v;
}

double mha_scale_of(const mha_dims *d, const mha_config *cfg)
{
	mha_scale_mode mode;
	mha_dims d_;
	mha_config c_;

	if (!d || MHA_TAKE(d, d_) || MHA_TAKE(cfg, c_))
		return NAN;
	mode = cfg ? cfg->scale_mode : MHA_SCALE_DK;
	switch (mode) {
	case MHA_SCALE_DK: return 1.0 / sqrt((double)d->d_k);
	case MHA_SCALE_DMODEL: return 1.0 / sqrt((double)d->d_q_in);
	case MHA_SCALE_SEQLEN: return 1.0 / sqrt((double)d->n_kv);
	case MHA_SCALE_NONE: return 1.0;
	case MHA_SCALE_VALUE: return cfg->scale;
	}
	return NAN;
}

ptrdiff_t mha_causal_offset(const mha_dims *d, const mha_config *cfg, size_t b)
{
	mha_dims d_;
	mha_config c_;

	if (!d || !cfg || MHA_TAKE(d, d_) || MHA_TAKE(cfg, c_) || cfg->causal == MHA_CAUSAL_NONE ||
	    b >= mha_rule_batch(d))
		return 0;
	return mha_rule_offset_seq(d, cfg, b);
}

/*
 * api.c: the public entry points of mha.h that pick what computes: latent
 * attention (mla.c, mla_back.c) when cfg->mla.on, else the core (core.h);
 * each checks what it reads to choose (the pointers, the structs' sizes)
 * as the one it hands over to would, before reading cfg.  And the names:
 * the version, the statuses, the stages.
 */
/* the float32 functions told how far they have come (mha.h's experimental part) */
#define MHA_EXPERIMENTAL
#include "mha.h"
#include "core/core.h"
#include "latent/mla.h"
#include "base/rules.h"

#include <stdint.h>

/* every stage has its bit of an observer's stages (MHA_STAGE_SET); the older
 * 32-bit wanted holds the first 32 of each list */
_Static_assert(MHA_STAGE_COUNT <= 8 * sizeof(mha_stages), "a forward stage past the set's bits");
_Static_assert(MHA_GRAD_COUNT <= 8 * sizeof(mha_stages), "a gradient stage past the set's bits");
_Static_assert(sizeof(mha_stages) == 8, "mha_stages holds 64 stages");

/* an observer's stages: its own set, or (a program of 0.7.0 or before, or
 * one that sets only wanted) wanted's */
#define STAGES_OF(o) ((o)->stages ? (o)->stages : (mha_stages)(o)->wanted)

const char *mha_version(void)
{
	return MHA_VERSION_STRING;
}

unsigned mha_version_number(void)
{
	return MHA_VERSION_NUMBER;
}

const char *mha_strerror(mha_status status)
{
	switch (status) {
	case MHA_OK: return "success";
	case MHA_ERR_NULL: return "a required input is missing (NULL pointer)";
	case MHA_ERR_DIM: return "a dimension is zero";
	case MHA_ERR_HEADS: return "the number of heads is zero, or the key/value heads do not divide the query heads";
	case MHA_ERR_SHAPE: return "an input without a projection weight does not have the width the heads need";
	case MHA_ERR_SCALE: return "the scale is not a finite number";
	case MHA_ERR_SOFTCAP: return "the softcap is negative or not finite";
	case MHA_ERR_MASK: return "a mask entry is NaN or +inf (only numbers and -inf may be added)";
	case MHA_ERR_RANGE: return "an intermediate result overflowed (infinity or NaN)";
	case MHA_ERR_NOMEM: return "out of memory";
	case MHA_ERR_TOOBIG: return "the sizes are too large to address";
	case MHA_ERR_OBSERVER: return "stopped by the observer";
	case MHA_ERR_STOPPED: return "stopped on request";
	case MHA_ERR_PRECISION: return "the low-precision reference does not compute this "
				       "(ALiBi, a q/k norm, latent attention, RoPE scaling, float32, "
				       "the backward) or knows no such precision";
	case MHA_ERR_KV_LEN: return "the key length (kv_len) is larger than the number of keys";
	case MHA_ERR_WINDOW: return "a window side is below -1 (-1: unbounded; 0 and up: that many keys)";
	case MHA_ERR_SINK: return "a sink logit is not a finite number";
	case MHA_ERR_ALIBI: return "an ALiBi slope is not a finite number";
	case MHA_ERR_ROPE: return "a rotary embedding setting is out of range (mode, theta, an even dim up to d_k, both tables, a position)";
	case MHA_ERR_VERSION: return "a struct's size is not the library's: the program was built against another version of mha.h";
	case MHA_ERR_NORM: return "a q/k norm setting is out of range (its kind, an eps that is finite and at least 0, finite weights)";
	case MHA_ERR_MLA: return "a latent attention setting is out of range or a weight it needs is missing (ranks, rope dim, eps, norm weights, W_QA, W_KVA, W_KVB)";
	}
	return "unknown status";
}

#define STAGE_NAME(id, name) [MHA_STAGE_##id] = name,
static const char *const stage_names[MHA_STAGE_COUNT] = { MHA_STAGE_LIST(STAGE_NAME) };

const char *mha_stage_name(mha_stage stage)
{
	if ((unsigned)stage >= MHA_STAGE_COUNT)
		return "unknown";
	return stage_names[stage];
}

/* ---- forward ---------------------------------------------------------------- */

/*
 * Each entry point takes the caller's structs (base/rules.h's MHA_TAKE: this
 * header's or an older, smaller version's, refused with MHA_ERR_VERSION
 * before anything is read past them or written), computes on its copies,
 * and hands the report back in the caller's version.
 */

mha_status mha_forward(double *out, const mha_dims *d, const mha_inputs *in,
		       const mha_weights *w, const mha_config *cfg,
		       const mha_observer *obs, mha_report *rep)
{
	static const mha_weights no_weights = MHA_INIT(mha_weights);
	mha_dims d_;
	mha_inputs in_;
	mha_weights w_;
	mha_config c_;
	mha_observer o_;
	mha_report r_, *const caller = rep;
	mha_status st;

	if (!d || !in)
		return MHA_ERR_NULL;
	if (MHA_TAKE(d, d_) || MHA_TAKE(in, in_) || MHA_TAKE(w, w_) || MHA_TAKE(cfg, c_) ||
	    MHA_TAKE(obs, o_) || MHA_TAKE(rep, r_))
		return MHA_ERR_VERSION;
	if (obs)
		o_.stages = STAGES_OF(&o_);
	if (cfg && cfg->mla.on && cfg->precision) {
		st = MHA_ERR_PRECISION; /* the low-precision reference has no latent attention */
	} else if (cfg && cfg->mla.on) {
		const struct mla_io io = MHA_MLA_IO(sizeof(double), in, w ? w : &no_weights);

		st = mha_mla_forward(out, &io, d, cfg, obs, rep);
	} else {
		st = mha_core_forward(out, d, in, w, cfg, obs, rep);
	}
	mha_give(caller, &r_);
	return st;
}

mha_status mha_forward_f32(float *out, const mha_dims *d, const mha_inputs_f32 *in,
			   const mha_weights_f32 *w, const mha_config *cfg, mha_report *rep)
{
	return mha_forward_f32_observed(out, d, in, w, cfg, NULL, rep);
}

mha_status mha_forward_f32_observed(float *out, const mha_dims *d, const mha_inputs_f32 *in,
				    const mha_weights_f32 *w, const mha_config *cfg,
				    const mha_observer *obs, mha_report *rep)
{
	static const mha_weights_f32 no_weights = MHA_INIT(mha_weights_f32);
	mha_observer told = MHA_INIT(mha_observer), o_;
	mha_dims d_;
	mha_inputs_f32 in_;
	mha_weights_f32 w_;
	mha_config c_;
	mha_report r_, *const caller = rep;
	mha_status st;

	if (!d || !in)
		return MHA_ERR_NULL;
	if (MHA_TAKE(d, d_) || MHA_TAKE(in, in_) || MHA_TAKE(w, w_) || MHA_TAKE(cfg, c_) ||
	    MHA_TAKE(obs, o_) || MHA_TAKE(rep, r_))
		return MHA_ERR_VERSION;
	/* float32 keeps no intermediates: of obs, its progress alone */
	if (obs) {
		told.progress = obs->progress;
		told.progress_ctx = obs->progress_ctx;
		told.stop = obs->stop;
		told.stop_ctx = obs->stop_ctx;
	}
	if (cfg && cfg->precision)
		return MHA_ERR_PRECISION; /* the low-precision reference is float64's */
	if (cfg && cfg->mla.on) {
		const struct mla_io io = MHA_MLA_IO(sizeof(float), in, w ? w : &no_weights);

		st = mha_mla_forward(out, &io, d, cfg, told.progress || told.stop ? &told : NULL, rep);
	} else {
		st = mha_core_forward_f32(out, d, in, w, cfg, &told, rep);
	}
	mha_give(caller, &r_);
	return st;
}

size_t mha_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted, int f32)
{
	return mha_memory_stages(d, cfg, wanted, f32);
}

size_t mha_memory_stages(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32)
{
	mha_dims d_;
	mha_config c_;

	if (MHA_TAKE(d, d_) || MHA_TAKE(cfg, c_) || !d || mha_check(d, cfg) != MHA_OK)
		return SIZE_MAX;
	if (cfg && cfg->mla.on)
		return mha_mla_memory(d, cfg, wanted, f32);
	return mha_core_memory(d, cfg, wanted, f32);
}

/* ---- backward --------------------------------------------------------------- */

/* latent attention's gradients of g, either element type's */
#define MLA_GRADS(g) { .dxq = (g)->dxq, .dxk = (g)->dxk, .dW_QA = (g)->dW_QA, \
		       .dW_Q = (g)->dW_Q, .dW_KVA = (g)->dW_KVA, .dW_KVB = (g)->dW_KVB, \
		       .dW_O = (g)->dW_O, .db_O = (g)->db_O, .dsinks = (g)->dsinks, \
		       .dq_a_norm = (g)->dq_a_norm, .dkv_a_norm = (g)->dkv_a_norm }

mha_status mha_backward(const mha_grads *g, const double *dout, const mha_dims *d,
			const mha_inputs *in, const mha_weights *w, const mha_config *cfg,
			const mha_grad_observer *obs, mha_report *rep)
{
	static const mha_weights no_weights = MHA_INIT(mha_weights);
	mha_grads g_;
	mha_dims d_;
	mha_inputs in_;
	mha_weights w_;
	mha_config c_;
	mha_grad_observer o_;
	mha_report r_, *const caller = rep;
	mha_status st;

	if (!d || !in || !g)
		return MHA_ERR_NULL;
	if (MHA_TAKE(g, g_) || MHA_TAKE(d, d_) || MHA_TAKE(in, in_) || MHA_TAKE(w, w_) ||
	    MHA_TAKE(cfg, c_) || MHA_TAKE(obs, o_) || MHA_TAKE(rep, r_))
		return MHA_ERR_VERSION;
	if (obs)
		o_.stages = STAGES_OF(&o_);
	if (cfg && cfg->precision) {
		st = MHA_ERR_PRECISION; /* the low-precision reference is a forward alone */
	} else if (cfg && cfg->mla.on) {
		const struct mla_io io = MHA_MLA_IO(sizeof(double), in, w ? w : &no_weights);
		const struct mla_grads mg = MLA_GRADS(g);

		st = mha_mla_backward(&mg, dout, &io, d, cfg, obs, rep);
	} else {
		st = mha_bw64_core(g, dout, d, in, w, cfg, obs, rep);
	}
	mha_give(caller, &r_);
	return st;
}

mha_status mha_backward_f32(const mha_grads_f32 *g, const float *dout, const mha_dims *d,
			    const mha_inputs_f32 *in, const mha_weights_f32 *w,
			    const mha_config *cfg, mha_report *rep)
{
	return mha_backward_f32_observed(g, dout, d, in, w, cfg, NULL, rep);
}

mha_status mha_backward_f32_observed(const mha_grads_f32 *g, const float *dout,
				     const mha_dims *d, const mha_inputs_f32 *in,
				     const mha_weights_f32 *w, const mha_config *cfg,
				     const mha_grad_observer *obs, mha_report *rep)
{
	static const mha_weights_f32 no_weights = MHA_INIT(mha_weights_f32);
	static const mha_config defaults = MHA_INIT(mha_config);
	mha_grad_observer told = MHA_INIT(mha_grad_observer), o_;
	const mha_grad_observer *tell;
	mha_grads_f32 g_;
	mha_dims d_;
	mha_inputs_f32 in_;
	mha_weights_f32 w_;
	mha_config c_, fast;
	mha_report r_, *const caller = rep;
	mha_status st;

	if (MHA_TAKE(g, g_) || MHA_TAKE(d, d_) || MHA_TAKE(in, in_) || MHA_TAKE(w, w_) ||
	    MHA_TAKE(cfg, c_) || MHA_TAKE(obs, o_) || MHA_TAKE(rep, r_))
		return MHA_ERR_VERSION;
	fast = cfg ? *cfg : defaults;
	if (fast.precision)
		return MHA_ERR_PRECISION; /* a forward alone */
	/* the fast path whatever cfg->exact says, as mha_forward_f32 */
	fast.exact = 0;
	/* float32 keeps no intermediates: of obs, its progress alone */
	if (obs) {
		told.progress = obs->progress;
		told.progress_ctx = obs->progress_ctx;
		told.stop = obs->stop;
		told.stop_ctx = obs->stop_ctx;
	}
	tell = told.progress || told.stop ? &told : NULL;
	if (fast.mla.on) {
		if (!d || !in || !g) {
			st = MHA_ERR_NULL;
		} else {
			const struct mla_io io = MHA_MLA_IO(sizeof(float), in, w ? w : &no_weights);
			const struct mla_grads mg = MLA_GRADS(g);

			st = mha_mla_backward(&mg, dout, &io, d, &fast, tell, rep);
		}
	} else {
		st = mha_bw32_core(g, dout, d, in, w, &fast, tell, rep);
	}
	mha_give(caller, &r_);
	return st;
}

size_t mha_backward_memory(const mha_dims *d, const mha_config *cfg, unsigned wanted)
{
	return mha_backward_memory_stages(d, cfg, wanted);
}

size_t mha_backward_memory_stages(const mha_dims *d, const mha_config *cfg, mha_stages wanted)
{
	mha_dims d_;
	mha_config c_;

	if (MHA_TAKE(d, d_) || MHA_TAKE(cfg, c_) || !d || mha_check(d, cfg) != MHA_OK)
		return SIZE_MAX;
	if (cfg && cfg->mla.on)
		return mha_mla_backward_memory(d, cfg, wanted);
	return mha_core_backward_memory(d, cfg, wanted);
}

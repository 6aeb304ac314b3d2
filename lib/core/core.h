/*
 * core.h: attention without latent attention, forward and backward, in
 * float64 and float32 (mha.c, backward.c compiled twice): what the public
 * entry points (api.c) and latent attention (mla.c, mla_back.c, which runs
 * its assembled heads through them) call.  Inside the library only.  Each
 * takes the arguments of the public function of its name and checks them
 * as that does; cfg->mla.on is not looked at.
 */
#ifndef MHA_CORE_H
#define MHA_CORE_H

#include "mha.h"

mha_status mha_core_forward(double *out, const mha_dims *d, const mha_inputs *in,
			    const mha_weights *w, const mha_config *cfg, const mha_observer *obs,
			    mha_report *rep);
/* of obs, progress alone (float32 hands over no stages) */
mha_status mha_core_forward_f32(float *out, const mha_dims *d, const mha_inputs_f32 *in,
				const mha_weights_f32 *w, const mha_config *cfg,
				const mha_observer *obs, mha_report *rep);
size_t mha_core_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32);

/* backward.c's BW(core), once per element type: obs as mha_backward's (the
 * float32 one's progress alone) */
mha_status mha_bw64_core(const mha_grads *g, const double *dout, const mha_dims *d,
			 const mha_inputs *in, const mha_weights *w, const mha_config *cfg,
			 const mha_grad_observer *obs, mha_report *rep);
mha_status mha_bw32_core(const mha_grads_f32 *g, const float *dout, const mha_dims *d,
			 const mha_inputs_f32 *in, const mha_weights_f32 *w, const mha_config *cfg,
			 const mha_grad_observer *obs, mha_report *rep);
size_t mha_core_backward_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted);

#endif

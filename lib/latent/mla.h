/*
 * mla.h: multi-head latent attention (mha.h's mha_mla), inside the library
 * only.  mla.c computes the latents, the two parts of each head's query
 * and key and the values, then hands them to the attention as directly
 * given Q, K and V (identity projections): every path and option of the
 * attention serves MLA unchanged.  The entry points below are called by
 * mha_forward, mha_forward_f32, mha_backward and mha_backward_f32 when
 * cfg->mla.on, after their structs' sizes are checked.
 */
#ifndef MHA_MLA_H
#define MHA_MLA_H

#include "mha.h"

#include <stddef.h>

/* One run's arrays, of either element type (esize 8: double, 4: float). */
struct mla_io {
	size_t esize;
	const void *xq, *xk;
	const void *W_QA, *W_Q, *W_KVA, *W_KVB, *W_O, *b_O;
	const void *W_K, *W_V, *b_Q, *b_K, *b_V; /* must be NULL */
};

/* the arrays of a call's inputs in and weights w (mha_inputs and mha_weights,
 * or their _f32), elements of esize bytes */
#define MHA_MLA_IO(es, in, w) { .esize = (es), .xq = (in)->xq, .xk = (in)->xk, \
	.W_QA = (w)->W_QA, .W_Q = (w)->W_Q, .W_KVA = (w)->W_KVA, .W_KVB = (w)->W_KVB, \
	.W_O = (w)->W_O, .b_O = (w)->b_O, .W_K = (w)->W_K, .W_V = (w)->W_V, .b_Q = (w)->b_Q, \
	.b_K = (w)->b_K, .b_V = (w)->b_V }

/* Where the backward writes, of the same element type; NULL: not wanted. */
struct mla_grads {
	void *dxq, *dxk, *dW_QA, *dW_Q, *dW_KVA, *dW_KVB, *dW_O, *db_O, *dsinks, *dq_a_norm,
		*dkv_a_norm;
};

mha_status mha_mla_forward(void *out, const struct mla_io *io, const mha_dims *d,
			   const mha_config *cfg, const mha_observer *obs, mha_report *rep);

mha_status mha_mla_backward(const struct mla_grads *g, const void *dout, const struct mla_io *io,
			    const mha_dims *d, const mha_config *cfg,
			    const mha_grad_observer *obs, mha_report *rep);

/* mha_memory's and mha_backward_memory's answers with cfg->mla.on */
size_t mha_mla_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted, int f32);
size_t mha_mla_backward_memory(const mha_dims *d, const mha_config *cfg, mha_stages wanted);

/* ---- one run's state, shared by mla.c (the front, the forward, the memory)
 * and mla_back.c (the backward) ---- */

struct mha_kernels;

/* the sizes of one run */
struct mla_shape {
	size_t B, N, M;     /* sequences; query rows B·n_q; key rows B·n_kv */
	size_t H, dk, dv, dn, dr, qr, kr;
	size_t hk, hv, hr, hn, kvb; /* H·d_k, H·d_v, H·d_rope, H·d_nope, H·(d_nope + d_v) */
	size_t ka;          /* the absorbed form's key width: kv_rank + d_rope */
	size_t dout;        /* the output's columns in the absorbed form's W_O' */
	int absorbed, turned;
};


/*
 * Every buffer a run allocates, by name; one plan says which and their
 * shapes, for the run and for mha_memory alike.  The forward's come first;
 * the backward's from DQA on.
 */
enum buf {
	CQ, CQN, Q0, QPE, QPER, CKV, CKR, CKVN, KPE, KPER, KVB, QN, KN, QA, KA, VA, WOA, ROW,
	DQA, DKA, DVA, DQPE, DCQN, DCQ, DKPE, DKVB, DCKVN, DCKR, DCKV, NBUF
};

struct mla_plan {
	size_t rows[NBUF], cols[NBUF];
};


struct mla_run {
	struct mla_shape s;
	struct mla_plan p;
	const struct mla_io *io;
	const mha_dims *d;
	const mha_config *cfg;
	const struct mha_kernels *k;
	int threads;
	size_t e;            /* the element's size */
	mha_rope rope;       /* cfg->rope, R = d_rope */
	mha_qk_norm qnorm, kvnorm; /* the two RMSNorms as norm.c takes them */
	void *b[NBUF];
};

/* the plan's buffers allocated for a run of io on d, cfg; the backward's too */
mha_status mha_mla_run_init(struct mla_run *r, const struct mla_io *io, const mha_dims *d,
			    const mha_config *cfg, mha_stages wanted, int backward);
void mha_mla_free_all(struct mla_run *r);
/* element (i, j) of a matrix with rows of ld elements */
void *mha_mla_at(const struct mla_run *r, const void *m, size_t i, size_t ld, size_t j);
/*
 * C (m, n), rows of ldc = A (m, k)·B (k, n) on the kernels; ta: A given as
 * (k, m) rows of lda; tb: B given as (n, k) rows of ldb.  An entry that
 * overflowed on the way is summed again, rescaled (rules.h); MHA_ERR_RANGE
 * if it truly does.
 */
mha_status mha_mla_product(const struct mla_run *r, void *C, size_t ldc, const void *A,
			   size_t lda, int ta, const void *B, size_t ldb, int tb, size_t m,
			   size_t n, size_t k);
/* dst (rows, heads·w) = the w columns from off of each head's block (hstride
 * apart) of src (rows, ld); put: the other way round */
void mha_mla_take(const struct mla_run *r, void *dst, const void *src, size_t rows, size_t ld,
		  size_t heads, size_t hstride, size_t off, size_t w);
void mha_mla_put(const struct mla_run *r, void *dst, size_t ld, size_t heads, size_t hstride,
		 size_t off, const void *src, size_t rows, size_t w);
/* the rotation's gradient: m (B·n, heads·d_rope) turned back in place */
void mha_mla_turn_back(const struct mla_run *r, void *m, size_t n, size_t heads, int keys);
/* the latents, the parts, and Q, K, V (or the absorbed form's) assembled */
mha_status mha_mla_front(struct mla_run *r);
/* the attention's dims and settings for the assembled (or absorbed) Q, K, V */
void mha_mla_core_of(const struct mla_run *r, mha_dims *d2, mha_config *c2);
/* what both directions check: the arrays MLA needs, and none it does not use */
mha_status mha_mla_validate(const struct mla_io *io, const void *out, const mha_dims *d,
			    const mha_config *cfg, mha_report *rep);

#endif

/*
 * latent.c: multi-head latent attention's tensors from files (latent.h).
 *
 * DeepSeek's names, each its own option; the dims are what the shapes
 * say (q_lora_rank: q_a_proj's columns; kv_lora_rank: kv_b_proj's rows;
 * qk_nope_head_dim: W_Q's columns per head less --qk-rope-head-dim;
 * v_head_dim: kv_b_proj's columns per head less qk_nope_head_dim), so a
 * file of the wrong size is refused with the sum that does not add up.
 */
#include "load/latent.h"

#include "base/cli.h"
#include "read/input.h"

#include <stdio.h>
#include <string.h>

const char *const latent_options[N_LATENT] = {
	"--q-a-proj", "--q-a-layernorm", "--kv-a-proj-with-mqa", "--kv-a-layernorm", "--kv-b-proj",
};

const char *const latent_names[N_LATENT] = {
	"q_a_proj", "q_a_layernorm", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj",
};

static int is_norm(int i)
{
	return i == LAT_Q_A_NORM || i == LAT_KV_A_NORM;
}

int latent_on(const struct problem_spec *s)
{
	for (int i = 0; i < N_LATENT; i++)
		if (s->latent[i])
			return 1;
	return s->rope_head_dim != 0;
}

int latent_read(const struct problem_spec *s, struct problem *p)
{
	for (int i = 0; i < N_LATENT; i++) {
		const read_spec rs = { latent_names[i], NULL, 1, 2, 0 };
		matrix *m = &p->latent[i];

		if (!s->latent[i])
			continue;
		if (read_matrix(m, s->latent[i], &rs))
			return -1;
		if (is_norm(i)) {
			/* a vector: (n), (1, n) or (n, 1) */
			if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1)
				return error("%s from %s is %zux%zu: a norm's weights are one vector",
					     latent_names[i], s->latent[i], m->dim[0], m->dim[1]);
		} else if (m->rank != 2) {
			return error("%s from %s has %zu values in one row: it is a matrix, (d_in, d_out) "
				     "as mha applies it (x*W)", latent_names[i], s->latent[i], m->dim[0]);
		} else if (s->layout == LAYOUT_TORCH && matrix_transpose(m)) {
			/* PyTorch's (d_out, d_in), as nn.Linear keeps it */
			return -1;
		}
	}
	return 0;
}

/* a tensor's length as a norm's weights (any of its shapes) */
static size_t norm_len(const matrix *m)
{
	return matrix_size(m);
}

int latent_dims(const struct problem_spec *s, const struct problem *p, mha_dims *d)
{
	const weights *w = &p->w;
	const matrix *wq = &w->m[WQ], *qa = &p->latent[LAT_Q_A_PROJ];
	const matrix *kva = &p->latent[LAT_KV_A_PROJ], *kvb = &p->latent[LAT_KV_B_PROJ];
	const matrix *kv = s->kv ? &p->kv : &p->x;
	const char *kvname = s->kv ? "X_kv" : "X", *kvsrc = s->kv ? p->kv_src : p->x_src;
	const size_t H = s->heads, dr = s->rope_head_dim;
	size_t q_in, kr, dn, dv;

	if (p->direct)
		return error("--q, --k and --v cannot be used with multi-head latent attention: it makes "
			     "Q, K and V from X (give -x)");
	if (s->xk || s->xv)
		return error("%s cannot be used with multi-head latent attention: the keys and values "
			     "come from one latent of X (or --kv)", s->xk ? "--xk" : "--xv");
	for (int i = WK; i < N_WEIGHTS; i++)
		if (i != WO && i != BO && weights_has(w, i))
			return error("%s from %s cannot be used with multi-head latent attention: the "
				     "keys and values come from kv_a_proj_with_mqa and kv_b_proj, and "
				     "its projections have no bias", weight_names[i], w->src[i]);
	if (!dr)
		return error("multi-head latent attention needs --qk-rope-head-dim: the features of "
			     "each head's query and key that turn by position");
	if (!weights_has(w, WQ))
		return error("multi-head latent attention needs the queries' projection: W_Q (-w, --wq "
			     "or --q-b-proj), q_b_proj after q_a_proj, or q_proj alone");
	for (int i = LAT_KV_A_PROJ; i <= LAT_KV_B_PROJ; i += 2)
		if (!s->latent[i])
			return error("multi-head latent attention needs %s (%s)", latent_options[i],
				     latent_names[i]);
	if (s->latent[LAT_Q_A_NORM] && !s->latent[LAT_Q_A_PROJ])
		return error("%s (q_a_layernorm from %s) normalises q_a_proj's latent: give "
			     "--q-a-proj too", latent_options[LAT_Q_A_NORM], s->latent[LAT_Q_A_NORM]);
	if (s->kv_heads && s->kv_heads != H)
		return error("--kv-heads %zu: in multi-head latent attention every head has its own key "
			     "and value (from one shared latent), so there are %zu", s->kv_heads, H);

	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	d->heads = d->kv_heads = H;
	d->batch = p->batch;
	d->n_q = matrix_rows(&p->x);
	d->n_kv = matrix_rows(kv);
	d->d_q_in = matrix_cols(&p->x);
	d->d_k_in = d->d_v_in = matrix_cols(kv);

	/* the queries: X*q_a_proj (q_lora_rank), then W_Q; or W_Q (q_proj) alone */
	q_in = d->d_q_in;
	if (s->latent[LAT_Q_A_PROJ]) {
		if (qa->dim[0] != d->d_q_in)
			return error("q_a_proj from %s is %zux%zu but X from %s has %zu columns: it needs "
				     "%zu rows", s->latent[LAT_Q_A_PROJ], qa->dim[0], qa->dim[1], p->x_src,
				     d->d_q_in, d->d_q_in);
		q_in = qa->dim[1];
		if (s->latent[LAT_Q_A_NORM] && norm_len(&p->latent[LAT_Q_A_NORM]) != q_in)
			return error("q_a_layernorm from %s has %zu values but q_a_proj from %s makes a "
				     "latent of %zu (q_lora_rank)", s->latent[LAT_Q_A_NORM],
				     norm_len(&p->latent[LAT_Q_A_NORM]), s->latent[LAT_Q_A_PROJ], q_in);
	}
	if (wq->dim[0] != q_in)
		return error("W_Q from %s is %zux%zu but needs %zu rows (%s)", w->src[WQ], wq->dim[0],
			     wq->dim[1], q_in, s->latent[LAT_Q_A_PROJ] ? "q_lora_rank, q_a_proj's "
			     "columns: W_Q is q_b_proj" : "X's columns: W_Q is q_proj");
	if (wq->dim[1] % H)
		return error("W_Q from %s has %zu columns, which --heads %zu does not divide",
			     w->src[WQ], wq->dim[1], H);
	d->d_k = wq->dim[1] / H;
	if (dr >= d->d_k)
		return error("--qk-rope-head-dim %zu leaves no unturned features: W_Q from %s gives "
			     "each of %zu heads %zu (qk_nope_head_dim + qk_rope_head_dim)", dr,
			     w->src[WQ], H, d->d_k);
	dn = d->d_k - dr;

	/* keys and values: X*kv_a_proj_with_mqa = [c_kv (kv_lora_rank), k_pe (qk_rope_head_dim)] */
	if (kva->dim[0] != d->d_k_in)
		return error("kv_a_proj_with_mqa from %s is %zux%zu but %s from %s has %zu columns: it "
			     "needs %zu rows", s->latent[LAT_KV_A_PROJ], kva->dim[0], kva->dim[1],
			     kvname, kvsrc, d->d_k_in, d->d_k_in);
	if (kva->dim[1] <= dr)
		return error("kv_a_proj_with_mqa from %s has %zu columns: kv_lora_rank + "
			     "qk_rope_head_dim (%zu), so at least %zu", s->latent[LAT_KV_A_PROJ],
			     kva->dim[1], dr, dr + 1);
	kr = kva->dim[1] - dr;
	if (kvb->dim[0] != kr)
		return error("kv_b_proj from %s is %zux%zu but needs %zu rows: kv_lora_rank, "
			     "kv_a_proj_with_mqa's %zu columns less qk_rope_head_dim %zu",
			     s->latent[LAT_KV_B_PROJ], kvb->dim[0], kvb->dim[1], kr, kva->dim[1], dr);
	if (kvb->dim[1] % H || kvb->dim[1] / H <= dn)
		return error("kv_b_proj from %s has %zu columns but needs %zu heads x (qk_nope_head_dim "
			     "%zu + v_head_dim)", s->latent[LAT_KV_B_PROJ], kvb->dim[1], H, dn);
	dv = kvb->dim[1] / H - dn;
	d->d_v = dv;
	if (s->latent[LAT_KV_A_NORM] && norm_len(&p->latent[LAT_KV_A_NORM]) != kr)
		return error("kv_a_layernorm from %s has %zu values but kv_lora_rank is %zu",
			     s->latent[LAT_KV_A_NORM], norm_len(&p->latent[LAT_KV_A_NORM]), kr);
	return 0;
}

void latent_config(struct problem *p)
{
	const struct problem_spec *s = &p->spec;
	mha_mla *m = &p->cfg.mla;
	const matrix *qa = &p->latent[LAT_Q_A_PROJ];
	const int absorbed = m->absorbed;

	*m = (mha_mla){ .on = 1, .absorbed = absorbed, .eps = m->eps };
	m->q_rank = qa->rank ? qa->dim[1] : 0;
	m->d_rope = s->rope_head_dim;
	m->kv_rank = p->latent[LAT_KV_A_PROJ].dim[1] - s->rope_head_dim;
	if (!(s->given & GIVEN_MLA_EPS))
		m->eps = 1e-6;
	m->q_a_norm = p->latent[LAT_Q_A_NORM].rank ? p->latent[LAT_Q_A_NORM].v : NULL;
	m->kv_a_norm = p->latent[LAT_KV_A_NORM].rank ? p->latent[LAT_KV_A_NORM].v : NULL;
}

void latent_weights(struct problem *p)
{
	const matrix *qa = &p->latent[LAT_Q_A_PROJ];

	p->weights.W_QA = qa->rank ? qa->v : NULL;
	p->weights.W_KVA = p->latent[LAT_KV_A_PROJ].v;
	p->weights.W_KVB = p->latent[LAT_KV_B_PROJ].v;
}

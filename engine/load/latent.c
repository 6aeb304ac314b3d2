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
#include "load/families.h"
#include "load/complete.h"
#include "load/said.h"

#include "util/msg.h"
#include "load/config_keys.h"
#include "read/input.h"

#include <cjson/cJSON.h>

#include <math.h>
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
	char said[200], said2[200];

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
	if (s->q_norm || s->k_norm || s->cfg.norm.kind)
		return error("%s cannot be used with multi-head latent attention: its latents have "
			     "RMSNorms of their own (--q-a-layernorm, --kv-a-layernorm)",
			     s->q_norm ? "--q-norm" : s->k_norm ? "--k-norm" : "--norm");
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
		return error("%s: in multi-head latent attention every head has its own key and value "
			     "(from one shared latent): as many as the heads, %s",
			     model_heads_said(s, 1, s->kv_heads, said, sizeof(said)),
			     model_heads_said(s, 0, H, said2, sizeof(said2)));

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
		return error("W_Q from %s has %zu columns, which %s does not divide", w->src[WQ],
			     wq->dim[1], model_heads_said(s, 0, H, said, sizeof(said)));
	d->d_k = wq->dim[1] / H;
	if (s->cfg.rope.mode && dr % 2)
		return error("%s is odd: the rotation turns pairs of features",
			     model_rope_head_dim_said(s, said, sizeof(said)));
	if (dr >= d->d_k)
		return error("%s leaves no unturned features: W_Q from %s gives each of %zu heads %zu "
			     "(qk_nope_head_dim + qk_rope_head_dim)", model_rope_head_dim_said(s, said, sizeof(said)),
			     w->src[WQ], H, d->d_k);
	dn = d->d_k - dr;

	/* config.json's hidden_size (or its class's) is what the projections take */
	if (s->config_hidden && kva->dim[0] != s->config_hidden) {
		char note[96];

		return error("'%s': hidden_size %zu%s, but kv_a_proj_with_mqa from %s takes %zu features",
			     path_shown(s->config_read), s->config_hidden,
			     config_default_note(s, "hidden_size", note, sizeof(note)),
			     s->latent[LAT_KV_A_PROJ], kva->dim[0]);
	}
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
	{
		/* what config.json said of the dims, held to the tensors */
		static const char *const keys[4] = { "q_lora_rank", "kv_lora_rank",
						     "qk_nope_head_dim", "v_head_dim" };
		const size_t got[4] = { s->latent[LAT_Q_A_PROJ] ? q_in + 1 : 1, kr, dn, dv };

		char value[40], made[40], note[96];

		for (int i = 0; i < 4; i++) {
			if (!s->mla_dims[i] || s->mla_dims[i] == got[i])
				continue;
			/* q_lora_rank is stored plus one: 1 is null, q_proj alone */
			if (i == 0 && s->mla_dims[0] == 1)
				snprintf(value, sizeof(value), "null (q_proj alone)");
			else
				snprintf(value, sizeof(value), "%zu", s->mla_dims[i] - (i == 0));
			if (i == 0 && got[0] == 1)
				snprintf(made, sizeof(made), "q_proj alone");
			else
				snprintf(made, sizeof(made), "%zu", got[i] - (i == 0));
			return error("'%s': %s %s%s, but the tensors make %s", s->config_read, keys[i],
				     value, config_default_note(s, keys[i], note, sizeof(note)), made);
		}
	}
	return 0;
}

/* quantization_config: FP8 with block scales (weight_block_size), or refused by name */
static int fp8_config(struct problem_spec *s, const cJSON *root, const char *path)
{
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config"), *b, *e;
	const char *method = NULL;
	size_t n = 0;

	if (!q || cJSON_IsNull(q))
		return 0;
	if (!cJSON_IsObject(q))
		return config_bad_type(path, "quantization_config", "an object");
	if (config_string(q, path, "quant_method", &method) < 0)
		return -1;
	if (!method || strcmp(method, "fp8"))
		return error("%s: quantization_config: quant_method \"%s\": mha reads FP8 weights with "
			     "block scales (\"fp8\") and no other quantisation", path,
			     method ? method : "(none)");
	b = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
	if (!b || cJSON_IsNull(b))
		return 0; /* 128 x 128, transformers' default */
	if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2)
		return config_bad_type(path, "weight_block_size", "two whole numbers from 1");
	cJSON_ArrayForEach(e, b) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 1 << 20 ||
		    e->valuedouble != floor(e->valuedouble))
			return config_bad_type(path, "weight_block_size", "two whole numbers from 1");
		s->fp8_block[n++] = (size_t)e->valuedouble;
	}
	return 0;
}

int latent_apply_config(struct problem_spec *s, const cJSON *root, const char *path)
{
	static const char *const dims[4] = { "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
					     "v_head_dim" };
	size_t rope = 0;
	double eps = 0;
	int flag = 1, rc;

	if (!root)
		return 0;
	if (config_count(root, path, "qk_rope_head_dim", &rope) < 0)
		return -1;
	if (!rope)
		rope = 64; /* DeepseekV3Config's default */
	if (!(s->given & GIVEN_QK_ROPE))
		s->rope_head_dim = rope;
	for (int i = 0; i < 4; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, dims[i]);

		if (i == 0 && v && cJSON_IsNull(v)) {
			s->mla_dims[0] = 1; /* q_proj alone */
			continue;
		}
		if ((rc = config_count(root, path, dims[i], &s->mla_dims[i])) < 0)
			return -1;
		if (rc && i == 0)
			s->mla_dims[0]++;
	}
	{
		/* what the class derives and transformers 5 writes: head_dim is
		 * qk_rope_head_dim, qk_head_dim qk_nope_head_dim + qk_rope_head_dim;
		 * a file that says otherwise is refused, for the class overwrites it */
		size_t hd = 0, qk = 0;

		if (config_count(root, path, "head_dim", &hd) < 0 ||
		    config_count(root, path, "qk_head_dim", &qk) < 0)
			return -1;
		if (hd && hd != rope)
			return error("%s: head_dim %zu but qk_rope_head_dim %zu: model_type %s's "
				     "configuration class makes head_dim qk_rope_head_dim", path, hd,
				     rope, s->mtype->type);
		if (qk && s->mla_dims[2] && qk != s->mla_dims[2] + rope)
			return error("%s: qk_head_dim %zu but qk_nope_head_dim %zu + qk_rope_head_dim "
				     "%zu is %zu: model_type %s's configuration class makes it their "
				     "sum", path, qk, s->mla_dims[2], rope, s->mla_dims[2] + rope,
				     s->mtype->type);
	}
	if ((rc = config_number(root, path, "rms_norm_eps", &eps)) < 0)
		return -1;
	if (rc && !(s->given & GIVEN_MLA_EPS)) {
		s->cfg.mla.eps = eps;
		s->given |= CONFIG_MLA_EPS;
	}
	if ((rc = config_bool(root, path, "rope_interleave", &flag)) < 0)
		return -1;
	if (rc && !flag && !(s->given & GIVEN_ROPE) && s->cfg.rope.mode)
		s->cfg.rope.mode = MHA_ROPE_HALF;
	if (config_bool(root, path, "attention_bias", &flag) < 0)
		return -1;
	if (flag == 1 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "attention_bias")))
		return error("%s: attention_bias true: biases on q_a_proj, kv_a_proj_with_mqa and "
			     "o_proj, which mha's latent attention does not have", path);
	return fp8_config(s, root, path);
}

void latent_mscale(struct problem_spec *s)
{
	const mha_rope_scaling *sc = &s->cfg.rope.scaling;

	s->mla_mscale2 = 0;
	if (sc->type && sc->mscale_all_dim && sc->factor > 1) {
		const double m = 0.1 * sc->mscale_all_dim * log(sc->factor) + 1.0;

		s->mla_mscale2 = m * m;
	}
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
	if (!(s->given & (GIVEN_MLA_EPS | CONFIG_MLA_EPS)))
		m->eps = 1e-6;
	/* DeepSeek's YaRN: 1/sqrt(d_k) times mscale^2, unless --scale said */
	if (s->mla_mscale2 && !(s->given & GIVEN_SCALE)) {
		p->cfg.scale_mode = MHA_SCALE_VALUE;
		p->cfg.scale = s->mla_mscale2 / sqrt((double)p->d.d_k);
	}
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

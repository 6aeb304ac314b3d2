/*
 * checks.c: the options' own matrices held against the shapes (checks.h):
 * the mask, the sinks, the ALiBi slopes, the rotary tables and positions,
 * the q/k norm's weights.
 */
#include "load/checks.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/number.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "[1][0][2]": element i of m as its own indices, into buf */
static const char *element_path(char *buf, size_t size, const matrix *m, size_t i)
{
	size_t idx[4], used = 0;

	for (size_t r = m->rank; r-- > 0;) {
		idx[r] = i % m->dim[r];
		i /= m->dim[r];
	}
	buf[0] = '\0';
	for (size_t r = 0; r < m->rank && used < size; r++)
		used += (size_t)snprintf(buf + used, size - used, "[%zu]", idx[r]);
	return buf;
}

/*
 * The mask must fit the scores (B, H, n_q, n_kv) as ONNX broadcasts its
 * attn_mask, the dimensions right-aligned: (n_kv), (n_q, n_kv), (H, n_q,
 * n_kv) or (B, H, n_q, n_kv), each of B, H and n_q also 1 for all of them
 * (what it may hold is the library's rule: checks_config).  The library
 * takes (B|1, H|1, n_q, n_kv): a mask shared by the queries is spread over
 * them here.
 */
int checks_mask(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg)
{
	matrix *m = &p->mask;
	const size_t B = problem_sequences(p);
	size_t md[4] = { 1, 1, 1, 1 }, n;
	char shape[64];

	if (!s->mask)
		return 0;
	for (size_t r = 0; r < m->rank; r++)
		md[4 - m->rank + r] = m->dim[r];
	if (m->rank >= 3 && md[1] != d->heads && md[1] != 1)
		return error("mask from %s has %zu per-head matrices but there %s %zu head%s",
			     p->mask_src, md[1], d->heads == 1 ? "is" : "are", d->heads,
			     plural(d->heads));
	if ((md[2] != d->n_q && md[2] != 1) || md[3] != d->n_kv)
		return error("mask from %s is %s but the scores are %zux%zu (%zu quer%s x %zu key%s)%s",
			     p->mask_src, matrix_shape(m, shape, sizeof(shape)), d->n_q, d->n_kv,
			     d->n_q, d->n_q == 1 ? "y" : "ies", d->n_kv, plural(d->n_kv),
			     m->rank >= 3 ? " for each head" : "");
	if (md[0] != B && md[0] != 1)
		return error("mask from %s holds %zu sequences' masks but the batch holds %zu "
			     "sequence%s", p->mask_src, md[0], B, plural(B));
	/* its shape as read, for naming an entry the library refuses (checks_config) */
	p->mask_read = (matrix){ .rank = m->rank };
	memcpy(p->mask_read.dim, m->dim, sizeof(m->dim));
	/* a 3-D mask of one head is per head as it always was (titled so) */
	cfg->mask.per_head = md[1] > 1 || (m->rank == 3 && d->heads == 1);
	cfg->mask.per_batch = md[0] > 1;
	if (md[2] != d->n_q) {
		/* one row for every query: the rows spread out */
		matrix spread_rows;
		const size_t dims[4] = { md[0], md[1], d->n_q, d->n_kv };

		if (matrix_alloc_dims(&spread_rows, 4, dims))
			return -1;
		for (size_t k = 0; k < md[0] * md[1]; k++)
			for (size_t i = 0; i < d->n_q; i++)
				memcpy(spread_rows.v + (k * d->n_q + i) * d->n_kv, m->v + k * d->n_kv,
				       d->n_kv * sizeof(double));
		spread_rows.is_bool = m->is_bool;
		matrix_free(m);
		*m = spread_rows;
	}
	n = matrix_size(m);
	if (m->is_bool) {
		p->allow = malloc(n ? n : 1);
		if (!p->allow)
			return error("out of memory");
		/* --mask-bool block: PyTorch's nn.MultiheadAttention, true = blocked */
		for (size_t i = 0; i < n; i++)
			p->allow[i] = (m->v[i] != 0) != (s->mask_block != 0);
		cfg->mask.allow = p->allow;
		/* every query blocked from its own key: a PyTorch mask read as mha's? */
		p->diag_blocked = !s->mask_block && d->n_q == d->n_kv;
		for (size_t k = 0; p->diag_blocked && k < md[0] * md[1]; k++)
			for (size_t i = 0; p->diag_blocked && i < d->n_q; i++)
				p->diag_blocked = !p->allow[(k * d->n_q + i) * d->n_kv + i];
		return 0;
	}
	if (s->mask_block)
		return error("--mask-bool block: mask from %s holds numbers, which are added to the "
			     "scores; it applies to a boolean mask (true and false)", p->mask_src);
	cfg->mask.bias = m->v;
	return 0;
}

/*
 * A vector of one number per query head from file (a row or a column will
 * do): noun names one ("sink"), unit what it is ("logit")
 */
static int check_per_head(const char *file, const matrix *m, size_t heads, const char *noun,
			  const char *unit)
{
	char shape[64];

	if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1)
		return error("%s: %ss are %s, expected a vector of one %s per head",
			     path_shown(file), noun, matrix_shape(m, shape, sizeof(shape)), unit);
	if (matrix_size(m) != heads)
		return error("%s: %zu %s%s but there %s %zu head%s (one %s per query head)",
			     path_shown(file), matrix_size(m), noun, plural(matrix_size(m)),
			     heads == 1 ? "is" : "are", heads, plural(heads), unit);
	return 0;
}

/*
 * One side's norm weights, n of them from file: a block of d per head
 * ((heads, d) or heads·d, *per 1) or one vector every head shares (d,
 * *per 0); over the whole row, heads·d.  side "q" or "k".
 */
static int norm_layout(const char *file, const matrix *m, const char *side, size_t heads,
		       size_t d, int over_all, int *per)
{
	const size_t n = matrix_size(m);
	char shape[64];

	if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1 && m->dim[1] != d)
		return error("%s: %s_norm weights are %s, expected (heads, d_k) = (%zu, %zu) or a "
			     "vector", path_shown(file), side, matrix_shape(m, shape, sizeof(shape)),
			     heads, d);
	if (over_all) {
		*per = 1;
		if (n != heads * d)
			return error("%s: %zu %s_norm weight%s, but the norm over the whole row of %c "
				     "(--norm-over all) has %zu features (%zu head%s x d_k %zu)",
				     path_shown(file), n, side, plural(n), side[0] == 'q' ? 'Q' : 'K',
				     heads * d, heads, plural(heads), d);
		return 0;
	}
	*per = heads > 1 && n == heads * d;
	if (n != d && !*per)
		return error("%s: %zu %s_norm weight%s, but a norm per head takes d_k = %zu (one vector "
			     "for every head)%s%zu (one per head)", path_shown(file), n, side,
			     plural(n), d, heads > 1 ? " or " : ", or with --norm-over all ",
			     heads * d);
	return 0;
}

/*
 * The q/k norm (--norm, --q-norm, --k-norm, --norm-eps, --norm-over, or a
 * checkpoint's family): weights on both sides or neither, laid out alike,
 * eps 1e-6 unless given or config.json says
 */
int checks_norm(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg)
{
	mha_qk_norm *n = &cfg->norm;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads;
	int qp = 0, kp = 0;

	if (!n->kind && (s->q_norm || s->k_norm) && !(s->given & GIVEN_NORM))
		n->kind = MHA_NORM_RMS; /* weights alone: Qwen3's RMS norm */
	if (!n->kind) {
		if (s->q_norm || s->k_norm)
			return error("%s gives a q/k norm's weights, but --norm none leaves the norm out",
				     s->q_norm ? "--q-norm" : "--k-norm");
		if ((s->given & (GIVEN_NORM_EPS | GIVEN_NORM_OVER)) && !(s->given & GIVEN_NORM))
			return error("%s sets a q/k norm, but there is none: give --norm (or --q-norm "
				     "and --k-norm)", s->given & GIVEN_NORM_EPS ? "--norm-eps" :
				     "--norm-over");
		return 0;
	}
	if (!s->q_norm != !s->k_norm)
		return error("%s without %s: give each side's weights, or neither (a norm without "
			     "weights)", s->q_norm ? "--q-norm" : "--k-norm",
			     s->q_norm ? "--k-norm" : "--q-norm");
	if (!(s->given & (GIVEN_NORM_EPS | CONFIG_NORM_EPS)))
		n->eps = 1e-6;
	if (!s->q_norm)
		return 0;
	if (norm_layout(s->q_norm, &p->q_norm, "q", d->heads, d->d_k, n->over_all, &qp) ||
	    norm_layout(s->k_norm, &p->k_norm, "k", G, d->d_k, n->over_all, &kp))
		return -1;
	/* one layout for both; with one key/value head its block is the shared vector */
	if (!n->over_all && ((qp && !kp && G > 1) || (!qp && kp && d->heads > 1)))
		return error("%s holds %s but %s holds %s: give both sides alike",
			     path_shown(s->q_norm), qp ? "a block per head" : "one vector for every head",
			     path_shown(s->k_norm), kp ? "a block per head" : "one vector for every head");
	n->per_head = qp || kp;
	n->q_weight = p->q_norm.v;
	n->k_weight = p->k_norm.v;
	return 0;
}

/* --sinks: one logit per query head */
int checks_sinks(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg)
{
	if (!s->sinks)
		return 0;
	if (check_per_head(s->sinks, &p->sinks, d->heads, "sink", "logit"))
		return -1;
	cfg->sinks = p->sinks.v;
	return 0;
}

/*
 * --alibi-slopes: one slope per query head; --alibi alone: Press et al.'s,
 * from the library, kept to show them (the library is still handed none
 * and works them out the same way)
 */
int checks_alibi(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg)
{
	if (!cfg->alibi.on)
		return 0;
	if (!s->alibi_slopes) {
		if (matrix_alloc(&p->alibi, 1, d->heads, 1, 1))
			return -1;
		return mha_alibi_slopes(p->alibi.v, d->heads) == MHA_OK ? 0 : -1;
	}
	if (check_per_head(s->alibi_slopes, &p->alibi, d->heads, "ALiBi slope", "slope"))
		return -1;
	cfg->alibi.slopes = p->alibi.v;
	return 0;
}

/*
 * Whole numbers into *out (n), from m, a vector of n: what names its
 * elements ("positions", "q", "k"), whom what there are n of ("queries",
 * "keys").  Which are in range is the library's rule (checks_config).
 */
static int rope_positions(const char *file, const char *what, const matrix *m, size_t n,
			  const char *whom, ptrdiff_t **out)
{
	char shape[64];

	if (m->rank == 2 && m->dim[0] != 1 && m->dim[1] != 1)
		return error("%s: %s are %s, expected a list of whole numbers", file, what,
			     matrix_shape(m, shape, sizeof(shape)));
	if (matrix_size(m) != n)
		return error("%s: %zu position%s%s%s but %zu %s", file, matrix_size(m),
			     plural(matrix_size(m)), strcmp(what, "positions") ? " in " : "",
			     strcmp(what, "positions") ? what : "", n, whom);
	/* charged like every matrix (budget.h); given back in problem_free */
	if (budget_take(budget_block(n * sizeof(**out))))
		return budget_refuse(file, n * sizeof(**out));
	*out = malloc(n * sizeof(**out));
	if (!*out) {
		budget_give(budget_block(n * sizeof(**out)));
		return error("out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const double v = m->v[i];
		char num[40];

		format_shortest(num, sizeof(num), v);
		/* a whole number a ptrdiff_t holds; below 0 is the library's to refuse */
		if (v != floor(v) || v < -1e15 || v > 1e15)
			return error("%s: %s[%zu] is %s: positions are whole numbers from 0", file,
				     what, i, num);
		(*out)[i] = (ptrdiff_t)v;
	}
	return 0;
}

int checks_rope(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg)
{
	mha_rope *r = &cfg->rope;
	const size_t R = r->dim ? r->dim : d->d_k;
	const char *pf = s->positions ? path_shown(s->positions) : NULL;
	char a[64], b[64];

	if (!r->mode)
		return 0;
	if (s->rope_cos) {
		const matrix *c = &p->rope_cos, *sn = &p->rope_sin;
		const size_t cols = c->rank == 1 ? c->dim[0] : c->dim[1];

		if (c->rank != sn->rank || c->dim[0] != sn->dim[0] || c->dim[1] != sn->dim[1])
			return error("--rope-cos %s is %s but --rope-sin %s is %s: the tables go "
				     "together", path_shown(s->rope_cos), matrix_shape(c, a, sizeof(a)),
				     path_shown(s->rope_sin), matrix_shape(sn, b, sizeof(b)));
		/* R itself against d_k is the library's rule (checks_config) */
		if (R <= d->d_k && R % 2 == 0 && cols != R / 2)
			return error("--rope-cos %s is %s but R = %zu features turn in %zu pair%s: "
				     "expected %zu column%s (one per pair; --rope-dim sets R)",
				     path_shown(s->rope_cos), matrix_shape(c, a, sizeof(a)), R, R / 2,
				     plural(R / 2), R / 2, plural(R / 2));
		r->cos = c->v;
		r->sin = sn->v;
		r->rows = c->rank == 1 ? 1 : c->dim[0];
	}
	if (s->positions) {
		if (!p->pos_apart && d->n_q != d->n_kv)
			return error("%s: one list of positions serves queries and keys alike, but "
				     "there are %zu queries and %zu keys: give {\"q\": [..], \"k\": [..]}",
				     pf, d->n_q, d->n_kv);
		if (p->pos_q.rank && rope_positions(pf, p->pos_apart ? "q" : "positions", &p->pos_q,
						    d->n_q, p->pos_apart ? "queries" :
						    "queries (and as many keys)", &p->q_pos))
			return -1;
		if (p->pos_k.rank && rope_positions(pf, "k", &p->pos_k, d->n_kv, "keys", &p->k_pos))
			return -1;
		r->q_pos = p->q_pos;
		r->k_pos = p->pos_apart ? p->k_pos : p->q_pos;
	}
	if (r->scaling.type == MHA_ROPE_SCALING_LONGROPE && s->n_rope_factors != R / 2)
		return error("%s's short_factor and long_factor have %zu entr%s, but the "
			     "rotation turns %zu pair%s (R = %zu)", s->rope_from[0] ? s->rope_from :
			     "rope_scaling", s->n_rope_factors,
			     s->n_rope_factors == 1 ? "y" : "ies", R / 2, plural(R / 2), R);
	if (r->scaling.type) {
		/* the sequence the model sees: its largest position + 1 */
		size_t len = d->n_q > d->n_kv ? d->n_q : d->n_kv;

		if (cfg->causal == MHA_CAUSAL_OFFSET && cfg->causal_offset > 0 &&
		    d->n_q + (size_t)cfg->causal_offset > len)
			len = d->n_q + (size_t)cfg->causal_offset;
		for (size_t i = 0; r->q_pos && i < d->n_q; i++)
			len = r->q_pos[i] >= 0 && (size_t)r->q_pos[i] + 1 > len ? (size_t)r->q_pos[i] + 1 : len;
		for (size_t i = 0; r->k_pos && i < d->n_kv; i++)
			len = r->k_pos[i] >= 0 && (size_t)r->k_pos[i] + 1 > len ? (size_t)r->k_pos[i] + 1 : len;
		r->scaling.seq_len = len;
	}
	return 0;
}

/* a rotary position the library refused: given in --positions, or the
 * default one (keys at j, queries at i plus their sequence's causal offset)
 * past --rope-cos's rows */
static int rope_position_fault(const struct problem_spec *s, const struct problem *p,
			       const mha_fault *f)
{
	const mha_dims *d = &p->d;
	const mha_rope *r = &p->cfg.rope;
	const int key = f->kind == MHA_FAULT_ROPE_KEY_POSITION;
	const size_t rows = r->rows;

	if (key ? r->k_pos != NULL : r->q_pos != NULL) {
		const char *what = !p->pos_apart ? "positions" : key ? "k" : "q";
		const char *pf = path_shown(s->positions);

		if (f->position < 0)
			return error("%s: %s[%zu] is %td: positions are whole numbers from 0", pf, what,
				     f->index, f->position);
		return error("%s: %s[%zu] is %td, past the cos/sin tables' %zu rows (positions 0 to "
			     "%zu)", pf, what, f->index, f->position, rows, rows - 1);
	}
	if (key)
		return error("--rope-cos %s has %zu row%s (positions 0 to %zu) but key %zu is at "
			     "position %zu: give --positions", path_shown(s->rope_cos), rows,
			     plural(rows), rows - 1, d->n_kv, d->n_kv - 1);
	{
		const ptrdiff_t off = mha_causal_offset(d, &p->cfg, f->sequence);

		return error("--rope-cos %s has %zu row%s (positions 0 to %zu) but the queries are at "
			     "%td to %td (the causal offset %td): give --positions",
			     path_shown(s->rope_cos), rows, plural(rows), rows - 1, off,
			     off + (ptrdiff_t)d->n_q - 1, off);
	}
}

/* a mask entry the library refused, named as the file holds it: index is
 * of the mask as the library takes it, (B|1, H|1, n_q, n_kv), its rows
 * perhaps spread from one (checks_mask) */
static int mask_fault(const struct problem_spec *s, const struct problem *p, size_t index)
{
	const matrix *read = &p->mask_read;
	const size_t n_q = p->d.n_q, n_kv = p->d.n_kv;
	const size_t rows = read->rank >= 2 ? read->dim[read->rank - 2] : 1;
	const size_t k = index / (n_q * n_kv), i = index / n_kv % n_q, j = index % n_kv;
	const double v = p->mask.v[index];
	char at[64];

	return error("%s: mask%s is %s: a mask adds numbers or -inf", path_shown(s->mask),
		     element_path(at, sizeof(at), read, (k * rows + (rows == 1 ? 0 : i)) * n_kv + j),
		     isnan(v) ? "nan" : "inf");
}

int checks_config(const struct problem_spec *s, struct problem *p)
{
	const mha_dims *d = &p->d;
	const mha_rope *r = &p->cfg.rope;
	mha_fault f = { .size = sizeof(f) };
	const mha_status st = mha_check_fault(d, &p->cfg, &f);

	if (st == MHA_OK)
		return 0;
	switch (f.kind) {
	case MHA_FAULT_MASK_ENTRY:
		return mask_fault(s, p, f.index);
	case MHA_FAULT_ROPE_DIM_WIDE:
		return error("--rope-dim %zu but each head's Q and K have d_k = %zu features", r->dim,
			     d->d_k);
	case MHA_FAULT_ROPE_DIM_ODD:
		return error("--rope turns pairs of features but d_k = %zu is odd: give an even "
			     "--rope-dim", d->d_k);
	case MHA_FAULT_ROPE_KEY_POSITION:
	case MHA_FAULT_ROPE_QUERY_POSITION:
		return rope_position_fault(s, p, &f);
	case MHA_FAULT_ROPE_SCALING:
		return error("rope_scaling: %s", r->cos ? "the tables given (--rope-cos, --rope-sin) "
			     "already hold the frequencies: leave it out" : "a value out of its range");
	case MHA_FAULT_NORM_Q_WEIGHT:
	case MHA_FAULT_NORM_K_WEIGHT: {
		const int q = f.kind == MHA_FAULT_NORM_Q_WEIGHT;
		const matrix *m = q ? &p->q_norm : &p->k_norm;
		char at[64], v[40];

		format_shortest(v, sizeof(v), m->v[f.index]);
		return error("%s: %c_norm weight%s is %s: the weights are finite numbers",
			     path_shown(q ? s->q_norm : s->k_norm), q ? 'q' : 'k',
			     element_path(at, sizeof(at), m, f.index), v);
	}
	default:
		break;
	}
	if (st == MHA_ERR_ROPE)
		return error("--rope: %s", mha_strerror(st));
	return error("%s", mha_strerror(st));
}

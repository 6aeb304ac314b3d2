/*
 * explain.c: the computation narrated, step by step, with its numbers.
 *
 * Everything printed here was computed by the library; this file only
 * arranges it, and re-derives nothing but the terms of the one entry
 * --cell asks for, which it writes out as a student would on paper.
 */
#include "write/explain.h"
#include "base/cli.h"
#include "util/number.h"
#include "util/text.h"
#include "load/weights.h"
#include "write/write.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TERMS EXPLAIN_TERMS
#define MAX_SUM_TERMS EXPLAIN_SUM_TERMS

/* a number as a factor: "(-0.87)" when negative, so "x*(-y)" reads right */
static void factor(char *buf, size_t size, double v, int precision)
{
	char n[48];

	format_number(n, sizeof(n), v, precision);
	snprintf(buf, size, n[0] == '-' ? "(%s)" : "%s", n);
}

/* a matrix as a text table, labelled when there are labels */
static void table(FILE *fp, const matrix *m, const char *const *rows, const char *const *cols,
		  const struct explain *e)
{
	/* the step above it says what it is: no title */
	writer w = { .fp = fp, .format = FORMAT_TEXT, .precision = e->precision, .no_title = 1,
		     .full = e->full, .row_labels = rows, .col_labels = cols };

	out_begin(&w);
	out_matrix(&w, "", "", m);
}

/* "2 (eats)": a query's or key's number and its label as shown (text.h) */
static const char *label(const char *const *labels, size_t i, char *buf, size_t size)
{
	const int n = snprintf(buf, size, labels ? "%zu (" : "%zu", i + 1);

	if (labels && n > 0 && (size_t)n + 2 < size) {
		const size_t len = (size_t)n + text_shown(buf + n, size - (size_t)n - 1, labels[i]);

		memcpy(buf + len, ")", 2);
	}
	return buf;
}

static void shape(char *buf, size_t size, const matrix *m)
{
	snprintf(buf, size, "(%zux%zu)", matrix_rows(m), matrix_cols(m));
}

/*
 * The query's position p as ALiBi and the window take it: its index plus
 * the causal offset, as the library works it out (e: one sequence's facts,
 * its key length in cfg->kv_len).
 */
static ptrdiff_t query_offset(const struct explain *e)
{
	return mha_causal_offset(e->d, e->cfg, 0);
}

/* the position rope gave row r of Q (is_q) or K: as given, or i + the causal offset / j */
static ptrdiff_t rope_position(const struct explain *e, int is_q, size_t r)
{
	const mha_rope *rp = &e->cfg->rope;

	if (is_q && rp->q_pos)
		return rp->q_pos[r];
	if (!is_q && rp->k_pos)
		return rp->k_pos[r];
	return is_q ? (ptrdiff_t)r + query_offset(e) : (ptrdiff_t)r;
}

/*
 * One row of Q or K normalised by hand: the features normalised together
 * (the head's block at col0, or the whole row), their mean (layer) and mean
 * square or variance, eps, and the divisor; then each feature times its
 * weight factor.  x is the row of Q or K as projected.
 */
static void work_norm(FILE *fp, const struct explain *e, int is_q, size_t r, size_t col0,
		      const double *row)
{
	const mha_qk_norm *n = &e->cfg->norm;
	const size_t dk = e->d->d_k, G = e->d->kv_heads ? e->d->kv_heads : e->d->heads;
	const size_t m = n->over_all ? (is_q ? e->d->heads : G) * dk : dk;
	const double *x = n->over_all ? row : row + col0;
	const int p = e->precision;
	double mu = 0, sq = 0;
	char a[64], b[64], c[64];

	for (size_t t = 0; n->kind == MHA_NORM_LAYER && t < m; t++)
		mu += x[t];
	mu /= (double)m;
	for (size_t t = 0; t < m; t++)
		sq += (x[t] - mu) * (x[t] - mu);
	format_number(a, sizeof(a), sq / (double)m, p);
	format_number(b, sizeof(b), n->eps, p);
	format_number(c, sizeof(c), sqrt(sq / (double)m + n->eps), p);
	fprintf(fp, "    %s %zu normalised (%s, %zu features):", is_q ? "query" : "key", r + 1,
		n->over_all ? "the whole row" : "its head's block", m);
	if (n->kind == MHA_NORM_LAYER) {
		char d[64];

		format_number(d, sizeof(d), mu, p);
		fprintf(fp, " mean %s taken away, variance %s", d, a);
	} else {
		fprintf(fp, " mean square %s", a);
	}
	fprintf(fp, "; sqrt(%s + %s) = %s divides each feature, then times %s\n",
		a, b, c, !n->q_weight ? "1 (no weights)" : n->kind == MHA_NORM_RMS1P ?
		"1 + its weight" : "its weight");
}

/*
 * One row of a head's Q or K turned by hand: each pair (x1, x2) of its first
 * R features, its angle (or the tables' row), cos and sin, and the two
 * products that give the rotated pair (as the library computed them).
 */
static void work_rotation(FILE *fp, const struct explain *e, int is_q, size_t r, size_t col0,
			  const double *x, const double *xr)
{
	const mha_rope *rp = &e->cfg->rope;
	const size_t dk = e->d->d_k, R = rp->dim ? rp->dim : dk;
	const ptrdiff_t pos = rope_position(e, is_q, r);
	const double theta = rp->theta ? rp->theta : 10000;
	const int p = e->precision;
	const char who = is_q ? 'q' : 'k';
	char a[64], b[64], c[64], s_[64], t_[64];

	fprintf(fp, "    %s %zu is at position %td; %s rotates %zu pair%s of its %zu features:\n",
		is_q ? "query" : "key", r + 1, pos,
		rp->mode == MHA_ROPE_HALF ? "half (features t and t+R/2)" : "interleaved (features 2t-1 and 2t)",
		R / 2, R / 2 == 1 ? "" : "s", dk);
	for (size_t t = 0; t < R / 2; t++) {
		const size_t i1 = rp->mode == MHA_ROPE_HALF ? t : 2 * t;
		const size_t i2 = rp->mode == MHA_ROPE_HALF ? t + R / 2 : 2 * t + 1;
		double cs, sn;

		if (t == MAX_TERMS / 3) {
			fprintf(fp, "      … (%zu pairs in all)\n", R / 2);
			break;
		}
		if (rp->cos) {
			cs = rp->cos[(size_t)pos * (R / 2) + t];
			sn = rp->sin[(size_t)pos * (R / 2) + t];
			format_number(a, sizeof(a), cs, p);
			format_number(b, sizeof(b), sn, p);
			fprintf(fp, "      %c pair %zu (features %zu, %zu): row %td of the tables: cos = %s, "
				"sin = %s\n", who, t + 1, col0 + i1 + 1, col0 + i2 + 1, pos, a, b);
		} else if (!rp->scaling.type) {
			const double angle = (double)pos * mha_rope_frequency(rp, R, t);

			cs = cos(angle);
			sn = sin(angle);
			format_number(t_, sizeof(t_), theta, p);
			format_number(a, sizeof(a), angle, p);
			format_number(b, sizeof(b), cs, p);
			format_number(c, sizeof(c), sn, p);
			fprintf(fp, "      %c pair %zu (features %zu, %zu): angle = %td*%s^(-%zu/%zu) = %s, "
				"cos = %s, sin = %s\n", who, t + 1, col0 + i1 + 1, col0 + i2 + 1, pos, t_,
				2 * t, R, a, b, c);
		} else {
			/* the library's scaled frequency and factor, as it turned them */
			const double g = mha_rope_frequency(rp, R, t), af = mha_rope_attention_factor(rp);
			const double angle = (double)pos * g;
			char g_[64], af_[64];

			cs = cos(angle);
			sn = sin(angle);
			if (af != 1) {
				cs *= af;
				sn *= af;
			}
			format_number(g_, sizeof(g_), g, p);
			format_number(af_, sizeof(af_), af, p);
			format_number(a, sizeof(a), angle, p);
			format_number(b, sizeof(b), cs, p);
			format_number(c, sizeof(c), sn, p);
			fprintf(fp, "      %c pair %zu (features %zu, %zu): frequency %s (scaled), angle = "
				"%td*%s = %s, cos = %s%s%s, sin = %s%s%s\n", who, t + 1, col0 + i1 + 1,
				col0 + i2 + 1, g_, pos, g_, a, af != 1 ? af_ : "",
				af != 1 ? "*cos(angle) = " : "", b, af != 1 ? af_ : "",
				af != 1 ? "*sin(angle) = " : "", c);
		}
		factor(a, sizeof(a), x[i1], p);
		factor(b, sizeof(b), x[i2], p);
		factor(c, sizeof(c), cs, p);
		factor(s_, sizeof(s_), sn, p);
		format_number(t_, sizeof(t_), xr[i1], p);
		fprintf(fp, "        %s*%s - %s*%s = %s", a, c, b, s_, t_);
		format_number(t_, sizeof(t_), xr[i2], p);
		fprintf(fp, ",  %s*%s + %s*%s = %s\n", a, s_, b, c, t_);
	}
	if (R < dk)
		fprintf(fp, "      features %zu to %zu pass through\n", R + 1, dk);
}

/* The entry (i, j) of one head, by hand. */
static void work_cell(FILE *fp, const struct explain *e, const struct explain_head *hd, size_t h)
{
	const size_t i = e->cell_i, j = e->cell_j, n_kv = e->d->n_kv, dk = e->d->d_k, dv = e->d->d_v;
	const double *q = hd->s.q->v + i * dk, *k = hd->s.k->v + j * dk;
	const double *row = hd->s.masked->v + i * n_kv, *w = hd->s.softmax->v + i * n_kv;
	const int p = e->precision;
	const double *sinks = e->cfg->sinks;
	char a[64], b[64], c[64], li[256], lj[256];
	double mx = -INFINITY, sum = 0;
	const char *largest;
	size_t terms;

	label(e->q_labels, i, li, sizeof(li));
	label(e->k_labels, j, lj, sizeof(lj));
	fprintf(fp, "  Query %s and key %s, head %zu, by hand:\n", li, lj, h + 1);
	if (e->cfg->mla.on) {
		/* latent attention: the score is the unturned parts' product plus the turned ones' */
		const size_t dr = e->cfg->mla.d_rope, dn = dk - dr;
		double nope = 0, pe = 0;

		for (size_t t = 0; t < dk; t++)
			*(t < dn ? &nope : &pe) += q[t] * k[t];
		format_number(a, sizeof(a), nope, p);
		format_number(b, sizeof(b), pe, p);
		fprintf(fp, "    q%zu = [q_nope, q_pe_rot] and k%zu = [k_nope, k_pe_rot] of head %zu:\n"
			"      q_nope . k_nope = %s (content: features 1 to %zu), q_pe_rot . k_pe_rot = "
			"%s (position: features %zu to %zu)\n", i + 1, j + 1, h + 1, a, dn, b, dn + 1,
			dk);
	}
	if (e->cfg->norm.kind && e->Q && e->K) {
		work_norm(fp, e, 1, i, h * dk, e->Q->v + i * e->Q->dim[1]);
		work_norm(fp, e, 0, j, hd->kv_head * dk, e->K->v + j * e->K->dim[1]);
	}
	if (e->cfg->rope.mode && !e->cfg->mla.on && e->Q && e->K) {
		/* the rows before the rotation: this head's block of Q (normalised with a
		 * norm), its kv head's of K */
		const matrix *qs = e->q_norm ? e->q_norm : e->Q, *ks = e->k_norm ? e->k_norm : e->K;
		const size_t ldq = qs->dim[1], ldk = ks->dim[1];

		work_rotation(fp, e, 1, i, h * dk, qs->v + i * ldq + h * dk, q);
		work_rotation(fp, e, 0, j, hd->kv_head * dk, ks->v + j * ldk + hd->kv_head * dk, k);
	}
	fprintf(fp, "    score   = q%zu . k%zu =", i + 1, j + 1);
	for (size_t t = 0; t < dk; t++) {
		factor(a, sizeof(a), q[t], p);
		factor(b, sizeof(b), k[t], p);
		if (t == MAX_TERMS && dk > MAX_TERMS + 1) {
			fprintf(fp, " + … (%zu terms in all)", dk);
			break;
		}
		fprintf(fp, "%s %s*%s", t ? " +" : "", a, b);
	}
	format_number(a, sizeof(a), hd->s.scores->v[i * n_kv + j], p);
	fprintf(fp, " = %s\n", a);
	factor(b, sizeof(b), e->scale, p);
	format_number(c, sizeof(c), hd->s.scaled->v[i * n_kv + j], p);
	fprintf(fp, "    scaled  = %s * %s = %s\n", a, b, c);
	if (hd->s.softcapped) {
		format_number(a, sizeof(a), e->cfg->softcap, p);
		format_number(b, sizeof(b), hd->s.softcapped->v[i * n_kv + j], p);
		fprintf(fp, "    softcap = %s*tanh(%s/%s) = %s\n", a, c, a, b);
	}
	if (hd->mask) {
		const double mk = hd->mask->v[i * n_kv + j];

		format_number(a, sizeof(a), mk, p);
		format_number(b, sizeof(b), row[j], p);
		if (mk == -INFINITY) {
			fprintf(fp, "    mask    = -inf: query %zu may not see key %zu, so masked = -inf\n",
				i + 1, j + 1);
		} else if (e->alibi_slopes) {
			/* ALiBi's term, keys and positions counted from 1 as everywhere here */
			const long long pos = (long long)i + 1 + (long long)query_offset(e);
			const double term = e->alibi_slopes[h] * ((double)j + 1 - (double)pos);

			factor(c, sizeof(c), e->alibi_slopes[h], p);
			fprintf(fp, "    ALiBi   = slope*(j - p) = %s*(%zu - %lld) = ", c, j + 1, pos);
			format_number(c, sizeof(c), term, p);
			fputs(c, fp);
			if (e->mask_file) {
				format_number(c, sizeof(c), mk - term, p);
				fprintf(fp, "\n    mask    = %s (the mask file) + ALiBi = %s, so masked = %s\n",
					c, a, b);
			} else {
				fprintf(fp, "\n    mask    = %s, so masked = %s\n", a, b);
			}
		} else {
			fprintf(fp, "    mask    = %s, so masked = %s\n", a, b);
		}
	}
	for (size_t t = 0; t < n_kv; t++)
		if (row[t] > mx)
			mx = row[t];
	if (mx == -INFINITY) {
		fprintf(fp, "    softmax: every key is masked for query %zu: its weights are all 0, "
			"and so is its output row\n", i + 1);
		return;
	}
	/* "masked" only when a mask was added */
	largest = hd->mask ? "largest masked score" : "largest score";
	if (sinks) {
		/* the sink joins the denominator, never the weights */
		const double sk = sinks[h];

		format_number(a, sizeof(a), mx, p);
		format_number(b, sizeof(b), sk, p);
		if (sk > mx)
			mx = sk;
		format_number(c, sizeof(c), mx, p);
		fprintf(fp, "    softmax: the %s in row %zu is %s and the sink is %s, so m = %s;\n",
			largest, i + 1, a, b, c);
		sum = exp(sk - mx);
		format_number(b, sizeof(b), sum, p);
		fputs("      sum = exp(sink - m) + ", fp);
		terms = 1 + n_kv;
	} else {
		format_number(a, sizeof(a), mx, p);
		fprintf(fp, "    softmax: the %s in row %zu is m = %s;\n", largest, i + 1, a);
		fputs("      sum = ", fp);
		terms = n_kv;
	}
	/* the terms named, then their values, every one (a masked key's is 0) */
	if (n_kv <= 4)
		for (size_t t = 0; t < n_kv; t++)
			fprintf(fp, "%sexp(x_%zu - m)", t ? " + " : "", t + 1);
	else
		fprintf(fp, "exp(x_1 - m) + exp(x_2 - m) + … + exp(x_%zu - m)", n_kv);
	if (terms > 1) {
		fputs(" =", fp);
		if (sinks)
			fprintf(fp, " %s +", b);
	}
	for (size_t t = 0; t < n_kv; t++) {
		const double ex = row[t] == -INFINITY ? 0 : exp(row[t] - mx);

		sum += ex;
		if (terms == 1 || t > MAX_SUM_TERMS)
			continue;
		if (t == MAX_SUM_TERMS) {
			fprintf(fp, " + … (%zu terms in all)", n_kv);
			continue;
		}
		format_number(b, sizeof(b), ex, p);
		fprintf(fp, "%s %s", t ? " +" : "", b);
	}
	format_number(b, sizeof(b), sum, p);
	fprintf(fp, " = %s\n", b);
	if (row[j] == -INFINITY) {
		fprintf(fp, "      weight %zu,%zu = 0 (masked)\n", i + 1, j + 1);
		return;
	}
	format_number(a, sizeof(a), exp(row[j] - mx), p);
	format_number(c, sizeof(c), w[j], p);
	fprintf(fp, "      weight %zu,%zu = exp(%s - m) / sum = %s / %s = %s\n", i + 1, j + 1,
		(format_number(lj, sizeof(lj), row[j], p), lj), a, b, c);
	fprintf(fp, "    output: row %zu of the head's output is the weighted sum of V%zu's rows;"
		" key %zu adds %s * [", i + 1, hd->kv_head + 1, j + 1, c);
	for (size_t t = 0; t < dv && t < MAX_TERMS; t++) {
		format_number(a, sizeof(a), hd->s.v->v[j * dv + t], p);
		fprintf(fp, "%s%s", t ? ", " : "", a);
	}
	fprintf(fp, "%s] = [", dv > MAX_TERMS ? ", …" : "");
	for (size_t t = 0; t < dv && t < MAX_TERMS; t++) {
		format_number(a, sizeof(a), w[j] * hd->s.v->v[j * dv + t], p);
		fprintf(fp, "%s%s", t ? ", " : "", a);
	}
	fprintf(fp, "%s]\n", dv > MAX_TERMS ? ", …" : "");
}

int explain_write(FILE *fp, const struct explain *e)
{
	const mha_dims *d = e->d;
	const size_t G = d->kv_heads ? d->kv_heads : d->heads, per = d->heads / G;
	char s1[48], s2[48], s3[48];
	int step = 1;

	if (e->cell_alone) {
		for (size_t h = 0; h < d->heads; h++) {
			if (h)
				fputc('\n', fp);
			work_cell(fp, e, &e->heads[h], h);
		}
		return ferror(fp) ? -1 : 0;
	}
	fprintf(fp, "Multi-head attention, step by step: %zu quer%s, %zu key%s, %zu head%s",
		d->n_q, d->n_q == 1 ? "y" : "ies", d->n_kv, d->n_kv == 1 ? "" : "s", d->heads,
		d->heads == 1 ? "" : "s");
	if (G != d->heads)
		fprintf(fp, " sharing %zu key/value head%s", G, G == 1 ? "" : "s");
	fprintf(fp, " of d_k = %zu, d_v = %zu.\n", d->d_k, d->d_v);

	if (e->x) {
		fprintf(fp, "\nStep %d. The input X, one row per token %s\n", step++,
			(shape(s1, sizeof(s1), e->x), s1));
		table(fp, e->x, e->q_labels, NULL, e);
	}
	if (e->cfg->mla.on) {
		const mha_mla *m = &e->cfg->mla;

		fprintf(fp, "\nStep %d. Multi-head latent attention (DeepSeek's MLA), %s form: the "
			"latents, and each head's two parts\n", step++,
			m->absorbed ? "in the absorbed" : "in its expanded");
		fprintf(fp, "  Each token's keys and values come from one latent c_kv of %zu features; "
			"each head's query and key have %zu features, the first %zu from the latents "
			"(nope: not turned) and the last %zu turned by position (pe), the key's pe shared "
			"by every head.%s\n", m->kv_rank, d->d_k, d->d_k - m->d_rope, m->d_rope,
			m->absorbed ? "  Absorbed: kv_b_proj's key block is folded into each head's "
			"query and its value block into W_O, so the heads attend over the latent itself "
			"(one key [c_kv_norm, k_pe_rot] and one value c_kv_norm for every head); the "
			"output is the same to rounding." : "");
		for (size_t s = 0; s < sizeof(e->latent) / sizeof(e->latent[0]); s++) {
			const int key = s >= (size_t)(STEP_C_KV - STEP_C_Q);

			if (!e->latent[s])
				continue;
			fprintf(fp, "  %s %s\n", e->latent_formula[s],
				(shape(s1, sizeof(s1), e->latent[s]), s1));
			table(fp, e->latent[s], key ? e->k_labels : e->q_labels, NULL, e);
		}
	}
	fprintf(fp, "\nStep %d. The queries, keys and values\n", step++);
	fprintf(fp, "  %s %s\n", e->q_formula, (shape(s1, sizeof(s1), e->Q), s1));
	table(fp, e->Q, e->q_labels, NULL, e);
	fprintf(fp, "  %s %s\n", e->k_formula, (shape(s1, sizeof(s1), e->K), s1));
	table(fp, e->K, e->k_labels, NULL, e);
	fprintf(fp, "  %s %s\n", e->v_formula, (shape(s1, sizeof(s1), e->V), s1));
	table(fp, e->V, e->k_labels, NULL, e);
	if (e->q_norm && e->k_norm) {
		const mha_qk_norm *n = &e->cfg->norm;
		char how[96];

		fprintf(fp, "\nStep %d. Q and K normalised, %s\n", step++,
			n->over_all ? "each row whole" : "each head's block of a row on its own");
		fprintf(fp, "  %s, the mean%s over the %s; w the weights, one per feature.  The scores "
			"then stay in a range whatever the size of Q and K.\n",
			step_norm_formula(how, sizeof(how), n),
			n->kind == MHA_NORM_LAYER ? " and variance" : " of the squares",
			n->over_all ? "whole row" : "head's d_k features");
		fprintf(fp, "  %s %s\n", e->q_norm_formula, (shape(s1, sizeof(s1), e->q_norm), s1));
		table(fp, e->q_norm, e->q_labels, NULL, e);
		fprintf(fp, "  %s %s\n", e->k_norm_formula, (shape(s1, sizeof(s1), e->k_norm), s1));
		table(fp, e->k_norm, e->k_labels, NULL, e);
	}
	if (e->q_rot && e->k_rot) {
		const mha_rope *rp = &e->cfg->rope;
		const size_t R = rp->dim ? rp->dim : d->d_k;

		fprintf(fp, "\nStep %d. Rotary embeddings: each head's Q and K turn by position\n",
			step++);
		fprintf(fp, "  The first %zu of each head's %zu features form %zu pair%s (%s); pair t of "
			"the row at position p turns by %s: (x1, x2) becomes (x1*cos - x2*sin, "
			"x1*sin + x2*cos)%s.  A score then depends on the query's and the key's "
			"positions only through their difference.\n", R, d->d_k, R / 2, R / 2 == 1 ? "" : "s",
			rp->mode == MHA_ROPE_HALF ? "feature t with t+R/2" : "feature 2t-1 with 2t",
			rp->cos ? "the angle whose cos and sin row p of the tables gives"
			: rp->scaling.type ? "the angle p*g_t, g_t the frequency theta^(-2(t-1)/R) as "
					     "rope_scaling scales it (cos and sin then times its "
					     "attention factor)"
				: "the angle p*theta^(-2(t-1)/R)",
			R < d->d_k ? "; the other features pass through" : "");
		fprintf(fp, "  %s %s\n", e->q_rot_formula, (shape(s1, sizeof(s1), e->q_rot), s1));
		table(fp, e->q_rot, e->q_labels, NULL, e);
		fprintf(fp, "  %s %s\n", e->k_rot_formula, (shape(s1, sizeof(s1), e->k_rot), s1));
		table(fp, e->k_rot, e->k_labels, NULL, e);
	}

	for (size_t h = 0; h < d->heads; h++) {
		const struct explain_head *hd = &e->heads[h];
		const size_t g = h / per;

		fprintf(fp, "\nStep %d. Head %zu of %zu: columns %zu to %zu of %s, and of %s and V "
			"columns %zu to %zu (key/value head %zu)\n", step++, h + 1, d->heads,
			h * d->d_k + 1, (h + 1) * d->d_k, e->q_rot ? "q_rot" : e->q_norm ? "q_norm" : "Q",
			e->k_rot ? "k_rot" : e->k_norm ? "k_norm" : "K", g * d->d_k + 1, (g + 1) * d->d_k,
			g + 1);
		shape(s1, sizeof(s1), hd->s.q);
		shape(s2, sizeof(s2), hd->s.k);
		shape(s3, sizeof(s3), hd->s.scores);
		fprintf(fp, "  scores = Q%zu*K%zu^T: %s times %s transposed -> %s; entry i,j is query i's "
			"dot product with key j\n", h + 1, g + 1, s1, s2, s3);
		table(fp, hd->s.scores, e->q_labels, e->k_labels, e);
		fprintf(fp, "  scaled = scores * %s\n", e->scale_how);
		table(fp, hd->s.scaled, e->q_labels, e->k_labels, e);
		if (hd->s.softcapped) {
			format_number(s1, sizeof(s1), e->cfg->softcap, e->precision);
			fprintf(fp, "  softcapped = %s*tanh(scaled/%s): large scores are squashed below %s\n",
				s1, s1, s1);
			table(fp, hd->s.softcapped, e->q_labels, e->k_labels, e);
		}
		if (hd->mask && e->alibi_slopes) {
			/* ALiBi: the mask differs by head, so it is shown too */
			const ptrdiff_t off = query_offset(e);

			if (off)
				snprintf(s2, sizeof(s2), "i %c %td", off < 0 ? '-' : '+',
					 off < 0 ? -off : off);
			else
				snprintf(s2, sizeof(s2), "i");
			format_number(s1, sizeof(s1), e->alibi_slopes[h], e->precision);
			fputs("  the mask (", fp);
			text_put(fp, e->mask_how ? e->mask_how : "none");
			fprintf(fp, "): -inf where query i may not see key j; where it may, %s"
				"ALiBi's slope*(j - p), this head's slope %s, p = %s the query's "
				"position\n", e->mask_file ? "the mask file's number plus " : "", s1, s2);
			table(fp, hd->mask, e->q_labels, e->k_labels, e);
			fprintf(fp, "  masked = %s + mask\n", hd->s.softcapped ? "softcapped" : "scaled");
			table(fp, hd->s.masked, e->q_labels, e->k_labels, e);
		} else if (hd->mask) {
			/* mask_how names the mask's file: shown as text */
			fputs("  the mask (", fp);
			text_put(fp, e->mask_how ? e->mask_how : "none");
			fprintf(fp, "): 0 where query i may see key j, -inf where it may not; masked = "
				"%s + mask\n", hd->s.softcapped ? "softcapped" : "scaled");
			table(fp, hd->s.masked, e->q_labels, e->k_labels, e);
		}
		if (e->cfg->sinks) {
			char sk[64];

			format_number(sk, sizeof(sk), e->cfg->sinks[h], e->precision);
			fprintf(fp, "  softmax with the head's sink s = %s, row by row: weight i,j = "
				"exp(x_ij - m_i) / (exp(s - m_i) + sum over k of exp(x_ik - m_i)), "
				"m_i the larger of the row's largest and s; each row sums to less "
				"than 1, the sink takes the rest\n", sk);
		} else {
			fprintf(fp, "  softmax, row by row: weight i,j = exp(x_ij - m_i) / sum over k "
				"of exp(x_ik - m_i), m_i the row's largest; each row sums to 1\n");
		}
		table(fp, hd->s.softmax, e->q_labels, e->k_labels, e);
		shape(s1, sizeof(s1), hd->s.softmax);
		shape(s2, sizeof(s2), hd->s.v);
		shape(s3, sizeof(s3), hd->s.out);
		fprintf(fp, "  output = softmax*V%zu: %s times %s -> %s; each row is a weighted average "
			"of V%zu's rows\n", g + 1, s1, s2, s3, g + 1);
		table(fp, hd->s.out, e->q_labels, NULL, e);
		if (e->has_cell) {
			fputc('\n', fp);
			work_cell(fp, e, hd, h);
		}
	}
	if (d->heads > 1) {
		fprintf(fp, "\nStep %d. concat: the heads' outputs side by side %s\n", step++,
			(shape(s1, sizeof(s1), e->concat), s1));
		table(fp, e->concat, e->q_labels, NULL, e);
	}
	if (e->out_formula) {
		fprintf(fp, "\nStep %d. %s %s\n", step++, e->out_formula,
			(shape(s1, sizeof(s1), e->output), s1));
		table(fp, e->output, e->q_labels, NULL, e);
	} else {
		fprintf(fp, "\nNo W_O: the output is %s.\n", d->heads > 1 ? "the concatenation"
								: "the head's output");
	}
	return ferror(fp) ? -1 : 0;
}

int explain_steps(FILE *fp, const struct step_items *list, const struct step_facts *f,
		  const char *const *q_labels, const char *const *k_labels, const size_t *cell,
		  int cell_alone, int precision, int full)
{
	const mha_dims *d = f->d;
	struct explain_head *heads = calloc(d->heads, sizeof(*heads));
	struct step_head *own = calloc(d->heads, sizeof(*own));
	matrix *planes = calloc(d->heads, sizeof(*planes)); /* each head's view of the mask */
	const matrix *mask = NULL;
	const char *output_title = NULL;
	char how[96], mask_how[200];
	struct explain e = { .d = d, .cfg = f->cfg, .scale = f->scale, .scale_how = how,
			     .q_labels = q_labels, .k_labels = k_labels, .precision = precision,
			     .full = full };

	if (!heads || !own || !planes) {
		free(heads);
		free(own);
		free(planes);
		return error("out of memory");
	}
	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];

		if (it->head)
			continue; /* the heads' own: steps_heads, below */
		switch (it->step) {
		case STEP_X: e.x = it->m; break;
		case STEP_Q: e.Q = it->m; e.q_formula = it->title; break;
		case STEP_K: e.K = it->m; e.k_formula = it->title; break;
		case STEP_V: e.V = it->m; e.v_formula = it->title; break;
		case STEP_Q_NORM: e.q_norm = it->m; e.q_norm_formula = it->title; break;
		case STEP_K_NORM: e.k_norm = it->m; e.k_norm_formula = it->title; break;
		case STEP_Q_ROT: e.q_rot = it->m; e.q_rot_formula = it->title; break;
		case STEP_K_ROT: e.k_rot = it->m; e.k_rot_formula = it->title; break;
		case STEP_MASK: mask = it->m; break;
		case STEP_C_Q: case STEP_C_Q_NORM: case STEP_Q_NOPE: case STEP_Q_PE: case STEP_Q_PE_ROT:
		case STEP_C_KV: case STEP_C_KV_NORM: case STEP_K_PE: case STEP_K_PE_ROT: case STEP_K_NOPE:
			e.latent[it->step - STEP_C_Q] = it->m;
			e.latent_formula[it->step - STEP_C_Q] = it->title;
			break;
		case STEP_CONCAT: e.concat = it->m; break;
		case STEP_OUTPUT: e.output = it->m; output_title = it->title; break;
		default: break;
		}
	}
	steps_heads(list, own, d->heads);
	for (size_t h = 0; h < d->heads; h++) {
		struct explain_head *x = &heads[h];

		x->s = own[h];
		x->kv_head = h / (d->heads / d->kv_heads);
		/* no mask: the softmax is of the softcapped scores, or the scaled ones */
		x->s.masked = x->s.masked ? x->s.masked : x->s.softcapped ? x->s.softcapped : x->s.scaled;
		if (mask) {
			planes[h] = step_plane(mask, h);
			x->mask = &planes[h];
		}
	}
	step_scale_words(how, sizeof(how), f);
	steps[STEP_MASK].title(mask_how, sizeof(mask_how), &steps[STEP_MASK], f, 0);
	e.mask_how = strchr(mask_how, ':') + 2; /* "mask (added to the scores): causal" */
	e.mask_file = f->mask_file;
	e.alibi_slopes = f->cfg->alibi.on ? f->alibi_slopes : NULL;
	e.out_formula = (f->weights >> WO) & 1 ? output_title : NULL;
	e.heads = heads;
	if (cell) {
		e.has_cell = 1;
		e.cell_alone = cell_alone;
		e.cell_i = cell[0];
		e.cell_j = cell[1];
	}
	(void)explain_write(fp, &e); /* a write error is fp's to report, with its name */
	free(heads);
	free(own);
	free(planes);
	return 0;
}

/*
 * backward.c: the backward pass with the steps asked for kept
 * (backward.h): backward's --print names, the run's memory checked,
 * mha_backward watched by an observer keeping each step, each sequence's
 * steps titled in order.
 */
#include "run/backward.h"
#include "load/weights.h"
#include "run/run.h"
#include "util/msg.h"
#include "util/opts.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* the library's stage of step s, whole or per head, or -1: a result of the run */
static int grad_stage(int s)
{
	return grad_steps[s].stage >= 0 ? grad_steps[s].stage : grad_steps[s].head_stage;
}

static int is_per_head(int s)
{
	return grad_steps[s].head_stage >= 0;
}

/* every step with that --print name (dQ: the whole and each head's); 0 if none */
static unsigned long long steps_named(const char *name)
{
	unsigned long long bits = 0;

	if (!strcasecmp(name, "all"))
		return ~0ull >> (64 - GS_COUNT);
	for (int s = 0; s < GS_COUNT; s++)
		if (!strcasecmp(name, step_key(&grad_steps[s])) || (!strcasecmp(name, "heads") && is_per_head(s)))
			bits |= GS_BIT(s);
	return bits;
}

/* "grad_output, dconcat, P, …": the --print names, into buf */
static const char *bstep_names(char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int s = 0; s < GS_COUNT && used < size; s++) {
		int n;

		if (s == GS_DQ || s == GS_DK || s == GS_DV)
			continue; /* named with the heads' */
		n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", step_key(&grad_steps[s]));
		used += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

int backward_steps_asked(const struct backward_ask *r, const struct problem_spec *s,
			 unsigned long long *asked, int *all)
{
	char known[400];

	*asked = 0;
	*all = r->explain;
	if (r->print && !r->explain) {
		char *copy = strdup(r->print), *save = NULL;
		int rc = 0;

		if (!copy)
			return error("out of memory");
		bstep_names(known, sizeof(known));
		for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
			const unsigned long long bits = steps_named(tok);
			const char *names[GS_COUNT + 2];

			if (!bits) {
				const char *near;

				for (int k = 0; k < GS_COUNT; k++)
					names[k] = step_key(&grad_steps[k]);
				names[GS_COUNT] = "all";
				names[GS_COUNT + 1] = "heads";
				near = closest_name(tok, names, GS_COUNT + 2);
				if (near)
					usage_error(r->hint, "--print: unknown step '%s': did you mean '%s'?",
						    tok, near);
				else
					usage_error(r->hint, "--print: unknown step '%s' (known: %s, heads, all)",
						    tok, known);
				rc = -1;
			}
			*asked |= bits;
			*all |= !strcasecmp(tok, "all");
		}
		free(copy);
		if (rc)
			return -1;
		if (!*asked)
			return usage_error(r->hint, "--print needs at least one step (%s, heads, all)",
					   known), -1;
		if ((*asked & GS_BIT(GS_DSCALED)) && !*all && !(s->cfg.softcap > 0))
			return usage_error(r->hint, "--print dscaled needs --softcap"), -1;
		if ((*asked & (GS_BIT(GS_DQ_ROT) | GS_BIT(GS_DK_ROT))) && !*all && !s->cfg.rope.mode)
			return usage_error(r->hint, "--print %s needs --rope",
					   *asked & GS_BIT(GS_DQ_ROT) ? "dq_rot" : "dk_rot"), -1;
	}
	if (!*asked && !*all) {
		for (int k = 0; k < GS_COUNT; k++)
			if ((grad_steps[k].flags & STEP_DEFAULT))
				*asked |= GS_BIT(k);
		/* Q, K and V given: theirs are the inputs' gradients */
		if (s->q)
			*asked |= GS_BIT(GS_DQ) | GS_BIT(GS_DK) | GS_BIT(GS_DV);
	}
	if (*all)
		*asked = ~0ull >> (64 - GS_COUNT);
	if (r->f32)
		/* float32 keeps no step: only the gradients themselves (Q, K, V's given) */
		for (int k = 0; k < GS_COUNT; k++)
			if ((*asked & GS_BIT(k)) && grad_stage(k) >= 0 &&
			    !(s->q && (k == GS_DQ || k == GS_DK || k == GS_DV)))
				return usage_error(r->hint, "--dtype f32 prints the gradients only: "
						   "%s is shown in float64 (leave out --dtype)",
						   *all ? "--print all" : step_key(&grad_steps[k])), -1;
	return 0;
}


/* Where the run's inputs come from, and which steps it has. */
struct bfacts {
	struct step_facts sf; /* what step_exists reads */
	int direct, kv, apart; /* Q, K, V given; --kv; --xk and --xv */
};

static int run_has(const struct bfacts *f, int s)
{
	return step_exists(&grad_steps[s], &f->sf);
}

int backward_steps(struct backward_run *br, struct problem *p, const struct backward_ask *r,
		   unsigned long long asked)
{
	const mha_dims *d = &p->d;
	const size_t B = problem_sequences(p), G = d->kv_heads ? d->kv_heads : d->heads;
	const size_t out_cols = mha_output_cols(d, weights_has(&p->w, WO));
	const size_t hk = d->heads * d->d_k, gk = G * d->d_k, gv = G * d->d_v, hv = d->heads * d->d_v;
	struct bfacts f = { .direct = p->direct, .kv = p->spec.kv != NULL,
			    .apart = p->spec.xk != NULL };
	struct run_grads *gr = &br->gr;
	struct step_results *keep = NULL;
	struct step_items *lists = NULL;
	matrix *res = NULL, *dout = &br->dout;
	struct steps_batch keeper;
	mha_grad_observer obs;
	mha_report *rep = &br->rep;
	struct step_facts *facts = &br->facts;
	mha_status st;
	mha_stages wanted = 0;
	unsigned long long shown = 0; /* those asked for that the run has */
	int rc = -1;

	memset(br, 0, sizeof(*br));
	br->rep = (mha_report)MHA_INIT(mha_report);
	br->B = B;
	problem_facts(p, 0, &f.sf);
	/* the stages the steps asked for need */
	for (int s = 0; s < GS_COUNT; s++)
		if ((asked & GS_BIT(s)) && grad_stage(s) >= 0 && run_has(&f, s))
			wanted |= MHA_STAGE_SET(grad_stage(s));
	if (r->explain || r->has_cell)
		wanted |= MHA_STAGE_SET(MHA_GRAD_HEAD_P) | MHA_STAGE_SET(MHA_GRAD_HEAD_O) |
			  MHA_STAGE_SET(MHA_GRAD_HEAD_DO) | MHA_STAGE_SET(MHA_GRAD_HEAD_DP) |
			  MHA_STAGE_SET(MHA_GRAD_HEAD_D) | MHA_STAGE_SET(MHA_GRAD_HEAD_DS);
	if (p->spec.grad_output) {
		const char *was = msg_key("grad-output"); /* the setting at fault */
		const int bad = run_grad_output(dout, p, r->sequence, out_cols);

		msg_key(was);
		if (bad)
			goto done;
	}
	{
		/* the library's scratch, with the ones, and the observer's copies, beside what is held */
		const size_t per = mha_backward_memory_stages(d, &p->cfg, wanted);
		size_t copies = 0, need;
		struct run_need n = { .who = "this run",
				      .advice = "print fewer steps, or raise --max-memory" };

		/* each watched stage at most (n_q, n_kv) or a whole projection's size,
		 * a head stage once per head; sizes fit (mha_check saw them) */
		for (int s = 0; s < MHA_GRAD_COUNT; s++)
			if (wanted & MHA_STAGE_SET(s)) {
				const int per_head = s >= MHA_GRAD_HEAD_P && s <= MHA_GRAD_HEAD_DK;
				const double big = ((double)d->n_q * (double)d->n_kv +
						    (double)(d->n_q + d->n_kv) * (double)(hk + hv + gk + gv)) *
						   (per_head ? (double)d->heads : 1.0);

				copies = (double)copies + big < (double)(SIZE_MAX / 16) ? copies + (size_t)big
											   : SIZE_MAX / 16;
			}
		need = per == SIZE_MAX || copies > SIZE_MAX / 8 / B ? SIZE_MAX : per + copies * 8 * B +
		       d->n_q * out_cols * 8;
		if (r->f32 && need != SIZE_MAX) {
			/* the floats made here: the inputs, weights and dO, and as many
			 * gradients (sizes fit, as above); the library's float run needs no
			 * more than mha_backward_memory's doubles */
			const double each = (double)B * (double)(d->n_q * d->d_q_in + d->n_kv * d->d_k_in +
								d->n_kv * d->d_v_in) +
					    (double)(d->d_q_in * hk + d->d_k_in * gk + d->d_v_in * gv +
						     hv * d->d_out + hk + gk + gv + d->d_out + d->heads);
			double lat = 0, more;

			for (int i = 0; i < N_LATENT; i++)
				lat += (double)matrix_size(&p->latent[i]);
			more = 4.0 * (2.0 * (each + lat) + (double)B * (double)(d->n_q * out_cols));

			need = more < (double)(SIZE_MAX / 2 - need) ? need + (size_t)more : SIZE_MAX;
		}
		n.bytes[0] = need;
		if (run_check_memory(&n))
			goto done;
	}
	keep = br->keep = calloc(B, sizeof(*keep));
	lists = br->lists = calloc(B, sizeof(*lists));
	res = br->res = calloc(B * GS_COUNT, sizeof(*res));
	if (!keep || !lists || !res) {
		error("out of memory");
		goto done;
	}
	for (size_t b = 0; b < B; b++)
		keep[b] = (struct step_results){ .table = grad_steps, .n = GS_COUNT, .heads = d->heads,
						 .item_base = 1000, .only_held = 1 };
	keeper = (struct steps_batch){ .res = keep };
	obs = (mha_grad_observer){ .size = sizeof(mha_grad_observer), .fn = steps_batch_keep_grad,
				   .ctx = &keeper, .stages = wanted, .sequence = steps_batch_sequence };
	if (problem_backward(gr, p, NULL, NULL, NULL, dout, &obs, r->f32, rep,
			     &st))
		goto done;
	if (st == MHA_ERR_OBSERVER)
		goto done; /* said */
	if (st == MHA_ERR_RANGE) {
		error("the numbers overflow: Q, K, V, the scores, a head's output or a gradient went "
		      "past the largest %s; scale the inputs%s down",
		      r->f32 ? "float (about 3.4e38)" : "double (about 1.8e308)",
		      p->spec.grad_output ? " or --grad-output" : "");
		goto done;
	}
	if (st != MHA_OK) {
		error("%s", mha_strerror(st));
		goto done;
	}
	if (rep->blocked_rows)
		warning("%zu query row%s (the first: %shead %d, row %zu) %s every key masked: %s "
			"weights, output and gradients are zero", rep->blocked_rows,
			rep->blocked_rows == 1 ? "" : "s", "", rep->first_blocked_head + 1,
			rep->first_blocked_row + 1, rep->blocked_rows == 1 ? "has" : "have",
			rep->blocked_rows == 1 ? "its" : "their");
	problem_facts(p, rep->scale, facts);
	facts->shared = gr->shared;
	for (int k = 0; k < GS_COUNT; k++)
		if ((asked & GS_BIT(k)) && run_has(&f, k))
			shown |= GS_BIT(k);
	for (size_t b = 0; b < B; b++) {
		matrix *rb = &res[b * GS_COUNT];
		const matrix *given[STEP_MAX] = { 0 };

		run_grads_plane(gr, p, b, rb);
		/* the results; Q, K and V given: theirs are the inputs' gradients */
		for (int i = GS_DX; i < GS_COUNT; i++)
			given[i] = &rb[i];
		for (int i = GS_DQ; f.direct && i <= GS_DV; i++)
			given[i] = &rb[i];
		if (steps_collect_given(&lists[b], &keep[b], shown, facts, given))
			goto done;
	}
	rc = 0;
done:
	return rc;
}

void backward_steps_free(struct backward_run *br)
{
	for (size_t b = 0; br->keep && b < br->B; b++)
		steps_results_free(&br->keep[b]);
	for (size_t b = 0; br->lists && b < br->B; b++)
		steps_items_free(&br->lists[b]);
	free(br->keep);
	free(br->lists);
	free(br->res);
	matrix_free(&br->dout);
	run_grads_free(&br->gr);
	memset(br, 0, sizeof(*br));
}

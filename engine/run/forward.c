/*
 * forward.c: the forward run with the steps asked for kept (forward.h):
 * the steps a run of this problem has checked against those asked, the
 * observer that keeps them, the computation, and each sequence's steps
 * titled in order.
 */
#include "run/forward.h"
#include "run/run.h"
#include "util/msg.h"

#include <stdlib.h>
#include <string.h>

/* m's values rounded to type p, into to (doubles): 0, or -1 said */
static int copy_rounded(matrix *to, const matrix *m, mha_precision p)
{
	const size_t n = matrix_size(m);

	if (matrix_alloc_dims(to, m->rank, m->dim))
		return -1;
	for (size_t i = 0; i < n; i++)
		to->v[i] = mha_lowp_round(m->v ? m->v[i] : m->f[i], p);
	return 0;
}

int forward_steps(struct forward_run *fr, const struct problem *pb, const struct forward_ask *ask)
{
	struct step_results *res;
	struct steps_batch keep;
	struct step_facts *f = &fr->f, *fs;
	mha_config *cfgs;
	mha_observer obs;
	matrix *x, *outs;
	struct step_items *lists, *printed;
	size_t B;
	unsigned p;

	memset(fr, 0, sizeof(*fr));
	fr->rep = (mha_report)MHA_INIT(mha_report);
	/* a norm comes from the options or the checkpoint's family: known now */
	if ((ask->print & (STEP_BIT(STEP_Q_NORM) | STEP_BIT(STEP_K_NORM))) && !pb->cfg.norm.kind)
		return usage_error(ask->hint, "--print %s needs a q/k norm: --norm, --q-norm and "
				   "--k-norm, or a checkpoint whose family normalises",
				   ask->print & STEP_BIT(STEP_Q_NORM) ? "q_norm" : "k_norm");
	/* latent attention's steps, each where the run makes it (known now, too) */
	for (int s = STEP_C_Q; s <= STEP_K_NOPE; s++)
		if ((ask->print & STEP_BIT(s)) && !ask->print_all && !ask->every &&
		    !step_exists(&steps[s], &(struct step_facts){ .cfg = &pb->cfg }))
			return usage_error(ask->hint, "--print %s needs multi-head latent attention%s",
					   steps[s].name, !pb->cfg.mla.on ? " (--kv-b-proj and the rest)"
					   : steps[s].when == WHEN_MLA_Q ? " with --q-a-proj"
					   : steps[s].when == WHEN_MLA_ROPE ? " with --rope"
					   : " in its expanded form (not --absorb)");
	if ((ask->print & (STEP_BIT(STEP_Q_ROT) | STEP_BIT(STEP_K_ROT))) && !ask->print_all &&
	    !ask->every && pb->cfg.mla.on)
		return usage_error(ask->hint, "--print %s: multi-head latent attention turns only "
				   "part of each head: print q_pe_rot and k_pe_rot",
				   ask->print & STEP_BIT(STEP_Q_ROT) ? "q_rot" : "k_rot");
	/* the steps to print, and what the observer keeps for them: each sequence's */
	fr->B = B = problem_sequences(pb);
	fr->res = res = calloc(B, sizeof(*res));
	fr->lists = lists = calloc(B, sizeof(*lists));
	fr->x = x = calloc(B, sizeof(*x));
	fr->outs = outs = calloc(B, sizeof(*outs));
	fr->fs = fs = calloc(B, sizeof(*fs));
	fr->cfgs = cfgs = calloc(B, sizeof(*cfgs));
	fr->printed = printed = ask->cell ? calloc(B, sizeof(*printed)) : NULL;
	if (!res || !lists || !x || !outs || !fs || !cfgs ||
	    (!printed && (ask->cell))) {
		return error("out of memory"), EXIT_DATA;
	}
	problem_facts(pb, 0, f);
	p = ask->every ? steps_every(f) : steps_print_set(ask->print, ask->print_all, f);
	for (size_t b = 0; b < B; b++) {
		res[b].heads = pb->d.heads;
		res[b].mask_per_head = pb->cfg.mask.per_head || pb->cfg.alibi.on; /* ALiBi: a mask per head */
	}
	keep = (struct steps_batch){ .res = res };
	obs = (mha_observer){ .size = sizeof(mha_observer), .fn = steps_batch_keep, .ctx = &keep,
			      .sequence = steps_batch_sequence, .stages = steps_stages(p, pb->d.heads) };
	if (problem_check_memory(pb, obs.stages, ask->f32) ||
	    problem_forward(&fr->out, pb, &obs, ask->f32, &fr->rep))
		return EXIT_DATA;
	f->scale = fr->rep.scale;
	if (pb->cfg.precision != MHA_PRECISION_F64) {
		/* the low-precision reference computes with X rounded: X shown so */
		if (copy_rounded(&fr->x_typed, &pb->x, pb->cfg.precision))
			return EXIT_DATA;
	}
	for (size_t b = 0; b < B; b++) {
		/* a batch: sequence b's plane of X and of the output, titled with
		 * its own key length */
		x[b] = step_plane(fr->x_typed.rank ? &fr->x_typed : &pb->x, b);
		outs[b] = step_plane(&fr->out, b);
		cfgs[b] = pb->cfg;
		if (pb->cfg.kv_lens) {
			cfgs[b].kv_len = pb->cfg.kv_lens[b];
			cfgs[b].kv_lens = NULL;
		}
		fs[b] = *f;
		fs[b].cfg = &cfgs[b];
		if (steps_stack(&res[b]) || steps_collect(&lists[b], &res[b], p, &fs[b], &x[b], &outs[b]))
			return EXIT_DATA;
		/* --cell after --print's steps: those, from every step kept */
		if (printed && steps_collect(&printed[b], &res[b],
					     steps_print_set(ask->cell_print, ask->cell_print_all, &fs[b]),
					     &fs[b], &x[b], &outs[b]))
			return EXIT_DATA;
	}
	return 0;
}

void forward_steps_free(struct forward_run *fr)
{
	for (size_t b = 0; b < fr->B; b++) {
		if (fr->lists)
			steps_items_free(&fr->lists[b]);
		if (fr->printed)
			steps_items_free(&fr->printed[b]);
		if (fr->res)
			steps_results_free(&fr->res[b]);
	}
	free(fr->lists);
	free(fr->printed);
	free(fr->res);
	free(fr->x);
	free(fr->outs);
	free(fr->fs);
	free(fr->cfgs);
	matrix_free(&fr->out);
	matrix_free(&fr->x_typed);
	memset(fr, 0, sizeof(*fr));
}

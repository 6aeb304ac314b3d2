/*
 * items.c: what derives from a table of steps (steps.h) once a run is
 * over: the titled items in the order of the computation, the copies among
 * them, the heads' matrices, and their file names under -o DIR/.
 */
#include "run/steps.h"

#include "util/msg.h"
#include "load/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one matrix for the whole model (beside any per head) */
static int has_whole(const struct step *s)
{
	return s->stage >= 0 || (s->flags & (STEP_INPUT | STEP_STACKED | STEP_RESULT));
}

/* one matrix per head, written as such (one head's Q, K, V blocks too) */
static int has_per_head(const struct step *s)
{
	return s->head_stage >= 0 && !(s->flags & STEP_STACKED);
}

/* ---- the items ---------------------------------------------------------- */

struct step_item *steps_push(struct step_items *list)
{
	struct step_item *it;

	if (list->n == list->cap) {
		const size_t cap = list->cap ? list->cap * 2 : 64;
		struct step_item *more = realloc(list->v, cap * sizeof(*more));

		if (!more) {
			error("out of memory");
			return NULL;
		}
		list->v = more;
		list->cap = cap;
	}
	it = &list->v[list->n++];
	memset(it, 0, sizeof(*it));
	it->copy_of = -1;
	return it;
}

static int add_item(struct step_items *list, const struct step_results *r, int s, size_t head,
		    const matrix *m, const struct step_facts *f)
{
	const struct step *st = r->table ? &r->table[s] : &steps[s];
	struct step_item *it;

	if (r->only_held && !m->rank)
		return 0;
	if (!(it = steps_push(list)))
		return -1;
	it->step = r->item_base + s;
	it->key = step_key(st);
	it->head = head;
	it->m = m;
	it->rows = st->rows;
	it->cols = st->cols;
	st->title(it->title, sizeof(it->title), st, f, head);
	return 0;
}

/* the whole-model items of p, those made from the heads or the others */
static int add_whole(struct step_items *list, const struct step_results *r, unsigned long long p,
		     const struct step_facts *f, const matrix *const *given, int after)
{
	const struct step *t = r->table ? r->table : steps;
	const int n = r->n ? (int)r->n : STEP_COUNT;

	for (int s = 0; s < n; s++) {
		const struct step *st = &t[s];
		const matrix *m = given[s] ? given[s] : (st->flags & (STEP_INPUT | STEP_RESULT)) ? NULL
			       : &r->whole[s];

		if (((p >> s) & 1) && has_whole(st) && !(st->flags & STEP_AFTER_HEADS) == !after &&
		    m && add_item(list, r, s, 0, m, f))
			return -1;
	}
	return 0;
}

/* the index of the whole-model item of step s, or -1 */
static long whole_item(const struct step_items *list, int s)
{
	for (size_t i = 0; i < list->n; i++)
		if (list->v[i].step == s && !list->v[i].head)
			return (long)i;
	return -1;
}

/* what the heads read of Q and K: turned (rope), else normalised (a q/k
 * norm), else Q and K themselves; has(step) says whether the run made it */
static int head_twin(int s, int rope, int norm)
{
	if (s != STEP_Q && s != STEP_K)
		return s;
	if (rope)
		return s == STEP_Q ? STEP_Q_ROT : STEP_K_ROT;
	return norm ? (s == STEP_Q ? STEP_Q_NORM : STEP_K_NORM) : s;
}

/* Mark the items that are exact copies of others, by how the run is made. */
static void mark_copies(struct step_items *list, const struct step_facts *f)
{
	const long concat = whole_item(list, STEP_CONCAT), output = whole_item(list, STEP_OUTPUT);
	const int no_wo = !((f->weights >> WO) & 1);

	for (size_t i = 0; i < list->n; i++) {
		struct step_item *it = &list->v[i];

		if (it->head && f->heads == 1 && (steps[it->step].flags & STEP_BLOCKS)) {
			it->copy_of = whole_item(list, head_twin(it->step, f->cfg->rope.mode != 0 &&
									 !f->cfg->mla.on,
								 f->cfg->norm.kind != 0));
			it->copy_why = "one head";
		} else if (it->head && f->heads == 1 && it->step == STEP_HEADS) {
			/* without W_O the concat is itself the output: name the last */
			it->copy_of = no_wo && output >= 0 ? output : concat;
			it->copy_why = no_wo && output >= 0 ? "one head, no W_O" : "one head";
		} else if (it->step == STEP_CONCAT && no_wo) {
			it->copy_of = output;
			it->copy_why = "no W_O";
		}
		if (it->copy_of < 0)
			it->copy_why = NULL;
	}
}

int steps_collect_given(struct step_items *list, const struct step_results *r,
			unsigned long long p, const struct step_facts *f, const matrix *const *given)
{
	const struct step *t = r->table ? r->table : steps;
	const int n = r->n ? (int)r->n : STEP_COUNT;

	if (add_whole(list, r, p, f, given, 0))
		return -1;
	for (size_t h = 0; h < r->heads; h++)
		for (int s = 0; s < n; s++) {
			const matrix *m = r->per_head[s] ? &r->per_head[s][h] : NULL;

			/* the steps of p, of what was kept (--cell keeps more) */
			if (!((p >> s) & 1))
				continue;
			/* one head's block of Q, K or V is the whole: not asked of the
			 * library, which would then take the plain path for it */
			if (!m && ((p >> s) & 1) && (t[s].flags & STEP_BLOCKS) && r->heads == 1)
				m = &r->whole[head_twin(s, r->whole[head_twin(s, 1, 0)].rank != 0,
							r->whole[head_twin(s, 0, 1)].rank != 0)];
			if (m && !(t[s].flags & STEP_STACKED) && add_item(list, r, s, h + 1, m, f))
				return -1;
		}
	if (add_whole(list, r, p, f, given, 1))
		return -1;
	/* forward's table knows which of its steps repeat another */
	if (!r->table)
		mark_copies(list, f);
	return 0;
}

int steps_collect(struct step_items *list, const struct step_results *r, unsigned p,
		  const struct step_facts *f, const matrix *x, const matrix *out)
{
	const matrix *given[STEP_MAX] = { [STEP_X] = x, [STEP_OUTPUT] = out };

	return steps_collect_given(list, r, p, f, given);
}

/* s after what buf holds, with sep between (cut short at size) */
static void append(char *buf, size_t size, const char *sep, const char *s)
{
	const size_t n = strlen(buf);

	snprintf(buf + n, size - n, "%s%s", n ? sep : "", s);
}

const char *steps_fold_note(char *buf, size_t size, const struct step_items *list, size_t *i)
{
	const struct step_item *first = &list->v[*i];
	char names[400] = "", targets[100] = "", head[32] = "";
	size_t n = 0, j;

	for (j = *i; j < list->n; j++, n++) {
		const struct step_item *it = &list->v[j];

		if (it->copy_of < 0 || it->head != first->head || strcmp(it->copy_why, first->copy_why))
			break;
		/* a head's title less its "head 1: ", which the note says once */
		append(names, sizeof(names), ", ", it->head ? strchr(it->title, ':') + 2 : it->title);
		append(targets, sizeof(targets), ", ", list->v[it->copy_of].key);
	}
	*i = j;
	if (first->head)
		snprintf(head, sizeof(head), "head %zu: ", first->head);
	snprintf(buf, size, "%s%s %s the %s %s (%s)", head, names, n > 1 ? "are" : "is", targets,
		 first->copy_of < (long)(first - list->v) ? "above" : "below", first->copy_why);
	return buf;
}

void steps_items_free(struct step_items *list)
{
	free(list->v);
	list->v = NULL;
	list->n = list->cap = 0;
}

matrix step_plane(const matrix *m, size_t h)
{
	matrix plane = *m;

	if (m->rank == 3) {
		plane = (matrix){ .rank = 2, .dim = { m->dim[1], m->dim[2], 1 },
				  .v = m->v ? m->v + h * m->dim[1] * m->dim[2] : NULL,
				  .f = m->f ? m->f + h * m->dim[1] * m->dim[2] : NULL,
				  .is_f32 = m->is_f32 };
	}
	return plane;
}

void steps_heads(const struct step_items *list, struct step_head *heads, size_t H)
{
	const matrix *Q = NULL, *K = NULL, *V = NULL, *q_rot = NULL, *k_rot = NULL;
	const matrix *q_norm = NULL, *k_norm = NULL;

	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];
		struct step_head *x = it->head ? &heads[it->head - 1] : NULL;

		if (!x) {
			switch (it->step) {
			case STEP_Q: Q = it->m; break;
			case STEP_K: K = it->m; break;
			case STEP_V: V = it->m; break;
			case STEP_Q_ROT: q_rot = it->m; break;
			case STEP_K_ROT: k_rot = it->m; break;
			case STEP_Q_NORM: q_norm = it->m; break;
			case STEP_K_NORM: k_norm = it->m; break;
			default: break;
			}
			continue;
		}
		switch (it->step) {
		case STEP_Q: x->q = it->m; break;
		case STEP_K: x->k = it->m; break;
		case STEP_V: x->v = it->m; break;
		case STEP_SCORES: x->scores = it->m; break;
		case STEP_SCALED: x->scaled = it->m; break;
		case STEP_SOFTCAPPED: x->softcapped = it->m; break;
		case STEP_MASKED: x->masked = it->m; break;
		case STEP_SOFTMAX: x->softmax = it->m; break;
		case STEP_HEADS: x->out = it->m; break;
		default: break;
		}
	}
	for (size_t h = 0; h < H; h++) {
		heads[h].q = heads[h].q ? heads[h].q : q_rot ? q_rot : q_norm ? q_norm : Q;
		heads[h].k = heads[h].k ? heads[h].k : k_rot ? k_rot : k_norm ? k_norm : K;
		heads[h].v = heads[h].v ? heads[h].v : V;
	}
}

/* ---- file names ----------------------------------------------------------- */

const char *step_file_name(char *buf, size_t size, const char *key, size_t head, size_t plane,
			   const char *ext)
{
	if (plane)
		snprintf(buf, size, "%s_head%zu.%s", key, plane, ext);
	else if (head)
		snprintf(buf, size, "head%zu_%s.%s", head, key, ext);
	else
		snprintf(buf, size, "%s.%s", key, ext);
	return buf;
}

/* the number name holds (its first digits), if from 1 to heads; else 0 */
static size_t number_in(const char *name, size_t heads)
{
	const char *p = name + strcspn(name, "0123456789");
	size_t n = 0;

	if (*p == '0')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++)
		if (n > heads / 10 || (n = n * 10 + (size_t)(*p - '0')) > heads)
			return 0;
	return n;
}

int steps_may_write(const char *name, unsigned p, size_t heads, const char *ext)
{
	/* a name made by step_file_name holds no digits but its head's */
	const size_t n = number_in(name, heads);
	char buf[256];

	for (int s = 0; s < STEP_COUNT; s++) {
		const struct step *st = &steps[s];

		if (!(p & STEP_BIT(s)))
			continue;
		if (has_whole(st) && !strcmp(name, step_file_name(buf, sizeof(buf), step_key(st), 0, 0, ext)))
			return 1;
		if (n && has_per_head(st) &&
		    !strcmp(name, step_file_name(buf, sizeof(buf), step_key(st), n, 0, ext)))
			return 1;
		/* CSV holds 2-D: a stacked step may be one file per head */
		if (n && (st->flags & STEP_STACKED) && !strcmp(ext, "csv") &&
		    !strcmp(name, step_file_name(buf, sizeof(buf), step_key(st), 0, n, ext)))
			return 1;
	}
	return 0;
}

/* --print LIST into a set of steps (STEP_BIT()s) and "all" */
int steps_parse_print(const char *hint, const char *arg, unsigned *print, int *all)
{
	char *copy = strdup(arg), *save = NULL, known[200];
	int rc = 0;

	if (!copy)
		return error("out of memory");
	step_names(known, sizeof(known));
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		const int s = step_by_name(tok);

		if (!strcmp(tok, "all")) {
			*all = 1;
			continue;
		}
		if (s < 0 && step_closest(tok)) {
			usage_error(hint, "--print: unknown step '%s': did you mean '%s'?", tok,
				    step_closest(tok));
			rc = -1;
			break;
		}
		if (s < 0) {
			usage_error(hint, "--print: unknown step '%s' (known: %s, all)",
				    tok, known);
			rc = -1;
			break;
		}
		*print |= STEP_BIT(s);
	}
	free(copy);
	if (!rc && !*print && !*all) {
		usage_error(hint, "--print needs at least one step (%s, all)", known);
		rc = -1;
	}
	return rc;
}

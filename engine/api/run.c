/*
 * run.c: the engine's public entry points (mhe.h): a run's settings by
 * name (settings.c's parser, the program's own) and its arrays in memory
 * (read/memory.c), its problem loaded and resolved (load/), every step
 * computed (compare/sets.c's set, the library's plain path) and looked up
 * by any name compare reads it by (compare/aliases.c), or the steps
 * "print" names kept as results named as the program's .npz names them
 * (run/forward.c), a comparison (compare/compare.c) and its report.
 */
#include "mhe.h"

#include "compare/aliases.h"
#include "compare/compare.h"
#include "compare/report.h"
#include "load/inputs.h"
#include "load/load.h"
#include "load/model.h"
#include "api/settings.h"
#include "read/memory.h"
#include "run/backward.h"
#include "run/forward.h"
#include "run/layer.h"
#include "run/meta.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/opts.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mhe_run {
	struct problem_spec spec; /* the settings, as the program's options fill them */
	size_t max_memory;
	char **values;            /* copies of the values spec points to */
	size_t n_values;
	struct problem pb;
	int loaded;               /* pb holds a problem (problem_free it) */
	struct set mine;          /* every step of the last forward */
	/* arrays in memory (mhe_run_set_array), each under its name "<x>" */
	const char **array_names;
	struct memory_array *arrays;
	size_t n_arrays;
	/* their arrays (mhe_run_set_theirs): each step's name and its array's */
	const char **their_names, **their_paths;
	size_t n_theirs;
	size_t sequence;          /* "sequence": a batch's sequence compared (from 1), or 0 */
	double factor;            /* "factor": compare's --factor, or 0 */
	/* "print": the steps a forward or a backward keeps as results, their
	 * names read by the one that runs (steps_parse_print, backward's) */
	const char *print;
	/* the last forward's with print: its results, held alone (the problem
	 * and the steps let go), and its meta */
	struct result {
		char name[96];
		double *v;
		size_t rank, dim[4];
		int owned;        /* v is a copy of its own; else it lies in out */
	} *results;
	size_t n_results;
	matrix out;               /* the forward's output, which results may be */
	char *meta;               /* mhe_run_meta's text */
	/* the last comparison, for mhe_run_report */
	struct comparison *cmp;
	struct compare_request req;
};

/* the arrays in memory as the readers see them, for one call */
#define WITH_ARRAYS(r, call) (memory_arrays((r)->array_names, (r)->arrays, (r)->n_arrays), \
			      with_arrays_done(call))
static int with_arrays_done(int rc)
{
	memory_arrays(NULL, NULL, 0);
	return rc;
}

unsigned mhe_version_number(void)
{
	return MHE_VERSION_NUMBER;
}

mhe_run *mhe_run_new(void)
{
	mhe_run *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->spec.heads = 1;
	r->max_memory = opt_memory_default();
	return r;
}

static void forget(mhe_run *r)
{
	for (size_t i = 0; i < r->n_results; i++)
		if (r->results[i].owned)
			free(r->results[i].v);
	free(r->results);
	r->results = NULL;
	r->n_results = 0;
	matrix_free(&r->out);
	free(r->meta);
	r->meta = NULL;
	if (r->cmp) {
		comparison_free(r->cmp);
		free(r->cmp);
		r->cmp = NULL;
	}
	set_free(&r->mine);
	if (r->loaded)
		problem_free(&r->pb);
	memset(&r->pb, 0, sizeof(r->pb));
	r->loaded = 0;
}

void mhe_run_free(mhe_run *r)
{
	if (!r)
		return;
	forget(r);
	for (size_t i = 0; i < r->n_values; i++)
		free(r->values[i]);
	free(r->values);
	free(r->array_names);
	free(r->arrays);
	free(r->their_names);
	free(r->their_paths);
	free(r);
}

/* dtype bf16 or fp16 where only a forward takes it: MHE_USAGE, said */
static int lowp_refused(const char *what)
{
	const char *was = msg_key("dtype");

	usage_error(NULL, "dtype bf16 and fp16 are the forward's low-precision reference: "
		    "%s takes f64", what);
	msg_key(was);
	return MHE_USAGE;
}

/* the run's own settings (set() reads them), then the layer's and its
 * inputs' (settings.c) */
static const mhe_setting run_settings[] = {
	{ "max-memory", MHE_NUMBER_OR_WORD }, { "sequence", MHE_COUNT }, { "print", MHE_WORD },
	{ "dtype", MHE_WORD }, { "factor", MHE_NUMBER },
};

size_t mhe_settings(mhe_setting *out, size_t cap)
{
	const size_t n = sizeof(run_settings) / sizeof(run_settings[0]);

	if (!out)
		cap = 0; /* the count alone */
	for (size_t i = 0; i < n && i < cap; i++)
		out[i] = run_settings[i];
	return spec_settings_list(out, cap, n);
}

/* value, kept as long as the run (spec holds pointers to it) */
static const char *keep_value(mhe_run *r, const char *value)
{
	char **more;
	char *copy;

	if (!value)
		return NULL;
	more = realloc(r->values, (r->n_values + 1) * sizeof(*more));
	if (!more)
		return NULL;
	r->values = more;
	copy = strdup(value);
	if (copy)
		r->values[r->n_values++] = copy;
	return copy;
}

static int set(mhe_run *r, const char *name, const char *value)
{
	const char *v = keep_value(r, value);
	int rc;

	if (value && !v)
		return error("out of memory"), MHE_DATA;
	if (!strcmp(name, "max-memory")) {
		if (!v || opt_bytes(v, &r->max_memory))
			return usage_error(NULL, "max-memory takes a size such as 512M, 4G or "
					   "1.5GiB, or none, not '%s'", v ? v : "");
		return MHE_OK;
	}
	if (!strcmp(name, "sequence")) {
		/* the batch's sequence a comparison takes, as mha compare --sequence */
		return v && !opt_count(NULL, "sequence", v, SIZE_MAX / 2, &r->sequence) ? MHE_OK
										  : MHE_USAGE;
	}
	if (!strcmp(name, "factor")) {
		/* compare's --factor: their low-precision error against the reference's */
		if (!v || !opt_number(v, &r->factor) || !(r->factor > 0) || !isfinite(r->factor)) {
			r->factor = 0;
			return usage_error(NULL, "factor takes a number above 0, not '%s'", v ? v : "");
		}
		return MHE_OK;
	}
	if (!strcmp(name, "print")) {
		if (!v || !*v)
			return usage_error(NULL, "print takes the steps' names");
		r->print = v; /* read by the forward or the backward that runs */
		return MHE_OK;
	}
	if (!strcmp(name, "dtype")) {
		/* the engine's steps are float64's, or the low-precision reference's
		 * (mha forward --dtype bf16, fp16); float32 is the program's --dtype f32 */
		static const struct {
			const char *word;
			mha_precision p;
		} types[] = { { "f64", MHA_PRECISION_F64 }, { "float64", MHA_PRECISION_F64 },
			      { "bf16", MHA_PRECISION_BF16 }, { "bfloat16", MHA_PRECISION_BF16 },
			      { "fp16", MHA_PRECISION_FP16 }, { "float16", MHA_PRECISION_FP16 } };

		for (size_t i = 0; v && i < sizeof(types) / sizeof(types[0]); i++)
			if (!strcmp(v, types[i].word)) {
				r->spec.cfg.precision = types[i].p;
				return MHE_OK;
			}
		return usage_error(NULL, "dtype takes f64, bf16 or fp16 (the engine computes every "
				   "step in float64, or as the low-precision reference), not '%s'",
				   v ? v : "");
	}
	rc = spec_setting(NULL, name, v, &r->spec);
	if (!rc)
		rc = spec_input(NULL, name, v, &r->spec);
	if (rc > 0)
		return MHE_OK;
	if (rc < 0)
		return MHE_USAGE;
	{
		const char *near = !strcmp(name, "max-memory") ? NULL : spec_closest(name);

		if (near)
			return usage_error(NULL, "unknown setting '%s': did you mean '%s'?", name,
					   near);
		return usage_error(NULL, "unknown setting '%s'", name);
	}
}

int mhe_run_set(mhe_run *r, const char *name, const char *value)
{
	const char *was;
	int rc;

	if (!r || !name)
		return usage_error(NULL, "mhe_run_set: no run or no name");
	was = msg_key(name); /* every refusal is about this setting */
	rc = set(r, name, value);
	msg_key(was);
	return rc;
}

/* a in memory under path (kept by the run): 0, or -1 said */
static int keep_array(mhe_run *r, const char *path, const mhe_array *a)
{
	size_t i;

	for (i = 0; i < r->n_arrays && strcmp(r->array_names[i], path); i++)
		;
	if (i == r->n_arrays) {
		const char **names = realloc(r->array_names, (i + 1) * sizeof(*names));
		struct memory_array *arrays;

		if (names)
			r->array_names = names;
		arrays = names ? realloc(r->arrays, (i + 1) * sizeof(*arrays)) : NULL;
		if (arrays)
			r->arrays = arrays;
		if (!names || !arrays)
			return error("out of memory");
		r->n_arrays++;
	}
	r->array_names[i] = path;
	r->arrays[i] = (struct memory_array){ a->data, (enum memory_type)a->dtype, a->rank,
					      { a->dim[0], a->dim[1], a->dim[2], a->dim[3] } };
	return 0;
}

static int array_refused(const char *name, const mhe_array *a)
{
	if ((unsigned)a->dtype > MHE_BOOL || a->rank < 1 || a->rank > 4 || !a->data)
		return usage_error(NULL, "%s: an array of rank 1 to 4 of float64, float32, "
				   "float16, bfloat16 or booleans", name);
	return 0;
}

int mhe_run_set_array(mhe_run *r, const char *name, const mhe_array *a)
{
	const struct spec_file *f = name ? spec_file_named(!strcmp(name, "kt") ? "k"
							   : spec_canonical(name)) : NULL;
	char shown[80];

	if (!r || !name || !a)
		return usage_error(NULL, "mhe_run_set_array: no run, name or array");
	if (!f || !strcmp(f->name, "weights") || !strcmp(f->name, "config"))
		return usage_error(NULL, "%s is not an input an array can give (x, kv, q, k, v, "
				   "mask, wq ... bo, ...)", name);
	if (array_refused(name, a))
		return MHE_USAGE;
	snprintf(shown, sizeof(shown), "<%s>", name);
	/* the name stands for the array where a file's name would: as a setting */
	if (set(r, name, shown))
		return MHE_USAGE;
	return keep_array(r, r->values[r->n_values - 1], a) ? MHE_DATA : MHE_OK;
}

int mhe_run_set_theirs(mhe_run *r, const char *name, const mhe_array *a)
{
	char shown[200];
	const char *path, *kept;
	const char **names, **paths;

	if (!r || !name || !a)
		return usage_error(NULL, "mhe_run_set_theirs: no run, name or array");
	if (array_refused(name, a))
		return MHE_USAGE;
	snprintf(shown, sizeof(shown), "<their %s>", name);
	path = keep_value(r, shown);
	kept = keep_value(r, name);
	names = path && kept ? realloc(r->their_names, (r->n_theirs + 1) * sizeof(*names)) : NULL;
	if (names)
		r->their_names = names;
	paths = names ? realloc(r->their_paths, (r->n_theirs + 1) * sizeof(*paths)) : NULL;
	if (paths)
		r->their_paths = paths;
	if (!paths || keep_array(r, path, a))
		return error("out of memory"), MHE_DATA;
	r->their_names[r->n_theirs] = kept;
	r->their_paths[r->n_theirs++] = path;
	return MHE_OK;
}

/* the problem read and resolved, as the program's start-up does: config.json
 * under the settings, one memory limit from the first byte read; map: its
 * inputs may be mapped or borrowed (READ_MAP), nothing writing into them */
static int load(mhe_run *r, int map)
{
	int rc;

	forget(r);
	r->spec.map = map;
	budget_init(r->max_memory);
	if (model_config(&r->spec))
		return MHE_DATA;
	r->loaded = 1;
	rc = problem_load(&r->pb, &r->spec);
	return rc ? rc : MHE_OK;
}

/* the sequences' and heads' matrices of an item (idx: its H heads' in each
 * list) are the forward's output, one after another: the result can be the
 * output itself, no copy (the output and nothing else is kept); out NULL:
 * no output */
static int in_place(const struct step_items *lists, size_t B, const matrix *out,
		    const size_t *idx, size_t H, size_t per)
{
	const matrix *first = lists[0].v[idx[0]].m;

	if (!out || !first->v || first->v != out->v || B * H * per != matrix_size(out))
		return 0;
	for (size_t b = 0, at = 0; b < B; b++)
		for (size_t h = 0; h < H; h++, at += per)
			if (lists[b].v[idx[h]].m->v != first->v + at)
				return 0;
	return 1;
}

/* the forward's items as 'mha forward -o run.npz' names them: one result a
 * step, the heads and the sequences stacked ahead (archive.c's rule) */
static int make_results(mhe_run *r, const struct step_items *lists, size_t B, const matrix *out)
{
	const struct step_items *list = &lists[0];
	const size_t batch = r->pb.batch;

	r->results = calloc(list->n ? list->n : 1, sizeof(*r->results));
	if (!r->results)
		return error("out of memory");
	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];
		struct result *res = &r->results[r->n_results];
		size_t idx[64], H = 0, per, at = 0;

		if (it->head > 1)
			continue; /* with head 1's */
		if (it->head == 1) {
			for (size_t j = i; j < list->n && H < 64; j++)
				if (list->v[j].step == it->step && list->v[j].head == H + 1)
					idx[H++] = j;
		} else {
			idx[H++] = i;
		}
		snprintf(res->name, sizeof(res->name), "%s%s", it->head ? "heads." : "", it->key);
		if (batch)
			res->dim[res->rank++] = batch;
		if (it->head)
			res->dim[res->rank++] = H;
		for (size_t d = 0; d < it->m->rank && res->rank < 4; d++)
			res->dim[res->rank++] = it->m->dim[d];
		per = matrix_size(it->m);
		if (in_place(lists, B, out, idx, H, per)) {
			/* one block already, in order: the result is the output */
			res->v = lists[0].v[idx[0]].m->v;
			r->n_results++;
			continue;
		}
		res->v = malloc((B * H * per > 0 ? B * H * per : 1) * sizeof(double));
		if (!res->v)
			return error("out of memory");
		res->owned = 1;
		r->n_results++;
		for (size_t b = 0; b < B; b++)
			for (size_t h = 0; h < H; h++) {
				const matrix *m = lists[b].v[idx[h]].m;

				for (size_t k = 0; k < per; k++)
					res->v[at++] = m->v ? m->v[k] : m->f[k];
			}
	}
	return 0;
}

/* the run's "meta" object as the JSON output writes it, a new string, or
 * NULL said */
static char *meta_text(const mhe_run *r, const struct step_facts *f, const mha_report *rep)
{
	const struct run_meta meta = { .f = f, .rep = rep, .f32 = 0, .batch = r->pb.batch,
				       .sequence = 0 };
	char *text = NULL;
	size_t size = 0;
	FILE *fp = open_memstream(&text, &size);

	if (!fp)
		return error("out of memory"), NULL;
	meta_write_json(fp, &meta, 0);
	if (fclose(fp)) {
		free(text);
		return error("out of memory"), NULL;
	}
	return text;
}

/* after a forward or a backward with print: the problem let go, the
 * results and the meta alone kept */
static int problem_go(mhe_run *r, int rc)
{
	problem_free(&r->pb);
	memset(&r->pb, 0, sizeof(r->pb));
	r->loaded = 0;
	return rc ? rc : MHE_OK;
}

/* the forward with the steps "print" asked for kept as results, and then
 * nothing else: the output taken from the steps (results may be it), the
 * steps and the problem let go */
static int forward_printed(mhe_run *r)
{
	struct forward_ask ask = { 0 };
	struct forward_run fr;
	const char *was = msg_key("print");
	int rc = steps_parse_print(NULL, r->print, &ask.print, &ask.print_all) ? MHE_USAGE : 0;

	msg_key(was);
	if (rc)
		return problem_go(r, rc);
	rc = forward_steps(&fr, &r->pb, &ask);
	if (!rc && (make_results(r, fr.lists, fr.B, &fr.out) ||
		    !(r->meta = meta_text(r, &fr.f, &fr.rep))))
		rc = MHE_DATA;
	r->out = fr.out;
	memset(&fr.out, 0, sizeof(fr.out));
	forward_steps_free(&fr);
	return problem_go(r, rc);
}

int mhe_run_backward(mhe_run *r)
{
	struct backward_ask ask = { 0 };
	struct backward_run br;
	unsigned long long asked;
	int all, rc;
	const char *was;

	if (!r)
		return usage_error(NULL, "mhe_run_backward: no run");
	if (r->spec.cfg.precision)
		return lowp_refused("a backward");
	rc = WITH_ARRAYS(r, load(r, 0));
	if (rc)
		return rc;
	ask.print = r->print;
	was = msg_key("print");
	rc = backward_steps_asked(&ask, &r->spec, &asked, &all) ? MHE_USAGE : 0;
	msg_key(was);
	if (rc)
		return problem_go(r, rc);
	/* dO, an array in memory perhaps, is read by the run */
	rc = WITH_ARRAYS(r, backward_steps(&br, &r->pb, &ask, asked) ? MHE_DATA : 0);
	if (!rc && (make_results(r, br.lists, br.B, NULL) ||
		    !(r->meta = meta_text(r, &br.facts, &br.rep))))
		rc = MHE_DATA;
	backward_steps_free(&br);
	return problem_go(r, rc);
}

/* m, a copy of its own, as result name: 0, or -1 said */
static int add_result(mhe_run *r, const char *name, const matrix *m)
{
	const size_t n = matrix_size(m);
	struct result *more = realloc(r->results, (r->n_results + 1) * sizeof(*more)), *res;

	if (!more)
		return error("out of memory");
	r->results = more;
	res = &r->results[r->n_results];
	memset(res, 0, sizeof(*res));
	res->v = malloc((n ? n : 1) * sizeof(double));
	if (!res->v)
		return error("out of memory");
	r->n_results++;
	snprintf(res->name, sizeof(res->name), "%s", name);
	res->owned = 1;
	res->rank = m->rank;
	for (size_t d = 0; d < m->rank && d < 4; d++)
		res->dim[d] = m->dim[d];
	for (size_t i = 0; i < n; i++)
		res->v[i] = m->v ? m->v[i] : m->f[i];
	return 0;
}

int mhe_run_model(mhe_run *r)
{
	const char *names[LAYER_TENSORS];
	const matrix *m[LAYER_TENSORS];
	struct layer_facts f;
	char *text = NULL;
	size_t size = 0, n;
	FILE *fp;
	int rc;

	if (!r)
		return usage_error(NULL, "mhe_run_model: no run");
	/* the layer resolved as a run resolves it: one token of zeros for X */
	r->spec.probe = 1;
	rc = WITH_ARRAYS(r, load(r, 0));
	r->spec.probe = 0;
	if (rc)
		return problem_go(r, rc);
	n = layer_tensors(&r->pb, names, m);
	for (size_t i = 0; i < n; i++)
		if (add_result(r, names[i], m[i]))
			return problem_go(r, MHE_DATA);
	fp = open_memstream(&text, &size);
	if (!fp)
		return error("out of memory"), problem_go(r, MHE_DATA);
	layer_facts(&r->pb, &f);
	layer_json(fp, &r->pb, &f);
	if (fclose(fp)) {
		free(text);
		return error("out of memory"), problem_go(r, MHE_DATA);
	}
	r->meta = text;
	return problem_go(r, MHE_OK);
}

size_t mhe_run_results(const mhe_run *r)
{
	return r ? r->n_results : 0;
}

int mhe_run_result(const mhe_run *r, size_t i, const char **name, mhe_tensor *t)
{
	if (!r || i >= r->n_results || !name || !t)
		return usage_error(NULL, "mhe_run_result: no result %zu (there are %zu)", i,
				   r ? r->n_results : 0);
	*name = r->results[i].name;
	t->v = r->results[i].v;
	t->rank = r->results[i].rank;
	memcpy(t->dim, r->results[i].dim, sizeof(t->dim));
	return MHE_OK;
}

char *mhe_run_meta(const mhe_run *r)
{
	char *text;

	if (!r || !r->meta) {
		usage_error(NULL, "no forward with \"print\" to describe");
		return NULL;
	}
	text = strdup(r->meta);
	if (!text)
		error("out of memory");
	return text;
}

int mhe_run_forward(mhe_run *r)
{
	mha_report rep = MHA_INIT(mha_report);
	struct ctx x = { 0 };
	int rc;

	if (!r)
		return usage_error(NULL, "mhe_run_forward: no run");
	/* with print, nothing writes into the inputs: .npy files mapped and
	 * float64 arrays in memory borrowed as mha forward maps its files */
	rc = WITH_ARRAYS(r, load(r, r->print != NULL));
	if (rc)
		return rc;
	if (r->print)
		return forward_printed(r);
	if (problem_sequences(&r->pb) > 1)
		return usage_error(NULL, "the inputs are a batch of %zu sequences: the engine's "
				   "steps are one sequence's", r->pb.batch);
	x.p = &r->pb;
	rc = run_set(&r->mine, &x, &r->pb.in, &r->pb.weights, &r->pb.cfg, NULL, &rep);
	if (rc > 0)
		return error("the run failed: %s", "the numbers overflow or a setting is out of "
			     "range (mha forward says which)"), MHE_DATA;
	return rc ? MHE_DATA : MHE_OK;
}

int mhe_run_step(const mhe_run *r, const char *step, mhe_matrix *out)
{
	int ids[8];
	size_t n;

	if (!r || !step || !out)
		return usage_error(NULL, "mhe_run_step: no run, step or matrix");
	n = alias_steps(step, ids, sizeof(ids) / sizeof(ids[0]));
	for (size_t i = 0; i < n; i++) {
		const matrix *m = &r->mine.m[ids[i]];

		if (!m->rank || !m->v)
			continue;
		out->v = m->v;
		out->cols = m->rank ? m->dim[m->rank - 1] : 0;
		out->rows = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
		out->planes = m->rank >= 3 ? m->dim[0] : 1;
		return MHE_OK;
	}
	if (!n) {
		const char *near = alias_closest(step);

		if (near)
			return usage_error(NULL, "no step '%s': did you mean '%s'?", step, near);
		return usage_error(NULL, "no step '%s' (mha compare --aliases lists them)", step);
	}
	return usage_error(NULL, "this run has no step '%s'%s", step,
			   r->loaded ? "" : " (no forward yet)");
}

int mhe_run_compare(mhe_run *r, const char *against, double rtol, double atol, mhe_verdict *v)
{
	struct compare_request q = { .against = against, .their_names = r ? r->their_names : NULL,
				     .their_paths = r ? r->their_paths : NULL,
				     .n_theirs = r ? r->n_theirs : 0 };
	struct comparison *c;
	int rc;

	if (!r || !v)
		return usage_error(NULL, "mhe_run_compare: no run or verdict");
	if (!against && !r->n_theirs)
		return usage_error(NULL, "no results to compare: a path, or their arrays "
				   "(mhe_run_set_theirs)");
	memset(v, 0, sizeof(*v));
	/* the path is named by the report, which outlives the call */
	if (against && !(q.against = keep_value(r, against)))
		return error("out of memory"), MHE_DATA;
	q.rtol = rtol;
	q.atol = atol;
	q.sequence = r->sequence;
	q.rtol_given = rtol >= 0;
	q.atol_given = atol >= 0;
	q.factor = r->factor;
	q.factor_given = r->factor > 0;
	/* dtype bf16 or fp16: their numbers' type; mha's steps stay float64's */
	q.precision = (int)r->spec.cfg.precision;
	q.dtype_given = q.precision != 0;
	r->spec.cfg.precision = MHA_PRECISION_F64;
	rc = WITH_ARRAYS(r, load(r, 0));
	r->spec.cfg.precision = (size_t)q.precision;
	if (rc)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return error("out of memory"), MHE_DATA;
	rc = WITH_ARRAYS(r, compare_problem(c, &r->pb, &q));
	if (!rc) {
		for (int i = 0; i < C_COUNT; i++)
			v->steps_compared += c->st[i].given;
		v->agree = c->first < 0;
		if (c->first >= 0)
			snprintf(v->first_step, sizeof(v->first_step), "%s", cmp_name(c->first));
		if (c->dg.found) {
			snprintf(v->mistake, sizeof(v->mistake), "%s", c->dg.m.id);
			snprintf(v->why, sizeof(v->why), "%s", c->dg.message);
		}
	}
	if (rc) {
		comparison_free(c);
		free(c);
		return rc;
	}
	/* kept for mhe_run_report (load() has let the last one go) */
	r->cmp = c;
	r->req = q;
	return MHE_OK;
}

char *mhe_run_report(const mhe_run *r, int json)
{
	const struct comparison *c = r ? r->cmp : NULL;
	char *text = NULL;
	size_t size = 0;
	FILE *fp;

	if (!c) {
		usage_error(NULL, "no comparison to report: mhe_run_compare first");
		return NULL;
	}
	fp = open_memstream(&text, &size);
	if (!fp) {
		error("out of memory");
		return NULL;
	}
	{
		const struct report rp = { .against = r->req.against ? r->req.against : "their arrays",
					   .a = &c->a, .mine = &c->mine, .st = c->st,
					   .l = &r->pb.labels, .tol = &c->tol, .f32 = r->req.f32,
					   .precision = r->req.precision,
					   .sequence = r->req.sequence, .first = c->first, .dg = &c->dg,
					   .looks_lowp = c->looks_lowp,
					   .grads = c->grads,
					   .dout_from = c->dout_from[0] ? c->dout_from : NULL };

		if (json)
			report_json(fp, &rp);
		else
			report_text(fp, &rp);
	}
	if (fclose(fp)) {
		free(text);
		error("out of memory");
		return NULL;
	}
	return text;
}

void mhe_free(void *p)
{
	free(p);
}

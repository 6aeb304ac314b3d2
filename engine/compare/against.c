/*
 * against.c: reading 'mha compare --against PATH' (against.h): a JSON file
 * in mha's schema, a directory of one file per step, a .npz archive, or
 * one matrix taken as the output.  Names and keys are mha's own (steps.c's
 * table, step_file_name): a name that is not a step's is refused, so that a
 * typo cannot leave a step silently uncompared.
 */
#include "compare/against.h"

#include "compare/aliases.h"

#include "util/msg.h"
#include "read/input.h"
#include "read/named.h"
#include "read/safetensors.h"
#include "run/steps.h"
#include "util/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading: every array and its name --------------------------------------- */

/* An array as read, before its name and shape say which step it is. */
struct raw {
	char shown[300];        /* its name in messages: "heads[1].scores", "head2_softmax.npy" */
	struct name_parse np;
	matrix m;
	int ids[8];             /* the steps its name may stand for (alias_steps) */
	size_t n_ids;
	int per_kv;             /* one plane per key/value head, repeated to each query
				   head's (Hugging Face's key_states before repeat_kv) */
	int packed;             /* nn.MultiheadAttention's in_proj_weight.grad or
				   in_proj_bias.grad: q's, k's and v's, split when resolved */
	int linear;             /* an nn.Linear weight's gradient by PyTorch's name
				   (q_proj.weight.grad): (out, in), turned when resolved */
};



/*
 * A new raw array named name (head: from a JSON "heads" list, 1-based, or
 * 0), its steps looked up; *unknown counts the names no step has, the
 * first few listed into list.  NULL said (out of memory).
 */
static struct raw *raw_add(struct against *a, const char *name, const char *shown, size_t head,
			   char *list, size_t size, size_t *unknown)
{
	struct raw *r;

	/* no run has more steps than every step once and each head's once per
	 * head: a file of more names is refused before it costs memory */
	if (a->n_raw >= (size_t)C_COUNT * (a->heads + 2)) {
		error("'%s': more than %zu arrays, more than a run of %zu head%s has steps",
		      path_shown(a->path), a->n_raw, a->heads, plural(a->heads));
		return NULL;
	}
	if (a->n_raw == a->cap_raw) {
		const size_t cap = a->cap_raw ? 2 * a->cap_raw : 16;
		struct raw *grown = realloc(a->raw, cap * sizeof(*a->raw));

		if (!grown) {
			error("out of memory");
			return NULL;
		}
		a->raw = grown;
		a->cap_raw = cap;
	}
	r = &a->raw[a->n_raw++];
	memset(r, 0, sizeof(*r));
	text_shown(r->shown, sizeof(r->shown), shown);
	if (alias_parse(name, &r->np) == 0) {
		if (head && !r->np.head && !r->np.heads)
			r->np.head = head;
		else if (head)
			r->np.base[0] = '\0'; /* a head's form inside a head's object: no step */
		r->n_ids = alias_steps(r->np.base, r->ids, sizeof(r->ids) / sizeof(r->ids[0]));
		r->linear = r->n_ids && strlen(r->np.base) > strlen("_proj.weight.grad") &&
			    !strcmp(r->np.base + strlen(r->np.base) - strlen("_proj.weight.grad"),
				    "_proj.weight.grad");
	}
	if (!r->n_ids && alias_packed(r->np.base, NULL) && !r->np.head && !r->np.heads) {
		r->packed = 1; /* three steps in one: split by against_resolve */
		return r;
	}
	if (!r->n_ids) {
		const char *near = r->np.base[0] ? alias_closest(r->np.base) : NULL;
		const size_t at = strlen(list);
		char one[200];

		text_shown(one, sizeof(one), shown);
		if (at < size - 1 && *unknown < 8)
			snprintf(list + at, size - at, "%s'%s'%s%s%s", *unknown ? ", " : "", one,
				 near ? " (" : "", near ? near : "", near ? "?)" : "");
		++*unknown;
	}
	return r;
}

/* "'PATH': 2 names are no step's: 'qq' (Q?), 'foo' (...)": every one at once */
static int say_unknown(const char *path, const char *list, size_t unknown)
{
	return error("'%s': %zu name%s %s no step's: %s%s (mha compare --aliases lists the names "
		     "it reads)", path_shown(path), unknown, plural(unknown), unknown == 1 ? "is" : "are",
		     list, unknown > 8 ? ", ..." : "");
}

#define READ_FLAGS (READ_NONFINITE | READ_BOOL)

static int read_json_object(struct against *a, named_set *set, const char *path)
{
	named_entry e;
	char list[1200] = "";
	size_t unknown = 0;

	while (named_next(set, &e)) {
		const cJSON *item = e.node;
		const char *key = e.name;
		struct raw *r;

		if (!strcmp(key, "meta") || !strcmp(key, "tokens") || !strcmp(key, "kv_tokens") ||
		    cJSON_IsNull(item))
			continue;
		if (!strcmp(key, "heads") && cJSON_IsArray(item)) {
			const cJSON *obj;
			size_t i = 0;

			if ((size_t)cJSON_GetArraySize(item) > a->heads)
				return error("'%s': \"heads\" holds %d objects, but the run has %zu head%s "
					     "(--heads)", path_shown(path), cJSON_GetArraySize(item),
					     a->heads, plural(a->heads));
			cJSON_ArrayForEach(obj, item) {
				const cJSON *m;

				i++;
				if (cJSON_IsNull(obj))
					continue; /* a head not given */
				if (!cJSON_IsObject(obj))
					return error("'%s': heads[%zu] is not an object of steps",
						     path_shown(path), i - 1);
				cJSON_ArrayForEach(m, obj) {
					char what[200];

					if (cJSON_IsNull(m))
						continue;
					snprintf(what, sizeof(what), "heads[%zu].%s", i - 1, m->string);
					r = raw_add(a, m->string, what, i, list, sizeof(list), &unknown);
					if (!r || ((r->n_ids || r->packed) &&
						   json_node_matrix(&r->m, &set->doc, m, NULL, r->shown, 1, 4,
								    READ_FLAGS)))
						return -1;
				}
			}
			continue;
		}
		r = raw_add(a, key, key, 0, list, sizeof(list), &unknown);
		if (!r || ((r->n_ids || r->packed) &&
			   named_read(set, &e, &r->m, &(read_spec){ r->shown, NULL, 1, 4, READ_FLAGS })))
			return -1;
	}
	return unknown ? say_unknown(path, list, unknown) : 0;
}

static int read_dir(struct against *a, named_set *set, const char *path)
{
	named_entry e;
	char list[1200] = "";
	size_t unknown = 0;

	while (named_next(set, &e)) {
		char shown[300];
		struct raw *r;

		if (!strcmp(e.file, "meta.json"))
			continue;
		snprintf(shown, sizeof(shown), "%s", e.file);
		r = raw_add(a, e.name, shown, 0, list, sizeof(list), &unknown);
		if (!r || ((r->n_ids || r->packed) &&
			   named_read(set, &e, &r->m, &(read_spec){ .what = r->shown, .min_rank = 1,
								  .max_rank = 4, .flags = READ_FLAGS })))
			return -1;
	}
	return unknown ? say_unknown(path, list, unknown) : 0;
}

static int read_npz_members(struct against *a, named_set *set, const char *path)
{
	const npz_archive *z = set->z;
	named_entry e;
	char list[1200] = "";
	size_t unknown = 0;

	if (npz_count(z) == 1 && !npz_has(z, "meta")) {
		/* one array, as np.savez(f, out) names it (arr_0): the output, as one
		 * matrix in another format would be; a name nearly a step's is a typo */
		const char *name = npz_name(z, 0);
		struct name_parse np;
		int ids[8];

		if (alias_parse(name, &np) || (!alias_steps(np.base, ids, 8) && !alias_closest(np.base))) {
			struct raw *r = raw_add(a, "output", "the one matrix", 0, list, sizeof(list),
						&unknown);

			a->kind = "matrix";
			return !r || npz_read(z, name, &r->m, &(read_spec){ .what = name, .min_rank = 1,
									   .max_rank = 3,
									   .flags = READ_NONFINITE })
			       ? -1 : 0;
		}
	}
	while (named_next(set, &e)) {
		struct raw *r;

		if (!strcmp(e.name, "meta") || !strcmp(e.name, "tokens") || !strcmp(e.name, "kv_tokens"))
			continue;
		r = raw_add(a, e.name, e.name, 0, list, sizeof(list), &unknown);
		if (!r || ((r->n_ids || r->packed) &&
			   named_read(set, &e, &r->m, &(read_spec){ .what = r->shown, .min_rank = 1,
								  .max_rank = 4, .flags = READ_FLAGS })))
			return -1;
	}
	return unknown ? say_unknown(path, list, unknown) : 0;
}

/* a safetensors file of their steps (safetensors.torch.save_file), each
 * tensor by its name, in the type it was saved in */
static int read_safetensors(struct against *a, const char *path)
{
	st_file f;
	char list[1200] = "";
	size_t unknown = 0;
	int rc = st_open(&f, path);

	for (size_t i = 0; !rc && i < f.n; i++) {
		const st_tensor *t = &f.t[i];
		struct raw *r;

		if (!strcmp(t->name, "tokens") || !strcmp(t->name, "kv_tokens"))
			continue;
		r = raw_add(a, t->name, t->name, 0, list, sizeof(list), &unknown);
		if (!r || ((r->n_ids || r->packed) && st_read_array(&r->m, &f, t)))
			rc = -1;
	}
	st_close(&f);
	return rc ? -1 : unknown ? say_unknown(path, list, unknown) : 0;
}

int against_read(struct against *a, const char *path, size_t heads)
{
	named_set set;
	int rc;

	memset(a, 0, sizeof(*a));
	a->path = path;
	a->heads = heads;
	for (int i = 0; i < C_COUNT; i++)
		a->g[i].named_as = -1;
	if (st_path(path) && !is_dir(path)) {
		/* read by the safetensors reader: no named set */
		a->kind = "safetensors";
		rc = read_safetensors(a, path);
		if (!rc && !a->n_raw)
			rc = error("'%s': no tensor: give any of mha's steps (mha compare --aliases "
				   "lists their names)", path_shown(path));
		return rc;
	}
	if (is_dir(path)) {
		a->kind = "dir";
		if (named_dir(&set, path, NAMED_JOIN_ONCE))
			rc = errno == ENOMEM ? error("out of memory")
					     : error("'%s': cannot read the directory", path_shown(path));
		else
			rc = read_dir(a, &set, path);
	} else if (named_file(&set, path)) {
		rc = -1;
	} else if (set.kind == NAMED_NPZ) {
		a->kind = "npz";
		rc = read_npz_members(a, &set, path);
	} else if (set.kind == NAMED_JSON) {
		a->kind = "json";
		rc = read_json_object(a, &set, path);
	} else {
		/* one matrix, in whatever format: the output */
		char list[8] = "";
		size_t unknown = 0;
		struct raw *r = raw_add(a, "output", "the one matrix", 0, list, sizeof(list), &unknown);

		a->kind = "matrix";
		if (!r)
			rc = -1;
		else if (set.kind == NAMED_VALUE)
			rc = json_node_matrix(&r->m, &set.doc, set.doc.root, NULL, "output", 1, 4,
					      READ_NONFINITE);
		else
			rc = read_input(&r->m, &set.in, &(read_spec){ .what = "output", .min_rank = 1,
								     .max_rank = 3,
								     .flags = READ_NONFINITE });
	}
	named_close(&set);
	if (!rc && !a->n_raw)
		rc = error("'%s': no step to compare: give any of mha's steps (mha compare --aliases "
			   "lists their names)", path_shown(path));
	return rc;
}

int against_read_arrays(struct against *a, const char *const *names, const char *const *paths,
			size_t n, size_t heads)
{
	char list[1200] = "";
	size_t unknown = 0;

	memset(a, 0, sizeof(*a));
	a->path = "their arrays";
	a->kind = "arrays";
	a->heads = heads;
	for (int i = 0; i < C_COUNT; i++)
		a->g[i].named_as = -1;
	for (size_t i = 0; i < n; i++) {
		struct raw *r = raw_add(a, names[i], names[i], 0, list, sizeof(list), &unknown);

		if (!r || ((r->n_ids || r->packed) &&
			   read_matrix(&r->m, paths[i], &(read_spec){ .what = r->shown, .min_rank = 1,
								    .max_rank = 4, .flags = READ_FLAGS })))
			return -1;
	}
	if (unknown)
		return say_unknown(a->path, list, unknown);
	if (!a->n_raw)
		return error("no step to compare: give any of mha's steps (mha compare --aliases "
			     "lists their names)");
	return 0;
}

int against_has_grads(const struct against *a)
{
	for (size_t i = 0; i < a->n_raw; i++)
		if (a->raw[i].packed)
			return 1; /* in_proj's gradients */
	for (size_t i = 0; i < a->n_raw; i++)
		for (size_t k = 0; k < a->raw[i].n_ids; k++)
			if (cmp_at(a->raw[i].ids[k])->grad)
				return 1;
	return 0;
}

/* m's dimensions without leading ones (at least two kept): into dims, the rank */
static size_t squeezed(const matrix *m, size_t dims[4])
{
	size_t at = 0, r = 0;

	while (m->rank - at > 2 && m->dim[at] == 1)
		at++;
	for (size_t i = at; i < m->rank; i++)
		dims[r++] = m->dim[i];
	if (r == 1) {
		/* a vector: one row */
		dims[1] = dims[0];
		dims[0] = 1;
		r = 2;
	}
	return r;
}

int against_take_dout(struct against *a, matrix *dout, size_t rows, size_t cols)
{
	for (size_t i = 0; i < a->n_raw; i++) {
		struct raw *r = &a->raw[i];
		size_t dims[4];

		int is_dout = 0;

		for (size_t k = 0; k < r->n_ids; k++)
			is_dout |= r->ids[k] == C_G(GS_GRAD_OUTPUT);
		if (r->np.head || r->np.heads || !is_dout || squeezed(&r->m, dims) != 2 || dims[0] != rows ||
		    dims[1] != cols)
			continue;
		*dout = r->m;
		memset(&r->m, 0, sizeof(r->m));
		r->n_ids = 0; /* read as the input, not compared */
		return 1;
	}
	return 0;
}

/* ---- telling them apart ------------------------------------------------------ */

int given_at(const struct given *g, size_t h, size_t r)
{
	return (!g->heads || g->heads[h]) && (!g->rows || r < g->rows);
}

/* why this run has no step i, for the message that refuses it */
static const char *why_absent(int i, const matrix *mine)
{
	return i == C_X ? "there is no X with --q/--k/--v" :
	       i == C_SOFTCAPPED ? "the run has no softcap: add --softcap C" :
	       (i == C_Q_ROT || i == C_K_ROT) ? "the run turns nothing: add --rope" :
	       (i == C_Q_NORM || i == C_K_NORM) ? "the run normalises nothing: add --norm" :
	       i >= C_C_Q && i <= C_K_NOPE && !mine[C_C_KV].rank ? "the run has no latent attention "
	       "(--kv-b-proj and the rest, or a DeepSeek checkpoint)" :
	       i == C_K_NOPE ? "the absorbed form makes none: leave out --absorb" :
	       i >= C_C_Q && i <= C_K_NOPE ? "the run's latent attention has no such part "
	       "(q_a_proj, or --rope)" :
	       i == C_MASK ? "the run masks nothing (no --mask, --causal or --kv-len)" :
	       "this run has no such step";
}

/* How an array fits step i: planes (heads) and rows given, or 0 when it does not. */
struct fit {
	int id;
	size_t planes, rows; /* as given: planes 0 for one matrix standing for every head */
	size_t head;         /* the one head given (1-based), or 0 */
	int exact;           /* every head and row */
};

static int fits(struct fit *f, int id, const struct raw *r, const matrix *mine)
{
	const matrix *m = &mine[id];
	const int ph = cmp_at(id)->per_head || id == C_MASK;
	size_t dims[4], rank, R, C, P;

	memset(f, 0, sizeof(*f));
	f->id = id;
	if (!m->rank || !r->m.rank)
		return 0;
	R = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	C = m->dim[m->rank - 1];
	P = m->rank == 3 ? m->dim[0] : 1;
	rank = squeezed(&r->m, dims);
	if (dims[rank - 1] != C || dims[rank - 2] > R || !dims[rank - 2] || rank > 3)
		return 0;
	f->rows = dims[rank - 2];
	if (!ph) {
		if (rank != 2 || r->np.head || r->np.heads)
			return 0;
		f->planes = 1;
	} else if (r->np.head) {
		if (rank != 2 || r->np.head > P)
			return 0;
		f->head = r->np.head;
		f->planes = 1;
	} else if (rank == 3) {
		if (dims[0] > P)
			return 0;
		f->planes = dims[0];
	} else if (id == C_MASK || P == 1) {
		/* one mask for every head; one head's step where there is one head */
		if (r->np.heads && P > 1)
			return 0;
		f->planes = id == C_MASK ? 0 : 1;
	} else {
		return 0;
	}
	f->exact = f->rows == R && (f->planes == P || f->planes == 0) && !f->head;
	return 1;
}

/* Σ (theirs − mine)² over the entries f gives: which of two fitting steps it is */
static double distance(const struct fit *f, const struct raw *r, const matrix *mine)
{
	const matrix *m = &mine[f->id];
	const size_t C = m->dim[m->rank - 1], R = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	const size_t planes = f->planes ? f->planes : 1;
	double sum = 0;

	for (size_t p = 0; p < planes; p++)
		for (size_t i = 0; i < f->rows; i++)
			for (size_t j = 0; j < C; j++) {
				const size_t mp = f->head ? f->head - 1 : p;
				const double d = r->m.v[(p * f->rows + i) * C + j] - m->v[(mp * R + i) * C + j];

				sum += isnan(d) ? INFINITY : d * d;
			}
	return sum;
}

/* the softmax's mean over the heads fits a 2-D array of theirs named as the softmax */
static int fits_mean(struct fit *f, const struct raw *r, const matrix *mine, size_t H)
{
	size_t dims[4];

	if (H < 2 || r->np.head || r->np.heads || squeezed(&r->m, dims) != 2 ||
	    !mine[C_SOFTMAX_MEAN].rank)
		return 0;
	return fits(f, C_SOFTMAX_MEAN, r, mine);
}

/* r's values into step f->id of a, expanded to mine's shape: 0, or -1 said */
static int store(struct against *a, const struct fit *f, struct raw *r, const matrix *mine)
{
	struct given *g = &a->g[f->id];
	const matrix *m = &mine[f->id];
	const size_t C = m->dim[m->rank - 1], R = m->rank >= 2 ? m->dim[m->rank - 2] : 1;
	const size_t P = m->rank == 3 ? m->dim[0] : 1;
	const size_t planes = f->planes ? f->planes : 1;

	if (g->m.rank && !g->heads)
		return error("'%s': %s and %s are both %s", path_shown(a->path), g->src, r->shown,
			     cmp_name(f->id));
	g->rank = r->m.rank;
	memcpy(g->dim, r->m.dim, sizeof(g->dim));
	g->f32 |= r->m.is_f32 || r->m.from_f32;
	if (g->type == FROM_F64)
		g->type = r->m.from_type;
	g->per_kv = r->per_kv;
	g->turned = r->linear && !a->torch;
	if (f->planes == 0 || (f->exact && !g->m.rank)) {
		/* as it is: mha's shape, or one mask for every head */
		g->m = r->m;
		memset(&r->m, 0, sizeof(r->m));
		snprintf(g->src, sizeof(g->src), "%s", r->shown);
		return 0;
	}
	if (g->m.rank && matrix_size(&g->m) != P * R * C)
		return error("'%s': %s and %s are both %s", path_shown(a->path), g->src, r->shown,
			     cmp_name(f->id));
	if (!g->m.rank) {
		if (m->rank == 3 ? matrix_alloc(&g->m, 3, P, R, C) : matrix_alloc(&g->m, 2, R, C, 1))
			return -1;
		g->m.is_bool = r->m.is_bool;
		g->heads = calloc(P, 1);
		if (!g->heads)
			return error("out of memory");
		snprintf(g->src, sizeof(g->src), "%s", r->shown);
	} else if (strlen(g->src) + strlen(r->shown) + 3 < sizeof(g->src)) {
		strcat(g->src, ", ");
		strcat(g->src, r->shown);
	}
	if (g->rows && g->rows != f->rows)
		return error("'%s': %s gives %zu rows and %s %zu: give the same rows of every head",
			     path_shown(a->path), g->src, g->rows, r->shown, f->rows);
	g->rows = f->rows < R ? f->rows : 0;
	for (size_t p = 0; p < planes; p++) {
		const size_t mp = f->head ? f->head - 1 : p;

		if (g->heads[mp])
			return error("'%s': head %zu of %s is given twice (%s)", path_shown(a->path),
				     mp + 1, cmp_name(f->id), g->src);
		g->heads[mp] = 1;
		memcpy(g->m.v + mp * R * C, r->m.v + p * f->rows * C, f->rows * C * sizeof(double));
	}
	/* every head given after all: no list */
	{
		size_t n = 0;

		for (size_t p = 0; p < P; p++)
			n += g->heads[p];
		/* their shape: the heads given, stacked */
		if (m->rank == 3) {
			g->rank = 3;
			g->dim[0] = n;
			g->dim[1] = f->rows;
			g->dim[2] = C;
			g->dim[3] = 1;
		}
		if (n == P) {
			free(g->heads);
			g->heads = NULL;
		}
	}
	return 0;
}

/* a weight's gradient, which --layout torch gives as PyTorch's (out, in) */
static int is_weight_grad(int id)
{
	return (id >= C_G(GS_DW_Q) && id <= C_G(GS_DW_O)) ||
	       id == C_G(GS_DLATENT + LAT_Q_A_PROJ) || id == C_G(GS_DLATENT + LAT_KV_A_PROJ) ||
	       id == C_G(GS_DLATENT + LAT_KV_B_PROJ);
}

/*
 * Hugging Face's key_states and value_states before repeat_kv: one plane
 * per key/value head ([G, n, d], G below the query heads H), each repeated
 * to the H/G query heads that read it (mha's heads.K, heads.V), as
 * repeat_kv repeats them.  0, or -1 said (out of memory).
 */
static int per_kv_head(struct raw *r, const matrix *mine)
{
	size_t dims[4];

	if (r->np.head || r->np.heads || squeezed(&r->m, dims) != 3)
		return 0;
	for (size_t k = 0; k < r->n_ids; k++) {
		const int id = r->ids[k];
		const matrix *m = &mine[id], *whole = &mine[id == C_HEAD_K ? C_K : C_V];
		size_t P, R, C, G;
		matrix e;

		if ((id != C_HEAD_K && id != C_HEAD_V) || m->rank != 3 || whole->rank != 2)
			continue;
		P = m->dim[0];
		R = m->dim[1];
		C = m->dim[2];
		G = whole->dim[1] / C;
		if (!G || G >= P || P % G || dims[0] != G || dims[1] != R || dims[2] != C)
			continue;
		if (matrix_alloc(&e, 3, P, R, C))
			return -1;
		for (size_t h = 0; h < P; h++)
			memcpy(e.v + h * R * C, r->m.v + h / (P / G) * R * C, R * C * sizeof(double));
		e.is_f32 = r->m.is_f32;
		e.from_f32 = r->m.from_f32;
		e.from_type = r->m.from_type;
		matrix_free(&r->m);
		r->m = e;
		r->per_kv = 1;
		return 0;
	}
	return 0;
}

/* One array: the step it is, by its name and shape. */
static int resolve_one(struct against *a, struct raw *r, const matrix *mine)
{
	struct fit best = { .id = -1 }, f;
	double best_d = INFINITY;
	int present = -1;

	if (a->torch && r->n_ids && r->m.rank == 2 && is_weight_grad(r->ids[0]) &&
	    matrix_transpose(&r->m))
		return -1;
	if (per_kv_head(r, mine))
		return -1;
	if (r->np.head > a->heads)
		return error("'%s': %s: head %zu, but the run has %zu head%s (--heads)",
			     path_shown(a->path), r->shown, r->np.head, a->heads, plural(a->heads));
	for (int pass = 0; pass < 2 && best.id < 0; pass++)
		for (size_t k = 0; k < r->n_ids; k++) {
			const int id = r->ids[k];

			if (!mine[id].rank)
				continue;
			if (present < 0)
				present = id;
			if (fits(&f, id, r, mine) && f.exact == !pass) {
				/* two steps of one shape (concat and output): the nearer */
				const double d = distance(&f, r, mine);

				if (best.id < 0 || d < best_d) {
					best = f;
					best_d = d;
				}
			}
		}
	if (best.id < 0 && r->n_ids && r->ids[0] == C_SOFTMAX && fits_mean(&f, r, mine, a->heads))
		best = f;
	if (present < 0) {
		const int id = r->ids[0];

		return error("'%s': %s is given, but %s", path_shown(a->path), r->shown,
			     why_absent(id, mine));
	}
	if (r->m.is_bool && (best.id >= 0 ? best.id : present) != C_MASK)
		return error("'%s': %s holds true and false: only a mask may", path_shown(a->path),
			     r->shown);
	if (best.id < 0) {
		/* no shape of its name's: kept as read, reported as SHAPE */
		struct given *g = &a->g[present];

		for (size_t k = 0; k < r->n_ids; k++)
			if (mine[r->ids[k]].rank && (r->m.rank >= 3) == (cmp_at(r->ids[k])->per_head != 0)) {
				present = r->ids[k];
				g = &a->g[present];
				break;
			}
		if (g->m.rank)
			return error("'%s': %s and %s are both %s", path_shown(a->path), g->src, r->shown,
				     cmp_name(present));
		g->m = r->m;
		g->f32 = r->m.is_f32 || r->m.from_f32;
		g->type = r->m.from_type;
		g->rank = r->m.rank;
		memcpy(g->dim, r->m.dim, sizeof(g->dim));
		memset(&r->m, 0, sizeof(r->m));
		snprintf(g->src, sizeof(g->src), "%s", r->shown);
		return 0;
	}
	return store(a, &best, r, mine);
}

/*
 * nn.MultiheadAttention's packed gradients split: in_proj_weight.grad
 * ([3E, E], PyTorch's (out, in)) into dW_Q, dW_K and dW_V, in_proj_bias.grad
 * ([3E]) into db_Q, db_K and db_V, each a raw array of its own.  0, or -1
 * said (a shape that is not three blocks).
 */
static int split_packed(struct against *a, size_t i)
{
	const char *keys[3];
	char list[8] = "", shown[320];
	size_t unknown = 0, dims[4];
	const int weight = alias_packed(a->raw[i].np.base, keys) == 1;
	const size_t rank = squeezed(&a->raw[i].m, dims);

	if (!weight && rank == 2 && dims[0] == 1) {
		dims[0] = dims[1]; /* a vector, (3E) or (1, 3E) */
		dims[1] = 1;
	} else if (!weight) {
		dims[0] = 1; /* not a vector: refused below */
	}
	if ((weight && rank != 2) || dims[0] % 3 || !dims[0])
		return error("'%s': %s is %s: nn.MultiheadAttention's %s, [3E%s] (q's, k's "
			     "and v's, one after another)", path_shown(a->path), a->raw[i].shown,
			     "not that shape",
			     weight ? "packed weights' gradient" : "packed biases' gradient",
			     weight ? ", E" : "");
	for (int k = 0; k < 3; k++) {
		const size_t E = dims[0] / 3, cols = weight ? dims[1] : 1;
		struct raw *r;
		const double *from;

		snprintf(shown, sizeof(shown), "%s (its %c block)", a->raw[i].shown, "qkv"[k]);
		r = raw_add(a, keys[k], shown, 0, list, sizeof(list), &unknown);
		if (!r)
			return -1;
		from = a->raw[i].m.v + (size_t)k * E * cols; /* raw_add may have moved raw */
		if (weight ? matrix_alloc(&r->m, 2, E, cols, 1) : matrix_alloc(&r->m, 1, E, 1, 1))
			return -1;
		memcpy(r->m.v, from, E * cols * sizeof(double));
		/* their type, as the packed array's */
		r->m.from_f32 = a->raw[i].m.from_f32 || a->raw[i].m.is_f32;
		r->m.from_type = a->raw[i].m.from_type;
		/* PyTorch's (out, in) as -w's (in, out), unless --layout torch
		 * turns every weight's gradient so */
		if (weight && !a->torch && matrix_transpose(&r->m))
			return -1;
	}
	return 0;
}

int against_resolve(struct against *a, const matrix *mine)
{
	for (size_t i = 0, n = a->n_raw; i < n; i++)
		if (a->raw[i].packed && split_packed(a, i))
			return -1;
	/* PyTorch's names of nn.Linear's weights' gradients are (out, in):
	 * turned to the run's (in, out), unless --layout torch compares every
	 * weight's gradient so */
	for (size_t i = 0; i < a->n_raw; i++)
		if (a->raw[i].linear && !a->torch && a->raw[i].m.rank == 2 &&
		    matrix_transpose(&a->raw[i].m))
			return -1;
	for (size_t i = 0; i < a->n_raw; i++)
		if (a->raw[i].n_ids && resolve_one(a, &a->raw[i], mine))
			return -1;
	for (size_t i = 0; i < a->n_raw; i++)
		matrix_free(&a->raw[i].m);
	free(a->raw);
	a->raw = NULL;
	a->n_raw = a->cap_raw = 0;
	return 0;
}

void against_free(struct against *a)
{
	for (int s = 0; s < C_COUNT; s++) {
		matrix_free(&a->g[s].m);
		free(a->g[s].heads);
	}
	for (size_t i = 0; i < a->n_raw; i++)
		matrix_free(&a->raw[i].m);
	free(a->raw);
	memset(a, 0, sizeof(*a));
}

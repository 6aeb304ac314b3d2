/*
 * read/json.c: JSON files into matrices: a document's nodes (read/json_doc.c
 * parses and checks the document) converted element by element, each
 * wrong one named by its path, line and column.
 */
#include "read/json.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/opts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The keys of mha's own JSON files, which an object holding a matrix may
 * have beside the one read, since a run's output is read back as the next
 * one's input: mha forward's output (steps.c's keys, meta and the labels),
 * mha backward's (cmd/backward.c's) and mha init's weights (weights.c's).
 * Any other key is a typo or a file of another kind.
 */
static const char *const own_keys[] = {
	"meta", "tokens", "kv_tokens", "X", "Q", "K", "V", "q_rot", "k_rot", "mask", "heads",
	"concat", "output",
	"grad_output", "dconcat", "dq_rot", "dk_rot", "dQ", "dK", "dV", "dX", "dX_kv", "dX_k",
	"dX_v", "dW_Q", "dW_K", "dW_V", "dW_O", "db_Q", "db_K", "db_V", "db_O", "dsinks",
	"q_norm", "k_norm", "dq_norm", "dk_norm", "dq_norm_weight", "dk_norm_weight",
	"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
};
#define N_OWN (sizeof(own_keys) / sizeof(own_keys[0]))

/* read_json's object: the spec's keys and mha's own, each once (closest_name
 * takes two equal names for a tie) */
static int object_keys(const json_doc *doc, const read_spec *spec)
{
	const char *known[N_OWN + 8];
	size_t n = 0;
	char expected[256] = "", keys[128] = "";

	for (size_t i = 0; spec->keys && spec->keys[i] && n < 8; i++) {
		known[n++] = spec->keys[i];
		snprintf(keys + strlen(keys), sizeof(keys) - strlen(keys), "%s\"%s\"",
			 i ? " or " : "", spec->keys[i]);
	}
	for (size_t i = 0, m = n; i < N_OWN; i++) {
		size_t j;

		for (j = 0; j < m && strcmp(known[j], own_keys[i]); j++)
			;
		if (j == m)
			known[n++] = own_keys[i];
	}
	snprintf(expected, sizeof(expected), "%s is under %s%s; other keys must be those of mha's "
		 "own JSON output", spec->what, keys,
		 (spec->flags & READ_LABELS) ? ", its labels under \"tokens\"" : "");
	return json_known_keys(doc, doc->root, known, n, expected);
}

/* "a string \"0.4x\"", "an object", …: what was found instead */
static const char *describe(const cJSON *n, char *buf, size_t size)
{
	if (cJSON_IsString(n)) {
		snprintf(buf, size, "the string \"%.40s%s\"", n->valuestring,
			 strlen(n->valuestring) > 40 ? "..." : "");
		return buf;
	}
	if (json_bare_token(n)) {
		snprintf(buf, size, "%s", json_bare_token(n));
		return buf;
	}
	if (cJSON_IsNumber(n)) {
		snprintf(buf, size, "the number %.17g", n->valuedouble);
		return buf;
	}
	if (cJSON_IsBool(n))
		return cJSON_IsTrue(n) ? "true" : "false";
	if (cJSON_IsNull(n))
		return "null";
	if (cJSON_IsArray(n))
		return "an array";
	if (cJSON_IsObject(n))
		return "an object";
	return "something else";
}

struct conv {
	const json_doc *doc;
	const char *key;   /* where the node is in the top-level object, or NULL */
	const char *what;
	unsigned flags;
	size_t rank;
	size_t dim[4];
	double *out;       /* where the next value goes; NULL: only check them */
	int bools;  /* -1 unknown yet, 0 numbers, 1 booleans */
	char path[96];
	char where[4352]; /* a path (up to PATH_MAX) and a line and column */
};

static const char *path_of(struct conv *c, const size_t *idx, size_t depth)
{
	size_t used = (size_t)snprintf(c->path, sizeof(c->path), "%s", c->what);

	for (size_t i = 0; i < depth && used < sizeof(c->path); i++)
		used += (size_t)snprintf(c->path + used, sizeof(c->path) - used, "[%zu]", idx[i]);
	return c->path;
}

/* "file:line:col" of the element at idx[0..depth), or just "file" */
static const char *where(struct conv *c, const size_t *idx, size_t depth)
{
	return json_where(c->doc, c->key, idx, depth, c->where, sizeof(c->where));
}

static int leaf(struct conv *c, const cJSON *n, const size_t *idx, double *v)
{
	char buf[80];
	const size_t r = c->rank;

	if (cJSON_IsBool(n) && (c->flags & READ_BOOL)) {
		if (c->bools == 0)
			return error("%s: %s: expected a number like the rest, found %s",
				     where(c, idx, r), path_of(c, idx, r), describe(n, buf, sizeof(buf)));
		c->bools = 1;
		*v = cJSON_IsTrue(n) ? 1.0 : 0.0;
		return 0;
	}
	if (c->bools == 1)
		return error("%s: %s: expected true or false like the rest, found %s",
			     where(c, idx, r), path_of(c, idx, r), describe(n, buf, sizeof(buf)));
	if (cJSON_IsNumber(n)) {
		if (!isfinite(n->valuedouble) && !json_bare_token(n))
			return error("%s: %s: number out of range (beyond about 1.8e308)",
				     where(c, idx, r), path_of(c, idx, r));
		if (!isfinite(n->valuedouble) && !(c->flags & READ_NONFINITE))
			return error("%s: %s: %s is not allowed here (only a mask may hold -inf)",
				     where(c, idx, r), path_of(c, idx, r), json_bare_token(n));
		*v = n->valuedouble;
	} else if (cJSON_IsString(n) && parse_nonfinite(n->valuestring, v)) {
		if (!(c->flags & READ_NONFINITE))
			return error("%s: %s: \"%s\" is not allowed here (only a mask may hold -inf)",
				     where(c, idx, r), path_of(c, idx, r), n->valuestring);
	} else {
		return error("%s: %s: expected %s, found %s", where(c, idx, r), path_of(c, idx, r),
			     (c->flags & READ_BOOL) ? "a number or a boolean" : "a number",
			     describe(n, buf, sizeof(buf)));
	}
	c->bools = 0;
	return 0;
}

static int fill(struct conv *c, const cJSON *n, size_t depth, size_t *idx)
{
	char buf[80];
	const cJSON *e;
	size_t i = 0;

	if (depth == c->rank) {
		double unused;

		return leaf(c, n, idx, c->out ? c->out++ : &unused);
	}
	if (!cJSON_IsArray(n))
		return error("%s: %s: expected an array of %zu entries, found %s", where(c, idx, depth),
			     path_of(c, idx, depth), c->dim[depth], describe(n, buf, sizeof(buf)));
	if ((size_t)cJSON_GetArraySize(n) != c->dim[depth]) {
		const int got = cJSON_GetArraySize(n);
		char first[96];
		const size_t zeros[4] = { 0, 0, 0, 0 };

		snprintf(first, sizeof(first), "%s", path_of(c, zeros, depth));
		return error("%s: %s has %d entr%s but %s has %zu: rows must be equally long",
			     where(c, idx, depth), path_of(c, idx, depth), got, got == 1 ? "y" : "ies",
			     first, c->dim[depth]);
	}
	cJSON_ArrayForEach(e, n) {
		idx[depth] = i++;
		if (fill(c, e, depth + 1, idx))
			return -1;
	}
	return 0;
}

static const char *const rank_names[] = { "a number", "a 1-D array", "a 2-D array", "a 3-D array",
					   "a 4-D array" };

/* " (up to 3-D)", " or a 2-D array", "": what else a spec accepts, into buf */
static const char *more_ranks(char *buf, size_t size, size_t min_rank, size_t max_rank)
{
	if (max_rank == min_rank)
		snprintf(buf, size, "%s", "");
	else if (max_rank >= 3)
		snprintf(buf, size, " (up to %zu-D)", max_rank);
	else
		snprintf(buf, size, "%s", " or a 2-D array");
	return buf;
}

int json_node_matrix(matrix *m, const json_doc *doc, const cJSON *node, const char *key,
		     const char *what, size_t min_rank, size_t max_rank, unsigned flags)
{
	struct conv c = { .doc = doc, .key = key, .what = what, .flags = flags, .bools = -1 };
	size_t idx[4] = { 0, 0, 0, 0 };
	const cJSON *n = node;
	char buf[80], more[32];

	memset(m, 0, sizeof(*m));
	/* the shape comes from the first element at each depth */
	while (cJSON_IsArray(n)) {
		if (c.rank == 4)
			return error("%s: %s: expected %s, found an array nested deeper than 4",
				     where(&c, idx, 0), what, rank_names[max_rank]);
		if (!cJSON_GetArraySize(n))
			return error("%s: %s: empty array", where(&c, idx, c.rank),
				     path_of(&c, idx, c.rank));
		c.dim[c.rank++] = (size_t)cJSON_GetArraySize(n);
		n = n->child;
	}
	if (c.rank < min_rank || c.rank > max_rank) {
		if (c.rank == 0)
			return error("%s: %s: expected %s, found %s", where(&c, idx, 0), what,
				     rank_names[min_rank], describe(node, buf, sizeof(buf)));
		return error("%s: %s: expected %s%s, found %s", where(&c, idx, 0), what,
			     rank_names[min_rank], more_ranks(more, sizeof(more), min_rank, max_rank),
			     rank_names[c.rank]);
	}
	/* the shape comes from the first element at each depth, so a few bytes
	 * can claim billions of entries ([[[0, 0, …], 0, …], 0, …]): check every
	 * element first, with nowhere to put it, and allocate only a shape the
	 * document holds */
	if (fill(&c, node, 0, idx))
		return -1;
	if (matrix_alloc_dims(m, c.rank, c.dim))
		return -1;
	c.out = m->v;
	c.bools = -1;
	if (fill(&c, node, 0, idx)) {
		matrix_free(m);
		return -1;
	}
	m->is_bool = c.bools == 1;
	return 0;
}

/* "tokens": ["The", "bear", …] beside the matrix: one label a row */
static int json_tokens(matrix *m, const json_doc *doc, const read_spec *spec)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc->root, "tokens"), *e;
	size_t n = 0;
	/* a batch (3-D): the labels of each sequence's rows, the same for all */
	const size_t rows = matrix_rows(m);

	if (!t)
		return 0;
	if (!cJSON_IsArray(t) || m->rank < 2)
		return error("%s: \"tokens\" must be an array of strings, one per row of %s",
			     doc->f->name, spec->what);
	if ((size_t)cJSON_GetArraySize(t) != rows)
		return error("%s: \"tokens\" has %d label%s but %s has %zu row%s%s", doc->f->name,
			     cJSON_GetArraySize(t), cJSON_GetArraySize(t) == 1 ? "" : "s", spec->what,
			     rows, rows == 1 ? "" : "s", m->rank == 3 ? " in each sequence" : "");
	m->labels_held = budget_block((rows ? rows : 1) * sizeof(*m->labels));
	if (budget_take(m->labels_held)) {
		m->labels_held = 0;
		return budget_refuse(doc->f->name, rows * sizeof(*m->labels));
	}
	m->labels = calloc(rows ? rows : 1, sizeof(*m->labels));
	if (!m->labels)
		return error("out of memory");
	m->n_labels = rows;
	cJSON_ArrayForEach(e, t) {
		size_t len;

		if (!cJSON_IsString(e))
			return error("%s: tokens[%zu]: expected a string", doc->f->name, n);
		len = strlen(e->valuestring) + 1;
		if (budget_take(budget_block(len)))
			return budget_refuse(doc->f->name, len);
		m->labels_held += budget_block(len);
		if (!(m->labels[n++] = strdup(e->valuestring)))
			return error("out of memory");
	}
	return 0;
}

int read_json(matrix *m, const input_file *f, const read_spec *spec)
{
	json_doc doc;
	const cJSON *node = NULL;
	const char *key = NULL;
	int rc;

	memset(m, 0, sizeof(*m));
	if (json_parse(&doc, f)) {
		json_doc_free(&doc);
		return -1;
	}
	if (cJSON_IsObject(doc.root) && spec->keys && object_keys(&doc, spec)) {
		json_doc_free(&doc);
		return -1;
	}
	if (cJSON_IsObject(doc.root)) {
		for (size_t i = 0; spec->keys && spec->keys[i] && !node; i++) {
			node = cJSON_GetObjectItemCaseSensitive(doc.root, spec->keys[i]);
			key = spec->keys[i];
		}
		if (!node) {
			char list[128] = "";

			for (size_t i = 0; spec->keys && spec->keys[i]; i++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s\"%s\"",
					 i ? " or " : "", spec->keys[i]);
			rc = spec->keys
				? error("%s: expected %s as an array, or an object holding it under %s",
					f->name, spec->what, list)
				: error("%s: expected %s as an array, found an object", f->name, spec->what);
			json_doc_free(&doc);
			return rc;
		}
	} else {
		node = doc.root;
	}
	rc = json_node_matrix(m, &doc, node, key, key ? key : spec->what, spec->min_rank,
			      spec->max_rank, spec->flags);
	if (!rc && (spec->flags & READ_LABELS) && cJSON_IsObject(doc.root))
		rc = json_tokens(m, &doc, spec);
	if (rc)
		matrix_free(m); /* the tokens may have failed after the matrix */
	json_doc_free(&doc);
	return rc;
}

/*
 * against.c: reading 'mha compare --against PATH' (against.h): a JSON file
 * in mha's schema, a directory of one file per step, a .npz archive, or
 * one matrix taken as the output.  Names and keys are mha's own (steps.c's
 * table, step_file_name): a name that is not a step's is refused, so that a
 * typo cannot leave a step silently uncompared.
 */
#include "cmd/against.h"

#include "base/cli.h"
#include "read/input.h"
#include "read/named.h"
#include "run/steps.h"
#include "base/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what compare reads, in the order of the computation: its names and keys are steps.c's */
const struct cmp_step cmp_steps[C_COUNT] = {
	[C_X] = { STEP_X, 0 },
	[C_C_Q] = { STEP_C_Q, 0 },
	[C_C_Q_NORM] = { STEP_C_Q_NORM, 0 },
	[C_Q_NOPE] = { STEP_Q_NOPE, 0 },
	[C_Q_PE] = { STEP_Q_PE, 0 },
	[C_Q_PE_ROT] = { STEP_Q_PE_ROT, 0 },
	[C_C_KV] = { STEP_C_KV, 0 },
	[C_C_KV_NORM] = { STEP_C_KV_NORM, 0 },
	[C_K_PE] = { STEP_K_PE, 0 },
	[C_K_PE_ROT] = { STEP_K_PE_ROT, 0 },
	[C_K_NOPE] = { STEP_K_NOPE, 0 },
	[C_Q] = { STEP_Q, 0 },
	[C_K] = { STEP_K, 0 },
	[C_V] = { STEP_V, 0 },
	[C_Q_NORM] = { STEP_Q_NORM, 0 },
	[C_K_NORM] = { STEP_K_NORM, 0 },
	[C_Q_ROT] = { STEP_Q_ROT, 0 },
	[C_K_ROT] = { STEP_K_ROT, 0 },
	[C_HEAD_Q] = { STEP_Q, 1 },
	[C_HEAD_K] = { STEP_K, 1 },
	[C_HEAD_V] = { STEP_V, 1 },
	[C_SCORES] = { STEP_SCORES, 1 },
	[C_SCALED] = { STEP_SCALED, 1 },
	[C_SOFTCAPPED] = { STEP_SOFTCAPPED, 1 },
	[C_MASK] = { STEP_MASK, 0 },
	[C_MASKED] = { STEP_MASKED, 1 },
	[C_SOFTMAX] = { STEP_SOFTMAX, 1 },
	[C_HEAD_OUTPUT] = { STEP_HEADS, 1 },
	[C_CONCAT] = { STEP_CONCAT, 0 },
	[C_OUTPUT] = { STEP_OUTPUT, 0 },
};

const char *cmp_key(int i)
{
	return step_key(&steps[cmp_steps[i].step]);
}

const char *cmp_name(int i)
{
	static char names[C_COUNT][32];

	if (!names[i][0]) {
		/* a head's matrix under a key the whole model has too: "heads.Q" */
		int whole_too = 0;

		for (int j = 0; j < C_COUNT; j++)
			whole_too |= cmp_steps[i].per_head && !cmp_steps[j].per_head &&
				     !strcmp(cmp_key(j), cmp_key(i));
		snprintf(names[i], sizeof(names[i]), "%s%s", whole_too ? "heads." : "", cmp_key(i));
	}
	return names[i];
}

const char *cmp_keys_list(char *buf, size_t size, int per_head)
{
	size_t at = 0;
	int heads_said = 0;

	buf[0] = '\0';
	for (int i = 0; i < C_COUNT && at < size; i++) {
		const char *k = cmp_key(i);

		if (cmp_steps[i].per_head != per_head) {
			/* the top level's "heads", where the heads' steps begin */
			if (per_head || heads_said || i < C_MASK)
				continue;
			k = "heads";
			heads_said = 1;
			i--;
		}
		at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? ", " : "", k);
	}
	return buf;
}

/* the step under key (top level: per_head 0; in "heads": 1), or -1 */
static int step_of_key(const char *key, int per_head)
{
	for (int i = 0; i < C_COUNT; i++)
		if (cmp_steps[i].per_head == per_head && !strcmp(cmp_key(i), key))
			return i;
	return -1;
}

/* the keys known, for "did you mean": a head's, or the top level's and a head's */
static size_t known_keys(const char **names, int per_head)
{
	size_t n = 0;

	for (int i = 0; i < C_COUNT; i++)
		if (cmp_steps[i].per_head == per_head ||
		    (!per_head && step_of_key(cmp_key(i), 0) < 0))
			names[n++] = cmp_key(i);
	if (!per_head)
		names[n++] = "heads";
	return n;
}

/* "not a step: did you mean 'scores'?" for key, at the top level or in a head */
static int unknown_key(const char *file, const char *where, const char *key, int per_head)
{
	const char *names[C_COUNT + 1];
	const size_t n = known_keys(names, per_head);
	const char *near = closest_name(key, names, n);
	char shown[200], list[400];

	text_shown(shown, sizeof(shown), key);
	if (!per_head && step_of_key(key, 1) >= 0)
		return error("'%s': \"%s\" is a step of each head: give it under \"heads\", "
			     "[{\"%s\": ...}, ...], one object per head", path_shown(file), shown, shown);
	if (near && !per_head && step_of_key(near, 0) < 0)
		return error("'%s': \"%s\" is not a step of mha's JSON output: did you mean \"%s\" "
			     "(under \"heads\")?", path_shown(file), shown, near);
	if (near)
		return error("'%s': %s\"%s\" is not a step of mha's JSON output: did you mean \"%s\"?",
			     path_shown(file), where, shown, near);
	return error("'%s': %s\"%s\" is not a step of mha's JSON output (%s)", path_shown(file), where,
		     shown, cmp_keys_list(list, sizeof(list), per_head));
}

/* per-head matrices as read, one list per step, stacked at the end */
struct heads_read {
	size_t heads;
	matrix *m[C_COUNT];     /* [heads] */
	size_t count[C_COUNT];  /* how many heads gave it */
};

static int heads_slot(struct heads_read *h, int s, size_t head, matrix **out)
{
	if (!h->m[s]) {
		h->m[s] = calloc(h->heads, sizeof(matrix));
		if (!h->m[s])
			return error("out of memory");
	}
	*out = &h->m[s][head];
	return 0;
}

static void heads_free(struct heads_read *h)
{
	for (int s = 0; s < C_COUNT; s++) {
		for (size_t i = 0; h->m[s] && i < h->heads; i++)
			matrix_free(&h->m[s][i]);
		free(h->m[s]);
	}
}

/*
 * Each step's heads as one (H, rows, cols) matrix; name(head, buf) names
 * head's matrix in messages ("heads[2].scores", "head2_scores.csv").
 */
static int heads_stack(struct against *a, struct heads_read *h, const char *path,
		       const char *(*name)(char *buf, size_t size, int s, size_t head))
{
	char n1[300], n2[300];

	for (int s = 0; s < C_COUNT; s++) {
		const matrix *first;
		size_t rows, cols;

		if (!h->m[s])
			continue;
		for (size_t i = 0; i < h->heads; i++)
			if (!h->m[s][i].rank) {
				size_t g = 0;

				while (!h->m[s][g].rank)
					g++;
				return error("'%s': %s is missing, but %s is given: give a step for every "
					     "head (the run has %zu)", path_shown(path),
					     name(n1, sizeof(n1), s, i), name(n2, sizeof(n2), s, g), h->heads);
			}
		first = &h->m[s][0];
		rows = matrix_rows(first);
		cols = matrix_cols(first);
		for (size_t i = 1; i < h->heads; i++)
			if (matrix_rows(&h->m[s][i]) != rows || matrix_cols(&h->m[s][i]) != cols ||
			    matrix_size(&h->m[s][i]) != rows * cols) {
				char s1[40], s2[40];

				return error("'%s': %s is %s but %s is %s: every head's %s has one shape",
					     path_shown(path), name(n1, sizeof(n1), s, i),
					     matrix_shape(&h->m[s][i], s1, sizeof(s1)),
					     name(n2, sizeof(n2), s, 0), matrix_shape(first, s2, sizeof(s2)),
					     cmp_key(s));
			}
		if (matrix_size(first) != rows * cols) {
			char s1[40];

			return error("'%s': %s is %s: a head's step is 2-D", path_shown(path),
				     name(n1, sizeof(n1), s, 0), matrix_shape(first, s1, sizeof(s1)));
		}
		if (matrix_alloc(&a->m[s], 3, h->heads, rows, cols))
			return -1;
		for (size_t i = 0; i < h->heads; i++)
			memcpy(a->m[s].v + i * rows * cols, h->m[s][i].v, rows * cols * sizeof(double));
		snprintf(a->src[s], sizeof(a->src[s]), "%s", name(n1, sizeof(n1), s, (size_t)-1));
	}
	return 0;
}

/* ---- JSON ---------------------------------------------------------------- */

static const char *json_head_name(char *buf, size_t size, int s, size_t head)
{
	if (head == (size_t)-1)
		snprintf(buf, size, "heads[].%s", cmp_key(s));
	else
		snprintf(buf, size, "heads[%zu].%s", head, cmp_key(s));
	return buf;
}

static unsigned flags_of(int s)
{
	return READ_NONFINITE | (s == C_MASK ? READ_BOOL : 0);
}

static int read_json_object(struct against *a, named_set *set, const char *path, size_t heads)
{
	struct heads_read h = { .heads = heads };
	named_entry e;
	int rc = -1;

	while (named_next(set, &e)) {
		const cJSON *item = e.node;
		const char *key = e.name;
		int s;

		if (!strcmp(key, "meta") || !strcmp(key, "tokens") || !strcmp(key, "kv_tokens") ||
		    cJSON_IsNull(item))
			continue;
		if (!strcmp(key, "heads")) {
			const cJSON *obj;
			size_t i = 0;

			if (!cJSON_IsArray(item) || (size_t)cJSON_GetArraySize(item) != heads) {
				error("'%s': \"heads\" holds %d object%s, but the run has %zu head%s "
				      "(--heads)", path_shown(path),
				      cJSON_IsArray(item) ? cJSON_GetArraySize(item) : 0,
				      cJSON_IsArray(item) && cJSON_GetArraySize(item) == 1 ? "" : "s",
				      heads, heads == 1 ? "" : "s");
				goto done;
			}
			cJSON_ArrayForEach(obj, item) {
				const cJSON *m;

				if (!cJSON_IsObject(obj)) {
					error("'%s': heads[%zu] is not an object of steps", path_shown(path), i);
					goto done;
				}
				cJSON_ArrayForEach(m, obj) {
					char where[48], what[96];
					matrix *dst = NULL;

					if (cJSON_IsNull(m))
						continue;
					snprintf(where, sizeof(where), "heads[%zu].", i);
					s = step_of_key(m->string, 1);
					if (s < 0) {
						unknown_key(path, where, m->string, 1);
						goto done;
					}
					snprintf(what, sizeof(what), "heads[%zu].%s", i, cmp_key(s));
					if (heads_slot(&h, s, i, &dst) ||
					    json_node_matrix(dst, &set->doc, m, NULL, what, 1, 4, flags_of(s)))
						goto done;
				}
				i++;
			}
			continue;
		}
		s = step_of_key(key, 0);
		if (s < 0) {
			unknown_key(path, "", key, 0);
			goto done;
		}
		if (named_read(set, &e, &a->m[s], &(read_spec){ key, NULL, 1, 4, flags_of(s) }))
			goto done;
		snprintf(a->src[s], sizeof(a->src[s]), "%s", key);
	}
	rc = heads_stack(a, &h, path, json_head_name);
done:
	heads_free(&h);
	return rc;
}

/* ---- a directory --------------------------------------------------------- */

static const char *dir_head_name(char *buf, size_t size, int s, size_t head)
{
	if (head == (size_t)-1)
		snprintf(buf, size, "headN_%s", cmp_key(s));
	else
		snprintf(buf, size, "head%zu_%s", head + 1, cmp_key(s));
	return buf;
}

/* "head12_scores": 12 and "scores"; 0 when stem is not of that form */
static size_t head_prefix(const char *stem, const char **rest)
{
	size_t n = 0;
	const char *p = stem + 4;

	if (strncmp(stem, "head", 4) || *p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > 100000000)
			return 0;
		n = n * 10 + (size_t)(*p - '0');
	}
	if (*p != '_')
		return 0;
	*rest = p + 1;
	return n;
}

static int read_dir(struct against *a, named_set *set, const char *path, size_t heads)
{
	struct heads_read h = { .heads = heads }, planes = { .heads = heads };
	named_entry e;
	int rc = -1;

	while (named_next(set, &e)) {
		char shown[300];
		const char *stem = e.name, *rest = NULL;
		size_t head;
		matrix *dst = NULL;
		int s = -1;
		read_spec spec = { .min_rank = 1, .max_rank = 4 };

		if (!strcmp(e.file, "meta.json"))
			continue;
		text_shown(shown, sizeof(shown), e.file);
		head = head_prefix(stem, &rest);
		if (head) {
			s = step_of_key(rest, 1);
			if (s >= 0 && head <= heads && heads_slot(&h, s, head - 1, &dst))
				goto done;
		} else if (!strncmp(stem, "mask_head", 9)) {
			/* a CSV directory's mask, one file per head */
			char one[300];

			snprintf(one, sizeof(one), "head%s_mask", stem + 9);
			head = head_prefix(one, &rest);
			s = head ? C_MASK : -1;
			if (s >= 0 && head <= heads && heads_slot(&planes, s, head - 1, &dst))
				goto done;
		} else {
			s = step_of_key(stem, 0);
			dst = s >= 0 ? &a->m[s] : NULL;
		}
		if (s < 0) {
			char top[400], each[200];

			cmp_keys_list(top, sizeof(top), 0);
			/* no "heads" file: each head's are headN_KEY */
			if (strstr(top, "heads, "))
				memmove(strstr(top, "heads, "), strstr(top, "heads, ") + 7,
					strlen(strstr(top, "heads, ") + 7) + 1);
			error("'%s/%s': not a step's file name (KEY.csv or headN_KEY.csv, as 'mha forward "
			      "-o DIR/' names them: %s; headN_ with %s)", path_shown(path), shown, top,
			      cmp_keys_list(each, sizeof(each), 1));
			goto done;
		}
		if (head > heads) {
			error("'%s/%s': head %zu, but the run has %zu head%s (--heads)", path_shown(path),
			      shown, head, heads, heads == 1 ? "" : "s");
			goto done;
		}
		if (dst->rank) {
			error("'%s/%s': a second file for %s", path_shown(path), shown, stem);
			goto done;
		}
		spec.what = stem;
		spec.flags = flags_of(s);
		if (named_read(set, &e, dst, &spec))
			goto done;
		if (!head)
			snprintf(a->src[s], sizeof(a->src[s]), "%s", shown);
	}
	rc = heads_stack(a, &h, path, dir_head_name);
	if (!rc && planes.m[C_MASK]) {
		if (a->m[C_MASK].rank) {
			rc = error("'%s': mask and mask_headN files both given", path_shown(path));
		} else {
			struct against tmp = { 0 };

			rc = heads_stack(&tmp, &planes, path, dir_head_name);
			a->m[C_MASK] = tmp.m[C_MASK];
			snprintf(a->src[C_MASK], sizeof(a->src[C_MASK]), "mask_headN");
		}
	}
done:
	heads_free(&h);
	heads_free(&planes);
	return rc;
}

/* ---- .npz ---------------------------------------------------------------- */


static const char *npz_head_name(char *buf, size_t size, int s, size_t head)
{
	(void)head;
	snprintf(buf, size, "heads.%s", cmp_key(s));
	return buf;
}

/* the member nearest name among those mha names ("Q", "heads.softmax"), or NULL */
static const char *npz_closest(const char *name)
{
	static char each[C_COUNT][40];
	static const char *names[C_COUNT];

	for (int i = 0; i < C_COUNT && !names[i]; i++) {
		snprintf(each[i], sizeof(each[i]), "%s%s", cmp_steps[i].per_head ? "heads." : "",
			 cmp_key(i));
		names[i] = each[i];
	}
	return closest_name(name, names, C_COUNT);
}

/* members named as '-o run.npz' names them: "Q", "heads.softmax" (H, ...) */
static int read_npz_members(struct against *a, named_set *set, const char *path, size_t heads)
{
	const npz_archive *z = set->z;
	named_entry e;

	if (npz_count(z) == 1 && !npz_has(z, "meta")) {
		/* one array, as np.savez(f, out) names it (arr_0): the output, as one
		 * matrix in another format would be */
		const char *name = npz_name(z, 0);
		const int per_head = !strncmp(name, "heads.", 6);

		/* a name nearly a step's is a typo, said below */
		if (!per_head && step_of_key(name, 0) < 0 && !npz_closest(name)) {
			const read_spec spec = { .what = name, .min_rank = 1, .max_rank = 3,
						 .flags = READ_NONFINITE };

			a->kind = "matrix";
			if (npz_read(z, name, &a->m[C_OUTPUT], &spec))
				return -1;
			snprintf(a->src[C_OUTPUT], sizeof(a->src[C_OUTPUT]), "the one matrix");
			return 0;
		}
	}
	while (named_next(set, &e)) {
		const char *name = e.name;
		const int per_head = !strncmp(name, "heads.", 6);
		const int s = step_of_key(per_head ? name + 6 : name, per_head);
		read_spec spec = { .what = name, .min_rank = 1, .max_rank = 4 };
		char shown[200];

		if (!strcmp(name, "meta") || !strcmp(name, "tokens") || !strcmp(name, "kv_tokens"))
			continue;
		text_shown(shown, sizeof(shown), name);
		if (s < 0 && npz_closest(name)) {
			error("'%s': member '%s' is not a step: did you mean '%s'?", path_shown(path),
			      shown, npz_closest(name));
			return -1;
		}
		if (s < 0) {
			char list[800];
			size_t at = 0;

			for (int i = 0; i < C_COUNT && at < sizeof(list); i++)
				at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s%s",
						       i ? ", " : "", cmp_steps[i].per_head ? "heads." : "",
						       cmp_key(i));
			error("'%s': member '%s' is not a step (mha's names: %s)", path_shown(path), shown,
			      list);
			return -1;
		}
		spec.flags = flags_of(s);
		if (named_read(set, &e, &a->m[s], &spec))
			return -1;
		if (per_head && (a->m[s].rank < 3 || a->m[s].dim[a->m[s].rank - 3] != heads)) {
			char sh[40];

			error("'%s': %s is %s: expected one matrix per head, heads first (%zu, rows, "
			      "columns)", path_shown(path), shown, matrix_shape(&a->m[s], sh, sizeof(sh)),
			      heads);
			return -1;
		}
		if (per_head)
			npz_head_name(a->src[s], sizeof(a->src[s]), s, 0);
		else
			snprintf(a->src[s], sizeof(a->src[s]), "%s", shown);
	}
	return 0;
}

/* ---- the whole ------------------------------------------------------------ */

int against_read(struct against *a, const char *path, size_t heads)
{
	named_set set;
	int rc;

	memset(a, 0, sizeof(*a));
	if (is_dir(path)) {
		a->kind = "dir";
		if (named_dir(&set, path, NAMED_JOIN_ONCE))
			rc = errno == ENOMEM ? error("out of memory")
					     : error("'%s': cannot read the directory", path_shown(path));
		else
			rc = read_dir(a, &set, path, heads);
	} else if (named_file(&set, path)) {
		rc = -1;
	} else if (set.kind == NAMED_NPZ) {
		a->kind = "npz";
		rc = read_npz_members(a, &set, path, heads);
	} else if (set.kind == NAMED_JSON) {
		a->kind = "json";
		rc = read_json_object(a, &set, path, heads);
	} else {
		/* one matrix, in whatever format: the output */
		a->kind = "matrix";
		if (set.kind == NAMED_VALUE)
			rc = json_node_matrix(&a->m[C_OUTPUT], &set.doc, set.doc.root, NULL, "output", 1,
					      4, READ_NONFINITE);
		else
			rc = read_input(&a->m[C_OUTPUT], &set.in,
					&(read_spec){ .what = "output", .min_rank = 1, .max_rank = 3,
						      .flags = READ_NONFINITE });
		if (!rc)
			snprintf(a->src[C_OUTPUT], sizeof(a->src[C_OUTPUT]), "the one matrix");
	}
	named_close(&set);
	if (!rc) {
		int any = 0;

		for (int s = 0; s < C_COUNT; s++)
			any |= a->m[s].rank != 0;
		if (!any) {
			char list[400];

			rc = error("'%s': no step to compare: give any of %s", path_shown(path),
				   cmp_keys_list(list, sizeof(list), 0));
		}
	}
	return rc;
}

void against_free(struct against *a)
{
	for (int s = 0; s < C_COUNT; s++)
		matrix_free(&a->m[s]);
}

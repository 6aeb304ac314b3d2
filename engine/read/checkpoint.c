/*
 * checkpoint.c: a safetensors checkpoint's files and tensor names
 * (checkpoint.h): one file, a folder of them, or an index naming the
 * shards; each shard's header read once and its file open only while
 * read; the names sorted, and the nearest ones to a missing name found in
 * bounded work.  Not the families or config.json: model.c.
 */
#include "read/checkpoint.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/files.h"
#include "read/input.h"
#include "read/json.h"
#include "read/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"

/*
 * One file of a checkpoint.  Its descriptor is open only while its header or
 * one tensor is read, for a folder may hold thousands of them; reopened, it
 * must be the file the header was read from.
 */
struct ckpt_shard {
	char *path;
	st_file st;    /* st.path set once the header is read; st.fd -1 when closed */
	dev_t dev;     /* the file the header was read from */
	ino_t ino;
	int broken;    /* its header could not be read (said) */
};

/* ---- the checkpoint's files --------------------------------------------- */

static int ends_with(const char *s, const char *tail)
{
	const size_t n = strlen(s), m = strlen(tail);

	return n >= m && !strcmp(s + n - m, tail);
}

static int is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_safetensors(const char *name)
{
	return ends_with(name, ".safetensors");
}

/* a file of the checkpoint's, as ckpt_files passes them */
static int is_ckpt_file(const char *name)
{
	return ends_with(name, ".safetensors") || !strcmp(name, INDEX_NAME) ||
	       !strcmp(name, "config.json");
}

/* dir holds a .safetensors file */
static int has_safetensors(const char *dir)
{
	char **names;
	size_t n;

	if (files_list_dir(dir, is_safetensors, &names, &n))
		return 0;
	files_list_free(names, n);
	return n != 0;
}

int ckpt_is_checkpoint(const char *path)
{
	char dir[4096];

	if (!path || !strcmp(path, "-"))
		return 0;
	if (is_dir(path)) {
		snprintf(dir, sizeof(dir), "%s/" INDEX_NAME, path);
		return is_file(dir) || has_safetensors(path);
	}
	return ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json");
}

/* the folder path is in, or path itself when it is one */
void ckpt_folder_of(const char *path, char *dir, size_t size)
{
	const char *slash;

	if (is_dir(path)) {
		snprintf(dir, size, "%s", path);
		return;
	}
	slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, size, ".");
	else
		snprintf(dir, size, "%.*s", (int)(slash - path == 0 ? 1 : slash - path), path);
}

/* The files the index names (its weight_map's) that are not .safetensors
 * (those the folder's listing passed already), each to fn once in a row.
 * 0, or -1 said: the index cannot be read (the run stops there, once), or
 * fn's. */
static int index_files(const char *index, const char *dir,
		       int (*fn)(void *ctx, const char *file), void *ctx)
{
	char file[4400];
	const char *last = "";
	input_file in;
	json_doc doc = { 0 };
	const cJSON *map, *e;
	int rc = 0;

	if (input_load_found(&in, index) || json_parse(&doc, &in)) {
		json_doc_free(&doc);
		input_free(&in);
		return -1;
	}
	map = cJSON_GetObjectItemCaseSensitive(doc.root, "weight_map");
	for (e = cJSON_IsObject(map) ? map->child : NULL; e; e = e->next) {
		if (rc || !cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') ||
		    ends_with(e->valuestring, ".safetensors") || !strcmp(e->valuestring, last))
			continue;
		last = e->valuestring;
		snprintf(file, sizeof(file), "%s/%s", dir, last);
		rc = fn(ctx, file);
	}
	json_doc_free(&doc);
	input_free(&in);
	return rc;
}

int ckpt_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx)
{
	char dir[4096], file[4400], **names = NULL;
	size_t n = 0;
	int rc = 0;

	ckpt_folder_of(path, dir, sizeof(dir));
	if (!is_dir(path))
		rc = fn(ctx, path);
	if (!rc && files_list_dir(dir, is_ckpt_file, &names, &n) && errno == ENOMEM)
		rc = error("out of memory"); /* unreadable: the reading says why */
	for (size_t i = 0; i < n && !rc; i++) {
		snprintf(file, sizeof(file), "%s/%s", dir, names[i]);
		rc = fn(ctx, file);
	}
	files_list_free(names, n);
	/* the shards an index names, whatever they are called */
	if (!rc && ends_with(path, ".safetensors.index.json"))
		rc = index_files(path, dir, fn, ctx);
	else if (!rc && is_dir(path)) {
		snprintf(file, sizeof(file), "%s/" INDEX_NAME, dir);
		if (access(file, F_OK) == 0)
			rc = index_files(file, dir, fn, ctx);
	}
	return rc;
}

/* n bytes of the checkpoint's tables, charged to the budget: 0, or -1 said */
static int ckpt_take(struct ckpt *c, size_t n)
{
	if (budget_take(n))
		return budget_refuse(c->path, n);
	c->held += n;
	return 0;
}

void ckpt_free(struct ckpt *c)
{
	for (size_t i = 0; i < c->n_shards; i++) {
		free(c->shards[i].path);
		st_close(&c->shards[i].st);
	}
	free(c->shards);
	free(c->names);
	json_doc_free(&c->index_doc);
	budget_give(c->held);
	memset(c, 0, sizeof(*c));
}

/* dir/name (or name alone: dir NULL) as the next shard */
static int add_shard(struct ckpt *c, const char *dir, const char *name)
{
	const size_t len = (dir ? strlen(dir) + 1 : 0) + strlen(name) + 1;
	struct ckpt_shard *sh;

	if (c->n_shards == c->shards_cap) {
		const size_t n = c->shards_cap ? 2 * c->shards_cap : 16;

		if (ckpt_take(c, (n - c->shards_cap) * sizeof(*sh)))
			return -1;
		if (!(sh = realloc(c->shards, n * sizeof(*sh))))
			return error("out of memory");
		c->shards = sh;
		c->shards_cap = n;
	}
	if (ckpt_take(c, budget_block(len)))
		return -1;
	sh = &c->shards[c->n_shards];
	memset(sh, 0, sizeof(*sh));
	sh->st.fd = -1;
	if (!(sh->path = malloc(len)))
		return error("out of memory");
	snprintf(sh->path, len, "%s%s%s", dir ? dir : "", dir ? "/" : "", name);
	c->n_shards++;
	return 0;
}

/* room for n more names */
static int names_room(struct ckpt *c, size_t n)
{
	struct ckpt_name *names;
	size_t want = c->names_cap ? c->names_cap : 64;

	if (c->n_names + n <= c->names_cap)
		return 0;
	while (want < c->n_names + n)
		want *= 2;
	if (ckpt_take(c, (want - c->names_cap) * sizeof(*names)))
		return -1;
	if (!(names = realloc(c->names, want * sizeof(*names))))
		return error("out of memory");
	c->names = names;
	c->names_cap = want;
	return 0;
}

/* name (not copied: it lives as long as c) in the index's file, or in shard */
static int add_name(struct ckpt *c, const char *name, const char *file, size_t shard)
{
	if (names_room(c, 1))
		return -1;
	c->names[c->n_names++] = (struct ckpt_name){ name, file, shard };
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_name *)a)->name, ((const struct ckpt_name *)b)->name);
}

/* ---- a shard's file ----------------------------------------------------- */

static void shard_close(struct ckpt *c, size_t i)
{
	st_file *f = &c->shards[i].st;

	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
}

/* the shard's file again, the same one its header came from: 0, or -1 said */
static int shard_reopen(struct ckpt_shard *sh)
{
	struct stat st;
	/* through files_open: replaced by a FIFO, it must not block */
	const int fd = files_open(sh->path, FILE_SEEKABLE, NULL);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || st.st_dev != sh->dev || st.st_ino != sh->ino ||
	    (uint64_t)st.st_size != sh->st.size) {
		close(fd);
		return error("%s: replaced or changed while mha read the checkpoint", sh->path);
	}
	sh->st.fd = fd;
	return 0;
}

/* the shard's header read and checked, and which file it came from: 0, or -1 said */
static int shard_header(struct ckpt_shard *sh)
{
	struct stat st;

	if (st_open(&sh->st, sh->path))
		return -1;
	if (fstat(sh->st.fd, &st) != 0)
		return error("%s: %s", sh->path, strerror(errno));
	sh->dev = st.st_dev;
	sh->ino = st.st_ino;
	return 0;
}

/* Shard i with its header read and its file open (shard_close() after), or
 * NULL (said). */
static st_file *shard_open(struct ckpt *c, size_t i)
{
	struct ckpt_shard *sh = &c->shards[i];

	if (sh->broken)
		return NULL;
	if (sh->st.fd >= 0)
		return &sh->st;
	if (sh->st.path)
		return shard_reopen(sh) ? NULL : &sh->st;
	if (shard_header(sh)) {
		st_close(&sh->st);
		sh->broken = 1;
		return NULL;
	}
	return &sh->st;
}

/* ---- the checkpoint's names --------------------------------------------- */

/* weight_map's entries: each name and the file it is in, the file found
 * only when a tensor is read from it (an index may name a million) */
static int index_names(struct ckpt *c, const cJSON *map, const char *index)
{
	const cJSON *e;
	size_t n = 0;

	cJSON_ArrayForEach(e, map)
		n++;
	if (names_room(c, n))
		return -1;
	cJSON_ArrayForEach(e, map) {
		if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') ||
		    !strcmp(e->valuestring, "..") || strlen(e->valuestring) > 255)
			return error("%s: weight_map: \"%s\" is not the name of a file in the folder",
				     index, e->string);
		if (add_name(c, e->string, e->valuestring, 0))
			return -1;
	}
	return 0;
}

/* model.safetensors.index.json: {"weight_map": {name: file}}; the names
 * stay the parsed index's strings.  found: in the -w folder, not named by
 * the user (a regular file only, files.h). */
static int read_index(struct ckpt *c, const char *index, int found)
{
	input_file in;
	const cJSON *map;
	int rc;

	c->index = index;
	rc = (found ? input_load_found(&in, index) : input_load(&in, index)) ||
			     json_parse(&c->index_doc, &in) || json_index_keys(&c->index_doc)
		     ? -1
		     : 0;
	input_free(&in);
	c->index_doc.f = NULL;
	if (rc)
		return -1;
	map = cJSON_GetObjectItemCaseSensitive(c->index_doc.root, "weight_map");
	if (!cJSON_IsObject(map))
		return error("%s: no \"weight_map\" object (tensor name -> file)", index);
	return index_names(c, map, index);
}

/* The shard the index's file is: one of those read from already, or a new
 * one (a module's few tensors: a few shards). */
static int index_shard(struct ckpt *c, const char *file, size_t *at)
{
	const size_t dir = strlen(c->dir);

	for (size_t i = 0; i < c->n_shards; i++)
		if (!strncmp(c->shards[i].path, c->dir, dir) && c->shards[i].path[dir] == '/' &&
		    !strcmp(c->shards[i].path + dir + 1, file)) {
			*at = i;
			return 0;
		}
	*at = c->n_shards;
	return add_shard(c, c->dir, file);
}

/* Every .safetensors in the folder, listed once, sorted. */
static int folder_shards(struct ckpt *c, const char *dir)
{
	char **names;
	size_t n;
	int rc = 0;

	if (files_list_dir(dir, is_safetensors, &names, &n))
		return errno == ENOMEM ? error("out of memory") : error("%s: %s", dir, strerror(errno));
	for (size_t i = 0; i < n && !rc; i++)
		rc = add_shard(c, dir, names[i]);
	files_list_free(names, n);
	if (!rc && !c->n_shards)
		return error("%s: no .safetensors file in the folder", dir);
	return rc;
}

/* Each shard's header, for its names; the shard closed again after. */
static int read_headers(struct ckpt *c)
{
	for (size_t k = 0; k < c->n_shards; k++) {
		const st_file *f = shard_open(c, k);

		if (!f)
			return -1;
		for (size_t i = 0; i < f->n; i++)
			if (add_name(c, f->t[i].name, NULL, k))
				return -1;
		shard_close(c, k);
	}
	return 0;
}

/* the names sorted (most checkpoints list them so already); a name twice refused */
static int sort_names(struct ckpt *c)
{
	size_t i = 1;

	while (i < c->n_names && strcmp(c->names[i - 1].name, c->names[i].name) < 0)
		i++;
	if (i < c->n_names)
		qsort(c->names, c->n_names, sizeof(*c->names), by_name);
	for (i = 1; i < c->n_names; i++)
		if (!strcmp(c->names[i - 1].name, c->names[i].name))
			return error("%s: tensor \"%s\" is in two of the checkpoint's files", c->path,
				     c->names[i].name);
	return 0;
}

int ckpt_open(struct ckpt *c, const char *path)
{
	int rc;

	memset(c, 0, sizeof(*c));
	c->path = path;
	ckpt_folder_of(path, c->dir, sizeof(c->dir));
	snprintf(c->index_path, sizeof(c->index_path), "%s/" INDEX_NAME, c->dir);
	if (ends_with(path, ".safetensors.index.json")) {
		snprintf(c->index_path, sizeof(c->index_path), "%s", path);
		rc = read_index(c, c->index_path, 0);
	} else if (is_dir(path) && is_file(c->index_path)) {
		rc = read_index(c, c->index_path, 1);
	} else {
		/* one file, or every .safetensors in the folder */
		rc = is_dir(path) ? folder_shards(c, path) : add_shard(c, NULL, path);
		rc = rc || read_headers(c);
	}
	return rc || sort_names(c) ? -1 : 0;
}

ptrdiff_t ckpt_find(const struct ckpt *c, const char *name)
{
	const struct ckpt_name key = { name, NULL, 0 };
	const struct ckpt_name *hit = c->n_names ? bsearch(&key, c->names, c->n_names, sizeof(*c->names),
						       by_name) : NULL;

	return hit ? hit - c->names : -1;
}

/* ---- nearest names ----------------------------------------------------- */

/* Cells of edit-distance table all of one message's suggestions may fill:
 * a hostile header's names cost no more than about 0.1 s. */
#define NEAREST_CELLS ((size_t)1 << 25)

/*
 * The edit distance of b (n chars) from want (m chars), or SIZE_MAX once it
 * is sure to be above limit or *cells would run out.  row: (m + 1).
 */
static size_t edits_within(const char *want, size_t m, const char *b, size_t n, size_t limit,
			   size_t *row, size_t *cells)
{
	for (size_t j = 0; j <= m; j++)
		row[j] = j;
	for (size_t i = 1; i <= n; i++) {
		size_t diag = row[0], least;

		if (*cells < m + 1) {
			*cells = 0; /* spent: this name is not weighed, nor any after it */
			return SIZE_MAX;
		}
		*cells -= m + 1;
		least = row[0] = i;
		for (size_t j = 1; j <= m; j++) {
			const size_t up = row[j];
			size_t v = diag + (b[i - 1] != want[j - 1]);

			if (up + 1 < v)
				v = up + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			row[j] = v;
			diag = up;
			least = v < least ? v : least;
		}
		/* a row's least is a floor under the distance */
		if (least > limit)
			return SIZE_MAX;
	}
	return row[m] > limit ? SIZE_MAX : row[m];
}

/* a name to weigh: how much its length differs from the wanted one's, and which */
struct candidate {
	size_t diff, i;
};

static int by_diff(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;

	return x->diff != y->diff ? (x->diff < y->diff ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

/*
 * The third smallest distance of a name from name (m chars; SIZE_MAX: no
 * third), the names weighed nearest in length first: the distance is at
 * least the difference in length, so none is weighed once that is as far
 * as the third best.  cand: (n_names).
 */
static size_t third_distance(const struct ckpt *c, const char *name, size_t m,
			     struct candidate *cand, size_t *row, size_t *cells)
{
	size_t bd[3] = { SIZE_MAX, SIZE_MAX, SIZE_MAX };

	for (size_t i = 0; i < c->n_names; i++) {
		const size_t n = strlen(c->names[i].name);

		cand[i] = (struct candidate){ n > m ? n - m : m - n, i };
	}
	qsort(cand, c->n_names, sizeof(*cand), by_diff);
	for (size_t k = 0; k < c->n_names && *cells && cand[k].diff < bd[2]; k++) {
		const char *s = c->names[cand[k].i].name;
		size_t d = edits_within(name, m, s, strlen(s), bd[2] - 1, row, cells);

		for (int j = 0; j < 3; j++)
			if (d < bd[j]) {
				const size_t t = bd[j];

				bd[j] = d;
				d = t;
			}
	}
	return bd[2];
}

/* s at distance d into the three best: as mha has always ranked them, in
 * the names' sorted order, a tie keeping its place */
static void rank_nearest(const char *best[3], size_t bd[3], const char *s, size_t d)
{
	for (int k = 0; k < 3; k++)
		if (d < bd[k]) {
			const size_t td = bd[k];
			const char *ts = best[k];

			bd[k] = d;
			best[k] = s;
			d = td;
			s = ts;
		}
}

/*
 * The three names nearest name in edit distance, into best.  In bounded
 * work: first the third smallest distance (names weighed nearest in length
 * first), then the names in sorted order ranked as they always were, but
 * any sure to be farther than that third not weighed (it could not change
 * the ranking); a table stops once a row of it is beyond the bound; and
 * after NEAREST_CELLS cells a pass ends with the names it weighed.
 */
static int nearest(const struct ckpt *c, const char *name, const char *best[3])
{
	const size_t m = strlen(name);
	const size_t bytes = c->n_names * sizeof(struct candidate) + (m + 1) * sizeof(size_t);
	size_t bd[3] = { SIZE_MAX, SIZE_MAX, SIZE_MAX }, cells = NEAREST_CELLS, bound, *row;
	struct candidate *cand;

	if (budget_take(bytes))
		return budget_refuse(c->path, bytes);
	cand = malloc(c->n_names * sizeof(*cand) + 1);
	row = malloc((m + 1) * sizeof(*row));
	if (!cand || !row) {
		free(cand);
		free(row);
		budget_give(bytes);
		return error("out of memory");
	}
	bound = third_distance(c, name, m, cand, row, &cells);
	cells = NEAREST_CELLS;
	for (size_t i = 0; i < c->n_names && cells; i++) {
		const char *s = c->names[i].name;
		const size_t n = strlen(s);

		if ((n > m ? n - m : m - n) <= bound)
			rank_nearest(best, bd, s, edits_within(name, m, s, n, bound, row, &cells));
	}
	free(cand);
	free(row);
	budget_give(bytes);
	return 0;
}

/* "no tensor "NAME" (nearest: "a", "b", "c")" */
int ckpt_missing(const struct ckpt *c, const char *name, const char *why)
{
	const char *best[3] = { NULL, NULL, NULL };

	if (!c->n_names)
		return error("%s: no tensor \"%s\"%s: the checkpoint holds none", c->path, name, why);
	if (nearest(c, name, best))
		return -1;
	if (!best[0])
		return error("%s: no tensor \"%s\"%s", c->path, name, why);
	return error("%s: no tensor \"%s\"%s (nearest: \"%s\"%s%s%s%s%s%s)", c->path, name, why,
		     best[0], best[1] ? ", \"" : "", best[1] ? best[1] : "", best[1] ? "\"" : "",
		     best[2] ? ", \"" : "", best[2] ? best[2] : "", best[2] ? "\"" : "");
}


int ckpt_read(matrix *m, struct ckpt *c, const char *name, char *src, size_t size)
{
	const ptrdiff_t i = ckpt_find(c, name);
	const st_tensor *t;
	size_t k;
	st_file *f;
	int rc;

	if (i < 0)
		return ckpt_missing(c, name, "");
	k = c->names[i].shard;
	if (c->names[i].file && index_shard(c, c->names[i].file, &k))
		return -1;
	if (!(f = shard_open(c, k)))
		return -1;
	if (!(t = st_find(f, name))) {
		shard_close(c, k);
		return error("%s: tensor \"%s\" is not in %s, where %s puts it", c->path, name,
			     f->path, c->index ? c->index : "the index");
	}
	snprintf(src, size, "tensor \"%s\" of %s", name, f->path);
	c->last_f8 = st_dtype_is_f8(t->dtype);
	rc = st_read(m, f, t);
	shard_close(c, k);
	return rc;
}

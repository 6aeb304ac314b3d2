/*
 * model.c: one attention layer out of a checkpoint (model.h): the files of
 * a checkpoint, the model families' tensor names, and config.json.
 */
#include "model.h"
#include "budget.h"
#include "cli.h"
#include "input.h"
#include "read_json.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME "model.safetensors.index.json"

/* ---- the families ------------------------------------------------------ */

/* what a tensor becomes: one of mha's weights, or GPT-2's packed Q|K|V */
enum { PACKED_W = N_WEIGHTS, PACKED_B, TORCH_KEY };

struct family {
	const char *name;
	const char *layer;   /* the module of layer N, "%zu" for N */
	const char *key;     /* a tensor every such module has */
	weight_layout layout;
	struct { const char *suffix; int what; int required; } t[8];
};

static const struct family families[] = {
	[FAMILY_LLAMA] = { "llama", "layers.%zu.self_attn", "q_proj.weight", LAYOUT_TORCH, {
		{ "q_proj.weight", WQ, 1 }, { "k_proj.weight", WK, 1 }, { "v_proj.weight", WV, 1 },
		{ "o_proj.weight", WO, 1 }, { "q_proj.bias", BQ, 0 }, { "k_proj.bias", BK, 0 },
		{ "v_proj.bias", BV, 0 }, { "o_proj.bias", BO, 0 } } },
	/* Conv1D: (in, out), applied as x·W + b */
	[FAMILY_GPT2] = { "gpt2", "h.%zu.attn", "c_attn.weight", LAYOUT_MHA, {
		{ "c_attn.weight", PACKED_W, 1 }, { "c_attn.bias", PACKED_B, 0 },
		{ "c_proj.weight", WO, 1 }, { "c_proj.bias", BO, 0 } } },
	[FAMILY_BERT] = { "bert", "layer.%zu.attention", "self.query.weight", LAYOUT_TORCH, {
		{ "self.query.weight", WQ, 1 }, { "self.key.weight", WK, 1 },
		{ "self.value.weight", WV, 1 }, { "output.dense.weight", WO, 1 },
		{ "self.query.bias", BQ, 0 }, { "self.key.bias", BK, 0 },
		{ "self.value.bias", BV, 0 }, { "output.dense.bias", BO, 0 } } },
	/* nn.MultiheadAttention, as nn.TransformerEncoderLayer holds it */
	[FAMILY_TORCH] = { "torch", "layers.%zu.self_attn", "out_proj.weight", LAYOUT_TORCH, {
		{ "in_proj_weight", TORCH_KEY, 0 }, { "in_proj_bias", TORCH_KEY, 0 },
		{ "q_proj_weight", TORCH_KEY, 0 }, { "k_proj_weight", TORCH_KEY, 0 },
		{ "v_proj_weight", TORCH_KEY, 0 }, { "out_proj.weight", TORCH_KEY, 1 },
		{ "out_proj.bias", TORCH_KEY, 0 } } },
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

/* config.json's model_type: the families mha reads */
static const struct { const char *type; model_family family; } model_types[] = {
	{ "llama", FAMILY_LLAMA }, { "mistral", FAMILY_LLAMA }, { "qwen2", FAMILY_LLAMA },
	{ "gpt2", FAMILY_GPT2 }, { "bert", FAMILY_BERT }, { "roberta", FAMILY_BERT },
};

/* ---- the checkpoint's files --------------------------------------------- */

static int ends_with(const char *s, const char *tail)
{
	const size_t n = strlen(s), m = strlen(tail);

	return n >= m && !strcmp(s + n - m, tail);
}

static int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The first *.safetensors in dir (sorted), into name; 0 or -1 none. */
static int dir_safetensors(const char *dir, char *name, size_t size, size_t *count)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	*count = 0;
	name[0] = '\0';
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' && ends_with(e->d_name, ".safetensors")) {
			if (!*count || strcmp(e->d_name, name) < 0)
				snprintf(name, size, "%s", e->d_name);
			(*count)++;
		}
	closedir(d);
	return *count ? 0 : -1;
}

int model_is_checkpoint(const char *path)
{
	char dir[4096], name[256];
	size_t n;

	if (!path || !strcmp(path, "-"))
		return 0;
	if (is_dir(path)) {
		snprintf(dir, sizeof(dir), "%s/" INDEX_NAME, path);
		return is_file(dir) || dir_safetensors(path, name, sizeof(name), &n) == 0;
	}
	return ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json");
}

/* the folder path is in, or path itself when it is one */
static void folder_of(const char *path, char *dir, size_t size)
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

int model_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx)
{
	char dir[4096], file[4400];
	struct dirent *e;
	DIR *d;
	int rc = 0;

	folder_of(path, dir, sizeof(dir));
	if (!is_dir(path))
		rc = fn(ctx, path);
	d = rc ? NULL : opendir(dir);
	while (!rc && d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' && (ends_with(e->d_name, ".safetensors") ||
					    !strcmp(e->d_name, INDEX_NAME) ||
					    !strcmp(e->d_name, "config.json"))) {
			snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
			rc = fn(ctx, file);
		}
	if (d)
		closedir(d);
	return rc;
}

/* A checkpoint: its shards, and every tensor name with the shard holding it. */
struct ckpt {
	const char *path;   /* as -w gave it */
	char dir[4096];
	char **files;       /* (n_files) shard paths; a shard is opened when needed */
	st_file *st;        /* (n_files), fd -1 until opened */
	size_t n_files;
	char **names;       /* (n_names) sorted */
	size_t *file_of;    /* (n_names) */
	size_t n_names;
	const char *index;  /* the index's path for messages, or NULL */
	char index_path[4200];
	size_t held;        /* what the names and tables hold of the memory budget */
};

/* n bytes of the checkpoint's tables, charged to the budget: 0, or -1 said */
static int ckpt_take(struct ckpt *c, size_t n)
{
	if (budget_take(n))
		return budget_refuse(c->path, n);
	c->held += n;
	return 0;
}

static void ckpt_free(struct ckpt *c)
{
	for (size_t i = 0; i < c->n_files; i++) {
		free(c->files[i]);
		st_close(&c->st[i]);
	}
	for (size_t i = 0; i < c->n_names; i++)
		free(c->names[i]);
	free(c->files);
	free(c->st);
	free(c->names);
	free(c->file_of);
	budget_give(c->held);
	memset(c, 0, sizeof(*c));
}

static int add_file(struct ckpt *c, const char *path, size_t *at)
{
	char **more;
	st_file *st;

	for (size_t i = 0; i < c->n_files; i++)
		if (!strcmp(c->files[i], path)) {
			*at = i;
			return 0;
		}
	more = realloc(c->files, (c->n_files + 1) * sizeof(*more));
	if (!more)
		return error("out of memory");
	c->files = more;
	st = realloc(c->st, (c->n_files + 1) * sizeof(*st));
	if (!st)
		return error("out of memory");
	c->st = st;
	memset(&c->st[c->n_files], 0, sizeof(*st));
	c->st[c->n_files].fd = -1;
	if (!(c->files[c->n_files] = strdup(path)))
		return error("out of memory");
	*at = c->n_files++;
	return 0;
}

static int add_name(struct ckpt *c, const char *name, size_t file, size_t *cap)
{
	const size_t len = strlen(name) + 1;

	if (c->n_names == *cap) {
		const size_t n = *cap ? 2 * *cap : 64;
		char **names;
		size_t *of;

		if (ckpt_take(c, (n - *cap) * (sizeof(*names) + sizeof(*of))))
			return -1;
		if (!(names = realloc(c->names, n * sizeof(*names))))
			return error("out of memory");
		c->names = names;
		if (!(of = realloc(c->file_of, n * sizeof(*of))))
			return error("out of memory");
		c->file_of = of;
		*cap = n;
	}
	if (ckpt_take(c, budget_block(len)))
		return -1;
	if (!(c->names[c->n_names] = malloc(len)))
		return error("out of memory");
	memcpy(c->names[c->n_names], name, len);
	c->file_of[c->n_names++] = file;
	return 0;
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct named {
	char *name;
	size_t file;
};

static int by_pair(const void *a, const void *b)
{
	return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* model.safetensors.index.json: {"weight_map": {name: file}} */
static int read_index(struct ckpt *c, const char *index)
{
	input_file in;
	json_doc doc = { 0 };
	const cJSON *map, *e;
	size_t cap = 0;
	int rc = 0;

	c->index = index;
	if (input_load(&in, index)) {
		input_free(&in);
		return -1;
	}
	if (json_parse(&doc, &in)) {
		json_doc_free(&doc);
		input_free(&in);
		return -1;
	}
	map = cJSON_GetObjectItemCaseSensitive(doc.root, "weight_map");
	if (!cJSON_IsObject(map))
		map = NULL;
	if (!map)
		rc = error("%s: no \"weight_map\" object (tensor name -> file)", index);
	cJSON_ArrayForEach(e, map) {
		char file[4200];
		size_t at;

		if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') ||
		    !strcmp(e->valuestring, "..")) {
			rc = error("%s: weight_map: \"%s\" is not the name of a file in the folder",
				   index, e->string);
			break;
		}
		snprintf(file, sizeof(file), "%s/%s", c->dir, e->valuestring);
		if (add_file(c, file, &at) || add_name(c, e->string, at, &cap)) {
			rc = -1;
			break;
		}
	}
	json_doc_free(&doc);
	input_free(&in);
	return rc;
}

/* a shard, opened and its header checked on first use */
static st_file *shard(struct ckpt *c, size_t i)
{
	if (c->st[i].fd < 0 && !c->st[i].path && st_open(&c->st[i], c->files[i]))
		return NULL;
	return c->st[i].fd < 0 ? NULL : &c->st[i];
}

static int ckpt_open(struct ckpt *c, const char *path)
{
	char name[256], file[4200];
	size_t cap = 0, n_st;
	int rc = 0;

	memset(c, 0, sizeof(*c));
	c->path = path;
	folder_of(path, c->dir, sizeof(c->dir));
	snprintf(c->index_path, sizeof(c->index_path), "%s/" INDEX_NAME, c->dir);
	if (ends_with(path, ".safetensors.index.json")) {
		snprintf(c->index_path, sizeof(c->index_path), "%s", path);
		rc = read_index(c, c->index_path);
	} else if (is_dir(path) && is_file(c->index_path)) {
		rc = read_index(c, c->index_path);
	} else {
		/* one file, or every .safetensors in the folder */
		size_t count = 1;

		if (is_dir(path) && dir_safetensors(path, name, sizeof(name), &count))
			return error("%s: no .safetensors file in the folder", path);
		for (size_t k = 0; k < count && !rc; k++) {
			size_t at;

			if (!is_dir(path)) {
				snprintf(file, sizeof(file), "%s", path);
			} else {
				/* the k-th in sorted order */
				DIR *d = opendir(path);
				struct dirent *e;
				char best[256] = "";

				while (d && (e = readdir(d)) != NULL)
					if (e->d_name[0] != '.' && ends_with(e->d_name, ".safetensors") &&
					    strcmp(e->d_name, name) >= 0 && (k == 0 || strcmp(e->d_name, name) > 0) &&
					    (!best[0] || strcmp(e->d_name, best) < 0))
						snprintf(best, sizeof(best), "%s", e->d_name);
				if (d)
					closedir(d);
				snprintf(name, sizeof(name), "%s", best);
				snprintf(file, sizeof(file), "%s/%s", path, name);
			}
			if (add_file(c, file, &at) || !shard(c, at)) {
				rc = -1;
				break;
			}
			n_st = c->st[at].n;
			for (size_t i = 0; i < n_st && !rc; i++)
				rc = add_name(c, c->st[at].t[i].name, at, &cap);
		}
	}
	if (rc)
		return rc;
	/* sorted by name, each with its shard */
	{
		struct named *pairs;
		const size_t extra = (c->n_names + 1) * sizeof(*pairs);

		if (ckpt_take(c, extra))
			return -1;
		if (!(pairs = malloc(extra)))
			return error("out of memory");
		for (size_t i = 0; i < c->n_names; i++)
			pairs[i] = (struct named){ c->names[i], c->file_of[i] };
		qsort(pairs, c->n_names, sizeof(*pairs), by_pair);
		for (size_t i = 0; i < c->n_names; i++) {
			c->names[i] = pairs[i].name;
			c->file_of[i] = pairs[i].file;
		}
		free(pairs);
		budget_give(extra);
		c->held -= extra;
	}
	for (size_t i = 1; i < c->n_names; i++)
		if (!strcmp(c->names[i - 1], c->names[i]))
			return error("%s: tensor \"%s\" is in two of the checkpoint's files", path,
				     c->names[i]);
	return 0;
}

static ptrdiff_t ckpt_find(const struct ckpt *c, const char *name)
{
	const char *key = name;
	char **hit = c->n_names ? bsearch(&key, c->names, c->n_names, sizeof(*c->names), by_str)
				: NULL;

	return hit ? hit - c->names : -1;
}

/* ---- nearest names ----------------------------------------------------- */

static size_t edits(const char *a, const char *b)
{
	const size_t n = strlen(a), m = strlen(b);
	size_t *row = malloc((m + 1) * sizeof(*row)), d;

	if (!row)
		return SIZE_MAX;
	for (size_t j = 0; j <= m; j++)
		row[j] = j;
	for (size_t i = 1; i <= n; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= m; j++) {
			const size_t up = row[j];
			size_t v = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < v)
				v = up + 1;
			if (row[j - 1] + 1 < v)
				v = row[j - 1] + 1;
			row[j] = v;
			diag = up;
		}
	}
	d = row[m];
	free(row);
	return d;
}

/* "no tensor "NAME" (nearest: "a", "b", "c")" */
static int missing(const struct ckpt *c, const char *name, const char *why)
{
	const char *best[3] = { NULL, NULL, NULL };
	size_t bd[3] = { SIZE_MAX, SIZE_MAX, SIZE_MAX };

	for (size_t i = 0; i < c->n_names; i++) {
		size_t d = edits(name, c->names[i]);
		const char *s = c->names[i];

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
	if (!best[0])
		return error("%s: no tensor \"%s\"%s: the checkpoint holds none", c->path, name, why);
	return error("%s: no tensor \"%s\"%s (nearest: \"%s\"%s%s%s%s%s%s)", c->path, name, why,
		     best[0], best[1] ? ", \"" : "", best[1] ? best[1] : "", best[1] ? "\"" : "",
		     best[2] ? ", \"" : "", best[2] ? best[2] : "", best[2] ? "\"" : "");
}

/* ---- the module -------------------------------------------------------- */

/* name is module + "." + key (or key alone: module ""): the module's length, or -1 */
static ptrdiff_t module_of(const char *name, const char *key)
{
	const size_t n = strlen(name), k = strlen(key);

	if (n == k && !strcmp(name, key))
		return 0;
	if (n > k + 1 && name[n - k - 1] == '.' && !strcmp(name + n - k, key))
		return (ptrdiff_t)(n - k - 1);
	return -1;
}

/* module is layer N of the family (ends with its layer pattern): N, or -1 */
static ptrdiff_t layer_of(const char *module, size_t len, const struct family *fam)
{
	const char *pct = strstr(fam->layer, "%zu");
	const size_t pre = (size_t)(pct - fam->layer), post = strlen(pct + 3);

	/* find the pattern's start: after a '.' or at the start */
	for (size_t at = 0; at + pre + post < len; at++) {
		size_t i = at + pre, v = 0, digits = 0;

		if ((at && module[at - 1] != '.') || strncmp(module + at, fam->layer, pre))
			continue;
		while (i < len && module[i] >= '0' && module[i] <= '9' && digits < 9) {
			v = v * 10 + (size_t)(module[i++] - '0');
			digits++;
		}
		if (digits && i + post == len && !strncmp(module + i, pct + 3, post))
			return (ptrdiff_t)v;
	}
	return -1;
}

/* Which family's attention the names hold: the only one with modules. */
static model_family detect(const struct ckpt *c)
{
	model_family found = FAMILY_NONE;

	for (size_t f = 1; f < N_FAMILIES; f++)
		for (size_t i = 0; i < c->n_names; i++)
			if (module_of(c->names[i], families[f].key) >= 0) {
				if (found)
					return FAMILY_NONE;
				found = (model_family)f;
				break;
			}
	return found;
}

/* The module to read, into module (without its trailing '.'). */
static int pick_module(const struct ckpt *c, const struct problem_spec *s,
		       const struct family *fam, char *module, size_t size)
{
	size_t count = 0, lo = SIZE_MAX, hi = 0, matched = 0;
	const char *first = NULL, *second = NULL;
	size_t first_len = 0, second_len = 0;

	if (s->prefix) {
		size_t n = strlen(s->prefix);
		char want[4200];

		while (n && s->prefix[n - 1] == '.')
			n--;
		snprintf(module, size, "%.*s", (int)n, s->prefix);
		snprintf(want, sizeof(want), "%s%s%s", module, *module ? "." : "", fam->key);
		if (ckpt_find(c, want) < 0)
			return missing(c, want, "");
		return 0;
	}
	for (size_t i = 0; i < c->n_names; i++) {
		const ptrdiff_t len = module_of(c->names[i], fam->key);
		ptrdiff_t l;

		if (len < 0)
			continue;
		count++;
		l = layer_of(c->names[i], (size_t)len, fam);
		if (l >= 0) {
			lo = (size_t)l < lo ? (size_t)l : lo;
			hi = (size_t)l > hi ? (size_t)l : hi;
		}
		if (s->has_layer && (l < 0 || (size_t)l != s->layer))
			continue;
		matched++;
		if (!first) {
			first = c->names[i];
			first_len = (size_t)len;
		} else if (!second) {
			second = c->names[i];
			second_len = (size_t)len;
		}
	}
	if (!count)
		return error("%s: no %s attention in the checkpoint: no tensor named *.%s (give "
			     "--layout for another family, or --prefix)", c->path, fam->name, fam->key);
	if (s->has_layer && !matched && lo != SIZE_MAX)
		return error("%s: no layer %zu: the checkpoint's %s attention layers are %zu to %zu",
			     c->path, s->layer, fam->name, lo, hi);
	if (s->has_layer && !matched)
		return error("%s: no layer %zu: no tensor named *.%s.%s (give --prefix)", c->path,
			     s->layer, fam->layer, fam->key);
	if (matched > 1 && s->has_layer)
		return error("%s: layer %zu is in two modules, \"%.*s\" and \"%.*s\": pick one with "
			     "--prefix", c->path, s->layer, (int)first_len, first, (int)second_len, second);
	if (matched > 1 && lo != SIZE_MAX)
		return error("%s: the checkpoint has %zu %s attention modules (layers %zu to %zu): "
			     "pick one with --layer N or --prefix", c->path, matched, fam->name, lo, hi);
	if (matched > 1)
		return error("%s: the checkpoint has %zu %s attention modules (\"%.*s\", \"%.*s\", "
			     "...): pick one with --prefix", c->path, matched, fam->name,
			     (int)first_len, first, (int)second_len, second);
	snprintf(module, size, "%.*s", (int)first_len, first);
	return 0;
}

/* (rows, 3·D) -> its columns [k·D, (k+1)·D); a vector (3·D) -> its part */
static int third(matrix *dst, const matrix *m, size_t k)
{
	const size_t rows = m->rank == 2 ? m->dim[0] : 1, cols = m->dim[m->rank - 1] / 3;

	if (matrix_alloc(dst, m->rank, m->rank == 2 ? rows : cols, m->rank == 2 ? cols : 1, 1))
		return -1;
	for (size_t r = 0; r < rows; r++)
		memcpy(dst->v + r * cols, m->v + r * 3 * cols + k * cols, cols * sizeof(double));
	return 0;
}

static int read_tensor(matrix *m, struct ckpt *c, const char *name, char *src, size_t size)
{
	const ptrdiff_t i = ckpt_find(c, name);
	const st_tensor *t;
	st_file *f;

	if (i < 0)
		return missing(c, name, "");
	if (!(f = shard(c, c->file_of[i])))
		return -1;
	if (!(t = st_find(f, name)))
		return error("%s: tensor \"%s\" is not in %s, where %s puts it", c->path, name,
			     f->path, c->index ? c->index : "the index");
	snprintf(src, size, "tensor \"%s\" of %s", name, f->path);
	return st_read(m, f, t);
}

const char *model_family_name(model_family f)
{
	return f > FAMILY_NONE && f <= FAMILY_TORCH ? families[f].name : NULL;
}

int model_load(weights *w, struct problem_spec *s, const char *path)
{
	struct ckpt c;
	const struct family *fam;
	char module[4096];
	int rc = 0;

	if (ckpt_open(&c, path)) {
		ckpt_free(&c);
		return -1;
	}
	if (!s->family && !(s->family = detect(&c))) {
		ckpt_free(&c);
		return error("%s: which model family is this? give --layout llama, gpt2, bert or "
			     "torch (or --config with a model_type)", path);
	}
	fam = &families[s->family];
	w->layout = fam->layout;
	s->layout = fam->layout;
	if (pick_module(&c, s, fam, module, sizeof(module))) {
		ckpt_free(&c);
		return -1;
	}
	/* for meta: the names' start, as they are read below */
	snprintf(s->module, sizeof(s->module), "%s%s", module, *module ? "." : "");
	s->checkpoint = 1;
	if (s->family == FAMILY_LLAMA) {
		/* Qwen3, OLMo 2: an RMSNorm on each head's q and k before the rotation */
		static const char *const norms[] = { "q_norm.weight", "k_norm.weight" };

		for (size_t k = 0; k < 2; k++) {
			char name[4200];

			snprintf(name, sizeof(name), "%s%s%s", module, *module ? "." : "", norms[k]);
			if (ckpt_find(&c, name) >= 0) {
				ckpt_free(&c);
				return error("%s: \"%s\": this attention normalises q and k (Qwen3, OLMo "
					     "2), which mha does not compute", path, name);
			}
		}
	}
	for (size_t k = 0; k < sizeof(fam->t) / sizeof(fam->t[0]) && fam->t[k].suffix && !rc; k++) {
		char name[4200], src[8400];
		matrix m;

		snprintf(name, sizeof(name), "%s%s%s", module, *module ? "." : "", fam->t[k].suffix);
		if (ckpt_find(&c, name) < 0) {
			if (fam->t[k].required)
				rc = missing(&c, name, "");
			continue;
		}
		if (read_tensor(&m, &c, name, src, sizeof(src))) {
			rc = -1;
			break;
		}
		if (fam->t[k].what == TORCH_KEY) {
			rc = weights_put_key(w, fam->t[k].suffix, &m, src);
		} else if (fam->t[k].what == PACKED_W || fam->t[k].what == PACKED_B) {
			/* GPT-2's c_attn: Q | K | V side by side */
			const int base = fam->t[k].what == PACKED_W ? WQ : BQ;
			char shape[64];

			if (m.rank != (fam->t[k].what == PACKED_W ? 2u : 1u) || m.dim[m.rank - 1] % 3) {
				rc = error("%s: %s is %s, expected %s", path, name,
					   matrix_shape(&m, shape, sizeof(shape)),
					   base == WQ ? "(D, 3*D): Q, K and V side by side"
						      : "a vector of 3*D: Q's, K's and V's biases");
				matrix_free(&m);
				break;
			}
			for (int q = 0; q < 3 && !rc; q++) {
				matrix part;

				rc = third(&part, &m, (size_t)q) ||
				     weights_put_key(w, weight_names[base + q], &part, src);
			}
			matrix_free(&m);
		} else {
			rc = weights_put_key(w, weight_names[fam->t[k].what], &m, src);
		}
	}
	ckpt_free(&c);
	return rc ? -1 : 0;
}

/* ---- config.json ------------------------------------------------------- */

static int bad_type(const char *path, const char *key, const char *want)
{
	return error("%s: \"%s\" is not %s", path, key, want);
}

/* key as a whole number from 1: 1 and *out, 0 absent or null, -1 said */
static int config_count(const cJSON *root, const char *path, const char *key, size_t *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1) || e->valuedouble > 1e15 ||
	    e->valuedouble != floor(e->valuedouble))
		return bad_type(path, key, "a whole number from 1");
	*out = (size_t)e->valuedouble;
	return 1;
}

static int config_number(const cJSON *root, const char *path, const char *key, double *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || !(e->valuedouble > 0))
		return bad_type(path, key, "a number above 0");
	*out = e->valuedouble;
	return 1;
}

static int config_bool(const cJSON *root, const char *path, const char *key, int *out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsBool(e))
		return bad_type(path, key, "true or false");
	*out = cJSON_IsTrue(e);
	return 1;
}

static int config_string(const cJSON *root, const char *path, const char *key, const char **out)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!e || cJSON_IsNull(e))
		return 0;
	if (!cJSON_IsString(e))
		return bad_type(path, key, "a string");
	*out = e->valuestring;
	return 1;
}

/* the first of two spellings present (hidden_size, n_embd) */
static int config_count2(const cJSON *root, const char *path, const char *a, const char *b,
			 size_t *out)
{
	const int rc = config_count(root, path, a, out);

	return rc ? rc : config_count(root, path, b, out);
}

/* Whether the layer the run takes slides its window (Mistral: every layer;
 * Qwen2: use_sliding_window, and layers from max_window_layers; newer
 * configs: layer_types). 1, 0, or -1 said. */
static int sliding(const cJSON *root, const char *path, const struct problem_spec *s)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	size_t from = 0;
	int use = 1, rc;

	if ((rc = config_bool(root, path, "use_sliding_window", &use)) < 0)
		return -1;
	if (!use)
		return 0;
	if (types && !cJSON_IsNull(types)) {
		const cJSON *t;

		if (!cJSON_IsArray(types))
			return bad_type(path, "layer_types", "a list of strings");
		if (!s->has_layer)
			return error("%s: layer_types differ by layer: give --layer", path);
		t = cJSON_GetArrayItem(types, (int)(s->layer < 1000000 ? s->layer : 1000000));
		if (!t)
			return error("%s: layer_types has no entry for layer %zu", path, s->layer);
		if (!cJSON_IsString(t))
			return bad_type(path, "layer_types", "a list of strings");
		return !strcmp(t->valuestring, "sliding_attention");
	}
	if ((rc = config_count(root, path, "max_window_layers", &from)) < 0)
		return -1;
	if (rc && !cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window"))
		rc = 0; /* Mistral-style configs slide every layer */
	if (rc && (!s->has_layer || s->layer < from))
		return s->has_layer ? 0 : error("%s: layers from max_window_layers slide their "
						"window: give --layer", path);
	return 1;
}

/* What the family implies, and what the config says of it. */
static int apply(struct problem_spec *s, const cJSON *root, const char *path)
{
	const unsigned g = s->given;
	size_t heads = 0, kv = 0, hidden = 0, head_dim = 0, window = 0;
	double theta = 0, partial = 0;
	int rc, flag;
	const char *str;

	if (root) {
		if (config_count2(root, path, "num_attention_heads", "n_head", &heads) < 0 ||
		    config_count(root, path, "num_key_value_heads", &kv) < 0 ||
		    config_count2(root, path, "hidden_size", "n_embd", &hidden) < 0 ||
		    config_count(root, path, "head_dim", &head_dim) < 0 ||
		    config_number(root, path, "rope_theta", &theta) < 0 ||
		    config_number(root, path, "partial_rotary_factor", &partial) < 0 ||
		    config_bool(root, path, "attention_bias", &flag) < 0)
			return -1;
		if (partial > 1)
			return bad_type(path, "partial_rotary_factor", "a number from 0 to 1");
		if (heads && !(g & GIVEN_HEADS))
			s->heads = heads;
		if (kv && !(g & GIVEN_KV_HEADS))
			s->kv_heads = kv;
	}
	switch (s->family) {
	case FAMILY_LLAMA:
		if (!(g & GIVEN_CAUSAL))
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		if (!(g & GIVEN_ROPE))
			s->cfg.rope.mode = MHA_ROPE_HALF;
		if (!root)
			break;
		{
			const cJSON *sc = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");

			if (sc && !cJSON_IsNull(sc)) {
				const char *type = NULL;

				if (!cJSON_IsObject(sc))
					return bad_type(path, "rope_scaling", "an object");
				if (config_string(sc, path, "rope_type", &type) < 0 ||
				    (!type && config_string(sc, path, "type", &type) < 0))
					return -1;
				if ((!type || strcmp(type, "default")) && !s->rope_cos)
					return error("%s: rope_scaling (\"%s\") changes the rotary "
						     "frequencies, which --rope cannot: give the tables with "
						     "--rope-cos and --rope-sin", path, type ? type : "?");
			}
		}
		if (theta && !(g & GIVEN_ROPE_THETA) && !s->rope_cos)
			s->cfg.rope.theta = theta;
		if (partial && !(g & GIVEN_ROPE_DIM) && !s->rope_cos) {
			const size_t hd = head_dim ? head_dim : heads && hidden ? hidden / heads : 0;
			const double r = floor(hd * partial);

			if (!hd)
				return error("%s: partial_rotary_factor needs head_dim, or hidden_size and "
					     "num_attention_heads", path);
			s->cfg.rope.dim = (size_t)r - (size_t)r % 2;
		}
		if ((rc = config_count(root, path, "sliding_window", &window)) < 0)
			return -1;
		if (rc && !(g & GIVEN_WINDOW)) {
			if ((rc = sliding(root, path, s)) < 0)
				return -1;
			/* the query and the window - 1 keys before it */
			if (rc) {
				s->cfg.window.on = 1;
				s->cfg.window.left = (ptrdiff_t)(window - 1);
				s->cfg.window.right = -1;
			}
		}
		break;
	case FAMILY_GPT2:
		if (!(g & GIVEN_CAUSAL))
			s->cfg.causal = MHA_CAUSAL_TOP_LEFT;
		if (!root)
			break;
		if ((rc = config_bool(root, path, "scale_attn_weights", &flag)) < 0)
			return -1;
		if (rc && !flag && !(g & GIVEN_SCALE))
			s->cfg.scale_mode = MHA_SCALE_NONE;
		if ((rc = config_bool(root, path, "scale_attn_by_inverse_layer_idx", &flag)) < 0)
			return -1;
		if (rc && flag && !(g & GIVEN_SCALE))
			return error("%s: scale_attn_by_inverse_layer_idx: give the layer's scale, "
				     "1/(sqrt(d_k)*(N+1)), with --scale", path);
		break;
	case FAMILY_BERT:
		if (!root)
			break;
		str = NULL;
		if (config_string(root, path, "position_embedding_type", &str) < 0)
			return -1;
		if (str && strcmp(str, "absolute"))
			return error("%s: position_embedding_type \"%s\" changes the scores; mha reads "
				     "BERT's \"absolute\" only", path, str);
		break;
	default:
		break;
	}
	return 0;
}

int model_config(struct problem_spec *s)
{
	char dir[4096], path[4200];
	const char *cfg = s->config;
	const int ckpt = s->w && model_is_checkpoint(s->w);
	input_file in;
	json_doc doc = { 0 };
	int rc = 0;

	if (!cfg && ckpt) {
		folder_of(s->w, dir, sizeof(dir));
		snprintf(path, sizeof(path), "%s/config.json", dir);
		if (is_file(path))
			cfg = path;
	}
	if (cfg) {
		if (input_load(&in, cfg)) {
			input_free(&in);
			return -1;
		}
		if (json_parse(&doc, &in)) {
			rc = -1;
		} else if (!cJSON_IsObject(doc.root)) {
			rc = error("%s: expected a JSON object (Hugging Face's config.json)", in.name);
		} else if (!(s->given & GIVEN_LAYOUT) && ckpt) {
			const char *type = NULL;

			if (config_string(doc.root, in.name, "model_type", &type) < 0) {
				rc = -1;
			} else if (type) {
				size_t i;

				for (i = 0; i < sizeof(model_types) / sizeof(model_types[0]); i++)
					if (!strcmp(type, model_types[i].type))
						break;
				if (i == sizeof(model_types) / sizeof(model_types[0]))
					rc = error("%s: model_type \"%s\" is not one mha reads (llama, "
						   "mistral, qwen2, gpt2, bert, roberta): give --layout "
						   "llama, gpt2, bert or torch", in.name, type);
				else
					s->family = model_types[i].family;
			}
		}
	}
	if (!rc && ckpt && !s->family) {
		/* the family from the tensors' names */
		struct ckpt c;

		rc = ckpt_open(&c, s->w);
		if (!rc && !(s->family = detect(&c)))
			rc = error("%s: which model family is this? give --layout llama, gpt2, bert or "
				   "torch (or --config with a model_type)", s->w);
		ckpt_free(&c);
	}
	if (!rc && s->family)
		s->layout = families[s->family].layout;
	if (!rc)
		rc = apply(s, cfg && doc.root ? doc.root : NULL, cfg ? in.name : NULL);
	if (!rc && cfg)
		snprintf(s->config_read, sizeof(s->config_read), "%s", cfg); /* for meta */
	if (cfg) {
		json_doc_free(&doc);
		input_free(&in);
	}
	return rc;
}

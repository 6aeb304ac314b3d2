/*
 * read_json.c: JSON files into matrices, with cJSON doing the parsing.
 *
 * Every message names the file and the element ("X[2][1]"), and a syntax
 * error its line and column, so the user can go straight to the problem.
 */
#include "matrix.h"
#include "cli.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* Read a whole stream; NUL-terminated for the parser. */
static int slurp(FILE *fp, const char *name, char **text, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);

	if (!buf)
		return error("'%s': out of memory", name);
	for (;;) {
		size_t got;

		if (n + 1 >= cap) {
			char *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;

			if (!bigger) {
				free(buf);
				return error("'%s': out of memory reading the file", name);
			}
			buf = bigger;
			cap *= 2;
		}
		got = fread(buf + n, 1, cap - 1 - n, fp);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(fp)) {
		free(buf);
		return error("'%s': read error: %s", name, strerror(errno));
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;
}

static void line_col(const char *text, size_t off, size_t *line, size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off; i++) {
		if (text[i] == '\n') {
			++*line;
			*col = 1;
		} else {
			++*col;
		}
	}
}

int json_file_load(json_file *f, const char *path)
{
	const char *end = NULL;
	size_t skip = 0;
	FILE *fp;
	struct stat st;
	int rc;

	memset(f, 0, sizeof(*f));
	f->name = strdup(strcmp(path, "-") ? path : "<stdin>");
	if (!f->name)
		return error("out of memory");
	if (!strcmp(path, "-")) {
		fp = stdin;
	} else {
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return error("'%s': is a directory, expected a JSON file", path);
		fp = fopen(path, "rb");
		if (!fp)
			return error("'%s': %s", path, strerror(errno));
	}
	rc = slurp(fp, f->name, &f->text, &f->len);
	if (fp != stdin)
		fclose(fp);
	if (rc)
		return -1;

	if (memchr(f->text, '\0', f->len)) {
		size_t line, col;

		line_col(f->text, (size_t)((char *)memchr(f->text, '\0', f->len) - f->text), &line, &col);
		return error("'%s':%zu:%zu: a NUL byte: not a JSON text file", f->name, line, col);
	}
	if (f->len >= 3 && !memcmp(f->text, "\xEF\xBB\xBF", 3))
		skip = 3; /* a UTF-8 byte order mark: harmless, skip it */
	{
		size_t i = skip;

		while (i < f->len && isspace((unsigned char)f->text[i]))
			i++;
		if (i == f->len)
			return error("'%s': empty file, expected JSON", f->name);
	}

	/* the length counts the terminating NUL: cJSON checks for it */
	f->root = cJSON_ParseWithLengthOpts(f->text + skip, f->len - skip + 1, &end, 1);
	if (!f->root) {
		size_t off = end ? (size_t)(end - f->text) : f->len, line, col, from, to, k = 0;
		char near[40];

		if (off > f->len)
			off = f->len;
		line_col(f->text, off, &line, &col);
		if (off >= f->len)
			return error("'%s':%zu:%zu: invalid JSON: the text ends too early", f->name,
				     line, col);
		/* cJSON stops where it gave up, which can be just past the culprit:
		 * show a little of the line on both sides */
		from = off;
		while (from > 0 && off - from < 12 && f->text[from - 1] != '\n')
			from--;
		to = off;
		while (to < f->len && to - off < 12 && f->text[to] != '\n')
			to++;
		for (size_t i = from; i < to; i++)
			near[k++] = isprint((unsigned char)f->text[i]) ? f->text[i] : '?';
		near[k] = '\0';
		return error("'%s':%zu:%zu: invalid JSON near '%s'", f->name, line, col, near);
	}
	return 0;
}

void json_file_free(json_file *f)
{
	if (!f)
		return;
	cJSON_Delete(f->root);
	free(f->text);
	free(f->name);
	memset(f, 0, sizeof(*f));
}

/* "a string \"0.4x\"", "an object", …: what was found instead */
static const char *describe(const cJSON *n, char *buf, size_t size)
{
	if (cJSON_IsString(n)) {
		snprintf(buf, size, "the string \"%.40s%s\"", n->valuestring,
			 strlen(n->valuestring) > 40 ? "..." : "");
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

/* "-inf", "inf", "nan" and their usual spellings; 0 if s is none of them */
static int parse_nonfinite(const char *s, double *v)
{
	int neg = 0;

	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity")) {
		*v = neg ? -INFINITY : INFINITY;
		return 1;
	}
	if (!strcasecmp(s, "nan")) {
		*v = NAN;
		return 1;
	}
	return 0;
}

struct conv {
	const json_file *f;
	const char *what;
	unsigned flags;
	size_t rank;
	size_t dim[3];
	double *out;
	int bools;  /* -1 unknown yet, 0 numbers, 1 booleans */
	char path[96];
};

static const char *path_of(struct conv *c, const size_t *idx, size_t depth)
{
	size_t used = (size_t)snprintf(c->path, sizeof(c->path), "%s", c->what);

	for (size_t i = 0; i < depth && used < sizeof(c->path); i++)
		used += (size_t)snprintf(c->path + used, sizeof(c->path) - used, "[%zu]", idx[i]);
	return c->path;
}

static int leaf(struct conv *c, const cJSON *n, const size_t *idx, double *v)
{
	char buf[80];

	if (cJSON_IsBool(n) && (c->flags & READ_BOOL)) {
		if (c->bools == 0)
			return error("'%s': %s: expected a number like the rest, found %s",
				     c->f->name, path_of(c, idx, c->rank), describe(n, buf, sizeof(buf)));
		c->bools = 1;
		*v = cJSON_IsTrue(n) ? 1.0 : 0.0;
		return 0;
	}
	if (c->bools == 1)
		return error("'%s': %s: expected true or false like the rest, found %s",
			     c->f->name, path_of(c, idx, c->rank), describe(n, buf, sizeof(buf)));
	if (cJSON_IsNumber(n)) {
		if (!isfinite(n->valuedouble))
			return error("'%s': %s: number out of range", c->f->name,
				     path_of(c, idx, c->rank));
		*v = n->valuedouble;
	} else if (cJSON_IsString(n) && parse_nonfinite(n->valuestring, v)) {
		if (!(c->flags & READ_NONFINITE))
			return error("'%s': %s: \"%s\" is not allowed here (only a mask may hold -inf)",
				     c->f->name, path_of(c, idx, c->rank), n->valuestring);
	} else {
		return error("'%s': %s: expected %s, found %s", c->f->name,
			     path_of(c, idx, c->rank),
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

	if (depth == c->rank)
		return leaf(c, n, idx, c->out++);
	if (!cJSON_IsArray(n))
		return error("'%s': %s: expected an array of %zu entries, found %s", c->f->name,
			     path_of(c, idx, depth), c->dim[depth], describe(n, buf, sizeof(buf)));
	if ((size_t)cJSON_GetArraySize(n) != c->dim[depth]) {
		const int got = cJSON_GetArraySize(n);
		char first[96];
		const size_t zeros[3] = { 0, 0, 0 };

		snprintf(first, sizeof(first), "%s", path_of(c, zeros, depth));
		return error("'%s': %s has %d entr%s but %s has %zu: rows must be equally long",
			     c->f->name, path_of(c, idx, depth), got, got == 1 ? "y" : "ies", first,
			     c->dim[depth]);
	}
	cJSON_ArrayForEach(e, n) {
		idx[depth] = i++;
		if (fill(c, e, depth + 1, idx))
			return -1;
	}
	return 0;
}

static const char *const rank_names[] = { "a number", "a 1-D array", "a 2-D array", "a 3-D array" };

int json_matrix(matrix *m, const cJSON *node, const json_file *f, const char *what,
		size_t min_rank, size_t max_rank, unsigned flags)
{
	struct conv c = { .f = f, .what = what, .flags = flags, .bools = -1 };
	size_t idx[3] = { 0, 0, 0 };
	const cJSON *n = node;

	memset(m, 0, sizeof(*m));
	/* the shape comes from the first element at each depth */
	while (cJSON_IsArray(n)) {
		if (c.rank == 3)
			return error("'%s': %s: expected %s, found an array nested deeper than 3",
				     f->name, what, rank_names[max_rank]);
		if (!cJSON_GetArraySize(n))
			return error("'%s': %s: empty array", f->name, path_of(&c, idx, c.rank));
		c.dim[c.rank++] = (size_t)cJSON_GetArraySize(n);
		n = n->child;
	}
	if (c.rank < min_rank || c.rank > max_rank) {
		char buf[80];

		if (c.rank == 0)
			return error("'%s': %s: expected %s, found %s", f->name, what,
				     rank_names[min_rank], describe(node, buf, sizeof(buf)));
		return error("'%s': %s: expected %s%s, found %s", f->name, what,
			     rank_names[min_rank],
			     max_rank > min_rank ? (max_rank == 3 ? " or a 3-D array" : " or a 2-D array") : "",
			     rank_names[c.rank]);
	}
	if (matrix_alloc(m, c.rank, c.dim[0], c.dim[1], c.dim[2]))
		return -1;
	c.out = m->v;
	if (fill(&c, node, 0, idx)) {
		matrix_free(m);
		return -1;
	}
	m->is_bool = c.bools == 1;
	return 0;
}

int read_matrix_file(matrix *m, const char *path, const char *const *keys,
		     const char *what, size_t min_rank, size_t max_rank, unsigned flags)
{
	json_file f;
	const cJSON *node = NULL;
	const char *name = what;
	int rc;

	memset(m, 0, sizeof(*m));
	if (json_file_load(&f, path)) {
		json_file_free(&f);
		return -1;
	}
	if (cJSON_IsObject(f.root)) {
		for (size_t i = 0; keys && keys[i] && !node; i++) {
			node = cJSON_GetObjectItemCaseSensitive(f.root, keys[i]);
			name = keys[i];
		}
		if (!node) {
			char list[128] = "";

			for (size_t i = 0; keys && keys[i]; i++)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s\"%s\"",
					 i ? " or " : "", keys[i]);
			rc = error("'%s': expected %s as an array, or an object holding it under %s",
				   f.name, what, list);
			json_file_free(&f);
			return rc;
		}
	} else {
		node = f.root;
	}
	rc = json_matrix(m, node, &f, name, min_rank, max_rank, flags);
	json_file_free(&f);
	return rc;
}

/*
 * read/json_doc.c: a JSON document as mha reads it (json.h): parsed by
 * cJSON, Python's NaN, Infinity and -Infinity taken as numbers, duplicate
 * keys refused, keys nobody reads refused by name, and any element found
 * again in the text by its path, since cJSON keeps no positions, to give
 * its line and column.  read/json.c turns a document's nodes into matrices.
 */
#include "read/json.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/opts.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int check_duplicate_keys(const json_doc *doc);

/* ---- Python's NaN, Infinity and -Infinity ------------------------------- */

/*
 * Python's json module writes the values JSON has no number for as the bare
 * tokens NaN, Infinity and -Infinity, which cJSON does not read.  In a copy
 * of the text each becomes a string of the same length made of one byte no
 * UTF-8 text holds (and no escape decodes to), so that cJSON reads it and
 * every position in a message stays the position in the file; after parsing
 * those strings become numbers again, keeping their bytes as the mark of
 * which token they were (json_bare_token()).
 */
static const struct {
	const char *token;
	unsigned char mark;
	double value;
} bare[] = {
	{ "NaN", 0xFD, NAN },
	{ "Infinity", 0xFE, INFINITY },
	{ "-Infinity", 0xFF, -INFINITY },
};

const char *json_bare_token(const cJSON *n)
{
	if (!cJSON_IsNumber(n) || !n->valuestring)
		return NULL;
	for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++)
		if ((unsigned char)n->valuestring[0] == bare[i].mark)
			return bare[i].token;
	return NULL;
}

/* Which bare token starts at t[p] (outside a string), or -1. */
static int bare_at(const char *t, size_t n, size_t p)
{
	for (int i = (int)(sizeof(bare) / sizeof(bare[0])) - 1; i >= 0; i--) {
		const size_t len = strlen(bare[i].token);

		/* a whole token: not the start of a longer word (NaNa stays invalid) */
		if (n - p >= len && !memcmp(t + p, bare[i].token, len) &&
		    (p + len == n || !isalnum((unsigned char)t[p + len])))
			return i;
	}
	return -1;
}

/*
 * The text with its bare tokens replaced, in *copy (NULL when it has none,
 * budget taken for it otherwise): 0, or -1 said (a byte a replacement could
 * be mistaken for, or the memory budget).
 */
static int replace_bare(const input_file *f, char **copy)
{
	const char *t = (const char *)f->data;
	const size_t n = f->len;
	int in_string = 0;
	size_t p, mark = SIZE_MAX;

	*copy = NULL;
	for (p = 0; p < n; p++) {
		const unsigned char c = (unsigned char)t[p];
		int k;

		if (c >= 0xFD && mark == SIZE_MAX)
			mark = p;
		if (in_string) {
			if (c == '\\')
				p++;
			else if (c == '"')
				in_string = 0;
			continue;
		}
		if (c == '"') {
			in_string = 1;
			continue;
		}
		if ((c != 'N' && c != 'I' && c != '-') || (k = bare_at(t, n, p)) < 0)
			continue;
		if (!*copy) {
			if (budget_take(budget_block(n + 1)))
				return budget_refuse(f->name, 0);
			*copy = malloc(n + 1);
			if (!*copy) {
				budget_give(budget_block(n + 1));
				return error("%s: out of memory", f->name);
			}
			memcpy(*copy, t, n);
			(*copy)[n] = '\0';
		}
		{
			const size_t len = strlen(bare[k].token);

			(*copy)[p] = '"';
			memset(*copy + p + 1, bare[k].mark, len - 2);
			(*copy)[p + len - 1] = '"';
			p += len - 1;
		}
	}
	if (*copy && mark != SIZE_MAX) {
		size_t line, col;

		free(*copy);
		*copy = NULL;
		budget_give(budget_block(n + 1));
		line_col(t, mark, &line, &col);
		return error("%s:%zu:%zu: the byte 0x%02X is not UTF-8 text", f->name, line, col,
			     (unsigned char)t[mark]);
	}
	return 0;
}

/* The strings replace_bare() made, under node, back into numbers. */
static void restore_bare(cJSON *node)
{
	cJSON *e;

	cJSON_ArrayForEach(e, node) {
		if (cJSON_IsString(e) && e->valuestring) {
			for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++)
				if ((unsigned char)e->valuestring[0] == bare[i].mark) {
					e->type = cJSON_Number;
					e->valuedouble = bare[i].value;
					e->valueint = 0;
				}
		} else if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
			restore_bare(e);
		}
	}
}

/* a NUL that cJSON would end the key or the string at, reading
 * "output\u0000x" as "output" */
size_t json_nul_escape(const char *text, size_t len)
{
	int in = 0;

	for (size_t i = 0; i < len; i++) {
		if (!in) {
			in = text[i] == '"';
			continue;
		}
		if (text[i] == '"') {
			in = 0;
		} else if (text[i] == '\\' && i + 1 < len) {
			if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4))
				return i;
			i++; /* the escaped character, a quote or a backslash included */
		}
	}
	return len;
}

int json_parse(json_doc *doc, const input_file *f)
{
	const char *text = (const char *)f->data, *end = NULL;
	char *copy = NULL;
	size_t skip = 0, i, refused;
	int rc;

	doc->f = f;
	doc->root = NULL;
	if (memchr(text, '\0', f->len)) {
		size_t line, col;

		line_col(text, (size_t)((const char *)memchr(text, '\0', f->len) - text), &line, &col);
		return error("%s:%zu:%zu: a NUL byte: not a JSON text file", f->name, line, col);
	}
	if ((i = json_nul_escape(text, f->len)) < f->len) {
		size_t line, col;

		line_col(text, i, &line, &col);
		return error("%s:%zu:%zu: \\u0000 in a string: a NUL, which would end a key or a "
			     "string early", f->name, line, col);
	}
	if (f->len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3))
		skip = 3; /* a UTF-8 byte order mark: harmless, skip it */
	for (i = skip; i < f->len && isspace((unsigned char)text[i]); i++)
		;
	if (i == f->len)
		return error("%s: empty file, expected JSON", f->name);

	if (replace_bare(f, &copy))
		return -1;
	/* the length counts the terminating NUL: cJSON checks for it */
	refused = budget_refusals();
	doc->root = cJSON_ParseWithLengthOpts((copy ? copy : text) + skip, f->len - skip + 1, &end,
					      1);
	if (copy) {
		if (end)
			end = text + (end - copy); /* the same place in the file */
		free(copy);
		budget_give(budget_block(f->len + 1));
	}
	if (!doc->root && budget_refusals() != refused)
		return budget_refuse(f->name, 0);
	if (!doc->root) {
		size_t off = end ? (size_t)(end - text) : f->len, line, col, from, to, k = 0;
		char near[40];

		if (off > f->len)
			off = f->len;
		line_col(text, off, &line, &col);
		if (off >= f->len)
			return error("%s:%zu:%zu: invalid JSON: the text ends too early", f->name,
				     line, col);
		/* cJSON stops where it gave up, which can be just past the culprit:
		 * show a little of the line on both sides */
		from = off;
		while (from > 0 && off - from < 12 && text[from - 1] != '\n')
			from--;
		to = off;
		while (to < f->len && to - off < 12 && text[to] != '\n')
			to++;
		for (i = from; i < to; i++)
			near[k++] = isprint((unsigned char)text[i]) ? text[i] : '?';
		near[k] = '\0';
		return error("%s:%zu:%zu: invalid JSON near '%s'", f->name, line, col, near);
	}
	rc = check_duplicate_keys(doc);
	if (!rc && copy)
		restore_bare(doc->root);
	return rc;
}

void json_doc_free(json_doc *doc)
{
	if (!doc)
		return;
	cJSON_Delete(doc->root);
	doc->root = NULL;
}

/* ---- finding an element in the text ------------------------------------ */

static size_t skip_ws(const char *t, size_t n, size_t p)
{
	while (p < n && (t[p] == ' ' || t[p] == '\t' || t[p] == '\n' || t[p] == '\r'))
		p++;
	return p;
}

/* p at a value: the position just past it (the text is valid JSON) */
static size_t skip_value(const char *t, size_t n, size_t p)
{
	size_t depth = 0;
	int in_string = 0;

	for (; p < n; p++) {
		const char c = t[p];

		if (in_string) {
			if (c == '\\')
				p++;
			else if (c == '"' && (in_string = 0, depth == 0))
				return p + 1;
			continue;
		}
		if (c == '"') {
			in_string = 1;
		} else if (c == '[' || c == '{') {
			depth++;
		} else if (c == ']' || c == '}') {
			if (depth == 0)
				return p; /* the end of the enclosing container */
			if (--depth == 0)
				return p + 1;
		} else if (depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
			return p; /* the end of a number or literal */
		}
	}
	return p;
}

/*
 * The offset of root[key][idx[0]]…[idx[depth-1]] in the text, or SIZE_MAX.
 * Keys are compared as written (a key with escapes is not found, and the
 * message then goes without a position).
 */
static size_t locate(const char *t, size_t n, const char *key, const size_t *idx, size_t depth)
{
	size_t p = (n >= 3 && !memcmp(t, "\xEF\xBB\xBF", 3)) ? 3 : 0;

	p = skip_ws(t, n, p);
	if (key) {
		const size_t klen = strlen(key);

		if (p >= n || t[p] != '{')
			return SIZE_MAX;
		p = skip_ws(t, n, p + 1);
		for (;;) {
			size_t k0, k1;

			if (p >= n || t[p] != '"')
				return SIZE_MAX;
			k0 = p + 1;
			k1 = skip_value(t, n, p) - 1;
			p = skip_ws(t, n, k1 + 1);
			if (p >= n || t[p] != ':')
				return SIZE_MAX;
			p = skip_ws(t, n, p + 1);
			if (k1 - k0 == klen && !memcmp(t + k0, key, klen))
				break;
			p = skip_ws(t, n, skip_value(t, n, p));
			if (p >= n || t[p] != ',')
				return SIZE_MAX;
			p = skip_ws(t, n, p + 1);
		}
	}
	for (size_t d = 0; d < depth; d++) {
		if (p >= n || t[p] != '[')
			return SIZE_MAX;
		p = skip_ws(t, n, p + 1);
		for (size_t i = 0; i < idx[d]; i++) {
			p = skip_ws(t, n, skip_value(t, n, p));
			if (p >= n || t[p] != ',')
				return SIZE_MAX;
			p = skip_ws(t, n, p + 1);
		}
	}
	return p < n ? p : SIZE_MAX;
}

/* ---- duplicate keys ---------------------------------------------------- */

/*
 * cJSON keeps the first of two equal keys and Python's json the last, so a
 * document with a key twice means different things to different readers:
 * refuse it, in any object, nested ones too.  Keys are compared as cJSON
 * decoded them ("X" and "\u0058" are one key), which is how mha looks them up.
 */

/* containers in a path: cJSON's nesting limit, and one for the leaf */
#define PATH_DEPTH (CJSON_NESTING_LIMIT + 1)

struct key_at {
	const char *key;
	size_t idx; /* the member's position in its object */
};

static int key_order(const void *a, const void *b)
{
	const struct key_at *x = a, *y = b;
	const int c = strcmp(x->key, y->key);

	return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The position of the first member of obj whose key an earlier member has,
 * SIZE_MAX if none; -1 out of memory, -2 past the memory budget.  Sorted, not compared pairwise: an
 * object may have a million keys. */
static int first_repeat(const cJSON *obj, size_t *at)
{
	struct key_at *keys;
	const cJSON *e;
	size_t n = 0;

	*at = SIZE_MAX;
	{
		/* keys in strictly rising order (an index as transformers writes it)
		 * cannot repeat: no sort */
		const char *last = NULL;
		int rising = 1;

		cJSON_ArrayForEach(e, obj) {
			const char *k = e->string ? e->string : "";

			rising = rising && (!last || strcmp(last, k) < 0);
			last = k;
			n++;
		}
		if (n < 2 || rising)
			return 0;
	}
	if (budget_take(budget_block(n * sizeof(*keys))))
		return -2; /* past --max-memory */
	keys = malloc(n * sizeof(*keys));
	if (!keys) {
		budget_give(budget_block(n * sizeof(*keys)));
		return -1;
	}
	n = 0;
	cJSON_ArrayForEach(e, obj) {
		keys[n].key = e->string ? e->string : "";
		keys[n].idx = n;
		n++;
	}
	qsort(keys, n, sizeof(*keys), key_order);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(keys[i - 1].key, keys[i].key) && keys[i].idx < *at)
			*at = keys[i].idx; /* equal keys are in member order: a repeat */
	free(keys);
	budget_give(budget_block(n * sizeof(*keys)));
	return 0;
}

/*
 * The first repeated key in the text under node, found by member positions
 * path[0..*depth): 1 found (*dup the member), 0 none, -1 out of memory,
 * -2 past the memory budget.
 * A member's key comes before anything inside its value, so a repeat in
 * this object at position d wins over anything inside members d and later.
 */
static int find_repeat(const cJSON *node, size_t *path, size_t depth, size_t *out_depth,
		       const cJSON **dup)
{
	size_t d = SIZE_MAX, i = 0;
	const cJSON *e;
	int rc;

	if (cJSON_IsObject(node) && (rc = first_repeat(node, &d)) != 0)
		return rc;
	cJSON_ArrayForEach(e, node) {
		path[depth] = i;
		if (i++ == d) {
			*out_depth = depth + 1;
			*dup = e;
			return 1;
		}
		/* cJSON nests no deeper than its limit; the check keeps path safe
		 * should a build of it allow more */
		if ((cJSON_IsArray(e) || cJSON_IsObject(e)) && depth + 1 < PATH_DEPTH &&
		    (rc = find_repeat(e, path, depth + 1, out_depth, dup)) != 0)
			return rc;
	}
	return 0;
}

/* The offset of the key of the member at path[0..depth) in the text, or SIZE_MAX. */
static size_t locate_member(const char *t, size_t n, const size_t *path, size_t depth)
{
	size_t p = (n >= 3 && !memcmp(t, "\xEF\xBB\xBF", 3)) ? 3 : 0;

	p = skip_ws(t, n, p);
	for (size_t d = 0; d < depth; d++) {
		const int obj = p < n && t[p] == '{';

		if (p >= n || (t[p] != '{' && t[p] != '['))
			return SIZE_MAX;
		p = skip_ws(t, n, p + 1);
		for (size_t i = 0; i <= path[d]; i++) {
			if (obj) {
				if (p >= n || t[p] != '"')
					return SIZE_MAX;
				if (i == path[d] && d + 1 == depth)
					return p;
				p = skip_ws(t, n, skip_value(t, n, p));
				if (p >= n || t[p] != ':')
					return SIZE_MAX;
				p = skip_ws(t, n, p + 1);
			}
			if (i == path[d])
				break;
			p = skip_ws(t, n, skip_value(t, n, p));
			if (p >= n || t[p] != ',')
				return SIZE_MAX;
			p = skip_ws(t, n, p + 1);
		}
	}
	return SIZE_MAX;
}

static int check_duplicate_keys(const json_doc *doc)
{
	size_t path[PATH_DEPTH], depth = 0, off, line, col;
	const cJSON *dup = NULL;
	const input_file *f = doc->f;
	int rc;

	if (!cJSON_IsArray(doc->root) && !cJSON_IsObject(doc->root))
		return 0;
	rc = find_repeat(doc->root, path, 0, &depth, &dup);
	if (rc == -2)
		return budget_refuse(f->name, 0);
	if (rc < 0)
		return error("%s: out of memory", f->name);
	if (!rc)
		return 0;
	off = locate_member((const char *)f->data, f->len, path, depth);
	if (off == SIZE_MAX)
		return error("%s: duplicate key \"%s\"", f->name, dup->string);
	line_col((const char *)f->data, off, &line, &col);
	return error("%s:%zu:%zu: duplicate key \"%s\"", f->name, line, col, dup->string);
}

/* ---- keys nobody reads --------------------------------------------------- */

/* The member positions from doc's root down to target into path[0..*depth): 1 found, else 0. */
static int path_to(const cJSON *node, const cJSON *target, size_t *path, size_t depth,
		   size_t *out_depth)
{
	const cJSON *e;
	size_t i = 0;

	if (node == target) {
		*out_depth = depth;
		return 1;
	}
	if (depth + 1 >= PATH_DEPTH)
		return 0;
	cJSON_ArrayForEach(e, node) {
		path[depth] = i++;
		if ((cJSON_IsArray(e) || cJSON_IsObject(e)) &&
		    path_to(e, target, path, depth + 1, out_depth))
			return 1;
	}
	return 0;
}

int json_known_keys(const json_doc *doc, const cJSON *obj, const char *const *known, size_t n,
		    const char *expected)
{
	const input_file *f = doc->f;
	const cJSON *e;
	size_t at = 0;

	cJSON_ArrayForEach(e, obj) {
		size_t path[PATH_DEPTH], depth = 0, off = SIZE_MAX, line, col, i;
		const char *near;
		char where[PATH_TEXT], list[256] = "";

		for (i = 0; i < n && strcmp(e->string, known[i]); i++)
			;
		if (i < n) {
			at++;
			continue;
		}
		if (path_to(doc->root, obj, path, 0, &depth) && depth + 1 < PATH_DEPTH) {
			path[depth] = at;
			off = locate_member((const char *)f->data, f->len, path, depth + 1);
		}
		if (off == SIZE_MAX) {
			snprintf(where, sizeof(where), "%s", f->name);
		} else {
			line_col((const char *)f->data, off, &line, &col);
			snprintf(where, sizeof(where), "%s:%zu:%zu", f->name, line, col);
		}
		near = closest_name(e->string, known, n);
		if (near)
			return error("%s: unknown key \"%.80s%s\": did you mean \"%s\"?", where,
				     e->string, strlen(e->string) > 80 ? "..." : "", near);
		for (i = 0; !expected && i < n; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s\"%s\"",
				 !i ? "expected " : i + 1 < n ? ", " : " or ", known[i]);
		return error("%s: unknown key \"%.80s%s\": %s", where, e->string,
			     strlen(e->string) > 80 ? "..." : "", expected ? expected : list);
	}
	return 0;
}

int json_index_keys(const json_doc *doc)
{
	static const char *const keys[] = { "metadata", "weight_map" };

	if (!cJSON_IsObject(doc->root))
		return 0; /* the caller says what it expected */
	return json_known_keys(doc, doc->root, keys, 2,
			       "an index holds \"weight_map\" (tensor name -> file) and "
			       "\"metadata\"");
}

const char *json_where(const json_doc *doc, const char *key, const size_t *idx, size_t depth,
		       char *buf, size_t size)
{
	const input_file *f = doc->f;
	size_t off = locate((const char *)f->data, f->len, key, idx, depth), line, col;

	if (off == SIZE_MAX) {
		snprintf(buf, size, "%s", f->name);
	} else {
		line_col((const char *)f->data, off, &line, &col);
		snprintf(buf, size, "%s:%zu:%zu", f->name, line, col);
	}
	return buf;
}

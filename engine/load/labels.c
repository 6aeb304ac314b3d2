/*
 * labels.c: --cell against the queries' and keys' labels (labels.h).
 */
#include "load/labels.h"
#include "util/msg.h"
#include "util/matrix.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a 1-based number or a label among n: the 0-based index, or -1 */
static long find(const char *s, const char *const *labels, size_t n)
{
	char *end;
	long v;

	while (*s == ' ')
		s++;
	for (size_t i = 0; labels && i < n; i++)
		if (!strcmp(s, labels[i]))
			return (long)i;
	errno = 0;
	v = strtol(s, &end, 10);
	while (*end == ' ')
		end++;
	if (end == s || *end || errno || v < 1 || (size_t)v > n)
		return -1;
	return v - 1;
}

/*
 * A label that more than one token has cannot say which is meant: a usage
 * error listing where it is ("'the' is the token of queries 1 and 7: give its
 * number"), and 1; else 0.
 */
static int ambiguous_in(const char *opt, const char *what, const char *s,
			const char *const *labels, size_t n)
{
	size_t at[8], found = 0;
	char list[200] = "";

	while (*s == ' ')
		s++;
	for (size_t i = 0; labels && i < n; i++)
		if (!strcmp(s, labels[i]) && found++ < 8)
			at[found - 1] = i + 1;
	if (found < 2)
		return 0;
	for (size_t k = 0; k < found && k < 8; k++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%zu",
			 k == 0 ? "" : k + 1 == found ? " and " : ", ", at[k]);
	usage_error("forward", "%s: '%s' is the token of %s %s%s: give its number", opt, s,
		    what, list, found > 8 ? ", …" : "");
	return 1;
}

static int ambiguous(const char *what, const char *s, const char *const *labels, size_t n)
{
	return ambiguous_in("--cell", what, s, labels, n);
}

int labels_parse_range(const char *arg, const char *opt, const char *what,
		       const char *const *labels, size_t n, size_t range[2])
{
	const char *colon = strchr(arg, ':');
	char side[2][256];
	long at[2];

	if (!colon || strchr(colon + 1, ':') || (size_t)(colon - arg) >= sizeof(side[0]) ||
	    strlen(colon + 1) >= sizeof(side[1]))
		return usage_error("forward", "%s takes FIRST:LAST (numbers from 1 or tokens, "
				   "either left out for the start or the end), not '%s'", opt, arg);
	memcpy(side[0], arg, (size_t)(colon - arg));
	side[0][colon - arg] = '\0';
	strcpy(side[1], colon + 1);
	for (int k = 0; k < 2; k++) {
		char *s = side[k];
		size_t len;

		while (*s == ' ')
			s++;
		len = strlen(s);
		while (len && s[len - 1] == ' ')
			s[--len] = '\0';
		if (!*s) {
			at[k] = k == 0 ? 0 : (long)n - 1;
			continue;
		}
		if (ambiguous_in(opt, what, s, labels, n))
			return EXIT_USAGE;
		at[k] = find(s, labels, n);
		if (at[k] < 0)
			return usage_error("forward", "%s: '%s' is not one of the %s: a number from 1 "
					   "to %zu%s", opt, s, what, n, labels ? " or one of the tokens" : "");
	}
	if (at[0] > at[1])
		return usage_error("forward", "%s %s: the first (%ld) is past the last (%ld)", opt, arg,
				   at[0] + 1, at[1] + 1);
	range[0] = (size_t)at[0];
	range[1] = (size_t)at[1] + 1;
	return 0;
}

int labels_parse_cell(const char *arg, const char *const *q_labels, size_t n_q,
		      const char *const *k_labels, size_t n_kv, size_t *i, size_t *j)
{
	const char *comma = strchr(arg, ',');
	char first[256];
	long a, b;

	if (!comma || (size_t)(comma - arg) >= sizeof(first))
		return usage_error("forward", "--cell takes QUERY,KEY (numbers from 1, or tokens), "
				   "not '%s'", arg);
	memcpy(first, arg, (size_t)(comma - arg));
	first[comma - arg] = '\0';
	while (comma - arg > 0 && first[strlen(first) - 1] == ' ')
		first[strlen(first) - 1] = '\0';
	if (ambiguous("queries", first, q_labels, n_q) || ambiguous("keys", comma + 1, k_labels, n_kv))
		return EXIT_USAGE;
	a = find(first, q_labels, n_q);
	b = find(comma + 1, k_labels, n_kv);
	if (a < 0)
		return usage_error("forward", "--cell: '%s' is not a query: a number from 1 to %zu%s",
				   first, n_q, q_labels ? " or one of the tokens" : "");
	if (b < 0)
		return usage_error("forward", "--cell: '%s' is not a key: a number from 1 to %zu%s",
				   comma + 1, n_kv, k_labels ? " or one of the tokens" : "");
	*i = (size_t)a;
	*j = (size_t)b;
	return 0;
}

/* "The bear eats" or "New York, is, big": the labels, split at commas if any, else at blanks */
static char **split_tokens(const char *list, size_t *n)
{
	const int commas = strchr(list, ',') != NULL;
	char **out = NULL;
	size_t cap = 0;

	*n = 0;
	for (const char *p = list; *p;) {
		const char *start, *end;
		char *t;

		while (*p == ' ' || *p == '\t' || (!commas && *p == '\n'))
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && (commas ? *p != ',' : (*p != ' ' && *p != '\t' && *p != '\n')))
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (commas && *p == ',')
			p++;
		if (*n == cap) {
			char **more = realloc(out, (cap = cap ? cap * 2 : 16) * sizeof(*out));

			if (!more)
				goto nomem;
			out = more;
		}
		if (!(t = strndup(start, (size_t)(end - start))))
			goto nomem;
		out[(*n)++] = t;
	}
	return out;
nomem:
	for (size_t i = 0; i < *n; i++)
		free(out[i]);
	free(out);
	*n = 0;
	return NULL;
}

static void free_tokens(char **t, size_t n)
{
	for (size_t i = 0; t && i < n; i++)
		free(t[i]);
	free(t);
}

/* One side's labels: split from opt's list, which must give one for each of
 * the rows of name; else those read with the matrix from (NULL: none). */
static int take_labels(char ***t, size_t *n, int *own, const char *list, const char *opt,
		       size_t rows, const char *name, const matrix *from)
{
	if (list) {
		*t = split_tokens(list, n);
		*own = 1;
		if (*n != rows)
			return error("%s gives %zu label%s but %s has %zu row%s", opt, *n, plural(*n),
				     name, rows, plural(rows));
	} else if (from && from->labels) {
		/* "tokens" in the JSON file, or a first column of names in the CSV */
		*t = from->labels;
		*n = from->n_labels;
	}
	return 0;
}

/* --tokens and --kv-tokens, one label a row: checked once the shapes are known */
int labels_set(const struct problem_spec *s, struct problem *p, const mha_dims *d)
{
	struct labels *l = &p->labels;
	const char *xname = p->direct ? "Q" : "X",
		   *kvname = p->direct ? "K" : s->xk ? "X_k" : s->kv ? "X_kv" : "X";
	const matrix *qm = p->direct ? &p->q : &p->x;
	const matrix *km = p->direct ? &p->k : s->xk ? &p->xk : s->kv ? &p->kv : NULL;

	if (take_labels(&l->query, &l->n_query, &l->own_query, s->tokens, "--tokens", d->n_q, xname,
			qm) ||
	    take_labels(&l->key, &l->n_key, &l->own_key, s->kv_tokens, "--kv-tokens", d->n_kv, kvname,
			km))
		return -1;
	if (!l->key && l->query && !s->kv && !s->xk && d->n_kv == d->n_q &&
	    (!p->direct || s->tokens)) {
		/* self-attention: the keys are the queries; with Q, K and V given,
		 * --tokens as long as both names the keys too */
		l->key = l->query;
		l->n_key = l->n_query;
	}
	return 0;
}

void labels_free(struct labels *l)
{
	if (l->own_key)
		free_tokens(l->key, l->n_key);
	if (l->own_query)
		free_tokens(l->query, l->n_query);
}

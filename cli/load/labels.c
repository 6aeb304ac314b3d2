/*
 * labels.c: --cell against the queries' and keys' labels (labels.h).
 */
#include "load/labels.h"
#include "base/cli.h"

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
static int ambiguous(const char *what, const char *s, const char *const *labels, size_t n)
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
	usage_error("forward", "--cell: '%s' is the token of %s %s%s: give its number", s,
		    what, list, found > 8 ? ", …" : "");
	return 1;
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

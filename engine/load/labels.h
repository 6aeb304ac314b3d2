/*
 * labels.h: the tokens that label the queries and keys, and --cell
 * QUERY,KEY, the one entry --explain works by hand, named by numbers from 1
 * or by those tokens.
 */
#ifndef MHA_ENGINE_LABELS_H
#define MHA_ENGINE_LABELS_H

#include <stddef.h>

#include "load/problem.h"

/* --tokens and --kv-tokens (or the labels read with the matrices), one a
 * row, checked against the shapes; self-attention's keys take the
 * queries'.  0, or -1 said. */
int labels_set(const struct problem_spec *s, struct problem *p, const mha_dims *d);
/* What labels_set() split from the options. */
void labels_free(struct labels *l);

/*
 * "3,5", "Monica,Chandler" or "2, Ross": a query and a key, 1-based numbers
 * or labels; 0 and *i, *j (0-based) set, or EXIT_USAGE with the reason
 * reported as a command-line error.
 */
int labels_parse_cell(const char *arg, const char *const *q_labels, size_t n_q,
		      const char *const *k_labels, size_t n_kv, size_t *i, size_t *j);

/*
 * --rows and --cols: "FIRST:LAST" of n (the queries, or the keys: what),
 * each a 1-based number or a label, either left out for the start or the
 * end ("5:", ":100"); range[0..1] set to the 0-based [first, last + 1),
 * 0, or EXIT_USAGE with the reason reported as a command-line error.
 */
int labels_parse_range(const char *arg, const char *opt, const char *what,
		       const char *const *labels, size_t n, size_t range[2]);

#endif

/*
 * read_json.h: the JSON reader's pieces that the weights file needs too:
 * a parsed document and the conversion of one of its nodes to a matrix.
 */
#ifndef MHA_CLI_READ_JSON_H
#define MHA_CLI_READ_JSON_H

#include "input.h"

struct cJSON;

typedef struct json_doc {
	const input_file *f;
	struct cJSON *root;
} json_doc;

/* Parse f; a syntax error is reported with its line and column. */
int json_parse(json_doc *doc, const input_file *f);
void json_doc_free(json_doc *doc);

/*
 * Convert node, found under key of the top-level object (NULL: the node is
 * the document itself), to a matrix; what names it in messages.  Errors
 * give the line and column of the element at fault.
 */
int json_node_matrix(matrix *m, const json_doc *doc, const struct cJSON *node,
		     const char *key, const char *what, size_t min_rank,
		     size_t max_rank, unsigned flags);

#endif

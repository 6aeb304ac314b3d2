/*
 * json.h: JSON files into matrices (json.c, with cJSON), and the reader's
 * pieces that the weights, the checkpoint index and config.json need too:
 * a parsed document (json_doc.c) and the conversion of one of its nodes to
 * a matrix.
 */
#ifndef MHA_ENGINE_READ_JSON_H
#define MHA_ENGINE_READ_JSON_H

#include "read/file.h"

struct cJSON;

/* A JSON file as one matrix (or an object holding it under one of
 * spec->keys); errors reported with line and column, -1. */
int read_json(matrix *m, const input_file *f, const read_spec *spec);

typedef struct json_doc {
	const input_file *f;
	struct cJSON *root;
} json_doc;

/* Parse f; a syntax error is reported with its line and column, and so is
 * a \u0000 in a string (cJSON would end the key or the string there). */
int json_parse(json_doc *doc, const input_file *f);

/* The offset in text of the first \u0000 escape inside a string, or len:
 * none (JSON that is not a file's: a safetensors header). */
size_t json_nul_escape(const char *text, size_t len);
void json_doc_free(json_doc *doc);

/* The token a number read from Python's bare NaN, Infinity or -Infinity
 * was ("NaN", …), else NULL. */
const char *json_bare_token(const struct cJSON *n);

/* "FILE:LINE:COL" of the element at idx[0..depth) under key (NULL: the
 * document itself) in buf, or "FILE" when the text does not show it */
const char *json_where(const json_doc *doc, const char *key, const size_t *idx, size_t depth,
		       char *buf, size_t size);

/*
 * Convert node, found under key of the top-level object (NULL: the node is
 * the document itself), to a matrix; what names it in messages.  Errors
 * give the line and column of the element at fault.
 */
int json_node_matrix(matrix *m, const json_doc *doc, const struct cJSON *node,
		     const char *key, const char *what, size_t min_rank,
		     size_t max_rank, unsigned flags);

/*
 * Refuse a member of obj (the document's root, or an object inside it)
 * whose key is not one of known[0..n): "FILE:LINE:COL: unknown key "keys":
 * did you mean "k"?" when one is nearly it, else the message ends with
 * ": " and expected ("positions are under "q" and "k""; NULL: the keys
 * known, listed).  Checked before any value is read, so that a typo cannot
 * leave a value at its default.  0, or -1 said.
 */
int json_known_keys(const json_doc *doc, const struct cJSON *obj, const char *const *known,
		    size_t n, const char *expected);

/*
 * model.safetensors.index.json's top level: "weight_map" and "metadata"
 * (free-form) and nothing else, as json_known_keys() refuses others.
 */
int json_index_keys(const json_doc *doc);

#endif

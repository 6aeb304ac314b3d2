/*
 * weights.c: read a weights file.  Keys are matched loosely (W_Q, WQ, W^Q,
 * Wq and wq are one key) but never guessed: anything else is refused by
 * name, so a typo cannot silently drop a weight.
 */
#include "weights.h"
#include "cli.h"
#include "read_json.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *const weight_names[N_WEIGHTS] = {
	"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
};

/* "W^Q" -> "wq": drop '_' and '^', fold case; -1 for no such weight */
static int weight_index(const char *key)
{
	char folded[8];
	size_t n = 0;

	for (const char *p = key; *p; p++) {
		if (*p == '_' || *p == '^')
			continue;
		if (n + 1 >= sizeof(folded))
			return -1;
		folded[n++] = (char)tolower((unsigned char)*p);
	}
	folded[n] = '\0';
	for (int i = 0; i < N_WEIGHTS; i++) {
		const char *c = weight_names[i];
		const char want[3] = { (char)tolower((unsigned char)c[0]),
				       (char)tolower((unsigned char)c[2]), '\0' };

		if (!strcmp(folded, want))
			return i;
	}
	return -1;
}

int weights_load(weights *w, const char *path)
{
	const char *given[N_WEIGHTS] = { NULL };
	input_file in;
	json_doc doc = { 0 };
	const cJSON *e;
	int rc = 0;

	memset(w, 0, sizeof(*w));
	if (input_load(&in, path)) {
		input_free(&in);
		return -1;
	}
	if (json_parse(&doc, &in)) {
		json_doc_free(&doc);
		input_free(&in);
		return -1;
	}
	w->file = strdup(in.name);
	if (!w->file) {
		json_doc_free(&doc);
		input_free(&in);
		return error("out of memory");
	}
	if (!cJSON_IsObject(doc.root)) {
		rc = error("'%s': expected an object with keys W_Q, W_K, W_V (and optionally W_O, b_Q, b_K, b_V, b_O)",
			   in.name);
		goto done;
	}
	cJSON_ArrayForEach(e, doc.root) {
		int i = weight_index(e->string);

		if (i < 0) {
			rc = error("'%s': unknown key \"%s\" (expected W_Q, W_K, W_V, W_O, b_Q, b_K, b_V or b_O)",
				   in.name, e->string);
			goto done;
		}
		if (given[i]) {
			if (!strcmp(given[i], e->string))
				rc = error("'%s': \"%s\" appears twice", in.name, e->string);
			else
				rc = error("'%s': \"%s\" and \"%s\" are both %s", in.name, given[i],
					   e->string, weight_names[i]);
			goto done;
		}
		given[i] = e->string;
		/* biases are vectors; a single row [[...]] is taken as one too */
		if (json_node_matrix(&w->m[i], &doc, e, e->string, weight_names[i], i >= BQ ? 1 : 2, 2, 0)) {
			rc = -1;
			goto done;
		}
		if (i >= BQ && w->m[i].rank == 2) {
			if (w->m[i].dim[0] != 1) {
				rc = error("'%s': %s is %zux%zu, expected a vector (one row)", in.name,
					   weight_names[i], w->m[i].dim[0], w->m[i].dim[1]);
				goto done;
			}
			w->m[i].rank = 1;
			w->m[i].dim[0] = w->m[i].dim[1];
			w->m[i].dim[1] = 1;
		}
	}
done:
	json_doc_free(&doc);
	input_free(&in);
	if (rc)
		weights_free(w);
	return rc;
}

void weights_free(weights *w)
{
	if (!w)
		return;
	for (int i = 0; i < N_WEIGHTS; i++)
		matrix_free(&w->m[i]);
	free(w->file);
	w->file = NULL;
}

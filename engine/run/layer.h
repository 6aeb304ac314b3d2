/*
 * layer.h: a checkpoint's layer as a run resolves it, described (layer.c):
 * the figures 'mha model' shows, its JSON object (the program's -f json
 * and the engine's mhe_run_model), and the tensors a run computes with
 * under the names 'mha model -o' gives them.
 */
#ifndef MHA_ENGINE_LAYER_H
#define MHA_ENGINE_LAYER_H

#include <stddef.h>
#include <stdio.h>

#include "load/problem.h"
#include "util/matrix.h"

/* What a loaded layer comes to. */
struct layer_facts {
	const char *type;        /* config.json's own model_type, or "" */
	const char *stated[24];  /* the settings given over config.json */
	size_t n_stated;
	size_t H, G, dk, dv, din, dout, R;
	double scale;
};

/* pb's facts (pb loaded with spec.probe) */
void layer_facts(const struct problem *pb, struct layer_facts *f);

/* pb's layer as one JSON object, 'mha model -f json''s "layers" entry */
void layer_json(FILE *fp, const struct problem *pb, const struct layer_facts *f);

/* the layer's tensors as a run computes with them: the weights finished as
 * -w's are (d_in x d_out, biases vectors), the others as read, under
 * 'mha model -o''s names, into names[] and m[] (room for LAYER_TENSORS):
 * how many */
#define LAYER_TENSORS 24
size_t layer_tensors(const struct problem *p, const char **names, const matrix **m);

#endif

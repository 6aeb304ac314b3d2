/*
 * meta.h: how a run was made, as the "meta" object that heads mha's JSON
 * output (and meta.json under -o DIR/): the version, the inputs and
 * weights, the shapes, the scale and why, the mask's parts, the element
 * type and the library's path.  Flat: each value a string, a number, a
 * boolean, null or an array of strings, but "scale", {"value", "rule"}.
 * docs/formats.md's "The JSON output" documents every key; tests/schema_check.py
 * holds the two together.
 */
#ifndef MHA_ENGINE_META_H
#define MHA_ENGINE_META_H

#include <stdio.h>

#include "run/steps.h"
#include "mha.h"

struct run_meta {
	const struct step_facts *f; /* the options, shapes, weights given, mask file */
	const mha_report *rep;      /* the run's: scale, causal offset, path */
	int f32;                    /* --dtype f32 */
	size_t batch;               /* the batch's sequences as read, 0 for 2-D inputs */
	size_t sequence;            /* --sequence N: a batch's sequence shown alone; 0: all */
};

/* The object, its keys indented one level past depth (0: a file of its
 * own); no newline after the closing brace. */
void meta_write_json(FILE *fp, const struct run_meta *m, int depth);

/* Its parts, as its keys give them (and 'mha model' too): the scale's
 * rule ("1/sqrt(d_k)", …), the causal rule ("top-left", …), rope.scaling
 * (null, or {"type", "factor", "original_max", "attention_factor"}), the
 * q/k norm (null, or {"kind", "over", "eps", "q", "k"}: its weights' files,
 * or null) */
const char *meta_scale_rule(mha_scale_mode mode);
const char *meta_causal_name(mha_causal c);
void meta_rope_scaling(FILE *fp, const mha_rope *r);
void meta_norm(FILE *fp, const mha_qk_norm *n, const char *q_file, const char *k_file);
/* multi-head latent attention: null, or its dims, eps and form (expanded, absorbed) */
void meta_mla(FILE *fp, const mha_config *cfg, const mha_dims *d);

#endif

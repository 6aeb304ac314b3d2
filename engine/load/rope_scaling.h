/*
 * rope_scaling.h: config.json's rope_scaling, or --rope-scaling's object,
 * read as transformers reads it into the library's mha_rope_scaling
 * (mha.h documents each type's frequencies).
 */
#ifndef MHA_ENGINE_ROPE_SCALING_H
#define MHA_ENGINE_ROPE_SCALING_H

#include <cjson/cJSON.h>

#include "load/spec.h"

/*
 * The object sc (from path: a file name, or "--rope-scaling") into
 * s->cfg.rope.scaling.  max_pos is config.json's max_position_embeddings
 * (0: none read), which YaRN, dynamic and LongRoPE may need, and orig_top
 * its original_max_position_embeddings beside rope_scaling (Phi-3's, which
 * LongRoPE then reads as transformers does; 0: none); a key sc's
 * type does not read, a value out of range, or a setting transformers'
 * versions read differently is refused naming it (as s->rope_from names
 * the object: transformers 5's rope_parameters, read as 5 reads it).  "default" (or no type
 * at all... refused) leaves the frequencies θ's.  0, or -1 said.
 */
int rope_scaling_read(struct problem_spec *s, const cJSON *sc, const char *path, double max_pos,
		      double orig_top);

/* --rope-scaling J: J a JSON object, or a file holding one; read as above.
 * 0, or -1 said. */
int rope_scaling_option(struct problem_spec *s, double max_pos);

/* The type's name as rope_scaling writes it ("llama3"), for titles and
 * meta; "" for MHA_ROPE_SCALING_NONE or a type mha does not know. */
const char *rope_scaling_name(mha_rope_scaling_type t);

#endif

/*
 * weights.h: the weights W_Q, W_K, W_V, W_O and biases b_Q, b_K, b_V, b_O,
 * from wherever the user keeps them:
 *
 *   -w FILE    one JSON object holding them under their names
 *   -w DIR     one file per weight, named after it (W_Q.csv, WQ.npy, …)
 *   --wq FILE  one weight from one file (any format), over what -w gave
 *
 * Each may be a (d_in, d_out) matrix as the tutorials write it, or one
 * (d_in, d_k) matrix per head stacked in a 3-D array, as the formula's
 * W_i^Q writes it; weights_finish() turns the latter into column blocks.
 * With the PyTorch layout, weights are (d_out, d_in) and applied as x·Wᵀ,
 * and nn.MultiheadAttention's own names (in_proj_weight, out_proj.weight,
 * …) are understood too.
 */
#ifndef MHA_ENGINE_WEIGHTS_H
#define MHA_ENGINE_WEIGHTS_H

#include "util/matrix.h"

enum { WQ, WK, WV, WO, BQ, BK, BV, BO, N_WEIGHTS };

/* canonical spellings, "W_Q" … "b_O", indexed by the enum above */
extern const char *const weight_names[N_WEIGHTS];
/* the options that read one each, "--wq" … "--bo" */
extern const char *const weight_options[N_WEIGHTS];

typedef enum { LAYOUT_MHA, LAYOUT_TORCH } weight_layout;

/* A model family's checkpoint (--layout llama|gpt2|bert|torch, model.c):
 * its tensor names, and the layout its weights are in. */
/* --layout's families (up to FAMILY_TORCH), then those only a config.json's
 * model_type names (families.c) */
typedef enum { FAMILY_NONE, FAMILY_LLAMA, FAMILY_GPT2, FAMILY_BERT, FAMILY_TORCH, FAMILY_PHI3,
	       FAMILY_NEOX, FAMILY_FALCON, FAMILY_BIGCODE, FAMILY_MODERNBERT,
	       FAMILY_DEEPSEEK, FAMILY_PHI, FAMILY_GPTJ, FAMILY_OPT, FAMILY_INTERNLM2 } model_family;

typedef struct weights {
	matrix m[N_WEIGHTS];       /* rank 0 where none was given */
	char *src[N_WEIGHTS];      /* where each came from: "-w w.json", "--wq q.csv" */
	matrix in_proj_w, in_proj_b; /* PyTorch's packed projections, until finished */
	char *in_proj_src[2];
	unsigned torch_named;      /* bit 1 << WQ …: given under a PyTorch name (q_proj_weight,
				      out_proj.weight, …), so held to nn.MultiheadAttention's shape */
	weight_layout layout;
	int floats;                /* float32 files stay floats (READ_F32): --dtype f32 */
	int map;                   /* .npy files may be mapped (READ_MAP, problem.h's map) */
} weights;

/* -w PATH: a JSON object, or a directory of one file per weight. */
int weights_load(weights *w, const char *path, weight_layout layout);
/* Each file -w path would read: path itself, or each weight file in the
 * directory path names, passed to fn; the first nonzero fn returns, or 0. */
int weights_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx);
/* --wq FILE and the like: which is WQ … BO; replaces what -w gave. */
int weights_load_one(weights *w, int which, const char *opt, const char *path,
		     weight_layout layout);
/* One weight under key (mha's name, or nn.MultiheadAttention's under
 * the PyTorch layout), as a -w JSON object gives it: m is taken (emptied)
 * or freed; src says where it came from.  0, or -1 said. */
int weights_put_key(weights *w, const char *key, matrix *m, const char *src);
/*
 * Make every weight (d_in, d_out) and every bias a vector: per-head 3-D
 * arrays become column blocks (checked against heads and kv_heads), the
 * PyTorch layout is transposed and its packed in_proj split.
 */
int weights_finish(weights *w, size_t heads, size_t kv_heads);
void weights_free(weights *w);

static inline int weights_has(const weights *w, int which)
{
	return w->m[which].rank != 0;
}

#endif

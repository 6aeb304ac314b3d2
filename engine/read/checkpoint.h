/*
 * checkpoint.h: a safetensors checkpoint's files and tensor names: one
 * .safetensors file, a folder of them, or model.safetensors.index.json
 * naming the shards.  Which tensors make a model's attention, and what
 * config.json says, is model.h's.
 */
#ifndef MHA_ENGINE_CHECKPOINT_H
#define MHA_ENGINE_CHECKPOINT_H

#include <stddef.h>

#include "util/msg.h"
#include "util/matrix.h"
#include "read/json.h"

struct ckpt_shard;

/* A tensor's name (the index's or a shard header's own string), and where it is */
struct ckpt_name {
	const char *name;
	const char *file;   /* the file the index names for it, or NULL: shard says */
	size_t shard;       /* index into shards */
};

/* A checkpoint: its shards, and every tensor name with the shard holding it. */
struct ckpt {
	const char *path;      /* as -w gave it */
	char dir[4096];
	struct ckpt_shard *shards; /* (n_shards, in shards_cap): checkpoint.c's */
	size_t n_shards, shards_cap;
	struct ckpt_name *names;   /* (n_names, in names_cap) sorted by name */
	size_t n_names, names_cap;
	json_doc index_doc;    /* the index's, whose strings names hold */
	const char *index;     /* the index's path for messages, or NULL */
	char index_path[PATH_TEXT];
	size_t held;           /* what the names and tables hold of the memory budget */
	int last_f8;           /* the tensor ckpt_read read last was FP8 (F8_E4M3, F8_E5M2) */
};


/* -w path names a checkpoint: a .safetensors file, a
 * *.safetensors.index.json, or a folder holding either. */
int ckpt_is_checkpoint(const char *path);

/* Each file of the checkpoint at path (its shards, index and config.json)
 * passed to fn: the first nonzero fn returns, or 0. */
int ckpt_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx);

/* The folder path is in, or path itself when it is one, into dir. */
void ckpt_folder_of(const char *path, char *dir, size_t size);

/*
 * The checkpoint at path: every tensor's name, and the shard that holds it
 * (an index's shards are opened only when a tensor is read from them; a
 * folder's each read for its header, then closed).  0, or -1 said; either
 * way ckpt_free() after.
 */
int ckpt_open(struct ckpt *c, const char *path);
void ckpt_free(struct ckpt *c);
/* name's place in c->names, or -1 */
ptrdiff_t ckpt_find(const struct ckpt *c, const char *name);
/* Tensor name into m (float64), and where it came from into src ("tensor
 * "x" of ck/model.safetensors"): 0, or -1 said (a missing one as
 * ckpt_missing says it). */
int ckpt_read(matrix *m, struct ckpt *c, const char *name, char *src, size_t size);
/* "no tensor "NAME"WHY (nearest: "a", "b", "c")", the nearest names found
 * in bounded work whatever the checkpoint holds: -1. */
int ckpt_missing(const struct ckpt *c, const char *name, const char *why);

#endif

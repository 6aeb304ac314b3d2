/*
 * named.h: matrices under names, wherever a user keeps a set of them: the
 * keys of a JSON object, the members of a .npz archive, or a folder of one
 * file a name (W_Q.csv, head1_scores.npy: the name is the file's stem).
 * The walk over them is written here once, for -w (load/weights.c) and
 * 'mha compare --against' (compare/against.c).  What a name means, which names
 * are refused, and every message about them stay the caller's: nothing
 * here knows a weight or a step.
 *
 *     named_set s;
 *     named_entry e;
 *
 *     if (is_dir(path) ? named_dir(&s, path, 0) : named_file(&s, path))
 *             ...;                     (a folder's failure is not said: errno)
 *     while (named_next(&s, &e))
 *             ... named_read(&s, &e, &m, &spec) ...;
 *     named_close(&s);
 *
 * Names come in the set's own order: an object's keys as written, the
 * archive's members as stored, a folder's files sorted by name (strcmp),
 * so that which of two clashing files is named first never varies.
 */
#ifndef MHA_ENGINE_NAMED_H
#define MHA_ENGINE_NAMED_H

#include <stddef.h>

#include "read/file.h"
#include "read/json.h"
#include "read/npz.h"

typedef enum {
	NAMED_DIR,   /* a folder: its files, by stem */
	NAMED_JSON,  /* a JSON object: its keys */
	NAMED_NPZ,   /* a .npz archive: its members (z) */
	NAMED_VALUE, /* JSON, but not an object: doc.root, for the caller to read or refuse */
	NAMED_OTHER  /* another format (CSV, .npy): in, loaded but not parsed */
} named_kind;

/* What named_dir keeps of a folder. */
enum {
	/* only files whose name ends .json, .csv, .tsv, .txt or .npy: a README
	 * or the like beside the data is passed over */
	NAMED_DATA_FILES = 1u << 0,
	/* a file's path joins the folder's with one '/' when the folder's
	 * path ends with one ("d/" and "x.csv": "d/x.csv", not "d//x.csv") */
	NAMED_JOIN_ONCE = 1u << 1
};

typedef struct named_set {
	named_kind kind;
	const char *path;  /* as given: the folder, or the file */
	input_file in;     /* the file read (not for a folder) */
	json_doc doc;      /* NAMED_JSON, NAMED_VALUE */
	npz_archive *z;    /* NAMED_NPZ */
	char **files;      /* NAMED_DIR: (n_files) file names, sorted, from malloc() */
	char **paths;      /* NAMED_DIR: (n_files) the paths they are read by */
	size_t n_files;
	/* the walk */
	size_t next;
	const struct cJSON *node;
	char stem[256];    /* NAMED_DIR: the current file's name without its extension */
} named_set;

/* One name the walk meets. */
typedef struct named_entry {
	const char *name;   /* the key, the member (without .npy), or the file's stem
			       (its name up to the last '.') */
	const char *file;   /* a folder's: the file's name ("W_Q.csv"); else NULL */
	const char *path;   /* a folder's: the path it is read by; else NULL */
	const struct cJSON *node; /* a JSON object's: the key's value; else NULL */
} named_entry;

/* The folder dir's files (flags: NAMED_DATA_FILES, NAMED_JOIN_ONCE), dot
 * files never.  0, or -1 with errno set and nothing said (the caller words
 * it): dir cannot be read, or ENOMEM.  named_close() after, either way. */
int named_dir(named_set *s, const char *dir, unsigned flags);

/* The file at path ("-": standard input) read whole and told apart by its
 * format (input.h): an archive opened, JSON parsed (kind NAMED_JSON for an
 * object, else NAMED_VALUE), anything else NAMED_OTHER.  0, or -1 said.
 * named_close() after, either way. */
int named_file(named_set *s, const char *path);

/* How many names the walk meets (a folder: its files kept). */
size_t named_count(const named_set *s);

/* The next name into e: 1, or 0 when there is none. */
int named_next(named_set *s, named_entry *e);

/*
 * The matrix under e into m, as spec asks (a folder's file as a file mha
 * found, READ_FOUND; a key with its line and column; a member as
 * npz_read).  0, or -1 said.
 */
int named_read(const named_set *s, const named_entry *e, matrix *m, const read_spec *spec);

/* Everything s holds; a set never opened but zeroed is fine. */
void named_close(named_set *s);

#endif

/*
 * npz.h: reading NumPy .npz archives (np.savez, np.savez_compressed, and
 * mha's own -o run.npz): a ZIP archive whose members are .npy files.
 *
 * npz_open() checks the archive's structure before anything is read from
 * it: the end record (ZIP64 too), the central directory, each member's
 * local header against it, no two members overlapping or sharing a name,
 * only stored (method 0) and deflated (method 8) members, none encrypted.
 * Members are then read one at a time: a stored one in place, a deflated
 * one inflated by zlib into a buffer of its declared size, charged to the
 * memory budget (zlib's own state too); the CRC-32 of each is checked
 * before it is parsed.
 * Sizes come from the central directory, so members followed by data
 * descriptors are read too.  Names are not paths: nothing is extracted,
 * and a name ("../x", "a/b", control characters) only reaches messages,
 * which show it safely (text.h).  Not a writer: that is zip.h.
 *
 * The archive refers to f's bytes: f outlives it.  npz_close(NULL) is fine.
 */
#ifndef MHA_ENGINE_NPZ_H
#define MHA_ENGINE_NPZ_H

#include <stddef.h>

#include "read/file.h"

typedef struct npz_archive npz_archive;

/* 1 when f starts like a zip archive ("PK\3\4" or an empty archive's "PK\5\6"). */
int is_npz(const input_file *f);
/* Check f's zip structure (end record, ZIP64 too, central directory, each local header
 * agreeing with it) and index its members; errors reported ("mha: run.npz: ..."), -1. */
int npz_open(npz_archive **z, const input_file *f);
size_t npz_count(const npz_archive *z);
/* The i-th member's name without its ".npy" ending (as np.load shows keys). */
const char *npz_name(const npz_archive *z, size_t i);
/* 1 when a member of that name (without .npy) is there. */
int npz_has(const npz_archive *z, const char *name);
/* Read member name (without .npy) as a .npy array into m per spec (what/ranks/flags as
 * read_npy), errors naming "run.npz: heads.softmax: ..."; 0, or -1 (reported).
 * A unicode array (meta, tokens) is read by npz_read_text below, not this. */
int npz_read(const npz_archive *z, const char *name, matrix *m, const read_spec *spec);
/* A 0-d or 1-d '<U' member as UTF-8 strings (meta's JSON text, tokens): *out is a
 * malloc'd array of *n malloc'd NUL-terminated strings; control characters kept as data
 * (callers make them safe). 0 or -1 (reported).  Refused when the strings would take
 * more than the memory budget has left, but not charged to it (the caller frees them). */
int npz_read_text(const npz_archive *z, const char *name, char ***out, size_t *n);
void npz_close(npz_archive *z);

/*
 * A whole .npz given where one matrix is read (-x run.npz, --mask m.npz):
 * the member named by the first of spec->keys the archive has, else its
 * only member; else "x.npz: no member X (members: a, b, c)".  With
 * READ_LABELS, a "tokens" member labels the rows, as a JSON object's
 * "tokens" does.  read_input() calls it for a file that is_npz().
 */
int read_npz(matrix *m, const input_file *f, const read_spec *spec);

#endif

/*
 * input.h: reading matrices from files in any of mha's input formats.
 *
 * A file is read whole (standard input too, once), its format found (a .npy
 * file by its magic bytes under any name, a .npz by a zip's (npz.h); else a name ending .json, .csv or
 * .tsv is believed; else JSON by its first character, anything else CSV),
 * then parsed by that format's reader.  Every reader
 * reports its own errors in one line that starts with the file's name, and
 * where it can the line and column (JSON, CSV) or the element (.npy):
 *
 *   mha: weights.json:3:17: W_Q[2][1]: expected a number, found "0.4x"
 *   mha: x.csv:4: X[2] has 1 field but X[0] (line 2) has 2: rows must be equally long
 *   mha: x.npy: X[2][1] is nan: only a mask may hold nan or infinity
 */
#ifndef MHA_ENGINE_INPUT_H
#define MHA_ENGINE_INPUT_H

#include "read/file.h"

typedef enum {
	FORMAT_IN_JSON, FORMAT_IN_CSV, FORMAT_IN_NPY, FORMAT_IN_NPZ,
	FORMAT_IN_PICKLE /* Python's pickle (an old torch.save): refused, refuse_pickle() */
} in_format;

/* The format of f, from its content and its name (see above). */
in_format input_format(const input_file *f);

/* Load path and parse it in whichever format it is in. */
int read_matrix(matrix *m, const char *path, const read_spec *spec);
/* The same on a file already loaded (or made in memory: the fuzzers). */
int read_input(matrix *m, const input_file *f, const read_spec *spec);
#endif

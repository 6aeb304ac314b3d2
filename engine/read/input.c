/*
 * input.c: an input file's format told, and the file handed to its reader
 * (input.h).
 */
#include "read/input.h"
#include "read/memory.h"
#include "util/msg.h"
#include "read/csv.h"
#include "read/json.h"
#include "read/npy.h"
#include "read/npz.h"

#include <ctype.h>
#include <string.h>

in_format input_format(const input_file *f)
{
	size_t i = 0;
	char ext[8];

	/* the magic bytes cannot be mistaken: a .npy file under any name */
	if (f->len >= 6 && !memcmp(f->data, "\x93NUMPY", 6))
		return FORMAT_IN_NPY;
	if (is_npz(f))
		return FORMAT_IN_NPZ;
	/* pickle's PROTO opcode, protocols 2 to 5: what torch.save wrote before 1.6 */
	if (f->len >= 2 && f->data[0] == 0x80 && f->data[1] >= 2 && f->data[1] <= 5)
		return FORMAT_IN_PICKLE;
	/* a name that says its format is believed, so that a broken file is
	 * reported in its own format's terms: x.csv holding "[1, 2]" gets the
	 * CSV reader's message, not a guess that it was JSON */
	file_extension(f->name, ext, sizeof(ext));
	if (!strcmp(ext, "json"))
		return FORMAT_IN_JSON;
	if (!strcmp(ext, "csv") || !strcmp(ext, "tsv"))
		return FORMAT_IN_CSV;
	/* any other name (x.txt, x.npy written by savetxt, <stdin>): the content */
	if (f->len >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3))
		i = 3; /* a UTF-8 byte order mark says nothing about the format */
	while (i < f->len && isspace(f->data[i]))
		i++;
	if (i < f->len && (f->data[i] == '[' || f->data[i] == '{'))
		return FORMAT_IN_JSON; /* no CSV row starts so */
	return FORMAT_IN_CSV;
}

/* nothing but white space (and perhaps a byte order mark) */
static int is_blank(const input_file *f)
{
	size_t i = f->len >= 3 && !memcmp(f->data, "\xEF\xBB\xBF", 3) ? 3 : 0;

	while (i < f->len && isspace(f->data[i]))
		i++;
	return i == f->len;
}

int read_input(matrix *m, const input_file *f, const read_spec *spec)
{
	const char *was = msg_reading(f->name); /* the messages' file */
	int rc;

	memset(m, 0, sizeof(*m));
	if (is_blank(f)) {
		rc = error("%s: empty file, expected %s", f->name, spec->what);
		msg_reading(was);
		return rc;
	}
	switch (input_format(f)) {
	case FORMAT_IN_NPY: rc = read_npy(m, f, spec); break;
	case FORMAT_IN_NPZ: rc = read_npz(m, f, spec); break;
	case FORMAT_IN_PICKLE: rc = refuse_pickle(f->name); break;
	case FORMAT_IN_JSON: rc = read_json(m, f, spec); break;
	default: rc = read_csv(m, f, spec); break;
	}
	if (rc)
		matrix_free(m);
	msg_reading(was);
	return rc;
}

/* what read_matrix() reads before telling a .npy file: its header, as a
 * rule (NumPy pads it to 64 or 128 bytes; a longer one is read on) */
#define HEAD_BYTES 4096

int read_matrix(matrix *m, const char *path, const read_spec *spec)
{
	const char *was = msg_reading(path); /* the messages' file */
	input_file f;
	int rc;

	memset(m, 0, sizeof(*m));
	if (memory_has(path)) {
		/* an array handed over in memory (mhe_run_set_array) */
		rc = memory_read(m, path, spec);
		msg_reading(was);
		return rc;
	}
	if (input_begin(&f, path, HEAD_BYTES, spec->flags & READ_FOUND ? FILE_FOUND : FILE_GIVEN)) {
		input_free(&f);
		msg_reading(was);
		return -1;
	}
	/* .npy by its magic bytes: the values go straight where they belong */
	if (!f.ended && f.len >= 6 && !memcmp(f.data, "\x93NUMPY", 6)) {
		rc = read_npy_rest(m, &f, spec);
		if (rc)
			matrix_free(m);
	} else if (!f.ended && is_npz(&f)) {
		/* an .npz archive is read in place: mapped, not copied */
		rc = input_map(&f) ? -1 : read_input(m, &f, spec);
	} else {
		rc = input_finish(&f) ? -1 : read_input(m, &f, spec);
	}
	input_free(&f);
	msg_reading(was);
	return rc;
}

/*
 * fuzz_format.c: libFuzzer target for telling a file's format and handing
 * it to its reader: input_format() and read_input(), the in-memory half of
 * read_matrix().  The first byte of the input picks the file's name (a
 * .json, .csv or .tsv name is believed over the content, except the .npy
 * magic and a zip's, a .npz); the rest is the file.
 */
#include "fuzz.h"

static const char *const names[] = {
	"fuzz", "fuzz.json", "fuzz.JSON", "fuzz.csv", "fuzz.npy", "dir.json/fuzz", ".json",
	"<stdin>",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	input_file f;
	in_format fmt;

	if (size < 1)
		return 0;
	fuzz_file(&f, names[data[0] % (sizeof(names) / sizeof(names[0]))], data + 1, size - 1);
	fmt = input_format(&f);
	if (fmt != FORMAT_IN_JSON && fmt != FORMAT_IN_CSV && fmt != FORMAT_IN_NPY &&
	    fmt != FORMAT_IN_NPZ)
		fuzz_fail("input_format: not a format");
	if (fmt == FORMAT_IN_NPZ && (f.len < 4 || memcmp(f.data, "PK", 2)))
		fuzz_fail("input_format: .npz without a zip's signature");
	if (fmt == FORMAT_IN_NPY && (f.len < 6 || memcmp(f.data, "\x93NUMPY", 6)))
		fuzz_fail("input_format: .npy without the magic");
	for (size_t i = 0; i < FUZZ_N_SPECS; i++)
		fuzz_read(read_input, &f, &fuzz_specs[i]);
	input_free(&f);
	return 0;
}

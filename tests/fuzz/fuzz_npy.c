/*
 * fuzz_npy.c: libFuzzer target for the .npy reader, read_npy(), with the
 * specs 'mha forward' reads X (2-D, numbers, row labels), a mask (2-D or
 * 3-D, -inf and booleans) and a weight (1-D to 3-D) with.  The magic and
 * version, the header dict, dtypes, byte orders, Fortran order and the
 * size checks.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	input_file f;

	fuzz_file(&f, "fuzz.npy", data, size);
	for (size_t i = 0; i < FUZZ_N_SPECS; i++)
		fuzz_read(read_npy, &f, &fuzz_specs[i]);
	input_free(&f);
	return 0;
}

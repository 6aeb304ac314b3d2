/*
 * fuzz_csv.c: libFuzzer target for the CSV reader, read_csv(), with the
 * specs 'mha forward' reads X (2-D, numbers, row labels), a mask (2-D or
 * 3-D, -inf and booleans) and a weight (1-D to 3-D, a row or a column)
 * with.  Separators, quotes, headers, comments, line ends, a column of
 * labels and mha's own blocks ("# X (2x3)").
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	input_file f;

	fuzz_file(&f, "fuzz.csv", data, size);
	for (size_t i = 0; i < FUZZ_N_SPECS; i++)
		fuzz_read(read_csv, &f, &fuzz_specs[i]);
	input_free(&f);
	return 0;
}

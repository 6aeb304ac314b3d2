/*
 * fuzz_json.c: libFuzzer target for the JSON reader, read_json(), with the
 * specs 'mha forward' reads X (2-D, numbers, row labels), a mask (2-D or
 * 3-D, -inf and booleans) and a weight (1-D to 3-D) with.  Arrays, objects
 * with keys, cJSON's parser and the walk back through the text for error
 * positions.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	input_file f;

	fuzz_file(&f, "fuzz.json", data, size);
	for (size_t i = 0; i < FUZZ_N_SPECS; i++)
		fuzz_read(read_json, &f, &fuzz_specs[i]);
	input_free(&f);
	return 0;
}

/*
 * fuzz_npz.c: libFuzzer target for the .npz reader: npz_open() checking the
 * zip structure (the end record, ZIP64 records, the central directory, each
 * local header, overlaps, duplicate names, methods), then every member read
 * as numbers with the three specs and as text, which runs zlib's inflate
 * on each deflated member before its CRC-32 is checked; and read_npz(), the
 * member an option picks (with X's tokens as row labels).
 */
#include "fuzz.h"
#include "read/npz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	input_file f;
	npz_archive *z;

	fuzz_file(&f, "fuzz.npz", data, size);
	if (npz_open(&z, &f) == 0) {
		for (size_t i = 0; i < npz_count(z); i++) {
			const char *name = npz_name(z, i);
			char **s;
			size_t n;

			if (!name || !npz_has(z, name))
				fuzz_fail("npz_name: a listed member not found");
			for (size_t k = 0; k < FUZZ_N_SPECS; k++) {
				matrix m;

				if (npz_read(z, name, &m, &fuzz_specs[k]) == 0)
					fuzz_check_matrix(&m, &fuzz_specs[k]);
				matrix_free(&m);
			}
			if (npz_read_text(z, name, &s, &n) == 0) {
				for (size_t j = 0; j < n; j++) {
					if (!s[j] || strlen(s[j]) == SIZE_MAX)
						fuzz_fail("npz_read_text: a missing string");
					free(s[j]);
				}
				free(s);
			}
		}
		if (npz_name(z, npz_count(z)) != NULL)
			fuzz_fail("npz_name: a member past the count");
		npz_close(z);
	}
	if (budget_held() != 0)
		fuzz_fail("the memory budget was not given back in full");
	for (size_t i = 0; i < FUZZ_N_SPECS; i++)
		fuzz_read(read_npz, &f, &fuzz_specs[i]);
	input_free(&f);
	return 0;
}

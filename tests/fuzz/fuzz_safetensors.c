/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader: st_open()
 * checking the header (its length against the file, the JSON, dtypes,
 * shapes, data_offsets in bounds, as long as dtype x shape, not overlapping)
 * and st_read() of every tensor it lists, converted to float64; and
 * st_read_array() of each, as mha compare reads their results (rank 1 to
 * 4, any dtype but FP8, non-finite kept, the type it was in).
 *
 * st_open() takes a path, so each input is written to a private file in
 * memory and read back through it (fuzz_file.h).
 */
#define _GNU_SOURCE /* memfd_create */
#include "fuzz_file.h"
#include "fuzz.h"
#include "read/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file_path(data, size);
	st_file f;

	fuzz_start();
	if (st_open(&f, path) == 0) {
		for (size_t i = 0; i < f.n; i++) {
			const st_tensor *t = &f.t[i];
			matrix m;

			if (t->begin > t->end || t->end > f.size)
				fuzz_fail("st_open: a range past the file");
			if (st_find(&f, t->name) != t)
				fuzz_fail("st_find: a listed tensor not found");
			if (st_read(&m, &f, t) == 0) {
				if (m.rank != t->rank || matrix_size(&m) == 0)
					fuzz_fail("st_read: not the tensor's shape");
				for (size_t k = 0; k < matrix_size(&m); k++)
					if (!isfinite(m.v[k]))
						fuzz_fail("st_read: a non-finite weight");
				matrix_free(&m);
			}
			if (st_read_array(&m, &f, t) == 0) {
				if (m.rank != t->rank || m.rank > 4 || matrix_size(&m) == 0)
					fuzz_fail("st_read_array: not the tensor's shape");
				matrix_free(&m);
			}
		}
	}
	st_close(&f);
	if (budget_held() != 0)
		fuzz_fail("the memory budget was not given back in full");
	return 0;
}

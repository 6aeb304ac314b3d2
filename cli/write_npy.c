/*
 * write_npy.c: matrices as NumPy .npy files.
 *
 * Format 1.0, little-endian float64 in C order, whatever the host: each
 * value's bits are written least significant byte first.  The header is
 * laid out as NumPy's own np.save lays it out (the same dict, the same
 * spare room after it, the data aligned to 64 bytes), so the file is the
 * one np.save(path, array) would write, byte for byte.
 */
#include "write.h"

#include <stdint.h>
#include <string.h>

/* NumPy leaves room after the dict for the first dimension to grow to 21
 * digits, so that a file can be appended to without moving its data */
#define GROWTH_AXIS_MAX_DIGITS 21
#define ARRAY_ALIGN 64

/* lead: the leading dimension of a batch of n parts (n_parts), or 0 for one matrix */
static int write_parts(FILE *fp, const matrix *const *parts, size_t n_parts, int lead)
{
	const matrix *m = parts[0];
	char head[320];
	unsigned char buf[8 * 512];
	size_t used = 10, total, pad, n = matrix_size(m), k = 0;
	const size_t first = lead ? n_parts : m->dim[0];

	/* magic, version 1.0, and two bytes for the header length set below */
	memcpy(head, "\x93NUMPY\x01\x00\x00\x00", 10);
	used += (size_t)snprintf(head + used, sizeof(head) - used,
				 "{'descr': '<f8', 'fortran_order': False, 'shape': (");
	if (lead)
		used += (size_t)snprintf(head + used, sizeof(head) - used, "%zu, ", n_parts);
	for (size_t r = 0; r < m->rank; r++)
		used += (size_t)snprintf(head + used, sizeof(head) - used, "%s%zu", r ? ", " : "",
					 m->dim[r]);
	used += (size_t)snprintf(head + used, sizeof(head) - used, "%s), }",
				 m->rank == 1 ? "," : "");
	if (m->rank > 0)
		for (int i = snprintf(NULL, 0, "%zu", first); i < GROWTH_AXIS_MAX_DIGITS; i++)
			head[used++] = ' ';
	/* spaces and a '\n' up to the next multiple of 64; NumPy adds a whole
	 * 64 when the header is already aligned, and so does this */
	total = used + 1;
	pad = ARRAY_ALIGN - total % ARRAY_ALIGN;
	memset(head + used, ' ', pad);
	used += pad;
	head[used++] = '\n';
	head[8] = (char)((used - 10) & 0xff);
	head[9] = (char)((used - 10) >> 8);
	fwrite(head, 1, used, fp);

	for (size_t p = 0; p < (lead ? n_parts : 1); p++) {
		for (size_t i = 0; i < n; i++) {
			uint64_t u;

			memcpy(&u, &parts[p]->v[i], sizeof(u));
			for (int b = 0; b < 8; b++)
				buf[k++] = (unsigned char)(u >> (8 * b));
			if (k == sizeof(buf) || i + 1 == n) {
				fwrite(buf, 1, k, fp);
				k = 0;
			}
		}
	}
	return ferror(fp) ? -1 : 0;
}

int npy_write(FILE *fp, const matrix *m)
{
	return write_parts(fp, &m, 1, 0);
}

int npy_write_batch(FILE *fp, const matrix *const *parts, size_t n)
{
	return write_parts(fp, parts, n, 1);
}

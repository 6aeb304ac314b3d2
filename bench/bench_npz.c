/*
 * bench_npz.c: reading one .npz member into a matrix inside the process,
 * as 'mha forward -x FILE.npz' reads it (input_load, then read_npz: the
 * zip structure, the member inflated, its CRC-32, the .npy parsed), timed
 * alone, without the rest of the command.  Built by bench/bench_npz.py
 * against the CLI objects of two builds, today's and an older one, so it
 * uses only what both have: input.h, npz.h, budget.h, matrix.h.
 *
 *   bench_npz FILE.npz REPEATS
 *
 * prints one line per repeat: "wall SECONDS cpu SECONDS", the read's time
 * and the process's processor time over it.  malloc keeps what is freed
 * (no mmap for big blocks, no trimming), so the repeats after the first
 * reuse the same pages: they time the reading, not the kernel's page
 * faults, which the first repeat pays (as a command does) and which are
 * the same for any reader.
 */
#include "budget.h"
#include "input.h"
#include "matrix.h"
#include "npz.h"

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	static const char *const keys[] = { "X", NULL };
	const read_spec spec = { "X", keys, 1, 3, 0 };
	int repeats;

	if (argc != 3 || (repeats = atoi(argv[2])) < 1) {
		fputs("usage: bench_npz FILE.npz REPEATS\n", stderr);
		return 2;
	}
	mallopt(M_MMAP_THRESHOLD, 1 << 30);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	budget_init(SIZE_MAX);
	for (int r = 0; r < repeats; r++) {
		const double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
		input_file f;
		matrix m;

		if (input_load(&f, argv[1]) || read_npz(&m, &f, &spec)) {
			input_free(&f);
			return 1;
		}
		matrix_free(&m);
		input_free(&f);
		printf("wall %.6f cpu %.6f\n", seconds(CLOCK_MONOTONIC) - w0,
		       seconds(CLOCK_PROCESS_CPUTIME_ID) - c0);
	}
	return 0;
}

/*
 * bench_npz.c: reading one .npz member into a matrix inside the process,
 * as 'mha forward -x FILE.npz' reads it (read_matrix: the file read, or
 * mapped, the zip structure, the member inflated, its CRC-32, the .npy
 * parsed), timed alone, without the rest of the command.  Built by
 * bench/bench_npz.py against the CLI objects of two builds, today's and an
 * older one, so it uses only what both have: input.h, budget.h, matrix.h.
 *
 *   bench_npz FILE.npz REPEATS
 *
 * prints one line per repeat: "wall SECONDS cpu SECONDS", the read's time
 * and the process's processor time over it.  malloc keeps what is freed
 * (no mmap for big blocks, no trimming), so a build that reads into
 * malloc's memory reuses the same pages in the repeats after the first;
 * a build that maps its blocks (this one's inflated member, and the
 * archive) pays their page faults in every repeat, as a command does once.
 */
#include "budget.h"
#include "input.h"
#include "matrix.h"

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
		matrix m;

		if (read_matrix(&m, argv[1], &spec))
			return 1;
		matrix_free(&m);
		printf("wall %.6f cpu %.6f\n", seconds(CLOCK_MONOTONIC) - w0,
		       seconds(CLOCK_PROCESS_CPUTIME_ID) - c0);
	}
	return 0;
}

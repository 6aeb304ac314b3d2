/*
 * fuzz_file.h: the fuzz input as a file with a path, for the targets whose
 * function takes one (fuzz_weights, fuzz_problem): a private file in memory
 * (memfd_create; Linux) that nothing else can see and that is gone when the
 * process is, whatever becomes of it, read back through /proc/self/fd/N.
 * No file is left in /tmp, even after a crash.
 *
 * Include after defining _GNU_SOURCE (for memfd_create), before any other
 * header.  Header-only, as fuzz.h.
 */
#ifndef MHA_FUZZ_FILE_H
#define MHA_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static inline int fuzz_private_file(void)
{
	int fd = memfd_create("mha-fuzz", 0);
	FILE *fp;

	if (fd >= 0)
		return fd;
	fp = tmpfile(); /* before Linux 3.17: an unlinked file in /tmp */
	if (!fp || (fd = dup(fileno(fp))) < 0) {
		perror("fuzz: no temporary file");
		abort();
	}
	fclose(fp);
	return fd;
}

/* data[0, size) as the whole of file number slot (0 or 1: a target may
 * need two files at once) at the path returned (the same path at each
 * call, the file written over) */
static inline const char *fuzz_file_path_at(int slot, const uint8_t *data, size_t size)
{
	static int fds[2] = { -1, -1 };
	static char paths[2][64];
	char *path = paths[slot];
	int fd;

	if (fds[slot] < 0) {
		fds[slot] = fuzz_private_file();
		snprintf(path, 64, "/proc/self/fd/%d", fds[slot]);
	}
	fd = fds[slot];
	if (ftruncate(fd, 0) != 0) {
		perror("fuzz: ftruncate");
		abort();
	}
	for (size_t done = 0; done < size;) {
		const ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);

		if (n <= 0) {
			perror("fuzz: write");
			abort();
		}
		done += (size_t)n;
	}
	return path;
}

/* the first file: what a target with one file uses */
static inline const char *fuzz_file_path(const uint8_t *data, size_t size)
{
	return fuzz_file_path_at(0, data, size);
}

#endif

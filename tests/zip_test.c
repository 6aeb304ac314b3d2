/*
 * zip_test.c: cli/write/zip.c's ZIP64 records on an archive small enough to
 * check.  The central directory's ZIP64 extra fields and the ZIP64 end
 * records are written only past 4 GiB or 65,535 members, which no test
 * run reaches; force_zip64 writes them for any archive, as Python's
 * zipfile does with force_zip64.  tests/npz_check.py reads what this
 * writes with zipfile and np.load.
 *
 *   zip_test OUT.npz force|plain|force-deflate|plain-deflate
 *
 * (-deflate: the members deflated, as --compress writes them, their sizes
 * in data descriptors)
 * writes "a" (2x3 float64 with -inf), "b" (two float32 2x3 parts, (2, 2, 3)),
 * "s" (strings, one not ASCII) and "m" (a 0-d string).
 */
#include "write/zip.h"
#include "base/cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct member {
	const matrix *const *parts;
	size_t n_parts, lead;
	int f4;
	const char *const *strings;
	size_t n_strings, rank;
};

static void fill(const npy_sink *s, void *arg)
{
	const struct member *m = arg;

	if (m->strings)
		npy_put_strings(s, m->strings, m->n_strings, m->rank);
	else
		npy_put_parts(s, &m->lead, m->lead ? 1 : 0, m->parts, m->n_parts, m->f4);
}

int main(int argc, char **argv)
{
	double va[6] = { 1, 2, 3, 4, 5.5, -INFINITY }, vb[6] = { 0.5, -1, 2, 0.25, 8, -3 };
	const matrix a = { .rank = 2, .dim = { 2, 3, 1 }, .v = va };
	const matrix b = { .rank = 2, .dim = { 2, 3, 1 }, .v = vb, .is_f32 = 1 };
	const matrix *pa[1] = { &a }, *pb[2] = { &b, &a };
	const char *const words[2] = { "x", "\xc3\xbcn\xc3\xaf" }, *const text[1] = { "hello" };
	const struct member ma = { pa, 1, 0, 0, NULL, 0, 0 }, mb = { pb, 2, 2, 1, NULL, 0, 0 };
	const struct member ms = { NULL, 0, 0, 0, words, 2, 1 }, mm = { NULL, 0, 0, 0, text, 1, 0 };
	zip_writer z = { 0 };
	FILE *fp;
	int rc;

	msg_to_stderr();
	/* b's second part is a's numbers as floats: 1 2 3 4 5.5 -inf all are */
	if (argc != 3 || (strcmp(argv[2], "force") && strcmp(argv[2], "plain") &&
			  strcmp(argv[2], "force-deflate") && strcmp(argv[2], "plain-deflate"))) {
		fprintf(stderr, "usage: zip_test OUT.npz force|plain|force-deflate|plain-deflate\n");
		return 2;
	}
	fp = fopen(argv[1], "wb");
	if (!fp) {
		perror(argv[1]);
		return 1;
	}
	z.fp = fp;
	z.force_zip64 = !strncmp(argv[2], "force", 5);
	z.compress = strstr(argv[2], "-deflate") != NULL;
	rc = zip_add(&z, "a.npy", fill, (void *)&ma) || zip_add(&z, "b.npy", fill, (void *)&mb) ||
	     zip_add(&z, "s.npy", fill, (void *)&ms) || zip_add(&z, "m.npy", fill, (void *)&mm);
	if (!rc)
		zip_finish(&z);
	zip_free(&z);
	if (fclose(fp) || rc) {
		fprintf(stderr, "zip_test: writing %s failed\n", argv[1]);
		return 1;
	}
	return 0;
}

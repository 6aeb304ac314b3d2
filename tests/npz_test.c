/*
 * npz_test.c: engine/read/npz.c on its own, its inflating through zlib too
 * (npz_inflate), for tests/npz_read_check.py, which holds what they print
 * against NumPy and Python's zlib.
 *
 *   npz_test FILE.npz NAME:num|NAME:text ...
 *       the members in the archive's order ("members: a b c"), then each
 *       member named: "NAME num RANK D0 D1 .." and every value as the hex
 *       of its float64 bits (bool: "bool" after the dims), or "NAME text N"
 *       and each string as hex bytes; exit 1 on an error (said on stderr)
 *   npz_test inflate SIZE < RAW
 *       RAW (a raw deflate stream) inflated into SIZE bytes, onto stdout
 */
#include "util/budget.h"
#include "base/cli.h"
#include "read/npz.h"
#include "read/deflated.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int inflate_stdin(size_t size)
{
	size_t cap = 1 << 16, len = 0, used = 0, got;
	unsigned char *in = malloc(cap), *out = malloc(size + 1); /* npz_inflate's byte more */
	const char *why = NULL;
	int rc = 1;

	while (in && out && (got = fread(in + len, 1, cap - len, stdin)) > 0) {
		len += got;
		if (len == cap && !(in = realloc(in, cap *= 2)))
			break;
	}
	if (!in || !out)
		fputs("npz_test: out of memory\n", stderr);
	else if (npz_inflate(out, size, in, len, &used, &why))
		fprintf(stderr, "npz_test: %s\n", why ? why : "out of memory");
	else if (used != len)
		fprintf(stderr, "npz_test: %zu bytes after the stream\n", len - used);
	else
		rc = fwrite(out, 1, size, stdout) != size;
	free(in);
	free(out);
	return rc;
}

static int dump(const npz_archive *z, const char *arg)
{
	const char *colon = strrchr(arg, ':');
	char name[256];

	if (!colon || (size_t)(colon - arg) >= sizeof(name))
		return fprintf(stderr, "npz_test: expected NAME:num or NAME:text, found %s\n", arg), -1;
	memcpy(name, arg, (size_t)(colon - arg));
	name[colon - arg] = '\0';
	if (!strcmp(colon + 1, "text")) {
		char **s;
		size_t n;

		if (npz_read_text(z, name, &s, &n))
			return -1;
		printf("%s text %zu\n", name, n);
		for (size_t i = 0; i < n; i++) {
			for (const unsigned char *p = (const unsigned char *)s[i]; *p; p++)
				printf("%02x", *p);
			printf("\n");
			free(s[i]);
		}
		free(s);
	} else {
		const read_spec spec = { name, NULL, 1, 3, READ_NONFINITE | READ_BOOL };
		matrix m;

		if (npz_read(z, name, &m, &spec))
			return -1;
		printf("%s num %zu", name, m.rank);
		for (size_t r = 0; r < m.rank; r++)
			printf(" %zu", m.dim[r]);
		printf("%s\n", m.is_bool ? " bool" : "");
		for (size_t i = 0; i < matrix_size(&m); i++) {
			uint64_t u;

			memcpy(&u, &m.v[i], sizeof(u));
			printf("%016" PRIx64 "\n", u);
		}
		matrix_free(&m);
	}
	return 0;
}

int main(int argc, char **argv)
{
	input_file f;
	npz_archive *z;
	int rc = 0;

	msg_to_stderr();
	budget_init(SIZE_MAX);
	if (argc == 3 && !strcmp(argv[1], "inflate"))
		return inflate_stdin(strtoul(argv[2], NULL, 10));
	if (argc < 2) {
		fputs("usage: npz_test FILE.npz NAME:num|NAME:text ... | npz_test inflate SIZE\n",
		      stderr);
		return 2;
	}
	if (input_load(&f, argv[1])) {
		input_free(&f);
		return 1;
	}
	if (!is_npz(&f) || npz_open(&z, &f)) {
		if (!is_npz(&f))
			fprintf(stderr, "npz_test: %s: not a zip archive\n", argv[1]);
		input_free(&f);
		return 1;
	}
	printf("members:");
	for (size_t i = 0; i < npz_count(z); i++)
		printf(" %s", npz_name(z, i));
	printf("\n");
	for (int i = 2; i < argc && !rc; i++)
		if (dump(z, argv[i]))
			rc = 1;
	npz_close(z);
	input_free(&f);
	return rc;
}

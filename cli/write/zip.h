/*
 * zip.h: a ZIP archive of stored (uncompressed) members, written front to
 * back to any stream (a pipe too: nothing is sought), as NumPy's np.savez
 * writes a .npz: each member's local header with a ZIP64 extra field (as
 * np.savez's force_zip64), its bytes, then the central directory and the
 * end records, ZIP64 ones when an offset, a size or the count of members
 * passes what the 32- and 16-bit fields hold.  Not a reader, and no
 * compression: np.savez_compressed's deflate would need zlib, and stored
 * members are what np.savez writes and what np.load can memory-map.
 *
 * Each member is produced twice by its fill function (npy_sink, write.h):
 * once for its CRC-32 and size, which the local header needs first, then
 * into the stream; so nothing is held in memory but the member's name.
 */
#ifndef MHA_CLI_ZIP_H
#define MHA_CLI_ZIP_H

#include <stdint.h>
#include <stdio.h>

#include "write/write.h"

typedef struct zip_member {
	char *name;      /* from malloc */
	uint32_t crc;    /* CRC-32 of the bytes */
	uint64_t size;   /* bytes, stored as they are */
	uint64_t offset; /* of its local header */
} zip_member;

typedef struct zip_writer {
	FILE *fp;
	uint64_t at;     /* bytes written so far */
	zip_member *v;   /* [n] */
	size_t n, cap;
	int force_zip64; /* the central directory's ZIP64 fields and end records even
			    for a small archive (set by tests/zip_test.c only) */
} zip_writer;

/* CRC-32 (ISO-HDLC, as zip and zlib's crc32) of n bytes, going on from crc
 * (0 to start). */
uint32_t zip_crc32(uint32_t crc, const void *p, size_t n);
/* One member called name, its bytes what fill(sink, arg) puts, the same
 * both times it is called.  0, or -1 when out of memory (said); a write
 * error stays in fp for the caller's commit to report. */
int zip_add(zip_writer *z, const char *name, void (*fill)(const npy_sink *s, void *arg),
	    void *arg);
/* The central directory and the end records. */
void zip_finish(zip_writer *z);
void zip_free(zip_writer *z);

#endif

/*
 * zip.h: a ZIP archive of .npy members, written front to back to any
 * stream (a pipe too: nothing is sought), as NumPy writes a .npz: each
 * member's local header with a ZIP64 extra field (as np.savez's
 * force_zip64), its bytes, then the central directory and the end
 * records, ZIP64 ones when an offset, a size or the count of members
 * passes what the 32- and 16-bit fields hold.  Not a reader (npz.h).
 *
 * Members are stored, as np.savez writes them (what np.load can
 * memory-map), or with compress deflated by zlib at its default level, as
 * np.savez_compressed writes them.  A stored member is produced twice by
 * its fill function (npy_sink, write.h): once for its CRC-32 and size,
 * which the local header needs first, then into the stream.  A deflated
 * one is produced once, deflated as it comes: its sizes, known only at
 * its end, follow it in a data descriptor (ZIP64's, 8-byte sizes; flag
 * bit 3), as zipfile writes to a stream that cannot seek.  Either way
 * nothing is held in memory but the member's name (and zlib's state).
 */
#ifndef MHA_CLI_ZIP_H
#define MHA_CLI_ZIP_H

#include <stdint.h>
#include <stdio.h>

#include "write/write.h"

typedef struct zip_member {
	char *name;      /* from malloc */
	uint32_t crc;    /* CRC-32 of the bytes */
	uint64_t size;   /* bytes of the .npy */
	uint64_t csize;  /* bytes in the archive: size when stored */
	uint64_t offset; /* of its local header */
} zip_member;

typedef struct zip_writer {
	FILE *fp;
	uint64_t at;     /* bytes written so far */
	zip_member *v;   /* [n] */
	size_t n, cap;
	int compress;    /* members deflated (method 8), as np.savez_compressed */
	int force_zip64; /* the central directory's ZIP64 fields and end records even
			    for a small archive (set by tests/zip_test.c only) */
} zip_writer;

/* One member called name, its bytes what fill(sink, arg) puts, the same
 * both times it is called (stored).  0, or -1 when out of memory (said); a
 * write error stays in fp for the caller's commit to report. */
int zip_add(zip_writer *z, const char *name, void (*fill)(const npy_sink *s, void *arg),
	    void *arg);
/* The central directory and the end records. */
void zip_finish(zip_writer *z);
void zip_free(zip_writer *z);

#endif

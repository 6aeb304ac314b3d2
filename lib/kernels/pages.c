/*
 * pages.c: the fast path's large blocks (Q, K, V, the packs of K and V)
 * as mappings of their own with transparent huge pages asked for.
 *
 * A short run is dominated by first touches of fresh memory: each 4 KiB
 * page costs a fault (~3 µs on the machine measured, ~0.4-0.8 ms per MiB),
 * a 2 MiB huge page one fault and one clear (~0.09 ms per MiB; measured
 * with THP in "madvise" mode, 2 to 256 MiB).  So a block of MHA_BIG_MIN
 * (256 KiB) or more is mapped 2 MiB-aligned and its whole 2 MiB pieces
 * advised MADV_HUGEPAGE, and kept when freed (below: the GEMM's panel of B,
 * 512 KiB at d_model 512, is asked for again by each of the projections
 * and came from malloc's fresh pages each time); the tail past the last
 * whole piece stays in small pages,
 * so that the block holds no more than its bytes rounded to a page (what
 * mha_memory counts).  Smaller blocks, and systems without mmap or
 * MADV_HUGEPAGE, and builds with AddressSanitizer, come from aligned_alloc.  Not an allocator for anything else:
 * the caller hands the size back to mha_big_free.
 */
#include "kernels/kernel.h"

#include <stdlib.h>
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

/* under AddressSanitizer every block comes from its allocator, which
 * guards their ends (a mapping has no red zones) */
#if defined(__SANITIZE_ADDRESS__)
#define MHA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MHA_ASAN 1
#endif
#endif

#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS) && !defined(MHA_ASAN)
#define BIG_PAGES 1
#define HUGE ((size_t)2 << 20)
#else
#define BIG_PAGES 0
#endif

static size_t round_to(size_t a, size_t b)
{
	return a > SIZE_MAX - (b - 1) ? SIZE_MAX : (a + b - 1) / b * b;
}

#if BIG_PAGES
static size_t page_size(void)
{
	const long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

/* a block of its own, starting on a 2 MiB boundary; NULL when mmap says no */
static void *map_block(size_t bytes)
{
	const size_t len = round_to(bytes, page_size());
	char *raw, *p;
	size_t head;

	if (len > SIZE_MAX - HUGE)
		return NULL;
	/* HUGE more than asked, then the ends cut off: the start aligned */
	raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	head = (HUGE - (uintptr_t)raw % HUGE) % HUGE;
	p = raw + head;
	if (head)
		munmap(raw, head);
	if (HUGE - head)
		munmap(p + len, HUGE - head);
	/* advice only: without huge pages the block is ordinary memory */
	(void)madvise(p, bytes / HUGE * HUGE, MADV_HUGEPAGE);
	return p;
}

/*
 * Freed blocks kept for the next call.  A caller that runs a shape again (a
 * loop, a test suite, a benchmark) gets its blocks back with their pages
 * present, not fresh ones to fault in and clear (5 to 7% of a 512-token
 * forward pass went there).  Only a block of the very length asked is
 * given back; at most KEEP blocks and KEEP_BYTES in all stay mapped, the
 * oldest unmapped first, the rest until reused or the process ends.  The
 * lock is only tried: a caller that finds it taken (another thread, or a
 * child of fork whose parent held it) maps or unmaps as if nothing were
 * kept.
 */
#define KEEP 8
#define KEEP_BYTES ((size_t)64 << 20)
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept_block {
	void *p;
	size_t len;
} kept[KEEP];
static size_t kept_n, kept_bytes;

/* a kept block of len bytes (the newest), or NULL */
static void *take_kept(size_t len)
{
	void *p = NULL;

	if (pthread_mutex_trylock(&kept_lock) != 0)
		return NULL;
	for (size_t i = kept_n; i-- > 0;) {
		if (kept[i].len != len)
			continue;
		p = kept[i].p;
		kept_bytes -= len;
		memmove(&kept[i], &kept[i + 1], (kept_n - i - 1) * sizeof(kept[0]));
		kept_n--;
		break;
	}
	pthread_mutex_unlock(&kept_lock);
	return p;
}

/* p (len bytes) kept for later, older ones unmapped to make room; 0 when not kept */
static int keep_block(void *p, size_t len)
{
	if (len > KEEP_BYTES || pthread_mutex_trylock(&kept_lock) != 0)
		return 0;
	while (kept_n && (kept_n == KEEP || kept_bytes + len > KEEP_BYTES)) {
		munmap(kept[0].p, kept[0].len);
		kept_bytes -= kept[0].len;
		memmove(&kept[0], &kept[1], (kept_n - 1) * sizeof(kept[0]));
		kept_n--;
	}
	kept[kept_n].p = p;
	kept[kept_n].len = len;
	kept_n++;
	kept_bytes += len;
	pthread_mutex_unlock(&kept_lock);
	return 1;
}
#endif

void *mha_big_alloc(size_t bytes)
{
#if BIG_PAGES
	/* no mapping to be had is out of memory: malloc would map such a block too */
	if (bytes >= MHA_BIG_MIN) {
		void *p = take_kept(round_to(bytes, page_size()));

		return p ? p : map_block(bytes);
	}
#endif
	bytes = round_to(bytes ? bytes : 1, 64);
	return bytes == SIZE_MAX ? NULL : aligned_alloc(64, bytes);
}

void mha_big_free(void *p, size_t bytes)
{
	if (!p)
		return;
#if BIG_PAGES
	if (bytes >= MHA_BIG_MIN) {
		const size_t len = round_to(bytes, page_size());

		if (!keep_block(p, len))
			munmap(p, len);
		return;
	}
#endif
	free(p);
}

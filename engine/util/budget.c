/*
 * budget.c: the run's memory limit, charged as files are read and parsed,
 * and cJSON's and zlib's allocations routed through it.
 */
#include "util/budget.h"
#include "util/msg.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static size_t limit = SIZE_MAX, held, refusals;
static const char *reading;

/*
 * budget_malloc's blocks (cJSON's, zlib's) carry their size in a header,
 * so that budget_free can give back what was taken.  A header of 16 bytes
 * keeps the block as aligned as malloc's own.
 */
#define HEADER 16

void *budget_malloc(size_t n)
{
	unsigned char *p;

	if (n > SIZE_MAX - HEADER || budget_take(budget_block(n + HEADER)))
		return NULL;
	p = malloc(n + HEADER);
	if (!p) {
		budget_give(budget_block(n + HEADER));
		return NULL;
	}
	*(size_t *)(void *)p = n;
	return p + HEADER;
}

void budget_free(void *q)
{
	unsigned char *p = q;

	if (!p)
		return;
	p -= HEADER;
	budget_give(budget_block(*(size_t *)(void *)p + HEADER));
	free(p);
}

void budget_init(size_t max)
{
	static cJSON_Hooks hooks = { budget_malloc, budget_free };

	limit = max;
	held = 0;
	refusals = 0;
	reading = NULL;
	cJSON_InitHooks(&hooks);
}

int budget_take(size_t n)
{
	if (n > limit || held > limit - n) {
		refusals++;
		return -1;
	}
	held += n;
	return 0;
}

void budget_give(size_t n)
{
	held = n < held ? held - n : 0;
}

size_t budget_refusals(void)
{
	return refusals;
}

size_t budget_limit(void)
{
	return limit;
}

size_t budget_held(void)
{
	return held;
}

size_t budget_left(void)
{
	return limit == SIZE_MAX ? SIZE_MAX : limit - held;
}

/* glibc's malloc: a size word before the block, 16-byte chunks of at
 * least 32; close enough for other allocators too */
size_t budget_block(size_t n)
{
	if (n > SIZE_MAX - 32)
		return SIZE_MAX;
	n = (n + 8 + 15) & ~(size_t)15;
	return n < 32 ? 32 : n;
}

void budget_reading(const char *name)
{
	reading = name;
}

const char *budget_current(void)
{
	return reading;
}

const char *show_bytes(char *buf, size_t size, size_t bytes)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = 0;

	if (bytes == SIZE_MAX) {
		snprintf(buf, size, "more than can be addressed");
		return buf;
	}
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

int budget_refuse(const char *name, size_t need)
{
	char l[48], n[48], h[48];

	show_bytes(l, sizeof(l), limit);
	show_bytes(n, sizeof(n), need);
	show_bytes(h, sizeof(h), held);
	if (!name)
		name = reading;
	if (!name)
		return error("%s more would pass --max-memory (%s) with %s held: raise --max-memory",
			     n, l, h);
	if (need)
		return error("%s: reading it needs more than --max-memory (%s): %s more at once "
			     "with %s already held", name, l, n, h);
	return error("%s: reading it needs more than --max-memory (%s)", name, l);
}

/*
 * budget.h: the one memory limit of a run (--max-memory), held from the
 * first byte read.
 *
 * Whatever the CLI allocates in proportion to its input is charged here
 * before it is allocated: the bytes of a file as they are read, cJSON's
 * tree while a JSON text is parsed, a CSV reader's growing array, every
 * matrix.  A charge that would pass the limit is refused and nothing is
 * allocated, so a refused run never held more than the limit.  What the
 * library will need is not charged as it goes: the command checks its
 * estimate (mha_memory) against what is left before the run.
 *
 *   budget_init(limit);            before the first file is opened
 *   if (budget_take(n)) refuse;    then allocate n bytes
 *   budget_give(n);                after freeing them
 */
#ifndef MHA_ENGINE_BUDGET_H
#define MHA_ENGINE_BUDGET_H

#include <stddef.h>

/* Start over with limit bytes (SIZE_MAX: none) and nothing held; also
 * routes cJSON's allocations through the budget. */
void budget_init(size_t limit);
/* Charge n bytes: 0, or -1 (nothing charged) when they would pass the limit. */
int budget_take(size_t n);
/* Give back n bytes charged before. */
void budget_give(size_t n);
/* How many charges were refused so far: a parser that failed with more
 * than before ran out of budget, not into bad syntax. */
size_t budget_refusals(void);
/* The limit (SIZE_MAX: none), what is held now, and what is left. */
size_t budget_limit(void);
size_t budget_held(void);
size_t budget_left(void);
/* What a block of n bytes from malloc really takes (its header, rounding). */
size_t budget_block(size_t n);
/* malloc and free for allocations made where the caller cannot charge them
 * (cJSON's tree, zlib's state and window): charged and given back here.
 * NULL when the limit or malloc refuses (nothing said); budget_free(NULL)
 * is fine. */
void *budget_malloc(size_t n);
void budget_free(void *p);

/* Report that reading name needs more than the limit (need: the bytes one
 * allocation wanted, 0 if unknown); returns -1. */
int budget_refuse(const char *name, size_t need);

/* "1.5 MiB", "12 bytes": bytes for people, into buf, which is returned. */
const char *show_bytes(char *buf, size_t size, size_t bytes);

/* The file being read, named in budget_refuse's message by the charges
 * made deep in a reader (matrix_alloc); NULL when none. */
void budget_reading(const char *name);
const char *budget_current(void);

#endif

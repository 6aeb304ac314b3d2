/*
 * pool.h: a heatmap's overview (--pool RULE[:K]): each panel's cells in
 * blocks of K queries by K keys, each block drawn as one cell holding the
 * largest (max) or the average (mean) of its cells that the mask lets
 * through, an exact value of the block, which its tooltip gives with the
 * block's queries and keys; a block whose every cell is blocked is drawn
 * blocked.  K left out: the fewest that keep a panel within POOL_SIDE
 * cells a side.
 */
#ifndef MHA_CLI_POOL_H
#define MHA_CLI_POOL_H

#include "util/matrix.h"

#include <stdint.h>

#define POOL_SIDE 64
/* the page's largest block side: a cell's place in its block in 32 bits */
#define POOL_PAGE_K 65535u

enum pool_rule { POOL_NONE, POOL_MAX, POOL_MEAN };

/* The block side for a (rows, cols) panel: k when given, else the auto one. */
size_t pool_block(size_t k, size_t rows, size_t cols);

/*
 * m (rows, cols) in blocks of k: into out (ceil(rows/k), ceil(cols/k)), and
 * into mask_out (the same shape: 0, or -inf where the whole block is
 * blocked) when mask is given; mask_out untouched otherwise.  0, or -1 said.
 */
int pool_panel(matrix *out, matrix *mask_out, const matrix *m, const matrix *mask, size_t k,
	       enum pool_rule rule);
/*
 * The same as values only, into out, and for each block, when asked: where
 * its largest cell lies, for max (at: (i - i0) * k + (j - j0) in the
 * block, the first of equals) and how many of its cells the mask blocks (blocked; all of them:
 * out holds -inf).  at needs k * k - 1 to fit in 32 bits.  0, or -1 said.
 */
int pool_panel_where(matrix *out, uint32_t *at, uint32_t *blocked, const matrix *m,
		     const matrix *mask, size_t k, enum pool_rule rule);

/*
 * A label per block of k among n ("1-16", or "the–cat" from the labels of
 * its first and last), NULL-terminated, from malloc; NULL when out of
 * memory.  pool_labels_free frees them.
 */
char **pool_labels(const char *const *labels, size_t n, size_t k);
void pool_labels_free(char **l);

struct heat_panel;

/*
 * Each of the n panels' matrix, mask, labels and title replaced by its
 * overview's (rule, blocks of k0 or pool_block's), the rule and block in
 * the title; pool_panels_free frees them.  0, or -1 said (nothing left to
 * free).
 */
int pool_panels(struct heat_panel *p, size_t n, enum pool_rule rule, size_t k0);
void pool_panels_free(struct heat_panel *p, size_t n);

#endif

/*
 * matrix.c: allocation and shape helpers for the CLI's matrices.
 */
#include "util/matrix.h"
#include "util/budget.h"
#include "util/msg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

size_t matrix_size(const matrix *m)
{
	size_t n = 1;

	if (!m->rank)
		return 0;
	for (size_t r = 0; r < m->rank; r++)
		n *= m->dim[r];
	return n;
}

size_t matrix_cols(const matrix *m)
{
	return m->rank ? m->dim[m->rank - 1] : 0;
}

size_t matrix_rows(const matrix *m)
{
	return m->rank >= 2 ? m->dim[m->rank - 2] : (m->rank ? 1 : 0);
}

const char *matrix_shape(const matrix *m, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t r = 0; r < m->rank && used < size; r++) {
		int n = snprintf(buf + used, size - used, "%s%zu", r ? "x" : "", m->dim[r]);

		if (n < 0)
			break;
		used += (size_t)n;
	}
	return buf;
}

int matrix_alloc(matrix *m, size_t rank, size_t d0, size_t d1, size_t d2)
{
	const size_t dims[3] = { d0, d1, d2 };

	return matrix_alloc_dims(m, rank, dims);
}

/* blocks from this size are mappings of their own (values_map) */
#define MAP_MIN ((size_t)2 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
/* not under AddressSanitizer: its allocator guards a block's ends, a mapping has no red zones */
#if defined(__SANITIZE_ADDRESS__)
#define MAP_OUTPUTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MAP_OUTPUTS 0
#endif
#endif
#ifndef MAP_OUTPUTS
#define MAP_OUTPUTS 1
#endif

/*
 * bytes of zeros as an anonymous mapping starting on a 2 MiB boundary, its
 * whole 2 MiB pieces advised MADV_HUGEPAGE (the tail in small pages, so it
 * holds no more than its bytes rounded to a page): a large output, written
 * once, takes one fault per 2 MiB rather than per 4 KiB (~0.1 ms per MiB
 * rather than ~0.4-0.8 measured; lib/kernels/pages.c does the same for the
 * library's blocks).  *len: what to munmap; NULL when mmap says no.
 */
static void *values_map(size_t bytes, size_t *len)
{
	const long page = sysconf(_SC_PAGESIZE);
	const size_t pg = page > 0 ? (size_t)page : 4096;
	char *raw, *p;
	size_t head;

	if (bytes > SIZE_MAX - HUGE_PAGE - pg)
		return NULL;
	*len = (bytes + pg - 1) / pg * pg;
	raw = mmap(NULL, *len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	head = (HUGE_PAGE - (uintptr_t)raw % HUGE_PAGE) % HUGE_PAGE;
	p = raw + head;
	if (head)
		munmap(raw, head);
	if (HUGE_PAGE - head)
		munmap(p + *len, HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
	(void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* advice only */
#endif
	return p;
}

/* dims into m and room for their values of size bytes each, charged to
 * the budget; the block from malloc (zeroed: calloc), or with big from
 * 2 MiB a mapping of its own (values_map: zeros, m->map), or NULL said */
static void *alloc_values(matrix *m, size_t rank, const size_t *dims, size_t size, int zero,
			  int big)
{
	size_t n = 1;
	char shape[96];
	void *p;

	memset(m, 0, sizeof(*m));
	m->rank = rank;
	for (size_t r = 0; r < 4; r++)
		m->dim[r] = r < rank ? dims[r] : 1;
	for (size_t r = 0; r < 4; r++) {
		if (m->dim[r] && n > SIZE_MAX / m->dim[r]) {
			error("a %s array is too large to address", matrix_shape(m, shape, sizeof(shape)));
			return NULL;
		}
		n *= m->dim[r];
	}
	if (n > SIZE_MAX / size) {
		error("a %s array is too large to address", matrix_shape(m, shape, sizeof(shape)));
		return NULL;
	}
	m->held = budget_block((n ? n : 1) * size);
	if (budget_take(m->held)) {
		m->held = 0;
		budget_refuse(NULL, n * size);
		return NULL;
	}
	if (MAP_OUTPUTS && big && n * size >= MAP_MIN) {
		p = values_map(n * size, &m->map_len);
		m->map = p;
	} else {
		p = zero ? calloc(n ? n : 1, size) : malloc((n ? n : 1) * size);
	}
	if (!p) {
		budget_give(m->held);
		m->held = 0;
		m->map_len = 0;
		error("out of memory for %zu numbers (%zu bytes)", n, n * size);
	}
	return p;
}

void *matrix_map_alloc(size_t bytes, size_t *len)
{
	*len = 0;
	return MAP_OUTPUTS && bytes >= MAP_MIN ? values_map(bytes, len) : NULL;
}

int matrix_alloc_dims(matrix *m, size_t rank, const size_t *dims)
{
	m->v = alloc_values(m, rank, dims, sizeof(double), 1, 0);
	return m->v ? 0 : -1;
}

int matrix_alloc_f32(matrix *m, size_t rank, const size_t *dims)
{
	m->f = alloc_values(m, rank, dims, sizeof(float), 0, 0);
	m->is_f32 = 1;
	return m->f ? 0 : -1;
}

int matrix_alloc_out(matrix *m, size_t rank, const size_t *dims, int f32)
{
	void *p = alloc_values(m, rank, dims, f32 ? sizeof(float) : sizeof(double), !f32, 1);

	if (f32) {
		m->f = p;
		m->is_f32 = 1;
	} else {
		m->v = p;
	}
	return p ? 0 : -1;
}

/* m's values let go (its mapping, its blocks, or nothing borrowed) */
static void values_go(matrix *m)
{
	if (m->map && !m->borrowed) {
		munmap(m->map, m->map_len);
	} else if (!m->borrowed) {
		free(m->v);
		free(m->f);
	}
	budget_give(m->held);
}

int matrix_widen(matrix *m)
{
	matrix d;
	const size_t n = matrix_size(m);

	if (!m->f)
		return 0;
	if (matrix_alloc_dims(&d, m->rank, m->dim))
		return -1;
	for (size_t i = 0; i < n; i++)
		d.v[i] = m->f[i];
	values_go(m);
	m->borrowed = 0;
	m->f = NULL;
	m->map = d.map; /* the doubles' own mapping, if large */
	m->map_len = d.map_len;
	m->v = d.v;
	m->held = d.held;
	m->is_f32 = 0; /* as a reader widening float32 leaves it */
	return 0;
}

int matrix_transpose(matrix *m)
{
	const size_t B = m->rank == 3 ? m->dim[0] : 1, r = matrix_rows(m), c = matrix_cols(m);
	matrix t;

	if (m->rank == 3 ? matrix_alloc(&t, 3, B, c, r) : matrix_alloc(&t, 2, c, r, 1))
		return -1;
	for (size_t b = 0; b < B; b++)
		for (size_t i = 0; i < r; i++)
			for (size_t j = 0; j < c; j++)
				t.v[b * r * c + j * r + i] = m->v[b * r * c + i * c + j];
	t.is_f32 = m->is_f32;
	t.from_f32 = m->from_f32;
	t.from_type = m->from_type;
	matrix_free(m);
	*m = t;
	return 0;
}

void matrix_free(matrix *m)
{
	if (!m)
		return;
	values_go(m);
	m->borrowed = 0;
	m->map = NULL;
	m->map_len = 0;
	m->v = NULL;
	m->f = NULL;
	m->held = 0;
	m->rank = 0;
	for (size_t i = 0; m->labels && i < m->n_labels; i++)
		free(m->labels[i]);
	free(m->labels);
	budget_give(m->labels_held);
	m->labels_held = 0;
	m->labels = NULL;
	m->n_labels = 0;
}

float *floats_copy(const double *v, size_t n, int *ok)
{
	float *f;

	if (!v)
		return NULL;
	f = malloc((n ? n : 1) * sizeof(float));
	if (!f) {
		*ok = 0;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		f[i] = (float)v[i];
	return f;
}

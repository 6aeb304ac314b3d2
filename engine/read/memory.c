/*
 * memory.c: arrays handed over in memory, read as files are (memory.h).
 */
#include "read/memory.h"
#include "read/half.h"
#include "util/msg.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const char *const *names_now;
static const struct memory_array *arrays_now;
static size_t n_now;

void memory_arrays(const char *const *names, const struct memory_array *arrays, size_t n)
{
	names_now = names;
	arrays_now = arrays;
	n_now = n;
}

static const struct memory_array *find(const char *name)
{
	for (size_t i = 0; name && i < n_now; i++)
		if (!strcmp(name, names_now[i]))
			return &arrays_now[i];
	return NULL;
}

int memory_has(const char *name)
{
	return find(name) != NULL;
}

static double value_at(const struct memory_array *a, size_t i)
{
	uint16_t h;

	switch (a->type) {
	case MEM_F64: return ((const double *)a->data)[i];
	case MEM_F32: return ((const float *)a->data)[i];
	case MEM_F16: memcpy(&h, (const uint16_t *)a->data + i, 2); return half_to_double(h);
	case MEM_BF16: memcpy(&h, (const uint16_t *)a->data + i, 2); return bfloat16_to_double(h);
	case MEM_BOOL: return ((const unsigned char *)a->data)[i] != 0;
	default: return NAN;
	}
}

/* a's values as they are, borrowed (READ_MAP: nothing writes into m), once
 * each is known to be finite where spec wants it: 0, or -1 said */
/* every one of a's n values finite: a pass at memory's speed over the bits
 * (each exponent short of all ones), for the common case */
static int all_finite(const struct memory_array *a, size_t n)
{
	const unsigned char *p = a->data;
	unsigned bad = 0;

	if (a->type == MEM_F64)
		for (size_t i = 0; i < n; i++) {
			uint64_t b;

			memcpy(&b, p + 8 * i, 8);
			bad |= (b & 0x7ff0000000000000u) == 0x7ff0000000000000u;
		}
	else
		for (size_t i = 0; i < n; i++) {
			uint32_t b;

			memcpy(&b, p + 4 * i, 4);
			bad |= (b & 0x7f800000u) == 0x7f800000u;
		}
	return !bad;
}

/* matrix.h's FROM_* of an array in memory */
static int from_type(enum memory_type t)
{
	return t == MEM_F32 ? FROM_F32 : t == MEM_F16 ? FROM_F16 : t == MEM_BF16 ? FROM_BF16 : FROM_F64;
}

static int borrow(matrix *m, const struct memory_array *a, size_t n, const read_spec *spec,
		  const char *name)
{
	if (!(spec->flags & READ_NONFINITE) && !all_finite(a, n))
		for (size_t i = 0; i < n; i++) {
			const double v = value_at(a, i);

			if (!isfinite(v))
				return error("%s: %s: value %zu is %s: expected finite numbers", name,
					     spec->what, i, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
		}
	m->rank = a->rank;
	for (size_t d = 0; d < 4; d++)
		m->dim[d] = d < a->rank ? a->dim[d] : 1;
	if (a->type == MEM_F64)
		m->v = (double *)a->data; /* borrowed: never written (READ_MAP) */
	else
		m->f = (float *)a->data;
	m->borrowed = 1;
	m->from_f32 = a->type == MEM_F32;
	m->from_type = from_type(a->type);
	m->is_f32 = a->type == MEM_F32;
	return 0;
}

static const char *const rank_words[] = { "", "1-D", "2-D", "3-D", "4-D" };

int memory_read(matrix *m, const char *name, const read_spec *spec)
{
	const struct memory_array *a = find(name);
	const int keep_floats = a && a->type == MEM_F32 && (spec->flags & READ_F32);
	size_t n = 1;

	memset(m, 0, sizeof(*m));
	if (!a)
		return error("%s: no such array", name);
	if (!a->data || a->type >= N_MEM_TYPES || a->rank < 1 || a->rank > 4)
		return error("%s: %s: not an array of numbers", name, spec->what);
	if (a->rank < spec->min_rank || a->rank > spec->max_rank) {
		if (spec->min_rank == spec->max_rank)
			return error("%s: %s: expected a %s array, found a %s one", name, spec->what,
				     rank_words[spec->min_rank], rank_words[a->rank]);
		return error("%s: %s: expected a %s to %s array, found a %s one", name, spec->what,
			     rank_words[spec->min_rank], rank_words[spec->max_rank],
			     rank_words[a->rank]);
	}
	for (size_t d = 0; d < a->rank; d++) {
		if (!a->dim[d])
			return error("%s: %s: empty array (dimension %zu is 0)", name, spec->what,
				     d + 1);
		if (n > SIZE_MAX / a->dim[d])
			return error("%s: %s: too many values to address", name, spec->what);
		n *= a->dim[d];
	}
	if (a->type == MEM_BOOL && !(spec->flags & READ_BOOL))
		return error("%s: %s: expected numbers, found booleans (only a mask may be "
			     "boolean)", name, spec->what);
	if ((spec->flags & READ_MAP) && (a->type == MEM_F64 || keep_floats))
		return borrow(m, a, n, spec, name);
	if (keep_floats ? matrix_alloc_f32(m, a->rank, a->dim) : matrix_alloc_dims(m, a->rank, a->dim))
		return -1;
	for (size_t i = 0; i < n; i++) {
		const double v = value_at(a, i);

		if (!isfinite(v) && !(spec->flags & READ_NONFINITE)) {
			matrix_free(m);
			return error("%s: %s: value %zu is %s: expected finite numbers", name,
				     spec->what, i, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
		}
		if (keep_floats)
			m->f[i] = ((const float *)a->data)[i];
		else
			m->v[i] = v;
	}
	m->is_bool = a->type == MEM_BOOL;
	m->from_f32 = a->type == MEM_F32 || a->type == MEM_F16;
	m->from_type = from_type(a->type);
	m->is_f32 = keep_floats;
	return 0;
}

/*
 * read/safetensors.c: the safetensors reader (safetensors.h): the header
 * checked whole against the file before anything past it is read, then one
 * tensor at a time with pread(), converted exactly to float64.
 */
#include "read/safetensors.h"
#include "read/file.h"
#include "read/json.h"
#include "read/half.h"
#include "util/budget.h"
#include "util/msg.h"
#include "util/opts.h"
#include "util/files.h"
#include "util/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The dtypes of the format, with their sizes: every one is known, so a
 * checkpoint's int64 buffers are checked too; mha reads the first four. */
static const struct {
	const char *name;
	unsigned size;
} dtypes[] = {
	{ "F64", 8 }, { "F32", 4 }, { "F16", 2 }, { "BF16", 2 },
	{ "I64", 8 }, { "I32", 4 }, { "I16", 2 }, { "I8", 1 },
	{ "U64", 8 }, { "U32", 4 }, { "U16", 2 }, { "U8", 1 },
	{ "BOOL", 1 }, { "F8_E4M3", 1 }, { "F8_E5M2", 1 },
};
enum { DT_F64, DT_F32, DT_F16, DT_BF16, N_READABLE,
       DT_I64 = N_READABLE, DT_I32, DT_I16, DT_I8, DT_U64, DT_U32, DT_U16, DT_U8, DT_BOOL,
       DT_F8_E4M3, DT_F8_E5M2 };
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* the reference implementation refuses a longer header */
#define MAX_HEADER (100u * 1000 * 1000)
/* exact integers in a JSON number */
#define MAX_EXACT 9007199254740992.0

int st_dtype_is_f8(int dtype)
{
	return dtype == DT_F8_E4M3 || dtype == DT_F8_E5M2;
}

const char *st_dtype_name(int dtype)
{
	return dtype >= 0 && (size_t)dtype < N_DTYPES ? dtypes[dtype].name : "?";
}

const char *st_shape(const st_tensor *t, char *buf, size_t size)
{
	size_t at = 0;

	at += (size_t)snprintf(buf, size, "(");
	for (size_t i = 0; i < t->rank && at < size; i++)
		at += (size_t)snprintf(buf + at, size - at, "%s%llu", i ? ", " : "",
				       (unsigned long long)t->dim[i]);
	if (at < size)
		snprintf(buf + at, size - at, ")");
	return buf;
}

/* A JSON number that is a whole number from 0, exactly: 0 and *out, or -1. */
static int whole(const cJSON *e, uint64_t *out)
{
	if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || e->valuedouble >= MAX_EXACT ||
	    e->valuedouble != floor(e->valuedouble))
		return -1;
	*out = (uint64_t)e->valuedouble;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int by_begin(const void *a, const void *b)
{
	const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;

	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* One entry of the header: name -> {dtype, shape, data_offsets}. */
static int parse_entry(st_tensor *t, const cJSON *e, const char *path, uint64_t data_size,
		       uint64_t data_at)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	const char *name = e->string;
	uint64_t count = 1, begin, end;
	int zero = 0, huge = 0;
	const cJSON *d;

	if (!cJSON_IsObject(e))
		return error("%s: tensor \"%s\": expected an object with dtype, shape and "
			     "data_offsets", path, name);
	cJSON_ArrayForEach(d, e) {
		static const char *const keys[] = { "dtype", "shape", "data_offsets" };
		const char *near;

		/* the format has these three; another is a typo or another format */
		if (strcmp(d->string, "dtype") && strcmp(d->string, "shape") &&
		    strcmp(d->string, "data_offsets"))
			return (near = closest_name(d->string, keys, 3)) ? error("%s: tensor \"%s\": unknown key \"%.80s\": did you mean "
					    "\"%s\"?", path, name, d->string, near)
				    : error("%s: tensor \"%s\": unknown key \"%.80s\": a tensor has "
					    "dtype, shape and data_offsets", path, name, d->string);
	}
	if (!cJSON_IsString(dt))
		return error("%s: tensor \"%s\": no dtype (a string such as \"F32\")", path, name);
	for (t->dtype = 0; (size_t)t->dtype < N_DTYPES; t->dtype++)
		if (!strcmp(dt->valuestring, dtypes[t->dtype].name))
			break;
	if ((size_t)t->dtype == N_DTYPES)
		return error("%s: tensor \"%s\": unknown dtype \"%s\" (expected F64, F32, F16, "
			     "BF16, an integer type, BOOL or F8_E4M3/F8_E5M2)", path, name,
			     dt->valuestring);
	if (!cJSON_IsArray(shape))
		return error("%s: tensor \"%s\": no shape (a list of whole numbers)", path, name);
	t->rank = 0;
	cJSON_ArrayForEach(d, shape) {
		uint64_t v;

		if (t->rank == ST_MAX_RANK)
			return error("%s: tensor \"%s\": more than %d dimensions", path, name,
				     ST_MAX_RANK);
		if (whole(d, &v))
			return error("%s: tensor \"%s\": shape holds something other than whole "
				     "numbers from 0", path, name);
		t->dim[t->rank++] = v;
		/* overflow-checked: a product past the data cannot fit anyway */
		if (!v)
			zero = 1;
		else if (count > data_size / v)
			huge = 1;
		else
			count *= v;
	}
	if (zero) {
		count = 0;
		huge = 0;
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
	    whole(cJSON_GetArrayItem(offs, 0), &begin) || whole(cJSON_GetArrayItem(offs, 1), &end))
		return error("%s: tensor \"%s\": data_offsets is not two whole numbers [begin, end]",
			     path, name);
	if (begin > end || end > data_size)
		return error("%s: tensor \"%s\": data_offsets [%llu, %llu] %s the data's %llu "
			     "bytes", path, name, (unsigned long long)begin, (unsigned long long)end,
			     begin > end ? "run backwards in" : "run past", (unsigned long long)data_size);
	if (huge || end - begin != count * dtypes[t->dtype].size) {
		char buf[200];

		return error("%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes but %s %s "
			     "needs %s%llu", path, name, (unsigned long long)begin,
			     (unsigned long long)end, (unsigned long long)(end - begin),
			     dtypes[t->dtype].name, st_shape(t, buf, sizeof(buf)),
			     huge ? "more than " : "",
			     (unsigned long long)(huge ? data_size : count * dtypes[t->dtype].size));
	}
	t->begin = data_at + begin;
	t->end = data_at + end;
	return 0;
}

/* The header's text, already in memory: every entry into f->t. */
static int parse_header(st_file *f, const char *text, size_t len, uint64_t data_at)
{
	const uint64_t data_size = f->size - data_at;
	const char *end = NULL;
	const size_t refused = budget_refusals();
	const size_t nul = json_nul_escape(text, len);
	cJSON *root = nul < len ? NULL : cJSON_ParseWithLengthOpts(text, len, &end, 0);
	const cJSON *e;
	st_tensor **order = NULL;
	size_t n = 0, cap;
	int rc = 0;

	if (nul < len)
		return error("%s: the header has \\u0000 in a string (at byte %zu of the file): a "
			     "NUL, which would end a tensor's name early", f->path, nul + 8);
	if (!root) {
		size_t at = end && end >= text ? (size_t)(end - text) : 0;

		if (budget_refusals() > refused)
			return budget_refuse(f->path, 0);
		if (at >= len)
			return error("%s: the header is not JSON: it ends too early (%zu bytes)",
				     f->path, len);
		return error("%s: the header is not JSON (at byte %zu of its %zu, byte %zu of the "
			     "file)", f->path, at, len, at + 8);
	}
	/* past the object, spaces only (writers pad the header to 8 bytes with
	 * them): anything else is refused, as the reference's serde_json does */
	{
		size_t at = end && end >= text && (size_t)(end - text) <= len ? (size_t)(end - text)
									       : len;

		while (at > 0 && (text[at - 1] == ' ' || text[at - 1] == '\t' ||
				  text[at - 1] == '\n' || text[at - 1] == '\r'))
			at--; /* cJSON's end is past the whitespace it skipped */
		while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' ||
				    text[at] == '\r'))
			at++;
		if (at < len) {
			cJSON_Delete(root);
			return error("%s: the header has more after its JSON object (at byte %zu of "
				     "its %zu, byte %zu of the file)", f->path, at, len, at + 8);
		}
	}
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return error("%s: the header is not a JSON object of tensors", f->path);
	}
	cap = (size_t)cJSON_GetArraySize(root);
	if (budget_take(cap * sizeof(*f->t))) {
		cJSON_Delete(root);
		return budget_refuse(f->path, cap * sizeof(*f->t));
	}
	f->held += cap * sizeof(*f->t);
	f->t = calloc(cap ? cap : 1, sizeof(*f->t));
	if (!f->t) {
		cJSON_Delete(root);
		return error("out of memory");
	}
	cJSON_ArrayForEach(e, root) {
		st_tensor *t = &f->t[n];
		const size_t nl = strlen(e->string) + 1;

		if (!strcmp(e->string, "__metadata__")) {
			const cJSON *m;

			if (!cJSON_IsObject(e) && !cJSON_IsNull(e)) {
				rc = error("%s: __metadata__ is not an object", f->path);
				break;
			}
			/* the format's metadata is strings to strings, as the reference reads it */
			cJSON_ArrayForEach(m, e)
				if (!cJSON_IsString(m))
					break;
			if (m) {
				rc = error("%s: __metadata__: \"%.80s\" is not a string: the metadata "
					   "maps strings to strings", f->path, m->string);
				break;
			}
			continue;
		}
		if (parse_entry(t, e, f->path, data_size, data_at)) {
			rc = -1;
			break;
		}
		if (budget_take(budget_block(nl))) {
			rc = budget_refuse(f->path, nl);
			break;
		}
		f->held += budget_block(nl);
		if (!(t->name = malloc(nl))) {
			rc = error("out of memory");
			break;
		}
		memcpy(t->name, e->string, nl);
		n++;
	}
	f->n = n;
	cJSON_Delete(root);
	if (rc)
		return rc;
	qsort(f->t, n, sizeof(*f->t), by_name);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(f->t[i - 1].name, f->t[i].name))
			return error("%s: tensor \"%s\" is in the header twice", f->path, f->t[i].name);
	/* no two ranges share a byte (empty tensors take none) */
	if (budget_take(budget_block(n * sizeof(*order) + 1)))
		return budget_refuse(f->path, n * sizeof(*order));
	order = malloc(n * sizeof(*order) + 1);
	if (!order) {
		budget_give(budget_block(n * sizeof(*order) + 1));
		return error("out of memory");
	}
	for (size_t i = 0; i < n; i++)
		order[i] = &f->t[i];
	qsort(order, n, sizeof(*order), by_begin);
	for (size_t i = 1, last = 0; i < n && !rc; i++) {
		if (order[i]->begin == order[i]->end)
			continue;
		if (order[last]->end > order[i]->begin && order[last]->begin != order[last]->end)
			rc = error("%s: tensors \"%s\" and \"%s\" overlap: bytes [%llu, %llu) and "
				   "[%llu, %llu) of the data", f->path, order[last]->name,
				   order[i]->name,
				   (unsigned long long)(order[last]->begin - data_at),
				   (unsigned long long)(order[last]->end - data_at),
				   (unsigned long long)(order[i]->begin - data_at),
				   (unsigned long long)(order[i]->end - data_at));
		last = i;
	}
	free(order);
	budget_give(budget_block(n * sizeof(*order) + 1));
	return rc;
}

/* a byte JSON allows nowhere, which cJSON would take for a blank */
static int is_control(unsigned char c)
{
	return c < 0x20 && c != '\t' && c != '\n' && c != '\r';
}

/*
 * The header as text: UTF-8 (the reference reads it as a Rust str) and no
 * control byte but tabs and line ends, which JSON allows nowhere (cJSON
 * would take them for blanks).  text[len] is set to NUL.  0, or -1 said.
 */
static int header_text(const char *path, char *text, size_t len)
{
	const unsigned char *u = (const unsigned char *)text;
	size_t at;

	for (size_t from = 0; from < len; from += 4096) {
		const size_t to = len - from < 4096 ? len : from + 4096;
		unsigned any = 0;

		/* a block at a time with no early exit, which the compiler vectorises
		 * (a header may be 100 MB); the byte found only in a block that has one */
		for (size_t i = from; i < to; i++)
			any |= (unsigned)is_control(u[i]);
		for (size_t i = from; any && i < to; i++)
			if (is_control(u[i]))
				return error("%s: the header holds the control byte 0x%02x (at byte "
					     "%zu of its %zu, byte %zu of the file): not JSON text", path,
					     (unsigned)u[i], i, len, i + 8);
	}
	text[len] = '\0';
	at = text_utf8_prefix(text, len);
	if (at < len)
		return error("%s: the header is not UTF-8 (the byte 0x%02x at byte %zu of its "
			     "%zu, byte %zu of the file)", path, (unsigned)(unsigned char)text[at], at,
			     len, at + 8);
	return 0;
}

int st_open(st_file *f, const char *path)
{
	unsigned char len8[8];
	struct stat st;
	uint64_t n = 0;
	char *text;
	ssize_t got;
	int rc;

	memset(f, 0, sizeof(*f));
	f->fd = -1;
	if (!(f->path = strdup(path)))
		return error("out of memory");
	/* its kind known before an open could block on a FIFO */
	if ((f->fd = files_open(path, FILE_SEEKABLE, NULL)) < 0)
		return -1;
	if (fstat(f->fd, &st) != 0)
		return error("%s: %s", path, strerror(errno));
	f->size = (uint64_t)st.st_size;
	if (f->size < 8 || pread(f->fd, len8, 8, 0) != 8)
		return error("%s: not a safetensors file: %llu bytes, too short for the header's "
			     "8-byte length", path, (unsigned long long)f->size);
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	/* before anything is allocated */
	if (n > f->size - 8)
		return error("%s: the header is %llu bytes long but the file has %llu after its "
			     "length: truncated, or not a safetensors file", path,
			     (unsigned long long)n, (unsigned long long)(f->size - 8));
	if (n > MAX_HEADER)
		return error("%s: the header is %llu bytes long, more than safetensors' limit of "
			     "%u", path, (unsigned long long)n, MAX_HEADER);
	if (n < 2)
		return error("%s: the header is %llu bytes long: not a JSON object", path,
			     (unsigned long long)n);
	if (budget_take(budget_block((size_t)n + 1)))
		return budget_refuse(path, (size_t)n + 1);
	if (!(text = malloc((size_t)n + 1))) {
		budget_give(budget_block((size_t)n + 1));
		return error("out of memory");
	}
	got = pread(f->fd, text, (size_t)n, 8);
	if (got != (ssize_t)n) {
		rc = error("%s: cannot read the header: %s", path, got < 0 ? strerror(errno)
										 : "the file shrank");
	} else if ((rc = header_text(path, text, (size_t)n)) == 0) {
		rc = parse_header(f, text, (size_t)n, 8 + n);
	}
	free(text);
	budget_give(budget_block((size_t)n + 1));
	return rc;
}

void st_close(st_file *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		free(f->t[i].name);
	free(f->t);
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	budget_give(f->held);
	memset(f, 0, sizeof(*f));
	f->fd = -1;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
	const st_tensor key = { .name = (char *)(uintptr_t)name };

	return f->n ? bsearch(&key, f->t, f->n, sizeof(*f->t), by_name) : NULL;
}

/*
 * An integer or BOOL element (a mask's) at b as a double into *v: 0, or -1
 * when a double cannot hold it exactly or a BOOL byte is not 0 or 1.
 */
static int convert_int(const unsigned char *b, int dtype, double *v)
{
	const unsigned size = dtypes[dtype].size;
	uint64_t u = 0;

	for (unsigned i = 0; i < size; i++)
		u |= (uint64_t)b[i] << (8 * i);
	if (dtype == DT_BOOL) {
		*v = (double)u;
		return u > 1 ? -1 : 0;
	}
	if (dtype <= DT_I8 && size < 8 && (u >> (8 * size - 1)) & 1)
		u |= ~UINT64_C(0) << (8 * size); /* sign-extend */
	if (dtype <= DT_I8 && u >> 63) {
		*v = -(double)(UINT64_C(0) - u);
		return UINT64_C(0) - u > (UINT64_C(1) << 53) ? -1 : 0;
	}
	*v = (double)u;
	return u > (UINT64_C(1) << 53) ? -1 : 0;
}

/* little-endian bytes to a double, exactly */
static double convert(const unsigned char *b, int dtype)
{
	uint64_t u = 0;
	uint32_t w;
	double d;
	float x;

	switch (dtype) {
	case DT_F64:
		for (int i = 7; i >= 0; i--)
			u = u << 8 | b[i];
		memcpy(&d, &u, sizeof(d));
		return d;
	case DT_F32:
		w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
		memcpy(&x, &w, sizeof(x));
		return x;
	case DT_BF16:
		return bfloat16_to_double((uint16_t)(b[0] | b[1] << 8));
	case DT_F8_E4M3:
		return f8_e4m3_to_double(b[0]);
	case DT_F8_E5M2:
		return f8_e5m2_to_double(b[0]);
	default: /* DT_F16 */
		return half_to_double((uint16_t)(b[0] | b[1] << 8));
	}
}

/* "t"[i][j]…: element k of a tensor, into buf */
static const char *element(char *buf, size_t size, const st_tensor *t, size_t k)
{
	size_t at = (size_t)snprintf(buf, size, "tensor \"%s\"", t->name), idx[ST_MAX_RANK];

	for (size_t r = t->rank; r-- > 0;) {
		idx[r] = k % t->dim[r];
		k /= t->dim[r];
	}
	for (size_t r = 0; r < t->rank && at < size; r++)
		at += (size_t)snprintf(buf + at, size - at, "[%zu]", idx[r]);
	return buf;
}

/* what a tensor is read as: a weight, a mask, or an array of theirs that
 * mha compare holds against its steps */
enum { AS_WEIGHT, AS_MASK, AS_ARRAY };

/*
 * Tensor t as float64: a weight (AS_WEIGHT: F64, F32, F16 or BF16, rank 1
 * to 3, finite), or a mask or an array compared (rank 1 to 4, any float,
 * integer or BOOL dtype, -inf and nan allowed).  The type it was in is kept
 * (from_type).
 */
static int read_tensor(matrix *m, const st_file *f, const st_tensor *t, int as)
{
	const int mask = as != AS_WEIGHT;
	enum { CHUNK = 1 << 16 };
	const unsigned size = dtypes[t->dtype].size;
	const size_t max_rank = mask ? 4 : 3;
	/* a multiple of every size; no larger than the tensor, under a small budget */
	const size_t chunk = t->end - t->begin < CHUNK ? (size_t)(t->end - t->begin) : CHUNK;
	unsigned char *buf;
	uint64_t count = 1, at = t->begin;
	size_t k = 0, dims[4];
	char shape[200], name[300];
	int rc = 0;

	memset(m, 0, sizeof(*m));
	if (!mask && t->dtype >= N_READABLE && !st_dtype_is_f8(t->dtype))
		return error("%s: tensor \"%s\" is %s: mha reads F64, F32, F16, BF16, F8_E4M3 and "
			     "F8_E5M2 weights", f->path, t->name, dtypes[t->dtype].name);
	if (mask && t->dtype > DT_BOOL)
		return error("%s: tensor \"%s\" is %s: %s is F64, F32, F16, BF16, an integer "
			     "dtype or BOOL", f->path, t->name, dtypes[t->dtype].name,
			     as == AS_MASK ? "a mask" : "an array compared");
	if (t->rank < 1 || t->rank > max_rank)
		return error("%s: tensor \"%s\" is %s: expected 1 to %zu dimensions", f->path,
			     t->name, st_shape(t, shape, sizeof(shape)), max_rank);
	for (size_t i = 0; i < t->rank; i++) {
		count *= t->dim[i]; /* checked against its bytes by st_open */
		dims[i] = (size_t)t->dim[i];
	}
	if (!count)
		return error("%s: tensor \"%s\" is %s: empty", f->path, t->name,
			     st_shape(t, shape, sizeof(shape)));
	budget_reading(f->path);
	if (count > SIZE_MAX / sizeof(double) || matrix_alloc_dims(m, t->rank, dims)) {
		budget_reading(NULL);
		return count > SIZE_MAX / sizeof(double) ? budget_refuse(f->path, SIZE_MAX) : -1;
	}
	budget_reading(NULL);
	if (budget_take(budget_block(chunk))) {
		matrix_free(m);
		return budget_refuse(f->path, chunk);
	}
	if (!(buf = malloc(chunk))) {
		budget_give(budget_block(chunk));
		matrix_free(m);
		return error("out of memory");
	}
	while (at < t->end && !rc) {
		const size_t want = t->end - at < chunk ? (size_t)(t->end - at) : chunk;
		const ssize_t got = pread(f->fd, buf, want, (off_t)at);

		if (got != (ssize_t)want) {
			rc = error("%s: cannot read tensor \"%s\": %s", f->path, t->name,
				   got < 0 ? strerror(errno) : "the file shrank");
			break;
		}
		for (size_t i = 0; i + size <= want; i += size, k++) {
			double v;

			if (t->dtype >= N_READABLE && !st_dtype_is_f8(t->dtype)) {
				if (convert_int(buf + i, t->dtype, &v)) {
					rc = t->dtype == DT_BOOL
						? error("%s: %s is the byte 0x%02x, not a boolean (0 or 1)",
							f->path, element(name, sizeof(name), t, k),
							(unsigned)buf[i])
						: error("%s: %s is %.17g: a double cannot hold it exactly",
							f->path, element(name, sizeof(name), t, k), v);
					break;
				}
			} else {
				v = convert(buf + i, t->dtype);
			}
			if (!mask && !isfinite(v)) {
				rc = error("%s: %s is %s: weights must be finite", f->path,
					   element(name, sizeof(name), t, k),
					   isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
				break;
			}
			m->v[k] = v;
		}
		at += want;
	}
	free(buf);
	budget_give(budget_block(chunk));
	if (rc)
		matrix_free(m);
	else
		m->is_bool = t->dtype == DT_BOOL;
	if (!rc)
		m->from_type = t->dtype == DT_F32 ? FROM_F32 : t->dtype == DT_F16 ? FROM_F16 :
			       t->dtype == DT_BF16 ? FROM_BF16 : FROM_F64;
	return rc;
}

int st_read(matrix *m, const st_file *f, const st_tensor *t)
{
	return read_tensor(m, f, t, AS_WEIGHT);
}

int st_read_array(matrix *m, const st_file *f, const st_tensor *t)
{
	return read_tensor(m, f, t, AS_ARRAY);
}

int st_path(const char *path)
{
	char ext[16];

	file_extension(path, ext, sizeof(ext));
	return !strcmp(ext, "safetensors");
}

int st_read_mask(matrix *m, const char *path)
{
	st_file f;
	int rc = -1;

	memset(m, 0, sizeof(*m));
	if (st_open(&f, path) == 0) {
		if (f.n == 1) {
			rc = read_tensor(m, &f, &f.t[0], AS_MASK);
		} else if (f.n == 0) {
			rc = error("%s: no tensor: expected the mask, one tensor", path);
		} else {
			char names[400];
			size_t at = 0;

			for (size_t i = 0; i < f.n && at < sizeof(names); i++)
				at += (size_t)snprintf(names + at, sizeof(names) - at, "%s\"%s\"",
						       i ? ", " : "", f.t[i].name);
			if (at >= sizeof(names))
				memcpy(names + sizeof(names) - 4, "...", 4);
			rc = error("%s: %zu tensors (%s): expected the mask, one tensor", path, f.n,
				   names);
		}
	}
	st_close(&f);
	return rc;
}

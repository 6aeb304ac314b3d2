/*
 * archive.c: results as one NumPy .npz archive (archive.h): every item a
 * run made, or named matrices (mha model -o).
 */
#include "write/archive.h"
#include "write/zip.h"
#include "base/cli.h"
#include "base/outfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one member's array: parts under lead, or strings */
struct npz_array {
	const matrix **parts;
	size_t n_parts, lead[2], n_lead;
	int f4;
	const char *const *strings;
	size_t n_strings, rank;
};

static void npz_fill(const npy_sink *s, void *arg)
{
	const struct npz_array *a = arg;

	if (a->strings)
		npy_put_strings(s, a->strings, a->n_strings, a->rank);
	else
		npy_put_parts(s, a->lead, a->n_lead, a->parts, a->n_parts, a->f4);
}

/* a member "X.npy", "heads.softmax.npy": prefix and key */
static int npz_add(zip_writer *z, const char *prefix, const char *key, struct npz_array *a)
{
	char name[128];

	snprintf(name, sizeof(name), "%s%s.npy", prefix, key);
	return zip_add(z, name, npz_fill, a);
}

int emit_npz_named(const char *path, const char *const *names, const matrix *const *m, size_t n)
{
	outfile of;
	zip_writer z = { 0 };
	struct npz_array *a = calloc(n ? n : 1, sizeof(*a));
	const matrix **parts = calloc(n ? n : 1, sizeof(*parts));

	if (!a || !parts) {
		free(a);
		free(parts);
		return error("out of memory");
	}
	if (outfile_open(&of, path)) {
		free(a);
		free(parts);
		return -1;
	}
	z.fp = of.fp;
	for (size_t i = 0; i < n; i++) {
		parts[i] = m[i];
		a[i] = (struct npz_array){ .parts = &parts[i], .n_parts = 1, .f4 = m[i]->is_f32 };
		if (npz_add(&z, "", names[i], &a[i])) {
			zip_free(&z);
			free(a);
			free(parts);
			outfile_abort(&of);
			return -1;
		}
	}
	zip_finish(&z);
	zip_free(&z);
	free(a);
	free(parts);
	return outfile_commit(&of); /* a write error shows in the commit */
}

/*
 * -o run.npz: every item under its JSON key, as np.savez writes them (zip.h),
 * or with compress deflated, as np.savez_compressed does:
 * a whole-model matrix as it is, each per-head step as one array of the
 * heads stacked, "heads.softmax" (H, n_q, n_kv); a batch (B, ...) ahead of
 * that.  meta is its JSON text in a 0-d Unicode array, tokens and kv_tokens
 * 1-D Unicode arrays; float32 where the run made floats (--dtype f32's
 * output: is_f32), else float64.  Nothing needs pickle.
 */
int emit_write_npz(FILE *fp, int compress, const struct step_items *lists, size_t batch,
		     const struct labels *l, const struct run_meta *meta)
{
	const struct step_items *list = &lists[0];
	const size_t B = batch ? batch : 1;
	zip_writer z = { .fp = fp, .compress = compress };
	const matrix **parts = NULL;
	size_t *idx = calloc(list->n ? list->n : 1, sizeof(*idx));
	char *text = NULL;
	size_t text_len = 0;
	FILE *mf = open_memstream(&text, &text_len);
	struct npz_array a;
	int rc = -1;

	if (!idx || !mf)
		goto oom;
	meta_write_json(mf, meta, 0);
	if (fclose(mf)) {
		mf = NULL;
		goto oom;
	}
	mf = NULL;
	a = (struct npz_array){ .strings = (const char *const *)&text, .n_strings = 1, .rank = 0 };
	if (npz_add(&z, "", "meta", &a))
		goto done;
	if (l->query) {
		a = (struct npz_array){ .strings = (const char *const *)l->query,
					.n_strings = l->n_query, .rank = 1 };
		if (npz_add(&z, "", "tokens", &a))
			goto done;
	}
	if (l->key && l->key != l->query) {
		a = (struct npz_array){ .strings = (const char *const *)l->key,
					.n_strings = l->n_key, .rank = 1 };
		if (npz_add(&z, "", "kv_tokens", &a))
			goto done;
	}
	for (size_t i = 0; i < list->n; i++) {
		const struct step_item *it = &list->v[i];
		size_t H = 0;

		if (it->head > 1)
			continue; /* with head 1's */
		if (it->head == 1) {
			/* the step's item in every head, in order */
			for (size_t j = i; j < list->n; j++)
				if (list->v[j].step == it->step && list->v[j].head == H + 1)
					idx[H++] = j;
		} else {
			idx[H++] = i;
		}
		free(parts);
		parts = calloc(B * H, sizeof(*parts));
		if (!parts)
			goto oom;
		a = (struct npz_array){ .parts = parts, .n_parts = B * H, .f4 = meta->f32 };
		for (size_t b = 0; b < B; b++)
			for (size_t h = 0; h < H; h++) {
				parts[b * H + h] = lists[b].v[idx[h]].m;
				a.f4 &= parts[b * H + h]->is_f32;
			}
		if (batch)
			a.lead[a.n_lead++] = batch;
		if (it->head)
			a.lead[a.n_lead++] = H;
		if (npz_add(&z, it->head ? "heads." : "", it->key, &a))
			goto done;
	}
	zip_finish(&z);
	rc = 0;
	goto done;
oom:
	error("out of memory");
done:
	if (mf)
		fclose(mf);
	free(text);
	free(parts);
	free(idx);
	zip_free(&z);
	return rc;
}


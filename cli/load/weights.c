/*
 * weights.c: read the weights, from a JSON object, a directory or one file
 * per option, and bring them to the library's one layout.
 *
 * Names are matched loosely (W_Q, WQ, W^Q, Wq and wq are one key) but never
 * guessed: anything else is refused by name, so a typo cannot silently drop
 * a weight.
 */
#include "load/weights.h"
#include "base/cli.h"
#include "read/input.h"
#include "read/npz.h"
#include "read/json.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const weight_names[N_WEIGHTS] = {
	"W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
};

const char *const weight_options[N_WEIGHTS] = {
	"--wq", "--wk", "--wv", "--wo", "--bq", "--bk", "--bv", "--bo",
};

/* slots past the eight weights: PyTorch's packed projection, and a refusal */
enum { IN_PROJ_W = N_WEIGHTS, IN_PROJ_B, UNSUPPORTED, NOT_A_WEIGHT = -1 };

/* nn.MultiheadAttention's state_dict names; a key may carry a module prefix */
static const struct {
	const char *name;
	int slot;
} torch_names[] = {
	{ "in_proj_weight", IN_PROJ_W }, { "in_proj_bias", IN_PROJ_B },
	{ "q_proj_weight", WQ }, { "k_proj_weight", WK }, { "v_proj_weight", WV },
	{ "out_proj.weight", WO }, { "out_proj.bias", BO },
	{ "bias_k", UNSUPPORTED }, { "bias_v", UNSUPPORTED },
};

static const char expected_names[] = "W_Q, W_K, W_V, W_O, b_Q, b_K, b_V or b_O";

/* "W^Q" -> W_Q: drop '_' and '^', fold case; NOT_A_WEIGHT otherwise */
static int mha_name(const char *key)
{
	char folded[8];
	size_t n = 0;

	for (const char *p = key; *p; p++) {
		if (*p == '_' || *p == '^')
			continue;
		if (n + 1 >= sizeof(folded))
			return NOT_A_WEIGHT;
		folded[n++] = (char)tolower((unsigned char)*p);
	}
	folded[n] = '\0';
	for (int i = 0; i < N_WEIGHTS; i++) {
		const char *c = weight_names[i];
		const char want[3] = { (char)tolower((unsigned char)c[0]),
				       (char)tolower((unsigned char)c[2]), '\0' };

		if (!strcmp(folded, want))
			return i;
	}
	return NOT_A_WEIGHT;
}

/* "self_attn.out_proj.weight" -> W_O; NOT_A_WEIGHT otherwise */
static int torch_name(const char *key)
{
	const size_t klen = strlen(key);

	for (size_t i = 0; i < sizeof(torch_names) / sizeof(torch_names[0]); i++) {
		const size_t n = strlen(torch_names[i].name);

		if (klen >= n && !strcmp(key + klen - n, torch_names[i].name) &&
		    (klen == n || key[klen - n - 1] == '.'))
			return torch_names[i].slot;
	}
	return NOT_A_WEIGHT;
}

/* key is one of nn.MultiheadAttention's names, not one of mha's */
static int is_torch_key(const char *key)
{
	return mha_name(key) == NOT_A_WEIGHT && torch_name(key) != NOT_A_WEIGHT;
}

/* The slot for key, or -1 with the reason reported (src names where it is). */
static int slot_of(const char *key, weight_layout layout, const char *src)
{
	int slot = mha_name(key);

	if (slot != NOT_A_WEIGHT)
		return slot;
	slot = torch_name(key);
	if (slot == UNSUPPORTED)
		return error("%s: \"%s\": nn.MultiheadAttention's add_bias_kv is not supported",
			     src, key);
	if (slot != NOT_A_WEIGHT && layout != LAYOUT_TORCH)
		return error("%s: \"%s\" is a PyTorch name: add --layout torch to read PyTorch's "
			     "(out, in) weights", src, key);
	if (slot != NOT_A_WEIGHT)
		return slot;
	{
		/* "W_0", "W_q ": the name it is nearly */
		const char *names[N_WEIGHTS + sizeof(torch_names) / sizeof(torch_names[0])];
		size_t n = 0;
		const char *near;

		for (int i = 0; i < N_WEIGHTS; i++)
			names[n++] = weight_names[i];
		for (size_t i = 0; layout == LAYOUT_TORCH && i < sizeof(torch_names) / sizeof(torch_names[0]); i++)
			if (torch_names[i].slot != UNSUPPORTED)
				names[n++] = torch_names[i].name;
		near = closest_name(key, names, n);
		if (near)
			return error("%s: \"%s\" is not the name of a weight: did you mean \"%s\"?", src,
				     key, near);
	}
	if (layout == LAYOUT_TORCH)
		return error("%s: \"%s\" is not the name of a weight (expected %s, or in_proj_weight, "
			     "in_proj_bias, q_proj_weight, k_proj_weight, v_proj_weight, "
			     "out_proj.weight, out_proj.bias)", src, key, expected_names);
	return error("%s: \"%s\" is not the name of a weight (expected %s)", src, key,
		     expected_names);
}

static const char *slot_name(int slot)
{
	return slot == IN_PROJ_W ? "in_proj_weight" : slot == IN_PROJ_B ? "in_proj_bias"
									 : weight_names[slot];
}

static matrix *slot_matrix(weights *w, int slot, char ***src)
{
	if (slot == IN_PROJ_W || slot == IN_PROJ_B) {
		*src = &w->in_proj_src[slot - IN_PROJ_W];
		return slot == IN_PROJ_W ? &w->in_proj_w : &w->in_proj_b;
	}
	*src = &w->src[slot];
	return &w->m[slot];
}

/* Keep m in slot; replace what was there only when replace is set. */
static int put(weights *w, int slot, matrix *m, const char *src, int replace)
{
	char **where;
	matrix *dst = slot_matrix(w, slot, &where);
	char *copy;

	if (dst->rank && !replace) {
		matrix_free(m);
		return error("%s: %s is given twice (also in %s)", src, slot_name(slot), *where);
	}
	copy = strdup(src);
	if (!copy) {
		matrix_free(m);
		return error("out of memory");
	}
	matrix_free(dst);
	free(*where);
	*dst = *m;
	*where = copy;
	w->torch_named &= ~(1u << slot); /* the caller says when it came under a PyTorch name */
	memset(m, 0, sizeof(*m));
	return 0;
}

/* One weight from a file of its own, in any format; found: in a -w folder,
 * not named by the user (READ_FOUND). */
static int load_file(weights *w, int slot, const char *path, const char *src, int replace,
		     int found)
{
	const char *const keys[] = { slot_name(slot), NULL };
	const read_spec spec = { slot_name(slot), keys, 1, 3,
				 (w->floats ? READ_F32 : 0) | (w->map ? READ_MAP : 0) |
					 (found ? READ_FOUND : 0) };
	matrix m;

	if (read_matrix(&m, path, &spec))
		return -1;
	return put(w, slot, &m, src, replace);
}

int weights_put_key(weights *w, const char *key, matrix *m, const char *src)
{
	const int slot = slot_of(key, w->layout, src);

	if (slot < 0) {
		matrix_free(m);
		return -1;
	}
	if (put(w, slot, m, src, 0))
		return -1;
	if (is_torch_key(key))
		w->torch_named |= 1u << slot;
	return 0;
}

static int load_object(weights *w, const input_file *in, const char *src)
{
	const char *given[UNSUPPORTED] = { NULL };
	json_doc doc = { 0 };
	const cJSON *e;
	int rc = 0;

	if (json_parse(&doc, in)) {
		json_doc_free(&doc);
		return -1;
	}
	if (!cJSON_IsObject(doc.root)) {
		json_doc_free(&doc);
		return error("%s: expected an object with keys W_Q, W_K, W_V (and optionally W_O, "
			     "b_Q, b_K, b_V, b_O)", in->name);
	}
	cJSON_ArrayForEach(e, doc.root) {
		const int slot = slot_of(e->string, w->layout, in->name);
		matrix m;

		if (slot < 0) {
			rc = -1;
			break;
		}
		if (given[slot]) {
			/* one key twice was refused by json_parse: two spellings */
			rc = error("%s: \"%s\" and \"%s\" are both %s", in->name, given[slot],
				   e->string, slot_name(slot));
			break;
		}
		given[slot] = e->string;
		if (json_node_matrix(&m, &doc, e, e->string, slot_name(slot), 1, 3, 0) ||
		    put(w, slot, &m, src, 0)) {
			rc = -1;
			break;
		}
		if (is_torch_key(e->string))
			w->torch_named |= 1u << slot;
	}
	json_doc_free(&doc);
	return rc;
}

/* -w weights.npz: one member a weight, named as the JSON object's keys */
static int load_npz(weights *w, const input_file *in, const char *src)
{
	const char *given[UNSUPPORTED] = { NULL };
	npz_archive *z;
	int rc = 0;

	if (npz_open(&z, in))
		return -1;
	if (npz_count(z) == 0)
		rc = error("%s: an empty archive: expected members W_Q, W_K, W_V (and optionally "
			   "W_O, b_Q, b_K, b_V, b_O)", in->name);
	for (size_t i = 0; i < npz_count(z) && !rc; i++) {
		const char *key = npz_name(z, i);
		const int slot = slot_of(key, w->layout, in->name);
		matrix m;

		if (slot < 0) {
			rc = -1;
			break;
		}
		if (given[slot]) {
			rc = error("%s: \"%s\" and \"%s\" are both %s", in->name, given[slot], key,
				   slot_name(slot));
			break;
		}
		given[slot] = key;
		if (npz_read(z, key, &m, &(read_spec){ slot_name(slot), NULL, 1, 3, 0 }) ||
		    put(w, slot, &m, src, 0)) {
			rc = -1;
			break;
		}
		if (is_torch_key(key))
			w->torch_named |= 1u << slot;
	}
	npz_close(z);
	return rc;
}

/* Extensions of the files a weights directory is read for. */
static int data_extension(const char *ext)
{
	static const char *const known[] = { "json", "csv", "tsv", "txt", "npy" };

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(ext, known[i]))
			return 1;
	return 0;
}

/* The files in dir a weights directory is read for, sorted, so that which
 * of two clashing files is named first never varies: *names[*n], to free.
 * -1: dir cannot be read (errno set) or out of memory (errno ENOMEM). */
static int weight_files(const char *dir, char ***names, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t cap = 0;

	*names = NULL;
	*n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		const char *dot = strrchr(e->d_name, '.');

		if (e->d_name[0] == '.' || !dot || !data_extension(dot + 1))
			continue; /* a README or the like */
		if (*n == cap) {
			char **more = realloc(*names, (cap = cap ? cap * 2 : 16) * sizeof(**names));

			if (!more)
				break;
			*names = more;
		}
		if (!((*names)[*n] = strdup(e->d_name)))
			break;
		(*n)++;
	}
	closedir(d);
	if (e) {
		for (size_t i = 0; i < *n; i++)
			free((*names)[i]);
		free(*names);
		*names = NULL;
		*n = 0;
		errno = ENOMEM;
		return -1;
	}
	for (size_t i = 1; i < *n; i++)
		for (size_t j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
			char *t = (*names)[j];

			(*names)[j] = (*names)[j - 1];
			(*names)[j - 1] = t;
		}
	return 0;
}

static int load_directory(weights *w, const char *dir, const char *opt)
{
	char **names;
	size_t n, found = 0;
	int rc = 0;

	if (weight_files(dir, &names, &n))
		return errno == ENOMEM ? error("out of memory")
				       : error("%s: cannot read the directory", dir);
	for (size_t i = 0; i < n && !rc; i++) {
		char *dot = strrchr(names[i], '.');
		char path[4096], src[PATH_TEXT];
		int slot, torch;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		snprintf(src, sizeof(src), "%s %s", opt, path);
		*dot = '\0';
		slot = slot_of(names[i], w->layout, path);
		torch = is_torch_key(names[i]);
		*dot = '.';
		if (slot < 0 || load_file(w, slot, path, src, 0, 1)) {
			rc = -1;
		} else {
			found++;
			if (torch)
				w->torch_named |= 1u << slot;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (!rc && !found)
		return error("%s: no weight files in the directory (expected W_Q.csv, W_K.npy, "
			     "W_V.json and the like)", dir);
	return rc;
}

int weights_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx)
{
	struct stat st;
	char **names;
	size_t n;
	int rc = 0;

	if (!strcmp(path, "-") || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return fn(ctx, path);
	if (weight_files(path, &names, &n))
		return errno == ENOMEM ? error("out of memory") : 0; /* the reading says why */
	for (size_t i = 0; i < n; i++) {
		char file[4096];

		/* the name load_directory() reads it by */
		snprintf(file, sizeof(file), "%s/%s", path, names[i]);
		if (!rc)
			rc = fn(ctx, file);
		free(names[i]);
	}
	free(names);
	return rc;
}

int weights_load(weights *w, const char *path, weight_layout layout)
{
	struct stat st;
	input_file in;
	char src[PATH_TEXT];
	int rc;

	w->layout = layout;
	snprintf(src, sizeof(src), "-w %s", strcmp(path, "-") ? path : "<stdin>");
	if (strcmp(path, "-") && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return load_directory(w, path, "-w");
	if (input_load(&in, path)) {
		input_free(&in);
		return -1;
	}
	if (input_format(&in) == FORMAT_IN_NPZ)
		rc = load_npz(w, &in, src);
	else if (input_format(&in) != FORMAT_IN_JSON)
		rc = error("%s: a weights file is one JSON object or a .npz archive; for CSV or "
			   ".npy weights give one file per weight (--wq, --wk, … or -w DIR)", in.name);
	else
		rc = load_object(w, &in, src);
	input_free(&in);
	return rc;
}

int weights_load_one(weights *w, int which, const char *opt, const char *path,
		     weight_layout layout)
{
	char src[PATH_TEXT];

	w->layout = layout;
	snprintf(src, sizeof(src), "%s %s", opt, strcmp(path, "-") ? path : "<stdin>");
	return load_file(w, which, path, src, 1, 0);
}

/* ---- one layout -------------------------------------------------------- */

static int transpose(matrix *m)
{
	matrix t;

	if (matrix_alloc(&t, 2, m->dim[1], m->dim[0], 1))
		return -1;
	for (size_t i = 0; i < m->dim[0]; i++)
		for (size_t j = 0; j < m->dim[1]; j++)
			t.v[j * m->dim[0] + i] = m->v[i * m->dim[1] + j];
	matrix_free(m);
	*m = t;
	return 0;
}

/* rows [r0, r0 + rows) of m, as a matrix of its own */
static int take_rows(matrix *dst, const matrix *m, size_t r0, size_t rows)
{
	const size_t cols = m->rank == 2 ? m->dim[1] : 1;

	if (matrix_alloc(dst, m->rank, rows, cols, 1))
		return -1;
	memcpy(dst->v, m->v + r0 * cols, rows * cols * sizeof(double));
	return 0;
}

/*
 * E, nn.MultiheadAttention's embed_dim, as the weights given under its names
 * tell it (in_proj_weight is (3E, E), q_proj_weight (E, E)), *from naming
 * the one that told it; 0 when none does.
 */
static size_t torch_width(const weights *w, const char **from, char *shape, size_t size)
{
	if (w->in_proj_w.rank == 2 && w->in_proj_w.dim[0] == 3 * w->in_proj_w.dim[1]) {
		*from = "in_proj_weight";
		matrix_shape(&w->in_proj_w, shape, size);
		return w->in_proj_w.dim[1];
	}
	if ((w->torch_named & (1u << WQ)) && w->m[WQ].rank == 2 &&
	    w->m[WQ].dim[0] == w->m[WQ].dim[1]) {
		*from = "q_proj_weight";
		matrix_shape(&w->m[WQ], shape, size);
		return w->m[WQ].dim[0];
	}
	*from = NULL;
	return 0;
}

/* in_proj_weight (3E, E) and in_proj_bias (3E): W_Q, W_K, W_V and their biases */
static int split_in_proj(weights *w)
{
	char shape[64], e_shape[64];
	const char *e_from;
	const size_t e = torch_width(w, &e_from, e_shape, sizeof(e_shape));

	if (w->in_proj_w.rank) {
		const matrix *p = &w->in_proj_w;

		for (int i = WQ; i <= WV; i++)
			if (weights_has(w, i))
				return error("%s: in_proj_weight and %s (%s) both give %s", w->in_proj_src[0],
					     weight_names[i], w->src[i], weight_names[i]);
		/* (3E, E) exactly: a 6x4 one would split into three 2x4 projections */
		if (p->rank != 2 || p->dim[0] != 3 * p->dim[1])
			return error("%s: in_proj_weight is %s, expected (3*E, E): W_Q, W_K and W_V "
				     "stacked", w->in_proj_src[0], matrix_shape(p, shape, sizeof(shape)));
		for (int i = WQ; i <= WV; i++) {
			matrix part;

			if (take_rows(&part, p, (size_t)(i - WQ) * (p->dim[0] / 3), p->dim[0] / 3) ||
			    put(w, i, &part, w->in_proj_src[0], 0))
				return -1;
		}
	}
	if (w->in_proj_b.rank) {
		const matrix *p = &w->in_proj_b;

		for (int i = BQ; i <= BV; i++)
			if (weights_has(w, i))
				return error("%s: in_proj_bias and %s (%s) both give %s", w->in_proj_src[1],
					     weight_names[i], w->src[i], weight_names[i]);
		if (p->rank != 1 || p->dim[0] % 3)
			return error("%s: in_proj_bias is %s, expected a vector of 3*E: b_Q, b_K and "
				     "b_V one after another", w->in_proj_src[1],
				     matrix_shape(p, shape, sizeof(shape)));
		if (e && p->dim[0] != 3 * e)
			return error("%s: in_proj_bias has %zu entries, expected 3*E = %zu (%s is %s)",
				     w->in_proj_src[1], p->dim[0], 3 * e, e_from, e_shape);
		for (int i = BQ; i <= BV; i++) {
			matrix part;

			if (take_rows(&part, p, (size_t)(i - BQ) * (p->dim[0] / 3), p->dim[0] / 3) ||
			    put(w, i, &part, w->in_proj_src[1], 0))
				return -1;
		}
	}
	return 0;
}

/*
 * The weights given under nn.MultiheadAttention's other names, held to its
 * shapes (out, in): q_proj_weight (E, E), k_proj_weight (E, kdim),
 * v_proj_weight (E, vdim), out_proj.weight (E, E), out_proj.bias (E).
 * mha's own names under --layout torch are any (out, in) nn.Linear weight.
 */
static int torch_shapes(const weights *w)
{
	static const char *const names[N_WEIGHTS] = {
		[WQ] = "q_proj_weight", [WK] = "k_proj_weight", [WV] = "v_proj_weight",
		[WO] = "out_proj.weight", [BO] = "out_proj.bias",
	};
	char shape[64], e_shape[64];
	const char *e_from;
	const size_t e = torch_width(w, &e_from, e_shape, sizeof(e_shape));

	for (int i = WQ; i <= WO; i++) {
		const matrix *m = &w->m[i];
		const int square = i == WQ || i == WO;

		/* a vector or per-head weights are refused in weights_finish, by name */
		if (!(w->torch_named & (1u << i)) || m->rank != 2)
			continue;
		if (square && m->dim[0] != m->dim[1])
			return error("%s: %s is %s, expected (E, %s)", w->src[i], names[i],
				     matrix_shape(m, shape, sizeof(shape)),
				     square ? "E" : i == WK ? "kdim" : "vdim");
		if (e && m->dim[0] != e)
			return error("%s: %s is %s, expected (E, %s) with E = %zu (%s is %s)", w->src[i],
				     names[i], matrix_shape(m, shape, sizeof(shape)),
				     square ? "E" : i == WK ? "kdim" : "vdim", e, e_from, e_shape);
	}
	if ((w->torch_named & (1u << BO)) && e && matrix_size(&w->m[BO]) != e)
		return error("%s: out_proj.bias has %zu entries, expected E = %zu (%s is %s)",
			     w->src[BO], matrix_size(&w->m[BO]), e, e_from, e_shape);
	return 0;
}

/* (h, d_in, d) per-head matrices side by side: (d_in, h·d) */
static int heads_to_columns(matrix *m)
{
	const size_t h = m->dim[0], rows = m->dim[1], d = m->dim[2];
	matrix t;

	if (matrix_alloc(&t, 2, rows, h * d, 1))
		return -1;
	for (size_t k = 0; k < h; k++)
		for (size_t r = 0; r < rows; r++)
			memcpy(t.v + r * h * d + k * d, m->v + (k * rows + r) * d, d * sizeof(double));
	matrix_free(m);
	*m = t;
	return 0;
}

int weights_finish(weights *w, size_t heads, size_t kv_heads)
{
	char shape[64];

	/* what is rearranged below is rearranged in doubles; the rest of
	 * what --dtype f32 read as floats stays floats */
	if (matrix_widen(&w->in_proj_w) || matrix_widen(&w->in_proj_b))
		return -1;
	for (int i = WQ; i <= BO; i++)
		if ((w->layout == LAYOUT_TORCH || (w->m[i].rank == 3 && i != WO)) &&
		    matrix_widen(&w->m[i]))
			return -1;
	if (split_in_proj(w) || (w->layout == LAYOUT_TORCH && torch_shapes(w)))
		return -1;
	for (int i = WQ; i <= WO; i++) {
		matrix *m = &w->m[i];
		const size_t want = (i == WK || i == WV) ? kv_heads : heads;

		if (!m->rank)
			continue;
		if (m->rank == 1)
			return error("%s: %s is a vector, expected a matrix", w->src[i], weight_names[i]);
		if (w->layout == LAYOUT_TORCH) {
			if (m->rank == 3)
				return error("%s: %s is %s: per-head 3-D weights are read in mha's layout, "
					     "not with --layout torch", w->src[i], weight_names[i],
					     matrix_shape(m, shape, sizeof(shape)));
			/* nn.Linear keeps (out, in) and computes x·Wᵀ */
			if (transpose(m))
				return -1;
			continue;
		}
		if (m->rank == 3) {
			/* one head, as when --heads is left out: the array says how many */
			if (m->dim[0] != want && want == 1)
				return error("%s: %s is %s: one matrix per head for %zu %sheads, but the "
					     "run has 1: add --%sheads %zu", w->src[i], weight_names[i],
					     matrix_shape(m, shape, sizeof(shape)), m->dim[0],
					     want == heads ? "" : "key/value ", want == heads ? "" : "kv-",
					     m->dim[0]);
			if (m->dim[0] != want)
				return error("%s: %s is %s, one matrix per head, but there %s %zu %shead%s",
					     w->src[i], weight_names[i], matrix_shape(m, shape, sizeof(shape)),
					     want == 1 ? "is" : "are", want,
					     (i == WK || i == WV) ? "key/value " : "", want == 1 ? "" : "s");
			if (i == WO) {
				/* (H, d_v, d_out): W_O's row blocks, already in order */
				m->rank = 2;
				m->dim[0] *= m->dim[1];
				m->dim[1] = m->dim[2];
				m->dim[2] = 1;
			} else if (heads_to_columns(m)) {
				return -1;
			}
		}
	}
	for (int i = BQ; i <= BO; i++) {
		matrix *m = &w->m[i];
		const size_t want = (i == BK || i == BV) ? kv_heads : heads;

		if (!m->rank || m->rank == 1)
			continue;
		if (m->rank == 3)
			return error("%s: %s is %s, expected a vector", w->src[i], weight_names[i],
				     matrix_shape(m, shape, sizeof(shape)));
		/* one row or one column; or for b_Q, b_K, b_V one row per head */
		if (m->dim[0] != 1 && m->dim[1] != 1 && (i == BO || m->dim[0] != want))
			return error("%s: %s is %s, expected a vector%s", w->src[i], weight_names[i],
				     matrix_shape(m, shape, sizeof(shape)),
				     i == BO ? "" : " (or one row per head)");
		m->dim[0] *= m->dim[1];
		m->dim[1] = 1;
		m->rank = 1;
	}
	return 0;
}

void weights_free(weights *w)
{
	if (!w)
		return;
	for (int i = 0; i < N_WEIGHTS; i++) {
		matrix_free(&w->m[i]);
		free(w->src[i]);
		w->src[i] = NULL;
	}
	matrix_free(&w->in_proj_w);
	matrix_free(&w->in_proj_b);
	free(w->in_proj_src[0]);
	free(w->in_proj_src[1]);
	w->in_proj_src[0] = w->in_proj_src[1] = NULL;
}

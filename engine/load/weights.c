/*
 * weights.c: read the weights, from a JSON object, a directory or one file
 * per option, and bring them to the library's one layout.
 *
 * Names are matched loosely (W_Q, WQ, W^Q, Wq and wq are one key) but never
 * guessed: anything else is refused by name, so a typo cannot silently drop
 * a weight.
 */
#include "load/weights.h"
#include "util/msg.h"
#include "util/opts.h"
#include "read/input.h"
#include "read/named.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/* how a weight's own file is read: float32 kept (--dtype f32), .npy mapped */
static unsigned read_flags(const weights *w)
{
	return (w->floats ? READ_F32 : 0) | (w->map ? READ_MAP : 0);
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

/*
 * -w's set: a JSON object's keys, an archive's members or a folder's files,
 * one weight a name.  src says where a JSON object or an archive came from
 * ("-w w.json"); a folder's weights each say their own file.
 */
static int load_set(weights *w, named_set *set, const char *src)
{
	const int dir = set->kind == NAMED_DIR;
	const char *given[UNSUPPORTED] = { NULL };
	named_entry e;
	size_t found = 0;
	int rc = 0;

	if (set->kind == NAMED_NPZ && named_count(set) == 0)
		return error("%s: an empty archive: expected members W_Q, W_K, W_V (and optionally "
			     "W_O, b_Q, b_K, b_V, b_O)", set->in.name);
	while (!rc && named_next(set, &e)) {
		const int slot = slot_of(e.name, w->layout, dir ? e.path : set->in.name);
		/* a folder's file is read as --wq's would be, keys and all */
		const char *const keys[] = { slot >= 0 ? slot_name(slot) : NULL, NULL };
		const read_spec spec = { keys[0], dir ? keys : NULL, 1, 3, dir ? read_flags(w) : 0 };
		char file_src[PATH_TEXT];
		matrix m;

		if (slot < 0) {
			rc = -1;
			break;
		}
		if (dir) {
			/* two files for one weight: put() says "given twice" */
			snprintf(file_src, sizeof(file_src), "-w %s", e.path);
		} else if (given[slot]) {
			/* one key twice was refused by json_parse: two spellings */
			rc = error("%s: \"%s\" and \"%s\" are both %s", set->in.name, given[slot],
				   e.name, slot_name(slot));
			break;
		} else {
			given[slot] = e.name;
		}
		if (named_read(set, &e, &m, &spec) || put(w, slot, &m, dir ? file_src : src, 0)) {
			rc = -1;
			break;
		}
		found++;
		if (is_torch_key(e.name))
			w->torch_named |= 1u << slot;
	}
	if (!rc && dir && !found)
		return error("%s: no weight files in the directory (expected W_Q.csv, W_K.npy, "
			     "W_V.json and the like)", set->path);
	return rc;
}

int weights_files(const char *path, int (*fn)(void *ctx, const char *file), void *ctx)
{
	named_set set;
	named_entry e;
	int rc = 0;

	if (!is_dir(path))
		return fn(ctx, path);
	if (named_dir(&set, path, NAMED_DATA_FILES))
		rc = errno == ENOMEM ? error("out of memory") : 0; /* the reading says why */
	/* the names load_set() reads them by */
	while (!rc && named_next(&set, &e))
		rc = fn(ctx, e.path);
	named_close(&set);
	return rc;
}

int weights_load(weights *w, const char *path, weight_layout layout)
{
	named_set set;
	char src[PATH_TEXT];
	int rc;

	w->layout = layout;
	snprintf(src, sizeof(src), "-w %s", strcmp(path, "-") ? path : "<stdin>");
	if (is_dir(path)) {
		rc = named_dir(&set, path, NAMED_DATA_FILES)
			     ? (errno == ENOMEM ? error("out of memory")
						: error("%s: cannot read the directory", path))
			     : load_set(w, &set, src);
	} else if (named_file(&set, path)) {
		rc = -1;
	} else if (set.kind == NAMED_OTHER) {
		rc = error("%s: a weights file is one JSON object or a .npz archive; for CSV or "
			   ".npy weights give one file per weight (--wq, --wk, … or -w DIR)", set.in.name);
	} else if (set.kind == NAMED_VALUE) {
		rc = error("%s: expected an object with keys W_Q, W_K, W_V (and optionally W_O, "
			   "b_Q, b_K, b_V, b_O)", set.in.name);
	} else {
		rc = load_set(w, &set, src);
	}
	named_close(&set);
	return rc;
}

int weights_load_one(weights *w, int which, const char *opt, const char *path,
		     weight_layout layout)
{
	char src[PATH_TEXT];

	const char *const keys[] = { slot_name(which), NULL };
	const read_spec spec = { slot_name(which), keys, 1, 3, read_flags(w) };
	matrix m;

	w->layout = layout;
	snprintf(src, sizeof(src), "%s %s", opt, strcmp(path, "-") ? path : "<stdin>");
	if (read_matrix(&m, path, &spec))
		return -1;
	return put(w, which, &m, src, 1);
}

/* ---- one layout -------------------------------------------------------- */

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
			if (matrix_transpose(m))
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

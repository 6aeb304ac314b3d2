/*
 * cmd/init.c: 'mha init', a random X and random weights of a given shape,
 * so that a tutorial or a benchmark can start from one command line:
 *
 *   mha init --heads 2 -x x.json -w weights.json
 *   mha forward -x x.json -w weights.json --heads 2
 *
 * The numbers come from a generator written out here (splitmix64 seeding
 * xoshiro256**), not from rand(), and only operations IEEE 754 rounds
 * correctly (*, / and sqrt; no exp or log) turn them into doubles, so a
 * seed gives the same files, bit for bit, on every machine and C library.
 *
 * Nothing here is attention: the shapes are the ones 'mha forward' reads,
 * and the files are written with the same writers it uses.
 */
#include "base/cli.h"
#include "util/files.h"
#include "write/emit.h"
#include "util/matrix.h"
#include "base/outfile.h"
#include "write/write.h"
#include "write/zip.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char init_usage[] =
	"usage: mha init [-x FILE] [-w FILE|DIR] [--kv FILE --kv-n M] [options]\n"
	"\n"
	"Write a random X and random weights of a given shape, to start from:\n"
	"  mha init --heads 2 -x x.json -w weights.json\n"
	"  mha forward -x x.json -w weights.json --heads 2\n"
	"\n"
	"Shape:\n"
	"      --n N             rows of X (default 6)\n"
	"      --d-model D       columns of X (default 4)\n"
	"      --heads H         query heads (default 1)\n"
	"      --kv-heads G      key/value heads (default H; G divides H)\n"
	"      --d-k K           columns of each head's Q and K (default D/H, which\n"
	"                        must then be whole)\n"
	"      --d-v V           columns of each head's V (default d_k)\n"
	"      --d-out C         columns of W_O, so of the output (default D)\n"
	"      --no-wo           no W_O: the output is the heads side by side\n"
	"      --bias            write b_Q, b_K, b_V and b_O too\n"
	"      --kv-n M          rows of X_kv, the keys' and values' source in\n"
	"                        cross-attention (needs --kv)\n"
	"\n"
	"Output (at least one of -x and -w; '-' is standard output, for one file):\n"
	"  -x, --x FILE          X, n x D\n"
	"  -w, --weights FILE    W_Q (D x H*d_k), W_K (D x G*d_k), W_V (D x G*d_v),\n"
	"                        W_O (H*d_v x d_out) and the biases: one JSON object\n"
	"                        (w.json) or NumPy archive (w.npz); a directory\n"
	"                        (w/, created if missing, or one that exists) gets\n"
	"                        a file each, W_Q.csv, W_K.csv, ... (csv, npy, json)\n"
	"      --kv FILE         X_kv, M x D (with --kv-n)\n"
	"  -f, --format FMT      json, csv, npy or npz, for the names that do not say\n"
	"                        (a name's .json .csv .npy .npz decides its own\n"
	"                        format; another is refused); default: -x's format,\n"
	"                        else json, and csv for a directory\n"
	"      --seed S          seed, 0 to 2^64-1 (default 1)\n"
	"  -h, --help            show this help\n"
	"\n"
	"The numbers: X is uniform on [-sqrt(3), sqrt(3)), so mean 0 and variance 1;\n"
	"each weight, rows x cols, is Xavier uniform on [-a, a) with a =\n"
	"sqrt(6/(rows+cols)); each bias is uniform on [-b, b) with b = 1/sqrt(rows of\n"
	"its weight), as in PyTorch's nn.Linear.  xoshiro256**, seeded by splitmix64,\n"
	"draws them row by row in the order X, X_kv, W_Q, W_K, W_V, W_O, b_Q, b_K,\n"
	"b_V, b_O, drawing X even when it is not written: a seed gives the same\n"
	"numbers on every machine, and --bias or leaving out -x or -w changes none\n"
	"of the others.\n"
	"\n"
	"Exit status: 0 success, 1 a file could not be written, 2 bad command line.\n";

/* The most numbers in one matrix: 16 GiB of doubles, and far past any tutorial. */
#define MAX_NUMBERS ((uint64_t)1 << 31)

/* Every matrix init can write, in the order their numbers are drawn. */
enum { M_X, M_XKV, M_WQ, M_WK, M_WV, M_WO, M_BQ, M_BK, M_BV, M_BO, M_COUNT };

static const char *const names[M_COUNT] = {
	"X", "X_kv", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
};

static int is_weight(int m)
{
	return m >= M_WQ;
}

typedef enum { INIT_JSON, INIT_CSV, INIT_NPY, INIT_NPZ, INIT_FROM_NAME } init_format;

static const char *const format_names[] = { "json", "csv", "npy", "npz" };

struct options {
	size_t n, d_model, heads, kv_heads, d_k, d_v, d_out, kv_n; /* 0: not given */
	int no_wo, bias;
	uint64_t seed;
	const char *x, *w, *kv;  /* where to write; NULL: not written */
	init_format format;
};

/* Where one output goes.  With JSON, every weight goes to dest[M_WQ]. */
struct dest {
	outfile *of; /* a member of the run's set; NULL: not opened */
	char *path;  /* owned: a file in the -w directory; NULL otherwise */
};

/* the outputs, each with its own format: -x, --kv, -w */
enum { OUT_X, OUT_KV, OUT_W, OUT_COUNT };

struct run {
	struct options o;
	init_format format[OUT_COUNT]; /* each output's (-w's: its files' in a directory) */
	int w_dir;                     /* -w is a directory, a file per weight */
	zip_writer zip[OUT_COUNT];     /* npz: each output's archive */
	size_t rank[M_COUNT], dim[M_COUNT][2]; /* each matrix's shape: (rows, cols) or (len) */
	double bound[M_COUNT];                 /* its numbers are uniform on [-bound, bound) */
	int drawn[M_COUNT];                    /* its numbers are drawn (it exists) */
	int written[M_COUNT];                  /* and written somewhere */
	struct dest dest[M_COUNT];
	outset files;                          /* every dest's file, committed as one */
	int made_dir;                          /* this run created the -w directory */
	writer json;                           /* the weights' JSON object, once begun */
	int json_begun;
};

/* ---- the random numbers ------------------------------------------------ */

/*
 * xoshiro256** (Blackman and Vigna, 2018), its four words of state filled
 * by splitmix64 from the seed, as the authors recommend.  Both are written
 * out here so that no C library's generator decides what a seed means.
 */
typedef struct rng {
	uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
	/* splitmix64 is a bijection of its counter: four outputs are never all
	 * zero, the one state xoshiro cannot leave */
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
	uint64_t *s = r->s;
	const uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

/* uniform on [-a, a) */
static double uniform(rng *r, double a)
{
	/* u = k/2^53 is exact, and so is 2u - 1 (a multiple of 2^-52 in
	 * [-1, 1)): the one rounding is the product, which stays below a */
	const double u = (double)(rng_next(r) >> 11) * 0x1.0p-53;

	return a * (2.0 * u - 1.0);
}

/* ---- options ----------------------------------------------------------- */

static int parse_seed(const char *arg, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (*arg < '0' || *arg > '9')
		goto bad;
	v = strtoull(arg, &end, 10);
	if (errno || *end || v > UINT64_MAX)
		goto bad;
	*out = (uint64_t)v;
	return 0;
bad:
	usage_error("init", "--seed expects a whole number from 0 to %llu, not '%s'",
		    (unsigned long long)UINT64_MAX, arg);
	return -1;
}

/* the format name says (emit.h), or INIT_FROM_NAME when not one init writes */
static init_format format_of_name(const char *name)
{
	switch (emit_format_of_name(name)) {
	case FORMAT_JSON: return INIT_JSON;
	case FORMAT_CSV: return INIT_CSV;
	case FORMAT_NPY: return INIT_NPY;
	case FORMAT_NPZ: return INIT_NPZ;
	default: return INIT_FROM_NAME;
	}
}

static int parse_options(int argc, char **argv, struct options *o)
{
	enum { O_N = 256, O_D_MODEL, O_HEADS, O_KV_HEADS, O_D_K, O_D_V, O_D_OUT, O_NO_WO,
	       O_BIAS, O_KV_N, O_KV, O_SEED };
	static const struct option longopts[] = {
		{ "n", required_argument, NULL, O_N },
		{ "d-model", required_argument, NULL, O_D_MODEL },
		{ "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV_HEADS },
		{ "d-k", required_argument, NULL, O_D_K },
		{ "d-v", required_argument, NULL, O_D_V },
		{ "d-out", required_argument, NULL, O_D_OUT },
		{ "no-wo", no_argument, NULL, O_NO_WO },
		{ "bias", no_argument, NULL, O_BIAS },
		{ "kv-n", required_argument, NULL, O_KV_N },
		{ "kv", required_argument, NULL, O_KV },
		{ "seed", required_argument, NULL, O_SEED },
		{ "x", required_argument, NULL, 'x' },
		{ "weights", required_argument, NULL, 'w' },
		{ "format", required_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, idx = 0;

	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->format = INIT_FROM_NAME;
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:f:h", longopts, &idx)) != -1) {
		size_t *count = NULL;

		switch (c) {
		case O_N: count = &o->n; break;
		case O_D_MODEL: count = &o->d_model; break;
		case O_HEADS: count = &o->heads; break;
		case O_KV_HEADS: count = &o->kv_heads; break;
		case O_D_K: count = &o->d_k; break;
		case O_D_V: count = &o->d_v; break;
		case O_D_OUT: count = &o->d_out; break;
		case O_KV_N: count = &o->kv_n; break;
		case O_NO_WO: o->no_wo = 1; break;
		case O_BIAS: o->bias = 1; break;
		case O_KV: o->kv = optarg; break;
		case 'x': o->x = optarg; break;
		case 'w': o->w = optarg; break;
		case O_SEED:
			if (parse_seed(optarg, &o->seed))
				return -1;
			break;
		case 'f':
			o->format = INIT_FROM_NAME;
			for (int f = INIT_JSON; f <= INIT_NPZ; f++)
				if (!strcmp(optarg, format_names[f]))
					o->format = (init_format)f;
			if (o->format == INIT_FROM_NAME) {
				usage_error("init", "--format takes json, csv, npy or npz, not '%s'",
					    optarg);
				return -1;
			}
			break;
		case 'h':
			fputs(init_usage, stdout);
			return 1;
		default: /* ':' or '?' */
			opt_error("init", c, argv, longopts);
			return -1;
		}
		if (count) {
			char opt[16];

			snprintf(opt, sizeof(opt), "--%s", longopts[idx].name);
			if (opt_count("init", opt, optarg, MAX_NUMBERS, count))
				return -1;
		}
	}
	if (optind < argc) {
		usage_error("init", "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

/* ---- shapes ------------------------------------------------------------ */

/* rows x cols numbers, each at most 2^62 (a product of two options), must fit */
static int check_count(int m, uint64_t rows, uint64_t cols, const char *how)
{
	if (rows <= MAX_NUMBERS && cols <= MAX_NUMBERS && rows * cols <= MAX_NUMBERS)
		return 0;
	usage_error("init", "%s would be %llux%llu (%s): more than %llu numbers, the most mha "
		    "init writes in one matrix", names[m], (unsigned long long)rows,
		    (unsigned long long)cols, how, (unsigned long long)MAX_NUMBERS);
	return -1;
}

static void shape(struct run *r, int m, size_t rows, size_t cols, double bound)
{
	r->drawn[m] = 1;
	r->rank[m] = 2;
	r->dim[m][0] = rows;
	r->dim[m][1] = cols;
	r->bound[m] = bound;
}

/* Xavier/Glorot uniform: a = sqrt(6 / (fan_in + fan_out)) */
static void weight(struct run *r, int m, size_t rows, size_t cols)
{
	shape(r, m, rows, cols, sqrt(6.0 / ((double)rows + (double)cols)));
}

/* nn.Linear's bias: b = 1/sqrt(fan_in), fan_in the rows of its weight */
static void bias(struct run *r, int b, int w)
{
	shape(r, b, r->dim[w][1], 1, 1.0 / sqrt((double)r->dim[w][0]));
	r->rank[b] = 1;
}

/* m's output: -x, --kv or -w */
static int out_of(int m)
{
	return m == M_X ? OUT_X : m == M_XKV ? OUT_KV : OUT_W;
}

/*
 * Each output's format, as 'mha forward' reads names: a name's extension
 * decides its own format, --format the format of the names that do not say
 * (a name that says another is refused), and -w is a directory only when it
 * ends in '/' or is one already, never because of a format.
 */
static int plan_formats(struct run *r)
{
	const struct options *o = &r->o;
	const char *const opt[OUT_COUNT] = { "-x", "--kv", "-w" };
	const char *const path[OUT_COUNT] = { o->x, o->kv, o->w };
	init_format dflt = o->format;

	if (dflt == INIT_FROM_NAME)
		dflt = o->x && format_of_name(o->x) != INIT_FROM_NAME ? format_of_name(o->x)
								       : INIT_JSON;
	for (int i = 0; i < OUT_COUNT; i++) {
		const init_format named = path[i] ? format_of_name(path[i]) : INIT_FROM_NAME;
		init_format *f = &r->format[i];

		if (!path[i])
			continue;
		if (named != INIT_FROM_NAME && o->format != INIT_FROM_NAME && named != o->format)
			return usage_error("init", "%s '%s' is named as %s but --format is %s", opt[i],
					   path[i], format_names[named], format_names[o->format]);
		*f = named != INIT_FROM_NAME ? named : dflt;
		if (i == OUT_W && strcmp(path[i], "-") && emit_is_dir(path[i])) {
			r->w_dir = 1;
			if (o->format == INIT_FROM_NAME)
				*f = dflt == INIT_NPZ ? INIT_CSV : dflt;
			if (*f == INIT_NPZ)
				return usage_error("init", "-w '%s' is a directory, a file per weight, and "
						   "npz is one archive: give -w w.npz, or --format "
						   "csv, npy or json", path[i]);
			continue;
		}
		if (*f == INIT_NPZ && !strcmp(path[i], "-"))
			return usage_error("init", "%s -: npz is binary, written to a file: give %s "
					   "FILE.npz", opt[i], opt[i]);
		if (i == OUT_W && (*f == INIT_CSV || *f == INIT_NPY)) {
			if (named != INIT_FROM_NAME)
				return usage_error("init", "-w '%s': a .%s file holds one matrix and the "
						   "weights are several: give a directory (-w DIR/) "
						   "or one file (-w w.json, -w w.npz)", path[i],
						   format_names[named]);
			return usage_error("init", "-w '%s': %s weights are a directory, a file "
					   "each: give -w %s/ (or one file, -w w.json or -w "
					   "w.npz)", path[i], format_names[*f],
					   strcmp(path[i], "-") ? path[i] : "DIR");
		}
	}
	return 0;
}

/* What the options mean: every check here needs no file. */
static int plan(struct run *r)
{
	struct options *o = &r->o;
	const char *const opt[] = { "-x", "--kv", "-w" };
	const char *const path[] = { o->x, o->kv, o->w };
	size_t D, H, G;

	if (!o->x && !o->w)
		return usage_error("init", "nothing to write: give -x FILE, -w FILE or both");
	if (o->kv && !o->kv_n)
		return usage_error("init", "--kv needs --kv-n M, the rows of X_kv");
	if (o->kv_n && !o->kv)
		return usage_error("init", "--kv-n needs --kv FILE, where X_kv goes");
	if (o->no_wo && o->d_out)
		return usage_error("init", "--d-out and --no-wo cannot be used together (--d-out "
				   "is the columns of W_O)");
	for (int i = 0; i < 3; i++)
		for (int j = i + 1; j < 3; j++)
			if (path[i] && path[j] && !strcmp(path[i], path[j]))
				return usage_error("init", "%s and %s both name '%s'%s", opt[i], opt[j],
						   path[i], strcmp(path[i], "-") ? "" : " (standard output)");

	if (plan_formats(r))
		return -1;

	/* the dimensions, as 'mha forward --heads H --kv-heads G' reads them */
	D = o->d_model ? o->d_model : 4;
	H = o->heads ? o->heads : 1;
	G = o->kv_heads ? o->kv_heads : H;
	if (!o->n)
		o->n = 6;
	if (G > H || H % G)
		return usage_error("init", "--kv-heads %zu does not divide --heads %zu", G, H);
	if (!o->d_k) {
		if (D % H)
			return usage_error("init", "--heads %zu does not divide --d-model %zu: give "
					   "--d-k, the columns of each head", H, D);
		o->d_k = D / H;
	}
	if (!o->d_v)
		o->d_v = o->d_k;
	if (!o->d_out)
		o->d_out = D;

	/* each option is at most 2^31, so no product of two overflows */
	if (check_count(M_X, o->n, D, "n x d_model") ||
	    check_count(M_XKV, o->kv_n, D, "kv-n x d_model") ||
	    check_count(M_WQ, D, (uint64_t)H * o->d_k, "d_model x heads*d_k") ||
	    check_count(M_WK, D, (uint64_t)G * o->d_k, "d_model x kv-heads*d_k") ||
	    check_count(M_WV, D, (uint64_t)G * o->d_v, "d_model x kv-heads*d_v") ||
	    (!o->no_wo && check_count(M_WO, (uint64_t)H * o->d_v, o->d_out, "heads*d_v x d_out")))
		return -1;

	/* sqrt(3): U(-a, a) has variance a^2/3 */
	shape(r, M_X, o->n, D, sqrt(3.0));
	if (o->kv_n)
		shape(r, M_XKV, o->kv_n, D, sqrt(3.0));
	weight(r, M_WQ, D, H * o->d_k);
	weight(r, M_WK, D, G * o->d_k);
	weight(r, M_WV, D, G * o->d_v);
	if (!o->no_wo)
		weight(r, M_WO, H * o->d_v, o->d_out);
	if (o->bias) {
		bias(r, M_BQ, M_WQ);
		bias(r, M_BK, M_WK);
		bias(r, M_BV, M_WV);
		if (!o->no_wo)
			bias(r, M_BO, M_WO);
	}
	for (int m = 0; m < M_COUNT; m++)
		r->written[m] = r->drawn[m] && (m == M_X ? o->x != NULL :
						m == M_XKV ? o->kv != NULL : o->w != NULL);
	return 0;
}

/* ---- the files --------------------------------------------------------- */

static struct dest *dest_of(struct run *r, int m)
{
	return &r->dest[is_weight(m) && !r->w_dir ? M_WQ : m];
}

static int open_dest(struct run *r, struct dest *d, const char *path)
{
	return (d->of = outset_open(&r->files, path)) ? 0 : -1;
}

/* Throw away every file not yet committed. */
static void discard(struct run *r)
{
	outset_abort(&r->files);
	for (int m = 0; m < M_COUNT; m++)
		r->dest[m].of = NULL;
	for (int i = 0; i < OUT_COUNT; i++)
		zip_free(&r->zip[i]);
	if (r->made_dir)
		rmdir(r->o.w);
	r->made_dir = 0;
}

/* "wq" for W_Q.csv, wq.json, W^Q.npy and the other spellings forward accepts */
static void folded_stem(char *out, size_t size, const char *file)
{
	const char *dot = strrchr(file, '.');
	size_t n = 0;

	for (const char *p = file; *p && p != dot && n + 1 < size; p++)
		if (*p != '_' && *p != '^')
			out[n++] = (char)((*p >= 'A' && *p <= 'Z') ? *p - 'A' + 'a' : *p);
	out[n] = '\0';
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Weight files left in the directory by an earlier run (b_O.csv when this
 * one has no --bias, W_Q.npy when it writes W_Q.csv) would be read by
 * 'mha forward -w DIR' along with the new ones: refuse, naming them all,
 * rather than delete what this run did not write.
 */
static int check_leftovers(struct run *r, const char *ext)
{
	DIR *dir = opendir(r->o.w);
	struct dirent *e;
	char **old = NULL, list[256] = "";
	size_t n = 0, used = 0;
	int rc = 0;

	if (!dir)
		return error("%s: %s", r->o.w, strerror(errno));
	while (rc == 0 && (e = readdir(dir)) != NULL) {
		char stem[8], mine[16];

		if (e->d_name[0] == '.' || strlen(e->d_name) > 16 ||
		    format_of_name(e->d_name) == INIT_FROM_NAME)
			continue;
		folded_stem(stem, sizeof(stem), e->d_name);
		for (int m = M_WQ; m < M_COUNT; m++) {
			const char want[3] = { (char)(names[m][0] | 0x20), (char)(names[m][2] | 0x20), 0 };
			char **more;

			if (strcmp(stem, want))
				continue;
			snprintf(mine, sizeof(mine), "%s.%s", names[m], ext);
			if (r->written[m] && !strcmp(e->d_name, mine))
				break;
			more = realloc(old, (n + 1) * sizeof(*old));
			if (!more || !(more[n] = strdup(e->d_name))) {
				old = more ? more : old;
				rc = error("out of memory");
				break;
			}
			old = more;
			n++;
			break;
		}
	}
	closedir(dir);
	if (rc == 0 && n) {
		/* sorted, so the message does not depend on the order readdir() gives */
		qsort(old, n, sizeof(*old), by_name);
		for (size_t i = 0; i < n && used < sizeof(list); i++) {
			int k = snprintf(list + used, sizeof(list) - used, "%s%s",
					 i == 0 ? "" : i + 1 == n ? " and " : ", ", old[i]);

			used += k > 0 ? (size_t)k : 0;
		}
		rc = error("'%s' holds %s from before, which this run does not write; 'mha forward "
			   "-w %s' would read %s too: remove %s or use another directory", r->o.w,
			   list, r->o.w, n == 1 ? "it" : "them", n == 1 ? "it" : "them");
	}
	for (size_t i = 0; i < n; i++)
		free(old[i]);
	free(old);
	return rc;
}

/* -w DIR for csv and npy: make it if missing, then a file per weight */
static int open_weight_dir(struct run *r)
{
	const char *dir = r->o.w, *ext = format_names[r->format[OUT_W]];
	char name[16];

	if (emit_make_dir(dir, &r->made_dir))
		return -1;
	if (!r->made_dir && !is_dir(dir)) /* "-" was refused with the options */
		return error("'%s' is not a directory: in %s the weights are a directory, one "
			     "file each", dir, ext);
	if (check_leftovers(r, ext))
		return -1;
	for (int m = M_WQ; m < M_COUNT; m++) {
		struct dest *d = &r->dest[m];

		if (!r->written[m])
			continue;
		snprintf(name, sizeof(name), "%s.%s", names[m], ext);
		d->path = emit_path(dir, name);
		if (!d->path)
			return error("out of memory");
		if (open_dest(r, d, d->path))
			return -1;
	}
	return 0;
}

static int open_all(struct run *r)
{
	if (r->o.x && open_dest(r, &r->dest[M_X], r->o.x))
		return -1;
	if (r->o.kv && open_dest(r, &r->dest[M_XKV], r->o.kv))
		return -1;
	if (r->o.w && (r->w_dir ? open_weight_dir(r) : open_dest(r, &r->dest[M_WQ], r->o.w)))
		return -1;
	for (int m = 0; m < M_COUNT; m++)
		if (r->dest[m].of && r->format[out_of(m)] == INIT_NPZ)
			r->zip[out_of(m)].fp = r->dest[m].of->fp;
	return 0;
}

/* as outfile_commit() words a failed write */
static int write_failed(const struct dest *d, int e)
{
	const char *path = d->of->path;

	if (!path)
		return error("error writing to standard output: %s", e ? strerror(e) : "write failed");
	return error("%s: write failed: %s", path, e ? strerror(e) : "unknown error");
}

/* one matrix as an .npz member's .npy bytes */
static void npz_fill(const npy_sink *s, void *arg)
{
	const matrix *a = arg;

	npy_put_parts(s, NULL, 0, &a, 1, 0);
}

static int write_one(struct run *r, int m, const matrix *a)
{
	struct dest *d = dest_of(r, m);
	FILE *fp = d->of->fp;
	int rc = 0;

	errno = 0;
	switch (r->format[out_of(m)]) {
	case INIT_JSON:
		if (is_weight(m)) {
			if (!r->json_begun) {
				r->json = (writer){ .fp = fp, .format = FORMAT_JSON };
				out_begin(&r->json);
				r->json_begun = 1;
			}
			out_matrix(&r->json, names[m], names[m], a);
		} else {
			/* "X", as 'mha forward -x' and '--kv' look for it */
			writer w = { .fp = fp, .format = FORMAT_JSON };

			out_begin(&w);
			out_matrix(&w, "X", "X", a);
			out_end(&w);
		}
		break;
	case INIT_CSV:
		rc = csv_write(fp, a);
		break;
	case INIT_NPZ: {
		/* "X", as 'mha forward -x' and '--kv' look for it, and the weights' names */
		char name[16];

		snprintf(name, sizeof(name), "%s.npy", is_weight(m) ? names[m] : "X");
		if (zip_add(&r->zip[out_of(m)], name, npz_fill, (void *)a))
			return -1;
		break;
	}
	default:
		rc = npy_write(fp, a);
		break;
	}
	if (rc || ferror(fp))
		return write_failed(d, errno);
	return 0;
}

/* Draw every matrix in order; write those asked for, one at a time. */
static int generate(struct run *r)
{
	rng g;
	int last = -1;

	rng_seed(&g, r->o.seed);
	for (int m = 0; m < M_COUNT; m++)
		if (r->written[m])
			last = m;
	for (int m = 0; m <= last; m++) {
		const size_t count = r->dim[m][0] * r->dim[m][1];
		matrix a = { 0 };

		if (!r->drawn[m])
			continue;
		if (!r->written[m]) {
			/* drawn all the same, so that -x and -w agree across runs */
			for (size_t i = 0; i < count; i++)
				rng_next(&g);
			continue;
		}
		if (matrix_alloc(&a, r->rank[m], r->dim[m][0], r->dim[m][1], 1))
			return -1;
		for (size_t i = 0; i < count; i++)
			a.v[i] = uniform(&g, r->bound[m]);
		if (write_one(r, m, &a)) {
			matrix_free(&a);
			return -1;
		}
		matrix_free(&a);
	}
	if (r->json_begun)
		out_end(&r->json);
	for (int i = 0; i < OUT_COUNT; i++)
		if (r->zip[i].fp)
			zip_finish(&r->zip[i]);
	return 0;
}

/* Every file complete before any is renamed into place (outset): a write
 * error (a full disk) leaves nothing new behind. */
static int commit_all(struct run *r)
{
	const int rc = outset_commit(&r->files);

	for (int m = 0; m < M_COUNT; m++)
		r->dest[m].of = NULL;
	for (int i = 0; i < OUT_COUNT; i++)
		zip_free(&r->zip[i]);
	return rc;
}

int init_check_args(int argc, char **argv)
{
	struct run r;

	memset(&r, 0, sizeof(r));
	switch (parse_options(argc, argv, &r.o)) {
	case 1: return 1;
	case 0: break;
	default: return EXIT_USAGE;
	}
	return plan(&r) ? EXIT_USAGE : 0;
}

int cmd_init(int argc, char **argv)
{
	struct run r;
	int rc = EXIT_DATA;

	memset(&r, 0, sizeof(r));
	switch (parse_options(argc, argv, &r.o)) {
	case 1: return EXIT_OK;
	case 0: break;
	default: return EXIT_USAGE;
	}
	if (plan(&r))
		return EXIT_USAGE;
	if (open_all(&r) == 0 && generate(&r) == 0 && commit_all(&r) == 0)
		rc = EXIT_OK;
	if (rc != EXIT_OK)
		discard(&r);
	for (int m = 0; m < M_COUNT; m++)
		free(r.dest[m].path);
	return rc;
}

/*
 * fuzz_model.c: libFuzzer target for a checkpoint's JSON files, read as
 * 'mha forward -w DIR' reads them: model.safetensors.index.json (its
 * weight_map naming the shards) or Hugging Face's config.json, through
 * model_config() and model_load(), the public entry points (read_index()
 * and the config's readers are static in checkpoint.c and model.c).
 *
 * The first byte picks the options: bits 0-2 --layout (none, llama, gpt2,
 * bert, torch), bit 3 --layer, bit 4 layer 1 (else 0), bit 5 --prefix
 * model.layers.0.self_attn, bit 6 -w names the index file rather than the
 * folder, bit 7 the rest is config.json beside a good index (else the rest
 * is the index, with no config.json).  The rest is the file.
 *
 * The index names files in its folder, so this target needs a real folder:
 * one made with mkdtemp() under $TMPDIR (or /tmp) at the first input,
 * holding two small good shards (llama layers 0 and 1, GPT-2's layer 0),
 * its JSON file written over for each input and removed after it, the
 * folder removed at exit.  After a crash the folder is left behind with the
 * crashing input's file in it.
 */
#include "fuzz.h"
#include "load/model.h"
#include "load/problem.h"

#include <dirent.h>
#include <unistd.h>

static char dir[256];

/* the shards' tensors: name, rows, columns (float32 zeros but one) */
static const struct {
	const char *name;
	size_t rows, cols;
	int shard;
} tensors[] = {
	{ "model.layers.0.self_attn.q_proj.weight", 2, 2, 1 },
	{ "model.layers.0.self_attn.k_proj.weight", 2, 2, 1 },
	{ "model.layers.0.self_attn.v_proj.weight", 2, 2, 1 },
	{ "model.layers.0.self_attn.o_proj.weight", 2, 2, 1 },
	{ "h.0.attn.c_attn.weight", 2, 6, 1 },
	{ "h.0.attn.c_proj.weight", 2, 2, 1 },
	{ "model.layers.1.self_attn.q_proj.weight", 2, 2, 2 },
	{ "model.layers.1.self_attn.k_proj.weight", 2, 2, 2 },
	{ "model.layers.1.self_attn.v_proj.weight", 2, 2, 2 },
	{ "model.layers.1.self_attn.o_proj.weight", 2, 2, 2 },
	{ "model.layers.1.self_attn.q_proj.bias", 1, 2, 2 },
};
#define N_TENSORS (sizeof(tensors) / sizeof(tensors[0]))

static const char good_index[] =
	"{\"metadata\": {\"total_size\": 160}, \"weight_map\": {"
	"\"model.layers.0.self_attn.q_proj.weight\": \"model-00001-of-00002.safetensors\", "
	"\"model.layers.0.self_attn.k_proj.weight\": \"model-00001-of-00002.safetensors\", "
	"\"model.layers.0.self_attn.v_proj.weight\": \"model-00001-of-00002.safetensors\", "
	"\"model.layers.0.self_attn.o_proj.weight\": \"model-00001-of-00002.safetensors\", "
	"\"h.0.attn.c_attn.weight\": \"model-00001-of-00002.safetensors\", "
	"\"h.0.attn.c_proj.weight\": \"model-00001-of-00002.safetensors\", "
	"\"model.layers.1.self_attn.q_proj.weight\": \"model-00002-of-00002.safetensors\", "
	"\"model.layers.1.self_attn.k_proj.weight\": \"model-00002-of-00002.safetensors\", "
	"\"model.layers.1.self_attn.v_proj.weight\": \"model-00002-of-00002.safetensors\", "
	"\"model.layers.1.self_attn.o_proj.weight\": \"model-00002-of-00002.safetensors\", "
	"\"model.layers.1.self_attn.q_proj.bias\": \"model-00002-of-00002.safetensors\"}}";

static void put(const char *name, const void *data, size_t size)
{
	char path[400];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "wb");
	if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
		perror(path);
		abort();
	}
}

static void drop(const char *name)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

/* the folder emptied and removed */
static void cleanup(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			drop(e->d_name);
	if (d)
		closedir(d);
	rmdir(dir);
}

/* shard k (1 or 2): its tensors, F32, one 1.0 in each */
static void write_shard(int k)
{
	char header[2048], file[4096], name[64];
	size_t at = 0, used = 1, hlen;

	header[0] = '{';
	for (size_t i = 0; i < N_TENSORS; i++) {
		const size_t bytes = tensors[i].rows * tensors[i].cols * 4;

		if (tensors[i].shard != k)
			continue;
		if (tensors[i].rows == 1)
			used += (size_t)snprintf(header + used, sizeof(header) - used,
						 "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%zu], "
						 "\"data_offsets\": [%zu, %zu]}", used > 1 ? ", " : "",
						 tensors[i].name, tensors[i].cols, at, at + bytes);
		else
			used += (size_t)snprintf(header + used, sizeof(header) - used,
						 "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%zu, %zu], "
						 "\"data_offsets\": [%zu, %zu]}", used > 1 ? ", " : "",
						 tensors[i].name, tensors[i].rows, tensors[i].cols, at,
						 at + bytes);
		at += bytes;
	}
	used += (size_t)snprintf(header + used, sizeof(header) - used, "}");
	while (used % 8)
		header[used++] = ' '; /* as writers pad it */
	hlen = used;
	if (8 + hlen + at > sizeof(file))
		abort();
	memset(file, 0, sizeof(file));
	for (int b = 0; b < 8; b++)
		file[b] = (char)((uint64_t)hlen >> (8 * b) & 0xff);
	memcpy(file + 8, header, hlen);
	for (size_t off = 0; off < at; off += 16)
		memcpy(file + 8 + hlen + off, "\x00\x00\x80\x3f", 4); /* 1.0f */
	snprintf(name, sizeof(name), "model-0000%d-of-00002.safetensors", k);
	put(name, file, 8 + hlen + at);
}

static void setup(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/mha-fuzz-model.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		abort();
	}
	atexit(cleanup);
	write_shard(1);
	write_shard(2);
}

/* what model_load() promises: weights as read, finite; in the family's layout */
static void check_loaded(const weights *w, const struct problem_spec *s)
{
	for (int i = 0; i < N_WEIGHTS; i++) {
		const matrix *m = &w->m[i];

		if (!m->rank)
			continue;
		if (!m->v || !w->src[i] || matrix_size(m) == 0)
			fuzz_fail("model_load: an empty weight");
		for (size_t k = 0; k < matrix_size(m); k++)
			if (!isfinite(m->v[k]))
				fuzz_fail("model_load: a non-finite weight");
	}
	if (!s->family || w->layout != s->layout)
		fuzz_fail("model_load: no family, or its layout not set");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char index_name[] = "model.safetensors.index.json";
	const unsigned opt = size ? data[0] : 0;
	const int config = (opt & 0x80) != 0;
	char w_path[400];
	struct problem_spec s;
	weights w;
	matrix sinks = { 0 }, q_norm = { 0 }, k_norm = { 0 };
	matrix *const extra[MODEL_EXTRA] = { [MODEL_SINKS] = &sinks, [MODEL_Q_NORM] = &q_norm,
					     [MODEL_K_NORM] = &k_norm };

	if (!dir[0])
		setup();
	if (size)
		data++, size--;
	memset(&s, 0, sizeof(s));
	memset(&w, 0, sizeof(w));
	s.heads = 1;
	s.family = (model_family)((opt & 7) % 5);
	if (s.family) {
		s.layout = s.family == FAMILY_GPT2 ? LAYOUT_MHA : LAYOUT_TORCH;
		s.given |= GIVEN_LAYOUT;
	}
	s.has_layer = (opt & 0x08) != 0;
	s.layer = (opt & 0x10) ? 1 : 0;
	if (opt & 0x20)
		s.prefix = "model.layers.0.self_attn";
	if (config) {
		put(index_name, good_index, sizeof(good_index) - 1);
		put("config.json", data, size);
	} else {
		put(index_name, data, size);
	}
	if (opt & 0x40)
		snprintf(w_path, sizeof(w_path), "%s/%s", dir, index_name);
	else
		snprintf(w_path, sizeof(w_path), "%s", dir);
	s.w = w_path;

	fuzz_start();
	if (model_config(&s) == 0) {
		if (s.heads < 1)
			fuzz_fail("model_config: no heads");
		w.layout = s.layout;
		if (model_load(&w, extra, &s, s.w) == 0)
			check_loaded(&w, &s);
	}
	weights_free(&w);
	matrix_free(&sinks);
	matrix_free(&q_norm);
	matrix_free(&k_norm);
	if (budget_held() != 0)
		fuzz_fail("the memory budget was not given back in full");
	drop(index_name);
	drop("config.json");
	return 0;
}

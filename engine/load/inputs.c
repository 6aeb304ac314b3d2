/*
 * inputs.c: the files a problem_spec names, once (inputs.h).
 */
#include "load/inputs.h"
#include "load/latent.h"
#include "load/weights.h"

#include <stddef.h>
#include <string.h>

#define AT(field) offsetof(struct problem_spec, field)
#define ONE(name, i) { name, NULL, AT(one) + (i) * sizeof(const char *), 1 }
#define LATENT(name, i) { name, NULL, AT(latent) + (i) * sizeof(const char *), 1 }

const struct spec_file spec_files[] = {
	{ "x", "-x", AT(x), 1 }, { "kv", "--kv", AT(kv), 1 }, { "xk", "--xk", AT(xk), 1 },
	{ "xv", "--xv", AT(xv), 1 }, { "q", "--q", AT(q), 1 },
	{ "k", "--k", AT(k), 0 },                 /* --kt too: K transposed */
	{ "v", "--v", AT(v), 1 }, { "mask", "--mask", AT(mask), 1 },
	{ "sinks", "--sinks", AT(sinks), 0 },     /* a setting: none, or a file */
	{ "alibi-slopes", "--alibi-slopes", AT(alibi_slopes), 0 }, /* ALiBi on too */
	{ "q-norm", "--q-norm", AT(q_norm), 1 }, { "k-norm", "--k-norm", AT(k_norm), 1 },
	LATENT("q-a-proj", LAT_Q_A_PROJ), LATENT("q-a-layernorm", LAT_Q_A_NORM),
	LATENT("kv-a-proj-with-mqa", LAT_KV_A_PROJ), LATENT("kv-a-layernorm", LAT_KV_A_NORM),
	LATENT("kv-b-proj", LAT_KV_B_PROJ),
	{ "positions", "--positions", AT(positions), 1 }, { "rope-cos", "--rope-cos", AT(rope_cos), 1 },
	{ "rope-sin", "--rope-sin", AT(rope_sin), 1 }, { "config", "--config", AT(config), 1 },
	{ "grad-output", "--grad-output", AT(grad_output), 1 },
	ONE("wq", WQ), ONE("wk", WK), ONE("wv", WV), ONE("wo", WO),
	ONE("bq", BQ), ONE("bk", BK), ONE("bv", BV), ONE("bo", BO),
	{ "weights", "-w", AT(w), 1 },
};
const size_t n_spec_files = sizeof(spec_files) / sizeof(spec_files[0]);

const char **spec_file_field(struct problem_spec *s, const struct spec_file *f)
{
	return (const char **)(void *)((char *)s + f->at);
}

const char *spec_file_path(const struct problem_spec *s, const struct spec_file *f)
{
	return *(const char *const *)(const void *)((const char *)s + f->at);
}

const struct spec_file *spec_file_named(const char *name)
{
	for (size_t i = 0; i < n_spec_files; i++)
		if (!strcmp(name, spec_files[i].name))
			return &spec_files[i];
	return NULL;
}

const char *spec_file_option(const struct problem_spec *s, const struct spec_file *f)
{
	if (f->at == AT(k) && s->k_transposed)
		return "--kt";
	if (f->option)
		return f->option;
	/* a single weight's or a latent tensor's: the options their readers name */
	if (f->at >= AT(one) && f->at < AT(one) + N_WEIGHTS * sizeof(const char *))
		return weight_options[(f->at - AT(one)) / sizeof(const char *)];
	return latent_options[(f->at - AT(latent)) / sizeof(const char *)];
}

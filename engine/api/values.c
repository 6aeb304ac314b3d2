/*
 * values.c: the attention commands' option values (values.h) read from
 * their text, each refused in a usage error that names the option.
 */
#include "api/values.h"

#include "util/msg.h"
#include "util/opts.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int value_real(const char *hint, const char *opt, const char *arg, double *out)
{
	if (!opt_number(arg, out)) {
		usage_error(hint, "%s expects a finite number, not '%s'", opt, arg);
		return -1;
	}
	return 0;
}

/* an eps: a finite number from 0 (--norm-eps, --mla-eps) */
int value_eps(const char *hint, const char *opt, const char *arg, double *out)
{
	if (value_real(hint, opt, arg, out))
		return -1;
	if (*out < 0) {
		usage_error(hint, "%s expects a number from 0, not '%s'", opt, arg);
		return -1;
	}
	return 0;
}

/* --layer N: a layer's number, from 0 (digits only, so not opt_count's "from 1") */
int value_layer(const char *hint, const char *arg, size_t *out)
{
	size_t v = 0, i = 0;

	for (; arg[i] >= '0' && arg[i] <= '9' && v <= SIZE_MAX / 20; i++)
		v = v * 10 + (size_t)(arg[i] - '0');
	if (!i || arg[i]) {
		usage_error(hint, "--layer expects a whole number from 0, not '%s'", arg);
		return -1;
	}
	*out = v;
	return 0;
}

/* one side of --window: -1 or a whole number from 0, digits only (no blanks, no '+') */
static int window_side(const char *s, size_t len, ptrdiff_t *out)
{
	long long v = 0;
	size_t at = s[0] == '-';

	if (len == at || len > at + 18)
		return -1;
	for (size_t i = at; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	if (at && v != 1)
		return -1;
	*out = at ? -1 : (ptrdiff_t)v;
	return 0;
}

/* --window L[,R]: R absent is -1 (unbounded to the right) */
int value_window(const char *hint, const char *arg, mha_window *w)
{
	const char *comma = strchr(arg, ',');
	const size_t ll = comma ? (size_t)(comma - arg) : strlen(arg);

	w->on = 1;
	w->right = -1;
	if (window_side(arg, ll, &w->left) ||
	    (comma && window_side(comma + 1, strlen(comma + 1), &w->right))) {
		usage_error(hint, "--window takes L or L,R: whole numbers of keys from 0, or -1 "
			    "for unbounded, not '%s'", arg);
		return -1;
	}
	return 0;
}

int value_scale(const char *hint, const char *arg, mha_config *cfg)
{
	static const struct { const char *name; mha_scale_mode mode; } modes[] = {
		{ "dk", MHA_SCALE_DK }, { "dmodel", MHA_SCALE_DMODEL },
		{ "seqlen", MHA_SCALE_SEQLEN }, { "none", MHA_SCALE_NONE },
	};

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(arg, modes[i].name)) {
			cfg->scale_mode = modes[i].mode;
			return 0;
		}
	cfg->scale_mode = MHA_SCALE_VALUE;
	if (!opt_number(arg, &cfg->scale)) {
		usage_error(hint, "--scale takes dk, dmodel, seqlen, none or a number, not '%s'",
			    arg);
		return -1;
	}
	return 0;
}

int value_biases(const char *hint, const char *arg, unsigned *out)
{
	static const char names[] = "qkvo";
	const char *p = arg;

	*out = 0;
	if (!strcmp(arg, "none"))
		return 0;
	for (;;) {
		const char *at = *p ? strchr(names, *p) : NULL;

		if (!at || (p[1] && p[1] != ',') || (*out & 1u << (at - names)))
			break;
		*out |= 1u << (at - names);
		if (!p[1])
			return 0;
		p += 2;
	}
	usage_error(hint, "--biases takes some of q,k,v,o, each once (q,k,v), or none, not '%s'",
		    arg);
	return -1;
}

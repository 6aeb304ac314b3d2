/*
 * options.c: the attention commands' option table (attention.h), each
 * row's getopt entry, help group and, for the sections every help shares,
 * its lines; and the command line parsed into struct attn_options.
 */
#include "cmd/attention.h"
#include "cmd/table.h"

#include "base/cli.h"
#include "base/progress.h"
#include "load/families.h"
#include "load/problem.h"
#include "api/settings.h"
#include "run/steps.h"

#include "mha.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- option values ----------------------------------------------------- */

/* a whole number from 1 up, digits only: 0, or -1 */
static int whole_number(const char *s, size_t *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > SIZE_MAX / 2)
		return -1;
	*out = (size_t)v;
	return 0;
}

/* --kv-len N, or N,N,…: one length for every sequence, or one per sequence */
static int parse_kv_len(const char *hint, const char *arg, struct attn_options *o)
{
	size_t n = 1, i = 0;
	const char *p;

	if (!strchr(arg, ','))
		return opt_count(hint, "--kv-len", arg, SIZE_MAX / 2, &o->spec.cfg.kv_len);
	for (p = arg; *p; p++)
		n += *p == ',';
	free(o->kv_lens);
	o->kv_lens = calloc(n, sizeof(*o->kv_lens));
	if (!o->kv_lens)
		return error("out of memory");
	for (p = arg; i < n; i++) {
		const size_t len = strcspn(p, ",");
		char one[32];

		if (len == 0 || len >= sizeof(one) ||
		    (memcpy(one, p, len), one[len] = '\0',
		     whole_number(one, &o->kv_lens[i])))
			return usage_error(hint, "--kv-len expects whole numbers of at least 1, one per "
					   "sequence (5,3,4), not '%s'", arg);
		p += len + (p[len] == ',');
	}
	o->spec.kv_lens = o->kv_lens;
	o->spec.n_kv_lens = n;
	o->spec.cfg.kv_len = 0;
	return 0;
}

/* --print LIST of the steps (steps.h), for a command with no print hook: 0, or -1 said */
static int print_steps(struct attn_options *o, const char *arg)
{
	return steps_parse_print(o->cmd->name, arg, &o->print, &o->print_all);
}

/* "a, b or c": the words of a choice that are shown, into buf */
static const char *choice_words(char *buf, size_t size, const struct row_choice *ch)
{
	size_t n = 0, at = 0, k = 0;

	for (const struct row_choice *c = ch; c->word; c++)
		n += !c->hidden;
	buf[0] = '\0';
	for (const struct row_choice *c = ch; c->word && at < size; c++) {
		int w;

		if (c->hidden)
			continue;
		w = snprintf(buf + at, size - at, "%s%s", k == 0 ? "" : k + 1 == n ? " or " : ", ",
			     c->word);
		at += w > 0 ? (size_t)w : 0;
		k++;
	}
	return buf;
}

/* an option taken as its row says (table.h's row_take): 0, or -1 said */
static int take(const char *hint, const struct option_row *row, const char *arg,
		struct attn_options *o)
{
	const struct row_take *t = row->take;
	char *at = (char *)o + t->at;

	switch (t->kind) {
	case ROW_SET:
		*(int *)(void *)at = t->value;
		break;
	case ROW_STRING:
		*(const char **)(void *)at = arg;
		break;
	case ROW_COUNT: {
		char opt[64];

		snprintf(opt, sizeof(opt), "--%s", row->o.name);
		if (opt_count(hint, opt, arg, SIZE_MAX / 2, (size_t *)(void *)at))
			return -1;
		break;
	}
	case ROW_CHOICE: {
		const struct row_choice *c = t->choices;
		char words[128];

		while (arg && c->word && strcmp(arg, c->word))
			c++;
		if (arg && !c->word) {
			usage_error(hint, "--%s takes %s, not '%s'", row->o.name,
				    choice_words(words, sizeof(words), t->choices), arg);
			return -1;
		}
		*(int *)(void *)at = arg ? c->value : t->value;
		break;
	}
	}
	if (t->given_at)
		*(int *)(void *)((char *)o + t->given_at) = 1;
	return 0;
}

/*
 * The command line into o (o->own kept): 0, 1 after --help (printed), -1
 * a usage error (said).  free(o->kv_lens) after.
 */
int attn_parse(int argc, char **argv, struct attn_options *o, const struct attn_command *cmd)
{
	const char *hint = cmd->name;
	/* the shared options, then the command's own (compare's --against …) */
	struct option all[ATTN_MAX_ROWS + ATTN_MAX_EXTRA + 1];
	size_t n_extra = 0;
	int c;
	size_t n;

	memcpy(all, attn_option_table(NULL), attn_n_rows * sizeof(all[0]));
	while (cmd->extra && cmd->extra[n_extra].name && n_extra < ATTN_MAX_EXTRA)
		n_extra++;
	if (n_extra)
		memcpy(all + attn_n_rows, cmd->extra, n_extra * sizeof(all[0]));
	memset(&all[attn_n_rows + n_extra], 0, sizeof(all[0]));
	{
		void *own = o->own;

		memset(o, 0, sizeof(*o));
		o->own = own;
	}
	o->cmd = cmd;
	/* --list-options alone: the options the command takes (those of the groups
	 * its help describes, and its own), as JSON, for programs (the Python package) */
	if (attn_list_options_asked(argc, argv) < 0) {
		usage_error(hint, ATTN_LIST_OPTIONS_ALONE);
		return -1;
	}
	if (attn_list_options_asked(argc, argv)) {
		struct option takes[ATTN_MAX_ROWS + ATTN_MAX_EXTRA + 1];
		char *help = NULL;
		size_t size = 0, k = 0;
		FILE *fp = open_memstream(&help, &size);
		int rc = !fp || attn_help(fp, cmd) || fclose(fp) ? -1 : 0;

		for (size_t i = 0; i < attn_n_rows; i++)
			if (attn_rows[i].group & (cmd->help_groups | cmd->takes) & ~(unsigned)OPT_ALIAS)
				takes[k++] = attn_rows[i].o;
		for (size_t i = 0; i < n_extra; i++)
			takes[k++] = cmd->extra[i];
		memset(&takes[k], 0, sizeof(takes[0]));
		if (!rc)
			rc = attn_list_options(stdout, cmd->name, takes, help);
		free(help);
		return rc ? -1 : 1;
	}
	o->spec.heads = 1;
	o->emit.precision = 6;
	o->max_memory = opt_memory_default();
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":x:w:p:f:o:hq", all, NULL)) != -1) {
		if (c >= ATTN_EXTRA_BASE && cmd->extra_opt) {
			if (cmd->extra_opt(o, c, optarg))
				return -1;
			continue;
		}
		if (c == O_GRAD_OUTPUT && !(cmd->takes & OPT_GRAD)) {
			usage_error(hint, "--grad-output is an option of 'mha backward'");
			return -1;
		}
		/* what the run reads and what its layer computes: the engine's
		 * settings by name ('mha model''s and the Python package's too) */
		{
			const char *name = attn_row_name(c);
			const int r = name ? spec_setting(hint, name, optarg, &o->spec) : 0;
			const int in = name && !r ? spec_input(hint, name, optarg, &o->spec) : 0;

			if (r < 0 || in < 0)
				return -1;
			if (r || in) {
				o->mask_bool |= c == O_MASK_BOOL;
				continue;
			}
		}
		if (attn_row(c) && attn_row(c)->take) {
			if (take(hint, attn_row(c), optarg, o))
				return -1;
			continue;
		}
		switch (c) {
		case O_RANGE:
			if (heat_range_parse(&o->emit.range, optarg)) {
				usage_error(hint, "--range takes auto or MIN,MAX (finite numbers, MIN "
					    "below MAX), not '%s'", optarg);
				return -1;
			}
			o->range_given = 1;
			break;
		case O_POOL: {
			/* max or mean, then :K, the block's side */
			const size_t len = strcspn(optarg, ":");
			const int max = len == 3 && !strncmp(optarg, "max", 3);
			const int mean = len == 4 && !strncmp(optarg, "mean", 4);

			o->emit.pool_k = 0;
			if ((!max && !mean) ||
			    (optarg[len] && opt_count(hint, "--pool's block", optarg + len + 1,
						      SIZE_MAX / 2, &o->emit.pool_k))) {
				if (!max && !mean)
					usage_error(hint, "--pool takes max or mean, then :K for blocks "
						    "of K by K cells (max:16), not '%s'", optarg);
				return -1;
			}
			o->emit.pool = max ? POOL_MAX : POOL_MEAN;
			break;
		}
		case O_MAX_MEMORY:
			if (opt_bytes(optarg, &o->max_memory)) {
				usage_error(hint, "--max-memory takes a size such as 512M, 4G or 1.5GiB, "
					    "or none, not '%s'", optarg);
				return -1;
			}
			break;
		case O_KV_LEN:
			if (parse_kv_len(hint, optarg, o))
				return -1;
			break;
		case 'p':
			o->print_given = 1;
			o->print_arg = optarg;
			if (cmd->print ? cmd->print(o, optarg) : print_steps(o, optarg))
				return -1;
			break;
		case 'f':
			o->format_given = 1;
			if (emit_format_by_name(optarg, &o->emit.format)) {
				char names[160];

				usage_error(hint, "--format takes %s, not '%s'",
					    emit_format_list(1, names, sizeof(names)), optarg);
				return -1;
			}
			break;
		case O_PRECISION:
			o->precision_given = 1;
			if (opt_count(hint, "--precision", optarg, SIZE_MAX / 2, &n))
				return -1;
			if (n > 17) {
				usage_error(hint, "--precision takes 1 to 17 digits, not %zu", n);
				return -1;
			}
			o->emit.precision = (int)n;
			break;
		case 'h':
			attn_help(stdout, cmd);
			return 1;
		default: /* ':' or '?' */
			opt_error(hint, c, argv, all);
			return -1;
		}
	}
	if (optind < argc) {
		usage_error(hint, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

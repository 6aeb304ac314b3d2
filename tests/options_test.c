/*
 * options_test.c: every attention command's --help against the option
 * table it parses (cli/cmd/attention.c's rows and the command's own).
 *
 * The sections every command shares (Inputs, Attention) are made from the
 * table's rows; the rest of each help is written by hand (its wording
 * differs by command).  This holds the whole to the table: each option of a group the command's help
 * describes (help_groups) appears in it as --NAME, and each --NAME the help
 * mentions is an option the command takes.  The lists the helps are made
 * from are held to them too: every step in forward's --print, every output
 * format in its --format, every layout --layout takes in its line, every
 * input the engine reads by name an option of the table; and --list-options
 * to the parser: each option it lists is one the command parses.  One line
 * per problem; exit 1 when there is any.
 */
#include "base/cli.h"
#include "cmd/attention.h"
#include "load/families.h"
#include "load/inputs.h"
#include "run/steps.h"
#include "write/emit.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a character of an option's name (and of what would run on from one) */
static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* "--name" in text as a whole word: not "--name-more" */
static int mentions(const char *text, const char *name)
{
	const size_t n = strlen(name);

	for (const char *p = strstr(text, "--"); p; p = strstr(p + 2, "--"))
		if (!strncmp(p + 2, name, n) && !name_char(p[2 + n]))
			return 1;
	return 0;
}

/* the row of table (or of extra) called name, or -1; *extra set when extra's */
static int row_of(const struct option *table, const struct option *extra, const char *name,
		  int *in_extra)
{
	*in_extra = 0;
	for (int i = 0; table[i].name; i++)
		if (!strcmp(table[i].name, name))
			return i;
	for (int i = 0; extra && extra[i].name; i++)
		if (!strcmp(extra[i].name, name)) {
			*in_extra = 1;
			return i;
		}
	return -1;
}

static int check(const struct attn_command *c)
{
	const unsigned *groups;
	const struct option *table = attn_option_table(&groups);
	char *usage = NULL;
	size_t size = 0;
	FILE *fp = open_memstream(&usage, &size);
	int bad = 0;

	/* the help as --help prints it: the shared sections made from the table */
	if (!fp || attn_help(fp, c) || fclose(fp)) {
		printf("options_test: 'mha %s --help' could not be made\n", c->name);
		return 1;
	}

	for (int i = 0; table[i].name; i++)
		if ((groups[i] & c->help_groups) && !mentions(usage, table[i].name)) {
			printf("options_test: 'mha %s --help' does not describe --%s\n", c->name,
			       table[i].name);
			bad++;
		}
	for (int i = 0; c->extra && c->extra[i].name; i++)
		if (!mentions(usage, c->extra[i].name)) {
			printf("options_test: 'mha %s --help' does not describe its own --%s\n", c->name,
			       c->extra[i].name);
			bad++;
		}
	for (const char *p = strstr(usage, "--"); p; p = strstr(p + 2, "--")) {
		char name[64];
		size_t n = 0;
		int in_extra, r;

		while (n + 1 < sizeof(name) && name_char(p[2 + n]) && (n || p[2] != '-'))
			n++;
		memcpy(name, p + 2, n);
		name[n] = '\0';
		if (!n)
			continue;
		r = row_of(table, c->extra, name, &in_extra);
		if (r < 0 || (!in_extra && (groups[r] & (OPT_GRAD | OPT_ALIAS)) &&
			      !(groups[r] & c->takes))) {
			printf("options_test: 'mha %s --help' describes --%s, which it does not take\n",
			       c->name, name);
			bad++;
		}
	}
	/* forward's --print: every step of the table, named in its help */
	if (c == &attn_forward)
		for (int s = 0; s < STEP_COUNT; s++) {
			char word[64];
			const char *at;
			const size_t n = strlen(steps[s].name);
			int found = 0;

			snprintf(word, sizeof(word), "%s", steps[s].name);
			for (at = strstr(usage, word); at && !found; at = strstr(at + 1, word))
				found = (at == usage || !name_char(at[-1])) && !name_char(at[n]);
			if (!found) {
				printf("options_test: 'mha forward --help' does not name the step %s\n",
				       steps[s].name);
				bad++;
			}
		}
	free(usage);
	return bad;
}

/* each name of a generated list ("a, b, c or d") a word of text: the problems */
static int names_in(const char *list, const char *text, const char *what, const char *where)
{
	char copy[512], *save = NULL;
	int bad = 0;

	snprintf(copy, sizeof(copy), "%s", list);
	for (char *w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		const size_t n = strlen(w);
		const char *p = text;
		int found = 0;

		if (!strcmp(w, "or"))
			continue;
		for (p = strstr(p, w); p && !found; p = strstr(p + 1, w))
			found = (p == text || !name_char(p[-1])) && !name_char(p[n]);
		if (!found) {
			printf("options_test: %s does not name the %s %s\n", where, what, w);
			bad++;
		}
	}
	return bad;
}

/* the help of one command as text (free it), or NULL */
static char *help_of(const struct attn_command *c)
{
	char *text = NULL;
	size_t size = 0;
	FILE *fp = open_memstream(&text, &size);

	if (!fp || attn_help(fp, c) || fclose(fp)) {
		free(text);
		return NULL;
	}
	return text;
}

/* the lists the helps are made from, held to forward's help */
static int lists(void)
{
	const unsigned *groups;
	const struct option *table = attn_option_table(&groups);
	char *help = help_of(&attn_forward), names[256];
	const char *layout;
	int bad = 0;

	if (!help)
		return printf("options_test: forward's help could not be made\n"), 1;
	bad += names_in(emit_format_list(1, names, sizeof(names)), strstr(help, "--format"),
			"format", "forward's --format");
	layout = strstr(help, "--layout");
	bad += names_in(family_layouts(0, names, sizeof(names)), layout ? layout : "",
			"layout", "forward's --layout");
	for (size_t i = 0; i < n_spec_files; i++) {
		int found = 0;

		for (int j = 0; table[j].name && !found; j++)
			found = !strcmp(table[j].name, spec_files[i].name);
		if (!found) {
			printf("options_test: the engine's input %s is no option\n",
			       spec_files[i].name);
			bad++;
		}
	}
	free(help);
	return bad;
}

/* what the parser said last */
static char said[512];

static void keep_said(void *ctx, const mhe_message *m)
{
	(void)ctx;
	snprintf(said, sizeof(said), "%s", m->text);
}

/* --list-options of c, as the program prints it (free it), or NULL */
static char *listed(const struct attn_command *c, void *own)
{
	char *argv[] = { (char *)c->name, (char *)"--list-options", NULL };
	struct attn_options o = { .own = own };
	FILE *tmp = tmpfile();
	const int saved = dup(1);
	char *text = NULL;
	long n;
	int rc;

	if (!tmp || saved < 0)
		return NULL;
	fflush(stdout);
	dup2(fileno(tmp), 1);
	rc = attn_parse(2, argv, &o, c);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	n = ftell(tmp) >= 0 ? (fseek(tmp, 0, SEEK_END), ftell(tmp)) : -1;
	if (rc == 1 && n > 0 && (text = calloc(1, (size_t)n + 1))) {
		rewind(tmp);
		if (fread(text, 1, (size_t)n, tmp) != (size_t)n) {
			free(text);
			text = NULL;
		}
	}
	fclose(tmp);
	return text;
}

/* each option --list-options names, parsed by the command's parser: none
 * is an option it does not know */
static int list_options(const struct attn_command *c)
{
	static union { long double align; char b[16384]; } own;
	char *json = listed(c, &own), *p;
	int bad = 0, n = 0;

	if (!json)
		return printf("options_test: 'mha %s --list-options' printed nothing\n", c->name), 1;
	for (p = strstr(json, "\"name\": \""); p; p = strstr(p + 1, "\"name\": \"")) {
		char name[64], opt[72];
		const char *q = p + 9, *end = strchr(q, '"'), *value = strstr(q, "\"value\": \"");
		char *argv[] = { (char *)c->name, opt, (char *)"1", NULL };
		struct attn_options o;
		int argc = 3;

		if (!end || (size_t)(end - q) >= sizeof(name))
			continue;
		memcpy(name, q, (size_t)(end - q));
		name[end - q] = '\0';
		if (!strcmp(name, "help"))
			continue; /* it prints the help, which check() holds to the table */
		/* an option that takes no value, or may take one, alone */
		if (value && strncmp(value + 10, "required", 8))
			argc = 2;
		snprintf(opt, sizeof(opt), "--%s", name);
		memset(&own, 0, sizeof(own));
		memset(&o, 0, sizeof(o));
		o.own = &own;
		said[0] = '\0';
		argv[argc] = NULL;
		attn_parse(argc, argv, &o, c);
		free(o.kv_lens);
		n++;
		if (!strncmp(said, "unknown option", 14) || !strncmp(said, "unexpected argument", 19)) {
			printf("options_test: 'mha %s --list-options' lists --%s, which its parser "
			       "refuses: %s\n", c->name, name, said);
			bad++;
		}
	}
	free(json);
	if (!n) {
		printf("options_test: 'mha %s --list-options' lists no option\n", c->name);
		bad++;
	}
	return bad;
}

int main(void)
{
	const struct attn_command *const cmds[] = { &attn_forward, &attn_heatmap, &attn_backward,
						    &attn_compare };
	int bad = 0;

	mhe_set_message_handler(keep_said, NULL);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		bad += check(cmds[i]) + list_options(cmds[i]);
	bad += lists();
	if (bad)
		return 1;
	printf("options_test: the helps of %zu commands agree with their option tables, the "
	       "steps, formats, layouts and inputs with their lists, --list-options with the "
	       "parser\n", sizeof(cmds) / sizeof(cmds[0]));
	return 0;
}

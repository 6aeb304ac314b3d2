/*
 * options_test.c: every attention command's --help against the option
 * table it parses (cli/cmd/attention.c's rows and the command's own).
 *
 * The sections every command shares (Inputs, Attention) are made from the
 * table's rows; the rest of each help is written by hand (its wording
 * differs by command).  This holds the whole to the table: each option of a group the command's help
 * describes (help_groups) appears in it as --NAME, and each --NAME the help
 * mentions is an option the command takes.  One line per problem; exit 1
 * when there is any.
 */
#include "cmd/attention.h"
#include "run/steps.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct attn_command *const cmds[] = { &attn_forward, &attn_heatmap, &attn_backward,
						    &attn_compare };
	int bad = 0;

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		bad += check(cmds[i]);
	if (bad)
		return 1;
	printf("options_test: the helps of %zu commands agree with their option tables\n",
	       sizeof(cmds) / sizeof(cmds[0]));
	return 0;
}

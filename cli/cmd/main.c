/*
 * main.c: the mha command: finds the subcommand in a table and hands it
 * the rest of the command line (git's builtin table, in small).
 */
#include "base/cli.h"
#include "util/files.h"
#include "base/outfile.h"

#include "mha.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "forward", cmd_forward, "compute multi-head attention, showing any step of it" },
	{ "init", cmd_init, "write a random X and weights to start from" },
	{ "heatmap", cmd_heatmap, "draw each head's attention weights (mha forward --format heatmap)" },
	{ "backward", cmd_backward, "every gradient of the layer, step by step (dO back to dX, dW)" },
	{ "compare", cmd_compare, "compare someone else's attention with mha's, step by step" },
	{ "model", cmd_model, "what mha reads of a checkpoint's attention, layer by layer" },
};

static void print_usage(FILE *fp)
{
	fputs("usage: mha COMMAND [options]\n"
	      "       mha help [COMMAND]\n"
	      "       mha --help | --version\n"
	      "\n"
	      "Multi-head attention computed exactly in float64, every step visible.\n"
	      "\n"
	      "Commands:\n", fp);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(fp, "  %-10s %s\n", "help", "this text, or a command's: mha help forward");
	fputs("\n"
	      "'mha COMMAND --help' describes a command; 'man mha' describes them all.\n"
	      "Example: mha forward -x x.json -w weights.json --heads 2 --causal --print all\n",
	      fp);
}

/* Help and version go to standard output too: a failed write must not pass for success. */
static int finish(int rc)
{
	files_forget();
	if (rc == EXIT_OK && stdout_flush())
		return EXIT_DATA;
	return rc; /* a command that failed has said why already */
}

static int run(int argc, char **argv);

/* "'forwrd' is not a command", and the command it is nearly */
static int not_a_command(const char *name)
{
	const char *names[sizeof(commands) / sizeof(commands[0]) + 1];
	const char *near;
	size_t n = 0;

	for (; n < sizeof(commands) / sizeof(commands[0]); n++)
		names[n] = commands[n].name;
	names[n++] = "help";
	near = closest_name(name, names, n);
	if (near)
		return usage_error(NULL, "'%s' is not a command: did you mean '%s'?", name, near);
	return usage_error(NULL, "'%s' is not a command", name);
}

int main(int argc, char **argv)
{
	/* a reader that goes away (mha … | head -1) ends mha quietly, even when
	 * the parent ignored SIGPIPE; Ctrl-C leaves no temporary file behind */
	signal(SIGPIPE, SIG_DFL);
	outfile_cleanup_on_signals();
	msg_to_stderr();
	return finish(run(argc, argv));
}

static int run(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : NULL;

	if (!name) {
		print_usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
		if (!strcmp(name, "help") && argc > 2) {
			char *help_argv[] = { argv[2], (char *)"--help", NULL };

			for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
				if (!strcmp(argv[2], commands[i].name))
					return commands[i].run(2, help_argv);
			return not_a_command(argv[2]);
		}
		print_usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("mha %s\n", mha_version());
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(name, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	if (name[0] == '-')
		return usage_error(NULL, "unknown option '%s' (options follow the command)", name);
	return not_a_command(name);
}

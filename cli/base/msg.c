/*
 * msg.c: the engine's messages (engine/util/msg.h) as the program prints
 * them, the way git writes them: "mha: " then the problem, lowercase, no
 * full stop; a usage error then points to the command's --help.
 */
#include "base/cli.h"
#include "base/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_message(void *ctx, const mhe_message *m)
{
	(void)ctx;
	fflush(stdout);
	progress_clear(); /* a message never lands on the bar's line */
	fputs(m->severity == MHE_WARNING ? "mha: warning: " :
	      m->severity == MHE_NOTE ? "mha: note: " : "mha: ", stderr);
	fputs(m->text, stderr); /* made safe by the engine */
	fputc('\n', stderr);
	if (m->severity != MHE_ERROR || m->status != MHE_USAGE)
		return;
	if (m->command)
		fprintf(stderr, "Try 'mha %s --help' for more information.\n", m->command);
	else
		fputs("Try 'mha --help' for more information.\n", stderr);
}

void msg_to_stderr(void)
{
	mhe_set_message_handler(print_message, NULL);
}

int stdout_flush(void)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	return error("error writing to standard output: %s", errno ? strerror(errno) :
		     "write failed");
}

/*
 * cli.h: what the pieces of the mha command share: exit statuses, messages
 * and the subcommands.  Nothing here does arithmetic (lib/mha.h) or reads
 * (engine/mhe.h).
 */
#ifndef MHA_CLI_H
#define MHA_CLI_H

#include <stdarg.h>
#include <stddef.h>

/* the engine's messages, exit statuses and option values, which the
 * program's own messages go through as well */
#include "util/msg.h"
#include "util/opts.h"

/* The engine's messages printed on standard error from now on: "mha: "
 * (an error), "mha: warning: ", "mha: note: ", a usage error's pointer to
 * --help after it; the progress bar taken off first. */
void msg_to_stderr(void);

/* Standard output flushed: 0, or -1 after "error writing to standard
 * output: ..." (a full disk, a closed pipe's EPIPE ignored) */
int stdout_flush(void);

/* Subcommands: each parses its own argv (argv[0] is the command's name). */
int cmd_forward(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_heatmap(int argc, char **argv);
int cmd_backward(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_model(int argc, char **argv);

/* The command line alone, checked as the command would, reading and writing
 * no file: 0 fine, 1 after --help, 2 a usage error (for the fuzzers). */
int forward_check_args(int argc, char **argv);
int init_check_args(int argc, char **argv);
int compare_check_args(int argc, char **argv);

#endif

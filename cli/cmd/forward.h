/*
 * forward.h: the hooks of 'mha forward' (forward.c), which 'mha heatmap'
 * (heatmap.c) plugs into the skeleton too: it is forward with a heatmap as
 * its default format and a help of its own.
 */
#ifndef MHA_CLI_FORWARD_H
#define MHA_CLI_FORWARD_H

#include "cmd/attention.h"

/* How the output options combine, and what is printed: 0, or -1 said. */
int forward_check(struct attn_options *o);
/* Could the run write name into -o DIR/? */
int forward_may_write(const struct attn_options *o, const char *name);
/* The run on a loaded problem: an exit status. */
int forward_run(struct attn_options *o, struct problem *p);

#define FORWARD_HOOKS \
	.check = forward_check, .may_write = forward_may_write, \
	.run = forward_run

#endif

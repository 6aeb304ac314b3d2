/*
 * cmd_init.c: 'mha init', random inputs and weights (not written yet).
 */
#include "cli.h"

#include <stddef.h>

int cmd_init(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return usage_error(NULL, "'init' is not written yet");
}

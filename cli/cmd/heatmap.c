/*
 * cmd/heatmap.c: 'mha heatmap', each head's attention weights (or another
 * (n_q, n_kv) step) drawn: coloured cells in the terminal, or an SVG
 * picture for -o FILE.svg.  It is 'mha forward' with a heatmap as its
 * default format (cmd/forward.c does the work), with a help of its own
 * that lists the options that matter for drawing.
 */
#include "base/cli.h"
#include "cmd/forward.h"

static const char heatmap_usage[] =
	"usage: mha heatmap -x FILE [-w FILE] [--kv FILE] [options]\n"
	"       mha heatmap --q FILE --k FILE --v FILE [-w FILE] [options]\n"
	"\n"
	"Draw each head's attention weights, or another step, as coloured cells in the\n"
	"terminal or as an SVG picture: 'mha forward' with --format heatmap as its\n"
	"default.\n"
	"\n"
	FORWARD_USAGE_INPUTS
	FORWARD_USAGE_ATTENTION
	"Computation:\n"
	FORWARD_USAGE_RUN
	"\n"
	"Drawing:\n"
	"  -p, --print STEP      the step drawn, a panel per head: softmax (the default),\n"
	"                        scores, scaled, softcapped or masked; cells the mask\n"
	"                        blocks are marked apart from the masked step on\n"
	"  -f, --format FMT      heatmap (coloured cells in the terminal; the default),\n"
	"                        svg (a picture; the default for -o FILE.svg) or html\n"
	"                        (an interactive page, offline: every step, each cell\n"
	"                        worked out on hover; the default for -o FILE.html)\n"
	FORWARD_USAGE_COLOR
	FORWARD_USAGE_PICTURE
	"      --precision N     significant digits of the numbers shown (default 6)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well)\n"
	"      --sequence N      with a batch (3-D inputs): draw sequence N alone (from\n"
	"                        1); without it each sequence under a heading (an SVG\n"
	"                        draws one)\n"
	FORWARD_USAGE_HELP
	"\n"
	"The other options of 'mha forward' are taken too: see 'mha forward --help'.\n"
	FORWARD_USAGE_EXIT;

/* usage errors point to its own help */
static const struct forward_command heatmap = { .hint = "heatmap", .usage = heatmap_usage,
						 .draw = 1 };

int cmd_heatmap(int argc, char **argv)
{
	return forward_run(argc, argv, &heatmap);
}

/*
 * heatmap.c: 'mha heatmap', each head's attention weights (or another
 * (n_q, n_kv) step) drawn: coloured cells in the terminal, or an SVG
 * picture for -o FILE.svg.  It plugs forward's hooks (forward.h) into the
 * skeleton with a heatmap as its default format, and a help of its own
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
	ATTN_USAGE_SHARED
	"Computation:\n"
	ATTN_USAGE_RUN
	"\n"
	"Drawing:\n"
	"  -p, --print STEP      the step drawn, a panel per head: softmax (the default),\n"
	"                        scores, scaled, softcapped or masked; cells the mask\n"
	"                        blocks are marked apart from the masked step on\n"
	"  -f, --format FMT      heatmap (coloured cells in the terminal; the default),\n"
	"                        svg (a picture; the default for -o FILE.svg) or html\n"
	"                        (an interactive page, offline: every step, each cell\n"
	"                        worked out on hover; the default for -o FILE.html)\n"
	ATTN_USAGE_COLOR
	ATTN_USAGE_PICTURE
	"      --precision N     significant digits of the numbers shown (default 6)\n"
	ATTN_USAGE_FIT
	"      --full            every key its own cell, however wide (see below)\n"
	"  -o, --output FILE     write to FILE (replaced only when all went well)\n"
	"      --sequence N      with a batch (3-D inputs): draw sequence N alone (from\n"
	"                        1); without it each sequence under a heading (an SVG\n"
	"                        draws one)\n"
	ATTN_USAGE_HELP
	"\n"
	"The picture fits the terminal's width (written to a file or a pipe,\n"
	"COLUMNS's, else there is no limit): heads that fit side by side are drawn\n"
	"so, and a head wider than that has its keys pooled, a cell for each block of\n"
	"adjacent keys, drawn at the block's largest value and numbered by its first.\n"
	"\n"
	"The other options of 'mha forward' are taken too: see 'mha forward --help'.\n"
	ATTN_USAGE_EXIT;

/* forward's hooks, drawing by default; usage errors point to its own help */
const struct attn_command attn_heatmap = {
	.name = "heatmap", .usage = heatmap_usage, .draw = 1,
	.help_groups = OPT_INPUT | OPT_ATTN | OPT_RUN | OPT_PRINT | OPT_PICTURE,
	FORWARD_HOOKS
};

int cmd_heatmap(int argc, char **argv)
{
	return attn_main(argc, argv, &attn_heatmap, NULL);
}

#!/bin/sh
# embed.sh OUT FILE...: each FILE as a C string constant in the header OUT,
# named html_ and its base name with '.' as '_' (page.js: html_page_js), so
# the page's script and style stay readable files under cli/write/html/ and the
# program carries them.  Backslashes, quotes and '?' (no trigraphs) are
# escaped; each line ends in "\n".  Written under a temporary name first.
set -eu
out=$1
shift
mkdir -p "$(dirname "$out")"
{
	echo "/* generated from cli/write/html/ by cli/write/html/embed.sh: do not edit */"
	for f in "$@"; do
		name=html_$(basename "$f" | tr '.-' '__')
		echo "static const char $name[] ="
		sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/\t"/' -e 's/$/\\n"/' "$f"
		printf '\t"";\n'
	done
} > "$out.tmp"
mv "$out.tmp" "$out"

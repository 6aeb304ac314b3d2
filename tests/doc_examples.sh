#!/bin/sh
# doc_examples.sh: run every example in the documentation and check that it
# still prints exactly what the documentation shows, so the README, the
# pages of docs/ and the man page cannot drift from the program.  It tests
# what the documents claim, not the arithmetic (tests/ has the reference
# checks for that).
#
# usage: sh tests/doc_examples.sh README.md docs/*.md man/mha.1
#
# Shell examples
#   Markdown (*.md): every ```console fenced block is an example.
#   roff (anything else): every .EX/.EE block is an example.
#   The first line of a block must be a command.  A line starting with "$ "
#   is a command; a command line ending in a backslash goes on to the next
#   line, as in sh.  Every other line, up to the next command, is exactly
#   what that command writes to standard output and standard error
#   together.  Each command runs alone with `sh -c` from the top of the
#   repository, standard input from /dev/null, and the built ./mha (or
#   $MHA) first on PATH as `mha`.  Commands must not write into the tree:
#   use a pipe or mktemp.
#   roff examples are un-escaped before comparing: \- \e \& \(aq \(dq \(ga
#   \(ti \(ha \(rs and the \[..] forms.  A bare - ' or ` inside an example
#   is refused: groff may show it as a hyphen or a curly quote, which would
#   not paste back into a shell.
#   python3 is the first of $PYTHON, python3 and /usr/bin/python3 that has
#   NumPy.  A block that calls jq, or python3, is skipped with a "skip" line
#   when that is missing; skips count as neither passed nor failed.
#   The Python package is importable as if installed (pip install ./python):
#   PYTHONPATH holds the tree's python/, and MHA_EXECUTABLE is the mha
#   under test.
#
# The pytest example
#   Every ```python block whose first line is "# test_NAME.py" is a pytest
#   module: written to an empty directory under that name and run there
#   with "python3 -m pytest -q -p no:cacheprovider", the package as above;
#   it must pass.  Skipped when python3 has no pytest.
#
# The C example
#   Every ```c block in Markdown is a complete program.  It is compiled with
#   $CC (default cc) -std=c11 -Wall -Wextra -Werror -Ilib against
#   lib/libmha.a (or $MHA_LIB) and -lm, and run; the first ```text block
#   after it is its exact standard output (without one, it must just exit
#   0).
#
# Output: "ok FILE:LINE", or "FAIL FILE:LINE" and a diff (expected lines
# marked -, actual +), or "skip FILE:LINE (reason)", one line per example
# ("skip FILE (no examples)" for a file without any; no example in any file
# given is a failure);
# then exactly "N passed, N failed".  Exit status 1 on any failure.
#
# Another build (make check-asan runs the sanitized one this way):
#   MHA=build-asan/mha MHA_LIB=build-asan/libmha.a CC='cc -fsanitize=...' \
#   sh tests/doc_examples.sh README.md docs/*.md man/mha.1

LC_ALL=C
export LC_ALL
# a heatmap fits the width COLUMNS gives: an example that wants one sets it
unset COLUMNS

top=$(cd "$(dirname "$0")/.." && pwd) || exit 2
if [ $# -eq 0 ]; then
	echo "usage: sh tests/doc_examples.sh FILE..." >&2
	exit 2
fi
# the program and the libraries under test: $MHA, $MHA_LIB and $MHE_LIB,
# relative to the current directory, or the tree's own ./mha, lib/libmha.a
# and engine/libmhe.a
mha=${MHA:-$top/mha}
mha_lib=${MHA_LIB:-$top/lib/libmha.a}
mhe_lib=${MHE_LIB:-$top/engine/libmhe.a}
case $mha in /*) ;; *) mha=$(pwd)/$mha ;; esac
case $mha_lib in /*) ;; *) mha_lib=$(pwd)/$mha_lib ;; esac
case $mhe_lib in /*) ;; *) mhe_lib=$(pwd)/$mhe_lib ;; esac
if [ ! -x "$mha" ] || [ ! -f "$mha_lib" ]; then
	echo "doc_examples.sh: build first ('make'): $mha or $mha_lib is missing" >&2
	exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mha-doc.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
mkdir "$work/bin" "$work/ex"
ln -s "$mha" "$work/bin/mha"
PATH="$work/bin:$PATH"
export PATH
# the package as if installed, running the mha under test
PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}"
MHA_EXECUTABLE=$mha
PYTHONDONTWRITEBYTECODE=1 # nothing written into the tree's python/
export PYTHONPATH MHA_EXECUTABLE PYTHONDONTWRITEBYTECODE

run_limit=
command -v timeout >/dev/null 2>&1 && run_limit="timeout 60"

passed=0
failed=0

have_jq=no
command -v jq >/dev/null 2>&1 && have_jq=yes
# python3 in an example is the first of $PYTHON, python3 and /usr/bin/python3
# that has NumPy (a python3 earlier on PATH may lack it)
have_numpy=no
for py in "${PYTHON:-}" "$(command -v python3)" /usr/bin/python3; do
	if [ -n "$py" ] && "$py" -c 'import numpy' >/dev/null 2>&1; then
		ln -s "$(command -v "$py")" "$work/bin/python3"
		have_numpy=yes
		break
	fi
done

# Markdown: write each ```console block, each ```c block and the ```text
# block after it into $dir; print "KIND<TAB>LINE<TAB>PATH" for each.
# shellcheck disable=SC2016 # awk's $0, not the shell's
extract_md='
BEGIN { blk = ""; pending = "" }
{
	if (blk == "") {
		if ($0 ~ /^```console[ \t]*$/) {
			blk = "console"; n++
			out = sprintf("%s/%s-%03d", dir, tag, n)
			printf "" > out
			printf "console\t%d\t%s\n", NR + 1, out
		} else if ($0 ~ /^```c[ \t]*$/) {
			blk = "c"; n++
			out = sprintf("%s/%s-%03d.c", dir, tag, n)
			printf "" > out
			pending = out
			printf "c\t%d\t%s\n", NR + 1, out
		} else if ($0 ~ /^```python[ \t]*$/) {
			blk = "python"; n++
			out = sprintf("%s/%s-%03d.py", dir, tag, n)
			printf "" > out
			printf "python\t%d\t%s\n", NR + 1, out
		} else if ($0 ~ /^```text[ \t]*$/ && pending != "") {
			blk = "text"
			out = pending ".out"
			printf "" > out
			pending = ""
		} else if ($0 ~ /^```/) {
			blk = "other"
		}
		next
	}
	if ($0 ~ /^```[ \t]*$/) {
		if (blk != "other")
			close(out)
		blk = ""
		next
	}
	if (blk != "other")
		print > out
}
END {
	if (blk != "" && blk != "other")
		printf "error\t%d\t%s\n", NR, "a fenced block is not closed"
}
'

# roff: write each .EX/.EE block un-escaped; problems go to PATH.err.
# shellcheck disable=SC2016
extract_roff='
BEGIN {
	g["aq"] = "\047"; g["dq"] = "\""; g["ga"] = "`"; g["ti"] = "~"
	g["ha"] = "^"; g["rs"] = "\\"; g["cq"] = "\047"
}
function bad(msg) {
	print FILENAME ":" NR ": " msg > (out ".err")
}
function unescape(s,    r, i, c, d, name, close_at) {
	r = ""
	for (i = 1; i <= length(s); i++) {
		c = substr(s, i, 1)
		if (c == "\\") {
			d = substr(s, i + 1, 1)
			if (d == "-") { r = r "-"; i++ }
			else if (d == "e") { r = r "\\"; i++ }
			else if (d == "&") { i++ }
			else if (d == "(" && (substr(s, i + 2, 2) in g)) {
				r = r g[substr(s, i + 2, 2)]; i += 3
			} else if (d == "[" && (close_at = index(substr(s, i + 2), "]")) > 0 &&
				   (substr(s, i + 2, close_at - 1) in g)) {
				r = r g[substr(s, i + 2, close_at - 1)]; i += close_at + 1
			} else {
				bad("unknown escape \\" d " in an example")
				r = r c
			}
		} else {
			if (c == "-" || c == "\047" || c == "`")
				bad("bare " c " in an example (write \\-, \\(aq or \\(ga)")
			r = r c
		}
	}
	return r
}
/^\.EX/ {
	n++
	out = sprintf("%s/%s-%03d", dir, tag, n)
	printf "" > out
	printf "console\t%d\t%s\n", NR + 1, out
	inex = 1
	next
}
/^\.EE/ { if (inex) close(out); inex = 0; next }
inex {
	if ($0 ~ /^[.\047]/)
		bad("a roff request inside an example")
	print unescape($0) > out
}
'

# Print one result line and count it.
ok() {
	echo "ok $1"
	passed=$((passed + 1))
}
fail() {
	echo "FAIL $1${2:+: $2}"
	failed=$((failed + 1))
}

# Run the commands of block $1, writing the transcript they make to $2.
run_block() {
	cmd=
	cont=no
	: > "$2"
	while IFS= read -r line || [ -n "$line" ]; do
		if [ "$cont" = yes ]; then
			cmd="$cmd
$line"
			printf '%s\n' "$line" >> "$2"
		else
			case $line in
			'$ '*)
				[ -n "$cmd" ] && run_one "$cmd" "$2"
				cmd=${line#'$ '}
				printf '%s\n' "$line" >> "$2"
				;;
			*)
				continue
				;;
			esac
		fi
		case $line in
		*\\) cont=yes ;;
		*) cont=no ;;
		esac
	done < "$1"
	[ -n "$cmd" ] && run_one "$cmd" "$2"
	return 0
}

run_one() {
	(cd "$top" && $run_limit sh -c "$1" < /dev/null >> "$2" 2>&1)
}

# Why block $1 cannot run here, if it cannot.
skip_reason() {
	if [ $have_jq = no ] && grep -Eq '(^|[^[:alnum:]_-])jq([^[:alnum:]_-]|$)' "$1"; then
		echo "jq is not installed"
	elif [ $have_numpy = no ] && grep -q 'python3' "$1"; then
		echo "python3 with NumPy is not installed"
	fi
}

check_console() { # where block
	where=$1 block=$2
	if [ -s "$block.err" ]; then
		fail "$where" "not a clean roff example"
		sed 's/^/    /' "$block.err"
		return
	fi
	first=$(sed -n '1p' "$block")
	case $first in
	'$ '*) ;;
	*) fail "$where" "an example must start with a '\$ ' command line"; return ;;
	esac
	why=$(skip_reason "$block")
	if [ -n "$why" ]; then
		echo "skip $where ($why)"
		return
	fi
	run_block "$block" "$block.got"
	if cmp -s "$block" "$block.got"; then
		ok "$where"
	else
		fail "$where"
		diff -u "$block" "$block.got" | sed -e '1,2d' -e 's/^/    /'
	fi
}

check_c() { # where source
	where=$1 src=$2
	exe=${src%.c}
	# an example of the engine's (mhe.h) links libmhe and what it reads with
	engine=
	grep -q '#include <mhe.h>' "$src" && engine="-Iengine $mhe_lib"
	# shellcheck disable=SC2086 # $engine: words
	if ! (cd "$top" && ${CC:-cc} -std=c11 -Wall -Wextra -Werror -Ilib -o "$exe" "$src" \
		$engine "$mha_lib" ${engine:+-lcjson -lz -ldeflate} -pthread -lm) > "$exe.log" 2>&1; then
		fail "$where" "the C example does not compile"
		sed 's/^/    /' "$exe.log"
		return
	fi
	if ! (cd "$work" && "$exe") < /dev/null > "$exe.got" 2>&1; then
		fail "$where" "the C example exits with an error"
		sed 's/^/    /' "$exe.got"
		return
	fi
	if [ ! -f "$src.out" ] || cmp -s "$src.out" "$exe.got"; then
		ok "$where"
	else
		fail "$where" "the C example prints something else"
		diff -u "$src.out" "$exe.got" | sed -e '1,2d' -e 's/^/    /'
	fi
}

check_python() { # where module
	where=$1 src=$2
	name=$(sed -n '1s/^# \(test_[A-Za-z0-9_]*\.py\)$/\1/p' "$src")
	[ -n "$name" ] || return 0 # a fragment to read, not a module to run
	if [ $have_numpy = no ] || ! python3 -c 'import pytest' >/dev/null 2>&1; then
		echo "skip $where (python3 with NumPy and pytest is not installed)"
		return
	fi
	dir=${src%.py}.d
	mkdir "$dir" && cp "$src" "$dir/$name"
	if (cd "$dir" && $run_limit python3 -m pytest -q -p no:cacheprovider "$name") < /dev/null \
		> "$dir.got" 2>&1; then
		ok "$where"
	else
		fail "$where" "the pytest example does not pass"
		sed 's/^/    /' "$dir.got"
	fi
}

i=0
found=no
for doc in "$@"; do
	i=$((i + 1))
	if [ ! -r "$doc" ]; then
		fail "$doc" "cannot read it"
		continue
	fi
	case $doc in
	*.md) prog=$extract_md ;;
	*) prog=$extract_roff ;;
	esac
	list=$work/list.$i
	if ! awk -v dir="$work/ex" -v tag="$i" "$prog" "$doc" > "$list"; then
		fail "$doc" "could not read its examples"
		continue
	fi
	# a page with no example (docs/architecture.md) is said and passed
	# over, so that make can give every page; no example at all fails
	if [ ! -s "$list" ]; then
		echo "skip $doc (no examples)"
		continue
	fi
	found=yes
	tab=$(printf '\t')
	while IFS=$tab read -r kind lineno path; do
		case $kind in
		console) check_console "$doc:$lineno" "$path" ;;
		c) check_c "$doc:$lineno" "$path" ;;
		python) check_python "$doc:$lineno" "$path" ;;
		*) fail "$doc:$lineno" "$path" ;;
		esac
	done < "$list"
done

[ "$found" = yes ] || fail "$*" "no examples found"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

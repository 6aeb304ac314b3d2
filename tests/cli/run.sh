#!/bin/sh
# tests/cli/run.sh: end-to-end tests of the mha command line.
#
# Each case is a directory tests/cli/cases/TOPIC/NAME/ (TOPIC: what it
# tests, mostly NAME's first word: fwd, rope, npz, model ...) holding
#   cmd        one shell command line, run with sh -c in a fresh temporary
#              directory, with 'mha' on PATH, $TOP the top of the source tree,
#              $PYTHON a Python 3 with the json module, and 'data' a symbolic
#              link to tests/cli/data (so messages show short, stable names)
#   stdout     what the command must write on standard output, exactly
#   stderr     what it must write on standard error, exactly
#   status     its exit status
#   after      (optional) a script run afterwards in the same directory, to
#              look at files left behind; its standard output and error
#              must equal after.out
#
#   sh tests/cli/run.sh [NAME...]           run all cases, or the ones named
#   UPDATE=1 sh tests/cli/run.sh [NAME...]  rewrite the expected files from
#                                           what the command did: then read
#                                           every changed file and judge it
#   MHA=path/to/mha sh tests/cli/run.sh     test another binary (default ./mha)
#   CASE_TIMEOUT=300 sh tests/cli/run.sh    seconds a case may take (default
#                                           20; more for a slow mha, such as
#                                           one under valgrind)
#   SKIP_CASES='mem-* x' sh tests/cli/run.sh  cases not run (shell patterns),
#                                           counted as skipped: make check-arm64
#                                           under qemu-user, whose own memory
#                                           the mem-* cases' peaks would count
#
# These test cli/: options, file formats, messages, exit statuses.  The
# arithmetic is tested by tests/unit/ and tests/numpy_check.py.

cd "$(dirname "$0")/../.." || exit 2
TOP=$(pwd -P)
LC_ALL=C
export LC_ALL TOP
# a heatmap fits the width COLUMNS gives: a case that wants one sets it
unset COLUMNS

MHA=${MHA:-./mha}
case $MHA in
/*) ;;
*) MHA=$TOP/$MHA ;;
esac
if [ ! -x "$MHA" ]; then
	echo "run.sh: no mha program at '$MHA': run 'make' first" >&2
	exit 2
fi
if [ -z "$PYTHON" ]; then
	if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
export PYTHON

root=$(mktemp -d "${TMPDIR:-/tmp}/mha-cli-tests.XXXXXX") || exit 2
trap 'rm -rf "$root"' EXIT
trap 'exit 2' HUP INT TERM
mkdir "$root/bin" "$root/work" "$root/out" || exit 2
ln -s "$MHA" "$root/bin/mha" || exit 2
PATH=$root/bin:$PATH
export PATH

# a case that hangs (a FIFO nobody opens, a read of the terminal) fails
# instead of stopping the run
if command -v timeout >/dev/null 2>&1; then limit="timeout ${CASE_TIMEOUT:-20}"; else limit=; fi

cases=tests/cli/cases
if [ $# -eq 0 ]; then
	# case names have no spaces: split on newlines
	# shellcheck disable=SC2046
	set -- $(cd "$cases" && for d in */*/; do [ -f "$d/cmd" ] && printf '%s\n' "${d%/}"; done)
fi

passed=0
failed=0
skipped=0

# compare NAME FILE ACTUAL: 0 if the expected file matches (or was updated)
compare()
{
	exp=$cases/$1/$2
	if [ -n "$UPDATE" ]; then
		if ! cmp -s "$exp" "$3" 2>/dev/null; then
			cp "$3" "$exp"
			echo "  updated $1/$2"
		fi
		return 0
	fi
	if [ ! -f "$exp" ]; then
		echo "  no $1/$2: write it, or run with UPDATE=1 and read what it holds"
		sed 's/^/  | /' "$3"
		return 1
	fi
	cmp -s "$exp" "$3" && return 0
	echo "  $2 differs (--- expected, +++ actual):"
	diff -u "$exp" "$3" | sed -e '1,2d' -e 's/^/  /'
	return 1
}

for name in "$@"; do
	name=${name%/}
	name=${name##*/} # TOPIC/NAME and tests/cli/cases/TOPIC/NAME/ work too
	# the case's folder under its topic (a name is one case's, whatever the topic)
	dir=$cases/none/$name
	for d in "$cases"/*/"$name"; do
		[ -f "$d/cmd" ] && dir=$d && break
	done
	case_path=${dir#"$cases"/}
	skip=
	for pat in ${SKIP_CASES:-}; do
		# shellcheck disable=SC2254
		case $name in $pat) skip=1 ;; esac
	done
	if [ -n "$skip" ]; then
		skipped=$((skipped + 1))
		continue
	fi
	if [ ! -f "$dir/cmd" ]; then
		echo "FAIL $name"
		echo "  no such case: $dir/cmd"
		failed=$((failed + 1))
		continue
	fi
	work=$root/work/$name
	out=$root/out/$name
	mkdir "$work" "$out" || exit 2
	ln -s "$TOP/tests/cli/data" "$work/data"
	cmd=$(cat "$dir/cmd")
	(cd "$work" && $limit sh -c "$cmd") >"$out/stdout" 2>"$out/stderr" </dev/null
	echo $? >"$out/status"
	if [ -f "$dir/after" ]; then
		(cd "$work" && sh "$TOP/$dir/after") >"$out/after.out" 2>&1 </dev/null
	fi

	if report=$(
		bad=0
		for f in stdout stderr status; do
			compare "$case_path" "$f" "$out/$f" || bad=1
		done
		if [ -f "$dir/after" ]; then
			compare "$case_path" after.out "$out/after.out" || bad=1
		fi
		exit $bad
	); then
		echo "ok $name"
		passed=$((passed + 1))
	else
		echo "FAIL $name"
		failed=$((failed + 1))
	fi
	[ -n "$report" ] && printf '%s\n' "$report"
done

if [ "$skipped" -gt 0 ]; then
	echo "$passed passed, $failed failed, $skipped skipped ($SKIP_CASES)"
else
	echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]

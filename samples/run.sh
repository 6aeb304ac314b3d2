#!/bin/sh
# samples/run.sh: run every sample and check it.
#
# For each samples/NAME/ holding a cmd file: run that command line with
# mha on PATH, compare its output with expected.txt byte for byte, then
# run NAME/check.py, which recomputes the sample with numpy and checks the
# tutorial's own numbers.  One "ok ..." or "FAIL ..." line per check, then
# "N passed, N failed"; exit 1 if anything failed.
#
#   sh samples/run.sh              from the top of the repository
#   MHA=path/to/mha sh samples/run.sh
#   UPDATE=1 sh samples/run.sh     rewrite each expected.txt from mha's output
#   PYTHON=... sh samples/run.sh   a Python with numpy (default /usr/bin/python3)

cd "$(dirname "$0")/.." || exit 2

MHA=${MHA:-./mha}
case $MHA in
*/*) ;;
*) MHA=$(command -v "$MHA") || MHA= ;;
esac
case $MHA in
/*) ;;
?*) MHA=$(pwd)/$MHA ;;
esac
if [ -z "$MHA" ] || [ ! -x "$MHA" ]; then
	echo "samples/run.sh: no mha binary (build it with make, or set MHA)" >&2
	exit 2
fi
PYTHON=${PYTHON:-/usr/bin/python3}

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir "$tmp/bin" && ln -s "$MHA" "$tmp/bin/mha" || exit 2
PATH=$tmp/bin:$PATH
export PATH MHA

passed=0
failed=0
ok() { echo "ok $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
indent() { sed 's/^/    /'; }

for dir in samples/*/; do
	dir=${dir%/}
	name=${dir#samples/}
	[ -f "$dir/cmd" ] || continue

	sh "$dir/cmd" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail "$name: cmd exited $rc"
		indent <"$tmp/err"
	elif [ -s "$tmp/err" ]; then
		fail "$name: cmd wrote to standard error"
		indent <"$tmp/err"
	elif [ -n "$UPDATE" ]; then
		cp "$tmp/out" "$dir/expected.txt"
		ok "$name: expected.txt written from cmd"
	elif [ ! -f "$dir/expected.txt" ]; then
		fail "$name: no expected.txt (UPDATE=1 sh samples/run.sh writes it)"
	elif cmp -s "$dir/expected.txt" "$tmp/out"; then
		ok "$name: cmd output matches expected.txt"
	else
		fail "$name: cmd output differs from expected.txt"
		diff -u "$dir/expected.txt" "$tmp/out" | head -n 40 | indent
	fi

	if [ ! -f "$dir/check.py" ]; then
		fail "$name: no check.py"
		continue
	fi
	"$PYTHON" -B "$dir/check.py" >"$tmp/check" 2>&1
	rc=$?
	before=$failed
	while IFS= read -r line; do
		case $line in
		"ok "*) passed=$((passed + 1)); echo "$line" ;;
		"FAIL "*) failed=$((failed + 1)); echo "$line" ;;
		*) echo "    $line" ;;
		esac
	done <"$tmp/check"
	if [ "$rc" -ne 0 ] && [ "$failed" -eq "$before" ]; then
		fail "$name: check.py exited $rc"
	fi
done

if [ $((passed + failed)) -eq 0 ]; then
	fail "no samples found"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

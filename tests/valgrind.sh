#!/bin/sh
# tests/valgrind.sh: the test suites under valgrind memcheck (make
# check-valgrind; TESTING.md has the why and the latest results).
#
#   sh tests/valgrind.sh                 unit, cli, samples, conformance
#   sh tests/valgrind.sh unit cli ...    only these suites
#
# It checks the normal build (./mha, tests/test_lib, tests/conformance: make
# check-valgrind builds them first).  Every process runs under
#
#   valgrind --tool=memcheck --error-exitcode=99 --leak-check=full
#            --errors-for-leak-kinds=definite,indirect,possible
#            --suppressions=tests/valgrind.supp
#
# mha through a wrapper named mha that the suites find as $MHA or on PATH,
# the unit tests (CK_FORK=no: one process, one leak check) and the
# conformance runner directly.  Still-reachable memory at exit is not an
# error; lost memory is.  Each process writes its valgrind report to a file
# of its own, so mha's standard error stays exactly what the cases expect,
# and any report at all fails the run (it is printed at the end); the exit
# status 99 fails the case that ran it too.
#
# Suites run two at a time (the CLI cases in two halves).  The library's
# threads still run (2 where the machine has 2 cores), so the threaded
# paths are checked; they spin 50 us at most before they sleep, so under
# valgrind, which runs one thread at a time, they waste little.  valgrind does not run AVX-512 (its CPUID hides it),
# so mha picks the AVX2 kernels; the unit tests run the base ones as well.
#
# Known differences under valgrind are listed in tests/valgrind.xfail, with
# the reason: a listed unit test may fail its assertions, a listed CLI
# case may differ in stdout or after.out (never in stderr or exit status),
# a listed sample may fail its check.py numbers (never its cmd).  Anything
# else that fails, fails the run.  A listed one that passes is reported
# as "xpass", so the list can shrink.
#
# Output: each suite's own output, then "xfail ..." lines, valgrind's
# reports if any, and a summary; exit status 1 if anything failed.

# Words are split on purpose: $VG_OPTS is a list of options, $cli1 and
# $cli2 lists of case names, and names in the xfail list have no spaces.
# shellcheck disable=SC2086,SC2013

LC_ALL=C
export LC_ALL
top=$(cd "$(dirname "$0")/.." && pwd) || exit 2
cd "$top" || exit 2
PYTHON=${PYTHON:-/usr/bin/python3}
VALGRIND=${VALGRIND:-valgrind}
CONFORMANCE_DIR=${CONFORMANCE_DIR:-../shared/conformance/onnx-attention-opset25}
export PYTHON

if [ $# -eq 0 ]; then
	set -- unit cli samples conformance
fi
for s in "$@"; do
	case $s in
	unit | cli | samples | conformance) ;;
	*) echo "valgrind.sh: unknown suite '$s' (unit, cli, samples, conformance)" >&2; exit 2 ;;
	esac
done
if ! command -v "$VALGRIND" >/dev/null 2>&1; then
	echo "valgrind.sh: no valgrind (Debian: apt-get install valgrind)" >&2
	exit 2
fi
for f in mha tests/test_lib tests/conformance; do
	if [ ! -x "$f" ]; then
		echo "valgrind.sh: no $f: run 'make all tests/test_lib tests/conformance' first" >&2
		exit 2
	fi
done

case $top in
*[[:space:]]*) echo "valgrind.sh: '$top': a path with spaces is not supported" >&2; exit 2 ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mha-valgrind.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir "$tmp/bin" "$tmp/logs" || exit 2

VG_OPTS="--tool=memcheck -q --error-exitcode=99 --leak-check=full \
--show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
--suppressions=$top/tests/valgrind.supp --vgdb=no --num-callers=30"

# mha under valgrind, its report in a file of its own, opened here on fd 9:
# with --log-file valgrind would open it on the lowest free descriptor, which
# is mha's standard output when a case closes it (>&-)
cat >"$tmp/bin/mha" <<EOF
#!/bin/sh
exec 9>"\$(mktemp "$tmp/logs/mha.XXXXXX")" || exit 2
exec "$VALGRIND" $VG_OPTS --log-fd=9 "$top/mha" "\$@"
EOF
chmod +x "$tmp/bin/mha" || exit 2
MHA=$tmp/bin/mha

# vg NAME COMMAND...: COMMAND itself under valgrind, report in logs/NAME.*
vg() {
	vg_name=$1
	shift
	"$VALGRIND" $VG_OPTS --log-file="$tmp/logs/$vg_name.%p.log" "$@"
}

want() { for s in "$@"; do case " $SUITES " in *" $s "*) return 0 ;; esac; done; return 1; }
SUITES=" $* "

# timed NAME COMMAND...: output to NAME.out, status to NAME.rc, seconds to NAME.time
timed() {
	t_name=$1
	shift
	t_start=$(date +%s)
	"$@" >"$tmp/$t_name.out" 2>&1
	echo $? >"$tmp/$t_name.rc"
	echo $(($(date +%s) - t_start)) >"$tmp/$t_name.time"
}

run_unit() { CK_FORK=no vg unit ./tests/test_lib; }
# a case may run mha a dozen times, or on 2000 rows: minutes, not seconds
# the mem- cases' peak-memory bounds measure valgrind, not mha: off here
run_cli() { MHA_PEAK_UNCHECKED=1 MHA=$MHA CASE_TIMEOUT=300 sh tests/cli/run.sh "$@"; }
run_samples() { MHA=$MHA sh samples/run.sh; }
run_conformance() { vg conformance ./tests/conformance --mha "$MHA" "$CONFORMANCE_DIR"; }

# the CLI cases in two halves, alternately, so both lanes get long and short ones
cli1=
cli2=
if want cli; then
	n=0
	for d in tests/cli/cases/*/*/; do
		[ -f "$d/cmd" ] || continue
		d=${d%/}
		d=${d##*/}
		if [ $((n % 2)) -eq 0 ]; then cli1="$cli1 $d"; else cli2="$cli2 $d"; fi
		n=$((n + 1))
	done
fi

start=$(date +%s)
(
	want cli && timed cli1 run_cli $cli1
	want unit && timed unit run_unit
	want samples && timed samples run_samples
) &
lane1=$!
(
	want cli && timed cli2 run_cli $cli2
	if want conformance; then
		if [ -d "$CONFORMANCE_DIR" ]; then
			timed conformance run_conformance
		else
			echo "$CONFORMANCE_DIR not found: conformance skipped" >"$tmp/conformance.skip"
		fi
	fi
) &
lane2=$!
wait $lane1
wait $lane2
total=$(($(date +%s) - start))

# ---- judge -------------------------------------------------------------

bad=0
summary=
xfail() { grep -q "^$1 $2\$" tests/valgrind.xfail 2>/dev/null; }
note() { summary="$summary
$*"; }
show() { # NAME TITLE
	echo "==== $2 under valgrind ($(cat "$tmp/$1.time")s)"
	cat "$tmp/$1.out"
}

if want unit; then
	show unit "unit tests (tests/test_lib, CK_FORK=no)"
	rc=$(cat "$tmp/unit.rc")
	# file:line:F:tcase:test:iteration: message, for each failed assertion
	failed=$(sed -n 's/^[^:]*:[0-9]*:\([FE]\):[^:]*:\([^:]*\):.*/\1 \2/p' "$tmp/unit.out")
	unexpected=
	printf '%s\n' "$failed" | while read -r kind test; do
		[ -n "$test" ] || continue
		if [ "$kind" = F ] && xfail unit "$test"; then
			echo "xfail unit $test"
		else
			echo "FAIL unit $test (not in tests/valgrind.xfail)"
		fi
	done >"$tmp/unit.judged"
	cat "$tmp/unit.judged"
	grep -q '^FAIL' "$tmp/unit.judged" && unexpected=yes
	case $rc in
	0) ;;
	1) [ -n "$failed" ] || unexpected=yes ;;
	*) unexpected=yes ;;
	esac
	checks=$(sed -n 's/.*Checks: \([0-9]*\),.*/\1/p' "$tmp/unit.out")
	for t in $(sed -n 's/^unit //p' tests/valgrind.xfail); do
		printf '%s\n' "$failed" | grep -q " $t\$" || echo "xpass unit $t (listed in tests/valgrind.xfail, passed)"
	done
	if [ -n "$unexpected" ]; then
		bad=1
		note "unit: FAILED (exit status $rc)"
	else
		note "unit: ${checks:-?} checks, $(grep -c '^xfail' "$tmp/unit.judged") xfail ($(cat "$tmp/unit.time")s)"
	fi
fi

if want cli; then
	cat "$tmp/cli1.out" "$tmp/cli2.out" >"$tmp/cli.out"
	t1=$(cat "$tmp/cli1.time") t2=$(cat "$tmp/cli2.time")
	echo "$((t1 > t2 ? t1 : t2))" >"$tmp/cli.time"
	show cli "CLI cases (tests/cli/run.sh, two halves side by side)"
	# each FAIL NAME line, and the files its report says differ
	awk '
		/^FAIL / { if (name != "") print name, files; name = $2; files = ""; next }
		/^(ok|[0-9]+ passed)/ { if (name != "") print name, files; name = ""; next }
		name != "" && /^  [a-z.]+ differs \(--- expected/ { files = files " " $1; next }
		name != "" && /^  no / { files = files " missing" }
		END { if (name != "") print name, files }
	' "$tmp/cli.out" | while read -r name files; do
		ok=yes
		xfail cli "$name" || ok=no
		for f in $files; do
			case $f in stdout | after.out) ;; *) ok=no ;; esac
		done
		if [ $ok = yes ]; then
			echo "xfail cli $name ($(echo "$files" | sed 's/^ *//; s/ /,/g'))"
		else
			echo "FAIL cli $name (${files:-no report}; only stdout or after.out of a case in tests/valgrind.xfail may differ)"
		fi
	done >"$tmp/cli.judged"
	cat "$tmp/cli.judged"
	for t in $(sed -n 's/^cli //p' tests/valgrind.xfail); do
		grep -q "^ok $t\$" "$tmp/cli.out" && echo "xpass cli $t (listed in tests/valgrind.xfail, passed)"
	done
	passed=$(grep -c '^ok ' "$tmp/cli.out")
	if grep -q '^FAIL' "$tmp/cli.judged" || [ "$(grep -c '^ok \|^FAIL ' "$tmp/cli.out")" -eq 0 ]; then
		bad=1
		note "cli: FAILED"
	else
		note "cli: $((passed + $(grep -c '^xfail' "$tmp/cli.judged"))) cases, $(grep -c '^xfail' "$tmp/cli.judged") xfail (${t1}s and ${t2}s)"
	fi
fi

if want samples; then
	show samples "samples (samples/run.sh)"
	sed -n 's/^FAIL \([^:]*\): \(.*\)/\1	\2/p' "$tmp/samples.out" | while IFS='	' read -r name what; do
		case $what in
		"cmd "* | "no "* | "check.py exited"*) echo "FAIL samples $name: $what" ;;
		*) if xfail samples "$name"; then echo "xfail samples $name: $(printf '%s' "$what" | cut -c1-60)..."
		   else echo "FAIL samples $name (not in tests/valgrind.xfail)"; fi ;;
		esac
	done >"$tmp/samples.judged"
	cat "$tmp/samples.judged"
	for t in $(sed -n 's/^samples //p' tests/valgrind.xfail); do
		grep -q "^FAIL $t: " "$tmp/samples.out" || echo "xpass samples $t (listed in tests/valgrind.xfail, passed)"
	done
	rc=$(cat "$tmp/samples.rc")
	if grep -q '^FAIL' "$tmp/samples.judged" || { [ "$rc" -ne 0 ] && ! grep -q '^xfail' "$tmp/samples.judged"; }; then
		bad=1
		note "samples: FAILED"
	else
		note "samples: $(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 checks passed, \2 xfail/p' "$tmp/samples.out") ($(cat "$tmp/samples.time")s)"
	fi
fi

if want conformance; then
	if [ -f "$tmp/conformance.skip" ]; then
		cat "$tmp/conformance.skip"
		note "conformance: skipped ($CONFORMANCE_DIR not found)"
	else
		show conformance "conformance (tests/conformance --mha, library and CLI)"
		if [ "$(cat "$tmp/conformance.rc")" -ne 0 ]; then
			bad=1
			note "conformance: FAILED (exit status $(cat "$tmp/conformance.rc"))"
		else
			note "conformance: $(tail -n 1 "$tmp/conformance.out") ($(cat "$tmp/conformance.time")s)"
		fi
	fi
fi

# every process's report: empty when memcheck found nothing
procs=$(find "$tmp/logs" -type f | wc -l)
reports=$(find "$tmp/logs" -type f -size +0 | wc -l)
if [ "$reports" -gt 0 ]; then
	bad=1
	echo "==== valgrind reports"
	find "$tmp/logs" -type f -size +0 | while read -r f; do
		echo "---- $f"
		cat "$f"
	done
fi
note "valgrind: $procs processes checked, $reports with errors (${total}s in all)"

echo "==== summary$summary"
if [ $bad -ne 0 ]; then
	echo "check-valgrind: FAILED"
	exit 1
fi
echo "check-valgrind: no memory errors, no leaks"

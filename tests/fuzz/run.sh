#!/bin/sh
# tests/fuzz/run.sh: run the libFuzzer targets built in build/fuzz/ (make fuzz,
# make fuzz-regress; see tests/fuzz/README.md).
#
#   sh tests/fuzz/run.sh fuzz SECONDS TARGET...   fuzz each target for SECONDS on
#                                                 a copy of its corpus
#   sh tests/fuzz/run.sh regress 0 TARGET...      run each target once over its
#                                                 corpus and its regressions
#
# A target fails when it crashes, leaks, times out (10 s on one input), runs
# out of memory (2 GB) or trips a sanitizer.  The committed corpus is never
# written to: fuzzing adds inputs to build/fuzz/corpus-TARGET only, and
# whatever failed is kept in build/fuzz/artifacts-TARGET/ with the log in
# build/fuzz/TARGET.log.  The exit status is 1 when any target failed.

cd "$(dirname "$0")/../.." || exit 2
mode=$1
seconds=$2
shift 2
passed=0
failed=0
[ "$mode" = fuzz ] && echo "fuzzing each target for $seconds s"

# the input's error messages and --help would flood the log: fd 1 and 2 are
# closed for the target, libFuzzer and the sanitizers keep their own copy
common="-rss_limit_mb=2048 -timeout=10 -close_fd_mask=3"

for t in "$@"; do
	bin=build/fuzz/fuzz_$t
	log=build/fuzz/$t.log
	art=build/fuzz/artifacts-$t
	rm -rf "$art"
	mkdir -p "$art"
	if [ "$mode" = fuzz ]; then
		corpus=build/fuzz/corpus-$t
		dict=
		[ -f tests/fuzz/dict/$t.dict ] && dict=-dict=tests/fuzz/dict/$t.dict
		regress=
		[ -d tests/fuzz/regressions/$t ] && regress=tests/fuzz/regressions/$t
		rm -rf "$corpus"
		mkdir -p "$corpus"
		cp tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
		# new inputs go to the first directory only: the regressions stay as they are
		$bin $common -max_total_time="$seconds" -print_final_stats=1 $dict \
			-artifact_prefix="$art"/ "$corpus" $regress >"$log" 2>&1
		rc=$?
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
		cov=$(grep '^#[0-9]' "$log" | tail -n 1 | sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1, ft \2, corpus \3/p')
		what="${runs:-?} executions${cov:+ ($cov)}"
	else
		files=
		n=0
		for f in tests/fuzz/corpus/$t/* tests/fuzz/regressions/$t/*; do
			[ -f "$f" ] && files="$files $f" && n=$((n + 1))
		done
		# files as arguments: each run once, nothing written anywhere
		$bin $common -artifact_prefix="$art"/ $files >"$log" 2>&1
		rc=$?
		what="$n inputs"
	fi
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		printf '%-8s ok      %s\n' "$t" "$what"
	else
		failed=$((failed + 1))
		printf '%-8s FAILED  %s: see %s, inputs in %s/\n' "$t" "$what" "$log" "$art"
		grep -m 1 -E '^==[0-9]+==ERROR|^SUMMARY|ERROR: libFuzzer|runtime error' "$log" | sed 's/^/         /'
	fi
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]

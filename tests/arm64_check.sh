#!/bin/sh
# arm64_check.sh DIR: make check-arm64's runs of the arm64 build in DIR/tree
# (cross-built there by the Makefile), under qemu-user on this machine.
#
# The arm64 programs run against the arm64 libraries of Debian's multiarch
# packages (libc6:arm64 beside libcjson-dev:arm64 …), found from / by
# QEMU_LD_PREFIX=/: never the cross toolchain's own glibc in
# /usr/aarch64-linux-gnu, whose loader, mixed with the other glibc's
# libc.so.6, deadlocks in the first pthread_create (issue 37's hang).
#
#  1. the unit tests, with the NEON kernels (the widest: they must be
#     the ones chosen) and with the baseline, side by side;
#  2. samples/two-head-causal on two threads, within 10 s;
#  3. SIGTERM and SIGINT stop a run within a second (tests/signal_check.py);
#  4. the CLI's golden cases, but for the mem-* ones, whose peak memory
#     would count the emulator's own.
set -u
cd "$(dirname "$0")/.." || exit 2
TOP=$(pwd -P)
dir=$TOP/$1
tree=$dir/tree
PYTHON=${PYTHON:-python3}
QEMU="env QEMU_LD_PREFIX=/ qemu-aarch64"
fail=0

# the arm64 mha as a program on this machine (tests/cli/run.sh links it as mha)
printf '#!/bin/sh\nexec env QEMU_LD_PREFIX=/ qemu-aarch64 %s/mha "$@"\n' "$tree" > "$dir/mha"
chmod +x "$dir/mha"

echo "== arm64 unit tests under qemu-user: the widest kernels and the baseline, side by side"
for k in widest base; do
	(
		if [ $k = base ]; then MHA_KERNEL=base; export MHA_KERNEL; else unset MHA_KERNEL; fi
		CK_FORK=yes CK_TIMEOUT_MULTIPLIER=20 $QEMU "$tree/tests/test_lib" > "$dir/unit-$k.log" 2>&1
		echo $? > "$dir/unit-$k.rc"
	) &
done
wait
for k in widest base; do
	echo "-- MHA_KERNEL=$([ $k = base ] && echo base || echo '(unset)')"
	cat "$dir/unit-$k.log"
	[ "$(cat "$dir/unit-$k.rc")" = 0 ] || fail=1
done
# the kernels the unset run chose, as the memory test names them
chosen=$(sed -n 's/.*(\([a-z0-9]*\) kernels)$/\1/p' "$dir/unit-widest.log" | head -1)
if [ "$chosen" = neon ]; then
	echo "arm64 under emulation: the NEON kernels were chosen (mha_kernel() = neon)"
else
	echo "arm64 under emulation: kernels chosen '$chosen', want neon" >&2
	fail=1
fi

echo "== samples/two-head-causal on two threads, under qemu-aarch64"
t0=$(date +%s)
if (cd samples/two-head-causal && timeout -s KILL 10 "$dir/mha" forward -x x.json -w weights.json \
	--heads 2 --causal --threads 2 > "$dir/two-head.out"); then
	echo "finished in $(( $(date +%s) - t0 )) s:"
	cat "$dir/two-head.out"
else
	echo "two-head-causal with 2 threads did not finish within 10 s" >&2
	fail=1
fi

echo "== a run told to stop stops, under qemu-aarch64"
$PYTHON tests/signal_check.py --tokens 16384 "$dir/mha" || fail=1

echo "== the CLI's golden cases against the arm64 mha"
MHA=$dir/mha CASE_TIMEOUT=120 SKIP_CASES='mem-*' sh tests/cli/run.sh > "$dir/cli.log" 2>&1 || fail=1
grep -v '^ok ' "$dir/cli.log"

[ $fail = 0 ] && echo "make check-arm64: all passed"
exit $fail

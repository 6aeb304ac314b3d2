#!/bin/sh
# install_test.sh: 'make install' into a scratch DESTDIR honours PREFIX, puts
# every piece where pkg-config and man find it, a program builds against the
# installed header and both libraries, and 'make uninstall' takes it all away.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest
prefix=/opt/mha-test
root=$dest$prefix
pass=0
fail=0

ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@" >"$tmp/log" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/  /' "$tmp/log"; fi; }

version=$(sed -n 's/^#define MHA_VERSION_STRING "\(.*\)"/\1/p' lib/mha.h)
sover=$(sed -n 's/^SOVERSION = //p' Makefile)
check "make install" make -s install PREFIX=$prefix DESTDIR="$dest"
esover=$(sed -n 's/^ENGINE_SOVERSION = //p' Makefile)
eversion=$(sed -n 's/^#define MHE_VERSION_\(MAJOR\|MINOR\|RELEASE\) \([0-9]*\)/\2/p' engine/mhe.h | paste -sd.)
for f in bin/mha lib/libmha.a lib/libmha.so "lib/libmha.so.$sover" "lib/libmha.so.$version" include/mha.h \
         lib/pkgconfig/mha.pc share/man/man1/mha.1 lib/libmhe.a lib/libmhe.so "lib/libmhe.so.$esover" \
         "lib/libmhe.so.$eversion" include/mhe.h lib/pkgconfig/mhe.pc; do
	if [ -e "$root/$f" ]; then ok "installed $f"; else bad "installed $f"; fi
done
soname=$(objdump -p "$root/lib/libmha.so.$version" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
if [ "$soname" = "libmha.so.$sover" ]; then ok "soname libmha.so.$sover"; else bad "soname is '$soname', not libmha.so.$sover"; fi
check "installed mha runs" "$root/bin/mha" --version
check "pkg-config reads mha.pc" env PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --exists mha

cat >"$tmp/use.c" <<'C'
#include <mha.h>
#include <stdio.h>
int main(void)
{
	const double x[2] = { 0.0, 1.0 };
	mha_dims d = { .size = sizeof(mha_dims), .n_q = 2, .n_kv = 2, .d_q_in = 1, .d_k_in = 1, .d_v_in = 1,
		       .heads = 1, .d_k = 1, .d_v = 1 };
	mha_inputs in = { .size = sizeof(mha_inputs), x, x, x };
	mha_config cfg = { .size = sizeof(mha_config), .scale_mode = MHA_SCALE_NONE, .causal = MHA_CAUSAL_TOP_LEFT };
	double out[2];
	mha_status st = mha_forward(out, &d, &in, NULL, &cfg, NULL, NULL);
	printf("%s %s %g\n", mha_version(), mha_strerror(st), out[0]);
	return st != MHA_OK;
}
C
# the pkg-config file names the final prefix; point it into DESTDIR for the build
flags="-I$root/include -L$root/lib"
check "builds against the static library" sh -c "cc -std=c11 $flags '$tmp/use.c' '$root/lib/libmha.a' -pthread -lm -o '$tmp/use_static' && '$tmp/use_static'"
check "builds against the shared library" sh -c "cc -std=c11 $flags '$tmp/use.c' -lmha -lm -o '$tmp/use_shared' && LD_LIBRARY_PATH='$root/lib' '$tmp/use_shared'"
out=$("$tmp/use_static" 2>&1)
if [ "$out" = "$version success 0" ]; then
	ok "static program prints the library's answer"
else
	bad "static program prints the library's answer (got: $out)"
fi
if command -v nm >/dev/null 2>&1; then
	leaked=$(nm -D --defined-only "$root/lib/libmha.so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^mha_/ {print $3}' | tr '\n' ' ')
	if [ -z "$leaked" ]; then ok "the shared library exports only mha_ symbols"; else bad "exports beyond mha_: $leaked"; fi
	leaked=$(nm -D --defined-only "$root/lib/libmhe.so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^mhe_/ {print $3}' | tr '\n' ' ')
	if [ -z "$leaked" ]; then ok "the engine exports only mhe_ symbols"; else bad "the engine exports beyond mhe_: $leaked"; fi
fi
# a program over the installed engine: its shared library, over libmha's
cat >"$tmp/engine.c" <<'C'
#include <mhe.h>
#include <stdio.h>
int main(void)
{
	mhe_run *r = mhe_run_new();
	int rc = mhe_run_set(r, "heads", "0");
	printf("%u %d %s\n", mhe_version_number(), rc, mhe_last_error()->text);
	mhe_run_free(r);
	return rc != MHE_USAGE;
}
C
check "builds against the installed engine" sh -c "cc -std=c11 $flags -Wl,-rpath-link,'$root/lib' '$tmp/engine.c' -lmhe -o '$tmp/use_engine' && LD_LIBRARY_PATH='$root/lib' '$tmp/use_engine'"
out=$(LD_LIBRARY_PATH="$root/lib" "$tmp/use_engine" 2>&1)
case $out in *" 2 --heads expects a whole number of at least 1, not '0'") ok "the installed engine answers: $out";;
	*) bad "the installed engine answers: $out";; esac
# the Python package beside python3's own, running the installed program
py=${PYTHON:-/usr/bin/python3}
pydir=$("$py" -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])' 2>/dev/null)
if [ -n "$pydir" ]; then
	if [ -f "$root/$pydir/mha/__init__.py" ] && grep -q "EXECUTABLE = '$prefix/bin/mha'" "$root/$pydir/mha/_where.py"; then
		ok "installed the Python package, naming $prefix/bin/mha"
	else
		bad "installed the Python package in $pydir, naming $prefix/bin/mha"
	fi
	check "the installed package runs the installed mha" env -u PYTHONPATH PYTHONPATH="$root/$pydir" \
		MHA_EXECUTABLE="$root/bin/mha" "$py" -c 'import mha, numpy as np; assert mha.__version__ == "'"$version"'"; assert mha.forward(np.eye(2)).output.shape == (2, 2)'
fi
check "make uninstall" make -s uninstall PREFIX=$prefix DESTDIR="$dest"
left=$(find "$dest" -type f -o -type l)
if [ -z "$left" ]; then ok "uninstall removed every file"; else bad "uninstall left: $left"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

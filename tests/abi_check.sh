#!/bin/sh
# abi_check.sh: a program built against this release's header runs against
# the next build's library unchanged (make test-abi).  The library is built
# again in a scratch copy of the tree with MHA_ABI_TEST_GROWN, which grows
# mha_config and mha_observer by a field at their end as a next version
# would; tests/abi_client.c, built against today's lib/mha.h, must print the
# very lines against it as against today's library.  A program built against
# the grown header (a newer one) run against today's library is refused
# (MHA_ERR_VERSION), never read past.
set -eu
top=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CC=${CC:-cc}
tar -cf - Makefile lib | tar -C "$tmp" -xf -
make -s -C "$tmp" -j"$(nproc 2>/dev/null || echo 1)" CFLAGS="-O2 -g -DMHA_ABI_TEST_GROWN" \
	lib/libmha.a >/dev/null
$CC -std=c11 -Ilib -o "$tmp/now" tests/abi_client.c lib/libmha.a -pthread -lm
$CC -std=c11 -Ilib -o "$tmp/next" tests/abi_client.c "$tmp/lib/libmha.a" -pthread -lm
$CC -std=c11 -Ilib -DMHA_ABI_TEST_GROWN -o "$tmp/newer" tests/abi_client.c lib/libmha.a -pthread -lm
"$tmp/now" > "$tmp/now.out"
"$tmp/next" > "$tmp/next.out" || { echo "FAIL today's program against the grown library:"; cat "$tmp/next.out"; exit 1; }
if ! cmp -s "$tmp/now.out" "$tmp/next.out"; then
	echo "FAIL today's program against the grown library prints otherwise:"
	diff "$tmp/now.out" "$tmp/next.out"
	exit 1
fi
if "$tmp/newer" > "$tmp/newer.out" || ! grep -q "another version of mha.h" "$tmp/newer.out"; then
	echo "FAIL a newer program against today's library was not refused:"
	cat "$tmp/newer.out"
	exit 1
fi
echo "ok a program built against this header runs against a grown library ($(wc -l < "$tmp/now.out") lines, the same)"
echo "ok a program built against the grown header is refused by today's library: $(head -1 "$tmp/newer.out")"
cd "$top"

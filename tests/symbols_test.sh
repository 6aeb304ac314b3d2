#!/bin/sh
# symbols_test.sh LIB.a LIB.so: every symbol the libraries define for others
# to link to (global or weak, any section) starts with mha_; everything else
# is static or hidden.  Prints the names that do not, and fails on them.
set -u
[ $# -eq 2 ] || { echo "usage: symbols_test.sh libmha.a libmha.so" >&2; exit 2; }
fail=0
check() {
	what=$1; shift
	# nm's last field is the name; lines naming an archive member end in ':'
	names=$("$@" | awk 'NF >= 2 && $NF !~ /:$/ { print $NF }' | sort -u) || exit 2
	count=$(printf '%s\n' "$names" | grep -c .)
	bad=$(printf '%s\n' "$names" | grep -v '^mha_' | grep .)
	if [ "$count" -eq 0 ]; then
		echo "FAIL $what: no symbols found"; fail=1
	elif [ -n "$bad" ]; then
		echo "FAIL $what exports names without mha_:"; printf '  %s\n' $bad; fail=1
	else
		echo "ok $what: $count exported symbols, all mha_"
	fi
}
check "$1" nm -g --defined-only "$1"
check "$2" nm -D --defined-only "$2"
exit $fail

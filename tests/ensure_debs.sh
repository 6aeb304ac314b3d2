#!/bin/sh
# ensure_debs.sh [--optional] PACKAGE...: install the Debian packages that are
# missing (as root), or say how to.  The one place the Makefile's targets
# (deps, fuzz, check-valgrind, bench) get what they need; --optional never fails.
optional=0
[ "${1:-}" = --optional ] && { optional=1; shift; }
command -v dpkg >/dev/null 2>&1 || { echo "not Debian: install $*"; exit 0; }
missing=""
# a package installed for two architectures (make check-arm64's multiarch
# -dev packages) is ambiguous to dpkg by its bare name: this machine's is meant
arch=$(dpkg --print-architecture 2>/dev/null)
for p in "$@"; do
	dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$arch" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
	echo "installing Debian packages:$missing"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null && exit 0
	[ "$optional" = 1 ] && exit 0
	exit 1
fi
echo "missing Debian packages:$missing"
echo "as root: apt-get install$missing"
[ "$optional" = 1 ] && exit 0
exit 1

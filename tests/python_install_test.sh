#!/bin/sh
# python_install_test.sh: 'pip install ./python' into a fresh virtual
# environment (python3 -m venv --system-site-packages, NumPy from the
# system), offline, then docs/python.md's pytest example and a call that
# finds the tree's mha by itself (no MHA_EXECUTABLE).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
py=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
pass=0
fail=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { name=$1; shift; if "$@" >"$tmp/log" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/  /' "$tmp/log"; fi; }

unset MHA_EXECUTABLE PYTHONPATH
check "python3 -m venv --system-site-packages" "$py" -m venv --system-site-packages "$tmp/env"
# nothing to download: the build needs nothing, NumPy is the system's
check "pip install ./python (offline)" "$tmp/env/bin/pip" install --no-index --no-cache-dir ./python
check "the package finds the tree's mha" sh -c "cd '$tmp' && env/bin/python -c \
'import mha, numpy as np; assert mha.executable() == \"$top/mha\", mha.executable(); \
r = mha.forward(np.eye(3), causal=True, steps=(\"softmax\",)); assert r.heads[0].softmax[2, 2] > 0.4'"
# docs/python.md's pytest module, as written there
awk '/^```python$/ { on = 1; next } /^```$/ { on = 0 } on' docs/python.md > "$tmp/test_my_attention.py"
check "docs/python.md's pytest example passes in the venv" sh -c \
	"cd '$tmp' && env/bin/python -m pytest -q -p no:cacheprovider test_my_attention.py"
check "nothing written into python/ (no build/, egg-info or _where.py)" sh -c \
	"test -z \"\$(find python -name build -o -name '*.egg-info' -o -name _where.py -o -name '*.whl')\""
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

"""f32_close.py F32.json F64.json: mha backward --dtype f32's gradients
against float64's from the same inputs.  Every matrix of F64 (meta aside)
is in F32 with its shape, F32's meta says f32, and each entry differs
from float64's by at most 1e-4 of the largest gradient of the run
(float32's rounding, scaled to the problem).  Prints the keys and the
worst difference's order; exits 1 on any failure.  (That the values are
floats is the .npy/.npz cases' check: JSON prints a float's shortest
decimal, which read as a double is not the float.)"""
import json
import sys

import numpy as np


def matrices(path, dtype):
    with open(path) as f:
        run = json.load(f)
    if run.pop("meta")["dtype"] != dtype:
        sys.exit("%s: not %s" % (path, dtype))
    # the matrices: not the labels ("tokens", "kv_tokens")
    return {k: np.asarray(v, dtype=np.float64) for k, v in run.items()
            if k not in ("tokens", "kv_tokens")}


def main():
    got, want = matrices(sys.argv[1], "f32"), matrices(sys.argv[2], "f64")
    if sorted(got) != sorted(want):
        sys.exit("keys differ: %s against %s" % (sorted(got), sorted(want)))
    scale = max(float(np.max(np.abs(m))) for m in want.values() if m.size)
    worst = 0.0
    for k in sorted(want):
        a, b = got[k], want[k]
        if a.shape != b.shape:
            sys.exit("%s: shape %s, float64's %s" % (k, a.shape, b.shape))
        err = float(np.max(np.abs(a - b))) / scale if a.size else 0.0
        if err > 1e-4:
            sys.exit("%s: differs by %.3g of the largest gradient" % (k, err))
        worst = max(worst, err)
    print(" ".join(sorted(want)))
    print("within 1e-4 of the largest gradient (worst %s 1e-6)" % ("<" if worst < 1e-6 else ">="))


main()

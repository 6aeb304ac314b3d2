"""
two-head-causal: tutorial 003 (one Q, K, V split into two heads, the "Z"
matrix divided by sqrt(sequence length), causal mask, heads concatenated,
no W^O).
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "two-head-causal"
HEADS = 2

X = c.load(S, "x.json", "X")
W = c.load(S, "weights.json")
n = X.shape[0]

# ---- the tutorial's steps, in numpy -----------------------------------
Q = X @ W["W_Q"]
K = X @ W["W_K"]
V = X @ W["W_V"]
M = c.causal_mask(n)
d_k = Q.shape[1] // HEADS
heads = []
for i in range(HEADS):
    cols = slice(i * d_k, (i + 1) * d_k)   # head i takes its block of columns
    Qi, Ki, Vi = Q[:, cols], K[:, cols], V[:, cols]
    Z = Qi @ Ki.T
    Z_scaled = Z / np.sqrt(n)              # sqrt of the sequence length, not of d_k
    masked = Z_scaled + M
    A = c.softmax_rows(masked)
    heads.append({"Q": Qi, "K": Ki, "V": Vi, "scores": Z, "scaled": Z_scaled,
                  "masked": masked, "softmax": A, "output": A @ Vi})
out = np.hstack([hd["output"] for hd in heads])

# no W_O: the output is the concatenation, which mha writes under both keys
reference = {"X": X, "Q": Q, "K": K, "V": V, "mask": M, "heads": heads, "concat": out,
             "output": out}
got = c.run_json(c.cmd_args(S))
c.compare_all(S, got, reference, "every step agrees with numpy")

# ---- what the tutorial points out -------------------------------------
g = got["heads"]
for i in range(HEADS):
    cols = slice(i * d_k, (i + 1) * d_k)
    c.equal(S, "head %d's Q, K, V are columns %d-%d of Q, K, V" % (i + 1, cols.start + 1, cols.stop),
            np.hstack([g[i]["Q"], g[i]["K"], g[i]["V"]]),
            np.hstack([got["Q"][:, cols], got["K"][:, cols], got["V"][:, cols]]))
    c.equal(S, "head %d: Z is divided by sqrt(4 tokens) = 2, not sqrt(d_k)" % (i + 1),
            g[i]["scaled"], g[i]["scores"] / 2)
    c.equal(S, "head %d: softmax row 1 is exactly 1 0 0 0 (only key 1 unmasked)" % (i + 1),
            g[i]["softmax"][0], [1, 0, 0, 0])
    c.report(S, np.array_equal(g[i]["softmax"][np.triu_indices(n, 1)], np.zeros(n * (n - 1) // 2)),
             "head %d: no weight on a later token" % (i + 1))
    c.close(S, "head %d: softmax rows sum to 1" % (i + 1), g[i]["softmax"].sum(axis=1), np.ones(n))
c.equal(S, "output = head 1's output and head 2's side by side (no W_O)",
        got["output"], np.hstack([g[0]["output"], g[1]["output"]]))
c.finish()

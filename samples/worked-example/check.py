"""
worked-example: tutorial 001 (6x4 X, 4x4 W^Q, one head, 1/sqrt(d_k), decoder mask).

Recomputes every step with numpy, then holds mha to the numbers the
tutorial publishes: the first row of Q matches, the rest does not, and
NOTES.md quotes the computed values, which are checked here too.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "worked-example"

X = c.load(S, "x.json", "X")
W = c.load(S, "weights.json")

# the tutorial's printed Q (its "Sample matrix Q") and K^T
Q_PUBLISHED = np.array([
    [1.01, 0.36, -0.74, -0.09],
    [-0.50, -0.87, 4.49, -0.23],
    [2.17, -1.99, -3.92, 1.71],
    [1.43, 2.59, 1.97, -3.19],
    [0.67, 0.98, 0.61, -0.31],
    [1.97, 0.52, 4.01, -0.51],
])
KT_PUBLISHED = np.array([
    [0.15, 1.94, -0.98, 2.53, 1.24, 2.18],
    [0.16, 1.44, 0.64, -2.33, 0.81, 0.44],
    [0.25, 0.35, 1.25, 2.24, 1.14, 3.25],
    [0.28, 1.15, -0.81, 1.93, -0.81, -0.28],
])
# X*W^Q worked out, as NOTES.md gives it (rows 2 to 6)
Q_COMPUTED = np.array([
    [-0.50, -0.87, 7.31, -0.91],
    [-1.70, -0.51, -1.87, 1.09],
    [6.71, 0.60, -3.68, 1.00],
    [2.44, 0.87, 0.59, -0.24],
    [4.95, -1.15, -1.94, 2.40],
])

# ---- the tutorial's steps, in numpy -----------------------------------
Q = X @ W["W_Q"]
K = X @ W["W_K"]
V = X @ W["W_V"]
d_k = Q.shape[1]
scores = Q @ K.T
scaled = scores / np.sqrt(d_k)
M = c.causal_mask(X.shape[0])
masked = scaled + M
weights = c.softmax_rows(masked)
out = weights @ V

# one head and no W_O: its Q, K, V are the whole ones, its output the
# concatenation, which is the output; mha writes each under its own key
reference = {
    "X": X, "Q": Q, "K": K, "V": V, "mask": M,
    "heads": [{"Q": Q, "K": K, "V": V, "scores": scores, "scaled": scaled, "masked": masked,
               "softmax": weights, "output": out}],
    "concat": out, "output": out,
}

got = c.run_json(c.cmd_args(S))
h = got["heads"][0]
c.compare_all(S, got, reference, "every step agrees with numpy")

# ---- the published numbers --------------------------------------------
c.close(S, "Q row 1 = X*W_Q row 1 = 1.01 0.36 -0.74 -0.09, as published",
        got["Q"][0], Q_PUBLISHED[0])
c.close(S, "Q row 2 starts -0.5 -0.87 as published, but ends 7.31 -0.91 (published 4.49 -0.23)",
        got["Q"][1], np.array([-0.50, -0.87, 7.31, -0.91]))
c.report(S, np.abs(got["Q"][2:] - Q_PUBLISHED[2:]).min() > 0.01,
         "Q rows 3-6 differ from the published ones in every entry",
         "smallest difference %.3g" % np.abs(got["Q"][2:] - Q_PUBLISHED[2:]).min())
c.close(S, "Q rows 2-6 are the values NOTES.md gives", got["Q"][1:], Q_COMPUTED)

# Could another W^Q or W^K explain the printed Q and K^T?  Least squares
# over all 4x4 matrices leaves a residual: no weight matrix maps this X to
# them, so W_K (and W_V, which is not printed) in weights.json are our own.
_, res_q, _, _ = np.linalg.lstsq(X, Q_PUBLISHED, rcond=None)
_, res_k, _, _ = np.linalg.lstsq(X, KT_PUBLISHED.T, rcond=None)
c.report(S, res_q.sum() > 1 and res_k.sum() > 1,
         "published Q and K^T are X*W for no 4x4 W (least-squares residuals %.2f and %.2f)"
         % (res_q.sum(), res_k.sum()))

# ---- the convention ----------------------------------------------------
c.equal(S, "scaled = scores / sqrt(d_k) = scores * 0.5", h["scaled"], h["scores"] * 0.5)
c.equal(S, "decoder mask: 0 on and below the diagonal, -inf above", got["mask"], M)
c.report(S, np.array_equal(h["softmax"][np.triu_indices(6, 1)], np.zeros(15))
         and np.array_equal(h["softmax"][0], [1, 0, 0, 0, 0, 0]),
         "softmax is 0 above the diagonal; row 1 is exactly 1 0 0 0 0 0")
c.close(S, "softmax rows sum to 1", h["softmax"].sum(axis=1), np.ones(6))
c.report(S, np.abs(h["softmax"].sum(axis=0) - 1).max() > 0.5,
         "softmax columns do not sum to 1 (column sums %s)"
         % " ".join("%.3g" % s for s in h["softmax"].sum(axis=0)))
c.close(S, "output = softmax * V", got["output"], h["softmax"] @ got["V"])
c.finish()

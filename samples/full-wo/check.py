"""
full-wo: tutorial 002's formula with every part present:

    head_i    = softmax((X W_i^Q + b_i^Q)(X W_i^K + b_i^K)^T / sqrt(d_k)) (X W_i^V + b_i^V)
    MultiHead = Concat(head_1, ..., head_h) W^O + b^O

with h = 2, d_model = 4, d_k = 4/2 = 2.  numpy builds each head from its
own W_i (d_model x d_k), cut from the d_model x d_model matrices in
weights.json, as the formula writes them; mha takes the whole matrices.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "full-wo"
h = 2

X = c.load(S, "x.json", "X")
W = c.load(S, "weights.json")
d_model = X.shape[1]
d_k = d_model // h


def part(name, i):
    """W_i (d_model x d_k) or b_i (d_k): head i's block of columns."""
    m = W[name]
    return m[..., i * d_k:(i + 1) * d_k]


# ---- the formula, in numpy, one head at a time ---------------------------
heads = []
for i in range(h):
    Qi = X @ part("W_Q", i) + part("b_Q", i)
    Ki = X @ part("W_K", i) + part("b_K", i)
    Vi = X @ part("W_V", i) + part("b_V", i)
    Z = Qi @ Ki.T
    A = c.softmax_rows(Z / np.sqrt(d_k))
    heads.append({"Q": Qi, "K": Ki, "V": Vi, "scores": Z, "scaled": Z / np.sqrt(d_k),
                  "softmax": A, "output": A @ Vi})
concat = np.hstack([hd["output"] for hd in heads])
multihead = concat @ W["W_O"] + W["b_O"]

reference = {
    "X": X,
    "Q": np.hstack([hd["Q"] for hd in heads]),
    "K": np.hstack([hd["K"] for hd in heads]),
    "V": np.hstack([hd["V"] for hd in heads]),
    "heads": heads, "concat": concat, "output": multihead,
}
got = c.run_json(c.cmd_args(S))
c.compare_all(S, got, reference, "every step agrees with numpy, head by head")

# ---- each part of the formula -------------------------------------------
g = got["heads"]
c.report(S, W["W_O"].shape == (h * d_k, d_model)
         and all(W[k].shape == (d_model, h * d_k) for k in ("W_Q", "W_K", "W_V")),
         "shapes: W_Q, W_K, W_V are d_model x h*d_k = 4x4, W^O is h*d_k x d_model = 4x4")
for i in range(h):
    c.close(S, "head %d: scaled by 1/sqrt(d_k) = 1/sqrt(2), not 1/sqrt(d_model) = 1/2" % (i + 1),
            g[i]["scaled"], g[i]["scores"] / np.sqrt(2))
    c.close(S, "head %d: softmax rows sum to 1, no mask" % (i + 1),
            g[i]["softmax"].sum(axis=1), np.ones(X.shape[0]))
c.report(S, "mask" not in got and all((hd["softmax"] > 0).all() for hd in g),
         "no mask: every token attends to every token")
c.equal(S, "concat = head 1's output and head 2's side by side",
        got["concat"], np.hstack([g[0]["output"], g[1]["output"]]))
c.close(S, "output = concat * W^O + b^O", got["output"], got["concat"] @ W["W_O"] + W["b_O"])
c.finish()

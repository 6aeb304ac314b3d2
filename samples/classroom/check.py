"""
classroom: tutorial 000 (six students x seven traits, Q = K = V = X).

R = X*X^T, R' = softmax(R / sqrt(7)), T = R'*X, in numpy, against mha; and
the one score the tutorial works by hand, Monica . Chandler = 0.295.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "classroom"
STUDENTS = ["Monica", "Chandler", "Ross", "Rachel", "Phoebe", "Joey"]
MONICA, CHANDLER = STUDENTS.index("Monica"), STUDENTS.index("Chandler")

X = c.load(S, "x.json", "X")
n, traits = X.shape

# ---- the tutorial's steps, in numpy -----------------------------------
R = X @ X.T                       # interactions, table 2
R_scaled = R / np.sqrt(traits)    # divided by sqrt(7)
R_prime = c.softmax_rows(R_scaled)  # table 5
T = R_prime @ X                   # table 4

# one head and no W_O: its Q, K, V are the whole ones, its output the
# concatenation, which is the output; mha writes each under its own key
reference = {
    "X": X, "Q": X, "K": X, "V": X,
    "heads": [{"Q": X, "K": X, "V": X, "scores": R, "scaled": R_scaled, "softmax": R_prime,
               "output": T}],
    "concat": T, "output": T,
}
got = c.run_json(c.cmd_args(S))
h = got["heads"][0]
c.compare_all(S, got, reference, "every step agrees with numpy")

# ---- the hand-worked score ----------------------------------------------
hand = [(0.5, 0.5), (0.05, 0.1), (0.05, 0.2), (0.3, 0.1)]
products = X[MONICA] * X[CHANDLER]
c.report(S, [(a, b) for a, b in zip(X[MONICA], X[CHANDLER]) if a * b != 0] == hand,
         "Monica's and Chandler's rows give exactly the hand sum's terms "
         "0.5x0.5 + 0.05x0.1 + 0.05x0.2 + 0.3x0.1",
         "nonzero products %s" % products[products != 0].tolist())

text = c.text_tables(c.run_mha(["forward", "-x", "samples/classroom/x.json",
                                "--print", "scores"]))
cell = text.get("head 1: scores = Q1*K1^T", [[]] * n)[MONICA][CHANDLER:CHANDLER + 1]
c.report(S, cell == ["0.295"], "--print scores shows 0.295 for Monica . Chandler",
         "shows %s" % cell)
scores = c.run_json(["forward", "-x", "samples/classroom/x.json", "--print", "scores"])
mc = scores["heads"][0]["scores"][MONICA, CHANDLER]
c.report(S, abs(mc - 0.295) <= 1e-12, "Monica . Chandler = 0.295 to 1e-12 (the tutorial rounds to 0.3)",
         "got %.17g" % mc)
c.equal(S, "R is symmetric (Q = K, so Monica . Chandler = Chandler . Monica)",
        h["scores"], h["scores"].T)

# ---- the convention -----------------------------------------------------
c.close(S, "scaled = R / sqrt(7), the number of traits", h["scaled"], h["scores"] / np.sqrt(7))
c.close(S, "each softmax row sums to 1", h["softmax"].sum(axis=1), np.ones(n))
c.close(S, "T = softmax * X (V = X, no weights)", got["output"], h["softmax"] @ X)
c.finish()

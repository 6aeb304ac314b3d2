"""
latent: multi-head latent attention (DeepSeek-V2/V3's MLA) at a size to
follow by hand: d_model 8, 2 heads, q_lora_rank 4, kv_lora_rank 4,
qk_nope_head_dim 2, qk_rope_head_dim 2, v_head_dim 2, causal.
"""
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "latent"
H, DN, DR, DV, KR = 2, 2, 2, 2, 4
EPS = 1e-6

def load(name):
    """one tensor: a JSON array"""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)) as f:
        return np.array(json.load(f), dtype=float)


X = load("x.json")
Wqa, Wqb = load("q_a_proj.json"), load("q_b_proj.json")
Wkva, Wkvb = load("kv_a_proj_with_mqa.json"), load("kv_b_proj.json")
Wo = load("o_proj.json")
n = X.shape[0]


def rms(a):
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True) + EPS)


def turn(a, p):
    """DeepSeek-V3's interleaved rope of one (x0, x1) pair at position p, theta 10000:
    R = 2, so one pair, angle p * 10000^0 = p"""
    x0, x1 = a[..., 0], a[..., 1]
    return np.stack([x0 * np.cos(p) - x1 * np.sin(p), x1 * np.cos(p) + x0 * np.sin(p)], axis=-1)


# ---- the steps, in numpy -----------------------------------------------
c_q = X @ Wqa
c_q_norm = rms(c_q)
q = (c_q_norm @ Wqb).reshape(n, H, DN + DR)
q_nope, q_pe = q[..., :DN], q[..., DN:]
ckv = X @ Wkva
c_kv, k_pe = ckv[:, :KR], ckv[:, KR:]
c_kv_norm = rms(c_kv)
kv = (c_kv_norm @ Wkvb).reshape(n, H, DN + DV)
k_nope, v = kv[..., :DN], kv[..., DN:]
pos = np.arange(n, dtype=np.float64)
q_pe_rot = turn(q_pe, pos[:, None])
k_pe_rot = turn(k_pe, pos)
Q = np.concatenate([q_nope, q_pe_rot], axis=-1)                      # (n, H, 4)
K = np.concatenate([k_nope, np.repeat(k_pe_rot[:, None, :], H, axis=1)], axis=-1)
M = c.causal_mask(n)
heads = []
for h in range(H):
    scores = Q[:, h] @ K[:, h].T
    scaled = scores / np.sqrt(DN + DR)
    masked = scaled + M
    A = c.softmax_rows(masked)
    heads.append({"Q": Q[:, h], "K": K[:, h], "V": v[:, h], "scores": scores, "scaled": scaled,
                  "masked": masked, "softmax": A, "output": A @ v[:, h]})
concat = np.hstack([hd["output"] for hd in heads])
reference = {"X": X, "c_q": c_q, "c_q_norm": c_q_norm, "q_nope": q_nope.reshape(n, -1),
             "q_pe": q_pe.reshape(n, -1), "q_pe_rot": q_pe_rot.reshape(n, -1), "c_kv": c_kv,
             "c_kv_norm": c_kv_norm, "k_pe": k_pe, "k_pe_rot": k_pe_rot,
             "k_nope": k_nope.reshape(n, -1), "Q": Q.reshape(n, -1), "K": K.reshape(n, -1),
             "V": v.reshape(n, -1), "mask": M, "heads": heads, "concat": concat,
             "output": concat @ Wo}
got = c.run_json(c.cmd_args(S))
c.compare_all(S, got, reference, "every step agrees with numpy")

# ---- what to see --------------------------------------------------------
c.equal(S, "every head's key ends with the same k_pe_rot (one rope key for all heads)",
        got["K"][:, DN:DN + DR], got["K"][:, DN + DR + DN:])
c.equal(S, "position 0 is not turned: k_pe_rot's row 1 is k_pe's", got["k_pe_rot"][0],
        got["k_pe"][0])
c.close(S, "c_kv_norm's rows have a mean square of 1 (less eps's share)", np.mean(got["c_kv_norm"] ** 2, axis=1),
        np.ones(n), rtol=1e-4)  # eps 1e-6 takes a little
absorbed = c.run_json(c.cmd_args(S) + ["--absorb"])
c.close(S, "the absorbed form gives the same output", absorbed["output"], got["output"])
c.finish()

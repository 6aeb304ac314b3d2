#!/usr/bin/env python3
"""lowp_check.py MHA: mha forward --dtype bf16 and fp16 (the low-precision
reference) against PyTorch's own eager attention in that type.

For random shapes (heads and key/value heads, head widths, biases, causal,
an additive mask with blocked keys, RoPE half or interleaved, whole or
partial, a softcap, sinks), a transcription of Hugging Face's eager
attention written here from its modeling code (Llama's projections, rotary
embedding and softmax in float32; Gemma 2's softcap; gpt-oss's sinks), run
by torch in bfloat16 and float16 (its matrix products summed in float32 as
current PyTorch sums them: Debian's torch 1.13 sums small bfloat16
products in bfloat16 on the CPU), and mha forward --dtype on the same
inputs, every step printed.  Each step agrees entry by entry within 4
units in the last place of the entry or 3 of the step's largest value (in
that type: what is left is torch's order of summation).  Skipped without
torch.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("skip lowp_check: no torch")
    sys.exit(0)

MHA = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "./mha")
TYPES = {"bf16": (torch.bfloat16, 8, -126), "fp16": (torch.float16, 11, -14)}


def ulp(v, bits, emin):
    """a unit in the last place of |v| in the type"""
    v = np.abs(v)
    e = np.floor(np.log2(np.where(v > 0, v, 1.0)))
    return np.exp2(np.maximum(e, emin) - (bits - 1))


def rope_tables(n, R, theta, dtype):
    """Hugging Face's default rotary embedding: float32, then the type"""
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.int64).float() / R))
    pos = torch.arange(n).float()
    freqs = inv[:, None] @ pos[None, :]          # (R/2, n), float32
    freqs = freqs.T
    emb = torch.cat((freqs, freqs), dim=-1)     # (n, R)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate(x, cos, sin, R, mode):
    """q·cos + rotate_half(q)·sin on the first R features (the rest pass)"""
    xr, xp = x[..., :R], x[..., R:]
    if mode == "half":
        x1, x2 = xr[..., :R // 2], xr[..., R // 2:]
        rot = torch.cat((-x2, x1), dim=-1)
        c, s = cos, sin
    else:  # interleaved pairs (2t, 2t+1): GPT-J's rotate_every_two
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        c = cos[..., :R // 2].repeat_interleave(2, dim=-1)
        s = sin[..., :R // 2].repeat_interleave(2, dim=-1)
    return torch.cat(((xr * c) + (rot * s), xp), dim=-1)


def eager(case, w, x, mask, sinks, dtype):
    """the steps of Hugging Face's eager attention in dtype"""
    H, G, dk, dv = case["H"], case["G"], case["dk"], case["dv"]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dtype)  # noqa: E731
    X = t(x)
    n = X.shape[0]

    def mm(a, b):
        """a matrix product in the type as current PyTorch makes it: summed
        in float32, rounded once.  (Debian's torch 1.13 sums a small bf16
        product in bf16 on the CPU, and has no float16 product there.)"""
        return torch.matmul(a.float(), b.float()).to(dtype)

    def lin(a, W, b):
        """nn.Linear: x·W + b summed in float32, rounded once"""
        y = torch.matmul(a.float(), t(W).float())
        return (y if b is None else y + t(b).float()).to(dtype)

    q = lin(X, w["W_Q"], w.get("b_Q"))
    k = lin(X, w["W_K"], w.get("b_K"))
    v = lin(X, w["W_V"], w.get("b_V"))
    steps = {"Q": q, "K": k, "V": v}
    q = q.view(n, H, dk).transpose(0, 1)
    k = k.view(n, G, dk).transpose(0, 1)
    v = v.view(n, G, dv).transpose(0, 1)
    if case["rope"]:
        cos, sin = rope_tables(n, case["R"], case["theta"], dtype)
        q = rotate(q, cos, sin, case["R"], case["rope"])
        k = rotate(k, cos, sin, case["R"], case["rope"])
        steps["q_rot"] = q.transpose(0, 1).reshape(n, H * dk)
        steps["k_rot"] = k.transpose(0, 1).reshape(n, G * dk)
    k = k.repeat_interleave(H // G, dim=0)
    v = v.repeat_interleave(H // G, dim=0)
    a = mm(q, k.transpose(-1, -2))
    steps["heads.scores"] = a
    a = a * (dk ** -0.5)
    steps["heads.scaled"] = a
    if case["softcap"]:
        a = a / case["softcap"]
        a = torch.tanh(a.float()).to(dtype)  # float16's tanh, as bf16's: in float32
        a = a * case["softcap"]
        steps["heads.softcapped"] = a
    m = torch.from_numpy(np.where(np.isneginf(mask), torch.finfo(dtype).min, mask)).to(dtype)
    a = a + m
    if sinks is not None:
        s = t(sinks).reshape(-1, 1, 1).expand(H, n, 1)
        c = torch.cat([a, s], dim=-1)
        c = c - c.max(dim=-1, keepdim=True).values
        p = F.softmax(c, dim=-1, dtype=c.dtype)[..., :-1]
    else:
        p = F.softmax(a, dim=-1, dtype=torch.float32).to(dtype)
    steps["heads.softmax"] = p
    o = mm(p, v).transpose(0, 1).reshape(n, H * dv)
    steps["concat"] = o
    steps["output"] = lin(o, w["W_O"], w.get("b_O"))
    return {k2: v2.float().numpy().astype(np.float64) for k2, v2 in steps.items()}


def random_case(rng):
    G = int(rng.choice([1, 2]))
    H = G * int(rng.choice([1, 2, 3]))
    dk = int(rng.choice([4, 8, 16]))
    return {"n": int(rng.integers(2, 12)), "d": int(rng.choice([8, 16, 24])), "H": H, "G": G,
            "dk": dk, "dv": dk, "bias": bool(rng.integers(2)), "causal": bool(rng.integers(2)),
            "rope": [None, "half", "interleaved"][int(rng.integers(3))],
            "R": dk if rng.integers(2) else dk // 2, "theta": float(rng.choice([10000.0, 500000.0])),
            "softcap": float(rng.choice([0, 0, 20.0])), "sinks": bool(rng.integers(3) == 0),
            "mask": bool(rng.integers(2))}


def run_case(case, tname, rng, tmp):
    dtype, bits, emin = TYPES[tname]
    n, d, H, G, dk, dv = case["n"], case["d"], case["H"], case["G"], case["dk"], case["dv"]
    x = rng.normal(size=(n, d))
    w = {"W_Q": rng.normal(size=(d, H * dk)) / math.sqrt(d), "W_K": rng.normal(size=(d, G * dk)) / math.sqrt(d),
         "W_V": rng.normal(size=(d, G * dv)) / math.sqrt(d), "W_O": rng.normal(size=(H * dv, d)) / math.sqrt(H * dv)}
    if case["bias"]:
        w.update({"b_Q": rng.normal(size=H * dk) * 0.1, "b_K": rng.normal(size=G * dk) * 0.1,
                  "b_V": rng.normal(size=G * dv) * 0.1, "b_O": rng.normal(size=d) * 0.1})
    mask = np.zeros((n, n))
    if case["mask"]:
        mask = rng.normal(size=(n, n)) * 0.5
        mask[rng.random((n, n)) < 0.2] = -np.inf
        mask[np.arange(n), np.arange(n)] = 0.0  # every query sees a key
    if case["causal"]:
        mask = np.where(np.tri(n, dtype=bool), mask, -np.inf)
    sinks = rng.normal(size=H) if case["sinks"] else None
    np.save(os.path.join(tmp, "x.npy"), x)
    np.savez(os.path.join(tmp, "w.npz"), **w)
    np.save(os.path.join(tmp, "mask.npy"), mask)
    args = [MHA, "forward", "-x", "x.npy", "-w", "w.npz", "--heads", str(H), "--kv-heads", str(G),
            "--mask", "mask.npy", "--dtype", tname, "--print", "all", "-f", "npz", "-o", "out.npz"]
    if case["rope"]:
        args += ["--rope", case["rope"], "--rope-theta", repr(case["theta"]), "--rope-dim", str(case["R"])]
    if case["softcap"]:
        args += ["--softcap", repr(case["softcap"])]
    if sinks is not None:
        np.save(os.path.join(tmp, "sinks.npy"), sinks)
        args += ["--sinks", "sinks.npy"]
    r = subprocess.run(args, cwd=tmp, capture_output=True, text=True)
    if r.returncode:
        return ["mha failed: %s" % r.stderr.strip()]
    with np.load(os.path.join(tmp, "out.npz")) as z:
        mine = {k: z[k] for k in z.files}
        meta = json.loads(str(z["meta"]))
    bad = [] if meta["dtype"] == tname else ["meta dtype %s" % meta["dtype"]]
    theirs = eager(case, w, x, mask, sinks, dtype)
    for step, want in theirs.items():
        got = mine[step]
        if got.shape != want.shape:
            bad.append("%s: shape %s, torch's %s" % (step, got.shape, want.shape))
            continue
        fin = np.isfinite(want)
        if not np.array_equal(fin, np.isfinite(got)):
            bad.append("%s: not finite where torch's is" % step)
            continue
        top = np.max(np.abs(want[fin])) if fin.any() else 0
        tol = np.maximum(4 * ulp(want, bits, emin), 3 * ulp(top, bits, emin))
        err = np.abs(got - want)
        if np.any(err[fin] > tol[fin]):
            i = np.unravel_index(np.argmax(np.where(fin, err / tol, 0)), err.shape)
            bad.append("%s at %s: mha %r, torch %r" % (step, i, got[i], want[i]))
        # every value one of the type's
        rounded = torch.from_numpy(got).to(dtype).double().numpy()
        if not np.array_equal(rounded[fin], got[fin]):
            bad.append("%s: a value not of the type" % step)
    return bad


def main():
    rng = np.random.default_rng(54)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for tname in TYPES:
            for i in range(20):
                case = random_case(rng)
                if tname == "fp16" and case["sinks"]:
                    case["sinks"] = False  # gpt-oss runs in bf16
                bad = run_case(case, tname, rng, tmp)
                what = "%s case %d %s" % (tname, i + 1, json.dumps(case, sort_keys=True))
                if bad:
                    failed += 1
                    print("FAIL %s\n  %s" % (what, "\n  ".join(bad)))
                else:
                    print("ok %s" % what)
    print("lowp_check: %s" % ("%d failed" % failed if failed else "all passed"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

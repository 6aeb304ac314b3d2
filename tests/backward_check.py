#!/usr/bin/python3
"""backward_check.py: 'mha backward' against torch.autograd in float64.

usage: backward_check.py MHA_BINARY

Each case draws random inputs, weights and options, writes them as .npy
files, runs 'mha backward ... --grad-output dO.npy -f json --print all', and
builds the same attention in PyTorch from the formula (x*W + b, rotary
pairs turned by position, scores * scale, c*tanh(s/c), the mask, ALiBi's
slope*(j - p), a sink's exp(s - m) in the denominator, a fully masked row
giving zeros), not from mha's code; torch.autograd then gives the gradient
of sum(dO * output) by every input, weight, bias and sink.  Every gradient
mha prints must agree:

    max |mha - torch| <= 1e-10 * scale

scale being the largest entry of that gradient, or of the case's largest
gradient when that is larger (a gradient that is zero in exact arithmetic,
db_K, comes out as the rounding of terms of the case's size).  The cases
cover every option alone and then random combinations of them: boolean
and additive masks (shared and per head), causal top-left, bottom-right
and with an offset, grouped-query attention, cross-attention (--kv, and
--xk/--xv), Q, K, V given directly, softcap, windows, RoPE (half and
interleaved, partial, positions given), ALiBi (Press et al.'s and given
slopes), sinks, --kv-len, batches (with one key length per sequence), W_O
and biases, a q/k norm (rms, rms1p, layer; per head or over the whole row;
weights shared, per head or none) written as Qwen3's, Gemma 3's, Cohere's
and OLMo 2's modeling code writes it, its weights' gradients too.  Fully masked rows must give zero gradients, not NaN.

Each case runs twice: with --print all (every head step, so the plain path)
and with the default steps (the gradients alone: the fast path, as the
output's meta "path" must say).  Every fourth case runs a third time with
--dtype f32, its arrays rounded to float32 first, against torch.autograd
in float32 at 1e-4 of the largest gradient.  Without torch the cases are skipped, and
said so.  It prints one line per failure and ends with "N passed, N
failed"; exit status 1 if any failed.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families_ref  # noqa: E402  (rope_parameters: transformers' rope scaling)

RTOL = 1e-10
RTOL_F32 = 1e-4
SEED = 20261117
FEATURES = ["mask", "causal", "gqa", "cross", "softcap", "window", "rope", "alibi", "sinks",
            "batch", "kvlen", "wo", "bias", "direct", "apart", "norm"]


def press_slopes(H):
    n = 1
    while n * 2 <= H:
        n *= 2
    out = []
    for h in range(H):
        if h < n:
            out.append(2.0 ** (-8.0 * (h + 1) / n))
        else:
            out.append(2.0 ** (-8.0 * (2 * (h - n) + 1) / (2 * n)))
    return out


def make_case(rng, on):
    """options and arrays for the features in on"""
    c = {"on": on}
    H = int(rng.choice([1, 2, 4]))
    G = H
    if "gqa" in on:
        H = int(rng.choice([2, 4]))
        G = int(rng.choice([g for g in (1, 2) if H % g == 0 and g < H]))
    c["H"], c["G"] = H, G
    dk = int(rng.choice([2, 4]))
    dv = int(rng.choice([2, 3]))
    nq = int(rng.integers(2, 6))
    cross = "cross" in on or "apart" in on or "direct" in on
    nkv = int(rng.integers(2, 7)) if cross else nq
    B = int(rng.integers(2, 4)) if "batch" in on else 0
    c.update(dk=dk, dv=dv, nq=nq, nkv=nkv, B=B)
    lead = (B,) if B else ()
    direct = "direct" in on
    c["direct"] = direct
    if direct:
        c["q"] = rng.standard_normal(lead + (nq, H * dk))
        c["k"] = rng.standard_normal(lead + (nkv, G * dk))
        c["v"] = rng.standard_normal(lead + (nkv, G * dv))
        dq_in = None
    else:
        dq_in = int(rng.integers(2, 6))
        c["x"] = rng.standard_normal(lead + (nq, dq_in))
        c["W_Q"] = rng.standard_normal((dq_in, H * dk)) * 0.7
        if "apart" in on:
            dki, dvi = int(rng.integers(2, 5)), int(rng.integers(2, 5))
            c["xk"] = rng.standard_normal(lead + (nkv, dki))
            c["xv"] = rng.standard_normal(lead + (nkv, dvi))
        elif "cross" in on:
            dki = dvi = int(rng.integers(2, 5))
            # beside a batch, sometimes one X_kv for every sequence (its gradient: their sum)
            shared = B and rng.random() < 0.5
            c["kv"] = rng.standard_normal(((nkv, dki)) if shared else lead + (nkv, dki))
        else:
            dki = dvi = dq_in
        c["W_K"] = rng.standard_normal((dki, G * dk)) * 0.7
        c["W_V"] = rng.standard_normal((dvi, G * dv)) * 0.7
        if "bias" in on:
            c["b_Q"] = rng.standard_normal(H * dk)
            c["b_K"] = rng.standard_normal(G * dk)
            c["b_V"] = rng.standard_normal(G * dv)
    if "wo" in on:
        dout = int(rng.integers(2, 5))
        c["W_O"] = rng.standard_normal((H * dv, dout)) * 0.7
        if "bias" in on:
            c["b_O"] = rng.standard_normal(dout)
        c["out_cols"] = dout
    else:
        c["out_cols"] = H * dv
    opts = {}
    if "causal" in on:
        opts["causal"] = str(rng.choice(["top-left", "bottom-right", str(int(rng.integers(-1, 3)))]))
    if "kvlen" in on:
        if B and rng.random() < 0.7:
            opts["kv_lens"] = [int(rng.integers(1, nkv + 1)) for _ in range(B)]
        else:
            opts["kv_len"] = int(rng.integers(1, nkv + 1))
    if "softcap" in on:
        opts["softcap"] = float(rng.choice([0.7, 1.5, 5.0]))
    if "window" in on:
        opts["window"] = (int(rng.choice([-1, 0, 1, 2])), int(rng.choice([-1, 0, 1, 2])))
    if "rope" in on:
        R = dk if rng.random() < 0.6 else 2
        opts["rope"] = (str(rng.choice(["half", "interleaved"])), float(rng.choice([10000, 7.0])), R)
        if rng.random() < 0.4:
            # rope scaling as transformers computes it (families_ref.py's reference)
            opts["rope_scaling"] = [
                {"rope_type": "linear", "factor": 3.0},
                {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                 "beta_fast": 4.0, "beta_slow": 1.0}][int(rng.integers(0, 3))]
        if rng.random() < 0.3:
            opts["positions"] = ([int(v) for v in rng.integers(0, 12, nq)],
                                 [int(v) for v in rng.integers(0, 12, nkv)])
    if "alibi" in on:
        opts["alibi"] = None if rng.random() < 0.5 else [float(v) for v in rng.uniform(-0.6, 0.6, H)]
    if "sinks" in on:
        opts["sinks"] = [float(v) for v in rng.uniform(-1, 1.5, H)]
    if "norm" in on:
        kind = str(rng.choice(["rms", "rms1p", "layer"]))
        over = "all" if rng.random() < 0.3 else "head"
        layout = str(rng.choice(["shared", "per_head", "none"])) if over == "head" else \
            str(rng.choice(["per_head", "none"]))
        eps = float(rng.choice([1e-6, 1e-5, 0.1]))
        opts["norm"] = (kind, over, eps, layout)
        if layout != "none":
            c["q_norm"] = rng.standard_normal(dk if layout == "shared" else (H, dk)) * 0.5 + 1
            c["k_norm"] = rng.standard_normal(dk if layout == "shared" else (G, dk)) * 0.5 + 1
    if "mask" in on:
        per_head = H > 1 and rng.random() < 0.5
        shape = ((H,) if per_head else ()) + (nq, nkv)
        if rng.random() < 0.5:
            m = rng.random(shape) > 0.3
            if rng.random() < 0.5:
                m[..., 0, :] = False  # a fully masked row
            opts["mask"] = m
        else:
            m = rng.standard_normal(shape) * 0.5
            m[rng.random(shape) < 0.2] = -np.inf
            opts["mask"] = m
    c["opts"] = opts
    c["dO"] = rng.standard_normal(lead + (nq, c["out_cols"]))
    return c


def run_mha(mha, c, d, fast=False, f32=False):
    """--print all (every head step: the plain path), or, fast, the default
    steps (the gradients alone: the fast path, which meta's "path" must say);
    f32: --dtype f32 on the fast path (meta's "dtype" f32)"""
    def save(name, a):
        path = os.path.join(d, name + ".npy")
        np.save(path, np.asarray(a))
        return path

    args = [mha, "backward", "--heads", str(c["H"]), "--kv-heads", str(c["G"]), "-f", "json",
            "--grad-output", save("dO", c["dO"])]
    if f32:
        args += ["--dtype", "f32"]
    elif not fast:
        args += ["--print", "all"]
    if c["direct"]:
        args += ["--q", save("q", c["q"]), "--k", save("k", c["k"]), "--v", save("v", c["v"])]
    else:
        args += ["-x", save("x", c["x"])]
        if "kv" in c:
            args += ["--kv", save("kv", c["kv"])]
        if "xk" in c:
            args += ["--xk", save("xk", c["xk"]), "--xv", save("xv", c["xv"])]
    for name, opt in (("W_Q", "--wq"), ("W_K", "--wk"), ("W_V", "--wv"), ("W_O", "--wo"),
                      ("b_Q", "--bq"), ("b_K", "--bk"), ("b_V", "--bv"), ("b_O", "--bo")):
        if name in c:
            args += [opt, save(name, c[name])]
    o = c["opts"]
    if "causal" in o:
        args.append("--causal=" + o["causal"])
    if "kv_len" in o:
        args += ["--kv-len", str(o["kv_len"])]
    if "kv_lens" in o:
        args += ["--kv-len", ",".join(str(v) for v in o["kv_lens"])]
    if "softcap" in o:
        args += ["--softcap", repr(o["softcap"])]
    if "window" in o:
        args += ["--window", "%d,%d" % o["window"]]
    if "rope" in o:
        mode, theta, R = o["rope"]
        args += ["--rope", mode, "--rope-theta", repr(theta), "--rope-dim", str(R)]
        if "rope_scaling" in o:
            args += ["--rope-scaling", json.dumps(o["rope_scaling"])]
        if "positions" in o:
            p = os.path.join(d, "pos.json")
            with open(p, "w") as f:
                json.dump({"q": o["positions"][0], "k": o["positions"][1]}, f)
            args += ["--positions", p]
    if "alibi" in o:
        if o["alibi"] is None:
            args.append("--alibi")
        else:
            args += ["--alibi-slopes", save("slopes", o["alibi"])]
    if "sinks" in o:
        args += ["--sinks", save("sinks", o["sinks"])]
    if "norm" in o:
        kind, over, eps, layout = o["norm"]
        args += ["--norm", kind, "--norm-over", over, "--norm-eps", repr(eps)]
        if layout != "none":
            args += ["--q-norm", save("q_norm", c["q_norm"]), "--k-norm", save("k_norm", c["k_norm"])]
    if "mask" in o:
        args += ["--mask", save("mask", o["mask"])]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("exit %d: %s" % (r.returncode, r.stderr.strip()))
    got = json.loads(r.stdout)
    path = got.get("meta", {}).get("path")
    if path != ("fast" if fast or f32 else "plain"):
        raise RuntimeError("ran on the %s path" % path)
    if got["meta"]["dtype"] != ("f32" if f32 else "f64"):
        raise RuntimeError("computed in %s" % got["meta"]["dtype"])
    return got, r.stderr


def torch_grads(torch, c, dt=None):
    """the gradients of sum(dO * output), by autograd, one sequence at a time,
    in dt (float64 unless told)"""
    dt = dt or torch.float64
    o = c["opts"]
    H, G, dk, dv, nq, nkv = c["H"], c["G"], c["dk"], c["dv"], c["nq"], c["nkv"]
    B = c["B"] or 1
    T = lambda a: torch.tensor(np.asarray(a, dtype=np.float64), dtype=dt,
                               requires_grad=True)
    leaves = {}
    for k in ("x", "kv", "xk", "xv", "q", "k", "v", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K",
              "b_V", "b_O", "q_norm", "k_norm"):
        if k in c:
            leaves[k] = T(c[k])
    if "sinks" in o:
        leaves["sinks"] = T(o["sinks"])
    slopes = None
    if "alibi" in o:
        slopes = torch.tensor(press_slopes(H) if o["alibi"] is None else o["alibi"],
                              dtype=dt)
    dO = torch.tensor(c["dO"], dtype=dt)
    if not c["B"]:
        dO = dO.unsqueeze(0)
    scale = 1.0 / np.sqrt(dk)
    total = 0
    for b in range(B):
        def seq(name):
            t = leaves[name]
            return t[b] if c["B"] and t.dim() == 3 else t

        def lin(x, W, bias):
            y = x @ leaves[W] if W in leaves else x
            return y + leaves[bias] if bias in leaves else y

        if c["direct"]:
            Q, K, V = seq("q"), seq("k"), seq("v")
        else:
            xq = seq("x")
            xk = seq("xk") if "xk" in leaves else seq("kv") if "kv" in leaves else xq
            xv = seq("xv") if "xv" in leaves else xk
            Q, K, V = lin(xq, "W_Q", "b_Q"), lin(xk, "W_K", "b_K"), lin(xv, "W_V", "b_V")
        if "norm" in o:
            kind, over, eps, layout = o["norm"]

            def normed(X, heads, w):
                # as the modeling code: Qwen3RMSNorm, Gemma3RMSNorm (1 + w),
                # CohereLayerNorm (weights (heads, head_dim)), Olmo2RMSNorm over the row
                X = X.reshape(X.shape[0], 1 if over == "all" else heads, -1)
                if kind == "layer":
                    X = X - X.mean(-1, keepdim=True)
                X = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)
                if w is not None:
                    w = w.reshape(X.shape[1:]) if w.dim() == 2 or over == "all" else w
                    X = X * (1 + w if kind == "rms1p" else w)
                return X.reshape(X.shape[0], -1)

            Q = normed(Q, H, leaves.get("q_norm"))
            K = normed(K, G, leaves.get("k_norm"))
        keys = nkv
        if "kv_len" in o:
            keys = o["kv_len"]
        if "kv_lens" in o:
            keys = o["kv_lens"][b]
        off = 0
        if "causal" in o:
            off = keys - nq if o["causal"] == "bottom-right" else \
                0 if o["causal"] == "top-left" else int(o["causal"])
        if "rope" in o:
            mode, theta, R = o["rope"]
            qp = o["positions"][0] if "positions" in o else [i + off for i in range(nq)]
            kp = o["positions"][1] if "positions" in o else list(range(nkv))

            def turn(X, heads, pos):
                X = X.reshape(X.shape[0], heads, dk)
                p = torch.tensor(pos, dtype=dt)[:, None]
                inv = torch.tensor([theta ** (-2.0 * t / R) for t in range(R // 2)],
                                   dtype=dt)
                af = 1.0
                if "rope_scaling" in o:
                    sc = o["rope_scaling"]
                    c = {"rope_theta": theta, "rope_scaling": sc, "max_position_embeddings":
                         sc.get("original_max_position_embeddings", 0) * sc["factor"]}
                    inv, af = families_ref.rope_parameters(c, R, 0)
                    inv = torch.tensor(inv, dtype=dt)
                ang = p * inv[None, :]
                cs, sn = torch.cos(ang)[:, None, :] * af, torch.sin(ang)[:, None, :] * af
                if mode == "half":
                    a, bb = X[..., : R // 2], X[..., R // 2: R]
                    out = torch.cat([a * cs - bb * sn, a * sn + bb * cs, X[..., R:]], dim=-1)
                else:
                    a, bb = X[..., 0:R:2], X[..., 1:R:2]
                    ra, rb = a * cs - bb * sn, a * sn + bb * cs
                    out = torch.stack([ra, rb], dim=-1).reshape(X.shape[0], heads, R)
                    out = torch.cat([out, X[..., R:]], dim=-1)
                return out.reshape(X.shape[0], heads * dk)

            Q, K = turn(Q, H, qp), turn(K, G, kp)
        heads = []
        for h in range(H):
            g = h // (H // G)
            q, k, v = Q[:, h * dk:(h + 1) * dk], K[:, g * dk:(g + 1) * dk], V[:, g * dv:(g + 1) * dv]
            s = (q @ k.T) * scale
            if "softcap" in o:
                s = o["softcap"] * torch.tanh(s / o["softcap"])
            seen = np.ones((nq, nkv), dtype=bool)
            add = np.zeros((nq, nkv))
            for i in range(nq):
                p = i + off
                for j in range(nkv):
                    if j >= keys or ("causal" in o and j > p):
                        seen[i, j] = False
                    if "window" in o:
                        left, right = o["window"]
                        if (left >= 0 and j < p - left) or (right >= 0 and j > p + right):
                            seen[i, j] = False
                    if "mask" in o:
                        m = o["mask"][h] if o["mask"].ndim == 3 else o["mask"]
                        if m.dtype == bool:
                            seen[i, j] &= bool(m[i, j])
                        elif m[i, j] == -np.inf:
                            seen[i, j] = False
                        else:
                            add[i, j] += m[i, j]
                    if slopes is not None and seen[i, j]:
                        add[i, j] += float(slopes[h]) * (j - p)
            seen_t = torch.tensor(seen)
            z = torch.where(seen_t, s + torch.tensor(add, dtype=dt), torch.tensor(-np.inf, dtype=dt))
            any_seen = seen_t.any(dim=1, keepdim=True)
            mx = torch.where(any_seen, z.max(dim=1, keepdim=True).values,
                             torch.zeros(nq, 1, dtype=dt)).detach()
            if "sinks" in o:
                mx = torch.maximum(mx, leaves["sinks"][h].detach())
            e = torch.exp(z - mx)
            den = e.sum(dim=1, keepdim=True)
            if "sinks" in o:
                den = den + any_seen * torch.exp(leaves["sinks"][h] - mx)
            den = torch.where(any_seen, den, torch.ones_like(den))
            heads.append((e / den) @ v)
        out = torch.cat(heads, dim=1)
        if "W_O" in leaves:
            out = out @ leaves["W_O"]
            if "b_O" in leaves:
                out = out + leaves["b_O"]
        total = total + (dO[b] * out).sum()
    total.backward()
    return {k: t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for k, t in leaves.items()}


def compare(c, got, want, rtol=RTOL):
    """(name, mha's key, torch's leaf) pairs to check; a list of failures"""
    pairs = []
    if c["direct"]:
        pairs += [("dQ", "q"), ("dK", "k"), ("dV", "v")]
    else:
        pairs.append(("dX", "x"))
        if "kv" in c:
            pairs.append(("dX_kv", "kv"))
        if "xk" in c:
            pairs += [("dX_k", "xk"), ("dX_v", "xv")]
    for w in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
        if w in c:
            pairs.append(("d" + w, w))
    if "sinks" in c["opts"]:
        pairs.append(("dsinks", "sinks"))
    if "q_norm" in c:
        pairs += [("dq_norm_weight", "q_norm"), ("dk_norm_weight", "k_norm")]
    big = max(float(np.max(np.abs(want[leaf]))) for _, leaf in pairs)
    bad = []
    for key, leaf in pairs:
        if key not in got:
            bad.append("%s missing from the output" % key)
            continue
        g = np.asarray(got[key], dtype=np.float64)
        w = np.asarray(want[leaf], dtype=np.float64)
        # the weights' gradients are the batch's total, under each sequence
        if c["B"] and (key.startswith(("dW", "db", "dsinks", "dq_norm", "dk_norm")) or w.ndim == 2):
            g = g[0]  # and a shared input's
        g = g.reshape(w.shape)
        if not np.all(np.isfinite(g)):
            bad.append("%s is not finite" % key)
            continue
        scale = max(float(np.max(np.abs(w))), big, 1e-300)
        err = float(np.max(np.abs(g - w))) / scale
        if err > rtol:
            bad.append("%s: max difference %.3g of the largest value" % (key, err))
    return bad


def rounded_f32(c):
    """the case with its arrays (inputs, weights, dO, sinks) rounded to
    float32, so that mha --dtype f32 and torch in float32 start alike"""
    r = dict(c)
    for k in ("x", "kv", "xk", "xv", "q", "k", "v", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K",
              "b_V", "b_O", "dO", "q_norm", "k_norm"):
        if k in r:
            r[k] = np.asarray(r[k], dtype=np.float32).astype(np.float64)
    r["opts"] = dict(c["opts"])
    if "sinks" in r["opts"]:
        r["opts"]["sinks"] = np.asarray(r["opts"]["sinks"], dtype=np.float32).astype(np.float64)
    return r


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    mha = sys.argv[1]
    try:
        import torch
    except ImportError:
        print("backward_check: torch is not installed (apt-get install python3-torch): "
              "the autograd cases are skipped")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    torch.set_default_dtype(torch.float64)
    rng = np.random.default_rng(SEED)
    plans = [set()] + [{f} for f in FEATURES] + [set(FEATURES) - {"direct", "apart", "cross"}]
    for _ in range(170):
        on = {f for f in FEATURES if rng.random() < 0.4}
        # one way of giving K and V at a time
        given = [f for f in ("direct", "apart", "cross") if f in on]
        for f in given[1:]:
            on.discard(f)
        plans.append(on)
    passed = failed = runs32 = 0
    with tempfile.TemporaryDirectory() as d:
        for n, on in enumerate(plans):
            c = make_case(rng, on)
            name = "case %d (%s)" % (n, ", ".join(sorted(on)) or "plain")
            try:
                want = torch_grads(torch, c)
            except Exception as e:  # torch could not build it: both runs fail
                want, err = None, str(e)
            # each case twice: the plain path (--print all), the fast one
            for fast in (False, True):
                try:
                    if want is None:
                        raise RuntimeError(err)
                    got, _ = run_mha(mha, c, d, fast)
                    bad = compare(c, got, want)
                except Exception as e:  # a failed run is a failed case
                    bad = [str(e)]
                if bad:
                    failed += 1
                    print("FAIL %s, %s path: %s" % (name, "fast" if fast else "plain",
                                                    "; ".join(bad)))
                else:
                    passed += 1
            # every fourth case also in float32: --dtype f32 against autograd
            # in float32 from the same rounded values, at 1e-4 of the largest
            # gradient (float32's rounding, over sums of a few dozen terms)
            if n % 4:
                continue
            try:
                c32 = rounded_f32(c)
                want32 = torch_grads(torch, c32, torch.float32)
                got, _ = run_mha(mha, c32, d, f32=True)
                bad = compare(c32, got, want32, RTOL_F32)
            except Exception as e:  # a failed run is a failed case
                bad = [str(e)]
            runs32 += 1
            if bad:
                failed += 1
                print("FAIL %s, float32: %s" % (name, "; ".join(bad)))
            else:
                passed += 1
    print("backward_check: %d runs (each case on the plain path and the fast one) against "
          "torch.autograd in float64, %d of them --dtype f32 against it in float32 (%s)"
          % (passed + failed, runs32, torch.__version__))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

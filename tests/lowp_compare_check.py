#!/usr/bin/env python3
"""lowp_compare_check.py MHA: mha compare judging bfloat16 and float16
ports by their precision (issue 54).

Correct ports, written here three ways, are compared as a porter would
give them, and every one must agree (exit 0) with no option beyond
--dtype where the type is not in the data:
  - PyTorch's eager attention in bfloat16 and in float16, as Hugging Face
    computes it (products summed in float32 and rounded once, as current
    PyTorch does; Debian's torch 1.13 sums small bfloat16 products in
    bfloat16 on the CPU, so the sums are asked for in float32 here),
    saved as a .safetensors file (BF16, F16), a folder of float16 .npy
    files, or float32 .npy files with --dtype bf16;
  - NumPy in float16, products in float32 (np.matmul of float32 copies)
    rounded to float16, the softmax in float32 and rounded;
over random shapes: grouped-query heads, RoPE half and interleaved, whole
and partial (--rope-dim), sliding windows (Hugging Face's sliding_window
W, counting the current token: --window W-1,0), and decode steps (the
last queries of the sequence against every key, bottom-right causal).

Then a port that sums its products in bfloat16 (each addition rounded)
must differ (exit 1), its ratio to the reference's error reported above
the factor; and --factor raised past that ratio lets it agree.

The Python package in process: assert_attention_close with bfloat16 torch
tensors passes, with float32 tensors of bfloat16 values fails unless
dtype="bf16" says so.

Skipped without torch.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError:
    print("skip lowp_compare_check: no torch")
    sys.exit(0)

MHA = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "./mha")
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the case ---------------------------------------------------------------

def random_case(rng, big=False, yarn=False):
    G = int(rng.choice([1, 2]))
    H = G * int(rng.choice([1, 2, 4]))
    dk = int(rng.choice([8, 16]))
    n_kv = int(rng.integers(6, 24))
    decode = bool(rng.integers(3) == 0)
    return {"n_kv": n_kv, "n_q": int(rng.integers(1, 3)) if decode else n_kv, "decode": decode,
            "d": 128 if big else int(rng.choice([16, 32, 48])), "H": H, "G": G, "dk": dk,
            "rope": [None, "half", "interleaved"][int(rng.integers(3))],
            "R": dk if rng.integers(2) else dk // 2,
            "theta": float(rng.choice([10000.0, 500000.0])),
            "window": int(rng.integers(2, 6)) if rng.integers(3) == 0 else 0,
            "bias": bool(rng.integers(2)), "yarn": float(rng.choice([2.0, 4.0, 8.0])) if yarn else 0}


def inputs(case, rng):
    d, H, G, dk = case["d"], case["H"], case["G"], case["dk"]
    x = rng.normal(size=(case["n_kv"], d)) * case.get("x_scale", 1.0)
    w = {"W_Q": rng.normal(size=(d, H * dk)) / math.sqrt(d),
         "W_K": rng.normal(size=(d, G * dk)) / math.sqrt(d),
         "W_V": rng.normal(size=(d, G * dk)) / math.sqrt(d),
         "W_O": rng.normal(size=(H * dk, d)) / math.sqrt(H * dk)}
    if case["bias"]:
        w.update({"b_Q": rng.normal(size=H * dk) * 0.1, "b_K": rng.normal(size=G * dk) * 0.1,
                  "b_V": rng.normal(size=G * dk) * 0.1})
    return x, w


def allowed(case, bug=None):
    """(n_q, n_kv): query i (at position n_kv - n_q + i) sees key j"""
    n_q, n_kv, W = case["n_q"], case["n_kv"], case["window"]
    p = np.arange(n_kv - n_q, n_kv)[:, None]
    j = np.arange(n_kv)[None, :]
    ok = j <= p
    if bug in ("causal-inverted-nan", "causal-inverted-min"):
        ok = j > p  # triu where tril is meant
    if W:
        # Hugging Face's sliding_window counts the current token; planted:
        # FlashAttention's (W, 0), one key more
        ok &= p - j < (W + 1 if bug == "window-off-by-one" else W)
    return ok


def mha_args(case):
    a = ["--heads", str(case["H"]), "--kv-heads", str(case["G"]), "--causal=bottom-right"]
    if case["rope"]:
        a += ["--rope", case["rope"], "--rope-theta", repr(case["theta"]), "--rope-dim",
              str(case["R"])]
    if case.get("yarn"):
        a += ["--rope-scaling", json.dumps({"rope_type": "yarn", "factor": case["yarn"],
                                            "original_max_position_embeddings": 8})]
    if case["window"]:
        a += ["--window", "%d,0" % (case["window"] - 1)]
    return a


def inv_freq(R, theta):
    """Hugging Face's default rotary frequencies, in float32"""
    return (1.0 / (theta ** (np.arange(0, R, 2, dtype=np.int64).astype(np.float32) / R))).astype(np.float32)


def yarn(R, theta, factor, original, beta_fast=32.0, beta_slow=1.0):
    """YaRN's frequencies in float32 and its attention factor, as
    transformers' _compute_yarn_parameters makes them (truncated bounds)"""
    def dim_of(rotations):
        return (R * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))
    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), R - 1)
    pos = theta ** (torch.arange(0, R, 2).float() / R)
    extrapolation, interpolation = 1.0 / pos, 1.0 / (factor * pos)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(R // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp
    inv = interpolation * (1 - keep) + extrapolation * keep
    return inv.numpy().astype(np.float32), 0.1 * math.log(factor) + 1.0


# ---- PyTorch's eager attention in the type ---------------------------------

def torch_port(case, x, w, dtype, sum_in_type=False, bug=None, sinks=None):
    """Hugging Face's eager attention in dtype; bug: one of the porters'
    mistakes planted (the names mha compare gives them)"""
    H, G, dk, R = case["H"], case["G"], case["dk"], case["R"]
    n_q, n_kv = case["n_q"], case["n_kv"]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dtype)  # noqa: E731

    def mm(a, b):
        if sum_in_type:
            # every product and every addition rounded to the type, in order
            acc = torch.zeros(a.shape[:-1] + b.shape[-1:], dtype=dtype)
            for k in range(a.shape[-1]):
                acc = acc + a[..., k:k + 1] * b[..., k:k + 1, :]
            return acc
        return torch.matmul(a.float(), b.float()).to(dtype)

    def lin(a, W, b):
        y = mm(a, t(W))
        return y if b is None else (y.float() + t(b).float()).to(dtype)

    X = t(x)
    q = lin(X[n_kv - n_q:], w["W_Q"], w.get("b_Q"))
    k = lin(X, w["W_K"], w.get("b_K"))
    v = lin(X, w["W_V"], w.get("b_V"))
    steps = {"Q": q, "K": k, "V": v}
    q = q.view(n_q, H, dk).transpose(0, 1)
    k = k.view(n_kv, G, dk).transpose(0, 1)
    v = v.view(n_kv, G, dk).transpose(0, 1)
    if case["rope"]:
        inv = torch.from_numpy(inv_freq(R, case["theta"]))
        scaling = 1.0
        if case.get("yarn"):
            inv, scaling = yarn(R, case["theta"], case["yarn"], 8)
            inv = torch.from_numpy(inv)
            if bug == "yarn-attention-factor-missing":
                scaling = 1.0
        if bug == "rope-partial-denominator":  # head_dim where the rotated dims are meant
            inv = torch.from_numpy((1.0 / (case["theta"] ** (np.arange(0, R, 2).astype(np.float32) / dk))).astype(np.float32))
        pos = torch.arange(n_kv).float()
        f = pos[:, None] * inv[None, :]                       # float32
        emb = torch.cat((f, f), dim=-1)
        cos, sin = (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)

        def turn(z, c, s):
            zr, zp = z[..., :R], z[..., R:]
            half = case["rope"] == "half"
            if bug == "rope-pairs":  # the other pairing
                half = not half
            if half:
                rot = torch.cat((-zr[..., R // 2:], zr[..., :R // 2]), dim=-1)
            else:
                rot = torch.stack((-zr[..., 1::2], zr[..., 0::2]), dim=-1).flatten(-2)
                c = c[..., :R // 2].repeat_interleave(2, dim=-1)
                s = s[..., :R // 2].repeat_interleave(2, dim=-1)
            return torch.cat((zr * c + rot * s, zp), dim=-1)

        at = 0 if bug == "rope-position-offset" else n_kv - n_q  # a decode step at 0
        q = turn(q, cos[at:at + n_q], sin[at:at + n_q])
        k = turn(k, cos, sin)
        steps["q_rot"] = q.transpose(0, 1).reshape(n_q, H * dk)
        steps["k_rot"] = k.transpose(0, 1).reshape(n_kv, G * dk)
    if bug == "gqa-repeat":
        k, v = k.repeat(H // G, 1, 1), v.repeat(H // G, 1, 1)
    else:
        k, v = k.repeat_interleave(H // G, dim=0), v.repeat_interleave(H // G, dim=0)
    a = mm(q, k.transpose(-1, -2))
    steps["heads.scores"] = a
    a = a * (dk ** -0.5)
    steps["heads.scaled"] = a
    fill = -np.inf if bug == "causal-inverted-nan" else torch.finfo(dtype).min
    m = torch.from_numpy(np.where(allowed(case, bug), 0.0, fill)).to(dtype)
    a = a + m
    if sinks is not None and bug != "sinks-missing":
        # gpt-oss: each head's sink a column of the softmax, left out after
        s = torch.from_numpy(np.roll(sinks, -1) if bug == "sinks-wrong-head" else sinks).to(dtype)
        cat = torch.cat([a, s.reshape(-1, 1, 1).expand(H, n_q, 1)], dim=-1)
        cat = cat - cat.max(dim=-1, keepdim=True).values
        p = torch.softmax(cat.float(), dim=-1).to(dtype)[..., :-1]  # in float32, as current torch
    elif bug == "softmax-sum-low-precision":
        # exponentials and their sum in the type, key by key
        e = torch.exp((a - a.max(dim=-1, keepdim=True).values).float()).to(dtype)
        total = torch.zeros(a.shape[:-1] + (1,), dtype=dtype)
        for j in range(n_kv):
            total = total + e[..., j:j + 1]
        p = (e.float() / total.float()).to(dtype)
    else:
        p = torch.softmax(a, dim=-1, dtype=torch.float32).to(dtype)
    steps["heads.softmax"] = p
    o = mm(p, v).transpose(0, 1).reshape(n_q, H * dk)
    steps["concat"] = o
    steps["output"] = lin(o, w["W_O"], None)
    return steps


# ---- NumPy in float16 -------------------------------------------------------

def numpy_port(case, x, w):
    H, G, dk, R = case["H"], case["G"], case["dk"], case["R"]
    n_q, n_kv = case["n_q"], case["n_kv"]
    h = np.float16

    def prod(a, b):
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(h)

    X = x.astype(h)
    W = {k: v.astype(h) for k, v in w.items()}
    q = prod(X[n_kv - n_q:], W["W_Q"])
    k = prod(X, W["W_K"])
    v = prod(X, W["W_V"])
    if "b_Q" in W:
        q = (q.astype(np.float32) + W["b_Q"].astype(np.float32)).astype(h)
        k = (k.astype(np.float32) + W["b_K"].astype(np.float32)).astype(h)
        v = (v.astype(np.float32) + W["b_V"].astype(np.float32)).astype(h)
    steps = {"query_states": q, "key_states": k, "value_states": v}
    qh = q.reshape(n_q, H, dk).transpose(1, 0, 2)
    kh = k.reshape(n_kv, G, dk).transpose(1, 0, 2)
    vh = v.reshape(n_kv, G, dk).transpose(1, 0, 2)
    if case["rope"]:
        ang = np.arange(n_kv, dtype=np.float32)[:, None] * inv_freq(R, case["theta"])[None, :]
        c, s = np.cos(ang).astype(h), np.sin(ang).astype(h)

        def turn(z, c, s):
            out = z.copy()
            if case["rope"] == "half":
                a, b = np.arange(R // 2), np.arange(R // 2) + R // 2
            else:
                a, b = np.arange(0, R, 2), np.arange(1, R, 2)
            za, zb = z[..., a], z[..., b]
            r1 = ((za * c).astype(h) + (-zb * s).astype(h)).astype(h)
            r2 = ((zb * c).astype(h) + (za * s).astype(h)).astype(h)
            out[..., a], out[..., b] = r1, r2
            return out

        qh = turn(qh, c[n_kv - n_q:], s[n_kv - n_q:])
        kh = turn(kh, c, s)
    kh = np.repeat(kh, H // G, axis=0)
    vh = np.repeat(vh, H // G, axis=0)
    a = prod(qh, kh.transpose(0, 2, 1))
    a = (a.astype(np.float32) * np.float32(dk ** -0.5)).astype(h)
    a = np.where(allowed(case), a, -np.inf).astype(np.float32)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    p = (e / e.sum(axis=-1, keepdims=True)).astype(h)
    steps["attn_weights"] = p
    o = prod(p, vh).transpose(1, 0, 2).reshape(n_q, H * dk)
    steps["attn_output"] = o
    steps["output"] = prod(o, W["W_O"])
    return steps


# ---- writing their arrays ---------------------------------------------------

def save_safetensors(path, arrays):
    header, blobs, at = {}, [], 0
    for name, t in arrays.items():
        t = t.contiguous()
        kind = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}[t.dtype]
        data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def compare(tmp, case, against, extra=()):
    args = [MHA, "compare", "-x", os.path.join(tmp, "xq.npy"), "--kv", os.path.join(tmp, "x.npy"),
            "-w", os.path.join(tmp, "w.npz"), "--against", against, "-f", "json"] + mha_args(case)
    r = subprocess.run(args + list(extra), capture_output=True, text=True)
    if r.returncode not in (0, 1):
        return None, r.stderr.strip()
    return json.loads(r.stdout), r.returncode


def write_inputs(tmp, case, x, w):
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "xq.npy"), x[case["n_kv"] - case["n_q"]:])
    np.savez(os.path.join(tmp, "w.npz"), **w)


def why(report):
    if report["agree"]:
        return ""
    st = [s for s in report["steps"] if s["step"] == report["first_difference"]][0]
    return "%s: error %s, reference %s, ratio %s" % (st["step"], st["max_abs"], st["reference_error"],
                                                    st["ratio"])


def main():
    rng = np.random.default_rng(5454)
    failed = 0
    counts = {}
    with tempfile.TemporaryDirectory() as tmp:
        ways = [("torch bf16 safetensors", torch.bfloat16, "st", ()),
                ("torch fp16 safetensors", torch.float16, "st", ()),
                ("torch fp16 npy folder", torch.float16, "npy", ()),
                ("torch bf16 as float32 --dtype bf16", torch.bfloat16, "f32", ("--dtype", "bf16")),
                ("numpy fp16 npz", None, "npz", ()),
                ("torch bf16 YaRN safetensors", torch.bfloat16, "st", ())]
        for label, dtype, form, extra in ways:
            for i in range(10):
                case = random_case(rng, yarn="YaRN" in label)
                if case["yarn"] and not case["rope"]:
                    case["rope"] = "half"
                x, w = inputs(case, rng)
                write_inputs(tmp, case, x, w)
                if dtype is None:
                    steps = numpy_port(case, x, w)
                    path = os.path.join(tmp, "theirs.npz")
                    np.savez(path, **steps)
                else:
                    steps = torch_port(case, x, w, dtype)
                    if form == "st":
                        path = os.path.join(tmp, "theirs.safetensors")
                        save_safetensors(path, steps)
                    else:
                        path = os.path.join(tmp, "theirs-%s-%d" % (form, i))
                        os.makedirs(path)
                        for k, v in steps.items():
                            np.save(os.path.join(path, k + ".npy"),
                                    v.float().numpy() if form == "f32" else v.numpy())
                report, rc = compare(tmp, case, path, extra)
                what = "%s, case %d %s" % (label, i + 1, json.dumps(case, sort_keys=True))
                if report is None or rc != 0 or any(s["type"] == "f64" for s in report["steps"]):
                    failed += 1
                    print("FAIL %s\n  %s" % (what, rc if report is None else why(report) or
                                             "a step read as float64"))
                else:
                    counts[label] = counts.get(label, 0) + 1
        # a port that sums in bfloat16: named by its ratio, loosened by --factor
        for i in range(3):
            case = random_case(rng, big=True)
            x, w = inputs(case, rng)
            write_inputs(tmp, case, x, w)
            path = os.path.join(tmp, "summed.safetensors")
            save_safetensors(path, torch_port(case, x, w, torch.bfloat16, sum_in_type=True))
            report, rc = compare(tmp, case, path)
            what = "bf16 sums, case %d %s" % (i + 1, json.dumps(case, sort_keys=True))
            st = report and [s for s in report["steps"] if not s["agree"]]
            if report is None or rc != 1 or not st or not st[0]["ratio"] or st[0]["ratio"] <= 2:
                failed += 1
                print("FAIL %s: expected a difference with its ratio above 2: %r" % (what, rc))
                continue
            ratio = max(s["ratio"] or 0 for s in report["steps"])
            looser, rc2 = compare(tmp, case, path, ("--factor", "%g" % (ratio * 1.01)))
            if rc2 != 0:
                failed += 1
                print("FAIL %s: --factor %g did not let it agree" % (what, ratio * 1.01))
                continue
            print("ok %s: %s differs first, ratio %.1f" % (what, st[0]["step"], st[0]["ratio"]))
        failed += planted(rng, tmp)
        failed += python_in_process(rng, tmp)
    for label, n in counts.items():
        print("ok %s: %d of 10 agree" % (label, n))
    print("lowp_compare_check: %s" % ("%d failed" % failed if failed else "all passed"))
    sys.exit(1 if failed else 0)


# each mistake planted, and the case it needs (over a random one)
PLANTED = {
    "causal-inverted-nan": ("causal-inverted", dict(decode=False, window=0)),
    "causal-inverted-min": ("causal-inverted", dict(decode=False, window=0)),
    "gqa-repeat": ("gqa-repeat", dict(G=2, H=4)),
    "window-off-by-one": ("window-off-by-one", dict(window=4, decode=False)),
    "sinks-missing": ("sinks-missing", dict(window=0)),
    "sinks-wrong-head": ("sinks-wrong-head", dict(window=0, G=2, H=4)),
    "rope-partial-denominator": ("rope-partial-denominator", dict(rope="half", dk=16, R=8)),
    "rope-position-offset": ("rope-position-offset", dict(rope="half", decode=True, n_q=1)),
    "rope-pairs": ("rope-pairs", dict(rope="interleaved", dk=16, R=8)),
    # small scores: long rows of like weights, whose sum stalls in bfloat16
    "softmax-sum-low-precision": ("softmax-sum-low-precision",
                                  dict(n_kv=256, decode=False, window=0, x_scale=0.3)),
    "yarn-attention-factor-missing": ("yarn-attention-factor-missing", dict(rope="half", yarn=4.0)),
}


def documented_mistakes():
    """the porting mistakes docs/finding-the-bug.md's table lists"""
    names, inside = [], False
    with open(os.path.join(TOP, "docs", "finding-the-bug.md")) as f:
        for line in f:
            if line.startswith("| porting mistake |"):
                inside = True
            elif inside and line.startswith("| `"):
                names += [n.strip().strip("`") for n in line.split("|")[1].split(",")]
            elif inside and not line.startswith("|"):
                break
    return names


def planted(rng, tmp):
    """each porter's mistake planted in a bfloat16 port, and named; every
    one the documentation lists is planted"""
    bad = 0
    listed = documented_mistakes()
    missing = sorted(set(listed) - set(name for name, _ in PLANTED.values()))
    if not listed or missing:
        print("FAIL the documented porting mistakes not planted here: %s" % (missing or "none listed"))
        bad += 1
    for bug, (name, fix) in PLANTED.items():
        # a float16 sum of 256 weights errs within float16's own limit (twice
        # the reference's error plus a unit in the last place of 1): a
        # mistake float16 hides at these lengths, named in bfloat16
        for dtype in (torch.bfloat16,) if bug == "softmax-sum-low-precision" else \
                (torch.bfloat16, torch.float16):
            case = dict(random_case(rng), **fix)
            if not case["decode"]:
                case["n_q"] = case["n_kv"]
            x, w = inputs(case, rng)
            write_inputs(tmp, case, x, w)
            sinks = None
            extra = []
            if bug.startswith("sinks"):
                sinks = rng.normal(size=case["H"]) + 1.0
                np.save(os.path.join(tmp, "sinks.npy"), sinks)
                extra = ["--sinks", os.path.join(tmp, "sinks.npy")]
            path = os.path.join(tmp, "planted.safetensors")
            save_safetensors(path, torch_port(case, x, w, dtype, bug=bug, sinks=sinks))
            report, rc = compare(tmp, case, path, extra)
            what = "planted %s in %s, %s" % (bug, str(dtype)[6:], json.dumps(case, sort_keys=True))
            got = report and report["diagnosis"] and report["diagnosis"]["mistake"]
            if report is None or rc != 1 or got != name:
                bad += 1
                print("FAIL %s: %s" % (what, rc if report is None else "named %r (%s)" % (got, why(report))))
            else:
                print("ok %s: %s, at %s" % (what, got, report["diagnosis"]["step"]))
    return bad


def python_in_process(rng, tmp):
    """assert_attention_close with tensors, as a pytest of theirs would"""
    sys.path.insert(0, os.path.join(TOP, "python"))
    import mha
    import mha.testing
    case = dict(random_case(rng), decode=False)
    case["n_q"] = case["n_kv"]
    x, w = inputs(case, rng)
    steps = torch_port(case, x, w, torch.bfloat16)
    opts = dict(x=x, weights=w, heads=case["H"], kv_heads=case["G"], causal="bottom-right")
    if case["rope"]:
        opts.update(rope=case["rope"], rope_theta=case["theta"], rope_dim=case["R"])
    if case["window"]:
        opts.update(window="%d,0" % (case["window"] - 1))
    bad = 0
    try:
        mha.testing.assert_attention_close(steps, **opts)
        mha.testing.assert_attention_close({k: v.float() for k, v in steps.items()}, dtype="bf16",
                                           **opts)
    except AssertionError as e:
        print("FAIL python: a correct bfloat16 port: %s" % str(e).splitlines()[-1])
        bad += 1
    try:
        mha.testing.assert_attention_close({k: v.float() for k, v in steps.items()}, **opts)
        print("FAIL python: float32 tensors of bfloat16 values passed without dtype")
        bad += 1
    except AssertionError as e:
        if "--dtype bf16" not in str(e):
            print("FAIL python: no hint at the type: %s" % str(e).splitlines()[-1])
            bad += 1
    if not bad:
        print("ok python (%s): bfloat16 tensors agree, float32 ones with dtype=\"bf16\"" %
              mha.backend())
    return bad


if __name__ == "__main__":
    main()

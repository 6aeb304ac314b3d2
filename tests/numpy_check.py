#!/usr/bin/python3
"""numpy_check.py: mha's numbers against an independent NumPy reference.

usage: numpy_check.py MHA_BINARY

The reference (numpy_ref.py) is written from the formula in lib/mha.h the way a
NumPy user would write it (matrix products, reshape/transpose for the
heads, np.repeat for grouped-query heads, np.where for masks, a softmax
that subtracts the row maximum), not translated from lib/core/forward.c.  Random
cases (a fixed seed, numpy's default_rng) are written as JSON into a
temporary directory, `mha forward ... --format json` prints its
intermediates, and every one present is compared to the reference.

Tolerance: a finite entry a from mha passes against the reference b when

    |a - b| <= 1e-12 * max(1, |b|)

Inputs are O(1) and no sum is longer than 64 terms, so each entry's
rounding error is a few ulps of the size of its terms (about 1e-15);
1e-12 leaves three orders of magnitude for summation order and libm's
exp/tanh, while any semantic slip (a wrong scale, head block, mask
alignment) moves entries by 1e-3 or more.  The floor of 1 is there
because an entry that cancels to near zero still carries the absolute
error of its O(1) terms, so a purely relative test would be meaningless
for it.  Non-finite values must match exactly (-inf against -inf, and NaN
never passes), and some things must be bit-exact: the inputs echoed back
(X, and Q/K/V when they are given or not projected), the mask, each
head's Q/K/V block against the columns of mha's own Q/K/V, and the zeros
of masked-out keys and of rows whose every key is masked.

It prints one line per case and ends with "N passed, N failed"; the exit
status is 1 if any case failed.  When torch can be imported, a few cases
also compare mha with torch's scaled_dot_product_attention and
nn.MultiheadAttention in float64 (numpy_torch.py).  Running mha, reading
its JSON and comparing are numpy_io.py's.
"""

import math
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_io import (NONFINITE, RTOL, Mismatch, bit_equal, compare,  # noqa: E402
                      dump_json, parse_json, run, to_array)
from numpy_ref import batch_reference, press_slopes, reference  # noqa: E402
from numpy_torch import torch_cases, torch_mask_cases  # noqa: E402

SEED = 20240611

# ---- cases ---------------------------------------------------------------

PRINT_NAMES = ("x", "q", "k", "v", "scores", "scaled", "softcapped", "mask",
               "masked", "softmax", "heads", "concat", "output")
WHOLE_KEYS = {"x": "X", "q": "Q", "k": "K", "v": "V", "mask": "mask",
              "concat": "concat", "output": "output", "q_rot": "q_rot", "k_rot": "k_rot"}
HEAD_KEYS = {"scores": "scores", "scaled": "scaled", "softcapped": "softcapped",
             "masked": "masked", "softmax": "softmax", "heads": "output"}
# a head's JSON key -> the reference's per-head array
HEAD_REF = {"Q": "head_Q", "K": "head_K", "V": "head_V", "scores": "scores",
            "scaled": "scaled", "softcapped": "softcapped", "masked": "masked",
            "softmax": "softmax", "output": "head_output"}


class Case:
    """One configuration: the inputs, the options, and what to print."""

    def __init__(self, name, **kw):
        self.name = name
        self.n_q = kw.get("n_q", 4)
        self.n_kv = kw.get("n_kv", self.n_q)
        self.heads = kw.get("heads", 1)
        self.kv_heads = kw.get("kv_heads")       # None: --kv-heads not given
        self.source = kw.get("source", "x")      # x, kv (cross), apart (--xk/--xv) or direct
        self.d_model = kw.get("d_model", 4)      # columns of X
        self.d_kv_in = kw.get("d_kv_in")         # columns of X_kv (X_k with --xk)
        self.d_xv_in = kw.get("d_xv_in")         # columns of X_v (--xv)
        self.d_k = kw.get("d_k")                 # None: d_model / heads
        self.d_v = kw.get("d_v")
        self.d_out = kw.get("d_out")
        self.proj = kw.get("proj", False)        # W_Q, W_K, W_V
        self.proj_bias = kw.get("proj_bias", False)
        self.wo = kw.get("wo", False)
        self.wo_bias = kw.get("wo_bias", False)
        self.scale = kw.get("scale")             # None: the default
        self.softcap = kw.get("softcap")
        self.causal = kw.get("causal")           # None, "", top-left, bottom-right
        self.mask = kw.get("mask")               # None or a dict, see make_mask
        self.x = kw.get("x")                     # X given instead of drawn
        self.x_sd = kw.get("x_sd", 1.0)
        self.integers = kw.get("integers", False)
        self.prints = kw.get("prints", [])       # extra runs besides "all"
        self.mask_bare = kw.get("mask_bare", False)
        self.sinks = kw.get("sinks", False)      # one sink logit per head
        self.alibi = kw.get("alibi")             # None, "press" (--alibi) or "given"
        # rotary embeddings: {"mode", "theta", "dim", "positions": None|"list"|"qk",
        # "tables": rows of random cos/sin tables, or absent}
        self.rope = kw.get("rope")

    # -- drawing the data

    def draw(self, rng):
        H = self.heads
        G = self.kv_heads or H

        def mat(r, c, sd=1.0):
            if self.integers:
                return rng.integers(-20, 21, size=(r, c)).astype(np.float64)
            return rng.normal(0.0, sd, size=(r, c))

        d = {}
        if self.source == "direct":
            d_k = self.d_k or 2
            d_v = self.d_v or d_k
            d["Q"] = mat(self.n_q, H * d_k, self.x_sd)
            d["K"] = mat(self.n_kv, G * d_k, self.x_sd)
            d["V"] = mat(self.n_kv, G * d_v, self.x_sd)
            d_cat = H * d_v
        else:
            d["X"] = self.x if self.x is not None else mat(self.n_q, self.d_model, self.x_sd)
            d_model = d["X"].shape[1]
            if self.proj:
                d_k = self.d_k or d_model // H
                d_v = self.d_v or d_k
                d_kv_in = self.d_kv_in or d_model
            else:
                d_k = d_v = d_model // H
                d_kv_in = G * d_k
            if self.source == "kv":
                d["X_kv"] = mat(self.n_kv, d_kv_in, self.x_sd)
            if self.source == "apart":
                d["X_k"] = mat(self.n_kv, d_kv_in, self.x_sd)
                if not self.proj:
                    d_v = (self.d_xv_in or G * d_v) // G
                d["X_v"] = mat(self.n_kv, self.d_xv_in or G * d_v, self.x_sd)
            d_cat = H * d_v
        w = {}
        if self.proj:
            d_kv_in = d["X_kv"].shape[1] if "X_kv" in d else d["X_k"].shape[1] if "X_k" in d \
                else d_model
            d_v_in = d["X_v"].shape[1] if "X_v" in d else d_kv_in
            w["W_Q"] = mat(d_model, H * d_k) / math.sqrt(d_model)
            w["W_K"] = mat(d_kv_in, G * d_k) / math.sqrt(d_kv_in)
            w["W_V"] = mat(d_v_in, G * d_v) / math.sqrt(d_v_in)
            if self.proj_bias:
                w["b_Q"] = rng.normal(0.0, 0.5, size=H * d_k)
                w["b_K"] = rng.normal(0.0, 0.5, size=G * d_k)
                w["b_V"] = rng.normal(0.0, 0.5, size=G * d_v)
        if self.wo:
            d_out = self.d_out or d_cat
            w["W_O"] = mat(d_cat, d_out) / math.sqrt(d_cat)
            if self.wo_bias:
                w["b_O"] = rng.normal(0.0, 0.5, size=d_out)
        d["w"] = w
        d["mask"] = self.make_mask(rng) if self.mask else None
        d["sinks"] = rng.normal(0.0, 1.5, size=H) if self.sinks else None
        d["slopes"] = rng.normal(0.0, 0.5, size=H) if self.alibi == "given" else None
        d["rope"] = None
        if self.rope:
            r = {k: v for k, v in self.rope.items() if k in ("mode", "theta", "dim")}
            R = r.get("dim") or d_k
            rows = self.rope.get("tables")
            if rows:
                r["cos"] = rng.normal(0.0, 1.0, size=(rows, R // 2))
                r["sin"] = rng.normal(0.0, 1.0, size=(rows, R // 2))
            top = rows or 50
            if self.rope.get("positions") == "list":
                r["q_pos"] = r["k_pos"] = rng.integers(0, top, size=self.n_q)
            elif self.rope.get("positions") == "qk":
                r["q_pos"] = rng.integers(0, top, size=self.n_q)
                r["k_pos"] = rng.integers(0, top, size=self.n_kv)
            d["rope"] = r
        return d

    def make_mask(self, rng):
        """mask: {kind: bool|add, per_head, block_rows: [...], all_blocked}"""
        spec = self.mask
        shape = (self.heads, self.n_q, self.n_kv) if spec.get("per_head") else (self.n_q, self.n_kv)
        if spec["kind"] == "bool":
            m = rng.random(shape) < 0.7
            blocked = False
        else:
            m = rng.normal(0.0, 1.0, size=shape)
            m[rng.random(shape) < 0.2] = -np.inf
            blocked = -np.inf
        for r in spec.get("block_rows", []):
            m[..., r, :] = blocked
        if spec.get("all_blocked"):
            m[...] = blocked
        return m

    # -- the command line

    def files_and_args(self, data, tmp):
        def write(fname, value):
            path = os.path.join(tmp, fname)
            with open(path, "w") as f:
                f.write(dump_json(value) + "\n")
            return path

        args = []
        if self.source == "direct":
            args += ["--q", write("q.json", {"Q": data["Q"]}),
                     "--k", write("k.json", data["K"]),        # a bare array
                     "--v", write("v.json", {"V": data["V"]})]
        else:
            args += ["-x", write("x.json", {"X": data["X"]})]
            if "X_kv" in data:
                args += ["--kv", write("kv.json", data["X_kv"])]
            if "X_k" in data:
                args += ["--xk", write("xk.json", data["X_k"]),
                         "--xv", write("xv.json", {"X": data["X_v"]})]
        if data["w"]:
            args += ["-w", write("w.json", data["w"])]
        if data["mask"] is not None:
            m = data["mask"]
            args += ["--mask", write("mask.json", m if self.mask_bare else {"mask": m})]
        if data["sinks"] is not None:
            args += ["--sinks", write("sinks.json", data["sinks"])]
        if self.alibi == "press":
            args += ["--alibi"]
        elif self.alibi == "given":
            args += ["--alibi-slopes", write("slopes.json", data["slopes"])]
        r = data["rope"]
        if r is not None:
            args += ["--rope", r["mode"]]
            if "theta" in r:
                args += ["--rope-theta", repr(r["theta"])]
            if "dim" in r:
                args += ["--rope-dim", str(r["dim"])]
            if "cos" in r:
                args += ["--rope-cos", write("cos.json", r["cos"]),
                         "--rope-sin", write("sin.json", r["sin"])]
            if self.rope.get("positions") == "list":
                args += ["--positions", write("pos.json", [int(p) for p in r["q_pos"]])]
            elif self.rope.get("positions") == "qk":
                args += ["--positions", write("pos.json", {"q": [int(p) for p in r["q_pos"]],
                                                           "k": [int(p) for p in r["k_pos"]]})]
        if self.heads != 1 or self.kv_heads:
            args += ["--heads", str(self.heads)]
        if self.kv_heads:
            args += ["--kv-heads", str(self.kv_heads)]
        if self.scale is not None:
            args += ["--scale", str(self.scale)]
        if self.softcap:
            args += ["--softcap", repr(self.softcap)]
        if self.causal is not None:
            args += ["--causal" + ("=" + self.causal if self.causal else "")]
        return args

    def ref(self, data):
        if self.source == "direct":
            xq, xk, xv = data["Q"], data["K"], data["V"]
        else:
            xq = data["X"]
            xk = xv = data.get("X_kv", data["X"])
            if "X_k" in data:
                xk, xv = data["X_k"], data["X_v"]
        causal = None if self.causal is None else (self.causal or "top-left")
        alibi = press_slopes(self.heads) if self.alibi == "press" else data["slopes"]
        return reference(xq, xk, xv, data["w"], self.heads, self.kv_heads, self.scale,
                         self.softcap, causal, data["mask"], data["sinks"], alibi, data["rope"])


def required_keys(case, printed):
    """(whole keys, per-head keys) that must be in the JSON for --print printed."""
    direct = case.source == "direct"
    masking = case.causal is not None or case.mask is not None
    if printed == ["all"]:
        # every step the run has, copies too (docs/formats.md: the JSON output)
        names = {"q", "k", "v", "scores", "scaled", "softmax", "heads", "concat", "output"}
        if not direct:
            names.add("x")
        if case.softcap:
            names.add("softcapped")
        if masking:
            names |= {"mask", "masked"}
        if case.rope:
            names |= {"q_rot", "k_rot"}
    else:
        names = set(printed)
    whole = {WHOLE_KEYS[n] for n in names if n in WHOLE_KEYS and not (direct and n == "x")}
    per_head = {HEAD_KEYS[n] for n in names if n in HEAD_KEYS}
    # each head's block of Q, K, V, with one head too (it is the whole)
    per_head |= {n.upper() for n in names if n in ("q", "k", "v")}
    return whole, per_head


def check_json(case, data, ref, doc, printed):
    """Compare every intermediate in mha's JSON output; the max difference."""
    worst = 0.0
    H = case.heads
    G = case.kv_heads or H
    known = {"meta", "X", "Q", "K", "V", "mask", "heads", "concat", "output", "q_rot", "k_rot"}
    for k in doc:
        if k not in known:
            raise Mismatch("unknown key %r in mha's output" % k)
    if not isinstance(doc.get("meta"), dict):
        raise Mismatch("no 'meta' object in mha's output")
    need_whole, need_head = required_keys(case, printed)
    for k in need_whole:
        if k not in doc:
            raise Mismatch("--print %s: no %r in the output" % (",".join(printed), k))
    heads = doc.get("heads", [])
    if not isinstance(heads, list):
        raise Mismatch("'heads' is not an array")
    if (need_head or heads) and len(heads) != H:
        raise Mismatch("--print %s: %d heads in the output, expected %d"
                       % (",".join(printed), len(heads), H))

    got = {k: to_array(v, k) for k, v in doc.items() if k not in ("heads", "meta")}

    if "X" in got:
        bit_equal("X", got["X"], data["X"])    # repr() in, the same double out
    for k in ("Q", "K", "V"):
        if k not in got:
            continue
        # unprojected Q, K, V are the input itself
        src = None
        if case.source == "direct":
            src = data[k]
        elif not case.proj:
            # without weights Q, K and V are their sources, bit for bit
            src = data["X"] if k == "Q" else data.get("X_kv", data["X"])
            if "X_k" in data and k != "Q":
                src = data["X_k"] if k == "K" else data["X_v"]
        if src is not None:
            bit_equal(k, got[k], src)
        worst = max(worst, compare(k, got[k], ref[k]))
    for k in ("q_rot", "k_rot"):
        if k in got:
            worst = max(worst, compare(k, got[k], ref[k]))
    if "mask" in got:
        want = ref["mask"] if got["mask"].ndim == 3 else ref["mask"][0]
        # ALiBi's slope*(j - p): a product, the slopes from another formula
        exact = np.isneginf(want) if case.alibi else np.ones(want.shape, bool)
        worst = max(worst, compare("mask", got["mask"], want, exact=exact))
        if case.alibi:
            # the slopes themselves, as meta gives them
            meta = doc["meta"].get("alibi")
            if not isinstance(meta, dict) or meta.get("rule") != ("press" if case.alibi ==
                                                                   "press" else "given"):
                raise Mismatch("meta.alibi is %r" % (meta,))
            want_s = press_slopes(H) if case.alibi == "press" else data["slopes"]
            worst = max(worst, compare("meta.alibi.slopes", np.asarray(meta["slopes"], float),
                                       want_s))
    for k in ("concat", "output"):
        if k in got:
            exact = None
            if k == "concat" or "W_O" not in data["w"]:  # a head's blocked rows: zero
                exact = np.repeat(ref["blocked"].T, ref["head_output"].shape[2], axis=1)
            worst = max(worst, compare(k, got[k], ref[k], exact=exact))

    for h, hd in enumerate(heads):
        if not isinstance(hd, dict):
            raise Mismatch("heads[%d] is not an object" % h)
        for k in need_head:
            if k not in hd:
                raise Mismatch("--print %s: no heads[%d].%s" % (",".join(printed), h, k))
        for k, v in hd.items():
            if k not in HEAD_REF:
                raise Mismatch("unknown key heads[%d].%r" % (h, k))
            a = to_array(v, "heads[%d].%s" % (h, k))
            r = ref[HEAD_REF[k]][h]
            name = "heads[%d].%s" % (h, k)
            exact = None
            if k == "softmax":
                exact = np.isneginf(ref["masked"][h])          # masked keys: 0
                exact |= ref["blocked"][h][:, None]            # blocked rows: 0
                if ref["softmax_bloom"] is not None:
                    worst = max(worst, compare(name + " (BLOOM's slope*j)", a,
                                               ref["softmax_bloom"][h], exact=exact))
            elif k == "output":
                exact = np.broadcast_to(ref["blocked"][h][:, None], r.shape)
            worst = max(worst, compare(name, a, r, exact=exact))
            whole = {"Q": "q_rot", "K": "k_rot"}.get(k) if case.rope else k
            if k in ("Q", "K", "V") and whole in got:
                # the head's block is a copy of mha's own columns (rotated, with rope)
                g = h if k == "Q" else h // (H // G)
                w = a.shape[1]
                bit_equal(name, a, got[whole][:, g * w:(g + 1) * w])
    return worst


def parse_text(text):
    """'--print output --format text': a title line, then rows of numbers."""
    lines = text.splitlines()
    rows = [[NONFINITE[t] if t in NONFINITE else float(t) for t in ln.split()]
            for ln in lines[1:] if ln.strip()]
    title = lines[0]
    r, c = title[title.rindex("(") + 1:title.rindex(")")].split("x")
    a = np.array(rows, dtype=np.float64)
    if a.shape != (int(r), int(c)):
        raise Mismatch("text output: %s rows but title says %sx%s" % (a.shape, r, c))
    return a


def run_case(binary, case, rng):
    data = case.draw(rng)
    ref = case.ref(data)
    for k in ("Q", "K", "V", "scores", "softmax", "output"):
        assert not np.isnan(ref[k]).any(), "reference has NaN in " + k
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="mha-numpy-") as tmp:
        args = case.files_and_args(data, tmp)
        json_out = None
        for printed in [["all"]] + case.prints:
            if printed == ["text17"]:
                # --exact: the plain path, as --print all took, so the bits can match
                text = run(binary, args + ["--print", "output", "--precision", "17", "--full",
                                           "--exact"])
                a = parse_text(text)
                worst = max(worst, compare("output (text)", a, ref["output"]))
                # 17 digits read back as the very numbers the JSON had
                if json_out is not None:
                    compare("output (text vs json)", a, json_out,
                            exact=np.ones(a.shape, bool))
                continue
            if printed == ["file"]:
                out = os.path.join(tmp, "out.json")
                if run(binary, args + ["--format", "json", "-o", out]) != "":
                    raise Mismatch("-o %s: output on stdout too" % out)
                with open(out) as f:
                    text = f.read()
                printed = ["output"]
            else:
                text = run(binary, args + ["--format", "json", "--print", ",".join(printed)])
            try:
                doc = parse_json(text)
            except ValueError as e:
                raise Mismatch("--print %s: bad JSON: %s" % (",".join(printed), e))
            if not isinstance(doc, dict):
                raise Mismatch("the JSON output is not an object")
            worst = max(worst, check_json(case, data, ref, doc, printed))
            if printed == ["all"]:
                json_out = to_array(doc["output"], "output")
    return worst


def cases():
    P = [["q", "k", "v"], ["scores", "scaled"], ["mask", "masked"], ["softmax", "heads"],
         ["concat", "output"], ["x"], ["text17"], ["file"], ["heads"]]
    c = []

    def add(name, **kw):
        kw.setdefault("prints", [P[len(c) % len(P)]])
        c.append(Case(name, **kw))

    # sizes and heads
    add("one-head-self", n_q=5, d_model=4, proj=True)
    add("n1", n_q=1, d_model=3, proj=True, proj_bias=True)
    add("n1-cross-n_kv1", n_q=1, n_kv=1, source="kv", d_model=2, d_kv_in=3, proj=True)
    add("dk1-no-weights", n_q=4, d_model=4, heads=4)
    add("dk1-weights", n_q=3, d_model=5, heads=3, d_k=1, d_v=1, proj=True, wo=True)
    add("heads2-biases", n_q=5, d_model=6, heads=2, proj=True, proj_bias=True)
    add("heads3-wo-dout", n_q=4, d_model=6, heads=3, proj=True, wo=True, d_out=5)
    add("heads4-wo-bo", n_q=6, d_model=8, heads=4, proj=True, proj_bias=True, wo=True,
        wo_bias=True, d_out=3)
    add("heads4-no-weights", n_q=5, d_model=8, heads=4)
    add("heads2-no-weights-causal", n_q=5, d_model=4, heads=2, causal="")
    add("no-proj-wo-only", n_q=4, d_model=6, heads=2, wo=True, wo_bias=True, d_out=2)
    add("dv-ne-dk", n_q=4, d_model=4, heads=2, d_k=3, d_v=5, proj=True, wo=True, d_out=4)
    # grouped-query and multi-query
    add("gqa-h4-g2", n_q=5, d_model=8, heads=4, kv_heads=2, proj=True, proj_bias=True)
    add("mqa-h4-g1", n_q=5, d_model=8, heads=4, kv_heads=1, proj=True, wo=True)
    # keys and values from sources of their own widths (--xk, --xv)
    add("apart-weights", n_q=4, n_kv=6, source="apart", d_model=4, d_kv_in=3, d_xv_in=7,
        heads=2, proj=True, proj_bias=True, wo=True)
    add("apart-gqa-causal", n_q=5, n_kv=5, source="apart", d_model=8, d_kv_in=5, d_xv_in=2,
        heads=4, kv_heads=2, proj=True, d_v=3, causal="")
    # attention sinks, gpt-oss style (a column through the softmax, dropped)
    add("sinks-gqa-causal", n_q=6, d_model=8, heads=4, kv_heads=2, proj=True, wo=True,
        causal="", sinks=True)
    add("sinks-mask-blocked-row", n_q=4, d_model=4, heads=2, proj=True, sinks=True,
        mask={"kind": "bool", "block_rows": [1]})
    # rotary embeddings: Llama-style rotate_half and GPT-J-style rotate_every_two
    add("rope-llama-gqa-causal", n_q=6, d_model=16, heads=4, kv_heads=2, proj=True,
        proj_bias=True, wo=True, causal="", rope={"mode": "half"}, prints=[["q_rot", "k_rot"]])
    add("rope-gptj-partial-theta", n_q=5, d_model=12, heads=2, proj=True, d_k=6,
        rope={"mode": "interleaved", "dim": 4, "theta": 100.0})
    add("rope-llama-kv-cache", n_q=2, n_kv=7, source="direct", heads=2, d_k=4,
        causal="bottom-right", rope={"mode": "half", "theta": 500000.0})
    add("rope-cross-positions", n_q=3, n_kv=6, source="kv", d_model=8, d_kv_in=5, heads=2,
        proj=True, rope={"mode": "half", "dim": 2, "positions": "qk"})
    add("rope-gptj-tables", n_q=5, d_model=8, heads=2, kv_heads=1, proj=True,
        rope={"mode": "interleaved", "tables": 9, "positions": "list"}, prints=[["heads"]])
    add("rope-llama-tables-default-pos", n_q=4, d_model=8, heads=1, proj=True,
        rope={"mode": "half", "tables": 4, "dim": 6})
    add("apart-no-weights", n_q=3, n_kv=5, source="apart", d_model=4, heads=2, d_xv_in=6)
    add("gqa-h6-g3-dv", n_q=4, d_model=6, heads=6, kv_heads=3, d_k=2, d_v=3, proj=True,
        wo=True, wo_bias=True)
    add("gqa-no-weights-cross", n_q=3, n_kv=6, source="kv", d_model=8, heads=4, kv_heads=2)
    add("mqa-direct", n_q=4, n_kv=5, source="direct", heads=3, kv_heads=1, d_k=2, d_v=3)
    add("h2-kvheads2-explicit", n_q=4, d_model=4, heads=2, kv_heads=2, proj=True)
    # cross-attention and direct Q, K, V
    add("cross-3x7", n_q=3, n_kv=7, source="kv", d_model=4, d_kv_in=6, heads=2, proj=True,
        proj_bias=True, wo=True)
    add("cross-6x2", n_q=6, n_kv=2, source="kv", d_model=6, d_kv_in=3, heads=3, proj=True)
    add("cross-no-weights", n_q=2, n_kv=5, source="kv", d_model=4, heads=2)
    add("direct-h2-dv", n_q=4, n_kv=6, source="direct", heads=2, d_k=3, d_v=2)
    add("direct-wo", n_q=3, n_kv=3, source="direct", heads=2, d_k=2, wo=True, d_out=5)
    add("direct-gqa-wo-bo", n_q=5, n_kv=4, source="direct", heads=4, kv_heads=2, d_k=2,
        d_v=2, wo=True, wo_bias=True, causal="bottom-right")
    # scale modes
    add("scale-dk", n_q=4, d_model=6, heads=2, d_k=3, proj=True, scale="dk")
    add("scale-dmodel", n_q=4, d_model=6, heads=2, d_k=2, proj=True, scale="dmodel")
    add("scale-seqlen", n_q=3, n_kv=9, source="kv", d_model=4, heads=2, proj=True,
        scale="seqlen")
    add("scale-none", n_q=4, d_model=4, heads=2, proj=True, scale="none")
    add("scale-number", n_q=4, d_model=4, heads=2, proj=True, scale=0.37)
    add("scale-negative", n_q=4, d_model=4, heads=1, proj=True, scale=-0.5)
    add("scale-zero", n_q=4, d_model=4, heads=2, proj=True, scale=0.0, causal="")
    add("scale-dmodel-direct", n_q=3, n_kv=4, source="direct", heads=2, d_k=3,
        scale="dmodel")
    # softcap
    add("softcap", n_q=5, d_model=4, heads=2, proj=True, scale="none", softcap=1.5,
        x_sd=3.0, prints=[["softcapped"]])
    add("softcap-causal-mask", n_q=5, d_model=6, heads=3, proj=True, softcap=0.75,
        causal="", mask={"kind": "add"})
    # causal alignment
    add("causal-top-left-square", n_q=5, d_model=4, heads=2, proj=True, causal="top-left")
    add("causal-top-left-nq<nkv", n_q=3, n_kv=6, source="kv", d_model=4, heads=2,
        proj=True, causal="top-left")
    add("causal-top-left-nq>nkv", n_q=6, n_kv=3, source="kv", d_model=4, heads=2,
        proj=True, causal="")
    add("causal-bottom-right-nq<nkv", n_q=2, n_kv=7, source="kv", d_model=4, heads=2,
        proj=True, causal="bottom-right")
    add("causal-bottom-right-nq>nkv", n_q=6, n_kv=3, source="kv", d_model=4, heads=2,
        proj=True, wo=True, wo_bias=True, causal="bottom-right")
    add("causal-bottom-right-n_q1", n_q=1, n_kv=5, source="kv", d_model=4, heads=2,
        proj=True, causal="bottom-right")
    # masks
    add("mask-bool", n_q=5, d_model=4, heads=2, proj=True, mask={"kind": "bool"})
    add("mask-bool-blocked-rows", n_q=5, d_model=4, heads=2, proj=True, wo=True,
        wo_bias=True, mask={"kind": "bool", "block_rows": [1, 3]})
    add("mask-bool-per-head", n_q=4, n_kv=6, source="kv", d_model=6, heads=3, proj=True,
        mask={"kind": "bool", "per_head": True, "block_rows": [2]}, mask_bare=True)
    add("mask-additive", n_q=5, d_model=4, heads=2, proj=True, mask={"kind": "add"},
        mask_bare=True)
    add("mask-additive-per-head", n_q=5, d_model=8, heads=4, proj=True,
        mask={"kind": "add", "per_head": True, "block_rows": [0, 4]})
    add("mask-additive-causal", n_q=6, d_model=4, heads=2, proj=True, causal="",
        mask={"kind": "add"}, prints=[["mask", "masked"]])
    add("mask-bool-per-head-gqa-br", n_q=4, n_kv=7, source="kv", d_model=8, heads=4,
        kv_heads=2, proj=True, causal="bottom-right",
        mask={"kind": "bool", "per_head": True})
    add("mask-all-blocked", n_q=3, d_model=4, heads=2, proj=True, wo=True, wo_bias=True,
        mask={"kind": "bool", "all_blocked": True})
    add("mask-additive-all-blocked-h1", n_q=3, d_model=2, heads=1,
        mask={"kind": "add", "all_blocked": True})
    add("mask-direct-per-head", n_q=3, n_kv=5, source="direct", heads=2, d_k=2,
        mask={"kind": "add", "per_head": True, "block_rows": [1]}, causal="top-left")
    # bigger, and harder numbers
    add("large-64x32-h4", n_q=64, d_model=32, heads=4, proj=True, proj_bias=True, wo=True,
        wo_bias=True, causal="", prints=[["text17"]])
    add("large-gqa-cross", n_q=48, n_kv=64, source="kv", d_model=32, d_kv_in=24, heads=4,
        kv_heads=2, proj=True, wo=True, mask={"kind": "add"}, scale="dmodel")
    add("large-scores-stable-softmax", n_q=6, d_model=4, heads=1, scale="none",
        integers=True)   # exact integer scores up to 1600: exp() would overflow
    add("round-trip", d_model=4, heads=2, scale="none", x=np.array([
        [-0.0, 5e-324, 0.30000000000000004, 1 / 3],
        [1e-300, 123456.78901234567, 2.2250738585072014e-308, -2 / 3],
        [0.1, -1e-5, 1e5 / 7, 3 * 2.0 ** -1074],
        [-123.456, 0.9999999999999999, -1e-320, 1e-7]]), prints=[["x"]])
    add("round-trip-random-17-digits", n_q=7, d_model=5, heads=1, x_sd=1e-3,
        prints=[["x"]])
    # ALiBi, BLOOM style: Press et al.'s slopes for 8, 6, 12 and 3 heads (the
    # rule for H not a power of two), given ones; the fast path by "output"
    add("alibi-press-h8-causal", n_q=7, d_model=8, heads=8, proj=True, wo=True, causal="",
        alibi="press", prints=[["output"]])
    add("alibi-press-h6-gqa-cross-br", n_q=4, n_kv=7, source="kv", d_model=12, d_kv_in=5,
        heads=6, kv_heads=3, proj=True, causal="bottom-right", alibi="press",
        prints=[["file"]])
    add("alibi-press-h12-no-weights", n_q=5, d_model=12, heads=12, causal="", alibi="press",
        prints=[["text17"]])
    add("alibi-press-h3-direct", n_q=3, n_kv=5, source="direct", heads=3, d_k=2,
        alibi="press", prints=[["output"]])
    add("alibi-given-mask-softcap-sinks", n_q=6, d_model=4, heads=2, proj=True, softcap=3.0,
        sinks=True, mask={"kind": "add", "block_rows": [2]}, alibi="given",
        prints=[["mask", "masked"]])
    add("alibi-given-mqa-cross", n_q=5, n_kv=8, source="kv", d_model=8, d_kv_in=3, heads=4,
        kv_heads=1, proj=True, wo=True, alibi="given", prints=[["output"]])
    return c


# ---- batches ---------------------------------------------------------------


def batch_cases(binary, rng):
    """3-D inputs and a 4-D, 3-D or 1-D mask through the command line, against
    batch_reference: the numbers, each step (B, ...) in the JSON output."""

    def case(name, B, H, G, n_q, n_kv, d, causal=None, kv_lens=None, mask_shape=None,
             bool_mask=False, cross=False, kv_2d=False, window=None, npy=False, alibi=False,
             rope=None):
        def check():
            x = rng.standard_normal((B, n_q, d))
            kv = rng.standard_normal((n_kv, d) if kv_2d else (B, n_kv, d)) if cross else x
            d_k = 2
            w = {"W_Q": rng.standard_normal((d, H * d_k)), "W_K": rng.standard_normal((d, G * d_k)),
                 "W_V": rng.standard_normal((d, G * 3)), "W_O": rng.standard_normal((H * 3, 5))}
            mask = None
            if mask_shape is not None:
                if bool_mask:
                    mask = rng.random(mask_shape) > 0.3
                else:
                    mask = np.where(rng.random(mask_shape) > 0.25,
                                    rng.standard_normal(mask_shape), -np.inf)
            with tempfile.TemporaryDirectory() as tmp:
                def put(fname, a):
                    path = os.path.join(tmp, fname)
                    if npy and fname.endswith(".npy"):
                        np.save(path, a)
                    else:
                        with open(path, "w") as f:
                            f.write(dump_json(a))
                    return path
                args = ["-x", put("x.npy" if npy else "x.json", x), "-w", put("w.json", w),
                        "--heads", str(H), "--kv-heads", str(G)]
                if cross:
                    args += ["--kv", put("kv.json", kv)]
                if causal:
                    args += ["--causal=" + causal]
                if kv_lens is not None:
                    args += ["--kv-len", ",".join(map(str, kv_lens))]
                if window is not None:
                    args += ["--window", "%d,%d" % window]
                if alibi:
                    args += ["--alibi"]
                if rope is not None:
                    args += ["--rope", rope]
                if mask is not None:
                    args += ["--mask", put("mask.json", mask)]
                doc = parse_json(run(binary, args + ["-p", "mask,softmax,output", "-f", "json"]))
                fast = parse_json(run(binary, args + ["-f", "json"]))
            kvb = np.broadcast_to(kv, (B, n_kv, d))
            ref = batch_reference(x, kvb, kvb, w, H, G, causal, kv_lens, mask, window,
                                  press_slopes(H) if alibi else None,
                                  {"mode": rope} if rope else None)
            if doc["meta"]["batch"] != B:
                raise Mismatch("meta batch %r, expected %d" % (doc["meta"]["batch"], B))
            worst = compare("output", to_array(doc["output"], "output"), ref["output"])
            worst = max(worst, compare("output (fast path)", to_array(fast["output"], "output"),
                                       ref["output"]))
            got_mask = to_array(doc["mask"], "mask")
            # the mask step: per head (B, H, ...) when the mask file is, else (B, n_q, n_kv)
            want_mask = ref["mask"] if got_mask.ndim == 4 else ref["mask"][:, 0]
            worst = max(worst, compare("mask", got_mask, want_mask))
            for h in range(H):
                worst = max(worst, compare("heads[%d].softmax" % h,
                                           to_array(doc["heads"][h]["softmax"], "softmax"),
                                           ref["softmax"][:, h]))
            return worst
        return "batch-" + name, check

    return [
        case("kv-lens-bottom-right", 3, 2, 1, 4, 4, 4, causal="bottom-right",
             kv_lens=[4, 2, 3], mask_shape=(3, 1, 4, 4)),
        case("mask-4d-per-head", 2, 2, 2, 3, 5, 4, cross=True, mask_shape=(2, 2, 3, 5),
             bool_mask=True),
        case("mask-3d-rows", 2, 2, 2, 3, 5, 4, cross=True, mask_shape=(2, 1, 5)),
        case("mask-1d-shared-kv", 3, 2, 1, 3, 4, 4, cross=True, kv_2d=True, mask_shape=(4,)),
        case("window-npy", 2, 3, 3, 5, 5, 3, causal="top-left", window=(1, 0), npy=True),
        case("one-sequence", 1, 1, 1, 3, 3, 2, causal="top-left", kv_lens=[2]),
        case("alibi-rope-kv-lens", 3, 2, 1, 3, 5, 4, causal="bottom-right", kv_lens=[5, 2, 4],
             cross=True, alibi=True, rope="half"),
        case("rope-interleaved-window", 2, 2, 2, 4, 4, 4, causal="bottom-right", kv_lens=[4, 3],
             window=(1, 0), rope="interleaved"),
    ]


# ---- main ----------------------------------------------------------------


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: numpy_check.py MHA_BINARY\n")
        return 2
    binary = os.path.abspath(argv[1])
    if not os.access(binary, os.X_OK):
        sys.stderr.write("numpy_check.py: '%s': not an executable\n" % argv[1])
        return 2
    rng = np.random.default_rng(SEED)
    passed = failed = 0
    worst_all = 0.0

    def report(name, fn, torch_case=False):
        nonlocal passed, failed, worst_all
        try:
            worst = fn()
        except Mismatch as e:
            failed += 1
            print("FAIL %s: %s" % (name, e))
        except Exception as e:  # torch's API, not mha: say so, but do not crash
            if not torch_case:
                raise
            failed += 1
            print("FAIL %s: torch raised %s: %s" % (name, type(e).__name__, e))
        else:
            passed += 1
            worst_all = max(worst_all, worst)
            print("ok %s (max rel diff %.2g)" % (name, worst))
        sys.stdout.flush()

    for case in cases():
        report(case.name, lambda: run_case(binary, case, rng))
    for name, fn in batch_cases(binary, rng):
        report(name, fn)
    for name, fn in torch_mask_cases(binary, rng):
        report(name, fn)

    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch cases skipped: torch is not importable")
    else:
        version = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
        # scaled_dot_product_attention takes scale= from 2.1 on; the
        # nn.MultiheadAttention cases need average_attn_weights (1.11)
        sdpa = version >= (2, 1) and hasattr(F, "scaled_dot_product_attention")
        if not sdpa:
            print("torch %s: scaled_dot_product_attention cases skipped (need 2.1)"
                  % torch.__version__)
        for name, fn in torch_cases(binary, rng):
            if name.startswith("torch-sdpa") and not sdpa:
                continue
            if version < (1, 11):
                print("%s skipped: torch %s is older than 1.11" % (name, torch.__version__))
                continue
            report(name, fn, torch_case=True)

    print("max rel diff over all cases: %.2g (tolerance %g)" % (worst_all, RTOL))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""compare_check.py: 'mha compare' against a battery of deliberately wrong
attention implementations, written here in NumPy, one per mistake the
issue lists, and right ones in float64 and float32.

usage: compare_check.py [--small] MHA_BINARY   (--small: without n = 300 and torch)

Each implementation computes every step of mha's JSON schema its own way
(Q, K, V, q_rot, k_rot, heads[h].Q/K/V/scores/scaled/masked/softmax/output,
mask, concat, output), in plain NumPy written from the formulas, not from
mha's code; one of them carries the mistake.  Its steps go to 'mha compare
--against' as a JSON file, as a directory of .npy files named as 'mha
forward -o DIR/' names them, as a .npz archive (np.savez, members named as
'-o run.npz' names them), and as the output alone; each run must:

  - exit 0 for the right implementations (float32 with --dtype f32), 1 for
    a wrong one;
  - report as first_difference the first step, in the order of the
    computation, at which the mistake shows (every step given), or output
    (the output alone);
  - name the mistake in its diagnosis ("scale-dmodel", "weight-transposed",
    ...).

Small cases (n = 4 or 5, 2 heads) and a larger one (n = 300, 8 query heads,
2 key/value heads: grouped-query) through .npy directories.  Where torch
imports, a real nn.MultiheadAttention in float64 is compared through its
state_dict (--layout torch) and its per-head weights.  Then errors: exit 2
and one line naming the file.

Prints one line per case and "N passed, N failed"; exit status 1 on a failure.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
MHA = ARGS[0] if ARGS else "./mha"
# --small: the small cases alone (make check-asan: the sanitizers' slow runs)
SMALL = "--small" in sys.argv[1:]
TMP = tempfile.mkdtemp(prefix="mha-compare-")
passed = failed = 0


def ok(name, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok    %s" % name)
    else:
        failed += 1
        print("FAIL  %s %s" % (name, detail))


# ---- one attention, with a mistake --------------------------------------------

def rope(x, heads, dk, pos, mode, theta=10000.0):
    """each head's block of x turned by position: half pairs (i, i+R/2), interleaved (2i, 2i+1)"""
    out = x.copy()
    half = dk // 2
    ang = pos[:, None] * theta ** (-2.0 * np.arange(half) / dk)[None, :]
    c, s = np.cos(ang).astype(x.dtype), np.sin(ang).astype(x.dtype)
    for h in range(heads):
        b = x[:, h * dk:(h + 1) * dk]
        if mode == "half":
            x1, x2 = b[:, :half], b[:, half:]
            out[:, h * dk:h * dk + half] = x1 * c - x2 * s
            out[:, h * dk + half:(h + 1) * dk] = x1 * s + x2 * c
        else:
            x1, x2 = b[:, 0::2], b[:, 1::2]
            out[:, h * dk + 0:(h + 1) * dk:2] = x1 * c - x2 * s
            out[:, h * dk + 1:(h + 1) * dk:2] = x1 * s + x2 * c
    return out


def attention(p, mistake=None, dtype=np.float64):
    """Every step of mha's schema for problem p, computed with one mistake."""
    t = lambda a: None if a is None else np.asarray(a, dtype=dtype)
    X, Xkv = t(p["X"]), t(p.get("kv", p["X"]))
    H, G = p["heads"], p["kv_heads"]
    W = {k: t(p["w"].get(k)) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}
    if mistake == "weight-transposed":
        W[p.get("which", "W_Q")] = W[p.get("which", "W_Q")].T
    if mistake == "bias-missing":
        W[p.get("which", "b_Q")] = None
    nq, nkv, dm = X.shape[0], Xkv.shape[0], X.shape[1]
    Q = X @ W["W_Q"] + (W["b_Q"] if W["b_Q"] is not None else 0)
    K = Xkv @ W["W_K"] + (W["b_K"] if W["b_K"] is not None else 0)
    V = Xkv @ W["W_V"] + (W["b_V"] if W["b_V"] is not None else 0)
    dk, dv = Q.shape[1] // H, V.shape[1] // G
    steps = {"Q": Q, "K": K, "V": V}
    # the causal rule: query i sees keys j <= i + off
    causal = p.get("causal")
    if mistake == "causal-alignment":
        causal = {"top-left": "bottom-right", "bottom-right": "top-left"}[causal]
    off = 0 if causal in (None, "top-left") else nkv - nq
    qpos, kpos = np.arange(nq) + off, np.arange(nkv)
    if p.get("rope"):
        mode = p["rope"]
        if mistake == "rope-pairs":
            mode = {"half": "interleaved", "interleaved": "half"}[mode]
        Q = rope(Q, H, dk, qpos.astype(float), mode)
        K = rope(K, G, dk, kpos.astype(float), mode)
        steps["q_rot"], steps["k_rot"] = Q, K
    allow = np.ones((nq, nkv), bool)
    if causal and mistake != "causal-missing":
        allow &= np.arange(nkv)[None, :] <= np.arange(nq)[:, None] + off
    if causal and mistake == "causal-inverted":
        allow = ~allow
    if p.get("kv_len") and mistake != "padding-missing":
        allow[:, p["kv_len"]:] = False
    if "mask" in p and mistake != "mask-missing":
        m = np.asarray(p["mask"], bool)
        allow &= ~m if mistake == "mask-inverted" else m
    mask = np.where(allow, 0.0, -np.inf).astype(dtype)
    rule = mistake[6:] if mistake and mistake.startswith("scale-") else p.get("scale", "dk")
    scale = {"dk": dk, "dmodel": dm, "seqlen": nkv, "none": 1.0}[rule] ** -0.5
    heads, outs = [], []
    for h in range(H):
        g = h // (H // G)
        if mistake == "heads-interleaved":
            qh, kh, vh = Q[:, h::H], K[:, g::G], V[:, g::G]
        else:
            qh, kh = Q[:, h * dk:(h + 1) * dk], K[:, g * dk:(g + 1) * dk]
            vh = V[:, g * dv:(g + 1) * dv]
        s = kh @ qh.T if mistake == "scores-transposed" else qh @ kh.T
        sc = (s * dtype(scale)).astype(dtype)
        mk = sc + mask
        axis = 0 if mistake == "softmax-over-queries" else 1
        mx = np.max(mk, axis=axis, keepdims=True)
        mx = np.where(np.isfinite(mx), mx, 0)
        e = np.exp(mk - mx)
        den = e.sum(axis=axis, keepdims=True)
        sm = np.where(den > 0, e / np.where(den > 0, den, 1), 0).astype(dtype)
        o = sm @ vh
        heads.append({"Q": qh, "K": kh, "V": vh, "scores": s, "scaled": sc, "masked": mk,
                      "softmax": sm, "output": o})
        outs.append(o)
    if mistake == "heads-interleaved":
        concat = np.zeros((nq, H * dv), dtype)
        for h in range(H):
            concat[:, h::H] = outs[h]
    else:
        concat = np.concatenate(outs, axis=1)
    out = concat @ W["W_O"] + (W["b_O"] if W["b_O"] is not None else 0) if W["W_O"] is not None else concat
    steps.update({"mask": mask, "heads": heads, "concat": concat, "output": out})
    return steps


# ---- their results, in each form mha reads -------------------------------------

def jsonable(a):
    a = np.asarray(a, np.float64)
    return [jsonable(r) for r in a] if a.ndim else ("-inf" if a == -np.inf else float(a))


def write_json(steps, path):
    doc = {k: jsonable(v) for k, v in steps.items() if k != "heads"}
    doc["heads"] = [{k: jsonable(v) for k, v in h.items()} for h in steps["heads"]]
    with open(path, "w") as f:
        json.dump(doc, f)


def write_dir(steps, path):
    os.makedirs(path, exist_ok=True)
    for k, v in steps.items():
        if k == "heads":
            for i, h in enumerate(v):
                for kk, vv in h.items():
                    np.save(os.path.join(path, "head%d_%s.npy" % (i + 1, kk)), np.asarray(vv, np.float64))
        else:
            np.save(os.path.join(path, k + ".npy"), np.asarray(v, np.float64))


def write_npz(steps, path):
    arrays = {k: np.asarray(v, np.float64) for k, v in steps.items() if k != "heads"}
    for kk in steps["heads"][0]:
        arrays["heads." + kk] = np.stack([np.asarray(h[kk], np.float64) for h in steps["heads"]])
    np.savez(path, **arrays)


def problem_files(p, d):
    os.makedirs(d, exist_ok=True)
    args = ["-x", os.path.join(d, "x.npy"), "-w", os.path.join(d, "w.json"),
            "--heads", str(p["heads"]), "--kv-heads", str(p["kv_heads"])]
    np.save(args[1], p["X"])
    with open(args[3], "w") as f:
        json.dump({k: np.asarray(v).tolist() for k, v in p["w"].items()}, f)
    if "kv" in p:
        np.save(os.path.join(d, "kv.npy"), p["kv"])
        args += ["--kv", os.path.join(d, "kv.npy")]
    if "mask" in p:
        with open(os.path.join(d, "mask.json"), "w") as f:
            json.dump({"mask": np.asarray(p["mask"], bool).tolist()}, f)
        args += ["--mask", os.path.join(d, "mask.json")]
    if p.get("causal"):
        args += ["--causal=" + p["causal"]]
    if p.get("rope"):
        args += ["--rope", p["rope"]]
    if p.get("kv_len"):
        args += ["--kv-len", str(p["kv_len"])]
    if p.get("scale"):
        args += ["--scale", p["scale"]]
    return args


def compare(args, against, extra=()):
    r = subprocess.run([MHA, "compare", "-f", "json", "--against", against] + args + list(extra),
                       capture_output=True, text=True)
    try:
        rep = json.loads(r.stdout) if r.stdout else None
    except ValueError:
        rep = None
    return r.returncode, rep, r.stderr


def check(name, args, steps, want_first, want_mistake, forms, extra=(), want_rc=None):
    rc_want = want_rc if want_rc is not None else (0 if want_first is None else 1)
    d = os.path.join(TMP, name.replace(" ", "_").replace("/", "_"))
    os.makedirs(d, exist_ok=True)
    for form in forms:
        if form == "json":
            path = os.path.join(d, "theirs.json")
            write_json(steps, path)
            first = want_first
        elif form == "dir":
            path = os.path.join(d, "theirs")
            write_dir(steps, path)
            first = want_first
        elif form == "npz":
            path = os.path.join(d, "theirs.npz")
            write_npz(steps, path)
            first = want_first
        else:  # the output alone, as .npy
            path = os.path.join(d, "output.npy")
            np.save(path, np.asarray(steps["output"], np.float64))
            first = None if want_first is None else "output"
        rc, rep, err = compare(args, path, extra)
        got_first = rep and rep["first_difference"]
        got_mistake = rep and rep["diagnosis"] and rep["diagnosis"]["mistake"]
        good = rc == rc_want and rep is not None and got_first == first and \
            (want_mistake is None or got_mistake == want_mistake)
        ok("%s (%s)" % (name, form), good,
           "exit %s (want %s), first %s (want %s), diagnosis %s (want %s) %s" %
           (rc, rc_want, got_first, first, got_mistake, want_mistake, err.strip()[:300]))
    shutil.rmtree(d, ignore_errors=True)


# ---- the battery ----------------------------------------------------------------

def small_problem(rng, nq=4, nkv=None, dm=4, heads=2, kv_heads=2, bias=True):
    p = {"X": rng.standard_normal((nq, dm)), "heads": heads, "kv_heads": kv_heads}
    dk = dm // heads
    p["w"] = {"W_Q": rng.standard_normal((dm, heads * dk)) / 2,
              "W_K": rng.standard_normal((dm, kv_heads * dk)) / 2,
              "W_V": rng.standard_normal((dm, kv_heads * dk)) / 2,
              "W_O": rng.standard_normal((heads * dk, dm)) / 2}
    if bias:
        p["w"].update({"b_Q": rng.standard_normal(heads * dk) / 4, "b_K": rng.standard_normal(kv_heads * dk) / 4,
                       "b_V": rng.standard_normal(kv_heads * dk) / 4, "b_O": rng.standard_normal(dm) / 4})
    if nkv:
        p["kv"] = rng.standard_normal((nkv, dm))
    return p


# (mistake, the problem's settings, the first step at which it shows)
CASES = [
    ("scale-dmodel", {}, "scaled"),
    ("scale-seqlen", {"n": 5}, "scaled"),
    ("scale-none", {}, "scaled"),
    ("scale-dk", {"scale": "dmodel"}, "scaled"),
    ("weight-transposed", {}, "Q"),
    ("weight-transposed", {"which": "W_K"}, "K"),
    ("weight-transposed", {"which": "W_V"}, "V"),
    ("weight-transposed", {"which": "W_O"}, "output"),
    ("scores-transposed", {}, "scores"),
    ("heads-interleaved", {}, "heads.Q"),
    ("mask-inverted", {"mask": True}, "mask"),
    ("causal-inverted", {"causal": "top-left"}, "mask"),
    ("causal-alignment", {"causal": "bottom-right", "nkv": 6}, "mask"),
    ("causal-alignment", {"causal": "top-left", "nkv": 6}, "mask"),
    ("mask-missing", {"mask": True}, "mask"),
    ("causal-missing", {"causal": "top-left"}, "mask"),
    ("softmax-over-queries", {"causal": "top-left"}, "softmax"),
    ("bias-missing", {}, "Q"),
    # q.b_K is the same for every key: the softmax and the output cannot show it
    ("bias-missing", {"which": "b_K", "output_same": True}, "K"),
    ("bias-missing", {"which": "b_V"}, "V"),
    ("bias-missing", {"which": "b_O"}, "output"),
    ("padding-missing", {"kv_len": 3}, "mask"),
    ("padding-missing", {"kv_len": 3, "causal": "bottom-right"}, "mask"),
    ("rope-pairs", {"rope": "half", "dm": 8}, "q_rot"),
    ("rope-pairs", {"rope": "interleaved", "causal": "top-left", "dm": 8}, "q_rot"),
]


def setup(rng, settings, large=False):
    if large:
        p = small_problem(rng, nq=300, dm=64, heads=8, kv_heads=2)
    else:
        n = settings.get("n", 4)
        p = small_problem(rng, nq=n, nkv=settings.get("nkv"), dm=settings.get("dm", 4))
    nq = p["X"].shape[0]
    nkv = p["kv"].shape[0] if "kv" in p else nq
    if settings.get("mask"):
        m = rng.random((nq, nkv)) < 0.6
        m[np.arange(nq), np.arange(nq) % nkv] = True
        m[:, 0] = True
        p["mask"] = m
    if settings.get("causal"):
        p["causal"] = settings["causal"]
    for k in ("rope", "which", "kv_len", "scale"):
        if settings.get(k):
            p[k] = settings[k]
    return p


def battery(forms):
    rng = np.random.default_rng(14)
    # the right ones: float64 agrees, float32 agrees under --dtype f32 and is
    # named as float32 rounding without it
    for settings in ({}, {"causal": "top-left", "rope": "half", "dm": 8}, {"mask": True}):
        p = setup(rng, settings)
        args = problem_files(p, os.path.join(TMP, "right%d" % len(settings)))
        check("right f64 %s" % sorted(settings), args, attention(p), None, None, forms)
        s32 = attention(p, dtype=np.float32)
        check("right f32 --dtype f32 %s" % sorted(settings), args, s32, None, None, forms, ["--dtype", "f32"])
        check("f32 without --dtype f32 %s" % sorted(settings), args, s32, "Q", "float32", forms)
    for i, (mistake, settings, first) in enumerate(CASES):
        p = setup(rng, settings)
        args = problem_files(p, os.path.join(TMP, "case%d" % i))
        name = "%s %s" % (mistake, sorted(settings.items()))
        if settings.get("output_same"):
            check(name, args, attention(p, mistake), first, mistake, [f for f in forms if f != "output"])
            check(name + " output alone agrees", args, attention(p, mistake), None, None, ["output"])
        else:
            check(name, args, attention(p, mistake), first, mistake, forms)
    # a mistake in float32 numbers: found under --dtype f32, and without it
    for mistake, settings, first in [("scale-none", {}, "scaled"), ("heads-interleaved", {}, "heads.Q"),
                                     ("mask-inverted", {"mask": True}, "mask")]:
        p = setup(rng, settings)
        args = problem_files(p, os.path.join(TMP, "f32case"))
        s32 = attention(p, mistake, dtype=np.float32)
        check("f32 %s --dtype f32" % mistake, args, s32, first, mistake, forms, ["--dtype", "f32"])
        check("f32 %s" % mistake, args, s32, "Q", mistake, ["json"])


def large(forms):  # noqa: C901
    """n = 300, 8 query heads, 2 key/value heads, through .npy directories"""
    rng = np.random.default_rng(300)
    for mistake, settings, first in [(None, {"causal": "top-left"}, None)] + \
            [c for c in CASES if "nkv" not in c[1] and c[0] != "scale-seqlen" and
             c[1].get("which") not in ("W_K", "W_V", "b_K")] + \
            [("scale-seqlen", {}, "scaled")]:
        p = setup(rng, settings, large=True)
        args = problem_files(p, os.path.join(TMP, "large"))
        # the output alone too, for a few: the diagnosis from the last step
        alone = ["output"] if mistake in ("heads-interleaved", "softmax-over-queries", "mask-inverted") else []
        check("n=300 H=8 G=2 %s %s" % (mistake or "right", sorted(settings.items())), args,
              attention(p, mistake), first, mistake, forms + alone)


def torch_case():
    try:
        import torch
    except ImportError:
        print("skip  nn.MultiheadAttention: torch does not import here")
        return
    torch.manual_seed(0)
    E, H, n = 8, 2, 5
    m = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
    x = torch.randn(1, n, E, dtype=torch.float64)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)  # True = blocked
    with torch.no_grad():
        out, w = m(x, x, x, attn_mask=causal, need_weights=True, average_attn_weights=False)
    d = os.path.join(TMP, "torch")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "x.npy"), x[0].numpy())
    with open(os.path.join(d, "sd.json"), "w") as f:
        json.dump({k: v.numpy().tolist() for k, v in m.state_dict().items()}, f)
    theirs = {"output": out[0].numpy().tolist(),
              "heads": [{"softmax": w[0, h].numpy().tolist()} for h in range(H)]}
    with open(os.path.join(d, "theirs.json"), "w") as f:
        json.dump(theirs, f)
    args = ["-x", os.path.join(d, "x.npy"), "-w", os.path.join(d, "sd.json"), "--layout", "torch",
            "--heads", str(H), "--causal"]
    rc, rep, err = compare(args, os.path.join(d, "theirs.json"))
    ok("torch nn.MultiheadAttention f64, causal", rc == 0 and rep and rep["agree"], err + str(rep)[:300])
    # the same module without its mask, against mha's causal run: the mask left out
    with torch.no_grad():
        out2, w2 = m(x, x, x, need_weights=True, average_attn_weights=False)
    theirs = {"output": out2[0].numpy().tolist(),
              "heads": [{"softmax": w2[0, h].numpy().tolist()} for h in range(H)]}
    with open(os.path.join(d, "nomask.json"), "w") as f:
        json.dump(theirs, f)
    rc, rep, err = compare(args, os.path.join(d, "nomask.json"))
    ok("torch nn.MultiheadAttention without attn_mask: causal-missing",
       rc == 1 and rep and rep["first_difference"] == "softmax" and rep["diagnosis"] and
       rep["diagnosis"]["mistake"] == "causal-missing", err + str(rep)[:300])
    # float32 module's numbers: agree under --dtype f32
    m32 = torch.nn.MultiheadAttention(E, H, batch_first=True)
    m32.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    with torch.no_grad():
        out3, _ = m32(x.float(), x.float(), x.float(), attn_mask=causal)
    np.save(os.path.join(d, "out32.npy"), out3[0].numpy())
    rc, rep, err = compare(args, os.path.join(d, "out32.npy"), ["--dtype", "f32"])
    ok("torch float32 module, --dtype f32", rc == 0 and rep and rep["agree"], err + str(rep)[:300])


def errors():
    d = os.path.join(TMP, "errors")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(1)
    p = small_problem(rng)
    args = problem_files(p, d)
    good = os.path.join(d, "good.json")
    write_json(attention(p), good)

    def bad(name, content, want, extra=(), path=None):
        if path is None:
            path = os.path.join(d, name + ".json")
            with open(path, "w") as f:
                f.write(content)
        r = subprocess.run([MHA, "compare", "--against", path] + args + list(extra),
                           capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        ok("error: " + name, r.returncode == 2 and r.stdout == "" and lines and want in lines[0],
           "exit %d, stderr %r" % (r.returncode, r.stderr))

    bad("unknown key", '{"score": [[1]]}', "'score' (scores?)")
    bad("unknown head key", '{"heads": [{"sofmax": [[1]]}, {}]}', "'heads[0].sofmax' (softmax?)")
    bad("heads count", '{"heads": [{"scores": [[1]]}, {}, {}]}', 'holds 3 objects, but the run has 2 heads')
    bad("a head twice", '{"heads": [{"scores": [[1, 2, 3, 4]]}, {}], "head1_scores": [[1, 2, 3, 4]]}',
        "head 1 of scores is given twice")
    bad("no step", '{"meta": {}}', "no step to compare")
    bad("syntax", '{"output": [[1, 2}', "good" and "syntax")
    bad("not a number", '{"output": [[1, "x"]]}', "output")
    bad("softcapped without --softcap", '{"heads": [{"softcapped": [[1]]}, {"softcapped": [[1]]}]}',
        "add --softcap")
    bad("missing file", None, "missing.json", path=os.path.join(d, "missing.json"))
    os.makedirs(os.path.join(d, "baddir"), exist_ok=True)
    np.save(os.path.join(d, "baddir", "head1_socres.npy"), np.zeros((4, 4)))
    bad("dir: not a step's name", None, "'head1_socres.npy' (scores?)", path=os.path.join(d, "baddir"))
    os.makedirs(os.path.join(d, "baddir2"), exist_ok=True)
    np.save(os.path.join(d, "baddir2", "head3_scores.npy"), np.zeros((4, 4)))
    bad("dir: head past --heads", None, "head 3, but the run has 2 heads", path=os.path.join(d, "baddir2"))
    r = subprocess.run([MHA, "compare"] + args, capture_output=True, text=True)
    ok("error: no --against", r.returncode == 2 and "no --against" in r.stderr, r.stderr)
    r = subprocess.run([MHA, "compare", "--against", good, "--rtol", "-1"] + args, capture_output=True, text=True)
    ok("error: --rtol -1", r.returncode == 2 and "--rtol" in r.stderr, r.stderr)
    r = subprocess.run([MHA, "compare", "--against", good, "-p", "all"] + args, capture_output=True, text=True)
    ok("error: --print", r.returncode == 2 and "--print is forward's" in r.stderr, r.stderr)
    r = subprocess.run([MHA, "compare", "--against", good, "-x", os.path.join(d, "nope.json")] + args[2:],
                       capture_output=True, text=True)
    ok("error: an unreadable input is 2", r.returncode == 2 and "nope.json" in r.stderr, r.stderr)
    # their control characters never reach the terminal
    bad("control characters", '{"\\u001b[31mQ": [[1]]}', "\\x1b[31mQ")
    bad("true and false but a mask", '{"output": [[true, false, true, false]]}', "only a mask may")
    # np.savez(f, out): one array as arr_0, the output
    np.savez(os.path.join(d, "one.npz"), attention(p)["output"])
    rc, rep, err = compare(args, os.path.join(d, "one.npz"))
    ok("a .npz of one array (arr_0) is the output", rc == 0 and rep and rep["kind"] == "matrix" and
       rep["steps"][0]["step"] == "output", err + str(rep)[:200])
    # a shape that differs is a difference (1), not an error
    with open(os.path.join(d, "shape.json"), "w") as f:
        json.dump({"output": np.zeros((4, 3)).tolist()}, f)
    rc, rep, err = compare(args, os.path.join(d, "shape.json"))
    ok("shape differs: exit 1, shape_agrees false", rc == 1 and rep and not rep["steps"][0]["shape_agrees"],
       err + str(rep))
    # NaN in theirs where mha has a number differs
    with open(os.path.join(d, "nan.json"), "w") as f:
        o = attention(p)["output"].tolist()
        o[1][2] = "nan"
        json.dump({"output": o}, f)
    rc, rep, err = compare(args, os.path.join(d, "nan.json"))
    ok("nan differs at its place", rc == 1 and rep and rep["steps"][0]["where"]["row"] == 2 and
       rep["steps"][0]["where"]["col"] == 3 and rep["steps"][0]["max_abs"] == "inf", err + str(rep))


def doc_tables():
    """the report's keys and the mistakes, as docs/finding-the-bug.md documents them"""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "finding-the-bug.md")
    with open(path) as f:
        lines = f.read().splitlines()
    tables = {}
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            head = line.split("|")[1].strip()
            keys = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                keys += [k.strip().strip("`") for k in row.split("|")[1].split(",")]
            tables[head] = keys
    return tables


def documented():
    """every key of a report as docs/finding-the-bug.md documents it, and every mistake named by the battery"""
    tables = doc_tables()
    d = os.path.join(TMP, "keys")
    rng = np.random.default_rng(7)
    p = setup(rng, {"causal": "top-left"})
    args = problem_files(p, d)
    write_json(attention(p, "scale-none"), os.path.join(d, "t.json"))
    rc, rep, err = compare(args, os.path.join(d, "t.json"), ["--tokens", "a b c d"])
    ok("report keys as docs/finding-the-bug.md documents them", rep is not None and list(rep) == tables["report key"],
       "%s vs %s" % (rep and list(rep), tables["report key"]))
    step_keys = sorted(tables["step key"])
    ok("step keys as documented", rep and all(sorted(st) == step_keys for st in rep["steps"]),
       str(rep and [sorted(st) for st in rep["steps"]][:1]))
    ok("where keys as documented", rep and sorted(rep["steps"][-1]["where"]) ==
       sorted(["head", "row", "col", "row_token", "col_token", "theirs", "mha"]), str(rep and rep["steps"][-1]))
    ok("diagnosis keys as documented", rep and rep["diagnosis"] and
       sorted(rep["diagnosis"]) == sorted(tables["diagnosis key"]), str(rep and rep["diagnosis"]))
    named = set(c[0] for c in CASES) | {"float32"}
    # the backward's, from softmax-backward-no-d on: tests/compare_grad_check.py's
    listed = tables["mistake"]
    forward_only = listed[:listed.index("softmax-backward-no-d")] if "softmax-backward-no-d" in listed else listed
    missing = [m for m in forward_only if m not in named]
    ok("every mistake docs/finding-the-bug.md lists has a wrong implementation here", not missing, str(missing))


def main():
    forms = ["json", "dir", "npz", "output"]
    battery(forms)
    if SMALL:
        print("skip  n = 300 and torch: --small")
    else:
        large(["dir"])
        torch_case()
    errors()
    documented()
    shutil.rmtree(TMP, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

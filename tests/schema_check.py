#!/usr/bin/env python3
"""schema_check.py MHA [DOC]: mha's machine output against the schema
docs/formats.md documents, so that the two cannot drift apart.

The schema is read from DOC's section "The JSON output" (DOC is
docs/formats.md unless given): its first
table (each key, its shape in meta's letters, the --print step that asks
for it and when --print all includes it) and its second (meta's keys and
the type of each).  Then mha runs over problems of every kind (one head,
no W_O, no weights, grouped-query, cross-attention, Q, K and V given
directly, causal, a per-head mask, softcap and kv_len, labels) and each
result must hold exactly the keys the tables say, with their shapes:

  --print all -f json    every key the run has, heads[h] for every head
  -p STEP -f json        that step's keys alone, for each step
  -o DIR/ in npy, json   one file per key (KEY, headN_KEY) and meta.json
  and csv                (a per-head mask in CSV: mask_headN.csv)
  -f csv                 one block per key, named as the files

meta must hold exactly its documented keys, of their types (and values
from the lists the table gives), with the shapes the run was given.

Prints one line per check and ends with 'N passed, N failed'.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

MHA = None


class Tally:
    """check(name, ok, detail): one 'ok' or 'FAIL' line, counted; returns ok."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        self.passed += bool(ok)
        self.failed += not ok
        print(("ok %s" if ok else "FAIL %s") % name + (": " + detail if detail and not ok else ""))
        return ok


check = Tally()


# ---- the schema, from docs/formats.md -----------------------------------

def table_rows(lines, header):
    """The cells of the Markdown table whose header row starts with header."""
    for i, line in enumerate(lines):
        if line.startswith(header):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split(" | ")])
            return rows
    raise SystemExit("schema_check: the documentation has no table starting %r" % header)


def ticked(cell):
    """The `code` spans of a cell."""
    return re.findall(r"`([^`]*)`", cell)


def read_schema(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## The JSON output\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        raise SystemExit("schema_check: %s has no section 'The JSON output'" % path)
    lines = m.group(1).splitlines()
    keys = []
    for key, shape, step, when in table_rows(lines, "| key | shape |"):
        name = ticked(key)[0]
        steps = ticked(step)
        keys.append({"key": name, "shape": shape, "when": when,
                     "step": steps[0] if steps and not name == "heads" else None})
    meta = []
    for key, value in table_rows(lines, "| meta key | value |"):
        kind, _, words = value.partition(": ")
        for name in ticked(key):
            meta.append({"key": name, "type": kind, "values": re.findall(r'`"([^"`]*)"`', words),
                         "fields": [w for w in ticked(words) if re.fullmatch(r"[a-z_]+", w)]})
    return keys, meta


# ---- what a run should hold ---------------------------------------------

class Run:
    """One problem: mha's options, and what meta must then say."""

    def __init__(self, name, args, dims, masked=False, softcap=False, direct=False,
                 tokens=False, kv_tokens=False, per_head_mask=False, rope=False, norm=False,
                 mla=None):
        self.name, self.args, self.dims = name, args, dims
        self.rope, self.norm = rope, norm
        # multi-head latent attention: {"q": q_a_proj given, "rope": turned, "absorb": …}
        self.mla = mla
        self.masked, self.softcap, self.direct = masked, softcap, direct
        self.tokens, self.kv_tokens, self.per_head_mask = tokens, kv_tokens, per_head_mask


def holds(run, when):
    """Whether the documentation's 'in --print all' condition holds for run."""
    conditions = {
        "always": True,
        "with `--tokens`": run.tokens,
        "with `--kv-tokens`": run.kv_tokens,
        "without `--q/--k/--v`": not run.direct,
        "with a mask": run.masked,
        "with `--softcap`": run.softcap,
        "with `--rope`": run.rope,
        "with a q/k norm": run.norm,
        "with `--rope`, not MLA": run.rope and not run.mla,
        "with MLA": bool(run.mla),
        "with MLA's `--q-a-proj`": bool(run.mla and run.mla["q"]),
        "with MLA and `--rope`": bool(run.mla and run.mla["rope"]),
        "with MLA, not `--absorb`": bool(run.mla and not run.mla["absorb"]),
    }
    if when not in conditions:
        raise SystemExit("schema_check: docs: unknown condition %r" % when)
    return conditions[when]


def expected(schema, run, step):
    """{key: row} the output must hold: for --print all (step None) or one step."""
    want = {}
    for row in schema:
        if row["key"] == "heads":
            continue
        if step is None:
            there = holds(run, row["when"])
        elif row["step"] != step:
            there = row["key"] == "meta" or (row["key"] in ("tokens", "kv_tokens")
                                             and holds(run, row["when"]))
        else:
            # named on its own a step is written, but X needs an X
            there = row["when"] != "without `--q/--k/--v`" or not run.direct
        if there:
            want[row["key"]] = row
    return want


def letters(dims):
    """The documentation's letters for shapes, which are meta's keys: H is heads, G kv_heads."""
    return {"n_q": dims["n_q"], "n_kv": dims["n_kv"], "d_model": dims["d_model"],
            "H": dims["heads"], "G": dims["kv_heads"], "d_k": dims["d_k"],
            "d_v": dims["d_v"], "d_out": dims["d_out"],
            "q_lora_rank": dims.get("q_lora_rank", 0), "kv_lora_rank": dims.get("kv_lora_rank", 0),
            "qk_nope_head_dim": dims.get("dn", 0), "qk_rope_head_dim": dims.get("dr", 0)}


def shapes(text, dims):
    """The documentation's shape ("n_q × H·d_k", "... or ...") as a list of tuples."""
    env = letters(dims)
    out = []
    for alt in text.split(" or "):
        dims = []
        for d in alt.split(" × "):
            v = 1
            for sym in d.split("·"):
                if sym not in env:
                    raise SystemExit("schema_check: docs: unknown dimension %r" % sym)
                v *= env[sym]
            dims.append(v)
        out.append(tuple(dims))
    return out


def shape_of(v):
    dims = []
    while isinstance(v, list):
        dims.append(len(v))
        v = v[0] if v else None
    return tuple(dims)


def check_value(row, v, dims):
    """v (or its shape) against the row's shape for a run of these dims
    (what the run was given, not what meta says): '' if fine, else why not."""
    shape = row["shape"]
    m = re.fullmatch(r"(n_q|n_kv) strings", shape)
    if m:
        n = dims[m.group(1)]
        ok = isinstance(v, list) and len(v) == n and all(isinstance(s, str) for s in v)
        return "" if ok else "not %d strings" % n
    if shape == "object":
        return "" if isinstance(v, dict) else "not an object"
    if dims.get("absorbed"):
        # --absorb: Q, K, V and the heads' are the latent ones (docs/formats.md says so)
        dims = dict(dims, d_k=dims["kv_lora_rank"] + dims["dr"], d_v=dims["kv_lora_rank"],
                    kv_heads=1)
    want = shapes(shape, dims)
    if dims.get("batch"):
        # a batch: every matrix gains a leading dimension of B
        want = [(dims["batch"],) + w for w in want]
    got = v if isinstance(v, tuple) else shape_of(v)
    return "" if got in want else "shape %s, documented %s" % (got, " or ".join(map(str, want)))


def check_meta(where, meta_schema, meta, run):
    problems = []
    if not isinstance(meta, dict):
        return check(where + ": meta", False, "no meta object")
    names = [r["key"] for r in meta_schema]
    if list(meta) != names:
        problems.append("keys %s, documented %s" % (list(meta), names))
    types = {"string": lambda v: isinstance(v, str),
             "strings": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
             "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
             "integer or null": lambda v: v is None or (isinstance(v, int)
                                                        and not isinstance(v, bool)),
             "number or null": lambda v: v is None or (isinstance(v, (int, float))
                                                       and not isinstance(v, bool)),
             "string or null": lambda v: v is None or isinstance(v, str),
             "integer, integers or null": lambda v: v is None or (
                 isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, list) and all(
                 isinstance(i, int) and not isinstance(i, bool) for i in v)),
             "integers or null": lambda v: v is None or (isinstance(v, list) and all(
                 isinstance(i, int) and not isinstance(i, bool) for i in v)),
             "numbers or null": lambda v: v is None or (isinstance(v, list) and all(
                 isinstance(i, (int, float)) and not isinstance(i, bool) for i in v)),
             "object": lambda v: isinstance(v, dict),
             "object or null": lambda v: v is None or isinstance(v, dict)}
    for r in meta_schema:
        v = meta.get(r["key"])
        if r["type"] not in types:
            raise SystemExit("schema_check: docs: unknown meta type %r" % r["type"])
        if not types[r["type"]](v):
            problems.append("%s = %r is not %s" % (r["key"], v, r["type"]))
        elif r["type"].startswith("object") and v is not None and sorted(v) != sorted(r["fields"]):
            problems.append("%s has %s, documented %s" % (r["key"], sorted(v), r["fields"]))
        elif r["type"] in ("string", "strings") and r["values"]:
            for s in ([v] if r["type"] == "string" else v):
                if s not in r["values"]:
                    problems.append("%s: %r is none of %s" % (r["key"], s, r["values"]))
        elif r["type"].startswith("object") and v is not None and r["values"]:
            if not any(isinstance(x, str) and x in r["values"] for x in v.values()):
                problems.append("%s: %r names none of %s" % (r["key"], v, r["values"]))
    # the latent attention's dims are meta.mla's, under its names
    names = {"q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
             "dn": "qk_nope_head_dim", "dr": "qk_rope_head_dim"}
    for k, want in run.dims.items():
        if k == "absorbed":
            continue
        got = (meta.get("mla") or {}).get(names[k]) if k in names else meta.get(k)
        if got != want:
            problems.append("%s = %r, the run's is %r" % (k, got, want))
    return check(where + ": meta", not problems, "; ".join(problems))


# ---- running mha ---------------------------------------------------------

def mha(args, cwd):
    return subprocess.run([MHA, "forward"] + args, cwd=cwd, capture_output=True)


def flat_keys(doc):
    """{key: value} of the top level, heads aside."""
    return {k: v for k, v in doc.items() if k != "heads"}


def check_json(where, schema, meta_schema, run, doc, step):
    want = expected(schema, run, step)
    H = run.dims["heads"]
    problems = []
    check_meta(where, meta_schema, doc.get("meta"), run)
    whole = {k: r for k, r in want.items() if not k.startswith("heads[h].")}
    per_head = {k[len("heads[h]."):]: r for k, r in want.items() if k.startswith("heads[h].")}
    got = flat_keys(doc)
    if sorted(got) != sorted(whole):
        problems.append("keys %s, documented %s" % (sorted(got), sorted(whole)))
    for k, r in whole.items():
        if k in got:
            bad = check_value(r, got[k], run.dims)
            if bad:
                problems.append("%s: %s" % (k, bad))
    heads = doc.get("heads")
    if per_head and (not isinstance(heads, list) or len(heads) != H):
        problems.append("heads: %r, documented %d objects" % (type(heads).__name__, H))
    elif not per_head and heads is not None:
        problems.append("heads present with no per-head step")
    for h, hd in enumerate(heads or []):
        if sorted(hd) != sorted(per_head):
            problems.append("heads[%d]: keys %s, documented %s" % (h, sorted(hd), sorted(per_head)))
        for k, r in per_head.items():
            if k in hd:
                bad = check_value(r, hd[k], run.dims)
                if bad:
                    problems.append("heads[%d].%s: %s" % (h, k, bad))
    return check(where, not problems, "; ".join(problems))


def files_for(want, run, ext):
    """{file name: documented key} -o DIR/ writes for the keys in want."""
    out = {"meta.json": "meta"}
    for k in want:
        if k in ("meta", "tokens", "kv_tokens"):
            continue
        if k.startswith("heads[h]."):
            for h in range(run.dims["heads"]):
                out["head%d_%s.%s" % (h + 1, k[len("heads[h]."):], ext)] = k
        elif k == "mask" and ext == "csv" and run.per_head_mask:
            for h in range(run.dims["heads"]):
                out["mask_head%d.csv" % (h + 1)] = k
        else:
            out["%s.%s" % (k, ext)] = k
    return out


def load_file(path, ext):
    if ext == "npy":
        return np.load(path).shape
    if ext == "json":
        with open(path) as f:
            return shape_of(json.load(f))
    with open(path) as f:
        rows = [r for r in f.read().splitlines() if r]
    return (len(rows), len(rows[0].split(",")))


def check_dir(where, schema, meta_schema, run, meta, ext, tmp):
    want = expected(schema, run, None)
    out = os.path.join(tmp, "out-%s-%s/" % (run.name, ext))
    r = mha(run.args + ["-p", "all", "-f", ext, "-o", out], tmp)
    if not check(where + ": exit 0", r.returncode == 0, r.stderr.decode().strip()):
        return
    names = files_for(want, run, ext)
    got = sorted(os.listdir(out))
    problems = []
    if got != sorted(names):
        problems.append("files %s, documented %s" % (got, sorted(names)))
    for name in set(got) & set(names):
        if name == "meta.json":
            with open(os.path.join(out, name)) as f:
                if json.load(f) != meta:
                    problems.append("meta.json is not the JSON output's meta")
            continue
        row = next(r for r in schema if r["key"] == names[name])
        shape = load_file(os.path.join(out, name), ext)
        if ext == "csv" and run.dims.get("batch"):
            # CSV holds 2-D: a batch's sequences one after another
            shape = (run.dims["batch"], shape[0] // run.dims["batch"]) + shape[1:]
        if ext == "csv" and row["key"] == "mask" and run.per_head_mask:
            shape = (run.dims["heads"],) + shape
        bad = check_value(row, shape, run.dims)
        if bad:
            problems.append("%s: %s" % (name, bad))
    check(where, not problems, "; ".join(problems))


def check_csv(where, schema, run, meta, tmp):
    """The CSV stream's blocks: named as the files, with the shapes."""
    want = expected(schema, run, None)
    r = mha(run.args + ["-p", "all", "-f", "csv"], tmp)
    if not check(where + ": exit 0", r.returncode == 0, r.stderr.decode().strip()):
        return
    blocks = {}
    for line in r.stdout.decode().splitlines():
        m = re.fullmatch(r"# ([A-Za-z0-9_]+)(?::.*)? \(([0-9x]+)\)", line)
        if re.fullmatch(r"# sequence [0-9]+ of [0-9]+", line) and run.dims.get("batch"):
            continue
        if line.startswith("# ") and not m:
            return check(where, False, "a title line that does not parse: %r" % line)
        if m:
            blocks[m.group(1)] = tuple(int(n) for n in m.group(2).split("x"))
    names = {n[:-len(".csv")]: k for n, k in files_for(want, run, "csv").items()
             if n != "meta.json" and not n.startswith("mask_head")}
    if run.per_head_mask and "mask" in want:
        names["mask"] = "mask"
    problems = []
    if sorted(blocks) != sorted(names):
        problems.append("blocks %s, documented %s" % (sorted(blocks), sorted(names)))
    # a batch: each sequence's blocks under a "# sequence 2 of 3" line, each 2-D
    dims = dict(run.dims, batch=None)
    for name in set(blocks) & set(names):
        row = next(r for r in schema if r["key"] == names[name])
        bad = check_value(row, blocks[name], dims)
        if bad:
            problems.append("%s: %s" % (name, bad))
    check(where, not problems, "; ".join(problems))


# ---- the problems ---------------------------------------------------------

TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "tiny-llama")

def write(tmp, name, value):
    with open(os.path.join(tmp, name), "w") as f:
        json.dump(value, f)


def problems(tmp):
    rng = np.random.default_rng(11)

    def m(r, c):
        return rng.integers(-3, 4, size=(r, c)).astype(float).tolist()
    # n_q 3, n_kv 4 (cross), d_model 4; d_k 2 and d_v 3 per head, d_out 5:
    # every letter a different number, so no shape passes by chance
    write(tmp, "x.json", m(3, 4))
    write(tmp, "kv.json", m(4, 3))
    write(tmp, "w1.json", {"W_Q": m(4, 2), "W_K": m(4, 2), "W_V": m(4, 3), "W_O": m(3, 5),
                           "b_O": [1, 2, 3, 4, 5]})
    write(tmp, "w1-no-wo.json", {"W_Q": m(4, 2), "W_K": m(4, 2), "W_V": m(4, 3)})
    write(tmp, "w2.json", {"W_Q": m(4, 4), "W_K": m(4, 4), "W_V": m(4, 6), "W_O": m(6, 5),
                           "b_Q": [0, 1, 0, 1]})
    write(tmp, "w2-no-wo.json", {"W_Q": m(4, 4), "W_K": m(4, 4), "W_V": m(4, 6)})
    write(tmp, "w-gqa.json", {"W_Q": m(4, 4), "W_K": m(4, 2), "W_V": m(4, 3), "W_O": m(6, 5)})
    write(tmp, "w-cross.json", {"W_Q": m(4, 4), "W_K": m(3, 4), "W_V": m(3, 6)})
    write(tmp, "q.json", m(3, 4))
    write(tmp, "k.json", m(4, 4))
    write(tmp, "v.json", m(4, 6))
    write(tmp, "wo.json", m(6, 5))
    write(tmp, "slopes.json", [0.5, -0.25])
    write(tmp, "qn.json", [1.5, 0.5])
    write(tmp, "mask-heads.json", [[[True, False, True], [True, True, False], [True, True, True]],
                                   [[True, True, True], [False, True, True], [True, False, True]]])

    def dims(n_q=3, n_kv=3, d_model=4, heads=1, kv_heads=None, d_k=2, d_v=3, d_out=5, batch=None,
             **mla):
        return dict({"n_q": n_q, "n_kv": n_kv, "d_model": d_model, "heads": heads,
                     "kv_heads": kv_heads or heads, "d_k": d_k, "d_v": d_v, "d_out": d_out,
                     "batch": batch}, **mla)
    # multi-head latent attention: 2 heads of qk_nope 1 + qk_rope 2, v 2,
    # q_lora_rank 3, kv_lora_rank 2
    write(tmp, "qa.json", m(4, 3))
    write(tmp, "qb.json", m(3, 6))
    write(tmp, "qp.json", m(4, 6))
    write(tmp, "kva.json", m(4, 4))
    write(tmp, "kvb.json", m(2, 6))
    write(tmp, "wo-mla.json", m(4, 5))
    mla = ["-x", "x.json", "--kv-a-proj-with-mqa", "kva.json", "--kv-b-proj", "kvb.json",
           "--wo", "wo-mla.json", "--heads", "2", "--qk-rope-head-dim", "2"]
    # a batch of two sequences (3-D), each with its own key length
    write(tmp, "xb.json", [m(3, 4), m(3, 4)])
    return [
        Run("one-head", ["-x", "x.json", "-w", "w1.json"], dims()),
        Run("one-head-no-wo", ["-x", "x.json", "-w", "w1-no-wo.json"], dims(d_out=3)),
        Run("no-weights", ["-x", "x.json"], dims(d_k=4, d_v=4, d_out=4)),
        Run("no-weights-2-heads", ["-x", "x.json", "--heads", "2"],
            dims(heads=2, d_k=2, d_v=2, d_out=4)),
        Run("two-heads-no-wo", ["-x", "x.json", "-w", "w2-no-wo.json", "--heads", "2"],
            dims(heads=2, d_out=6)),
        Run("gqa", ["-x", "x.json", "-w", "w-gqa.json", "--heads", "2", "--kv-heads", "1"],
            dims(heads=2, kv_heads=1)),
        Run("cross", ["-x", "x.json", "--kv", "kv.json", "-w", "w-cross.json", "--heads", "2",
                      "--tokens", "a b c", "--kv-tokens", "p q r s"],
            dims(n_kv=4, heads=2, d_out=6), tokens=True, kv_tokens=True),
        Run("direct", ["--q", "q.json", "--k", "k.json", "--v", "v.json", "--wo", "wo.json",
                       "--heads", "2"], dims(n_kv=4, heads=2), direct=True),
        Run("causal-mask", ["-x", "x.json", "-w", "w2.json", "--heads", "2", "--causal",
                            "--mask", "mask-heads.json", "--tokens", "a b c"],
            dims(heads=2), masked=True, per_head_mask=True, tokens=True),
        Run("softcap-kv-len", ["-x", "x.json", "-w", "w1.json", "--softcap", "2",
                               "--kv-len", "2", "--causal=bottom-right"],
            dims(), masked=True, softcap=True),
        Run("window", ["-x", "x.json", "-w", "w1.json", "--window", "1,-1"],
            dims(), masked=True),
        Run("batch", ["-x", "xb.json", "-w", "w2.json", "--heads", "2", "--causal=bottom-right",
                      "--kv-len", "2,3", "--tokens", "a b c"],
            dims(heads=2, batch=2), masked=True, tokens=True),
        # ALiBi: a mask per head, its slopes in meta
        Run("alibi", ["-x", "x.json", "-w", "w2.json", "--heads", "2", "--causal", "--alibi"],
            dims(heads=2), masked=True, per_head_mask=True),
        Run("alibi-slopes", ["-x", "x.json", "--kv", "kv.json", "-w", "w-cross.json",
                             "--heads", "2", "--alibi-slopes", "slopes.json"],
            dims(n_kv=4, heads=2, d_out=6), masked=True, per_head_mask=True),
        Run("rope", ["-x", "x.json", "-w", "w2.json", "--heads", "2", "--kv-heads", "2",
                     "--rope", "interleaved", "--causal"],
            dims(heads=2), masked=True, rope=True),
        # a q/k norm (Qwen3's, per head) with rope: q_norm and k_norm, meta's "norm"
        Run("norm", ["-x", "x.json", "-w", "w2.json", "--heads", "2", "--rope", "half",
                     "--q-norm", "qn.json", "--k-norm", "qn.json"],
            dims(heads=2), rope=True, norm=True),
        Run("mla", mla + ["--q-a-proj", "qa.json", "--q-b-proj", "qb.json", "--rope",
                          "interleaved", "--causal"],
            dims(heads=2, d_k=3, d_v=2, q_lora_rank=3, kv_lora_rank=2, dn=1, dr=2), masked=True,
            mla={"q": True, "rope": True, "absorb": False}),
        Run("mla-absorbed", mla + ["--wq", "qp.json", "--absorb"],
            dims(heads=2, d_k=3, d_v=2, kv_lora_rank=2, dn=1, dr=2, absorbed=True),
            mla={"q": False, "rope": False, "absorb": True}),
        # a layer of a checkpoint (samples/tiny-llama: Llama, config.json beside
        # it): causal, rotary, grouped-query heads, and meta's "model"
        Run("checkpoint", ["-x", os.path.join(TINY, "x.json"), "-w", os.path.join(TINY, "model"),
                           "--layer", "1"],
            dims(n_q=4, n_kv=4, d_model=8, heads=2, kv_heads=1, d_k=4, d_v=4, d_out=8),
            masked=True, rope=True, tokens=True),
    ]


def main(argv):
    global MHA
    if len(argv) not in (1, 2):
        sys.exit(__doc__)
    MHA = os.path.abspath(argv[0])
    doc = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..",
                                                       "docs", "formats.md")
    schema, meta_schema = read_schema(doc)
    steps = sorted({r["step"] for r in schema if r["step"]})
    check("docs: %d keys, %d steps, %d meta keys" % (len(schema), len(steps), len(meta_schema)),
          len(schema) > 10 and len(steps) >= 13 and len(meta_schema) > 10)
    with tempfile.TemporaryDirectory() as tmp:
        for run in problems(tmp):
            r = mha(run.args + ["-p", "all", "-f", "json"], tmp)
            if not check("%s: --print all -f json: exit 0" % run.name, r.returncode == 0,
                         r.stderr.decode().strip()):
                continue
            doc = json.loads(r.stdout)
            check_json("%s: --print all -f json" % run.name, schema, meta_schema, run, doc, None)
            for ext in ("npy", "json", "csv"):
                check_dir("%s: -o DIR/ -f %s" % (run.name, ext), schema, meta_schema, run,
                          doc.get("meta"), ext, tmp)
            check_csv("%s: --print all -f csv" % run.name, schema, run, doc.get("meta"), tmp)
            if run.name not in ("one-head-no-wo", "gqa", "direct", "causal-mask",
                                "softcap-kv-len", "batch", "rope", "norm", "mla",
                                "mla-absorbed"):
                continue
            for step in steps:
                where = "%s: -p %s -f json" % (run.name, step)
                r = mha(run.args + ["-p", step, "-f", "json"], tmp)
                if step == "softcapped" and not run.softcap:
                    # documented: a usage error, there is no such step
                    check(where + ": exit 2 without --softcap", r.returncode == 2,
                          "exit %d" % r.returncode)
                elif step in ("q_rot", "k_rot") and not run.rope:
                    check(where + ": exit 2 without --rope", r.returncode == 2,
                          "exit %d" % r.returncode)
                elif step in ("q_rot", "k_rot", "c_q", "c_q_norm", "q_nope", "q_pe", "q_pe_rot",
                              "c_kv", "c_kv_norm", "k_pe", "k_pe_rot", "k_nope") and \
                        not holds(run, next(r["when"] for r in schema if r["step"] == step)):
                    check(where + ": exit 2 where the run has no such step", r.returncode == 2,
                          "exit %d" % r.returncode)
                elif step in ("q_norm", "k_norm") and not run.norm:
                    check(where + ": exit 2 without a q/k norm", r.returncode == 2,
                          "exit %d" % r.returncode)
                elif check(where + ": exit 0", r.returncode == 0, r.stderr.decode().strip()):
                    check_json(where, schema, meta_schema, run, json.loads(r.stdout), step)
        # a result read back: -x takes its "output", meta and the rest aside
        r = mha(["-x", "x.json", "-w", "w-gqa.json", "--heads", "2", "--kv-heads", "1",
                 "-p", "all", "-f", "json", "-o", "all.json"], tmp)
        back = mha(["-x", "all.json", "-p", "x", "-f", "json"], tmp)
        ok = r.returncode == 0 and back.returncode == 0
        if ok:
            with open(os.path.join(tmp, "all.json")) as f:
                ok = json.loads(back.stdout)["X"] == json.load(f)["output"]
        check("a JSON result read back with -x gives its output", ok,
              (r.stderr + back.stderr).decode().strip())
    print("%d passed, %d failed" % (check.passed, check.failed))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

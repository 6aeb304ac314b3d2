"""
checklib.py: what the samples' check.py scripts share.

Each check.py computes its sample's attention again with numpy, in the
tutorial's own terms, and compares it with what mha prints in JSON.  This
module only runs mha, reads its JSON and reports results as "ok ..." or
"FAIL ..." lines, which samples/run.sh counts.  It holds no attention
arithmetic of its own: that stays in each check.py, next to the tutorial
it follows.

Run from anywhere; mha is $MHA if set (run.sh sets it), else ./mha at the
top of the repository.
"""
import json
import os
import shlex
import subprocess
import sys

import numpy as np

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-12

failures = 0


def mha_path():
    return os.environ.get("MHA") or os.path.join(TOP, "mha")


def report(sample, ok, what, detail=""):
    """One line per check; detail is shown only when the check fails."""
    global failures
    if ok:
        print("ok %s: %s" % (sample, what))
    else:
        failures += 1
        print("FAIL %s: %s%s" % (sample, what, ": " + detail if detail else ""))
    sys.stdout.flush()
    return ok


def finish():
    sys.exit(1 if failures else 0)


def cmd_args(sample):
    """The sample's cmd file as an argument list, without the leading 'mha'."""
    with open(os.path.join(TOP, "samples", sample, "cmd")) as f:
        args = shlex.split(f.read(), comments=True)
    if not args or args[0] != "mha":
        raise SystemExit("samples/%s/cmd: expected one 'mha ...' command line" % sample)
    return args[1:]


def run_mha(args):
    """mha's standard output, run from the top of the repository."""
    p = subprocess.run([mha_path()] + args, cwd=TOP, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("mha %s: exit %d: %s" % (" ".join(args), p.returncode,
                                                   p.stderr.strip()))
    return p.stdout


def _numbers(node):
    """mha's JSON writes -inf, inf and nan as strings; make them floats."""
    if isinstance(node, list):
        return [_numbers(e) for e in node]
    if isinstance(node, dict):
        return {k: _numbers(v) for k, v in node.items()}
    if isinstance(node, str) and node in ("-inf", "inf", "nan"):
        return float(node)
    return node


def run_json(args):
    """mha's JSON output for args (plus --format json), arrays as numpy;
    without "meta", which says how the run was made, not what it made."""
    doc = _numbers(json.loads(run_mha(args + ["--format", "json"])))
    doc.pop("meta", None)
    return _arrays(doc)


def _arrays(node):
    if isinstance(node, dict):
        return {k: _arrays(v) for k, v in node.items()}
    if isinstance(node, list) and node and isinstance(node[0], dict):
        return [_arrays(e) for e in node]
    return np.array(node, dtype=float)


def load(sample, name, key=None):
    """A sample's input file (x.json, weights.json) as numpy arrays."""
    with open(os.path.join(TOP, "samples", sample, name)) as f:
        doc = json.load(f)
    if key is not None:
        return np.array(doc[key], dtype=float)
    return {k: np.array(v, dtype=float) for k, v in doc.items()}


def softmax_rows(m):
    """Row-wise softmax; -inf entries become 0.  Every row here has a finite entry."""
    e = np.exp(m - m.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def causal_mask(n):
    """0 where query i may see key j (j <= i), -inf above the diagonal."""
    m = np.zeros((n, n))
    m[np.triu_indices(n, 1)] = -np.inf
    return m


def rel_diff(got, want):
    """
    max |got - want| over the finite entries, relative to the largest |want|
    (a matrix-wide scale, so entries near zero are not held to 1e-12 of
    themselves).  inf if the shapes or the positions of -inf/inf differ.
    """
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float)
    if got.shape != want.shape:
        return np.inf
    fin = np.isfinite(want)
    if not np.array_equal(fin, np.isfinite(got)) or not np.array_equal(got[~fin], want[~fin]):
        return np.inf
    if not fin.any():
        return 0.0
    scale = np.abs(want[fin]).max()
    diff = np.abs(got[fin] - want[fin]).max()
    return diff / scale if scale > 0 else diff


def _flatten(node, prefix=""):
    out = {}
    if isinstance(node, dict):
        for k, v in node.items():
            out.update(_flatten(v, prefix + ("." if prefix else "") + k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.update(_flatten(v, "%s[%d]" % (prefix, i + 1)))
    else:
        out[prefix] = node
    return out


def compare_all(sample, got, want, what):
    """
    Every matrix mha printed against the reference, which must cover exactly
    the same ones (so no printed number goes unchecked), to RTOL.
    """
    g, w = _flatten(got), _flatten(want)
    problems = []
    for k in sorted(set(g) - set(w)):
        problems.append("%s printed by mha but not computed here" % k)
    for k in sorted(set(w) - set(g)):
        problems.append("%s not printed by mha" % k)
    worst, worst_key = 0.0, None
    for k in sorted(set(g) & set(w)):
        d = rel_diff(g[k], w[k])
        if d > RTOL:
            problems.append("%s differs (max relative difference %.3g)" % (k, d))
        if d >= worst:
            worst, worst_key = d, k
    if problems:
        return report(sample, False, what, "; ".join(problems))
    return report(sample, True, "%s (%d matrices; largest relative difference %.1g, in %s)"
                  % (what, len(w), worst, worst_key))


def close(sample, what, got, want, rtol=RTOL):
    d = rel_diff(got, want)
    return report(sample, d <= rtol, what, "max relative difference %.3g\n  got  %s\n  want %s"
                  % (d, np.array2string(np.asarray(got)), np.array2string(np.asarray(want))))


def equal(sample, what, got, want):
    """Bit for bit: for copies (a head's block of Q, the concatenation)."""
    got, want = np.asarray(got), np.asarray(want)
    same = got.shape == want.shape and np.array_equal(got, want)
    return report(sample, same, what, "got %s, want %s" % (got.tolist(), want.tolist()))


def text_tables(text):
    """mha's text output as {title: rows of strings}, for checking what a reader sees."""
    tables, title = {}, None
    for line in text.splitlines():
        if not line.strip():
            title = None
        elif title is None:
            title = line.rsplit(" (", 1)[0]
            tables[title] = []
        else:
            tables[title].append(line.split())
    return tables

"""numpy_io.py: what numpy_check.py and numpy_torch.py share: mha run,
its JSON read strictly (no constants, no duplicate keys; "inf", "-inf" and
"nan" as strings where mha writes them), and arrays compared to a
reference within RTOL relative (a floor of 1) or bit for bit."""

import json
import math
import subprocess

import numpy as np

RTOL = 1e-12


# ---- JSON in and out -----------------------------------------------------


def dump_json(value):
    """JSON with every float written by repr() (shortest round-trip form)."""
    if isinstance(value, dict):
        return "{" + ", ".join(json.dumps(k) + ": " + dump_json(v)
                               for k, v in value.items()) + "}"
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dump_json(v) for v in value) + "]"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    v = float(value)
    if v == -math.inf:
        return '"-inf"'
    if not math.isfinite(v):
        raise ValueError("cannot write %r" % v)
    return repr(v)


def reject_constant(name):
    raise ValueError("non-standard JSON constant %s" % name)


def unique_keys(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("duplicate key %r" % k)
        d[k] = v
    return d


def parse_json(text):
    # parse_int=float keeps "-0" a negative zero
    return json.loads(text, parse_constant=reject_constant, parse_int=float,
                      object_pairs_hook=unique_keys)


NONFINITE = {"-inf": -math.inf, "inf": math.inf, "nan": math.nan}


def to_array(value, where):
    def conv(v):
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, str):
            if v not in NONFINITE:
                raise ValueError("%s: unexpected string %r" % (where, v))
            return NONFINITE[v]
        if isinstance(v, float):
            return v
        raise ValueError("%s: unexpected %r" % (where, v))
    a = np.array(conv(value), dtype=np.float64)
    if a.ndim not in (2, 3, 4):
        raise ValueError("%s: not a matrix" % where)
    return a


# ---- comparing -----------------------------------------------------------


class Mismatch(Exception):
    pass


def fmt_index(idx):
    return "".join("[%d]" % i for i in idx)


def compare(name, got, ref, exact=None):
    """Check got against ref; return the largest scaled difference.

    exact: a boolean array of entries that must be equal, not just close."""
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise Mismatch("%s: shape %s, expected %s" % (name, got.shape, ref.shape))
    bad = np.isnan(got) | np.isnan(ref)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise Mismatch("%s%s: mha %r numpy %r (NaN)" % (name, fmt_index(i), got[i], ref[i]))
    inf = ~np.isfinite(got) | ~np.isfinite(ref)
    wrong = inf & (got != ref)
    if wrong.any():
        i = tuple(np.argwhere(wrong)[0])
        raise Mismatch("%s%s: mha %r numpy %r" % (name, fmt_index(i), got[i], ref[i]))
    if exact is not None:
        wrong = exact & (got != ref)
        if wrong.any():
            i = tuple(np.argwhere(wrong)[0])
            raise Mismatch("%s%s: mha %r numpy %r (must be exact)"
                           % (name, fmt_index(i), got[i], ref[i]))
    fin = ~inf
    if not fin.any():
        return 0.0
    diff = np.zeros(got.shape)
    diff[fin] = np.abs(got[fin] - ref[fin]) / np.maximum(1.0, np.abs(ref[fin]))
    i = np.unravel_index(np.argmax(diff), diff.shape)
    if diff[i] > RTOL:
        raise Mismatch("%s%s: mha %r numpy %r (rel diff %.3g > %g)"
                       % (name, fmt_index(i), got[i], ref[i], diff[i], RTOL))
    return float(diff[i])


def bit_equal(name, got, want):
    """Bit-for-bit equality, so -0.0 and 0.0 differ."""
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise Mismatch("%s: shape %s, expected %s" % (name, got.shape, want.shape))
    diff = got.view(np.uint64) != want.view(np.uint64)
    if diff.any():
        i = tuple(np.argwhere(diff)[0])
        raise Mismatch("%s%s: mha %r, input %r (not bit-exact)"
                       % (name, fmt_index(i), got[i], want[i]))


def run(binary, args):
    p = subprocess.run([binary, "forward"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    if p.returncode != 0:
        raise Mismatch("mha %s: exit %d: %s" % (" ".join(args[-6:]), p.returncode,
                                               p.stderr.strip()))
    return p.stdout

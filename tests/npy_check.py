#!/usr/bin/python3
"""npy_check.py: mha's .npy reader and writer against NumPy itself.

usage: npy_check.py MHA_BINARY

Every .npy file here is made at run time, into a temporary directory, by
NumPy (np.lib.format.write_array, which writes what np.save writes, in
format 1.0, 2.0 or 3.0) or, for the malformed ones, by hand.  Then:

- reading: `mha forward -x FILE --print x -f json` (and --mask for masks)
  must echo the array exactly, for every dtype mha accepts (float64,
  float32, float16, signed and unsigned integers, booleans for a mask) in
  both byte orders, C and Fortran order, and each format version; float32
  and float16 values convert to double exactly, so "exactly" means ==;
- errors: each malformed or unusable file must give exit status 1 and one
  line on stderr that starts with "mha: FILE: " and says what is wrong;
- standard input: `-x -` reads a .npy file too, and names it "<stdin>";
- large files (past the 4 KiB read_matrix looks at first), read straight
  into the matrix for native float64 and float32, the rest a value at a
  time: every dtype path, from a file and from a pipe, a header longer
  than 4 KiB, a float32 cut by where the first read ends, the errors
  (truncated, bytes after, nan far in, a header promising more than
  --max-memory) in both, and --dtype f32 keeping floats (its .npy output
  float32, the same numbers as from float64 inputs and as its JSON);
- mapped files (mha forward maps a native .npy file opened by its path):
  the output the same bytes as from a pipe, /dev/stdin (a pipe, or
  redirected from the file), and a header that leaves the values
  unaligned (read); the same errors and --max-memory refusals either
  way; and fewer page faults, which shows that the file was mapped;
- writing, when `mha forward --help` offers --format npy: `-o FILE.npy`
  and `-o DIR/` must write files np.load reads back equal, bit for bit,
  to the matrices of the JSON output, and the file must be the very bytes
  np.save writes for that array.

It prints one line per check and ends with "N passed, N failed"; the exit
status is 1 if any check failed.
"""

import io
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npy_files import (dict_text, json_array, json_matrix, npy_bytes, parse_json,  # noqa: E402
                       raw_npy, same, sample, save, write_bytes)

SEED = 20240611


class Checker:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp
        self.passed = 0
        self.failed = 0
        self.serial = 0

    def report(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok    %s" % name)
        else:
            self.failed += 1
            print("FAIL  %s%s" % (name, ": " + detail if detail else ""))

    def path(self, stem, ext=".npy"):
        self.serial += 1
        return os.path.join(self.tmp, "%s-%d%s" % (stem, self.serial, ext))

    def run(self, args, stdin=None):
        r = subprocess.run([self.binary] + args, input=stdin, capture_output=True,
                           timeout=30)
        return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


# ---- the checks -----------------------------------------------------------


def check_reads(c, rng):
    dtypes = ["f8", "f4", "f2", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
    for base in dtypes:
        for order in ("<", ">"):
            if base[1] == "1" and order == ">":
                continue  # one byte: no byte order ('|')
            dt = np.dtype(order + base)
            a = sample(dt, (4, 3), rng)
            for fortran in (False, True):
                for version in ((1, 0), (2, 0), (3, 0)):
                    arr = np.asfortranarray(a) if fortran else np.ascontiguousarray(a)
                    p = save(c.path("x-" + base), arr, version)
                    name = "read %s %s order, format %d.%d" % (
                        dt.str, "Fortran" if fortran else "C", *version)
                    rc, out, err = c.run(["forward", "-x", p, "--print", "x", "-f", "json"])
                    if rc != 0:
                        c.report(name, False, "exit %d: %s" % (rc, err.strip()))
                        continue
                    ok, why = same(json_matrix(parse_json(out), "X"), a.astype(np.float64))
                    c.report(name, ok, why)

    # '=' is the host's order, '|' a single byte's
    for descr, dt in (("=f8", np.dtype("=f8")), ("|u1", np.dtype("u1")), ("|i1", np.dtype("i1"))):
        a = sample(dt, (3, 5), rng)
        p = write_bytes(c.path("x-eq"), raw_npy(dict_text(descr, a.shape), a.tobytes()))
        rc, out, err = c.run(["forward", "-x", p, "--print", "x", "-f", "json"])
        ok, why = (same(json_matrix(parse_json(out), "X"), a.astype(np.float64))
                   if rc == 0 else (False, err.strip()))
        c.report("read descr %r" % descr, ok, why)


def check_masks(c, rng):
    x = save(c.path("x3"), rng.standard_normal((3, 4)))
    x2 = save(c.path("x3b"), rng.standard_normal((3, 4)))

    b = np.array([[True, False, True], [True, True, False], [False, True, True]])
    for fortran in (False, True):
        arr = np.asfortranarray(b) if fortran else b
        p = save(c.path("mask-bool"), arr)
        rc, out, err = c.run(["forward", "-x", x, "--mask", p, "--print", "mask", "-f", "json"])
        ok, why = (same(json_matrix(parse_json(out), "mask"), np.where(b, 0.0, -np.inf))
                   if rc == 0 else (False, err.strip()))
        c.report("mask |b1 %s order" % ("Fortran" if fortran else "C"), ok, why)

    b3 = rng.random((2, 3, 3)) < 0.6
    b3[:, :, 0] = True
    p = save(c.path("mask-bool3"), np.asfortranarray(b3))
    rc, out, err = c.run(["forward", "-x", x2, "--heads", "2", "--mask", p, "--print", "mask",
                          "-f", "json"])
    ok, why = (same(json_matrix(parse_json(out), "mask"), np.where(b3, 0.0, -np.inf))
               if rc == 0 else (False, err.strip()))
    c.report("mask |b1 2x3x3 Fortran order", ok, why)

    m = rng.standard_normal((3, 3))
    m[0, 1] = -np.inf
    m[2, 0] = -np.inf
    m[1, 1] = -0.0
    for descr in ("<f8", ">f8", "<f4", ">f4"):
        for fortran in (False, True):
            a = m.astype(descr)
            p = save(c.path("mask-f"), np.asfortranarray(a) if fortran else a)
            rc, out, err = c.run(["forward", "-x", x, "--mask", p, "--print", "mask", "-f",
                                  "json"])
            ok, why = (same(json_matrix(parse_json(out), "mask"), a.astype(np.float64))
                       if rc == 0 else (False, err.strip()))
            c.report("mask %s with -inf and -0, %s order" % (descr, "Fortran" if fortran
                                                                 else "C"), ok, why)

    mi = np.array([[0, -5, 3], [1, 0, 0], [-(2 ** 40), 2, 0]], dtype=">i8")
    p = save(c.path("mask-i8"), mi)
    rc, out, err = c.run(["forward", "-x", x, "--mask", p, "--print", "mask", "-f", "json"])
    ok, why = (same(json_matrix(parse_json(out), "mask"), mi.astype(np.float64))
               if rc == 0 else (False, err.strip()))
    c.report("mask >i8 (additive integers)", ok, why)


def check_header_forms(c):
    """Headers NumPy would accept though it never writes them so."""
    a = np.arange(6, dtype="<f8").reshape(2, 3) / 8
    data = a.tobytes()
    forms = [
        ("keys in another order",
         "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f8'}"),
        ("double quotes, no trailing comma",
         '{"descr": "<f8", "fortran_order": False, "shape": (2, 3)}'),
        ("spaces and newlines between tokens",
         "{ 'descr' :'<f8' ,\n 'fortran_order':False,'shape':( 2 ,3 , ) , }"),
        ("no padding or newline", None),
        ("Python 2 long integers (2L, 3L)",
         "{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }"),
    ]
    for name, text in forms:
        if text is None:
            b = raw_npy(dict_text("<f8", a.shape), data, pad=False)
        else:
            b = raw_npy(text, data)
        p = write_bytes(c.path("hdr"), b)
        rc, out, err = c.run(["forward", "-x", p, "--print", "x", "-f", "json"])
        ok, why = (same(json_matrix(parse_json(out), "X"), a) if rc == 0
                   else (False, err.strip()))
        c.report("header: " + name, ok, why)


def check_errors(c):
    good = np.arange(24, dtype="<f8").reshape(6, 4)
    gb = save(os.path.join(c.tmp, "good.npy"), good)
    with open(gb, "rb") as f:
        gbytes = f.read()
    data = good.tobytes()

    nan = good.copy()
    nan[2, 1] = np.nan
    inf = np.asfortranarray(good.copy())
    inf[3, 2] = -np.inf

    cases = [
        # name, file bytes, extra args, what the message must contain
        ("truncated data", gbytes[:-92], [],
         "truncated: the header promises 24 values (192 bytes) but 100 bytes follow"),
        ("extra bytes after the data", gbytes + b"\0" * 8, [],
         "8 bytes after the data"),
        ("truncated header", gbytes[:40], [], "truncated"),
        ("only the magic", b"\x93NUMPY", [], "truncated"),
        ("lying header: 10^12 x 1000 values", raw_npy(dict_text("<f8", (10 ** 12, 1000)), data),
         [], "truncated: the header promises 1000000000000000 values"),
        ("lying header: a shape whose size overflows",
         raw_npy(dict_text("<f8", (2 ** 62, 2 ** 62)), data), [], "too large"),
        ("lying header: a dimension beyond 2^64",
         raw_npy(dict_text("<f8", (2 ** 70, 1)), data), [], "too large"),
        ("lying header length", gbytes[:8] + b"\xff\xff" + gbytes[10:], [], "truncated"),
        ("format version 4.0", b"\x93NUMPY\x04\x00" + gbytes[8:], [], "version 4.0"),
        ("format version 1.1", b"\x93NUMPY\x01\x01" + gbytes[8:], [], "version 1.1"),
        ("bad magic", b"\x93NUMPX" + gbytes[6:], [], ""),
        ("unsupported dtype <c16", raw_npy(dict_text("<c16", (6, 2)), data), [],
         "X: dtype '<c16' is not supported (float64, float32, float16, integers, or bool for a mask)"),
        ("unsupported dtype <U3", raw_npy(dict_text("<U3", (2, 2)), b"\0" * 48), [],
         "dtype '<U3' is not supported"),
        ("unsupported dtype |O", raw_npy(dict_text("|O", (2, 2)), b"\0" * 32), [],
         "dtype '|O' is not supported"),
        ("unsupported dtype <M8[s]", raw_npy(dict_text("<M8[s]", (6, 4)), data), [],
         "dtype '<M8[s]' is not supported"),
        ("unsupported dtype <f16 (long double)", raw_npy(dict_text("<f16", (3, 4)), data), [],
         "dtype '<f16' is not supported"),
        ("unsupported dtype |f8 (no byte order)", raw_npy(dict_text("|f8", (6, 4)), data), [],
         "dtype '|f8' is not supported"),
        ("structured dtype",
         raw_npy("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (6, 4), }", data),
         [], "structured dtype"),
        ("bool for X", raw_npy(dict_text("|b1", (2, 3)), b"\1" * 6), [],
         "only accepted for a mask"),
        ("bool mask with a byte 2", raw_npy(dict_text("|b1", (6, 6)), b"\1" * 35 + b"\2"),
         ["--mask"], "mask[5][5] is the byte 0x02, not a boolean"),
        ("int64 beyond 2^53", npy_bytes(np.array([0] * 9 + [2 ** 53 + 1] + [0] * 14,
                                                 dtype="<i8").reshape(6, 4)), [],
         "X[2][1] is 9007199254740993: a double cannot hold it exactly"),
        ("uint64 2^64-1", raw_npy(dict_text(">u8", (6, 4)),
                                  np.array([2 ** 64 - 1] * 24, dtype=">u8").tobytes()), [],
         "X[0][0] is 18446744073709551615: a double cannot hold it exactly"),
        ("rank 4 X", raw_npy(dict_text("<f8", (2, 3, 2, 2)), data), [],
         "X: expected a 2-D array (up to 3-D), found a 4-D array"),
        ("rank 1 X", raw_npy(dict_text("<f8", (24,)), data), [],
         "X: expected a 2-D array (up to 3-D), found a 1-D array of shape (24,)"),
        ("rank 5 mask", raw_npy(dict_text("<f8", (1, 1, 2, 3, 4)), data), ["--mask"],
         "found a 5-D array"),
        ("rank 0 (a scalar)", raw_npy(dict_text("<f8", ()), data[:8]), [], "a scalar"),
        ("zero dimension", raw_npy(dict_text("<f8", (0, 4)), b""), [], "zero dimension"),
        ("nan in X", npy_bytes(nan), [], "X[2][1] is nan: only a mask may hold nan or infinity"),
        ("-inf in X, Fortran order", npy_bytes(inf), [],
         "X[3][2] is -inf: only a mask may hold nan or infinity"),
        ("inf in X, float16", raw_npy(dict_text("<f2", (1, 2)), b"\0\0\0\x7c"), [],
         "X[0][1] is inf"),
        ("header not a dict", raw_npy("[('descr', '<f8')]", data), [], "invalid .npy header"),
        ("header: missing 'shape'", raw_npy("{'descr': '<f8', 'fortran_order': False}", data), [],
         "no 'shape' key"),
        ("header: unknown key", raw_npy(dict_text("<f8", (6, 4))[:-1] + "'x': 1, }", data), [],
         "unexpected key 'x'"),
        ("header: key twice",
         raw_npy("{'descr': '<f8', 'shape': (6, 4), 'fortran_order': False, 'shape': (6, 4)}",
                 data), [], "'shape' appears twice"),
        ("header: fortran_order 0",
         raw_npy("{'descr': '<f8', 'fortran_order': 0, 'shape': (6, 4)}", data), [],
         "True or False"),
        ("header: shape (24) not a tuple",
         raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (24)}", data), [],
         "not a tuple"),
        ("header: negative dimension",
         raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-6, 4)}", data), [],
         "negative"),
        ("header: unterminated string",
         raw_npy("{'descr': '<f8, 'fortran_order': False, 'shape': (6, 4)}", data), [],
         "invalid .npy header"),
        ("header: garbage after the dict", raw_npy(dict_text("<f8", (6, 4)) + " x", data), [],
         "invalid .npy header"),
        ("header: a NUL byte", raw_npy(dict_text("<f8", (6, 4)) + "\0", data), [],
         "invalid .npy header"),
        ("header: Python 2 longs in format 3.0",
         raw_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (6L, 4L)}", data,
                 version=(3, 0)), [], "invalid .npy header"),
        ("empty header", raw_npy("", data, pad=False), [], "invalid .npy header"),
    ]
    x = save(c.path("x6"), np.zeros((6, 3)))
    for name, b, extra, want in cases:
        p = write_bytes(c.path("bad"), b)
        if extra == ["--mask"]:
            args = ["forward", "-x", x, "--mask", p]
        else:
            args = ["forward", "-x", p]
        rc, out, err = c.run(args)
        lines = err.splitlines()
        problems = []
        if rc != 1:
            problems.append("exit status %d, expected 1" % rc)
        if len(lines) != 1:
            problems.append("%d lines on stderr, expected 1" % len(lines))
        if not err.startswith("mha: %s:" % p):  # "FILE: " or, as CSV, "FILE:1:8: "
            problems.append("the message does not start with 'mha: %s:'" % p)
        if want and want not in err:
            problems.append("the message does not say %r" % want)
        if out:
            problems.append("something on stdout")
        c.report("error: %s" % name, not problems,
                 "; ".join(problems) + (" (stderr: %s)" % err.strip() if problems else ""))


def check_stdin(c, rng):
    a = rng.standard_normal((5, 2)).astype(">f4")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asfortranarray(a), version=(2, 0))
    rc, out, err = c.run(["forward", "-x", "-", "--print", "x", "-f", "json"], buf.getvalue())
    ok, why = (same(json_matrix(parse_json(out), "X"), a.astype(np.float64)) if rc == 0
               else (False, err.strip()))
    c.report("standard input: -x - (>f4, Fortran order, format 2.0)", ok, why)

    rc, out, err = c.run(["forward", "-x", "-"], buf.getvalue()[:-3])
    ok = rc == 1 and err.startswith("mha: <stdin>: truncated") and len(err.splitlines()) == 1
    c.report("standard input: a truncated file is named <stdin>", ok, err.strip())


# ---- large files: straight into the matrix -------------------------------


def check_large(c, rng):
    """Files past the first 4 KiB: native ones are read into the matrix
    directly (engine/read/npy.c read_npy_rest), the rest a value at a time."""
    base = rng.standard_normal((300, 40))
    xargs = ["--print", "x", "-f", "json"]
    for dtype, fortran in (("<f8", False), ("<f4", False), (">f8", False), (">f4", False),
                           ("<f2", False), ("<f8", True), ("<i4", False)):
        a = (base * 100).astype(dtype) if dtype[1] == "i" else base.astype(dtype)
        if fortran:
            a = np.asfortranarray(a)
        path = save(c.path("large"), a)
        want = a.astype(np.float64)
        label = "%s%s" % (dtype, ", Fortran order" if fortran else "")
        for how, args, stdin in (("file", ["-x", path], None),
                                 ("pipe", ["-x", "-"], open(path, "rb").read())):
            rc, out, err = c.run(["forward"] + args + xargs, stdin)
            ok, why = same(json_matrix(parse_json(out), "X"), want) if rc == 0 else (
                False, err.strip())
            c.report("large: %s from a %s reads exactly" % (label, how), ok, why)

    # a header past 4 KiB, and a float32 cut where the first 4 KiB end
    a = base.astype("<f4")
    for hlen, name in ((5000, "a 5000-byte header"), (4093 - 10, "values from byte 4093, one cut at 4096")):
        text = dict_text("<f4", a.shape)
        head = text + " " * (hlen - len(text) - 1) + "\n"
        b = raw_npy(head, a.tobytes(), pad=False)
        path = write_bytes(c.path("odd"), b)
        for extra, how in (([], "widened"), (["--dtype", "f32", "-p", "output"], "kept as floats")):
            if extra:
                # the output from X kept as floats, against X given as doubles
                out32 = c.path("o32")
                ref = c.path("ref")
                x64 = save(c.path("x64"), a.astype("<f8"))
                r1 = c.run(["forward", "-x", path, "--dtype", "f32", "-o", out32])
                r2 = c.run(["forward", "-x", x64, "--dtype", "f32", "-o", ref])
                ok = r1[0] == 0 and r2[0] == 0 and open(out32, "rb").read() == open(ref, "rb").read()
                c.report("large: %s, X %s: the output is the same" % (name, how), ok,
                         r1[2].strip() + r2[2].strip())
                continue
            rc, out, err = c.run(["forward", "-x", path] + xargs)
            ok, why = same(json_matrix(parse_json(out), "X"), a) if rc == 0 else (False, err.strip())
            c.report("large: %s, X %s" % (name, how), ok, why)

    # --dtype f32: floats in, floats out; the same numbers as from doubles, as JSON says
    x32 = save(c.path("x32"), base.astype("<f4"))
    x64 = save(c.path("x64"), base.astype("<f4").astype("<f8"))
    w = rng.standard_normal((40, 40)) / 8
    w32 = [save(c.path("w32"), w.astype("<f4")) for _ in range(4)]
    w64 = [save(c.path("w64"), w.astype("<f4").astype("<f8")) for _ in range(4)]
    wopt = ["--wq", "--wk", "--wv", "--wo"]
    outs = {}
    for name, x, ws in (("floats", x32, w32), ("doubles", x64, w64)):
        o = c.path("out-" + name)
        args = ["forward", "-x", x, "--heads", "4", "--causal", "--dtype", "f32"]
        for opt, f in zip(wopt, ws):
            args += [opt, f]
        rc, _, err = c.run(args + ["-o", o])
        outs[name] = np.load(o) if rc == 0 else None
        if name == "floats":
            rc, out, err = c.run(args + ["-f", "json"])
            outs["json"] = json_matrix(parse_json(out), "output") if rc == 0 else None
    ok = all(v is not None for v in outs.values())
    c.report("large: --dtype f32 -o FILE.npy writes float32", ok and outs["floats"].dtype == np.float32,
             "dtype %s" % (outs["floats"].dtype if ok else "-"))
    c.report("large: --dtype f32, float32 inputs kept as floats give the output float64 inputs give",
             ok and np.array_equal(outs["floats"], outs["doubles"]), "")
    # JSON prints each float's shortest digits: equal once read as float32
    c.report("large: --dtype f32's .npy output equals its JSON output",
             ok and np.array_equal(outs["floats"], outs["json"].astype(np.float32)), "")

    # errors, from a file and from a pipe, with the messages of small files
    a = base.astype("<f8")
    good = npy_bytes(a)
    nan = a.copy()
    nan[250, 7] = np.nan
    inf32 = base.astype("<f4")
    inf32[299, 39] = np.inf
    cases = [
        ("truncated", good[:-1000], [],
         "truncated: the header promises 12000 values (96000 bytes) but 95000 bytes follow"),
        ("bytes after the data", good + b"\0" * 5000, [],
         "5000 bytes after the data: the header promises 12000 values (96000 bytes) but "
         "101000 bytes follow"),
        ("nan far in", npy_bytes(nan), [], "X[250][7] is nan: only a mask may hold nan"),
        ("inf in float32 kept as floats", npy_bytes(inf32), ["--dtype", "f32"],
         "X[299][39] is inf: only a mask may hold nan"),
        # a file is known short before anything is allocated; a pipe is not,
        # and the matrix the header asks for is refused from its size
        ("a header promising more than --max-memory",
         raw_npy(dict_text("<f8", (100000, 10000))) + good[128:], ["--max-memory", "64M"],
         ("truncated: the header promises 1000000000 values (8000000000 bytes) but 96000 "
          "bytes follow", "reading it needs more than --max-memory (64.0 MiB)")),
    ]
    for name, b, extra, want in cases:
        path = write_bytes(c.path("bad"), b)
        for how, args, stdin, shown in (("file", ["-x", path], None, path),
                                        ("pipe", ["-x", "-"], b, "<stdin>")):
            said = want if not isinstance(want, tuple) else want[0] if how == "file" else want[1]
            rc, out, err = c.run(["forward"] + args + extra, stdin)
            ok = (rc == 1 and err.startswith("mha: %s: " % shown) and said in err
                  and len(err.splitlines()) == 1 and out == b"")
            c.report("large error from a %s: %s" % (how, name), ok, "%d %s" % (rc, err.strip()))

    # /dev/zero is not a .npy file: read until the budget is spent, then refused
    if os.path.exists("/dev/zero"):
        rc, out, err = c.run(["forward", "-x", "/dev/zero", "--max-memory", "8M"])
        ok = rc == 1 and "more than --max-memory" in err and len(err.splitlines()) == 1
        c.report("large: -x /dev/zero is refused at --max-memory", ok, err.strip())


# ---- mapped files: the values not read but mapped -------------------------


def minor_faults(cmd, stdin_path=None):
    """exit status, standard error and minor page faults of one run (the
    child's own, from wait4)"""
    with open(stdin_path or os.devnull, "rb") as fin:
        child = subprocess.Popen(cmd, stdin=fin, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        err = child.stderr.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(child.pid, 0)
    return os.waitstatus_to_exitcode(status), err, usage.ru_minflt


def unaligned_copy(c, a):
    """a's .npy file with a header 2 bytes longer than a 64-byte multiple:
    the values at an offset no float32 or float64 may be read from in place"""
    text = dict_text(a.dtype.str, a.shape)
    hlen = 128 + 2 - 10
    return write_bytes(c.path("unaligned"), raw_npy(text + " " * (hlen - len(text) - 1) + "\n",
                                                  a.tobytes(), pad=False))


def check_mapped(c, rng):
    """mha forward maps a native .npy file opened by its path (engine/read/npy.c
    map_values) and reads the rest: the output must be the same bytes
    whichever way each input came, the errors the same, --max-memory the
    same; and mapping must be what happens (a read of 16 MiB costs 4096
    page faults more)."""
    xb = rng.standard_normal((300, 64))
    wb = rng.standard_normal((64, 64)) / 8
    for dtype, extra in (("<f8", []), ("<f4", ["--dtype", "f32"])):
        x = xb.astype(dtype)
        xpath = save(c.path("mx"), x)
        ws = [save(c.path("mw"), wb.astype(dtype)) for _ in range(4)]
        wargs = []
        for opt, f in zip(["--wq", "--wk", "--wv", "--wo"], ws):
            wargs += [opt, f]
        outs = {}
        ways = [("a file (mapped)", ["-x", xpath], None),
                ("a header not aligned (read)", ["-x", unaligned_copy(c, x)], None),
                ("a pipe (read)", ["-x", "-"], open(xpath, "rb").read()),
                ("/dev/stdin from a pipe (read)", ["-x", "/dev/stdin"], open(xpath, "rb").read())]
        for how, args, stdin in ways:
            o = c.path("mout")
            rc, _, err = c.run(["forward", "--heads", "4", "--causal"] + args + wargs + extra +
                               ["-o", o], stdin)
            outs[how] = open(o, "rb").read() if rc == 0 else err.strip()
        # standard input redirected from the file: opened again by its path
        o = c.path("mout")
        rc, err, _ = minor_faults([c.binary, "forward", "--heads", "4", "--causal", "-x",
                                   "/dev/stdin"] + wargs + extra + ["-o", o], xpath)
        outs["/dev/stdin from the file"] = open(o, "rb").read() if rc == 0 else err.strip()
        first = outs["a file (mapped)"]
        for how, got in outs.items():
            c.report("mapped: %s, X from %s: the output's bytes as from a file" % (dtype, how),
                     isinstance(first, bytes) and got == first,
                     got if isinstance(got, str) else "")

    # the same errors and --max-memory refusals whichever way the file is read
    x = xb.astype("<f8")
    nan = x.copy()
    nan[299, 63] = np.nan
    for name, a, extra, want in (
            ("nan at the end", nan, [], "X[299][63] is nan: only a mask may hold nan"),
            # the file fits the budget, its values do not: refused, nothing held
            ("values past --max-memory", x, ["--max-memory", str(len(npy_bytes(x)) + 2048)],
             "reading it needs more than --max-memory")):
        for how, path in (("mapped", save(c.path("me"), a)), ("read", unaligned_copy(c, a))):
            o = c.path("mout")
            rc, out, err = c.run(["forward", "-x", path, "-o", o] + extra)
            ok = (rc == 1 and err.startswith("mha: %s: " % path) and want in err and
                  len(err.splitlines()) == 1 and not os.path.exists(o))
            c.report("mapped: %s (%s): exit 1, one line, no output file" % (name, how), ok,
                     "%d %s" % (rc, err.strip()))

    # mapped, not read: X of 16 MiB, then a weight that is not a .npy file
    big = rng.standard_normal((2048, 1024))
    faults = {}
    bad = write_bytes(c.path("badw", ".json"), b"[[1, 2], [3")
    for how, path in (("mapped", save(c.path("big"), big)), ("read", unaligned_copy(c, big))):
        rc, err, faults[how] = minor_faults([c.binary, "forward", "-x", path, "--wq", bad])
        c.report("mapped: a 16 MiB X %s, then a bad weight: exit 1" % how, rc == 1, err.strip())
    c.report("mapped: a 16 MiB X mapped takes 2000 page faults fewer than read",
             faults["mapped"] + 2000 < faults["read"],
             "%d faults mapped, %d read" % (faults["mapped"], faults["read"]))


# ---- writing --------------------------------------------------------------


def npy_supported(c):
    rc, out, err = c.run(["forward", "--help"])
    return b"npy" in out


def flatten_json(doc):
    """Every matrix of mha's JSON output: {"X": array, "heads/0/scores": array, ...}
    ("meta" says how the run was made: not a matrix)."""
    found = {}
    for k, v in doc.items():
        if k == "meta":
            continue
        if k == "heads":
            for i, h in enumerate(v):
                for hk, hv in h.items():
                    found["heads/%d/%s" % (i, hk)] = json_array(hv)
        else:
            found[k] = json_array(v)
    return found


def numpy_bytes(a):
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a, dtype="<f8"))
    return buf.getvalue()


def check_file_equals(c, name, path, want):
    try:
        with open(path, "rb") as f:
            b = f.read()
        got = np.load(io.BytesIO(b), allow_pickle=False)
    except Exception as e:  # noqa: BLE001 (any failure to load is the finding)
        c.report(name, False, "np.load: %s" % e)
        return
    ok, why = same(got, want)
    if ok and got.dtype != np.dtype("<f8"):
        ok, why = False, "dtype %s, expected <f8" % got.dtype
    if ok and b != numpy_bytes(got):
        ok, why = False, "not the bytes np.save writes for the same array"
    c.report(name, ok, why)


def check_writes(c, rng):
    if not npy_supported(c):
        print("skip  writing .npy: this mha has no --format npy")
        return
    x = save(c.path("wx"), rng.standard_normal((5, 4)))
    w = {k: rng.standard_normal((4, 4)).tolist() for k in ("W_Q", "W_K", "W_V", "W_O")}
    wpath = c.path("w", ".json")
    with open(wpath, "w") as f:
        json.dump(w, f)
    m = np.ones((5, 5), dtype=bool)
    m[0, 3] = m[4, 1] = False
    mpath = save(c.path("wmask"), m)
    # --exact: every run on the plain path, so the outputs compare bit for bit
    base = ["forward", "-x", x, "-w", wpath, "--heads", "2", "--causal", "--mask", mpath,
            "--exact"]

    rc, out, err = c.run(base + ["--print", "all", "-f", "json"])
    if rc != 0:
        c.report("write: the JSON reference run", False, err.strip())
        return
    ref = flatten_json(parse_json(out))

    # one matrix: -o FILE.npy
    one = os.path.join(c.tmp, "out.npy")
    rc, out, err = c.run(base + ["--format", "npy", "-o", one])
    if rc != 0:
        c.report("write: --format npy -o out.npy", False, err.strip())
    else:
        check_file_equals(c, "write: --format npy -o out.npy equals the JSON output", one,
                          ref["output"])

    # one matrix on standard output
    rc, out, err = c.run(base + ["--format", "npy"])
    if rc != 0:
        c.report("write: --format npy to standard output", False, err.strip())
    else:
        check_file_equals(c, "write: --format npy to standard output equals the JSON output",
                          write_bytes(c.path("stdout"), out), ref["output"])

    # a 3-D matrix: a mask per head, echoed
    m3 = rng.standard_normal((2, 5, 5))
    m3[0, 1, 2] = m3[1, 3, 0] = -np.inf
    m3path = save(c.path("wmask3"), m3)
    one3 = os.path.join(c.tmp, "mask3.npy")
    rc, out, err = c.run(["forward", "-x", x, "--heads", "2", "--mask", m3path, "--print", "mask",
                          "--format", "npy", "-o", one3])
    if rc != 0:
        c.report("write: a 2x5x5 mask, -o mask3.npy", False, err.strip())
    else:
        check_file_equals(c, "write: a 2x5x5 mask with -inf, -o mask3.npy", one3, m3)

    # every intermediate: -o DIR/
    d = os.path.join(c.tmp, "all") + os.sep
    rc, out, err = c.run(base + ["--print", "all", "--format", "npy", "-o", d])
    if rc != 0:
        c.report("write: --print all --format npy -o dir/", False, err.strip())
        return
    files = sorted(os.path.relpath(os.path.join(r, n), d)
                   for r, _, ns in os.walk(d) for n in ns)
    c.report("write: -o dir/ wrote meta.json beside the matrices", "meta.json" in files,
             "files %s" % files)
    files = [f for f in files if f != "meta.json"]
    c.report("write: -o dir/ wrote one file per matrix (%d)" % len(files),
             len(files) == len(ref) and all(f.endswith(".npy") for f in files),
             "%d files %s for %d matrices %s" % (len(files), files, len(ref), sorted(ref)))
    for f in files:
        key = match_key(f, ref)
        if key is None:
            c.report("write: %s" % f, False, "no matrix of the JSON output by that name")
            continue
        check_file_equals(c, "write: %s equals %s of the JSON output" % (f, key),
                          os.path.join(d, f), ref[key])


def match_key(fname, ref):
    """The JSON matrix a file of -o DIR/ holds: "Q.npy" is "Q", and
    "head2_scores.npy" is heads[1]["scores"] (heads counted from 1)."""
    stem = fname[:-4] if fname.endswith(".npy") else fname
    m = re.match(r"^head(\d+)_(.+)$", stem)
    if m:
        key = "heads/%d/%s" % (int(m.group(1)) - 1, m.group(2))
    else:
        key = stem
    return key if key in ref else None


# ---- large blocks in huge pages -------------------------------------------


def numpy_forward(x, ws, bs, heads, causal):
    """multi-head attention in float64 by NumPy alone: the independent result"""
    n, d = x.shape
    dk = ws[0].shape[1] // heads
    q, k, v = (x @ w + b for w, b in zip(ws[:3], bs[:3]))
    outs = []
    for h in range(heads):
        sl = slice(h * dk, (h + 1) * dk)
        s = q[:, sl] @ k[:, sl].T / np.sqrt(dk)
        if causal:
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        outs.append((s / s.sum(axis=1, keepdims=True)) @ v[:, sl])
    return np.concatenate(outs, axis=1) @ ws[3] + bs[3]


def check_pages(c, rng):
    """Blocks of 2 MiB or more are mappings of their own with huge pages
    asked for (lib/kernels/pages.c: Q, K and V as one block, the groups' buffers;
    engine/util/matrix.c: the output): runs whose output, Q, K, V and the heads in
    groups are past 2 MiB give NumPy's result, and the mapped output
    written to a .npy file is the bytes np.save writes."""
    for n, d, heads, dtype, extra, causal, tol in (
            # output 2 MiB, Q/K/V one block of 6 MiB: the whole path
            (1024, 256, 4, "<f8", [], False, 1e-12),
            # Q, K and V past 8 MiB: heads in groups, W_O in place through a group's Q
            (2048, 512, 8, "<f8", [], True, 1e-12),
            # float32: output 2 MiB as floats
            (2048, 256, 4, "<f4", ["--dtype", "f32"], False, 2e-5)):
        x = rng.standard_normal((n, d)).astype(dtype)
        ws = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(dtype) for _ in range(4)]
        bs = [(rng.standard_normal(d) / 10).astype(dtype) for _ in range(4)]
        args = ["forward", "--heads", str(heads), "-x", save(c.path("px"), x)]
        for w, b, name in zip(ws, bs, "qkvo"):
            args += ["--w" + name, save(c.path("pw"), w), "--b" + name, save(c.path("pb"), b)]
        o = c.path("pout")
        rc, _, err = c.run(args + extra + (["--causal"] if causal else []) + ["-o", o])
        name = "pages: n %d, d_model %d, %s%s: the output is NumPy's" % (
            n, d, dtype, ", causal" if causal else "")
        if rc != 0:
            c.report(name, False, err.strip())
            continue
        with open(o, "rb") as f:
            b = f.read()
        got = np.load(io.BytesIO(b), allow_pickle=False)
        want = numpy_forward(*(a.astype(np.float64) for a in [x]), [w.astype(np.float64) for w in ws],
                             [v.astype(np.float64) for v in bs], heads, causal)
        err_rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        buf = io.BytesIO()
        np.save(buf, got)
        c.report(name, got.dtype == np.dtype(dtype) and got.shape == want.shape and err_rel <= tol
                 and b == buf.getvalue(), "dtype %s, relative error %.3g" % (got.dtype, err_rel))


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: npy_check.py MHA_BINARY\n")
        return 2
    binary = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory(prefix="mha-npy-") as tmp:
        c = Checker(binary, tmp)
        check_reads(c, rng)
        check_masks(c, rng)
        check_header_forms(c)
        check_errors(c)
        check_stdin(c, rng)
        check_large(c, rng)
        check_mapped(c, rng)
        check_writes(c, rng)
        check_pages(c, rng)
    print("%d passed, %d failed" % (c.passed, c.failed))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())

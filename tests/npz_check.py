#!/usr/bin/env python3
"""npz_check.py MHA [ZIP_TEST]: -o run.npz against the JSON output of the same run.

For each kind of run (one head, several, grouped-query and cross-attention,
Q/K/V given, a mask per head, a softcap, rotary embeddings, tokens, a
batch with a mask per sequence, --sequence, --dtype f32) mha writes
`-p all -f json` and `-p all -o run.npz`, and this checks that

- np.load(allow_pickle=False) reads every member, and the keys are the
  JSON's: its top-level matrices, "meta", "tokens", "kv_tokens", and for
  each step of "heads" one key "heads.STEP";
- every array equals the JSON's bit for bit (-inf as "-inf"), a per-head
  step being the heads stacked, (H, rows, cols), a batch's (B, H, rows,
  cols), and a whole-model matrix of a batch (B, ...);
- "meta" is a 0-d Unicode array holding the JSON's meta object, tokens
  1-D Unicode arrays;
- the dtype is float64, and float32 for --dtype f32's output (equal to the
  JSON's float32 numbers);
- the archive is what np.savez writes: stored members, CRC-32 correct
  (zipfile.testzip), and each member's bytes those np.save writes for the
  same array (so only the zip's dates may differ from np.savez's file);
- --compress (np.savez_compressed's form): np.load gives the very arrays
  of the stored archive, every member deflated (method 8, its sizes in a
  data descriptor), its bytes once inflated the stored member's, deflated
  as Python's zlib deflates them at np.savez_compressed's settings; and
  mha reads it back as input as it reads the stored one;
- with ZIP_TEST (tests/zip_test), the ZIP64 records of an archive past
  4 GiB, forced on a small one, read by zipfile and np.load, its members
  stored and deflated.

Prints one line per check and ends with 'N passed, N failed'.
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib

import numpy as np

MHA = None
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(TOP, "tests", "cli", "data")
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok %s" % name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, ": " + detail if detail else ""))


def run(args, cwd):
    r = subprocess.run([MHA, "forward"] + args, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("mha %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                   r.stderr.decode(errors="replace")))
    return r.stdout


def no_constants(name):
    raise ValueError("non-standard JSON constant %s" % name)


def to_array(v):
    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        if isinstance(x, str):
            return {"-inf": -np.inf, "inf": np.inf, "nan": np.nan}[x]
        return float(x)
    return np.array(conv(v), dtype=np.float64)


def expected(doc):
    """The arrays the .npz must hold, from the JSON output: key -> array."""
    want = {}
    batch = doc["meta"]["batch"] is not None and doc["meta"]["sequence"] is None
    for k, v in doc.items():
        if k in ("meta", "tokens", "kv_tokens"):
            continue
        if k == "heads":  # [h][step], each (rows, cols) or (B, rows, cols)
            for step in v[0]:
                per_head = [to_array(h[step]) for h in v]
                # JSON nests heads[h][b]; the .npz puts the batch first
                want["heads." + step] = np.stack(per_head, axis=1 if batch else 0)
        else:
            want[k] = to_array(v)
    return want


def same_bits(a, b):
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def check_run(name, args, f32=False):
    with tempfile.TemporaryDirectory(prefix="mha-npz-") as tmp:
        os.symlink(DATA, os.path.join(tmp, "data"))
        printed = [] if f32 else ["-p", "all"]
        # parse_int=float: "-0" stays a negative zero
        doc = json.loads(run(args + printed + ["-f", "json"], tmp), parse_constant=no_constants,
                         parse_int=float)
        run(args + printed + ["-o", "run.npz"], tmp)
        run(args + printed + ["-o", "c.npz", "--compress"], tmp)
        path = os.path.join(tmp, "run.npz")
        with open(path, "rb") as f:
            raw = f.read()
        with open(os.path.join(tmp, "c.npz"), "rb") as f:
            craw = f.read()
        # mha reads either back as input alike (-x: its output member)
        back = [subprocess.run([MHA, "forward", "-x", n, "-p", "x,output", "-f", "json"],
                               cwd=tmp, capture_output=True, timeout=60)
                for n in ("run.npz", "c.npz")]
    check_compressed(name, raw, craw, back)
    z = np.load(io.BytesIO(raw), allow_pickle=False)
    want = expected(doc)
    keys = set(want) | {"meta"} | ({"tokens"} if "tokens" in doc else set()) | \
        ({"kv_tokens"} if "kv_tokens" in doc else set())
    check("%s: keys" % name, set(z.files) == keys,
          "npz %s, JSON %s" % (sorted(z.files), sorted(keys)))
    meta = z["meta"]
    check("%s: meta" % name, meta.ndim == 0 and meta.dtype.kind == "U" and
          json.loads(meta[()]) == doc["meta"], repr(meta)[:200])
    for t in ("tokens", "kv_tokens"):
        if t in doc:
            check("%s: %s" % (name, t), z[t].dtype.kind == "U" and z[t].tolist() == doc[t],
                  "%r and %r" % (z[t].tolist(), doc[t]))
    for k, a in sorted(want.items()):
        if k not in z.files:
            continue
        got = z[k]
        if f32 and k == "output":
            # JSON writes a float's shortest text, which reads back as it
            ok = got.dtype == np.float32 and same_bits(got, a.astype(np.float32))
        else:
            ok = got.dtype == np.float64 and same_bits(got, a)
        check("%s: %s %s %s" % (name, k, got.shape, got.dtype), ok,
              "JSON %s %s" % (a.shape, a.dtype))
    # the zip itself: stored members, CRCs right, each member np.save's bytes
    zf = zipfile.ZipFile(io.BytesIO(raw))
    stored = all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    check("%s: stored, CRC-32 right" % name, stored and zf.testzip() is None)
    differ = []
    for info in zf.infolist():
        buf = io.BytesIO()
        np.save(buf, z[info.filename[:-4]], allow_pickle=False)
        if zf.read(info) != buf.getvalue():
            differ.append(info.filename)
    check("%s: members as np.save writes them" % name, not differ, ", ".join(differ))


def check_compressed(name, raw, craw, back):
    """--compress's archive against the stored one of the same run."""
    z, c = np.load(io.BytesIO(raw), allow_pickle=False), np.load(io.BytesIO(craw),
                                                                  allow_pickle=False)
    check("%s --compress: np.load gives the stored archive's arrays" % name,
          z.files == c.files and all(z[k].dtype == c[k].dtype and z[k].shape == c[k].shape and
                                     z[k].tobytes() == c[k].tobytes() for k in z.files))
    zs, zc = zipfile.ZipFile(io.BytesIO(raw)), zipfile.ZipFile(io.BytesIO(craw))
    infos = zc.infolist()
    check("%s --compress: every member deflated, CRC-32 right" % name,
          infos and all(i.compress_type == zipfile.ZIP_DEFLATED and i.flag_bits & 8
                        for i in infos) and zc.testzip() is None,
          repr([(i.filename, i.compress_type, i.flag_bits) for i in infos]))
    differ = []
    for i in infos:
        data = zs.read(i.filename)
        # the member's deflated bytes: after its local header (30 bytes, name, extra)
        nlen, xlen = int.from_bytes(craw[i.header_offset + 26:i.header_offset + 28], "little"), \
            int.from_bytes(craw[i.header_offset + 28:i.header_offset + 30], "little")
        start = i.header_offset + 30 + nlen + xlen
        co = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        if zc.read(i) != data or craw[start:start + i.compress_size] != co.compress(data) + \
                co.flush():
            differ.append(i.filename)
    check("%s --compress: the stored bytes, deflated as np.savez_compressed does" % name,
          not differ, ", ".join(differ))
    check("%s --compress: read back as -x like the stored archive" % name,
          back[0].returncode == back[1].returncode and back[0].stdout == back[1].stdout and
          back[0].stderr.replace(b"run.npz", b"c.npz") == back[1].stderr,
          "%r / %r" % (back[0].stderr[:200], back[1].stderr[:200]))


def check_zip64(zip_test):
    """tests/zip_test writes a small archive with and without the ZIP64
    records zip.c writes past 4 GiB (forced, as zipfile's force_zip64):
    zipfile and np.load must read both alike, the forced one through its
    ZIP64 fields (every size and offset in the central directory 0xffffffff,
    a ZIP64 end record that the locator points to)."""
    import struct
    want = {"a": np.array([[1, 2, 3], [4, 5.5, -np.inf]]),
            "b": np.array([[[0.5, -1, 2], [0.25, 8, -3]], [[1, 2, 3], [4, 5.5, -np.inf]]],
                          dtype=np.float32),
            "s": np.array(["x", "\u00fcn\u00ef"]), "m": np.array("hello")}
    with tempfile.TemporaryDirectory(prefix="mha-zip-") as tmp:
        for mode in ("plain", "force", "plain-deflate", "force-deflate"):
            path = os.path.join(tmp, mode + ".npz")
            subprocess.run([zip_test, path, mode], check=True, timeout=60)
            with open(path, "rb") as f:
                raw = f.read()
            zf = zipfile.ZipFile(io.BytesIO(raw))
            z = np.load(io.BytesIO(raw), allow_pickle=False)
            ok = zf.testzip() is None and sorted(z.files) == sorted(want) and all(
                z[k].dtype == v.dtype and same_bits(z[k], v) if v.dtype.kind == "f"
                else z[k].dtype.kind == "U" and z[k].tolist() == v.tolist()
                for k, v in want.items()) and all(
                (i.compress_type == zipfile.ZIP_DEFLATED) == mode.endswith("-deflate")
                for i in zf.infolist())
            check("zip_test %s: zipfile and np.load read it" % mode, ok)
            # the central directory's fields, as written
            fields = []
            at = raw.find(b"PK\x01\x02")
            while at >= 0:
                csize, usize = struct.unpack_from("<II", raw, at + 20)
                offset, = struct.unpack_from("<I", raw, at + 42)
                fields += [csize, usize, offset]
                at = raw.find(b"PK\x01\x02", at + 4)
            loc = raw.rfind(b"PK\x06\x07")
            if mode.startswith("force"):
                record = struct.unpack_from("<Q", raw, loc + 8)[0] if loc >= 0 else -1
                ok = len(fields) == 12 and all(v == 0xffffffff for v in fields) and \
                    raw[record:record + 4] == b"PK\x06\x06" and \
                    [i.header_offset for i in zf.infolist()][0] == 0
            else:
                ok = len(fields) == 12 and 0xffffffff not in fields and loc < 0
            check("zip_test %s: ZIP64 records %s" % (mode, "there" if mode.startswith("force")
                                                       else "absent"), ok, repr(fields))


def main():
    global MHA
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: npz_check.py MHA [ZIP_TEST]")
    MHA = os.path.abspath(sys.argv[1])
    cases = [
        ("one-head", ["-x", "data/x.json"]),
        ("two-heads-wo-causal", ["-x", "data/x.json", "-w", "data/w-full.json", "--heads", "2",
                                 "--causal"]),
        ("gqa", ["-x", "data/x.json", "-w", "data/w-gqa.json", "--heads", "2",
                 "--kv-heads", "1"]),
        ("cross-tokens", ["-x", "data/x.json", "--kv", "data/x2.json", "--tokens", "a b c",
                          "--kv-tokens", "k1 k2"]),
        ("direct-qkv", ["--q", "data/q-ln3.json", "--k", "data/k-ln3.json",
                        "--v", "data/v-ln3.json"]),
        ("mask-per-head-softcap", ["-x", "data/x.json", "--heads", "2", "--mask",
                                   "data/mask-heads.json", "--softcap", "0.5"]),
        ("rope", ["-x", "data/x4.json", "--heads", "2", "--rope", "half", "--causal"]),
        ("batch-mask", ["-x", "data/batch/x.json", "--heads", "2", "--mask",
                        "data/batch/mask-b2.json", "--tokens", "a b c"]),
        ("batch-sequence", ["-x", "data/batch/x.json", "--heads", "2", "--sequence", "2"]),
    ]
    for name, args in cases:
        check_run(name, args)
    check_run("f32", ["-x", "data/x4.json", "--heads", "2", "--dtype", "f32"], f32=True)
    if len(sys.argv) == 3:
        check_zip64(os.path.abspath(sys.argv[2]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

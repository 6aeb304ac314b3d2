#!/usr/bin/env python3
"""npz_read_check.py MHA NPZ_TEST [ZIP_TEST]: mha's .npz reader against NumPy and zlib.

- npz_inflate (engine/read/deflated.c: libdeflate, zlib for a refused stream) on
  raw deflate streams made by Python's zlib:
  stored blocks (level 0), fixed Huffman (Z_FIXED), dynamic Huffman (the
  default, Z_HUFFMAN_ONLY, Z_RLE), each block type seen in the streams
  (BTYPE of the first block), on empty, short, random and repetitive data,
  and long runs (distance 1, overlapping copies); a stream cut short, a
  size too small or too large refused;
- archives written by np.savez and np.savez_compressed (float64, float32,
  float16, integers, bool; 1-D to 3-D; C and Fortran order; 0-d and 1-d
  unicode text with non-ASCII and control characters) read back through
  tests/npz_test and compared bit for bit with np.load;
- an archive with data descriptors (zipfile writing to a stream that
  cannot seek) and one with ZIP64 records (tests/zip_test force) read;
- mha's own -o run.npz read back: meta is the JSON output's meta, tokens
  the JSON's tokens, output its output;
- mha forward with -x x.npz and -w weights.npz (stored and deflated)
  prints what it prints with the same arrays as JSON, byte for byte;
- large ones: a member from 2 MiB, inflated into a mapping its matrix then
  keeps (read_npy_take), float64 and float32 kept by --dtype f32, and the
  members it must copy (float32 widened, a header that leaves the values
  unaligned); archives from 1 MiB mapped, not read (input_map): the
  values read are the member's bit for bit, a nan in one is named by its
  element, a truncated archive is refused.

Prints one line per check and ends with 'N passed, N failed'.
"""
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

import numpy as np

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok %s" % name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, ": " + detail if detail else ""))


def raw_deflate(data, level=6, strategy=zlib.Z_DEFAULT_STRATEGY):
    c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, strategy)
    return c.compress(data) + c.flush()


def inflate(tool, stream, size):
    r = subprocess.run([tool, "inflate", str(size)], input=stream, capture_output=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


def check_inflate(tool):
    rng = np.random.default_rng(7)
    datas = {
        "empty": b"",
        "one": b"a",
        "text": b"the quick brown fox jumps over the lazy dog. " * 400,
        "random": rng.integers(0, 256, 70000, dtype=np.uint8).tobytes(),
        "abc": bytes(rng.choice(np.frombuffer(b"abc", np.uint8), 60000)),
        "run": b"\0" * 100000 + b"x" + b"\0" * 5,
        "floats": np.linspace(0, 1, 5000).tobytes(),
    }
    kinds = {
        "stored": (0, zlib.Z_DEFAULT_STRATEGY, 0),
        "fixed": (9, zlib.Z_FIXED, 1),
        "dynamic": (6, zlib.Z_DEFAULT_STRATEGY, 2),
        "huffman-only": (9, zlib.Z_HUFFMAN_ONLY, 2),
        "rle": (9, zlib.Z_RLE, 2),
    }
    seen = set()
    for dname, data in datas.items():
        for kname, (level, strategy, btype) in kinds.items():
            z = raw_deflate(data, level, strategy)
            first = (z[0] >> 1) & 3
            seen.add(first)
            rc, out, err = inflate(tool, z, len(data))
            check("inflate %s %s (block type %d)" % (kname, dname, first),
                  rc == 0 and out == data, "exit %d, %s" % (rc, err.strip()))
            if data:
                rc, out, err = inflate(tool, z, len(data) - 1)
                check("inflate %s %s: one byte less declared refused" % (kname, dname),
                      rc == 1 and "past its declared size" in err, err.strip())
                rc, out, err = inflate(tool, z, len(data) + 1)
                check("inflate %s %s: one byte more declared refused" % (kname, dname),
                      rc == 1 and "fewer bytes" in err, err.strip())
                rc, out, err = inflate(tool, z[:len(z) // 2], len(data))
                check("inflate %s %s: cut short refused" % (kname, dname),
                      rc == 1 and err.strip() != "", err.strip())
    check("inflate: all three block types met", seen == {0, 1, 2}, str(sorted(seen)))
    # hand-made streams: a fixed block whose first copy reaches before the start;
    # a dynamic block with an over-subscribed code-length code; type 3
    bad = {
        # BFINAL=1, BTYPE=01, then length symbol 257 (0000001) and distance 0 (00000):
        # a copy of 3 bytes from 1 back, with nothing written yet
        "distance before the start": (bytes([0x03, 0x02, 0x00]), 3,
                                      "past the start"),
        "reserved block type": (bytes([0x07]), 1, "reserved type 3"),
        # BTYPE=10, HLIT=0, HDIST=0, HCLEN=15 (19 lengths) all 1 bit: over-subscribed
        "over-subscribed code": (bytes([0x05, 0x00, 0x0f]) + bytes([0x49, 0x92, 0x24, 0x49,
                                                                     0x92, 0x24, 0x49, 0x02]),
                                 1, "over-subscribed"),
        # two code-length codes of 2 bits: incomplete
        "incomplete code": (bytes([0x05, 0x00, 0x00, 0x90, 0x04]), 1, "incomplete"),
        "stored length and complement disagree": (bytes([0x01, 0x02, 0x00, 0x00, 0x00, 0x61,
                                                          0x62]), 2, "complement"),
    }
    for name, (stream, size, want) in bad.items():
        rc, out, err = inflate(tool, stream, size)
        check("inflate refuses: %s" % name, rc == 1 and want in err, err.strip())


def dump(tool, path, members):
    """What npz_test prints for members {name: 'num'|'text'}: {name: value}."""
    r = subprocess.run([tool, path] + ["%s:%s" % (n, k) for n, k in members.items()],
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode(errors="replace"))
    lines = r.stdout.decode().split("\n")
    order = lines[0].split()[1:]
    got, i = {}, 1
    while i < len(lines) and lines[i]:
        head = lines[i].split(" ")
        name, kind = head[0], head[1]
        if kind == "num":
            rank = int(head[2])
            dims = tuple(int(d) for d in head[3:3 + rank])
            n = int(np.prod(dims))
            bits = [int(h, 16) for h in lines[i + 1:i + 1 + n]]
            got[name] = (np.array(bits, dtype=np.uint64).view(np.float64).reshape(dims),
                         "bool" in head[3 + rank:])
            i += 1 + n
        else:
            n = int(head[2])
            got[name] = [bytes.fromhex(h).decode() for h in lines[i + 1:i + 1 + n]]
            i += 1 + n
    return order, got


def same_bits(a, b):
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def check_numpy_archives(tool, tmp):
    rng = np.random.default_rng(11)
    arrays = {
        "f64_1d": rng.standard_normal(7),
        "f64_2d": rng.standard_normal((5, 3)),
        "f64_3d": rng.standard_normal((2, 3, 4)),
        "f32_2d": rng.standard_normal((4, 6)).astype(np.float32),
        "f16_3d": rng.standard_normal((3, 2, 2)).astype(np.float16),
        "big_endian": rng.standard_normal((3, 3)).astype(">f8"),
        "fortran": np.asfortranarray(rng.standard_normal((4, 5))),
        "fortran_3d": np.asfortranarray(rng.standard_normal((2, 3, 4)).astype(np.float32)),
        "int32": rng.integers(-1000, 1000, (3, 4)).astype(np.int32),
        "uint8": rng.integers(0, 255, 9).astype(np.uint8),
        "mask": rng.integers(0, 2, (3, 3)).astype(bool),
        "special": np.array([[-np.inf, np.inf, 0.0, -0.0], [5e-324, 1e308, np.nan, 1.0]]),
    }
    texts = {
        "meta": np.array('{"a": "b\u00fcn\u00ef \u4e2d", "c": [1, 2]}'),
        "tokens": np.array(["The", "b\u00e4r", "\u4e2d\u6587", "esc\x1b[31m", "tab\there", "\U0001f600"]),
        "empty_text": np.array(["", "x"]),
    }
    for save in ("savez", "savez_compressed"):
        path = os.path.join(tmp, "np-%s.npz" % save)
        getattr(np, save)(path, **arrays, **texts)
        want = np.load(path, allow_pickle=False)
        kinds = {k: "num" for k in arrays}
        kinds.update({k: "text" for k in texts})
        try:
            order, got = dump(tool, path, kinds)
        except RuntimeError as e:
            check("np.%s read" % save, False, str(e))
            continue
        check("np.%s: members in the archive's order" % save, order == list(want.keys()),
              "%s vs %s" % (order, list(want.keys())))
        for k in arrays:
            v, is_bool = got[k]
            check("np.%s: %s %s %s equal bit for bit" % (save, k, arrays[k].dtype.str,
                                                        arrays[k].shape),
                  same_bits(v, want[k].astype(np.float64)) and is_bool == (want[k].dtype == bool))
        for k in texts:
            w = want[k]
            w = [str(w)] if w.ndim == 0 else [str(s) for s in w]
            check("np.%s: text %s equal" % (save, k), got[k] == w, "%r vs %r" % (got[k], w))
    # Fortran order through mha forward -x: the same as C order
    x = rng.standard_normal((4, 6))
    np.savez(os.path.join(tmp, "xf.npz"), X=np.asfortranarray(x))
    np.savez(os.path.join(tmp, "xc.npz"), X=x)
    w = {k: rng.standard_normal((6, 6)).tolist() for k in ("W_Q", "W_K", "W_V")}
    with open(os.path.join(tmp, "w.json"), "w") as fp:
        json.dump(w, fp)
    outs = [mha(["-x", os.path.join(tmp, n), "-w", os.path.join(tmp, "w.json"), "--heads", "2",
                 "-p", "all", "-f", "json"]) for n in ("xf.npz", "xc.npz")]
    check("-x: a Fortran-order member reads as C order", outs[0] == outs[1])


def mha(args, cwd=None):
    r = subprocess.run([MHA, "forward"] + args, capture_output=True, timeout=60, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError("mha %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r.stdout


def check_descriptors_zip64(tool, zip_test, tmp):
    class Stream(io.RawIOBase):
        """A file that cannot seek: zipfile writes data descriptors (flag bit 3)."""
        def __init__(self):
            self.buf = bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.buf += b
            return len(b)

    a = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        s = Stream()
        with zipfile.ZipFile(s, "w", method) as z:
            with z.open("a.npy", "w") as m:
                np.lib.format.write_array(m, a)
        path = os.path.join(tmp, "descr-%d.npz" % method)
        with open(path, "wb") as fp:
            fp.write(bytes(s.buf))
        flags = struct.unpack("<H", bytes(s.buf[6:8]))[0]
        try:
            _, got = dump(tool, path, {"a": "num"})
            check("data descriptor (flag bit 3: %s), method %d read" % (bool(flags & 8), method),
                  flags & 8 and same_bits(got["a"][0], a))
        except RuntimeError as e:
            check("data descriptor, method %d read" % method, False, str(e))
    for mode in ("force", "force-deflate") if zip_test else ():
        path = os.path.join(tmp, "z64-%s.npz" % mode)
        subprocess.run([zip_test, path, mode], check=True)
        want = np.load(path, allow_pickle=False)
        _, got = dump(tool, path, {"a": "num", "b": "num", "s": "text", "m": "text"})
        check("ZIP64 records (zip_test %s): numbers" % mode,
              same_bits(got["a"][0], want["a"]) and same_bits(got["b"][0], want["b"]))
        check("ZIP64 records (zip_test %s): text" % mode,
              got["s"] == [str(t) for t in want["s"]] and got["m"] == [str(want["m"])])


def check_own_output(tool, tmp):
    sample = os.path.join(TOP, "samples", "two-head-causal")
    args = ["-x", os.path.join(sample, "x.json"), "-w", os.path.join(sample, "weights.json"),
            "--heads", "2", "-p", "all", "--tokens", "The b\u00e4r eats \x1b[31m"]
    js = json.loads(mha(args + ["-f", "json"]))
    path = os.path.join(tmp, "run.npz")
    mha(args + ["-o", path])
    order, got = dump(tool, path, {"meta": "text", "tokens": "text", "output": "num",
                                   "heads.softmax": "num"})
    check("-o run.npz: members", "meta" in order and "output" in order, str(order))
    check("-o run.npz: meta read back is the JSON's meta",
          json.loads(got["meta"][0]) == js["meta"])
    check("-o run.npz: tokens read back", got["tokens"] == js.get("tokens"),
          "%r vs %r" % (got["tokens"], js.get("tokens")))
    check("-o run.npz: output read back bit for bit",
          same_bits(got["output"][0], np.array(js["output"], dtype=np.float64)))
    want = np.load(path)["heads.softmax"]
    check("-o run.npz: heads.softmax read back bit for bit",
          same_bits(got["heads.softmax"][0], want))
    # -x run.npz: the "output" member, as -x run.json takes the JSON's "output"
    jpath = os.path.join(tmp, "run.json")
    with open(jpath, "w") as fp:
        json.dump(js, fp)
    more = ["-w", args[3], "--heads", "2", "-f", "json"]
    check("-x run.npz reads its output like -x run.json",
          mha(["-x", path] + more) == mha(["-x", jpath] + more))


def check_weights(tmp):
    sample = os.path.join(TOP, "samples", "two-head-causal")
    with open(os.path.join(sample, "weights.json")) as fp:
        w = json.load(fp)
    rng = np.random.default_rng(3)
    w["W_O"] = rng.standard_normal((len(w["W_Q"][0]), len(w["W_Q"][0]))).tolist()
    w["b_Q"] = rng.standard_normal(len(w["W_Q"][0])).tolist()
    wj = os.path.join(tmp, "wfull.json")
    with open(wj, "w") as fp:
        json.dump(w, fp)
    base = ["-x", os.path.join(sample, "x.json"), "--heads", "2", "--causal", "-p", "all",
            "-f", "json"]
    want = mha(base + ["-w", wj])
    for save in ("savez", "savez_compressed"):
        path = os.path.join(tmp, "w-%s.npz" % save)
        getattr(np, save)(path, **{k: np.array(v) for k, v in w.items()})
        check("-w weights.npz (np.%s) runs as -w weights.json" % save,
              mha(base + ["-w", path]) == want)
    # --wq FILE.npz: the member W_Q, or the only member
    path = os.path.join(tmp, "wq-only.npz")
    np.savez(path, anything=np.array(w["W_Q"]))
    check("--wq FILE.npz: its only member", mha(base + ["-w", wj, "--wq", path]) == want)


def npy_bytes(a, pad_to=64):
    """a as a version 1.0 .npy file whose header (magic to newline) is
    pad_to-aligned: np.save's 64, or 4 so that the values lie unaligned"""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (a.dtype.str, a.shape)
    n = len(d) + 1
    d += " " * ((pad_to - (10 + n) % pad_to) % pad_to) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + a.tobytes()


def check_large(tmp):
    rng = np.random.default_rng(5)
    kv = rng.standard_normal((2048, 160))  # 2.5 MiB
    x = os.path.join(tmp, "x1.json")
    with open(x, "w") as fp:
        json.dump({"X": rng.standard_normal((1, 160)).tolist()}, fp)

    def k_step(path, *extra, step="k"):
        out = os.path.join(tmp, "k.npy")
        mha(["-x", x, "--kv", path, "-p", step, "-o", out] + list(extra))
        return np.load(out)

    f32 = rng.standard_normal((4096, 160)).astype(np.float32)  # 2.5 MiB too
    np.savez_compressed(os.path.join(tmp, "kv64.npz"), X=kv)
    np.savez(os.path.join(tmp, "kv64s.npz"), X=kv)
    np.savez_compressed(os.path.join(tmp, "kv32.npz"), X=f32)
    with zipfile.ZipFile(os.path.join(tmp, "kvodd.npz"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("X.npy", npy_bytes(kv, 4))
    np.save(os.path.join(tmp, "kv32.npy"), f32)
    for name, want in (("kv64.npz", kv), ("kv64s.npz", kv), ("kv32.npz", f32), ("kvodd.npz", kv)):
        got = k_step(os.path.join(tmp, name))
        check("--kv %s (a %.1f MiB member): K is the member bit for bit" %
              (name, want.nbytes / 2**20), same_bits(got, want.astype(np.float64)))
    # float32 kept as floats: the output of --dtype f32 is the .npy file's
    a = k_step(os.path.join(tmp, "kv32.npz"), "--dtype", "f32", step="output")
    b = k_step(os.path.join(tmp, "kv32.npy"), "--dtype", "f32", step="output")
    check("--kv kv32.npz --dtype f32: the output as from the same .npy", a.dtype == b.dtype and
          a.tobytes() == b.tobytes(), "%s %s" % (a.dtype, b.dtype))
    # a nan in the last value of a large deflated member: named by its element
    bad = kv.copy()
    bad[-1, -1] = np.nan
    path = os.path.join(tmp, "nan.npz")
    np.savez_compressed(path, X=bad)
    r = subprocess.run([MHA, "forward", "-x", x, "--kv", path], capture_output=True, timeout=60)
    check("a nan in a large deflated member: refused, its element named",
          r.returncode == 1 and b"X_kv[2047][159] is nan" in r.stderr, r.stderr.decode())
    # a large archive cut short: refused in one line, whether mapped or read
    data = open(os.path.join(tmp, "kv64.npz"), "rb").read()
    path = os.path.join(tmp, "cut.npz")
    with open(path, "wb") as fp:
        fp.write(data[:len(data) - 100])
    r = subprocess.run([MHA, "forward", "-x", x, "--kv", path], capture_output=True, timeout=60)
    check("a large archive cut short: refused in one line",
          r.returncode == 1 and r.stderr.count(b"\n") == 1 and b"cut.npz" in r.stderr,
          r.stderr.decode())


def main():
    global MHA
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    MHA = os.path.abspath(sys.argv[1])
    tool = os.path.abspath(sys.argv[2])
    zip_test = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
    check_inflate(tool)
    with tempfile.TemporaryDirectory() as tmp:
        check_numpy_archives(tool, tmp)
        check_descriptors_zip64(tool, zip_test, tmp)
        check_own_output(tool, tmp)
        check_weights(tmp)
        check_large(tmp)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

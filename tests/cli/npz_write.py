#!/usr/bin/env python3
"""npz_write.py KIND OUT: a .npz archive, good or damaged, for the npz- CLI cases.

Built here with NumPy and zlib alone (nothing binary is committed).  Every
archive holds X, a 3x2 float64 matrix (rows 1 2 / 3 4 / 5 6), unless said:

  plain        np.savez(X=...) (also the base of the damaged ones below)
  bomb         X deflated from 64 MiB (a .npy of zeros), declared 64 MiB
  bomb-lie     the same stream, declared 1000 bytes (crc of those)
  ratio        X declared 200000 bytes uncompressed from 100 deflated bytes
  size-lie     the local header's uncompressed size differs from the central's
  stored-lie   stored, but the sizes differ (both headers agree)
  overlap      a second member whose local header lies inside X's bytes
  names        members "../../x", "a/b" and "\\x1b[31mred\\x07" (no X)
  dup          X.npy twice
  dup-stem     X and X.npy
  nul-name     a member name with a NUL byte
  bzip2        X with method 12
  encrypted    X with the encrypted flag
  truncated    the last 10 bytes cut off
  count        the end record counts 1000 members
  zip64-count  a ZIP64 end record counting 2^40 members
  zip64-bad    a ZIP64 locator pointing at nothing
  zip64        X with ZIP64 end records (good)
  crc          a data byte of X changed
  far          a fixed-Huffman stream whose first copy reaches before the start
  trailing     deflated X followed by 3 bytes inside its compressed size
  empty        an archive with no members
  not-npy      X whose bytes are not a .npy file
"""
import io
import struct
import sys
import zlib

import numpy as np


def npy(a):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, allow_pickle=False)
    return b.getvalue()


def raw_deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


class Member:
    def __init__(self, name, data, method=0, comp=None, crc=None, usize=None, flags=0,
                 local_usize=None):
        self.name = name if isinstance(name, bytes) else name.encode()
        self.data = data
        self.method = method
        self.comp = comp if comp is not None else (raw_deflate(data) if method == 8 else data)
        self.crc = crc if crc is not None else zlib.crc32(data)
        self.usize = usize if usize is not None else len(data)
        self.flags = flags
        self.local_usize = local_usize if local_usize is not None else self.usize


def local(m):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, m.flags, m.method, 0, 0x21, m.crc,
                       len(m.comp), m.local_usize & 0xFFFFFFFF, len(m.name), 0) + m.name


def central(m, offset):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, m.flags, m.method, 0, 0x21,
                       m.crc, len(m.comp), m.usize & 0xFFFFFFFF, len(m.name), 0, 0, 0, 0, 0,
                       offset) + m.name


def end(count, cd_size, cd_start):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_start, 0)


def build(members, count=None):
    out, offsets = b"", []
    for m in members:
        offsets.append(len(out))
        out += local(m) + m.comp
    cd = b"".join(central(m, o) for m, o in zip(members, offsets))
    return out + cd + end(len(members) if count is None else count, len(cd), len(out))


def main():
    kind, path = sys.argv[1], sys.argv[2]
    x = npy(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    if kind == "plain":
        np.savez(path, X=np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
        return
    if kind in ("bomb", "bomb-lie"):
        big = npy(np.zeros((2048, 4096)))
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        comp = c.compress(big) + c.flush()
        if kind == "bomb":
            m = Member("X.npy", big, 8, comp=comp)
        else:
            m = Member("X.npy", big[:1000], 8, comp=comp)
        data = build([m])
    elif kind == "ratio":
        m = Member("X.npy", x, 8, comp=b"\0" * 100, usize=200000)
        data = build([m])
    elif kind == "size-lie":
        data = build([Member("X.npy", x, local_usize=len(x) + 1)])
    elif kind == "stored-lie":
        data = build([Member("X.npy", x, usize=len(x) + 8, local_usize=len(x) + 8)])
    elif kind == "overlap":
        inner = Member("K.npy", x)
        outer = Member("X.npy", local(inner) + inner.comp)
        body = local(outer) + outer.comp
        cd = central(outer, 0) + central(inner, len(local(outer)))
        data = body + cd + end(2, len(cd), len(body))
    elif kind == "names":
        data = build([Member("../../x.npy", x), Member("a/b.npy", x),
                      Member("\x1b[31mred\x07.npy", x)])
    elif kind == "dup":
        data = build([Member("X.npy", x), Member("X.npy", x)])
    elif kind == "dup-stem":
        data = build([Member("X", x), Member("X.npy", x)])
    elif kind == "nul-name":
        data = build([Member(b"X\0.npy", x)])
    elif kind == "bzip2":
        data = build([Member("X.npy", x, 12, comp=x)])
    elif kind == "encrypted":
        data = build([Member("X.npy", x, flags=1)])
    elif kind == "truncated":
        data = build([Member("X.npy", x)])[:-10]
    elif kind == "count":
        data = build([Member("X.npy", x)], count=1000)
    elif kind in ("zip64", "zip64-count", "zip64-bad"):
        members = [Member("X.npy", x)]
        body = local(members[0]) + members[0].comp
        cd = central(members[0], 0)
        n = (1 << 40) if kind == "zip64-count" else 1
        rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(cd), len(body))
        at = len(body) + len(cd) + (1000 if kind == "zip64-bad" else 0)
        loc = struct.pack("<IIQI", 0x07064B50, 0, at, 1)
        data = body + cd + rec + loc + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF,
                                                   0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    elif kind == "crc":
        m = Member("X.npy", x)
        m.comp = m.comp[:-1] + bytes([m.comp[-1] ^ 1])
        data = build([m])
    elif kind == "far":
        data = build([Member("X.npy", x, 8, comp=bytes([0x03, 0x02, 0x00]))])
    elif kind == "trailing":
        m = Member("X.npy", x, 8)
        m.comp += b"abc"
        data = build([m])
    elif kind == "empty":
        data = end(0, 0, 0)
    elif kind == "not-npy":
        data = build([Member("X.npy", b"hello, world\n")])
    else:
        sys.exit("npz_write.py: unknown kind " + kind)
    with open(path, "wb") as fp:
        fp.write(data)


if __name__ == "__main__":
    main()

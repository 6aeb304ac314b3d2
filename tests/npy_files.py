"""npy_files.py: what npy_check.py writes and reads back: .npy files made
byte by byte (any header version, a dict text of its own, padded or not)
beside np.save's, sample arrays of each dtype, and values compared bit for
bit (NaN's payload and the sign of zero too) with mha's JSON read as
arrays."""

import io
import json

import numpy as np


# ---- making files ---------------------------------------------------------


def save(path, a, version=(1, 0)):
    """a as a .npy file the way NumPy writes it (C or Fortran order as a is)."""
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=version)
    return path


def npy_bytes(a, version=(1, 0)):
    """a as the bytes of a .npy file, as NumPy writes it."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


def raw_npy(header, data=b"", version=(1, 0), pad=True):
    """A .npy file with a header written by hand (header: the dict text)."""
    h = header.encode("latin1")
    prefix = 10 if version == (1, 0) else 12
    if pad:
        h += b" " * ((-(prefix + len(h) + 1)) % 64) + b"\n"
    size = len(h).to_bytes(2 if prefix == 10 else 4, "little")
    return b"\x93NUMPY" + bytes(version) + size + h + data


def write_bytes(path, b):
    with open(path, "wb") as f:
        f.write(b)
    return path


def dict_text(descr, shape, fortran=False):
    return "{'descr': %r, 'fortran_order': %s, 'shape': %r, }" % (descr, fortran, tuple(shape))


# ---- values ---------------------------------------------------------------


def same(a, b):
    """Equal shapes and equal values bit for bit, NaN matching NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return False, "shape %s, expected %s" % (a.shape, b.shape)
    bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    # -0.0 and 0.0 compare equal; the bits must too
    bad |= np.signbit(a) != np.signbit(b)
    if bad.any():
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return False, "at %s: %r, expected %r" % (list(i), a[i], b[i])
    return True, ""


def parse_json(out):
    # parse_int: "-0" is the double -0.0, which int() would make 0
    return json.loads(out.decode("utf-8"), parse_int=float)


def json_array(v):
    """A matrix of mha's JSON output as float64 (non-finite values are the
    strings "-inf", "inf", "nan", which float() reads)."""
    return np.vectorize(float, otypes=[float])(np.array(v, dtype=object))


def json_matrix(doc, key):
    return json_array(doc[key])


def sample(dtype, shape, rng):
    """An array of dtype with interesting values that a double holds exactly."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    if dt.kind == "f":
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 6, n)
        a[0] = -0.0
        if n > 3:
            a[3] = np.finfo(dt).tiny / 4 if dt.itemsize > 2 else 2.0 ** -24  # subnormal
        if n > 5:  # the largest float32 or float16; a float64 that X·Xᵀ survives
            a[5] = float(np.finfo(dt).max) if dt.itemsize < 8 else 1.5e150
        return a.astype(dt).reshape(shape)
    info = np.iinfo(dt)
    lo = max(int(info.min), -(2 ** 53))
    hi = min(int(info.max), 2 ** 53)
    vals = [int(v) for v in rng.integers(max(lo, -1000), min(hi, 1000) + 1, n)]
    edges = [lo, hi, 0]
    if dt.itemsize == 8:
        # beyond 2**53 but exactly a double: only zeros below 53 significant bits
        edges += [2 ** 60, 2 ** 63 - 2 ** 10] if dt.kind == "u" else [-(2 ** 63), 2 ** 62]
        if dt.kind == "u":
            edges += [2 ** 64 - 2 ** 11]
    for i, v in enumerate(edges[:n]):
        vals[i] = v
    return np.array(vals, dtype=object).astype(dt).reshape(shape)

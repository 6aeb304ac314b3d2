#!/usr/bin/env python3
"""st_write.py OUT.safetensors NAME=FILE.npy ...: the .npy arrays as one
safetensors file (Hugging Face's format: an 8-byte little-endian header
length, the JSON header, the data), written with NumPy alone, for the
--mask FILE.safetensors cases.  Each array keeps its dtype: bool -> BOOL,
int8..uint64 -> I8..U64, float16/32/64 -> F16/F32/F64.

st_write.py --damage IN OUT: IN with its last byte cut off (the header
then promises more data than the file holds)."""
import json
import struct
import sys

import numpy as np

DTYPES = {"b1": "BOOL", "i1": "I8", "i2": "I16", "i4": "I32", "i8": "I64",
          "u1": "U8", "u2": "U16", "u4": "U32", "u8": "U64",
          "f2": "F16", "f4": "F32", "f8": "F64"}


def main(argv):
    if argv[1] == "--damage":
        with open(argv[2], "rb") as f:
            data = f.read()
        with open(argv[3], "wb") as f:
            f.write(data[:-1])
        return 0
    header, blobs, at = {}, [], 0
    for arg in argv[2:]:
        name, path = arg.split("=", 1)
        a = np.load(path)
        kind = a.dtype.kind + str(a.dtype.itemsize)
        raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[kind], "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

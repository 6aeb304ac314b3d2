"""lowp_save.py IN.npz OUT TYPE: every array of IN.npz (but meta) saved in
TYPE (BF16, F16 or F32) for the compare cases: OUT.safetensors holds them
all, OUT/ (a folder) one .npy each (F16 and F32 only: .npy has no
bfloat16).  Written with NumPy alone; a value that TYPE does not hold is
rounded to nearest, ties to even."""
import json
import os
import struct
import sys

import numpy as np


def bf16_words(a):
    """float64 to bfloat16's 16 bits, round to nearest even"""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def main():
    src, out, kind = sys.argv[1:4]
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files if z[k].dtype.kind == "f"}  # not meta, tokens
    if out.endswith(".safetensors"):
        header, blobs, at = {}, [], 0
        for name, a in arrays.items():
            data = (bf16_words(a) if kind == "BF16" else
                    a.astype(np.float16 if kind == "F16" else np.float32)).tobytes()
            header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [at, at + len(data)]}
            blobs.append(data)
            at += len(data)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(out, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    else:
        os.makedirs(out, exist_ok=True)
        for name, a in arrays.items():
            np.save(os.path.join(out, name + ".npy"), a.astype(np.float16 if kind == "F16" else np.float32))


main()

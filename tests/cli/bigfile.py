#!/usr/bin/env python3
"""bigfile.py npy|npy4|json|csv ROWS COLS: a ROWS x COLS matrix of zeros on
standard output, written as it goes (never held whole), for the tests that
feed mha more than --max-memory allows (npy: float64, npy4: float32).  A
reader that stops early closes
the pipe: that ends the writing quietly."""
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
kind, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
if kind in ("npy", "npy4"):
    size = 8 if kind == "npy" else 4
    head = "{'descr': '<f%d', 'fortran_order': False, 'shape': (%d, %d), }" % (size, rows, cols)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    out.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
    row = b"\0" * (size * cols)
elif kind == "json":
    out.write(b"[")
    row = ("[" + ",".join(["0"] * cols) + "]").encode()
else:
    row = (",".join(["0"] * cols) + "\n").encode()
for i in range(rows):
    if kind == "json" and i:
        out.write(b",\n")
    out.write(row)
if kind == "json":
    out.write(b"]\n")

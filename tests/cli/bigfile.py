#!/usr/bin/env python3
"""bigfile.py npy|json|csv ROWS COLS: a ROWS x COLS matrix of zeros on
standard output, written as it goes (never held whole), for the tests that
feed mha more than --max-memory allows.  A reader that stops early closes
the pipe: that ends the writing quietly."""
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
kind, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
if kind == "npy":
    head = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    out.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
    row = b"\0" * (8 * cols)
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

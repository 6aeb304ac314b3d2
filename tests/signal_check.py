#!/usr/bin/env python3
"""signal_check.py [--tokens N] MHA [WORD...]: a run told to stop stops.

Starts `MHA forward` on N tokens (default 65536: seconds of work on two
threads, far more under an emulator), with two threads, waits until it is
computing, sends it SIGTERM, and in a second run SIGINT, and checks that
each run ended within a second of that signal, of that signal (Python's
returncode -15 and -2: the shell's 143 and 130), leaving neither its output
nor a temporary file beside it.  MHA may be a command of several words
(`qemu-aarch64 path/to/mha`: make check-arm64).  Issue 37: a run starting
its threads once blocked every signal, and under qemu-aarch64 SIGTERM then
waited forever.  Only the standard library: the input is written by hand.
"""
import array
import math
import os
import signal
import subprocess
import sys
import tempfile
import time


def write_x(path, n, d=64):
    """X (n, d) float32 .npy of small smooth values"""
    head = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (n, d)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    vals = array.array("f", (math.sin(0.001 * i) for i in range(n * d)))
    if sys.byteorder != "little":
        vals.byteswap()
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head.encode())
        vals.tofile(f)


def default_signals():
    """the child's SIGINT and SIGTERM as a terminal gives them: a test run in
    the background (`sh .ci/run &`) inherits SIGINT ignored, and mha keeps a
    signal its caller ignored (outfile.c), so the run would simply go on"""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main():
    args = sys.argv[1:]
    n = 65536
    if args[:1] == ["--tokens"]:
        n = int(args[1])
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="mha-signal-") as tmp:
        x = os.path.join(tmp, "x.npy")
        write_x(x, n)
        for sig in (signal.SIGTERM, signal.SIGINT):
            name = signal.Signals(sig).name
            out = os.path.join(tmp, "out.npy")
            p = subprocess.Popen(args + ["forward", "-x", x, "--heads", "1", "--dtype", "f32",
                                         "--threads", "2", "--quiet", "-o", out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 preexec_fn=default_signals)
            time.sleep(1.5)
            if p.poll() is not None:
                print("signal_check: %s: the run had already ended (%s): give it more tokens"
                      % (name, p.stderr.read().decode().strip()))
                failed = 1
                continue
            t0 = time.monotonic()
            p.send_signal(sig)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                print("signal_check: %s: still running 5 s after the signal" % name)
                failed = 1
                continue
            took = time.monotonic() - t0
            left = sorted(f for f in os.listdir(tmp) if f != "x.npy")
            if p.returncode != -sig:
                print("signal_check: %s: return code %d, want %d (%s)" %
                      (name, p.returncode, -sig, p.stderr.read().decode().strip()))
                failed = 1
            elif took > 1.0:
                print("signal_check: %s: ended %.2f s after the signal, want within 1 s" %
                      (name, took))
                failed = 1
            elif left:
                print("signal_check: %s: left behind: %s" % (name, " ".join(left)))
                failed = 1
            else:
                print("signal_check: %s stopped the run within %.0f ms, of that signal, "
                      "nothing left behind" % (name, took * 1000))
            p.stderr.close()
    return failed


if __name__ == "__main__":
    sys.exit(main())

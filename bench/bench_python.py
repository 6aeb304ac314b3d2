#!/usr/bin/env python3
"""bench_python.py [--quick] [--append FILE] MHA: what the Python package costs.

Issue 35 wants mha.forward called from NumPy arrays at most 15% dearer than
'mha forward' on the same .npy files.  For n tokens, d_model 512, 8 heads,
causal, it times in turns (so that a drifting machine moves both alike):

  command   mha forward -x x.npy -w w.npz -o out.npy, the files on disk
            beforehand (the page cache warm), as a script runs it
  python    mha.forward(x, w, heads=8, causal=True) from arrays in memory:
            their .npy and .npz written, the same run, the result read back

and prints the median of each and their ratio.  RUNS rounds after a
warm-up; --quick: fewer rounds, smaller n.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tee

D, H = 512, 8


def main():
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    exe = os.path.abspath(args[0])
    os.environ["MHA_EXECUTABLE"] = exe
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    import mha
    runs = 3 if quick else 9
    ns = [1024] if quick else [2048, 4096]
    print("| n | command (s) | mha.forward (s) | mha.forward / command |")
    print("| ---: | ---: | ---: | ---: |")
    same = []
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for n in ns:
            x = rng.standard_normal((n, D))
            w = {k: rng.standard_normal((D, D)) / 23 for k in ("W_Q", "W_K", "W_V", "W_O")}
            np.save(os.path.join(tmp, "x.npy"), x)
            np.savez(os.path.join(tmp, "w.npz"), **w)
            cmd = [exe, "forward", "-x", "x.npy", "-w", "w.npz", "--heads", str(H), "--causal", "-o", "out.npy"]
            times = {"command": [], "python": []}

            def command():
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=tmp, check=True)
                return time.perf_counter() - t0

            def python():
                t0 = time.perf_counter()
                r = mha.forward(x, w, heads=H, causal=True)
                t = time.perf_counter() - t0
                assert r.output.shape == (n, D)
                return t
            command()
            python()  # warm-ups: the page cache, the help the package reads once
            for _ in range(runs):
                times["command"].append(command())
                times["python"].append(python())
            c = statistics.median(times["command"])
            p = statistics.median(times["python"])
            print("| %d | %.3f | %.3f | %.3f |" % (n, c, p, p / c))
            sys.stdout.flush()
            same.append((n, np.array_equal(np.load(os.path.join(tmp, "out.npy")),
                                           mha.forward(x, w, heads=H, causal=True).output)))
    print("\nThe same bits both ways: %s." % ", ".join("n %d %s" % (n, "yes" if ok else "NO") for n, ok in same))
    print("\nThe median of %d runs each, taken in turns (%d processors), d_model %d, %d heads, causal; "
          "the package's files on %s.  Issue 35's bound: a ratio of at most 1.15."
          % (runs, os.cpu_count() or 1, D, H, "/dev/shm" if os.path.isdir("/dev/shm") else "the temporary directory"))
    tee.finish(append, "The Python package's cost (bench_python.py, the same session)")


if __name__ == "__main__":
    main()

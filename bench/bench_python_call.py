#!/usr/bin/env python3
"""bench_python_call.py [--quick] [--append FILE] MHA: one small call from Python.

Issue 53 wants one call at n=8 at most 100 us (median), in process.  It
times mha.testing.assert_attention_close({"output": ...}, x, weights,
heads=2) at n=8, d_model 16, with the package's two ways one after the
other, each warmed up first (a program started between two calls would
cool the caches the next one finds): in process (the engine, libmhe, by ctypes: backend() "library") and
by the program (the subprocess path, as before), and prints the medians
and their ratio.  Then mha.compare of the same.  --quick: fewer calls.
"""
import os
import statistics
import sys
import time

import numpy as np

import tee


def main():
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    os.environ["MHA_EXECUTABLE"] = os.path.abspath(args[0])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    import mha
    import mha.testing
    if mha.backend() != "library":
        print("bench_python_call: the engine's library is not loaded (%s): nothing to time"
              % mha._lib.why_not())
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16))
    w = {k: rng.standard_normal((16, 16)) for k in ("W_Q", "W_K", "W_V", "W_O")}
    out = mha.forward(x, w, heads=2).output
    lib = mha._lib._lib
    rounds = 20 if quick else 100
    calls = {"assert_attention_close": lambda: mha.testing.assert_attention_close(
                 {"output": out}, x=x, weights=w, heads=2),
             "compare": lambda: mha.compare({"output": out}, x=x, weights=w, heads=2).agree}
    print("| n=8, d_model 16, 2 heads | in process (us) | program (us) | program / in process |")
    print("| --- | ---: | ---: | ---: |")
    for name, call in calls.items():
        times = {"library": [], "program": []}
        for way in ("library", "program"):
            mha._lib._lib = lib if way == "library" else None
            for _ in range(5):
                call()
            for _ in range(rounds if way == "library" else max(rounds // 5, 10)):
                t0 = time.perf_counter()
                call()
                times[way].append(time.perf_counter() - t0)
        mha._lib._lib = lib
        a, b = statistics.median(times["library"]) * 1e6, statistics.median(times["program"]) * 1e6
        print("| %s | %.0f | %.0f | %.0fx |" % (name, a, b, b / a))
    print("\n(medians: %d calls in process, %d by the program; in process: %s)"
          % (rounds, max(rounds // 5, 10), mha._lib.loaded()))
    tee.finish(append, "One small call from Python, in process and by the program "
               "(bench_python_call.py, the same session)")


if __name__ == "__main__":
    main()

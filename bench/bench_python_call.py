#!/usr/bin/env python3
"""bench_python_call.py [--quick] [--append FILE] BENCH_MHA MHA: calls from Python in process.

Issue 53 wants one call at n=8 at most 100 us (median), in process, and
one at n=2048 within 5% of the library's own time.  First it times, at
n=8, d_model 16, 2 heads, mha.forward, mha.testing.assert_attention_close
({"output": ...}) and mha.compare of the same, each warmed up first: all
of them in process (the engine, libmhe, by ctypes: backend() "library"),
then all by the program (the subprocess path, as before: a program
started between two calls would cool the caches the next one finds), and
prints the medians and their ratio.

Then mha.forward(x, weights, heads=8, causal=...) of n=2048 tokens,
d_model 512, in process, beside libmha's own forward of the same shapes
(bench_mha: inside a process of its own, float64, as many threads), in
turns: ROUNDS rounds, each running bench_mha once (the median of its 5
calls) and then 5 calls of mha.forward (their median); the figures are
the medians of the rounds and of their ratios.  --quick: fewer calls and
rounds, the non-causal case alone.
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
    if len(args) != 2:
        sys.exit(__doc__)
    bench_mha = os.path.abspath(args[0])
    os.environ["MHA_EXECUTABLE"] = os.path.abspath(args[1])
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
    calls = {"forward": lambda: mha.forward(x, w, heads=2).output,
             "assert_attention_close": lambda: mha.testing.assert_attention_close(
                 {"output": out}, x=x, weights=w, heads=2),
             "compare": lambda: mha.compare({"output": out}, x=x, weights=w, heads=2).agree}
    print("| n=8, d_model 16, 2 heads | in process (us) | program (us) | program / in process "
          "| in process at most 100 us |")
    print("| --- | ---: | ---: | ---: | --- |")
    # every call in process first, then by the program: a program started
    # between two calls would cool the caches the next one finds
    times = {(name, way): [] for name in calls for way in ("library", "program")}
    for way in ("library", "program"):
        mha._lib._lib = lib if way == "library" else None
        for name, call in calls.items():
            for _ in range(5):
                call()
            for _ in range(rounds if way == "library" else max(rounds // 5, 10)):
                t0 = time.perf_counter()
                call()
                times[name, way].append(time.perf_counter() - t0)
    mha._lib._lib = lib
    for name in calls:
        a = statistics.median(times[name, "library"]) * 1e6
        b = statistics.median(times[name, "program"]) * 1e6
        print("| %s | %.0f | %.0f | %.0fx | %s |" % (name, a, b, b / a, "yes" if a <= 100 else "no"))
    print("\n(medians: %d calls in process, %d by the program; in process: %s)"
          % (rounds, max(rounds // 5, 10), mha._lib.loaded()))
    large(mha, bench_mha, quick)
    tee.finish(append, "One small call from Python, in process and by the program "
               "(bench_python_call.py, the same session)")


def large(mha, bench_mha, quick):
    """n=2048 in process beside the library's own time"""
    from bench_process import in_process, D, H
    n, calls = 2048, 5
    rng = np.random.default_rng(0)
    x = rng.random((n, D)) * 2 - 1
    w = {k: (rng.random((D, D)) * 2 - 1) / 16 for k in ("W_Q", "W_K", "W_V", "W_O")}
    w.update({k: (rng.random(D) * 2 - 1) / 10 for k in ("b_Q", "b_K", "b_V", "b_O")})
    print("\n| n=2048, d_model 512, 8 heads, float64 | library (s) | mha.forward in process (s) "
          "| in process / library | within 5% |")
    print("| --- | ---: | ---: | ---: | --- |")
    for causal in ((False,) if quick else (False, True)):
        def python():
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                mha.forward(x, w, heads=H, causal=causal)
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        python()
        in_process(bench_mha, n, causal, "f64")  # warm-ups
        rounds = []
        for _ in range(3 if quick else 9):
            lib = in_process(bench_mha, n, causal, "f64")[0]
            rounds.append((lib, python()))
        lib = statistics.median(r[0] for r in rounds)
        py = statistics.median(r[1] for r in rounds)
        ratio = statistics.median(r[1] / r[0] for r in rounds)
        print("| %s | %.4f | %.4f | %.3f | %s |" % ("causal" if causal else "not causal", lib, py,
                                                    ratio, "yes" if ratio <= 1.05 else "no"))
        sys.stdout.flush()
    print("\n(%d rounds in turns: bench_mha's median of 5 calls, then mha.forward's of %d; "
          "%d processors; the medians of the rounds and of their ratios)"
          % (3 if quick else 9, calls, os.cpu_count() or 1))


if __name__ == "__main__":
    main()

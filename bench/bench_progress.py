#!/usr/bin/env python3
"""bench_progress.py [--quick] [--append FILE] MHA: what the progress bar costs.

Issue 34 wants the bar under 1% of a run.  For a forward and a backward of
n tokens (d_model 512, 8 heads, causal), read from and written to .npy
files, it times `mha forward`/`mha backward` three ways, in turns so that a
drifting machine moves all alike:

  quiet     --quiet: the library is told nobody listens and counts nothing
  terminal  standard error a pseudo-terminal, as a person sees it: the bar
            redrawn in place, ten times a second at most
  log       --progress with standard error a file: a line a tenth

and prints the median of each and its ratio to quiet.  RUNS rounds after a
warm-up; --quick: fewer rounds, smaller n.
"""
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import tee

D, H = 512, 8


def drain(fd):
    """read the pseudo-terminal until it closes, as a terminal would"""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def timed(cmd, how, tmp):
    if how == "terminal":
        master, slave = pty.openpty()
        reader = threading.Thread(target=drain, args=(master,), daemon=True)
        reader.start()
        t0 = time.perf_counter()
        subprocess.run(cmd, stderr=slave, check=True)
        t = time.perf_counter() - t0
        os.close(slave)
        reader.join(timeout=1)
        os.close(master)
        return t
    with open(os.path.join(tmp, "err.txt"), "w") as err:
        extra = ["--quiet"] if how == "quiet" else ["--progress"]
        t0 = time.perf_counter()
        subprocess.run(cmd + extra, stderr=err, check=True)
        return time.perf_counter() - t0


def main():
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    mha = os.path.abspath(args[0])
    runs = 3 if quick else 7
    cases = [("forward", 4096 if quick else 16384), ("backward", 2048 if quick else 4096)]
    print("| run | n | quiet (s) | terminal bar (s) | terminal / quiet | log lines (s) | log / quiet |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for what, n in cases:
            x = os.path.join(tmp, "x.npy")
            np.save(x, rng.standard_normal((n, D)))
            w = os.path.join(tmp, "w.npz")
            np.savez(w, W_Q=rng.standard_normal((D, D)) / 23, W_K=rng.standard_normal((D, D)) / 23,
                     W_V=rng.standard_normal((D, D)) / 23, W_O=rng.standard_normal((D, D)) / 23)
            out = os.path.join(tmp, "out.npz" if what == "backward" else "out.npy")
            cmd = [mha, what, "-x", x, "-w", w, "--heads", str(H), "--causal", "-o", out]
            times = {"quiet": [], "terminal": [], "log": []}
            timed(cmd, "quiet", tmp)  # warm-up: the files in the page cache
            for _ in range(runs):
                for how in times:
                    times[how].append(timed(cmd, how, tmp))
            q = statistics.median(times["quiet"])
            t = statistics.median(times["terminal"])
            lg = statistics.median(times["log"])
            print("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (what, n, q, t, t / q, lg, lg / q))
            sys.stdout.flush()
    print("\nThe median of %d runs each, taken in turns (%d processors).  Issue 34's bound: "
          "the bar under 1%% of the run, a ratio under 1.01 (the spread between runs of one "
          "kind is often larger)." % (runs, os.cpu_count() or 1))
    tee.finish(append, "The progress bar's cost (bench_progress.py, the same session)")


if __name__ == "__main__":
    main()

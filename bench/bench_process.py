#!/usr/bin/env python3
"""bench_process.py [--quick] [--long] BENCH_MHA MHA: the whole process against the library.

For the shapes of issue 15 (n tokens, d_model 512, 8 heads, causal or not,
float32 and float64) it times `mha forward` as a user runs it -- X and the
weights and biases read from .npy files, the output written to a .npy file,
start-up and exit included -- and, in the same run, libmha's forward pass
inside a process of its own (bench_mha: no start-up, no files).  It prints
one Markdown table: both times, their ratio and the difference in ms, and
each side's peak resident memory, beside the targets (the whole process
within 15% of the library for n >= 2048, within 5 ms at n = 512; a
tutorial-sized run, samples/worked-example's 6 tokens, under 2 ms).

The whole process is timed by hyperfine when it is installed (median of 5
runs after a warm-up), else by this script (median of 5 after a warm-up);
the library by bench_mha (median of 5 calls in one process, the first,
cold one among them), with as many threads on both sides
(`--threads`, the processors).  The peak memory of `mha forward` is its
ru_maxrss (through /usr/bin/time when installed), and its processor time
(user + system, median of 5) is printed too: on a machine others share,
the elapsed time of a whole process includes its waits for a processor,
which a process of its own running five calls mostly escapes.

--quick: n = 512 and 2048 only.  --long: also n = 131072 causal in
float32 (a 256 MiB X; about two minutes a run, so one run on each side),
whose peak memory the issue wants under 1 GiB.  The inputs are made by NumPy into a temporary directory and removed
after.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

THREADS = os.cpu_count() or 1
RUNS = 5
D, H = 512, 8
SHAPES = [(512, False), (512, True), (2048, False), (2048, True), (8192, False), (8192, True)]
QUICK = [(512, False), (2048, False), (2048, True)]
LONG = (131072, True)
HERE = os.path.dirname(os.path.abspath(__file__))


def make_inputs(tmp, n, dtype):
    """X (n, D) and W_Q..W_O (D, D), b_Q..b_O (D) as .npy files, as bench_mha fills them"""
    rng = np.random.default_rng(0)
    dt = np.float32 if dtype == "f32" else np.float64
    names = {}
    x = os.path.join(tmp, "x-%d-%s.npy" % (n, dtype))
    if not os.path.exists(x):
        np.save(x, (rng.random((n, D)) * 2 - 1).astype(dt))
    names["-x"] = x
    for w in ("q", "k", "v", "o"):
        for kind, shape, scale in (("w", (D, D), 1 / 16), ("b", (D,), 0.1)):
            path = os.path.join(tmp, "%s%s-%s.npy" % (kind, w, dtype))
            if not os.path.exists(path):
                np.save(path, ((rng.random(shape) * 2 - 1) * scale).astype(dt))
            names["--%s%s" % (kind, w)] = path
    return names


def mha_command(mha, names, dtype, causal, out):
    cmd = [mha, "forward", "--heads", str(H), "--dtype", dtype, "--threads", str(THREADS),
           "-o", out]
    for opt, path in names.items():
        cmd += [opt, path]
    return cmd + (["--causal"] if causal else [])


def run_once(cmd, cwd=None, peak=False):
    """elapsed seconds, peak RSS (KiB), standard output and processor
    seconds of one run; raises on failure.  peak: through /usr/bin/time
    when it is installed, since a child forked from this Python starts its
    peak at Python's own size (NumPy loaded); its processor time is then
    time's as well."""
    timed = ["/usr/bin/time", "-f", "%M"] if peak and os.path.exists("/usr/bin/time") else []
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        child = subprocess.Popen(timed + cmd, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        text, said = out.read().decode(), err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:2]), said.strip()))
    rss = int(said.split()[-1]) if timed else usage.ru_maxrss
    # the processor time: unlike the elapsed time, about the same on a
    # busy machine, where a process waits its turn for a processor
    return seconds, rss, text, usage.ru_utime + usage.ru_stime


def whole_process(cmd, cwd=None, once=False):
    """median elapsed seconds of RUNS runs after a warm-up, the peak RSS in
    KiB and the median processor seconds; once: the one run's (the long
    case: two minutes a run)"""
    first = run_once(cmd, cwd, peak=True)  # and the warm-up: the files in the page cache
    rss = first[1]
    if once:
        return first[0], rss, first[3]
    runs = [run_once(cmd, cwd) for _ in range(RUNS)]
    cpu = statistics.median(r[3] for r in runs)
    if shutil.which("hyperfine"):
        with tempfile.NamedTemporaryFile(suffix=".json") as j:
            subprocess.run(["hyperfine", "-N", "--warmup", "1", "--runs", str(RUNS),
                            "--export-json", j.name, "--", subprocess.list2cmdline(cmd)],
                           cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            return json.load(open(j.name))["results"][0]["median"], rss, cpu
    return statistics.median(r[0] for r in runs), rss, cpu


def in_process(bench_mha, n, causal, dtype, runs=RUNS):
    _, peak, out, _ = run_once([bench_mha, str(n), str(D), str(H), "1" if causal else "0", dtype,
                                str(THREADS), str(runs)], peak=True)
    fields = dict(kv.split("=", 1) for kv in out.split())
    return float(fields["seconds"]), peak


def target(n, lib, proc):
    if n >= 2048:
        return "<= 1.15x", "yes" if proc <= 1.15 * lib else "no"
    return "<= +5 ms", "yes" if proc - lib <= 0.005 else "no"


def main():
    args = sys.argv[1:]
    quick = "--quick" in args
    long_run = "--long" in args
    args = [a for a in args if a not in ("--quick", "--long")]
    if len(args) != 2:
        sys.exit("usage: bench_process.py [--quick] [--long] BENCH_MHA MHA")
    bench_mha, mha = (os.path.abspath(a) for a in args)
    cases = [(n, c, dt) for (n, c) in (QUICK if quick else SHAPES) for dt in ("f32", "f64")]
    if long_run:
        cases.append((LONG[0], LONG[1], "f32"))
    tmp = tempfile.mkdtemp(prefix="mha-bench-process-")
    timer = "hyperfine" if shutil.which("hyperfine") else "median of %d" % RUNS
    try:
        print("Whole process (`mha forward`, .npy in and out, %d threads) against libmha in "
              "process (bench_mha), d_model %d, %d heads; whole process: %s, library: median "
              "of %d calls in one process, its cold first call among them.\n" % (THREADS, D, H, timer, RUNS))
        print("| n | causal | dtype | library ms | whole process ms | ratio | overhead ms "
              "| target | met | process CPU ms | library peak MiB | process peak MiB |")
        print("|---:|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|")
        for n, causal, dtype in cases:
            names = make_inputs(tmp, n, dtype)
            out = os.path.join(tmp, "out.npy")
            once = n > 8192
            lib, lib_rss = in_process(bench_mha, n, causal, dtype, 1 if once else RUNS)
            proc, rss, cpu = whole_process(mha_command(mha, names, dtype, causal, out), once=once)
            want, met = target(n, lib, proc)
            print("| %d | %s | %s | %.1f | %.1f | %.2fx | %+.1f | %s | %s | %.1f | %.0f | %.0f |" %
                  (n, "yes" if causal else "no", dtype, lib * 1e3, proc * 1e3, proc / lib,
                   (proc - lib) * 1e3, want, met, cpu * 1e3, lib_rss / 1024, rss / 1024))
            sys.stdout.flush()
            if n > 8192:
                os.remove(names["-x"])
        # a tutorial's run: 6 tokens, JSON in, text out
        tut = os.path.join(HERE, "..", "samples", "worked-example")
        proc, rss, cpu = whole_process([mha, "forward", "-x", "x.json", "-w", "weights.json"],
                                       cwd=tut)
        print("| 6 (samples/worked-example, JSON) | no | f64 | - | %.2f | - | - | < 2 ms | %s "
              "| %.2f | - | %.0f |" % (proc * 1e3, "yes" if proc < 0.002 else "no", cpu * 1e3,
                                       rss / 1024))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

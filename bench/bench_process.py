#!/usr/bin/env python3
"""bench_process.py [--quick] [--long] [--avx2] [--append FILE] BENCH_MHA MHA: the whole process against the library.

For the shapes of issue 15 (n tokens, d_model 512, 8 heads, causal or not,
float32 and float64) it times `mha forward` as a user runs it -- X and the
weights and biases read from .npy files, the output written to a .npy file,
start-up and exit included -- and, in the same run, libmha's forward pass
inside a process of its own (bench_mha: no start-up, no files).  It prints
one Markdown table: both times, their ratio and the difference in ms, and
each side's peak resident memory, beside the targets (the whole process
within 15% of the library for n >= 2048, within 5 ms and 1.5 times at
n = 512; a tutorial-sized run, samples/worked-example's 6 tokens, under
2 ms).

Both sides are timed in turns, RUNS rounds after a warm-up: each round
runs bench_mha once (the median of its 5 calls in one process, the first,
cold one among them) and then `mha forward` (twice, below), so that a machine whose
speed drifts during the run (a VM beside others) moves both sides alike.
The library's time is the median of the rounds' medians, the whole
process's the median of its runs; both use as many threads (`--threads`,
the processors).  The peak memory of `mha forward` is its ru_maxrss
(through /usr/bin/time when installed, in the warm-up run), and its
processor time (user + system, median of the runs) is printed too: on a
machine others share, the elapsed time of a whole process includes its
waits for a processor, which a process of its own running five calls
mostly escapes.  Each round also times `mha forward` once more with its
output removed first (the removal not timed), and the last columns show
that second figure.  Replacing a file costs what deleting the old one
costs, whatever writes it: its blocks are freed, and a filesystem mounted
with `discard` (this machine's ext4) sends the disk a discard for them and
waits for it (perf: ext4_free_blocks, blkdev_issue_discard,
submit_bio_wait); np.save's truncation in place waits the same (2.2 ms
for an 8 MiB file on disk here).  ext4 also starts the new file's
write-back at a rename over an existing file (auto_da_alloc, what makes
the replaced file survive a crash whole), and the discard then waits
behind that write.  bench_replace.py times these apart.  The table says
whether the output's filesystem discards.

--quick: n = 512 and 2048 only.  --avx2: both sides on mha's AVX2 kernels
(MHA_KERNEL=avx2), as a processor without AVX-512 runs them: the same
overhead beside a slower library.  --long: also n = 131072 causal in
float32 (a 256 MiB X; about two minutes a run, so one run on each side),
whose peak memory the issue wants under 1 GiB.  The inputs are made by NumPy into a temporary directory and removed
after.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tee
from bench_replace import mount_of  # the filesystem the output is on

THREADS = os.cpu_count() or 1
RUNS = 7    # rounds, each side once a round
CALLS = 5   # bench_mha's calls in its process
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


def in_process(bench_mha, n, causal, dtype, calls=CALLS):
    """the median seconds of bench_mha's calls in one process, and its
    peak RSS (KiB)"""
    _, peak, out, _ = run_once([bench_mha, str(n), str(D), str(H), "1" if causal else "0", dtype,
                                str(THREADS), str(calls)], peak=True)
    fields = dict(kv.split("=", 1) for kv in out.split())
    return float(fields["seconds"]), peak


def side_by_side(bench_mha, n, causal, dtype, cmd, out, once=False):
    """the case's figures, a dict: lib, proc, fresh (medians, seconds),
    ratio, lo, hi (the median, least and greatest of the rounds' proc /
    lib), over (the median of the rounds' proc - lib), fresh_ratio and
    fresh_over (the same onto a new name), cpu
    (processor seconds), lib_rss, rss (KiB).  RUNS rounds taking turns
    after a warm-up of each (the files in the page cache, the peaks); once:
    the warm-ups alone (the long case: two minutes a run).  Each round times
    `mha forward` twice: replacing the last run's output (what a repeated
    command does: the old file's blocks freed, discarded where the
    filesystem is mounted with `discard`, and ext4 starts the new file's
    write-back at the rename), and with the output removed first, the
    removal not timed (a new name)."""
    lib, lib_rss = in_process(bench_mha, n, causal, dtype, 1 if once else CALLS)
    first = run_once(cmd, peak=True)
    rounds = []  # (library s, whole process s, onto a new name s, processor s)
    for _ in range(0 if once else RUNS):
        lib = in_process(bench_mha, n, causal, dtype)[0]
        proc = run_once(cmd)
        os.remove(out)
        rounds.append((lib, proc[0], run_once(cmd)[0], proc[3]))
    if once:
        rounds = [(lib, first[0], None, first[3])]
    med = statistics.median
    ratios = [r[1] / r[0] for r in rounds]
    return {
        "lib": med(r[0] for r in rounds), "proc": med(r[1] for r in rounds),
        "ratio": med(ratios), "lo": min(ratios), "hi": max(ratios),
        "over": med(r[1] - r[0] for r in rounds),
        "fresh": None if once else med(r[2] for r in rounds),
        "fresh_ratio": None if once else med(r[2] / r[0] for r in rounds),
        "fresh_over": None if once else med(r[2] - r[0] for r in rounds),
        "cpu": med(r[3] for r in rounds), "lib_rss": lib_rss, "rss": first[1],
    }


def target(n, f):
    """the issue's target, and whether it is met replacing the output and
    onto a new name ("yes / yes")"""
    def met(ratio, over):
        if ratio is None:
            return "-"
        if n >= 2048:
            return "yes" if ratio <= 1.15 else "no"
        return "yes" if over <= 0.005 and ratio <= 1.5 else "no"

    return ("<= 1.15x" if n >= 2048 else "<= +5 ms, <= 1.5x",
            "%s / %s" % (met(f["ratio"], f["over"]), met(f["fresh_ratio"], f["fresh_over"])))


def main():
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    long_run = "--long" in args
    avx2 = "--avx2" in args
    args = [a for a in args if a not in ("--quick", "--long", "--avx2")]
    if len(args) != 2:
        sys.exit("usage: bench_process.py [--quick] [--long] [--avx2] [--append FILE] "
                 "BENCH_MHA MHA")
    if avx2:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
        if "avx2" not in flags or "fma" not in flags:
            print("No AVX2 and FMA on this processor: no AVX2 path to measure.")
            tee.finish(append, "Whole process on the AVX2 path (bench_process.py --avx2)")
            return
        os.environ["MHA_KERNEL"] = "avx2"  # both sides, children of this one
    bench_mha, mha = (os.path.abspath(a) for a in args)
    cases = [(n, c, dt) for (n, c) in (QUICK if quick else SHAPES) for dt in ("f32", "f64")]
    if long_run:
        cases.append((LONG[0], LONG[1], "f32"))
    tmp = tempfile.mkdtemp(prefix="mha-bench-process-")
    try:
        print("Whole process (`mha forward`, .npy in and out, %d threads%s) against libmha in "
              "process (bench_mha), d_model %d, %d heads.  %d rounds taking turns, each running "
              "bench_mha once (the median of its %d calls, the cold first one among them) and "
              "`mha forward` twice (replacing its last output, then onto a new name); times: "
              "medians of the rounds; ratio and overhead: the median of the rounds' own, the "
              "ratio's range beside it.\n" % (THREADS, ", both on the AVX2 kernels "
                                               "(MHA_KERNEL=avx2)" if avx2 else "", D, H, RUNS,
                                               CALLS))
        where = mount_of(os.path.realpath(tmp))
        if where:
            discards = "discard" in where[2].split(",")
            print("The output is written in %s, on %s (%s)%s.\n" % (
                tmp, where[1], where[0],
                ": mounted with `discard`, so replacing a file waits for the disk to discard "
                "the old one's blocks" if discards else ", not mounted with `discard`"))
        print("| n | causal | dtype | library ms | whole process ms | ratio (range) | overhead ms "
              "| target | met (replacing / new name) | process CPU ms | library peak MiB "
              "| process peak MiB | onto a new name ms | its ratio |")
        print("|---:|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|")
        for n, causal, dtype in cases:
            names = make_inputs(tmp, n, dtype)
            out = os.path.join(tmp, "out.npy")
            f = side_by_side(bench_mha, n, causal, dtype,
                             mha_command(mha, names, dtype, causal, out), out, once=n > 8192)
            want, met = target(n, f)
            print("| %d | %s | %s | %.1f | %.1f | %.2fx (%.2f-%.2f) | %+.1f | %s | %s | %.1f | %.0f "
                  "| %.0f | %s | %s |" %
                  (n, "yes" if causal else "no", dtype, f["lib"] * 1e3, f["proc"] * 1e3,
                   f["ratio"], f["lo"], f["hi"], f["over"] * 1e3, want, met, f["cpu"] * 1e3,
                   f["lib_rss"] / 1024, f["rss"] / 1024,
                   "-" if f["fresh"] is None else "%.1f" % (f["fresh"] * 1e3),
                   "-" if f["fresh"] is None else "%.2fx" % f["fresh_ratio"]))
            sys.stdout.flush()
            if n > 8192:
                os.remove(names["-x"])
        # a tutorial's run: 6 tokens, JSON in, text out
        tut = os.path.join(HERE, "..", "samples", "worked-example")
        cmd = [mha, "forward", "-x", "x.json", "-w", "weights.json"]
        rss = run_once(cmd, tut, peak=True)[1]
        runs = [run_once(cmd, tut) for _ in range(RUNS)]
        proc, cpu = statistics.median(r[0] for r in runs), statistics.median(r[3] for r in runs)
        print("| 6 (samples/worked-example, JSON) | no | f64 | - | %.2f | - | - | < 2 ms | %s "
              "| %.2f | - | %.0f | - | - |" % (proc * 1e3, "yes" if proc < 0.002 else "no", cpu * 1e3,
                                       rss / 1024))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tee.finish(append, "Whole process%s (bench_process.py%s, the same session)" %
               ((" on the AVX2 path", " --avx2") if avx2 else ("", "")))


if __name__ == "__main__":
    main()

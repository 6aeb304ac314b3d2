#!/usr/bin/env python3
"""bench_backward.py [--append FILE] [--quick] BENCH_BACKWARD: mha backward against torch.autograd.

For each shape (n tokens, d_model, heads, causal or not) it times libmha's
backward pass in float64 (bench_backward: mha_backward inside its process,
every gradient of X, the weights and the biases, dO random; the fast path,
and the plain one for the smallest shape) and torch.nn.MultiheadAttention's
forward plus autograd's backward in float64 (inside Python, after a
warm-up, the same number of threads; torch saves the (n, n) weights for
its backward, mha keeps each row's log-sum-exp).  Each side runs in a
process of its own, so that its peak memory is its own, and takes the best
of 3 runs there; the two sides take turns, ROUNDS times a shape (who goes
first alternating), and the table gives each side's median over the rounds
and the median and range of the rounds' ratios: on a shared virtual
machine one process's times move by 10 to 30%, and a ratio taken from
neighbouring runs is steadier than one from two medians.

A second table does the same in float32: mha_backward_f32 (bench_backward
... f32, float arrays only, so that its peak is float32's), mha_backward in
float64 again and torch autograd in float32, the three taking turns in each
round (who goes first rotating), so that the f64/f32 and torch/mha-f32
ratios are each taken within one round.

--quick: one round, n 2048 non-causal only, in both tables (a smoke run).

--avx2: the float64 table alone, on the AVX2 path a processor without
AVX-512 takes: mha's AVX2 kernels (MHA_KERNEL=avx2) against torch with
ATen's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2) and OpenBLAS's
(OPENBLAS_CORETYPE=Haswell), on any x86 processor with AVX2.

Prints two Markdown tables: it measures, it does not judge.  Without torch,
its columns say so.
"""
import json
import os
import subprocess
import sys
from statistics import median

import tee

THREADS = os.cpu_count() or 1
ROUNDS = 5
SHAPES = [(n, d, h, c) for n in (512, 1024, 2048) for (d, h) in ((512, 8),) for c in (False, True)]
F32_SHAPES = SHAPES
QUICK_SHAPES = [(2048, 512, 8, False)]
# each side's environment (--avx2 sets both)
MHA_ENV = None
TORCH_ENV = None

TORCH_CHILD = r"""
import json, resource, sys, time
n, d, h, causal, threads, repeats, dtype = json.loads(sys.argv[1])
import torch
torch.set_num_threads(threads)
dt = getattr(torch, dtype)
torch.manual_seed(0)
m = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=dt)
x = torch.randn(1, n, d, dtype=dt, requires_grad=True)
dO = torch.randn(1, n, d, dtype=dt)
mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
best = float("inf")
for r in range(repeats + 1):
    m.zero_grad()
    x.grad = None
    t = time.perf_counter()
    out, _ = m(x, x, x, attn_mask=mask, need_weights=False)
    out.backward(dO)
    if r:  # the first is the warm-up
        best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run_mha(binary, n, d, h, causal, repeats, exact=False, dtype="f64"):
    out = subprocess.run([binary, str(n), str(d), str(h), "1" if causal else "0", str(THREADS),
                          str(repeats), "1" if exact else "0", dtype],
                         capture_output=True, text=True, check=True, env=MHA_ENV).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    assert fields["dtype"] == dtype, out
    run_mha.start_kib = int(fields.get("start_kib", 0))
    return float(fields["seconds"]), int(fields["maxrss_kib"]), fields["path"]


def run_torch(n, d, h, causal, repeats, dtype="float64"):
    r = subprocess.run([sys.executable, "-c", TORCH_CHILD, json.dumps([n, d, h, causal, THREADS,
                                                                      repeats, dtype])],
                       capture_output=True, text=True, env=TORCH_ENV)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                           "exit %d" % r.returncode)
    return json.loads(r.stdout)


def f64_table(binary, shapes, rounds, torch_version):
    print("mha backward (float64, the fast path%s) against torch %s autograd%s, %d threads, "
          "each side best of 3 in a process, %d rounds taking turns: medians, and the "
          "rounds' ratios\n" % (", MHA_KERNEL=avx2" if MHA_ENV else "",
                                 torch_version or "(absent)",
                                 " (ATEN_CPU_CAPABILITY=avx2, OPENBLAS_CORETYPE=Haswell)"
                                 if TORCH_ENV else "", THREADS, rounds))
    print("| n | d_model | heads | causal | mha s | torch s | torch/mha | rounds' range | "
          "mha peak MiB | torch peak MiB |")
    print("|---:|---:|---:|:---:|---:|---:|---:|:---:|---:|---:|")
    for (n, d, h, c) in shapes:
        mine, theirs, ratios, rss, trss, err = [], [], [], 0, 0, None
        for r in range(rounds if torch_version else 1):
            sides = ("mha", "torch") if r % 2 == 0 else ("torch", "mha")
            got = {}
            for side in sides:
                if side == "mha":
                    t, m_rss, path = run_mha(binary, n, d, h, c, 3)
                    assert path == "fast", path
                    got["mha"] = t
                    rss = max(rss, m_rss)
                elif torch_version and err is None:
                    try:
                        tr = run_torch(n, d, h, c, 3)
                        got["torch"] = tr["seconds"]
                        trss = max(trss, tr["maxrss_kib"])
                    except RuntimeError as e:
                        err = e
            mine.append(got["mha"])
            if "torch" in got:
                theirs.append(got["torch"])
                ratios.append(got["torch"] / got["mha"])
        t = median(mine)
        if ratios:
            cell = "%.4f | %.2f× | %.2f–%.2f | %.0f | %.0f" % (
                median(theirs), median(ratios), min(ratios), max(ratios), rss / 1024,
                trss / 1024)
        elif err is not None:
            cell = "failed (%s) | - | - | %.0f | -" % (err, rss / 1024)
        else:
            cell = "no torch | - | - | %.0f | -" % (rss / 1024)
        print("| %d | %d | %d | %s | %.4f | %s |" % (n, d, h, "yes" if c else "no", t, cell))
        sys.stdout.flush()


def ratio_cell(ratios):
    """the rounds' median ratio and their range, or - when there were none"""
    if not ratios:
        return "-"
    return "%.2f× (%.2f–%.2f)" % (median(ratios), min(ratios), max(ratios))


def f32_table(binary, shapes, rounds, torch_version):
    print("mha backward in float32 (mha_backward_f32) and float64 (mha_backward), both the "
          "fast path, against torch %s autograd in float32, %d threads, each side best of 3 in "
          "a process, %d rounds taking turns (who goes first rotating): medians, and the "
          "rounds' ratios with their range\n" % (torch_version or "(absent)", THREADS, rounds))
    print("| n | d_model | heads | causal | mha f32 s | mha f64 s | f64/f32 | torch f32 s | "
          "torch/mha-f32 | mha f32 peak MiB | mha f64 peak MiB | f32/f64 run's memory | "
          "torch f32 peak MiB |")
    print("|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    order = ("f32", "f64", "torch")
    for (n, d, h, c) in shapes:
        times = {side: [] for side in order}
        rss = {side: 0 for side in order}
        start = {side: 0 for side in order}
        wide, torch_ratios, err = [], [], None
        for r in range(rounds):
            got = {}
            for side in order[r % 3:] + order[:r % 3]:
                if side != "torch":
                    t, peak, path = run_mha(binary, n, d, h, c, 3, dtype=side)
                    assert path == "fast", path
                    start[side] = max(start[side], run_mha.start_kib)
                elif torch_version and err is None:
                    try:
                        tr = run_torch(n, d, h, c, 3, dtype="float32")
                    except RuntimeError as e:
                        err = e
                        continue
                    t, peak = tr["seconds"], tr["maxrss_kib"]
                else:
                    continue
                got[side] = t
                times[side].append(t)
                rss[side] = max(rss[side], peak)
            wide.append(got["f64"] / got["f32"])
            if "torch" in got:
                torch_ratios.append(got["torch"] / got["f32"])
        if times["torch"]:
            torch_s, torch_mib = "%.4f" % median(times["torch"]), "%.0f" % (rss["torch"] / 1024)
        else:
            torch_s = "failed (%s)" % err if err is not None else "no torch"
            torch_mib = "-"
        # the run's own: the peak less what the process held before it (program, libc)
        mem = (rss["f32"] - start["f32"]) / max(1, rss["f64"] - start["f64"])
        print("| %d | %d | %d | %s | %.4f | %.4f | %s | %s | %s | %.0f | %.0f | %.1f%% | %s |" % (
            n, d, h, "yes" if c else "no", median(times["f32"]), median(times["f64"]),
            ratio_cell(wide), torch_s, ratio_cell(torch_ratios), rss["f32"] / 1024,
            rss["f64"] / 1024, 100 * mem, torch_mib))
        sys.stdout.flush()


def has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return "avx2" in flags and "fma" in flags
    except OSError:
        pass
    return False


def main():
    global MHA_ENV, TORCH_ENV
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    avx2 = "--avx2" in args
    args = [a for a in args if a not in ("--quick", "--avx2")]
    if len(args) != 1:
        sys.exit(__doc__)
    binary = args[0]
    try:
        torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        torch_version = ""
    rounds = 1 if quick else ROUNDS
    if avx2 and not has_avx2():
        print("No AVX2 and FMA on this processor: no AVX2 path to measure.")
        tee.finish(append, "Backward on the AVX2 path (bench_backward.py --avx2)")
        return
    if avx2:
        MHA_ENV = dict(os.environ, MHA_KERNEL="avx2")
        TORCH_ENV = dict(os.environ, ATEN_CPU_CAPABILITY="avx2", OPENBLAS_CORETYPE="Haswell")
        f64_table(binary, QUICK_SHAPES if quick else SHAPES, rounds, torch_version)
        tee.finish(append, "Backward on the AVX2 path (bench_backward.py --avx2, the same "
                   "session)")
        return
    f64_table(binary, QUICK_SHAPES if quick else SHAPES, rounds, torch_version)
    n, d, h = SHAPES[0][:3]
    plain, rss, _ = run_mha(binary, n, d, h, False, 1, exact=True)
    print()
    print("The plain path (--exact) at n %d, d_model %d, %d heads: %.4f s, %.0f MiB." %
          (n, d, h, plain, rss / 1024))
    print()
    f32_table(binary, QUICK_SHAPES if quick else F32_SHAPES, rounds, torch_version)
    print()
    print("Peak memory is each process's whole (inputs, weights, gradients, and for torch "
          "the interpreter and its libraries).")
    tee.finish(append, "Backward (bench_backward.py, the same session)")


if __name__ == "__main__":
    main()

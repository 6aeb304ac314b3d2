#!/usr/bin/env python3
"""bench.py BENCH_MHA: mha against PyTorch, on the same machine, in one run.

For each shape (n tokens, d_model, heads, causal or not) and element type it
times libmha's forward pass (bench_mha, inside its process: no start-up, no
file reading) and torch.nn.MultiheadAttention (inside Python, after a warm-up,
with the same number of threads), best of a few runs each, and the machine's
own matrix-product rate (NumPy's matmul, same threads, same run).  Each side
runs in a process of its own so that its peak memory is its own.

Prints one Markdown table, then a second one: a causal sliding window of w keys
against full causal attention at the same n (--window-n N --window-w W; default
8192 and 1024, quick; the issue's 32768 and 4096 take a few minutes), whose
time ratio should be about (n/2)/w: the fast path skips the key blocks outside
the window.  --window-only runs that table alone.

A third table: B sequences of n tokens in one call (a batch) against one
sequence (--batch-n N --batch-b B; default 1024 and 8), whose time ratio
should be about B: the batch shares its threads over batch × heads × query
blocks, no sequence waits for another.  --batch-only runs that table alone.

Prints one Markdown table.  Without torch, its columns say so and the rest
still runs.  The PyTorch and NumPy side is given OpenBLAS's kernel for this
processor (OPENBLAS_CORETYPE) where OpenBLAS would not recognise it: a
virtual machine's processor name can make it fall back to 2004's kernels.
"""
import json
import os
import subprocess
import sys

THREADS = os.cpu_count() or 1
SHAPES = [(n, d, h, c) for n in (512, 2048, 8192) for (d, h) in ((512, 8), (768, 12))
          for c in (False, True)]
LONG = (32768, 512, 8, False)

TORCH_CHILD = r"""
import json, resource, sys, time
n, d, h, causal, dtype, threads, repeats = json.loads(sys.argv[1])
import torch
torch.set_num_threads(threads)
dt = torch.float32 if dtype == "f32" else torch.float64
torch.manual_seed(0)
m = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=dt)
x = torch.randn(1, n, d, dtype=dt)
mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
best = float("inf")
with torch.no_grad():
    m(x, x, x, attn_mask=mask, need_weights=False)
    for _ in range(repeats):
        t = time.perf_counter()
        m(x, x, x, attn_mask=mask, need_weights=False)
        best = min(best, time.perf_counter() - t)
print(json.dumps({"seconds": best,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

GEMM_CHILD = r"""
import json, sys, time
import numpy as np
dtype = np.float32 if sys.argv[1] == "f32" else np.float64
n = 4096
rng = np.random.default_rng(0)
a = rng.random((n, n)).astype(dtype)
b = rng.random((n, n)).astype(dtype)
a @ b
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
print(json.dumps({"gflops": 2 * n ** 3 / best / 1e9}))
"""


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def peer_env():
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS),
               MKL_NUM_THREADS=str(THREADS))
    flags = cpu_flags()
    if "OPENBLAS_CORETYPE" not in env:
        if "avx512f" in flags:
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
        elif "avx2" in flags:
            env["OPENBLAS_CORETYPE"] = "Haswell"
    return env


def flops(n, d, causal):
    # projections 4 x 2·n·d², attention 2 x 2·n²·d (half of it when causal)
    return 8.0 * n * d * d + 4.0 * n * n * d * (0.5 if causal else 1.0)


def run_mha(binary, n, d, h, causal, dtype, repeats, window=None, batch=None):
    extra = ([str(window if window is not None else -1)] if window is not None or batch else []) + \
        ([str(batch)] if batch else [])
    out = subprocess.run([binary, str(n), str(d), str(h), "1" if causal else "0", dtype,
                          str(THREADS), str(repeats)] + extra,
                         capture_output=True, text=True, check=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split())
    return float(fields["seconds"]), int(fields["maxrss_kib"]), fields["kernel"]


def run_child(code, args, env):
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                           "exit %d" % r.returncode)
    return json.loads(r.stdout)


def window_table(binary, n, w):
    """causal with a window of w keys against full causal, same n: the time ratio"""
    print("| n | window w | dtype | full causal s | window s | full/window | (n/2)/w |")
    print("|---:|---:|:---:|---:|---:|---:|---:|")
    for dtype in ("f32", "f64"):
        full, _, _ = run_mha(binary, n, 512, 8, True, dtype, 1)
        win, _, _ = run_mha(binary, n, 512, 8, True, dtype, 1, w)
        print("| %d | %d | %s | %.4f | %.4f | %.1f× | %.1f |" %
              (n, w, dtype, full, win, full / win, n / 2 / w))
        sys.stdout.flush()
    print()
    print("d_model 512, 8 heads; the window run also does the projections (8·n·d²), "
          "which the window does not shrink.")


def batch_table(binary, n, b):
    """B sequences of n tokens in one call against one: the time ratio, about B"""
    print("| n | batch B | causal | dtype | one sequence s | batch s | batch/one | B |")
    print("|---:|---:|:---:|:---:|---:|---:|---:|---:|")
    for causal in (False, True):
        for dtype in ("f32", "f64"):
            one, _, _ = run_mha(binary, n, 512, 8, causal, dtype, 3)
            many, _, _ = run_mha(binary, n, 512, 8, causal, dtype, 3, batch=b)
            print("| %d | %d | %s | %s | %.4f | %.4f | %.2f× | %d |" %
                  (n, b, "yes" if causal else "no", dtype, one, many, many / one, b))
            sys.stdout.flush()
    print()
    print("d_model 512, 8 heads; best of 3 each; the batch is one mha_forward call "
          "(mha_dims.batch).")


def main():
    args = sys.argv[1:]
    win_n, win_w, win_only = 8192, 1024, False
    batch_n, batch_b, batch_only = 1024, 8, False
    while len(args) > 1 and args[0].startswith("--"):
        if args[0] == "--window-only":
            win_only, args = True, args[1:]
        elif args[0] == "--batch-only":
            batch_only, args = True, args[1:]
        elif args[0] in ("--window-n", "--window-w", "--batch-n", "--batch-b") and len(args) > 2:
            if args[0] == "--window-n":
                win_n = int(args[1])
            elif args[0] == "--window-w":
                win_w = int(args[1])
            elif args[0] == "--batch-n":
                batch_n = int(args[1])
            else:
                batch_b = int(args[1])
            args = args[2:]
        else:
            break
    if len(args) != 1:
        sys.exit("usage: bench.py [--window-n N] [--window-w W] [--window-only] "
                 "[--batch-n N] [--batch-b B] [--batch-only] BENCH_MHA")
    binary = os.path.abspath(args[0])
    if win_only:
        window_table(binary, win_n, win_w)
        return 0
    if batch_only:
        batch_table(binary, batch_n, batch_b)
        return 0
    env = peer_env()
    try:
        torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True, env=env).stdout.strip()
    except OSError:
        torch_version = ""
    gemm = {}
    for dtype in ("f32", "f64"):
        try:
            gemm[dtype] = run_child(GEMM_CHILD, [dtype], env)["gflops"]
        except (RuntimeError, OSError):
            gemm[dtype] = None

    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), "unknown") if os.path.exists("/proc/cpuinfo") else "unknown"
    print("Machine: %s, %d threads; PyTorch %s; OpenBLAS kernel %s; "
          "GEMM rate = NumPy matmul 4096², same run" %
          (model, THREADS, torch_version or "absent", env.get("OPENBLAS_CORETYPE", "auto")))
    print()
    print("| n | d_model | heads | causal | dtype | mha s | PyTorch s | PyTorch/mha | "
          "mha GFLOP/s | GEMM GFLOP/s | mha / GEMM | mha peak MiB | PyTorch peak MiB |")
    print("|---:|---:|---:|:---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (n, d, h, causal) in SHAPES + [LONG]:
        for dtype in ("f32", "f64"):
            long = (n, d, h, causal) == LONG
            if long and dtype == "f64":
                continue
            repeats = 1 if n >= 8192 else 3
            secs, rss, kernel = run_mha(binary, n, d, h, causal, dtype, repeats)
            rate = flops(n, d, causal) / secs / 1e9
            g = gemm.get(dtype)
            if not torch_version:
                t_cell, ratio, t_rss = "no torch", "-", "-"
            elif long:
                need = h * n * n * (4 if dtype == "f32" else 8) / 2 ** 30
                t_cell, ratio, t_rss = "cannot fit (%.0f GiB of weights)" % need, "-", "-"
            else:
                try:
                    t = run_child(TORCH_CHILD, [json.dumps([n, d, h, causal, dtype, THREADS,
                                                            repeats])], env)
                    t_cell = "%.4f" % t["seconds"]
                    ratio = "%.1f×" % (t["seconds"] / secs)
                    t_rss = "%.0f" % (t["maxrss_kib"] / 1024)
                except RuntimeError as e:
                    t_cell, ratio, t_rss = "failed: %s" % e, "-", "-"
            print("| %d | %d | %d | %s | %s | %.4f | %s | %s | %.1f | %s | %s | %.0f | %s |" %
                  (n, d, h, "yes" if causal else "no", dtype, secs, t_cell, ratio, rate,
                   "%.1f" % g if g else "-", "%.0f%%" % (100 * rate / g) if g else "-",
                   rss / 1024, t_rss))
            sys.stdout.flush()
    print()
    print("mha kernels: %s.  GFLOP/s count 8·n·d² for the projections and 4·n²·d for the "
          "attention (half when causal)." % kernel)
    print()
    window_table(binary, win_n, win_w)
    print()
    batch_table(binary, batch_n, batch_b)
    return 0


if __name__ == "__main__":
    sys.exit(main())

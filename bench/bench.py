#!/usr/bin/env python3
"""bench.py [options] BENCH_MHA: mha against ONNX Runtime and PyTorch, one run.

For each case (n tokens, d_model, heads, causal or not, element type) it
times libmha's forward pass (bench_mha, inside its process: no start-up, no
file reading), ONNX Runtime (onnxruntime-node, in-process from node, float32
only: its attention operators have no float64 kernels) and
torch.nn.MultiheadAttention, each in a process of its own so that its peak
memory is its own, with the same number of threads (THREADS, all the
machine's), after a warm-up, the median of 5 runs (3 with --quick); mha
and ONNX Runtime are timed three times a case, taking turns with each
other (and PyTorch, once, between the first and second), and their
columns are the median of the three, so that a slow moment of a shared
machine moves one timing rather than a row.  Every
peer gets the very problem mha solved (bench_mha --dump) and its output must
agree with mha's to 1e-4 of the output's largest magnitude before it is
timed; a peer that disagrees or fails is named in its cell, never timed.

ONNX Runtime is tried in its three forms (ort_models.py): MatMuls around
com.microsoft.MultiHeadAttention, around ai.onnx Attention (opset 23), and
com.microsoft.Attention; its column is the fastest form, named.

The machine's matrix-product rate: NumPy's matmul of two 4096² matrices,
best of 5, under each OpenBLAS kernel this processor runs
(OPENBLAS_CORETYPE: a virtual machine's processor name can make OpenBLAS
fall back to old kernels, and on some processors the AVX2 kernels beat the
AVX-512 ones); the fastest is the rate printed, and PyTorch runs under it
too: the peers at their best.

Tables, in one Markdown document (stdout, and --output FILE):
  1. the cases, mha beside ONNX Runtime and PyTorch as ratios (peer s / mha s),
     mha's rate beside the GEMM rate;
  2. long: n = --long-n (131072) causal f32, full and with a window of
     --window-w (4096) keys: time and the library's peak memory;
  3. batches: --batch-b (64) sequences of --batch-n (128) tokens in one call
     against one sequence of B·n tokens, per token.

Options: --quick (small cases, 3 repeats; a smoke run of a minute or two),
--output FILE, --ort NODE_MODULES (where onnxruntime-node is installed; its
columns say "absent" without it), --long-n N, --window-w W, --batch-n N,
--batch-b B, --long-only, --batch-only, --avx2-only.

On a processor with AVX-512 a fourth table, the AVX2 path: the AVX2
kernels forced (MHA_KERNEL=avx2), as a processor without AVX-512 runs mha,
beside OpenBLAS's own AVX2 kernels (OPENBLAS_CORETYPE=Haswell: the AVX2
ceiling), beside ONNX Runtime's AVX2 kernels (float32) and beside the
AVX-512 kernels' time.  ONNX Runtime has no switch for its kernels: it runs
from a copy of its library told that the system saves no AVX-512 state
(ort_avx2.py), as on a processor without AVX-512, and so takes its AVX2
paths.  On a processor without AVX-512 the cases table is that comparison.
"""
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

import ort_avx2

THREADS = os.cpu_count() or 1
ROUNDS = 3  # timings of mha and of ONNX Runtime a case, taking turns
HERE = os.path.dirname(os.path.abspath(__file__))
CORETYPES = ("SkylakeX", "Haswell", "Zen")

TORCH_CHILD = r"""
import json, os, resource, sys, time
d, n, dm, h, causal, dtype, threads, repeats = json.loads(sys.argv[1])
import numpy as np
import torch
torch.set_num_threads(threads)
nd = np.float32 if dtype == "f32" else np.float64
dt = torch.float32 if dtype == "f32" else torch.float64
def load(name, shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype=nd).reshape(shape))
W = {k: load(k, (dm, dm)) for k in ("W_Q", "W_K", "W_V", "W_O")}
b = {k: load(k, (dm,)) for k in ("b_Q", "b_K", "b_V", "b_O")}
x = load("x", (1, n, dm))
ref = load("out", (1, n, dm))
m = torch.nn.MultiheadAttention(dm, h, batch_first=True, dtype=dt)
mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
with torch.no_grad():
    # mha's x·W is nn.Linear's x·Wᵀ
    m.in_proj_weight.copy_(torch.cat([W["W_Q"].T, W["W_K"].T, W["W_V"].T]))
    m.in_proj_bias.copy_(torch.cat([b["b_Q"], b["b_K"], b["b_V"]]))
    m.out_proj.weight.copy_(W["W_O"].T)
    m.out_proj.bias.copy_(b["b_O"])
    y = m(x, x, x, attn_mask=mask, need_weights=False)[0]
    diff = float((y - ref).abs().max())
    tol = 1e-4 * max(1.0, float(ref.abs().max()))
    if not diff <= tol:
        sys.exit("output differs from mha's by %g (tolerance %g)" % (diff, tol))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        m(x, x, x, attn_mask=mask, need_weights=False)
        times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"seconds": times[(len(times) - 1) // 2], "max_diff": diff,
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
for _ in range(5):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
print(json.dumps({"gflops": 2 * n ** 3 / best / 1e9}))
"""


class Out:
    """the document: printed as it goes, and kept for --output"""

    def __init__(self):
        self.lines = []

    def __call__(self, s=""):
        print(s)
        sys.stdout.flush()
        self.lines.append(s)


def cpu_info():
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, flags


def peer_env(coretype=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS),
               MKL_NUM_THREADS=str(THREADS))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def flops(n, d, causal, window=None):
    # projections 4 x 2·n·d², attention 2 x 2·n·d per key seen (n/2 causal, w+1 in a window)
    keys = window + 1 if window is not None and window < n else n * (0.5 if causal else 1.0)
    return 8.0 * n * d * d + 4.0 * n * keys * d


def run_mha(binary, n, d, h, causal, dtype, repeats, window=None, batch=None, dump=None,
            kernel=None):
    """bench_mha's line as a dict; kernel: MHA_KERNEL for the run (None: the widest)"""
    env = dict(os.environ, MHA_KERNEL=kernel) if kernel else None
    extra = ([str(window if window is not None else -1)] if window is not None or batch else []) + \
        ([str(batch)] if batch else [])
    out = subprocess.run(([binary, "--dump", dump] if dump else [binary]) +
                         [str(n), str(d), str(h), "1" if causal else "0", dtype,
                          str(THREADS), str(repeats)] + extra,
                         capture_output=True, text=True, check=True, env=env).stdout
    f = dict(kv.split("=", 1) for kv in out.split())
    return {"seconds": float(f["seconds"]), "maxrss_kib": int(f["maxrss_kib"]),
            "lib_peak_kib": int(f["lib_peak_kib"]), "lib_bytes": int(f["lib_bytes"]),
            "kernel": f["kernel"]}


def run_child(argv, env=None):
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        err = r.stderr.strip().splitlines()
        raise RuntimeError(err[-1] if err else "exit %d" % r.returncode)
    return json.loads(r.stdout.strip().splitlines()[-1])


def gemm_rates(quick, by_type=None):
    """{dtype: (GFLOP/s, core type)} at OpenBLAS's best kernel for this processor;
    by_type, a dict, gets every core type's {dtype: GFLOP/s}"""
    _, flags = cpu_info()
    types = [t for t in CORETYPES
             if (t != "SkylakeX" or "avx512f" in flags) and (t == "SkylakeX" or "avx2" in flags)]
    if quick:
        types = types[:1]
    rates = {}
    for dtype in ("f32", "f64"):
        for t in types or [None]:
            try:
                g = run_child([sys.executable, "-c", GEMM_CHILD, dtype], peer_env(t))["gflops"]
            except (RuntimeError, OSError, ValueError):
                continue
            if by_type is not None:
                by_type.setdefault(t, {})[dtype] = g
            if dtype not in rates or g > rates[dtype][0]:
                rates[dtype] = (g, t)
    return rates


def version_of(argv, env=None):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        return r.stdout.strip() if r.returncode == 0 else ""
    except OSError:
        return ""


def ort_run(ort, tmp, model, n, d, repeats, narrow=None):
    """one ONNX Runtime model file of tmp, timed by ort_run.js (which checks
    its output against mha's first); narrow: the directory of ort_avx2.py's
    library, loaded instead of the package's (ONNX Runtime as on AVX2)"""
    env = dict(os.environ, LD_LIBRARY_PATH=narrow) if narrow else None
    return run_child(["node", os.path.join(HERE, "ort_run.js"), ort, os.path.join(tmp, model),
                      os.path.join(tmp, "x.bin"), os.path.join(tmp, "out.bin"), str(n), str(d),
                      str(THREADS), str(repeats)], env)


def ort_case(ort, tmp, n, d, h, causal, repeats, narrow=None):
    """the fastest of ONNX Runtime's three forms: (result, its model file,
    errors) or raises"""
    forms = subprocess.run([sys.executable, os.path.join(HERE, "ort_models.py"), tmp, str(n),
                            str(d), str(h), "1" if causal else "0"],
                           capture_output=True, text=True)
    if forms.returncode != 0:
        raise RuntimeError("models: " + (forms.stderr.strip().splitlines() or ["failed"])[-1])
    best, errors = None, []
    for model in forms.stdout.split():
        try:
            r = ort_run(ort, tmp, model, n, d, repeats, narrow)
        except (RuntimeError, OSError, ValueError) as e:
            errors.append("%s: %s" % (model[:-5], e))
            continue
        if best is None or r["seconds"] < best[0]["seconds"]:
            best = (r, model)
    if best is None:
        raise RuntimeError("; ".join(errors))
    return best[0], best[1], errors


def cases_table(out, binary, shapes, repeats, gemm, ort, torch_ok):
    out("| n | d_model | heads | causal | dtype | mha kernel | mha s | ONNX Runtime s (form) | "
        "ORT/mha | PyTorch s | PyTorch/mha | mha GFLOP/s | GEMM GFLOP/s | mha / GEMM | "
        "mha peak MiB | ORT peak MiB | PyTorch peak MiB |")
    out("|---:|---:|---:|:---:|:---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    kernel, notes = "", []
    for (n, d, h, causal) in shapes:
        for dtype in ("f32", "f64"):
            with tempfile.TemporaryDirectory(prefix="mha-bench-") as tmp:
                m = run_mha(binary, n, d, h, causal, dtype, repeats, dump=tmp)
                kernel = m["kernel"]
                m_times, o_times, model = [m["seconds"]], [], None
                o_cell, o_ratio, o_rss = "absent", "-", "-"
                if dtype == "f64":
                    o_cell = "no f64"
                elif ort:
                    try:
                        r, model, errors = ort_case(ort, tmp, n, d, h, causal, repeats)
                        o_times.append(r["seconds"])
                        o_rss = "%.0f" % (r["maxrss_kib"] / 1024)
                        notes += ["n=%d d=%d %s: ONNX Runtime %s" % (n, d, "causal" if causal
                                                                      else "full", e)
                                  for e in errors]
                    except (RuntimeError, OSError) as e:
                        o_cell = "failed: %s" % e
                t_cell, t_secs, t_rss = "absent", None, "-"
                if torch_ok:
                    g = gemm.get(dtype, (None, None))
                    try:
                        r = run_child([sys.executable, "-c", TORCH_CHILD,
                                       json.dumps([tmp, n, d, h, causal, dtype, THREADS, repeats])],
                                      peer_env(g[1]))
                        t_cell = "%.4f" % r["seconds"]
                        t_secs = r["seconds"]
                        t_rss = "%.0f" % (r["maxrss_kib"] / 1024)
                    except (RuntimeError, OSError) as e:
                        t_cell = "failed: %s" % e
                # mha and ONNX Runtime (its fastest form) again, taking turns:
                # a slow moment of a shared machine moves one timing, not the median
                for _ in range(ROUNDS - 1):
                    m_times.append(run_mha(binary, n, d, h, causal, dtype, repeats)["seconds"])
                    if model:
                        try:
                            o_times.append(ort_run(ort, tmp, model, n, d, repeats)["seconds"])
                        except (RuntimeError, OSError, ValueError):
                            pass
                secs = statistics.median(m_times)
                rate = flops(n, d, causal) / secs / 1e9
                if o_times:
                    o_cell = "%.4f (%s)" % (statistics.median(o_times), model[:-5])
                    o_ratio = "%.2f×" % (statistics.median(o_times) / secs)
                t_ratio = "%.2f×" % (t_secs / secs) if t_secs else "-"
            g = gemm.get(dtype)
            out("| %d | %d | %d | %s | %s | %s | %.4f | %s | %s | %s | %s | %.1f | %s | %s | %.0f | %s "
                "| %s |"
                % (n, d, h, "yes" if causal else "no", dtype, m["kernel"], secs, o_cell, o_ratio,
                   t_cell,
                   t_ratio, rate, "%.1f" % g[0] if g else "-",
                   "%.0f%%" % (100 * rate / g[0]) if g else "-", m["maxrss_kib"] / 1024, o_rss,
                   t_rss))
    out()
    out("mha kernels: %s.  Times are medians of %d runs after none (mha) or one (peers) warm-up; "
        "mha's and ONNX Runtime's, the median of %d such timings taken in turns (PyTorch: one); "
        "ratios are the peer's time over mha's (above 1: mha faster).  GFLOP/s count 8·n·d² for "
        "the projections and 4·n²·d for the attention (half when causal).  Peak memory is each "
        "side's whole process (node's own ~50 MiB included for ONNX Runtime)." % (kernel, repeats,
                                                                          ROUNDS))
    for s in notes:
        out("- " + s)


def avx2_table(out, binary, shapes, repeats, haswell, wide, ort=None, ort_narrow=None):
    """The AVX2 kernels forced (MHA_KERNEL=avx2) on a machine that has wider
    ones: mha's rate beside OpenBLAS's own AVX2 kernels (OPENBLAS_CORETYPE=
    Haswell), the AVX2 ceiling; beside the wider kernel's time; and, float32,
    beside ONNX Runtime's own AVX2 kernels (ort_narrow: ort_avx2.py's
    library, which tells ONNX Runtime the processor has no AVX-512), all
    three taking turns."""
    out("| n | d_model | heads | causal | dtype | avx2 s | avx2 GFLOP/s | Haswell GEMM GFLOP/s | "
        "avx2 / GEMM | ONNX Runtime AVX2 s (form) | ORT/mha on AVX2 | %s s | avx2 / %s time |"
        % (wide, wide))
    out("|---:|---:|---:|:---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for (n, d, h, causal) in shapes:
        for dtype in ("f32", "f64"):
            narrow, broad, o_times, model = [], [], [], None
            o_cell = "no f64" if dtype == "f64" else "absent"
            with tempfile.TemporaryDirectory(prefix="mha-bench-") as tmp:
                for r in range(ROUNDS):
                    narrow.append(run_mha(binary, n, d, h, causal, dtype, repeats,
                                          dump=tmp if r == 0 else None,
                                          kernel="avx2")["seconds"])
                    broad.append(run_mha(binary, n, d, h, causal, dtype, repeats,
                                         kernel=wide)["seconds"])
                    if dtype != "f32" or not ort_narrow or (r and not model):
                        continue
                    try:
                        if r == 0:
                            res, model, errors = ort_case(ort, tmp, n, d, h, causal, repeats,
                                                          ort_narrow)
                            notes += ["n=%d d=%d %s: ONNX Runtime (AVX2) %s" %
                                      (n, d, "causal" if causal else "full", e) for e in errors]
                        else:
                            res = ort_run(ort, tmp, model, n, d, repeats, ort_narrow)
                        o_times.append(res["seconds"])
                    except (RuntimeError, OSError, ValueError) as e:
                        if r == 0:
                            o_cell = "failed: %s" % e
            secs, other = statistics.median(narrow), statistics.median(broad)
            rate = flops(n, d, causal) / secs / 1e9
            g = haswell.get(dtype)
            o_ratio = "-"
            if o_times:
                o_cell = "%.4f (%s)" % (statistics.median(o_times), model[:-5])
                o_ratio = "%.2f×" % (statistics.median(o_times) / secs)
            out("| %d | %d | %d | %s | %s | %.4f | %.1f | %s | %s | %s | %s | %.4f | %.2f× |" %
                (n, d, h, "yes" if causal else "no", dtype, secs, rate,
                 "%.1f" % g if g else "-", "%.0f%%" % (100 * rate / g) if g else "-", o_cell,
                 o_ratio, other, secs / other))
    out()
    out("The same inputs as the cases; each time the median of %d calls in a process, the "
        "median of %d such processes, the kernels taking turns.  The GEMM rate: NumPy's "
        "matmul 4096² under OpenBLAS's Haswell kernels (AVX2 and FMA), best of 5.  ONNX "
        "Runtime has no switch for its kernels: it ran from a copy of its library whose "
        "xgetbv instructions read XCR0 = 7, what the system says on a processor without "
        "AVX-512 (bench/ort_avx2.py), so it chose its AVX2 kernels; its output checked "
        "against mha's as in the cases, its fastest form named." % (repeats, ROUNDS))
    for s in notes:
        out("- " + s)


def long_table(out, binary, n, w):
    """n tokens causal f32, full and with a window of w keys: time and the library's memory"""
    out("| n | causal | window | dtype | mha s | full/window | n/(2w) | GFLOP/s | "
        "library peak MiB | mha_memory MiB | process peak MiB |")
    out("|---:|:---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|")
    full = None
    for window in (None, w):
        m = run_mha(binary, n, 512, 8, True, "f32", 1, window=window)
        if window is None:
            full = m["seconds"]
        out("| %d | yes | %s | f32 | %.3f | %s | %s | %.1f | %.0f | %.0f | %.0f |" %
            (n, window if window is not None else "-", m["seconds"],
             "%.1f×" % (full / m["seconds"]) if window is not None else "-",
             "%.1f" % (n / 2 / w) if window is not None else "-",
             flops(n, 512, True, window) / m["seconds"] / 1e9, m["lib_peak_kib"] / 1024,
             m["lib_bytes"] / 2 ** 20, m["maxrss_kib"] / 1024))
    out()
    out("d_model 512, 8 heads, one run each.  Library peak: what the forward pass added to the "
        "process's peak resident memory (the caller's input and output, %.0f MiB each, are not "
        "the library's); mha_memory: the library's own estimate of its allocations.  A window "
        "of w keys costs about n·w (and the projections' 8·n·d²), not n²/2." %
        (n * 512 * 4 / 2 ** 20))


def batch_table(out, binary, n, b, repeats):
    """B sequences of n tokens in one call against one sequence of B·n tokens, per token"""
    out("| batch | one sequence | causal | dtype | batch s | one s | batch µs/token | "
        "one µs/token | one/batch per token |")
    out("|---:|---:|:---:|:---:|---:|---:|---:|---:|---:|")
    for causal in (False, True):
        for dtype in ("f32", "f64"):
            many = run_mha(binary, n, 512, 8, causal, dtype, repeats, batch=b)["seconds"]
            one = run_mha(binary, n * b, 512, 8, causal, dtype, repeats)["seconds"]
            out("| %d×%d | %d | %s | %s | %.4f | %.4f | %.2f | %.2f | %.1f× |" %
                (b, n, n * b, "yes" if causal else "no", dtype, many, one, many / (n * b) * 1e6,
                 one / (n * b) * 1e6, one / many))
    out()
    out("d_model 512, 8 heads, medians of %d; the batch is one mha_forward call "
        "(mha_dims.batch), its threads shared over sequences, heads and query blocks." % repeats)


def avx2_section(out, binary, quick, repeats, shapes=None, ort=None):
    """the AVX2 table where the processor has AVX-512 too (else the cases are on AVX2);
    ort: onnxruntime-node's node_modules, or None"""
    _, flags = cpu_info()
    if "avx2" not in flags or "fma" not in flags:
        out("No AVX2 on this processor: nothing to measure.")
        return
    if "avx512f" not in flags:
        out("This processor has no AVX-512: the cases above ran the AVX2 kernels, beside ONNX "
            "Runtime's.")
        return
    by_type = {}
    gemm_rates(False, by_type)
    if shapes is None:
        sizes = (512, 2048) if quick else (512, 2048, 8192)
        dims = ((512, 8),) if quick else ((512, 8), (768, 12))
        shapes = [(n, d, h, c) for (d, h) in dims for n in sizes for c in (False, True)]
    with tempfile.TemporaryDirectory(prefix="mha-ort-avx2-") as narrow:
        if ort:
            try:
                ort_avx2.patch(ort, narrow)
            except (OSError, ValueError, subprocess.CalledProcessError) as e:
                out("ONNX Runtime could not be narrowed to AVX2 (%s): its column says absent."
                    % e)
                out()
                ort = None
        avx2_table(out, binary, shapes, repeats, by_type.get("Haswell", {}), "avx512", ort,
                   narrow if ort else None)


def main():
    args = sys.argv[1:]
    quick, only, output, ort = False, None, None, None
    long_n, win_w, batch_n, batch_b = 131072, 4096, 128, 64
    while len(args) > 1 and args[0].startswith("--"):
        a = args.pop(0)
        if a == "--quick":
            quick = True
            long_n, win_w, batch_b = 16384, 1024, 8
        elif a in ("--long-only", "--batch-only", "--avx2-only"):
            only = a[2:-5]
        elif a in ("--output", "--ort", "--long-n", "--window-w", "--batch-n", "--batch-b") \
                and len(args) > 1:
            v = args.pop(0)
            if a == "--output":
                output = v
            elif a == "--ort":
                ort = v
            elif a == "--long-n":
                long_n = int(v)
            elif a == "--window-w":
                win_w = int(v)
            elif a == "--batch-n":
                batch_n = int(v)
            else:
                batch_b = int(v)
        else:
            sys.exit("bench.py: unknown option '%s'" % a)
    if len(args) != 1:
        sys.exit("usage: bench.py [--quick] [--output FILE] [--ort NODE_MODULES] [--long-n N] "
                 "[--window-w W] [--batch-n N] [--batch-b B] [--long-only | --batch-only | --avx2-only] "
                 "BENCH_MHA")
    binary = os.path.abspath(args[0])
    repeats = 3 if quick else 5
    out = Out()
    model, flags = cpu_info()
    out("# mha against ONNX Runtime and PyTorch%s" % (" (quick)" if quick else ""))
    out()
    if ort and not os.path.isdir(os.path.join(ort, "onnxruntime-node")):
        ort = None
    if ort and not shutil.which("node"):
        ort = None
    ort_version = version_of(["node", "-p", "require(%s).version" % json.dumps(
        os.path.join(os.path.abspath(ort), "onnxruntime-node", "package.json"))]) if ort else ""
    ort = os.path.abspath(ort) if ort_version else None
    if only == "avx2":
        out("## The AVX2 path")
        out()
        avx2_section(out, binary, quick, repeats, ort=ort)
    elif only == "long":
        long_table(out, binary, long_n, win_w)
    elif only == "batch":
        batch_table(out, binary, batch_n, batch_b, repeats)
    else:
        torch_version = version_of([sys.executable, "-c", "import torch; print(torch.__version__)"])
        gemm = gemm_rates(quick)
        out("Machine: %s, %d threads (%s); ONNX Runtime %s (onnxruntime-node, node %s); "
            "PyTorch %s; GEMM rate = NumPy matmul 4096², best of 5, OpenBLAS kernel %s "
            "(the fastest of %s here), same run." %
            (model, THREADS, "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
             else "no AVX2", ort_version or "absent", version_of(["node", "--version"]) or "absent",
             torch_version or "absent",
             ", ".join("%s %s" % (dt, g[1] or "auto") for dt, g in sorted(gemm.items())) or "-",
             "/".join(CORETYPES[:1] if quick else CORETYPES)))
        out()
        sizes = (512, 2048) if quick else (512, 2048, 8192)
        dims = ((512, 8),) if quick else ((512, 8), (768, 12))
        shapes = [(n, d, h, c) for (d, h) in dims for n in sizes for c in (False, True)]
        out("## Cases")
        out()
        cases_table(out, binary, shapes, repeats, gemm, ort, bool(torch_version))
        out()
        out("## Long: n = %d, causal" % long_n)
        out()
        long_table(out, binary, long_n, win_w)
        out()
        if "avx2" in flags and "avx512f" in flags:
            out("## The AVX2 path")
            out()
            avx2_section(out, binary, quick, repeats, shapes, ort)
            out()
        out("## Batches: %d sequences of %d tokens against one of %d" %
            (batch_b, batch_n, batch_b * batch_n))
        out()
        batch_table(out, binary, batch_n, batch_b, repeats)
    if output:
        with open(output, "w") as f:
            f.write("\n".join(out.lines) + "\n")
        print("\nwritten to %s" % output, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench_mla.py [--append FILE] [--quick] BENCH_MLA: multi-head latent attention
beside the grouped-query layer of the same size.

One causal layer of N tokens (4096; 1024 with --quick), d_model 2048, 16
heads with DeepSeek-V3's head dims (qk_nope 128 + qk_rope 64, v 128;
q_lora_rank 1536, kv_lora_rank 512), float32 on the fast path, all the
machine's threads: MLA as DeepSeek's code runs it (expanded), in the
absorbed form inference engines run, and the grouped-query layer of the
same query heads and widths with 4 key/value heads (rope on 64 features).
Each form runs in a process of its own (bench_mla: the median of 3 calls),
the forms taking turns, ROUNDS times, under each kernel this processor
runs (MHA_KERNEL): the table gives each form's median over the rounds, its
GFLOP/s, the ratio to the GQA layer's time and mha_memory()'s estimate.
It measures, it does not judge.
"""
import os
import subprocess
import sys
from statistics import median

import tee

THREADS = os.cpu_count() or 1
ROUNDS = 5
FORMS = (("gqa", "GQA, 4 key/value heads"), ("mla", "MLA, expanded"),
         ("absorbed", "MLA, absorbed"))


def run(binary, form, n, kernel):
    env = dict(os.environ, MHA_KERNEL=kernel)
    out = subprocess.run([binary, form, str(n), "2048", "16", "4", str(THREADS), "3"],
                         capture_output=True, text=True, env=env, check=True).stdout
    return dict(kv.split("=", 1) for kv in out.split())


def main():
    args, append = tee.take_append(sys.argv[1:])
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    binary = args[0]
    n = 1024 if quick else 4096
    rounds = 2 if quick else ROUNDS
    kernels = []
    for k in ("avx512", "avx2", "base"):
        got = run(binary, "gqa", 128, k)["kernel"]
        if got == k and k not in kernels:
            kernels.append(k)
    print("One causal layer of %d tokens, d_model 2048, 16 heads of qk 128 + 64, v 128 "
          "(q_lora_rank 1536, kv_lora_rank 512), float32, %d threads; each form's median of %d "
          "rounds (a round: each form's process, the median of its 3 calls).\n"
          % (n, THREADS, rounds))
    print("| kernel | layer | seconds | GFLOP/s | / GQA's time | mha_memory |")
    print("|---|---|---|---|---|---|")
    for k in kernels:
        times = {f: [] for f, _ in FORMS}
        last = {}
        for r in range(rounds):
            for f, _ in (FORMS if r % 2 == 0 else FORMS[::-1]):
                res = run(binary, f, n, k)
                times[f].append(float(res["seconds"]))
                last[f] = res
        base = median(times["gqa"])
        for f, words in FORMS:
            t = median(times[f])
            flops = float(last[f]["gflops"]) * float(last[f]["seconds"])
            print("| %s | %s | %.3f | %.0f | %.2f | %.0f MiB |" % (
                k, words, t, flops / t, t / base, int(last[f]["lib_bytes"]) / 2 ** 20))
    tee.finish(append, "Multi-head latent attention beside GQA (bench_mla.py, the same session)")


if __name__ == "__main__":
    main()

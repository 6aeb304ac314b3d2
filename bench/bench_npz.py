#!/usr/bin/env python3
"""bench_npz.py [--append FILE] [--base REV] [--rounds N] MHA BENCH_NPZ: reading a .npz
of one 8 MiB deflated member, this build against revision REV's (default d3423c1,
the last with mha's own bit-at-a-time inflate), side by side.

REV is taken from git (git archive, never a checkout) into build/bench-npz-base/
and built there with its own Makefile (`make mha`), once: a stamp names the
revision built.  bench/bench_npz.c is then built against each build's CLI
objects (BENCH_NPZ: this build's, from `make bench/bench_npz`).

The member: X, 1024 x 1024 float64 from a normal distribution (8 MiB, as an
activation or a weight is), written by np.savez_compressed; and the same
array by np.savez (stored) as a reference.  Timed, the two builds taking
turns, N rounds (default 7), medians:

- the read alone, in process (bench_npz: read_matrix, as -x reads it: the zip
  checked, the member inflated, its CRC-32, the .npy parsed): 5 reads a
  process, the first (cold: fresh pages) and the median of the other four;
- the command: `mha forward -x x.json --kv one.npz -f npy -o /dev/null`
  (X one row, so the attention itself is a few microseconds and the member's
  read is most of the run), wall time and processor time (user + system);
  the same with the stored archive, which neither build inflates.

Prints a Markdown table and the ratio line; --append FILE also appends them
to FILE (tee.py), as `make bench` does.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tee  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(TOP, "build", "bench-npz")
BASE = os.path.join(TOP, "build", "bench-npz-base")


def sh(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def build_base(rev):
    """REV's mha and bench_npz against its objects, in build/bench-npz-base"""
    stamp = os.path.join(BASE, ".bench-npz-rev")
    full = subprocess.run(["git", "-C", TOP, "rev-parse", rev], check=True, capture_output=True,
                          text=True).stdout.strip()
    if not (os.path.exists(stamp) and open(stamp).read().strip() == full):
        sh(["rm", "-rf", BASE])
        os.makedirs(BASE)
        archive = subprocess.Popen(["git", "-C", TOP, "archive", full], stdout=subprocess.PIPE)
        sh(["tar", "-x", "-C", BASE], stdin=archive.stdout)
        if archive.wait() != 0:
            sys.exit("bench_npz.py: git archive %s failed" % rev)
        print("building %s in %s ..." % (rev, os.path.relpath(BASE, TOP)), file=sys.stderr)
        sh(["make", "-C", BASE, "-j%d" % (os.cpu_count() or 1), "mha"], stdout=subprocess.DEVNULL)
        with open(stamp, "w") as f:
            f.write(full + "\n")
    tool = os.path.join(BASE, "bench_npz")
    if not os.path.exists(tool):
        objs = sorted(os.path.join(BASE, "build", "cli", n)
                      for n in os.listdir(os.path.join(BASE, "build", "cli"))
                      if n.endswith(".o") and n != "main.o")
        libs = subprocess.run("pkg-config --libs libcjson zlib 2>/dev/null || echo -lcjson -lz",
                              shell=True, capture_output=True, text=True).stdout.split()
        sh(["cc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE", "-O2",
            "-I" + os.path.join(BASE, "cli"), "-o", tool, os.path.join(TOP, "bench", "bench_npz.c")]
           + objs + [os.path.join(BASE, "lib", "libmha.a")] + libs + ["-pthread", "-lm"])
    return os.path.join(BASE, "mha"), tool


def make_data():
    os.makedirs(WORK, exist_ok=True)
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((1024, 1024))
    np.savez_compressed(os.path.join(WORK, "one.npz"), X=x)
    np.savez(os.path.join(WORK, "stored.npz"), X=x)
    with open(os.path.join(WORK, "x.json"), "w") as f:
        json.dump(rng.standard_normal((1, 1024)).tolist(), f)
    return x.nbytes, os.path.getsize(os.path.join(WORK, "one.npz"))


def read_times(tool, path, repeats=5):
    out = subprocess.run([tool, path, str(repeats)], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    rows = [(float(ln.split()[1]), float(ln.split()[3])) for ln in out if ln.startswith("wall")]
    return rows[0], rows[1:]


def command_time(mha, npz):
    t = time.perf_counter()
    p = subprocess.Popen([mha, "forward", "-x", os.path.join(WORK, "x.json"), "--kv", npz, "-f",
                          "npy", "-o", "/dev/null"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read()
    p.stderr.close()
    if status != 0:
        sys.exit("bench_npz.py: %s failed: %s" % (mha, err.decode(errors="replace")))
    return wall, ru.ru_utime + ru.ru_stime


def ms(v):
    return "%.1f ms" % (1e3 * v)


def main():
    args, append = tee.take_append(sys.argv[1:])
    rev, rounds = "d3423c1", 7
    while args and args[0].startswith("--"):
        if args[0] == "--base" and len(args) > 1:
            rev, args = args[1], args[2:]
        elif args[0] == "--rounds" and len(args) > 1:
            rounds, args = int(args[1]), args[2:]
        else:
            sys.exit(__doc__)
    if len(args) != 2:
        sys.exit(__doc__)
    now = {"mha": os.path.abspath(args[0]), "read": os.path.abspath(args[1])}
    base_mha, base_read = build_base(rev)
    base = {"mha": base_mha, "read": base_read}
    usize, csize = make_data()
    one, stored = os.path.join(WORK, "one.npz"), os.path.join(WORK, "stored.npz")
    keys = ("read warm wall", "read warm cpu", "read cold wall", "cmd wall", "cmd cpu",
            "stored wall", "stored cpu")
    got = {b: {k: [] for k in keys} for b in ("base", "now")}
    for r in range(rounds):
        # taking turns, the first of each round alternating
        for name in (("base", "now") if r % 2 == 0 else ("now", "base")):
            b = base if name == "base" else now
            cold, warm = read_times(b["read"], one)
            g = got[name]
            g["read cold wall"].append(cold[0])
            g["read warm wall"].append(statistics.median(w for w, _ in warm))
            g["read warm cpu"].append(statistics.median(c for _, c in warm))
            w, c = command_time(b["mha"], one)
            g["cmd wall"].append(w)
            g["cmd cpu"].append(c)
            w, c = command_time(b["mha"], stored)
            g["stored wall"].append(w)
            g["stored cpu"].append(c)
    med = {b: {k: statistics.median(v) for k, v in got[b].items()} for b in got}
    print("Reading a .npz of one deflated member, X: 1024 x 1024 float64 (%.1f MiB; "
          "%.1f MiB deflated by np.savez_compressed), %s's build against this one, "
          "taking turns, median of %d rounds.\n" % (usize / 2**20, csize / 2**20, rev, rounds))
    print("| what | %s | this build | %s / this |" % (rev, rev))
    print("|---|---:|---:|---:|")
    rows = [
        ("read alone, in process (warm), wall", "read warm wall"),
        ("read alone, in process (warm), processor", "read warm cpu"),
        ("read alone, first in its process (cold pages), wall", "read cold wall"),
        ("`mha forward -x x.json --kv one.npz -f npy -o /dev/null`, wall", "cmd wall"),
        ("the same, processor (user + system)", "cmd cpu"),
        ("the same array stored (np.savez), wall", "stored wall"),
        ("the same array stored, processor", "stored cpu"),
    ]
    for label, k in rows:
        a, b = med["base"][k], med["now"][k]
        print("| %s | %s | %s | %.1f× |" % (label, ms(a), ms(b), a / b))
    # a command reads its file once, first in its process: that read is the
    # one users wait for (the warm repeats reuse malloc's pages, which only
    # a build reading into malloc's memory can)
    ratio = med["base"]["read cold wall"] / med["now"]["read cold wall"]
    print("\n**Reading an .npz of one 8 MiB deflated member: %.1f× faster than %s** "
          "(%s against %s, the read as a command makes it, first in its process; warm "
          "repeats %.1f×; the whole command %.1f× in wall time, %.1f× in processor time; "
          "the issue's target: 10×, %s)" %
          (ratio, rev, ms(med["now"]["read cold wall"]), ms(med["base"]["read cold wall"]),
           med["base"]["read warm wall"] / med["now"]["read warm wall"],
           med["base"]["cmd wall"] / med["now"]["cmd wall"],
           med["base"]["cmd cpu"] / med["now"]["cmd cpu"], "met" if ratio >= 10 else "not met"))
    tee.finish(append, "Reading .npz (bench_npz.py, the same session)")


if __name__ == "__main__":
    main()

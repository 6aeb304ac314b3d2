#!/usr/bin/env python3
"""bench_replace.py [--append FILE] [DIR]: what replacing an output file costs
on the filesystem DIR is on (default: the temporary directory, where
bench_process.py writes), whatever program writes it.

`mha forward -o OUT` writes a temporary file beside OUT and renames it over
OUT.  When OUT already exists that costs more than writing a new name, and
bench_process.py shows it.  This separates the causes, for files of the
sizes mha writes at n = 2048 and 8192 (8 and 32 MiB), each way timed around
the one call that differs, ROUNDS rounds, medians:

  - rename onto a name that does not exist (the baseline);
  - rename over a file still in memory (written, never flushed: it holds no
    blocks on disk yet): what ext4 adds at a rename over a file, starting the
    new file's write-back (auto_da_alloc, so that a replaced file survives a
    crash whole);
  - rename over a file on disk (written and fsync'ed, as an output written a
    while ago is): that plus freeing the old file's blocks, which a
    filesystem mounted with `discard` sends to the disk as a discard and
    waits for;
  - truncating a file on disk in place (open with O_TRUNC), as np.save and
    most programs write: the freeing alone.

It prints the filesystem and its mount options, and one Markdown table.
Between rounds it sleeps a little so that each starts with the disk idle.
"""
import os
import statistics
import sys
import tempfile
import time

import tee

ROUNDS = 7
SIZES_MIB = (8, 32)


def mount_of(path):
    """(mount point, type, options) of the filesystem path is on, from
    /proc/self/mountinfo; None where there is none"""
    best = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                point = fields[4].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(tail) >= 3 and (best is None or len(point) >= len(best[0])):
                    best = (point, tail[0], fields[5] + "," + tail[2])
    except OSError:
        return None
    return best


def put(path, data, sync):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def one_round(d, data):
    """the four ways' seconds, each around its one differing call"""
    target, tmp = os.path.join(d, "target.bin"), os.path.join(d, "target.bin.tmp")
    out = {}
    for way in ("new name", "over a file in memory", "over a file on disk", "truncated in place"):
        if os.path.exists(target):
            os.remove(target)
        if way != "new name":
            put(target, data, sync=way != "over a file in memory")
        time.sleep(0.1)  # the disk idle again
        if way == "truncated in place":
            def call():
                fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
                os.close(fd)
        else:
            put(tmp, data, sync=False)

            def call():
                os.rename(tmp, target)
        out[way] = timed(call)
    os.remove(target)
    return out


def main():
    args, append = tee.take_append(sys.argv[1:])
    if len(args) > 1:
        sys.exit("usage: bench_replace.py [--append FILE] [DIR]")
    base = args[0] if args else tempfile.gettempdir()
    try:
        d = tempfile.mkdtemp(prefix="mha-bench-replace-", dir=base)
    except OSError as e:
        sys.exit("bench_replace.py: %s: %s" % (base, e.strerror))
    try:
        where = mount_of(os.path.realpath(d))
        print("Replacing a file in %s: %s.  Each way timed around its one call (the rename, or "
              "the open with O_TRUNC), median of %d rounds, ms.\n" % (
                  base, "on %s (%s), mounted %s" % (where[1], where[0], where[2])
                  if where else "filesystem unknown", ROUNDS))
        ways = ("new name", "over a file in memory", "over a file on disk",
                "truncated in place")
        print("| size | rename onto a new name | rename over a file in memory (write-back "
              "started) | rename over a file on disk (plus its blocks freed) | truncating "
              "a file on disk in place (its blocks freed) |")
        print("|---:|---:|---:|---:|---:|")
        for mib in SIZES_MIB:
            data = bytes(range(256)) * (mib << 12)
            rounds = [one_round(d, data) for _ in range(ROUNDS)]
            print("| %d MiB | %s |" % (mib, " | ".join(
                "%.2f" % (1e3 * statistics.median(r[w] for r in rounds)) for w in ways)))
            sys.stdout.flush()
    finally:
        for name in os.listdir(d):
            os.remove(os.path.join(d, name))
        os.rmdir(d)
    tee.finish(append, "Replacing an output file (bench_replace.py)")


if __name__ == "__main__":
    main()

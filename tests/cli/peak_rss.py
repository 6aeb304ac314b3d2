#!/usr/bin/env python3
"""peak_rss.py BOUND -- COMMAND...: run COMMAND (standard input and error
passed through, its output thrown away), print its exit status, and check
that its peak resident memory (ru_maxrss, what /usr/bin/time -v reports)
stayed within BOUND (a size such as 20M).  Exits 1, printing the peak,
when it did not.

The child starts as a copy of this Python process before it execs the
command, so the peak reads at least Python's own (about 14 MiB): bounds
below 16M mean nothing.  Under AddressSanitizer (ASAN_OPTIONS set, as
make check-asan does) or valgrind (MHA_PEAK_UNCHECKED set, as
tests/valgrind.sh does) the checker's own memory makes any peak
meaningless: only the exit status is checked there.
"""
import os
import subprocess
import sys


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: peak_rss.py BOUND -- COMMAND...")
    bound = size(sys.argv[1])
    child = subprocess.Popen(sys.argv[3:], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    peak = usage.ru_maxrss * 1024
    print("exit", os.waitstatus_to_exitcode(status))
    if os.environ.get("PEAK_RSS_SHOW"):
        print("peak %.1f MiB" % (peak / 2**20), file=sys.stderr)
    if peak > bound and not ("ASAN_OPTIONS" in os.environ
                             or "MHA_PEAK_UNCHECKED" in os.environ):
        print("peak %.1f MiB, more than %s" % (peak / 2**20, sys.argv[1]))
        sys.exit(1)


main()

#!/usr/bin/env python3
"""progress_check.py MHA: the progress bar as a person sees it, on a
pseudo-terminal (only the standard library).

Standard error is a pty of a given width (standard output a file), so the
bar is drawn as on a terminal; what mha writes there is played back as a
terminal would show it (carriage return, ESC[K, newline, and each other
character into the next column), and:

- a float32 run and a float64 run show the bar at all (--dtype f32 once
  drew none);
- Ctrl-C (SIGINT) during a float32 and during a float64 run leaves the
  terminal's line clean (no bar text after the last newline), no output
  file and no temporary file;
- a terminal 15 columns wide never gets a frame wider than 14 (a wrapped
  frame cannot be taken back), and one 3 wide gets nothing;
- TERM=dumb never gets an escape sequence, and its last frame is blanked.

Prints one line per check and "N passed, N failed"; exit status 1 if any
failed.
"""
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from signal_check import default_signals, write_x  # noqa: E402

passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   " + name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, ": " + why if why else ""))


def screen(data):
    """the lines a terminal shows for data: (every line, the widest frame
    drawn on one line before it was taken back or ended)"""
    lines, line, col, widest, i = [], [], 0, 0, 0
    text = data.decode("utf-8", "replace")
    while i < len(text):
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(line))
            line, col = [], 0
        elif text.startswith("\x1b[K", i):
            del line[col:]
            i += 3
            continue
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
            widest = max(widest, len("".join(line).rstrip()))
        i += 1
    lines.append("".join(line))
    return lines, widest


def run(mha, args, cols, term="xterm", stop_after=None):
    """mha args with standard error on a pty cols wide: (exit status, what
    the pty got); stop_after: SIGINT once the bar is drawn, or after that
    many seconds"""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    env = dict(os.environ, TERM=term)
    p = subprocess.Popen([mha] + args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=env, preexec_fn=default_signals)
    os.close(slave)
    got, start, sent = b"", time.time(), False
    while True:
        r, _, _ = select.select([master], [], [], 0.05)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                chunk = b""
            if not chunk and p.poll() is not None:
                break
            got += chunk
        elif p.poll() is not None:
            # drain what is left
            try:
                while select.select([master], [], [], 0.1)[0]:
                    chunk = os.read(master, 4096)
                    if not chunk:
                        break
                    got += chunk
            except OSError:
                pass
            break
        if stop_after is not None and not sent and \
                (b"[" in got or time.time() - start > stop_after):
            time.sleep(0.3)  # a few frames more
            p.send_signal(signal.SIGINT)
            sent = True
        if time.time() - start > 120:
            p.kill()
            break
    p.wait()
    os.close(master)
    return p.returncode, got


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    mha = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="mha-progress-") as tmp:
        big, mid = os.path.join(tmp, "x65.npy"), os.path.join(tmp, "x40.npy")
        write_x(big, 65536)
        write_x(mid, 40000)
        for dtype in ("f32", "f64"):
            out = os.path.join(tmp, "out-%s.npy" % dtype)
            rc, got = run(mha, ["forward", "-x", big, "--heads", "1", "--threads", "2",
                                "--dtype", dtype, "-o", out], 100, stop_after=20)
            lines, _ = screen(got)
            check("%s: the bar is drawn on a terminal" % dtype, b"attention" in got,
                  repr(got[-200:]))
            check("%s: Ctrl-C leaves the line clean" % dtype,
                  rc == -signal.SIGINT and lines[-1].strip() == "",
                  "exit %s, last line %r" % (rc, lines[-1]))
            left = sorted(os.listdir(tmp))
            check("%s: Ctrl-C leaves no output and no temporary file" % dtype,
                  left == ["x40.npy", "x65.npy"], repr(left))
        # a narrow terminal: no frame wider than it, none at all when too narrow
        for cols in (15, 3):
            rc, got = run(mha, ["forward", "-x", mid, "--heads", "1", "--threads", "2",
                                "--dtype", "f32", "-f", "npy", "-o",
                                os.path.join(tmp, "n.npy")], cols)
            lines, widest = screen(got)
            check("a terminal %d wide: frames at most %d wide, the line clean after" %
                  (cols, cols - 1), rc == 0 and widest <= cols - 1 and
                  lines[-1].strip() == "" and (cols > 10) == (b"%" in got),
                  "exit %s, widest %d, %r" % (rc, widest, got[-120:]))
            os.unlink(os.path.join(tmp, "n.npy"))
        rc, got = run(mha, ["forward", "-x", mid, "--heads", "1", "--threads", "2", "--dtype",
                            "f32", "-f", "npy", "-o", os.path.join(tmp, "d.npy")], 80,
                      term="dumb")
        lines, _ = screen(got)
        check("TERM=dumb: the bar without escape sequences, blanked after",
              rc == 0 and b"attention" in got and b"\x1b" not in got and
              lines[-1].strip() == "", repr(got[-200:]))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

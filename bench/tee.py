"""tee.py: a bench script's table printed as it goes and, at its end, also
appended to the run's results file under a heading of its own
(`--append FILE`, as `make bench` gives bench_process.py and
bench_backward.py, so that bench/results-DATE.md holds every table of the
run).  Nothing is appended when the script fails before its end."""
import sys


class _Tee:
    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, s):
        self.parts.append(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()


def take_append(args):
    """args without --append FILE, and FILE (or None); from then on what is
    printed is kept too"""
    if "--append" not in args:
        return args, None
    i = args.index("--append")
    if i + 1 >= len(args):
        sys.exit("--append needs a file")
    path = args[i + 1]
    sys.stdout = _Tee(sys.stdout)
    return args[:i] + args[i + 2:], path


def finish(path, heading):
    """what was printed, appended to path under '## heading' (path None: nothing)"""
    if path is None:
        return
    sys.stdout.flush()
    with open(path, "a") as f:
        f.write("\n## %s\n\n%s" % (heading, "".join(sys.stdout.parts)))

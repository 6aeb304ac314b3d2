"""_run.py: the mha command underneath the package.

Every function of the package is a run of the mha executable: keywords
become its options (heads=2 is --heads 2, kv_heads is --kv-heads), arrays
become .npy and .npz files in a private temporary directory, and the steps
come back in an .npz archive.  The command is the one implementation: its
readers, arithmetic, checks and messages are the package's.

The executable: $MHA_EXECUTABLE, else the one the package was built beside
(pip install ./python in a built tree), else mha on the PATH.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

try:
    from . import _where
except ImportError:  # not built by python/_build: a source checkout's python/ on the path
    _where = None


class MhaError(ValueError):
    """The mha command refused the run: its one-line message."""


def executable():
    """The mha program the package runs (see the module's docstring)."""
    env = os.environ.get("MHA_EXECUTABLE")
    if env:
        return env
    built = getattr(_where, "EXECUTABLE", None)
    if built and os.access(built, os.X_OK):
        return built
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "mha")
    if os.access(here, os.X_OK):  # python/mha/ in the source tree, ./mha built beside it
        return here
    found = shutil.which("mha")
    if found:
        return found
    raise MhaError("the mha program was not found: build it (make), install it (make install), "
                   "or set MHA_EXECUTABLE to its path")


_asked = {}


def _ask(command, flag):
    """what 'mha COMMAND FLAG' prints (--help, --list-options), once per program"""
    exe = executable()
    key = (exe, command, flag)
    if key not in _asked:
        r = subprocess.run([exe, command, flag], capture_output=True, text=True)
        if r.returncode != 0:
            raise MhaError(_message(r.stderr) or "mha %s %s failed" % (command, flag))
        _asked[key] = r.stdout
    return _asked[key]


def command_help(command):
    """'mha COMMAND --help': the command's own description of its options."""
    return _ask(command, "--help")


def list_options(command):
    """'mha COMMAND --list-options': the options the command's parser takes,
    each {"name", "short", "value", "arg"} (the program's own list, never
    its --help's prose)"""
    return json.loads(_ask(command, "--list-options"))["options"]


def _options(command):
    """the long options the command takes"""
    return {o["name"] for o in list_options(command)}


def file_options(command):
    """the options whose argument is a FILE or PATH (names, '-' as '_')"""
    return {o["name"].replace("-", "_") for o in list_options(command)
            if o["arg"] in ("FILE", "PATH")} | {"x", "weights"}


def _flag(name):
    return {"x": "-x", "weights": "-w"}.get(name, "--" + name.replace("_", "-"))


# options the package sets itself: where the results go, and how
_OWN = {"output": "the package reads the results back itself", "format": "the results come back as arrays",
        "o": "the package reads the results back itself", "f": "the results come back as arrays"}


def check_keywords(command, function, kwargs):
    """TypeError for a keyword that is no option of the command, or one the
    package sets itself, before any work"""
    known = _options(command)
    for name in kwargs:
        if name in _OWN:
            raise TypeError("%s(): %s= is not for the package: %s" % (function, name, _OWN[name]))
        if name not in ("x", "weights") and name.replace("_", "-") not in known:
            raise TypeError("%s() got an unexpected keyword argument %r: 'mha %s' has no option --%s"
                            % (function, name, command, name.replace("_", "-")))


def as_array(value, name="array"):
    """a NumPy array from an array, a torch tensor (no torch import) or anything
    with __array__; TypeError for one of Python objects (it would need pickle)"""
    if not isinstance(value, np.ndarray):
        for step in ("detach", "cpu", "numpy"):
            if hasattr(value, step) and callable(getattr(value, step)):
                value = getattr(value, step)()
        value = np.asarray(value)
    if value.dtype.hasobject:
        raise TypeError("%s: an array of numbers, not of Python objects" % name)
    return value


def is_array(value):
    return isinstance(value, np.ndarray) or hasattr(value, "__array__") or \
        (hasattr(value, "numpy") and callable(value.numpy))


def _bytes_of(value):
    """the bytes a keyword's arrays take as files (a dict's, summed); 0 for anything else"""
    if isinstance(value, dict):
        return sum(_bytes_of(v) for v in value.values())
    if isinstance(value, (str, os.PathLike, list, tuple)) or not is_array(value):
        return 0
    size = getattr(value, "nbytes", None)
    return size if isinstance(size, int) else as_array(value).nbytes


_SHM = "/dev/shm"


def _place(need):
    """where a run's directory goes: tempfile's choice (None) when TMPDIR is set, else
    /dev/shm when it is there, writable and has room for twice need (the arrays, and
    results of their size) and a MiB, else tempfile's choice again: a container's
    /dev/shm is often small (64 MiB in Docker), and a full one fails the run"""
    if os.environ.get("TMPDIR") or not (os.path.isdir(_SHM) and os.access(_SHM, os.W_OK)):
        return None
    try:
        st = os.statvfs(_SHM)
    except OSError:
        return None
    return _SHM if st.f_bavail * st.f_frsize >= 2 * need + (1 << 20) else None


class Work:
    """a private temporary directory for one run's files (values: the run's keyword
    values, whose arrays it will hold), on /dev/shm when there is room (_place) and
    shm allows; the command runs in it, so that its messages name them as the
    keywords do (x.npy)"""

    def __init__(self, values=(), shm=True):
        need = sum(_bytes_of(v) for v in values)
        base = _place(need) if shm else None
        self.on_shm = base == _SHM
        self.dir = tempfile.mkdtemp(prefix="mha-python-", dir=base)

    def path(self, name):
        return os.path.join(self.dir, name)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _scalar(name, v):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("%s: a list of numbers or words, not of booleans" % name)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, str):
        return v
    raise TypeError("%s: %r is neither a number nor a word" % (name, v))


def _words(name, items):
    """a list as the command takes it: comma-separated, or blank-separated when an item holds a comma"""
    words = [_scalar(name, v) for v in items]
    if any("," in w for w in words):
        if any(re.search(r"\s", w) for w in words):
            raise ValueError("%s: items with commas and blanks both cannot be told apart" % name)
        return " ".join(words)
    return ",".join(words)


def argument(name, value, work, files=()):
    """one keyword's value as the command's argument: an array's file (named
    after the keyword, in work), a file's name made absolute (files: the
    keywords that name files), anything else as text"""
    if isinstance(value, (str, os.PathLike)):
        value = os.fspath(value)
        return os.path.abspath(value) if name in files and value != "-" else value
    if isinstance(value, dict):
        np.savez(work.path(name + ".npz"), **{str(k): as_array(v, "%s[%r]" % (name, k)) for k, v in value.items()})
        return name + ".npz"
    if is_array(value) and not isinstance(value, (list, tuple)):
        np.save(work.path(name + ".npy"), as_array(value, name), allow_pickle=False)
        return name + ".npy"
    if isinstance(value, (list, tuple)):
        return _words(name, value)
    return _scalar(name, value)


def argv(command, kwargs, work):
    """the command line of a run in work: the command, then each keyword as its option"""
    files = file_options(command)
    out = [command]
    for name, value in kwargs.items():
        if value is None or value is False:
            continue
        if value is True:
            out.append(_flag(name))
        else:
            out += [_flag(name), argument(name, value, work, files)]
    return out


def _message(stderr):
    """the command's message: its lines but the 'Try ... --help' hint"""
    lines = [ln for ln in stderr.strip().split("\n") if ln and not ln.startswith("Try 'mha ")]
    return "\n".join(lines)


class _ShmFull(MhaError):
    """the run filled /dev/shm (its results larger than _place allowed for)"""


def run(args, work, ok=(0,)):
    """run mha with args in work; its CompletedProcess when the status is in ok, else
    MhaError (_ShmFull when work is on /dev/shm and mha found no space left there)"""
    r = subprocess.run([executable()] + list(args), capture_output=True, text=True, cwd=work.dir)
    if r.returncode not in ok:
        said = _message(r.stderr) or "mha %s: exit status %d" % (args[0], r.returncode)
        # mha's messages are strerror's in the C locale (it never sets one)
        full = work.on_shm and "No space left on device" in said
        raise (_ShmFull if full else MhaError)(said)
    return r


def in_work(values, fn, keep=False):
    """fn(work) in a Work for values; once more in tempfile's directory when the run
    filled /dev/shm.  The work is removed after, or with keep, returned beside the
    result (the caller removes it): (work, fn(work))."""
    for shm in (True, False):
        work = Work(values, shm)
        try:
            result = fn(work)
        except _ShmFull:
            work.close()
            continue
        except BaseException:
            work.close()
            raise
        if keep:
            return work, result
        work.close()
        return result
    raise AssertionError("unreachable: a run off /dev/shm never raises _ShmFull")

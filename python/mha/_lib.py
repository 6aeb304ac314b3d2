"""_lib.py: the mha engine (libmhe, engine/mhe.h) in this process, by ctypes.

The package's first way to run: no program started and no file written for
an array.  Arrays go to the engine by pointer (a copy only where the type
or the layout needs one: torch's bfloat16 as its 16 bits, anything not
contiguous), the engine widens float32, float16 and bfloat16 exactly, and
its messages come back in the program's words: an error raises MhaError
("mha: ...", naming the keyword when the engine says which setting), a
warning or a note is a warnings.warn of MhaWarning.  Where the library
cannot be loaded, or a call asks for what the engine does not take in
process yet, the package runs the program instead (_run.py); backend() says
which.

The library: $MHA_LIBRARY (libmhe.so's path), else the one make install put
beside the package (_where.LIBRARY), else the tree's engine/libmhe.so beside
python/ (with lib/libmha.so), else libmhe.so.1 on the loader's path.
"""
import _signal  # signal's C half: the handlers as they are, no enum made (a call's few us)
import ctypes
import json
import os
import signal
import threading
import warnings

import numpy as np

try:
    from . import _where
except ImportError:
    _where = None


class MhaWarning(UserWarning):
    """mha's warnings and notes (a fully masked row, a weight taken as the
    identity, ...): pytest.warns(mha.MhaWarning) catches them."""


MHE_OK, MHE_DATA, MHE_USAGE = 0, 1, 2
MHE_ERROR, MHE_WARNING, MHE_NOTE = 0, 1, 2
_TYPES = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2,
          np.dtype(np.bool_): 4}
MHE_BF16 = 3


class _Message(ctypes.Structure):
    _fields_ = [("severity", ctypes.c_int), ("status", ctypes.c_int), ("text", ctypes.c_char_p),
                ("file", ctypes.c_char_p), ("command", ctypes.c_char_p), ("key", ctypes.c_char_p)]


class _Array(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_size_t),
                ("dim", ctypes.c_size_t * 4)]


class _Setting(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int)]


class _Matrix(ctypes.Structure):
    _fields_ = [("v", ctypes.POINTER(ctypes.c_double)), ("planes", ctypes.c_size_t),
                ("rows", ctypes.c_size_t), ("cols", ctypes.c_size_t)]


class _Tensor(ctypes.Structure):
    _fields_ = [("v", ctypes.POINTER(ctypes.c_double)), ("rank", ctypes.c_size_t),
                ("dim", ctypes.c_size_t * 4)]


class _Verdict(ctypes.Structure):
    _fields_ = [("agree", ctypes.c_int), ("steps_compared", ctypes.c_int),
                ("first_step", ctypes.c_char * 32), ("mistake", ctypes.c_char * 64),
                ("why", ctypes.c_char * 640)]


_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(_Message))
_STOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


def _candidates():
    env = os.environ.get("MHA_LIBRARY")
    if env:
        return [env]
    out = []
    built = getattr(_where, "LIBRARY", None)
    if built:
        out.append(built)
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out.append(os.path.join(top, "engine", "libmhe.so"))
    out.append("libmhe.so.1")
    return out


def _load():
    """the engine, or (None, why)"""
    why = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            why.append("%s: not there" % path)
            continue
        try:
            # libmhe.so needs libmha.so.6: the one beside it in a tree (lib/) or
            # an install (the same folder), loaded first, is taken by its soname
            here = os.path.dirname(path)
            for libmha in (os.path.join(os.path.dirname(here), "lib", "libmha.so"),
                           os.path.join(here, "libmha.so.6")):
                if os.sep in path and os.path.exists(libmha):
                    ctypes.CDLL(libmha, mode=ctypes.RTLD_GLOBAL)
                    break
            lib = ctypes.CDLL(path)
        except OSError as e:
            why.append(str(e))
            continue
        lib.mhe_version_number.restype = ctypes.c_uint
        if lib.mhe_version_number() < 10200:
            why.append("%s: engine %u, the package needs 1.2" % (path, lib.mhe_version_number()))
            continue
        lib.mhe_run_new.restype = ctypes.c_void_p
        lib.mhe_run_free.argtypes = [ctypes.c_void_p]
        lib.mhe_run_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        lib.mhe_run_set_array.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Array)]
        lib.mhe_run_set_theirs.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Array)]
        lib.mhe_run_forward.argtypes = [ctypes.c_void_p]
        lib.mhe_run_backward.argtypes = [ctypes.c_void_p]
        lib.mhe_run_model.argtypes = [ctypes.c_void_p]
        lib.mhe_run_step.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Matrix)]
        lib.mhe_run_compare.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double,
                                        ctypes.c_double, ctypes.POINTER(_Verdict)]
        lib.mhe_run_report.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.mhe_run_report.restype = ctypes.c_void_p
        lib.mhe_free.argtypes = [ctypes.c_void_p]
        lib.mhe_run_results.argtypes = [ctypes.c_void_p]
        lib.mhe_run_results.restype = ctypes.c_size_t
        lib.mhe_run_result.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_Tensor)]
        lib.mhe_run_meta.argtypes = [ctypes.c_void_p]
        lib.mhe_run_meta.restype = ctypes.c_void_p
        lib.mhe_set_message_handler.argtypes = [_HANDLER, ctypes.c_void_p]
        lib.mhe_set_stop_handler.argtypes = [_STOP, ctypes.c_void_p]
        lib.mhe_settings.argtypes = [ctypes.POINTER(_Setting), ctypes.c_size_t]
        lib.mhe_settings.restype = ctypes.c_size_t
        return lib, path
    return None, "; ".join(why)


_lib, _where_loaded = _load()
_said = []


@_HANDLER
def _on_message(ctx, m):
    m = m.contents
    key = m.key.decode() if m.key else None
    if key is None and m.file and m.file.startswith(b"<") and m.file.endswith(b">"):
        key = m.file[1:-1].decode()  # an array given in memory, "<grad-output>"
    _said.append((m.severity, m.status, m.text.decode("utf-8", "replace"), key))


_interrupted = []  # a Ctrl-C during the call under way (_long)


@_STOP
def _ask_stop(ctx):
    # Python runs the SIGINT handler (_on_interrupt) as this callback's code
    # runs, on the main thread: a Ctrl-C in the call is seen here or at the
    # next question, 20 ms on
    return 1 if _interrupted else 0


def _on_interrupt(signum, frame):
    _interrupted.append(signum)


def _long(call, *args):
    """call(*args), a long computation of the engine's, which a Ctrl-C stops
    at once: then KeyboardInterrupt, as Python raises it.  Only where Python's
    own SIGINT handler is in place (a program's own is left alone) and on
    the main thread (the only one Python tells of a signal)."""
    if (threading.get_ident() != threading.main_thread().ident or
            _signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return call(*args)
    del _interrupted[:]
    _signal.signal(signal.SIGINT, _on_interrupt)
    try:
        rc = call(*args)
    finally:
        _signal.signal(signal.SIGINT, signal.default_int_handler)
    if _interrupted:
        del _interrupted[:]
        del _said[:]  # "stopped on request": the interrupt says it
        raise KeyboardInterrupt
    return rc


if _lib is not None:
    _lib.mhe_set_message_handler(_on_message, None)
    _lib.mhe_set_stop_handler(_ask_stop, None)


def loaded():
    """the engine's path, or None"""
    return _where_loaded if _lib is not None else None


# mhe_settings' kinds (enum mhe_kind), in order
KINDS = ("flag", "flag-or-word", "count", "number", "number-or-word", "word", "array", "path")


def settings():
    """every setting the engine takes, [(name, kind)], kind one of KINDS, in
    the engine's order (its own list: mhe_settings); [] without the library"""
    if _lib is None:
        return []
    n = _lib.mhe_settings(None, 0)
    out = (_Setting * n)()
    _lib.mhe_settings(out, n)
    return [(s.name.decode(), KINDS[s.kind]) for s in out]


def why_not():
    return None if _lib is not None else _where_loaded


class Unsupported(Exception):
    """what the engine does not take in process yet: the program runs it"""


def _raise_said(error_type):
    """the messages said during a call: warnings warned, the error raised"""
    said, _said[:] = list(_said), []
    error = None
    for severity, status, text, key in said:
        if severity == MHE_ERROR:
            if error is None:
                error = (text, key)
        else:
            warnings.warn(MhaWarning("mha: %s%s" % ("note: " if severity == MHE_NOTE else "", text)),
                          stacklevel=4)
    if error is not None:
        text, key = error
        if text.startswith("unknown setting '"):
            # a keyword that is no setting: Python's own error for that
            name = text[len("unknown setting '"):].split("'", 1)[0]
            near = text.split("did you mean '", 1)[1].split("'", 1)[0] if "did you mean" in text else None
            # the engine made name safe to show already: quoted, not repr'd again
            raise TypeError("got an unexpected keyword argument '%s': mha has no option --%s%s"
                            % (name.replace("-", "_"), name,
                               "; did you mean %s=?" % near.replace("-", "_") if near else ""))
        if key:
            # the steps returned are the package's steps=, the program's --print
            text = "%s (keyword %s=)" % (text, "steps" if key == "print" else key.replace("-", "_"))
        raise error_type("mha: " + text)


class _Meta:
    """a run's meta as the engine wrote it, read the first time it is
    asked for (most calls never look): Result takes it as a callable"""

    def __init__(self, text):
        self.text = text

    def __call__(self):
        return json.loads(self.text)


class _Held:
    """a result of a run, as NumPy sees it (its array interface), holding
    the run that owns its numbers"""

    def __init__(self, t, run):
        shape = tuple(t.dim[:t.rank])
        addr = ctypes.cast(t.v, ctypes.c_void_p).value
        self.__array_interface__ = {"data": (addr, False), "shape": shape,
                                    "typestr": "<f8", "version": 3}
        self.run = run


class Run:
    """one engine run: settings by name, arrays by pointer (kept alive here)"""

    def __init__(self, error_type):
        self.error_type = error_type
        self.r = _lib.mhe_run_new()
        if not self.r:
            raise MemoryError("mha: out of memory")
        self.keep = []

    def close(self):
        if self.r and _lib is not None:
            _lib.mhe_run_free(self.r)
        self.r = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, rc):
        if rc != MHE_OK:
            _raise_said(self.error_type)
            raise self.error_type("mha: the engine failed (status %d)" % rc)
        _raise_said(self.error_type)

    def set(self, name, value=None):
        self._check(_lib.mhe_run_set(self.r, name.encode(), None if value is None else
                                     str(value).encode()))

    def _array(self, value, name):
        a = _as_engine_array(value, name)
        self.keep.append(a[1])
        return a[0]

    def set_array(self, name, value, label=None):
        a = self._array(value, label or name.replace("-", "_"))
        self._check(_lib.mhe_run_set_array(self.r, name.encode(), ctypes.byref(a)))

    def set_theirs(self, name, value):
        self._check(_lib.mhe_run_set_theirs(self.r, str(name).encode(),
                                            ctypes.byref(self._array(value, name))))

    def compare(self, rtol=None, atol=None, against=None):
        v = _Verdict()
        self._check(_long(_lib.mhe_run_compare, self.r,
                          None if against is None else os.fsencode(against),
                          -1.0 if rtol is None else float(rtol),
                          -1.0 if atol is None else float(atol), ctypes.byref(v)))
        return v

    def forward(self, backward=False, model=False):
        """the results: {name: a NumPy array}, and the meta, of the forward
        (or the backward).  The arrays are the run's own results, no copy:
        the run, which after either holds its results and nothing else, stays
        while any of them does (the arrays given, borrowed, may go)"""
        self._check(_long(_lib.mhe_run_model if model else
                          _lib.mhe_run_backward if backward else _lib.mhe_run_forward, self.r))
        self.keep = []
        out = {}
        for i in range(_lib.mhe_run_results(self.r)):
            name, t = ctypes.c_char_p(), _Tensor()
            self._check(_lib.mhe_run_result(self.r, i, ctypes.byref(name), ctypes.byref(t)))
            out[name.value.decode()] = np.asarray(_Held(t, self))
        p = _lib.mhe_run_meta(self.r)
        if not p:
            _raise_said(self.error_type)
            raise self.error_type("mha: no meta")
        try:
            text = ctypes.string_at(p).decode("utf-8", "replace")
            meta = _Meta(text) if not model else json.loads(text)
        finally:
            _lib.mhe_free(p)
        return out, meta

    def report(self, as_json):
        p = _lib.mhe_run_report(self.r, 1 if as_json else 0)
        if not p:
            _raise_said(self.error_type)
            raise self.error_type("mha: no report")
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            _lib.mhe_free(p)


_DIMS = ctypes.c_size_t * 4


def _as_engine_array(value, name):
    """(an _Array pointing at value's numbers, what must stay alive)"""
    if (type(value) is np.ndarray and value.dtype in _TYPES and 1 <= value.ndim <= 4 and
            value.flags.c_contiguous):
        # the common case, a few microseconds sooner: as it lies
        return (_Array(value.__array_interface__["data"][0], _TYPES[value.dtype], value.ndim,
                       _DIMS(*value.shape)), value)
    dtype = None
    if not isinstance(value, np.ndarray) and type(value).__module__.startswith("torch"):
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if str(t.dtype) == "torch.bfloat16":
            # its 16 bits as they are; the engine widens them exactly
            value = t.contiguous().view(dtype=__import__("torch").int16).numpy()
            dtype = MHE_BF16
        else:
            value = t.numpy()
    if dtype is None:
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise TypeError("%s: an array of numbers, not of Python objects" % name)
        if arr.dtype not in _TYPES:
            if arr.dtype.kind not in "iuf":
                raise TypeError("%s: an array of numbers (float64, float32, float16, bfloat16 "
                                "or bool), not %s" % (name, arr.dtype))
            arr = arr.astype(np.float64)  # whole numbers (positions): exact as doubles
        value = arr
        dtype = _TYPES[arr.dtype]
    value = np.ascontiguousarray(value)
    if value.ndim < 1 or value.ndim > 4:
        raise ValueError("%s: an array of 1 to 4 dimensions, not %d" % (name, value.ndim))
    a = _Array(value.ctypes.data, dtype, value.ndim, _DIMS(*value.shape))
    return a, value


# keywords of compare the engine takes in process; the others (digits,
# sequence, dtype, a path of theirs, ...) send the call to the program
_INPUTS = {"x", "kv", "xk", "xv", "q", "k", "kt", "v", "mask", "positions", "rope_cos", "rope_sin",
           "sinks", "alibi_slopes", "q_norm", "k_norm", "grad_output", "wq", "wk", "wv", "wo",
           "bq", "bk", "bv", "bo", "q_a_proj", "q_a_layernorm", "kv_a_proj_with_mqa",
           "kv_a_layernorm", "kv_b_proj"}
_WEIGHT_NAMES = {"W_Q": "wq", "W_K": "wk", "W_V": "wv", "W_O": "wo", "b_Q": "bq", "b_K": "bk",
                 "b_V": "bv", "b_O": "bo"}
_NOT_HERE = {"digits", "sequence", "dtype", "layout", "progress", "quiet", "json_nonfinite",
             "explain", "cell", "format", "output", "color", "range", "head", "pool", "rows",
             "cols", "full", "force", "compress", "precision", "tokens", "kv_tokens", "kv_len"}


def _settings(run, options):
    for name, value in options.items():
        if value is None or value is False:
            continue
        if name in _NOT_HERE:
            raise Unsupported(name)
        setting = name.replace("_", "-")
        if name == "weights" and isinstance(value, dict):
            for k, w in value.items():
                if k not in _WEIGHT_NAMES:
                    raise Unsupported("weights[%r]" % k)
                run.set_array(_WEIGHT_NAMES[k], w, "weights[%r]" % k)
        elif isinstance(value, (str, os.PathLike)):
            v = os.fspath(value)
            run.set(setting, os.path.abspath(v) if name in _INPUTS | {"weights", "config"} and v != "-" else v)
        elif name in _INPUTS:
            run.set_array(setting, value)
        elif value is True:
            run.set(setting)
        elif isinstance(value, (list, tuple)):
            raise Unsupported(name)
        else:
            run.set(setting, value)


def forward(error_type, steps, backward=False, model=False, **options):
    """forward's (backward's) results (arrays, meta) from the engine, or
    Unsupported"""
    if _lib is None:
        raise Unsupported("library")
    dtype = options.pop("dtype", None)
    if dtype not in (None, "f64", "float64") and (backward or model or dtype not in
                                                  ("bf16", "bfloat16", "fp16", "float16")):
        raise Unsupported("dtype")  # float32's results are the program's floats
    run = Run(error_type)  # freed with the last of its results
    try:
        _settings(run, options)
        if dtype not in (None, "f64", "float64"):
            run.set("dtype", dtype)  # the low-precision reference
        if steps or not backward:
            run.set("print", steps or "output")
        return run.forward(backward)
    except BaseException:
        run.close()
        raise


def model(error_type, checkpoint, **options):
    """a checkpoint's layer from the engine: (its description, as 'mha model
    -f json''s layer object, and its tensors by name), or Unsupported"""
    if _lib is None:
        raise Unsupported("library")
    run = Run(error_type)
    try:
        _settings(run, dict(options, weights=checkpoint))
        arrays, layer = run.forward(model=True)
        return layer, {k: np.array(v) for k, v in arrays.items()}  # small: copies of their own
    finally:
        run.close()


def _batch(options):
    """the sequences of a batch (3-D x, q or kv), or 0"""
    for name in ("x", "q", "kv", "xk"):
        v = options.get(name)
        if v is not None and not isinstance(v, (str, os.PathLike)) and getattr(v, "ndim", 0) == 3:
            return int(v.shape[0])
    return 0


def _one(steps, error_type, options, rtol, atol, sequence=None):
    """one comparison: steps a dict of their arrays (a batch's sequence
    taken from each), or the path of their file or folder"""
    options = dict(options)
    dtype = options.pop("dtype", None)
    if dtype not in (None, "f64", "float64", "bf16", "bfloat16", "fp16", "float16"):
        raise Unsupported("dtype")  # float32's tolerances: the program's
    with Run(error_type) as run:
        _settings(run, options)
        if dtype is not None:
            run.set("dtype", dtype)  # the type their numbers were computed in
        if sequence:
            run.set("sequence", sequence)
        path = None
        if isinstance(steps, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(steps))
        else:
            for name, value in steps.items():
                run.set_theirs(name, value[sequence - 1] if sequence else value)
        run.compare(rtol, atol, path)
        return json.loads(run.report(True)), run.report(False).rstrip("\n")


def compare(steps, error_type, **options):
    """compare's report (data, text) from the engine, or Unsupported.  A
    batch (3-D x): each sequence compared in turn, their arrays' first axis
    the sequences, and the report the first sequence that differs (or the
    last one's, all agreeing), naming it"""
    if _lib is None or not isinstance(steps, (dict, str, os.PathLike)):
        raise Unsupported("steps")
    rtol, atol = options.pop("rtol", None), options.pop("atol", None)
    batch = _batch(options) if "sequence" not in options and isinstance(steps, dict) else 0
    if not batch:
        return _one(steps, error_type, options, rtol, atol)
    for name, value in steps.items():
        if getattr(value, "shape", (0,))[0] != batch:
            raise error_type("mha: %s: a batch of %d sequences gives each of theirs with the "
                             "sequences first, not %s (keyword steps=)"
                             % (name, batch, "x".join(map(str, getattr(value, "shape", ())))))
    for b in range(1, batch + 1):
        data, text = _one(steps, error_type, options, rtol, atol, b)
        if not data["agree"]:
            break
    return data, text

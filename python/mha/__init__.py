"""mha: multi-head attention computed exactly in float64, every step visible,
from Python.

    import mha
    r = mha.forward(x, weights, heads=2, causal=True, steps=("softmax", "output"))
    r.output, r.heads[1].softmax, r["heads.softmax"], r.meta

    mha.testing.assert_attention_close({"scaled": mine, "output": out}, x=x, weights=w, heads=2)

Every keyword is the mha command's option of the same name, '-' for '_'
(kv_heads=2 is --kv-heads 2, causal=True is --causal).  forward, backward,
compare, testing.assert_attention_close, sdpa and load_layer run the mha
engine in this process (backend() "library": arrays by pointer, float16 and bfloat16
widened exactly, results as arrays of the engine's, mha's notes as
MhaWarning, Ctrl-C as KeyboardInterrupt); the rest, and everything where
the engine cannot be loaded, run the mha command, arrays and torch tensors
as .npy files, a dict of arrays as an .npz archive, paths as they are.
mha.sdpa takes scaled_dot_product_attention's arguments.  The signatures
and type hints are the engine's own list of settings; help(mha.forward)
ends with it.  The command's refusal raises MhaError (a ValueError) with its
message; a keyword that is no option raises TypeError before anything runs.
"""
import json
import os
import weakref
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from . import _lib, _run
from ._lib import MhaWarning
from ._result import Head, Layer, Report, Result, read_npz
from ._run import MhaError, executable

#: a NumPy array, a torch tensor or anything with .numpy() or __array__
ArrayLike = Any
#: a file's name, or an array written to one for the run
Input = Union[str, "os.PathLike[str]", ArrayLike]
#: a weights file or checkpoint, or the weights as arrays by name (W_Q, W_K, ...)
Weights = Union[str, "os.PathLike[str]", Mapping[str, ArrayLike]]
#: steps by --print's names: "output", ("softmax", "output"), "all"
Steps = Union[str, Sequence[str]]

__all__ = ["forward", "backward", "compare", "load_layer", "sdpa", "MhaError", "MhaWarning",
           "Result", "Head", "Report", "Layer", "executable", "backend", "testing"]


def backend() -> str:
    """How the package runs: "library" (the mha engine, libmhe, loaded in
    this process: no program started, no file for an array) or "program"
    (the mha executable, when the library cannot be loaded: _lib.why_not()
    says why).  In process: forward, backward, compare,
    testing.assert_attention_close, sdpa and load_layer, with the settings
    the engine lists (their signatures).  The program runs, either way,
    dtype="f32", the options that shape what is printed (digits=, format=,
    ...) and compare with sequence= or dtype=."""
    return "library" if _lib.loaded() else "program"


def _in_process_compare(steps, options):
    """(data, text) of compare's report from the engine, or None when the
    call needs the program"""
    if not _lib.loaded():
        return None
    try:
        return _lib.compare(steps, MhaError, **options)
    except _lib.Unsupported:
        return None


def _steps(steps):
    if steps is None:
        return None
    if isinstance(steps, str):
        return steps
    return ",".join(steps)


def _no_print(function, options):
    if "print" in options or "p" in options:
        raise TypeError("%s(): the steps returned are steps=, not print=" % function)


def _run_to_npz(command, function, options):
    _run.check_keywords(command, function, options)
    def one(work):
        _run.run(_run.argv(command, options, work) + ["-o", "out.npz", "-f", "npz"], work)
        return read_npz(work.path("out.npz"))
    return _run.in_work(options.values(), one)


def forward(x: Optional[Input] = None, weights: Optional[Weights] = None, *,
            heads: Optional[int] = None, kv_heads: Optional[int] = None, causal: bool = False,
            mask: Optional[Input] = None, dtype: Optional[str] = None,
            steps: Optional[Steps] = ("output",), **options: Any) -> Result:
    """mha forward: the attention of x (n x d_model, or batch x n x d_model)
    with weights (a dict of W_Q, W_K, W_V, W_O, ... arrays, an .npz or JSON
    file, a checkpoint, or None for Q = K = V = x).

    steps: the steps returned, as --print names them ("output", "softmax",
    "q", "heads", ... or "all").  Every other option of 'mha forward' is a
    keyword of the same name (below).  Returns a Result: r.output,
    r.heads[h].softmax, r["heads.softmax"], r.meta.
    """
    _no_print("forward", options)
    if _lib.loaded():
        try:
            arrays, meta = _lib.forward(MhaError, _steps(steps), x=x, weights=weights, heads=heads,
                                        kv_heads=kv_heads, causal=causal, mask=mask, dtype=dtype,
                                        **options)
            return Result(arrays, meta)
        except _lib.Unsupported:
            pass
    options = dict(x=x, weights=weights, heads=heads, kv_heads=kv_heads, causal=causal, mask=mask,
                   dtype=dtype, print=_steps(steps), **options)
    return _run_to_npz("forward", "forward", options)


def _heads_last(t, name):
    """[..., H, S, D] as [..., S, H*D] (torch tensors stay torch's, bfloat16 too), and (H, D)"""
    if len(t.shape) not in (3, 4):
        raise ValueError("sdpa(): %s is [batch, heads, seq, dim] or [heads, seq, dim], not %d-D"
                         % (name, len(t.shape)))
    h, s_, d = t.shape[-3:]
    if hasattr(t, "permute"):  # torch
        moved = t.permute(*range(len(t.shape) - 3), -2, -3, -1)
    else:
        moved = np.moveaxis(np.asarray(t), -3, -2)
    return moved.reshape(*t.shape[:-3], s_, h * d), h, d


# mha's names of SDPA's arguments, and the words that name them in a message
_SDPA_NAMES = {"q": "query", "k": "key", "v": "value", "mask": "attn_mask", "scale": "scale",
               "kv_heads": "enable_gqa"}


def _sdpa_words(text, qkv):
    """an error of mha's run of sdpa() in SDPA's words: its arguments'
    names, and an element of query, key or value by its own index
    [b, h, l, e] (mha saw the heads side by side, [b, l, h*e])"""
    import re

    def element(m):
        name, what = m.group(1), m.group(3)
        t, heads, dim = qkv[name]
        shape = tuple(t.shape)
        i = int(m.group(2))
        lead, rows = shape[:-3], shape[-2]
        b, rest = divmod(i, rows * heads * dim) if lead else (None, i)
        row, rest = divmod(rest, heads * dim)
        head, col = divmod(rest, dim)
        at = ([b] if lead else []) + [head, row, col]
        return "%s[%s] is %s" % (_SDPA_NAMES[name], ", ".join(map(str, at)), what)
    text = re.sub(r"<(q|k|v)>: [QKV]: value (\d+) is (\S+)", element, text)
    text = re.sub(r"mask from --mask <mask>", "attn_mask", text)
    text = re.sub(r"<mask>: mask\[", "attn_mask[", text)
    text = re.sub(r"<(q|k|v|mask)>(: [QKV])?", lambda m: _SDPA_NAMES[m.group(1)], text)
    text = re.sub(r"--(scale|mask|causal|kv-heads)\b",
                  lambda m: {"causal": "is_causal"}.get(m.group(1), _SDPA_NAMES.get(
                      m.group(1).replace("-", "_"), m.group(1))), text)
    text = re.sub(r"\(keyword (\w+)=\)",
                  lambda m: "(argument %s=)" % _SDPA_NAMES.get(m.group(1), m.group(1)), text)
    return text.replace("mha: mha: ", "mha: ")


def sdpa(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: Optional[ArrayLike] = None,
         dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
         enable_gqa: bool = False) -> np.ndarray:
    """torch.nn.functional.scaled_dot_product_attention's arguments and
    meaning, computed by mha in float64: query [B, H, L, E], key [B, Hk, S,
    E], value [B, Hk, S, Ev] (or without B); attn_mask a boolean mask (True:
    may attend) or a float one added to the scores, broadcast to [B, H, L,
    S]; is_causal the lower triangle (top-left; not with attn_mask); scale
    the multiplier (default 1/sqrt(E)); enable_gqa lets Hk divide H.
    Returns [B, H, L, Ev] as a float64 NumPy array.  float16 and bfloat16
    tensors are widened exactly.  dropout_p must be 0: dropout is random.

    SDPA's names as mha's: query, key, value are --q, --k, --v (the heads
    side by side: [B, L, H*E]), attn_mask --mask, is_causal --causal,
    scale --scale, Hk < H --kv-heads."""
    if dropout_p:
        raise ValueError("sdpa(): dropout_p=%r: dropout is random; mha computes the attention "
                         "exactly (dropout_p=0)" % dropout_p)
    if is_causal and attn_mask is not None:
        raise ValueError("sdpa(): attn_mask and is_causal together (torch refuses them too)")
    q, h, e = _heads_last(query, "query")
    k, hk, ek = _heads_last(key, "key")
    v, hv, ev = _heads_last(value, "value")
    if ek != e or hv != hk:
        raise ValueError("sdpa(): key is [.., %d, S, %d] and value [.., %d, S, ..]: key's last "
                         "dimension is query's (%d), and value has key's heads" % (hk, ek, hv, e))
    if hk != h and not enable_gqa:
        raise ValueError("sdpa(): query has %d heads and key %d: enable_gqa=True for "
                         "grouped-query attention" % (h, hk))
    options = dict(heads=h, kv_heads=hk if hk != h else None, causal=bool(is_causal),
                   scale=None if scale is None else repr(float(scale)), mask=attn_mask)
    try:
        r = forward(None, None, q=q, k=k, v=v, steps=("output",), **options)
    except MhaError as err:
        raise MhaError(_sdpa_words(str(err), {"q": (query, h, e), "k": (key, hk, e),
                                              "v": (value, hv, ev)})) from None
    out = r.output  # [B, L, H*Ev]
    lead = out.shape[:-1]
    return np.moveaxis(out.reshape(*lead, h, ev), -2, -3)


def backward(x: Optional[Input] = None, weights: Optional[Weights] = None, *,
             grad_output: Optional[Input] = None, heads: Optional[int] = None,
             kv_heads: Optional[int] = None, causal: bool = False, mask: Optional[Input] = None,
             dtype: Optional[str] = None, steps: Optional[Steps] = None, **options: Any) -> Result:
    """mha backward: every gradient of the layer, from dO (grad_output;
    without it, the gradient of the output's sum) back to dX and each
    weight's.  steps: the gradients returned, as its --print names them
    (default: dX and each weight's).  Returns a Result: r.dX, r.dW_Q, ...
    """
    _no_print("backward", options)
    if _lib.loaded():
        try:
            arrays, meta = _lib.forward(MhaError, _steps(steps), backward=True, x=x,
                                        weights=weights, grad_output=grad_output, heads=heads,
                                        kv_heads=kv_heads, causal=causal, mask=mask, dtype=dtype,
                                        **options)
            return Result(arrays, meta)
        except _lib.Unsupported:
            pass
    options = dict(x=x, weights=weights, grad_output=grad_output, heads=heads, kv_heads=kv_heads,
                   causal=causal, mask=mask, dtype=dtype, print=_steps(steps), **options)
    return _run_to_npz("backward", "backward", options)


def _compare_argv(steps, options, work):
    _run.check_keywords("compare", "compare", options)
    if isinstance(steps, (str, os.PathLike)):
        against = os.path.abspath(os.fspath(steps))
    else:
        # named in the report as what they are: 'steps.npz'
        against = _run.argument("steps", dict(steps), work)
    return _run.argv("compare", options, work) + ["--against", against]


def compare(steps: Union[str, "os.PathLike[str]", Mapping[str, ArrayLike]], **options: Any) -> Report:
    """mha compare: steps (a dict of your arrays under mha's keys or the
    names PyTorch, Hugging Face and the tutorials use: q, attn_weights,
    scores, output, dX, ...; or a file) against mha's own run of the same
    options (x=, weights=, heads=, ...), step by step, with the mistake
    that explains the first difference.  Returns a Report: report.agree,
    .first_difference, .diagnosis, and str(report) as 'mha compare' prints it.
    In process when backend() is "library" (arrays by pointer, float16 and
    bfloat16 tensors widened exactly, mha's notes as MhaWarning).
    """
    done = _in_process_compare(steps, options)
    if done is not None:
        data, text = done
        return Report(data, lambda: text)
    def first(work):
        args = _compare_argv(steps, options, work)
        return args, json.loads(_run.run(args + ["-f", "json"], work, ok=(0, 1)).stdout)
    work, (args, data) = _run.in_work([steps, *options.values()], first, keep=True)
    text = []

    def words():
        if not text:
            text.append(_run.run(args, work, ok=(0, 1)).stdout.rstrip("\n"))
        return text[0]
    report = Report(data, words)
    weakref.finalize(report, work.close)
    return report


def load_layer(checkpoint: Union[str, "os.PathLike[str]"], layer: Optional[int] = None, *,
               prefix: Optional[str] = None, **options: Any) -> Layer:
    """mha model: a checkpoint's attention layer (a .safetensors file, its
    index or their folder, config.json beside it) as mha reads it.  The
    Layer's settings are what 'mha model' shows; layer.arrays its tensors
    as a run computes with them ('mha model -o': W_Q ... as -w takes them,
    d_in x d_out, and q_norm, k_norm, sinks, latent attention's);
    mha.forward(x, **layer) and mha.backward(x, **layer) run it."""
    path = os.path.abspath(os.fspath(checkpoint))
    if layer is None and prefix is None:
        raise TypeError("load_layer(): name the layer: layer=N (or prefix=P)")
    keywords = {"weights": path}
    keywords.update({k: v for k, v in dict(options, layer=layer, prefix=prefix).items()
                     if v is not None and k != "max_memory"})
    if _lib.loaded():
        try:
            data, arrays = _lib.model(MhaError, path, **dict(options, layer=layer, prefix=prefix))
            return Layer(keywords, data, arrays)
        except _lib.Unsupported:
            pass
    _run.check_keywords("model", "load_layer", dict(options, layer=layer, prefix=prefix))
    def one(work):
        args = _run.argv("model", dict(options, layer=layer, prefix=prefix), work)
        data = json.loads(_run.run(args[:1] + [path] + args[1:] + ["-f", "json", "-o", "tensors.npz"],
                                   work).stdout)
        with np.load(work.path("tensors.npz"), allow_pickle=False) as z:
            return data, {k: z[k] for k in z.files}
    data, arrays = _run.in_work(options.values(), one)
    return Layer(keywords, data["layers"][0], arrays)


# each kind of the engine's settings (mhe_settings) as a keyword's type
_HINTS = {"flag": bool, "flag-or-word": Union[bool, str, int], "count": Optional[int],
          "number": Optional[float], "number-or-word": Optional[Union[float, str]],
          "word": Optional[str], "array": Optional[Input], "path": Optional[Union[str, "os.PathLike[str]"]]}
# the engine's settings that are no keyword of the function: steps= is
# --print; dO is backward's and compare's, sequence compare's alone
_NOT_KEYWORDS = {"forward": {"print", "grad-output", "sequence"},
                 "backward": {"print", "sequence"}, "compare": {"print"}}


def _signed(function, command):
    """function's signature and type hints from the engine's own list of
    settings (mhe_settings: names and kinds), its explicit parameters first,
    every other setting a keyword-only parameter of the same name ('-' as
    '_'), then **options for what only the program takes; its docstring
    ends with the keywords and their kinds.  Without the library: the
    program's --help, as before."""
    import inspect
    sig = inspect.signature(function)
    params = [p for p in sig.parameters.values() if p.kind != p.VAR_KEYWORD]
    taken = {p.name for p in params}
    listed = []
    for name, kind in _lib.settings():
        key = name.replace("-", "_")
        if name in _NOT_KEYWORDS[command]:
            continue
        listed.append((key, kind))
        if key in taken:
            continue
        taken.add(key)
        params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY,
                                        default=False if kind == "flag" else None,
                                        annotation=Optional[Weights] if key == "weights"
                                        else _HINTS[kind]))
    params.append(inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    function.__signature__ = sig.replace(parameters=params)
    function.__annotations__ = dict(getattr(function, "__annotations__", {}),
                                    **{p.name: p.annotation for p in params
                                       if p.annotation is not inspect.Parameter.empty})
    function.__doc__ = (function.__doc__ or "") + \
        "\n    The engine's settings, each a keyword ('-' as '_'; 'mha %s --help' and\n" % command + \
        "    man mha tell what each does):\n\n" + \
        "".join("      %-20s %s\n" % (k, kind) for k, kind in listed)


def _with_reference(function, command):
    """the function's docstring, then the command's own --help: every option's reference"""
    try:
        reference = _run.command_help(command)
    except MhaError as e:
        reference = "(%s)\n" % e
    function.__doc__ = (function.__doc__ or "") + \
        "\n    The options, from 'mha %s --help' (each a keyword, '-' as '_'):\n\n" % command + \
        "".join("    " + line + "\n" for line in reference.rstrip("\n").split("\n"))


for _f, _c in ((forward, "forward"), (backward, "backward"), (compare, "compare")):
    _signed(_f, _c) if _lib.loaded() else _with_reference(_f, _c)
_with_reference(load_layer, "model") if not _lib.loaded() else None

from . import testing  # noqa: E402  (it uses compare)

__version__ = getattr(_run._where, "VERSION", None) or "unknown"

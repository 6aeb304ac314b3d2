"""The package in process (backend() "library", _lib.py): compare and
assert_attention_close through the engine, no program started, no file
written; float16 and bfloat16 tensors; mha's notes as MhaWarning; errors
naming the keyword."""
import subprocess

import numpy as np
import pytest

import mha
import mha.testing

X = np.array([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 2.0]])

pytestmark = pytest.mark.skipif(mha.backend() != "library",
                                reason="the engine's library is not loaded: %s" % mha._lib.why_not())


@pytest.fixture
def no_process(monkeypatch):
    """any program started during the test fails it"""
    def refuse(*a, **k):
        raise AssertionError("a process was started: %r" % (a[:1],))
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def golden(**options):
    """mha's own steps by the program (the subprocess path), for theirs"""
    return mha.forward(X, steps=("softmax", "output"), **options)


def test_backend_is_the_library():
    assert mha.backend() == "library"
    assert mha._lib.loaded().endswith("libmhe.so") or ".so" in mha._lib.loaded()


def test_compare_in_process_agrees_as_the_program(monkeypatch):
    r = golden(heads=2, causal=True)
    theirs = {"attn_weights": r["heads.softmax"], "output": r.output}
    # the program's report of the same, the library set aside
    with monkeypatch.context() as m:
        m.setattr(mha._lib, "_lib", None)
        assert mha.backend() == "program"
        by_program = mha.compare(theirs, x=X, heads=2, causal=True)
        program_words = str(by_program)
    assert mha.backend() == "library"

    def refuse(*a, **k):
        raise AssertionError("a process was started")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    in_process = mha.compare(theirs, x=X, heads=2, causal=True)
    assert in_process.agree and by_program.agree
    assert in_process.steps == by_program.steps
    # the report's words: the same lines but the first (what was compared)
    assert str(in_process).split("\n")[1:] == program_words.split("\n")[1:]


def test_a_wrong_step_named(no_process):
    theirs = np.full((2, 3, 3), 1.0 / 3)
    report = mha.compare({"attn_weights": theirs}, x=X, heads=2, causal=True)
    assert not report.agree
    assert report.first_difference == "softmax"
    with pytest.raises(AssertionError, match="first difference: softmax"):
        mha.testing.assert_attention_close({"attn_weights": theirs}, x=X, heads=2, causal=True)


def test_scale_mistake_diagnosed(no_process):
    # softmax of QK^T/sqrt(d_model) with Q = K = X, computed here in NumPy
    s = X @ X.T / np.sqrt(4.0)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    report = mha.compare({"attn_weights": p[None]}, x=X, heads=1, scale="dk")
    assert report.agree  # one head: d_k is d_model
    report = mha.compare({"attn_weights": np.stack([p, p])}, x=X, heads=2)
    assert not report.agree


def _torch():
    try:
        import torch as t
    except ImportError:
        pytest.skip("python3-torch is not installed")
    return t


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_tensors_widened_exactly(no_process, dtype):
    t = _torch()
    x16 = t.tensor(X, dtype=getattr(t, dtype))
    wide = x16.to(t.float64).numpy()  # exactly its values
    # theirs: softmax of the widened values, in float64, by NumPy
    s = wide @ wide.T / np.sqrt(4.0)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    mha.testing.assert_attention_close({"attn_weights": p[None]}, x=x16, rtol=1e-12, atol=1e-14)
    # and their bfloat16 numbers as theirs: compared as given (widened)
    report = mha.compare({"attn_weights": t.tensor(p[None], dtype=getattr(t, dtype))}, x=x16)
    assert report.steps[0]["shape"] == [1, 3, 3]


def test_notes_are_warnings(no_process):
    # W_K and W_V without W_Q: W_Q is the identity, said in a note
    w = {"W_K": np.eye(4), "W_V": np.eye(4)}
    with pytest.warns(mha.MhaWarning, match="identity"):
        report = mha.compare({"output": np.zeros((3, 4))}, x=X, weights=w)
    assert not report.agree


def test_errors_name_the_keyword(no_process):
    with pytest.raises(mha.MhaError, match=r"heads.*\(keyword heads=\)"):
        mha.compare({"output": np.zeros((3, 4))}, x=X, heads=0)
    with pytest.raises(TypeError, match="did you mean heads="):
        mha.compare({"output": np.zeros((3, 4))}, x=X, hedas=2)
    with pytest.raises(mha.MhaError, match=r"<x>: X: value 1 is nan"):
        bad = X.copy()
        bad[0, 1] = np.nan
        mha.compare({"output": np.zeros((3, 4))}, x=bad)


RNG = np.random.default_rng(7)
XB = RNG.normal(size=(2, 5, 8))        # a batch of two sequences
W8 = {k: RNG.normal(size=(8, 8)) for k in ("W_Q", "W_K", "W_V", "W_O")}
CASES = [
    dict(x=X, steps=("output",)),
    dict(x=X, heads=2, causal=True, steps=("softmax", "output")),
    dict(x=XB[0], weights=dict(W8, W_K=W8["W_K"][:, :4], W_V=W8["W_V"][:, :4]), heads=4,
         kv_heads=2, rope="half", causal=True, steps="all"),
    dict(x=XB[0], weights=W8, heads=2, window="2", scale="dmodel", steps=("scores", "masked", "output")),
    dict(x=XB[0], weights={"W_Q": W8["W_Q"], "W_K": W8["W_K"], "W_V": W8["W_V"]}, heads=2,
         mask=RNG.normal(size=(5, 5)), steps=("mask", "softmax", "concat", "output")),
    dict(x=XB, weights=W8, heads=2, causal=True, steps=("softmax", "output")),
    dict(x=XB[0], weights=W8, heads=2, alibi=True, softcap=5.0, steps=("softcapped", "output")),
    # the low-precision reference (mha forward --dtype bf16, fp16)
    dict(x=XB[0], weights=W8, heads=4, kv_heads=2, rope="half", causal=True, dtype="bf16",
         weights_kv=True, steps="all"),
    dict(x=XB, weights=W8, heads=2, dtype="fp16", steps=("softmax", "output")),
]


def same_as_program(call, monkeypatch, **options):
    """call(**options) in process: the program's names, shapes, bits and
    meta (but the inputs' names: the program's files, mask.npy, the
    engine's arrays, <mask>), no process started; (mine, the program's)"""
    with monkeypatch.context() as m:
        m.setattr(mha._lib, "_lib", None)
        program = call(**options)

    def refuse(*a, **k):
        raise AssertionError("a process was started")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    mine = call(**options)
    assert list(mine) == list(program)
    for k in program:
        assert mine[k].shape == program[k].shape, k
        assert np.array_equal(mine[k], program[k], equal_nan=True), k  # the same bits

    def names(meta):
        return {k: (v.replace(".npy", "").strip("<>") if isinstance(v, str) else v)
                for k, v in meta.items() if k not in ("inputs", "weights")}
    assert names(mine.meta) == names(program.meta)
    return mine, program


@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_in_process_is_the_program(case, monkeypatch):
    options = dict(CASES[case])
    if options.pop("weights_kv", False):
        options["weights"] = dict(W8, W_K=W8["W_K"][:, :4], W_V=W8["W_V"][:, :4])
    mine, program = same_as_program(mha.forward, monkeypatch, **options)
    if options.get("dtype") in ("bf16", "fp16"):
        # every value one of the type's
        t = np.float16 if options["dtype"] == "fp16" else None
        for k, v in mine.items():
            if t is not None:
                assert np.array_equal(v.astype(t).astype(np.float64), v), k
            else:
                u = v.astype(np.float32).view(np.uint32)
                assert not np.any(u & 0xFFFF), k
    assert len(mine.heads) == len(program.heads)


def test_forward_results_are_the_runs_alone(no_process):
    """float64 inputs are borrowed, not copied; the results are the run's
    own arrays, no copy, and the run (holding its results and nothing else)
    goes with the last of them"""
    import gc
    import weakref
    x, w = XB[0].copy(), {k: v.copy() for k, v in W8.items()}
    steps = ("softmax", "output")
    want = mha.forward(XB[0], W8, heads=2, causal=True, steps=steps).output.copy()
    r = mha.forward(x, w, heads=2, causal=True, steps=steps)
    out, soft = r.output, r["heads.softmax"]
    run = weakref.ref(out.base.run)
    x[:] = np.nan  # the inputs changed and gone: the results are the run's
    del x, w, r
    gc.collect()
    assert np.array_equal(out, want)
    assert soft.shape == (2, 5, 5) and np.allclose(soft.sum(-1), 1)
    del out
    gc.collect()
    assert run() is not None  # soft still holds it
    del soft
    gc.collect()
    assert run() is None
    bad = XB[0].copy()
    bad[2, 3] = np.inf
    with pytest.raises(mha.MhaError, match=r"<x>: X: value 19 is inf: expected finite"):
        mha.forward(bad, W8, heads=2)
    with pytest.raises(mha.MhaError, match=r"W_Q.*value 0 is nan"):
        mha.forward(XB[0], dict(W8, W_Q=np.full((8, 8), np.nan)), heads=2)


def test_forward_bfloat16_x(no_process):
    t = _torch()
    x16 = t.tensor(XB[0], dtype=t.bfloat16)
    r = mha.forward(x16, W8, heads=2, steps=("output",))
    wide = mha.forward(x16.to(t.float64).numpy(), W8, heads=2, steps=("output",))
    assert np.array_equal(r.output, wide.output)


def test_a_batch_with_one_sequence_wrong_named(no_process):
    rng = np.random.default_rng(3)
    xb = rng.normal(size=(4, 5, 8))
    w = {k: rng.normal(size=(8, 8)) for k in ("W_Q", "W_K", "W_V")}
    # theirs: each sequence's softmax by NumPy (2 heads, causal), sequence 3 wrong
    def softmax_of(x):
        q, k = x @ w["W_Q"], x @ w["W_K"]
        out = []
        for h in range(2):
            s = q[:, 4 * h:4 * h + 4] @ k[:, 4 * h:4 * h + 4].T / 2.0
            s[np.triu_indices(5, 1)] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out.append(p / p.sum(axis=1, keepdims=True))
        return np.stack(out)
    theirs = np.stack([softmax_of(x) for x in xb])
    mha.testing.assert_attention_close({"attn_weights": theirs}, x=xb, weights=w, heads=2, causal=True)
    theirs[2, 1, 3, 0] += 1e-4
    with pytest.raises(AssertionError, match="sequence 3 of the batch"):
        mha.testing.assert_attention_close({"attn_weights": theirs}, x=xb, weights=w, heads=2,
                                           causal=True)
    report = mha.compare({"attn_weights": theirs}, x=xb, weights=w, heads=2, causal=True)
    assert not report.agree and report.data["sequence"] == 3
    with pytest.raises(mha.MhaError, match="sequences first"):
        mha.compare({"attn_weights": theirs[0]}, x=xb, weights=w, heads=2, causal=True)


def sdpa_ref(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's semantics transcribed in
    NumPy (its documentation's reference code), float64"""
    L, S = q.shape[-2], k.shape[-2]
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    bias = np.zeros((L, S))
    if is_causal:
        bias[~np.tril(np.ones((L, S), dtype=bool))] = -np.inf
    if attn_mask is not None:
        bias = np.where(attn_mask, 0.0, -np.inf) if attn_mask.dtype == bool else attn_mask + bias
    if enable_gqa:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    w = q @ np.swapaxes(k, -2, -1) * scale + bias
    w = np.exp(w - w.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


SDPA_CASES = [
    dict(),
    dict(is_causal=True),
    dict(scale=0.3),
    dict(mask="bool"),
    dict(mask="float"),
    dict(gqa=True),
    dict(gqa=True, is_causal=True, nobatch=True),
]


@pytest.mark.parametrize("case", range(len(SDPA_CASES)))
def test_sdpa_as_torch_defines_it(case, no_process):
    c = SDPA_CASES[case]
    rng = np.random.default_rng(case)
    hk = 2 if c.get("gqa") else 4
    q = rng.normal(size=(2, 4, 5, 8))
    k, v = rng.normal(size=(2, hk, 5, 8)), rng.normal(size=(2, hk, 5, 6))
    mask = None
    if c.get("mask") == "bool":
        mask = rng.random((5, 5)) > 0.3
        mask[:, 0] = True
    elif c.get("mask") == "float":
        mask = rng.normal(size=(2, 1, 5, 5))
    if c.get("nobatch"):
        q, k, v = q[0], k[0], v[0]
    kw = dict(attn_mask=mask, is_causal=c.get("is_causal", False), scale=c.get("scale"),
              enable_gqa=bool(c.get("gqa")))
    got, want = mha.sdpa(q, k, v, **kw), sdpa_ref(q, k, v, **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_sdpa_refusals():
    q = np.zeros((1, 4, 3, 8))
    with pytest.raises(ValueError, match="enable_gqa"):
        mha.sdpa(q, np.zeros((1, 2, 3, 8)), np.zeros((1, 2, 3, 8)))
    with pytest.raises(ValueError, match="dropout"):
        mha.sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="together"):
        mha.sdpa(q, q, q, attn_mask=np.ones((3, 3), dtype=bool), is_causal=True)
    # mha's refusals in SDPA's words: its arguments' names, an element of
    # query, key or value by its own [b, h, l, e]
    k = np.zeros((1, 4, 5, 8))
    with pytest.raises(mha.MhaError, match=r"^mha: attn_mask is 3x4 but the scores are 3x5"):
        mha.sdpa(q, k, k, attn_mask=np.zeros((3, 4)))
    with pytest.raises(mha.MhaError, match=r"^mha: attn_mask\[0\]\[1\] is nan"):
        m = np.zeros((3, 5))
        m[0, 1] = np.nan
        mha.sdpa(q, k, k, attn_mask=m)
    bad = q.copy()
    bad[0, 2, 1, 5] = np.inf
    with pytest.raises(mha.MhaError, match=r"^mha: query\[0, 2, 1, 5\] is inf.*\(argument query=\)"):
        mha.sdpa(bad, k, k)
    bad = np.zeros((4, 5, 8))
    bad[3, 4, 0] = np.nan
    with pytest.raises(mha.MhaError, match=r"^mha: value\[3, 4, 0\] is nan"):
        mha.sdpa(q[0], k[0], bad)
    with pytest.raises(mha.MhaError, match=r"\(argument scale=\)"):
        mha.sdpa(q, k, k, scale=float("nan"))


def test_sdpa_bfloat16(no_process):
    t = _torch()
    g = t.Generator().manual_seed(1)
    q, k, v = (t.randn(2, 4, 5, 8, generator=g).to(t.bfloat16) for _ in range(3))
    got = mha.sdpa(q, k, v, is_causal=True)
    want = sdpa_ref(*(x.to(t.float64).numpy() for x in (q, k, v)), is_causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_ctrl_c_stops_a_long_call_at_once(no_process):
    """a Ctrl-C (SIGINT) 0.3 s into a forward of several seconds (16384
    tokens, d_model 256) stops it within a few hundredths: KeyboardInterrupt,
    as Python raises it, and Python's own handler back after"""
    import os
    import signal
    import threading
    import time
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16384, 256))
    w = {k: rng.standard_normal((256, 256)) / 16 for k in ("W_Q", "W_K", "W_V", "W_O")}
    sent = []

    def later():
        time.sleep(0.3)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=later).start()
    with pytest.raises(KeyboardInterrupt):
        mha.forward(x, w, heads=4)
    stopped = time.perf_counter()
    assert sent and stopped - sent[0] < 0.25, "stopped %.3f s after the Ctrl-C" % (stopped - sent[0])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert mha.forward(X, heads=1).output.shape == (3, 4)  # the next call runs whole


BW_CASES = [
    dict(x=X, heads=1),
    dict(x=XB[0], weights=W8, heads=2, causal=True),
    dict(x=XB[0], weights=W8, heads=2, grad_output=RNG.normal(size=(5, 8)), steps="all"),
    dict(x=XB[0], weights=dict(W8, W_K=W8["W_K"][:, :4], W_V=W8["W_V"][:, :4]), heads=4,
         kv_heads=2, rope="half", causal=True, steps=("dX", "dW_Q", "dq_rot", "heads.dS")),
    dict(x=XB, weights=W8, heads=2, mask=RNG.normal(size=(5, 5)), steps=("dX", "dS")),
    dict(x=XB[0], weights=W8, heads=2, softcap=5.0, window="2", exact=True),
]


@pytest.mark.parametrize("case", range(len(BW_CASES)))
def test_backward_in_process_is_the_program(case, monkeypatch):
    """mha.backward through the engine: the program's names, shapes, bits
    and meta, no process started"""
    options = dict(BW_CASES[case])
    if isinstance(options.get("steps"), tuple):
        options["steps"] = tuple(s.replace("heads.", "") for s in options["steps"])
    same_as_program(mha.backward, monkeypatch, **options)


def test_backward_errors_name_the_keyword(no_process):
    with pytest.raises(mha.MhaError, match=r"unknown step 'dXX': did you mean 'dX'\? \(keyword steps=\)"):
        mha.backward(XB[0], W8, heads=2, steps="dXX")
    with pytest.raises(mha.MhaError, match=r"grad.output.*\(keyword grad_output=\)"):
        mha.backward(XB[0], W8, heads=2, grad_output=np.ones((4, 8)))


def test_signatures_from_the_engines_own_list():
    """forward, backward and compare carry a signature and type hints made
    from the engine's list of settings (mhe_settings), at import, with no
    program asked (the program named nowhere)"""
    import inspect
    import os
    import sys
    import typing
    names = {n.replace("-", "_"): k for n, k in mha._lib.settings()}
    assert names["heads"] == "count" and names["rope_theta"] == "number" and names["x"] == "array"
    for f, skip in ((mha.forward, {"print", "grad_output", "sequence"}),
                    (mha.backward, {"print", "sequence"}), (mha.compare, {"print"})):
        params = inspect.signature(f).parameters
        assert set(names) - skip <= set(params), set(names) - skip - set(params)
        assert list(params)[-1] == "options"  # what only the program takes
        hints = typing.get_type_hints(f)
        assert hints["rope_theta"] == typing.Optional[float], f
        assert hints["exact"] is bool and params["exact"].default is False
    assert "grad_output" in inspect.signature(mha.backward).parameters
    assert "grad_output" not in inspect.signature(mha.forward).parameters
    code = ("import inspect, mha; assert mha.backend() == 'library'; "
            "assert 'rope_theta' in inspect.signature(mha.forward).parameters; "
            "assert not mha._run._asked, mha._run._asked")
    env = dict(os.environ, MHA_EXECUTABLE="/nonexistent/mha",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_load_layer_in_process_is_the_program(monkeypatch):
    """mha.load_layer through the engine (mhe_run_model): mha model's
    description and tensors exactly, a refusal in its words, no process"""
    import os
    ck = os.path.join(os.path.dirname(__file__), "..", "..", "samples", "tiny-llama", "model")
    with monkeypatch.context() as m:
        m.setattr(mha._lib, "_lib", None)
        program = mha.load_layer(ck, layer=1)
        with pytest.raises(mha.MhaError) as said:
            mha.load_layer(ck, layer=9)

    def refuse(*a, **k):
        raise AssertionError("a process was started")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    mine = mha.load_layer(ck, layer=1)
    assert mine.settings == program.settings
    assert list(mine.arrays) == list(program.arrays)
    for k in program.arrays:
        assert np.array_equal(mine.arrays[k], program.arrays[k]), k
    assert set(mine) == set(program)  # the keywords forward(x, **layer) takes
    x = np.random.default_rng(0).normal(size=(3, mine.arrays["W_Q"].shape[0]))
    assert mha.forward(x, **mine).output.shape[0] == 3
    with pytest.raises(mha.MhaError) as again:
        mha.load_layer(ck, layer=9)
    assert str(again.value).split(" (keyword")[0] == str(said.value)


def test_compare_a_file_of_theirs_in_process(tmp_path, monkeypatch):
    """compare with the path of their .npz: in process, the program's
    report word for word (the path named as given)"""
    r = mha.forward(XB[0], W8, heads=2, steps=("softmax", "output"))
    path = tmp_path / "theirs.npz"
    np.savez(path, attn_weights=r["heads.softmax"], output=r.output * 1.001)
    with monkeypatch.context() as m:
        m.setattr(mha._lib, "_lib", None)
        program = mha.compare(str(path), x=XB[0], weights=W8, heads=2)
        program_text = str(program)  # the program's words, made when asked

    def refuse(*a, **k):
        raise AssertionError("a process was started")
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    mine = mha.compare(path, x=XB[0], weights=W8, heads=2)
    assert not mine.agree and mine.first_difference == "output"
    assert mine.data == program.data
    assert str(mine) == program_text
    assert str(path) in str(mine).split("\n")[0]


def test_key_states_per_key_value_head(no_process):
    """Hugging Face's key_states and value_states before repeat_kv ([B, G,
    n, d], G key/value heads): compared as each query head's, and said"""
    w = dict(W8, W_K=W8["W_K"][:, :4], W_V=W8["W_V"][:, :4])
    r = mha.forward(XB, w, heads=4, kv_heads=2, rope="half", steps=("k_rot", "v"))
    K = r.k_rot.reshape(2, 5, 2, 2).transpose(0, 2, 1, 3)
    V = r.V.reshape(2, 5, 2, 2).transpose(0, 2, 1, 3)
    rep = mha.compare({"key_states": K, "value_states": V}, x=XB, weights=w, heads=4, kv_heads=2,
                      rope="half")
    assert rep.agree, str(rep)
    assert "one per key/value head (Hugging Face's before repeat_kv)" in str(rep)
    wrong = K.copy()
    wrong[:, 1] = K[:, 0]  # the second key/value head's keys are the first's
    rep = mha.compare({"key_states": wrong}, x=XB, weights=w, heads=4, kv_heads=2, rope="half")
    assert not rep.agree and rep.first_difference == "heads.K"


def test_in_proj_gradients_split(no_process):
    """nn.MultiheadAttention's packed gradients as a torch user names them
    (in_proj_weight.grad [3E, E] in PyTorch's (out, in), in_proj_bias.grad
    [3E]): split into dW_Q, dW_K, dW_V and db_Q, db_K, db_V"""
    w = dict(W8, b_Q=np.ones(8) * 0.1, b_K=np.ones(8) * 0.2, b_V=np.ones(8) * 0.3)
    g = mha.backward(XB[0], w, heads=2, steps=("dW_Q", "dW_K", "dW_V", "db_Q", "db_K", "db_V"))
    packed = {"in_proj_weight.grad": np.concatenate([g.dW_Q.T, g.dW_K.T, g.dW_V.T]),
              "in_proj_bias.grad": np.concatenate([g.db_Q.ravel(), g.db_K.ravel(), g.db_V.ravel()])}
    rep = mha.compare(packed, x=XB[0], weights=w, heads=2)
    assert rep.agree, str(rep)
    assert [s["step"] for s in rep.steps] == ["dW_Q", "dW_K", "dW_V", "db_Q", "db_K", "db_V"]
    wrong = dict(packed, **{"in_proj_weight.grad": packed["in_proj_weight.grad"][[*range(8, 16), *range(8), *range(16, 24)]]})
    rep = mha.compare(wrong, x=XB[0], weights=w, heads=2)  # q's and k's blocks swapped
    assert not rep.agree and rep.first_difference == "dW_Q"
    with pytest.raises(mha.MhaError, match=r"in_proj_weight.grad is not that shape: .*\[3E, E\]"):
        mha.compare({"in_proj_weight.grad": np.zeros((7, 8))}, x=XB[0], weights=w, heads=2)


def test_bf16_tensors_judged_by_their_precision(no_process):
    """bfloat16 tensors as a port gives them: judged by the bfloat16
    reference (mha.forward(dtype="bf16") stands in for the port); the same
    values widened to float32 need dtype="bf16", and a wrong output is
    reported with its ratio; factor= loosens the verdict"""
    t = _torch()
    w = dict(W8)
    ref = mha.forward(XB[0], w, heads=2, causal=True, dtype="bf16", steps=("q", "softmax", "output"))
    theirs = {"q": t.from_numpy(np.array(ref.Q)).to(t.bfloat16),
              "attn_weights": t.from_numpy(np.array(ref["heads.softmax"])).to(t.bfloat16),
              "output": t.from_numpy(np.array(ref.output)).to(t.bfloat16)}
    mha.testing.assert_attention_close(theirs, x=XB[0], weights=w, heads=2, causal=True)
    rep = mha.compare(theirs, x=XB[0], weights=w, heads=2, causal=True)
    assert rep.agree and all(s["type"] == "bf16" and s["ratio"] == 1 for s in rep.steps), str(rep)
    wide = {k: v.float() for k, v in theirs.items()}
    with pytest.raises(AssertionError, match="--dtype bf16 judges them"):
        mha.testing.assert_attention_close(wide, x=XB[0], weights=w, heads=2, causal=True)
    mha.testing.assert_attention_close(wide, x=XB[0], weights=w, heads=2, causal=True, dtype="bf16")
    off = dict(theirs, output=theirs["output"] + 0.25)
    rep = mha.compare(off, x=XB[0], weights=w, heads=2, causal=True)
    bad = [s for s in rep.steps if s["step"] == "output"][0]
    assert not rep.agree and bad["ratio"] > 2 and "times the bfloat16 reference's" in str(rep)
    assert mha.compare(off, x=XB[0], weights=w, heads=2, causal=True, factor=bad["ratio"] * 2).agree

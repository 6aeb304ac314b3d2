"""The Python package (python/mha) against an independent NumPy attention,
finite differences and the mha command itself.

Run by make test-python (part of make check): MHA_EXECUTABLE names the
built ./mha, PYTHONPATH python/.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import mha
import mha.testing

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
rng = np.random.default_rng(35)
X = rng.normal(size=(6, 8))
W = {k: rng.normal(size=(8, 8)) / 2 for k in ("W_Q", "W_K", "W_V", "W_O")}


def attention(x, w, heads, causal=False, scale=None, wq_t=False):
    """a plain NumPy multi-head attention, float64: the reference (and, with
    scale= or wq_t=, someone's buggy one)"""
    q = x @ (w["W_Q"].T if wq_t else w["W_Q"])
    k, v = x @ w["W_K"], x @ w["W_V"]
    n, dk = x.shape[0], q.shape[1] // heads
    out, steps = [], {"scores": [], "scaled": [], "softmax": []}
    for h in range(heads):
        cols = slice(h * dk, (h + 1) * dk)
        s = q[:, cols] @ k[:, cols].T
        sc = s / (np.sqrt(dk) if scale is None else scale)
        if causal:
            sc = np.where(np.tril(np.ones((n, n))) > 0, sc, -np.inf)
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        steps["scores"].append(s)
        steps["scaled"].append(s / (np.sqrt(dk) if scale is None else scale))
        steps["softmax"].append(p)
        out.append(p @ v[:, cols])
    steps = {k: np.stack(v) for k, v in steps.items()}
    steps["Q"] = q
    steps["output"] = np.concatenate(out, axis=1) @ w["W_O"]
    return steps


def cli(*args, cwd=None):
    r = subprocess.run([mha.executable()] + list(args), capture_output=True, text=True, cwd=cwd)
    return r


# ---- forward ------------------------------------------------------------------

def test_forward_matches_numpy():
    r = mha.forward(X, W, heads=2, causal=True, steps="all")
    ref = attention(X, W, 2, causal=True)
    assert r.output.dtype == np.float64
    np.testing.assert_allclose(r.output, ref["output"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r["heads.softmax"], ref["softmax"], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(r.heads[1].scores, ref["scores"][1], rtol=1e-12, atol=1e-14)
    assert np.array_equal(r.heads[0].softmax, r["heads.softmax"][0])
    assert r.meta["heads"] == 2 and r.meta["causal"] == "top-left" and r.meta["dtype"] == "f64"


def test_forward_steps_and_keys():
    r = mha.forward(X, W, heads=2, steps=("softmax", "output"))
    assert set(r) == {"heads.softmax", "output"}
    assert r["heads.softmax"].shape == (2, 6, 6) and r.output.shape == (6, 8)
    with pytest.raises(AttributeError, match="no step 'Q' in this run"):
        r.Q
    assert mha.forward(X, W).output.shape == (6, 8)  # the default: the output alone


def test_forward_same_bits_as_the_command(tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "w.npz", **W)
    assert cli("forward", "-x", "x.npy", "-w", "w.npz", "--heads", "2", "--window", "2,0", "-o", "out.npy",
               cwd=tmp_path).returncode == 0
    r = mha.forward(X, W, heads=2, window=(2, 0))
    assert np.array_equal(r.output, np.load(tmp_path / "out.npy"))


def test_forward_float32():
    r = mha.forward(X, W, heads=2, dtype="f32")
    assert r.output.dtype == np.float32 and r.meta["dtype"] == "f32"
    np.testing.assert_allclose(r.output, attention(X, W, 2)["output"], rtol=1e-4, atol=1e-5)


def test_forward_batch():
    xb = rng.normal(size=(3, 5, 8))
    r = mha.forward(xb, W, heads=2, causal=True, steps=("softmax", "output"))
    assert r.output.shape == (3, 5, 8) and r["heads.softmax"].shape == (3, 2, 5, 5)
    assert r.heads[1].softmax.shape == (3, 5, 5)
    for b in range(3):
        ref = attention(xb[b], W, 2, causal=True)
        np.testing.assert_allclose(r.output[b], ref["output"], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(r.heads[1].softmax[b], ref["softmax"][1], rtol=1e-12, atol=1e-15)


def test_forward_paths_and_options_as_the_command():
    # paths as they are, relative to where Python runs; lists as the command's commas
    here = os.getcwd()
    os.chdir(os.path.join(TOP, "samples", "worked-example"))
    try:
        r = mha.forward("x.json", "weights.json", heads=2, tokens=["The", "quick", "brown", "fox", "jumps", "over"],
                        steps=("scaled",))
    finally:
        os.chdir(here)
    assert r["heads.scaled"].shape == (2, 6, 6)


def test_forward_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, requires_grad=True)
    r = mha.forward(x, {k: torch.tensor(v) for k, v in W.items()}, heads=2)
    np.testing.assert_allclose(r.output, attention(X, W, 2)["output"], rtol=1e-12, atol=1e-14)


# ---- a checkpoint's layer --------------------------------------------------------

def test_load_layer_and_run_it(tmp_path):
    model = os.path.join(TOP, "samples", "tiny-llama", "model")
    layer = mha.load_layer(model, layer=1)
    assert layer.heads == 2 and layer.kv_heads == 1 and layer.settings["rope"]["mode"] == "half"
    assert dict(layer) == {"weights": model, "layer": 1}
    x = json.load(open(os.path.join(TOP, "samples", "tiny-llama", "x.json")))
    x = np.array(x["X"] if isinstance(x, dict) else x)
    r = mha.forward(x, **layer)  # the output alone: the path the command takes for it
    got = cli("forward", "-x", os.path.join(TOP, "samples", "tiny-llama", "x.json"), "-w", model,
              "--layer", "1", "-o", str(tmp_path / "o.npy"))
    assert got.returncode == 0 and np.array_equal(r.output, np.load(tmp_path / "o.npy"))
    # its tensors, as the run reads them: the same output from them and its settings
    assert {k: v.shape for k, v in layer.arrays.items()} == {"W_Q": (8, 8), "W_K": (8, 4), "W_V": (8, 4),
                                                              "W_O": (8, 8)}
    again = mha.forward(x, layer.arrays, heads=layer.heads, kv_heads=layer.kv_heads, rope=layer.rope["mode"],
                        rope_theta=layer.rope["theta"], causal=True)
    assert np.array_equal(again.output, r.output)
    with pytest.raises(TypeError, match="name the layer"):
        mha.load_layer(model)
    with pytest.raises(mha.MhaError, match="layer 7"):
        mha.load_layer(model, layer=7)


# ---- backward -------------------------------------------------------------------

def test_backward_against_finite_differences():
    dO = rng.normal(size=(6, 8))
    g = mha.backward(X, W, heads=2, causal=True, grad_output=dO)
    assert set(g) >= {"dX", "dW_Q", "dW_K", "dW_V", "dW_O"}

    def loss(x, w):
        return float((attention(x, w, 2, causal=True)["output"] * dO).sum())
    eps = 1e-6
    for (i, j) in ((0, 0), (3, 5), (5, 7)):
        xp, xm = X.copy(), X.copy()
        xp[i, j] += eps
        xm[i, j] -= eps
        assert abs((loss(xp, W) - loss(xm, W)) / (2 * eps) - g.dX[i, j]) < 1e-7
        wp, wm = {k: v.copy() for k, v in W.items()}, {k: v.copy() for k, v in W.items()}
        wp["W_K"][i, j] += eps
        wm["W_K"][i, j] -= eps
        assert abs((loss(X, wp) - loss(X, wm)) / (2 * eps) - g.dW_K[i, j]) < 1e-7


def test_backward_float32_and_default_dO():
    g = mha.backward(X, W, heads=2, dtype="f32", steps=("dX",))
    assert set(g) == {"dX"} and g.dX.dtype == np.float32
    g64 = mha.backward(X, W, heads=2)
    np.testing.assert_allclose(g.dX, g64.dX, rtol=1e-3, atol=1e-4)


# ---- compare and the assertion ------------------------------------------------------

def same_report(words, program_stdout):
    """the package's report is the command's, word for word; in process its
    first line says what it compared as 'their arrays' (no file was written)"""
    mine, theirs = words.split("\n"), program_stdout.rstrip("\n").split("\n")
    if mha.backend() == "library":
        assert mine[0].startswith("mha compare: 'their arrays' against"), mine[0]
        return mine[1:] == theirs[1:]
    return mine == theirs


def test_compare_report_is_the_commands(tmp_path):
    ref = attention(X, W, 2, causal=True, scale=np.sqrt(8))
    steps = {"scaled": ref["scaled"], "output": ref["output"]}
    report = mha.compare(steps, x=X, weights=W, heads=2, causal=True)
    assert not report.agree and report.first_difference == "scaled"
    assert report.diagnosis["mistake"] == "scale-dmodel"
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "weights.npz", **W)
    np.savez(tmp_path / "steps.npz", **steps)
    r = cli("compare", "-x", "x.npy", "-w", "weights.npz", "--heads", "2", "--causal", "--against", "steps.npz",
            cwd=tmp_path)
    assert r.returncode == 1 and same_report(str(report), r.stdout)
    ok = mha.compare({"output": attention(X, W, 2)["output"]}, x=X, weights=W, heads=2)
    assert ok.agree and ok.first_difference is None and ok.diagnosis is None


def test_assert_attention_close_passes_and_fails_word_for_word(tmp_path):
    ref = attention(X, W, 2)
    mha.testing.assert_attention_close({"softmax": ref["softmax"], "output": ref["output"]}, x=X, weights=W,
                                       heads=2)
    wrong = dict(ref, output=ref["output"] + 1e-6)
    with pytest.raises(AssertionError) as e:
        mha.testing.assert_attention_close({"output": wrong["output"]}, x=X, weights=W, heads=2)
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "weights.npz", **W)
    np.savez(tmp_path / "steps.npz", output=wrong["output"])
    r = cli("compare", "-x", "x.npy", "-w", "weights.npz", "--heads", "2", "--against", "steps.npz", cwd=tmp_path)
    assert same_report(str(e.value), r.stdout)
    # the tolerances are compare's options
    mha.testing.assert_attention_close({"output": wrong["output"]}, x=X, weights=W, heads=2, atol=1e-5)


# README "Finding the bug" and docs/finding-the-bug.md: three buggy attentions and the right one

def test_bug_no_scaling():
    bug = attention(X, W, 2, scale=1.0)
    with pytest.raises(AssertionError, match="you did not scale the scores"):
        mha.testing.assert_attention_close(bug, x=X, weights=W, heads=2)


def test_bug_wq_transposed():
    bug = attention(X, W, 2, wq_t=True)
    with pytest.raises(AssertionError, match="you applied W_Q the wrong way round"):
        mha.testing.assert_attention_close({"Q": bug["Q"], "output": bug["output"]}, x=X, weights=W, heads=2)


def test_bug_sqrt_dmodel():
    bug = attention(X, W, 2, scale=np.sqrt(8))
    with pytest.raises(AssertionError, match=r"you divided by sqrt\(d_model\)"):
        mha.testing.assert_attention_close(bug, x=X, weights=W, heads=2)


def test_the_right_attention_passes():
    mha.testing.assert_attention_close(attention(X, W, 2, causal=True), x=X, weights=W, heads=2, causal=True)


def test_assert_with_torch_tensors():
    torch = pytest.importorskip("torch")
    ref = attention(X, W, 2)
    mha.testing.assert_attention_close({"attn_weights": torch.tensor(ref["softmax"]),
                                        "output": torch.tensor(ref["output"])},
                                       x=torch.tensor(X), weights={k: torch.tensor(v) for k, v in W.items()}, heads=2)


# ---- errors -----------------------------------------------------------------------

def test_errors():
    assert issubclass(mha.MhaError, ValueError)
    with pytest.raises(TypeError, match="no option --headz"):
        mha.forward(X, W, headz=2)
    # the weights' names as the run reads them: -w weights.npz by the program, <wq> in process
    with pytest.raises(mha.MhaError, match=r"W_Q from .* has 8 columns, which --heads 3 does not divide"):
        mha.forward(X, W, heads=3)
    with pytest.raises(mha.MhaError, match="no-such.npy"):
        mha.forward("no-such.npy")
    with pytest.raises(mha.MhaError, match="--rope"):
        mha.forward(X, W, rope="sideways")
    with pytest.raises(TypeError):
        mha.compare({"output": X}, x=X, colour=True)
    with pytest.raises(TypeError, match="steps="):
        mha.forward(X, print="softmax")
    with pytest.raises(TypeError, match="output= is not for the package"):
        mha.forward(X, output="o.npy")
    with pytest.raises(TypeError, match=r"weights\['W_Q'\]: an array of numbers"):
        mha.forward(X, {"W_Q": np.array([object()] * 64).reshape(8, 8)})
    with pytest.raises(TypeError, match="x: an array of numbers"):
        mha.forward(np.array([[1, "a"], [None, 2]], dtype=object))


def test_no_files_left(tmp_path):
    before = set(os.listdir(tempfile.gettempdir())) | (set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm")
                                                         else set())
    mha.forward(X, W, heads=2)
    with pytest.raises(mha.MhaError):
        mha.forward(X, W, heads=3)
    after = set(os.listdir(tempfile.gettempdir())) | (set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm")
                                                        else set())
    assert not {n for n in after - before if n.startswith("mha-python-")}


def test_a_small_dev_shm_is_passed_over(monkeypatch):
    """the arrays go to /dev/shm only when it has room for them twice over and a
    MiB (Docker's is 64 MiB, and a full one failed the run), and never when TMPDIR
    is set; else where tempfile puts its files, and the run is the same"""
    from mha import _run

    w8 = {"W_Q": np.zeros((1024, 512)), "W_K": np.zeros((512, 512))}  # 4 MiB and 2 MiB
    assert _run._bytes_of(w8) == 6 << 20 and _run._bytes_of("w.npz") == 0
    assert _run._bytes_of([1.0, 2.0]) == 0 and _run._bytes_of(np.zeros(3, np.float32)) == 12

    class Room:
        f_frsize = 4096

        def __init__(self, mib):
            self.f_bavail = (mib << 20) // 4096
    monkeypatch.delenv("TMPDIR", raising=False)
    shm = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
    monkeypatch.setattr(_run.os, "statvfs", lambda path: Room(13))
    assert _run._place(6 << 20) == ("/dev/shm" if shm else None)
    assert _run._place((6 << 20) + 1) is None
    with _run.Work([X, w8]) as work:
        assert not work.dir.startswith("/dev/shm/")
        assert os.path.dirname(work.dir) == tempfile.gettempdir()
    # a run through the directory tempfile chose gives the numbers it gives on /dev/shm
    monkeypatch.setattr(_run.os, "statvfs", lambda path: Room(0))
    np.testing.assert_allclose(mha.forward(X, W, heads=2).output, attention(X, W, 2)["output"],
                               rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(_run.os, "statvfs", lambda path: Room(1 << 20))
    monkeypatch.setenv("TMPDIR", tempfile.gettempdir())
    assert _run._place(0) is None


SMALL_SHM_RUN = """
import sys, numpy as np, mha
x = np.random.default_rng(5).normal(size=(512, 64))
r = mha.forward(x, None, heads=8, causal=True, steps="all")
np.save(sys.argv[1], r["heads.softmax"])
np.save(sys.argv[2], x)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_full_dev_shm_runs_again_elsewhere(tmp_path):
    """a run whose results fill /dev/shm (here a 4 MiB one, in a mount namespace of
    its own) is made again in tempfile's directory: the same numbers, nothing left"""
    soft, xs = tmp_path / "softmax.npy", tmp_path / "x.npy"
    script = ("{ mount -t tmpfs -o size=4m tmpfs /dev/shm || exit 77; } && \"$0\" -c \"$1\" \"$2\" \"$3\" && "
              "test -z \"$(ls -A /dev/shm)\"")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, SMALL_SHM_RUN, str(soft), str(xs)],
                       capture_output=True, text=True)
    if r.returncode == 77 or (r.returncode != 0 and "unshare" in r.stderr):
        pytest.skip("no mount namespace with a tmpfs here: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    x = np.load(xs)
    ref = attention(x, {k: np.eye(64) for k in ("W_Q", "W_K", "W_V", "W_O")}, 8, causal=True)
    np.testing.assert_allclose(np.load(soft), ref["softmax"], rtol=1e-12, atol=1e-15)


def test_help_lists_the_options():
    """help(mha.forward) ends with every keyword: the engine's list of
    settings and their kinds when the library is loaded (no program asked
    at import), else the command's --help"""
    if mha.backend() == "library":
        for f, opts in ((mha.forward, ("kv_heads", "causal", "rope", "rope_theta")),
                        (mha.backward, ("grad_output", "exact")), (mha.compare, ("sequence", "x"))):
            assert all(o in f.__doc__ for o in opts), f.__name__
            assert "--help" in f.__doc__
        return
    for f, opts in ((mha.forward, ("--kv-heads", "--causal", "--rope", "--print")),
                    (mha.backward, ("--grad-output",)), (mha.compare, ("--rtol", "--against")),
                    (mha.load_layer, ("--prefix",))):
        assert all(o in f.__doc__ for o in opts), f.__name__


def test_list_options_is_the_help():
    """'mha COMMAND --list-options' (what the package reads) names the very
    options the command's --help describes, and says which take a file"""
    import re
    import subprocess
    from mha import _run
    for command in ("forward", "backward", "compare", "model"):
        listed = {o["name"] for o in _run.list_options(command)}
        helped = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)",
                                subprocess.run([_run.executable(), command, "--help"],
                                               capture_output=True, text=True).stdout))
        assert listed == helped, (command, sorted(listed ^ helped))
    assert {"x", "weights", "mask", "sinks", "config"} <= _run.file_options("forward")
    assert "grad_output" in _run.file_options("backward")
    assert "heads" not in _run.file_options("forward")

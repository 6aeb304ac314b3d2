#!/usr/bin/env python3
"""formats_check.py MHA: the same case gives the same numbers, bit for bit,
whatever the files look like.

Inputs: X in JSON, CSV and .npy (float64 C and Fortran order, float32);
weights as one JSON object, as a directory of CSV or .npy files, one by one
with --wq/--wk/--wv/--wo/--b*, as per-head 3-D arrays, and in PyTorch's
layout (transposed, and nn.MultiheadAttention's packed state_dict).
Outputs: JSON, CSV (one matrix, and several in blocks), Markdown, .npy, and
-o DIR/ in CSV, .npy and JSON, each read back and compared with the JSON
output.  Where torch is importable, mha's output from a state_dict is
compared with nn.MultiheadAttention itself.

Prints one line per check and ends with 'N passed, N failed'.
"""
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

MHA = None
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok %s" % name)
    else:
        failed += 1
        print("FAIL %s%s" % (name, ": " + detail if detail else ""))


def run(*args, stdin=None):
    """mha's standard output as text; stdin may be text or bytes."""
    if isinstance(stdin, str):
        stdin = stdin.encode()
    r = subprocess.run([MHA, *args], input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("mha %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                    r.stderr.decode().strip()))
    return r.stdout.decode()


def strict_json(text):
    def no_constants(name):
        raise ValueError("non-standard JSON constant %s" % name)
    return json.loads(text, parse_constant=no_constants)


def to_array(v):
    def conv(x):
        if isinstance(x, list):
            return [conv(e) for e in x]
        return {"-inf": -np.inf, "inf": np.inf, "nan": np.nan}.get(x, x) if isinstance(x, str) else x
    return np.array(conv(v), dtype=np.float64)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def write_csv(path, a, header=False):
    with open(path, "w") as f:
        if header:
            f.write(",".join("c%d" % j for j in range(a.shape[1])) + "\r\n")
        for row in np.atleast_2d(a):
            f.write(",".join(repr(float(x)) for x in row) + "\r\n")


def same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def main():
    global MHA
    if len(sys.argv) != 2:
        sys.exit("usage: formats_check.py MHA")
    MHA = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(7)
    n, n_kv, E, H = 5, 7, 8, 2
    dk = E // H
    X = rng.normal(size=(n, E))
    Xkv = rng.normal(size=(n_kv, E))
    W = {k: rng.normal(size=(E, E)) / np.sqrt(E) for k in ("W_Q", "W_K", "W_V", "W_O")}
    B = {k: rng.normal(size=E) for k in ("b_Q", "b_K", "b_V", "b_O")}
    # --exact: one path for every run, so that outputs can be compared bit for bit
    attn = ["--heads", str(H), "--causal=bottom-right", "--exact"]

    with tempfile.TemporaryDirectory(prefix="mha-formats-") as t:
        p = lambda *parts: os.path.join(t, *parts)  # noqa: E731
        write_json(p("x.json"), {"X": X.tolist()})
        write_json(p("kv.json"), Xkv.tolist())
        write_json(p("w.json"), {**{k: v.tolist() for k, v in W.items()},
                                 **{k: v.tolist() for k, v in B.items()}})
        ref = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w.json"),
                  *attn, "-p", "all", "-f", "json")
        doc = strict_json(ref)

        # ---- X and X_kv in every input format ----
        write_csv(p("x.csv"), X, header=True)
        np.save(p("x.npy"), X)
        np.save(p("x_fortran.npy"), np.asfortranarray(X))
        np.save(p("kv_big_endian.npy"), Xkv.astype(">f8"))
        write_csv(p("kv.csv"), Xkv)
        for xin, kvin in (("x.csv", "kv.csv"), ("x.npy", "kv_big_endian.npy"),
                          ("x_fortran.npy", "kv.json")):
            out = run("forward", "-x", p(xin), "--kv", p(kvin), "-w", p("w.json"),
                      *attn, "-p", "all", "-f", "json")
            check("inputs %s + %s give the JSON inputs' output, byte for byte" % (xin, kvin),
                  out == ref)
        with open(p("x.npy"), "rb") as f:
            out = run("forward", "-x", "-", "--kv", p("kv.json"), "-w", p("w.json"), *attn,
                      "-p", "all", "-f", "json", stdin=f.read())
        check(".npy X from standard input", out == ref)
        # float32: the same as JSON holding the float32 values exactly
        X32 = X.astype(np.float32)
        np.save(p("x32.npy"), X32)
        write_json(p("x32.json"), X32.astype(np.float64).tolist())
        a = run("forward", "-x", p("x32.npy"), "-w", p("w.json"), "--heads", "2", "-f", "json")
        b = run("forward", "-x", p("x32.json"), "-w", p("w.json"), "--heads", "2", "-f", "json")
        check("float32 .npy X reads as its exact float64 values", a == b)

        # ---- weights: directory of CSV, of .npy, one by one ----
        os.mkdir(p("wcsv"))
        os.mkdir(p("wnpy"))
        for k, v in {**W, **B}.items():
            write_csv(p("wcsv", k + ".csv"), v)
            np.save(p("wnpy", k + ".npy"), v)
        with open(p("wnpy", "README.md"), "w") as f:
            f.write("not a weight, and not read\n")
        for d in ("wcsv", "wnpy"):
            out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p(d),
                      *attn, "-p", "all", "-f", "json")
            check("-w %s/ (one file per weight) gives the JSON weights' output" % d, out == ref)
        opts = []
        for k in list(W) + list(B):
            opts += ["--" + k.replace("_", "").lower(), p("wcsv", k + ".csv")]
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), *opts, *attn,
                  "-p", "all", "-f", "json")
        check("--wq --wk --wv --wo --bq --bk --bv --bo give the same output", out == ref)
        W2 = W["W_V"] * 2
        write_csv(p("wv2.csv"), W2)
        write_json(p("w_v2.json"), {**{k: v.tolist() for k, v in W.items()}, "W_V": W2.tolist(),
                                    **{k: v.tolist() for k, v in B.items()}})
        a = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w.json"),
                "--wv", p("wv2.csv"), *attn, "-f", "json")
        b = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w_v2.json"),
                *attn, "-f", "json")
        check("--wv replaces the W_V of -w", a == b)

        # ---- per-head 3-D weights: the same as column blocks ----
        def per_head(w, h):  # (d_in, h*d) -> (h, d_in, d)
            return w.reshape(w.shape[0], h, -1).transpose(1, 0, 2)
        ph = {"W_Q": per_head(W["W_Q"], H), "W_K": per_head(W["W_K"], H),
              "W_V": per_head(W["W_V"], H), "W_O": W["W_O"].reshape(H, dk, E),
              "b_Q": B["b_Q"].reshape(H, dk), "b_K": B["b_K"].reshape(H, dk),
              "b_V": B["b_V"].reshape(H, dk), "b_O": B["b_O"]}
        write_json(p("w_heads.json"), {k: v.tolist() for k, v in ph.items()})
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w_heads.json"),
                  *attn, "-p", "all", "-f", "json")
        check("per-head W_i (3-D JSON) gives the column blocks' output", out == ref)
        os.mkdir(p("wheads_npy"))
        for k, v in ph.items():
            np.save(p("wheads_npy", k + ".npy"), v)
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("wheads_npy"),
                  *attn, "-p", "all", "-f", "json")
        check("per-head W_i (3-D .npy files) gives the column blocks' output", out == ref)

        # ---- PyTorch's layout ----
        tw = {k: v.T for k, v in W.items()}
        write_json(p("w_torch.json"), {**{k: v.tolist() for k, v in tw.items()},
                                       **{k: v.tolist() for k, v in B.items()}})
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w_torch.json"),
                  "--layout", "torch", *attn, "-p", "all", "-f", "json")
        check("--layout torch: (out, in) weights give the same output", out == ref)
        sd = {"self_attn.in_proj_weight": np.concatenate([tw["W_Q"], tw["W_K"], tw["W_V"]]),
              "self_attn.in_proj_bias": np.concatenate([B["b_Q"], B["b_K"], B["b_V"]]),
              "self_attn.out_proj.weight": tw["W_O"], "self_attn.out_proj.bias": B["b_O"]}
        write_json(p("state_dict.json"), {k: v.tolist() for k, v in sd.items()})
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("state_dict.json"),
                  "--layout", "torch", *attn, "-p", "all", "-f", "json")
        check("--layout torch: a packed nn.MultiheadAttention state_dict gives the same output",
              out == ref)
        os.mkdir(p("sd_npy"))
        for k, v in sd.items():
            np.save(p("sd_npy", k.split(".", 1)[1] + ".npy"), v)
        out = run("forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("sd_npy"),
                  "--layout", "torch", *attn, "-p", "all", "-f", "json")
        check("--layout torch: a state_dict saved as .npy files gives the same output", out == ref)
        try:
            import torch
        except ImportError:
            print("torch not importable: nn.MultiheadAttention comparison skipped")
        else:
            m = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
            write_json(p("real_sd.json"),
                       {k: v.detach().numpy().tolist() for k, v in m.state_dict().items()})
            with torch.no_grad():
                x = torch.from_numpy(X)[None]
                want = m(x, x, x, need_weights=False)[0][0].numpy()
            got = to_array(strict_json(run("forward", "-x", p("x.json"), "-w", p("real_sd.json"),
                                           "--layout", "torch", "--heads", str(H),
                                           "-f", "json"))["output"])
            err = np.max(np.abs(got - want) / np.maximum(1, np.abs(want)))
            check("a real nn.MultiheadAttention state_dict: mha agrees with torch to 1e-12 "
                  "(%.1e)" % err, err <= 1e-12)

        # ---- outputs ----
        base = ["forward", "-x", p("x.json"), "--kv", p("kv.json"), "-w", p("w.json"), *attn]
        one = run(*base, "-f", "csv")
        got = np.loadtxt(io.StringIO(one), delimiter=",", ndmin=2)
        check("--format csv: one matrix as plain CSV, exactly the JSON numbers",
              same_bits(got, to_array(doc["output"])))
        many = run(*base, "-p", "all", "-f", "csv")
        blocks, name = {}, None
        for line in many.splitlines():
            if line.startswith("# "):
                name = line[2:].split(":")[0].split(" ")[0]
                blocks[name] = []
            elif line:
                blocks[name].append([float(v) for v in line.split(",")])
        want = {"X": doc["X"], "Q": doc["Q"], "K": doc["K"], "V": doc["V"],
                "output": doc["output"]}
        for h, head in enumerate(doc["heads"], 1):
            for k, v in head.items():
                want["head%d_%s" % (h, k)] = v
        check("--format csv with several matrices: a '# name' line before each, the names "
              "-o DIR/ would give, the same numbers",
              set(want) <= set(blocks) and
              all(same_bits(blocks[k], to_array(v)) for k, v in want.items()),
              "blocks %s" % sorted(blocks))
        for fmt, ext in (("csv", "csv"), ("npy", "npy"), ("json", "json")):
            d = p("out_" + fmt) + "/"
            run(*base, "-p", "all", "-f", fmt, "-o", d)
            files = sorted(os.listdir(d))
            ok = True
            for k, v in want.items():
                path = os.path.join(d, k + "." + ext)
                if ext == "csv":
                    a = np.loadtxt(path, delimiter=",", ndmin=2)
                elif ext == "npy":
                    a = np.load(path)
                else:
                    with open(path) as f:
                        a = to_array(strict_json(f.read()))
                ok = ok and same_bits(a, to_array(v))
            check("-o DIR/ --format %s: one file per matrix (%d files), each equal to the JSON"
                  % (fmt, len(files)), ok and not any(".mha-tmp-" in f for f in files))
        run(*base, "-f", "npy", "-o", p("out.npy"))
        check("--format npy -o FILE.npy: np.load reads the output exactly",
              same_bits(np.load(p("out.npy")), to_array(doc["output"])))
        md = run(*base, "-p", "q,softmax", "-f", "markdown", "--precision", "4")
        tables = md.count("|---|")
        check("--format markdown: a titled GitHub table per matrix (%d)" % tables,
              tables == 1 + 2 * H and md.startswith("**Q = X\\*W\\_Q + b\\_Q** (5×8)"))

        # ---- stacking: one run's output is the next run's input ----
        j = run(*base, "-f", "json")
        c = run(*base, "-f", "csv")
        a = run("forward", "-x", "-", "-w", p("w.json"), "--heads", "2", "-f", "json", stdin=j)
        b = run("forward", "-x", "-", "-w", p("w.json"), "--heads", "2", "-f", "json", stdin=c)
        check("stacking two layers through JSON and through CSV gives the same numbers", a == b)

        # ---- round trips with Python's json: its NaN/Infinity in, floats out ----
        n = 4
        mask = np.zeros((n, n))
        mask[np.triu_indices(n, 1)] = -np.inf
        with open(p("pymask.json"), "w") as f:
            json.dump({"mask": mask.tolist()}, f)  # Python writes -Infinity bare
        with open(p("pymask.json")) as f:
            check("json.dump writes the mask's -inf as the bare token -Infinity",
                  "-Infinity" in f.read())
        xs = X[:n].tolist()
        write_json(p("x4.json"), {"X": xs})
        causal = run("forward", "-x", p("x4.json"), "--causal", "-p", "masked,output", "-f", "json")
        py = run("forward", "-x", p("x4.json"), "--mask", p("pymask.json"), "-p", "masked,output",
                 "-f", "json", "--json-nonfinite", "python")
        d = json.loads(py)
        masked = np.array(d["heads"][0]["masked"])
        check("--json-nonfinite python: json.load and np.array give float64, -inf where masked",
              masked.dtype == np.float64 and bool(np.all(np.isneginf(masked[np.triu_indices(n, 1)]))))
        c = strict_json(causal)
        check("a Python -Infinity mask gives --causal's numbers, bit for bit",
              same_bits(masked, to_array(c["heads"][0]["masked"])) and
              same_bits(np.array(d["output"]), to_array(c["output"])))
        check("the default JSON stays strict (jq reads it): -inf as the string \"-inf\"",
              '"-inf"' in causal and "Infinity" not in causal)
        again = run("forward", "-x", "-", "--causal", "-p", "output", "-f", "json",
                    "--json-nonfinite", "python", stdin=py)
        check("python-style JSON output is the next run's input",
              json.loads(again)["output"] is not None)
        with open(p("xnan.json"), "w") as f:
            json.dump([[1.0, float("nan")], [0.0, 1.0]], f)
        r = subprocess.run([MHA, "forward", "-x", p("xnan.json")], capture_output=True, text=True)
        check("a NaN in X from json.dump is refused with its place",
              r.returncode == 1 and "xnan.json:1:8: X[0][1]: NaN is not allowed here" in r.stderr,
              r.stderr.strip())

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print("FAIL %s" % e)
        print("%d passed, %d failed" % (passed, failed + 1))
        sys.exit(1)

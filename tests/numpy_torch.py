"""numpy_torch.py: mha against PyTorch in float64, when torch can be imported:
scaled_dot_product_attention and nn.MultiheadAttention (torch_cases), and
PyTorch's boolean masks, True = blocked, handed to mha with --mask-bool
block (torch_mask_cases).  numpy_check.py runs them."""

import math
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_io import bit_equal, compare, dump_json, parse_json, run, to_array  # noqa: E402
from numpy_ref import torch_mha_convention  # noqa: E402


def torch_cases(binary, rng):
    """(name, function) pairs comparing mha with PyTorch in float64."""
    import torch
    import torch.nn.functional as F

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

    def mha_output(tmp, files, opts):
        args = []
        for flag, (fname, value) in files.items():
            path = os.path.join(tmp, fname)
            with open(path, "w") as f:
                f.write(dump_json(value) + "\n")
            args += [flag, path]
        doc = parse_json(run(binary, args + opts + ["--format", "json", "--print",
                                                    "softmax,output"]))
        sm = np.stack([to_array(h["softmax"], "softmax") for h in doc["heads"]])
        return to_array(doc["output"], "output"), sm

    def heads_of(a, H):  # (n, H*d) -> (1, H, n, d)
        n = a.shape[0]
        return t(a).reshape(n, H, -1).transpose(0, 1).unsqueeze(0)

    def sdpa_case(H, G, n_q, n_kv, d_k, d_v, causal=False, scale=None, mask=None):
        def check():
            Q = rng.normal(size=(n_q, H * d_k))
            K = rng.normal(size=(n_kv, G * d_k))
            V = rng.normal(size=(n_kv, G * d_v))
            opts = ["--heads", str(H), "--kv-heads", str(G)]
            kw = {}
            if causal:
                opts.append("--causal")
                kw["is_causal"] = True
            if scale is not None:
                opts += ["--scale", repr(scale)]
                kw["scale"] = scale
            files = {"--q": ("q.json", Q), "--k": ("k.json", K), "--v": ("v.json", V)}
            m = None
            if mask == "bool":
                m = rng.random((n_q, n_kv)) < 0.7
                m[:, 0] = True                  # no fully masked row: torch gives NaN
                kw["attn_mask"] = torch.from_numpy(m)
            elif mask == "add":
                m = rng.normal(size=(n_q, n_kv))
                m[rng.random((n_q, n_kv)) < 0.3] = -np.inf
                m[:, -1] = 0.5
                kw["attn_mask"] = t(m)
            if m is not None:
                files["--mask"] = ("mask.json", m)
            with tempfile.TemporaryDirectory(prefix="mha-torch-") as tmp:
                out, _ = mha_output(tmp, files, opts)
            k, v = heads_of(K, G), heads_of(V, G)
            # query head h uses key/value head h // (H/G)
            k = k.repeat_interleave(H // G, dim=1)
            v = v.repeat_interleave(H // G, dim=1)
            o = F.scaled_dot_product_attention(heads_of(Q, H), k, v, **kw)
            want = o[0].transpose(0, 1).reshape(n_q, H * d_v).numpy()
            return compare("output", out, want)
        return check

    def mha_module_case(E, H, n_q, n_kv, kdim=None, causal=False, torch_mask=False):
        def check():
            kd = kdim or E
            X = rng.normal(size=(n_q, E))
            Xkv = rng.normal(size=(n_kv, kd)) if kdim else X
            w = {"W_Q": rng.normal(size=(E, E)) / math.sqrt(E),
                 "W_K": rng.normal(size=(kd, E)) / math.sqrt(kd),
                 "W_V": rng.normal(size=(kd, E)) / math.sqrt(kd),
                 "W_O": rng.normal(size=(E, E)) / math.sqrt(E),
                 "b_Q": rng.normal(size=E), "b_K": rng.normal(size=E),
                 "b_V": rng.normal(size=E), "b_O": rng.normal(size=E)}
            files = {"-x": ("x.json", X), "-w": ("w.json", w)}
            opts = ["--heads", str(H)]
            if kdim:
                files["--kv"] = ("kv.json", Xkv)
            if causal and torch_mask:
                # the very mask handed to torch below, read as PyTorch means it
                files["--mask"] = ("mask.json", np.triu(np.ones((n_q, n_kv), dtype=bool), 1))
                opts += ["--mask-bool", "block"]
            elif causal:
                opts.append("--causal")
            with tempfile.TemporaryDirectory(prefix="mha-torch-") as tmp:
                out, sm = mha_output(tmp, files, opts)
            m = torch.nn.MultiheadAttention(E, H, bias=True, kdim=kdim, vdim=kdim,
                                            batch_first=True, dtype=torch.float64)
            with torch.no_grad():
                # torch stores weights (out, in) and computes x @ W.T
                if kdim:
                    m.q_proj_weight.copy_(t(w["W_Q"].T))
                    m.k_proj_weight.copy_(t(w["W_K"].T))
                    m.v_proj_weight.copy_(t(w["W_V"].T))
                else:
                    m.in_proj_weight.copy_(t(np.concatenate(
                        [w["W_Q"].T, w["W_K"].T, w["W_V"].T])))
                m.in_proj_bias.copy_(t(np.concatenate([w["b_Q"], w["b_K"], w["b_V"]])))
                m.out_proj.weight.copy_(t(w["W_O"].T))
                m.out_proj.bias.copy_(t(w["b_O"]))
                # nn.MultiheadAttention's bool mask: True means *not* allowed
                am = torch.ones(n_q, n_kv, dtype=torch.bool).triu(1) if causal else None
                o, a = m(t(X).unsqueeze(0), t(Xkv).unsqueeze(0), t(Xkv).unsqueeze(0),
                         attn_mask=am, need_weights=True, average_attn_weights=False)
            worst = compare("output", out, o[0].numpy())
            return max(worst, compare("softmax", sm, a[0].numpy()))
        return check

    return [
        ("torch-sdpa-h2", sdpa_case(2, 2, 4, 5, 3, 2)),
        ("torch-sdpa-causal-scale", sdpa_case(3, 3, 5, 5, 2, 2, causal=True, scale=0.37)),
        ("torch-sdpa-bool-mask", sdpa_case(2, 2, 4, 6, 2, 3, mask="bool")),
        ("torch-sdpa-float-mask-gqa", sdpa_case(4, 2, 5, 5, 2, 2, mask="add")),
        ("torch-mha-self-causal", mha_module_case(6, 3, 5, 5, causal=True)),
        ("torch-mha-cross-kdim", mha_module_case(8, 2, 3, 6, kdim=5)),
        ("torch-mha-mask-bool-block", mha_module_case(6, 2, 4, 4, causal=True, torch_mask=True)),
    ]


def torch_mask_cases(binary, rng):
    """PyTorch-convention boolean masks handed to mha with --mask-bool block:
    an attn_mask (causal, as nn.Transformer's generate_square_subsequent_mask
    blocks the future, and random), a key_padding_mask per sequence, both at
    once; as JSON booleans and .npy bool."""

    def case(name, B, H, n, E, attn=None, padding=False, npy=False):
        def check():
            x = rng.standard_normal((B, n, E))
            w = {k: rng.standard_normal((E, E)) / math.sqrt(E) for k in ("W_Q", "W_K", "W_V", "W_O")}
            w.update({k: rng.standard_normal(E) for k in ("b_Q", "b_K", "b_V", "b_O")})
            am = None
            if attn == "causal":
                am = np.triu(np.ones((n, n), dtype=bool), 1)
            elif attn == "random":
                am = rng.random((n, n)) < 0.4
                am[:, 0] = False                # every row keeps a key
            kpm = None
            if padding:
                kpm = np.zeros((B, n), dtype=bool)
                for b in range(B):
                    kpm[b, n - b:] = True       # sequence b has b padded keys
            # one mask for mha: blocked where either blocks, (B|1, 1, n|1, n)
            if am is not None and kpm is not None:
                mask = am[None, None] | kpm[:, None, None, :]
            elif kpm is not None:
                mask = kpm[:, None, None, :]
            else:
                mask = am
            with tempfile.TemporaryDirectory(prefix="mha-torchmask-") as tmp:
                def put(fname, a):
                    path = os.path.join(tmp, fname)
                    if fname.endswith(".npy"):
                        np.save(path, a)
                    else:
                        with open(path, "w") as f:
                            f.write(dump_json(a))
                    return path
                args = ["-x", put("x.json", x), "-w", put("w.json", w), "--heads", str(H),
                        "--mask", put("mask.npy" if npy else "mask.json", mask),
                        "--mask-bool", "block"]
                doc = parse_json(run(binary, args + ["-p", "softmax,output", "-f", "json"]))
                fast = parse_json(run(binary, args + ["-f", "json"]))
                # the same mask inverted, read as mha's own (true = may attend)
                args[args.index("--mask") + 1] = put("inv.json", ~mask)
                own = parse_json(run(binary, args[:-2] + ["-f", "json"]))
            ref_w, ref_o = torch_mha_convention(x, w, H, am, kpm)
            worst = compare("output", to_array(doc["output"], "output"), ref_o)
            worst = max(worst, compare("output (fast path)", to_array(fast["output"], "output"),
                                       ref_o))
            for h in range(H):
                worst = max(worst, compare("heads[%d].softmax" % h,
                                           to_array(doc["heads"][h]["softmax"], "softmax"),
                                           ref_w[:, h]))
            bit_equal("output, true = blocked against the inverse read as mha's",
                      to_array(fast["output"], "output"), to_array(own["output"], "output"))
            return worst
        return "torch-bool-" + name, check

    return [
        case("causal-json", 1, 2, 5, 4, attn="causal"),
        case("random-npy", 1, 3, 4, 6, attn="random", npy=True),
        case("padding-npy", 3, 2, 5, 4, padding=True, npy=True),
        case("causal-padding", 2, 2, 4, 4, attn="causal", padding=True),
    ]

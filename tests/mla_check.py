#!/usr/bin/python3
"""mla_check.py: multi-head latent attention (DeepSeek's MLA) in 'mha forward'
and 'mha backward' against two references written here.

usage: mla_check.py MHA_BINARY

The NumPy reference follows Hugging Face's modeling_deepseek_v3.py
(DeepseekV3Attention.forward) step by step: q_b_proj(q_a_layernorm(
q_a_proj(x))) or q_proj(x), viewed (seq, heads, qk_head_dim) and split into
q_pass and q_rot; kv_a_proj_with_mqa(x) split into k_pass and k_rot;
kv_b_proj(kv_a_layernorm(k_pass)) split per head into k_pass and the values;
apply_rotary_pos_emb_interleave (the pairs gathered, then rotate_half) or
apply_rotary_pos_emb; k_rot expanded to every head; the scores times
qk_head_dim^-0.5 (times mscale^2 where the config asks), the mask, the
softmax, the values, o_proj.  The PyTorch one transcribes the same
computation in torch's float64 ops; the two must agree to 1e-12 before
either is used, and torch.autograd then gives every gradient.

Each case draws random sizes, weights and options (q_lora_rank or q_proj
alone, the norms' weights or ones, rope interleaved or half, YaRN's
scaling, causal top-left and bottom-right, --kv, a batch, W_O or not,
--layout torch) and checks:

    mha forward (plain, fast, --absorb) vs NumPy        1e-10 of the largest
    every step mha prints vs NumPy's                     1e-10
    mha backward, every gradient, vs torch.autograd     1e-10
    --dtype f32 (forward and backward) vs float32 torch  1e-4

It prints one line per failure and ends with "N passed, N failed"; exit
status 1 if any failed.  Without torch the backward cases are skipped, and
said so.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import families_ref  # noqa: E402  (rope_parameters: transformers' rope scaling)

try:
    import torch
except ImportError:  # the forward checks still run
    torch = None

SEED = 20261127
RTOL = 1e-10
RTOL_F32 = 1e-4
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL %s %s" % (name, detail))


def close(name, got, want, rtol, floor=1e-300):
    """max |got - want| within rtol of want's largest entry (or of floor, the
    case's largest gradient, when that is larger: a gradient that is zero in
    exact arithmetic comes out as rounding of the case's size)"""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        check(name, False, "shape %s, want %s" % (got.shape, want.shape))
        return
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, floor)
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    check(name, err <= rtol * scale, "max error %.3g of %.3g" % (err, scale))


# ---- the references ------------------------------------------------------------


def rms(x, w, eps):
    """DeepseekV3RMSNorm: x * rsqrt(mean(x^2) + eps) * weight"""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope_cos_sin(pos, c, R):
    inv, af = families_ref.rope_parameters(c, R, int(max(pos)) + 1)
    freqs = np.outer(pos, inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb) * af, np.sin(emb) * af


def apply_rope(x, cos, sin, interleave):
    """(…, seq, R): apply_rotary_pos_emb_interleave or apply_rotary_pos_emb"""
    if interleave:
        s = x.shape
        x = x.reshape(*s[:-1], s[-1] // 2, 2).swapaxes(-1, -2).reshape(s)
    return x * cos + rotate_half(x) * sin


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def softmax_scale(c):
    s = c["qk_head_dim"] ** -0.5
    sc = c.get("rope_scaling")
    if sc and sc.get("mscale_all_dim"):
        m = yarn_mscale(sc["factor"], sc["mscale_all_dim"])
        s = s * m * m
    return s


def numpy_mla(c, w, x, xkv, q_pos, k_pos, allow):
    """one sequence: every step, as modeling_deepseek_v3.py makes it"""
    H, dn, dr, dv = c["heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kr = c["kv_lora_rank"]
    st = {}
    if c["q_lora_rank"]:
        st["c_q"] = x @ w["q_a_proj"]
        st["c_q_norm"] = rms(st["c_q"], w["q_a_layernorm"], c["eps"])
        q = st["c_q_norm"] @ w["W_Q"]
    else:
        q = x @ w["W_Q"]
    q = q.reshape(len(x), H, dn + dr).transpose(1, 0, 2)            # (H, n_q, d_k)
    q_pass, q_rot = q[..., :dn], q[..., dn:]
    ckv = xkv @ w["kv_a_proj_with_mqa"]
    k_pass, k_rot = ckv[:, :kr], ckv[:, kr:]
    st["c_kv"], st["k_pe"] = k_pass, k_rot
    st["c_kv_norm"] = rms(k_pass, w["kv_a_layernorm"], c["eps"])
    kv = (st["c_kv_norm"] @ w["kv_b_proj"]).reshape(len(xkv), H, dn + dv).transpose(1, 0, 2)
    k_pass, v = kv[..., :dn], kv[..., dn:]
    st["q_nope"] = q_pass.transpose(1, 0, 2).reshape(len(x), H * dn)
    st["q_pe"] = q_rot.transpose(1, 0, 2).reshape(len(x), H * dr)
    st["k_nope"] = k_pass.transpose(1, 0, 2).reshape(len(xkv), H * dn)
    if c["rope"]:
        cq, sq = rope_cos_sin(q_pos, c, dr)
        ck, sk = rope_cos_sin(k_pos, c, dr)
        q_rot = apply_rope(q_rot, cq, sq, c["rope"] == "interleaved")
        k_rot = apply_rope(k_rot, ck, sk, c["rope"] == "interleaved")
        st["q_pe_rot"] = q_rot.transpose(1, 0, 2).reshape(len(x), H * dr)
        st["k_pe_rot"] = k_rot
    k_rot = np.broadcast_to(k_rot, (H,) + k_rot.shape)
    qs = np.concatenate([q_pass, q_rot], axis=-1)
    ks = np.concatenate([k_pass, k_rot], axis=-1)
    st["Q"] = qs.transpose(1, 0, 2).reshape(len(x), -1)
    st["K"] = ks.transpose(1, 0, 2).reshape(len(xkv), -1)
    st["V"] = v.transpose(1, 0, 2).reshape(len(xkv), -1)
    s = qs @ ks.transpose(0, 2, 1) * softmax_scale(c)
    s = np.where(allow, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    o = (p @ v).transpose(1, 0, 2).reshape(len(x), H * dv)
    st["concat"] = o
    st["output"] = (o @ w["W_O"] + w.get("b_O", 0)) if "W_O" in w else o
    return st


def torch_mla(c, w, x, xkv, q_pos, k_pos, allow):
    """the same in torch's ops (float64 or float32 as the tensors are), output only"""
    H, dn, dr, dv = c["heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kr = c["kv_lora_rank"]

    def trms(t, g):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + c["eps"]) * g

    def trot(t):
        h = t.shape[-1] // 2
        return torch.cat((-t[..., h:], t[..., :h]), dim=-1)
    if c["q_lora_rank"]:
        q = trms(x @ w["q_a_proj"], w["q_a_layernorm"]) @ w["W_Q"]
    else:
        q = x @ w["W_Q"]
    q = q.view(x.shape[0], H, dn + dr).transpose(0, 1)
    q_pass, q_rot = torch.split(q, [dn, dr], dim=-1)
    ckv = xkv @ w["kv_a_proj_with_mqa"]
    k_pass, k_rot = torch.split(ckv, [kr, dr], dim=-1)
    kv = (trms(k_pass, w["kv_a_layernorm"]) @ w["kv_b_proj"]).view(xkv.shape[0], H, dn + dv)
    k_pass, v = torch.split(kv.transpose(0, 1), [dn, dv], dim=-1)
    k_rot = k_rot.view(1, xkv.shape[0], dr)
    if c["rope"]:
        dt = x.dtype
        cq, sq = (torch.tensor(a, dtype=dt) for a in rope_cos_sin(q_pos, c, dr))
        ck, sk = (torch.tensor(a, dtype=dt) for a in rope_cos_sin(k_pos, c, dr))
        if c["rope"] == "interleaved":
            q_rot = q_rot.reshape(H, -1, dr // 2, 2).transpose(3, 2).reshape(H, -1, dr)
            k_rot = k_rot.reshape(1, -1, dr // 2, 2).transpose(3, 2).reshape(1, -1, dr)
        q_rot = q_rot * cq + trot(q_rot) * sq
        k_rot = k_rot * ck + trot(k_rot) * sk
    k_rot = k_rot.expand(H, -1, -1)
    qs = torch.cat((q_pass, q_rot), dim=-1)
    ks = torch.cat((k_pass, k_rot), dim=-1)
    s = qs @ ks.transpose(1, 2) * softmax_scale(c)
    s = s.masked_fill(~torch.tensor(allow), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    o = o.transpose(0, 1).reshape(x.shape[0], H * dv)
    return (o @ w["W_O"] + w["b_O"] if "b_O" in w else o @ w["W_O"]) if "W_O" in w else o


# ---- the cases --------------------------------------------------------------------


def make_case(rng, k):
    H = int(rng.integers(1, 4))
    c = {"heads": H, "qk_nope_head_dim": int(rng.integers(1, 5)),
         "qk_rope_head_dim": 2 * int(rng.integers(1, 3)), "v_head_dim": int(rng.integers(1, 4)),
         "kv_lora_rank": int(rng.integers(1, 6)),
         "q_lora_rank": int(rng.integers(2, 7)) if k % 3 else None,
         "eps": [1e-6, 1e-5, 0.0][k % 3],
         "rope": ["interleaved", "half", "interleaved", None][k % 4],
         "rope_theta": [10000.0, 50.0][k % 2], "max_position_embeddings": 64,
         "causal": ["top-left", "bottom-right", None][k % 3],
         "cross": k % 5 == 2, "batch": 2 if k % 4 == 1 else 0, "wo": k % 6 != 5,
         "norm_w": k % 2 == 0, "torch_layout": k % 7 == 3}
    c["qk_head_dim"] = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    if k % 5 == 4 and c["rope"]:
        c["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                             "mscale_all_dim": 0.707}
    c["d_model"] = int(rng.integers(2, 9))
    c["n_q"] = int(rng.integers(1, 7))
    c["n_kv"] = int(rng.integers(c["n_q"], 9)) if (c["cross"] or c["causal"] == "bottom-right") \
        else c["n_q"]
    if not c["cross"]:
        c["n_kv"] = c["n_q"]
    return c


def draw(rng, c):
    H, dm = c["heads"], c["d_model"]
    dn, dr, dv, kr, qr = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                          c["kv_lora_rank"], c["q_lora_rank"])
    w = {}
    if qr:
        w["q_a_proj"] = rng.standard_normal((dm, qr))
        w["q_a_layernorm"] = 1 + 0.3 * rng.standard_normal(qr) if c["norm_w"] else np.ones(qr)
        w["W_Q"] = rng.standard_normal((qr, H * (dn + dr)))
    else:
        w["W_Q"] = rng.standard_normal((dm, H * (dn + dr)))
    w["kv_a_proj_with_mqa"] = rng.standard_normal((dm, kr + dr))
    w["kv_a_layernorm"] = 1 + 0.3 * rng.standard_normal(kr) if c["norm_w"] else np.ones(kr)
    w["kv_b_proj"] = rng.standard_normal((kr, H * (dn + dv))) / math.sqrt(kr)
    if c["wo"]:
        w["W_O"] = rng.standard_normal((H * dv, dm))
        w["b_O"] = rng.standard_normal(dm)
    B = c["batch"] or 1
    x = rng.standard_normal((B, c["n_q"], dm))
    xkv = rng.standard_normal((B, c["n_kv"], dm)) if c["cross"] else x
    return w, x, xkv


def positions_and_mask(c):
    nq, nkv = c["n_q"], c["n_kv"]
    off = nkv - nq if c["causal"] == "bottom-right" else 0
    q_pos = np.arange(nq) + off
    k_pos = np.arange(nkv)
    if c["causal"]:
        allow = k_pos[None, :] <= q_pos[:, None]
    else:
        allow = np.ones((nq, nkv), dtype=bool)
    return q_pos, k_pos, allow


OPTS = {"q_a_proj": "--q-a-proj", "q_a_layernorm": "--q-a-layernorm", "W_Q": "--q-b-proj",
        "kv_a_proj_with_mqa": "--kv-a-proj-with-mqa", "kv_a_layernorm": "--kv-a-layernorm",
        "kv_b_proj": "--kv-b-proj", "W_O": "--wo", "b_O": "--bo"}


def command(mha, c, w, x, xkv, tmp, verb, f32=False):
    def save(name, a):
        path = os.path.join(tmp, name + ".npy")
        np.save(path, np.asarray(a, dtype=np.float32 if f32 else np.float64))
        return path
    args = [mha, verb, "-x", save("x", x if c["batch"] else x[0]), "--heads", str(c["heads"]),
            "--qk-rope-head-dim", str(c["qk_rope_head_dim"]), "-f", "json"]
    if c["cross"]:
        args += ["--kv", save("xkv", xkv if c["batch"] else xkv[0])]
    for name, a in w.items():
        if name.endswith("layernorm") and not c["norm_w"]:
            continue  # ones: left out, mha's default
        t = c["torch_layout"] and a.ndim == 2
        args += [OPTS[name], save(name, a.T if t else a)]
    if c["torch_layout"]:
        args += ["--layout", "torch"]
    args += ["--mla-eps", repr(c["eps"])]
    if c["rope"]:
        args += ["--rope", c["rope"], "--rope-theta", repr(c["rope_theta"])]
    if "rope_scaling" in c:
        args += ["--rope-scaling", json.dumps(c["rope_scaling"]),
                 "--scale", repr(softmax_scale(c))]
    if c["causal"]:
        args += ["--causal=" + c["causal"]]
    if f32:
        args += ["--dtype", "f32"]
    return args


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return json.loads(r.stdout), None


def forward_case(mha, c, w, x, xkv, tmp, name):
    q_pos, k_pos, allow = positions_and_mask(c)
    B = c["batch"] or 1
    want = [numpy_mla(c, w, x[b], xkv[b], q_pos, k_pos, allow) for b in range(B)]
    if torch is not None:
        tw = {k: torch.tensor(v) for k, v in w.items()}
        for b in range(B):
            t = torch_mla(c, tw, torch.tensor(x[b]), torch.tensor(xkv[b]), q_pos, k_pos, allow)
            close(name + " numpy vs torch", t.numpy(), want[b]["output"], 1e-12)

    def stack(key):
        a = np.array([s[key] for s in want])
        return a if c["batch"] else a[0]
    base = command(mha, c, w, x, xkv, tmp, "forward")
    for extra, label in (([], "fast"), (["--print", "all"], "plain"), (["--absorb"], "absorbed"),
                         (["--absorb", "--exact"], "absorbed plain")):
        out, err = run(base + extra)
        if out is None:
            check(name + " " + label, False, err)
            continue
        close("%s %s output" % (name, label), out["output"], stack("output"), RTOL)
        check(name + " " + label + " meta", out["meta"]["mla"]["form"] ==
              ("absorbed" if "--absorb" in extra else "expanded"))
        if label == "plain":
            for key in ("c_q", "c_q_norm", "q_nope", "q_pe", "q_pe_rot", "c_kv", "c_kv_norm",
                        "k_pe", "k_pe_rot", "k_nope", "Q", "K", "V", "concat"):
                if key in want[0]:
                    if key not in out:
                        check("%s step %s" % (name, key), False, "missing")
                        continue
                    close("%s step %s" % (name, key), out[key], stack(key), RTOL)
    # float32
    out, err = run(command(mha, c, w, x, xkv, tmp, "forward", f32=True))
    if out is None:
        check(name + " f32", False, err)
    else:
        close(name + " f32 output", out["output"], stack("output"), RTOL_F32)


def backward_case(mha, c, w, x, xkv, tmp, name, rng):
    q_pos, k_pos, allow = positions_and_mask(c)
    B = c["batch"] or 1
    out_cols = c["d_model"] if c["wo"] else c["heads"] * c["v_head_dim"]
    dO = rng.standard_normal((B, c["n_q"], out_cols))
    np.save(os.path.join(tmp, "dO.npy"), dO if c["batch"] else dO[0])
    for f32 in (False, True):
        dt = torch.float32 if f32 else torch.float64
        tw = {k: torch.tensor(v, dtype=dt, requires_grad=True) for k, v in w.items()}
        tx = torch.tensor(x, dtype=dt, requires_grad=True)
        tkv = torch.tensor(xkv, dtype=dt, requires_grad=True) if c["cross"] else tx
        loss = 0
        for b in range(B):
            o = torch_mla(c, tw, tx[b], tkv[b], q_pos, k_pos, allow)
            loss = loss + (o * torch.tensor(dO[b], dtype=dt)).sum()
        loss.backward()
        args = command(mha, c, w, x, xkv, tmp, "backward", f32=f32)
        if f32:
            np.save(os.path.join(tmp, "dO.npy"),
                    (dO if c["batch"] else dO[0]).astype(np.float32))
        args += ["--grad-output", os.path.join(tmp, "dO.npy")]
        out, err = run(args)
        label = name + (" backward f32" if f32 else " backward")
        if out is None:
            check(label, False, err)
            continue
        grads = [t.grad for t in list(tw.values()) + [tx, tkv] if t.grad is not None]
        floor = max(float(g.abs().max()) for g in grads)
        keys = {"q_a_proj": "dq_a_proj", "q_a_layernorm": "dq_a_layernorm", "W_Q": "dW_Q",
                "kv_a_proj_with_mqa": "dkv_a_proj_with_mqa", "kv_a_layernorm": "dkv_a_layernorm",
                "kv_b_proj": "dkv_b_proj", "W_O": "dW_O", "b_O": "db_O"}
        for wn, key in keys.items():
            if wn not in w or (wn.endswith("layernorm") and not c["norm_w"]):
                continue
            g = tw[wn].grad.double().numpy()
            got = np.asarray(out.get(key, []), dtype=np.float64)
            if c["batch"]:
                got = got[0]  # a batch writes the weights' gradients under each sequence
            close("%s %s" % (label, key), got.reshape(g.shape) if got.size == g.size else got, g,
                  RTOL_F32 if f32 else RTOL, floor)
        gx = tx.grad.double().numpy()
        xkey = "dX"
        close("%s %s" % (label, xkey), out[xkey], gx if c["batch"] else gx[0],
              RTOL_F32 if f32 else RTOL, floor)
        if c["cross"]:
            gk = tkv.grad.double().numpy()
            close("%s dX_kv" % label, out["dX_kv"], gk if c["batch"] else gk[0],
                  RTOL_F32 if f32 else RTOL, floor)


# ---- a DeepSeek-V3-shaped checkpoint, BF16 or FP8 with block scales ----------------


def bf16(a):
    """a's float32 values cut to bfloat16 (round to nearest even): (the bits, the values)"""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u, (u.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def e4m3(code):
    """float8_e4m3fn's value of each byte (no infinities; 0x7f, 0xff nan)"""
    code = np.asarray(code, dtype=np.uint8)
    e, m = (code >> 3) & 0xF, (code & 7).astype(np.float64)
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(code & 0x80, -v, v)


def e5m2(code):
    """float8_e5m2's value of each byte (float16's top byte)"""
    code = np.asarray(code, dtype=np.uint8)
    e, m = (code >> 2) & 0x1F, (code & 3).astype(np.float64)
    v = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * 2.0 ** (e.astype(np.float64) - 15))
    v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    return np.where(code & 0x80, -v, v)


def fp8(rng, shape, block, kind="E4M3"):
    """random FP8 codes (no nan, no inf) and float32 block scales: (codes, scales, the values)"""
    code = rng.integers(0, 256, size=shape).astype(np.uint8)
    if kind == "E4M3":
        code[(code & 0x7F) == 0x7F] = 0x3E
    else:
        code[(code & 0x7C) == 0x7C] = 0x3A  # exponent 31: inf and nan
    rows, cols = -(-shape[0] // block[0]), -(-shape[1] // block[1])
    scale = (rng.uniform(0.5, 2.0, size=(rows, cols)) / 64).astype(np.float32)
    full = np.repeat(np.repeat(scale.astype(np.float64), block[0], 0), block[1], 1)
    return code, scale, (e4m3 if kind == "E4M3" else e5m2)(code) * full[:shape[0], :shape[1]]


def write_safetensors(path, tensors):
    """{name: (dtype, array of its raw type)} as one safetensors file"""
    header, blobs, at = {}, [], 0
    for name, (dt, a) in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def write_checkpoint(rng, folder, c, quant, block=(128, 128), kind="E4M3"):
    """config.json and model.safetensors of one layer; the weights' values
    as loaded, (d_in, d_out) as mha and the references apply them"""
    H, dm = c["heads"], c["d_model"]
    dn, dr, dv, kr, qr = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                          c["kv_lora_rank"], c["q_lora_rank"])
    shapes = {"kv_a_proj_with_mqa": (kr + dr, dm), "kv_b_proj": (H * (dn + dv), kr),
              "o_proj": (dm, H * dv)}
    if qr:
        shapes.update({"q_a_proj": (qr, dm), "q_b_proj": (H * (dn + dr), qr)})
    else:
        shapes["q_proj"] = (H * (dn + dr), dm)
    tensors, w = {}, {}
    pre = "model.layers.0.self_attn."
    for name, shape in shapes.items():
        if quant:
            code, scale, v = fp8(rng, shape, block, kind)
            tensors[pre + name + ".weight"] = ("F8_" + kind, code)
            tensors[pre + name + ".weight_scale_inv"] = ("F32", scale)
        else:
            bits, v = bf16(rng.standard_normal(shape) / math.sqrt(shape[1]))
            tensors[pre + name + ".weight"] = ("BF16", bits)
        key = {"q_b_proj": "W_Q", "q_proj": "W_Q", "o_proj": "W_O"}.get(name, name)
        w[key] = v.T
    for name, n in (("q_a_layernorm", qr), ("kv_a_layernorm", kr)):
        if n:
            bits, v = bf16(1 + 0.2 * rng.standard_normal(n))
            tensors[pre + name + ".weight"] = ("BF16", bits)
            w[name] = v
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
    cfg = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
           "num_attention_heads": H, "num_key_value_heads": H, "hidden_size": dm,
           "q_lora_rank": qr, "kv_lora_rank": kr, "qk_nope_head_dim": dn,
           "qk_rope_head_dim": dr, "v_head_dim": dv, "rope_theta": c["rope_theta"],
           "max_position_embeddings": c["max_position_embeddings"],
           "rms_norm_eps": c["eps"], "attention_bias": False, "num_hidden_layers": 1,
           "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
           "first_k_dense_replace": 1, "vocab_size": 32, "torch_dtype": "bfloat16"}
    if "rope_scaling" in c:
        cfg["rope_scaling"] = c["rope_scaling"]
    if quant:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": list(block)}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
    return w


# DeepseekV3Config's defaults for the keys its attention reads (its
# configuration class)
DEEPSEEK_V3 = {"num_attention_heads": 128, "num_key_value_heads": 128, "hidden_size": 7168,
               "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "rope_theta": 10000.0,
               "rope_scaling": None, "max_position_embeddings": 4096, "rope_interleave": True,
               "rms_norm_eps": 1e-6, "attention_bias": False}


def defaults_case(mha, tmp, folder, base, want, name):
    """each attention key of the config left out in turn: the class's default;
    where it is the value the config gave, the same output, else refused
    naming the key as its class's default (or the tensors it does not fit)"""
    with open(os.path.join(folder, "config.json")) as fh:
        cfg = json.load(fh)
    for key in sorted(k for k in cfg if k in DEEPSEEK_V3):
        trimmed = {k2: v for k2, v in cfg.items() if k2 != key}
        path = os.path.join(tmp, "trimmed.json")
        with open(path, "w") as fh:
            json.dump(trimmed, fh)
        r = subprocess.run(base + ["--config", path], capture_output=True, text=True)
        dflt = DEEPSEEK_V3[key]
        # max_position_embeddings is read by the scaling alone
        same = dflt == cfg[key] or (key == "max_position_embeddings" and
                                    "rope_scaling" not in cfg)
        if same:
            ok = r.returncode == 0 and np.allclose(json.loads(r.stdout)["output"],
                                                   want["output"], rtol=RTOL, atol=0)
        else:
            ok = r.returncode == 1 and key in r.stderr and "left out" in r.stderr
        check("%s without %s: its class's %s%s" % (name, key, json.dumps(dflt),
                                                  "" if same else ", refused"), ok,
              r.stderr.strip()[:300])


def checkpoint_cases(mha, tmp, rng):
    """a DeepSeek-V3-shaped layer from its checkpoint, BF16 and FP8 (128 x 128
    blocks over a 160-wide d_model: partial edge blocks; then 4 x 8 blocks)"""
    for k, (quant, block, qr) in enumerate(((False, (128, 128), 6), (True, (128, 128), 6),
                                             (True, (4, 8), 0), (False, (128, 128), 0),
                                             (True, (8, 4), 6))):
        c = {"heads": 2, "qk_nope_head_dim": 3, "qk_rope_head_dim": 4, "v_head_dim": 2,
             "kv_lora_rank": 5, "q_lora_rank": qr or None, "eps": 1e-6, "rope": "interleaved",
             "rope_theta": 10000.0, "max_position_embeddings": 64, "causal": "top-left",
             "d_model": 160 if k == 1 else 12, "n_q": 5, "n_kv": 5, "batch": 0}
        c["qk_head_dim"] = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        if k % 2:
            c["rope_scaling"] = {"type": "yarn", "factor": 4.0,
                                 "original_max_position_embeddings": 16, "beta_fast": 32,
                                 "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
        folder = os.path.join(tmp, "ckpt%d" % k)
        os.makedirs(folder, exist_ok=True)
        kind = "E5M2" if k == 4 else "E4M3"
        w = write_checkpoint(rng, folder, c, quant, block, kind)
        x = rng.standard_normal((c["n_q"], c["d_model"]))
        np.save(os.path.join(tmp, "xc.npy"), x)
        q_pos, k_pos, allow = positions_and_mask(c)
        want = numpy_mla(c, w, x, x, q_pos, k_pos, allow)
        name = "checkpoint %s%s" % ("FP8 %s blocks %dx%d" % ((kind,) + block) if quant else "BF16",
                                    ", q_proj alone" if not qr else "")
        base = [mha, "forward", "-x", os.path.join(tmp, "xc.npy"), "-w", folder, "--layer", "0",
                "-f", "json"]
        for extra, label in (([], "fast"), (["--print", "all"], "plain"),
                             (["--absorb"], "absorbed")):
            out, err = run(base + extra)
            if out is None:
                check(name + " " + label, False, err)
                continue
            close("%s %s output" % (name, label), out["output"], want["output"], RTOL)
            if label == "plain":
                for key in ("q_pe_rot", "k_pe_rot", "c_kv_norm", "k_nope", "Q", "K", "V"):
                    close("%s step %s" % (name, key), out[key], want[key], RTOL)
                m = out["meta"]
                check(name + " meta.mla", m["mla"] == {
                    "q_lora_rank": c["q_lora_rank"], "kv_lora_rank": 5, "qk_nope_head_dim": 3,
                    "qk_rope_head_dim": 4, "v_head_dim": 2, "eps": 1e-6, "form": "expanded"},
                    json.dumps(m["mla"]))
                close(name + " scale", m["scale"]["value"], softmax_scale(c), 1e-15)
        # the same config as transformers 5 saves it: rope_parameters (with
        # DeepSeek's "type" kept beside "rope_type"), no rope_theta or rope_scaling
        with open(os.path.join(folder, "config.json")) as fh:
            v5 = json.load(fh)
        rp = dict(v5.pop("rope_scaling", None) or {})
        rp.setdefault("rope_type", rp.get("type", "default"))
        rp["rope_theta"] = v5.pop("rope_theta")
        if rp["rope_type"] == "yarn":
            rp.setdefault("original_max_position_embeddings", v5["max_position_embeddings"])
        v5.update(rope_parameters=rp, transformers_version="5.15.0", head_dim=c["qk_rope_head_dim"],
                  qk_head_dim=c["qk_head_dim"])
        with open(os.path.join(tmp, "config5.json"), "w") as fh:
            json.dump(v5, fh)
        out, err = run(base + ["--config", os.path.join(tmp, "config5.json")])
        if out is None:
            check(name + " saved by transformers 5", False, err)
        else:
            close(name + " saved by transformers 5 (rope_parameters %s)" % rp["rope_type"],
                  out["output"], want["output"], RTOL)
        if k == 0:
            defaults_case(mha, tmp, folder, base, want, name)
        if "rope_scaling" in c:
            # Kimi K2: DeepSeek V3's attention, its config complete
            with open(os.path.join(folder, "config.json")) as fh:
                kimi = dict(json.load(fh), model_type="kimi_k2")
            with open(os.path.join(tmp, "kimi.json"), "w") as fh:
                json.dump(kimi, fh)
            out, err = run(base + ["--config", os.path.join(tmp, "kimi.json")])
            if out is None:
                check(name + " as model_type kimi_k2", False, err)
            else:
                close(name + " as model_type kimi_k2", out["output"], want["output"], RTOL)
        # mha model tells the layer's latent dims and scale
        out, err = run([mha, "model", folder, "-f", "json"])
        if out is None:
            check(name + " mha model", False, err)
        else:
            lay = out["layers"][0]
            check(name + " mha model", lay["mla"] == dict(
                {"q_lora_rank": c["q_lora_rank"], "kv_lora_rank": 5, "qk_nope_head_dim": 3,
                 "qk_rope_head_dim": 4, "v_head_dim": 2, "eps": 1e-6, "form": "expanded"}) and
                lay["d_k"] == 7 and lay["d_v"] == 2 and lay["d_model"] == c["d_model"] and
                abs(lay["scale"]["value"] - softmax_scale(c)) <= 1e-15 and
                lay["rope"]["dim"] == 4 and lay["rope"]["mode"] == "interleaved",
                json.dumps(lay))
        # its -o: the latent tensors as a run reads them (d_in x d_out), under their options' names
        t = os.path.join(tmp, "tensors.npz")
        r = subprocess.run([mha, "model", folder, "--layer", "0", "-o", t], capture_output=True, text=True)
        members = []
        if r.returncode == 0:
            with np.load(t) as z:
                members = sorted(z.files)
                shapes_ok = z["kv_a_proj_with_mqa"].shape == (c["d_model"], 5 + 4) and \
                    z["kv_b_proj"].shape == (5, c["heads"] * (3 + 2))
        want_members = {"kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "W_O", "W_Q"} | \
            ({"q_a_proj", "q_a_layernorm"} if c["q_lora_rank"] else set())
        check(name + " mha model -o: the latent tensors (%s)" % ", ".join(members),
              r.returncode == 0 and set(members) == want_members and shapes_ok, r.stderr + str(members))
        if k == 1:
            # someone's port with the pairs half-split: mha compare names the mistake
            r = subprocess.run(base + ["--rope", "half", "-p", "all", "-o",
                                       os.path.join(tmp, "half.json")], capture_output=True)
            r = subprocess.run([mha, "compare", "-x", os.path.join(tmp, "xc.npy"), "-w", folder,
                                "--layer", "0", "--against", os.path.join(tmp, "half.json")],
                               capture_output=True, text=True)
            check(name + " compare: half-split pairs diagnosed", r.returncode == 1 and
                  "first difference: q_pe_rot" in r.stdout and
                  "matches mha's with --rope half" in r.stdout, r.stdout[-400:] + r.stderr)
        if torch is None:
            continue
        # the checkpoint's gradients against autograd on the same (dequantized) weights
        tw = {k2: torch.tensor(v, requires_grad=True) for k2, v in w.items()}
        o = torch_mla(c, tw, torch.tensor(x), torch.tensor(x), q_pos, k_pos, allow)
        o.sum().backward()
        out, err = run([mha, "backward", "-x", os.path.join(tmp, "xc.npy"), "-w", folder,
                        "--layer", "0", "-f", "json"])
        if out is None:
            check(name + " backward", False, err)
            continue
        for wn, key in (("kv_b_proj", "dkv_b_proj"), ("kv_a_proj_with_mqa", "dkv_a_proj_with_mqa"),
                        ("kv_a_layernorm", "dkv_a_layernorm"), ("W_Q", "dW_Q"),
                        ("q_a_proj", "dq_a_proj"), ("q_a_layernorm", "dq_a_layernorm"),
                        ("W_O", "dW_O")):
            if wn in tw:
                close("%s backward %s" % (name, key), out[key], tw[wn].grad.numpy(), RTOL)


def checkpoint_refusals(mha, tmp, rng):
    """FP8 that cannot be read exactly, and what DeepSeek's config says that mha does not
    compute: each refused in one line naming the tensor (and element) or the key"""
    c = {"heads": 2, "qk_nope_head_dim": 3, "qk_rope_head_dim": 4, "v_head_dim": 2,
         "kv_lora_rank": 5, "q_lora_rank": 6, "eps": 1e-6, "rope_theta": 10000.0,
         "max_position_embeddings": 64, "d_model": 12}
    x = os.path.join(tmp, "xr.npy")
    np.save(x, rng.standard_normal((3, 12)))
    pre = "model.layers.0.self_attn."

    def damaged(label, change_tensors=None, change_config=None, want=""):
        folder = os.path.join(tmp, "bad-" + label.replace(" ", "-"))
        os.makedirs(folder, exist_ok=True)
        write_checkpoint(rng, folder, c, True, (4, 8))
        st = os.path.join(folder, "model.safetensors")
        if change_tensors:
            with open(st, "rb") as f:
                data = f.read()
            n = int.from_bytes(data[:8], "little")
            header = json.loads(data[8:8 + n])
            body = bytearray(data[8 + n:])
            tensors = {}
            for name, e in header.items():
                b, en = e["data_offsets"]
                raw = bytes(body[b:en])
                dt = {"F8_E4M3": np.uint8, "F32": np.float32, "BF16": np.uint16}[e["dtype"]]
                tensors[name] = (e["dtype"], np.frombuffer(raw, dtype=dt).reshape(e["shape"]).copy())
            change_tensors(tensors)
            write_safetensors(st, tensors)
        if change_config:
            p2 = os.path.join(folder, "config.json")
            with open(p2) as f:
                cfg = json.load(f)
            change_config(cfg)
            with open(p2, "w") as f:
                json.dump(cfg, f)
        r = subprocess.run([mha, "forward", "-x", x, "-w", folder, "--layer", "0"],
                           capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check("refused: " + label, r.returncode != 0 and not r.stdout and len(lines) == 1 and
              want in lines[0], r.stderr.strip())
        # mha model resolves the layer as the run does: the same refusal, no -o file
        npz = os.path.join(tmp, "refused.npz")
        m = subprocess.run([mha, "model", folder, "--layer", "0", "-o", npz],
                           capture_output=True, text=True)
        check("refused by mha model too: " + label, m.returncode == r.returncode and
              m.stderr == r.stderr and not m.stdout and not os.path.exists(npz),
              "exit %d %r" % (m.returncode, m.stderr))

    def nan_code(t):
        t[pre + "kv_b_proj.weight"][1][1][2] = 0x7F
    damaged("FP8 nan", nan_code, want='kv_b_proj.weight"[1][2] is nan')

    def neg_scale(t):
        t[pre + "q_a_proj.weight_scale_inv"][1][0][1] = -1
    damaged("negative scale", neg_scale,
            want='q_a_proj.weight_scale_inv"[0][1] is -1: a block scale is a finite number above 0')

    def no_scale(t):
        del t[pre + "o_proj.weight_scale_inv"]
    damaged("missing scale", no_scale, want='o_proj.weight_scale_inv"')

    def bad_shape(t):
        a = t[pre + "kv_a_proj_with_mqa.weight_scale_inv"]
        t[pre + "kv_a_proj_with_mqa.weight_scale_inv"] = (a[0], a[1][:1])
    damaged("scale shape", bad_shape, want="needs 3x2: blocks of 4x8")
    damaged("awq", change_config=lambda cfg: cfg["quantization_config"].update(quant_method="awq"),
            want='quant_method "awq"')
    damaged("attention_bias", change_config=lambda cfg: cfg.update(attention_bias=True),
            want="attention_bias true")
    damaged("q_lora_rank", change_config=lambda cfg: cfg.update(q_lora_rank=7),
            want="q_lora_rank 7, but the tensors make 6")
    damaged("unknown key", change_config=lambda cfg: cfg.update(mla_absorb_everything=True),
            want="mla_absorb_everything")
    def flat_kv_b(t):
        dt, a = t[pre + "kv_b_proj.weight"]
        t[pre + "kv_b_proj.weight"] = (dt, a.reshape(-1))
        del t[pre + "kv_b_proj.weight_scale_inv"]
    damaged("kv_b_proj 1-D", flat_kv_b, want="kv_b_proj")
    # transformers 5 writes the dims its class derives: held to them
    damaged("head_dim", change_config=lambda cfg: cfg.update(head_dim=7),
            want="head_dim 7 but qk_rope_head_dim 4")
    damaged("qk_head_dim", change_config=lambda cfg: cfg.update(qk_head_dim=8),
            want="qk_head_dim 8 but qk_nope_head_dim 3 + qk_rope_head_dim 4 is 7")


def refusals(mha, tmp):
    """a few shapes that do not add up, each refused in one line naming the file"""
    rng = np.random.default_rng(1)
    files = {}
    for name, shape in (("x", (4, 6)), ("wq", (6, 10)), ("kva", (6, 6)), ("kvb", (4, 8)),
                        ("kvb_bad", (3, 8)), ("ln", (5,))):
        files[name] = os.path.join(tmp, name + ".npy")
        np.save(files[name], rng.standard_normal(shape))
    base = [mha, "forward", "-x", files["x"], "--heads", "2", "--wq", files["wq"]]
    cases = [
        (["--kv-a-proj-with-mqa", files["kva"], "--kv-b-proj", files["kvb"]],
         "needs --qk-rope-head-dim"),
        (["--qk-rope-head-dim", "2", "--kv-b-proj", files["kvb"]], "needs --kv-a-proj-with-mqa"),
        (["--qk-rope-head-dim", "2", "--kv-a-proj-with-mqa", files["kva"], "--kv-b-proj",
          files["kvb_bad"]], "kvb_bad.npy is 3x8 but needs 4 rows"),
        (["--qk-rope-head-dim", "2", "--kv-a-proj-with-mqa", files["kva"], "--kv-b-proj",
          files["kvb"], "--kv-a-layernorm", files["ln"]], "has 5 values but kv_lora_rank is 4"),
        (["--qk-rope-head-dim", "5", "--kv-a-proj-with-mqa", files["kva"], "--kv-b-proj",
          files["kvb"]], "leaves no unturned features"),
        (["--qk-rope-head-dim", "2", "--kv-a-proj-with-mqa", files["kva"], "--kv-b-proj",
          files["kvb"], "--kv-heads", "1"], "--kv-heads 1"),
    ]
    for extra, want in cases:
        r = subprocess.run(base + extra, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check("refused: " + want, r.returncode != 0 and not r.stdout and len(lines) >= 1 and
              want in lines[0], r.stderr.strip())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    mha = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(24):
            c = make_case(rng, k)
            w, x, xkv = draw(rng, c)
            name = "case %d (%s)" % (k, ", ".join("%s=%s" % (a, c[a]) for a in (
                "heads", "q_lora_rank", "rope", "causal", "cross", "batch", "wo")))
            forward_case(mha, c, w, x, xkv, tmp, name)
            if torch is not None:
                backward_case(mha, c, w, x, xkv, tmp, name, rng)
        checkpoint_cases(mha, tmp, rng)
        checkpoint_refusals(mha, tmp, rng)
        refusals(mha, tmp)
    if torch is None:
        print("mla_check: torch is not installed: the backward cases were skipped")
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""checkpoints.py: model checkpoints written as the published safetensors
format has them (an 8-byte little-endian header length, a JSON header of
name -> dtype, shape, data_offsets padded with blanks to 8 bytes, then the
raw little-endian data), never with the safetensors library: tensors in
F64, F32, F16, BF16, I64 and BOOL; the Llama, GPT-2, BERT and torch
layouts' layers with the tensors around them; a model folder, one file or
shards with an index.  checkpoint_check.py and families_check.py write
theirs with it."""

import json
import os
import struct

import numpy as np


# ---- writing safetensors ------------------------------------------------

DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "BOOL": "|b1",
          "U8": "|u1"}


def bf16(a):
    """float32 values rounded to bfloat16 (nearest, ties to even): the
    stored 16-bit words, and their values as float64."""
    u = np.asarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    back = (u.astype("<u4") << 16).view("<f4").astype(np.float64)
    return u, back


class Tensor:
    """A tensor to write: its dtype name, shape, raw bytes and the float64
    values mha must read back."""

    def __init__(self, a, dtype="F32"):
        a = np.asarray(a)
        self.dtype, self.shape = dtype, list(a.shape)
        if dtype == "BF16":
            words, self.value = bf16(a)
            self.raw = words.tobytes()
        else:
            s = a.astype(DTYPES[dtype])
            self.raw = s.tobytes()
            self.value = s.astype(np.float64) if dtype not in ("BOOL", "I64", "U8") else s


def safetensors_bytes(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        header[name] = {"dtype": t.dtype, "shape": t.shape,
                        "data_offsets": [len(data), len(data) + len(t.raw)]}
        data += t.raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write(path, tensors, metadata=None):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors, metadata))



# ---- the checkpoints -----------------------------------------------------


def llama_checkpoint(rng, layers, D, H, G, dtype, bias=False, prefix="model."):
    hd = D // H
    t, params = {}, []
    t[prefix + "embed_tokens.weight"] = Tensor(rng.standard_normal((11, D)), dtype)
    t[prefix + "norm.weight"] = Tensor(np.ones(D), dtype)
    t["lm_head.weight"] = Tensor(rng.standard_normal((11, D)), dtype)
    for n in range(layers):
        a = "%slayers.%d." % (prefix, n)
        p = {}
        for c, rows in (("q", H * hd), ("k", G * hd), ("v", G * hd)):
            w = Tensor(rng.standard_normal((rows, D)) * 0.5, dtype)
            t[a + "self_attn.%s_proj.weight" % c] = w
            p[c] = w.value
            if bias:
                b = Tensor(rng.standard_normal(rows) * 0.1, dtype)
                t[a + "self_attn.%s_proj.bias" % c] = b
                p["b" + c] = b.value
        w = Tensor(rng.standard_normal((D, H * hd)) * 0.5, dtype)
        t[a + "self_attn.o_proj.weight"] = w
        p["o"] = w.value
        t[a + "input_layernorm.weight"] = Tensor(np.ones(D), dtype)
        t[a + "mlp.gate_proj.weight"] = Tensor(rng.standard_normal((2 * D, D)), dtype)
        t[a + "mlp.down_proj.weight"] = Tensor(rng.standard_normal((D, 2 * D)), dtype)
        params.append(p)
    return t, params


def gpt2_checkpoint(rng, layers, D, dtype, prefix=""):
    t, params = {}, []
    t[prefix + "wte.weight"] = Tensor(rng.standard_normal((13, D)), dtype)
    t[prefix + "wpe.weight"] = Tensor(rng.standard_normal((16, D)), dtype)
    t[prefix + "ln_f.weight"] = Tensor(np.ones(D), dtype)
    for n in range(layers):
        a = "%sh.%d." % (prefix, n)
        p = {}
        for name, shape in (("c_attn_w", (D, 3 * D)), ("c_attn_b", (3 * D,)),
                            ("c_proj_w", (D, D)), ("c_proj_b", (D,))):
            w = Tensor(rng.standard_normal(shape) * 0.4, dtype)
            t[a + "attn." + name.replace("_w", ".weight").replace("_b", ".bias")] = w
            p[name] = w.value
        # the causal buffers older checkpoints carry: never read
        t[a + "attn.bias"] = Tensor(np.tril(np.ones((1, 1, 8, 8))), "U8")
        t[a + "attn.masked_bias"] = Tensor(np.array(-1e4), "F32")
        t[a + "ln_1.weight"] = Tensor(np.ones(D), dtype)
        t[a + "mlp.c_fc.weight"] = Tensor(rng.standard_normal((D, 4 * D)), dtype)
        params.append(p)
    return t, params


def bert_checkpoint(rng, layers, D, dtype, prefix="bert."):
    t, params = {}, []
    t[prefix + "embeddings.word_embeddings.weight"] = Tensor(rng.standard_normal((9, D)), dtype)
    t[prefix + "embeddings.position_ids"] = Tensor(np.arange(16)[None, :], "I64")
    t[prefix + "embeddings.LayerNorm.weight"] = Tensor(np.ones(D), dtype)
    for n in range(layers):
        a = "%sencoder.layer.%d.attention." % (prefix, n)
        p = {}
        for c, name in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"),
                        ("o", "output.dense")):
            w = Tensor(rng.standard_normal((D, D)) * 0.5, dtype)
            b = Tensor(rng.standard_normal(D) * 0.1, dtype)
            t[a + name + ".weight"], t[a + name + ".bias"] = w, b
            p[c], p["b" + c] = w.value, b.value
        t[a + "output.LayerNorm.weight"] = Tensor(np.ones(D), dtype)
        t["%sencoder.layer.%d.intermediate.dense.weight" % (prefix, n)] = \
            Tensor(rng.standard_normal((2 * D, D)), dtype)
        params.append(p)
    return t, params


def torch_checkpoint(rng, layers, E, dtype):
    """nn.TransformerEncoder's state_dict: layers.N.self_attn.* with
    linear1/linear2/norm1 beside it."""
    t, params = {}, []
    for n in range(layers):
        a = "layers.%d." % n
        p = {}
        for name, key, shape in (("in_w", "self_attn.in_proj_weight", (3 * E, E)),
                                 ("in_b", "self_attn.in_proj_bias", (3 * E,)),
                                 ("out_w", "self_attn.out_proj.weight", (E, E)),
                                 ("out_b", "self_attn.out_proj.bias", (E,))):
            w = Tensor(rng.standard_normal(shape) * 0.5, dtype)
            t[a + key] = w
            p[name] = w.value
        t[a + "linear1.weight"] = Tensor(rng.standard_normal((2 * E, E)), dtype)
        t[a + "norm1.weight"] = Tensor(np.ones(E), dtype)
        params.append(p)
    return t, params



def folder(tmp, name, tensors, config=None, shards=None):
    """A model folder: model.safetensors, or shards with an index."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    if shards:
        names = list(tensors)
        per = (len(names) + shards - 1) // shards
        weight_map = {}
        for s in range(shards):
            part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
            fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
            write(os.path.join(d, fname), part, {"format": "pt"})
            weight_map.update({n: fname for n in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    else:
        write(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
    return d



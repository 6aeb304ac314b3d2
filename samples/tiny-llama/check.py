"""
tiny-llama: layer 1 of a Llama-style safetensors checkpoint (bfloat16,
grouped-query heads, rotary embeddings with rope_theta 100, causal), read
with config.json beside it.

First make_checkpoint.py is run into a temporary folder: it must write the
very bytes committed in model/, so the sample is what the script makes.
Then the layer is computed again here the way Hugging Face's
LlamaAttention does (q_proj/k_proj/v_proj as x*W^T, rotate_half with
inv_freq = theta^(-2i/d), repeat_kv, causal softmax, o_proj), from the
bfloat16 words decoded by hand, and compared with mha's JSON to 1e-12.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checklib as c  # noqa: E402
import numpy as np  # noqa: E402

S = "tiny-llama"
HERE = os.path.join(c.TOP, "samples", S)

with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, os.path.join(HERE, "make_checkpoint.py"), tmp], check=True)
    same = all(open(os.path.join(tmp, f), "rb").read() ==
               open(os.path.join(HERE, "model", f), "rb").read()
               for f in ("model.safetensors", "config.json"))
c.report(S, same, "make_checkpoint.py writes the committed model/ byte for byte")


def read_safetensors(path):
    """name -> float64 array, for the BF16 tensors (bfloat16 = float32's top half)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        words = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<u2").astype("<u4") << 16
        out[name] = words.view("<f4").astype(np.float64).reshape(e["shape"])
    return out


cfg = json.load(open(os.path.join(HERE, "model", "config.json")))
W = read_safetensors(os.path.join(HERE, "model", "model.safetensors"))
X = c.load(S, "x.json", "X")
H, G = cfg["num_attention_heads"], cfg["num_key_value_heads"]
p = "model.layers.1.self_attn."
n, D = X.shape
hd = D // H

q = (X @ W[p + "q_proj.weight"].T).reshape(n, H, hd).transpose(1, 0, 2)
k = (X @ W[p + "k_proj.weight"].T).reshape(n, G, hd).transpose(1, 0, 2)
v = (X @ W[p + "v_proj.weight"].T).reshape(n, G, hd).transpose(1, 0, 2)
inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2) / hd)
ang = np.outer(np.arange(n), inv_freq)
cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))


def rotate_half(t):
    return np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], axis=-1)


q_rot = q * cos + rotate_half(q) * sin
k_rot = k * cos + rotate_half(k) * sin
k_rep, v_rep = np.repeat(k_rot, H // G, axis=0), np.repeat(v, H // G, axis=0)
scores = q_rot @ k_rep.transpose(0, 2, 1) / np.sqrt(hd) + c.causal_mask(n)
weights = np.array([c.softmax_rows(s) for s in scores])
out = (weights @ v_rep).transpose(1, 0, 2).reshape(n, H * hd) @ W[p + "o_proj.weight"].T

doc = json.loads(c.run_mha(c.cmd_args(S) + ["--format", "json"]))
d = c.rel_diff(np.array(doc["q_rot"]), q_rot.transpose(1, 0, 2).reshape(n, H * hd))
c.report(S, d <= c.RTOL, "q_rot: Llama's rotate_half with rope_theta 100, to 1e-12",
         "relative difference %.3g" % d)
d = max(c.rel_diff(np.array(h["softmax"]), weights[i]) for i, h in enumerate(doc["heads"]))
c.report(S, d <= c.RTOL, "each head's causal softmax, to 1e-12", "relative difference %.3g" % d)
d = c.rel_diff(np.array(doc["output"]), out)
c.report(S, d <= c.RTOL, "layer 1's output (o_proj) matches LlamaAttention to 1e-12",
         "relative difference %.3g" % d)
c.finish()

#!/usr/bin/python3
"""make_checkpoint.py: a tiny Llama-style checkpoint, as Hugging Face
publishes one: model.safetensors and config.json in a folder.

usage: python3 make_checkpoint.py [FOLDER]     (default: model/ beside this script)

Two layers of width 8 with 2 query heads sharing 1 key/value head
(grouped-query), rotary embeddings with rope_theta 100, weights in
bfloat16, and the tensors a real checkpoint carries beside the attention
(embeddings, norms, the MLP, lm_head), which mha never reads.  The
numbers come from sin/cos of their index, not a random generator, so the
files are the same bytes on every machine; the safetensors file is
written by hand following the published format (u64 header length, JSON
header, raw little-endian data), with NumPy only.
"""
import json
import os
import struct
import sys

import numpy as np

D, H, G, LAYERS, VOCAB = 8, 2, 1, 2, 16
HD = D // H


def values(shape, seed):
    n = int(np.prod(shape))
    return (0.6 * np.sin(1.7 * np.arange(n) + seed) + 0.3 * np.cos(0.37 * np.arange(n) * seed)).reshape(shape)


def bf16_words(a):
    """float32 rounded to bfloat16 (nearest, ties to even): the 16-bit words."""
    u = np.asarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def tensors():
    t = {"model.embed_tokens.weight": (VOCAB, D), "model.norm.weight": (D,),
         "lm_head.weight": (VOCAB, D)}
    for n in range(LAYERS):
        a = "model.layers.%d." % n
        t[a + "self_attn.q_proj.weight"] = (H * HD, D)
        t[a + "self_attn.k_proj.weight"] = (G * HD, D)
        t[a + "self_attn.v_proj.weight"] = (G * HD, D)
        t[a + "self_attn.o_proj.weight"] = (D, H * HD)
        t[a + "input_layernorm.weight"] = (D,)
        t[a + "post_attention_layernorm.weight"] = (D,)
        t[a + "mlp.gate_proj.weight"] = (2 * D, D)
        t[a + "mlp.up_proj.weight"] = (2 * D, D)
        t[a + "mlp.down_proj.weight"] = (D, 2 * D)
    return {name: bf16_words(values(shape, i + 1)).reshape(shape)
            for i, (name, shape) in enumerate(t.items())}


CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": D, "intermediate_size": 2 * D, "num_hidden_layers": LAYERS,
    "num_attention_heads": H, "num_key_value_heads": G, "rope_theta": 100.0,
    "attention_bias": False, "rms_norm_eps": 1e-5, "vocab_size": VOCAB,
    "torch_dtype": "bfloat16",
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "model")
    os.makedirs(out, exist_ok=True)
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, words in tensors().items():
        raw = words.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(words.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

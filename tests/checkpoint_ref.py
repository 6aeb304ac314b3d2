"""checkpoint_ref.py: the attention of the layouts checkpoint_check.py
writes, the way each model's own code computes it (Llama's rotate_half
rotary embedding and repeat_kv, GPT-2's Conv1D x*W + b with Q|K|V packed,
BERT's Linear layers without a mask, nn.MultiheadAttention), in NumPy
and, when torch is there, as PyTorch modules loaded from the checkpoint's
tensors; not from mha's code."""

import numpy as np


# ---- the families' attention, as their code writes it ---------------------


def softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def rotate_half(x):
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


def llama_attention(x, p, H, G, theta=10000.0, partial=1.0, window=None):
    """LlamaAttention / MistralAttention / Qwen2Attention in float64."""
    n = x.shape[0]
    q = x @ p["q"].T + p.get("bq", 0)
    k = x @ p["k"].T + p.get("bk", 0)
    v = x @ p["v"].T + p.get("bv", 0)
    hd = q.shape[1] // H
    q = q.reshape(n, H, hd).transpose(1, 0, 2)
    k = k.reshape(n, G, hd).transpose(1, 0, 2)
    v = v.reshape(n, G, hd).transpose(1, 0, 2)
    R = int(hd * partial)
    inv_freq = 1.0 / (theta ** (np.arange(0, R, 2, dtype=np.float64) / R))
    freqs = np.outer(np.arange(n, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rope(t):
        rot, rest = t[..., :R], t[..., R:]
        return np.concatenate([rot * cos + rotate_half(rot) * sin, rest], axis=-1)

    q, k = rope(q), rope(k)
    k = np.repeat(k, H // G, axis=0)  # repeat_kv
    v = np.repeat(v, H // G, axis=0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    blocked = j > i
    if window is not None:
        blocked |= (i - j) >= window
    s = np.where(blocked, -np.inf, s)
    o = (softmax(s) @ v).transpose(1, 0, 2).reshape(n, H * hd)
    return o @ p["o"].T + p.get("bo", 0)


def gpt2_attention(x, p, H):
    """GPT2Attention: Conv1D c_attn (x @ W + b), split Q|K|V, causal."""
    n, D = x.shape
    qkv = x @ p["c_attn_w"] + p["c_attn_b"]
    q, k, v = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
    hd = D // H
    q, k, v = (t.reshape(n, H, hd).transpose(1, 0, 2) for t in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    o = (softmax(s) @ v).transpose(1, 0, 2).reshape(n, D)
    return o @ p["c_proj_w"] + p["c_proj_b"]


def bert_attention(x, p, H):
    """BertSelfAttention and BertSelfOutput's dense (before dropout,
    the residual and LayerNorm)."""
    n, D = x.shape
    q, k, v = (x @ p[c].T + p["b" + c] for c in ("q", "k", "v"))
    hd = D // H
    q, k, v = (t.reshape(n, H, hd).transpose(1, 0, 2) for t in (q, k, v))
    o = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(hd)) @ v
    return o.transpose(1, 0, 2).reshape(n, D) @ p["o"].T + p["bo"]


def torch_mha(x, p, H):
    """nn.MultiheadAttention(E, H) on (x, x, x), no mask."""
    n, E = x.shape
    W, b = p["in_w"], p["in_b"]
    q, k, v = (x @ W[i * E:(i + 1) * E].T + b[i * E:(i + 1) * E] for i in range(3))
    hd = E // H
    q, k, v = (t.reshape(n, H, hd).transpose(1, 0, 2) for t in (q, k, v))
    o = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(hd)) @ v
    return o.transpose(1, 0, 2).reshape(n, E) @ p["out_w"].T + p["out_b"]


# ---- the same layers as PyTorch modules, when torch is there -------------
#
# Built from the checkpoint's tensors as the models' own PyTorch code holds
# them, not from the NumPy functions above: nn.MultiheadAttention loaded
# with load_state_dict, or nn.Linear projections and the rotary embedding
# written with torch ops.  Everything in float64.


def torch_tensor(torch, tensor):
    return torch.from_numpy(np.ascontiguousarray(tensor.value, dtype=np.float64))


def torch_mha_module(torch, x, H, state, causal=False):
    """nn.MultiheadAttention(E, H) with state (its own key names) on
    (x, x, x); causal: PyTorch's attn_mask, True = blocked."""
    n, E = x.shape
    m = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True, dtype=torch.float64)
    m.load_state_dict(state)  # strict: every key, no other
    m.eval()
    X = torch.from_numpy(x)[None]
    mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
    with torch.no_grad():
        out, _ = m(X, X, X, attn_mask=mask, need_weights=False)
    return out[0].numpy()


def torch_gpt2(torch, x, t, prefix, H):
    """GPT-2's layer: Conv1D stores (in, out) and computes x @ W + b, so
    nn.MultiheadAttention's (out, in) in_proj_weight is c_attn.weight
    transposed (its rows Q | K | V), out_proj.weight c_proj.weight's."""
    w = lambda name: torch_tensor(torch, t[prefix + name])
    state = {"in_proj_weight": w("c_attn.weight").T.contiguous(),
             "in_proj_bias": w("c_attn.bias"),
             "out_proj.weight": w("c_proj.weight").T.contiguous(),
             "out_proj.bias": w("c_proj.bias")}
    return torch_mha_module(torch, x, H, state, causal=True)


def torch_bert(torch, x, t, prefix, H):
    """BERT's self-attention and output dense: nn.Linear's (out, in), so
    in_proj_weight is query | key | value stacked as rows."""
    w = lambda name: torch_tensor(torch, t[prefix + name])
    state = {"in_proj_weight": torch.cat([w("self.%s.weight" % c)
                                          for c in ("query", "key", "value")]),
             "in_proj_bias": torch.cat([w("self.%s.bias" % c) for c in ("query", "key", "value")]),
             "out_proj.weight": w("output.dense.weight"),
             "out_proj.bias": w("output.dense.bias")}
    return torch_mha_module(torch, x, H, state)


def torch_encoder_layer(torch, x, t, prefix, H):
    """nn.TransformerEncoder's layers.N.self_attn: its own state_dict keys."""
    state = {name[len(prefix):]: torch_tensor(torch, v) for name, v in t.items()
             if name.startswith(prefix)}
    return torch_mha_module(torch, x, H, state)


def torch_llama(torch, x, t, prefix, H, G, theta=10000.0, partial=1.0, window=None):
    """LlamaAttention as transformers writes it: nn.Linear q/k/v/o_proj,
    rotate_half over the first partial*head_dim features, repeat_kv
    (repeat_interleave over the heads), causal (and a sliding window),
    softmax; in float64."""
    n = x.shape[0]

    def linear(name):
        w = t[prefix + name + ".weight"]
        b = t.get(prefix + name + ".bias")
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=b is not None, dtype=torch.float64)
        state = {"weight": torch_tensor(torch, w)}
        if b is not None:
            state["bias"] = torch_tensor(torch, b)
        lin.load_state_dict(state)
        return lin

    def rotate_half(u):
        half = u.shape[-1] // 2
        return torch.cat((-u[..., half:], u[..., :half]), dim=-1)

    with torch.no_grad():
        X = torch.from_numpy(x)
        q, k, v = (linear(c + "_proj")(X) for c in ("q", "k", "v"))
        hd = q.shape[1] // H
        q = q.view(n, H, hd).transpose(0, 1)
        k = k.view(n, G, hd).transpose(0, 1)
        v = v.view(n, G, hd).transpose(0, 1)
        R = int(hd * partial)
        inv_freq = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
        freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()

        def rope(u):
            rot, rest = u[..., :R], u[..., R:]
            return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)

        q, k = rope(q), rope(k)
        k = k.repeat_interleave(H // G, dim=0)
        v = v.repeat_interleave(H // G, dim=0)
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        blocked = j > i
        if window is not None:
            blocked = blocked | ((i - j) >= window)
        s = (q @ k.transpose(-2, -1)) / (hd ** 0.5)
        s = s.masked_fill(blocked, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(n, H * hd)
        return linear("o_proj")(o).numpy()



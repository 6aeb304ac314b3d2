"""families_ref.py: each model family's attention, transcribed from its
Hugging Face modeling code, as the reference families_check.py (and
backward_check.py and mla_check.py, for the rope scaling) hold mha to:
the settings the attention takes from its config (hf_settings), the
rotary embedding's frequencies and factor (rope_parameters), and the
attention in NumPy (decoder_attention) and in PyTorch (torch_attention)."""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_ref as cr  # noqa: E402  (softmax, rotate_half)


def hf_settings(f, config, layer, n):
    """What the family's attention module takes from its config for layer,
    for n tokens (a dynamic rope scaling depends on it): as transformers'
    modeling_<family>.py sets up self.scaling, self.sliding_window, the
    rotary embedding and the softcap."""
    t = f.get("text", f["type"])
    c = config.get("text_config", config)
    if t == "internlm2":
        # its class ships with the checkpoint: a key left out has no default here
        for key in ("num_attention_heads", "num_key_value_heads", "hidden_size", "rope_theta",
                    "rope_scaling", "bias"):
            if key not in c:
                raise ValueError("InternLM2: no %s" % key)
    H = c.get("num_attention_heads", c.get("n_head", 32))  # LlamaConfig's default
    hd = c.get("head_dim") or c.get("hidden_size", c.get("n_embd")) // H
    theta = c.get("rope_theta", c.get("rotary_emb_base", 10000.0))
    s = dict(H=H, G=c.get("num_key_value_heads") or H, hd=hd, scaling=hd ** -0.5,
             softcap=None, window=None, rope="half", theta=theta,
             R=int(hd * c.get("partial_rotary_factor", c.get("rotary_pct", 1.0))))
    if t == "gpt_neox":
        c = dict(c, rope_theta=theta)
    # the fused projections, split as each modeling code splits them
    if t == "phi3":
        s["fused"] = "blocks"
        s["window"] = c.get("sliding_window")
    if t == "gpt_neox":
        s["fused"] = "per_head"
    if t == "falcon":
        # FalconAttention: num_kv_heads if new_decoder_architecture or not
        # multi_query, else 1; _split_heads by the same flags
        if c.get("new_decoder_architecture"):
            s["G"], s["fused"] = c.get("num_kv_heads") or H, "grouped"
        elif c.get("multi_query", True):
            s["G"], s["fused"] = 1, "blocks"
        else:
            s["G"], s["fused"] = H, "per_head"
    if t == "gemma3_text":
        # Gemma3Attention: query_pre_attn_scalar (256), sliding by layer_types or
        # sliding_window_pattern, the local rotary embedding on sliding layers
        # (rope_local_base_freq, rope_scaling default), Gemma3RMSNorm on q and k
        s["scaling"] = c.get("query_pre_attn_scalar", 256) ** -0.5
        s["softcap"] = c.get("attn_logit_softcapping")
        if "layer_types" in c:
            local = c["layer_types"][layer] == "sliding_attention"
        else:
            local = bool((layer + 1) % c.get("sliding_window_pattern", 6))
        if local:
            s["window"] = c.get("sliding_window", 4096)
            s["theta"] = c.get("rope_local_base_freq", 10000.0)
            c = dict(c, rope_theta=s["theta"], rope_scaling=None)
        else:
            s["theta"] = c.get("rope_theta", 1000000.0)
            c = dict(c, rope_theta=s["theta"])
        s["norm"] = ("rms1p", "head", c.get("rms_norm_eps", 1e-6))
    if t == "modernbert":
        # ModernBertAttention: Wqkv viewed (3, heads, head_dim); a local layer
        # (layer % global_attn_every_n_layers) sees local_attention // 2 keys on
        # each side and turns by local_rope_theta; bidirectional
        s["fused"], s["causal"] = "blocks", False
        if layer % c.get("global_attn_every_n_layers", 3):
            s["both"] = c.get("local_attention", 128) // 2
            s["theta"] = c.get("local_rope_theta") or c.get("global_rope_theta", 160000.0)
        else:
            s["theta"] = c.get("global_rope_theta", 160000.0)
        c = dict(c, rope_theta=s["theta"])
    if t == "gpt_bigcode":
        s["rope"] = None
        if c.get("multi_query", True):
            s["G"], s["fused"] = 1, "blocks"
        else:
            s["G"], s["fused"] = H, "per_head"
        if not c.get("scale_attn_weights", True):
            s["scaling"] = 1.0
    if t == "internlm2":
        # InternLM2Attention: wqkv rearranged "(h gs d)", gs = H/G + 2: each
        # group's query heads, then its key and its value
        s["fused"] = "grouped"
    if t == "opt":
        # OPTAttention: q_proj(x) * head_dim**-0.5, bias first; no rotation
        s["rope"] = None
    if t == "gptj":
        # GPTJAttention: the first rotary_dim features, rotate_every_two, base
        # 10000 whatever the config says
        s["R"], s["rope"] = c.get("rotary_dim", 64), "interleaved"
        c = dict(c, rope_theta=10000.0)
    s["inv"], s["af"] = rope_parameters(c, s["R"], n)
    if t == "gemma2":
        s["scaling"] = c["query_pre_attn_scalar"] ** -0.5
        s["softcap"] = c.get("attn_logit_softcapping")
        # layer_types' default: sliding when (i + 1) % 2 (layers 0, 2, ...)
        if (layer + 1) % 2:
            s["window"] = c["sliding_window"]
    if t in ("mistral", "mixtral", "starcoder2"):
        s["window"] = c.get("sliding_window")
    if t == "apertus":
        # ApertusAttention: ApertusRMSNorm(head_dim) of q and k, always
        s["norm"] = ("rms", "head", c.get("rms_norm_eps", 1e-5))
    if t == "glm4_moe" and c.get("use_qk_norm"):
        # Glm4MoeAttention: Glm4MoeRMSNorm(head_dim) of q and k with use_qk_norm
        s["norm"] = ("rms", "head", c.get("rms_norm_eps", 1e-5))
    if t == "nemotron" and c.get("num_key_value_heads") is None:
        # NemotronConfig keeps None, NemotronAttention divides by it
        raise ValueError("NemotronAttention: num_key_value_heads None")
    if t == "exaone4":
        # Exaone4Attention: Exaone4RMSNorm of q and k per head; the layers'
        # kinds from layer_types, else (i + 1) % sliding_window_pattern; with
        # sliding_window set, the sliding layers turn and slide, the full
        # ones neither; with it null every layer turns and none slides
        w = c.get("sliding_window", 4096)
        every = c.get("sliding_window_pattern", 4) if w is not None else 0  # its class's
        types = c.get("layer_types") or [                                   # 0: no model
            "sliding_attention" if (i + 1) % every else "full_attention"
            for i in range(layer + 1)]
        local = types[layer] == "sliding_attention"
        s["norm"] = ("rms", "head", c.get("rms_norm_eps", 1e-5))
        if w is not None:
            s["window"] = w if local else None
            if not local:
                s["rope"] = None
    if t == "ernie4_5":
        # Ernie4_5's apply_rotary_pos_emb: cos and sin repeat_interleave'd,
        # pairs (2i, 2i + 1), as GLM's
        s["rope"] = "interleaved"
    if t in ("qwen2", "qwen3", "qwen3_moe") and c.get("use_sliding_window") and \
            layer >= c["max_window_layers"]:
        s["window"] = c["sliding_window"]
    # the q/k norm: Qwen3RMSNorm per head, Olmo2RMSNorm over the projection,
    # CohereLayerNorm over (heads, head_dim) when use_qk_norm
    if t in ("qwen3", "qwen3_moe"):
        s["norm"] = ("rms", "head", c.get("rms_norm_eps", 1e-6))
    if t == "olmo2":
        s["norm"] = ("rms", "all", c.get("rms_norm_eps", 1e-5))
    if t == "cohere" and c.get("use_qk_norm"):
        s["norm"] = ("layer", "head", c.get("layer_norm_eps", 1e-5))
    if t == "granite":
        s["scaling"] = c["attention_multiplier"]
    if t == "cohere":
        s["rope"] = "interleaved"
    if t in ("glm", "glm4"):
        # GlmAttention's apply_rotary_pos_emb: cos and sin repeat_interleave'd,
        # pairs (2i, 2i + 1) of the first int(head_dim * partial_rotary_factor)
        s["rope"] = "interleaved"
    if t == "cohere2":
        # Cohere2Attention: sliding and rotated on the local layers (layer_types,
        # else all but every sliding_window_pattern-th), neither on the others
        local = bool((layer + 1) % c.get("sliding_window_pattern", 4))
        if "layer_types" in c:
            local = c["layer_types"][layer] == "sliding_attention"
        s["rope"] = "interleaved" if local and c.get("sliding_window") else None
        s["window"] = c.get("sliding_window") if local else None
    # SmolLM3Config: no_rope_layers None -> every no_rope_layer_interval-th layer
    if t == "smollm3" and not (c.get("no_rope_layers") or
                               [int((i + 1) % c["no_rope_layer_interval"] != 0)
                                for i in range(layer + 1)])[layer]:
        s["rope"] = None
    # GptOssConfig: layer_types None -> the even layers slide
    if t == "gpt_oss" and (c.get("layer_types") or
                           ["sliding_attention" if (i + 1) % 2 else "full_attention"
                            for i in range(layer + 1)])[layer] == "sliding_attention":
        s["window"] = c["sliding_window"]
    return s


def rope_parameters(c, R, seq_len):
    """inv_freq and the attention factor as modeling_rope_utils.py's
    _compute_*_parameters compute them from config c's rope_scaling"""
    base = c.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (np.arange(0, R, 2, dtype=np.float64) / R))
    sc = c.get("rope_scaling")
    t = sc and sc.get("rope_type", sc.get("type"))
    if not t or t == "default":
        return inv, 1.0
    if t == "linear":
        return inv / sc["factor"], 1.0
    if t == "dynamic":
        mp, f = c["max_position_embeddings"], sc["factor"]
        if seq_len > mp:
            base = base * ((f * seq_len / mp) - (f - 1)) ** (R / (R - 2))
            inv = 1.0 / (base ** (np.arange(0, R, 2, dtype=np.float64) / R))
        return inv, 1.0
    if t == "llama3":
        f, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old = sc["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_l = np.where(wavelen > low_wl, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / f + smooth * inv_l
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, smoothed, inv_l), 1.0
    if t == "yarn":
        f = sc["factor"]
        if "original_max_position_embeddings" in sc:
            old = sc["original_max_position_embeddings"]
            f = c["max_position_embeddings"] / old
        else:
            old = c["max_position_embeddings"]

        def m(scale, k=1):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
        af = sc.get("attention_factor")
        if af is None:
            ms, ma = sc.get("mscale"), sc.get("mscale_all_dim")
            af = m(f, ms) / m(f, ma) if ms and ma else m(f)

        def dim(rot):
            return (R * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(base))
        low, high = dim(sc.get("beta_fast") or 32), dim(sc.get("beta_slow") or 1)
        if sc.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, R - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(R // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        pos_freqs = base ** (np.arange(0, R, 2, dtype=np.float64) / R)
        extra, inter = 1.0 / pos_freqs, 1.0 / (f * pos_freqs)
        e = 1 - ramp
        return inter * (1 - e) + extra * e, af
    if t == "longrope":
        # Phi-3 keeps original_max_position_embeddings beside rope_scaling
        old = c.get("original_max_position_embeddings") or sc["original_max_position_embeddings"]
        f = c["max_position_embeddings"] / old
        af = sc.get("attention_factor")
        if af is None:
            af = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(old))
        ext = np.array(sc["long_factor"] if seq_len > old else sc["short_factor"])
        return 1.0 / (ext * base ** (np.arange(0, R, 2, dtype=np.float64) / R)), af
    raise ValueError(t)


def rotate(x, pos, R, inv_freq, af, style):
    """the first R features of each row of x turned by its position (cos
    and sin times the attention factor af)"""
    freqs = np.outer(pos, inv_freq)
    xr, rest = x[..., :R], x[..., R:]
    if style == "half":  # rotate_half over cat(freqs, freqs)
        emb = np.concatenate([freqs, freqs], axis=-1)
        out = xr * (np.cos(emb) * af) + cr.rotate_half(xr) * (np.sin(emb) * af)
    else:  # Cohere: repeat_interleave(freqs, 2), pairs (2i, 2i + 1)
        emb = np.repeat(freqs, 2, axis=-1)
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = np.stack([-x2, x1], axis=-1).reshape(xr.shape)
        out = xr * (np.cos(emb) * af) + rot * (np.sin(emb) * af)
    return np.concatenate([out, rest], axis=-1)


def qk_normed(x, w, kind, eps):
    """x normalised over its last axis as the norm modules do: LayerNorm
    centres first; then x / sqrt(mean(x^2) + eps) times the weight (Gemma's:
    1 + the weight)"""
    if kind == "layer":
        x = x - x.mean(-1, keepdims=True)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * ((1 + w) if kind == "rms1p" else w)


def split_qkv(y, s):
    """a fused projection's output (n, rows) as Q, K and V, (n, H*hd),
    (n, G*hd), (n, G*hd), as the modeling code views and splits it"""
    n, H, G, hd = y.shape[0], s["H"], s["G"], s["hd"]
    if s["fused"] == "blocks":  # Phi-3's qkv[..., :q], BigCode's split, Falcon's [:-2]
        return y[:, :H * hd], y[:, H * hd:(H + G) * hd], y[:, (H + G) * hd:]
    if s["fused"] == "per_head":  # GPT-NeoX: view(n, H, 3 * hd).chunk(3, dim=-1)
        y = y.reshape(n, H, 3 * hd)
        return (y[..., :hd].reshape(n, -1), y[..., hd:2 * hd].reshape(n, -1),
                y[..., 2 * hd:].reshape(n, -1))
    # Falcon's new_decoder_architecture: view(n, G, H/G + 2, hd)
    y = y.reshape(n, G, H // G + 2, hd)
    return y[:, :, :-2].reshape(n, -1), y[:, :, -2].reshape(n, -1), y[:, :, -1].reshape(n, -1)


def decoder_attention(x, p, s, kv_len=None):
    """eager_attention_forward with the family's settings: projections,
    rotary embedding, repeat_kv, scaled scores, softcap, causal + sliding +
    padding mask, softmax, the heads merged, o_proj; x (n, D)"""
    n = x.shape[0]
    H, G, hd = s["H"], s["G"], s["hd"]
    if "qkv" in p:
        q, k, v = split_qkv(x @ p["qkv"].T + p.get("bqkv", 0), s)
    else:
        q = x @ p["q"].T + p.get("bq", 0)
        k = x @ p["k"].T + p.get("bk", 0)
        v = x @ p["v"].T + p.get("bv", 0)
    if s.get("norm") and s["norm"][1] == "all":  # OLMo 2: before the heads are split
        q = qk_normed(q, p["qn"], s["norm"][0], s["norm"][2])
        k = qk_normed(k, p["kn"], s["norm"][0], s["norm"][2])
    q, k = q.reshape(n, H, hd), k.reshape(n, G, hd)
    if s.get("norm") and s["norm"][1] == "head":  # weights (hd) or (heads, hd)
        q = qk_normed(q, p["qn"], s["norm"][0], s["norm"][2])
        k = qk_normed(k, p["kn"], s["norm"][0], s["norm"][2])
    q, k = q.transpose(1, 0, 2), k.transpose(1, 0, 2)
    v = v.reshape(n, G, hd).transpose(1, 0, 2)
    pos = np.arange(n, dtype=np.float64)
    if s["rope"]:
        q = rotate(q, pos, s["R"], s["inv"], s["af"], s["rope"])
        k = rotate(k, pos, s["R"], s["inv"], s["af"], s["rope"])
    k = np.repeat(k, H // G, axis=0)
    v = np.repeat(v, H // G, axis=0)
    w = q @ k.transpose(0, 2, 1) * s["scaling"]
    if s["softcap"]:
        w = np.tanh(w / s["softcap"]) * s["softcap"]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    keep = j <= i if s.get("causal", True) else np.ones((n, n), dtype=bool)
    if s["window"]:
        keep = keep & (i - j < s["window"])
    if s.get("both"):  # ModernBERT's local window: |i - j| <= local_attention // 2
        keep = keep & (np.abs(i - j) <= s["both"])
    if kv_len is not None:
        keep = keep & (j < kv_len)
    w = np.where(keep, w, -np.inf)
    if "sinks" in p:
        # gpt-oss: each head's sink joins its softmax, then is dropped
        sink = np.broadcast_to(p["sinks"][:, None, None], (H, n, 1))
        o = cr.softmax(np.concatenate([w, sink], axis=-1))[..., :-1] @ v
    else:
        o = cr.softmax(w) @ v
    return o.transpose(1, 0, 2).reshape(n, H * hd) @ p["o"].T + p.get("bo", 0)


def torch_attention(torch, x, p, s, kv_len=None):
    """the same in PyTorch, float64, as the modeling code writes it"""
    F = torch.nn.functional
    T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    n = x.shape[0]
    H, G, hd = s["H"], s["G"], s["hd"]
    hs = T(x)[None]
    lin = lambda w, b: F.linear(hs, T(w), None if b is None else T(b))  # noqa: E731
    if "qkv" in p:
        qkv = lin(p["qkv"], p.get("bqkv"))[0]
        if s["fused"] == "per_head":
            qkv = qkv.view(n, H, 3 * hd)
            q, k, v = (t.reshape(1, n, -1) for t in qkv.chunk(3, dim=-1))
        elif s["fused"] == "grouped":
            qkv = qkv.view(n, G, H // G + 2, hd)
            q, k, v = (qkv[:, :, :-2].reshape(1, n, -1), qkv[:, :, -2].reshape(1, n, -1),
                       qkv[:, :, -1].reshape(1, n, -1))
        else:
            q, k, v = (t[None] for t in qkv.split([H * hd, G * hd, G * hd], dim=-1))
    else:
        q, k = lin(p["q"], p.get("bq")), lin(p["k"], p.get("bk"))
        v = lin(p["v"], p.get("bv"))
    if s.get("norm"):
        kind, over, eps = s["norm"]

        def norm(t, w):
            # Qwen3RMSNorm / Olmo2RMSNorm: in float32 upstream, float64 here
            if kind == "layer":  # CohereLayerNorm
                t = t - t.mean(-1, keepdim=True)
            t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)
            return t * (1.0 + T(w)) if kind == "rms1p" else T(w) * t
        if over == "all":
            q, k = norm(q, p["qn"]), norm(k, p["kn"])
        else:
            q = norm(q.view(1, n, H, hd), p["qn"])
            k = norm(k.view(1, n, G, hd), p["kn"])
    q = q.reshape(1, n, H, hd).transpose(1, 2)
    k = k.reshape(1, n, G, hd).transpose(1, 2)
    v = v.reshape(1, n, G, hd).transpose(1, 2)
    if s["rope"]:
        R = s["R"]
        inv_freq = T(s["inv"])
        freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]
        if s["rope"] == "half":
            emb = torch.cat((freqs, freqs), dim=-1)

            def rot(t):
                return torch.cat((-t[..., R // 2:], t[..., :R // 2]), dim=-1)
        else:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)

            def rot(t):
                return torch.stack([-t[..., 1::2], t[..., ::2]], dim=-1).flatten(-2)
        cos, sin = emb.cos() * s["af"], emb.sin() * s["af"]
        q = torch.cat((q[..., :R] * cos + rot(q[..., :R]) * sin, q[..., R:]), dim=-1)
        k = torch.cat((k[..., :R] * cos + rot(k[..., :R]) * sin, k[..., R:]), dim=-1)
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    w = torch.matmul(q, k.transpose(2, 3)) * s["scaling"]
    if s["softcap"]:
        w = torch.tanh(w / s["softcap"]) * s["softcap"]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = j <= i if s.get("causal", True) else torch.ones(n, n, dtype=torch.bool)
    if s["window"]:
        keep &= (i - j) < s["window"]
    if s.get("both"):
        keep &= (i - j).abs() <= s["both"]
    if kv_len is not None:
        keep &= j < kv_len
    w = w.masked_fill(~keep, float("-inf"))
    if "sinks" in p:
        sinks = T(p["sinks"]).reshape(1, -1, 1, 1).expand(1, H, n, 1)
        combined = torch.cat([w, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined, dim=-1)[..., :-1]
    else:
        probs = F.softmax(w, dim=-1)
    o = torch.matmul(probs, v).transpose(1, 2).reshape(1, n, H * hd)
    return F.linear(o, T(p["o"]), None if p.get("bo") is None else T(p["bo"]))[0].numpy()


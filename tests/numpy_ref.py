"""numpy_ref.py: mha's attention as a NumPy user writes it from the formula
in lib/mha.h (matrix products, reshape/transpose for the heads, np.repeat
for grouped-query heads, np.where for masks, a softmax that subtracts the
row maximum), not translated from lib/: one sequence (reference), a batch
(batch_reference), and nn.MultiheadAttention as its documentation states
it (torch_mha_convention).  numpy_check.py holds mha to them."""

import math

import numpy as np


def rotate_half(x):
    """Llama / GPT-NeoX (Hugging Face's rotate_half): [-x2, x1] of the halves."""
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


def rotate_every_two(x):
    """GPT-J's rotate_every_two: each pair (x1, x2) becomes (-x2, x1)."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return np.stack([-x2, x1], axis=-1).reshape(x.shape)


def apply_rope(x, pos, rope):
    """x (heads, n, d) turned the way the models' code does it.

    rope: {"mode": "half"|"interleaved", "theta", "dim", "cos", "sin"}; pos:
    (n) positions.  The angles are pos * theta^(-2i/R) (inv_freq as Hugging
    Face writes it), or rows pos of the given cos/sin tables; Llama takes
    cos/sin of the angles repeated over both halves and adds rotate_half(x)
    * sin, GPT-J repeats each twice and adds rotate_every_two(x) * sin.
    """
    R = rope.get("dim") or x.shape[-1]
    if rope.get("cos") is not None:
        c, s = rope["cos"][pos], rope["sin"][pos]
    else:
        inv_freq = rope.get("theta", 10000.0) ** (-np.arange(0, R, 2, dtype=np.float64) / R)
        freqs = np.outer(np.asarray(pos, np.float64), inv_freq)   # (n, R/2)
        c, s = np.cos(freqs), np.sin(freqs)
    if rope["mode"] == "half":
        c, s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
        rot = rotate_half
    else:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
        rot = rotate_every_two
    xr, rest = x[..., :R], x[..., R:]
    return np.concatenate([xr * c + rot(xr) * s, rest], axis=-1)


def scale_value(mode, d_k, d_model, n_kv):
    """The multiplier --scale MODE stands for."""
    if mode in (None, "dk"):
        return 1.0 / math.sqrt(d_k)
    if mode == "dmodel":
        return 1.0 / math.sqrt(d_model)
    if mode == "seqlen":
        return 1.0 / math.sqrt(n_kv)
    if mode == "none":
        return 1.0
    return float(mode)


def softmax_rows(z):
    """Row-wise softmax; a row that is -inf throughout gives zeros."""
    m = z.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)  # all -inf: exp(-inf) = 0 anyway
    e = np.exp(z - m)                     # subtracting the max: no overflow
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def press_slopes(n_heads):
    """ALiBi's slopes as BLOOM's build_alibi_tensor lays them out: a geometric
    sequence from 2^(-8/n) for the closest power of two n <= n_heads, then,
    for the heads left over, every other slope (the odd powers) of the
    sequence for 2n heads."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = base ** np.arange(1, closest + 1, dtype=np.float64)
    if closest != n_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        left = min(closest, n_heads - closest)
        slopes = np.concatenate([slopes, extra ** np.arange(1, 1 + 2 * left, 2,
                                                            dtype=np.float64)])
    return slopes


def reference(xq, xk, xv, w, heads, kv_heads, scale, softcap, causal, mask, sinks=None,
              alibi=None, rope=None):
    """Every intermediate of multi-head attention, per head stacked on axis 0.

    xq, xk, xv: the query, key and value sources (Q, K, V themselves when
    the weights are absent); w: dict of W_Q, W_K, W_V, W_O, b_Q, ... (any
    may be missing); mask: None, or a bool/float array (n_q, n_kv) or
    (heads, n_q, n_kv); causal: None, "top-left" or "bottom-right";
    sinks: None, or one logit per head, as gpt-oss adds them: a column of
    its own beside the scores, through the softmax, then dropped;
    alibi: None, or one slope per head: slope*(j - p) joins the mask where
    the key is seen, p = i + the causal offset (mha's convention; BLOOM adds
    slope*j, which gives the same weights without sinks: softmax_bloom);
    rope: None, or apply_rope's settings with "q_pos"/"k_pos" (None: keys at
    j, queries at i plus the causal offset).
    """
    H, G = heads, kv_heads or heads

    def project(x, wname, bname):
        y = x @ w[wname] if wname in w else x.copy()
        if bname in w:
            y = y + w[bname]
        return y

    Q = project(xq, "W_Q", "b_Q")
    K = project(xk, "W_K", "b_K")
    V = project(xv, "W_V", "b_V")
    n_q, n_kv = Q.shape[0], K.shape[0]
    d_k, d_v = Q.shape[1] // H, V.shape[1] // G

    # heads are column blocks: (n, H*d) -> (H, n, d)
    Qh = Q.reshape(n_q, H, d_k).transpose(1, 0, 2)
    Kg = K.reshape(n_kv, G, d_k).transpose(1, 0, 2)
    Vg = V.reshape(n_kv, G, d_v).transpose(1, 0, 2)
    rot = {}
    if rope:
        offset = n_kv - n_q if causal == "bottom-right" else 0
        q_pos = rope.get("q_pos")
        k_pos = rope.get("k_pos")
        q_pos = np.arange(n_q) + offset if q_pos is None else np.asarray(q_pos)
        k_pos = np.arange(n_kv) if k_pos is None else np.asarray(k_pos)
        Qh = apply_rope(Qh, q_pos, rope)
        Kg = apply_rope(Kg, k_pos, rope)
        rot = {"q_rot": Qh.transpose(1, 0, 2).reshape(n_q, H * d_k),
               "k_rot": Kg.transpose(1, 0, 2).reshape(n_kv, G * d_k)}
    # query head h reads key/value head h // (H/G)
    Kh = np.repeat(Kg, H // G, axis=0)
    Vh = np.repeat(Vg, H // G, axis=0)

    scores = Qh @ Kh.transpose(0, 2, 1)
    s = scale_value(scale, d_k, xq.shape[1], n_kv)
    scaled = scores * s
    softcapped = softcap * np.tanh(scaled / softcap) if softcap else scaled

    allowed = np.ones((H, n_q, n_kv), dtype=bool)
    bias = np.zeros((H, n_q, n_kv))
    if causal:
        offset = 0 if causal == "top-left" else n_kv - n_q
        allowed &= np.tri(n_q, n_kv, k=offset, dtype=bool)  # j <= i + offset
    if mask is not None:
        m = np.broadcast_to(mask, (H, n_q, n_kv))
        if mask.dtype == bool:
            allowed &= m
        else:
            bias = bias + m
    mask_add = np.where(allowed, 0.0, -np.inf) + bias
    bloom = None
    if alibi is not None:
        slopes = np.asarray(alibi, float)[:, None, None]
        offset = n_kv - n_q if causal == "bottom-right" else 0
        j = np.arange(n_kv, dtype=np.float64)[None, None, :]
        p = (np.arange(n_q) + offset).astype(np.float64)[None, :, None]
        # BLOOM: the key's position alone; a per-row constant away from mha's,
        # the same weights (not with a sink, which no constant shifts)
        if sinks is None:
            bloom = softmax_rows(softcapped + mask_add + slopes * j)
        mask_add = mask_add + slopes * (j - p)

    masked = softcapped + mask_add
    if sinks is None:
        weights = softmax_rows(masked)
    else:
        # gpt-oss: concatenate the sink column, softmax, drop it; a row whose
        # keys are all masked gives the sink every bit of mass: zeros
        col = np.broadcast_to(np.asarray(sinks, float)[:, None, None], (H, n_q, 1))
        weights = softmax_rows(np.concatenate([masked, col], axis=-1))[..., :-1]
    out_h = weights @ Vh
    concat = out_h.transpose(1, 0, 2).reshape(n_q, H * d_v)
    output = concat @ w["W_O"] if "W_O" in w else concat
    if "W_O" in w and "b_O" in w:
        output = output + w["b_O"]
    return {
        "Q": Q, "K": K, "V": V, "head_Q": Qh, "head_K": Kh, "head_V": Vh,
        "scores": scores, "scaled": scaled, "softcapped": softcapped,
        "mask": mask_add, "masked": masked, "softmax": weights,
        "head_output": out_h, "concat": concat, "output": output,
        "blocked": np.all(np.isneginf(masked), axis=-1),  # (H, n_q)
        "softmax_bloom": bloom,
        **rot,
    }


def batch_reference(xq, xk, xv, w, heads, kv_heads, causal, kv_lens, mask, window=None,
                    alibi=None, rope=None):
    """A batch, the batch an axis of every array (einsum over it), not a loop:
    xq (B, n_q, d), xk and xv (B, n_kv, d); mask broadcasts to (B, H, n_q,
    n_kv) as NumPy (and ONNX) broadcast; kv_lens one length per sequence,
    bottom-right lining each sequence's last query up with its last key.
    alibi (one slope a head) and rope (apply_rope's dict) take each sequence's
    own query positions, i + its causal offset.
    Returns mask, softmax (B, H, n_q, n_kv) and output (B, n_q, d_out)."""
    H, G = heads, kv_heads or heads
    B, n_q, n_kv = xq.shape[0], xq.shape[1], xk.shape[1]
    Q = xq @ w["W_Q"] if "W_Q" in w else xq
    K = xk @ w["W_K"] if "W_K" in w else xk
    V = xv @ w["W_V"] if "W_V" in w else xv
    d_k, d_v = Q.shape[2] // H, V.shape[2] // G
    lens_b = np.asarray(kv_lens if kv_lens is not None else [n_kv] * B)
    offs = lens_b - n_q if causal == "bottom-right" else np.zeros(B, dtype=int)
    Qh = Q.reshape(B, n_q, H, d_k)
    Kg = K.reshape(B, n_kv, G, d_k)
    if rope is not None:
        # each sequence's queries at i + its offset, keys at 0 ... n_kv - 1
        Qh = np.stack([apply_rope(Qh[b].transpose(1, 0, 2), np.arange(n_q) + offs[b], rope)
                       .transpose(1, 0, 2) for b in range(B)])
        Kg = np.stack([apply_rope(Kg[b].transpose(1, 0, 2), np.arange(n_kv), rope)
                       .transpose(1, 0, 2) for b in range(B)])
    Kh = np.repeat(Kg, H // G, axis=2)
    Vh = np.repeat(V.reshape(B, n_kv, G, d_v), H // G, axis=2)
    scaled = np.einsum("bihd,bjhd->bhij", Qh, Kh) / math.sqrt(d_k)
    lens = np.asarray(kv_lens if kv_lens is not None else [n_kv] * B)[:, None, None, None]
    i = np.arange(n_q)[None, None, :, None]
    j = np.arange(n_kv)[None, None, None, :]
    offset = 0 if causal != "bottom-right" else lens - n_q
    allowed = np.broadcast_to(j < lens, (B, H, n_q, n_kv))
    if causal:
        allowed = allowed & (j <= i + offset)
    if window is not None:
        left, right = window
        if left >= 0:
            allowed = allowed & (j >= i + offset - left)
        if right >= 0:
            allowed = allowed & (j <= i + offset + right)
    bias = np.zeros((B, H, n_q, n_kv))
    if mask is not None:
        m = np.broadcast_to(mask, (B, H, n_q, n_kv))
        if mask.dtype == bool:
            allowed = allowed & m
        else:
            bias = bias + m
    mask_add = np.where(allowed, 0.0, -np.inf) + bias
    if alibi is not None:
        p = i + offs[:, None, None, None]
        mask_add = mask_add + np.asarray(alibi, float)[None, :, None, None] * (j - p)
    weights = softmax_rows(scaled + mask_add)
    out = np.einsum("bhij,bjhd->bihd", weights, Vh).reshape(B, n_q, H * d_v)
    if "W_O" in w:
        out = out @ w["W_O"]
    return {"mask": mask_add, "softmax": weights, "output": out}


# ---- PyTorch's boolean masks: True = blocked (--mask-bool block) ----------


def torch_mha_convention(x, w, heads, attn_mask=None, key_padding_mask=None):
    """nn.MultiheadAttention's forward as its documentation states it, written
    apart from reference() and batch_reference(): x (B, n, E), weights applied
    as x @ W + b; attn_mask (n, n) and key_padding_mask (B, n) booleans where
    True means the position is *not* allowed to attend (masked_fill with
    -inf before the softmax).  Returns the weights (B, H, n, n) and the
    output (B, n, E)."""
    B, n, E = x.shape
    d = E // heads
    q = (x @ w["W_Q"] + w["b_Q"]).reshape(B, n, heads, d).transpose(0, 2, 1, 3)
    k = (x @ w["W_K"] + w["b_K"]).reshape(B, n, heads, d).transpose(0, 2, 1, 3)
    v = (x @ w["W_V"] + w["b_V"]).reshape(B, n, heads, d).transpose(0, 2, 1, 3)
    out = np.zeros((B, n, E))
    weights = np.zeros((B, heads, n, n))
    for b in range(B):
        for h in range(heads):
            s = (q[b, h] / math.sqrt(d)) @ k[b, h].T
            blocked = np.zeros((n, n), dtype=bool)
            if attn_mask is not None:
                blocked |= attn_mask
            if key_padding_mask is not None:
                blocked |= key_padding_mask[b][None, :]
            s = np.where(blocked, -np.inf, s)
            e = np.exp(s - s.max(axis=1, keepdims=True))
            a = e / e.sum(axis=1, keepdims=True)
            weights[b, h] = a
            out[b, :, h * d:(h + 1) * d] = a @ v[b, h]
    return weights, out @ w["W_O"] + w["b_O"]

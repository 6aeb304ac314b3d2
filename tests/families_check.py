#!/usr/bin/python3
"""families_check.py MHA_BINARY: every model family mha reads, exact or refused.

For each family (Llama 2, Llama with biases, Mistral, Mistral NeMo, Mixtral,
Qwen2, Qwen3, Qwen3-MoE, Gemma, Gemma 2, Gemma 3, Granite, Cohere Command R
and R+, SmolLM3, OLMo, OLMo 2, Phi-3, Phi-4-mini, Pythia, Falcon in its
three layouts, StarCoder and GPT-BigCode, ModernBERT, Arcee, Apertus, StarCoder2,
Phi-2, StableLM 2, GPT-J, OPT, InternLM2, GLM-4.5, Nemotron, EXAONE 4, ERNIE 4.5, GPT-2, BERT, RoBERTa,
and the text models of LLaVA, Mistral 3 and Gemma 3) a tiny checkpoint is
written as
the family publishes it: its tensor names, the dtype it ships in, a
config.json with the family's real keys (those outside the attention too),
and the tensors around the attention (embeddings, norms, MLPs, an
image-text model's vision tower).  One layer's attention is then computed
by mha and by a reference transcribed from the family's Hugging Face
modeling code (families_ref.py): the settings each family's attention
takes from its config (scaling, softcap, sliding window by layer, rotary
style and base by layer kind, layers without rotation, biases, the q/k
norm, a fused projection's split, transformers' default heads) in
hf_settings(), and the attention itself in NumPy (decoder_attention) and,
when torch can be imported, again in PyTorch (torch_attention), the two
checked against each other.  The families themselves, their configs as
published, are families.py's.  mha must agree to

    |a - b| <= 1e-12 * max(1, |b|)

for a sliding and a global layer where the family has both, a layer
without rotation where it has one, and a batch with a padding mask
(--kv-len).  The stored values are exact in float64, so the reference
uses them as they are.

Then what mha must refuse, each with exit 1 and one line naming it: a key
planted in each family's config (a copy with one more attention key), a
tensor planted in each family's attention module, biases the family's
code would not add (or would, and are missing), the model types whose
attention mha does not compute yet, an unknown model_type (under --layout
llama refused until every setting families differ in is stated, then held
to llama's keys), a family that --layout contradicts,
a checkpoint that does not say its heads, a rotary_emb.inv_freq that is not
config.json's rotation, a layer-dependent setting without --layer.

Then each family's config as transformers 5 saves it (rope_parameters,
tests/transformers5.py) against the same references, and what mixes the
old keys with the new; each attention key left out in turn (its class's
default); Helium and an Apertus-like model under --layout, refused until
every setting families differ in is stated, then exact, each piece of
advice followed; the none values of --softcap, --window, --sinks and
--rope-scaling over a config's.  Every run on a checkpoint's layer is
repeated by 'mha model', which must give the same verdict (Checker's
same_verdict).

Prints one line per case and "N passed, N failed"; exit status 1 if any
failed.
"""

import copy
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_check as ck  # noqa: E402  (runs, Checker)
import checkpoints as cf  # noqa: E402  (safetensors writing, a model folder)
from families import ALIASES, CLASS_DEFAULTS, FAMILIES, cfg  # noqa: E402  (as they publish themselves)
from families_ref import (decoder_attention, hf_settings, split_qkv,  # noqa: E402
                          torch_attention)
from transformers5 import saved_by_5  # noqa: E402  (the same config, as transformers 5 saves it)

RTOL = 1e-12
SEED = 20261127
N = 6  # tokens


# ---- checkpoints -------------------------------------------------------------


# a fused family's names: the layer's module, the fused and output
# projections, and the tensors around them
FUSED_NAMES = {
    "phi3": ("model.layers.%d.self_attn.", "qkv_proj", "o_proj",
             ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"),
             ("input_layernorm.weight", "mlp.gate_up_proj.weight", "mlp.down_proj.weight")),
    "gpt_neox": ("gpt_neox.layers.%d.attention.", "query_key_value", "dense",
                 ("gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm.weight",
                  "embed_out.weight"),
                 ("input_layernorm.weight", "input_layernorm.bias", "mlp.dense_h_to_4h.weight",
                  "mlp.dense_4h_to_h.weight")),
    "falcon": ("transformer.h.%d.self_attention.", "query_key_value", "dense",
               ("transformer.word_embeddings.weight", "transformer.ln_f.weight",
                "lm_head.weight"),
               ("input_layernorm.weight", "mlp.dense_h_to_4h.weight", "mlp.dense_4h_to_h.weight")),
    "internlm2": ("model.layers.%d.attention.", "wqkv", "wo",
                  ("model.tok_embeddings.weight", "model.norm.weight", "output.weight"),
                  ("attention_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight")),
    "modernbert": ("model.layers.%d.attn.", "Wqkv", "Wo",
                   ("model.embeddings.tok_embeddings.weight", "model.embeddings.norm.weight",
                    "model.final_norm.weight"),
                   ("mlp_norm.weight", "mlp.Wi.weight", "mlp.Wo.weight")),
    "gpt_bigcode": ("transformer.h.%d.attn.", "c_attn", "c_proj",
                    ("transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"),
                    ("ln_1.weight", "ln_1.bias", "mlp.c_fc.weight", "mlp.c_proj.weight")),
}


def fused_checkpoint(rng, f):
    """a fused family's tensors: its Q, K and V in one (rows, D) tensor laid
    out as f["fused"] says (the reference splits it as the modeling code
    does), the output projection, biases where f["bias"] says, and what
    lies around them (embeddings, norms, MLP, which mha never reads)"""
    D, H, G, hd, dt = f["D"], f["H"], f["G"], f["hd"], f["dtype"]
    mod, fused, out, top, around = FUSED_NAMES[f["type"]]
    t, params = {}, []
    for name in top:
        t[name] = cf.Tensor(rng.standard_normal((11, D)) if "embed" in name or "wte" in
                            name or "wpe" in name or "head" in name or "embed_out" in name
                            else np.ones(D), dt)
    for n in range(f["layers"]):
        a = mod % n
        qkv = cf.Tensor(rng.standard_normal(((H + 2 * G) * hd, D)) * 0.5, dt)
        o = cf.Tensor(rng.standard_normal((D, H * hd)) * 0.5, dt)
        t[a + fused + ".weight"], t[a + out + ".weight"] = qkv, o
        p = {"qkv": qkv.value, "o": o.value}
        if "q" in f.get("bias", ""):
            b = cf.Tensor(rng.standard_normal((H + 2 * G) * hd) * 0.3, dt)
            t[a + fused + ".bias"] = b
            p["bqkv"] = b.value
        if "o" in f.get("bias", ""):
            b = cf.Tensor(rng.standard_normal(D) * 0.3, dt)
            t[a + out + ".bias"] = b
            p["bo"] = b.value
        layer = a.rsplit(".", 2)[0] + "."
        for name in around:
            t[layer + name] = cf.Tensor(np.ones(D) if name.endswith(("norm.weight", "bias",
                                                                       "ln_1.weight"))
                                        else rng.standard_normal((2 * D, D)), dt)
        params.append(p)
    return t, params


def attn_module(f, n):
    """layer n's attention module, with its dot: model.layers.N.self_attn.,
    or where the family keeps it (f["module"]: GPT-J's transformer.h.N.attn.)"""
    return f.get("module", f.get("prefix", "model.") + "layers.%d.self_attn.") % n


def proj(f, c):
    """the projection c's name (q, k, v, o): q_proj ... o_proj, or the family's
    (f["proj"]: Phi's dense, GPT-J's out_proj)"""
    return f.get("proj", {}).get(c, c + "_proj")


def decoder_checkpoint(rng, f):
    """the family's tensors: per layer its attention (weights and the biases
    f["bias"] names), norms and MLP (or experts), and the model's
    embeddings; an image-text model's vision tower beside its text model"""
    if f.get("fused"):
        return fused_checkpoint(rng, f)
    D, H, G, hd, dt = f["D"], f["H"], f["G"], f["hd"], f["dtype"]
    pre = f.get("prefix", "model.")
    sc = f.get("weight_scale", 0.5)
    t, params = {}, []
    t[pre + "embed_tokens.weight"] = cf.Tensor(rng.standard_normal((11, D)), dt)
    t[pre + "norm.weight"] = cf.Tensor(np.ones(D), dt)
    head = "language_model.lm_head.weight" if pre.startswith("language_model") else \
        "lm_head.weight"
    t[head] = cf.Tensor(rng.standard_normal((11, D)), dt)
    for n in range(f["layers"]):
        a = "%slayers.%d." % (pre, n)
        m = attn_module(f, n)
        p = {}
        for c, rows, cols in (("q", H * hd, D), ("k", G * hd, D), ("v", G * hd, D),
                              ("o", D, H * hd)):
            w = cf.Tensor(rng.standard_normal((rows, cols)) * sc, dt)
            t[m + proj(f, c) + ".weight"] = w
            p[c] = w.value
            if c in f.get("bias", ""):
                b = cf.Tensor(rng.standard_normal(rows) * 0.3, dt)
                t[m + proj(f, c) + ".bias"] = b
                p["b" + c] = b.value
        if f.get("sinks"):
            sk = cf.Tensor(rng.standard_normal(H), dt)
            t[m + "sinks"] = sk
            p["sinks"] = sk.value
        if f.get("qk_norm"):
            # Qwen3's (head_dim), OLMo 2's (heads*head_dim), Cohere's (heads, head_dim)
            lay = f["qk_norm"]
            for side, heads in (("q", H), ("k", G)):
                shape = (hd,) if lay == "head" else (heads * hd,) if lay == "all" else (heads, hd)
                w = cf.Tensor(rng.standard_normal(shape) * 0.3 + 1, dt)
                t[m + "%s_norm.weight" % side] = w
                p[side + "n"] = w.value
        t[a + "input_layernorm.weight"] = cf.Tensor(np.ones(D), dt)
        t[a + "post_attention_layernorm.weight"] = cf.Tensor(np.ones(D), dt)
        if f.get("moe"):
            t[a + "block_sparse_moe.gate.weight"] = cf.Tensor(rng.standard_normal((2, D)), dt)
            for e in range(2):
                t[a + "block_sparse_moe.experts.%d.w1.weight" % e] = \
                    cf.Tensor(rng.standard_normal((2 * D, D)), dt)
        else:
            t[a + "mlp.gate_proj.weight"] = cf.Tensor(rng.standard_normal((2 * D, D)), dt)
            t[a + "mlp.down_proj.weight"] = cf.Tensor(rng.standard_normal((D, 2 * D)), dt)
        params.append(p)
    if f.get("vision"):
        # a vision tower whose attention modules also match *.layers.N.self_attn
        v = "vision_tower." if pre.startswith("language_model") else "model.vision_tower."
        for n in range(2):
            for c in ("q", "k", "v"):
                t["%svision_model.encoder.layers.%d.self_attn.%s_proj.weight" % (v, n, c)] = \
                    cf.Tensor(rng.standard_normal((8, 8)), dt)
            t["%svision_model.encoder.layers.%d.self_attn.o_proj.weight" % (v, n)] = \
                cf.Tensor(rng.standard_normal((8, 8)), dt)
        t["multi_modal_projector.linear_1.weight"] = cf.Tensor(rng.standard_normal((D, 8)), dt)
    return t, params


# ---- the cases ---------------------------------------------------------------


def family_cases(c, rng, torch):
    worst_pair = 0.0
    for f in FAMILIES:
        tensors, params = decoder_checkpoint(rng, f)
        config = f["config"](f)
        d = cf.folder(c.tmp, "fam-%s-%s" % (f["type"], len(os.listdir(c.tmp))), tensors, config)
        f["dir"], f["tensors"], f["cfg"], f["params"] = d, tensors, config, params
        x = rng.standard_normal((N, f["D"]))
        xp = os.path.join(d, "x.npy")
        np.save(xp, x)
        for layer in f["runs"]:
            s = hf_settings(f, config, layer, N)
            want = decoder_attention(x, params[layer], s)
            if torch is not None:
                other = torch_attention(torch, x, params[layer], s)
                worst_pair = max(worst_pair, np.max(np.abs(other - want) /
                                                    np.maximum(1, np.abs(want))))
            if f.get("scaling"):
                # the scaling changes the numbers: the test could fail
                plain = dict(s, af=1.0, inv=1.0 / (s["theta"] ** (np.arange(0, s["R"], 2) /
                                                                  s["R"])))
                moved = np.max(np.abs(decoder_attention(x, params[layer], plain) - want))
                c.result("%s: the scaling moves the output (%.2g)" % (f["name"], moved),
                         moved > 1e-6)
            what = ", ".join(k for k in ("window", "softcap", "norm") if s.get(k))
            what += (", " if what else "") + ("no rotation" if not s["rope"] else s["rope"])
            c.output("%s (%s): layer %d (%s)" % (f["name"], f["dtype"], layer, what),
                     ["-x", xp, "-w", d, "--layer", str(layer)], want)
            check_model(c, f, d, layer, s, params[layer])
        # a batch of two, the second padded after 4 tokens (--kv-len)
        layer = f["runs"][0]
        s = hf_settings(f, config, layer, N)
        xb = rng.standard_normal((2, N, f["D"]))
        xbp = os.path.join(d, "xb.npy")
        np.save(xbp, xb)
        want = np.stack([decoder_attention(xb[0], params[layer], s),
                         decoder_attention(xb[1], params[layer], s, kv_len=4)])
        c.output("%s: layer %d, a batch padded by --kv-len 6,4" % (f["name"], layer),
                 ["-x", xbp, "-w", d, "--layer", str(layer), "--kv-len", "6,4"], want)
    if torch is None:
        c.result("PyTorch transcriptions: skipped (torch cannot be imported)", True)
    else:
        c.result("the NumPy references against their PyTorch transcriptions: %.2g" % worst_pair,
                 worst_pair <= 1e-13)
    return FAMILIES


# keys whose value decides which tensors the module has: a default that
# differs leaves the checkpoint's tensors unexplained, and mha refuses
TENSOR_KEYS = ("attention_bias", "bias", "use_qk_norm", "use_bias", "enable_bias",
               "use_qkv_bias")


def default_cases(c):
    """Each attention key a family's config.json gives, left out in turn: mha
    takes the configuration class's default (families.py's CLASS_DEFAULTS),
    as the reference computes it from the config completed with those
    defaults, or, where the default does not fit the checkpoint (its shapes,
    its tensors), refuses naming the key as its class's default."""
    for f in FAMILIES:
        t = f.get("text", f["type"])
        defaults = CLASS_DEFAULTS.get(t)
        if defaults is None:
            c.result("%s: the class defaults of model_type %s are known" % (f["name"], t), False)
            continue
        wrapped = "text_config" in f["cfg"]
        inner = f["cfg"]["text_config"] if wrapped else f["cfg"]
        layer = f["runs"][0]
        x = np.load(os.path.join(f["dir"], "x.npy"))
        for key in sorted(k for k in inner if k in defaults and ALIASES.get(k) not in inner):
            trimmed = {k: v for k, v in inner.items() if k != key}
            ref = dict(trimmed, **{key: copy.deepcopy(defaults[key])})
            if ref[key] is None:
                del ref[key]
            whole = dict(f["cfg"], text_config=trimmed) if wrapped else trimmed
            hidden = ref.get("hidden_size", ref.get("n_embd"))
            try:
                s = hf_settings(f, dict(f["cfg"], text_config=ref) if wrapped else ref, layer, N)
                fits = (s["H"], s["G"], s["hd"], hidden) == (f["H"], f["G"], f["hd"], f["D"])
            except (ZeroDivisionError, ValueError):  # heads wider than hidden_size, or
                fits = False                          # LongRoPE's factors of other dims
            fits = fits and (key not in TENSOR_KEYS or defaults[key] == inner[key])
            sc = ref.get("rope_scaling") or {}
            if key == "max_position_embeddings" and sc.get("rope_type", sc.get("type")) == "yarn" \
                    and \
                    "original_max_position_embeddings" in sc and \
                    ref[key] / sc["original_max_position_embeddings"] != sc["factor"]:
                fits = False  # transformers' versions take YaRN's factor from either
            try:
                want = fits and decoder_attention(x, f["params"][layer], s)
            except ValueError:  # a rotary dim the heads do not split: no model
                fits = False
            d = cf.folder(c.tmp, "dflt-%d" % len(os.listdir(c.tmp)), f["tensors"], whole)
            args = ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer", str(layer)]
            name = "%s without %s: its class's %s" % (f["name"], key, json.dumps(defaults[key]))
            if fits:
                c.output(name, args, want)
            else:
                c.refused(name + ", which does not fit the checkpoint", args,
                          [key] if key in TENSOR_KEYS or defaults[key] is None else
                          [key, "(left out: model_type %s's default)" % t])


# the keys transformers 5 folds into rope_parameters: a family with any of
# them turns, and its config has a transformers 5 form
ROPE_KEYS = ("rope_theta", "rotary_emb_base", "global_rope_theta")


def v5_cases(c):
    """Each family that turns, its config saved as transformers 5 saves it
    (rope_parameters, one dict or one per layer type; transformers5.py):
    the same numbers as the transformers 4 config, every layer it runs."""
    for f in FAMILIES:
        t = f.get("text", f["type"])
        if not any(k in CLASS_DEFAULTS.get(t, {}) for k in ROPE_KEYS):
            continue
        wrapped = "text_config" in f["cfg"]
        inner = f["cfg"]["text_config"] if wrapped else f["cfg"]
        new = saved_by_5(inner, t, CLASS_DEFAULTS[t])
        whole = dict(f["cfg"], text_config=new, transformers_version="5.15.0") if wrapped \
            else new
        d = cf.folder(c.tmp, "v5-%d" % len(os.listdir(c.tmp)), f["tensors"], whole)
        x = np.load(os.path.join(f["dir"], "x.npy"))
        for layer in f["runs"]:
            s = hf_settings(f, f["cfg"], layer, N)
            c.output("%s, saved by transformers 5 (rope_parameters %s): layer %d"
                     % (f["name"], json.dumps(new["rope_parameters"])[:60], layer),
                     ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer", str(layer)],
                     decoder_attention(x, f["params"][layer], s))
        rc, out, err = ck.run_cmd(c.binary, ["model", d, "--layer", str(f["runs"][0]), "-f",
                                             "json"])
        keys = json.loads(out)["layers"][0]["config_keys"] if rc == 0 else []
        c.result("%s, saved by transformers 5: mha model reads rope_parameters" % f["name"],
                 "rope_parameters" in keys, err or repr(keys))
    # YaRN with no original_max_position_embeddings: transformers 5 writes
    # max_position_embeddings there and keeps the factor said (4, not 1)
    f = next(f for f in FAMILIES if f["name"] == "Qwen2.5 (rope_scaling yarn)")
    old = dict(f["cfg"], rope_scaling={"factor": 4.0, "type": "yarn"})
    new = saved_by_5(old, "qwen2", CLASS_DEFAULTS["qwen2"])
    layer = f["runs"][0]
    x = np.load(os.path.join(f["dir"], "x.npy"))
    want = decoder_attention(x, f["params"][layer], hf_settings(f, old, layer, N))
    for cfg, said in ((old, "transformers 4"), (new, "transformers 5")):
        c.output("YaRN factor 4 without original_max_position_embeddings, saved by " + said,
                 planted(c, f, "", config=cfg), want)


def v5_refusals(c):
    """rope_parameters beside the keys it replaced, or in a form the type
    does not take: refused, naming both keys (transformers 4 and 5 would
    read different things)"""
    llama = next(f for f in FAMILIES if f["name"].startswith("Llama 3.1 (rope_scaling"))
    gemma = by_type("gemma3_text")
    v5l = saved_by_5(llama["cfg"], "llama", CLASS_DEFAULTS["llama"])
    v5g = saved_by_5(gemma["cfg"], "gemma3_text", CLASS_DEFAULTS["gemma3_text"])
    x = np.load(os.path.join(llama["dir"], "x.npy"))
    layer = llama["runs"][0]
    s = hf_settings(llama, llama["cfg"], layer, N)
    want = decoder_attention(x, llama["params"][layer], s)
    rp = v5l["rope_parameters"]
    c.output("Llama 3.1 saved by transformers 5 with the old keys beside, saying the same",
             planted(c, llama, "", config=dict(v5l, rope_theta=500000,
                                               rope_scaling={k: v for k, v in rp.items()
                                                             if k != "rope_theta"})), want)
    for name, cfg, words in (
            ("rope_theta beside rope_parameters, another base",
             dict(v5l, rope_theta=10000.0), ["rope_parameters", "500000", "rope_theta", "10000"]),
            ("rope_scaling beside rope_parameters, another factor",
             dict(v5l, rope_scaling=dict(rp, factor=4.0)), ["rope_parameters", "rope_scaling"]),
            ("rope_scaling beside a \"default\" rope_parameters",
             dict(v5l, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                  rope_scaling=rp), ["rope_parameters", "default", "rope_scaling"]),
            ("rope_parameters \"default\" with a factor",
             dict(v5l, rope_parameters={"rope_type": "default", "rope_theta": 500000.0,
                                        "factor": 8.0}), ["rope_parameters", "factor"]),
            ("rope_parameters of a rope_type mha does not compute",
             dict(v5l, rope_parameters=dict(rp, rope_type="proportional")),
             ["rope_parameters", "proportional"]),
            ("rope_parameters per layer type for a type whose layers turn alike",
             dict(v5l, rope_parameters={"full_attention": rp}),
             ["rope_parameters", "per layer type", "llama"]),
            ("rope_parameters not an object", dict(v5l, rope_parameters=[1]),
             ["rope_parameters", "not an object"]),
            ("rope_parameters' rope_theta not a number",
             dict(v5l, rope_parameters=dict(rp, rope_theta="big")), ["rope_theta"]),
            ("a partial_rotary_factor Llama's class does not have",
             dict(v5l, rope_parameters=dict(rp, partial_rotary_factor=0.5)),
             ["partial_rotary_factor", "llama"])):
        c.refused("Llama 3.1 saved by transformers 5: " + name,
                  planted(c, llama, "", config=cfg), words)
    grp = v5g["rope_parameters"]
    for name, cfg, words in (
            ("one dict for the layers of both kinds",
             dict(v5g, rope_parameters=grp["full_attention"]),
             ["rope_parameters", "gemma3_text", "full_attention, sliding_attention"]),
            ("a layer type Gemma 3 does not have",
             dict(v5g, rope_parameters=dict(grp, chunked_attention=grp["full_attention"])),
             ["rope_parameters.chunked_attention"]),
            ("its sliding layers scaled",
             dict(v5g, rope_parameters=dict(grp, sliding_attention=dict(
                 grp["sliding_attention"], rope_type="linear", factor=2.0))),
             ["rope_parameters.sliding_attention", "linear"]),
            ("rope_local_base_freq beside it, another base",
             dict(v5g, rope_local_base_freq=123.0),
             ["rope_parameters.sliding_attention", "rope_local_base_freq", "123"])):
        c.refused("Gemma 3 saved by transformers 5: " + name, planted(c, gemma, "", config=cfg),
                  words)


def resolve_cases(c):
    """Layers whose config mha model once described and a run refused (one
    resolved layer now: c.refused runs mha model on each as well, which must
    refuse it in the same words)"""
    phi = by_type("phi3")
    sc = dict(phi["cfg"]["rope_scaling"])
    n = len(sc["short_factor"])
    c.refused("Phi-3: LongRoPE's factor lists one pair short",
              planted(c, phi, "", config=dict(phi["cfg"], rope_scaling=dict(
                  sc, short_factor=sc["short_factor"][:n - 1],
                  long_factor=sc["long_factor"][:n - 1]))),
              ["short_factor", "long_factor", "%d entr" % (n - 1)])
    llama = by_type("llama")
    c.refused("Llama 2: num_attention_heads 2^40",
              planted(c, llama, "", config=dict(llama["cfg"], num_attention_heads=2 ** 40,
                                                num_key_value_heads=2 ** 40)),
              ["num_attention_heads", str(2 ** 40)])
    c.refused("Llama 2: head_dim 0 wide",
              planted(c, llama, "", config=dict(llama["cfg"], head_dim=0)), ["head_dim"])


# every setting families differ in, stated: what a model_type mha does not
# read needs beside --layout
STATED = ["--rope-scaling", "none", "--scale", "dk", "--softcap", "none", "--window", "none",
          "--sinks", "none", "--biases", "none"]


def layout_cases(c):
    """A model_type mha does not read: refused, and never read under
    --layout until every setting families differ in is given; then exact.
    Helium (Llama's names and keys; its pairs (2i, 2i + 1)) and an
    Apertus-like model (Llama's names, a q/k RMSNorm per head).  Each piece
    of advice the refusals give is followed here."""
    f = by_type("llama")
    layer = f["runs"][0]
    helium = {k: v for k, v in f["cfg"].items() if k not in ("pretraining_tp", "rope_scaling")}
    helium.update(model_type="helium", architectures=["HeliumForCausalLM"])
    args = planted(c, f, "", config=helium)
    d = args[args.index("-w") + 1]
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = dict(hf_settings(f, f["cfg"], layer, N), rope="interleaved")
    want = decoder_attention(x, f["params"][layer], s)
    rc, _, err = ck.run(c.binary, args)
    c.result("Helium: an unknown model_type refused, no layout proposed that would guess",
             rc == 1 and "helium" in err and "llama, mistral" in err and
             "--layout llama" not in err and "every setting" in err, err)
    layout = args + ["--layout", "llama"]
    c.refused("Helium under --layout llama alone: refused naming every setting",
              layout, ["helium", "--rope,", "--rope-dim", "--rope-theta", "--rope-scaling",
                       "--scale", "--softcap", "--norm,", "--window", "--sinks", "--biases"])
    c.refused("Helium under --layout llama --rope interleaved: the rest named",
              layout + ["--rope", "interleaved"], ["--rope-dim", "--biases"])
    full = layout + ["--rope", "interleaved", "--rope-dim", "4", "--rope-theta", "10000",
                     "--norm", "none"] + STATED
    c.output("Helium under --layout llama, every setting stated (its pairs 2i, 2i + 1)",
             full, want)
    # under Llama's rule the numbers differ: the statement matters
    half = decoder_attention(x, f["params"][layer], dict(s, rope="half"))
    c.result("Helium: its pairs move the output (%.2g)" % np.max(np.abs(half - want)),
             np.max(np.abs(half - want)) > 1e-3)
    rc, out, err = ck.run_cmd(c.binary, ["model", d, "--layer", str(layer), "-f", "json",
                                         "--layout", "llama"] + full[full.index("--rope"):])
    m = json.loads(out)["layers"][0] if rc == 0 else {}
    c.result("Helium: mha model says model_type helium and what was stated",
             m.get("model_type") == "helium" and m.get("family") == "llama" and
             m["rope"]["mode"] == "interleaved" and
             set(m["stated"]) >= {"--rope", "--rope-dim", "--rope-theta", "--rope-scaling",
                                  "--scale", "--softcap", "--norm", "--window", "--sinks",
                                  "--biases"}, err or json.dumps(m)[:300])
    rc, out, err = ck.run_cmd(c.binary, ["model", d, "--layer", str(layer), "--layout", "llama"] +
                              full[full.index("--rope"):])
    c.result("Helium: mha model's text names model_type helium read as --layout llama",
             rc == 0 and "model_type helium, read as --layout llama" in out and
             "stated: --rope" in out, err or out[:300])
    # a bias the statement leaves out, or one it names that is missing
    c.refused("Helium: --biases q with no q_proj.bias",
              full[:-1] + ["q"], ["q_proj.bias", "--biases"])

    # Apertus-like (a model_type of its own mha does not read; Apertus itself
    # it does): Llama's names with q_norm and k_norm (Qwen3's tensors)
    q = by_type("qwen3")
    layer = q["runs"][0]
    apertus = cfg("ApertusLikeForCausalLM", "apertus_like", q["D"], q["H"], q["G"], q["layers"],
                  q["dtype"], head_dim=q["hd"], rope_theta=q["cfg"]["rope_theta"],
                  rms_norm_eps=1e-06)
    args = planted(c, q, "", config=apertus) + ["--layout", "llama"]
    x = np.load(os.path.join(q["dir"], "x.npy"))
    want = decoder_attention(x, q["params"][layer], hf_settings(q, q["cfg"], layer, N))
    stated = ["--rope", "half", "--rope-dim", str(q["hd"]), "--rope-theta",
              str(q["cfg"]["rope_theta"])] + STATED
    rc, _, err = ck.run(c.binary, args + stated + ["--norm", "none"])
    c.result("Apertus-like: its q_norm refused with --norm none, the advice names --norm",
             rc == 1 and "_norm.weight" in err and "--norm with its kind" in err, err)
    c.refused("Apertus-like: --norm rms alone, its eps and rule named",
              args + stated + ["--norm", "rms"], ["--norm-eps", "--norm-over"])
    c.output("Apertus-like under --layout llama, --norm rms, its eps and rule stated",
             args + stated + ["--norm", "rms", "--norm-eps", "1e-6", "--norm-over", "head"],
             want)


def none_cases(c):
    """--softcap none, --window none, --sinks none and --rope-scaling none
    over what a family's config sets: the numbers without it"""
    def case(f, what, opt, change, params=None):
        layer = f["runs"][-1]
        x = np.load(os.path.join(f["dir"], "x.npy"))
        s = hf_settings(f, f["cfg"], layer, N)
        p = f["params"][layer]
        want = decoder_attention(x, p, change(dict(s)))
        moved = np.max(np.abs(want - decoder_attention(x, p, s)))
        c.result("%s: %s changes the output (%.2g)" % (f["name"], what, moved), moved > 1e-6)
        c.output("%s, %s none: without it" % (f["name"], opt),
                 ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", str(layer),
                  opt, "none"], decoder_attention(x, params(p) if params else p,
                                                  change(dict(s))))
    case(next(f for f in FAMILIES if f["type"] == "gemma2"), "its softcap", "--softcap",
         lambda s: dict(s, softcap=None))
    case(next(f for f in FAMILIES if f["name"] == "Mistral 7B"), "its window", "--window",
         lambda s: dict(s, window=None))
    case(next(f for f in FAMILIES if f["name"].startswith("Llama 3.1 (rope_scaling")),
         "its scaling", "--rope-scaling",
         lambda s: dict(s, af=1.0, inv=1.0 / (s["theta"] ** (np.arange(0, s["R"], 2) / s["R"]))))
    # SmolLM3 with use_sliding_window and no layer_types: refused, and each way
    # its advice offers followed (a window said, or none)
    f = by_type("smollm3")
    layer = f["runs"][0]
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], layer, N)
    conf = {k: v for k, v in f["cfg"].items() if k != "layer_types"}
    conf.update(use_sliding_window=True, sliding_window=3)
    args = planted(c, f, "", config=conf)
    c.refused("SmolLM3: use_sliding_window without layer_types", args,
              ["layer_types", "--window", "--window none"])
    c.output("SmolLM3: the advice followed, --window none", args + ["--window", "none"],
             decoder_attention(x, f["params"][layer], s))
    c.output("SmolLM3: the advice followed, --window 2 (sliding_window 3)",
             args + ["--window", "2"], decoder_attention(x, f["params"][layer],
                                                         dict(s, window=3)))
    f = by_type("gpt_oss")
    layer = f["runs"][-1]
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], layer, N)
    bare = {k: v for k, v in f["params"][layer].items() if k != "sinks"}
    c.output("%s, --sinks none: without them" % f["name"],
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", str(layer),
              "--sinks", "none"], decoder_attention(x, bare, s))


def published_key_cases(c):
    """Keys published configs carry that their class keeps and their
    attention never reads: accepted, the numbers unchanged."""
    for t, key, value, what in (("phi3", "full_attn_mod", 1, "Phi-4-mini"),
                                ("falcon", "ff_factor", 5, "Falcon 2 11B"),
                                ("gpt_bigcode", "inference_runner", 0, "StarCoder"),
                                ("gpt_bigcode", "pre_allocate_kv_cache", False, "StarCoder"),
                                ("gpt_bigcode", "summary_type", "cls_index", "StarCoder")):
        f = by_type(t)
        layer = f["runs"][0]
        s = hf_settings(f, f["cfg"], layer, N)
        x = np.load(os.path.join(f["dir"], "x.npy"))
        c.output("%s's %s: known to leave the attention alone" % (what, key),
                 planted(c, f, key, config=dict(f["cfg"], **{key: value})),
                 decoder_attention(x, f["params"][layer], s))


def check_model(c, f, d, layer, s, p):
    """'mha model DIR --layer N -f json' says what the family's code does, and
    its -o FILE.npz holds the layer's tensors as -w takes them (p: the
    checkpoint's own, out x in)"""
    t = os.path.join(c.tmp, "layer-tensors.npz")
    rc, out, err = ck.run_cmd(c.binary, ["model", d, "--layer", str(layer), "-f", "json", "-o", t])
    if rc != 0:
        c.result("%s: mha model --layer %d" % (f["name"], layer), False, err)
        return
    m = json.loads(out)["layers"][0]
    want_window = None
    if s["window"]:
        want_window = [s["window"] - 1, -1]
    if s.get("both"):
        want_window = [s["both"], s["both"]]
    got = (m["heads"], m["kv_heads"], m["d_k"], m["window"], m["rope"] and m["rope"]["mode"],
           m["norm"] and m["norm"]["kind"], m["softcap"], m["causal"] != "none")
    want = (s["H"], s["G"], s["hd"], want_window, s["rope"], s.get("norm") and s["norm"][0],
            s["softcap"], s.get("causal", True))
    ok = got == want and abs(m["scale"]["value"] - s["scaling"]) <= 1e-15 * s["scaling"] and \
        (not s["rope"] or m["rope"]["theta"] == s["theta"])
    c.result("%s: mha model --layer %d says it as the family's code does" % (f["name"], layer),
             ok, "got %r, want %r" % (got + (m["scale"]["value"], m["rope"]),
                                      want + (s["scaling"], s["theta"])))
    names = {"q": "W_Q", "k": "W_K", "v": "W_V", "o": "W_O", "bq": "b_Q", "bk": "b_K", "bv": "b_V",
             "bo": "b_O", "sinks": "sinks", "qn": "q_norm", "kn": "k_norm"}
    p = dict(p)
    if "qkv" in p:
        # one fused projection: split as the modeling code splits its output
        p["q"], p["k"], p["v"] = (w.T for w in split_qkv(p.pop("qkv").T, s))
        if "bqkv" in p:
            p["bq"], p["bk"], p["bv"] = (b[0] for b in split_qkv(p.pop("bqkv")[None, :], s))
    want_t = {names[k]: (v.T if k in "qkvo" else v) for k, v in p.items()}
    with np.load(t) as z:
        got_t = {k: z[k] for k in z.files}
    same = set(got_t) == set(want_t) and all(np.array_equal(got_t[k], want_t[k]) for k in want_t)
    c.result("%s: mha model --layer %d -o holds its tensors as -w takes them (%s)"
             % (f["name"], layer, ", ".join(sorted(got_t))), same,
             "got %s, want %s" % ({k: v.shape for k, v in got_t.items()},
                                  {k: v.shape for k, v in want_t.items()}))


def by_type(t):
    return next(f for f in FAMILIES if f["type"] == t)


def planted(c, f, name, config=None, tensors=None, extra=()):
    """f's checkpoint again with config or tensors changed"""
    d = cf.folder(c.tmp, "plant-%d" % len(os.listdir(c.tmp)),
                  tensors if tensors is not None else f["tensors"],
                  config if config is not None else f["cfg"])
    return ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer",
            str(f["runs"][0])] + list(extra)


def refusal_cases(c, rng):
    # a key planted in each family's config: named at its line and column
    keys = {"llama": "attn_logit_softcapping", "mistral": "query_pre_attn_scalar",
            "mixtral": "use_sliding_window", "qwen2": "attention_multiplier",
            "qwen3": "attn_logit_softcapping", "qwen3_moe": "use_qk_norm",
            "olmo2": "clip_qkv", "phi3": "attn_logit_softcapping",
            "gpt_neox": "sliding_window", "falcon": "query_pre_attn_scalar",
            "gpt_bigcode": "rope_theta", "gemma3_text": "attention_multiplier",
            "gemma3": "use_qk_norm", "modernbert": "sliding_window", "glm": "sliding_window",
            "glm4": "use_qk_norm", "cohere2": "use_qk_norm",
            "gemma": "sliding_window", "gemma2": "no_rope_layers", "granite": "use_qk_norm",
            "cohere": "sliding_window", "smollm3": "attn_logit_softcapping",
            "olmo": "layer_types", "llava": "some_new_attention_key", "gpt_oss": "use_qk_norm",
            "mistral3": "attention_multiplier", "arcee": "sliding_window",
            "starcoder2": "attention_bias", "ernie4_5": "sliding_window",
            "exaone4": "attention_bias", "nemotron": "rope_scaling",
            "glm4_moe": "sliding_window", "phi": "sliding_window", "gptj": "rope_theta",
            "opt": "rope_theta", "stablelm": "head_dim", "internlm2": "head_dim",
            "apertus": "sliding_window"}
    seen = set()
    for f in FAMILIES:
        if f["type"] in seen:
            continue
        seen.add(f["type"])
        conf = copy.deepcopy(f["cfg"])
        where = conf.get("text_config", conf) if f["type"] != "llava" else conf
        where[keys[f["type"]]] = 1.0
        c.refused("%s: config.json with %s planted" % (f["name"], keys[f["type"]]),
                  planted(c, f, "key", config=conf),
                  ['unknown key "%s"' % keys[f["type"]], "config.json:"])
        # a tensor planted in the layer's attention module
        t = dict(f["tensors"])
        name = attn_module(f, f["runs"][0]) + "gate.weight"
        if f.get("fused"):
            name = FUSED_NAMES[f["type"]][0] % f["runs"][0] + "gate.weight"
        t[name] = cf.Tensor(np.ones(4), "F32")
        c.refused("%s: a tensor planted in the attention module" % f["name"],
                  planted(c, f, "tensor", tensors=t),
                  ['"%s"' % name, "does not know"])
    # settings of these families mha does not compute, or their code cannot run
    for ftype, change, words in (
            ("phi", {"qk_layernorm": True}, ["qk_layernorm", "LayerNorm that has a bias"]),
            ("stablelm", {"qk_layernorm": True}, ["qk_layernorm", "q_layernorm.norms.N"]),
            ("gptj", {"rotary_dim": None}, ["rotary_dim null"]),
            ("gptj", {"rotary_dim": 3}, ["rotary_dim 3", "pairs"]),
            ("gptj", {"rotary_dim": 10}, ["rotary_dim 10", "wider than a head's 8 features"])):
        f = by_type(ftype)
        c.refused("%s: config.json with %s" % (ftype, json.dumps(change)),
                  planted(c, f, "setting", config=dict(f["cfg"], **change)), words)
    # the tensors some families have that mha does not read yet, by name
    f = by_type("llama")
    for suffix, words in (("q_norm.weight", "normalisation"), ("sinks", "attention sinks"),
                          ("qkv_proj.weight", "fused")):
        t = dict(f["tensors"])
        t["model.layers.1.self_attn." + suffix] = cf.Tensor(np.ones(4), "F32")
        c.refused("llama: a planted %s names what it is" % suffix,
                  planted(c, f, suffix, tensors=t), [suffix, words])
    # biases the family's code would not add, or would and are missing
    for ftype, change, words in (
            ("mistral", ("add", "q"), ["q_proj.bias", "mistral's attention adds no such bias"]),
            ("llama", ("drop", "k"), ["k_proj.bias", "attention_bias is true"]),
            ("qwen2", ("add", "o"), ["o_proj.bias", "qwen2's attention adds no such bias"]),
            ("qwen2", ("drop", "v"), ["no tensor", "v_proj.bias"])):
        f = next(g for g in FAMILIES if g["type"] == ftype and
                 (ftype != "llama" or "bias" in g))
        t = dict(f["tensors"])
        name = "model.layers.%d.self_attn.%s_proj.bias" % (f["runs"][0], change[1])
        if change[0] == "add":
            t[name] = cf.Tensor(np.ones(f["D"] if change[1] == "o" else f["H"] * f["hd"]),
                                f["dtype"])
        else:
            del t[name]
        c.refused("%s: %s_proj.bias %s" % (ftype, change[1],
                                           "planted" if change[0] == "add" else "missing"),
                  planted(c, f, "bias", tensors=t), words)
    f = by_type("llama")
    conf = dict(f["cfg"], attention_bias=False)
    t = dict(f["tensors"])
    t["model.layers.1.self_attn.q_proj.bias"] = cf.Tensor(np.ones(16), "F16")
    c.refused("llama: attention_bias false with q_proj.bias there",
              planted(c, f, "bias", config=conf, tensors=t), ["attention_bias is false"])
    # a model type whose attention is another (DeepSeek's latent attention, which
    # tests/mla_check.py reads) over a Llama's tensors: the tensor it needs named
    for mtype in ("deepseek_v3", "deepseek_v2"):
        conf = dict(f["cfg"], model_type=mtype)
        c.refused("model_type %s over Llama's tensors: the latent's tensor named" % mtype,
                  planted(c, f, "type", config=conf), ["deepseek attention",
                                                        "kv_a_proj_with_mqa.weight"])
    # Kimi K2's class ships with it: a key its attention reads, left out, is refused
    conf = dict(f["cfg"], model_type="kimi_k2")
    c.refused("model_type kimi_k2 without q_lora_rank: its class's default unknown",
              planted(c, f, "type", config=conf), ['no "q_lora_rank"', "kimi_k2",
                                                   "ships with its checkpoint"])
    # an image-text model whose text model is DeepSeek's: the text model's tensors looked for
    conf = {"model_type": "llava", "text_config": dict(f["cfg"], model_type="deepseek_v3")}
    c.refused("model_type llava with a deepseek_v3 text model: its tensors looked for",
              planted(c, f, "g3", config=conf), ["text model", "kv_a_proj_with_mqa.weight"])
    # Gemma 3: no head_dim, bidirectional attention; ModernBERT without --layer
    g = by_type("gemma3_text")
    conf = {k: v for k, v in g["cfg"].items() if k != "head_dim"}
    c.refused("gemma3_text without head_dim: Gemma3TextConfig's 256, not the tensors'",
              planted(c, g, "hd", config=conf),
              ["head_dim 256 (left out: model_type gemma3_text's default)", "W_Q"])
    c.refused("gemma3_text: use_bidirectional_attention",
              planted(c, g, "bidi", config=dict(g["cfg"], use_bidirectional_attention=True)),
              ["use_bidirectional_attention"])
    # a fused family's model_type over a llama checkpoint: its fused tensor missing
    conf = {k: v for k, v in f["cfg"].items() if k not in ("attention_bias", "mlp_bias",
                                                            "pretraining_tp")}
    c.refused("model_type phi3 over llama's q_proj, k_proj and v_proj",
              planted(c, f, "phi", config=dict(conf, model_type="phi3")),
              ["no tensor", "qkv_proj.weight"])
    # Falcon: ALiBi, and num_kv_heads where query_key_value is fused head by head
    f = next(g for g in FAMILIES if g["type"] == "falcon")
    c.refused("falcon: alibi true", planted(c, f, "alibi", config=dict(f["cfg"], alibi=True)),
              ["alibi", "does not read"])
    g = next(g for g in FAMILIES if g["name"].startswith("Falcon RW"))
    c.refused("falcon: num_kv_heads 2, fused head by head",
              planted(c, g, "kvh", config=dict(g["cfg"], num_kv_heads=2)),
              ["num_kv_heads 2", "head by head"])
    # a fused tensor whose rows do not fit the heads
    t = dict(f["tensors"])
    name = "transformer.h.1.self_attention.query_key_value.weight"
    t[name] = cf.Tensor(np.ones((25, f["D"])), f["dtype"])
    c.refused("falcon: query_key_value of 25 rows", planted(c, f, "rows", tensors=t),
              [name, "25x16", "rows"])
    f = by_type("llama")
    # an unknown model_type: the list; under --layout llama, llama's keys
    conf = dict(f["cfg"], model_type="mygemma")
    c.refused("an unknown model_type: refused with the types mha reads",
              planted(c, f, "unknown", config=conf), ['"mygemma"', "llama, mistral",
                                                      "--layout FAMILY", "every setting"])
    conf = dict(conf, query_pre_attn_scalar=8)
    # with every setting families differ in stated, as Llama's
    as_llama = ["--layout", "llama", "--rope", "half", "--rope-dim", "4", "--rope-theta",
                "10000", "--norm", "none"] + STATED
    c.refused("an unknown model_type under --layout llama: held to llama's keys",
              planted(c, f, "unknown", config=conf, extra=as_llama),
              ['unknown key "query_pre_attn_scalar"', '"mygemma" read as --layout llama'])
    conf = dict(f["cfg"], model_type="mygemma")
    args = planted(c, f, "unknown", config=conf, extra=as_llama)
    rc, out, err = ck.run(c.binary, args + ["-f", "json"])
    rc2, out2, err2 = ck.run(c.binary, planted(c, f, "known") + ["-f", "json"])
    c.result("an unknown model_type under --layout llama, with llama's keys only: read as llama",
             rc == 0 and rc2 == 0 and json.loads(out)["output"] == json.loads(out2)["output"],
             err + err2)
    c.refused("model_type llama under --layout gpt2: refused",
              planted(c, f, "layout", extra=["--layout", "gpt2"]), ["llama", "--layout gpt2"])
    # no heads said: refused, never one head guessed
    d = cf.folder(c.tmp, "no-heads", f["tensors"])
    c.refused("a checkpoint with no config.json and no --heads",
              ["-x", os.path.join(f["dir"], "x.npy"), "-w", d, "--layer", "1"],
              ["how many heads", "--heads"])
    conf = {k: v for k, v in by_type("mistral")["cfg"].items() if k != "num_attention_heads"}
    c.refused("mistral's config.json without num_attention_heads: MistralConfig's 32",
              planted(c, by_type("mistral"), "heads", config=conf),
              ["num_attention_heads 32 (left out: model_type mistral's default)"])
    # rotary_emb.inv_freq, as older Llama checkpoints kept it: checked
    f = by_type("llama")
    for scale, ok in ((1.0, True), (0.5, False)):
        t = dict(f["tensors"])
        R = f["hd"]
        inv = 1.0 / (10000.0 ** (np.arange(0, R, 2) / R)) * scale
        t["model.layers.1.self_attn.rotary_emb.inv_freq"] = cf.Tensor(inv, "F32")
        args = planted(c, f, "inv", tensors=t)
        if ok:
            rc, out, err = ck.run(c.binary, args + ["-f", "json"])
            rc2, out2, _ = ck.run(c.binary, planted(c, f, "noinv") + ["-f", "json"])
            c.result("rotary_emb.inv_freq as rope_theta gives: read, the same output",
                     rc == 0 and json.loads(out)["output"] == json.loads(out2)["output"], err)
        else:
            c.refused("rotary_emb.inv_freq scaled by one half: refused", args,
                      ["inv_freq", "rope_theta", "not the one config.json describes"])
            # the same halved frequencies where rope_scaling halves them: read
            conf = dict(f["cfg"], rope_scaling={"type": "linear", "factor": 2.0})
            rc, _, err = ck.run(c.binary, planted(c, f, "inv2", config=conf, tensors=t))
            c.result("rotary_emb.inv_freq halved with rope_scaling linear 2: read", rc == 0,
                     err)
    # settings that differ by layer need --layer
    for ftype, words in (("gemma2", "every other layer"), ("smollm3", "give --layer"),
                         ("gemma3_text", "global layer every 2"),
                         ("modernbert", "global layer every 3")):
        f = by_type(ftype)
        args = planted(c, f, "nolayer")
        i = args.index("--layer")
        d = args[args.index("-w") + 1]
        # a checkpoint of one layer's module named whole by --prefix
        c.refused("%s without --layer: refused" % ftype,
                  args[:i] + ["--prefix", "model.layers.%d.self_attn" % f["runs"][0]],
                  [words])
        del d
    # gpt-oss: quantized attention, no layer_types, sinks with --sinks too
    f = by_type("gpt_oss")
    conf = copy.deepcopy(f["cfg"])
    conf["quantization_config"]["modules_to_not_convert"] = ["model.embed_tokens"]
    c.refused("gpt-oss: the attention quantized", planted(c, f, "q", config=conf),
              ["quantization_config", "quantized"])
    sk = os.path.join(c.tmp, "sinks.json")
    with open(sk, "w") as fp:
        json.dump([0.0] * f["H"], fp)
    c.refused("gpt-oss's sinks and --sinks", planted(c, f, "sk", extra=["--sinks", sk]),
              ["leave out --sinks"])
    # the model types whose attention mha does not compute yet: each refused
    # saying what, with --layout too (what it needs is known, not guessed)
    f = by_type("llama")
    for mtype, words in (("llama4", "chunked local attention"),
                         ("llama4_text", "temperature by position"),
                         ("qwen3_next", "output gate"), ("dbrx", "attn_config"),
                         ("t5", "relative position bias"), ("mt5", "buckets"),
                         ("mpt", "ALiBi"), ("bloom", "ALiBi"), ("persimmon", "qk_layernorm"),
                         ("whisper", "encoder-decoder"), ("mpnet", "relative attention bias")):
        conf = dict(f["cfg"], model_type=mtype)
        c.refused("model_type %s: what its attention has, named" % mtype,
                  planted(c, f, "refusedtype", config=conf),
                  ['model_type "%s": its attention has' % mtype, words])
        c.refused("model_type %s under --layout llama: still refused" % mtype,
                  planted(c, f, "refusedtype", config=conf, extra=["--layout", "llama"]),
                  ['model_type "%s": its attention has' % mtype])
    # OLMo's clip_qkv and Cohere's use_qk_norm: what mha does not compute
    f = by_type("olmo")
    c.refused("olmo: clip_qkv 8", planted(c, f, "clip", config=dict(f["cfg"], clip_qkv=8.0)),
              ["clip_qkv"])
    # the q/k norm: its tensors where the type has none, or missing where it has
    f = by_type("cohere")
    c.refused("cohere: use_qk_norm true without q_norm and k_norm",
              planted(c, f, "qkn", config=dict(f["cfg"], use_qk_norm=True)),
              ["no tensor", "q_norm.weight"])
    f = next(g for g in FAMILIES if g["type"] == "cohere" and g.get("qk_norm"))
    c.refused("cohere: q_norm and k_norm with use_qk_norm false",
              planted(c, f, "qkn", config=dict(f["cfg"], use_qk_norm=False)),
              ["_norm.weight", "normalisation"])
    f = by_type("qwen3")
    t = {k: v for k, v in f["tensors"].items() if not k.endswith("layers.1.self_attn.k_norm.weight")}
    c.refused("qwen3: k_norm missing", planted(c, f, "nok", tensors=t),
              ["no tensor", "k_norm.weight"])
    qn = os.path.join(c.tmp, "qn.json")
    with open(qn, "w") as fp:
        json.dump([1.0] * f["hd"], fp)
    c.refused("qwen3: its q_norm and --q-norm", planted(c, f, "qn", extra=["--q-norm", qn,
                                                                          "--k-norm", qn]),
              ["leave out --q-norm"])
    # --norm none over a family that normalises: the layer without its norm
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], 1, N)
    del s["norm"]
    c.output("qwen3: --norm none, the layer without its q/k norm",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "1", "--norm",
              "none"], decoder_attention(x, decoder_params(f, 1), s))
    # --norm-eps over config.json's rms_norm_eps
    s = hf_settings(f, f["cfg"], 1, N)
    s["norm"] = ("rms", "head", 0.5)
    c.output("qwen3: --norm-eps 0.5 over rms_norm_eps",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "1",
              "--norm-eps", "0.5"], decoder_attention(x, decoder_params(f, 1), s))
    # rope_scaling: what transformers would read differently, or not at all
    f = next(g for g in FAMILIES if g["name"].startswith("Llama 3.1 ("))
    for sc, words in (
            ({"rope_type": "su", "factor": 2.0}, ['"su"', "not one mha computes"]),
            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
              "smooth": 1}, ['"smooth"', "does not know"]),
            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0}, ["needs", "original_max_position_embeddings"]),
            ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096},
             ["factor 8", "is 32", "versions"]),
            ({"rope_type": "linear", "factor": -1}, ['"factor" is not a number above 0']),
            ({"factor": 2.0}, ['no "rope_type"'])):
        conf = dict(f["cfg"], rope_scaling=sc)
        c.refused("rope_scaling %s: refused" % json.dumps(sc)[:60],
                  planted(c, f, "sc", config=conf), words)
    # --rope-scaling: the object given inline or in a file, over config.json's
    base = by_type("llama")
    plain = dict(base["cfg"])
    scaled = dict(plain, rope_scaling={"type": "linear", "factor": 2.0})
    x = os.path.join(base["dir"], "x.npy")
    rc, want, err = ck.run(c.binary, planted(c, base, "sc1", config=scaled) + ["-f", "json"])
    obj = json.dumps({"type": "linear", "factor": 2.0})
    path = os.path.join(c.tmp, "sc.json")
    with open(path, "w") as fp:
        fp.write(obj)
    for how, arg in (("inline", obj), ("from a file", path)):
        rc2, got, err2 = ck.run(c.binary, planted(c, base, "sc2", config=plain) +
                                ["--rope", "half", "--rope-scaling", arg, "-f", "json"])
        c.result("--rope-scaling %s: config.json's rope_scaling's output" % how,
                 rc == 0 and rc2 == 0 and json.loads(got)["output"] == json.loads(want)["output"],
                 err + err2)
    c.refused("--rope-scaling that is not JSON", planted(c, base, "sc3", config=plain) +
              ["--rope", "half", "--rope-scaling", "{factor"], ["--rope-scaling"])
    rc, out, err = ck.run(c.binary, ["-x", x, "--rope-scaling", obj])
    c.result("--rope-scaling without --rope: a usage error", rc == 2 and
             err.startswith("mha: --rope-scaling needs --rope") and out == "", err)
    # --rope none: a layer without rotation, over a family that turns
    f = by_type("smollm3")
    x = np.load(os.path.join(f["dir"], "x.npy"))
    s = hf_settings(f, f["cfg"], 2, N)
    s["rope"] = None
    c.output("smollm3: layer 2 with --rope none, as the layer without rotation computes it",
             ["-x", os.path.join(f["dir"], "x.npy"), "-w", f["dir"], "--layer", "2", "--rope",
              "none"], decoder_attention(x, decoder_params(f, 2), s))


def decoder_params(f, layer):
    """the float64 values of a layer's attention tensors, read back"""
    a = attn_module(f, layer)
    p = {}
    for c in "qkvo":
        p[c] = f["tensors"][a + proj(f, c) + ".weight"].value
        if a + proj(f, c) + ".bias" in f["tensors"]:
            p["b" + c] = f["tensors"][a + proj(f, c) + ".bias"].value
    if a + "sinks" in f["tensors"]:
        p["sinks"] = f["tensors"][a + "sinks"].value
    for side in "qk":
        if a + "%s_norm.weight" % side in f["tensors"]:
            p[side + "n"] = f["tensors"][a + "%s_norm.weight" % side].value
    return p


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        c = ck.Checker(os.path.abspath(sys.argv[1]), tmp)
        family_cases(c, rng, torch)
        default_cases(c)
        published_key_cases(c)
        v5_cases(c)
        v5_refusals(c)
        resolve_cases(c)
        layout_cases(c)
        none_cases(c)
        refusal_cases(c, rng)
        # every run above on a checkpoint's layer, 'mha model' on it too
        print("mha model against the run: %d checkpoint layers, accepted and refused alike"
              % getattr(c, "verdicts", 0))
        print("max relative difference over all outputs: %.2g (tolerance %g)"
              % (getattr(c, "worst", 0.0), RTOL))
        print("%d passed, %d failed" % (c.passed, c.failed))
        sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""checkpoint_check.py: one layer of a model checkpoint (safetensors,
config.json, --layout llama|gpt2|bert|torch, --layer, --prefix) against an
independent NumPy implementation of that family's attention.

usage: checkpoint_check.py MHA_BINARY

The checkpoints are written with NumPy (checkpoints.py) following the published
safetensors format (an 8-byte little-endian header length, a JSON header of
name -> dtype, shape, data_offsets, padded with blanks to 8 bytes, then the
raw little-endian data), never with the safetensors library: several layers,
extra tensors (embeddings, norms, MLPs, GPT-2's attn.bias buffers, BERT's
int64 position_ids), F32, F16, BF16 and F64, and one sharded with a
model.safetensors.index.json.  The references (checkpoint_ref.py) are written the way
each model's own code computes attention (Llama's rotate_half rotary
embedding and repeat_kv, GPT-2's Conv1D x*W + b with Q|K|V packed, BERT's
Linear layers without a mask), not from mha's code.  F32/F16/BF16 weights
are exact in float64, so the reference uses the stored values as float64
and mha must agree to

    |a - b| <= 1e-12 * max(1, |b|)

(the same tolerance and argument as numpy_check.py).  When torch can be
imported, the same layers are also built as PyTorch modules loaded from the
checkpoint's tensors (nn.MultiheadAttention for GPT-2, BERT and the torch
family; nn.Linear projections, rotate_half and repeat_interleave for
Llama, Mistral and Qwen2), run in float64, and mha must agree with them
to the same tolerance; without torch those cases are skipped, and said so.
The runs' JSON meta must name the module read ("model").  Then
damaged files
and bad configs: each must fail with exit status 1 and one line on standard
error naming the problem.

It prints one line per case, ends with "N passed, N failed"; exit status 1
if any failed.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from functools import partial

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_ref import (bert_attention, gpt2_attention, llama_attention,  # noqa: E402
                            torch_bert, torch_encoder_layer, torch_gpt2, torch_llama,
                            torch_mha)
from checkpoints import (Tensor, bert_checkpoint, folder, gpt2_checkpoint,  # noqa: E402
                         llama_checkpoint, safetensors_bytes, torch_checkpoint, write)

RTOL = 1e-12
SEED = 20261123

# ---- running mha ---------------------------------------------------------


def run(binary, args):
    return run_cmd(binary, ["forward"] + args)


def run_cmd(binary, args):
    """mha with args (the command first): exit status, stdout, stderr"""
    p = subprocess.run([binary] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


class Checker:
    def __init__(self, binary, tmp):
        self.binary, self.tmp = binary, tmp
        self.passed = self.failed = 0
        self.torch = []  # (name, args, reference(torch)): run when torch is there

    def result(self, name, ok, why=""):
        if ok:
            self.passed += 1
            print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s%s" % (name, ": " + why if why else ""))

    def x(self, rng, n, D):
        x = rng.standard_normal((n, D))
        # a file of its own: the PyTorch cases run these arguments again later
        self.xs = getattr(self, "xs", 0) + 1
        path = os.path.join(self.tmp, "x%d-%d-%d.npy" % (self.xs, n, D))
        np.save(path, x)
        return x, path

    # what 'mha model' takes of forward's arguments: the checkpoint, the module, the
    # config, the layer's settings
    MODEL_OPTS = ("--layer", "--prefix", "--config", "--layout", "--heads", "--kv-heads",
                  "--scale", "--window", "--sinks", "--rope", "--rope-theta", "--rope-dim",
                  "--rope-scaling", "--norm", "--norm-eps", "--norm-over", "--softcap",
                  "--biases", "--qk-rope-head-dim", "--mla-eps")

    def same_verdict(self, name, args, rc, err):
        """'mha model' on the checkpoint and layer a run read: accepted where
        the run was, refused where it was refused, with the same message and
        exit status (one resolved layer); -o FILE.npz written only then.
        Runs whose other options 'mha model' does not take are not compared."""
        if "-w" not in args:
            return
        margs, i = ["model", args[args.index("-w") + 1]], 0
        while i < len(args):
            a = args[i]
            if a in ("-x", "-w", "--print", "--format"):
                i += 2
                continue
            if a == "--causal" or a.startswith("--causal="):
                margs.append(a)
                i += 1
                continue
            if a not in self.MODEL_OPTS or i + 1 == len(args):
                return
            margs += [a, args[i + 1]]
            i += 2
        if "--layer" not in margs and "--prefix" not in margs:
            return
        npz = os.path.join(self.tmp, "verdict.npz")
        if os.path.exists(npz):
            os.unlink(npz)
        mrc, _, merr = run_cmd(self.binary, margs + ["-o", npz])
        written = os.path.exists(npz)
        self.verdicts = getattr(self, "verdicts", 0) + 1
        ok = (mrc == rc and (rc != 0 or not merr) and written == (rc == 0) and
              (rc == 0 or merr == err))
        if not ok:
            self.result("%s: mha model says what the run does" % name, False,
                        "run: exit %d %r; mha model: exit %d %r, -o %s" %
                        (rc, err.strip(), mrc, merr.strip(), "written" if written else
                         "not written"))

    def output(self, name, args, want, model=None):
        """mha's output against want; model: what meta's "model" must say."""
        rc, out, err = run(self.binary, args + ["--print", "output", "--format", "json"])
        self.same_verdict(name, args, rc, err)
        if rc != 0:
            return self.result(name, False, "exit %d: %s" % (rc, err.strip()))
        doc = json.loads(out)
        if model is not None and doc["meta"]["model"] != model:
            return self.result(name, False, "meta's model %r, expected %r"
                               % (doc["meta"]["model"], model))
        got = np.array(doc["output"], dtype=np.float64)
        if got.shape != want.shape:
            return self.result(name, False, "shape %s, expected %s" % (got.shape, want.shape))
        err = np.max(np.abs(got - want) / np.maximum(1, np.abs(want)))
        self.worst = max(getattr(self, "worst", 0.0), err)
        self.result(name, err <= RTOL, "max relative difference %.3g" % err)

    def refused(self, name, args, words, status=1):
        rc, out, err = run(self.binary, args)
        self.same_verdict(name, args, rc, err)
        lines = err.splitlines()
        ok = rc == status and len(lines) == 1 and lines[0].startswith("mha: ") and \
            all(w in lines[0] for w in words) and out == ""
        self.result(name, ok, "exit %d, stderr %r" % (rc, err))


def family_cases(c, rng):
    tmp = c.tmp
    n = 6

    def both(name, args, want, ref, model=None):
        """mha against NumPy now, and against PyTorch (ref(torch)) later"""
        c.output(name, args, want, model)
        c.torch.append((name, args, ref))

    def meta(layout, layer, prefix, config):
        return {"layout": layout, "layer": layer, "prefix": prefix, "config": config}

    # Llama with GQA, F32, the config beside it
    D, H, G = 16, 4, 2
    t, params = llama_checkpoint(rng, 3, D, H, G, "F32")
    cfg = {"model_type": "llama", "hidden_size": D, "num_attention_heads": H,
           "num_key_value_heads": G, "rope_theta": 500.0, "vocab_size": 11,
           "architectures": ["LlamaForCausalLM"], "rms_norm_eps": 1e-5}
    d = folder(tmp, "llama", t, cfg)
    x, xp = c.x(rng, n, D)
    for layer in (0, 2):
        a = "model.layers.%d.self_attn." % layer
        both("llama GQA F32 layer %d (config.json)" % layer,
             ["-x", xp, "-w", d, "--layer", str(layer)],
             llama_attention(x, params[layer], H, G, theta=500.0),
             partial(torch_llama, x=x, t=t, prefix=a, H=H, G=G, theta=500.0),
             meta("llama", layer, a, os.path.join(d, "config.json")))
    c.output("llama -w model.safetensors, config beside it",
             ["-x", xp, "-w", os.path.join(d, "model.safetensors"), "--layer", "1"],
             llama_attention(x, params[1], H, G, theta=500.0),
             meta("llama", 1, "model.layers.1.self_attn.", os.path.join(d, "config.json")))
    c.output("llama --prefix", ["-x", xp, "-w", d, "--prefix", "model.layers.1.self_attn."],
             llama_attention(x, params[1], H, G, theta=500.0),
             meta("llama", None, "model.layers.1.self_attn.", os.path.join(d, "config.json")))
    both("llama --rope-theta over the config",
         ["-x", xp, "-w", d, "--layer", "0", "--rope-theta", "10000"],
         llama_attention(x, params[0], H, G, theta=10000.0),
         partial(torch_llama, x=x, t=t, prefix="model.layers.0.self_attn.", H=H, G=G))
    # no config: --layout and the options
    bare = folder(tmp, "llama-bare", t)
    both("llama no config: --layout llama --heads --kv-heads",
         ["-x", xp, "-w", bare, "--layout", "llama", "--layer", "2", "--heads", str(H),
          "--kv-heads", str(G)],
         llama_attention(x, params[2], H, G),
         partial(torch_llama, x=x, t=t, prefix="model.layers.2.self_attn.", H=H, G=G),
         meta("llama", 2, "model.layers.2.self_attn.", None))
    c.output("llama no config, no --layout: the family from the names",
             ["-x", xp, "-w", bare, "--layer", "2", "--heads", str(H), "--kv-heads", str(G)],
             llama_attention(x, params[2], H, G))
    c.output("llama --config FILE", ["-x", xp, "-w", bare, "--layer", "0", "--config",
                                     os.path.join(d, "config.json")],
             llama_attention(x, params[0], H, G, theta=500.0),
             meta("llama", 0, "model.layers.0.self_attn.", os.path.join(d, "config.json")))

    # Qwen2-style: biases, BF16, sharded with an index, partial rotary
    D, H, G = 16, 4, 1
    t, params = llama_checkpoint(rng, 4, D, H, G, "BF16", bias=True)
    cfg = {"model_type": "qwen2", "hidden_size": D, "num_attention_heads": H,
           "num_key_value_heads": G, "rope_theta": 1000.0, "partial_rotary_factor": 0.5,
           "sliding_window": 3, "use_sliding_window": False, "max_window_layers": 2}
    d = folder(tmp, "qwen2", t, cfg, shards=3)
    x, xp = c.x(rng, n, D)
    both("qwen2 BF16 biases, 3 shards + index, partial rotary",
         ["-x", xp, "-w", d, "--layer", "3"],
         llama_attention(x, params[3], H, G, theta=1000.0, partial=0.5),
         partial(torch_llama, x=x, t=t, prefix="model.layers.3.self_attn.", H=H, G=G,
                 theta=1000.0, partial=0.5),
         meta("llama", 3, "model.layers.3.self_attn.", os.path.join(d, "config.json")))
    c.output("qwen2 -w the index file",
             ["-x", xp, "-w", os.path.join(d, "model.safetensors.index.json"), "--layer", "1"],
             llama_attention(x, params[1], H, G, theta=1000.0, partial=0.5))

    # Mistral: F16, a sliding window of 3 (the query and 2 keys before it)
    D, H, G = 8, 2, 2
    t, params = llama_checkpoint(rng, 2, D, H, G, "F16")
    cfg = {"model_type": "mistral", "hidden_size": D, "num_attention_heads": H,
           "num_key_value_heads": G, "sliding_window": 3}
    d = folder(tmp, "mistral", t, cfg)
    x, xp = c.x(rng, n, D)
    both("mistral F16 sliding_window 3", ["-x", xp, "-w", d, "--layer", "1"],
         llama_attention(x, params[1], H, G, window=3),
         partial(torch_llama, x=x, t=t, prefix="model.layers.1.self_attn.", H=H, G=G, window=3))
    c.output("mistral --window over the config", ["-x", xp, "-w", d, "--layer", "1",
                                                  "--window", "-1"],
             llama_attention(x, params[1], H, G))

    # GPT-2: with and without "transformer.", buffers ignored
    D, H = 12, 3
    for prefix, dtype in (("", "F32"), ("transformer.", "F64")):
        t, params = gpt2_checkpoint(rng, 3, D, dtype, prefix)
        cfg = {"model_type": "gpt2", "n_embd": D, "n_head": H, "n_layer": 3,
               "n_positions": 16}
        d = folder(tmp, "gpt2" + prefix, t, cfg)
        x, xp = c.x(rng, n, D)
        both("gpt2 %s %s layer 2" % (dtype, prefix or "(no prefix)"),
             ["-x", xp, "-w", d, "--layer", "2"], gpt2_attention(x, params[2], H),
             partial(torch_gpt2, x=x, t=t, prefix=prefix + "h.2.attn.", H=H),
             meta("gpt2", 2, prefix + "h.2.attn.", os.path.join(d, "config.json")))
    both("gpt2 --prefix", ["-x", xp, "-w", d, "--prefix", "transformer.h.0.attn"],
         gpt2_attention(x, params[0], H),
         partial(torch_gpt2, x=x, t=t, prefix="transformer.h.0.attn.", H=H),
         meta("gpt2", None, "transformer.h.0.attn.", os.path.join(d, "config.json")))

    # BERT: with and without "bert.", not causal
    D, H = 8, 2
    for prefix, dtype in (("bert.", "F32"), ("", "BF16")):
        t, params = bert_checkpoint(rng, 2, D, dtype, prefix)
        cfg = {"model_type": "bert", "hidden_size": D, "num_attention_heads": H,
               "position_embedding_type": "absolute"}
        d = folder(tmp, "bert" + prefix, t, cfg)
        x, xp = c.x(rng, n, D)
        a = prefix + "encoder.layer.1.attention."
        both("bert %s %s layer 1" % (dtype, prefix or "(no prefix)"),
             ["-x", xp, "-w", d, "--layer", "1"], bert_attention(x, params[1], H),
             partial(torch_bert, x=x, t=t, prefix=a, H=H),
             meta("bert", 1, a, os.path.join(d, "config.json")))

    # bert-base-uncased as published: LayerNorm's .gamma and .beta (transformers
    # renames them as it loads); XLM-RoBERTa's config with output_past
    g = {(k[:-len("weight")] + "gamma" if k.endswith("LayerNorm.weight") else
          k[:-len("bias")] + "beta" if k.endswith("LayerNorm.bias") else k): v
         for k, v in t.items()}
    for mt, extra in (("bert", {}), ("xlm-roberta", {"output_past": True})):
        d = folder(tmp, "bert-gamma-" + mt, g, dict(cfg, model_type=mt, **extra))
        c.output("%s: LayerNorm's gamma and beta%s, as published" %
                 (mt, ", output_past" if extra else ""),
                 ["-x", xp, "-w", d, "--layer", "1"], bert_attention(x, params[1], H))

    # each attention key left out in turn takes its configuration class's
    # default (BertConfig, RobertaConfig: 12 heads of hidden_size 768,
    # "absolute", not a decoder), never mha's: a default that fits the
    # checkpoint computes with it, one that does not is refused naming it
    full = dict(cfg, is_decoder=False)
    for mt in ("bert", "roberta"):
        for key, fits in (("hidden_size", None), ("num_attention_heads", None),
                          ("position_embedding_type", H), ("is_decoder", H)):
            d = folder(tmp, "bert-dflt-%s-%s" % (mt, key), t,
                       {k: v for k, v in dict(full, model_type=mt).items() if k != key})
            args = ["-x", xp, "-w", d, "--layer", "1"]
            if fits:
                c.output("%s without %s: its class's default" % (mt, key), args,
                         bert_attention(x, params[1], fits))
            else:
                c.refused("%s without %s: its class's default does not fit" % (mt, key), args,
                          [key, "(left out: model_type %s's default)" % mt])
    # GPT2Config: 12 heads (here 12 heads of one feature each: it fits), n_embd 768
    D, H = 12, 3
    t, params = gpt2_checkpoint(rng, 3, D, "F32", "")
    full = {"model_type": "gpt2", "n_embd": D, "n_head": H, "n_layer": 3, "n_positions": 16,
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False}
    x, xp = c.x(rng, n, D)
    for key, heads in (("n_embd", None), ("n_head", 12), ("scale_attn_weights", H),
                       ("scale_attn_by_inverse_layer_idx", H)):
        d = folder(tmp, "gpt2-dflt-" + key, t, {k: v for k, v in full.items() if k != key})
        args = ["-x", xp, "-w", d, "--layer", "2"]
        if heads:
            c.output("gpt2 without %s: its class's default" % key, args,
                     gpt2_attention(x, params[2], heads))
        else:
            c.refused("gpt2 without %s: its class's default does not fit" % key, args,
                      [key, "(left out: model_type gpt2's default)"])

    # nn.TransformerEncoder's state_dict, linear1 and norms beside it
    E, H = 8, 2
    t, params = torch_checkpoint(rng, 2, E, "F32")
    d = folder(tmp, "torch", t)
    x, xp = c.x(rng, n, E)
    both("torch TransformerEncoder layer 1", ["-x", xp, "-w", d, "--layout", "torch",
                                              "--layer", "1", "--heads", str(H)],
         torch_mha(x, params[1], H),
         partial(torch_encoder_layer, x=x, t=t, prefix="layers.1.self_attn.", H=H),
         meta("torch", 1, "layers.1.self_attn.", None))


def torch_family_cases(c):
    """The layers family_cases built, against PyTorch modules loaded from
    the same tensors, when torch imports."""
    try:
        import torch
    except ImportError:
        print("PyTorch cases skipped: torch is not importable (%d cases)" % len(c.torch))
        return
    for name, args, ref in c.torch:
        c.output(name + " vs PyTorch modules", args, ref(torch))


def damaged_cases(c, rng):
    tmp = c.tmp
    D = 8
    t, _ = llama_checkpoint(rng, 1, D, 2, 2, "F32")
    good = safetensors_bytes(t)
    hlen = struct.unpack("<Q", good[:8])[0]
    header = json.loads(good[8:8 + hlen])
    data = good[8 + hlen:]
    x, xp = c.x(rng, 4, D)
    base = ["-x", xp, "--layout", "llama", "--layer", "0", "--heads", "2"]

    def damaged(name, blob, words):
        path = os.path.join(tmp, "damaged-%s.safetensors" % name.replace(" ", "-"))
        with open(path, "wb") as f:
            f.write(blob)
        c.refused("damaged: " + name, base + ["-w", path], words)

    def with_header(h, extra=b""):
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + data + extra

    damaged("header longer than the file", struct.pack("<Q", len(good)) + good[8:],
            ["header is", "bytes long", "truncated"])
    damaged("shorter than 8 bytes", b"\x10\0\0", ["too short"])
    damaged("header not JSON", struct.pack("<Q", 12) + b"{not json!!}" + data,
            ["not JSON"])
    damaged("header a list", with_header([1, 2]), ["not a JSON object"])
    q = "model.layers.0.self_attn.q_proj.weight"
    k = "model.layers.0.self_attn.k_proj.weight"
    h = json.loads(json.dumps(header))
    h[q]["data_offsets"][1] = len(data) + 4
    damaged("offsets out of range", with_header(h), [q, "run past"])
    h = json.loads(json.dumps(header))
    h[k]["data_offsets"] = h[q]["data_offsets"]
    damaged("offsets overlapping", with_header(h), ["overlap", q, k])
    h = json.loads(json.dumps(header))
    h[q]["dtype"] = "F33"
    damaged("unknown dtype", with_header(h), ["unknown dtype", "F33"])
    h = json.loads(json.dumps(header))
    h[q]["shape"] = [D, D + 1]
    damaged("size not dtype x shape", with_header(h), [q, "needs"])
    h = json.loads(json.dumps(header))
    h[q]["data_offsets"] = [8, 4]
    damaged("offsets backwards", with_header(h), [q, "backwards"])
    h = json.loads(json.dumps(header))
    h[q]["shape"] = [2 ** 40, 2 ** 40]
    damaged("shape overflowing", with_header(h), [q, "needs more than"])
    h = json.loads(json.dumps(header))
    h[q]["shape"] = [D, -1]
    damaged("negative dimension", with_header(h), [q, "whole numbers"])

    # a missing tensor names the nearest ones
    t2 = {n: v for n, v in t.items() if not n.endswith("k_proj.weight")}
    d = folder(tmp, "llama-no-k", t2)
    c.refused("missing tensor lists the nearest names", base + ["-w", d],
              [k, "nearest", '"model.layers.0.self_attn.q_proj.weight"', '")'])
    d = folder(tmp, "llama-one", t)
    c.refused("no such layer", base[:-4] + ["--layer", "5", "-w", d],
              ["no layer 5", "0 to 0"])
    t3, _ = llama_checkpoint(rng, 3, D, 2, 2, "F32")
    d3 = folder(tmp, "llama-three", t3)
    c.refused("several layers, none picked", ["-x", xp, "-w", d3, "--heads", "2"],
              ["3 llama attention modules", "--layer"])
    c.refused("--prefix naming nothing", ["-x", xp, "-w", d3, "--prefix", "model.layer.1"],
              ["no tensor", "model.layer.1.q_proj.weight", "nearest"])
    # a shard the index names is missing
    d = folder(tmp, "sharded-missing", t, shards=2)
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    c.refused("index names a missing shard", base + ["-w", d],
              ["model-00002-of-00002.safetensors"])
    # -o over a shard, the index or config.json beside the weights: refused (exit 2)
    d = folder(tmp, "sharded-o", t, {"model_type": "llama", "num_attention_heads": 2}, shards=2)
    for f in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "config.json"):
        path = os.path.join(d, f)
        before = open(path, "rb").read()
        rc, _, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0", "-f", "json", "-o", path])
        c.result("-o over the checkpoint's %s refused" % f,
                 rc == 2 and "refusing to overwrite an input" in err and
                 open(path, "rb").read() == before, err.strip())
    # Qwen3-style per-head q and k norms in a llama module: refused, not skipped
    tn = dict(t)
    tn["model.layers.0.self_attn.q_norm.weight"] = Tensor(np.ones(4), "F32")
    d = folder(tmp, "q-norm", tn)
    c.refused("q_norm refused", base + ["-w", d], ["q_norm.weight", "does not have"])
    # an integer tensor where a weight goes
    ti = dict(t)
    ti[q] = Tensor(np.ones((D, D)), "I64")
    d = folder(tmp, "int-weight", ti)
    c.refused("I64 where a weight goes", base + ["-w", d], [q, "I64", "F64, F32"])

    # config.json: a value of the wrong type names its key
    for key, value in (("num_attention_heads", "4"), ("rope_theta", [1]),
                       ("num_key_value_heads", 1.5), ("attention_bias", 1),
                       ("model_type", 3)):
        cfg = {"model_type": "llama", "num_attention_heads": 2, key: value}
        d = folder(tmp, "cfg-" + key, t, cfg)
        c.refused("config %s of the wrong type" % key,
                  ["-x", xp, "-w", d, "--layer", "0"], ['"%s"' % key])
    d = folder(tmp, "cfg-unknown", t, {"model_type": "xlnet"})
    c.refused("config model_type unknown", ["-x", xp, "-w", d, "--layer", "0"],
              ['"xlnet"', "--layout"])
    d = folder(tmp, "cfg-t5", t, {"model_type": "t5"})
    c.refused("config model_type t5: what mha does not compute, named",
              ["-x", xp, "-w", d, "--layer", "0"], ['"t5"', "relative position bias"])
    d = folder(tmp, "cfg-scaling", t, {"model_type": "llama", "num_attention_heads": 2,
                                        "rope_scaling": {"rope_type": "llama3", "factor": 8}})
    c.refused("config rope_scaling llama3 without its keys refused",
              ["-x", xp, "-w", d, "--layer", "0"],
              ["rope_scaling", "llama3", "needs", "low_freq_factor"])
    d = folder(tmp, "cfg-notjson", t)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{\"model_type\": ")
    c.refused("config not JSON", ["-x", xp, "-w", d, "--layer", "0"], ["config.json"])
    # a key mha does not know stops the run
    d = folder(tmp, "cfg-unknown", t, {"model_type": "llama", "num_attention_heads": 2,
                                        "some_new_key": {"a": [1, "b"]}})
    rc, _, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0"])
    c.result("a config key mha does not know: refused, named at its line and column",
             rc == 1 and 'config.json:1:51: unknown key "some_new_key"' in err, err.strip())
    # --prefix with --layer: layer N's module under the prefix
    d = folder(tmp, "cfg-known", t, {"model_type": "llama", "num_attention_heads": 2,
                                      "hidden_size": 8})
    rc, want, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0", "-f", "json"])
    rc2, got, err2 = run(c.binary, ["-x", xp, "-w", d, "--layer", "0", "--prefix", "model",
                                    "-f", "json"])
    c.result("--layer 0 --prefix model: layer 0's module", rc == 0 and rc2 == 0 and got == want,
             (err + err2).strip())
    rc, _, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0", "--prefix", "m"])
    c.result("--layer 0 --prefix m: nothing under m, said", rc == 1 and 'under "m"' in err,
             err.strip())
    # usage errors: exit 2
    rc, _, err = run(c.binary, ["-x", xp, "--layer", "0"])
    c.result("--layer without -w: exit 2", rc == 2 and "give -w" in err, err.strip())
    rc, _, err = run(c.binary, ["-x", xp, "--layout", "gpt3"])
    c.result("--layout gpt3: exit 2", rc == 2 and "llama, gpt2, bert or torch" in err, err.strip())


def large_case(c, rng):
    """A 4 GiB checkpoint (sparse: the embeddings are a hole) whose layer is
    read under --max-memory 32M: only that layer's tensors are read."""
    D, H = 8, 2
    t, params = llama_checkpoint(rng, 2, D, H, H, "F32")
    big = 1 << 30  # F32 entries: 4 GiB
    header, at, data = {}, big * 4, b""
    header["model.embed_tokens.weight"] = {"dtype": "F32", "shape": [big // D, D],
                                           "data_offsets": [0, big * 4]}
    for name, tensor in t.items():
        if name == "model.embed_tokens.weight":
            continue
        header[name] = {"dtype": tensor.dtype, "shape": tensor.shape,
                        "data_offsets": [at, at + len(tensor.raw)]}
        at += len(tensor.raw)
        data += tensor.raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    d = os.path.join(c.tmp, "large")
    os.makedirs(d)
    path = os.path.join(d, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.seek(8 + len(h) + big * 4)
        f.write(data)
    x, xp = c.x(rng, 5, D)
    c.output("one layer of a 4 GiB checkpoint under --max-memory 32M",
             ["-x", xp, "-w", d, "--layout", "llama", "--layer", "1", "--heads", str(H),
              "--max-memory", "32M"],
             llama_attention(x, params[1], H, H))
    os.remove(path)


# ---- whose fault: config.json's values and --layer ------------------------


def usage_refused(c, name, args, words):
    """exit 2 (a bad command line), the message naming words"""
    rc, out, err = run(c.binary, args)
    first = err.splitlines()[0] if err else ""
    c.result(name, rc == 2 and out == "" and first.startswith("mha: ") and
             all(w in first for w in words), "exit %d, stderr %r" % (rc, err))


def blame_cases(c, rng):
    """A value config.json gives is blamed on config.json and its key (exit
    1), never on an option nobody gave; --layer's messages say what is
    there; a rotary dim of 0 from partial_rotary_factor turns nothing."""
    tmp = c.tmp
    D, H = 8, 2
    t, params = llama_checkpoint(rng, 1, D, H, H, "F32")
    x, xp = c.x(rng, 4, D)
    base = {"model_type": "llama", "num_attention_heads": H, "hidden_size": D}
    cases = (
        ("num_key_value_heads 1e15", {"num_key_value_heads": 1e15}, [],
         ["config.json'", "num_key_value_heads 1000000000000000 does not divide "
          "num_attention_heads 2"]),
        ("num_key_value_heads 3", {"num_key_value_heads": 3}, [],
         ["config.json'", "num_key_value_heads 3 does not divide num_attention_heads 2"]),
        ("num_key_value_heads 2 over --heads 3", {"num_key_value_heads": 2}, ["--heads", "3"],
         ["config.json'", "num_key_value_heads 2 does not divide --heads 3"]),
        ("num_key_value_heads without num_attention_heads",
         {"num_attention_heads": None, "num_key_value_heads": 2}, [],
         ["config.json'", "num_attention_heads 32 (left out: model_type llama's default) "
          "does not divide the 8 features of W_Q"]),
        ("num_attention_heads 3 against W_Q", {"num_attention_heads": 3}, [],
         ["config.json'", "num_attention_heads 3 does not divide the 8 features of W_Q",
          "q_proj.weight"]),
        ("num_attention_heads 1e15 against W_Q", {"num_attention_heads": 1e15}, [],
         ["config.json'", "num_attention_heads 1000000000000000 does not divide"]),
        ("num_attention_heads 4, num_key_value_heads 1 against W_K",
         {"num_attention_heads": 4, "num_key_value_heads": 1}, [],
         ["config.json'", "num_key_value_heads 1", "k_proj.weight"]),
        ("num_key_value_heads 1e300", {"num_key_value_heads": 1e300}, [],
         ['"num_key_value_heads"', "1e+300"]),
        ("num_key_value_heads -1", {"num_key_value_heads": -1}, [],
         ['"num_key_value_heads"', "whole number from 1"]),
        ("num_key_value_heads 2.5", {"num_key_value_heads": 2.5}, [],
         ['"num_key_value_heads"', "whole number from 1"]),
        ("head_dim 64 against W_Q", {"head_dim": 64, "partial_rotary_factor": 0.5}, [],
         ["config.json'", "head_dim 64, but W_Q", "has 8 features, not num_attention_heads 2 x 64"]),
        ("partial_rotary_factor making an odd rotary dim",
         {"head_dim": 4, "partial_rotary_factor": 0.75}, [],
         ["config.json'", "partial_rotary_factor 0.75", "3 features"]),
        ("partial_rotary_factor turning nothing, with --rope-theta",
         {"head_dim": 4, "partial_rotary_factor": 0.2}, ["--rope-theta", "5"],
         ["config.json'", "partial_rotary_factor 0.2", "--rope-theta"]),
    )
    for i, (name, extra, opts, words) in enumerate(cases):
        cfg = {k: v for k, v in dict(base, **extra).items() if v is not None}
        d = folder(tmp, "blame-%d" % i, t, cfg)
        rc, out, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0"] + opts)
        lines = err.splitlines()
        ok = rc == 1 and out == "" and len(lines) == 1 and all(w in lines[0] for w in words) \
            and "--kv-heads 1" not in err and "--rope-dim" not in err
        c.result("config %s: blamed on config.json" % name, ok,
                 "exit %d, stderr %r" % (rc, err))

    # head_dim 2, partial_rotary_factor 0.4: int(2 * 0.4) = 0 features turn, as
    # in transformers; never all of d_k
    D, H = 4, 2
    t, params = llama_checkpoint(rng, 1, D, H, H, "F32")
    x, xp = c.x(rng, 5, D)
    d = folder(tmp, "rotary-none", t, {"model_type": "llama", "num_attention_heads": H,
                                       "hidden_size": D,
                                       "head_dim": 2, "partial_rotary_factor": 0.4})
    c.output("partial_rotary_factor 0.4 of head_dim 2: no rotation",
             ["-x", xp, "-w", d, "--layer", "0"], llama_attention(x, params[0], H, H, partial=0.4))
    rc, out, err = run(c.binary, ["-x", xp, "-w", d, "--layer", "0", "-f", "json"])
    rope = json.loads(out)["meta"].get("rope", "absent") if rc == 0 else "exit %d" % rc
    c.result("partial_rotary_factor 0.4 of head_dim 2: meta's rope null", rope is None,
             "meta rope %r %s" % (rope, err.strip()))

    # --layer on modules that have no layer number
    E = 8

    def mha_module(prefix):
        return {prefix + "in_proj_weight": Tensor(rng.standard_normal((3 * E, E))),
                prefix + "in_proj_bias": Tensor(rng.standard_normal(3 * E)),
                prefix + "out_proj.weight": Tensor(rng.standard_normal((E, E))),
                prefix + "out_proj.bias": Tensor(rng.standard_normal(E))}

    x, xp = c.x(rng, 3, E)
    torch = ["-x", xp, "--layout", "torch", "--heads", "2", "--layer", "0"]
    for name, tensors, words in (
            ("nn.MultiheadAttention's own state_dict", mha_module(""),
             ['"out_proj.weight"', "no layer number", "leave out --layer"]),
            ("one module", mha_module("encoder.self_attn."),
             ['"encoder.self_attn"', "no layer number", "leave out --layer"]),
            ("two modules", dict(mha_module("enc.self_attn."), **mha_module("dec.self_attn.")),
             ['"dec.self_attn"', '"enc.self_attn"', "no layer numbers", "--prefix"])):
        d = folder(tmp, "nolayer-" + name.split()[0].replace("'", ""), tensors)
        c.refused("--layer 0, %s: no layer numbers" % name, torch + ["-w", d], words)
        rc, _, err = run(c.binary, torch + ["-w", d])
        c.result("--layer 0, %s: no template in the message" % name, "%" not in err, err.strip())
    usage_refused(c, "--layer -1: a whole number from 0", ["-x", xp, "-w", d, "--layer", "-1"],
                  ["--layer", "from 0", "'-1'"])
    usage_refused(c, "--layer x: a whole number from 0", ["-x", xp, "-w", d, "--layer", "x"],
                  ["--layer", "from 0"])


# ---- hostile checkpoints: bounded work -------------------------------------

HEADER_LIMIT = 100 * 1000 * 1000  # safetensors' limit on the header's length
SLOW = 10.0  # seconds: generous, so a slow machine does not flake (2 s measured)


def big_header_file(path, tensors, fillers):
    """tensors (name -> Tensor) and one F32 scalar per filler name, the
    header filled with fillers' entries up to just under safetensors' limit
    (the rest blanks): written as text, json.dumps of it is too slow."""
    parts, data, at = [], [], 0
    for name, t in tensors.items():
        parts.append('%s: {"dtype": "%s", "shape": %s, "data_offsets": [%d, %d]}'
                     % (json.dumps(name), t.dtype, json.dumps(t.shape), at, at + len(t.raw)))
        data.append(t.raw)
        at += len(t.raw)
    size = sum(len(p) + 2 for p in parts) + 2
    for name in fillers:
        p = '"%s": {"dtype": "F32", "shape": [1], "data_offsets": [%d, %d]}' % (name, at, at + 4)
        if size + len(p) + 2 > HEADER_LIMIT - 64:
            break
        parts.append(p)
        at += 4
        size += len(p) + 2
    h = ("{" + ", ".join(parts) + "}").encode()
    h += b" " * (HEADER_LIMIT - 8 - len(h))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.write(b"".join(data))
        f.write(b"\0" * (at - sum(len(d) for d in data)))
    return len(parts)


def timed(c, name, args, check, env_sh=None):
    """mha's run of args within SLOW seconds, check(rc, out, err) holding;
    env_sh: a shell prefix (ulimit) the run goes through."""
    import time
    cmd = [c.binary, "forward"] + args
    if env_sh:
        cmd = ["sh", "-c", env_sh + ' exec "$@"', "sh"] + cmd
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", "timed out after 120 s"
    took = time.monotonic() - start
    why = check(rc, out, err)
    if why is None and took >= SLOW:
        why = "took %.2f s (bound %g s)" % (took, SLOW)
    c.result("%s (%.2f s)" % (name, took), why is None, why or "")


def refusal(words):
    """check: exit 1, one line naming words"""
    def check(rc, out, err):
        lines = err.splitlines()
        if rc == 1 and len(lines) == 1 and all(w in lines[0] for w in words) and out == "":
            return None
        return "exit %s, stderr %r" % (rc, err[:300])
    return check


def matches(want):
    """check: exit 0, the JSON output is want"""
    def check(rc, out, err):
        if rc != 0:
            return "exit %s: %s" % (rc, err.strip()[:300])
        got = np.array(json.loads(out)["output"], dtype=np.float64)
        if got.shape != want.shape:
            return "shape %s, expected %s" % (got.shape, want.shape)
        diff = np.max(np.abs(got - want) / np.maximum(1, np.abs(want)))
        return None if diff <= RTOL else "max relative difference %.3g" % diff
    return check


def hostile_cases(c, rng):
    """Checkpoints built to make mha work hard: each answered in bounded time."""
    D, H = 8, 2
    t, params = llama_checkpoint(rng, 1, D, H, H, "F32")
    x, xp = c.x(rng, 4, D)
    want = llama_attention(x, params[0], H, H)
    base = ["-x", xp, "--layout", "llama", "--heads", str(H)]
    attn = {n: v for n, v in t.items() if ".self_attn." in n}
    k = "model.layers.0.self_attn.k_proj.weight"
    out = ["--print", "output", "--format", "json"]

    # a missing tensor among 50,000 names 2,000 characters long: the nearest
    # names are looked for, not an edit distance against each in full
    d = os.path.join(c.tmp, "long-names")
    os.makedirs(d)
    no_k = {n: v for n, v in attn.items() if n != k}
    fillers = ("model.layers.0.self_attn.%07d.%s" % (i, "x" * 1960) for i in range(10 ** 6))
    big_header_file(os.path.join(d, "model.safetensors"), no_k, fillers)
    timed(c, "missing tensor, 100 MB header of long names", base + ["--layer", "0", "-w", d],
          refusal([k, "nearest", '"model.layers.0.self_attn.q_proj.weight"']))
    shutil.rmtree(d)

    # the worst case for the length filter: random names as long as the
    # wanted one, none near it (an edit distance in full is 4 million steps)
    d = os.path.join(c.tmp, "same-length")
    os.makedirs(d)
    prefix = "p" * 1986
    wanted = prefix + ".q_proj.weight"
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789._", dtype=np.uint8)
    words = letters[rng.integers(0, len(letters), (50000, len(wanted)))]
    fillers = (w.tobytes().decode() for w in words)
    big_header_file(os.path.join(d, "model.safetensors"), attn, fillers)
    timed(c, "--prefix naming nothing, 100 MB header of names as long",
          base + ["--prefix", prefix, "-w", d], refusal([wanted, "nearest"]))
    shutil.rmtree(d)

    # an index of a million weight_map entries: over a million shard names,
    # and over three
    for shards in (10 ** 6, 3):
        d = os.path.join(c.tmp, "index-%d" % shards)
        os.makedirs(d)
        write(os.path.join(d, "attn.safetensors"), attn)
        names = ["model.layers.%d.mlp.w%d" % (i // 8, i % 8) for i in range(10 ** 6)]
        parts = ['"%s": "shard-%07d.safetensors"' % (n, i % shards) for i, n in enumerate(names)]
        parts += ['"%s": "attn.safetensors"' % n for n in attn]
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            f.write('{"metadata": {}, "weight_map": {' + ", ".join(parts) + "}}")
        timed(c, "index of 1,000,000 entries over %d shard names" % shards,
              base + ["--layer", "0", "-w", d] + out, matches(want))
        shutil.rmtree(d)

    # a folder of 1,100 shards, no index, under 256 open files: each shard
    # closed once its header is read
    d = os.path.join(c.tmp, "many-shards")
    os.makedirs(d)
    for i in range(1100):
        write(os.path.join(d, "part-%05d.safetensors" % i),
              {"model.layers.%d.mlp.w" % (i + 1): Tensor(np.ones(2))})
    for i, (n, v) in enumerate(sorted(attn.items())):
        write(os.path.join(d, "part-%05d-%d.safetensors" % (i * 250, i)), {n: v})
    timed(c, "1,100 shards, no index, ulimit -n 256", base + ["--layer", "0", "-w", d] + out,
          matches(want), env_sh="ulimit -n 256;")
    shutil.rmtree(d)


def lost_cases(c, rng):
    """Nothing lost: every file an index names is an input from the start,
    whatever it is called and whether or not this layer reads it; -o onto
    one (directly, through a link, or as a file of -o DIR/) is refused for
    mha model, forward and backward, the file unchanged."""
    D, H = 8, 2
    t, params = llama_checkpoint(rng, 2, D, H, H, "F32")
    x, xp = c.x(rng, 4, D)
    d = os.path.join(c.tmp, "oddly-sharded")
    os.makedirs(d)
    # layer 0 in a .safetensors shard; layer 1 in shards named as outputs are
    names = {0: "model-00001-of-00002.safetensors", 1: "layer1.npz"}
    weight_map = {}
    for n, v in t.items():
        f = names[1] if ".layers.1." in n else names[0]
        weight_map[n] = f
    for f in set(weight_map.values()):
        write(os.path.join(d, f), {n: v for n, v in t.items() if weight_map[n] == f},
                 {"format": "pt"})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump({"model_type": "llama", "num_attention_heads": H, "hidden_size": D,
                   "num_hidden_layers": 2, "rope_theta": 10000.0}, fh)
    shard = os.path.join(d, "layer1.npz")
    link = os.path.join(c.tmp, "link-to-shard.npz")
    os.symlink(shard, link)
    before = open(shard, "rb").read()
    for what, args in (
            ("mha model -o", ["model", d, "--layer", "0", "-o", shard]),
            ("mha model -o through a link", ["model", d, "--layer", "0", "-o", link]),
            ("mha forward -o", ["forward", "-x", xp, "-w", d, "--layer", "0", "-f", "npz",
                                "-o", shard]),
            ("mha forward -o, the index given", ["forward", "-x", xp, "-w",
                                                 os.path.join(d, "model.safetensors.index.json"),
                                                 "--layer", "0", "-f", "npz", "-o", shard]),
            ("mha backward -o", ["backward", "-x", xp, "-w", d, "--layer", "0", "-f", "npz",
                                 "-o", shard])):
        rc, out, err = run_cmd(c.binary, args)
        c.result("a shard layer 0 does not read, under %s: refused, unchanged" % what,
                 rc == 2 and "refusing to overwrite an input" in err and
                 open(shard, "rb").read() == before, "exit %d %r" % (rc, err))
    # -o DIR/: a file the run would write there is a shard of the index
    dd = os.path.join(c.tmp, "dir-sharded")
    os.makedirs(dd)
    names = {0: "model-00001-of-00002.safetensors", 1: "output.npy"}
    weight_map = {n: names[1] if ".layers.1." in n else names[0] for n in t}
    for f in set(weight_map.values()):
        write(os.path.join(dd, f), {n: v for n, v in t.items() if weight_map[n] == f},
                 {"format": "pt"})
    with open(os.path.join(dd, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": weight_map}, fh)
    shard = os.path.join(dd, "output.npy")
    before = open(shard, "rb").read()
    rc, out, err = run_cmd(c.binary, ["forward", "-x", xp, "-w", dd, "--layer", "0", "--heads",
                                      str(H), "-f", "npy", "-o", dd + "/"])
    c.result("-o DIR/ where the index's shard output.npy is: refused, unchanged",
             rc == 2 and "output.npy" in err and open(shard, "rb").read() == before,
             "exit %d %r" % (rc, err))
    rc, out, err = run_cmd(c.binary, ["model", d, "--layer", "1"])
    c.result("the shards still read after all that", rc == 0, err)
    # a tensor's name with a NUL in it (\u0000 in the header): cJSON would end the
    # name there, and read it as another's
    dn = os.path.join(c.tmp, "nul-name")
    os.makedirs(dn)
    nul = {(n + "\x00x" if n.endswith("layers.0.self_attn.q_proj.weight") else n): v
           for n, v in t.items()}
    write(os.path.join(dn, "model.safetensors"), nul)
    c.refused("a tensor name with \\u0000 in the header", ["-x", xp, "-w", dn, "--layer", "0",
                                                           "--heads", str(H)],
              ["\\u0000", "model.safetensors"])


def tree_cases(c):
    """Every checkpoint the tree holds (samples/, the fuzzers' corpus): mha
    model and a run on each of its first layers give the same verdict,
    where the run's X (samples/tiny-llama/x.json) fits the layer."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    x = os.path.join(top, "samples", "tiny-llama", "x.json")
    found = []
    for where in ("samples", os.path.join("tests", "fuzz", "corpus")):
        for root, _, files in os.walk(os.path.join(top, where)):
            found += [os.path.join(root, f) for f in sorted(files)
                      if f.endswith(".safetensors") or f.endswith(".safetensors.index.json")]
    before = getattr(c, "verdicts", 0)
    for path in found:
        for layer in ("0", "1"):
            args = ["-x", x, "-w", path, "--layer", layer]
            rc, _, err = run(c.binary, args)
            # a layer the sample's X does not fit: the run's refusal is about X
            if rc != 0 and ("-x " in err or " X " in err):
                continue
            c.same_verdict("%s layer %s" % (os.path.relpath(path, top), layer), args, rc, err)
    c.result("the tree's %d checkpoints: mha model's verdict is the run's (%d layers)"
             % (len(found), getattr(c, "verdicts", 0) - before),
             len(found) >= 2 and getattr(c, "verdicts", 0) > before)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(binary, tmp)
        family_cases(c, rng)
        torch_family_cases(c)
        large_case(c, rng)
        damaged_cases(c, rng)
        blame_cases(c, rng)
        hostile_cases(c, rng)
        lost_cases(c, rng)
        tree_cases(c)
    # every run above on a checkpoint's layer, 'mha model' on it too
    print("mha model against the run: %d checkpoint layers, accepted and refused alike"
          % getattr(c, "verdicts", 0))
    print("max relative difference over all outputs: %.2g (tolerance %g)"
          % (getattr(c, "worst", 0.0), RTOL))
    print("%d passed, %d failed" % (c.passed, c.failed))
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()

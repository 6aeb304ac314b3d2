#!/usr/bin/python3
"""tests/fuzz/make_corpus.py: write the seed corpus in tests/fuzz/corpus/.

Run once; the files it writes are committed, so nothing needs to run it
again (rerun it after changing it: it rewrites the corpus it knows).
Needs numpy for the .npy seeds.  Every file is under 1 KB.

    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import io
import os

import numpy as np

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(TOP, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    assert len(data) < 1024, (target, name)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


JSON = {
    "x.json": "[[1, 2.5, -3e-2], [4, 5, 6]]\n",
    "x-object.json": '{"X": [[0.5, -1e-3], [2, 3]]}',
    "output.json": '{"heads": 2, "output": [[1.0, 2.0], [3.0, 4.0]]}',
    "mask-inf.json": '[[0, "-inf"], ["-Infinity", 0]]',
    "mask-bool.json": '{"mask": [[true, false], [false, true]]}',
    "mask-3d.json": "[[[true, false]], [[false, true]]]",
    "mask-nan.json": '[["NaN", "+inf"], [1, "INF"]]',
    "w-1d.json": "[1, 2, 3]",
    "bom.json": "\ufeff [[1]]",
    "bad-ragged.json": "[[1, 2],\n [3]]",
    "bad-mixed.json": "[[true, 0], [1, 1]]",
    "bad-syntax.json": "[[1, 2], [3, 4]",
    "bad-deep.json": "[[[[1]]]]",
    "bad-string.json": '[["0.4x", 1]]',
    "bad-range.json": "[[1e400, 1]]",
    "bad-key.json": '{"m\\u0061sk": [[1]], "Y": [[2]]}',
    "bad-empty.json": "[[], []]",
    "bad-null.json": "[[null, {}]]",
    "tokens.json": '{"X": [[1, 2], [3, 4]], "tokens": ["The", "b\\u00e6r"]}',
    "bad-tokens-count.json": '{"output": [[1, 2]], "tokens": ["a", "b"]}',
    "bad-tokens-type.json": '{"X": [[1], [2]], "tokens": ["a", 3]}',
}

CSV = {
    "x.csv": "1,2\n3,4\n",
    "header.csv": "a,b\n1,2\n",
    "savetxt.csv": "# comment\n\n1.000000000000000000e+00 2.5e-01\n3 4\n",
    "crlf.csv": "1,2\r\n3,4\r\n",
    "cr.csv": "1;2\r3;4\r",
    "quotes.csv": '"1","2"\n "3" , "4"\n',
    "tabs.csv": "x\ty\n1\t2\n3\t4\n",
    "mask.csv": "0,-inf\nnan,\u221e\n",
    "bool.csv": "true,FALSE\nfalse,True\n",
    "blocks.csv": "# X (2x2)\n1,2\n3,4\n# output: attention (2x2)\n5,6\n7,8\n",
    "column.csv": "1\n2\n3\n",
    "bom.csv": "\ufeffx,y\n1,2\n",
    "bad-ragged.csv": "1,2\n3\n",
    "bad-extra.csv": "1,2\n3,4,5,6\n",
    "bad-junk.csv": '"1"x,2\n',
    "bad-unclosed.csv": '"1,2\n',
    "bad-comma.csv": "1,5;2,5\n",
    "bad-escapes.csv": '"a""b",1\n2,"3"\n',
    "bad-mixed.csv": "true,0\n",
    "labels.csv": 'token,a,b\nThe,1,2\n"b""ear",3,4\n',
    "labels-typo.csv": "The,1,2\nx0,3,4\n",
    "bad-label-only.csv": "The,1\nbear\n",
}


def npy(a, version=None, fortran=False):
    f = io.BytesIO()
    if fortran:
        a = np.asfortranarray(a)
    np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def npy_seeds():
    x = np.arange(6, dtype="<f8").reshape(2, 3) / 4
    s = {
        "f8.npy": npy(x),
        "f4-fortran.npy": npy(x.T.astype("<f4"), fortran=True),
        "f2.npy": npy(np.array([[1, -2], [0.5, 65504]], dtype="<f2")),
        "i4-big.npy": npy(np.array([[1, -2], [3, -4]], dtype=">i4")),
        "u1.npy": npy(np.array([[1, 255]], dtype="u1")),
        "i8.npy": npy(np.array([[2**53, -(2**53)]], dtype="<i8")),
        "bool-3d.npy": npy(np.array([[[1, 0], [0, 1]], [[1, 1], [0, 0]]], dtype="?")),
        "mask-inf.npy": npy(np.array([[0, -np.inf], [np.nan, 0]], dtype="<f8")),
        "v2.npy": npy(x[:1], version=(2, 0)),
        "v3.npy": npy(x[:1], version=(3, 0)),
        "1d.npy": npy(np.array([1.0, 2.0, 3.0])),
        "3d-fortran.npy": npy(np.arange(8, dtype="<f8").reshape(2, 2, 2), fortran=True),
        "bad-scalar.npy": npy(np.array(1.0)),
        "4d.npy": npy(np.zeros((2, 1, 1, 2))),
        "bad-5d.npy": npy(np.zeros((1, 1, 1, 1, 2))),
        "bad-u8.npy": npy(np.array([[2**53 + 1]], dtype="<u8")),
        "bad-c16.npy": npy(np.array([[1j]], dtype="<c16")),
        "bad-struct.npy": npy(np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")])),
        "bad-empty.npy": npy(np.zeros((2, 0))),
        "bad-bool-byte.npy": npy(np.array([[1, 0]], dtype="?"))[:-1] + b"\x02",
    }
    s["bad-truncated.npy"] = s["f8.npy"][:-5]
    s["bad-extra.npy"] = s["f8.npy"] + b"\0\0\0\0\0\0\0\0"
    # Python 2's long integers in the shape, as old NumPy wrote them
    h = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1L, 2L), }"
    h = h + b" " * (118 - len(h)) + b"\n"
    s["py2-long.npy"] = b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h + \
        np.array([1.0, 2.0]).tobytes()
    return s


def safetensors(tensors, pad=True):
    """The published layout: u64 header length, JSON header, data."""
    import json
    import struct
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    f32 = np.array([[1, -2], [0.5, 3]], dtype="<f4").tobytes()
    bf16 = np.array([[0x3F80, 0xC000]], dtype="<u2").tobytes()
    s = {
        "f32.safetensors": safetensors({"a.weight": ("F32", [2, 2], f32),
                                        "a.bias": ("F64", [2], np.ones(2).tobytes())}),
        "bf16-f16.safetensors": safetensors({"b": ("BF16", [1, 2], bf16),
                                             "h": ("F16", [2], np.array([1, 65504], "<f2").tobytes()),
                                             "i": ("I64", [1], np.ones(1, "<i8").tobytes()),
                                             "m": ("BOOL", [2], b"\x01\x00")}),
        "3d.safetensors": safetensors({"t": ("F32", [1, 2, 2], f32)}, pad=False),
        "empty.safetensors": safetensors({}),
        "bad-overlap.safetensors": safetensors({"a": ("F32", [2, 2], f32)})[:-16] + f32,
        "bad-inf.safetensors": safetensors({"a": ("F32", [1], np.array([np.inf], "<f4").tobytes())}),
    }
    h = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}'
    s["bad-overlap.safetensors"] = len(h).to_bytes(8, "little") + h + bytes(8)
    h = b'{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]},"__metadata__":{"x":"y"}}'
    s["bad-dtype.safetensors"] = len(h).to_bytes(8, "little") + h + bytes(1)
    s["bad-length.safetensors"] = (1 << 40).to_bytes(8, "little") + b"{}"
    s["bad-json.safetensors"] = (4).to_bytes(8, "little") + b"{\"a\""
    return s


def safetensors_header_seeds():
    """Headers held to the format: junk after the object, not UTF-8, a
    control byte, a tensor's unknown key, __metadata__ of strings or not."""
    t = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    s = {
        "bad-trailing.safetensors": t + b'}GARBAGE',
        "bad-second-object.safetensors": t + b'}{"x":1}',
        "padded.safetensors": t + b'}' + b" " * 7,
        "bad-utf8.safetensors": t.replace(b'"a"', b'"a\xc3("') + b'}',
        "bad-control.safetensors": b'{\x01' + t[1:] + b'}',
        "bad-entry-key.safetensors": t[:-1] + b',"dtpye":"F64"}}',
        "metadata.safetensors": b'{"__metadata__":{"format":"pt"},' + t[1:] + b'}',
        "bad-metadata.safetensors": b'{"__metadata__":{"n":1},' + t[1:] + b'}',
    }
    return {k: len(h).to_bytes(8, "little") + h + bytes(4) for k, h in s.items()}


def model_seeds():
    """fuzz_model: an options byte (bits 0-2 --layout, 3 --layer, 4 layer 1,
    5 --prefix, 6 -w the index file, 7 config.json), then the index or the
    config.  Tensor and shard names are fuzz_model.c's."""
    one, two = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    llama = ['"model.layers.%d.self_attn.%s_proj.weight": "%s"' % (n, p, two if n else one)
             for n in (0, 1) for p in "qkvo"]
    index = '{"metadata": {"total_size": 160}, "weight_map": {%s}}' % ", ".join(llama)
    gpt2 = ('{"weight_map": {"h.0.attn.c_attn.weight": "%s", "h.0.attn.c_proj.weight": "%s"}}'
            % (one, one))
    config = ('{"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1, '
              '"hidden_size": 2, "rope_theta": 10000.0, "sliding_window": 4, '
              '"max_window_layers": 1, "use_sliding_window": true, '
              '"rope_scaling": {"rope_type": "default"}, "torch_dtype": "float32"}')
    return {
        "index-llama-layer0": b"\x08" + index.encode(),
        "index-llama-layer1-file": b"Y" + index.encode(),
        "index-gpt2": b"\x02" + gpt2.encode(),
        "index-detect": b"\x00" + gpt2.encode(),
        "index-prefix": b"!" + index.encode(),
        "bad-index-no-map": b"\x09" + b'{"metadata": {}}',
        "bad-index-unknown-key": b"\x09" + index.replace('"metadata"', '"metdata"').encode(),
        "bad-index-path": b"\x09" + b'{"weight_map": {"x": "../x.safetensors"}}',
        "bad-index-missing-shard": b"\x09" + b'{"weight_map": {"model.layers.0.self_attn.q_proj.weight": "nope.safetensors"}}',
        "config-llama": b"\x88" + config.encode(),
        "config-layer1": b"\x98" + config.encode(),
        "config-gpt2": b"\x80" + b'{"model_type": "gpt2", "n_head": 2, "n_embd": 2, "scale_attn_weights": false}',
        "config-bert": b"\x83" + b'{"model_type": "bert", "position_embedding_type": "relative_key"}',
        "config-types": b"\x89" + b'{"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 2, "partial_rotary_factor": 0.5, "head_dim": 2}',
        "bad-config-type": b"\x80" + b'{"model_type": "t5"}',
        "bad-config-list": b"\x80" + b'[1, 2]',
    }


def npz_seeds():
    """np.savez and np.savez_compressed archives, and zipfile's with data
    descriptors and ZIP64 local fields: our own arrays, each under 1 KB."""
    import zipfile

    def savez(fn, **arrays):
        b = io.BytesIO()
        fn(b, **arrays)
        return b.getvalue()

    class Stream(io.RawIOBase):
        def __init__(self):
            self.buf = bytearray()

        def writable(self):
            return True

        def write(self, b):
            self.buf += b
            return len(b)

    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    s = {
        "x.npz": savez(np.savez, X=x),
        "x-compressed.npz": savez(np.savez_compressed, X=x.astype(np.float32),
                                  tokens=np.array(["a", "b"])),
        "mask.npz": savez(np.savez_compressed, mask=np.array([[True, False], [True, True]])),
        "weights.npz": savez(np.savez, W_Q=np.eye(2), b_Q=np.zeros(2)),
        "meta.npz": savez(np.savez_compressed, meta=np.array('{"a": 1}'),
                          output=np.ones((1, 2, 2))),
    }
    for name, method in (("descriptor.npz", zipfile.ZIP_STORED),
                         ("descriptor-deflated.npz", zipfile.ZIP_DEFLATED)):
        st = Stream()
        with zipfile.ZipFile(st, "w", method) as z:
            with z.open("X.npy", "w", force_zip64=True) as m:
                m.write(npy(x))
        s[name] = bytes(st.buf)
    s["empty.npz"] = b"PK\x05\x06" + bytes(18)
    return s


def main():
    for name, data in npz_seeds().items():
        put("npz", name, data)
    for name, data in safetensors_seeds().items():
        put("safetensors", name, data)
    for name, data in safetensors_header_seeds().items():
        put("safetensors", name, data)
    for name, data in model_seeds().items():
        put("model", name, data)
    for name, text in JSON.items():
        put("json", name, text)
    for name, text in CSV.items():
        put("csv", name, text)
    for name, data in npy_seeds().items():
        put("npy", name, data)

    w2 = [[1, 0], [0, 1]]
    weights = {
        "mha.json": '{"W_Q": %s, "W_K": %s, "W_V": %s, "W_O": %s, "b_Q": [0, 1], '
                    '"b_O": [[1, 2]]}' % (w2, w2, w2, w2),
        "per-head.json": '{"W_Q": [[[1], [0]], [[0], [1]]], "W_K": [[[1], [2]], [[3], [4]]], '
                         '"W_V": [[1, 2], [3, 4]], "W_O": [[[1, 2]], [[3, 4]]], '
                         '"b_Q": [[1], [2]]}',
        "names.json": '{"WQ": [[1]], "w^k": [[2]], "Wv": [[3]], "wo": [[4]], "B_q": [1]}',
        "torch.json": '{"in_proj_weight": [[1, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, 0]], '
                      '"in_proj_bias": [0, 0, 0, 1, 1, 1], "out_proj.weight": %s, '
                      '"out_proj.bias": [0, 0]}' % (w2,),
        "torch-prefix.json": '{"self_attn.q_proj_weight": [[1, 2]], "self_attn.k_proj_weight": '
                             '[[1, 2]], "self_attn.v_proj_weight": [[3, 4]]}',
        "bad-twice.json": '{"W_Q": [[1]], "WQ": [[2]]}',
        "bad-name.json": '{"W_X": [[1]]}',
        "bad-bias-kv.json": '{"bias_k": [[1]]}',
        "bad-in-proj.json": '{"in_proj_weight": [[1, 2], [3, 4]], "W_Q": [[1]]}',
        "bad-bias-rows.json": '{"W_Q": [[1, 2]], "b_Q": [[1, 2], [3, 4], [5, 6]]}',
        "bad-vector.json": '{"W_Q": [1, 2]}',
        "bad-array.json": "[[1]]",
        "bad-empty.json": "{}",
        "bad-csv.json": "W_Q\n1,2\n",
    }
    for name, text in weights.items():
        put("weights", name, text)

    # the first byte names the file: 0 fuzz, 1 fuzz.json, 3 fuzz.csv, 4 fuzz.npy
    put("format", "json", b"\x00" + JSON["x-object.json"].encode())
    put("format", "json-named-csv", b"\x01" + CSV["x.csv"].encode())
    put("format", "csv", b"\x03" + CSV["savetxt.csv"].encode())
    put("format", "csv-bom", b"\x00" + CSV["bom.csv"].encode("utf-8"))
    put("format", "npy", b"\x04" + npy_seeds()["f4-fortran.npy"])
    put("format", "csv-labels", b"\x03" + CSV["labels.csv"].encode())
    put("format", "blank", b"\x00 \r\n\t ")
    put("format", "bom-only", b"\x02\xef\xbb\xbf\n")
    put("format", "npz", b"\x00" + npz_seeds()["x-compressed.npz"])

    args = {
        "forward": "-x\nx.json\n-w\nw.json\n--heads\n2\n--causal\n--print\nall",
        "direct": "--q\nq.csv\n--k\nk.npy\n--v\nv.json\n--wo\nwo.csv\n--bo\nbo.csv",
        "stdin-twice": "-x\n-\n--mask\n-",
        "help": "--help",
        "kv-heads": "-x\nx\n--kv-heads\n3\n--heads\n2",
        "softcap": "-x\nx\n--causal=-3\n--softcap\n30\n--print\nsoftcapped,scores\n--scale\n0.5",
        "f32": "-x\nx\n--dtype\nf32\n--exact\n--threads\n4097",
        "precision": "-x\nx\n--precision\n18\n-f\nmd\n-o\nout.npy",
        "torch": "--layout\ntorch\n-o\nout.json\n-x\nx\n--kv\nkv\n--kv-len\n2\n--scale=dmodel",
        "init": "-x\nx.csv\n-w\nw\n--n\n4\n--d-model\n8\n--heads\n2\n--bias\n--d-k\n3",
        "init-kv": "-x\nx.npy\n--kv\nkv.npy\n--kv-n\n3\n-f\nnpy\n--seed\n42\n--d-v\n5",
        "init-clash": "-x\nx\n-w\nx\n--d-out\n3\n--no-wo",
        "missing": "-x",
        "unknown": "-q\n--nope\nstray",
        "tokens": "-x\nx\n--tokens\nThe,bear\n--kv-tokens\na,b\n--max-memory\n1.5GiB\n--color",
        "explain": "-x\nx\n--explain\n--cell\n1,2\n--colour=never\n--max-memory\nnone",
        "batch": "-x\nx\n--kv-len\n5,3,4\n--sequence\n2\n--explain\n--mask\nm.npy",
        "nul-separated": b"-x\0x\0--causal\0bottom-right\0--seed\0" + b"18446744073709551616",
        "mask-bool": "-x\nx\n--mask\nm.json\n--mask-bool\nblock\n--causal",
        "mask-bool-attend": "-x\nx\n--mask-bool=attend\n--mask\n-\n-p\nmask,masked",
        "mask-bool-no-mask": "-x\nx\n--mask-bool\nblock",
        "mask-bool-bad": "-x\nx\n--mask\nm.csv\n--mask-bool\ntrue",
        "npz": "-x\nx\n-p\nall\n-o\nrun.npz",
        "npz-format": "-x\nx.npz\n-f\nnpz\n--mask\nm.npy\n--mask-bool\nblock\n-o\nout/",
        "checkpoint": "-x\nx.npy\n-w\nmodel\n--layer\n3\n--config\nconfig.json\n-f\nnpz",
    }
    for name, text in args.items():
        put("args", name, text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ort_models.py DIR N D_MODEL HEADS CAUSAL(0|1): the ONNX Runtime peer's models.

Reads the problem bench_mha wrote with --dump DIR (float32: x.bin, W_Q.bin …
b_O.bin) and writes three ONNX models of the same self-attention layer into
DIR, one per form of attention ONNX Runtime offers on the CPU:

  mha.onnx        MatMul+Add projections around com.microsoft.MultiHeadAttention
  attention.onnx  MatMul+Add projections around ai.onnx Attention (opset 23)
  fused.onnx      com.microsoft.Attention (the projections inside), then W_O

each with input "x" (1, N, D_MODEL) and output "y" (1, N, D_MODEL), the
weights as initializers.  Debian's python3-onnx (1.12) does not know opset
23 nor the contrib ops: the nodes are built by hand, the opset imports set
explicitly, and the checker is not run (ONNX Runtime checks on loading).
Prints the file names written, one a line.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

# ONNX Runtime 1.30 reads IR version 10 models (opset 23 needs it)
IR_VERSION = 10


def load(d, name, shape):
    return np.fromfile(os.path.join(d, name + ".bin"), dtype="<f4").reshape(shape)


def model(nodes, inits, n, dm, opsets, name):
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n, dm])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n, dm])],
        [numpy_helper.from_array(a, k) for k, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(dom, v)
                                                for dom, v in opsets])
    m.ir_version = IR_VERSION
    return m


def projections(which):
    """x·W + b for each of which ("Q", "K", "V"): MatMul and Add nodes"""
    nodes = []
    for p in which:
        nodes.append(helper.make_node("MatMul", ["x", "W_" + p], ["xw_" + p]))
        nodes.append(helper.make_node("Add", ["xw_" + p, "b_" + p], [p]))
    return nodes


def output(concat):
    return [helper.make_node("MatMul", [concat, "W_O"], ["cw"]),
            helper.make_node("Add", ["cw", "b_O"], ["y"])]


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: ort_models.py DIR N D_MODEL HEADS CAUSAL")
    d = sys.argv[1]
    n, dm, h, causal = (int(a) for a in sys.argv[2:])
    w = {k: load(d, k, (dm, dm)) for k in ("W_Q", "W_K", "W_V", "W_O")}
    b = {k: load(d, k, (dm,)) for k in ("b_Q", "b_K", "b_V", "b_O")}
    scale = 1.0 / float(np.sqrt(dm // h))
    written = []

    # 1. com.microsoft.MultiHeadAttention between MatMuls
    nodes = projections("QKV") + [
        helper.make_node("MultiHeadAttention", ["Q", "K", "V"], ["concat"], domain="com.microsoft",
                         num_heads=h, scale=scale, unidirectional=causal)] + output("concat")
    m = model(nodes, {**w, **b}, n, dm, [("", 17), ("com.microsoft", 1)], "mha")
    written.append("mha.onnx")
    save(m, os.path.join(d, written[-1]))

    # 2. ai.onnx Attention (opset 23): Q, K, V as (B, S, heads·d_k)
    nodes = projections("QKV") + [
        helper.make_node("Attention", ["Q", "K", "V"], ["concat"], q_num_heads=h,
                         kv_num_heads=h, scale=scale, is_causal=causal)] + output("concat")
    m = model(nodes, {**w, **b}, n, dm, [("", 23)], "attention")
    written.append("attention.onnx")
    save(m, os.path.join(d, written[-1]))

    # 3. com.microsoft.Attention: the input projection inside, weights (D, 3D), bias (3D)
    inits = {"W_QKV": np.concatenate([w["W_Q"], w["W_K"], w["W_V"]], axis=1),
             "b_QKV": np.concatenate([b["b_Q"], b["b_K"], b["b_V"]]),
             "W_O": w["W_O"], "b_O": b["b_O"]}
    nodes = [helper.make_node("Attention", ["x", "W_QKV", "b_QKV"], ["concat"],
                              domain="com.microsoft", num_heads=h, scale=scale,
                              unidirectional=causal)] + output("concat")
    m = model(nodes, inits, n, dm, [("", 17), ("com.microsoft", 1)], "fused")
    written.append("fused.onnx")
    save(m, os.path.join(d, written[-1]))
    print("\n".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())

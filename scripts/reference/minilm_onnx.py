#!/usr/bin/env python3
"""Build an ONNX graph of all-MiniLM-L6-v2 directly from its safetensors
weights and config.json, with onnx.helper: no PyTorch, no exporter, no
downloaded .onnx (none of the registries this project can reach carries one).

    /tmp/minilm-ref/bin/python scripts/reference/minilm_onnx.py \
        [--model-dir DIR] [--out FILE] [--opset 17] [--external]

--external writes the graph docflow runs (`server/models/all-minilm-l6-v2.onnx`,
committed): its weights are not copied into it but read by onnxruntime from
the model.safetensors beside it, each initializer an external-data reference
(offset, length) into that file, whose SHA-256 scripts/fetch-model.sh pins.
A dense layer's weight is then used as stored, [out, in], through a
Transpose node that onnxruntime folds into a constant when the session
starts. The graph's nodes and small constants make a few kilobytes.

Inputs  input_ids, attention_mask, token_type_ids: int64 [batch, sequence]
Output  last_hidden_state: float32 [batch, sequence, hidden]
Both axes are dynamic. The graph is the BERT of minilm_reference.py, in
float32: word + position + token-type embeddings, LayerNormalization,
post-LayerNorm encoder layers of multi-head self-attention (additive mask
(1 - mask) * -1e4 over keys, broadcast over heads and queries, Softmax) and
an exact erf GELU feed-forward. Pooling and normalisation are left to the
caller (see throughput.py). Check it against the float64 reference with

    /tmp/minilm-ref/bin/python scripts/reference/minilm_reference.py \
        --out /tmp/minilm-ref/check.json --onnx /tmp/minilm-ref/all-minilm-l6-v2.onnx
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_reference import default_model_dir, load_safetensors  # noqa: E402

MASK_VALUE = -1e4  # added to the scores of padded keys; exp() of it is 0 in float32


def graph_name(name):
    """A safetensors name as minilm_reference.MiniLM names it ("bert." stripped, gamma/beta renamed)."""
    name = name[len("bert."):] if name.startswith("bert.") else name
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def load_weights(model_dir):
    """float32 weights by graph_name."""
    w = {}
    for name, t in load_safetensors(Path(model_dir) / "model.safetensors").items():
        if t.dtype.kind != "f":
            continue
        w[graph_name(name)] = np.ascontiguousarray(t, dtype=np.float32)
    return w


def safetensors_extents(path):
    """(byte offset, byte length) in the file of each float32 tensor, by graph_name."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len).decode("utf-8"))
    extents = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        begin, end = info["data_offsets"]
        extents[graph_name(name)] = (8 + header_len + begin, end - begin)
    return extents


class Graph:
    def __init__(self, extents=None):
        """With extents (safetensors_extents), weights are external references into model.safetensors."""
        self.nodes, self.inits, self._n = [], [], 0
        self.extents = extents

    def name(self, hint):
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, value, hint, dtype=np.float32):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def weight(self, array, name):
        if self.extents is None:
            self.inits.append(numpy_helper.from_array(array, name))
            return name
        offset, length = self.extents[name]
        if length != array.nbytes:
            raise ValueError(f"{name}: {length} bytes in model.safetensors, {array.nbytes} expected")
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(array.shape))
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "model.safetensors"), ("offset", offset), ("length", length)):
            t.external_data.add(key=key, value=str(value))
        self.inits.append(t)
        return name

    def transposed(self, array, name):
        """array.T as a graph value: copied transposed, or the stored one through a Transpose node."""
        if self.extents is None:
            return self.weight(np.ascontiguousarray(array.T), name + "_t")
        return self.op("Transpose", [self.weight(array, name)], name + "_t", perm=[1, 0])

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def build(model_dir, opset=17, external=False):
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("hidden_act") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("expected a BERT with exact GELU and absolute positions")
    eps = float(cfg["layer_norm_eps"])
    heads, layers, hidden = int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
    head_dim = hidden // heads
    w = load_weights(model_dir)
    g = Graph(safetensors_extents(model_dir / "model.safetensors") if external else None)

    def dense(x, prefix):
        # x [B, S, in] @ W^T [in, out] + b
        wt = g.transposed(w[prefix + ".weight"], prefix + ".weight")
        b = g.weight(w[prefix + ".bias"], prefix + ".bias")
        return g.op("Add", [g.op("MatMul", [x, wt]), b])

    def layer_norm(x, prefix):
        scale = g.weight(w[prefix + ".weight"], prefix + ".weight")
        bias = g.weight(w[prefix + ".bias"], prefix + ".bias")
        return g.op("LayerNormalization", [x, scale, bias], "ln", axis=-1, epsilon=eps)

    # embeddings
    word = g.op("Gather", [g.weight(w["embeddings.word_embeddings.weight"], "embeddings.word_embeddings.weight"),
                           "input_ids"], "word", axis=0)
    seq_len = g.op("Squeeze", [g.op("Shape", ["input_ids"], "shape", start=1, end=2),
                               g.const([0], "axes0", np.int64)], "seq_len")
    positions = g.op("Range", [g.const(0, "zero", np.int64), seq_len, g.const(1, "one", np.int64)], "positions")
    pos = g.op("Gather", [g.weight(w["embeddings.position_embeddings.weight"],
                                   "embeddings.position_embeddings.weight"), positions], "pos", axis=0)
    typ = g.op("Gather", [g.weight(w["embeddings.token_type_embeddings.weight"],
                                   "embeddings.token_type_embeddings.weight"), "token_type_ids"], "type", axis=0)
    x = layer_norm(g.op("Add", [g.op("Add", [word, pos]), typ]), "embeddings.LayerNorm")

    # additive key mask [B, 1, 1, S]
    mask_f = g.op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inv = g.op("Sub", [g.const(1.0, "one_f"), mask_f], "mask_inv")
    key_bias = g.op("Unsqueeze", [g.op("Mul", [inv, g.const(MASK_VALUE, "mask_value")]),
                                  g.const([1, 2], "axes12", np.int64)], "key_bias")

    split_shape = g.const([0, 0, heads, head_dim], "split_shape", np.int64)
    merge_shape = g.const([0, 0, hidden], "merge_shape", np.int64)
    scale = g.const(1.0 / math.sqrt(head_dim), "scale")
    sqrt2 = g.const(math.sqrt(2.0), "sqrt2")
    one, half = g.const(1.0, "one_f"), g.const(0.5, "half")

    for i in range(layers):
        p = f"encoder.layer.{i}."
        q = g.op("Transpose", [g.op("Reshape", [dense(x, p + "attention.self.query"), split_shape])], "q",
                 perm=[0, 2, 1, 3])                                         # [B, h, S, d]
        k = g.op("Transpose", [g.op("Reshape", [dense(x, p + "attention.self.key"), split_shape])], "k",
                 perm=[0, 2, 3, 1])                                         # [B, h, d, S]
        v = g.op("Transpose", [g.op("Reshape", [dense(x, p + "attention.self.value"), split_shape])], "v",
                 perm=[0, 2, 1, 3])                                         # [B, h, S, d]
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), key_bias], "scores")
        probs = g.op("Softmax", [scores], "probs", axis=-1)
        ctx = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge_shape],
                   "ctx")                                                   # [B, S, H]
        x = layer_norm(g.op("Add", [x, dense(ctx, p + "attention.output.dense")]), p + "attention.output.LayerNorm")
        inter = dense(x, p + "intermediate.dense")
        gelu = g.op("Mul", [g.op("Mul", [inter, g.op("Add", [g.op("Erf", [g.op("Div", [inter, sqrt2])]), one])]),
                            half], "gelu")                                  # 0.5 * x * (1 + erf(x / sqrt 2))
        x = layer_norm(g.op("Add", [x, dense(gelu, p + "output.dense")]), p + "output.LayerNorm")

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))

    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes, "all-minilm-l6-v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
         for n in ("input_ids", "attention_mask", "token_type_ids")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [hidden])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="docflow scripts/reference/minilm_onnx.py")
    model.ir_version = 8  # the IR of opset 17: readable by onnxruntime >= 1.13
    model.doc_string = "all-MiniLM-L6-v2 (sentence-transformers), built from model.safetensors; " \
                       "mean-pool last_hidden_state over attention_mask and L2-normalise for embeddings"
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=default_model_dir())
    ap.add_argument("--out", type=Path, default=Path("/tmp/minilm-ref/all-minilm-l6-v2.onnx"))
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--external", action="store_true",
                    help="read the weights from the model.safetensors beside the graph (docflow's graph)")
    args = ap.parse_args()
    if args.opset < 17:
        ap.error("LayerNormalization needs opset 17 or later")

    model = build(args.model_dir, args.opset, args.external)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    onnx.save_model(model, str(tmp))
    if args.external:
        # Checked where onnxruntime will read it: beside model.safetensors.
        beside = args.model_dir / f".check-{os.getpid()}.onnx"
        try:
            shutil.copyfile(tmp, beside)
            onnx.checker.check_model(str(beside), full_check=True)
        finally:
            beside.unlink(missing_ok=True)
    else:
        onnx.checker.check_model(str(tmp), full_check=True)
    tmp.replace(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.3f} MB, {len(model.graph.node)} nodes, "
          f"opset {args.opset}), checker passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

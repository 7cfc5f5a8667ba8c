#!/usr/bin/env python3
"""Write testdata/models/slow_classifier.onnx: a valid classifier-shaped ONNX model whose
run takes practically forever (a Loop of 2^40 iterations), to test that the engine's
deadline terminates an ONNX Runtime run (RunOptions terminate). Dev-time tool.

    pip install onnx
    python3 tools/make_slow_onnx.py
"""
import pathlib

import onnx
from onnx import TensorProto, helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
N_FEATURES = 18


def main():
    # Loop body: (iter, cond, acc) -> (cond, acc + 1)
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one_v", TensorProto.FLOAT, [], [1.0])),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, []),
        ],
    )
    nodes = [
        helper.make_node("Constant", [], ["trip"], value=helper.make_tensor("trip_v", TensorProto.INT64, [], [1 << 40])),
        helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("cond_v", TensorProto.BOOL, [], [True])),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero_v", TensorProto.FLOAT, [], [0.0])),
        helper.make_node("Loop", ["trip", "cond", "zero"], ["acc"], body=body),
        # p = sigmoid(sum(input, axis 1) * 0 + acc * 0): shape [N, 1]
        helper.make_node("ReduceSum", ["input"], ["rowsum"], keepdims=1, axes=[1]),
        helper.make_node("Constant", [], ["z"], value=helper.make_tensor("z_v", TensorProto.FLOAT, [], [0.0])),
        helper.make_node("Mul", ["rowsum", "z"], ["zeroed"]),
        helper.make_node("Mul", ["acc", "z"], ["acc0"]),
        helper.make_node("Add", ["zeroed", "acc0"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["p"]),
        helper.make_node("Constant", [], ["onef"], value=helper.make_tensor("onef_v", TensorProto.FLOAT, [], [1.0])),
        helper.make_node("Sub", ["onef", "p"], ["q"]),
        helper.make_node("Concat", ["q", "p"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "slow_classifier",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, N_FEATURES])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    out = ROOT / "testdata" / "models" / "slow_classifier.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(model.SerializeToString())
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

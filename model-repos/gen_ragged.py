#!/usr/bin/env python3
"""Deterministic generator for the ragged-batching model repository (model-repos/ragged/).

    scripts/env.sh python model-repos/gen_ragged.py            # (re)write model-repos/ragged/
    scripts/env.sh python model-repos/gen_ragged.py --out DIR  # write somewhere else

ragged_onnx: an ONNX model whose graph consumes one batch input of every `batch_input` kind and a
ragged input, so a test can read back what the server computed for a batch of requests:
  INPUT0      FP32 ragged (allow_ragged_batch): the model sees all requests' elements as one flat [N]
  COUNT       BATCH_ELEMENT_COUNT                      INT32 [R]      -> COUNT_OUT   [R, 1]
  ACC         BATCH_ACCUMULATED_ELEMENT_COUNT          INT32 [R]      -> ACC_OUT     [R, 1]
  ACC0        BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO FP32 [R + 1]  -> ACC0_HEAD   [R, 1] (ACC0[0:R])
                                                                         ACC0_TAIL   [R, 1] (ACC0[1:])
  MAXC        BATCH_MAX_ELEMENT_COUNT_AS_SHAPE         INT32 [max]    -> MAX_OUT     [R, 1] (its length)
  ISHAPE      BATCH_ITEM_SHAPE                         INT32 [R, 1]   -> ISHAPE_OUT  [R, 1]
  ISHAPE_F    BATCH_ITEM_SHAPE_FLATTEN                 INT32 [R]      -> ISHAPE_F_OUT [R, 1]
  OUTPUT0 = INPUT0 * 2, flat [N], scattered back with INPUT0's shape (BATCH_SCATTER_WITH_INPUT_SHAPE).
R is the number of requests in the batch (each of batch size 1, shape [1, k]); every output but
OUTPUT0 has one row per request, so the batcher splits it like any batched output.
"""

from __future__ import annotations

import argparse
import os

import onnx
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ragged")

CONFIG = """# Ragged batching: see model-repos/gen_ragged.py for what each tensor holds.
name: "ragged_onnx"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "INPUT0" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "ACC" data_type: TYPE_INT32 source_input: "INPUT0" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "ACC0" data_type: TYPE_FP32 source_input: "INPUT0" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "MAXC" data_type: TYPE_INT32 source_input: "INPUT0" },
  { kind: BATCH_ITEM_SHAPE target_name: "ISHAPE" data_type: TYPE_INT32 source_input: "INPUT0" },
  { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "ISHAPE_F" data_type: TYPE_INT32 source_input: "INPUT0" }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "COUNT_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ACC0_HEAD" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "ACC0_TAIL" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "MAX_OUT" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "ISHAPE_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ISHAPE_F_OUT" data_type: TYPE_INT32 dims: [ 1 ] }
]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT0" source_input: "INPUT0" } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 }
"""


def _const(name: str, values: list[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(values)], values))


def graph() -> onnx.GraphProto:
    f, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("INPUT0", f, ["N"]),
        helper.make_tensor_value_info("COUNT", i32, ["R"]),
        helper.make_tensor_value_info("ACC", i32, ["R"]),
        helper.make_tensor_value_info("ACC0", f, ["R1"]),
        helper.make_tensor_value_info("MAXC", i32, ["M"]),
        helper.make_tensor_value_info("ISHAPE", i32, ["R", 1]),
        helper.make_tensor_value_info("ISHAPE_F", i32, ["R"]),
    ]
    rows = ["R", 1]
    outputs = [
        helper.make_tensor_value_info("OUTPUT0", f, ["N"]),
        helper.make_tensor_value_info("COUNT_OUT", i32, rows),
        helper.make_tensor_value_info("ACC_OUT", i32, rows),
        helper.make_tensor_value_info("ACC0_HEAD", f, rows),
        helper.make_tensor_value_info("ACC0_TAIL", f, rows),
        helper.make_tensor_value_info("MAX_OUT", i64, rows),
        helper.make_tensor_value_info("ISHAPE_OUT", i32, rows),
        helper.make_tensor_value_info("ISHAPE_F_OUT", i32, rows),
    ]
    nodes = [
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", f, [], [2.0])),
        helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"]),
        _const("axis1", [1]),
        _const("zero", [0]),
        _const("one", [1]),
        _const("minus1", [-1]),
        _const("big", [1 << 30]),
        helper.make_node("Unsqueeze", ["COUNT", "axis1"], ["COUNT_OUT"]),
        helper.make_node("Unsqueeze", ["ACC", "axis1"], ["ACC_OUT"]),
        helper.make_node("Slice", ["ACC0", "zero", "minus1"], ["acc0_head"]),
        helper.make_node("Unsqueeze", ["acc0_head", "axis1"], ["ACC0_HEAD"]),
        helper.make_node("Slice", ["ACC0", "one", "big"], ["acc0_tail"]),
        helper.make_node("Unsqueeze", ["acc0_tail", "axis1"], ["ACC0_TAIL"]),
        # MAXC carries its information in its shape: broadcast its length to one row per request.
        helper.make_node("Shape", ["MAXC"], ["maxc_len"]),
        helper.make_node("Shape", ["COUNT"], ["r"]),
        helper.make_node("Concat", ["r", "one"], ["r_by_1"], axis=0),
        helper.make_node("Expand", ["maxc_len", "r_by_1"], ["MAX_OUT"]),
        helper.make_node("Identity", ["ISHAPE"], ["ISHAPE_OUT"]),
        helper.make_node("Unsqueeze", ["ISHAPE_F", "axis1"], ["ISHAPE_F_OUT"]),
    ]
    return helper.make_graph(nodes, "ragged_onnx", inputs, outputs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    out = ap.parse_args().out
    model = helper.make_model(graph(), opset_imports=[helper.make_opsetid("", 13)], producer_name="tritonrs-gen_ragged")
    model.ir_version = 8
    onnx.checker.check_model(model)
    d = os.path.join(out, "ragged_onnx")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    with open(os.path.join(d, "config.pbtxt"), "w") as fh:
        fh.write(CONFIG)
    onnx.save(model, os.path.join(d, "1", "model.onnx"))


if __name__ == "__main__":
    main()

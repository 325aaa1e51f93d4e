#!/usr/bin/env python3
"""Writes model-repos/onnx_options/: a tiny ONNX model whose memory use the request chooses, for the
tests of the ONNX Runtime backend's memory settings (tests/python/test_onnx_options.py).

    scripts/env.sh python model-repos/gen_onnx_options.py          # (re)write model-repos/onnx_options/
    scripts/env.sh python model-repos/gen_onnx_options.py --check  # the files on disk are what this writes

`big_intermediate`: COUNT (INT64 [1]) -> ConstantOfShape(1.0) -> Neg -> ReduceSum -> SUM (FP32 [1]).
A request of 8 bytes makes ONNX Runtime allocate two FP32 tensors of COUNT elements in its CPU
allocator (the arena, unless `enable_mem_arena` is off), so the server's RSS after a request shows what
the arena kept, without request or response buffers of that size. SUM is -COUNT.
"""

from __future__ import annotations

import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_options")

CONFIG = """name: "big_intermediate"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def model() -> bytes:
    nodes = [
        helper.make_node("ConstantOfShape", ["COUNT"], ["ONES"], name="ones",
                         value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Neg", ["ONES"], ["NEG"], name="neg"),
        helper.make_node("ReduceSum", ["NEG"], ["SUM"], name="sum", keepdims=1),
    ]
    graph = helper.make_graph(
        nodes, "big_intermediate",
        [helper.make_tensor_value_info("COUNT", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("SUM", TensorProto.FLOAT, [1])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="tritonrs-gen_onnx_options", producer_version="1")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m.SerializeToString()


def files() -> dict[str, bytes]:
    return {"big_intermediate/config.pbtxt": CONFIG.encode(), "big_intermediate/1/model.onnx": model()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare the files on disk instead of writing")
    args = ap.parse_args(argv)
    bad = 0
    for rel, data in files().items():
        path = os.path.join(OUT, rel)
        if args.check:
            with open(path, "rb") as f:
                if f.read() != data:
                    print(f"{path} differs from what the generator writes", file=sys.stderr)
                    bad += 1
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Generator for model-repos/openvino/: tiny OpenVINO IR models for the openvino backend's tests,
written with OpenVINO's own Python API (`ov.save_model`, from PyPI's `openvino`).

    scripts/env.sh python model-repos/gen_openvino.py     # (re)write model-repos/openvino/

- `ov_affine`: y = relu(x @ W + b), x FP32 [-1, 4] -> y FP32 [-1, 3] (batch dimension dynamic), plus
  `sum` = the sum of x over its last axis, FP32 [-1, 1]; W and b are fixed numbers (a few dozen bytes of
  weights in model.bin), so a test can check that the weights were read.
- `ov_int`: z = a * 3 + 1, a INT32 [-1, 2] -> z INT32 [-1, 2] (a second datatype).
- `ov_static`: y = x * 2 + 1 with a fixed batch of 1, x FP32 [1, 4] -> y FP32 [1, 4], as models exported
  with batch 1 are; its configuration's max_batch_size makes the backend give it a dynamic batch.

The tests compare the server's outputs with OpenVINO's Python runtime on the same files, so the
numbers here need not be recomputed anywhere else. The IR's `rt_info` names the OpenVINO version that
wrote it; rerunning with another version changes only that.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import openvino as ov
import openvino.opset13 as ops

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openvino")


def named(node, name: str):
    """Gives `node`'s first output the tensor name clients use."""
    node.output(0).set_names({name})
    return node


def ov_affine() -> ov.Model:
    x = ops.parameter([-1, 4], np.float32, name="x")
    named(x, "x")
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0 - 0.5
    b = np.array([0.25, -1.0, 0.5], dtype=np.float32)
    y = named(ops.relu(ops.add(ops.matmul(x, ops.constant(w), False, False), ops.constant(b))), "y")
    s = named(ops.reduce_sum(x, ops.constant(np.array([1], dtype=np.int64)), keep_dims=True), "sum")
    return ov.Model([y, s], [x], "ov_affine")


def ov_int() -> ov.Model:
    a = ops.parameter([-1, 2], np.int32, name="a")
    named(a, "a")
    z = named(ops.add(ops.multiply(a, ops.constant(np.int32(3))), ops.constant(np.int32(1))), "z")
    return ov.Model([z], [a], "ov_int")


def ov_static() -> ov.Model:
    x = ops.parameter([1, 4], np.float32, name="x")
    named(x, "x")
    y = named(ops.add(ops.multiply(x, ops.constant(np.float32(2))), ops.constant(np.float32(1))), "y")
    return ov.Model([y], [x], "ov_static")


CONFIGS = {
    "ov_affine": """name: "ov_affine"
backend: "openvino"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "y" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "sum" data_type: TYPE_FP32 dims: [ 1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
""",
    # Inputs, outputs and max_batch_size come from the model (auto-complete).
    "ov_int": """backend: "openvino"
""",
    # The model's batch is 1; max_batch_size asks for batches up to 4.
    "ov_static": """name: "ov_static"
backend: "openvino"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
""",
}


def main() -> None:
    for name, make in (("ov_affine", ov_affine), ("ov_int", ov_int), ("ov_static", ov_static)):
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "1"))
        ov.save_model(make(), os.path.join(d, "1", "model.xml"), compress_to_fp16=False)
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(CONFIGS[name])
        print(f"wrote {d}")


if __name__ == "__main__":
    main()

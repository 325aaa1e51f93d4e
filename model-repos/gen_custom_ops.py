#!/usr/bin/env python3
"""Deterministic generator for model-repos/custom_ops/: models that need an ONNX Runtime custom-operation
library, for the `model_operations { op_library_filename }` tests.

    scripts/env.sh python model-repos/gen_custom_ops.py           # (re)write model-repos/custom_ops/
    scripts/env.sh python model-repos/gen_custom_ops.py --check   # verify the files on disk

- `string_upper`: OUTPUT = StringUpper(INPUT), a STRING tensor of shape [-1], with the `StringUpper`
  operator of onnxruntime-extensions (domain `ai.onnx.contrib`). Its config.pbtxt names no library:
  where the library is differs per machine, so the tests add `model_operations` themselves.

Built with the `onnx` helper API only, like gen_models.py (opset 13, ir_version 8, fixed producer).
"""

from __future__ import annotations

import argparse
import os
import sys

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "custom_ops")
CONTRIB = "ai.onnx.contrib"


def model_string_upper() -> bytes:
    s = TensorProto.STRING
    graph = helper.make_graph(
        nodes=[helper.make_node("StringUpper", ["INPUT"], ["OUTPUT"], name="upper", domain=CONTRIB)],
        name="string_upper",
        inputs=[helper.make_tensor_value_info("INPUT", s, ["N"])],
        outputs=[helper.make_tensor_value_info("OUTPUT", s, ["N"])],
        doc_string="OUTPUT = StringUpper(INPUT) (onnxruntime-extensions; string tensor, [N])",
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(CONTRIB, 1)],
        producer_name="tritonrs-gen_custom_ops",
        producer_version="1",
    )
    model.ir_version = 8
    return model.SerializeToString()


CONFIG = """name: "string_upper"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def files() -> dict[str, bytes]:
    return {"string_upper/config.pbtxt": CONFIG.encode(), "string_upper/1/model.onnx": model_string_upper()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify the files on disk instead of writing them")
    args = ap.parse_args(argv)
    gen_models.write_or_check(OUT, files(), args.check, "gen_custom_ops.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

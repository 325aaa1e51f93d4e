#!/usr/bin/env python3
"""Deterministic generator for the example Triton model repository (model-repos/examples/).

    scripts/env.sh python model-repos/gen_models.py            # (re)write model-repos/examples/
    scripts/env.sh python model-repos/gen_models.py --out DIR  # write somewhere else
    scripts/env.sh python model-repos/gen_models.py --check    # verify the files on disk are exactly
                                                               # what this script writes, then run every
                                                               # model in ONNX Runtime and check outputs

Only the `onnx` helper API is used to build the graphs. Every model is opset 13 with
ir_version 8 (loadable by ONNX Runtime >= 1.17), a fixed producer name and no random data,
so the output is byte-for-byte reproducible. See model-repos/README.md for the semantics.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys

import onnx
from onnx import TensorProto, helper

OPSET = 13
IR_VERSION = 8
PRODUCER_NAME = "tritonrs-gen_models"
PRODUCER_VERSION = "1"

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")

# classifier: OUTPUT = INPUT @ CLASSIFIER_WEIGHTS, rows = the 4 input features, columns = the
# 5 classes in labels.txt order. All values are dyadic fractions, so every score for small
# integer inputs is exact in FP32. Each one-hot input selects its own class with a distinct
# runner-up order; the "horse" column is constant, so [1,1,1,1] selects horse.
CLASSIFIER_LABELS = ["cat", "dog", "bird", "fish", "horse"]
CLASSIFIER_WEIGHTS = [
    #  cat   dog   bird  fish  horse
    [4.0, 1.0, 0.5, 0.25, 3.0],  # feature 0 -> cat
    [0.5, 4.0, 2.0, 0.25, 3.0],  # feature 1 -> dog
    [2.0, 0.25, 4.0, 1.0, 3.0],  # feature 2 -> bird
    [1.0, 2.0, 0.25, 4.0, 3.0],  # feature 3 -> fish
]

MULTI_VERSIONS = (1, 2, 3)

# preprocess: NORMALIZED = (RAW - PREPROCESS_OFFSET) * PREPROCESS_SCALE, so raw readings of 1 and 3
# become the 0 and 1 the classify weights expect (e.g. [3,1,1,1] -> [1,0,0,0] -> cat). Exact in FP32.
PREPROCESS_OFFSET = 1.0
PREPROCESS_SCALE = 0.5


# ---------------------------------------------------------------------------------------------
# ONNX graphs
# ---------------------------------------------------------------------------------------------


def _model(graph: onnx.GraphProto, model_version: int = 1) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER_NAME,
        producer_version=PRODUCER_VERSION,
    )
    model.ir_version = IR_VERSION
    model.model_version = model_version
    onnx.checker.check_model(model, full_check=True)
    return model


def _vi(name: str, elem_type: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def model_simple() -> onnx.ModelProto:
    i32 = TensorProto.INT32
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        name="simple",
        inputs=[_vi("INPUT0", i32, ["N", 16]), _vi("INPUT1", i32, ["N", 16])],
        outputs=[_vi("OUTPUT0", i32, ["N", 16]), _vi("OUTPUT1", i32, ["N", 16])],
        doc_string="OUTPUT0 = INPUT0 + INPUT1; OUTPUT1 = INPUT0 - INPUT1 (INT32, [N, 16])",
    )
    return _model(graph)


def model_vlen_scale() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes=[helper.make_node("Mul", ["INPUT", "scale"], ["OUTPUT"], name="mul")],
        name="vlen_scale",
        inputs=[_vi("INPUT", f32, ["N", "L"])],
        outputs=[_vi("OUTPUT", f32, ["N", "L"])],
        initializer=[helper.make_tensor("scale", f32, [], [2.0])],
        doc_string="OUTPUT = INPUT * 2.0 (FP32, [N, L], both dims dynamic)",
    )
    return _model(graph)


def model_bytes_identity() -> onnx.ModelProto:
    s = TensorProto.STRING
    graph = helper.make_graph(
        nodes=[helper.make_node("Identity", ["INPUT"], ["OUTPUT"], name="identity")],
        name="bytes_identity",
        inputs=[_vi("INPUT", s, ["N", "L"])],
        outputs=[_vi("OUTPUT", s, ["N", "L"])],
        doc_string="OUTPUT = INPUT (string tensor, [N, L], both dims dynamic)",
    )
    return _model(graph)


def model_classifier() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    flat = [w for row in CLASSIFIER_WEIGHTS for w in row]
    graph = helper.make_graph(
        nodes=[helper.make_node("MatMul", ["INPUT", "weights"], ["OUTPUT"], name="matmul")],
        name="classifier",
        inputs=[_vi("INPUT", f32, ["N", 4])],
        outputs=[_vi("OUTPUT", f32, ["N", 5])],
        initializer=[helper.make_tensor("weights", f32, [4, 5], flat)],
        doc_string="OUTPUT = INPUT @ weights (FP32, [N, 4] x [4, 5]); classes: "
        + ", ".join(CLASSIFIER_LABELS),
    )
    return _model(graph)


def model_multi_version(version: int) -> onnx.ModelProto:
    i32 = TensorProto.INT32
    graph = helper.make_graph(
        nodes=[helper.make_node("Add", ["INPUT", "version"], ["OUTPUT"], name="add")],
        name="multi_version",
        inputs=[_vi("INPUT", i32, ["N", 4])],
        outputs=[_vi("OUTPUT", i32, ["N", 4])],
        initializer=[helper.make_tensor("version", i32, [], [version])],
        doc_string=f"OUTPUT = INPUT + {version} (INT32, [N, 4]); version {version}",
    )
    return _model(graph, model_version=version)


def model_preprocess() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Sub", ["RAW", "offset"], ["centered"], name="sub"),
            helper.make_node("Mul", ["centered", "scale"], ["NORMALIZED"], name="mul"),
        ],
        name="preprocess",
        inputs=[_vi("RAW", f32, ["N", 4])],
        outputs=[_vi("NORMALIZED", f32, ["N", 4])],
        initializer=[
            helper.make_tensor("offset", f32, [], [PREPROCESS_OFFSET]),
            helper.make_tensor("scale", f32, [], [PREPROCESS_SCALE]),
        ],
        doc_string=f"NORMALIZED = (RAW - {PREPROCESS_OFFSET}) * {PREPROCESS_SCALE} (FP32, [N, 4]); first step of ensemble_classify",
    )
    return _model(graph)


def model_classify_logits() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    flat = [w for row in CLASSIFIER_WEIGHTS for w in row]
    graph = helper.make_graph(
        nodes=[helper.make_node("MatMul", ["FEATURES", "weights"], ["LOGITS"], name="matmul")],
        name="classify_logits",
        inputs=[_vi("FEATURES", f32, ["N", 4])],
        outputs=[_vi("LOGITS", f32, ["N", 5])],
        initializer=[helper.make_tensor("weights", f32, [4, 5], flat)],
        doc_string="LOGITS = FEATURES @ weights (FP32, [N, 4] x [4, 5], the classifier's weights); second step of "
        "ensemble_classify",
    )
    return _model(graph)


def model_autocomplete_add() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes=[helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT"], name="add")],
        name="autocomplete_add",
        inputs=[_vi("INPUT0", f32, ["N", 8]), _vi("INPUT1", f32, ["N", 8])],
        outputs=[_vi("OUTPUT", f32, ["N", 8])],
        doc_string="OUTPUT = INPUT0 + INPUT1 (FP32, [N, 8]); no config.pbtxt on purpose",
    )
    return _model(graph)


BATCHED_WIDTH = 256
BATCHED_ROUNDS = 3


def model_batched_scale() -> onnx.ModelProto:
    """OUTPUT = INPUT * 2, plus a fixed cost per execution that does not grow with the batch.

    The first row of the batch drives BATCHED_ROUNDS [256x256] @ [256x256] products whose sum is
    multiplied by 0 and added to the output: ORT cannot fold it away (it depends on the input), and it
    costs about the same for a batch of 1 or 16, which is the kind of model dynamic batching is for.
    """
    f32 = TensorProto.FLOAT
    i64 = TensorProto.INT64
    w = BATCHED_WIDTH
    nodes = [
        helper.make_node("Slice", ["INPUT", "zero", "one", "zero"], ["head"], name="first_row"),
        helper.make_node("ConstantOfShape", ["w1_shape"], ["w1"], value=helper.make_tensor("v", f32, [1], [1 / 1024])),
        helper.make_node("ConstantOfShape", ["w2_shape"], ["w2"], value=helper.make_tensor("v", f32, [1], [1 / 1024])),
        helper.make_node("MatMul", ["head", "w1"], ["h"], name="widen"),
        helper.make_node("Expand", ["h", "w2_shape"], ["m0"], name="square"),
    ]
    for r in range(BATCHED_ROUNDS):
        nodes.append(helper.make_node("MatMul", [f"m{r}", "w2"], [f"m{r + 1}"], name=f"cost{r}"))
    nodes += [
        helper.make_node("ReduceSum", [f"m{BATCHED_ROUNDS}"], ["total"], keepdims=0, name="total"),
        helper.make_node("Mul", ["total", "zero_f"], ["nothing"], name="discard"),
        helper.make_node("Mul", ["INPUT", "two"], ["scaled"], name="scale"),
        helper.make_node("Add", ["scaled", "nothing"], ["OUTPUT"], name="output"),
    ]
    graph = helper.make_graph(
        nodes=nodes,
        name="batched_scale",
        inputs=[_vi("INPUT", f32, ["N", 16])],
        outputs=[_vi("OUTPUT", f32, ["N", 16])],
        initializer=[
            helper.make_tensor("zero", i64, [1], [0]),
            helper.make_tensor("one", i64, [1], [1]),
            helper.make_tensor("w1_shape", i64, [2], [16, w]),
            helper.make_tensor("w2_shape", i64, [2], [w, w]),
            helper.make_tensor("zero_f", f32, [], [0.0]),
            helper.make_tensor("two", f32, [], [2.0]),
        ],
        doc_string="OUTPUT = INPUT * 2 (FP32, [N, 16]) after a fixed per-execution cost",
    )
    return _model(graph)


def model_sequence_accumulate() -> onnx.ModelProto:
    """Stateful accumulator for the sequence batcher (direct strategy, batching).

    The server feeds START/END (INT32), READY (FP32) and CORRID (UINT64) control inputs and the
    implicit state ACC_IN; the model cannot keep anything between runs itself. Per batch row:
    ACC_OUT = INPUT + (1 - START) * ACC_IN (so START resets the sum), OUTPUT = ACC_OUT,
    SIGNALS = [START, END, READY] as INT32 and CORRID_OUT = CORRID, so a client sees exactly which
    control values its request was given.
    """
    i32, f32, u64 = TensorProto.INT32, TensorProto.FLOAT, TensorProto.UINT64
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Sub", ["one", "START"], ["keep"], name="keep"),
            helper.make_node("Mul", ["keep", "ACC_IN"], ["carried"], name="carried"),
            helper.make_node("Add", ["INPUT", "carried"], ["ACC_OUT"], name="accumulate"),
            helper.make_node("Identity", ["ACC_OUT"], ["OUTPUT"], name="output"),
            helper.make_node("Cast", ["READY"], ["ready_i32"], name="ready_i32", to=i32),
            helper.make_node("Concat", ["START", "END", "ready_i32"], ["SIGNALS"], name="signals", axis=1),
            helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"], name="corrid"),
        ],
        name="sequence_accumulate",
        inputs=[
            _vi("INPUT", i32, ["N", 1]),
            _vi("START", i32, ["N", 1]),
            _vi("END", i32, ["N", 1]),
            _vi("READY", f32, ["N", 1]),
            _vi("CORRID", u64, ["N", 1]),
            _vi("ACC_IN", i32, ["N", 1]),
        ],
        outputs=[
            _vi("OUTPUT", i32, ["N", 1]),
            _vi("ACC_OUT", i32, ["N", 1]),
            _vi("SIGNALS", i32, ["N", 3]),
            _vi("CORRID_OUT", u64, ["N", 1]),
        ],
        initializer=[helper.make_tensor("one", i32, [], [1])],
        doc_string="ACC_OUT = OUTPUT = INPUT + (1 - START) * ACC_IN; SIGNALS = [START, END, READY]; "
        "CORRID_OUT = CORRID (sequence batcher with control inputs and implicit state)",
    )
    return _model(graph)


def model_sequence_state() -> onnx.ModelProto:
    """Implicit state only: OUTPUT = STATE_OUT = STATE_IN + INPUT (INT32, [1], no batch dimension)."""
    i32 = TensorProto.INT32
    graph = helper.make_graph(
        nodes=[
            helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"], name="add"),
            helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"], name="state"),
        ],
        name="sequence_state",
        inputs=[_vi("INPUT", i32, [1]), _vi("STATE_IN", i32, [1])],
        outputs=[_vi("OUTPUT", i32, [1]), _vi("STATE_OUT", i32, [1])],
        doc_string="OUTPUT = STATE_OUT = STATE_IN + INPUT (INT32, [1]); the server keeps the state",
    )
    return _model(graph)


SEQUENCE_ACCUMULATE_BATCHING = """sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    {
      name: "START"
      control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "END"
      control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "READY"
      control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "CORRID"
      control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ]
    }
  ]
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
    }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

SEQUENCE_STATE_BATCHING = """sequence_batching {
  max_sequence_idle_microseconds: 5000000
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state {
        data_type: TYPE_INT32
        dims: [ 1 ]
        zero_data: true
        name: "zero"
      }
    }
  ]
}
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


# ---------------------------------------------------------------------------------------------
# config.pbtxt (Triton text format, colon-less list style)
# ---------------------------------------------------------------------------------------------


# image_classifier: PROBS = the mean of each colour channel of IMAGE ([N,3,8,8] FP32, already scaled to
# 0..1 by the server's image pre-processing, `image.scale` 1/255), so a solid red picture scores
# [1, 0, 0] -> "red" and every score is an exact function of the pixels.
IMAGE_CLASSIFIER_LABELS = ["red", "green", "blue"]
IMAGE_CLASSIFIER_SIZE = 8

# image_detector: a YOLOv8-shaped detector ([N, boxes, 4 + classes], cx, cy, w, h in input pixels) whose
# boxes are constants and whose class scores are the colour channel means times a per-box factor, so
# the boxes a picture yields in its own pixels depend only on the letterbox that maps it to 32x32:
#   box 0: cx 16, cy 16, w 16, h 8   (x 8..24, y 12..20), scores = channel means
#   box 1: cx 17, cy 16, w 16, h 8   (IoU 0.88 with box 0), scores = 0.9 x means: NMS removes it
#   box 2: cx 4,  cy 28, w 8,  h 8   (x 0..8, y 24..32),  scores = 0.5 x means
# A 320x240 picture letterboxes at scale 0.1 with 4 rows of padding above and below, so box 0 is
# x 80..240, y 80..160 in its pixels and box 2 is x 0..80, y 200..280, clamped to 240.
IMAGE_DETECTOR_LABELS = ["red", "green", "blue"]
IMAGE_DETECTOR_SIZE = 32
IMAGE_DETECTOR_BOXES = [[16.0, 16.0, 16.0, 8.0], [17.0, 16.0, 16.0, 8.0], [4.0, 28.0, 8.0, 8.0]]
IMAGE_DETECTOR_FACTORS = [1.0, 0.9, 0.5]


def model_image_classifier() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    n = IMAGE_CLASSIFIER_SIZE
    graph = helper.make_graph(
        nodes=[helper.make_node("ReduceMean", ["IMAGE"], ["PROBS"], axes=[2, 3], keepdims=0, name="channel_mean")],
        name="image_classifier",
        inputs=[_vi("IMAGE", f32, ["N", 3, n, n])],
        outputs=[_vi("PROBS", f32, ["N", 3])],
        doc_string="PROBS = the mean of each channel of IMAGE (FP32 NCHW [N, 3, 8, 8]); classes: "
        + ", ".join(IMAGE_CLASSIFIER_LABELS),
    )
    return _model(graph)


def model_image_detector() -> onnx.ModelProto:
    f32 = TensorProto.FLOAT
    i64 = TensorProto.INT64
    n = IMAGE_DETECTOR_SIZE
    boxes = len(IMAGE_DETECTOR_BOXES)
    classes = len(IMAGE_DETECTOR_LABELS)
    nodes = [
        # means [N, 3] -> [N, 1, 3] x factors [B, 1] -> scores [N, B, 3]
        helper.make_node("ReduceMean", ["images"], ["means"], axes=[2, 3], keepdims=0, name="channel_mean"),
        helper.make_node("Unsqueeze", ["means", "axis1"], ["means3"], name="per_box"),
        helper.make_node("Mul", ["means3", "factors"], ["scores"], name="box_scores"),
        # the constant boxes [1, B, 4] expanded to the batch: shape [N, 1, 1]
        helper.make_node("Shape", ["images"], ["in_shape"], name="in_shape"),
        helper.make_node("Slice", ["in_shape", "zero", "one"], ["batch"], name="batch"),
        helper.make_node("Concat", ["batch", "ones2"], ["expand_to"], axis=0, name="expand_to"),
        helper.make_node("Expand", ["box_consts", "expand_to"], ["xywh"], name="boxes"),
        helper.make_node("Concat", ["xywh", "scores"], ["output0"], axis=2, name="output"),
    ]
    graph = helper.make_graph(
        nodes=nodes,
        name="image_detector",
        inputs=[_vi("images", f32, ["N", 3, n, n])],
        outputs=[_vi("output0", f32, ["N", boxes, 4 + classes])],
        initializer=[
            helper.make_tensor("axis1", i64, [1], [1]),
            helper.make_tensor("zero", i64, [1], [0]),
            helper.make_tensor("one", i64, [1], [1]),
            helper.make_tensor("ones2", i64, [2], [1, 1]),
            helper.make_tensor("factors", f32, [boxes, 1], IMAGE_DETECTOR_FACTORS),
            helper.make_tensor("box_consts", f32, [1, boxes, 4], [v for b in IMAGE_DETECTOR_BOXES for v in b]),
        ],
        doc_string="output0 [N, 3, 7]: constant boxes (cx, cy, w, h) and the channel means of images "
        "(FP32 NCHW [N, 3, 32, 32]) times a per-box factor as class scores; classes: "
        + ", ".join(IMAGE_DETECTOR_LABELS),
    )
    return _model(graph)


def parameters(pairs) -> str:
    """config.pbtxt `parameters` entries with string values."""
    return "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in pairs)


def _tensor_list(kind: str, tensors) -> str:
    """tensors: (name, data_type, dims, extra_lines) tuples."""
    blocks = []
    for name, data_type, dims, extra in tensors:
        lines = [
            "  {",
            f'    name: "{name}"',
            f"    data_type: {data_type}",
            "    dims: [ " + ", ".join(str(d) for d in dims) + " ]",
        ]
        lines += [f"    {e}" for e in extra]
        lines.append("  }")
        blocks.append("\n".join(lines))
    return f"{kind} [\n" + ",\n".join(blocks) + "\n]\n"


def config(name: str, max_batch_size: int, inputs, outputs, extra: str = "") -> str:
    text = f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
    text += _tensor_list("input", inputs)
    text += _tensor_list("output", outputs)
    text += extra
    return text


def ensemble_config(name: str, max_batch_size: int, inputs, outputs, steps) -> str:
    """steps: (model_name, input_map, output_map) tuples; maps are (model tensor, ensemble tensor)."""
    text = f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
    text += _tensor_list("input", inputs)
    text += _tensor_list("output", outputs)
    blocks = []
    for model_name, input_map, output_map in steps:
        lines = ["    {", f'      model_name: "{model_name}"', "      model_version: -1"]
        for kind, pairs in (("input_map", input_map), ("output_map", output_map)):
            for key, value in pairs:
                lines.append(f'      {kind} {{ key: "{key}" value: "{value}" }}')
        lines.append("    }")
        blocks.append("\n".join(lines))
    text += "ensemble_scheduling {\n  step [\n" + ",\n".join(blocks) + "\n  ]\n}\n"
    return text


# ---------------------------------------------------------------------------------------------
# Repository layout
# ---------------------------------------------------------------------------------------------


def repository() -> dict[str, bytes]:
    """Every file of the example repository: relative path -> content."""
    files: dict[str, bytes] = {}

    def put_model(model_name: str, version: int, model: onnx.ModelProto) -> None:
        files[f"{model_name}/{version}/model.onnx"] = model.SerializeToString()

    def put_text(path: str, text: str) -> None:
        files[path] = text.encode("utf-8")

    # 1. simple
    put_model("simple", 1, model_simple())
    put_text(
        "simple/config.pbtxt",
        config(
            "simple",
            8,
            [("INPUT0", "TYPE_INT32", [16], []), ("INPUT1", "TYPE_INT32", [16], [])],
            [("OUTPUT0", "TYPE_INT32", [16], []), ("OUTPUT1", "TYPE_INT32", [16], [])],
        ),
    )

    # 2. vlen_scale
    put_model("vlen_scale", 1, model_vlen_scale())
    put_text(
        "vlen_scale/config.pbtxt",
        config(
            "vlen_scale",
            4,
            [("INPUT", "TYPE_FP32", [-1], [])],
            [("OUTPUT", "TYPE_FP32", [-1], [])],
        ),
    )

    # 3. bytes_identity
    put_model("bytes_identity", 1, model_bytes_identity())
    put_text(
        "bytes_identity/config.pbtxt",
        config(
            "bytes_identity",
            8,
            [("INPUT", "TYPE_STRING", [-1], [])],
            [("OUTPUT", "TYPE_STRING", [-1], [])],
        ),
    )

    # 4. classifier
    put_model("classifier", 1, model_classifier())
    put_text(
        "classifier/config.pbtxt",
        config(
            "classifier",
            4,
            [("INPUT", "TYPE_FP32", [4], [])],
            [("OUTPUT", "TYPE_FP32", [5], ['label_filename: "labels.txt"'])],
        ),
    )
    put_text("classifier/labels.txt", "".join(label + "\n" for label in CLASSIFIER_LABELS))

    # 5. multi_version
    for v in MULTI_VERSIONS:
        put_model("multi_version", v, model_multi_version(v))
    put_text(
        "multi_version/config.pbtxt",
        config(
            "multi_version",
            4,
            [("INPUT", "TYPE_INT32", [4], [])],
            [("OUTPUT", "TYPE_INT32", [4], [])],
            extra="version_policy: { all { } }\n",
        ),
    )

    # 6. autocomplete_add: deliberately no config.pbtxt (the server auto-completes it).
    put_model("autocomplete_add", 1, model_autocomplete_add())

    # 7. batched_scale: dynamic batching over a model whose cost per execution is nearly flat.
    put_model("batched_scale", 1, model_batched_scale())
    put_text(
        "batched_scale/config.pbtxt",
        config(
            "batched_scale",
            16,
            [("INPUT", "TYPE_FP32", [16], [])],
            [("OUTPUT", "TYPE_FP32", [16], [])],
            extra=(
                "dynamic_batching {\n"
                "  preferred_batch_size: [ 4, 8, 16 ]\n"
                "  max_queue_delay_microseconds: 1000\n"
                "}\n"
                "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
                'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
            ),
        ),
    )

    # 8. sequence_accumulate: sequence batcher (direct, 4 slots) with control inputs and implicit state.
    put_model("sequence_accumulate", 1, model_sequence_accumulate())
    put_text(
        "sequence_accumulate/config.pbtxt",
        config(
            "sequence_accumulate",
            4,
            [("INPUT", "TYPE_INT32", [1], [])],
            [
                ("OUTPUT", "TYPE_INT32", [1], []),
                ("SIGNALS", "TYPE_INT32", [3], []),
                ("CORRID_OUT", "TYPE_UINT64", [1], []),
            ],
            extra=SEQUENCE_ACCUMULATE_BATCHING,
        ),
    )

    # 9. sequence_state: implicit state with a zero initial state, no batch dimension, 2 instances.
    put_model("sequence_state", 1, model_sequence_state())
    put_text(
        "sequence_state/config.pbtxt",
        config(
            "sequence_state",
            0,
            [("INPUT", "TYPE_INT32", [1], [])],
            [("OUTPUT", "TYPE_INT32", [1], [])],
            extra=SEQUENCE_STATE_BATCHING,
        ),
    )

    # 10-12. ensemble_classify = preprocess -> classify_logits, with the ensemble's own labels.
    put_model("preprocess", 1, model_preprocess())
    put_text(
        "preprocess/config.pbtxt",
        config(
            "preprocess",
            8,
            [("RAW", "TYPE_FP32", [4], [])],
            [("NORMALIZED", "TYPE_FP32", [4], [])],
            extra="dynamic_batching { }\n",
        ),
    )
    put_model("classify_logits", 1, model_classify_logits())
    put_text(
        "classify_logits/config.pbtxt",
        config(
            "classify_logits",
            4,
            [("FEATURES", "TYPE_FP32", [4], [])],
            [("LOGITS", "TYPE_FP32", [5], [])],
        ),
    )
    put_text(
        "ensemble_classify/config.pbtxt",
        ensemble_config(
            "ensemble_classify",
            4,
            [("INPUT", "TYPE_FP32", [4], [])],
            [
                ("SCORES", "TYPE_FP32", [5], ['label_filename: "labels.txt"']),
                ("NORMALIZED", "TYPE_FP32", [4], []),
            ],
            [
                ("preprocess", [("RAW", "INPUT")], [("NORMALIZED", "NORMALIZED")]),
                ("classify_logits", [("FEATURES", "NORMALIZED")], [("LOGITS", "SCORES")]),
            ],
        ),
    )
    put_text("ensemble_classify/labels.txt", "".join(label + "\n" for label in CLASSIFIER_LABELS))
    # An ensemble's version folder holds no files; git keeps the folder only with something in it.
    put_text("ensemble_classify/1/.gitkeep", "")

    # 13. image_classifier: the server's image pre-processing (src/vision) feeds it pictures.
    n = IMAGE_CLASSIFIER_SIZE
    put_model("image_classifier", 1, model_image_classifier())
    put_text(
        "image_classifier/config.pbtxt",
        config(
            "image_classifier",
            4,
            [("IMAGE", "TYPE_FP32", [3, n, n], [])],
            [("PROBS", "TYPE_FP32", [3], ['label_filename: "labels.txt"'])],
            extra=parameters(
                [
                    ("image.layout", "NCHW"),
                    ("image.color", "RGB"),
                    ("image.resize", "stretch"),
                    ("image.scale", "0.00392156862745098"),
                    ("image.output", "classification"),
                ]
            ),
        ),
    )
    put_text("image_classifier/labels.txt", "".join(label + "\n" for label in IMAGE_CLASSIFIER_LABELS))

    # 14. image_detector: YOLOv8-shaped output, letterboxed input.
    n = IMAGE_DETECTOR_SIZE
    put_model("image_detector", 1, model_image_detector())
    put_text(
        "image_detector/config.pbtxt",
        config(
            "image_detector",
            1,
            [("images", "TYPE_FP32", [3, n, n], [])],
            [
                (
                    "output0",
                    "TYPE_FP32",
                    [len(IMAGE_DETECTOR_BOXES), 4 + len(IMAGE_DETECTOR_LABELS)],
                    ['label_filename: "labels.txt"'],
                )
            ],
            extra=parameters(
                [
                    ("image.layout", "NCHW"),
                    ("image.resize", "letterbox"),
                    ("image.pad", "114"),
                    ("image.output", "yolo"),
                    ("detection.score_threshold", "0.25"),
                    ("detection.iou_threshold", "0.45"),
                ]
            ),
        ),
    )
    put_text("image_detector/labels.txt", "".join(label + "\n" for label in IMAGE_DETECTOR_LABELS))

    return files


# Top-level directories owned by this generator (rewritten wholesale on every run).
MODEL_DIRS = [
    "simple",
    "vlen_scale",
    "bytes_identity",
    "classifier",
    "multi_version",
    "autocomplete_add",
    "batched_scale",
    "sequence_accumulate",
    "sequence_state",
    "preprocess",
    "classify_logits",
    "ensemble_classify",
    "image_classifier",
    "image_detector",
]


def write(out: str, files: dict[str, bytes]) -> None:
    os.makedirs(out, exist_ok=True)
    # Replace each generated model directory wholesale so no stale version/file survives;
    # anything else under `out` is left alone.
    for model_dir in MODEL_DIRS:
        shutil.rmtree(os.path.join(out, model_dir), ignore_errors=True)
    for rel, data in sorted(files.items()):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def _on_disk(out: str) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for model_dir in MODEL_DIRS:
        root = os.path.join(out, model_dir)
        for dirpath, _dirnames, filenames in os.walk(root):
            for fn in filenames:
                path = os.path.join(dirpath, fn)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, out).replace(os.sep, "/")] = f.read()
    return found


def write_or_check(out: str, files: dict[str, bytes], check: bool, script: str) -> None:
    """For the smaller generators (gen_custom_ops.py, gen_frigate.py): write `files` under `out`, or with
    `check` exit naming the first file on disk that differs from what `script` writes."""
    for rel, data in sorted(files.items()):
        path = os.path.join(out, rel)
        if check:
            with open(path, "rb") as f:
                if f.read() != data:
                    sys.exit(f"{path} differs from what {script} writes")
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {path}")


# ---------------------------------------------------------------------------------------------
# --check: byte-for-byte comparison + run every model in ONNX Runtime
# ---------------------------------------------------------------------------------------------


def run_checks(out: str) -> None:
    import numpy as np
    import onnxruntime as ort

    expected = repository()
    actual = _on_disk(out)
    problems = []
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            problems.append(f"missing: {rel}")
        elif rel not in expected:
            problems.append(f"unexpected: {rel}")
        elif actual[rel] != expected[rel]:
            problems.append(f"differs from generator output: {rel}")
    if problems:
        raise SystemExit("\n".join(problems) + "\n(re-run gen_models.py)")

    def session(model_name: str, version: int = 1):
        path = os.path.join(out, model_name, str(version), "model.onnx")
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    # simple
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    a2 = np.concatenate([a, a * 3], axis=0)
    b2 = np.concatenate([b, -b * 2], axis=0)
    o0, o1 = session("simple").run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a2, "INPUT1": b2})
    assert o0.dtype == np.int32 and o0.shape == (2, 16)
    np.testing.assert_array_equal(o0, a2 + b2)
    np.testing.assert_array_equal(o1, a2 - b2)
    assert o0[0].tolist() == list(range(1, 17)) and o1[0].tolist() == list(range(-1, 15))

    # vlen_scale: two different lengths, exact FP32 results
    for shape in [(1, 3), (4, 7)]:
        x = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 1.5) * 0.25
        (y,) = session("vlen_scale").run(None, {"INPUT": x})
        assert y.dtype == np.float32 and y.shape == shape
        np.testing.assert_array_equal(y, x * np.float32(2.0))
    (y,) = session("vlen_scale").run(None, {"INPUT": np.array([[1.0, -2.5, 3.25]], np.float32)})
    assert y.tolist() == [[2.0, -5.0, 6.5]]

    # bytes_identity (ORT takes object arrays of str; non-ASCII survives the round trip)
    x = np.array([["hello", "", "wörld"], ["a", "bb", "ccc"]], dtype=object)
    (y,) = session("bytes_identity").run(None, {"INPUT": x})
    assert y.shape == (2, 3) and y.tolist() == x.tolist()

    # classifier
    w = np.array(CLASSIFIER_WEIGHTS, dtype=np.float32)
    cases = {
        (1, 0, 0, 0): ([4.0, 1.0, 0.5, 0.25, 3.0], "cat"),
        (0, 1, 0, 0): ([0.5, 4.0, 2.0, 0.25, 3.0], "dog"),
        (0, 0, 1, 0): ([2.0, 0.25, 4.0, 1.0, 3.0], "bird"),
        (0, 0, 0, 1): ([1.0, 2.0, 0.25, 4.0, 3.0], "fish"),
        (1, 1, 1, 1): ([7.5, 7.25, 6.75, 5.5, 12.0], "horse"),
        (1, 2, 3, 4): ([15.0, 17.75, 17.5, 19.75, 30.0], "horse"),
    }
    x = np.array(list(cases), dtype=np.float32)
    for start in range(0, len(x), 4):  # max_batch_size 4
        batch = x[start : start + 4]
        (scores,) = session("classifier").run(None, {"INPUT": batch})
        assert scores.dtype == np.float32 and scores.shape == (len(batch), 5)
        np.testing.assert_array_equal(scores, batch @ w)
        for row, score in zip(batch, scores):
            want_scores, want_label = cases[tuple(int(v) for v in row)]
            assert score.tolist() == want_scores, (row, score)
            assert CLASSIFIER_LABELS[int(np.argmax(score))] == want_label
    with open(os.path.join(out, "classifier", "labels.txt")) as f:
        assert f.read().splitlines() == CLASSIFIER_LABELS

    # batched_scale: exact doubling whatever the batch; the fixed cost leaves no trace
    for n in (1, 5, 16):
        x = (np.arange(n * 16, dtype=np.float32).reshape(n, 16) - 7.0) * 0.5
        (y,) = session("batched_scale").run(None, {"INPUT": x})
        assert y.dtype == np.float32 and y.shape == (n, 16)
        np.testing.assert_array_equal(y, x * np.float32(2.0))

    # multi_version
    x = np.array([[0, 1, 2, 3], [-10, 0, 10, 20]], dtype=np.int32)
    for v in MULTI_VERSIONS:
        (y,) = session("multi_version", v).run(None, {"INPUT": x})
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, x + v)

    # autocomplete_add (+ the shapes the server's auto-complete will see)
    sess = session("autocomplete_add")
    for inp in sess.get_inputs():
        assert inp.type == "tensor(float)" and inp.shape == ["N", 8], (inp.name, inp.shape)
    x0 = np.arange(16, dtype=np.float32).reshape(2, 8) * 0.5
    x1 = np.full((2, 8), 0.25, dtype=np.float32)
    (y,) = sess.run(None, {"INPUT0": x0, "INPUT1": x1})
    np.testing.assert_array_equal(y, x0 + x1)
    assert not os.path.exists(os.path.join(out, "autocomplete_add", "config.pbtxt"))

    # sequence_accumulate: two rows, one starting (the state is ignored) and one continuing
    sess = session("sequence_accumulate")
    feeds = {
        "INPUT": np.array([[5], [7]], np.int32),
        "START": np.array([[1], [0]], np.int32),
        "END": np.array([[0], [1]], np.int32),
        "READY": np.array([[1.0], [1.0]], np.float32),
        "CORRID": np.array([[11], [2**63 + 5]], np.uint64),
        "ACC_IN": np.array([[100], [30]], np.int32),
    }
    total, acc, signals, corrid = sess.run(["OUTPUT", "ACC_OUT", "SIGNALS", "CORRID_OUT"], feeds)
    assert total.tolist() == [[5], [37]] and acc.tolist() == total.tolist(), total
    assert signals.tolist() == [[1, 0, 1], [0, 1, 1]], signals
    assert corrid.dtype == np.uint64 and corrid.tolist() == [[11], [2**63 + 5]]

    # sequence_state: OUTPUT = STATE_OUT = STATE_IN + INPUT
    total, state = session("sequence_state").run(
        ["OUTPUT", "STATE_OUT"], {"INPUT": np.array([4], np.int32), "STATE_IN": np.array([10], np.int32)}
    )
    assert total.tolist() == [14] and state.tolist() == [14]

    # preprocess, classify_logits, and ensemble_classify as their composition
    raw = np.array([[3, 1, 1, 1], [1, 3, 1, 1], [1, 1, 3, 1], [1, 1, 1, 3]], dtype=np.float32)
    (norm,) = session("preprocess").run(None, {"RAW": raw})
    np.testing.assert_array_equal(norm, (raw - np.float32(PREPROCESS_OFFSET)) * np.float32(PREPROCESS_SCALE))
    np.testing.assert_array_equal(norm, np.eye(4, dtype=np.float32))
    (logits,) = session("classify_logits").run(None, {"FEATURES": norm})
    np.testing.assert_array_equal(logits, norm @ w)
    assert [CLASSIFIER_LABELS[i] for i in np.argmax(logits, axis=1)] == ["cat", "dog", "bird", "fish"]
    with open(os.path.join(out, "ensemble_classify", "labels.txt")) as f:
        assert f.read().splitlines() == CLASSIFIER_LABELS

    # image_classifier: channel means, exact for solid colours
    x = np.zeros((2, 3, IMAGE_CLASSIFIER_SIZE, IMAGE_CLASSIFIER_SIZE), np.float32)
    x[0, 0] = 1.0  # red
    x[1, 1, :4] = 1.0  # green in the top half
    (probs,) = session("image_classifier").run(None, {"IMAGE": x})
    assert probs.dtype == np.float32 and probs.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.5, 0.0]], probs
    with open(os.path.join(out, "image_classifier", "labels.txt")) as f:
        assert f.read().splitlines() == IMAGE_CLASSIFIER_LABELS

    # image_detector: constant boxes, scores = channel means x the box factors
    x = np.zeros((1, 3, IMAGE_DETECTOR_SIZE, IMAGE_DETECTOR_SIZE), np.float32)
    x[0, 2] = 1.0  # blue
    (y,) = session("image_detector").run(None, {"images": x})
    assert y.dtype == np.float32 and y.shape == (1, 3, 7), y.shape
    for box, factor, row in zip(IMAGE_DETECTOR_BOXES, IMAGE_DETECTOR_FACTORS, y[0]):
        assert row[:4].tolist() == box and row[4:].tolist() == [0.0, 0.0, np.float32(factor)], row
    with open(os.path.join(out, "image_detector", "labels.txt")) as f:
        assert f.read().splitlines() == IMAGE_DETECTOR_LABELS

    # Every config.pbtxt parses as Triton's ModelConfig (the proto ships in tritonclient[grpc]).
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2 as mc
    except ImportError:
        print("note: tritonclient[grpc] not installed; skipped the config.pbtxt parse check")
    else:
        for rel in sorted(expected):
            if rel.endswith("config.pbtxt"):
                cfg = text_format.Parse(expected[rel].decode(), mc.ModelConfig())
                assert cfg.name == rel.split("/")[0], rel
                if cfg.platform == "ensemble":
                    steps = cfg.ensemble_scheduling.step
                    assert steps and all(s.model_name in MODEL_DIRS for s in steps), rel
                else:
                    assert cfg.backend == "onnxruntime", rel
                assert cfg.input and cfg.output, rel

    for rel in sorted(expected):
        print(f"{hashlib.sha256(expected[rel]).hexdigest()}  {rel}")
    print(f"OK: {len(expected)} files match the generator; all models ran in onnxruntime {ort.__version__}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="repository directory (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="verify instead of writing (needs onnxruntime, numpy)")
    args = ap.parse_args(argv)

    if args.check:
        run_checks(args.out)
        return 0

    files = repository()
    write(args.out, files)
    for rel in sorted(files):
        print(f"wrote {os.path.join(args.out, rel)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Deterministic generator for model-repos/frigate/: detectors in the input forms Frigate's `zmq`
detector sends, for the ZMQ front-end's tests.

    scripts/env.sh python model-repos/gen_frigate.py           # (re)write model-repos/frigate/
    scripts/env.sh python model-repos/gen_frigate.py --check   # verify the files on disk

- `detector_nhwc_u8`: gen_models.py's `image_detector` (YOLO-shaped output [N, 3, 7], boxes in input
  pixels, class scores the channel means times 1, 0.9 and 0.5) behind a UINT8 NHWC input
  `frame` [N, 32, 32, 3]: Cast, Transpose to NCHW, divide by 255. An all-red frame gives class 0 at
  1.0 for x 8..24, y 12..20 (box 1 is suppressed) and 0.5 for x 0..8, y 24..32.
- `../frigate_push/yolov8-tiny.onnx`: a file the tests push over ZMQ, in YOLOv8's output layout
  [N, 7, 8] (attributes first, more boxes than attributes, as real exports are).
- `detector_ssd`: TensorFlow SSD's outputs for a UINT8 [1, 32, 32, 3] input: `detection_boxes`
  [1, 2, 4] (y_min, x_min, y_max, x_max, normalised) constant, `detection_classes` [1, 2] = 2, 0,
  `detection_scores` [1, 2] = 0.9 and 0.4 times the frame's mean / 255, `num_detections` [1] = 2.

The `image_detector` used as NCHW FP32 detector is gen_models.py's own, in model-repos/examples.
Built with the `onnx` helper API only (opset 13, ir_version 8, fixed producer).
"""

from __future__ import annotations

import argparse
import os
import sys

from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frigate")
SSD_BOXES = [[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 0.25, 0.25]]
SSD_CLASSES = [2.0, 0.0]
SSD_FACTORS = [0.9, 0.4]


def model_detector_nhwc_u8() -> bytes:
    base = gen_models.model_image_detector()
    g = base.graph
    n = gen_models.IMAGE_DETECTOR_SIZE
    front = [
        helper.make_node("Cast", ["frame"], ["frame_f"], to=TensorProto.FLOAT, name="to_float"),
        helper.make_node("Transpose", ["frame_f"], ["frame_nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Div", ["frame_nchw", "u8_max"], ["images"], name="to_unit"),
    ]
    graph = helper.make_graph(
        nodes=front + list(g.node),
        name="detector_nhwc_u8",
        inputs=[helper.make_tensor_value_info("frame", TensorProto.UINT8, ["N", n, n, 3])],
        outputs=list(g.output),
        initializer=list(g.initializer) + [helper.make_tensor("u8_max", TensorProto.FLOAT, [], [255.0])],
        doc_string="image_detector behind a UINT8 NHWC input (Cast, Transpose, /255)",
    )
    return gen_models._model(graph).SerializeToString()


def model_detector_ssd() -> bytes:
    f32 = TensorProto.FLOAT
    n = gen_models.IMAGE_DETECTOR_SIZE
    nodes = [
        helper.make_node("Cast", ["frame"], ["frame_f"], to=f32, name="to_float"),
        helper.make_node("ReduceMean", ["frame_f"], ["mean"], axes=[1, 2, 3], keepdims=0, name="mean"),
        helper.make_node("Div", ["mean", "u8_max"], ["unit"], name="to_unit"),
        helper.make_node("Mul", ["factors", "unit"], ["scores_flat"], name="scores"),
        helper.make_node("Unsqueeze", ["scores_flat", "axis0"], ["detection_scores"], name="batch"),
        helper.make_node("Identity", ["boxes"], ["detection_boxes"], name="boxes_out"),
        helper.make_node("Identity", ["classes"], ["detection_classes"], name="classes_out"),
        helper.make_node("Identity", ["count"], ["num_detections"], name="count_out"),
    ]
    graph = helper.make_graph(
        nodes=nodes,
        name="detector_ssd",
        inputs=[helper.make_tensor_value_info("frame", TensorProto.UINT8, [1, n, n, 3])],
        outputs=[
            helper.make_tensor_value_info("detection_boxes", f32, [1, 2, 4]),
            helper.make_tensor_value_info("detection_classes", f32, [1, 2]),
            helper.make_tensor_value_info("detection_scores", f32, [1, 2]),
            helper.make_tensor_value_info("num_detections", f32, [1]),
        ],
        initializer=[
            helper.make_tensor("u8_max", f32, [], [255.0]),
            helper.make_tensor("factors", f32, [2], SSD_FACTORS),
            helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
            helper.make_tensor("boxes", f32, [1, 2, 4], [v for b in SSD_BOXES for v in b]),
            helper.make_tensor("classes", f32, [1, 2], SSD_CLASSES),
            helper.make_tensor("count", f32, [1], [2.0]),
        ],
        doc_string="TensorFlow SSD outputs: constant boxes and classes, scores = factors x mean(frame) / 255",
    )
    return gen_models._model(graph).SerializeToString()


# The pushed model: YOLOv8's layout [N, 4 + classes, boxes] (attributes first) with 8 boxes, so that,
# as with a real export ([1, 84, 8400]), there are more boxes than attributes. Boxes 0 and 1 are
# image_detector's boxes 0 and 2 (factors 1 and 0.5); the other six score 0.
PUSH_BOXES = [[16.0, 16.0, 16.0, 8.0], [4.0, 28.0, 8.0, 8.0]] + [[30.0, 30.0, 1.0, 1.0]] * 6
PUSH_FACTORS = [1.0, 0.5] + [0.0] * 6


def model_yolov8_push(size: int = gen_models.IMAGE_DETECTOR_SIZE) -> bytes:
    """`size`: the input's side (benches/frigate_zmq.py uses 320; the boxes stay in 32-pixel units)."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    n, boxes = size, len(PUSH_BOXES)
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["means"], axes=[2, 3], keepdims=0, name="channel_mean"),
        helper.make_node("Unsqueeze", ["means", "axis1"], ["means3"], name="per_box"),
        helper.make_node("Mul", ["means3", "factors"], ["scores"], name="box_scores"),
        helper.make_node("Shape", ["images"], ["in_shape"], name="in_shape"),
        helper.make_node("Slice", ["in_shape", "zero", "one"], ["batch"], name="batch"),
        helper.make_node("Concat", ["batch", "ones2"], ["expand_to"], axis=0, name="expand_to"),
        helper.make_node("Expand", ["box_consts", "expand_to"], ["xywh"], name="boxes"),
        helper.make_node("Concat", ["xywh", "scores"], ["rows"], axis=2, name="rows"),
        helper.make_node("Transpose", ["rows"], ["output0"], perm=[0, 2, 1], name="attributes_first"),
    ]
    graph = helper.make_graph(
        nodes=nodes,
        name="yolov8_push",
        inputs=[helper.make_tensor_value_info("images", f32, ["N", 3, n, n])],
        outputs=[helper.make_tensor_value_info("output0", f32, ["N", 7, boxes])],
        initializer=[
            helper.make_tensor("axis1", i64, [1], [1]),
            helper.make_tensor("zero", i64, [1], [0]),
            helper.make_tensor("one", i64, [1], [1]),
            helper.make_tensor("ones2", i64, [2], [1, 1]),
            helper.make_tensor("factors", f32, [boxes, 1], PUSH_FACTORS),
            helper.make_tensor("box_consts", f32, [1, boxes, 4], [v for b in PUSH_BOXES for v in b]),
        ],
        doc_string="output0 [N, 7, 8]: YOLOv8 layout; 8 constant boxes scored by channel means x factors",
    )
    return gen_models._model(graph).SerializeToString()


NHWC_CONFIG = """name: "detector_nhwc_u8"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "frame" data_type: TYPE_UINT8 dims: [ 32, 32, 3 ] } ]
output [ { name: "output0" data_type: TYPE_FP32 dims: [ 3, 7 ] label_filename: "labels.txt" } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "image.layout" value: { string_value: "NHWC" } }
parameters { key: "image.output" value: { string_value: "yolo" } }
parameters { key: "detection.score_threshold" value: { string_value: "0.25" } }
parameters { key: "detection.iou_threshold" value: { string_value: "0.45" } }
"""

SSD_CONFIG = """name: "detector_ssd"
backend: "onnxruntime"
max_batch_size: 0
parameters { key: "image.output" value: { string_value: "ssd" } }
parameters { key: "detection.score_threshold" value: { string_value: "0.3" } }
"""


def files() -> dict[str, bytes]:
    return {
        "detector_nhwc_u8/config.pbtxt": NHWC_CONFIG.encode(),
        "detector_nhwc_u8/1/model.onnx": model_detector_nhwc_u8(),
        # The labels tell the YOLO decoder that a row is 4 + 3 values ([N, 3, 7] has fewer boxes than
        # attributes, unlike a real export).
        "detector_nhwc_u8/labels.txt": "".join(f"{l}\n" for l in gen_models.IMAGE_DETECTOR_LABELS).encode(),
        "detector_ssd/config.pbtxt": SSD_CONFIG.encode(),
        "detector_ssd/1/model.onnx": model_detector_ssd(),
        # Not a model folder: the file a test pushes as Frigate would.
        "../frigate_push/yolov8-tiny.onnx": model_yolov8_push(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify the files on disk instead of writing them")
    args = ap.parse_args(argv)
    gen_models.write_or_check(OUT, files(), args.check, "gen_frigate.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Generator for model-repos/openvino_formats/: the same tiny model, y = relu(x @ W + b) with x FP32
[-1, 4] and y FP32 [-1, 3], in each format besides OpenVINO IR that the openvino backend reads through
OpenVINO's frontends, laid out as Triton lays them out:

    scripts/env.sh python model-repos/gen_openvino_formats.py    # (re)write model-repos/openvino_formats/

- `tf_graphdef`: `platform: "tensorflow_graphdef"`, `1/model.graphdef`: a TensorFlow GraphDef (Placeholder,
  Const, MatMul, BiasAdd, Relu) written with the protobuf classes PyPI's `tensorboard` ships, so no
  TensorFlow is needed. OpenVINO names its ports `x:0` and `y:0`; the configuration says `x` and `y`, as
  Triton's TensorFlow backend does.
- `tf_savedmodel`: `platform: "tensorflow_savedmodel"`, `1/model.savedmodel/saved_model.pb`: the same graph
  in a SavedModel with the `serve` tag and a `serving_default` signature (`x` -> `y`). Its graph holds only
  constants, so it needs no `variables/` folder (git keeps no empty folder, and OpenVINO reads it
  without). tensorboard ships no `saved_model_pb2`; a SavedModel is two fields around a MetaGraphDef,
  written here by hand.
- `ov_tflite`: `backend: "openvino"`, `default_model_filename: "model.tflite"`: a TFLite flatbuffer (one
  FULLY_CONNECTED with a fused RELU) written with the flatbuffer builders of PyPI's `tflite`.
- `ov_onnx`: `backend: "openvino"`, `default_model_filename: "model.onnx"`: ONNX written with `onnx`.

PaddlePaddle is left out: writing a `.pdmodel` needs the `paddlepaddle` package (about 100 MB), which
no lighter PyPI package replaces. The tests compare every output with OpenVINO's Python runtime on
the same files, so the numbers here need not be recomputed anywhere else.
"""

from __future__ import annotations

import importlib
import os
import shutil

import flatbuffers
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tensorboard.compat.proto import graph_pb2, meta_graph_pb2, node_def_pb2, types_pb2

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openvino_formats")

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0 - 0.5
B = np.array([0.25, -1.0, 0.5], dtype=np.float32)


def tf_const(name: str, value: np.ndarray) -> node_def_pb2.NodeDef:
    n = node_def_pb2.NodeDef(name=name, op="Const")
    n.attr["dtype"].type = types_pb2.DT_FLOAT
    t = n.attr["value"].tensor
    t.dtype = types_pb2.DT_FLOAT
    for d in value.shape:
        t.tensor_shape.dim.add(size=d)
    t.tensor_content = value.astype(np.float32).tobytes()
    return n


def graphdef() -> graph_pb2.GraphDef:
    g = graph_pb2.GraphDef()
    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    x.attr["shape"].shape.dim.add(size=-1)
    x.attr["shape"].shape.dim.add(size=4)
    g.node.extend([tf_const("W", W), tf_const("b", B)])
    for name, op, inputs in [("matmul", "MatMul", ["x", "W"]), ("bias", "BiasAdd", ["matmul", "b"]),
                             ("y", "Relu", ["bias"])]:
        n = g.node.add(name=name, op=op, input=inputs)
        n.attr["T"].type = types_pb2.DT_FLOAT
    g.versions.producer = 1087
    return g


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def saved_model(g: graph_pb2.GraphDef) -> bytes:
    mg = meta_graph_pb2.MetaGraphDef()
    mg.meta_info_def.tags.append("serve")
    mg.graph_def.CopyFrom(g)
    sig = mg.signature_def["serving_default"]
    sig.method_name = "tensorflow/serving/predict"
    for io, key, tensor, width in [(sig.inputs, "x", "x:0", 4), (sig.outputs, "y", "y:0", 3)]:
        info = io[key]
        info.name, info.dtype = tensor, types_pb2.DT_FLOAT
        info.tensor_shape.dim.add(size=-1)
        info.tensor_shape.dim.add(size=width)
    body = mg.SerializeToString(deterministic=True)
    # SavedModel { int64 saved_model_schema_version = 1; repeated MetaGraphDef meta_graphs = 2; }
    return b"\x08\x01" + b"\x12" + varint(len(body)) + body


def tflite_model() -> bytes:
    m = {n: importlib.import_module(f"tflite.{n}") for n in
         ["Model", "SubGraph", "Tensor", "Buffer", "Operator", "OperatorCode", "FullyConnectedOptions"]}
    from tflite.ActivationFunctionType import ActivationFunctionType
    from tflite.BuiltinOperator import BuiltinOperator
    from tflite.BuiltinOptions import BuiltinOptions
    from tflite.TensorType import TensorType

    b = flatbuffers.Builder(1024)

    def ints(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    def offsets(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependUOffsetTRelative(v)
        return b.EndVector()

    def buffer(data: bytes):
        vec = b.CreateByteVector(data) if data else None
        m["Buffer"].Start(b)
        if vec is not None:
            m["Buffer"].AddData(b, vec)
        return m["Buffer"].End(b)

    T = m["Tensor"]

    def tensor(name, shape, signature, buf):
        n, sh, sg = b.CreateString(name), ints(T.StartShapeVector, shape), ints(T.StartShapeSignatureVector, signature)
        T.Start(b)
        T.AddShape(b, sh)
        T.AddShapeSignature(b, sg)
        T.AddType(b, TensorType.FLOAT32)
        T.AddBuffer(b, buf)
        T.AddName(b, n)
        return T.End(b)

    # Buffer 0 is empty by convention (tensors without data); FULLY_CONNECTED's weights are [out, in].
    buffers = [buffer(b""), buffer(W.T.copy().tobytes()), buffer(B.tobytes())]
    tensors = [tensor("x", [1, 4], [-1, 4], 0), tensor("W", [3, 4], [3, 4], 1), tensor("b", [3], [3], 2),
               tensor("y", [1, 3], [-1, 3], 0)]
    FC, Op = m["FullyConnectedOptions"], m["Operator"]
    FC.Start(b)
    FC.AddFusedActivationFunction(b, ActivationFunctionType.RELU)
    options = FC.End(b)
    ins, outs = ints(Op.StartInputsVector, [0, 1, 2]), ints(Op.StartOutputsVector, [3])
    Op.Start(b)
    Op.AddOpcodeIndex(b, 0)
    Op.AddInputs(b, ins)
    Op.AddOutputs(b, outs)
    Op.AddBuiltinOptionsType(b, BuiltinOptions.FullyConnectedOptions)
    Op.AddBuiltinOptions(b, options)
    op = Op.End(b)
    S = m["SubGraph"]
    tv, si, so = offsets(S.StartTensorsVector, tensors), ints(S.StartInputsVector, [0]), ints(S.StartOutputsVector, [3])
    ops, name = offsets(S.StartOperatorsVector, [op]), b.CreateString("main")
    S.Start(b)
    S.AddTensors(b, tv)
    S.AddInputs(b, si)
    S.AddOutputs(b, so)
    S.AddOperators(b, ops)
    S.AddName(b, name)
    subgraph = S.End(b)
    OC = m["OperatorCode"]
    OC.Start(b)
    OC.AddDeprecatedBuiltinCode(b, BuiltinOperator.FULLY_CONNECTED)
    OC.AddBuiltinCode(b, BuiltinOperator.FULLY_CONNECTED)
    OC.AddVersion(b, 1)
    code = OC.End(b)
    M = m["Model"]
    codes, subgraphs = offsets(M.StartOperatorCodesVector, [code]), offsets(M.StartSubgraphsVector, [subgraph])
    bufs, desc = offsets(M.StartBuffersVector, buffers), b.CreateString("tritonrs test model")
    M.Start(b)
    M.AddVersion(b, 3)
    M.AddOperatorCodes(b, codes)
    M.AddSubgraphs(b, subgraphs)
    M.AddBuffers(b, bufs)
    M.AddDescription(b, desc)
    b.Finish(M.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def onnx_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["bias"]),
         helper.make_node("Relu", ["bias"], ["y"])],
        "ov_onnx",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


IO = """input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""

CONFIGS = {
    "tf_graphdef": 'name: "tf_graphdef"\nplatform: "tensorflow_graphdef"\nmax_batch_size: 8\n' + IO,
    "tf_savedmodel": 'name: "tf_savedmodel"\nplatform: "tensorflow_savedmodel"\nmax_batch_size: 8\n' + IO,
    "ov_tflite": 'name: "ov_tflite"\nbackend: "openvino"\ndefault_model_filename: "model.tflite"\nmax_batch_size: 8\n'
    + IO,
    "ov_onnx": 'name: "ov_onnx"\nbackend: "openvino"\ndefault_model_filename: "model.onnx"\nmax_batch_size: 8\n' + IO,
}


def write(name: str, file: str, data: bytes) -> None:
    path = os.path.join(OUT, name, "1", file)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    g = graphdef()
    write("tf_graphdef", "model.graphdef", g.SerializeToString(deterministic=True))
    write("tf_savedmodel", "model.savedmodel/saved_model.pb", saved_model(g))
    write("ov_tflite", "model.tflite", tflite_model())
    write("ov_onnx", "model.onnx", onnx_model().SerializeToString())
    for name, text in CONFIGS.items():
        with open(os.path.join(OUT, name, "config.pbtxt"), "w") as f:
            f.write(text)
    print(f"wrote {', '.join(sorted(CONFIGS))} under {OUT}")


if __name__ == "__main__":
    main()

"""triton_python_backend_utils for tritonrs: the API that Triton Python models import as `pb_utils`.

Written for tritonrs (not copied from Triton); the names, signatures and behaviour follow Triton's
Python backend documentation so that unmodified `model.py` files run. The stub process
(tritonrs_stub.py) connects this module to the server through `_set_connection`; everything that needs
the server (BLS, decoupled responses, logging, metrics, model control) goes through that connection.
Only numpy is required.
"""

import asyncio
import json
import struct
import threading

import numpy as np

# ---- constants ---------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# Triton datatype enum (TRITONSERVER_DataType, the same numbers as the model configuration's TYPE_*).
_TYPE_NAMES = {
    1: "BOOL", 2: "UINT8", 3: "UINT16", 4: "UINT32", 5: "UINT64", 6: "INT8", 7: "INT16", 8: "INT32",
    9: "INT64", 10: "FP16", 11: "FP32", 12: "FP64", 13: "BYTES", 14: "BF16",
}
_NAME_TYPES = {v: k for k, v in _TYPE_NAMES.items()}
_NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# The stub's connection to the server; set by tritonrs_stub.py before the model is imported.
_conn = None


def _set_connection(conn):
    global _conn
    _conn = conn


def _connection():
    if _conn is None:
        raise TritonModelException("this function is only available inside a model served by tritonrs")
    return _conn


# ---- datatypes and BYTES -----------------------------------------------------------------------


def triton_to_numpy_type(data_type):
    if data_type == 14:
        # numpy has no bfloat16; Triton's own helper returns nothing for it either.
        return None
    name = _TYPE_NAMES.get(data_type)
    return _NUMPY.get(name) if name else None


# numpy dtype -> Triton type, for the hot path (every output tensor).
_DTYPE_TYPES = {np.dtype(t): _NAME_TYPES[n] for n, t in _NUMPY.items() if n != "BYTES"}


def numpy_to_triton_type(data_type):
    t = _DTYPE_TYPES.get(data_type)
    if t is not None:
        return t
    try:
        dt = np.dtype(data_type)
    except TypeError:
        return None
    if dt.kind in "OS":
        return 13
    return _DTYPE_TYPES.get(dt)


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor):
    """Serializes an np.object_ (or np.bytes_) tensor into Triton's BYTES layout: each element as a
    4-byte little-endian length and its bytes, in C order. Returns bytes (an empty tuple for an empty
    tensor, None for a non-bytes tensor), as Triton's helper does."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        parts = []
        is_object = input_tensor.dtype == np.object_
        for item in input_tensor.reshape(-1, order="C"):
            if is_object:
                s = item if isinstance(item, bytes) else str(item).encode("utf-8")
            else:
                s = bytes(item)
            parts.append(struct.pack("<I", len(s)))
            parts.append(s)
        return b"".join(parts)
    return None


def deserialize_bytes_tensor(encoded_tensor):
    """Splits a BYTES buffer into a 1-D np.object_ array of bytes objects."""
    view = memoryview(encoded_tensor).cast("B")
    out = []
    offset = 0
    end = len(view)
    while offset < end:
        (n,) = struct.unpack_from("<I", view, offset)
        offset += 4
        out.append(bytes(view[offset:offset + n]))
        offset += n
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    return arr


# ---- errors ------------------------------------------------------------------------------------


class TritonModelException(Exception):
    """Raised by models (or by this module) to fail an initialize, execute or finalize."""

    def __init__(self, msg=""):
        super().__init__(msg)
        self._msg = msg

    def message(self):
        return self._msg


class TritonError:
    """An error for one response; the code maps to the status the client sees."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = {0: "UNKNOWN", 1: "INTERNAL", 2: "NOT_FOUND", 3: "INVALID_ARG", 4: "UNAVAILABLE",
              5: "UNSUPPORTED", 6: "ALREADY_EXISTS", 7: "CANCELLED"}

    def __init__(self, message, code=INTERNAL):
        self._message = str(message)
        self._code = int(code)

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return f"TritonError({self._message!r}, {self._NAMES.get(self._code, self._code)})"

    __str__ = message


# ---- tensors -----------------------------------------------------------------------------------


# DLPack's device types: CPU memory, GPU memory, pinned host memory (kDLCPU, kDLCUDA, kDLCUDAHost).
_DLPACK_CPU = 1
_DLPACK_CUDA = 2
_DLPACK_CUDA_HOST = 3


class _DLPackCapsule:
    """Hands a bare DLPack capsule to np.from_dlpack, which reads objects with `__dlpack__`."""

    __slots__ = ("capsule",)

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)


class Tensor:
    """A named tensor. Input tensors wrap shared memory without copying; `as_numpy` returns the same
    array every time."""

    __slots__ = ("_name", "_array", "_dtype", "__weakref__")

    def __init__(self, name, data, dtype=None):
        if not isinstance(name, str):
            raise TritonModelException("Tensor name must be a string")
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': data must be a NumPy array, got {type(data).__name__}")
        if dtype is None:
            dtype = numpy_to_triton_type(data.dtype)
            if dtype is None:
                raise TritonModelException(f"Tensor '{name}': NumPy dtype {data.dtype} is not supported.")
        self._name = name
        self._array = data
        self._dtype = dtype

    @classmethod
    def _wrap(cls, name, array, dtype):
        t = cls.__new__(cls)
        t._name = name
        t._array = array
        t._dtype = dtype
        return t

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return self._dtype

    def is_cpu(self):
        return True

    def to_dlpack(self):
        """A DLPack capsule of the tensor's memory (CPU), without a copy where numpy allows one."""
        if self._dtype == 13:
            raise TritonModelException("DLPack does not have support for string tensors.")
        arr = np.ascontiguousarray(self._array)
        if not arr.flags["WRITEABLE"]:
            # numpy refuses to export read-only memory (DLPack cannot say it is read-only).
            arr = arr.copy()
        return arr.__dlpack__()

    # The DLPack protocol, so frameworks read a Tensor directly (`np.from_dlpack(tensor)`), as in Triton.
    def __dlpack__(self, stream=None, **kwargs):
        return self.to_dlpack()

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)

    @staticmethod
    def from_dlpack(name, dlpack_tensor):
        """A Tensor from a DLPack capsule or from an object with `__dlpack__` (a pb_utils.Tensor, a
        numpy array, ...); CPU memory only."""
        if not isinstance(name, str) or not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(dlpack_tensor).__name__ == "PyCapsule":
            arr = np.from_dlpack(_DLPackCapsule(dlpack_tensor))
        elif hasattr(dlpack_tensor, "__dlpack__") and hasattr(dlpack_tensor, "__dlpack_device__"):
            device = dlpack_tensor.__dlpack_device__()[0]
            if device == _DLPACK_CUDA:
                raise TritonModelException(
                    "DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available")
            if device not in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
                raise TritonModelException(f"DLDevice type {device} is not supported by Python backend.")
            arr = np.from_dlpack(dlpack_tensor)
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have `__dlpack__` and "
                "`__dlpack_device__` attributes")
        if not arr.flags["C_CONTIGUOUS"]:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
                "C-Order are supported.")
        return Tensor(name, arr)

    def __repr__(self):
        return f"Tensor({self._name!r}, {_TYPE_NAMES.get(self._dtype, self._dtype)}, {self.shape()})"


# ---- requests and responses --------------------------------------------------------------------


class PreferredMemory:
    def __init__(self, preferred_memory_type=TRITONSERVER_MEMORY_CPU, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = list(output_tensors) if output_tensors is not None else []
        for t in self._outputs:
            if not isinstance(t, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be pb_utils.Tensor objects, got {type(t).__name__}")
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(
                f"InferenceResponse error must be a pb_utils.TritonError, got {type(error).__name__}")
        self._error = error
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._parameters = dict(parameters) if parameters else {}

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return json.dumps(self._parameters)


class InferenceResponseSender:
    """Sends the responses of one request of a decoupled model; usable from any thread, also after
    execute has returned."""

    def __init__(self, key):
        self._key = key
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        if response is None and flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero.")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() expects a pb_utils.InferenceResponse, got {type(response).__name__}")
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed: the final flag was already sent.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
        _connection().send_response(self._key, response, flags)

    def is_cancelled(self):
        return _connection().is_cancelled(self._key)


class InferenceTrace:
    """The trace of a request given to execute (`request.trace()`): a BLS request made with
    `trace=request.trace()` is traced as a child of that request, as in Triton."""

    def __init__(self, key=None, context=None):
        # The server's key for the traced request; None when the request is not traced.
        self._key = key
        self._context = context

    def get_context(self):
        return self._context


class InferenceRequest:
    """A request given to execute, or one built by the model for BLS (`exec`, `async_exec`)."""

    def __init__(self, model_name="", inputs=None, requested_output_names=None, request_id="",
                 correlation_id=0, flags=0, timeout=0, model_version=-1, preferred_memory=None,
                 trace=None, parameters=None):
        if not isinstance(model_name, str):
            raise TritonModelException("model_name must be a string")
        if correlation_id is None:
            correlation_id = 0
        if not isinstance(correlation_id, (int, str)) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        self._model_name = model_name
        self._inputs = list(inputs or [])
        for t in self._inputs:
            if not isinstance(t, Tensor):
                raise TritonModelException(
                    f"InferenceRequest inputs must be pb_utils.Tensor objects, got {type(t).__name__}")
        self._outputs = list(requested_output_names or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._model_version = int(model_version)
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        params = dict(parameters or {})
        for k, v in params.items():
            if not isinstance(k, str) or not isinstance(v, (bool, int, str)):
                raise TritonModelException(
                    "Expect parameters keys to have type str and values to have type bool, int or str")
        self._parameters = params
        self._preferred_memory = preferred_memory
        self._trace = trace
        # Set for requests given to execute: the server's key for the request (responses, cancellation).
        self._key = None
        self._sender = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    # -- what execute reads --
    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def parameters(self):
        return json.dumps(self._parameters) if self._parameters else "{}"

    def requested_output_names(self):
        return list(self._outputs)

    def trace(self):
        return self._trace

    def is_cancelled(self):
        if self._key is None:
            return False
        return _connection().is_cancelled(self._key)

    def get_response_sender(self):
        if self._key is None:
            raise TritonModelException("only requests given to execute have a response sender")
        if not _connection().decoupled:
            raise TritonModelException(
                "get_response_sender() is only available to models with a decoupled transaction policy")
        if self._sender is None:
            self._sender = InferenceResponseSender(self._key)
        return self._sender

    def set_release_flags(self, flags):
        # Read when execute returns: a rescheduled request runs again (iterative sequences).
        self._release_flags = int(flags)

    # -- BLS --
    def exec(self, decoupled=False):
        return _connection().bls_exec(self, decoupled)

    def async_exec(self, decoupled=False):
        return asyncio.wrap_future(_connection().bls(self, decoupled))


def get_input_tensor_by_name(inference_request, name):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    for i in model_config.get("input", []):
        if i.get("name") == name:
            return i
    return None


def get_output_config_by_name(model_config, name):
    for o in model_config.get("output", []):
        if o.get("name") == name:
            return o
    return None


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


# ---- logging -----------------------------------------------------------------------------------


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Sends log lines to the server's log, with the model file's name and line."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        import inspect

        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        # Skip the log_* wrappers so the line is the model's.
        while caller is not None and caller.f_code.co_filename == __file__:
            caller = caller.f_back
        file = caller.f_code.co_filename if caller else ""
        line = caller.f_lineno if caller else 0
        conn = _conn
        if conn is None:
            print(message, flush=True)
        else:
            conn.log(int(level), str(message), file, line)

    @staticmethod
    def log_info(message):
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, LogLevel.VERBOSE)


# ---- custom metrics ----------------------------------------------------------------------------


class MetricFamily:
    """A family of custom metrics, exported on the server's /metrics endpoint."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException("MetricFamily kind must be COUNTER, GAUGE or HISTOGRAM")
        self._name = name
        self._kind = kind
        self._id = _connection().call("metric_family", name=name, description=description, kind=kind)

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)

    def __del__(self):
        conn = _conn
        if conn is not None and getattr(self, "_id", None) is not None:
            conn.notify("metric_family_delete", handle=self._id)


class Metric:
    def __init__(self, family, labels=None, buckets=None):
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None and not isinstance(buckets, list):
            raise TritonModelException("Failed to create metric. Buckets must be a list.")
        if family._kind == MetricFamily.HISTOGRAM and buckets is None:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        if family._kind != MetricFamily.HISTOGRAM and buckets is not None:
            raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        self._family = family
        self._kind = family._kind
        self._id = _connection().call(
            "metric_new", family=family._id,
            labels={str(k): str(v) for k, v in labels.items()},
            buckets=[float(b) for b in buckets] if buckets is not None else None)

    def increment(self, value):
        if self._kind != MetricFamily.COUNTER and self._kind != MetricFamily.GAUGE:
            raise TritonModelException("Failed to increment metric value: only counters and gauges can be incremented")
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("Failed to increment metric value: a counter cannot be decremented")
        _connection().notify("metric_op", handle=self._id, action="increment", value=float(value))

    def set(self, value):
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException("Failed to set metric value: only gauges can be set")
        _connection().notify("metric_op", handle=self._id, action="set", value=float(value))

    def observe(self, value):
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to observe metric value: only histograms can observe")
        _connection().notify("metric_op", handle=self._id, action="observe", value=float(value))

    def value(self):
        return _connection().call("metric_value", handle=self._id)

    def __del__(self):
        conn = _conn
        if conn is not None and getattr(self, "_id", None) is not None:
            conn.notify("metric_delete", handle=self._id)


# ---- model control -----------------------------------------------------------------------------


def load_model(model_name, config="", files=None):
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"Failed to load model '{model_name}', files should be a dictionary of file paths and file contents")
        for k, v in files.items():
            if not isinstance(v, bytes):
                raise TritonModelException(f"Failed to load model: file '{k}' is not an instance of 'bytes'")
    _connection().model_control("load", model_name, config=config, files=files or {})


def unload_model(model_name, unload_dependents=False):
    _connection().model_control("unload", model_name, unload_dependents=bool(unload_dependents))


def is_model_ready(model_name, model_version=""):
    return bool(_connection().call("model_ready", name=model_name, version=str(model_version)))


# ---- auto-complete -----------------------------------------------------------------------------


class ModelConfig:
    """The configuration given to `auto_complete_config`: read it with `as_dict`, change the
    inputs, outputs, batch size, dynamic batching and transaction policy with the setters."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self):
        return self._model_config

    def _name(self):
        return self._model_config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function for "
                f"model '{self._name()}' specified max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config function "
                    f"for model '{self._name()}' tries to set scheduling_choice as 'dynamic_batching'")
        self._model_config.setdefault("dynamic_batching", {})

    def _add(self, kind, tensor, allowed):
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model '{self._name()}' "
                    f"contains property other than {', '.join(repr(a) for a in allowed)}.")
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                where = f"{kind} '{tensor['name']}'" if "name" in tensor else kind
                raise ValueError(
                    f"{where} in auto-complete-config function for model '{self._name()}' is missing '{key}' property.")
        for current in self._model_config[kind]:
            if current.get("name") != tensor["name"]:
                continue
            dt = current.get("data_type", "TYPE_INVALID")
            if dt not in ("TYPE_INVALID", "") and dt != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name()}', configuration expects datatype {dt} for {kind} "
                    f"'{tensor['name']}', model provides {tensor['data_type']}")
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects dims {tensor['dims']} "
                    f"but the model configuration specifies dims {current['dims']}")
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{self._name()}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional {current['optional']}")
            current["data_type"] = tensor["data_type"]
            current["dims"] = list(tensor["dims"])
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(dict(tensor))

    def add_input(self, input):
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output):
        self._add("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{self._name()}' "
                    "contains property other than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if "decoupled" in policy and policy["decoupled"] != transaction_policy_dict["decoupled"]:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{self._name()}', "
                    f"which is already set to '{policy['decoupled']}'.")
            policy["decoupled"] = transaction_policy_dict["decoupled"]

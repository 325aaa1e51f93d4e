"""The tritonrs Python stub: runs one instance of a Triton Python model (`model.py`) for the server.

The server starts one stub process per model instance and talks to it in length-prefixed frames,
`<u32 json length><u32 payload length><json><payload>`, over two sockets. The *main* socket (file
descriptor 0) carries the instance's requests and this process's answers (init, execute, finalize),
read by the main thread. The *side* socket (passed over the main one, SCM_RIGHTS) carries everything
else both ways (BLS, calls, logs, decoupled responses, pings), read by a reader thread. So no request
is handed from one thread to another on the hot path.

Tensor data does not travel through the sockets: the server writes request tensors into its half of
a shared-memory file (blocks it frees when this process reports them released) and this process
writes tensors into the other half, one ring per socket, whose consumed positions the server
publishes in the file's first 16 bytes. A tensor that does not fit travels inline in the frame's
payload instead.

Its command line is `tritonrs_stub.py --model M --instance I -- PATH...`: the model and instance
are there for `ps` (as Triton's stubs name theirs), the paths are added to sys.path.

Written for tritonrs; it needs only numpy.
"""

import asyncio
import collections
import concurrent.futures
import gc
import importlib.util
import inspect
import json
import mmap
import os
import queue
import socket
import struct
import sys
import threading
import traceback
import weakref

import numpy as np

import triton_python_backend_utils as pb_utils

_HDR = struct.Struct("<II")
# One compact encoder: json.dumps with non-default arguments builds a new encoder on every call.
_encode_json = json.JSONEncoder(separators=(",", ":")).encode
# Tensor and model names as JSON strings, so the hot path formats messages without the encoder.
_QUOTED = {}


def _quoted(name):
    quoted = _QUOTED.get(name)
    if quoted is None:
        quoted = _QUOTED[name] = json.dumps(name)
    return quoted
_U64 = struct.Struct("<Q")
# Tensors smaller than this travel inline: a ring slot would cost more than the copy into the frame.
_INLINE_MAX = 64
# Ring allocations are aligned so numpy can read every element type in place.
_ALIGN = 64
# Frames at most this big are sent with one join+sendall; larger ones are sent in parts.
_JOIN_MAX = 1 << 16

_TYPE_NAMES = pb_utils._TYPE_NAMES
_NP = {
    k: np.dtype(v) for k, v in {
        "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
        "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
        "FP32": np.float32, "FP64": np.float64, "BF16": np.uint16,
    }.items()
}
# The C scanner behind json.loads, called directly on text: no encoding detection, no whitespace checks.
_scan = json.JSONDecoder().scan_once


# Frames of these files are left out of tracebacks: Triton shows only the model's own.
_OWN_FILES = (__file__, pb_utils.__file__)


def _error_text(e):
    """An exception as Triton's Python backend reports it: type and message, then where it was raised,
    innermost frame first (the stub's own frames left out)."""
    head = f"{type(e).__name__}: {e}"
    if isinstance(e, SyntaxError):
        return head
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename not in _OWN_FILES]
    if not frames:
        return head
    return head + "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))


_wrap = pb_utils.Tensor._wrap
_Response = pb_utils.InferenceResponse
_new = object.__new__
_NAME_TYPES = pb_utils._NAME_TYPES


def _array(shape, dtype, n, buf, offset):
    """An array over `n` bytes of `buf` at `offset`; a length that does not match the shape is an error
    (np.ndarray alone would accept a shorter tensor and read past it)."""
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != n or count < 0:
        raise ValueError(f"a tensor of shape {shape} and type {dtype} cannot have {n} bytes")
    return np.ndarray(shape, dtype, buf, offset)


class _Channel:
    """One socket's sending side: its lock, and its ring in shared memory (space is handed out under
    the lock, in the order frames are sent, so the server consumes each ring in order)."""

    def __init__(self, sock, ring, tail_offset):
        self.sock = sock
        self.lock = threading.Lock()
        self.ring_start, self.ring_len = ring if ring else (0, 0)
        self.tail_offset = tail_offset
        # The ring's write position, as a count of bytes ever allocated (the server's tail counts the same).
        self.head = 0


class _Out:
    """The tensors of one frame being sent: each goes to the channel's ring or, when small or when the
    ring is full, into the frame's payload. Built under the channel's lock."""

    __slots__ = ("conn", "ch", "parts", "payload_len", "ring")

    def __init__(self, conn, ch):
        self.conn = conn
        self.ch = ch
        # The payload's parts and length, and whether a tensor went to the ring.
        self.parts = []
        self.payload_len = 0
        self.ring = False

    def place(self, t):
        """Writes a tensor's bytes to the ring or the payload: (name, datatype, shape, length, where),
        `where` being ("o", file offset) or ("i", payload offset)."""
        arr = t._array
        dtype = t._dtype
        if dtype == 13:
            data = pb_utils.serialize_byte_tensor(arr) if arr.size else b""
            if data is None:
                raise pb_utils.TritonModelException(f"output '{t._name}': cannot serialize dtype {arr.dtype} as BYTES")
            n = len(data)
        else:
            data = None
            n = arr.nbytes
        off = self.conn._ring_alloc(self.ch, n) if n > _INLINE_MAX else None
        if off is not None:
            if data is None:
                if not arr.flags.c_contiguous:
                    arr = np.ascontiguousarray(arr)
                data = memoryview(arr).cast("B")
            self.conn.mm[off:off + n] = data
            self.ring = True
            where = ("o", off)
        else:
            where = ("i", self.payload_len)
            self.parts.append(data if data is not None else arr.tobytes())
            self.payload_len += n
        return t._name, _TYPE_NAMES[dtype], arr.shape, n, where

    def desc(self, t):
        """A tensor's description as a dict (for messages encoded as a whole)."""
        name, dt, shape, n, (k, v) = self.place(t)
        return {"n": name, "t": dt, "s": list(shape), "l": n, k: v}

    def json(self, t):
        """A tensor's description as JSON text, without the encoder (the hot path of every response)."""
        name, dt, shape, n, (k, v) = self.place(t)
        quoted = _quoted(name)
        dims = ",".join(map(str, shape))
        return f'{{"n":{quoted},"t":"{dt}","s":[{dims}],"l":{n},"{k}":{v}}}'


class _Frames:
    """Reads frames from a socket with as few system calls as possible."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def next(self):
        """(message, payload memoryview), or None at end of stream."""
        while True:
            if len(self.buf) >= 8:
                jlen, plen = _HDR.unpack_from(self.buf, 0)
                total = 8 + jlen + plen
                if len(self.buf) >= total:
                    # A buffer of its own: inline tensors keep pointing into it (writable, as models expect).
                    if len(self.buf) == total:
                        frame = self.buf
                        self.buf = bytearray()
                    else:
                        frame = self.buf[:total]
                        del self.buf[:total]
                    view = memoryview(frame)
                    return _scan(str(view[8:8 + jlen], "utf-8"), 0)[0], view[8 + jlen:]
                need = total - len(self.buf)
                if need > 1 << 16:
                    # A large frame: read the rest straight into its own buffer.
                    rest = bytearray(need)
                    view = memoryview(rest)
                    got = 0
                    while got < need:
                        k = self.sock.recv_into(view[got:])
                        if k == 0:
                            return None
                        got += k
                    self.buf += rest
                    continue
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buf += chunk


class Connection:
    """The stub's side of the two sockets and the shared memory."""

    def __init__(self, main_sock, side_sock, init):
        self.decoupled = bool(init.get("decoupled", False))
        self.mm = None
        rings = [None, None]
        shm = init.get("shm")
        if shm:
            fd = os.open(shm["path"], os.O_RDWR)
            try:
                self.mm = mmap.mmap(fd, shm["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            rings = shm["rings"]
        self.main = _Channel(main_sock, rings[0], 0)
        self.side = _Channel(side_sock, rings[1], 8)
        self.main_frames = _Frames(main_sock)
        # Frames read from the main socket while execute waited for a BLS answer, to serve next.
        self.deferred = collections.deque()
        self.side_frames = _Frames(side_sock)
        # Server-side blocks (offsets) whose arrays are gone; reported with the next message.
        self.released = collections.deque()
        self.next_id = 1
        self.id_lock = threading.Lock()
        self.calls = {}
        self.bls_pending = {}
        self.ready_fn = None
        # The main thread, and whether it is inside execute.
        self.main_ident = threading.get_ident()
        self.executing = False
        # The id of the execute call running, sent with log lines so the server logs them in its request's span.
        self.current_call = None

    # ---- sending -----------------------------------------------------------------------------

    def _new_id(self):
        with self.id_lock:
            i = self.next_id
            self.next_id += 1
            return i

    def _ring_alloc(self, ch, n):
        """Offset in the file for n bytes of the channel's ring, or None when the ring is too full."""
        size = ch.ring_len
        if self.mm is None or n > size // 2:
            return None
        n = (n + _ALIGN - 1) // _ALIGN * _ALIGN
        (tail,) = _U64.unpack_from(self.mm, ch.tail_offset)
        pos = ch.head % size
        if tail == ch.head and pos:
            # Everything was consumed: start over at the beginning, so small tensors keep reusing the
            # same few pages.
            ch.head += size - pos
            pos = 0
        skip = size - pos if pos + n > size else 0
        used = ch.head - tail if tail <= ch.head else 0
        if used + skip + n > size:
            return None
        ch.head += skip
        off = ch.ring_start + ch.head % size
        ch.head += n
        return off

    def _released(self):
        """The released blocks to report, taken from the queue (other threads add to it)."""
        released = self.released
        if not released:
            return None
        rel = []
        while True:
            try:
                rel.append(released.popleft())
            except IndexError:
                return rel

    def _write(self, ch, body, parts, payload_len):
        head = _HDR.pack(len(body), payload_len)
        if payload_len + len(body) <= _JOIN_MAX:
            ch.sock.sendall(b"".join([head, body, *parts]))
        else:
            ch.sock.sendall(head + body)
            for p in parts:
                ch.sock.sendall(p)

    def _finish(self, out):
        """The frame's closing fields (its ring position, released blocks) as JSON text."""
        tail = f',"ring":{out.ch.head}' if out.ring else ""
        rel = self._released()
        if rel:
            tail += ',"rel":[' + ",".join(map(str, rel)) + "]"
        return tail

    def send_text(self, head, tensors_of, main=False):
        """Sends a message given as JSON text: `head` (an object without its closing brace) and what
        `tensors_of(encode)` returns, `encode(tensor)` giving each tensor's description as JSON text."""
        ch = self.main if main else self.side
        with ch.lock:
            out = _Out(self, ch)
            text = head + tensors_of(out.json)
            self._write(ch, (text + self._finish(out) + "}").encode(), out.parts, out.payload_len)

    def send(self, msg, tensors_of=None, main=False):
        """Sends a message on the side socket (or the main one); `tensors_of(encode)` fills in tensor
        descriptions with `encode(tensor)` while the channel's lock is held, so its ring space is handed
        out in the order frames are sent."""
        ch = self.main if main else self.side
        with ch.lock:
            out = _Out(self, ch)
            if tensors_of is not None:
                tensors_of(out.desc)
            if out.ring:
                msg["ring"] = ch.head
            rel = self._released()
            if rel:
                msg["rel"] = rel
            self._write(ch, _encode_json(msg).encode(), out.parts, out.payload_len)

    def notify(self, op, **kw):
        kw["type"] = "call"
        kw["op"] = op
        self.send(kw)

    def call(self, op, **kw):
        fut = concurrent.futures.Future()
        i = self._new_id()
        self.calls[i] = fut
        kw.update(type="call", op=op, id=i)
        self.send(kw)
        ok, value = fut.result()
        if not ok:
            raise pb_utils.TritonModelException(value)
        return value

    def log(self, level, message, file, line):
        msg = {"type": "log", "level": level, "msg": message, "file": os.path.basename(file), "line": line}
        if self.current_call is not None:
            msg["call"] = self.current_call
        self.send(msg)

    def model_control(self, op, name, **kw):
        self.call("model_" + op, name=name, **kw) if op != "load" else self._load(name, **kw)

    def _load(self, name, config, files):
        # Files travel inline: they are small and rare.
        import base64

        self.call("model_load", name=name, config=config or "",
                  files={k: base64.b64encode(v).decode() for k, v in files.items()})

    def is_cancelled(self, key):
        return bool(self.call("is_cancelled", key=key))

    def send_response(self, key, response, flags):
        msg = {"type": "response", "key": key, "flags": int(flags)}

        def fill(encode):
            if response is not None:
                msg["resp"] = _encode_response(response, encode, None)

        # Sent from execute itself, a response takes the main socket, so it reaches the server before
        # execute's own answer (an error after it must not overtake it); from other threads, the side one.
        main = self.executing and threading.get_ident() == self.main_ident
        self.send(msg, fill, main=main)

    def bls_exec(self, request, decoupled):
        """A blocking `exec()`. From execute itself it goes over the main socket and this thread reads the
        answer there, with no other thread and no future involved: the hot path of BLS."""
        if decoupled or not self.executing or threading.get_ident() != self.main_ident:
            return self.bls(request, decoupled).result()
        i = self._new_id()
        head = '{"type":"bls","id":%d,"model":%s,"version":%d,"outputs":%s,"main":true' % (
            i, _quoted(request._model_name), request._model_version, _encode_json(request._outputs))
        extra = _bls_extras(request)
        if extra:
            head += "," + _encode_json(extra)[1:-1]
        inputs = request._inputs
        self.send_text(head, lambda encode: ',"inputs":[' + ",".join([encode(t) for t in inputs]) + "]", main=True)
        frames = self.main_frames
        while True:
            frame = frames.next()
            if frame is None:
                os._exit(0)
            reply, payload = frame
            if reply.get("type") == "bls_resp":
                if reply.get("id") == i:
                    break
                self._bls_response(reply, payload)
            else:
                # The server sends the next execute call while this one runs: it waits its turn.
                self.deferred.append(frame)
        resp = _bls_answer(reply, self, payload)
        if resp is None:
            resp = pb_utils.InferenceResponse(error=pb_utils.TritonError("the BLS request got no response"))
        return resp

    def bls(self, request, decoupled):
        """Sends a BLS request on the side socket; returns a future of its response (or of the iterator
        over a decoupled model's responses). The reader thread completes it."""
        fut = concurrent.futures.Future()
        i = self._new_id()
        stream = _ResponseStream() if decoupled else None
        self.bls_pending[i] = (fut, stream)
        if decoupled:
            fut.set_result(stream)
        msg = {
            "type": "bls", "id": i, "model": request._model_name, "version": request._model_version,
            "outputs": request._outputs, "inputs": None,
        }
        msg.update(_bls_extras(request))
        if decoupled:
            msg["decoupled"] = True

        def fill(encode):
            msg["inputs"] = [encode(t) for t in request._inputs]

        try:
            self.send(msg, fill)
        except BaseException:
            self.bls_pending.pop(i, None)
            raise
        return fut

    # ---- receiving ---------------------------------------------------------------------------

    def tensor(self, desc, payload):
        """A pb_utils.Tensor for a tensor the server sent. Shared-memory tensors are not copied: the
        block is released to the server once the last array using it is gone."""
        dt = desc["t"]
        shape = desc["s"]
        n = desc["l"]
        if "o" in desc:
            off = desc["o"]
            if dt == "BYTES":
                arr = pb_utils.deserialize_bytes_tensor(memoryview(self.mm)[off:off + n]).reshape(shape)
                self.released.append(off)
            else:
                arr = _array(shape, _NP[dt], n, self.mm, off)
                weakref.finalize(arr, self.released.append, off)
        else:
            start = desc["i"]
            if dt == "BYTES":
                arr = pb_utils.deserialize_bytes_tensor(payload[start:start + n]).reshape(shape)
            else:
                arr = _array(shape, _NP[dt], n, payload, start)
        return _wrap(desc["n"], arr, _NAME_TYPES[dt])

    def reader(self):
        """The reader thread, on the side socket: answers pings and readiness probes, completes calls and
        BLS requests. When the server goes away, so does the stub."""
        try:
            while True:
                frame = self.side_frames.next()
                if frame is None:
                    break
                msg, payload = frame
                kind = msg.get("type")
                if kind == "ping":
                    self.send({"type": "pong"})
                elif kind == "reply":
                    fut = self.calls.pop(msg.get("id"), None)
                    if fut is not None:
                        err = msg.get("error")
                        fut.set_result((False, err) if err is not None else (True, msg.get("value")))
                elif kind == "bls_resp":
                    self._bls_response(msg, payload)
                elif kind == "is_ready":
                    # Answered here, not by the main thread: a readiness probe must not wait for a long
                    # request.
                    self._answer_ready(msg)
        except OSError:
            pass
        # The server is gone (or closed the socket to stop this stub): nothing is left to serve.
        os._exit(0)

    def _answer_ready(self, msg):
        reply = {"type": "reply", "id": msg.get("id")}
        try:
            fn = self.ready_fn
            reply["value"] = bool(fn()) if fn is not None else True
        except Exception as e:
            reply["value"] = False
            reply["error"] = _error_text(e)
        self.send(reply)

    def _bls_response(self, msg, payload):
        i = msg.get("id")
        final = msg.get("final", True)
        entry = self.bls_pending.get(i)
        if entry is None:
            return
        fut, stream = entry
        if final:
            self.bls_pending.pop(i, None)
        resp = _bls_answer(msg, self, payload)
        if stream is None:
            if resp is None:
                resp = pb_utils.InferenceResponse(error=pb_utils.TritonError("the BLS request got no response"))
            fut.set_result(resp)
        else:
            stream.put(resp, final)


def _bls_answer(msg, conn, payload):
    """The response a `bls_resp` frame carries, or None when it carries none (a bare final flag)."""
    if "resp" not in msg:
        return None
    try:
        return _decode_response(msg["resp"], conn, payload)
    except Exception as e:  # a broken response is still an answer
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"cannot read the BLS response: {e}"))


def _bls_extras(request):
    """The fields of a BLS request that are sent only when set."""
    extra = {}
    if request._request_id:
        extra["request_id"] = request._request_id
    if request._correlation_id:
        extra["corr"] = request._correlation_id
    if request._flags:
        extra["flags"] = request._flags
    if request._timeout:
        extra["timeout"] = request._timeout
    if request._parameters:
        extra["params"] = request._parameters
    key = getattr(request._trace, "_key", None)
    if key is not None:
        extra["trace"] = key
    return extra


class _ResponseStream:
    """The responses of a decoupled BLS request, in order; a final flag without a response yields an
    empty response, as Triton does."""

    def __init__(self):
        self.q = queue.Queue()
        self.done = False

    def put(self, resp, final):
        if resp is None and final:
            resp = pb_utils.InferenceResponse()
        if resp is not None:
            self.q.put(resp)
        if final:
            self.q.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        item = self.q.get()
        if item is None:
            self.done = True
            raise StopIteration
        return item


def _encode_response(resp, encode, requested):
    """A response as the server reads it. Only the outputs the request asked for cross over."""
    out = {}
    if resp.has_error():
        err = resp.error()
        out["err"] = {"m": err.message(), "c": err.code()}
    else:
        tensors = resp.output_tensors()
        if requested is not None:
            tensors = [t for t in tensors if t.name() in requested]
        out["out"] = [encode(t) for t in tensors]
    params = resp._parameters
    if params:
        out["params"] = params
    return out


def _decode_response(r, conn, payload):
    if "err" in r:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(r["err"]["m"], r["err"].get("c", 1)))
    # Built without the constructor's checks: the server's tensors are Tensors already.
    resp = _new(_Response)
    resp._outputs = [conn.tensor(d, payload) for d in r.get("out", ())]
    resp._error = None
    resp._parameters = r.get("params") or {}
    return resp


def _build_request(r, conn, payload):
    # The server's requests need none of the checks the constructor makes for models' BLS requests.
    req = pb_utils.InferenceRequest.__new__(pb_utils.InferenceRequest)
    req._model_name = conn.model_name
    req._inputs = [conn.tensor(d, payload) for d in r["inputs"]]
    req._outputs = r["outputs"]
    req._request_id = r.get("id", "")
    req._correlation_id = r.get("corr", 0)
    req._flags = r.get("flags", 0)
    req._timeout = 0
    req._model_version = conn.model_version
    req._parameters = r.get("params") or {}
    req._preferred_memory = None
    req._trace = pb_utils.InferenceTrace(r["key"] if r.get("traced") else None)
    req._key = r["key"]
    req._sender = None
    req._release_flags = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    return req


class _Plain(Exception):
    """An error of the stub itself, reported with its message only (as Triton words them)."""


def _check_responses(result, n, decoupled, model, rescheduled=()):
    """Triton's rules for what execute returns; a wrong return fails every request of the call. A
    rescheduled request's response is not sent (it is None, as Triton asks): an empty one stands in."""
    if decoupled:
        if result is not None:
            raise _Plain(
                f"Python model '{model}' is using the decoupled mode and the execute function must return None.")
        return []
    if not isinstance(result, list):
        raise _Plain(f"Expected a list in the execute return, found type '{type(result)}'.")
    if len(result) != n:
        raise _Plain(
            f"Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
            f"InferenceRequest(s) size is:{n}, and InferenceResponse(s) size is:{len(result)}\n")
    if rescheduled:
        result = [pb_utils.InferenceResponse() if i in rescheduled else r for i, r in enumerate(result)]
    for r in result:
        if not isinstance(r, pb_utils.InferenceResponse):
            raise _Plain(
                f"Expected an 'InferenceResponse' object in the execute function return list, found type "
                f"'{type(r)}'.")
    return result


def _import_model(path):
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{path}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise AttributeError(f"'{path}' does not define class TritonPythonModel")
    return module.TritonPythonModel


def _serve(conn, init):
    model_cls = _import_model(init["model_path"])
    if init.get("mode") == "autocomplete":
        cfg = pb_utils.ModelConfig(init["config"])
        fn = getattr(model_cls, "auto_complete_config", None)
        if fn is not None:
            result = fn(cfg)
            if not isinstance(result, pb_utils.ModelConfig):
                raise pb_utils.TritonModelException(
                    f"auto_complete_config of model '{conn.model_name}' must return a valid pb.ModelConfig object.")
            cfg = result
        conn.send({"type": "autocomplete", "config": cfg.as_dict()}, main=True)
        return
    model = model_cls()
    if hasattr(model, "initialize"):
        model.initialize(dict(init["args"]))
    execute = getattr(model, "execute", None)
    if execute is None:
        raise AttributeError(f"class TritonPythonModel of model '{conn.model_name}' has no execute method")
    is_async = inspect.iscoroutinefunction(execute)
    loop = asyncio.new_event_loop() if is_async else None
    if loop is not None:
        asyncio.set_event_loop(loop)
    conn.ready_fn = getattr(model, "is_model_ready", None) or getattr(model, "is_ready", None)
    # What initialize built lives as long as the model: keep it out of every garbage collection.
    gc.collect()
    if hasattr(gc, "freeze"):  # Python 3.7+
        gc.freeze()
    conn.send({"type": "ready", "probe": conn.ready_fn is not None}, main=True)
    deferred = conn.deferred
    frames = conn.main_frames
    while True:
        frame = deferred.popleft() if deferred else frames.next()
        if frame is None:
            return
        msg, payload = frame
        kind = msg.get("type")
        if kind == "execute":
            _execute(conn, msg, payload, execute, loop)
        elif kind == "finalize":
            err = None
            fin = getattr(model, "finalize", None)
            if fin is not None:
                try:
                    fin()
                except Exception as e:
                    err = _error_text(e)
            conn.send({"type": "finalized", "error": err}, main=True)
            return


def _execute(conn, msg, payload, execute, loop):
    reply = {"type": "done", "id": msg["id"]}
    requests = None
    wanted = None
    result = None
    try:
        requests = [_build_request(r, conn, payload) for r in msg["requests"]]
        conn.executing = True
        conn.current_call = msg["id"]
        try:
            result = execute(requests) if loop is None else loop.run_until_complete(execute(requests))
        finally:
            conn.executing = False
            conn.current_call = None
        rescheduled = [i for i, r in enumerate(requests)
                       if r._release_flags & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE]
        responses = _check_responses(result, len(requests), conn.decoupled, conn.model_name, rescheduled)
        wanted = [r._outputs for r in requests]
        if rescheduled:
            reply["resched"] = rescheduled
    except Exception as e:
        text = str(e) if isinstance(e, _Plain) else _error_text(e)
        reply["err"] = f"Failed to process the request(s) for model '{conn.instance_name}', message: {text}"
        responses = None
    del requests, result

    def fill(encode):
        # The common response (outputs, no error, no parameters) as text; anything else through the encoder.
        out = []
        for r, w in zip(responses, wanted):
            if r._error is None and not r._parameters:
                out.append('{"out":[' + ",".join([encode(t) for t in r._outputs if t._name in w]) + "]}")
            else:
                out.append(_encode_json(_encode_response(r, lambda t: json.loads(encode(t)), w)))
        return ',"resps":[' + ",".join(out) + "]"

    try:
        if "err" in reply or not responses:
            conn.send(reply, main=True)
        else:
            head = f'{{"type":"done","id":{msg["id"]}'
            if "resched" in reply:
                head += ',"resched":' + _encode_json(reply["resched"])
            conn.send_text(head, fill, main=True)
    except Exception as e:
        # The responses could not be encoded (e.g. an output numpy cannot lay out): fail the call.
        text = f"Failed to process the request(s) for model '{conn.instance_name}', message: {_error_text(e)}"
        conn.send({"type": "done", "id": msg["id"], "err": text}, main=True)


def set_process_name(name):
    """Sets this process's name (/proc/<pid>/comm: what `top` and `ps -o comm` show; the kernel keeps
    15 bytes) to the one the server chose, naming the model and instance. Writing /proc/self/comm
    names the whole process (its main thread) from any thread, with no C call."""
    if not name:
        return
    try:
        with open("/proc/self/comm", "wb") as f:
            f.write(os.fsencode(name)[:15])
    except OSError as e:
        print(f"tritonrs: cannot set the stub's process name to '{name}': {e}", file=sys.stderr)


def paths_of(args):
    """The folders for sys.path in the stub's arguments (sys.argv[1:]), `--model M --instance I --
    PATH...`, read by position (a model may be named `--`); all of them in the older form, paths only."""
    if len(args) >= 5 and args[0] == "--model" and args[2] == "--instance" and args[4] == "--":
        return list(args[5:])
    return list(args)


def main():
    # fd 0 is the control socket. Move it out of the way so a model reading stdin reads nothing.
    fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    main_sock = socket.socket(fileno=fd)
    # socket.recv_fds is Python 3.9+; recvmsg works on the older Pythons of JetPack too.
    _, anc, _, _ = main_sock.recvmsg(1, socket.CMSG_SPACE(4))
    fds = [struct.unpack_from("i", data)[0] for level, kind, data in anc
           if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS and len(data) >= 4]
    if not fds:
        return
    side_sock = socket.socket(fileno=fds[0])
    frame = _Frames(main_sock).next()
    if frame is None:
        return
    init = frame[0]
    set_process_name(init.get("process_name"))
    conn = Connection(main_sock, side_sock, init)
    conn.model_name = init.get("model_name", "")
    conn.model_version = int(init.get("model_version", -1) or -1)
    conn.instance_name = init.get("args", {}).get("model_instance_name", conn.model_name)
    pb_utils._set_connection(conn)
    threading.Thread(target=conn.reader, name="tritonrs-reader", daemon=True).start()
    conn.send({"type": "hello"}, main=True)
    try:
        _serve(conn, init)
    except BaseException as e:
        if isinstance(e, SystemExit):
            raise
        conn.send({"type": "init_error", "error": _error_text(e)}, main=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    for p in paths_of(sys.argv[1:]):
        if p not in sys.path:
            sys.path.append(p)
    main()

"""A real OTLP/HTTP trace receiver for the tests: a small threaded HTTP server on a loopback port that
accepts `POST /v1/traces` as `application/x-protobuf` (or OTLP's JSON, `application/json`), decodes
each ExportTraceServiceRequest with PyPI's `opentelemetry-proto` into plain dicts and answers 200 with
an empty ExportTraceServiceResponse, as a collector does.

    with OtlpReceiver() as r:
        ... start a server with --trace-config opentelemetry,url=<r.url> ...
        spans = r.wait_for(3, timeout=10)

Each span is a dict: trace_id, span_id, parent_span_id (lowercase hex, "" for a root), name, kind
("INTERNAL", "SERVER", ...), start/end (ns), attributes {key: value}, events [(name, time_ns,
attributes)], status {"code": "UNSET"|"OK"|"ERROR", "message": ...}, resource {key: value} and
scope {"name", "version"}. `down` makes the receiver answer 503 (mode "503"), drop the connection
without an answer (mode "close") or hold each export unanswered until `down` changes (mode "hang", a
collector that accepts and never replies), for the collector-down tests.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

_KIND = {v: k.removeprefix("SPAN_KIND_") for k, v in trace_pb2.Span.SpanKind.items()}
_STATUS = {v: k.removeprefix("STATUS_CODE_") for k, v in trace_pb2.Status.StatusCode.items()}


def any_value(v):
    """An OTLP AnyValue as the Python value it holds (str, int, float, bool, bytes, list, dict, None)."""
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, which)


def attributes(kvs) -> dict:
    return {kv.key: any_value(kv.value) for kv in kvs}


def span_dict(span, resource: dict, scope: dict) -> dict:
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "trace_state": span.trace_state,
        "flags": span.flags,
        "name": span.name,
        "kind": _KIND.get(span.kind, str(span.kind)),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "events": [(e.name, e.time_unix_nano, attributes(e.attributes)) for e in span.events],
        "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links],
        "status": {"code": _STATUS.get(span.status.code, str(span.status.code)), "message": span.status.message},
        "resource": resource,
        "scope": scope,
    }


def decode_request(req: trace_service_pb2.ExportTraceServiceRequest) -> list[dict]:
    spans = []
    for rs in req.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = {"name": ss.scope.name, "version": ss.scope.version, "attributes": attributes(ss.scope.attributes)}
            spans += [span_dict(s, resource, scope) for s in ss.spans]
    return spans


def _hex_ids_to_base64(obj):
    """OTLP/JSON writes trace and span ids as hex, protobuf's JSON mapping wants base64 for bytes."""
    if isinstance(obj, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode()
                    if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str) else _hex_ids_to_base64(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hex_ids_to_base64(x) for x in obj]
    return obj


def parse_body(body: bytes, content_type: str) -> trace_service_pb2.ExportTraceServiceRequest:
    req = trace_service_pb2.ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), req)
    else:
        req.ParseFromString(body)
    return req


class OtlpReceiver:
    """The receiver; start() binds 127.0.0.1:0 (or `port`), stop() shuts it down."""

    def __init__(self, port: int = 0):
        self.requests = 0  # every POST /v1/traces seen, answered or not
        self.rejected = 0  # those answered 503 or dropped while down
        self.errors: list[str] = []  # bodies that did not decode, paths that were wrong
        self.content_types: list[str] = []
        self.batch_sizes: list[int] = []  # spans in each export that was accepted
        self.headers: list[dict] = []
        self.down: str | None = None  # None (up), "503" or "close"
        self._spans: list[dict] = []
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> "OtlpReceiver":
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "receiver not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The traces endpoint, as `--trace-config opentelemetry,url=` takes it."""
        return f"http://127.0.0.1:{self.port}/v1/traces"

    # ---- what arrived ----------------------------------------------------------------------
    @property
    def spans(self) -> list[dict]:
        with self._cond:
            return list(self._spans)

    def clear(self):
        with self._cond:
            self._spans.clear()
            self.requests = self.rejected = 0
            self.errors.clear()
            self.content_types.clear()
            self.batch_sizes.clear()
            self.headers.clear()

    def wait_for(self, n_spans: int, timeout: float = 10.0, settle: float = 0.0) -> list[dict]:
        """The spans received once there are at least `n_spans` (then `settle` seconds more, to catch
        any extra); fails with what arrived when `timeout` passes first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._spans) < n_spans:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self._spans)} of {n_spans} spans arrived within {timeout}s: "
                                         f"{[s['name'] for s in self._spans]}; errors {self.errors}")
                self._cond.wait(left)
        if settle:
            time.sleep(settle)
        return self.spans

    def traces(self) -> dict[str, list[dict]]:
        """The spans grouped by trace id."""
        out: dict[str, list[dict]] = {}
        for s in self.spans:
            out.setdefault(s["trace_id"], []).append(s)
        return out

    # ---- HTTP ------------------------------------------------------------------------------
    def _record(self, body: bytes, headers) -> tuple[int, bytes, str]:
        ctype = headers.get("Content-Type", "")
        encoding = headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        try:
            req = parse_body(body, ctype)
        except Exception as e:  # noqa: BLE001 - a bad body is reported to the test, not raised here
            with self._cond:
                self.errors.append(f"{ctype}: {e!r}")
            return 400, b"", "text/plain"
        spans = decode_request(req)
        with self._cond:
            self._spans += spans
            self.content_types.append(ctype)
            self.batch_sizes.append(len(spans))
            self.headers.append(dict(headers))
            self._cond.notify_all()
        resp = trace_service_pb2.ExportTraceServiceResponse()
        if ctype.startswith("application/json"):
            return 200, json_format.MessageToJson(resp).encode(), "application/json"
        return 200, resp.SerializeToString(), "application/x-protobuf"

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
                with receiver._cond:
                    receiver.requests += 1
                    down = receiver.down
                    if down:
                        receiver.rejected += 1
                if down == "hang":
                    # Held until the test changes `down`; then answered as the receiver is by then.
                    while receiver.down == "hang" and not receiver._stopping.wait(0.05):
                        pass
                    down = receiver.down or "503"
                if down == "close":
                    self.close_connection = True
                    self.connection.close()
                    return
                if down:
                    self._answer(503, b"collector down", "text/plain")
                    return
                if self.path.split("?")[0] != "/v1/traces":
                    with receiver._cond:
                        receiver.errors.append(f"POST to {self.path}")
                    self._answer(404, b"", "text/plain")
                    return
                self._answer(*receiver._record(body, self.headers))

            def _answer(self, status: int, body: bytes, ctype: str):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

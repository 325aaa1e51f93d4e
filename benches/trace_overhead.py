#!/usr/bin/env python3
"""What OpenTelemetry tracing costs (issue 37's goal: at most 10% of throughput at gRPC c8 on `simple`
with every request traced).

One tritonrs serves the example repository with `--trace-config mode=opentelemetry` exporting to an
OTLP/HTTP endpoint started here that takes each export and answers 200 without decoding it (a
collector runs on another machine; decoding 10,000 spans a second in Python on the same two cores
would measure the collector; `--decode` uses tests/python/otlp_receiver.py, which decodes every span),
and
perf_analyzer measures `simple` in rounds that alternate tracing off (trace_level OFF) and on (level
TIMESTAMPS, rate 1) through the trace settings API, so both are measured on the same server, warm, in
the same minutes. The best round of each counts. Prints throughput and p50/p99 of both, the ratio, and
how many spans the receiver took (every traced request is 3 spans) and the server dropped.

  source scripts/env.sh; python benches/trace_overhead.py [--bin target/release/tritonrs]
      [--concurrency 8] [--protocol grpc] [--rounds 3]

BENCH_INTERVAL_MS and BENCH_STABILITY_PERCENT as for side_by_side.py. Machines here are shared and
noisy: compare the ratio of one run.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests/python"))
from side_by_side import REPO, Server, free_port, perf  # noqa: E402
from otlp_receiver import OtlpReceiver  # noqa: E402


class CountingReceiver:
    """An OTLP/HTTP endpoint that reads each export and answers 200, counting bytes and exports."""

    def __init__(self):
        counts = self.counts = {"exports": 0, "bytes": 0}

        class Handler(BaseHTTPRequestHandler):
            # Keeps the exporter's connection open, as collectors do (HTTP/1.0 would make every
            # export a new TCP connection on both sides).
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                self.rfile.read(n)
                counts["exports"] += 1
                counts["bytes"] += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/traces"

    def start(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()

    def received(self) -> str:
        return f"{self.counts['exports']:,} exports, {self.counts['bytes']:,} bytes"


def set_trace(http: int, level: str):
    body = json.dumps({"trace_level": [level], "trace_rate": "1"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http}/v2/trace/setting", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.load(r)["trace_level"] == [level]


def dropped(metrics: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("tritonrs_trace_spans_dropped_total"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target/release/tritonrs"))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--protocol", default="grpc", choices=["grpc", "http"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decode", action="store_true", help="decode every span (tests/python/otlp_receiver.py)")
    args = ap.parse_args()
    receiver = (OtlpReceiver() if args.decode else CountingReceiver()).start()
    http, grpc, metrics = free_port(), free_port(), free_port()
    server = Server("tritonrs", [args.bin, "--model-repository", str(REPO / "model-repos/examples"),
                                 "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                                 "--log-info=false", "--trace-config", "mode=opentelemetry",
                                 "--trace-config", f"opentelemetry,url={receiver.url}",
                                 "--trace-config", "opentelemetry,bsp_schedule_delay=200"], http, grpc)
    best = {"OFF": None, "TIMESTAMPS": None}
    try:
        socket.create_connection(("127.0.0.1", grpc), timeout=2).close()
        for i in range(args.rounds * 2):
            level = ["OFF", "TIMESTAMPS"][i % 2] if (i // 2) % 2 == 0 else ["TIMESTAMPS", "OFF"][i % 2]
            set_trace(http, level)
            r = perf(server, args.protocol, args.concurrency)
            if r is None:
                continue
            print(f"round {i // 2 + 1} tracing {'on ' if level != 'OFF' else 'off'}: {r['thr']:,.0f} inf/s, "
                  f"p50 {r['p50']:,.0f} us, p99 {r['p99']:,.0f} us")
            if best[level] is None or r["thr"] > best[level]["thr"]:
                best[level] = r
        set_trace(http, "OFF")
        got = f"{len(receiver.spans):,} spans" if args.decode else receiver.received()
        lost = dropped(metrics)
    finally:
        server.stop()
        receiver.stop()
    off, on = best["OFF"], best["TIMESTAMPS"]
    if off is None or on is None:
        sys.exit("a perf_analyzer run failed")
    print(f"\n{args.protocol} c{args.concurrency} simple, best round of {args.rounds}:")
    print(f"  tracing off: {off['thr']:9,.0f} inf/s  p50 {off['p50']:7,.0f} us  p99 {off['p99']:7,.0f} us")
    print(f"  rate=1     : {on['thr']:9,.0f} inf/s  p50 {on['p50']:7,.0f} us  p99 {on['p99']:7,.0f} us")
    print(f"  traced/off throughput {on['thr'] / off['thr']:.3f}x (cost {100 * (1 - on['thr'] / off['thr']):.1f}%)")
    print(f"  received {got}; spans dropped {lost:,.0f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The Python stub's own CPU per `execute` call, with no server: a forked fake server writes N execute
frames for model-repos/python/add_sub (two FP32[4] inputs inline, the wire format of
src/backend/python/ipc.rs) into the main socket at once, so the stub never waits, and drains its
answers; the stub process's CPU time divided by N is what the stub costs a request on top of the
model itself (frame read, JSON, request objects, the model's execute, the answer's encoding and
its send).

  .anchors/venv/bin/python benches/stub_hot_path.py         (any python3 with numpy)

Knobs (environment): BENCH_N (default 20000 calls a run), BENCH_REPEAT (default 5 runs; the best and
the median are printed), STUB_DIR (default src/backend/python/stub: point it at a copy of another
revision's stub to compare the two on this machine, alternating runs).
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STUB_DIR = Path(os.environ.get("STUB_DIR", REPO / "src/backend/python/stub"))
MODEL = REPO / "model-repos/python/add_sub/1/model.py"
N = int(os.environ.get("BENCH_N", "20000"))
REPEAT = max(1, int(os.environ.get("BENCH_REPEAT", "5")))


def frames(n: int) -> bytes:
    """n execute calls of one add_sub request each, as the server sends them."""
    payload = struct.pack("<4f", 1, 2, 3, 4) + struct.pack("<4f", 4, 3, 2, 1)
    out = []
    for i in range(n):
        msg = ('{"type":"execute","id":%d,"requests":[{"key":%d,"outputs":["OUTPUT0","OUTPUT1"],"inputs":['
               '{"n":"INPUT0","t":"FP32","s":[4],"l":16,"i":0},{"n":"INPUT1","t":"FP32","s":[4],"l":16,"i":16}]}]}'
               % (2 * i + 1, 2 * i + 2)).encode()
        out.append(struct.pack("<II", len(msg), len(payload)) + msg + payload)
    return b"".join(out)


def fake_server(sock: socket.socket, data: bytes):
    """Writes every frame, then closes its sending side (the stub ends at end of stream), and drains
    the stub's answers meanwhile."""
    def drain():
        while sock.recv(1 << 20):
            pass
    reader = threading.Thread(target=drain)
    reader.start()
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    reader.join()


def run_once() -> float:
    """One run in a child process (a fresh interpreter state each time): CPU µs per call."""
    main_a, main_b = socket.socketpair()
    side_a, side_b = socket.socketpair()
    data = frames(N)
    rd, wr = os.pipe()
    stub_pid = os.fork()
    if stub_pid == 0:
        main_b.close()
        side_b.close()
        os.close(rd)
        sys.path.insert(0, str(STUB_DIR))
        import triton_python_backend_utils as pb_utils
        import tritonrs_stub as stub

        conn = stub.Connection(main_a, side_a, {})
        conn.model_name, conn.model_version, conn.instance_name = "add_sub", 1, "add_sub_0_0"
        pb_utils._set_connection(conn)
        outputs = [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)]
        config = json.dumps({"name": "add_sub", "output": outputs})
        init = {"model_path": str(MODEL), "args": {"model_config": config, "model_instance_name": "add_sub_0_0"}}
        # The model's initialize and the ready message are outside the measurement: they are not per call.
        t0 = time.process_time()
        stub._serve(conn, init)
        spent = time.process_time() - t0
        main_a.close()
        os.write(wr, f"{spent}".encode())
        os._exit(0)
    main_a.close()
    side_a.close()
    os.close(wr)
    fake_server(main_b, data)
    os.waitpid(stub_pid, 0)
    with os.fdopen(rd) as f:
        return float(f.read()) * 1e6 / N


def main():
    runs = sorted(run_once() for _ in range(REPEAT))
    print(f"stub CPU per execute call ({STUB_DIR}, {N} calls, {REPEAT} runs): best {runs[0]:.1f} µs, "
          f"median {statistics.median(runs):.1f} µs")


if __name__ == "__main__":
    main()

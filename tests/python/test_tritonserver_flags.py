"""tritonserver 2.51's command line on tritonrs (issue 35, item 1).

Every flag that the reference tritonserver's `--help` lists starts tritonrs to readiness with a typical
value; --reuse-http-port lets two servers share a port; --http-thread-count sizes the I/O runtime;
--grpc-infer-response-compression-level compresses infer responses; --allow-sagemaker and
--allow-vertex-ai stop the start with one line; `tritonrs --help` groups the flags.
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from helpers import BIN, TRITONSERVER, copy_models, free_port, run_cli, server_env, simple_inputs


# Typical values of flags whose value has a format (or where a type's generic value would not do);
# "{repo}" and "{tmp}" are filled in. The others get TYPE_VALUES by their `<type>`.
TYPICAL = {
    "--id": "edge-1",
    "--exit-timeout-secs": "5",
    "--log-verbose": "1",
    "--log-format": "ISO8601",
    "--log-file": "{tmp}/server.log",
    "--model-store": "{repo}",
    "--model-repository": "{repo}",
    "--model-control-mode": "explicit",
    "--repository-poll-secs": "5",
    "--load-model": "*",
    "--model-config-name": "h100",
    "--model-namespacing": "true",
    "--model-load-thread-count": "2",
    "--model-load-retry-count": "2",
    "--http-address": "127.0.0.1",
    "--http-port": "{http_port}",
    "--http-header-forward-pattern": "x-.*",
    "--http-thread-count": "4",
    "--http-restricted-api": "model-repository,statistics:admin-key=secret",
    "--grpc-address": "127.0.0.1",
    "--grpc-port": "0",
    "--grpc-header-forward-pattern": "x-.*",
    "--grpc-infer-allocation-pool-size": "8",
    # TLS stays off (the certificate flags are ignored unless --grpc-use-ssl is true, as in tritonserver).
    "--grpc-use-ssl": "false",
    "--grpc-use-ssl-mutual": "false",
    "--grpc-server-cert": "{tmp}/server.crt",
    "--grpc-server-key": "{tmp}/server.key",
    "--grpc-root-cert": "{tmp}/root.crt",
    "--grpc-infer-response-compression-level": "high",
    "--grpc-keepalive-time": "7200000",
    "--grpc-keepalive-timeout": "20000",
    "--grpc-http2-max-pings-without-data": "2",
    "--grpc-http2-min-recv-ping-interval-without-data": "300000",
    "--grpc-http2-max-ping-strikes": "2",
    "--grpc-max-connection-age": "60000",
    "--grpc-max-connection-age-grace": "5000",
    "--grpc-restricted-protocol": "model-repository,statistics:admin-key=secret",
    # Turning these on is refused (test_sagemaker_and_vertex_ai_are_refused); off, they start.
    "--allow-sagemaker": "false",
    "--allow-vertex-ai": "false",
    "--sagemaker-port": "8080",
    "--sagemaker-safe-port-range": "8000-8002",
    "--sagemaker-thread-count": "8",
    "--vertex-ai-port": "8080",
    "--vertex-ai-thread-count": "8",
    "--vertex-ai-default-model": "simple",
    "--metrics-address": "127.0.0.1",
    "--metrics-port": "0",
    "--metrics-interval-ms": "2000.0",
    "--metrics-config": "summary_latencies=true",
    "--trace-config": "triton,file={tmp}/trace.json",
    "--backend-directory": "{tmp}",
    "--backend-config": "python,a=b",
    "--repoagent-directory": "{tmp}",
    "--cache-config": "local,size=1048576",
    "--cache-directory": "{tmp}",
    "--rate-limit": "execution_count",
    "--rate-limit-resource": "R1:1:0",
    "--pinned-memory-pool-byte-size": "268435456",
    "--cuda-memory-pool-byte-size": "0:67108864",
    "--cuda-virtual-address-size": "0:1073741824",
    "--min-supported-compute-capability": "6.0",
    "--buffer-manager-thread-count": "2",
    "--host-policy": "gpu0,cpu-cores=0",
    "--model-load-gpu-limit": "0:0.9",
    "--response-cache-byte-size": "1048576",
    "--trace-file": "{tmp}/trace.json",
    "--trace-level": "TIMESTAMPS",
    "--trace-rate": "1000",
    "--trace-count": "-1",
    "--trace-log-frequency": "0",
}
TYPE_VALUES = {"boolean": "true", "integer": "1", "float": "1.5", "string": "x"}
# A flag that stops HTTP would leave nothing to check readiness on.
EXTRA = {"--allow-metrics": ["--metrics-port=0"]}


def reference_flags() -> list[tuple[str, str | None]]:
    """(flag, type or None) for every flag of tritonserver's `--help` (it prints it on stderr)."""
    if not TRITONSERVER.exists():
        pytest.skip(f"tritonserver 2.51 not found at {TRITONSERVER}; run scripts/test-tools.sh")
    out = subprocess.run([str(TRITONSERVER), "--help"], capture_output=True, text=True, timeout=60)
    flags = re.findall(r"^  (--[a-z0-9-]+)(?: <(.*)>)?$", out.stderr + out.stdout, re.M)
    assert len(flags) > 80, f"tritonserver --help listed only {len(flags)} flags:\n{out.stderr}"
    return [(f, t or None) for f, t in flags if f != "--help"]


def ready(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    """Polls /v2/health/ready on `port` until 200; False if `proc` exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if c.recv(64).startswith(b"HTTP/1.1 200"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def start_with(flag_args: list[str], http_port: int, timeout: float = 20.0) -> tuple[bool, str]:
    """Starts tritonrs with `flag_args` (last, so they win) on `http_port`; whether it became ready,
    and its log. Stops it."""
    cmd = [str(BIN), f"--http-port={http_port}", "--http-address=127.0.0.1", "--grpc-port=0",
           "--grpc-address=127.0.0.1", "--allow-metrics=false", "--metrics-port=0", *flag_args]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=server_env())
    try:
        ok = ready(http_port, proc, timeout)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    return ok, err.decode(errors="replace")


def test_every_tritonserver_flag_starts_tritonrs(tmp_path):
    flags = reference_flags()
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("server.crt", "server.key", "root.crt"):
        (tmp_path / name).write_text("not used while --grpc-use-ssl is false\n")

    def one(flag_type):
        flag, typ = flag_type
        port = free_port()
        value = TYPICAL.get(flag, TYPE_VALUES.get(typ or "", ""))
        value = value.format(repo=repo, tmp=tmp_path, http_port=port)
        arg = flag if typ is None else f"{flag}={value}"
        base = [] if flag in ("--model-store", "--model-repository") else [f"--model-repository={repo}"]
        ok, log = start_with([*base, *EXTRA.get(flag, []), arg], port)
        return flag, ok, f"{arg}: {log[-1500:]}"

    # Two at a time: each start takes a fraction of a second.
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, flags))
    skipped = [f for f, ok, _ in results if ok is None]
    failed = [why for _, ok, why in results if ok is False]
    assert not failed, f"{len(failed)} of {len(flags)} flags did not start tritonrs:\n" + "\n\n".join(failed)
    assert not skipped and len(results) == len(flags) >= 80, (len(results), skipped)


@pytest.mark.parametrize("flag,what", [("--allow-sagemaker", "SageMaker"), ("--allow-vertex-ai", "Vertex AI")])
def test_sagemaker_and_vertex_ai_are_refused(repo, flag, what):
    r = run_cli("--model-repository", str(repo), "--http-port=0", "--grpc-port=0", "--metrics-port=0", f"{flag}=true")
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if "ERROR" in line or "error" in line]
    assert len(errors) == 1, r.stderr
    assert flag in errors[0] and what in errors[0] and "does not serve" in errors[0], r.stderr


def test_two_servers_share_a_port_with_reuse_http_port(repo, start_server):
    copy_models(repo, "simple")
    port = free_port()
    args = [f"--model-repository={repo}", f"--http-port={port}", "--reuse-http-port=true"]
    first = start_server(*args)
    second = start_server(*args)
    assert first.port == second.port == port
    # The readiness poll of the second may have been answered by the first (the kernel spreads
    # connections over both), so wait for the second's own log to say its model is ready.
    for s in (first, second):
        s.wait_for_log(r"Model 'simple' version 1 is READY", timeout=30)
    import tritonclient.http as httpclient

    for s in (first, second):
        out = s.client().infer("simple", simple_inputs(httpclient, 2))
        assert (out.as_numpy("OUTPUT0") == 4).all()
    # Without the flag on the newcomer, the port is taken: a clear start-up error.
    r = run_cli("--model-repository", str(repo), f"--http-port={port}", "--grpc-port=0", "--metrics-port=0")
    assert r.returncode != 0
    assert re.search(rf"cannot bind HTTPService to [^ ]+:{port}: .*[Aa]ddress (already )?in use", r.stderr), r.stderr


def test_two_servers_share_a_port_with_reuse_grpc_port(repo, start_server):
    port = free_port()
    args = [f"--model-repository={repo}", f"--grpc-port={port}", "--reuse-grpc-port=true"]
    servers = [start_server(*args), start_server(*args)]
    for s in servers:
        assert s.grpc_port == port
        assert s.grpc_client().is_server_live()


def test_http_thread_count_sizes_the_io_runtime(repo, start_server):
    s = start_server(f"--model-repository={repo}", "--http-thread-count=7")
    names = [p.read_text().strip() for p in Path(f"/proc/{s.proc.pid}/task").glob("*/comm")]
    assert names.count("tritonrs-io") == 7, names


class FrameTap:
    """A TCP proxy in front of a gRPC server that reads the server's HTTP/2 DATA frames and records,
    for each stream, the compressed-flag byte of its first gRPC message."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flags: dict[int, int] = {}
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, parse: bool):
        buf = b""
        while True:
            try:
                data = src.recv(65536)
                if data:
                    dst.sendall(data)
            except OSError:  # either side went away (the client closed, or the server stopped)
                data = b""
            if not data:
                dst.close()
                return
            if parse:
                buf = self._frames(buf + data)

    def _frames(self, buf: bytes) -> bytes:
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, stream = buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            if kind == 0 and length > 0 and stream not in self.flags:
                self.flags[stream] = buf[9]
            buf = buf[9 + length:]
        return buf

    def close(self):
        self.listener.close()


@pytest.mark.parametrize("level,compressed", [("none", 0), ("high", 1)])
def test_grpc_infer_response_compression_level(repo, start_server, level, compressed):
    import tritonclient.grpc as grpcclient

    copy_models(repo, "simple")
    s = start_server(f"--model-repository={repo}", f"--grpc-infer-response-compression-level={level}")
    tap = FrameTap(s.grpc_port)
    try:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{tap.port}")
        out = c.infer("simple", simple_inputs(grpcclient, 3))
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), np.full((1, 16), 6, dtype=np.int32))
        c.close()
    finally:
        tap.close()
    # The infer response is the one DATA-bearing stream.
    assert list(tap.flags.values()) == [compressed], tap.flags


GROUPS = ["Server", "Logging", "Repository", "HTTP", "gRPC", "SageMaker and Vertex AI", "Metrics", "Trace",
          "Backends and agents", "Cache", "Rate limiter", "Memory and devices", "MQTT", "Frigate"]


def test_help_groups_the_flags():
    out = run_cli("--help").stdout
    where: dict[str, str] = {}
    heading = None
    for line in out.splitlines():
        if re.fullmatch(r"[A-Za-z][A-Za-z ]*:", line):
            heading = line[:-1]
        m = re.match(r"\s+(?:-\w, )?(--[a-z0-9-]+)", line)
        if m and heading:
            where.setdefault(m.group(1), heading)
    for g in GROUPS:
        assert f"\n{g}:\n" in out, f"no '{g}' group in --help"
    expected = {"--id": "Server", "--log-verbose": "Logging", "--model-repository": "Repository",
                "--http-thread-count": "HTTP", "--reuse-http-port": "HTTP", "--grpc-keepalive-time": "gRPC",
                "--grpc-infer-response-compression-level": "gRPC", "--allow-sagemaker": "SageMaker and Vertex AI",
                "--vertex-ai-default-model": "SageMaker and Vertex AI", "--metrics-port": "Metrics",
                "--trace-config": "Trace", "--backend-config": "Backends and agents", "--cache-config": "Cache",
                "--rate-limit-resource": "Rate limiter", "--cuda-virtual-address-size": "Memory and devices",
                "--buffer-manager-thread-count": "Memory and devices", "--mqtt-broker": "MQTT",
                "--frigate-zmq-endpoint": "Frigate"}
    wrong = {f: (where.get(f), g) for f, g in expected.items() if where.get(f) != g}
    assert not wrong, f"flags under the wrong group (found, expected): {wrong}"
    # And nothing left under clap's generic "Options" but help and version.
    assert {f for f, h in where.items() if h == "Options"} <= {"--help", "--version"}, where


def test_an_unknown_flag_gets_only_close_suggestions_and_a_tritonserver_flag_is_named():
    # Nothing close: no suggestion (clap offered --cuda-memory-pool-byte-size).
    r = run_cli("--memory", "1")
    assert r.returncode == 2 and "unexpected argument '--memory'" in r.stderr and "tip:" not in r.stderr, r.stderr
    r = run_cli("--http-thread-cnt=2")
    assert r.returncode == 2 and "tip: a similar argument exists: '--http-thread-count'" in r.stderr, r.stderr
    # tritonserver's flag where tritonrs does not take it (all of 2.51's start the server itself).
    r = run_cli("validate", "--model-repository", "/nowhere", "--http-port=8000")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: tritonserver's --http-port is not supported by `tritonrs validate`"), r.stderr

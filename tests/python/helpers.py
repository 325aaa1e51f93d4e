"""Helpers for the tritonrs black-box tests: the server process, raw HTTP, CLI runs.

Starts the real `tritonrs` binary (env `TRITONRS_BIN`, default `<repo>/target/debug/tritonrs`) on an
ephemeral loopback port (HTTP and gRPC), learns the ports from the `Started HTTPService at
<addr>:<port>` and `Started GRPCInferenceService at <addr>:<port>` log lines,
keeps draining its stderr into a buffer (so the pipe never fills), waits for readiness, and stops it
with SIGTERM (then SIGKILL) at teardown. The log of every running server is attached to the report
of a failing test.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "model-repos" / "examples"
BIN = Path(os.environ.get("TRITONRS_BIN", REPO_ROOT / "target" / "debug" / "tritonrs"))
# Every model of the example repository (model-repos/gen_models.py writes them; each has a version folder).
EXAMPLE_MODELS = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and any(c.name.isdigit() for c in p.iterdir()))

_STARTED_RE = re.compile(r"Started HTTPService at (\S+):(\d+)")
_GRPC_STARTED_RE = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")

# TRITONRS_TEST_PYTHON_ZYGOTE=0 runs every server with the Python stubs' fork server off
# (scripts/test.sh runs the Python backend's tests both ways).
ZYGOTE = os.environ.get("TRITONRS_TEST_PYTHON_ZYGOTE", "1") != "0"

# Servers that are running right now; their logs go into the report of a failing test.
_RUNNING: list["TritonServer"] = []


def server_env() -> dict:
    """The environment for the binary: ours minus every TRITONRS_* flag variable, so a stray
    variable in the developer's shell cannot change the server's flags; ORT_DYLIB_PATH is filled in
    from the checkout when scripts/env.sh was not sourced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONRS_")}
    if "ORT_DYLIB_PATH" not in env:
        lib = REPO_ROOT / ".ort" / "libonnxruntime.so"
        if lib.exists():
            env["ORT_DYLIB_PATH"] = str(lib)
    return env


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    """Until something accepts connections on 127.0.0.1:`port`; fails if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                raise RuntimeError(f"{what} did not start on port {port}: {err}")
            time.sleep(0.1)


def run_cli(*args: str, timeout: float = 30, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs the binary to completion (for --help, --version, validate); `env` adds variables."""
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout,
                          env={**server_env(), **(env or {})})


# Sets the limits given as "which:soft:hard" arguments, then becomes the command after "--".
_RLIMIT_TRAMPOLINE = (
    "import os, resource, sys\n"
    "i = sys.argv.index('--')\n"
    "for a in sys.argv[1:i]:\n"
    "    which, soft, hard = map(int, a.split(':'))\n"
    "    resource.setrlimit(which, (soft, hard))\n"
    "os.execv(sys.argv[i + 1], sys.argv[i + 1:])\n"
)


def with_rlimits(rlimits: dict, cmd: list[str]) -> list[str]:
    """`cmd` started under the resource limits `rlimits` (resource.RLIMIT_* -> (soft, hard)).

    A small Python process sets them and execs `cmd`, so the server's pid is the one Popen returns.
    Not `preexec_fn`: that makes subprocess fork the whole test process, with gRPC's threads of
    earlier tests in it, and a child of such a fork can deadlock before exec, which left Popen (and
    the CI run) waiting forever."""
    limits = [f"{which}:{soft}:{hard}" for which, (soft, hard) in rlimits.items()]
    return [sys.executable, "-S", "-c", _RLIMIT_TRAMPOLINE, *limits, "--", *cmd]


class HttpResponse:
    def __init__(self, status: int, headers: dict, body: bytes):
        self.status = status
        self.headers = headers  # lower-cased names
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"HttpResponse({self.status}, {self.body[:300]!r})"


class TritonServer:
    """One running tritonrs process."""

    def __init__(self, args: list[str], name: str = "", rlimits: dict | None = None, env: dict | None = None):
        self.args = [str(a) for a in args]
        # Variables added to the server's environment (TRITONRS_* among them).
        self.env = env or {}
        self.name = name
        # resource.RLIMIT_* -> (soft, hard), applied in the child before it runs the server (e.g. an
        # address-space cap, so an allocation bug fails the test instead of swapping).
        self.rlimits = rlimits or {}
        self.host = "127.0.0.1"
        self.port: int | None = None
        # None until the log names it; stays None with --allow-grpc=false.
        self.grpc_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._port_found = threading.Event()
        self._reader: threading.Thread | None = None

    # ---- process control -------------------------------------------------------------------
    def start(self, wait: str | None = "ready", timeout: float = 30.0) -> "TritonServer":
        """Starts the process. `wait`: "ready" (/v2/health/ready == 200), "live" (/v2/health/live
        == 200 only) or None (only the port)."""
        if not BIN.exists():
            raise RuntimeError(f"tritonrs binary not found at {BIN}; run `cargo build` or set TRITONRS_BIN")
        cmd = [str(BIN), "--http-port", "0", "--http-address", self.host,
               "--grpc-port", "0", "--grpc-address", self.host, "--allow-metrics=false", *self.args]
        if not ZYGOTE:
            cmd.append("--backend-config=python,zygote=false")
        if self.rlimits:
            cmd = with_rlimits(self.rlimits, cmd)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env={**server_env(), **self.env})
        _RUNNING.append(self)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._port_found.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise RuntimeError(f"tritonrs exited with {self.proc.returncode} before serving HTTP:\n{self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tritonrs did not log its HTTP port within {timeout}s:\n{self.log}")
        if wait is not None:
            path = "/v2/health/ready" if wait == "ready" else "/v2/health/live"
            while True:
                try:
                    if self.get(path, timeout=5).status == 200:
                        break
                except OSError:
                    pass
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tritonrs exited with {self.proc.returncode} while waiting for {path}:\n{self.log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} did not return 200 within {timeout}s:\n{self.log}")
                time.sleep(0.05)
        return self

    def _drain(self):
        assert self.proc and self.proc.stderr
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace")
            with self._lock:
                self._lines.append(line)
            if self.grpc_port is None:
                m = _GRPC_STARTED_RE.search(line)
                if m:
                    self.grpc_port = int(m.group(2))
            if not self._port_found.is_set():
                m = _STARTED_RE.search(line)
                if m:
                    self.port = int(m.group(2))
                    self._port_found.set()
        self.proc.stderr.close()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._reader:
            self._reader.join(5)
        if self in _RUNNING:
            _RUNNING.remove(self)
        return self.proc.returncode

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Waits for the process to exit by itself."""
        assert self.proc
        rc = self.proc.wait(timeout)
        if self._reader:
            self._reader.join(5)
        if self in _RUNNING:
            _RUNNING.remove(self)
        return rc

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = rx.search(self.log)
            if m:
                return m
            time.sleep(0.05)
        raise AssertionError(f"log pattern {pattern!r} not seen within {timeout}s:\n{self.log}")

    # ---- clients ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self, **kw):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.url, **kw)

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def grpc_client(self, **kw):
        """A tritonclient.grpc client; the gRPC port is logged right after the HTTP one, so this
        waits briefly for it."""
        import tritonclient.grpc as grpcclient

        deadline = time.monotonic() + 10
        while self.grpc_port is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"tritonrs did not log its gRPC port:\n{self.log}")
            time.sleep(0.05)
        return grpcclient.InferenceServerClient(self.grpc_url, **kw)

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict | None = None, timeout: float = 30.0) -> HttpResponse:
        """A raw HTTP request over a fresh connection (for cases tritonclient cannot express)."""
        if isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            return HttpResponse(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            conn.close()

    def get(self, path: str, **kw) -> HttpResponse:
        return self.request("GET", path, **kw)

    def post(self, path: str, body=None, headers: dict | None = None, **kw) -> HttpResponse:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            headers = {"Content-Type": "application/json", **(headers or {})}
        return self.request("POST", path, body=body, headers=headers, **kw)

    def is_live(self) -> bool:
        return self.get("/v2/health/live").status == 200

    def metrics(self) -> dict[str, float]:
        """One scrape of /metrics (the server runs with --allow-metrics=true and a metrics port) as
        {'name{labels}': value}."""
        port = int(self.wait_for_log(r"Started Metrics Service at [0-9.]+:(\d+)").group(1))
        text = urllib.request.urlopen(f"http://{self.host}:{port}/metrics", timeout=10).read().decode()
        return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")}

    def index(self) -> list[dict]:
        r = self.post("/v2/repository/index", b"{}")
        assert r.status == 200, r
        return r.json()

    def index_rows(self, name: str) -> list[dict]:
        return [row for row in self.index() if row["name"] == name]

    def index_row(self, name: str) -> dict:
        """The repository index's first row for `name` (it must have one)."""
        rows = self.index_rows(name)
        assert rows, self.index()
        return rows[0]

    def settled(self) -> bool:
        """Whether every model in the index has finished loading (READY or UNAVAILABLE)."""
        return all(r.get("state") in ("READY", "UNAVAILABLE") for r in self.index())

    def wait_until(self, predicate, timeout: float = 15.0, interval: float = 0.1, what: str = "condition"):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r}); log:\n{self.log}")


def simple_inputs(client_module, value: int):
    """INPUT0 and INPUT1 of the example model `simple` (INT32 [1, 16], every element `value`), for
    tritonclient.http or tritonclient.grpc (`client_module`)."""
    import numpy as np

    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = client_module.InferInput(n, [1, 16], "INT32")
        i.set_data_from_numpy(np.full((1, 16), value, dtype=np.int32))
        ins.append(i)
    return ins


def python_sleep_model(repo: Path, name: str, initialize_s: float = 0.0, execute_s: float = 0.0,
                       max_batch_size: int = 0, instances: int | None = None, ballast_mb: int = 0) -> Path:
    """A Python model `name` (FP32 IN -> OUT, identity) whose initialize and execute each sleep the
    given seconds first: a slow load or a long inference on demand. `max_batch_size` and `instances`
    (one KIND_CPU group) go into its config; `ballast_mb` MB of its own are held by each instance."""
    model = repo / name
    (model / "1").mkdir(parents=True)
    ballast = (f"        self.ballast = np.ones({ballast_mb} * 256 * 1024, dtype=np.float32)\n"
               if ballast_mb else "")
    (model / "1" / "model.py").write_text(
        "import time\n"
        "import numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n\n\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        f"{ballast}"
        f"        time.sleep({initialize_s})\n\n"
        "    def execute(self, requests):\n"
        f"        time.sleep({execute_s})\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor(\"OUT\", "
        "pb_utils.get_input_tensor_by_name(r, \"IN\").as_numpy())]) for r in requests]\n")
    (model / "config.pbtxt").write_text(
        'backend: "python"\n'
        + (f"max_batch_size: {max_batch_size}\n" if max_batch_size else "")
        + 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        + (f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n" if instances else ""))
    return model


def copy_models(dest: Path, *names: str, src: Path = EXAMPLES) -> Path:
    """Copies example models into `dest` (a model repository) and returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copytree(src / n, dest / n)
    return dest


# ---- the reference: NVIDIA's tritonserver 2.51 -------------------------------------------------
# scripts/test-tools.sh unpacks it from the nvidia-pytriton wheel (CPU build, Python backend) into
# $ANCHORS; the differential tests run the same repository through it and through tritonrs.
ANCHORS = Path(os.environ.get("ANCHORS", REPO_ROOT / ".anchors"))
TRITONSERVER = Path(os.environ.get("TRITONSERVER", ANCHORS / "bin" / "tritonserver"))


def free_port() -> int:
    """A loopback port free right now (tritonserver cannot bind port 0 and report it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tritonserver(TritonServer):
    """One running tritonserver 2.51: the same client helpers as TritonServer, on ports picked here."""

    def start(self, wait: str | None = "ready", timeout: float = 60.0) -> "Tritonserver":
        if not TRITONSERVER.exists():
            raise RuntimeError(f"tritonserver not found at {TRITONSERVER}; run scripts/test-tools.sh")
        self.port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        cmd = [str(TRITONSERVER), f"--http-port={self.port}", f"--grpc-port={self.grpc_port}",
               f"--metrics-port={self.metrics_port}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
               *self.args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE,
                                     env={**os.environ, **self.env})
        _RUNNING.append(self)
        self._port_found.set()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        path = "/v2/health/ready" if wait == "ready" else "/v2/health/live"
        while wait is not None:
            try:
                if self.get(path, timeout=5).status == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise RuntimeError(f"tritonserver exited with {self.proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tritonserver's {path} did not return 200 within {timeout}s:\n{self.log}")
            time.sleep(0.1)
        return self

    def _drain(self):
        # No port lines to look for: the ports were chosen before the start.
        assert self.proc and self.proc.stderr
        for raw in iter(self.proc.stderr.readline, b""):
            with self._lock:
                self._lines.append(raw.decode("utf-8", "replace"))
        self.proc.stderr.close()

    def metrics_text(self) -> str:
        return urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics", timeout=10).read().decode()


def both(servers, fn):
    """fn(server) on tritonrs, and on tritonserver 2.51 where it runs (`servers` is (ours, theirs or
    None)), whose answers must agree; returns tritonrs's."""
    ours, theirs = servers
    got = fn(ours)
    if theirs is not None:
        assert fn(theirs) == got, "tritonrs and tritonserver 2.51 differ"
    return got


def system_python_path(tmp_path, folder: str = "sys-py-bin") -> str:
    """A PATH whose `python3` is the system's (/usr/bin), not the test venv's: for tests of what the
    server finds through the python3 on the PATH when a package is not there."""
    bindir = tmp_path / folder
    bindir.mkdir()
    sys_py = shutil.which("python3", path="/usr/bin:/bin")
    assert sys_py, "a system python3 is needed"
    (bindir / "python3").symlink_to(sys_py)
    return f"{bindir}:/usr/bin:/bin"


def parent_pid(pid: int) -> int:
    """The parent of process `pid` (field 4 of /proc/<pid>/stat), -1 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def cmdline_of(pid: int) -> str:
    """The command line of process `pid`, arguments separated by spaces; empty when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stub_processes(server_pid: int) -> tuple[list[int], list[int]]:
    """The server's fork servers (children running tritonrs_zygote.py) and its stubs (children running
    tritonrs_stub.py, and the fork servers' children)."""
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    children = [p for p in pids if parent_pid(p) == server_pid]
    zygotes = sorted(p for p in children if "tritonrs_zygote.py" in cmdline_of(p))
    stubs = [p for p in children if "tritonrs_stub.py" in cmdline_of(p)]
    stubs += [p for p in pids if parent_pid(p) in zygotes]
    return zygotes, sorted(stubs)

"""Fixtures for the tritonrs black-box tests (see helpers.py for the server process wrapper).

Every server runs the real binary on an ephemeral loopback port; the log of each server still
running when a test fails is attached to that test's report.
"""

from __future__ import annotations

import pytest

from helpers import _RUNNING, EXAMPLES, TRITONSERVER, Tritonserver, TritonServer
from otlp_receiver import OtlpReceiver


# ---- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def start_server():
    """Factory: `start_server(*args, wait="ready", timeout=30, rlimits=None, env=None)` starts a server
    that is stopped at the end of the test."""
    servers: list[TritonServer] = []

    def _start(*args, wait: str | None = "ready", timeout: float = 30.0, rlimits: dict | None = None,
               env: dict | None = None) -> TritonServer:
        s = TritonServer(list(args), rlimits=rlimits, env=env)
        servers.append(s)
        return s.start(wait=wait, timeout=timeout)

    yield _start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def examples_server():
    """One server over model-repos/examples, shared by every test that only reads or infers."""
    s = TritonServer(["--model-repository", EXAMPLES], name="examples")
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(examples_server):
    c = examples_server.client()
    yield c
    c.close()


@pytest.fixture
def otlp_receiver():
    """A real OTLP/HTTP trace receiver on a loopback port (otlp_receiver.py): pass `otlp_receiver.url`
    to `--trace-config opentelemetry,url=`, read `otlp_receiver.wait_for(n)`; stopped after the test."""
    r = OtlpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def repo(tmp_path):
    """A fresh, empty model repository directory; fill it with `copy_models(repo, ...)`."""
    d = tmp_path / "repo"
    d.mkdir()
    return d


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and rep.when in ("setup", "call"):
        for s in list(_RUNNING):
            tail = "".join(s.log.splitlines(keepends=True)[-200:])
            rep.sections.append((f"tritonrs log ({s.name or 'server'} on port {s.port})", tail))


@pytest.fixture
def start_tritonserver():
    """Factory: `start_tritonserver(*args, wait="ready", timeout=60, env=None)` starts NVIDIA's
    tritonserver 2.51 (the reference, from scripts/test-tools.sh) on free loopback ports, stopped at the
    end of the test; the test skips, saying why, where it is not installed (only x86_64 has it)."""
    if not TRITONSERVER.exists():
        pytest.skip(f"tritonserver 2.51 is not installed at {TRITONSERVER} (scripts/test-tools.sh installs it)")
    servers: list[Tritonserver] = []

    def _start(*args, wait: str | None = "ready", timeout: float = 60.0, env: dict | None = None) -> Tritonserver:
        s = Tritonserver(list(args), name="tritonserver", env=env)
        servers.append(s)
        return s.start(wait=wait, timeout=timeout)

    yield _start
    for s in servers:
        s.stop()

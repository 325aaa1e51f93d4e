"""Connection exhaustion (issue 10, finding 3): slow and idle connections must not lock clients out.

Each listener holds at most --http-max-connections / --grpc-max-connections sockets (by default, what
the open-file limit leaves); at the cap the oldest connection without a request in flight is closed for
a newcomer. A request head must arrive within --http-header-timeout-secs / --grpc-header-timeout-secs,
an HTTP connection with nothing in flight is closed after --http-idle-timeout-secs, and accept errors
(descriptors run out) back off instead of spinning. The tests run the server under a lowered
RLIMIT_NOFILE, as on a machine with the common 1024 limit."""

import os
import resource
import socket
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from helpers import copy_models, python_sleep_model, simple_inputs

NOFILE_1024 = {resource.RLIMIT_NOFILE: (1024, 1024)}
HTTP_HEAD = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# An empty SETTINGS frame (length 0, type 4, no flags, stream 0), and the acknowledgement of the
# server's (flag 1).
H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Slow:
    """A connection that sends a request head a byte at a time: `first` at once, then one byte of `rest`
    per `trickle()` (always a valid prefix, so the server has no protocol error to close it for)."""

    def __init__(self, port: int, first: bytes, rest: bytes):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setblocking(False)
        self.rest = rest
        self.closed = False
        self._send(first)

    def _send(self, data: bytes):
        try:
            self.sock.send(data)
        except OSError:
            self.closed = True

    def trickle(self):
        if self.closed:
            return
        try:
            if self.sock.recv(1, socket.MSG_PEEK) == b"":
                self.closed = True
                return
        except BlockingIOError:
            pass
        except OSError:
            self.closed = True
            return
        if self.rest:
            self._send(self.rest[:1])
            self.rest = self.rest[1:]

    def close(self):
        self.sock.close()


def open_slow(port: int, n: int, first: bytes, rest: bytes = b"X" * 100) -> list[Slow]:
    return [Slow(port, first, rest) for _ in range(n)]


def slow_grpc(port: int, n: int) -> list[Slow]:
    """HTTP/2 connections trickling the client preface."""
    return open_slow(port, n, H2_PREFACE[:4], H2_PREFACE[4:])


def trickle(slow: list[Slow]) -> int:
    """One more byte on each connection; returns how many the server has closed."""
    for c in slow:
        c.trickle()
    return sum(c.closed for c in slow)


def is_closed(s: socket.socket, within: float) -> bool:
    """Whether the server closes `s` within `within` seconds (reading and discarding what it sends)."""
    s.settimeout(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def infer_http(server):
    c = httpclient.InferenceServerClient(server.url, connection_timeout=5, network_timeout=5)
    try:
        assert c.is_server_live()
        out = c.infer("simple", simple_inputs(httpclient, 3)).as_numpy("OUTPUT0")
        assert (out == 6).all()
    finally:
        c.close()


def infer_grpc(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert c.is_server_live(client_timeout=5)
        out = c.infer("simple", simple_inputs(grpcclient, 3), client_timeout=5).as_numpy("OUTPUT0")
        assert (out == 6).all()
    finally:
        c.close()


@pytest.fixture
def simple_repo(repo):
    copy_models(repo, "simple")
    return repo


def test_clients_are_served_while_1100_slow_connections_are_open(start_server, simple_repo):
    """1,100 connections trickling request heads, more than the 1024 descriptors the server has: the
    oldest are closed for newcomers, and tritonclient over HTTP and gRPC is still served at once."""
    s = start_server("--model-repository", simple_repo, rlimits=NOFILE_1024)
    slow = open_slow(s.port, 700, HTTP_HEAD) + slow_grpc(s.grpc_port, 400)
    try:
        trickle(slow)
        cpu0 = cpu_seconds(s.proc.pid)
        t0 = time.monotonic()
        for _ in range(3):
            time.sleep(1)
            closed = trickle(slow)
        infer_http(s)
        infer_grpc(s)
        served_in = time.monotonic() - t0 - 3
        cpu = cpu_seconds(s.proc.pid) - cpu0
        wall = time.monotonic() - t0
        assert served_in < 5, f"clients waited {served_in:.1f}s"
        # Spinning accept loops would burn a core for the whole window.
        assert cpu < 0.5 * wall, f"server used {cpu:.2f}s of CPU in {wall:.2f}s"
        # Both listeners stay under the descriptor limit: the rest of the slow ones were closed.
        assert closed >= 1100 - (1024 - 256 - 64), closed
        assert len(os.listdir(f"/proc/{s.proc.pid}/fd")) < 1024
        assert "closing the oldest idle ones to make room" in s.log
    finally:
        for c in slow:
            c.close()
    assert s.is_live()


def test_accept_errors_back_off_instead_of_spinning(start_server, simple_repo):
    """Caps set above what 256 descriptors allow: accept fails with EMFILE on both listeners, the server
    backs off (low CPU), logs it once, and serves again once the connections go."""
    s = start_server("--model-repository", simple_repo, "--http-max-connections=1000",
                     "--grpc-max-connections=1000", rlimits={resource.RLIMIT_NOFILE: (256, 256)})
    assert "leave fewer than 256 of the 256 open files" in s.log
    # 260 connections to each listener: more than the descriptors allow, so each one runs out whichever
    # accepts first; about 240 are accepted in all, the rest wait in the listen backlogs.
    slow = open_slow(s.port, 260, HTTP_HEAD) + slow_grpc(s.grpc_port, 260)
    try:
        s.wait_for_log(r"gRPC cannot accept connections: .*open files")
        cpu0 = cpu_seconds(s.proc.pid)
        time.sleep(3)
        cpu = cpu_seconds(s.proc.pid) - cpu0
        assert cpu < 1.0, f"server used {cpu:.2f}s of CPU in 3s while out of descriptors"
    finally:
        for c in slow:
            c.close()
    s.wait_until(s.is_live, timeout=10, what="live after the connections closed")
    infer_grpc(s)
    assert len([line for line in s.log.splitlines() if "gRPC cannot accept connections" in line]) == 1


def test_a_slow_request_head_is_closed_after_the_header_timeout(start_server, simple_repo):
    s = start_server("--model-repository", simple_repo, "--http-header-timeout-secs=1",
                     "--grpc-header-timeout-secs=1")
    http_slow = open_slow(s.port, 1, HTTP_HEAD)
    grpc_slow = slow_grpc(s.grpc_port, 1)
    t0 = time.monotonic()
    for _ in range(3):
        trickle(http_slow + grpc_slow)
        time.sleep(0.25)
    assert is_closed(http_slow[0].sock, 5) and is_closed(grpc_slow[0].sock, 1)
    assert 1.0 <= time.monotonic() - t0 < 5
    # A keep-alive connection that keeps sending requests is left alone, however long it lives.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    for _ in range(5):
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(0.5)
    sock.close()
    # The next request's head on a kept-alive connection gets its own timer, from the first byte
    # that arrives after the previous response.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/health/live HTTP/1.1\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    time.sleep(0.2)
    sock.sendall(b"H")
    t0 = time.monotonic()
    assert is_closed(sock, 5)
    assert time.monotonic() - t0 >= 0.9
    # A body that stops arriving fails its request instead of holding the connection busy for ever.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    sock.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inputs\"")
    t0 = time.monotonic()
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"no request body data arrived for 1 s" in answer, answer
    assert 0.9 <= time.monotonic() - t0 < 5
    sock.close()
    infer_http(s)
    infer_grpc(s)


def test_idle_connections_are_closed_but_not_a_long_request(start_server, simple_repo):
    python_sleep_model(simple_repo, "slow", execute_s=2.5)
    s = start_server("--model-repository", simple_repo, "--http-idle-timeout-secs=1")
    idle = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    idle.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    assert is_closed(idle, 5)
    assert time.monotonic() - t0 >= 0.9
    # An inference that takes longer than the idle timeout keeps its connection.
    c = httpclient.InferenceServerClient(s.url, network_timeout=30)
    i = httpclient.InferInput("IN", [1], "FP32")
    i.set_data_from_numpy(np.array([4.5], np.float32))
    assert c.infer("slow", [i]).as_numpy("OUT").tolist() == [4.5]
    c.close()


def read_frames(sock: socket.socket, within: float):
    """Yields (type, flags, payload) of the HTTP/2 frames the server sends within `within` seconds;
    stops when the connection closes (yielding None)."""
    sock.settimeout(0.2)
    buf = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            data = b""
        if not data:
            yield None
            return
        buf += data
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            yield buf[3], buf[4], buf[9:9 + length]
            buf = buf[9 + length:]


def test_grpc_keepalive_pings_and_closes_a_silent_peer(start_server, simple_repo):
    s = start_server("--model-repository", simple_repo, "--grpc-keepalive-time=300",
                     "--grpc-keepalive-timeout=300")
    sock = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5)
    sock.sendall(H2_PREFACE + H2_SETTINGS)
    frames = list(read_frames(sock, 10))
    assert any(f is not None and f[0] == 6 for f in frames), frames  # PING
    assert frames[-1] is None, "a peer that never answers the pings is disconnected"
    infer_grpc(s)


def test_grpc_max_connection_age_sends_goaway(start_server, simple_repo):
    s = start_server("--model-repository", simple_repo, "--grpc-max-connection-age=500",
                     "--grpc-max-connection-age-grace=500")
    sock = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5)
    sock.sendall(H2_PREFACE + H2_SETTINGS)
    t0 = time.monotonic()
    frames = list(read_frames(sock, 10))
    assert any(f is not None and f[0] == 7 for f in frames), frames  # GOAWAY
    assert frames[-1] is None and time.monotonic() - t0 < 5
    # Clients reconnect after a GOAWAY.
    c = grpcclient.InferenceServerClient(s.grpc_url)
    for _ in range(3):
        assert c.is_server_live(client_timeout=5)
        time.sleep(0.6)
    c.close()


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(start_server, simple_repo):
    s = start_server("--model-repository", simple_repo, rlimits={resource.RLIMIT_NOFILE: (512, 4096)})
    assert "Raised the open-file limit from 512 to 4096." in s.log
    with open(f"/proc/{s.proc.pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    assert line.split()[3:5] == ["4096", "4096"], line

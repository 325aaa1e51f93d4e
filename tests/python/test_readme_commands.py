"""The README's commands run as written (issue 38).

Every command of a ```sh / ```bash / ```shell block (and every `$ ` line of a ```console block) of the
documents in DOCS that starts with `tritonrs`, `curl` or `scripts/` is run here, in the order written,
from the checkout's root, except the ones listed in SKIPPED with the reason for each:

- `tritonrs` is the binary under test (TRITONRS_BIN). A line that serves (its first argument is a
  flag) is started with HTTP, gRPC and metrics on ephemeral loopback ports, must become ready, and
  stays up for the curl lines after it in the same block; other `tritonrs` lines must exit 0.
- `curl` lines go to the last server their block started, else to the server `scripts/run-example.sh`
  starts (its arguments are read from the script), with `localhost:8000` / `:8001` / `:8002` rewritten
  to that server's HTTP, gRPC and metrics ports; they run with `--fail-with-body`, so an HTTP status of
  400 or more fails the test.
- Lines continued with `\\` (or inside an unclosed quote) are joined; a line runs through bash, so
  pipes and `$(...)` work as in a terminal.

A README line that cannot run as written is a README bug: fix the README, or, where the line needs
hardware or another host, add it to SKIPPED saying so.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers import BIN, REPO_ROOT, server_env
from mqtt_helpers import Mosquitto, free_port

DOCS = ["README.md", "model-repos/python/README.md"]
# What the documents call the binary: by name once it is on the PATH, or where run-example.sh builds it.
BINARY_NAMES = ("tritonrs", "target/example/tritonrs", "target/release/tritonrs")
PREFIXES = (*BINARY_NAMES, "curl", "scripts/")
SHELL_LANGS = {"sh", "bash", "shell"}

# Commands not run here, by how they start (after leading VAR=value assignments), with why. Every
# entry must match a command of DOCS (test_every_skip_matches_a_command).
SKIPPED = {
    "scripts/run-example.sh": "a cold build (about 4 minutes on 2 cores) that then serves in the "
                              "foreground; the curl lines after it run against the server it starts",
    "scripts/test.sh": "the whole test suite, this test among them",
    "tritonrs --model-repository /srv/models --trace-config": "an OpenTelemetry collector (collector.lan) and a Redis "
                                               "(cache.lan) on other hosts",
    "tritonrs --model-repository /srv/models --cache-config redis": "a Redis on another host (cache.lan)",
    "curl -s b.lan:8000": "a second appliance (b.lan) sharing a Redis",
    "curl localhost:8000/v1/chat/completions": "the reader's own language model (my_llm); "
                                               "test_openai.py covers the route with a model of its own",
    "tritonrs tune --model-repository /var/lib/tritonrs/models": "the reader's own model (yolov8n) on a "
                                                                 "device, tuned for 10 minutes",
    "tritonrs tune --model-repository models": "the reader's own repository and model (detector); "
                                               "test_tune.py tunes models of its own",
    "tritonrs tune --model detector --via": "a running explicit-mode server holding the reader's model",
}

_FENCE = re.compile(r"^\s*```\s*([A-Za-z0-9_+-]*)")
_ASSIGN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|\"[^\"]*\"|\S*)\s+)*")


@dataclass
class Command:
    doc: str
    line: int  # 1-based line of the document where the command starts
    text: str  # continuation lines joined

    @property
    def bare(self) -> str:
        """The command without leading VAR=value assignments."""
        return self.text[_ASSIGN.match(self.text).end():]

    @property
    def word(self) -> str:
        return self.bare.split(maxsplit=1)[0] if self.bare.strip() else ""

    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Block:
    doc: str
    line: int
    commands: list[Command] = field(default_factory=list)


def _complete(text: str) -> bool:
    """Whether `text` is a whole command: not ending in `\\`, no quote left open."""
    if text.endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # "No closing quotation"
        return False
    return True


def _block_commands(doc: str, first: int, lines: list[str], console: bool) -> list[Command]:
    out: list[Command] = []
    pending: tuple[int, str] | None = None
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        if pending is None:
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            pending = (first + i, line.strip())
        else:
            start, text = pending
            text = text[:-1].rstrip() + " " + line.strip() if text.endswith("\\") else text + "\n" + line
            pending = (start, text)
        if _complete(pending[1]):
            out.append(Command(doc, pending[0], pending[1]))
            pending = None
    assert pending is None, f"{doc}:{pending[0]}: a command that never ends: {pending[1]!r}"
    return out


def parse_blocks(doc: str) -> list[Block]:
    """The shell blocks of `doc` (relative to the checkout) with their commands."""
    lines = (REPO_ROOT / doc).read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j]))
        lang = m.group(1).lower()
        if lang in SHELL_LANGS or lang == "console":
            body = lines[i + 1:end]
            blocks.append(Block(doc, i + 1, _block_commands(doc, i + 2, body, lang == "console")))
        i = end + 1
    return blocks


def all_commands() -> list[Command]:
    return [c for doc in DOCS for b in parse_blocks(doc) for c in b.commands]


def skip_reason(cmd: Command) -> str | None:
    return next((why for start, why in SKIPPED.items() if cmd.bare.startswith(start)), None)


def runs(cmd: Command) -> bool:
    return cmd.word in PREFIXES or cmd.word.startswith("scripts/")


def is_server(cmd: Command) -> bool:
    """A `tritonrs` line that serves: its first argument is a flag (not a subcommand, not -h/--version)."""
    words = cmd.bare.split()
    if words[0] not in BINARY_NAMES or len(words) < 2:
        return False
    return words[1].startswith("-") and words[1] not in ("-h", "--help", "-V", "--version")


def with_binary(text: str) -> str:
    """`text` with its leading binary name (after any assignments) replaced by the binary under test."""
    head = _ASSIGN.match(text).end()
    rest = text[head:]
    name = next(n for n in sorted(BINARY_NAMES, key=len, reverse=True) if rest.split()[0] == n)
    return text[:head] + shlex.quote(str(BIN)) + rest[len(name):]


# ---- servers ---------------------------------------------------------------------------------

_PORT_RE = {
    "http": re.compile(r"Started HTTPService at \S+:(\d+)"),
    "grpc": re.compile(r"Started GRPCInferenceService at \S+:(\d+)"),
    "metrics": re.compile(r"Started Metrics Service at \S+:(\d+)"),
}
# Flags given to every README server after the binary: every port ephemeral, on loopback.
_SERVER_FLAGS = ("--http-port 0 --http-address 127.0.0.1 --grpc-port 0 --grpc-address 127.0.0.1 "
                 "--metrics-port 0 --metrics-address 127.0.0.1")


class ShellServer:
    """A README server line run through bash (its own process group), its log drained and parsed."""

    def __init__(self, where: str, text: str):
        self.where = where
        self.text = text
        self.ports: dict[str, int] = {}
        self.lines: list[str] = []
        self.proc = subprocess.Popen(["bash", "-c", text], cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=server_env(), start_new_session=True)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            for name, rx in _PORT_RE.items():
                m = rx.search(line)
                if m and name not in self.ports:
                    self.ports[name] = int(m.group(1))

    @property
    def log(self) -> str:
        return "".join(self.lines[-80:])

    def wait(self, timeout: float = 40.0, log_line: str | None = None) -> "ShellServer":
        """Until /v2/health/ready is 200 (and the log has `log_line`, when given)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, \
                f"{self.where}: exited with {self.proc.returncode}:\n{self.text}\n{self.log}"
            if "http" in self.ports and self._ready() and (log_line is None or log_line in self.log):
                return self
            assert time.monotonic() < deadline, f"{self.where}: not ready in {timeout} s:\n{self.text}\n{self.log}"
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.ports['http']}/v2/health/ready"
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode


def run_example_args() -> str:
    """The arguments scripts/run-example.sh serves with (its `exec "$bin" ... "$@"` line)."""
    script = (REPO_ROOT / "scripts" / "run-example.sh").read_text()
    m = re.search(r'^exec "\$bin" (.*) "\$@"$', script, re.M)
    assert m, "scripts/run-example.sh no longer ends in exec \"$bin\" ARGS \"$@\"; update this test"
    return m.group(1)


class Rewriter:
    """Points a README line at the test's servers: its ports, the broker the test starts."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.broker: Mosquitto | None = None

    def server_line(self, text: str) -> tuple[str, str | None]:
        """The server line to run, and the log line that says it is fully up (beyond ready)."""
        text = with_binary(text)
        head = _ASSIGN.match(text).end()
        binary = shlex.quote(str(BIN))
        # `exec`, after any VAR=value assignments, so the server is the process that gets SIGTERM.
        text = text[:head] + "exec " + binary + " " + _SERVER_FLAGS + text[head + len(binary):]
        text = re.sub(r"tcp://[\w.]+:5555", lambda _: f"tcp://127.0.0.1:{free_port()}", text)
        want = None
        if "mqtt://localhost" in text:
            if self.broker is None:
                self.broker = Mosquitto(self.tmp / "mosquitto").start()
            text = text.replace("mqtt://localhost", f"mqtt://127.0.0.1:{self.broker.port}")
            want = "MQTT bridge: connected to"
        return text, want

    @staticmethod
    def curl_line(text: str, server: ShellServer) -> str:
        for readme_port, name in (("8000", "http"), ("8001", "grpc"), ("8002", "metrics")):
            text = re.sub(rf"\b(?:localhost|127\.0\.0\.1):{readme_port}\b",
                          f"127.0.0.1:{server.ports[name]}", text)
        return re.sub(r"^curl\b", "curl -sS --fail-with-body --max-time 30", text)

    def close(self):
        if self.broker is not None:
            self.broker.stop()


def run_to_end(where: str, text: str) -> str:
    r = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=60, env=server_env())
    assert r.returncode == 0, f"{where}: exit {r.returncode}:\n{text}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
    return r.stdout


# ---- tests -----------------------------------------------------------------------------------


def _blocks_that_run() -> list[Block]:
    return [b for doc in DOCS for b in parse_blocks(doc)
            if any(runs(c) and skip_reason(c) is None for c in b.commands)]


@pytest.fixture(scope="module")
def run_example_server():
    """The server of the README's first command (scripts/run-example.sh), without its build."""
    s = ShellServer("scripts/run-example.sh", f"exec {shlex.quote(str(BIN))} {_SERVER_FLAGS} {run_example_args()}")
    try:
        yield s.wait()
    finally:
        s.stop()


@pytest.mark.parametrize("block", _blocks_that_run(), ids=lambda b: f"{b.doc}:{b.line}")
def test_readme_block_runs(block, run_example_server, tmp_path):
    rewriter = Rewriter(tmp_path)
    server: ShellServer | None = None
    ran = 0
    try:
        for cmd in block.commands:
            if not runs(cmd) or skip_reason(cmd) is not None:
                continue
            ran += 1
            if is_server(cmd):
                if server is not None:
                    assert server.stop() == 0, f"{server.where}: unclean exit:\n{server.log}"
                text, want = rewriter.server_line(cmd.text)
                server = ShellServer(cmd.where(), text).wait(log_line=want)
            elif cmd.word == "curl":
                run_to_end(cmd.where(), rewriter.curl_line(cmd.text, server or run_example_server))
            else:
                run_to_end(cmd.where(), with_binary(cmd.text) if cmd.word in BINARY_NAMES else cmd.text)
        if server is not None:
            assert server.stop() == 0, f"{server.where}: exited with {server.proc.returncode} on SIGTERM:\n{server.log}"
    finally:
        if server is not None:
            server.stop()
        rewriter.close()
    assert ran > 0


def test_every_skip_matches_a_command():
    commands = [c for c in all_commands() if runs(c)]
    stale = [start for start in SKIPPED if not any(c.bare.startswith(start) for c in commands)]
    assert not stale, f"SKIPPED entries that match no command of {DOCS}: {stale}"
    # The parser found the README's commands at all (a broken fence or prefix would run nothing).
    assert len([c for c in commands if skip_reason(c) is None]) >= 8


def test_mqtt_example_subscribes_before_it_publishes():
    """Run in the order written, the subscriber to the results is there before the picture is
    published, so it gets the result (the broker keeps none for a later subscriber)."""
    checked = 0
    for doc in DOCS:
        for block in parse_blocks(doc):
            words = [c.word for c in block.commands]
            if "mosquitto_sub" in words:
                checked += 1
                assert "mosquitto_pub" not in words[:words.index("mosquitto_sub")], \
                    f"{doc}:{block.line}: mosquitto_pub comes before mosquitto_sub"
    assert checked, "no README block runs mosquitto_sub any more; drop or update this test"

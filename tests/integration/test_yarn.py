"""Ferry on YARN, as a user of an EMR-like cluster runs it: `./spark-submit.sh --master yarn
[--deploy-mode cluster] JOB ...` with only HADOOP_CONF_DIR naming the cluster, against a real
single-node YARN + HDFS (Hadoop's MiniCluster, `ferry.testing.yarn`, started once for the
module) and the Apache Kafka test clusters. The exit code and output checked are those the
submitting side sees. Run by `make test-cluster`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from ferry.testing.brokers import LocalBroker, free_port, start_broker
from ferry.testing.produce import Record, commit_offsets, create_topics, produce, read_committed
from ferry.testing.proxy import API_FETCH
from ferry.testing.yarn import Yarn, yarn_cluster

from .jobrunner import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.yarn]

SPARK_JARS = Path(pyspark.__file__).resolve().parent / "jars"
BASE = 1_760_000_000_000


@pytest.fixture(scope="module")
def yarn(tmp_path_factory) -> Iterator[Yarn]:
    with yarn_cluster(tmp_path_factory.mktemp("yarn")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def proxied_source() -> Iterator[LocalBroker]:
    """A source cluster reached only through its FaultProxy (ferry.testing.proxy), so a test
    can take it away while a job on YARN is reading from it."""
    broker = start_broker("yarn-source", proxied=True)
    try:
        yield broker
    finally:
        broker.stop()


def submit_command(
    yarn: Yarn, tmp_path: Path, *args: str, mode: str = "cluster"
) -> tuple[list[str], dict[str, str]]:
    """./spark-submit.sh --master yarn --deploy-mode MODE ARGS as a user runs it, and its
    environment. Test-only settings: where Spark's jars are on the node (an EMR node has Spark
    installed), and loopback for Spark in the containers (this machine's name resolves to
    127.0.0.1, so Spark would pick another interface's address; executors inherit the AM's
    SPARK_*)."""
    env = {
        **os.environ,
        "HADOOP_CONF_DIR": str(yarn.conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "FERRY_LOG_DIR": str(tmp_path / "log"),
    }
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "FERRY_MASTER", "SPARK_HOME"):
        env.pop(name, None)
    cmd = [
        str(ROOT / "spark-submit.sh"), "--master", "yarn", "--deploy-mode", mode,
        "--conf", f"spark.yarn.jars=local:{SPARK_JARS}/*",
        "--conf", "spark.yarn.appMasterEnv.SPARK_LOCAL_IP=127.0.0.1",
        "--driver-memory", "640m", "--executor-memory", "640m", "--num-executors", "1",
        *args,
    ]  # fmt: skip
    return cmd, env


def submit(
    yarn: Yarn, tmp_path: Path, *args: str, mode: str = "cluster"
) -> subprocess.CompletedProcess:
    cmd, env = submit_command(yarn, tmp_path, *args, mode=mode)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)


def committed(cluster, group: str) -> dict[tuple[str, int], int]:  # noqa: ANN001
    """The group's committed offsets on the test's topics (named, like the group, `unique-…`),
    read by a consumer that never joins the group (`read_committed`): an oracle independent of
    Ferry's own `committed_offsets`, which asks from a worker process (`ferry.kafka.isolated`)
    because an AdminClient's offset fetch answered NOT_COORDINATOR crashes the process it runs
    in (librdkafka issue 5040; it took pytest down here when this helper still used one)."""
    return read_committed(cluster.config, group, group.rsplit("-", 1)[0] + "-")


def migrate_config(path: Path, src, dst, prefix: str, ledger: str) -> Path:  # noqa: ANN001
    path.write_text(
        textwrap.dedent(
            f"""\
            source:
              bootstrap.servers: {src.bootstrap}
            destination:
              bootstrap.servers: {dst.bootstrap}
            groups:
              include: ['{prefix}-.*']
            topics:
              include: ['{prefix}-.*']
            matching:
              hash: [key, value]
            ledger:
              path: {ledger}
            reader:
              timeout_ms: 10000
            """
        )
    )
    return path


def world(src, dst, prefix: str) -> dict[str, dict]:  # noqa: ANN001
    """`done`: replicated from offset 5, its group migrates to offset - 5; `tail`: the replica
    holds only the first 20 of 40 recent records, so a group at 35 is PENDING (exit 75)."""
    done, tail = f"{prefix}-done", f"{prefix}-tail"
    create_topics(src.config, {done: 2, tail: 1})
    create_topics(dst.config, {done: 2, tail: 1})
    for p in (0, 1):
        records = [Record(b"k", f"{p}-{i}".encode(), BASE + i * 10) for i in range(40)]
        produce(src.config, done, p, records)
        produce(dst.config, done, p, records[5:])
    now = int(time.time() * 1000) - 1000
    recent = [Record(b"k", f"t-{i}".encode(), now + i) for i in range(40)]
    produce(src.config, tail, 0, recent)
    produce(dst.config, tail, 0, recent[:20])
    commit_offsets(src.config, f"{prefix}-g", {(done, 0): 30, (done, 1): 12})
    commit_offsets(src.config, f"{prefix}-p", {(tail, 0): 35})
    return {f"{prefix}-g": {(done, 0): 25, (done, 1): 7}, f"{prefix}-p": {}}


def test_cluster_mode_migrate_with_its_ledger_on_hdfs(yarn, clusters, unique, tmp_path):
    """Cluster mode: the config shipped as typed, the environment localized by YARN, the ledger
    on HDFS; exit 75 (a group left PENDING) and the JSON plan reach the submitting console.
    The next run (client mode) reads the ledger back from HDFS; a dry run (cluster mode)
    holds its plan until its record is on HDFS, and the plan reaches the console whole."""
    src, dst = clusters
    want = world(src, dst, unique)
    ledger = f"{yarn.fs}/ferry/{unique}/ledger"
    config = migrate_config(tmp_path / "migrate.yaml", src, dst, unique, ledger)

    first = submit(yarn, tmp_path, "--delta", "migrate", "--config", str(config),
                   "--execute", "-o", "json")  # fmt: skip
    assert first.returncode == 75, first.stderr
    plan = {(r["group"], r["src_partition"]): r for r in json.loads(first.stdout)}
    assert plan[(f"{unique}-g", 0)]["destination_offset"] == 25
    assert plan[(f"{unique}-p", 0)]["status"] == "PENDING"
    assert f"not migrated yet: {unique}-p" in first.stderr
    for group, offsets in want.items():
        assert committed(dst, group) == offsets, group

    again = submit(yarn, tmp_path, "--delta", "migrate", "--config", str(config),
                   "--execute", "-o", "json", mode="client")  # fmt: skip
    assert again.returncode == 75, again.stderr
    statuses = {r["group"]: r["group_status"] for r in json.loads(again.stdout)}
    assert statuses == {f"{unique}-g": "ALREADY_MIGRATED", f"{unique}-p": "PENDING"}

    # A dry run in cluster mode: its plan is held until its record is on HDFS, then written
    # into the result file's copy of stdout, whole.
    dry = submit(yarn, tmp_path, "--delta", "migrate", "--config", str(config), "-o", "json")
    assert dry.returncode == 75, dry.stderr
    rows = json.loads(dry.stdout)
    assert len(rows) == len(json.loads(again.stdout))
    assert {r["group"]: r["group_status"] for r in rows} == statuses
    assert "dry run" in dry.stderr and f"ledger {ledger} " in dry.stderr, dry.stderr

    # audit on YARN (cluster mode), its history table on HDFS: the migrated group is exact.
    audit_path = f"{yarn.fs}/ferry/{unique}/audit"
    audited = submit(yarn, tmp_path, "--delta", "audit", "--config", str(config),
                     "--set", f"audit.path={audit_path}", "-o", "json")  # fmt: skip
    doc = json.loads(audited.stdout)
    assert audited.returncode == doc["exit_code"], audited.stderr
    verdicts = {(r["group"], r["partition"]): r["verdict"] for r in doc["rows"]}
    assert verdicts[(f"{unique}-g", 0)] == verdicts[(f"{unique}-g", 1)] == "EXACT"


def test_cluster_mode_reset_from_a_csv_and_lag_snapshot(yarn, cluster, unique, tmp_path):
    """groups reset --from-file in cluster mode: the CSV and the config travel with the job
    (no --files, no path rewriting); exit 0 and the CSV output reach the console. lag-snapshot
    (client mode, executors on YARN) writes its history to HDFS."""
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 2})
    for p in (0, 1):
        produce(cluster.config, topic, p, [Record(b"k", b"v", BASE + i) for i in range(20)])
    commit_offsets(cluster.config, group, {(topic, 0): 1, (topic, 1): 2})
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{group},{topic},0,7\n{group},{topic},1,11\n")
    config = tmp_path / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            ledger:
              path: {yarn.fs}/ferry/{unique}/ledger
            history:
              path: {yarn.fs}/ferry/{unique}/history
            """
        )
    )
    reset = submit(yarn, tmp_path, "--delta", "groups", "reset", "--config", str(config),
                   "--from-file", str(csv), "--execute", "-o", "csv")  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert committed(cluster, group) == {(topic, 0): 7, (topic, 1): 11}
    assert f"{group},,{topic},0,1,7,COMMITTED," in reset.stdout.splitlines()

    snapshot = submit(yarn, tmp_path, "--delta", "lag-snapshot", "--config", str(config),
                      "--group", f"{unique}-.*", mode="client")  # fmt: skip
    assert snapshot.returncode == 0, snapshot.stderr
    assert not [x for x in snapshot.stderr.splitlines() if x.startswith("error: ")]


def test_exit_codes_1_and_2_reach_the_submitting_side(
    yarn, proxied_source, clusters, unique, tmp_path
):
    """2: a cluster-mode run whose ledger is on the container's local disk is refused with one
    line before anything is read or committed; in client mode a bad setting. 1: in cluster
    mode the source cluster lost mid-run (cut by its proxy at the first record fetch, after
    the groups and offsets were read), in client mode a source that cannot be reached; one
    line, nothing committed."""
    src, dst = proxied_source, clusters[1]
    proxy = src.proxy
    assert proxy is not None
    want = world(src, dst, unique)
    local = migrate_config(tmp_path / "local.yaml", src, dst, unique, str(tmp_path / "ledger"))
    asked = dict(proxy.requests)
    refused = submit(yarn, tmp_path, "migrate", "--config", str(local), "--execute")
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: ledger.path {tmp_path}/ledger is on")
    assert refused.stdout == ""
    assert proxy.requests == asked  # refused before the source was asked anything
    for group in want:
        assert committed(dst, group) == {}, group

    bad = submit(yarn, tmp_path, "migrate", "--config", str(local), "--set", "reader.nope=1",
                 mode="client")  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    # (the client-mode driver's JVM says which incubator modules it uses on stderr)
    [line] = [x for x in bad.stderr.splitlines() if x.startswith("error: ")]
    assert "reader.nope" in line, bad.stderr

    shared = migrate_config(tmp_path / "m.yaml", src, dst, unique, f"{yarn.fs}/ferry/{unique}")
    cut = proxy.arm(API_FETCH, "cut")
    try:  # --quiet: no progress lines, so the error is the only line
        lost = submit(yarn, tmp_path, "--delta", "migrate", "--config", str(shared),
                      "--execute", "--quiet")  # fmt: skip
    finally:
        proxy.disarm()
        proxy.restore()
    assert cut.is_set(), lost.stderr  # the source went away mid-run, not before it
    assert lost.returncode == 1, lost.stderr
    assert lost.stdout == ""
    [line] = lost.stderr.splitlines()
    assert line.startswith("error: ") and f"source ({src.bootstrap})" in line, lost.stderr

    gone = migrate_config(tmp_path / "gone.yaml", src, dst, unique, f"{yarn.fs}/ferry/{unique}")
    gone.write_text(gone.read_text().replace(src.bootstrap, f"127.0.0.1:{free_port()}"))
    unreachable = submit(yarn, tmp_path, "--delta", "migrate", "--config", str(gone),
                         "--execute", mode="client")  # fmt: skip
    assert unreachable.returncode == 1, unreachable.stderr
    errors = [x for x in unreachable.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in unreachable.stderr, unreachable.stderr
    for group in want:
        assert committed(dst, group) == {}, group


def driver_started(yarn: Yarn) -> list[int]:
    """The application master's JVM, once its Python driver (the job) has started."""

    def cmdline(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return ""

    pids = yarn.container_pids()
    if not any("jobs/migrate.py" in cmdline(p) or " migrate.py" in cmdline(p) for p in pids):
        return []
    return [p for p in pids if "ApplicationMaster" in cmdline(p)]


def test_a_killed_application_master_fails_cleanly_and_the_rerun_is_exact(
    yarn, clusters, unique, tmp_path
):
    """The application master (the driver) killed mid-run: one line, exit 1, on the submitting
    console (YARN does not run it again: one attempt); the rerun commits exactly."""
    src, dst = clusters
    want = world(src, dst, unique)
    config = migrate_config(tmp_path / "m.yaml", src, dst, unique, f"{yarn.fs}/ferry/{unique}")
    # A run that died after its intent holds its groups for the lease; the rerun comes later.
    args = ["--delta", "migrate", "--config", str(config), "--execute",
            "--set", "ledger.lease_ms=5000"]  # fmt: skip
    cmd, env = submit_command(yarn, tmp_path, *args)
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not (am := driver_started(yarn)):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the driver never started"
            time.sleep(0.5)
        for pid in am:  # the whole container, as YARN kills one: JVM, Python driver
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, stderr
    assert stdout == ""
    [line] = stderr.splitlines()
    assert line.startswith("error: the application application_"), stderr
    assert "ended without recording Ferry's result" in line, stderr

    rerun = submit(yarn, tmp_path, *args)
    assert rerun.returncode == 75, rerun.stderr
    for group, offsets in want.items():
        assert committed(dst, group) == offsets, group


def readme_yarn_command() -> str:
    """The command of README's "Running on YARN", as printed there (a shell command line)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Running on YARN") :]
    section = section[: section.index("\n## ", 1)]
    [block] = re.findall(r"```sh\n(.*?)```", section, re.S)
    return textwrap.dedent(block)


def test_the_readme_yarn_command_runs_as_written_with_the_shipped_config(yarn, tmp_path):
    """README's YARN command, word for word, run by a shell from the checkout with
    conf/migrate.yaml as shipped (its audit.path an example path on local disk, which
    `migrate` never writes): the clusters come from the variables the config names, exported
    as the README says, everything a node needs beyond it (where Spark's jars are, loopback,
    small containers) from the spark-defaults.conf an EMR node has. Fresh clusters with the
    topic names the shipped rename rule gives the replica (`src.` + the source's); the group
    migrates exactly."""
    command = readme_yarn_command()
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["./spark-submit.sh", "--master"] and "conf/migrate.yaml" in words, words
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        textwrap.dedent(
            f"""\
            spark.yarn.jars                          local:{SPARK_JARS}/*
            spark.yarn.appMasterEnv.SPARK_LOCAL_IP   127.0.0.1
            spark.driver.memory                      640m
            spark.executor.memory                    640m
            spark.executor.instances                 1
            """
        )
    )
    src = start_broker("readme-source")
    dst = start_broker("readme-destination")
    try:
        topic, group = "readme-orders", "src.readme-g"  # (committed() finds src.readme-*)
        create_topics(src.config, {topic: 1})
        create_topics(dst.config, {f"src.{topic}": 1})
        records = [Record(b"k", f"o-{i}".encode(), BASE + i * 10) for i in range(40)]
        produce(src.config, topic, 0, records)
        produce(dst.config, f"src.{topic}", 0, records[5:])
        commit_offsets(src.config, group, {(topic, 0): 30})
        _, env = submit_command(yarn, tmp_path)
        env.update(
            SPARK_CONF_DIR=str(conf_dir),
            FERRY_SOURCE_BOOTSTRAP=src.bootstrap,
            FERRY_DESTINATION_BOOTSTRAP=dst.bootstrap,
        )
        run = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=900, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "1 of 1 groups migrated" in run.stdout, (run.stdout, run.stderr)
        assert committed(dst, group) == {(f"src.{topic}", 0): 25}
    finally:
        src.stop()
        dst.stop()


def hdfs_checkpoint_world(clusters, unique: str, tmp_path: Path):  # noqa: ANN001, ANN201
    """The two HDFS checkpoint tests' world: a topic on both clusters (the destination 7
    records ahead on partition 0), a real query's checkpoint on the local disk, and that
    checkpoint translated once on a local copy. (config, the local checkpoint, its original
    offsets files, their translations.)"""
    import shutil

    from .jobrunner import run_job, write_migrate_config
    from .test_checkpoint import offsets_files, records, spark_checkpoint

    src, dst = clusters
    topic = f"{unique}-events"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    produce(dst.config, topic, 0, [Record(b"x", b"old", BASE)] * 7)
    for p in range(2):
        produce(src.config, topic, p, records(topic, p, 0, 30))
        produce(dst.config, topic, p, records(topic, p, 0, 30))
    config = write_migrate_config(tmp_path, src, dst, unique)
    local = spark_checkpoint(tmp_path / "local", topic)
    shutil.copytree(local, tmp_path / "clean")
    argv = ("--idle", "0s", "--execute")
    clean = run_job("migrate", "--config", config, "--checkpoint", tmp_path / "clean", *argv)
    assert clean.code == 0, clean.stderr
    return config, local, offsets_files(local), offsets_files(tmp_path / "clean")


def upload(hdfs, local: Path, modified_ms: int | None = None) -> None:  # noqa: ANN001
    """A local checkpoint's files (not Hadoop's checksums) written to an HDFS store, each
    dated `modified_ms` when given."""
    for file in local.rglob("*"):
        if file.is_file() and not file.name.endswith(".crc"):
            name = str(file.relative_to(local))
            hdfs.write(name, file.read_bytes())
            if modified_ms is not None:
                hdfs._fs.setTimes(hdfs._path(name), modified_ms, -1)


def test_a_checkpoint_on_hdfs_killed_inside_its_rewrite_is_finished_by_the_rerun(
    yarn, clusters, spark, unique, tmp_path
):
    """`migrate --checkpoint hdfs://...` killed inside a file's replace (its temporary file
    whole, not yet renamed over offsets/4): on HDFS every offsets file is still the original or
    the translation, and the same command again ends as a run on a local copy ends, through
    HDFS's rename with overwrite (FileContext)."""

    from ferry.checkpoint.store import HadoopStore

    from .jobrunner import run_job
    from .test_checkpoint_killed import killed_at

    config, local, original, translated = hdfs_checkpoint_world(clusters, unique, tmp_path)
    argv = ("--idle", "0s", "--execute")
    root = f"{yarn.fs}/checkpoints/{unique}"
    hdfs = HadoopStore(spark, root)
    upload(hdfs, local)

    def on_hdfs() -> dict[str, bytes]:
        names = [f.name for f in hdfs.list("offsets") if f.name.isdigit()]
        return {name: hdfs.read(f"offsets/{name}") for name in names}

    # the run's four copies and `ready` come first: its 6th write is offsets/4
    killed_at("store.before-rename#6", config, "--checkpoint", root, *argv)
    assert any(f.name.endswith(".ferry-tmp") for f in hdfs.list("offsets"))
    now = on_hdfs()
    assert set(now) == set(original)
    assert all(now[b] in (original[b], translated[b]) for b in now), now

    again = run_job("migrate", "--config", config, "--checkpoint", root, *argv)
    assert again.code == 0, again.stderr
    assert "killed before its outcome" in again.stderr
    assert on_hdfs() == translated


def test_a_checkpoint_on_hdfs_killed_the_moment_a_file_changes_is_never_missing_a_file(
    yarn, clusters, spark, unique, tmp_path
):
    """`migrate --checkpoint hdfs://...` SIGKILLed from outside the moment the NameNode shows an
    offsets file replaced (WebHDFS LISTSTATUS polled), once per file: a replace on HDFS is one
    rename with overwrite, so no listing shows a file missing; the same command again, with the
    default --idle on a checkpoint stopped an hour ago, ends exact (exit 0)."""
    import sys

    from ferry.checkpoint.store import HadoopStore

    from .jobrunner import run_job

    config, local, original, translated = hdfs_checkpoint_world(clusters, unique, tmp_path)
    an_hour_ago = int((time.time() - 3600) * 1000)
    seen: dict[int, tuple[list[str], dict]] = {}
    for k in (1, 2):  # killed once offsets/4 is replaced, once offsets/5 is
        folder = f"/checkpoints/{unique}-{k}"
        hdfs = HadoopStore(spark, f"{yarn.fs}{folder}")
        upload(hdfs, local, modified_ms=an_hour_ago)
        before = yarn.list_status(f"{folder}/offsets")
        argv = ("--config", config, "--checkpoint", hdfs.root, "--execute")
        job = subprocess.Popen(
            [sys.executable, str(ROOT / "jobs" / "migrate.py"), *argv],
            cwd=ROOT, env={**os.environ, "FERRY_MASTER": "local[1]"},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        missing: list[str] = []
        while job.poll() is None:
            now = yarn.list_status(f"{folder}/offsets")
            missing += [name for name in original if name not in now]
            changed = [
                name
                for name in original
                if name in now and now[name]["fileId"] != before[name]["fileId"]
            ]
            if len(changed) >= k:
                os.killpg(job.pid, signal.SIGKILL)
                break
            time.sleep(0.02)  # a NameNode answer takes ~2 ms: leave the job the CPU
        _, stderr = job.communicate(timeout=300)
        assert job.returncode == -signal.SIGKILL, stderr.decode()[-2000:]
        files = {n: hdfs.read(f"offsets/{n}") for n in original if hdfs.exists(f"offsets/{n}")}
        assert set(files) == set(original), files
        assert all(files[n] in (original[n], translated[n]) for n in files), files
        again = run_job("migrate", "--config", config, "--checkpoint", hdfs.root, "--execute")
        assert again.code == 0, again.stderr
        seen[k] = (missing, {n: hdfs.read(f"offsets/{n}") == translated[n] for n in original})
    assert seen == {k: ([], {"4": True, "5": True}) for k in (1, 2)}, seen

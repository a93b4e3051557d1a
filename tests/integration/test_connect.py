"""Every job through Spark Connect: the `ferry` command with `--remote sc://localhost:PORT`
against a real Spark Connect server (PySpark's own, started here in its own process, its
Python workers on this environment) and the real local Kafka clusters, each `-o json` output
and exit code compared with the classic run of the same job on the same world (the job's main
in-process on the local session, as every other integration test runs it).

Execute runs change the world, so each is compared on a twin world: the same topics, records
and groups under another name prefix, which the comparison maps back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ferry.testing.produce import Record, commit_offsets, create_topics, produce, read_committed
from ferry.testing.proxy import API_FETCH

from .jobrunner import run_job
from .test_checkpoint import copied_topic  # noqa: F401 - a fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FERRY = Path(sys.executable).parent / "ferry"  # the installed console script
BASE = 1_760_000_000_000
# Values that differ between any two runs (their ids and clocks: when it ran, how long ago a
# record was written, when a lag snapshot was taken), not between the two ways in.
RUN_KEYS = re.compile(r"^(run_id|.*_at|run_time|row_time|time_lag_ms|timestamp|observedAt)$")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Spark Connect server from the installed PySpark, in its own process: local[2], its
    Python workers on this interpreter (where ferry and confluent-kafka are installed)."""
    from ferry.testing.connect_server import connect_server

    with connect_server(tmp_path_factory.mktemp("connect") / "server.log") as url:
        yield url


def ferry(remote: str, *args: str, timeout: int = 300, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"} | extra
    return subprocess.run(
        [str(FERRY), *args, "--remote", remote], capture_output=True, text=True,
        timeout=timeout, env=env, check=False,
    )  # fmt: skip


def records(tag: str, n: int, base_ms: int = BASE) -> list[Record]:
    return [Record(f"k{i % 5}".encode(), f"{tag}-{i}".encode(), base_ms + i * 10) for i in range(n)]


def build_world(clusters, directory: Path, u: str) -> dict:
    """Groups `{u}-ok-a` (exact translation: destination = source - 20) and `{u}-wait-p` (its
    replica has not caught up: PENDING); a config selecting both (`all`) and one selecting
    the first (`ok`), with every section the jobs here need."""
    src, dst = clusters
    shift, tail = f"{u}-ok-shift", f"{u}-wait-tail"
    create_topics(src.config, {shift: 2, tail: 1})
    create_topics(dst.config, {shift: 2, tail: 1})
    for p in range(2):
        recs = records(f"{u}-s{p}", 50)
        produce(src.config, shift, p, recs)
        produce(dst.config, shift, p, recs[20:])
    recent = records(f"{u}-t", 40, base_ms=int(time.time() * 1000) - 1000)
    produce(src.config, tail, 0, recent)
    produce(dst.config, tail, 0, recent[:20])
    commit_offsets(src.config, f"{u}-ok-a", {(shift, 0): 35, (shift, 1): 50})
    commit_offsets(src.config, f"{u}-wait-p", {(tail, 0): 35})

    def config(name: str, prefix: str) -> str:
        data = {
            "source": {"bootstrap.servers": src.bootstrap},
            "destination": {"bootstrap.servers": dst.bootstrap},
            "cluster": {"bootstrap.servers": src.bootstrap},
            "groups": {"include": [f"{prefix}-.*"]},
            "topics": {"include": [f"{prefix}-.*"]},
            "matching": {"hash": ["key", "value"]},
            "ledger": {"path": str(directory / "ledger")},
            "history": {"path": str(directory / "history")},
            "reader": {"timeout_ms": 10000},
        }
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path)

    return {"u": u, "all": config("all", u), "ok": config("ok", f"{u}-ok"), "dir": directory}


@pytest.fixture(scope="module")
def worlds(clusters, tmp_path_factory):
    """Twin worlds: `classic` for the in-process runs, `connect` for `ferry --remote`."""
    stamp = int(time.time() * 1000) % 10**8
    return {
        way: build_world(clusters, tmp_path_factory.mktemp(way), f"c{stamp}{way[:2]}")
        for way in ("classic", "connect")
    }


def plain(value, u: str):  # noqa: ANN001, ANN201
    """A job's JSON with the world's prefix as U and the run's ids and clocks left out."""
    if isinstance(value, dict):
        return {k: plain(v, u) for k, v in value.items() if not RUN_KEYS.match(k)}
    if isinstance(value, list):
        return [plain(v, u) for v in value]
    if isinstance(value, str):
        return value.replace(u, "U")
    return value


def document(stdout: str):  # noqa: ANN201 - JSON
    text = stdout.strip()
    try:
        return json.loads(text)
    except ValueError:  # JSON lines
        return [json.loads(line) for line in text.splitlines()]


def both(worlds, server, job: str, *args: str, config: str = "ok", twin: bool = False):  # noqa: ANN201
    """The classic and the Connect run of `job`, each given its world's `config` (`twin`:
    the Connect run on its own world; else both on the classic one), and their JSON made
    plain. Their exit codes must be the same."""
    classic = worlds["classic"]
    connect = worlds["connect"] if twin else classic

    def argv(world: dict) -> list[str]:
        given = [a.replace("{dir}", str(world["dir"])).replace("{u}", world["u"]) for a in args]
        return given + [
            "--config", world[config], "--quiet",
        ]  # fmt: skip

    k = run_job(job, *argv(classic))
    c = ferry(server, job, *argv(connect))
    assert c.returncode == k.code, (job, args, k.code, k.stderr, c.stderr)
    assert "Traceback" not in c.stderr, c.stderr
    if "-o" not in args or not k.stdout.strip():
        return k, c, None, None
    return k, c, plain(document(k.stdout), classic["u"]), plain(document(c.stdout), connect["u"])


def test_migrate_dry_run_execute_and_rerun_as_classic(worlds, server, spark):
    # dry run: one group PENDING, so exit 75 both ways; then only the exact group: 0
    _, _, k_json, c_json = both(worlds, server, "migrate", "-o", "json", config="all")
    assert k_json == c_json and k_json
    assert {r["group_status"] for r in k_json} >= {"PENDING"}
    _, _, k_json, c_json = both(worlds, server, "migrate", "-o", "json")
    assert k_json == c_json
    # --execute on each world, then the same again: nothing left to write
    _, c, k_json, c_json = both(worlds, server, "migrate", "--execute", "-o", "json", twin=True)
    assert k_json == c_json
    assert {r["group_status"] for r in c_json} == {"COMMITTED"}, c_json
    _, _, k_json, c_json = both(worlds, server, "migrate", "--execute", "-o", "json", twin=True)
    assert k_json == c_json
    assert {r["group_status"] for r in c_json} == {"ALREADY_MIGRATED"}, c_json
    # the ledger's commits say where they came from: the server's application and user
    from ferry import delta

    meta = delta.commit_metadata(spark, str(worlds["connect"]["dir"] / "ledger"), 20)
    apps = {m.get("ferry.spark_app_id") for _, m in meta}
    assert all(a and a.startswith("local-") for a in apps), meta
    assert spark.sparkContext.applicationId not in apps
    # audit reads the same world the same way
    _, _, k_json, c_json = both(worlds, server, "audit", "-o", "json", twin=True)
    assert k_json == c_json


def test_groups_describe_copy_and_reset_as_classic(worlds, server):
    _, _, k_json, c_json = both(worlds, server, "groups", "describe", "-o", "json", config="all")
    assert k_json == c_json and k_json
    for execute in ((), ("--execute",)):
        k, _, k_json, c_json = both(
            worlds, server, "groups", "copy", "--from", "{u}-ok-a", "--to", "{u}-ok-copy",
            "-o", "json", *execute, config="all", twin=True,
        )  # fmt: skip
        assert k.code == 0 and k_json == c_json and k_json
    for execute in ((), ("--execute",)):
        _, _, k_json, c_json = both(
            worlds, server, "groups", "reset", "--group", "{u}-ok-copy",
            "--all-topics", "--to-earliest", "-o", "json", *execute, twin=True,
        )  # fmt: skip
        assert k_json == c_json and k_json


def test_lag_snapshot_and_status_as_classic(worlds, server):
    k, c, _, _ = both(worlds, server, "lag-snapshot", twin=True)
    assert k.code == 0 and "appended to history" in c.stdout, c.stdout
    _, _, k_json, c_json = both(
        worlds, server, "lag-status", "--all-partitions", "-o", "json", twin=True
    )
    assert k_json == c_json and k_json
    # nothing to evaluate (no history): exit 1 both ways
    both(worlds, server, "lag-status", "--set", "history.path={dir}/none")


def test_decode_offsets_as_classic(worlds, server):
    sets = ["--set", "offsets.commits_path={dir}/commits", "--set", "offsets.groups_path={dir}/gm",
            "--set", "offsets.quarantine_path={dir}/q"]  # fmt: skip
    k, c, _, _ = both(worlds, server, "decode-offsets", "--topic", "{u}-ok-shift", "-o", "json",
                      *sets)  # fmt: skip
    assert k.code == 0
    k_rows, c_rows = document(k.stdout), document(c.stdout)
    for row in k_rows + c_rows:
        row["path"] = Path(row["path"]).name
    assert k_rows == c_rows


def test_usage_and_config_errors_as_classic(worlds, server):
    k, c, _, _ = both(worlds, server, "migrate", "--set", "nonsense")
    assert k.code == 2
    assert [line for line in c.stderr.splitlines() if line.startswith("error:")], c.stderr
    unknown = ferry(server, "no-such-job")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: unknown job 'no-such-job'")
    # a server nobody answers at: one line at once, not the client's minutes of retries
    from ferry.testing.brokers import free_port

    started = time.monotonic()
    port = free_port()
    nobody = ferry(f"sc://localhost:{port}", "migrate", "--config", worlds["classic"]["ok"])
    assert nobody.returncode == 1 and time.monotonic() - started < 60
    errors = [line for line in nobody.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: cannot reach the Spark Connect server at localhost:{port}: Connection refused"
    ], nobody.stderr
    assert "Traceback" not in nobody.stderr


@pytest.fixture(scope="module")
def proxied_source():  # noqa: ANN201 - a LocalBroker
    """A source cluster reached only through its FaultProxy (ferry.testing.proxy), so a test
    can take it away mid-run."""
    from ferry.testing.brokers import start_broker

    broker = start_broker("connect-source", proxied=True)
    try:
        yield broker
    finally:
        broker.stop()


def committed(cluster, prefix: str, group: str) -> dict[tuple[str, int], int]:  # noqa: ANN001
    """The group's committed offsets on the topics named `prefix-…`, read by a consumer that
    never joins the group (`read_committed`, as test_yarn's)."""
    return read_committed(cluster.config, group, f"{prefix}-")


@pytest.mark.parametrize("reader", ["driver", "spark"])
def test_a_cluster_lost_mid_run_gives_one_line_and_nothing_written_as_classic(
    proxied_source, clusters, server, tmp_path, reader
):
    # The source cut by its proxy at the first record fetch (after the groups and their
    # offsets were read), on twin worlds: exit 1, one `error:` line naming the source, nothing
    # on stdout, no group committed on the destination; the classic run says the same. The
    # records read by the driver (the `ferry` process itself through Connect), or by Spark
    # (reader.driver_max_offsets=0: the server's Python workers, the error crossing gRPC).
    src, dst = proxied_source, clusters[1]
    proxy = src.proxy
    assert proxy is not None
    stamp = int(time.time() * 1000) % 10**8
    runs, lines = {}, {}
    for way in ("classic", "connect"):
        (tmp_path / way).mkdir()
        world = build_world((src, dst), tmp_path / way, f"l{stamp}{way[:2]}{reader[:2]}")
        spark_reads = ["--set", "reader.driver_max_offsets=0"] if reader == "spark" else []
        args = ["migrate", "--config", world["ok"], "--execute", "--quiet", *spark_reads,
                "--set", "reader.timeout_ms=5000", "--set", "admin.timeout_ms=3000"]  # fmt: skip
        cut = proxy.arm(API_FETCH, "cut")
        try:
            if way == "classic":
                k = run_job(*args)
                runs[way] = (k.code, k.stdout, k.stderr)
            else:
                c = ferry(server, *args)
                runs[way] = (c.returncode, c.stdout, c.stderr)
        finally:
            proxy.disarm()
            proxy.restore()
        code, stdout, stderr = runs[way]
        assert cut.is_set(), (way, stderr)  # the source went away mid-run, not before it
        assert code == 1, (way, stderr)
        assert stdout == "", (way, stdout)
        assert "Traceback" not in stderr, (way, stderr)
        [lines[way]] = stderr.strip().splitlines()
        assert lines[way].startswith("error: "), (way, stderr)
        assert f"source ({src.bootstrap})" in lines[way], (way, stderr)
        for group in (f"{world['u']}-ok-a", f"{world['u']}-wait-p"):
            assert committed(dst, world["u"], group) == {}, (way, group)
    # the same command again, the source back, finishes the job (and the oracle sees it)
    again = ferry(server, *args)
    assert again.returncode == 0, again.stderr
    shift = f"{world['u']}-ok-shift"
    assert committed(dst, world["u"], f"{world['u']}-ok-a") == {(shift, 0): 15, (shift, 1): 30}
    # the same kind of line both ways: the same words once where the read stopped is left out
    # (which partition's read failed first is the tasks' race)
    print(f"{reader}: {lines['connect']}")
    stopped = re.compile(r"reading \S+\[\d+\] at offset \d+( \(and \d+ more partitions\))?")
    assert stopped.sub("reading P", lines["classic"]) == stopped.sub("reading P", lines["connect"])


def test_a_server_whose_workers_lack_ferry_says_so_in_one_line(worlds, server, tmp_path):
    # The server's Python workers are this interpreter without Ferry on its path: the Kafka
    # data source cannot be unpickled there. Reads through Spark (not the driver) reach them.
    python = tmp_path / "python-without-ferry"
    python.write_text(
        f"#!{sys.executable}\n"
        "import runpy, sys\n"
        f"sys.path[:] = [p for p in sys.path if not p.startswith({str(ROOT / 'lib')!r})]\n"
        "i = sys.argv.index('-m')\n"
        "sys.argv = [sys.argv[i + 1], *sys.argv[i + 2:]]\n"
        "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    )
    python.chmod(0o755)
    world = worlds["classic"]
    done = ferry(
        server, "--conf", f"spark.sql.execution.pyspark.python={python}",
        "decode-offsets", "--config", world["ok"], "--topic", f"{world['u']}-ok-shift",
        "--set", "reader.driver_max_offsets=0", "--quiet",
        "--set", f"offsets.commits_path={tmp_path}/c", "--set", f"offsets.groups_path={tmp_path}/g",
        "--set", f"offsets.quarantine_path={tmp_path}/q",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: Spark's Python workers cannot import ferry"), lines


def test_a_result_file_is_written_without_a_jvm(worlds, server, tmp_path):
    # A cluster-mode driver's result file (ferry.result), from a Connect session: through
    # pyarrow.fs, and result files of a day ago beside it are removed.
    stale = tmp_path / "ferry-old.json"
    stale.write_text("{}")
    os.utime(stale, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    target = tmp_path / "ferry-run.json"
    done = ferry(
        server, "lag-status", "--config", worlds["classic"]["ok"],
        "--set", f"history.path={tmp_path}/none", FERRY_RESULT=f"file:{target}",
    )  # fmt: skip
    assert done.returncode == 1
    result = json.loads(target.read_text())
    assert result["code"] == 1 and result["stderr"].startswith("error: no lag history at")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ferry-run.json"]


def test_migrate_checkpoint_on_a_local_path_as_classic(copied_topic, server, tmp_path):  # noqa: F811
    # The same checkpoint twice: one translated by the classic run, one through Connect
    # (ArrowStore), each with its own ledger; then the rerun finds it done.
    from .test_checkpoint import offsets_files, spark_checkpoint

    topic, config = copied_topic
    paths = {way: spark_checkpoint(tmp_path / way, topic) for way in ("classic", "connect")}
    before = offsets_files(paths["classic"])
    outputs = {}
    for execute in ((), ("--execute",)):
        args = {
            way: ["migrate", "--config", config, "--checkpoint", str(path), "--idle", "0s",
                  "--set", f"ledger.path={tmp_path / way}-ledger", "-o", "json", *execute]
            for way, path in paths.items()
        }  # fmt: skip
        k = run_job(*args["classic"])
        c = ferry(server, *args["connect"])
        assert (k.code, c.returncode) == (0, 0), (k.stderr, c.stderr)
        for way, out in (("classic", k.stdout), ("connect", c.stdout)):
            outputs[way] = plain(document(out.replace(str(paths[way]), "CP")), "-")
        assert outputs["classic"] == outputs["connect"] and outputs["connect"]
    after = offsets_files(paths["connect"])
    assert after == offsets_files(paths["classic"]) and after != before
    again = ferry(server, "migrate", "--config", config, "--checkpoint", str(paths["connect"]),
                  "--set", f"ledger.path={tmp_path / 'connect'}-ledger", "--execute")  # fmt: skip
    assert again.returncode == 0 and "ALREADY_MIGRATED by run" in again.stdout, again.stderr
    assert offsets_files(paths["connect"]) == after


def test_without_remote_the_command_runs_a_local_session(worlds):
    # no --remote, no SPARK_REMOTE: a local session (FERRY_MASTER), the same plan
    world = worlds["classic"]
    args = ["migrate", "--config", world["ok"], "--quiet", "-o", "json"]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    local = subprocess.run([str(FERRY), *args], capture_output=True, text=True, timeout=300,
                           env=env, check=False)  # fmt: skip
    k = run_job(*args)
    # (the world as the tests before left it: its codes are whatever they are, but the same)
    assert local.returncode == k.code and "Traceback" not in local.stderr, local.stderr
    assert plain(document(local.stdout), world["u"]) == plain(document(k.stdout), world["u"])

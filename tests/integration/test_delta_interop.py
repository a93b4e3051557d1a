"""delta-spark and `deltalake` writing the same Delta tables: the ledger, the lag history and the
audit history, each written by one writer and appended to and read back by the other, with
their schemas evolving both ways.

The delta-spark side is one Spark driver with the Delta jars, started with the exact command
`FERRY_PACKAGES=1 ./spark-submit.sh --print-command` gives for a real job (so the `--packages`
coordinate it computes must resolve from Maven), with this file as the job: a job per table and
direction would cost a spark-submit each (10-20 s apiece). It calls Ferry's own writers and
readers, and so does the test process, whose shared session has no Delta jars and therefore
takes the `deltalake` path. The two take turns on two tables per kind:

    table   P0 (deltalake)   S1 (delta-spark)   P2 (deltalake)   S3 (delta-spark)   P4
    "dl"    old schema       full rows          full rows        read               read
    "spark"                  old schema         full rows        full rows, read    read

"old schema": the columns a table had before Ferry added some (the ledger without `phase`,
`row_time` and `rollback_of`, the audit table with its contract's first twelve), so the next
writer's full rows merge new columns in — delta-spark into deltalake's table (S1), deltalake
into delta-spark's (P2). The lag history has no older layout: its first rows are full ones. Run
as a script (`python test_delta_interop.py WORKDIR`, under spark-submit) it is the delta-spark
side; it waits for `p2.done` after S1 so the turns interleave with one JVM start.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pyspark.sql.types import StructType

from ferry import delta
from ferry.audit import table as audit_table
from ferry.lag import history
from ferry.version import ferry_version
from ferry.write import ledger

# A delta-spark driver of its own beside the test session: `make test-slow`.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("ledger", "history", "audit")
SCHEMAS: dict[str, StructType] = {
    "ledger": ledger.LEDGER_SCHEMA,
    "history": history.HISTORY_SCHEMA,
    "audit": audit_table.AUDIT_SCHEMA,
}
# Columns of the older tables each module's docstring promises to keep appending to.
OLD_COLUMNS: dict[str, int | None] = {"ledger": -3, "history": None, "audit": 12}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
CLUSTER = "destination:9092"
GROUP = "payments"
LEASE_MS = 10 * 60 * 1000
WAIT_S = 600  # for the other side's turn: generous, as suites running beside this one on 2
# cores have made a turn take minutes; a driver that died is noticed at once (_wait)


def old_schema(kind: str) -> StructType:
    cut = OLD_COLUMNS[kind]
    return SCHEMAS[kind] if cut is None else StructType(SCHEMAS[kind].fields[:cut])


def run_id(kind: str, step: str) -> str:
    return f"{kind}-{step}"


def rows(kind: str, step: str, old: bool = False) -> list[dict]:
    """The rows step `step` appends to a `kind` table, as every column of the current schema
    reads them back (columns an old-schema write lacks are None). Distinct per step, with a
    null, a binary value and a timestamp in them."""
    n = {"p0": 0, "s1": 1, "p2": 2, "s3": 3}[step]
    at = T0 + timedelta(minutes=n)
    out: list[dict] = []
    for partition in range(2):
        if kind == "ledger":
            row = {
                "run_id": run_id(kind, step),
                "run_time": T0,  # set on the Ledger: every run inside one claim lease
                "action": "migrate",
                "is_executed": True,
                "cluster": CLUSTER,
                "group": GROUP,
                "source_group": GROUP,
                "source_topic": "orders",
                "source_partition": partition,
                "source_offset": 1000 * n + partition,
                "topic": "src.orders",
                "partition": partition,
                "previous_offset": None if partition else 7,
                "new_offset": 2000 * n + partition,
                "status": "planned",
                "is_committed": False,
                "anchor_kind": "record",
                "anchor_offset": 999 * n,
                "anchor_timestamp": at,
                "anchor_sha256": bytes([n, partition]) * 16,
                "candidate_count": 1,
                "message": f"{step} p{partition}",
                "phase": ledger.PHASE_INTENT,
                "row_time": T0,  # Ledger.append sets the append's time: compared as set/unset
                "rollback_of": None,  # a migrate run's (Ledger sets it: None but a rollback's)
            }
        elif kind == "history":
            row = {
                "snapshot_time": at,
                "cluster": CLUSTER,
                "group": GROUP,
                "group_state": "STABLE",
                "is_consuming": bool(partition),
                "topic": "orders",
                "partition": partition,
                "committed_offset": None if partition else 100 * n,
                "log_start_offset": 0,
                "log_end_offset": 100 * n + 50,
                "lag": 50,
                "time_lag_ms": 1500 * n,
                "member_id": f"m-{step}" if partition else None,
                "client_id": "consumer-1",
                "host": "/10.0.0.1",
            }
        else:
            row = {
                "run_id": run_id(kind, step),
                "audited_at": at,
                "group": GROUP,
                "topic": "orders",
                "partition": partition,
                "committed_offset": 10 * n + partition,
                "exact_offset": 10 * n,
                "difference": partition,
                "verdict": "AHEAD" if partition else "EXACT",
                "is_live": False,
                "group_state": "EMPTY",
                "note": None if partition else f"{step} note",
                "is_counted": True,
                "members": 0,
                "source_state": "EMPTY",
            }
        if old:
            keep = set(old_schema(kind).fieldNames())
            row = {c: (v if c in keep else None) for c, v in row.items()}
        out.append(row)
    return out


def write(spark, kind: str, path: str, step: str, old: bool = False) -> str:  # noqa: ANN001
    """Append `rows(kind, step, old)` with Ferry's own writer for the table; returns the writer
    (delta-spark or deltalake). Old-schema rows go through `delta.append_rows` with the older
    schema, as the Ferry of that layout wrote them."""
    data = rows(kind, step, old)
    if old and OLD_COLUMNS[kind] is not None:
        return delta.append_rows(spark, data, old_schema(kind), path)
    if kind == "ledger":
        book = ledger.Ledger(spark, path, run_id(kind, step), "migrate", True)
        book.run_time = T0
        return book.append(data, ledger.PHASE_INTENT)
    if kind == "history":
        columns = history.HISTORY_COLUMNS
        df = spark.createDataFrame([tuple(r[c] for c in columns) for r in data], SCHEMAS[kind])
        return history.append_history(spark, df, path)
    return audit_table.append(spark, path, data, run_id(kind, step), data[0]["audited_at"])


def read(spark, kind: str, path: str):  # noqa: ANN001, ANN201
    """The table through Ferry's reader for it (the audit table has none but `delta.read`)."""
    if kind == "ledger":
        return ledger.read(spark, path)
    if kind == "history":
        return history.read_history(spark, path)
    return delta.read(spark, path)


def claims(spark, path: str, step: str) -> dict[str, str]:  # noqa: ANN001
    """The open claims a run named for `step` sees on `path` (it wrote its intent already)."""
    book = ledger.Ledger(spark, path, run_id("ledger", step), "migrate", True)
    book.run_time = T0
    return book.open_claims(CLUSTER, [GROUP], LEASE_MS)


class Steps(dict):
    """What one side did: each step's writer or value, its traceback if it failed (recorded,
    so that one failure fails the tests that need that step rather than all of them), and
    its seconds."""

    def __init__(self) -> None:
        super().__init__(writers={}, errors={}, seconds={})

    def __call__(self, name: str, fn) -> None:  # noqa: ANN001
        began = time.monotonic()
        try:
            value = fn()
            if isinstance(value, str):
                self["writers"][name] = value
            elif value is not None:
                self[name] = value
        except Exception:  # noqa: BLE001
            self["errors"][name] = traceback.format_exc()
        self["seconds"][name] = round(time.monotonic() - began, 2)


# ------------------------------------------------------------------- the delta-spark side


def _driver(work: Path) -> int:
    from ferry.session import build_session, has_delta_jars

    began = time.monotonic()
    spark = build_session("ferry-delta-interop")
    step = results = Steps()
    results["has_delta_jars"] = has_delta_jars(spark)
    results["session_s"] = round(time.monotonic() - began, 2)

    def save() -> None:
        tmp = work / "results.json.tmp"
        tmp.write_text(json.dumps(results, default=str))
        tmp.replace(work / "results.json")

    for kind in KINDS:
        path = _path(work, kind, "spark")
        step(f"s1:{kind}:spark", lambda k=kind, p=path: write(spark, k, p, "s1", True))
        step(f"s1:{kind}:dl", lambda k=kind: write(spark, k, _path(work, k, "dl"), "s1"))
    save()
    (work / "s1.done").touch()
    deadline = time.monotonic() + WAIT_S
    while not (work / "p2.done").exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.1)
    for kind in KINDS:
        step(f"s3:{kind}:spark", lambda k=kind: write(spark, k, _path(work, k, "spark"), "s3"))
    step("claims:spark", lambda: claims(spark, _path(work, "ledger", "spark"), "s3"))
    for kind in KINDS:
        for table in ("dl", "spark"):
            step(f"dump:{kind}:{table}", lambda k=kind, t=table: _dump(spark, work, k, t))
    for table in ("dl", "spark"):
        path = _path(work, "ledger", table)
        step(f"commits:{table}", lambda p=path: delta.commit_metadata(spark, p, 10))
        step(f"writes:{table}", lambda p=path: _writes(spark, p))
    save()
    return 0


def _dump(spark, work: Path, kind: str, table: str) -> None:  # noqa: ANN001
    import pyarrow.feather as feather

    feather.write_feather(read(spark, kind, _path(work, kind, table)).toArrow(),
                          str(work / f"read-{kind}-{table}.arrow"))  # fmt: skip


def _writes(spark, path: str) -> list[list]:  # noqa: ANN001
    """What a rollback of another run reads of other runs' writes on the cluster
    (`ledger.read_other_writes`), as sorted lists."""
    df = ledger.read_other_writes(spark, path, "another run", CLUSTER)
    return sorted([r.run_id, r.group, r.phase, str(r.row_time)] for r in df.collect())


def _path(work: Path, kind: str, table: str) -> str:
    return str(work / f"{kind}-{table}")


# ------------------------------------------------------------------------ the test side


def _submit_command(work: Path) -> list[str]:
    """What `./spark-submit.sh` runs for a job with the Delta jars, this file as the job
    (lag-status stands in: any job prints the same command but for its file and arguments)."""
    env = {**os.environ, "FERRY_PACKAGES": "1", "FERRY_LOG_DIR": str(work / "log")}
    printed = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--print-command", "lag-status"],
        capture_output=True, text=True, check=True, env=env, cwd=ROOT,
    ).stdout  # fmt: skip
    argv = shlex.split(printed)
    assert argv[-1] == str(ROOT / "jobs" / "lag_status.py"), printed
    return [*argv[:-1], str(Path(__file__).resolve()), str(work)]


def _wait(proc: subprocess.Popen, done: Path, log: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            pytest.fail(f"the delta-spark driver stopped before {done.name}:\n{tail}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def interop(spark, tmp_path_factory):
    """Runs P0 … P4 (module docstring); yields what each side wrote and read."""
    work = tmp_path_factory.mktemp("delta-interop")
    step = parent = Steps()
    started = time.monotonic()
    for kind in KINDS:
        step(f"p0:{kind}:dl", lambda k=kind: write(spark, k, _path(work, k, "dl"), "p0", True))
    log = work / "driver.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            _submit_command(work), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
        try:
            _wait(proc, work / "s1.done", log)
            parent["s1_done_s"] = round(time.monotonic() - started, 1)
            for kind in KINDS:
                for table in ("dl", "spark"):
                    path = _path(work, kind, table)
                    step(f"p2:{kind}:{table}", lambda k=kind, p=path: write(spark, k, p, "p2"))
            step("claims:dl", lambda: claims(spark, _path(work, "ledger", "dl"), "p2"))
            (work / "p2.done").touch()
            proc.wait(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, log.read_text(errors="replace")[-4000:]
    for table in ("dl", "spark"):
        path = _path(work, "ledger", table)
        step(f"commits:{table}", lambda p=path: delta.commit_metadata(spark, p, 10))
    child = json.loads((work / "results.json").read_text())
    # Where the time goes, for `pytest -s`: the delta-spark side's start is most of it.
    print(
        f"delta interop: {time.monotonic() - started:.1f} s, S1 done at {parent['s1_done_s']}"
        f" s; delta-spark steps {child['seconds']}"
    )
    return {"work": work, "spark_side": child, "test_side": parent}


def _no_errors(side: dict, *names: str) -> None:
    failed = {n: side["errors"][n] for n in names if n in side["errors"]}
    assert not failed, "\n".join(f"{n}:\n{tb}" for n, tb in failed.items())


def _expected(spark, kind: str, steps: list[tuple[str, bool]]):  # noqa: ANN001, ANN202
    schema = SCHEMAS[kind]
    data = [r for s, old in steps for r in rows(kind, s, old)]
    return spark.createDataFrame([tuple(r[c] for c in schema.fieldNames()) for r in data], schema)


def _spark_read(spark, work: Path, kind: str, table: str):  # noqa: ANN001, ANN202
    """What delta-spark read in S3, as a DataFrame of this session."""
    import pyarrow.feather as feather

    return spark.createDataFrame(feather.read_table(str(work / f"read-{kind}-{table}.arrow")))


def _assert_same(actual, expected, kind: str) -> None:  # noqa: ANN001
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    if kind == "ledger":
        # row_time is each append's wall-clock time: against the written rows only whether it
        # is set (null in old-schema rows); the two readers are compared on the value.
        actual, expected = (
            df.withColumn("row_time", F.col("row_time").isNotNull()) for df in (actual, expected)
        )
    # Nullability differs by writer (delta-spark makes a new table's columns nullable) and
    # by reader (Arrow): what must agree is names, types, order and values.
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("kind", KINDS)
def test_written_by_delta_spark_reads_back_in_deltalake(spark, interop, kind):
    """The "spark" table: created by delta-spark with the old schema; deltalake merges the new
    columns in (P2); delta-spark appends again; deltalake reads all of it."""
    child, parent, work = interop["spark_side"], interop["test_side"], interop["work"]
    assert child["has_delta_jars"], "the --packages run has no Delta jars"
    _no_errors(child, f"s1:{kind}:spark", f"s3:{kind}:spark", f"dump:{kind}:spark")
    _no_errors(parent, f"p2:{kind}:spark")
    assert child["writers"][f"s1:{kind}:spark"] == "delta-spark"
    assert child["writers"][f"s3:{kind}:spark"] == "delta-spark"
    assert parent["writers"][f"p2:{kind}:spark"] == "deltalake"

    in_deltalake = read(spark, kind, _path(work, kind, "spark"))
    expected = _expected(spark, kind, [("s1", True), ("p2", False), ("s3", False)])
    _assert_same(in_deltalake, expected, kind)
    # Both readers see one table: row_time included.
    _assert_same(in_deltalake, _spark_read(spark, work, kind, "spark"), "")


@pytest.mark.parametrize("kind", KINDS)
def test_written_by_deltalake_appends_and_reads_in_delta_spark(spark, interop, kind):
    """The "dl" table: created by deltalake with the old schema; delta-spark merges the new
    columns in (S1, mergeSchema); deltalake appends; delta-spark reads all of it (S3)."""
    child, parent, work = interop["spark_side"], interop["test_side"], interop["work"]
    assert child["has_delta_jars"], "the --packages run has no Delta jars"
    _no_errors(parent, f"p0:{kind}:dl", f"p2:{kind}:dl")
    _no_errors(child, f"s1:{kind}:dl", f"dump:{kind}:dl")
    assert parent["writers"][f"p0:{kind}:dl"] == "deltalake"
    assert child["writers"][f"s1:{kind}:dl"] == "delta-spark"

    in_delta_spark = _spark_read(spark, work, kind, "dl")
    expected = _expected(spark, kind, [("p0", True), ("s1", False), ("p2", False)])
    _assert_same(in_delta_spark, expected, kind)
    # deltalake reads the table delta-spark read: both readers see one table, row_time included.
    _assert_same(read(spark, kind, _path(work, kind, "dl")), in_delta_spark, "")


def test_ledger_claims_and_commit_metadata_cross_writers(interop):
    """A run's claim on a group is seen by a run of the other writer, ordered by the Delta log
    (userMetadata written by one writer, read back by the other)."""
    child, parent = interop["spark_side"], interop["test_side"]
    _no_errors(child, "claims:spark", "commits:dl", "commits:spark")
    _no_errors(parent, "claims:dl", "commits:dl", "commits:spark")
    # delta-spark (S3) sees deltalake's run (P2) first; deltalake (P2) sees delta-spark's (S1).
    assert child["claims:spark"] == {GROUP: run_id("ledger", "p2")}
    assert parent["claims:dl"] == {GROUP: run_id("ledger", "s1")}

    def intent(step: str) -> dict:
        return {"ferry.run_id": run_id("ledger", step), "ferry.phase": ledger.PHASE_INTENT}

    provenance = ("ferry.version", "ferry.spark_app_id", "ferry.user")

    def run_part(commits) -> list:  # noqa: ANN001 - [version, userMetadata] pairs
        return [[v, {k: x for k, x in m.items() if k not in provenance}] for v, m in commits]

    expected = {
        "dl": [[2, intent("p2")], [1, intent("s1")], [0, {}]],
        "spark": [[2, intent("s3")], [1, intent("p2")], [0, {}]],
    }
    for table, commits in expected.items():
        assert run_part(child[f"commits:{table}"]) == commits, table  # read by delta-spark
        assert run_part(parent[f"commits:{table}"]) == commits, table  # by deltalake
        # Provenance (#41): every Ledger commit, whichever writer made it, names Ferry's
        # version, its Spark application and the user; the two sides are two applications.
        apps = set()
        for _, meta in parent[f"commits:{table}"]:
            if meta:
                assert meta["ferry.version"] == ferry_version(), meta
                assert meta["ferry.user"] and meta["ferry.spark_app_id"], meta
                apps.add(meta["ferry.spark_app_id"])
        assert len(apps) == 2, apps


def test_a_rollback_reads_the_same_writes_through_both_readers(spark, interop):
    """`ledger.read_other_writes` filters and keeps distinct rows in delta-spark, and as
    deltalake reads the files: both keep the intent rows, one per run and group (a row a
    partition in the table), and drop the old layout's rows (no phase, not committed)."""
    child, work = interop["spark_side"], interop["work"]
    _no_errors(child, "writes:dl", "writes:spark")
    for table in ("dl", "spark"):
        path = _path(work, "ledger", table)
        whole = read(spark, "ledger", path).collect()
        expected = sorted(
            {
                (r.run_id, r.group, r.phase, str(r.row_time))
                for r in whole
                if r.phase in (ledger.PHASE_INTENT, ledger.PHASE_OUTCOME) or r.is_committed
            }
        )
        assert expected and len(expected) < len(whole), table
        expected_lists = [list(e) for e in expected]
        assert child[f"writes:{table}"] == expected_lists, table  # delta-spark
        assert _writes(spark, path) == expected_lists, table  # deltalake


def test_packages_coordinate_is_the_pinned_delta_for_the_installed_spark():
    """`--delta` asks for delta-spark built for the installed Spark, at the version setup.py
    pins exactly (PyPI can carry a delta-spark whose jars Maven does not), from the mirror
    FERRY_MAVEN_MIRROR names when set."""
    import importlib.metadata as md
    import re

    mirror = "https://nexus.example/repository/maven-central/"
    printed = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--delta", "--print-command", "lag-status"],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={**os.environ, "FERRY_MAVEN_MIRROR": mirror},
    ).stdout  # fmt: skip
    argv = shlex.split(printed)
    assert f"DEFAULT_ARTIFACT_REPOSITORY={mirror}" in argv
    coordinate = argv[argv.index("--packages") + 1]
    spark = ".".join(md.version("pyspark").split(".")[:2])
    pinned = re.search(r'"delta-spark==([^"]+)"', (ROOT / "setup.py").read_text())
    assert pinned, "setup.py must pin delta-spark exactly"
    assert md.version("delta-spark") == pinned.group(1)
    assert coordinate == f"io.delta:delta-spark_{spark}_2.13:{pinned.group(1)}"
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in argv


if __name__ == "__main__":
    sys.exit(_driver(Path(sys.argv[1])))

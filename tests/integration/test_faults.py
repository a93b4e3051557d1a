"""`migrate` through broker faults staged by a TCP proxy in front of each real local broker:
connections dropped mid-run, a source lost for good mid-read, a destination lost right after
a commit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ferry.testing.brokers import start_broker
from ferry.testing.produce import commit_offsets, create_topics, produce
from ferry.testing.proxy import API_FETCH, API_LIST_GROUPS, API_OFFSET_COMMIT

from .jobrunner import ROOT, group_statuses, ledger_rows, run_job, write_migrate_config
from .test_migrate import committed, replicate, unique_records

pytestmark = [pytest.mark.integration, pytest.mark.faults]

JAVA_FRAME = re.compile(r"^\s+at [\w$.]+\(.*\)\s*$", re.M)


@pytest.fixture(scope="module")
def proxied():
    """A source and a destination broker, each reached only through its own FaultProxy."""
    src = start_broker("fault-source", proxied=True)
    dst = start_broker("fault-destination", proxied=True)
    try:
        yield src, dst
    finally:
        src.stop()
        dst.stop()


@pytest.fixture(autouse=True)
def healthy(proxied):
    for broker in proxied:
        broker.proxy.restore()
    yield
    for broker in proxied:
        broker.proxy.disarm()
        broker.proxy.restore()


def _world(src, dst, tmp_path: Path, unique: str, **settings: int) -> tuple[str, dict]:
    """Three stopped groups over two topics; returns (config path, expected offsets)."""
    a, b = f"{unique}-a", f"{unique}-b"
    create_topics(src.config, {a: 2, b: 1})
    create_topics(dst.config, {a: 2, b: 1})
    for topic, partitions in ((a, 2), (b, 1)):
        for p in range(partitions):
            recs = unique_records(f"{topic}{p}", 40)
            produce(src.config, topic, p, recs)
            produce(dst.config, topic, p, replicate(recs, 5))
    sources = {
        f"{unique}-g1": {(a, 0): 20, (a, 1): 30},
        f"{unique}-g2": {(a, 0): 12, (b, 0): 25},
        f"{unique}-g3": {(b, 0): 33},
    }
    for group, offsets in sources.items():
        commit_offsets(src.config, group, offsets)
    expected = {g: {tp: o - 5 for tp, o in offs.items()} for g, offs in sources.items()}
    tuning = {"reader.timeout_ms": 8000, "admin.timeout_ms": 3000, "admin.retry_ms": 30000}
    tuning.update({k.replace("__", "."): v for k, v in settings.items()})
    sections: dict[str, dict[str, int]] = {}
    for key, value in tuning.items():
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = value
    return write_migrate_config(tmp_path, src, dst, unique, **sections), expected


def test_connections_dropped_mid_run_still_migrate_exactly(proxied, tmp_path, unique):
    src, dst = proxied
    config, expected = _world(src, dst, tmp_path, unique)
    fired = [
        src.proxy.arm(API_LIST_GROUPS, "drop"),  # while the groups are listed (their states)
        src.proxy.arm(API_FETCH, "drop"),  # while the source is read
        dst.proxy.arm(API_FETCH, "drop"),  # while the destination is read
        dst.proxy.arm(API_OFFSET_COMMIT, "drop"),  # the first commit never reaches the broker
    ]
    started = time.monotonic()
    result = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    took = time.monotonic() - started
    assert [f.is_set() for f in fired] == [True] * 4, ("a fault was not staged", result.stderr)
    assert result.code == 0, result.stderr
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    assert {r["group_status"] for r in json.loads(result.stdout)} == {"COMMITTED"}
    print(f"dropped connections: run took {took:.1f}s")


def _spark_submit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "FERRY_MASTER")}
    env["FERRY_LOG_DIR"] = str(Path(args[args.index("--config") + 1]).parent / "logs")
    return subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--master", "local[2]", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def test_source_lost_mid_read_fails_in_one_line(proxied, tmp_path, unique):
    src, dst = proxied
    config, expected = _world(src, dst, tmp_path, unique, reader__timeout_ms=5000)
    cut = src.proxy.arm(API_FETCH, "cut")
    started = time.monotonic()
    result = _spark_submit("migrate", "--config", config, "--execute", "--quiet")
    took = time.monotonic() - started
    assert cut.is_set()
    assert result.returncode == 1, result.stderr
    # The JVM itself announces Spark's incubator module before any logging is configured.
    lines = [
        line
        for line in result.stderr.strip().splitlines()
        if line != "WARNING: Using incubator modules: jdk.incubator.vector"
    ]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and f"source ({src.bootstrap})" in lines[0], lines
    assert "Traceback" not in result.stderr + result.stdout
    assert not JAVA_FRAME.search(result.stderr + result.stdout), result.stderr[:2000]
    for group in expected:
        assert committed(dst, group) == {}, group
    print(f"source lost: failed after {took:.1f}s: {lines[0]}")


@pytest.mark.parametrize("batch", [1, 200])
def test_destination_lost_after_first_commit_then_rerun(proxied, tmp_path, unique, batch):
    """Batches of one: only the first group's commit reaches the broker, the others fail
    their checks. One batch of all three: their commits are in flight together when the
    connection goes, so any of them may have landed, and those that did not are UNKNOWN
    (sent, never confirmed) or FAILED."""
    src, dst = proxied
    config, expected = _world(
        src,
        dst,
        tmp_path,
        unique,
        admin__timeout_ms=1500,
        admin__retry_ms=4000,
        admin__batch_groups=batch,
    )
    cut = dst.proxy.arm(API_OFFSET_COMMIT, "cut_after")
    first = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert cut.is_set()
    assert first.code == 1, first.stderr
    dst.proxy.restore()
    landed = {g for g in expected if committed(dst, g)}
    if batch == 1:
        assert len(landed) == 1, landed  # only the first group's commit reached the broker
    else:
        assert landed, "the commit the proxy let through did not land"
    for group, offsets in expected.items():
        assert committed(dst, group) in ({}, offsets), f"{group} half committed"
    claimed = {
        r["group"]
        for r in ledger_rows(tmp_path / "ledger")
        if r["phase"] == "outcome" and r["is_committed"]
    }
    assert claimed <= landed, "the ledger claims a commit that did not happen"
    statuses = group_statuses(first)
    assert {statuses[g] for g in landed} <= {"COMMITTED", "UNKNOWN"}
    others = {s for g, s in statuses.items() if g not in landed}
    assert others == {"FAILED"} if batch == 1 else others <= {"FAILED", "UNKNOWN"}, statuses

    again = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert again.code == 0, again.stderr
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    statuses = group_statuses(again)
    assert statuses == {g: ("ALREADY_MIGRATED" if g in landed else "COMMITTED") for g in expected}

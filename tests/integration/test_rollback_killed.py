"""`migrate --rollback RUN_ID --execute` as a scheduler meets it (issue #38): killed mid-way
and run again, rolling back a run whose group a later run wrote since, and a group that moved
on since the run — on real local brokers, with the real job.

- Killed: a real rollback process (`jobs/migrate.py`, two groups a batch) is SIGKILLed once
  some groups are back and others not; the rerun exits 0, every group is at the offsets it had
  before the migration, and the rerun's ledger outcomes say `is_committed` for every group.
- A/B: run A announced a group and never wrote it (stopped before its write); B, later, wrote
  the same offsets and stopped before recording it. Rolling back A must not undo B's write:
  the group is named and left alone (exit 1); rolled back B first, then A, both exit 0.
- Moved on: a group a consumer committed since the run is named and left alone, the others are
  restored (exit 1); every ledger commit carries Ferry's version, the Spark application id and
  the user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from ferry import delta, kafka
from ferry.testing.produce import commit_offsets, create_topics, produce
from ferry.version import ferry_version
from ferry.write import commit

from .jobrunner import ROOT, ledger_rows, run_job
from .test_migrate import committed, replicate, unique_records, write_config

pytestmark = pytest.mark.integration


def _world(src, dst, unique: str, n: int, with_previous: int) -> tuple[str, dict, dict]:
    """`n` stopped groups on one topic (destination = source - 10); the first `with_previous`
    have older offsets on the destination already (the rest none). Returns the topic, each
    group's destination offsets before the migration, and after it."""
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        recs = unique_records(f"{topic}{p}", 60)
        produce(src.config, topic, p, recs)
        produce(dst.config, topic, p, replicate(recs, 10))
    before, after = {}, {}
    for i in range(n):
        group = f"{unique}-g{i:02d}"
        commit_offsets(src.config, group, {(topic, 0): 20 + i, (topic, 1): 30 + i})
        after[group] = {(topic, 0): 10 + i, (topic, 1): 20 + i}
        before[group] = {}
        if i < with_previous:
            before[group] = {(topic, 0): 2, (topic, 1): 3}  # an older migration's leftovers
            commit_offsets(dst.config, group, before[group])
    return topic, before, after


def _migrate(config: str, *extra: str) -> str:
    done = run_job("migrate", "--config", config, "--execute", "--quiet", *extra)
    assert done.code == 0, done.stderr
    return _run_id(done.stdout, "migrate-")


def _run_id(text: str, prefix: str) -> str:
    for word in text.split():
        if word.startswith(prefix):
            return word.rstrip(";")
    raise AssertionError(f"no {prefix} run id in {text!r}")


def _all_committed(dst, groups) -> dict:
    return kafka.committed_offsets(kafka.Cluster("c", dst.config), list(groups))


@pytest.mark.faults
def test_a_rollback_killed_mid_way_is_finished_by_its_rerun(clusters, tmp_path, unique):
    src, dst = clusters
    _, before, after = _world(src, dst, unique, n=16, with_previous=4)
    config = write_config(tmp_path, src, dst, unique)
    run_id = _migrate(config)
    assert _all_committed(dst, after) == after

    command = [
        sys.executable, str(ROOT / "jobs" / "migrate.py"), "--config", config,
        "--rollback", run_id, "--execute", "--set", "admin.batch_groups=2",
    ]  # fmt: skip
    out, err = tmp_path / "killed.out", tmp_path / "killed.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        killed = subprocess.Popen(
            command, stdout=stdout, stderr=stderr, cwd=ROOT, start_new_session=True,
            env={**os.environ, "FERRY_MASTER": "local[1]"},
        )  # fmt: skip
        deadline = time.monotonic() + 300
        back: set[str] = set()
        while time.monotonic() < deadline and killed.poll() is None:
            now = _all_committed(dst, before)
            back = {g for g in before if now[g] == before[g]}
            if len(back) >= 4:  # two batches or more restored: kill it in the middle
                os.killpg(killed.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL, err.read_text()[-2000:]
    now = _all_committed(dst, before)
    left = sorted(g for g in before if now[g] != before[g])
    assert left, "the rollback finished before it could be killed"
    assert all(now[g] == after[g] for g in left), "a group left half rolled back"
    print(f"killed with {len(before) - len(left)} of {len(before)} groups rolled back")

    rerun = run_job(
        "migrate", "--config", config, "--rollback", run_id, "--execute", "--quiet",
        "--set", "admin.batch_groups=2", "-o", "json",
    )  # fmt: skip
    assert rerun.code == 0, rerun.stderr
    assert "not rolled back" not in rerun.stderr
    assert _all_committed(dst, before) == before
    statuses = {r["group"]: r["status"] for r in json.loads(rerun.stdout)}
    assert {statuses[g] for g in left} <= {"RESTORED", "DELETED", "ALREADY_RESTORED"}
    assert {statuses[g] for g in set(before) - set(left)} == {"ALREADY_RESTORED"}
    rerun_id = _run_id(rerun.stderr, "rollback-")
    outcomes = [
        r
        for r in ledger_rows(tmp_path / "ledger")
        if r["run_id"] == rerun_id and r["phase"] == "outcome"
    ]
    assert {r["group"] for r in outcomes} == set(before)
    assert all(r["is_committed"] for r in outcomes), [r for r in outcomes if not r["is_committed"]]
    assert {r["rollback_of"] for r in outcomes} == {run_id}


def _stop_before_writing(monkeypatch) -> None:
    """The run stops after its intent, before any group is written (as if killed there)."""

    def killed(*_args, **_kwargs):
        raise RuntimeError("killed before its first write")

    monkeypatch.setattr(commit, "write_batch", killed)


def _stop_before_recording(monkeypatch) -> None:
    """The run writes its groups and stops before their outcome is recorded."""
    real = delta.append_columns

    def append(*args, **kwargs):
        metadata = args[4] if len(args) > 4 else kwargs.get("metadata")
        if metadata and metadata.get("ferry.phase") == "outcome":
            raise OSError("killed before recording its outcome")
        return real(*args, **kwargs)

    monkeypatch.setattr(delta, "append_columns", append)


@pytest.mark.faults
def test_rolling_back_a_run_never_undoes_a_later_runs_identical_write(
    clusters, tmp_path, unique, monkeypatch
):
    src, dst = clusters
    _, before, after = _world(src, dst, unique, n=1, with_previous=1)
    (group,) = before
    config = write_config(tmp_path, src, dst, unique)

    with monkeypatch.context() as m:
        _stop_before_writing(m)
        a = run_job("migrate", "--config", config, "--execute", "--quiet")
    assert a.code == 1 and "killed before its first write" in a.stderr, a.stderr
    (run_a,) = {r["run_id"] for r in ledger_rows(tmp_path / "ledger")}  # its intent only
    assert committed(dst, group) == before[group]

    with monkeypatch.context() as m:  # A's claim has lapsed (lease 1 ms): B writes the group
        _stop_before_recording(m)
        b = run_job(
            "migrate", "--config", config, "--execute", "--quiet", "--set", "ledger.lease_ms=1"
        )
    assert b.code == 1 and "killed before recording its outcome" in b.stderr, b.stderr
    run_b = _run_id(b.stderr, "migrate-")
    assert run_b != run_a
    assert committed(dst, group) == after[group]
    intents = {
        r["run_id"]: (r["previous_offset"], r["new_offset"])
        for r in ledger_rows(tmp_path / "ledger")
        if r["phase"] == "intent" and r["partition"] == 0
    }
    assert intents[run_a] == intents[run_b], "the two intents should be identical"

    lease = ("--set", "ledger.lease_ms=1")  # the killed runs' claims have lapsed
    undo_a = run_job("migrate", "--config", config, "--rollback", run_a, "--execute", *lease)
    assert undo_a.code == 1, undo_a.stderr
    assert committed(dst, group) == after[group], "rolling back A undid B's write"
    named = [line for line in undo_a.stderr.splitlines() if line.startswith("not rolled back")]
    assert named == [
        f"not rolled back: {group}: group {group}: written since by run {run_b}, which this "
        f"run's rollback would undo; left alone (roll back {run_b} first)"
    ]

    undo_b = run_job("migrate", "--config", config, "--rollback", run_b, "--execute", *lease)
    assert undo_b.code == 0, undo_b.stderr
    assert committed(dst, group) == before[group]
    again_a = run_job(
        "migrate", "--config", config, "--rollback", run_a, "--execute", "-o", "json", *lease
    )
    assert again_a.code == 0, again_a.stderr
    assert {r["status"] for r in json.loads(again_a.stdout)} == {"ALREADY_RESTORED"}
    assert committed(dst, group) == before[group]


def test_a_group_moved_on_since_the_run_is_named_and_left_alone(clusters, tmp_path, unique):
    src, dst = clusters
    topic, before, after = _world(src, dst, unique, n=3, with_previous=1)
    config = write_config(tmp_path, src, dst, unique)
    run_id = _migrate(config)
    moved = f"{unique}-g02"
    commit_offsets(dst.config, moved, {(topic, 0): after[moved][(topic, 0)] + 5})  # a consumer
    now_moved = committed(dst, moved)

    undo = run_job("migrate", "--config", config, "--rollback", run_id, "--execute", "--quiet")
    assert undo.code == 1, undo.stderr
    assert committed(dst, moved) == now_moved, "a group that moved on was moved"
    for group in set(before) - {moved}:
        assert committed(dst, group) == before[group], group
    named = [line for line in undo.stderr.splitlines() if line.startswith("not rolled back")]
    assert named == [
        f"not rolled back: {moved}: group {moved}: its offsets changed since run {run_id} "
        "wrote them; left alone"
    ]

    # Provenance: every commit of this ledger names Ferry's version, the Spark application and
    # the user (the runs ran in this process, on its Spark session).
    from ferry.session import build_session

    sc = build_session().sparkContext
    history = DeltaTable(str(tmp_path / "ledger")).history()
    metas = [json.loads(h["userMetadata"]) for h in history if h.get("userMetadata")]
    assert len(metas) == len(history) >= 3
    for meta in metas:
        assert meta["ferry.version"] == ferry_version()
        assert meta["ferry.spark_app_id"] == sc.applicationId
        assert meta["ferry.user"] == sc.sparkUser()
    assert {m["ferry.phase"] for m in metas} >= {"intent", "outcome"}
    assert [m.get("ferry.rollback_of") for m in metas].count(run_id) >= 2  # its intent, outcome


def test_deleting_a_group_that_does_not_exist_is_a_delete_done(clusters, unique):
    # What a killed rollback's rerun met for each group its first try had deleted (#38): the
    # broker's GROUP_ID_NOT_FOUND is the state a delete wants, confirmed by the read-back.
    _, dst = clusters
    write = commit.GroupWrite(f"{unique}-gone", {}, [], is_delete=True)
    done = commit.delete(kafka.Cluster("dst", dst.config), [write], {write.group: {}})
    assert (done[write.group].status, done[write.group].is_committed) == ("DELETED", True)

"""The ledger never trails the commits, and runs that overlap never both write a group:
`migrate` and `groups` on real local brokers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from ferry import delta
from ferry.testing.produce import commit_offsets, create_topics, produce
from ferry.write import ledger

from .jobrunner import ROOT, group_statuses, ledger_rows, run_job
from .test_migrate import committed, replicate, unique_records, write_config

pytestmark = pytest.mark.integration


def _world(src, dst, unique: str) -> tuple[str, dict[str, dict]]:
    """Three stopped groups on one topic (destination = source - 10); returns expected."""
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    for p in range(2):
        recs = unique_records(f"{topic}{p}", 50)
        produce(src.config, topic, p, recs)
        produce(dst.config, topic, p, replicate(recs, 10))
    expected = {}
    for i, group in enumerate(f"{unique}-g{n}" for n in (1, 2, 3)):
        commit_offsets(src.config, group, {(topic, 0): 20 + i, (topic, 1): 30 + i})
        expected[group] = {(topic, 0): 10 + i, (topic, 1): 20 + i}
    return topic, expected


def test_unwritable_ledger_commits_nothing(clusters, tmp_path, unique):
    src, dst = clusters
    _, expected = _world(src, dst, unique)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the ledger's parent directory should be")
    config = write_config(tmp_path, src, dst, unique)
    result = run_job(
        "migrate",
        "--config",
        config,
        "--execute",
        "--quiet",
        "--set",
        f"ledger.path={blocker}/ledger",
    )
    assert result.code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot append to ledger {blocker}/ledger: "
    ), result.stderr
    for group in expected:
        assert committed(dst, group) == {}, f"{group} committed without its audit row"


def test_a_dry_run_whose_record_fails_shows_no_plan(clusters, tmp_path, unique):
    """A dry run's ledger record is written while its output is made; the plan is shown only
    once it is on record."""
    src, dst = clusters
    _world(src, dst, unique)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the ledger's parent directory should be")
    config = write_config(tmp_path, src, dst, unique)
    args = ["migrate", "--config", config, "--quiet", "-o", "json"]
    result = run_job(*args, "--set", f"ledger.path={blocker}/ledger")
    assert result.code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot append to ledger {blocker}/ledger: "
    ), result.stderr
    shown = run_job(*args, "--set", f"ledger.path={tmp_path}/ledger")
    assert shown.code == 0, shown.stderr
    assert len(json.loads(shown.stdout)) == 6  # three groups, two partitions each


def test_groups_verbs_write_nothing_without_their_audit_row(cluster, tmp_path, unique):
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 1})
    produce(cluster.config, topic, 0, unique_records("gv", 20))
    commit_offsets(cluster.config, group, {(topic, 0): 12})
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    config = tmp_path / "groups.yaml"
    config.write_text(
        f"cluster:\n  bootstrap.servers: {cluster.bootstrap}\nledger:\n  path: {blocker}/ledger\n"
    )
    for verb in (
        ("reset", "--group", group, "--all-topics", "--to-earliest"),
        ("copy", "--from", group, "--to", f"{group}-copy"),
        ("delete", "--group", group),
    ):
        result = run_job("groups", *verb, "--config", config, "--execute", "--quiet")
        assert result.code == 1, verb
        assert (
            result.stderr.strip()
            .splitlines()[-1]
            .startswith(f"error: cannot append to ledger {blocker}/ledger: ")
        ), result.stderr
    assert committed(cluster, group) == {(topic, 0): 12}
    assert committed(cluster, f"{group}-copy") == {}


def test_lost_outcome_stops_the_run_and_keeps_a_way_back(clusters, tmp_path, unique, monkeypatch):
    """Batches of two: the first batch's outcome cannot be written, so the run stops before
    the second batch and prints the way back for both groups the first batch wrote."""
    src, dst = clusters
    topic, expected = _world(src, dst, unique)
    g1, g2, g3 = sorted(expected)
    before = {(topic, 0): 3, (topic, 1): 4}  # an older migration's leftovers
    commit_offsets(dst.config, g1, before)
    config = write_config(tmp_path, src, dst, unique)

    real_append = delta.append_columns
    calls = []

    def failing_after_intent(*args, **kwargs):  # the first outcome cannot be written
        calls.append(args[4].get("ferry.phase") if len(args) > 4 and args[4] else None)
        if len(calls) == 2:
            raise OSError("No space left on device")
        return real_append(*args, **kwargs)

    monkeypatch.setattr(delta, "append_columns", failing_after_intent)
    result = run_job(
        "migrate", "--config", config, "--execute", "--quiet", "--set", "admin.batch_groups=2"
    )
    monkeypatch.setattr(delta, "append_columns", real_append)
    assert calls == ["intent", "outcome"]
    assert result.code == 1
    assert committed(dst, g1) == expected[g1] and committed(dst, g2) == expected[g2]
    assert committed(dst, g3) == {}, "kept committing"
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: cannot append to ledger {tmp_path / 'ledger'}: No space")
    assert "stopped after writing 2 group(s), 1 not attempted" in error
    block = result.stderr.split("groups reset --from-file FILE --execute):\n", 1)[1]
    assert block.splitlines()[:4] == [
        "group,topic,partition,offset",
        f"{g1},{topic},0,3",
        f"{g1},{topic},1,4",
        f"(no offsets before this run: {g2}: delete to undo)",
    ]
    run_id = error.split("; run ")[1].split()[0]

    undo = run_job("migrate", "--config", config, "--rollback", run_id, "--execute", "--quiet")
    assert undo.code == 0, undo.stderr
    assert committed(dst, g1) == before
    assert committed(dst, g2) == {} and committed(dst, g3) == {}


def _fake_intent(path, cluster, group, topic) -> ledger.Ledger:
    """Another executing run that announced `group` and has not recorded its outcome."""
    from ferry.session import build_session

    other = ledger.Ledger(build_session(), str(path), ledger.new_run_id("migrate"), "migrate", True)
    other.append(
        [{"cluster": cluster, "group": group, "topic": topic, "partition": 0, "new_offset": 1}],
        ledger.PHASE_INTENT,
    )
    return other


def test_a_group_claimed_by_another_run_is_left_to_it(clusters, tmp_path, unique):
    src, dst = clusters
    topic, expected = _world(src, dst, unique)
    g1, g2, g3 = sorted(expected)
    config = write_config(tmp_path, src, dst, unique)
    other = _fake_intent(tmp_path / "ledger", dst.bootstrap, g1, topic)
    stale = _fake_intent(tmp_path / "ledger", dst.bootstrap, g2, topic)

    result = run_job("migrate", "--config", config, "--execute", "--quiet", "-o", "json")
    assert result.code == 75, result.stderr
    statuses = group_statuses(result)
    assert statuses == {g1: "CLAIMED", g2: "CLAIMED", g3: "COMMITTED"}
    assert f"run {other.run_id} is writing this group" in result.stderr
    assert committed(dst, g1) == {} and committed(dst, g2) == {}

    # The other run records its outcome: the claim is released.
    other.append(
        [{"cluster": dst.bootstrap, "group": g1, "topic": topic, "partition": 0}],
        ledger.PHASE_OUTCOME,
    )
    # A run that died holding a claim blocks the group only for ledger.lease_ms.
    assert stale.run_time < datetime.now(timezone.utc)
    again = run_job(
        "migrate",
        "--config",
        config,
        "--execute",
        "--quiet",
        "-o",
        "json",
        "--set",
        "ledger.lease_ms=1",
    )
    assert again.code == 0, again.stderr
    statuses = group_statuses(again)
    assert statuses == {g1: "COMMITTED", g2: "COMMITTED", g3: "ALREADY_MIGRATED"}
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets


@pytest.mark.faults
def test_two_runs_on_the_same_groups_at_once(clusters, tmp_path, unique):
    """Both plan, both see the groups Empty: each group is written by exactly one of them,
    and the ledger says which."""
    src, dst = clusters
    _, expected = _world(src, dst, unique)
    config = write_config(tmp_path, src, dst, unique)
    env = {**os.environ, "FERRY_MASTER": "local[1]"}
    command = [
        sys.executable,
        str(ROOT / "jobs" / "migrate.py"),
        "--config",
        config,
        "--execute",
        "--quiet",
        "-o",
        "json",
    ]
    runs = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        for _ in range(2)
    ]
    outputs = [r.communicate(timeout=300) for r in runs]
    codes = [r.returncode for r in runs]
    assert set(codes) <= {0, 75}, [o[1] for o in outputs]
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    statuses = [{r["group"]: r["group_status"] for r in json.loads(out)} for out, _ in outputs]
    rows = ledger_rows(tmp_path / "ledger")
    for group in expected:
        writers = [s[group] for s in statuses if s[group] == "COMMITTED"]
        others = [s[group] for s in statuses if s[group] != "COMMITTED"]
        assert len(writers) == 1 and others in (["CLAIMED"], ["ALREADY_MIGRATED"]), statuses
        claims = [
            r for r in rows if r["group"] == group and r["phase"] == "outcome" and r["is_committed"]
        ]
        assert len({r["run_id"] for r in claims}) == 1, "two runs claim the same commit"
    print("overlapping runs:", codes, statuses)


@pytest.mark.faults
def test_runs_started_together_after_a_deploy(clusters, tmp_path, unique):
    """Two `migrate` runs on one ledger and a `lag-snapshot`, started in the same second
    through spark-submit.sh right after the library changed on disk."""
    src, dst = clusters
    _, expected = _world(src, dst, unique)
    g1, g2, g3 = sorted(expected)
    config = write_config(tmp_path, src, dst, unique)
    lag_config = tmp_path / "lag.yaml"
    lag_config.write_text(
        f"cluster:\n  bootstrap.servers: {src.bootstrap}\ngroups:\n  include: ['{unique}-.*']\n"
        f"history:\n  path: {tmp_path / 'history'}\n"
    )
    (ROOT / "lib" / "ferry" / "__init__.py").touch()  # a deploy: the lib zip is stale
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "FERRY_MASTER")}
    commands = [
        ["migrate", "--config", config, "--execute", "--quiet",
         "--set", f"groups.include=['{g1}', '{g2}']"],
        ["migrate", "--config", config, "--execute", "--quiet",
         "--set", f"groups.include=['{g3}']"],
        ["lag-snapshot", "--config", str(lag_config), "--quiet"],
    ]  # fmt: skip
    runs = [
        subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), "--master", "local[1]", *c],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
        )
        for c in commands
    ]  # fmt: skip
    outputs = [r.communicate(timeout=400) for r in runs]
    assert [r.returncode for r in runs] == [0, 0, 0], [err[-2000:] for _, err in outputs]
    for group, offsets in expected.items():
        assert committed(dst, group) == offsets, group
    run_ids = {r["run_id"] for r in ledger_rows(tmp_path / "ledger") if r["is_committed"]}
    assert len(run_ids) == 2, run_ids
    assert delta.exists(str(tmp_path / "history"))

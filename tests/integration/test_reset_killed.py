"""`groups reset --shift-by` / `--by-duration --execute` as a scheduler meets it (issue #68):
killed (SIGKILL, a real `jobs/groups.py` process, two groups a batch) and run again, the same
command finishes the killed run's plan — every group ends exactly one shift from where it
started — while a deliberate rerun after a finished run shifts again, and `--new-run` plans
afresh from where the groups are. A run that ended with a group not done (exit 1: refused
while active), retried, finishes its plan too: the refused group shifted once, the others
not again. On real local brokers. The reruns run in-process, and so
do the runs the last two tests stop between a batch's write and its outcome (what a SIGKILL
there leaves: the ledger and the cluster are all a rerun reads; a real kill costs a Spark
start, ~12 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ferry import delta, kafka
from ferry.testing.produce import Record, commit_offsets, create_topics, produce

from .jobrunner import ROOT, join_group, ledger_rows, run_job

pytestmark = [pytest.mark.integration, pytest.mark.faults]

GROUPS = 30  # 15 batches of two


def _world(cluster, tmp_path: Path, unique: str, timestamps: bool = False) -> tuple[str, dict]:
    """`GROUPS` Empty groups on one topic of 2 partitions × 300 records (one a second, ending
    now, with `timestamps`); returns the config's path and each group's offsets."""
    topic = f"{unique}-t"
    create_topics(cluster.config, {topic: 2})
    now = int(time.time() * 1000)
    for p in range(2):
        records = [
            Record(None, f"{p}-{i}".encode(), now - (300 - i) * 1000 if timestamps else None)
            for i in range(300)
        ]
        produce(cluster.config, topic, p, records)
    start = {}
    for i in range(GROUPS):
        group = f"{unique}-g{i:02d}"
        start[group] = {(topic, 0): 100 + i, (topic, 1): 150 + i}
        commit_offsets(cluster.config, group, start[group])
    config = tmp_path / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            admin:
              batch_groups: 2
            ledger:
              path: {tmp_path / "ledger"}
            """
        )
    )
    return str(config), start


def _now(cluster, groups) -> dict:
    return kafka.committed_offsets(kafka.Cluster("c", cluster.config), list(groups))


def _shifted(start: dict, by: int) -> dict:
    return {g: {tp: o + by for tp, o in offsets.items()} for g, offsets in start.items()}


def _commits(ledger: Path) -> int:
    """How many commits the ledger's log has (a listing: cheap enough to poll every 5 ms)."""
    return len(list((ledger / "_delta_log").glob("*.json"))) if ledger.is_dir() else 0


def _killed(config: str, argv: list[str], commits: int, tmp: Path) -> None:
    """Run the real job as its own process and SIGKILL it once it has made `commits` ledger
    commits: 1, right after its intent; 2, after its first batch's outcome (between batches,
    or in the middle of the second)."""
    ledger = tmp / "ledger"
    before = _commits(ledger)
    command = [sys.executable, str(ROOT / "jobs" / "groups.py"), "reset", "--config", config,
               *argv, "--execute"]  # fmt: skip
    err = tmp / f"killed-{before}.err"
    with err.open("w") as stderr:
        job = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT, start_new_session=True,
            env={**os.environ, "FERRY_MASTER": "local[1]"},
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and job.poll() is None:
            if _commits(ledger) >= before + commits:
                os.killpg(job.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
        job.wait(timeout=60)
    assert job.returncode == -signal.SIGKILL, err.read_text()[-2000:]


def _reset(config: str, *argv: str):
    return run_job("groups", "reset", "--config", config, "--quiet", "-o", "json", *argv)


def _one_shift_or_none(now: dict, start: dict, target: dict) -> None:
    """After a kill every group is where it was or at its target: never shifted twice."""
    bad = {g: o for g, o in now.items() if o not in (start[g], target[g])}
    assert not bad, bad


def test_shift_by_killed_twice_then_rerun_shifts_each_group_once(cluster, tmp_path, unique):
    config, start = _world(cluster, tmp_path, unique)
    argv = ["--group", f"{unique}-g.*", "--all-topics", "--shift-by", "-10"]
    target = _shifted(start, -10)
    # Each killed run's claims lapse at once, as they do after ledger.lease_ms (15 minutes by
    # default; a scheduler may retry later than that): the case, in which a rerun
    # shifted again what a killed run had written. (The runs below with the default lease
    # show that neither a finishing run nor a new one is held back by the plan's claims.)
    lapsed = ["--set", "ledger.lease_ms=1"]

    _killed(config, argv, 1, tmp_path)  # right after its intent
    _one_shift_or_none(_now(cluster, start), start, target)
    _killed(config, [*argv, *lapsed], 2, tmp_path)  # the finishing run, after its first batch
    now = _now(cluster, start)
    _one_shift_or_none(now, start, target)
    assert now != target, "the finishing run finished before it could be killed"

    done = _reset(config, *argv, *lapsed, "--execute")
    assert done.code == 0, done.stderr
    assert _now(cluster, start) == target
    assert "killed before its outcome" in done.stderr and "finishing run reset-" in done.stderr
    statuses = {r["status"] for r in json.loads(done.stdout)}
    assert statuses <= {"COMMITTED", "ALREADY_COPIED"}, statuses

    # The plan is finished: the same command again is a deliberate second shift.
    again = _reset(config, *argv, "--execute")
    assert again.code == 0, again.stderr
    assert "finishing run" not in again.stderr
    assert _now(cluster, start) == _shifted(start, -20)


def _stop_at_second_outcome(monkeypatch) -> None:
    """The run stops after writing its second batch, before recording that batch's outcome:
    what a SIGKILL there leaves (in-process: a real kill costs a Spark start)."""
    real, outcomes = delta.append_columns, []

    def append(*args, **kwargs):
        metadata = args[4] if len(args) > 4 else kwargs.get("metadata")
        if metadata and metadata.get("ferry.phase") == "outcome":
            outcomes.append(metadata)
            if len(outcomes) == 2:
                raise OSError("killed before recording its outcome")
        return real(*args, **kwargs)

    monkeypatch.setattr(delta, "append_columns", append)


def test_new_run_after_a_kill_shifts_from_where_the_groups_are(
    cluster, tmp_path, unique, monkeypatch
):
    config, start = _world(cluster, tmp_path, unique)
    argv = ["--group", f"{unique}-g.*", "--all-topics", "--shift-by", "-10"]
    with monkeypatch.context() as m:
        _stop_at_second_outcome(m)
        killed = _reset(config, *argv, "--execute")
    assert killed.code == 1 and "killed before recording its outcome" in killed.stderr
    before = _now(cluster, start)
    assert {g for g in start if before[g] != start[g]} == {f"{unique}-g{i:02d}" for i in range(4)}
    # (two batches written, the second not recorded)

    dry = _reset(config, *argv)  # a dry run shows what the finishing run would do
    assert dry.code == 0, dry.stderr
    statuses = {r["group"]: r["status"] for r in json.loads(dry.stdout)}
    assert [statuses[g] for g in sorted(start)] == ["ALREADY_COPIED"] * 4 + ["READY"] * (GROUPS - 4)
    assert "finishing run reset-" in dry.stderr
    assert _now(cluster, start) == before

    # The killed run's open intents claim its groups for ledger.lease_ms: --new-run sets
    # them aside, as it says.
    fresh = _reset(config, *argv, "--new-run", "--execute")
    assert fresh.code == 0, fresh.stderr
    assert "--new-run: ignoring run reset-" in fresh.stderr
    assert "finishing run" not in fresh.stderr
    shifted = {g: {tp: o - 10 for tp, o in before[g].items()} for g in start}
    assert _now(cluster, start) == shifted, "--new-run shifts every group from where it is"


def test_by_duration_killed_then_rerun_keeps_the_killed_runs_time(
    cluster, tmp_path, unique, monkeypatch
):
    config, start = _world(cluster, tmp_path, unique, timestamps=True)
    argv = ["--group", f"{unique}-g.*", "--all-topics", "--by-duration", "PT100S"]
    with monkeypatch.context() as m:
        _stop_at_second_outcome(m)
        assert _reset(config, *argv, "--execute").code == 1
    intents = [r for r in ledger_rows(tmp_path / "ledger") if r["phase"] == "intent"]
    planned = {r["partition"]: r["new_offset"] for r in intents}  # the same for every group
    assert len({(r["partition"], r["new_offset"]) for r in intents}) == 2, intents
    target = {g: {tp: planned[tp[1]] for tp in start[g]} for g in start}
    _one_shift_or_none(_now(cluster, start), start, target)
    # a second or more later, a new now() would find other records (one a second)
    time.sleep(max(0.0, 2 - (time.time() - intents[0]["run_time"].timestamp())))
    dry = _reset(config, *argv)  # what the finishing run would do: the killed run's targets
    assert dry.code == 0, dry.stderr
    assert {(r["partition"], r["new_offset"]) for r in json.loads(dry.stdout)} == set(
        planned.items()
    )
    assert "finishing run reset-" in dry.stderr
    anew = _reset(config, *argv, "--new-run")  # a new now(): newer records
    assert anew.code == 0 and "--new-run: ignoring run reset-" in anew.stderr, anew.stderr
    assert all(r["new_offset"] > planned[r["partition"]] for r in json.loads(anew.stdout))

    done = _reset(config, *argv, "--execute")
    assert done.code == 0, done.stderr
    assert "finishing run reset-" in done.stderr
    assert _now(cluster, start) == target, "the rerun resolved a new time"


def test_a_rerun_after_a_group_was_refused_shifts_it_once_and_the_others_not_again(
    cluster, tmp_path, unique
):
    config, start = _world(cluster, tmp_path, unique)
    Path(config).write_text(Path(config).read_text().replace("batch_groups: 2", "batch_groups: 10"))
    argv = ["--group", f"{unique}-g.*", "--all-topics", "--shift-by", "-10"]
    busy = f"{unique}-g05"
    consumer = join_group(cluster.config, busy, f"{unique}-t")  # a live member: active
    try:
        refused = _reset(config, *argv, "--execute")
        assert refused.code == 1, refused.stderr
        assert f"not done: {busy}: Assignments can only be reset" in refused.stderr
    finally:
        consumer.close()  # leaves: the group is Empty again
    target = _shifted(start, -10)
    assert _now(cluster, start) == {**target, busy: start[busy]}

    # A scheduler's retry of the failed run: its plan finished, not a second shift.
    retry = _reset(config, *argv, "--execute")
    assert retry.code == 0, retry.stderr
    assert _now(cluster, start) == target, "the retry shifted again the groups already written"
    assert "which ended with 1 group not done" in retry.stderr, retry.stderr
    assert "finishing run reset-" in retry.stderr
    statuses = {r["group"]: r["status"] for r in json.loads(retry.stdout)}
    assert statuses[busy] == "COMMITTED"
    assert {s for g, s in statuses.items() if g != busy} == {"ALREADY_COPIED"}

    # That run did everything: the same command again is a deliberate second shift.
    again = _reset(config, *argv, "--execute")
    assert again.code == 0, again.stderr
    assert "finishing run" not in again.stderr
    assert _now(cluster, start) == _shifted(start, -20)

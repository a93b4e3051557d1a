"""`migrate --checkpoint --execute` and its `--rollback`, SIGKILLed at each instant of their write
path (`ferry.write.kill_points`: the job kills itself there, as a scheduler would), then run
again as a scheduler retries: after the kill every offsets file is exactly the original or
exactly the translation (never missing, never translated twice), and the same command again
ends exactly where an uninterrupted run ends, exit 0.

The checkpoint is written as Spark 4.2 writes one (`spark_checkpoint`: batch 4 committed, 5
not, a Kafka source between two others) on a topic whose copy keeps the **same name** on the
destination (MirrorMaker 2's IdentityReplicationPolicy), 7 offsets higher on partition 0: the
case where a second translation of an already translated file cannot be told by its topic
names. The real query's restart on such a checkpoint is tested in test_checkpoint_modes.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.testing.produce import Record, create_topics, produce

from .jobrunner import ROOT, run_job, write_migrate_config
from .test_checkpoint import BASE, offsets_files, records, spark_checkpoint

pytestmark = [pytest.mark.integration, pytest.mark.faults]

# Each write of the run goes through `store.before-rename` (the temporary file is whole, not
# yet renamed over its target): the run's four copies under ferry/RUN_ID/ (#1-#4), `ready`
# (#5), offsets/4 (#6), offsets/5 (#7).
EXECUTE_POINTS = [
    "store.before-rename#3",  # among the copies (a temporary file left): the run never counted
    "checkpoint.intent",  # the intent is in the ledger, no file rewritten
    "store.before-rename#6",  # inside offsets/4's replace
    "checkpoint.file#1",  # between the two files
    "store.before-rename#7",  # inside offsets/5's replace
    "checkpoint.file#2",  # every file rewritten, before the outcome
]
# A rollback writes offsets/4 (#1), offsets/5 (#2), then its `rolled-back` mark (#3).
ROLLBACK_POINTS = [
    "checkpoint.intent",  # nothing put back yet
    "checkpoint.file#1",
    "store.before-rename#2",
    "store.before-rename#3",
]


@pytest.fixture(scope="module")
def same_names(clusters, tmp_path_factory):
    """A topic and its same-named copy (7 offsets higher on partition 0), a config without
    renames, a checkpoint as Spark wrote it, and that checkpoint translated by a run that was
    not interrupted (what every killed run must end as)."""
    src, dst = clusters
    tmp = tmp_path_factory.mktemp("killed")
    u = f"kl{int(time.time() * 1000) % 10**8}"
    topic = f"{u}-events"
    create_topics(src.config, {topic: 2})
    create_topics(dst.config, {topic: 2})
    produce(dst.config, topic, 0, [Record(b"x", b"old", BASE - 9000)] * 7)
    for p in range(2):
        produce(src.config, topic, p, records(topic, p, 0, 30))
        produce(dst.config, topic, p, records(topic, p, 0, 30))
    config = write_migrate_config(tmp, src, dst, u)
    original = spark_checkpoint(tmp / "original", topic)
    clean = tmp / "clean"
    shutil.copytree(original, clean)
    argv = ("--checkpoint", clean, "--idle", "0s", "--execute")
    done = run_job("migrate", "--config", config, *argv)
    assert done.code == 0, done.stderr
    translated = offsets_files(clean)
    assert translated != offsets_files(original)
    return {"config": config, "original": original, "translated": translated, "tmp": tmp}


def killed_at(point: str, config: str, *argv: str) -> subprocess.CompletedProcess:
    """The real job in a process of its own, killed by itself at `point`."""
    command = [sys.executable, str(ROOT / "jobs" / "migrate.py"), "--config", config, *argv]
    env = {**os.environ, "FERRY_KILL_AT": point, "FERRY_MASTER": "local[1]"}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return done


def each_file_is_original_or_translated(path: Path, original: dict, translated: dict) -> None:
    now = offsets_files(path)
    assert set(now) == set(original), "an offsets file is missing"
    for batch, data in now.items():
        assert data in (original[batch], translated[batch]), f"offsets/{batch} is neither"


def stopped_an_hour_ago(path: Path) -> None:
    """Date the query's logs an hour back, as a query stopped long ago leaves them."""
    then = time.time() - 3600
    for log in ("offsets", "commits"):
        for file in (path / log).iterdir():
            os.utime(file, (then, then))


@pytest.mark.parametrize("point", EXECUTE_POINTS)
def test_a_killed_rewrite_run_again_ends_exact(same_names, point):
    """With the default --idle: the killed run's own rewrite dates the files it reached now,
    and the rerun must not take that for a running query."""
    path = same_names["tmp"] / f"x-{point.replace('#', '-')}"
    shutil.copytree(same_names["original"], path)
    stopped_an_hour_ago(path)
    original, translated = offsets_files(path), same_names["translated"]
    argv = ("--checkpoint", str(path), "--execute")
    killed_at(point, same_names["config"], *argv)
    each_file_is_original_or_translated(path, original, translated)

    again = run_job("migrate", "--config", same_names["config"], *argv)
    assert again.code == 0, again.stderr
    assert offsets_files(path) == translated
    third = run_job("migrate", "--config", same_names["config"], *argv)
    assert third.code == 0 and "ALREADY_MIGRATED" in third.stdout, third.stderr
    assert offsets_files(path) == translated


@pytest.mark.parametrize("point", ROLLBACK_POINTS)
def test_a_killed_rollback_run_again_puts_every_original_back(same_names, point):
    path = same_names["tmp"] / f"r-{point.replace('#', '-')}"
    shutil.copytree(same_names["original"], path)
    original, translated = offsets_files(path), same_names["translated"]
    config = same_names["config"]
    done = run_job("migrate", "--config", config, "--checkpoint", path, "--idle", "0s", "--execute")
    assert done.code == 0 and offsets_files(path) == translated, done.stderr
    (run,) = [p.name for p in (path / "ferry").iterdir()]
    argv = ("--checkpoint", str(path), "--rollback", run, "--execute")
    killed_at(point, config, *argv)
    each_file_is_original_or_translated(path, original, translated)

    again = run_job("migrate", "--config", config, *argv)
    assert again.code == 0, again.stderr
    assert offsets_files(path) == original
    # and the checkpoint is the source's again: a new translation plans it afresh
    plan = run_job("migrate", "--config", config, "--checkpoint", path, "--idle", "0s")
    assert plan.code == 0 and "ALREADY_MIGRATED" not in plan.stdout, plan.stderr

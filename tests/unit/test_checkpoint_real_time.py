"""Real-time mode (`Trigger.RealTime`) in a checkpoint: recognised from when Spark wrote its
offsets files (`ferry.checkpoint.modes`), and a translated offsets file its restart deleted
never taken for one still to write (`ferry.checkpoint.runs.when_missing`).

`checkpoint_samples/real_time` is a real checkpoint as PySpark 4.2.0 wrote it through Spark's
Kafka connector: `subscribe=t0` (2 partitions, 30 records each), `trigger(realTime="5
seconds")`, output mode update, a Kafka sink, stopped after 30 s; `times.json` holds its
files' modification times as Spark left them (a copy loses them)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest

from ferry.checkpoint import job, modes, runs
from ferry.checkpoint.arrow_store import ArrowStore
from ferry.checkpoint.modes import real_time_sign, written_at_batch_end
from ferry.errors import UsageError

from .test_checkpoint import ORIGINAL, TRANSLATED, judged, offsets_file

SAMPLES = Path(__file__).resolve().parent / "checkpoint_samples"


def sample_store(tmp_path: Path, mode: str, times: dict[str, int] | None = None) -> ArrowStore:
    """A copy of a sample checkpoint with its files' times set (`times.json`'s, or `times`)."""
    root = tmp_path / mode
    shutil.copytree(SAMPLES / mode, root)
    times = times or json.loads((root / "times.json").read_text())
    for name, ms in times.items():
        os.utime(root / name, ns=(ms * 1_000_000, ms * 1_000_000))
    return ArrowStore(str(root))


def batches(store: ArrowStore) -> list[int]:
    return sorted(int(f.name) for f in store.list("offsets") if f.name.isdigit())


# ---------------------------------------------------------------------------- recognition


def test_a_real_time_query_writes_each_offsets_file_at_its_batch_end(tmp_path):
    store = sample_store(tmp_path, "real_time")
    sign = real_time_sign(store, batches(store))
    assert sign is not None and sign.batch == 3  # the newest with a batch after it
    assert "offsets/3 was written 5s after its batch started" in sign.describe()


def test_the_same_files_copied_without_their_times_are_not_taken_for_real_time(tmp_path):
    # Written now, long after every batch started (and after the next batch started).
    late = {f"offsets/{b}": 1_900_000_000_000 for b in range(5)}
    store = sample_store(tmp_path, "real_time", late)
    assert real_time_sign(store, batches(store)) is None


def test_files_ferry_rewrote_are_not_looked_at(tmp_path):
    store = sample_store(tmp_path, "real_time")
    run = tmp_path / "real_time" / "ferry" / "migrate-checkpoint-x" / "translated" / "offsets"
    run.mkdir(parents=True)
    for b in range(4):
        (run / str(b)).write_bytes(b"")
    assert real_time_sign(store, batches(store)) is None  # offsets/4 has no batch after it


@pytest.mark.parametrize(
    ("late_s", "span_s", "is_end"),
    [
        (5.05, 5.13, True),  # measured: real-time, 5 s batches
        (6.66, 6.91, True),  # its first batch (the query's start-up inside it)
        (300.2, 300.3, True),  # the default real-time trigger, 5 minutes
        (297.0, 300.3, True),  # the store's clock 3 s behind the driver's
        (0.457, 1.59, False),  # measured: a micro-batch query, 1 s trigger (the slowest write)
        (0.039, 8.04, False),  # its first batch
        (1.5, 2.0, False),  # a store 1.5 s ahead: still well under 2 s
        (3600.0, 5.0, False),  # copied an hour later
    ],
)
def test_written_at_batch_end(late_s, span_s, is_end):
    start = 1_796_666_069_971
    assert written_at_batch_end(start, start + int(late_s * 1000), start + int(span_s * 1000)) is (
        is_end
    )


def test_a_micro_batch_sample_is_not_taken_for_real_time(tmp_path):
    # offsets/N written as its batch started (the metadata's batchTimestampMs), commits later
    root = SAMPLES / "subscribe" / "offsets"
    times = {
        f"offsets/{b}": modes.batch_timestamp_ms((root / str(b)).read_bytes()) + 15
        for b in (0, 1, 2)
    }
    store = sample_store(tmp_path, "subscribe", times)
    assert real_time_sign(store, [0, 1, 2]) is None


# ------------------------------------------------------------------ a purged offsets file


def test_the_tail_deleted_by_a_restart_on_the_translation_is_never_written_back():
    # offsets/5 (uncommitted) translated, then deleted by the real-time query's restart:
    # the newest batch is 4, holding its translation
    run = judged({4: TRANSLATED[4], 5: None}, newest=4)
    assert run.state == runs.RunState.RAN_ON_TRANSLATION and run.remaining == []
    assert "offsets/5 was deleted by the query's restart" in run.why


def test_a_file_missing_inside_the_log_is_changed_not_partial():
    run = judged({4: None, 5: TRANSLATED[5]}, newest=5)
    assert run.state == runs.RunState.CHANGED and "offsets/4 is missing" in run.why


def test_the_tail_deleted_beside_an_original_is_changed():
    # a restart on a half-written translation (offsets/4 still the source's)
    run = judged({4: ORIGINAL[4], 5: None}, newest=4)
    assert run.state == runs.RunState.CHANGED and "offsets/4 did not hold" in run.why
    assert judged({}, newest=None).state == runs.RunState.CHANGED  # every file gone


def test_the_batch_a_restart_on_the_translation_wrote_anew_ran_on_it():
    # offsets/5 deleted by the restart, then written at its batch's end from offsets/4's
    # translation (30, 31) on
    anew = offsets_file('{"t":{"0":33,"1":39}}')
    run = judged({4: TRANSLATED[4], 5: anew}, newest=5)
    assert run.state == runs.RunState.RAN_ON_TRANSLATION and "written anew" in run.why
    # behind the translation before it: not the query's (a hand edit): changed
    behind = judged({4: TRANSLATED[4], 5: offsets_file('{"t":{"0":29,"1":39}}')}, newest=5)
    assert behind.state == runs.RunState.CHANGED
    # beside offsets/4 still the original: changed
    assert judged({4: ORIGINAL[4], 5: anew}, newest=5).state == runs.RunState.CHANGED


# ----------------------------------------------------------------------- the option


def test_query_stopped_goes_with_checkpoint():
    parser = argparse.ArgumentParser()
    job.add_arguments(parser)
    for name in ("execute", "rollback", "output"):
        parser.add_argument(f"--{name}")
    args = parser.parse_args(["--positions", "p.csv", "--query-stopped"])
    assert job.is_requested(args) and args.query_stopped
    with pytest.raises(UsageError, match="--query-stopped goes with --checkpoint"):
        job.main(args, None, print, 60.0)  # type: ignore[arg-type]

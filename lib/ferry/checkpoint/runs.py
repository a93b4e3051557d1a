"""What earlier Ferry runs left in a checkpoint, told from the files alone (pure but for the
store reads), whatever the topic names: a run's folder `PATH/ferry/RUN_ID/` holds the
originals and the translations it meant to write, and `ready` once its intent was in the
ledger (no offsets file is rewritten before it).

The newest run that got as far as `ready` and was not rolled back decides (`last_run`):

- `COMPLETE`: every file it meant to rewrite holds its translation, no newer batch;
- `PARTIAL`: killed between its files (or before the first, or after the last but before
  `written`): each file is the original or the translation: the next run writes the
  remaining translations (`finish`);
- `RAN_ON_TRANSLATION`: newer batches go on from the translation: the query runs on the
  destination (for a renamed topic, under the destination's names; for every partition, at or
  after the translated offset); or the batches after the newest commit are gone, deleted by
  a real-time query's restart on the translation (`when_missing`: never written back), or
  written anew by it (`written_anew`);
- `RAN_ON_SOURCE`: a newer batch does not go on from the translation: the query was still
  running on the source when Ferry translated, and wrote on from its own positions;
- `CHANGED`: a file is neither the original nor the translation (edited by hand, or a query
  rewrote it).

A file equal to a run's translation is never taken for source offsets again: that is what
keeps a checkpoint from being translated twice when the names stay the same.

A run's `ready` holds its record (`RunRecord`): the source and destination cluster ids, the
topic rename, and the logs' batch ids as the run listed them. `written` follows once its
files were rewritten and the logs were found unchanged after; a run that found its query
running writes `aborting`, puts the originals back, then `aborted` (such a run never counted).
For a run with a record but no `written` (killed before it confirmed its write):

- `ABORTING`: `aborting` is there, or the logs moved since its listing and no newer batch goes
  on from its translation: the query ran during its write; the next `--execute` puts the
  originals back and marks it `aborted`;
- `UNCONFIRMED`: the logs moved since its listing and a newer batch goes on from its
  translation: a query ran on the half-confirmed files; refused.

Which move a run made decides what an earlier run means to a config (`judge_move`): the same
move (clusters and rename), the checkpoint moved onward from where the run left it, or a
config whose source is not where the checkpoint is. A run without a record (an older Ferry's)
is judged by its files alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from ferry.checkpoint import offsets_log
from ferry.checkpoint.offsets_log import CheckpointFormatError, OffsetsFile

FERRY_DIR = "ferry"  # under the checkpoint: one folder per run that rewrote it
ROLLED_BACK = "rolled-back"  # in a run's folder once its originals were put back
READY = "ready"  # in a run's folder once its intent is in the ledger: rewrites may follow
WRITTEN = "written"  # once every file holds its translation and the query did not move
ABORTING = "aborting"  # the query was found running: the originals are going back
ABORTED = "aborted"  # the originals are back (and the ledger says so): the run never counted


class RunState(str, Enum):
    COMPLETE = "COMPLETE"
    PARTIAL = "PARTIAL"
    RAN_ON_TRANSLATION = "RAN_ON_TRANSLATION"
    RAN_ON_SOURCE = "RAN_ON_SOURCE"
    CHANGED = "CHANGED"
    ABORTING = "ABORTING"
    UNCONFIRMED = "UNCONFIRMED"


class MoveVerdict(str, Enum):
    """What an earlier run's move means to the config's (`judge_move`)."""

    SAME = "SAME"  # the same clusters and rename: the run's state decides
    ONWARD = "ONWARD"  # the config's source is where the run moved the checkpoint to
    ELSEWHERE = "ELSEWHERE"  # the config's source is not where the checkpoint is
    UNRECORDED = "UNRECORDED"  # an older run, no record: judged by its files alone


@dataclass(frozen=True)
class Move:
    """Between which clusters (ids, `DescribeCluster`) and under which rename a run
    translated."""

    source: str
    destination: str
    rename: tuple[tuple[str, str], ...]  # (source topic, destination topic), sorted

    @classmethod
    def of(cls, source: str, destination: str, rename: Mapping[str, str]) -> Move:
        return cls(source, destination, tuple(sorted(rename.items())))

    def __str__(self) -> str:
        return f"cluster {self.source} to cluster {self.destination}"


@dataclass(frozen=True)
class RunRecord:
    """What a run's `ready` holds: its move, and the logs' batch ids it listed before writing."""

    move: Move
    offsets: tuple[int, ...]
    commits: tuple[int, ...]

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "source_cluster": self.move.source,
                "destination_cluster": self.move.destination,
                "rename": dict(self.move.rename),
                "offsets": list(self.offsets),
                "commits": list(self.commits),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def parse(cls, data: bytes) -> RunRecord | None:
        """The record in a `ready`, or None for an older Ferry's (it held the run id alone)."""
        try:
            doc = json.loads(data.decode("utf-8"))
            move = Move.of(doc["source_cluster"], doc["destination_cluster"], doc["rename"])
            return cls(move, tuple(doc["offsets"]), tuple(doc["commits"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass
class RunFiles:
    """One earlier run's folder: what it found and what it meant to write, per batch."""

    run_id: str
    originals: dict[int, bytes]
    translations: dict[int, bytes]
    state: RunState | None = None
    why: str = ""  # for RAN_ON_SOURCE and CHANGED: the file or partition that says so
    remaining: list[int] = field(default_factory=list)  # PARTIAL: batches still original
    record: RunRecord | None = None  # None: an older Ferry's run
    marks: frozenset[str] = frozenset()  # the marks in its folder (`written`, `aborting`)

    @property
    def folder(self) -> str:
        return f"{FERRY_DIR}/{self.run_id}"


def offsets_name(batch: int | str) -> str:
    """A file a run rewrites, by its key: `offsets/N` for batch N; another file (a source's
    start offsets, `sources/KEY/0`) is keyed by its path."""
    return batch if isinstance(batch, str) else f"offsets/{batch}"


def file_order(key: int | str) -> tuple:
    """Sorts a run's files: the offsets files by batch, then the others by path."""
    return (1, 0, key) if isinstance(key, str) else (0, key, "")


def start_files(store, folder: str) -> dict[int | str, bytes]:  # noqa: ANN001
    """The start offsets files under a run's folder (`FOLDER/sources/KEY/0`), by path."""
    out: dict[int | str, bytes] = {}
    for key in store.list_dirs(f"{folder}/sources"):
        if any(f.name == "0" for f in store.list(f"{folder}/sources/{key}")):
            out[f"sources/{key}/0"] = store.read(f"{folder}/sources/{key}/0")
    return out


def run_ids(store) -> list[str]:  # noqa: ANN001 - a checkpoint store
    """The ids of the runs with a folder under ferry/, oldest first (ids start with a UTC
    time)."""
    return sorted(store.list_dirs(FERRY_DIR))


def batch_files(store, folder: str) -> dict[int, bytes]:  # noqa: ANN001
    """The offsets files in a folder, by batch id."""
    batches = offsets_log.batch_ids(f.name for f in store.list(folder))
    return {b: store.read(f"{folder}/{b}") for b in batches}


def read_run(store, run_id: str) -> RunFiles | None:  # noqa: ANN001
    """A run's files, or None when it never got to rewrite anything (no `ready`), was rolled
    back, or aborted."""
    folder = f"{FERRY_DIR}/{run_id}"
    names = {f.name for f in store.list(folder)}
    if READY not in names or ROLLED_BACK in names or ABORTED in names:
        return None
    return RunFiles(
        run_id,
        batch_files(store, f"{folder}/original/offsets") | start_files(store, f"{folder}/original"),
        batch_files(store, f"{folder}/translated/offsets")
        | start_files(store, f"{folder}/translated"),
        record=RunRecord.parse(store.read(f"{folder}/{READY}")),
        marks=frozenset(names & {WRITTEN, ABORTING}),
    )


Listing = tuple[tuple[int, ...], tuple[int, ...]]  # the offsets and commits logs' batch ids


def last_run(
    store,  # noqa: ANN001
    newest: int | None,
    current: Callable[[int], bytes | None],
    listing: Listing | None = None,
) -> RunFiles | None:
    """The newest run that rewrote (or was about to rewrite) this checkpoint, with its state;
    None when no run did. `newest`: the newest batch in offsets/ now; `current(batch)`: that
    offsets file's bytes now (None when it is not there); `listing`: both logs' ids now."""
    for run_id in reversed(run_ids(store)):
        run = read_run(store, run_id)
        if run is None or not run.translations:
            continue
        judge(run, newest, current, listing)
        return run
    return None


def judge(
    run: RunFiles,
    newest: int | None,
    current: Callable[[int], bytes | None],
    listing: Listing | None = None,
) -> None:
    """Set `run.state` (module docstring) from the checkpoint's files now."""
    if judge_unconfirmed(run, newest, current, listing):
        return
    wrote = max(b for b in run.translations if isinstance(b, int))
    if newest is not None and newest > wrote:
        data = current(newest)
        reason = goes_on_from(
            parse(f"translated {offsets_name(wrote)}", wrote, run.translations[wrote]),
            parse(f"original {offsets_name(wrote)}", wrote, run.originals[wrote]),
            parse(offsets_name(newest), newest, data) if data is not None else None,
        )
        run.state = RunState.RAN_ON_TRANSLATION if reason is None else RunState.RAN_ON_SOURCE
        run.why = reason or ""
        return
    remaining = []
    for batch in sorted(run.translations, key=file_order):
        now = current(batch)
        if now == run.translations[batch]:
            continue
        if now is None:
            # Never written back: the file a killed replace left missing reads as its
            # temporary file's content (`current`); a file plainly gone was purged (or deleted)
            run.state, run.why = when_missing(run, batch, newest, current)
            return
        if now == run.originals[batch]:
            remaining.append(batch)
            continue
        if written_anew(run, batch, now, current):
            run.state = RunState.RAN_ON_TRANSLATION
            run.why = (
                f"{offsets_name(batch)} written anew by the query's restart on the translation"
            )
            return
        run.state = RunState.CHANGED
        run.why = f"{offsets_name(batch)} is neither the original nor the translation"
        return
    run.remaining = remaining
    # Every file translated, but (a run with a record) killed before `written`: the next run
    # confirms it (`PARTIAL` with nothing left to write).
    unconfirmed = run.record is not None and WRITTEN not in run.marks
    run.state = RunState.PARTIAL if remaining or unconfirmed else RunState.COMPLETE


def judge_unconfirmed(
    run: RunFiles,
    newest: int | None,
    current: Callable[[int], bytes | None],
    listing: Listing | None,
) -> bool:
    """For a run with a record that never confirmed its write (no `written`): set ABORTING or
    UNCONFIRMED when that is what it is (module docstring), and say whether it did."""
    if run.record is None or WRITTEN in run.marks:
        return False
    if ABORTING in run.marks:
        run.state, run.why = RunState.ABORTING, "it was aborting"
        return True
    if listing is None:
        return False
    moved = moved_since(run.record, listing)
    if moved is None:
        return False  # nothing happened since its listing: judged by its files
    wrote = max(b for b in run.translations if isinstance(b, int))
    data = current(newest) if newest is not None and newest > wrote else None
    if data is not None:
        reason = goes_on_from(
            parse(f"translated {offsets_name(wrote)}", wrote, run.translations[wrote]),
            parse(f"original {offsets_name(wrote)}", wrote, run.originals[wrote]),
            parse(offsets_name(newest), newest, data),  # type: ignore[arg-type]
        )
        if reason is None:
            run.state = RunState.UNCONFIRMED
            run.why = f"{moved}, and offsets/{newest} goes on from its translation"
            return True
    run.state, run.why = RunState.ABORTING, moved
    return True


def moved_since(record: RunRecord, listing: Listing) -> str | None:
    """What the query wrote since the run listed the logs, or None."""
    offsets, commits = listing
    new = sorted(set(offsets) - set(record.offsets))
    if new:
        return f"batch {new[0]} appeared since its listing"
    new = sorted(set(commits) - set(record.commits))
    if new:
        return f"batch {new[0]} was committed since its listing"
    return None


def judge_move(recorded: Move | None, config: Move) -> MoveVerdict:
    """What an earlier run's move (`recorded`; None: an older run without a record) means to
    the config's move now (`config`: its rename restricted to the recorded topics)."""
    if recorded is None:
        return MoveVerdict.UNRECORDED
    if recorded == config:
        return MoveVerdict.SAME
    if config.source == recorded.destination:
        return MoveVerdict.ONWARD
    return MoveVerdict.ELSEWHERE


def when_missing(run: RunFiles, batch: int, newest: int | None, current) -> tuple[RunState, str]:  # noqa: ANN001
    """The state of a run one of whose translated offsets files is gone (newest: the newest
    batch in offsets/ now), and why.

    Spark deletes an offsets file a restart would read in one case only: a real-time query
    (`Trigger.RealTime`) restarting deletes every batch after its newest commit
    (`MicroBatchExecution.initializeExecution`: `offsetLog.purgeAfter(lastCommittedBatchId)`)
    and runs from that commit's offsets, writing the next batch's file only at the batch's
    end. So the tail of the log gone, every translated batch still there holding its
    translation, is a query restarted on the translation: `RAN_ON_TRANSLATION` (and a file
    written back now would make it fail at its batch's end, the batch's file being there
    already). Gone in the middle of the log, or beside a file still the original (a restart
    on a half-written translation), it is `CHANGED`: nothing is written. (A continuous
    query deletes nothing on restart: Spark 4.2's `ContinuousExecution` keeps every file.)"""
    gone = offsets_name(batch)
    if newest is None or batch <= newest:
        return RunState.CHANGED, (
            f"{gone} is missing, though a newer batch is in the log (Spark's restarts "
            "delete only batches after the newest commit): deleted by hand?"
        )
    for kept in sorted(b for b in run.translations if isinstance(b, int) and b <= newest):
        if current(kept) != run.translations[kept]:
            return RunState.CHANGED, (
                f"{gone} was deleted (a real-time query's restart?) while "
                f"{offsets_name(kept)} did not hold its translation"
            )
    return RunState.RAN_ON_TRANSLATION, (
        f"{gone} was deleted by the query's restart on the translation (real-time mode "
        "deletes the batches after the newest commit)"
    )


def written_anew(run: RunFiles, batch: int, now: bytes, current) -> bool:  # noqa: ANN001
    """Whether offsets/BATCH, neither the original nor the translation, is the query's own:
    its real-time restart deleted the translated file (`when_missing`) and wrote the batch
    anew at its end, going on from the translated batch before it, where the restart
    started. Spark writes an offsets file only where none is: a micro-batch or continuous
    query never replaces one."""
    before = batch - 1
    if before not in run.translations or current(before) != run.translations[before]:
        return False
    try:
        newer = parse(offsets_name(batch), batch, now)
    except CheckpointFormatError:
        return False
    translated = parse(f"translated {offsets_name(before)}", before, run.translations[before])
    original = parse(f"original {offsets_name(before)}", before, run.originals[before])
    return goes_on_from(translated, original, newer) is None


def parse(name: str, batch: int, data: bytes) -> OffsetsFile:
    return offsets_log.parse_offsets_file(name, batch, data)


def goes_on_from(
    translated: OffsetsFile, original: OffsetsFile, newer: OffsetsFile | None
) -> str | None:
    """None when `newer` (a batch written after the translation) goes on from `translated`:
    every line the translation changed names the same topics in `newer`, each partition at
    or after its translated offset. Otherwise why not, naming the line and partition."""
    if newer is None:
        return "the newest offsets file cannot be read"
    before = {s.key: s for s in original.sources}
    after = {s.key: s for s in newer.sources}
    for line in translated.kafka_sources:
        if before.get(line.key) is not None and before[line.key].text == line.text:
            continue  # not changed by the translation: nothing to tell by
        now = after.get(line.key)
        if now is None or now.kafka is None:
            return f"source {line.key} is not a Kafka line in offsets/{newer.batch_id}"
        if set(now.kafka) != set(line.kafka or {}):
            topics = ", ".join(sorted(now.kafka))
            return f"source {line.key} of offsets/{newer.batch_id} reads {topics}"
        for topic, parts in (line.kafka or {}).items():
            for partition, offset in sorted(parts.items()):
                later = now.kafka[topic].get(partition)
                if later is None or later < offset:
                    return (
                        f"{topic}[{partition}] is at {later} in offsets/{newer.batch_id}, "
                        f"before the translated {offset}"
                    )
    return None

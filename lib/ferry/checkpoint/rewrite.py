"""The guarded write of a checkpoint's offsets files: a translation's rewrite (`rewrite`), the
rest of one a killed run left (`finish`), and the check that the query has not moved
(`check_unchanged`), each file replaced whole (`ferry.checkpoint.store`).

The order, so that a SIGKILL at any instant leaves every file the original or the translation
and the same command again ends the job exactly:

1. the originals and the translations are copied to `PATH/ferry/RUN_ID/{original,translated}/`
   (killed here: no `ready`, the run never counted, the next run starts afresh);
2. the ledger's intent is appended, then `ready` is written in the run's folder;
3. both logs are listed again: a new batch or commit, or a changed file, means the query
   runs, and nothing is written;
4. each file is replaced (killed between two: the next run finds the run `PARTIAL` and
   writes the rest, `finish`); a failure puts back those already replaced;
5. both logs are listed once more: a batch or commit that appeared while the files were
   replaced means the query was running after all, and the run aborts (`abort`): `aborting`
   in its folder, the originals back, the ledger's outcome rows `ABORTED`, then `aborted`
   (killed in between, the next `--execute` finds the run `ABORTING` and ends the abort);
6. `written` in the run's folder, then the outcome is appended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry.checkpoint import interrupted, offsets_log
from ferry.checkpoint.runs import (
    ABORTED,
    ABORTING,
    READY,
    WRITTEN,
    RunFiles,
    RunRecord,
    file_order,
    offsets_name,
)
from ferry.errors import FerryError
from ferry.status import GroupStatus
from ferry.write.kill_points import hold_point, kill_point
from ferry.write.ledger import PHASE_INTENT, PHASE_OUTCOME, Ledger


@dataclass(frozen=True)
class LogsSeen:
    """The two logs' batch ids and newest files' times, as listed once."""

    offsets: tuple[int, ...]
    commits: tuple[int, ...]
    offsets_ms: int  # the newest offsets file's modification time (0: none)
    commits_ms: int  # the newest commits file's (0: none)

    @classmethod
    def list(cls, store) -> LogsSeen:  # noqa: ANN001 - a checkpoint store
        """Both logs listed, once an offsets file a killed replace left missing beside its
        temporary is completed (`ferry.checkpoint.interrupted`): never a batch "appearing"."""
        listed = {d: {f.name: f for f in store.list(d)} for d in ("offsets", "commits")}
        if interrupted.complete_listed(store, listed["offsets"]):
            listed["offsets"] = {f.name: f for f in store.list("offsets")}
        ids = {d: tuple(offsets_log.batch_ids(files)) for d, files in listed.items()}
        newest = {d: listed[d][str(ids[d][-1])].modified_ms if ids[d] else 0 for d in listed}
        return cls(ids["offsets"], ids["commits"], newest["offsets"], newest["commits"])

    @property
    def age_s(self) -> float:
        """Since the newest offsets or commits file was written."""
        return _seconds_since(max(self.offsets_ms, self.commits_ms))

    @property
    def commit_age_s(self) -> float:
        """Since the newest commits file was written: what tells a query's activity once a
        killed run of Ferry rewrote the newest offsets files itself."""
        return _seconds_since(self.commits_ms)

    def moved_since(self, before: LogsSeen) -> str | None:
        """What the query wrote since `before` was listed, or None."""
        if self.offsets != before.offsets:
            new = sorted(set(self.offsets) - set(before.offsets))
            return f"batch {new[0]} appeared" if new else "the offset log changed"
        if self.commits != before.commits:
            new = sorted(set(self.commits) - set(before.commits))
            return f"batch {new[0]} was committed" if new else "the commit log changed"
        return None


def _seconds_since(modified_ms: int) -> float:
    return time.time() - modified_ms / 1000 if modified_ms else float("inf")


def read_if_there(store, batch: int) -> bytes | None:  # noqa: ANN001 - a checkpoint store
    """offsets/BATCH's bytes, or None when it is not there. Missing beside the whole temporary
    of a replace killed between its delete and its rename, it is completed first
    (`ferry.checkpoint.interrupted`)."""
    name = offsets_name(batch)
    if store.exists(name) or interrupted.complete_one(store, batch):
        return store.read(name)
    return None


def check_unchanged(store, seen: LogsSeen, data: Mapping[int, bytes | None], when: str) -> None:  # noqa: ANN001
    """Refuse (exit 1) when the query wrote a batch or a commit since `seen`, or changed one of
    the files read (`data`; None: not there): it is running."""
    moved = LogsSeen.list(store).moved_since(seen)
    if moved is None:
        changed = [b for b in sorted(data, key=file_order) if read_if_there(store, b) != data[b]]
        moved = f"{offsets_name(changed[0])} changed" if changed else None
    if moved is not None:
        raise FerryError(
            f"{store.root}: {moved} {when}: its query is running; stop it and run again "
            "(nothing written)"
        )


def file_rows(store, batches, status: str, message: str, is_committed: bool = False) -> list[dict]:  # noqa: ANN001
    """Ledger rows naming offsets files (no plan at hand: a finishing run, a rollback)."""
    return [
        {
            "cluster": store.root,
            "group": store.name(offsets_name(b)),
            "status": status,
            "is_committed": is_committed,
            "message": message,
        }
        for b in batches
    ]


@dataclass(frozen=True)
class Abort:
    """How a run whose query is found running is undone: its folder, the original of every
    file it translates, and the ledger's outcome rows to append once they are back."""

    folder: str
    originals: Mapping[int, bytes]
    record_outcome: Callable[[], None]


def abort(store, how: Abort) -> None:  # noqa: ANN001 - a checkpoint store
    """The run undone, in an order a SIGKILL cannot make untruthful: `aborting` first (from
    then on the run is never read as a translation), every file not its original put back,
    the ledger told, then `aborted`. The next `--execute` that finds `aborting` without
    `aborted` calls this again: each step is the same a second time."""
    store.write(f"{how.folder}/{ABORTING}", b"")
    kill_point("checkpoint.aborting")
    for batch, original in how.originals.items():
        if read_if_there(store, batch) != original:
            store.write(offsets_name(batch), original)
    kill_point("checkpoint.put-back")
    how.record_outcome()
    store.write(f"{how.folder}/{ABORTED}", b"")


def aborted_rows(store, batches, run_id: str, why: str) -> list[dict]:  # noqa: ANN001
    """The outcome rows of an aborted run: its files, each back to its original."""
    message = f"run {run_id} aborted: {why}; the originals are back, nothing translated"
    return file_rows(store, batches, GroupStatus.ABORTED, message)


def rewrite(
    store,  # noqa: ANN001 - a checkpoint store
    seen: LogsSeen,
    originals: Mapping[int, bytes],
    files: Mapping[int, bytes],
    ledger: Ledger,
    intent_rows: Callable[[], list[dict]],
    outcome_rows: Callable[[], list[dict]],
    progress: Callable[[str], None],
    record: RunRecord | None = None,
) -> None:
    """Steps 1-6 of the module docstring for a new translation (`files`: batch → bytes);
    `record` (the run's clusters, rename and listing) goes into its `ready`."""
    folder = f"ferry/{ledger.run_id}"
    for batch in files:
        store.write_verified(f"{folder}/original/{offsets_name(batch)}", originals[batch])
        store.write_verified(f"{folder}/translated/{offsets_name(batch)}", files[batch])
    progress(f"originals copied to {store.name(f'{folder}/original')}")
    kill_point("checkpoint.copied")
    ledger.append(intent_rows(), PHASE_INTENT)
    store.write(
        f"{folder}/{READY}", ledger.run_id.encode() if record is None else record.to_bytes()
    )
    kill_point("checkpoint.intent")

    def record_outcome(why: str) -> Callable[[], None]:
        rows = aborted_rows(store, files, ledger.run_id, why)
        return lambda: ledger.append(rows, PHASE_OUTCOME)

    originals_written = {b: originals[b] for b in files}
    replace(store, seen, originals, files, folder, record_outcome, originals_written)
    progress(f"rewrote {', '.join(store.name(offsets_name(b)) for b in files)}")
    store.write(f"{folder}/{WRITTEN}", b"")
    ledger.append(outcome_rows(), PHASE_OUTCOME)


def finish(
    store,  # noqa: ANN001
    seen: LogsSeen,
    run: RunFiles,
    ledger: Ledger,
    progress: Callable[[str], None],
) -> None:
    """The translations a killed run had not written yet (`run.remaining`), written now under
    this run's own intent and outcome; then its `written` (a run with a record)."""
    progress(f"finishing run {run.run_id}, killed before its outcome")
    message = f"finishing run {run.run_id}"
    ledger.append(file_rows(store, run.remaining, "INTENT", message), PHASE_INTENT)
    kill_point("checkpoint.intent")
    current = {b: read_if_there(store, b) for b in run.remaining}

    def record_outcome(why: str) -> Callable[[], None]:
        rows = aborted_rows(store, run.originals, run.run_id, why)
        return lambda: ledger.append(rows, PHASE_OUTCOME)

    files = {b: run.translations[b] for b in run.remaining}
    replace(store, seen, current, files, run.folder, record_outcome, run.originals)
    if run.remaining:
        progress(f"rewrote {', '.join(store.name(offsets_name(b)) for b in run.remaining)}")
    if run.record is not None:
        store.write(f"{run.folder}/{WRITTEN}", b"")
    rows = file_rows(store, run.remaining, "COMMITTED", message, is_committed=True)
    ledger.append(rows, PHASE_OUTCOME)


def replace(
    store,  # noqa: ANN001
    seen: LogsSeen,
    current: Mapping[int, bytes | None],
    files: Mapping[int, bytes],
    folder: str | None = None,
    record_outcome: Callable[[str], Callable[[], None]] | None = None,
    run_originals: Mapping[int, bytes] | None = None,
) -> None:
    """Steps 3-5: every file of `files` replaced, or (a failure, or the query moved while they
    were) each put back to `current` (None: it was not there). With `folder` (a translation's
    run): the query found running aborts the run (`abort`: every file of `run_originals`,
    default `current`, back to its original; `record_outcome(why)` gives the ledger's
    step)."""
    written: list[int] = []
    try:
        # Found running before the first file, a run is aborted too (nothing to put back):
        # left `ready` alone, its query's next batch could read later as run on its translation.
        check_unchanged(store, seen, current, "during this run")
        for batch, data in files.items():
            written.append(batch)
            store.write_verified(offsets_name(batch), data)
            kill_point("checkpoint.file")
            hold_point("checkpoint.file")
        moved = LogsSeen.list(store).moved_since(seen)
        if moved is not None:
            raise FerryError(
                f"{store.root}: {moved} while the offsets files were rewritten: its query is "
                "running; the originals are back, the run marked aborted; stop it and run again"
            )
    except Exception as exc:
        if folder is not None and record_outcome is not None:
            originals = run_originals if run_originals is not None else current
            why = str(exc).removeprefix(f"{store.root}: ").split(":", 1)[0]
            abort(store, Abort(folder, dict(originals), record_outcome(why)))  # type: ignore[arg-type]
            raise
        for batch in written:
            before = current[batch]
            if before is None:
                store.delete(offsets_name(batch))
            else:
                store.write(offsets_name(batch), before)
        raise

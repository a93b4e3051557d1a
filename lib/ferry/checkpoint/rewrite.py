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
   replaced means the query was running after all, and the originals go back;
6. the outcome is appended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry.checkpoint import interrupted, offsets_log
from ferry.checkpoint.runs import READY, RunFiles, file_order, offsets_name
from ferry.errors import FerryError
from ferry.write.kill_points import kill_point
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


def rewrite(
    store,  # noqa: ANN001 - a checkpoint store
    seen: LogsSeen,
    originals: Mapping[int, bytes],
    files: Mapping[int, bytes],
    ledger: Ledger,
    intent_rows: Callable[[], list[dict]],
    outcome_rows: Callable[[], list[dict]],
    progress: Callable[[str], None],
) -> None:
    """Steps 1-6 of the module docstring for a new translation (`files`: batch → bytes)."""
    folder = f"ferry/{ledger.run_id}"
    for batch in files:
        store.write_verified(f"{folder}/original/{offsets_name(batch)}", originals[batch])
        store.write_verified(f"{folder}/translated/{offsets_name(batch)}", files[batch])
    progress(f"originals copied to {store.name(f'{folder}/original')}")
    kill_point("checkpoint.copied")
    ledger.append(intent_rows(), PHASE_INTENT)
    store.write(f"{folder}/{READY}", ledger.run_id.encode())
    kill_point("checkpoint.intent")
    replace(store, seen, originals, files)
    progress(f"rewrote {', '.join(store.name(offsets_name(b)) for b in files)}")
    ledger.append(outcome_rows(), PHASE_OUTCOME)


def finish(
    store,  # noqa: ANN001
    seen: LogsSeen,
    run: RunFiles,
    ledger: Ledger,
    progress: Callable[[str], None],
) -> None:
    """The translations a killed run had not written yet (`run.remaining`), written now under
    this run's own intent and outcome."""
    progress(f"finishing run {run.run_id}, killed before its outcome")
    message = f"finishing run {run.run_id}"
    ledger.append(file_rows(store, run.remaining, "INTENT", message), PHASE_INTENT)
    kill_point("checkpoint.intent")
    current = {b: read_if_there(store, b) for b in run.remaining}
    replace(store, seen, current, {b: run.translations[b] for b in run.remaining})
    progress(f"rewrote {', '.join(store.name(offsets_name(b)) for b in run.remaining)}")
    rows = file_rows(store, run.remaining, "COMMITTED", message, is_committed=True)
    ledger.append(rows, PHASE_OUTCOME)


def replace(
    store,  # noqa: ANN001
    seen: LogsSeen,
    current: Mapping[int, bytes | None],
    files: Mapping[int, bytes],
) -> None:
    """Steps 3-5: every file of `files` replaced, or (a failure, or the query moved while they
    were) each put back to `current` (None: it was not there)."""
    check_unchanged(store, seen, current, "during this run")
    written: list[int] = []
    try:
        for batch, data in files.items():
            written.append(batch)
            store.write_verified(offsets_name(batch), data)
            kill_point("checkpoint.file")
        moved = LogsSeen.list(store).moved_since(seen)
        if moved is not None:
            raise FerryError(
                f"{store.root}: {moved} while the offsets files were rewritten: its query is "
                "running; the originals are back; stop it and run again"
            )
    except Exception:
        for batch in written:
            before = current[batch]
            if before is None:
                store.delete(offsets_name(batch))
            else:
                store.write(offsets_name(batch), before)
        raise

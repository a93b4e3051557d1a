"""A replace killed between its delete and its rename, told from the files and completed.

Where a store has no atomic replace (`abfs`, `wasb`; pyarrow on HDFS; Hadoop's default on a
filesystem Ferry does not know; and the local filesystem under Ferry before it renamed local
files itself), `offsets/N` is replaced so: its new bytes whole in `offsets/.N.ferry-tmp`, then
`offsets/N` deleted, then the temporary renamed to it (`ferry.checkpoint.store`). Killed
between the delete and the rename, `offsets/N` is missing and its whole temporary is beside it.
Left so, Spark would restart the query from batch N-1 and Ferry's next run would take the file
reappearing for a query writing its log.

The next run therefore looks, before it lists the logs (`LogsSeen.list`, `read_if_there`),
for an offsets file missing beside its temporary, and renames the temporary to it: the replace
completed, as if never killed. The temporary counts only when its bytes are a copy Ferry kept
in a run's folder (`ferry/RUN_ID/original/offsets/N` or `.../translated/offsets/N`): every
offsets file Ferry writes is one of those, copied there before any file is replaced. Anything
else (a temporary cut short whose target Spark later purged, a file of unknown origin) is left
as it is and said once, on stderr.

This happens in a dry run too: it writes nothing Ferry had not already committed to, and a
checkpoint with a file missing is one Spark cannot restart correctly.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from ferry.checkpoint.runs import FERRY_DIR, offsets_name, run_ids
from ferry.checkpoint.store import StoreError, temporary_name

OFFSETS = "offsets"
_TEMPORARY_SUFFIX = temporary_name("")[1:]  # ".ferry-tmp": `.N.ferry-tmp` is offsets/N's


def missing_beside_temporary(names: Iterable[str]) -> list[int]:
    """The batches whose offsets file is not among `names` (one directory's listing) while its
    temporary is, ascending (pure)."""
    present = set(names)
    batches = []
    for name in present:
        # names are matched by regex only in their homes (test_structure): told by hand
        batch = name[1:].removesuffix(_TEMPORARY_SUFFIX) if name.startswith(".") else ""
        if batch != name[1:] and batch.isascii() and batch.isdigit() and batch not in present:
            batches.append(int(batch))
    return sorted(batches)


def copies_kept(store, batch: int) -> list[bytes]:  # noqa: ANN001 - a checkpoint store
    """Every copy of offsets/BATCH Ferry kept in a run's folder (original and translation)."""
    copies = []
    for run_id in run_ids(store):
        for kind in ("original", "translated"):
            name = f"{FERRY_DIR}/{run_id}/{kind}/{offsets_name(batch)}"
            if store.exists(name):
                copies.append(store.read(name))
    return copies


def complete(store, batches: Iterable[int]) -> list[int]:  # noqa: ANN001
    """For each batch whose offsets file is missing beside its temporary: the temporary renamed
    to it when its bytes are a copy Ferry kept (module docstring). The batches completed."""
    done = []
    for batch in batches:
        temporary = f"{OFFSETS}/.{batch}.ferry-tmp"
        try:
            data = store.read(temporary)
        except StoreError:  # a write cut short on HDFS can stay unreadable until recovered
            data = None
        if data is None or data not in copies_kept(store, batch):
            print(
                f"warning: {store.name(offsets_name(batch))} is missing and "
                f"{store.name(temporary)} beside it is no copy Ferry kept: left as they are",
                file=sys.stderr,
            )
            continue
        store.rename_temporary(offsets_name(batch))
        print(
            f"warning: {store.name(offsets_name(batch))} was missing beside its whole "
            "temporary (a replace killed between its delete and its rename): renamed to it",
            file=sys.stderr,
        )
        done.append(batch)
    return done


def complete_listed(store, names: Iterable[str]) -> bool:  # noqa: ANN001
    """`complete` for every candidate in offsets/'s listing `names`; whether any was."""
    return bool(complete(store, missing_beside_temporary(names)))


def complete_one(store, batch: int) -> bool:  # noqa: ANN001
    """`complete` for offsets/BATCH alone (known not to be there); whether it was."""
    if not store.exists(f"{OFFSETS}/.{batch}.ferry-tmp"):
        return False
    return bool(complete(store, [batch]))

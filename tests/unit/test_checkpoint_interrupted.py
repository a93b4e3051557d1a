"""An offsets file a killed replace left missing beside its whole temporary
(ferry.checkpoint.interrupted), recognised by the next run (`LogsSeen.list`, `read_if_there`)
and completed: never a batch "appearing", never a file lost. On real local directories through
`ArrowStore`, whose replace is switched to the store kinds that have no atomic one; and the
local state an older Ferry's Hadoop rename left (target and checksum gone, temporary beside)."""

from __future__ import annotations

import os
import zlib

import pytest

from ferry.checkpoint import interrupted, runs
from ferry.checkpoint.arrow_store import ArrowStore
from ferry.checkpoint.rewrite import LogsSeen, check_unchanged, read_if_there
from ferry.checkpoint.store import Replace, replace_local_file
from ferry.errors import FerryError

RUN = "migrate-checkpoint-20261207T120000Z-abc"
ORIGINAL = {4: b'v1\n{"batchWatermarkMs":0}\n{"t":{"0":12}}', 5: b'v1\n{}\n{"t":{"0":17}}'}
TRANSLATED = {4: b'v1\n{"batchWatermarkMs":0}\n{"t":{"0":19}}', 5: b'v1\n{}\n{"t":{"0":24}}'}


class Killed(BaseException):
    """The process dies here."""


def hadoop_crc(data: bytes, per: int = 512) -> bytes:
    sums = b"".join(
        zlib.crc32(data[i : i + per]).to_bytes(4, "big") for i in range(0, len(data), per)
    )
    return b"crc\x00" + per.to_bytes(4, "big") + sums


@pytest.fixture
def checkpoint(tmp_path):
    """offsets/4 and 5 (the originals), commits/4, and a run's folder with its copies."""
    for batch, data in ORIGINAL.items():
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "offsets" / str(batch)).write_bytes(data)
        for kind, copies in (("original", ORIGINAL), ("translated", TRANSLATED)):
            folder = tmp_path / "ferry" / RUN / kind / "offsets"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / str(batch)).write_bytes(copies[batch])
    (tmp_path / "ferry" / RUN / runs.READY).write_bytes(RUN.encode())
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "4").write_bytes(b"v1\n{}")
    return tmp_path


def killed_between_delete_and_rename(store: ArrowStore, relative: str, data: bytes) -> None:
    """A write on a store without atomic replace, SIGKILLed after its delete."""
    store.replace = Replace.DELETE_THEN_RENAME

    class Cut:
        def __init__(self, fs) -> None:  # noqa: ANN001
            self._fs, self.type_name = fs, fs.type_name

        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(self._fs, name)

        def move(self, *args):  # noqa: ANN002, ANN201
            raise Killed

    fs, store._fs = store._fs, Cut(store._fs)
    with pytest.raises(Killed):
        store.write(relative, data)
    store._fs = fs


def listing(path) -> list[str]:  # noqa: ANN001
    return sorted(os.listdir(path))


def test_missing_beside_temporary_reads_one_listing():
    names = ["3", ".3.crc", ".4.ferry-tmp", "5", ".5.ferry-tmp", ".x.ferry-tmp", "..6.ferry-tmp"]
    assert interrupted.missing_beside_temporary(names) == [4]
    assert interrupted.missing_beside_temporary(["4", "5"]) == []
    assert interrupted.missing_beside_temporary([".٤.ferry-tmp"]) == []  # digits are ASCII


@pytest.mark.parametrize(("batch", "data"), [(4, TRANSLATED[4]), (5, ORIGINAL[5])])
def test_a_file_missing_beside_its_whole_temporary_is_completed_not_a_batch_appearing(
    checkpoint, batch, data, capsys
):
    """A rewrite (the translation) or a rollback / undo (the original), killed between the
    delete and the rename: the next listing renames the temporary to the file, and lists it."""
    store = ArrowStore(str(checkpoint))
    killed_between_delete_and_rename(store, f"offsets/{batch}", data)
    assert str(batch) not in listing(checkpoint / "offsets")
    seen = LogsSeen.list(store)
    assert seen.offsets == (4, 5) and seen.commits == (4,)
    assert (checkpoint / "offsets" / str(batch)).read_bytes() == data
    assert listing(checkpoint / "offsets") == ["4", "5"]
    assert "renamed to it" in capsys.readouterr().err
    # listed again, nothing moved: not "batch N appeared" (a running query)
    assert LogsSeen.list(store).moved_since(seen) is None


def test_a_listing_taken_before_the_kill_does_not_see_the_completed_file_appear(checkpoint):
    """The run that lists before the kill and the run after it agree on the batches."""
    store = ArrowStore(str(checkpoint))
    before = LogsSeen.list(store)
    killed_between_delete_and_rename(store, "offsets/5", TRANSLATED[5])
    after = LogsSeen.list(store)
    assert after.moved_since(before) is None
    current = {4: ORIGINAL[4], 5: TRANSLATED[5]}
    check_unchanged(store, before, current, "during this run")  # no FerryError


def test_read_if_there_completes_the_file_first(checkpoint):
    store = ArrowStore(str(checkpoint))
    killed_between_delete_and_rename(store, "offsets/4", TRANSLATED[4])
    assert read_if_there(store, 4) == TRANSLATED[4]
    assert listing(checkpoint / "offsets") == ["4", "5"]
    assert read_if_there(store, 9) is None  # neither file nor temporary


def test_runs_judge_the_completed_file_as_the_translation(checkpoint):
    """A rewrite killed inside offsets/5's replace after offsets/4's: PARTIAL would be wrong
    for 5 (it holds the translation once completed); the run is COMPLETE."""
    store = ArrowStore(str(checkpoint))
    store.write("offsets/4", TRANSLATED[4])
    killed_between_delete_and_rename(store, "offsets/5", TRANSLATED[5])
    run = runs.last_run(store, 5, lambda b: read_if_there(store, b))
    assert run is not None and run.state == runs.RunState.COMPLETE, run


def test_a_temporary_that_is_no_copy_ferry_kept_is_left_alone(checkpoint, capsys):
    """A write cut short (its temporary partial) whose target Spark's purge removed since: not
    a batch, not completed."""
    store = ArrowStore(str(checkpoint))
    (checkpoint / "offsets" / "4").unlink()
    (checkpoint / "offsets" / ".4.ferry-tmp").write_bytes(TRANSLATED[4][:9])
    seen = LogsSeen.list(store)
    assert seen.offsets == (5,)
    assert listing(checkpoint / "offsets") == [".4.ferry-tmp", "5"]
    assert "no copy Ferry kept" in capsys.readouterr().err
    assert read_if_there(store, 4) is None


def test_a_temporary_beside_its_file_is_ignored(checkpoint):
    """Killed while the temporary was written: the file is the old one, the temporary junk."""
    store = ArrowStore(str(checkpoint))
    (checkpoint / "offsets" / ".4.ferry-tmp").write_bytes(b"v1\n{")
    assert LogsSeen.list(store).offsets == (4, 5)
    assert (checkpoint / "offsets" / "4").read_bytes() == ORIGINAL[4]
    store.write("offsets/4", TRANSLATED[4])  # the next write takes the temporary's name over
    assert listing(checkpoint / "offsets") == ["4", "5"]


def test_an_older_ferrys_local_state_is_repaired_without_stale_checksums(checkpoint):
    """What Hadoop's FileContext rename with overwrite left on the local filesystem, killed
    between its delete and its rename: offsets/4 gone, its temporary (with Hadoop's checksum)
    beside it, and the old file's checksum possibly still there."""
    folder = checkpoint / "offsets"
    (folder / "4").unlink()
    (folder / ".4.crc").write_bytes(hadoop_crc(ORIGINAL[4]))
    (folder / ".4.ferry-tmp").write_bytes(TRANSLATED[4])
    (folder / "..4.ferry-tmp.crc").write_bytes(hadoop_crc(TRANSLATED[4]))
    store = ArrowStore(str(checkpoint))
    assert LogsSeen.list(store).offsets == (4, 5)
    assert listing(folder) == ["4", "5"]  # no checksum of other bytes left beside offsets/4
    assert (folder / "4").read_bytes() == TRANSLATED[4]


def test_a_local_replace_drops_both_checksums_and_is_never_missing(tmp_path):
    folder = tmp_path / "offsets"
    folder.mkdir()
    (folder / "4").write_bytes(ORIGINAL[4])
    (folder / ".4.crc").write_bytes(hadoop_crc(ORIGINAL[4]))
    (folder / "..4.ferry-tmp.crc").write_bytes(hadoop_crc(b"an older temporary"))
    replace_local_file(str(folder / "4"), TRANSLATED[4])
    assert listing(folder) == ["4"]
    assert (folder / "4").read_bytes() == TRANSLATED[4]


def test_check_unchanged_still_refuses_a_real_new_batch(checkpoint):
    store = ArrowStore(str(checkpoint))
    seen = LogsSeen.list(store)
    (checkpoint / "offsets" / "6").write_bytes(ORIGINAL[5])
    with pytest.raises(FerryError, match="batch 6 appeared"):
        check_unchanged(store, seen, ORIGINAL, "during this run")

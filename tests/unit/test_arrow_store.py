"""ArrowStore (ferry.checkpoint.arrow_store): the checkpoint store of Spark Connect runs, on a
real local directory. A write replaces a file whole or not at all, a stale Hadoop checksum
never outlives the bytes it described, and every failure is one line naming the file."""

from __future__ import annotations

import os
import threading
import zlib

import pytest

from ferry.checkpoint import store as store_module
from ferry.checkpoint.arrow_store import KIND_REPLACE, ArrowStore
from ferry.checkpoint.store import FileInfo, Replace, StoreError


class Recording:
    """A filesystem that records the calls made to it and passes them on."""

    def __init__(self, fs, kind: str) -> None:  # noqa: ANN001 - a pyarrow FileSystem
        self._fs = fs
        self.type_name = kind
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name: str):  # noqa: ANN204
        method = getattr(self._fs, name)

        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.calls.append((name, str(args[0]) if args else ""))
            return method(*args, **kwargs)

        return call


def test_root_is_qualified_and_names_files_under_it(tmp_path):
    store = ArrowStore(str(tmp_path / "ckpt"))
    assert store.root == f"file:{tmp_path}/ckpt"
    assert store.name("offsets/3") == f"file:{tmp_path}/ckpt/offsets/3"
    assert ArrowStore(f"file://{tmp_path}/ckpt/").root == store.root
    assert ArrowStore(f"file:{tmp_path}/ckpt").root == store.root
    assert store.is_rename_atomic


def test_write_read_list_and_delete(tmp_path):
    store = ArrowStore(str(tmp_path))
    assert not store.exists("offsets")
    assert store.list("offsets") == []
    assert store.list_dirs("offsets") == []
    store.write("offsets/0", b"v1\n{}")  # parents are made
    store.write("offsets/1", b"v1\n{}")
    store.write("sources/0/0", b"x")
    assert store.exists("offsets/0") and store.exists("offsets")
    assert store.read("offsets/0") == b"v1\n{}"
    listed = sorted(store.list("offsets"), key=lambda f: f.name)
    assert [f.name for f in listed] == ["0", "1"]
    assert all(isinstance(f, FileInfo) for f in listed)
    mtime_ms = int(os.stat(tmp_path / "offsets" / "0").st_mtime_ns // 1_000_000)
    assert listed[0].modified_ms == mtime_ms
    assert store.list_dirs("sources") == ["0"]
    assert store.list("") == []  # no files at the root
    assert sorted(store.list_dirs("")) == ["offsets", "sources"]
    store.delete("offsets/0")
    store.delete("offsets/0")  # missing is fine
    assert not store.exists("offsets/0")
    assert [f.name for f in store.list("offsets")] == ["1"]


class Killed(BaseException):
    """The process dies here."""


def test_a_local_write_goes_through_a_temporary_renamed_over_the_target(tmp_path, monkeypatch):
    store = ArrowStore(str(tmp_path))
    store.write("commits/4", b"old")
    renames = []

    def rename(source, target):  # noqa: ANN001, ANN202
        renames.append((source, target, (tmp_path / "commits" / "4").read_bytes()))
        os_replace(source, target)

    os_replace = os.replace
    monkeypatch.setattr(store_module.os, "replace", rename)
    store._fs = recording = Recording(store._fs, "local")
    store.write("commits/4", b"new")
    temporary = f"{tmp_path}/commits/.4.ferry-tmp"
    assert renames == [(temporary, f"{tmp_path}/commits/4", b"old")]  # the OS's rename, once
    assert recording.calls == []  # not pyarrow's move (nor a delete of the target)
    assert store.read("commits/4") == b"new"
    assert sorted(os.listdir(tmp_path / "commits")) == ["4"]


def test_a_write_cut_short_before_its_rename_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    store = ArrowStore(str(tmp_path))
    store.write("offsets/7", b"before")

    def killed(*args):  # noqa: ANN002, ANN202
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(store_module.os, "replace", killed)
        with pytest.raises(Killed):
            store.write("offsets/7", b"after")
    assert (tmp_path / "offsets" / "7").read_bytes() == b"before"
    store.write("offsets/7", b"after")  # the same command again finishes it
    assert store.read("offsets/7") == b"after"
    assert sorted(os.listdir(tmp_path / "offsets")) == ["7"]


def test_a_reader_never_sees_the_file_missing_or_partly_written(tmp_path):
    store = ArrowStore(str(tmp_path))
    contents = [bytes([i]) * (256 * 1024) for i in (1, 2)]
    store.write("metadata", contents[0])
    seen: list[bytes | str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                seen.append((tmp_path / "metadata").read_bytes())
            except FileNotFoundError:
                seen.append("missing")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(300):
            store.write("metadata", contents[i % 2])
    finally:
        done.set()
        reader.join()
    assert seen
    assert all(s in contents for s in seen), {s if isinstance(s, str) else len(s) for s in seen}


def hadoop_crc(data: bytes, per: int = 512) -> bytes:
    """A Hadoop ChecksumFileSystem .crc file of `data`."""
    sums = b"".join(
        zlib.crc32(data[i : i + per]).to_bytes(4, "big") for i in range(0, len(data), per)
    )
    return b"crc\x00" + per.to_bytes(4, "big") + sums


def test_a_hadoop_checksum_beside_a_replaced_file_is_removed_and_never_listed(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "2").write_bytes(b"spark's")
    (tmp_path / "offsets" / ".2.crc").write_bytes(hadoop_crc(b"spark's"))
    store = ArrowStore(str(tmp_path))
    assert [f.name for f in store.list("offsets")] == ["2"]
    store.write("offsets/2", b"ferry's")
    assert not (tmp_path / "offsets" / ".2.crc").exists()
    assert store.read("offsets/2") == b"ferry's"
    (tmp_path / "offsets" / ".2.crc").write_bytes(hadoop_crc(b"ferry's"))
    store.delete("offsets/2")
    assert os.listdir(tmp_path / "offsets") == []


def test_on_an_object_store_a_write_is_one_put_of_the_whole_object(tmp_path):
    store = ArrowStore(str(tmp_path))
    store._fs = recording = Recording(store._fs, "s3")
    store.replace, store.is_rename_atomic = Replace.WHOLE_PUT, False
    (tmp_path / "commits").mkdir()
    store.write("commits/0", b"whole")
    assert [n for n, _ in recording.calls] == ["open_output_stream"]
    assert recording.calls[0][1] == f"{tmp_path}/commits/0"
    assert store.read("commits/0") == b"whole"


def test_object_store_uris_say_rename_is_not_atomic():
    pytest.importorskip("pyarrow.fs")
    store = ArrowStore("gs://some-bucket/checkpoints/q1")
    assert store.root == "gs://some-bucket/checkpoints/q1"
    assert store.name("offsets/1") == "gs://some-bucket/checkpoints/q1/offsets/1"
    assert store.is_rename_atomic is False
    assert store.replace == Replace.WHOLE_PUT


@pytest.mark.parametrize("kind", ["hdfs", "abfs"])
def test_without_an_atomic_replace_the_temporary_is_whole_before_the_delete(tmp_path, kind):
    """HDFS and Azure through pyarrow: Azure's output stream empties the target the moment it
    opens, HDFS's move refuses an existing target: the temporary is whole before the target
    goes, and a kill between leaves exactly that (completed by the next run:
    tests/unit/test_checkpoint_interrupted.py)."""
    store = ArrowStore(str(tmp_path))
    store.write("offsets/1", b"old")
    store._fs = recording = Recording(store._fs, kind)
    store.replace = KIND_REPLACE.get(kind, Replace.DELETE_THEN_RENAME)
    assert store.replace == Replace.DELETE_THEN_RENAME
    store.write("offsets/1", b"new")
    temporary, target = f"{tmp_path}/offsets/.1.ferry-tmp", f"{tmp_path}/offsets/1"
    calls = [c for c in recording.calls if c[0] != "create_dir"]
    assert calls == [
        ("open_output_stream", temporary),
        ("delete_file", target),
        ("move", temporary),
    ]
    assert store.read("offsets/1") == b"new"

    class CutAfterDelete(Recording):
        def move(self, *args):  # noqa: ANN002, ANN201
            raise Killed

    store._fs = CutAfterDelete(recording._fs, kind)
    with pytest.raises(Killed):
        store.write("offsets/1", b"newer")
    assert sorted(os.listdir(tmp_path / "offsets")) == [".1.ferry-tmp"]
    assert (tmp_path / "offsets" / ".1.ferry-tmp").read_bytes() == b"newer"
    store._fs = recording
    store.rename_temporary("offsets/1")
    assert sorted(os.listdir(tmp_path / "offsets")) == ["1"]
    assert store.read("offsets/1") == b"newer"


def test_write_verified_raises_when_the_store_kept_other_bytes(tmp_path):
    store = ArrowStore(str(tmp_path))
    store.write_verified("offsets/1", b"ok")
    store.read = lambda relative: b"other"  # type: ignore[method-assign]
    with pytest.raises(StoreError, match=r"offsets/1: read back differs"):
        store.write_verified("offsets/1", b"ok")


def test_errors_are_one_line_naming_the_file(tmp_path):
    store = ArrowStore(str(tmp_path))
    with pytest.raises(StoreError) as raised:
        store.read("offsets/9")
    assert str(raised.value).startswith(f"cannot read file:{tmp_path}/offsets/9: ")
    assert "\n" not in str(raised.value)
    (tmp_path / "blocked").write_text("a file, not a directory")
    with pytest.raises(StoreError, match=rf"^cannot write file:{tmp_path}/blocked/0: "):
        store.write("blocked/0", b"x")

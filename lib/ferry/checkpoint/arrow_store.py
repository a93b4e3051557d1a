"""Checkpoint files without a JVM: the store a Spark Connect run uses (`open_store` in
ferry.checkpoint.store picks it when `ferry.session.is_connect(spark)`), with the interface of
`HadoopStore`.

The files are reached through `pyarrow.fs` (docs/connect.md says why): local paths and
`file:` URIs (Databricks volumes are local paths, /Volumes/...), `s3://`, `gs://`,
`abfs://`/`abfss://`, and `hdfs://` where libhdfs and a Hadoop client are installed.

A write replaces a file whole, by the one operation each store makes atomic
(`ferry.checkpoint.store.Replace`, docs/jobs/checkpoint.md "Kills, store by store"):
- a local filesystem: the bytes go to `.NAME.ferry-tmp` beside it, renamed over it by the
  operating system (`replace_local_file`, the same function `HadoopStore` uses);
- S3 and GCS: a rename is a copy and a delete, but an object appears only once its upload is
  complete (a multipart or resumable upload is made visible at its end, whole): the bytes are
  put to the target itself;
- Azure (`abfs`) and HDFS: no atomic replace through pyarrow. Its Azure output stream creates
  an empty blob at the target the moment it opens (not one whole put), its move refuses an
  existing target on HDFS (libhdfs has no rename with overwrite). There the temporary is
  written whole, the target deleted, the temporary moved to it; killed between the two, the
  target is missing beside its whole temporary, which the next run recognises and completes
  (`ferry.checkpoint.interrupted`). On Azure a move needs a hierarchical namespace (ADLS
  Gen2), which `abfs` is for.

On a local filesystem Hadoop keeps a checksum `.NAME.crc` beside each file it wrote (Spark's
checkpoint files have them): a checksum left beside a replaced file would fail Spark's next
read of it, so it is removed first (a file without one is read unchecked); `list` does not
show checksums, as Hadoop's listing does not.
"""

from __future__ import annotations

import os

from ferry.checkpoint.store import (
    FileInfo,
    Replace,
    StoreError,
    rename_local_temporary,
    replace_local_file,
    temporary_name,
)
from ferry.write.kill_points import kill_point

# pyarrow filesystems by how a file is replaced there; any other: DELETE_THEN_RENAME
KIND_REPLACE = {
    "local": Replace.LOCAL_RENAME,
    "s3": Replace.WHOLE_PUT,
    "gcs": Replace.WHOLE_PUT,
}


class ArrowStore:
    """One directory tree on a filesystem pyarrow reaches, named by a path or URI."""

    def __init__(self, root: str) -> None:
        from pyarrow import fs

        self._fs_module = fs
        text = root.rstrip("/") or "/"
        try:
            if "://" in text and not text.startswith("file:"):
                self._fs, base = fs.FileSystem.from_uri(text)
                self.root = text
            else:
                local = os.path.abspath(_local_path(text))
                self._fs, base = fs.LocalFileSystem(), local
                self.root = f"file:{local}"  # qualified, as Hadoop names a local path
        except Exception as exc:  # noqa: BLE001 - any filesystem failure is the same to the user
            raise StoreError(f"cannot open {root}: {_reason(exc)}") from exc
        self._base = base.rstrip("/") or "/"
        self._kind = self._fs.type_name
        self.replace = KIND_REPLACE.get(self._kind, Replace.DELETE_THEN_RENAME)
        self.is_rename_atomic = self.replace == Replace.LOCAL_RENAME

    def name(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def _path(self, relative: str) -> str:
        return f"{self._base}/{relative}" if self._base != "/" else f"/{relative}"

    def exists(self, relative: str) -> bool:
        try:
            info = self._fs.get_file_info(self._path(relative))
            return info.type != self._fs_module.FileType.NotFound
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot read {self.name(relative)}: {_reason(exc)}") from exc

    def _entries(self, relative: str) -> list:
        selector = self._fs_module.FileSelector(self._path(relative), allow_not_found=True)
        try:
            return self._fs.get_file_info(selector)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot list {self.name(relative)}: {_reason(exc)}") from exc

    def list(self, relative: str) -> list[FileInfo]:
        """The files directly in a directory (none when it does not exist)."""
        file_type = self._fs_module.FileType.File
        return [
            FileInfo(e.base_name, int(e.mtime_ns // 1_000_000) if e.mtime_ns else 0)
            for e in self._entries(relative)
            if e.type == file_type and not self._is_checksum(e.base_name)
        ]

    def list_dirs(self, relative: str) -> list[str]:
        """The names of the directories directly in a directory (none when it does not exist)."""
        directory = self._fs_module.FileType.Directory
        return [e.base_name for e in self._entries(relative) if e.type == directory]

    def read(self, relative: str) -> bytes:
        try:
            with self._fs.open_input_stream(self._path(relative)) as stream:
                return bytes(stream.read())
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot read {self.name(relative)}: {_reason(exc)}") from exc

    def write(self, relative: str, data: bytes) -> None:
        """`data` as the file's whole content, replaced by the store's one way (docstring)."""
        target = self._path(relative)
        parent, _, base = target.rpartition("/")
        try:
            if self.replace == Replace.LOCAL_RENAME:
                replace_local_file(target, data)
                return
            if self.replace == Replace.WHOLE_PUT:
                self._put(target, data)
                return
            self._fs.create_dir(parent or "/", recursive=True)
            temporary = f"{parent}/{temporary_name(base)}"
            self._put(temporary, data)
            kill_point("store.before-rename")
            self._delete_if_present(target)
            kill_point("store.deleted")
            self._fs.move(temporary, target)
            kill_point("store.after-rename")
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot write {self.name(relative)}: {_reason(exc)}") from exc

    def rename_temporary(self, relative: str) -> None:
        """A file's temporary renamed to it, the file not there (`ferry.checkpoint.interrupted`:
        a replace killed between its delete and its rename, completed)."""
        target = self._path(relative)
        parent, _, base = target.rpartition("/")
        try:
            if self.replace == Replace.LOCAL_RENAME:
                rename_local_temporary(target)
            else:
                self._fs.move(f"{parent}/{temporary_name(base)}", target)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot write {self.name(relative)}: {_reason(exc)}") from exc

    def _put(self, path: str, data: bytes) -> None:
        with self._fs.open_output_stream(path) as stream:
            stream.write(data)

    def write_verified(self, relative: str, data: bytes) -> None:
        """`write`, then read back: a store that kept other bytes is an error."""
        self.write(relative, data)
        if self.read(relative) != data:
            raise StoreError(f"{self.name(relative)}: read back differs from what was written")

    def delete(self, relative: str) -> None:
        """Remove a file (and a local checksum beside it); a missing file is fine."""
        path = self._path(relative)
        try:
            self._delete_if_present(path)
            parent, _, base = path.rpartition("/")
            self._delete_if_present(f"{parent}/.{base}.crc")
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot delete {self.name(relative)}: {_reason(exc)}") from exc

    def _delete_if_present(self, path: str) -> None:
        if self._kind == "local" and not os.path.lexists(path):
            return
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass

    def _is_checksum(self, name: str) -> bool:
        return self._kind == "local" and name.startswith(".") and name.endswith(".crc")


def _local_path(text: str) -> str:
    """The path of a local path or `file:` URI (file:/x, file:///x)."""
    if not text.startswith("file:"):
        return text
    return "/" + text.removeprefix("file:").lstrip("/")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]

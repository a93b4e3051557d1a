"""Files on any Hadoop filesystem (local, `hdfs://`, `s3a://`), read and written through the
Spark session's own Hadoop configuration, so paths and credentials work as they do for the
streaming query itself (`ferry.checkpoint.stores.open_store`: this store on a classic session;
a JVM-free twin with the same methods, `ferry.checkpoint.arrow_store`, on a Spark Connect
session).

A write replaces a file whole, by the one operation each store makes atomic (`Replace`,
docs/jobs/checkpoint.md "Kills, store by store"):
- a local path (`file:`): the bytes go to a temporary file beside the target
  (`.NAME.ferry-tmp`, a name Spark's logs never read), renamed over it by the operating system
  (`replace_local_file`, shared with `ArrowStore`). Not Hadoop's `FileContext.rename(...,
  OVERWRITE)`: on the local filesystem that deletes the target and then renames (and renames
  the `.crc` checksum in a second step), so a kill between left the file missing;
- HDFS (and `viewfs`, `webhdfs`): the temporary renamed over the target with
  `FileContext.rename(..., OVERWRITE)`, one atomic operation of the NameNode;
- `s3a`, `gs` (and the object stores like them): the bytes written to the target itself in one
  put, which the store shows only once closed, whole;
- `abfs`/`abfss`, `wasb`/`wasbs`: no atomic replace at all (their create makes an empty target
  at once; their rename refuses an existing target): the temporary is written whole, the target
  deleted, the temporary renamed to it. Killed between the two, the target is missing beside
  its whole temporary: the next run recognises that and completes it
  (`ferry.checkpoint.interrupted`). A scheme Ferry does not know goes through
  `FileContext.rename(..., OVERWRITE)`, atomic where its filesystem makes it so and otherwise
  Hadoop's delete-then-rename, which leaves the same recognised state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from ferry.errors import FerryError
from ferry.write.kill_points import kill_point


class Replace(str, Enum):
    """How a store replaces a file (module docstring)."""

    LOCAL_RENAME = "rename(2) over the target"
    RENAME_OVERWRITE = "rename with overwrite"
    WHOLE_PUT = "one put of the whole object"
    DELETE_THEN_RENAME = "delete, then rename (not atomic)"


# Hadoop schemes by how a file is replaced there; any other: RENAME_OVERWRITE (docstring).
SCHEME_REPLACE = {
    "file": Replace.LOCAL_RENAME,
    **dict.fromkeys(("hdfs", "viewfs", "webhdfs", "swebhdfs"), Replace.RENAME_OVERWRITE),
    **dict.fromkeys(("s3", "s3a", "s3n", "gs", "oss", "cosn", "obs"), Replace.WHOLE_PUT),
    **dict.fromkeys(("abfs", "abfss", "wasb", "wasbs"), Replace.DELETE_THEN_RENAME),
}
# Kept for callers that only ask whether a rename is atomic.
OBJECT_STORE_SCHEMES = frozenset(s for s, r in SCHEME_REPLACE.items() if r == Replace.WHOLE_PUT)


class StoreError(FerryError):
    """A checkpoint file could not be read or written: the message names it (exit code 1)."""


@dataclass(frozen=True)
class FileInfo:
    name: str
    modified_ms: int


def temporary_name(name: str) -> str:
    """The temporary file a write of `name` goes through (hidden: Spark's logs skip it)."""
    return f".{name}.ferry-tmp"


def checksum_name(name: str) -> str:
    """Hadoop's checksum of a local file `name` (its `ChecksumFileSystem`)."""
    return f".{name}.crc"


def replace_local_file(path: str, data: bytes) -> None:
    """`data` as the local file `path`'s whole content: written to its temporary, then renamed
    over it (rename(2) replaces the target atomically: at every instant the old bytes or the
    new). Hadoop's checksum beside the target would fail Spark's next read of the new bytes, so
    it goes first (a file without one is read unchecked); so does one beside the temporary (an
    older Ferry wrote temporaries through Hadoop), which a read of it would check."""
    folder, _, name = path.rpartition("/")
    folder = folder or "/"
    os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, temporary_name(name))
    _remove_if_there(os.path.join(folder, checksum_name(temporary_name(name))))
    with open(temporary, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    _remove_if_there(os.path.join(folder, checksum_name(name)))
    kill_point("store.before-rename")
    os.replace(temporary, path)
    kill_point("store.after-rename")


def rename_local_temporary(path: str) -> None:
    """The temporary of `path` renamed to it (`ferry.checkpoint.interrupted`), with neither
    file's Hadoop checksum left behind (the target's is of other bytes)."""
    folder, _, name = path.rpartition("/")
    folder = folder or "/"
    _remove_if_there(os.path.join(folder, checksum_name(name)))
    os.replace(os.path.join(folder, temporary_name(name)), path)
    _remove_if_there(os.path.join(folder, checksum_name(temporary_name(name))))


def _remove_if_there(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class HadoopStore:
    """One directory tree on a Hadoop filesystem, as the Spark session's configuration sees
    it."""

    def __init__(self, spark, root: str) -> None:  # noqa: ANN001 - a SparkSession
        jvm = spark._jvm
        self._jvm = jvm
        self._gateway = spark.sparkContext._gateway
        self._conf = spark._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(root)
        try:
            self._fs = path.getFileSystem(self._conf)
            # Qualified (scheme and authority filled in) so that every message names it fully.
            qualified = self._fs.makeQualified(path)
            self.root = str(qualified)
            scheme = (qualified.toUri().getScheme() or "file").lower()
            self._local_root = str(qualified.toUri().getPath()) if scheme == "file" else None
        except Exception as exc:  # noqa: BLE001 - any filesystem failure is the same to the user
            raise StoreError(f"cannot open {root}: {_reason(exc)}") from exc
        self.replace = SCHEME_REPLACE.get(scheme, Replace.RENAME_OVERWRITE)
        self.is_rename_atomic = self.replace in (Replace.LOCAL_RENAME, Replace.RENAME_OVERWRITE)
        self._context = None  # the FileContext, made on the first rename

    def _path(self, relative: str):  # noqa: ANN202 - a Hadoop Path
        return self._jvm.org.apache.hadoop.fs.Path(f"{self.root}/{relative}")

    def _local(self, relative: str) -> str:
        return f"{self._local_root.rstrip('/')}/{relative}"

    def name(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def exists(self, relative: str) -> bool:
        try:
            return bool(self._fs.exists(self._path(relative)))
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot read {self.name(relative)}: {_reason(exc)}") from exc

    def list(self, relative: str) -> list[FileInfo]:
        """The files directly in a directory (none when it does not exist)."""
        try:
            if not self._fs.exists(self._path(relative)):
                return []
            return [
                FileInfo(s.getPath().getName(), int(s.getModificationTime()))
                for s in self._fs.listStatus(self._path(relative))
                if s.isFile()
            ]
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot list {self.name(relative)}: {_reason(exc)}") from exc

    def list_dirs(self, relative: str) -> list[str]:
        """The names of the directories directly in a directory (none when it does not exist)."""
        try:
            if not self._fs.exists(self._path(relative)):
                return []
            return [
                s.getPath().getName()
                for s in self._fs.listStatus(self._path(relative))
                if s.isDirectory()
            ]
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot list {self.name(relative)}: {_reason(exc)}") from exc

    def read(self, relative: str) -> bytes:
        try:
            stream = self._fs.open(self._path(relative))
            try:
                data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
            finally:
                stream.close()
            return bytes(data)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot read {self.name(relative)}: {_reason(exc)}") from exc

    def write(self, relative: str, data: bytes) -> None:
        """`data` as the file's whole content, replaced by the store's one way (docstring)."""
        folder, _, name = relative.rpartition("/")
        target = self._path(relative)
        try:
            if self.replace == Replace.LOCAL_RENAME:
                replace_local_file(self._local(relative), data)
                return
            if self.replace == Replace.WHOLE_PUT:
                self._create(target, data)
                return
            temporary = self._path(f"{folder}/{temporary_name(name)}".lstrip("/"))
            self._create(temporary, data)
            kill_point("store.before-rename")
            if self.replace == Replace.RENAME_OVERWRITE:
                self._rename_over(temporary, target)
            else:
                self._fs.delete(target, False)
                kill_point("store.deleted")
                self._rename(temporary, target)
            kill_point("store.after-rename")
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot write {self.name(relative)}: {_reason(exc)}") from exc

    def rename_temporary(self, relative: str) -> None:
        """A file's temporary renamed to it, the file not there (`ferry.checkpoint.interrupted`:
        a replace killed between its delete and its rename, completed)."""
        folder, _, name = relative.rpartition("/")
        try:
            if self.replace == Replace.LOCAL_RENAME:
                rename_local_temporary(self._local(relative))
                return
            temporary = self._path(f"{folder}/{temporary_name(name)}".lstrip("/"))
            self._rename(temporary, self._path(relative))
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot write {self.name(relative)}: {_reason(exc)}") from exc

    def _create(self, path, data: bytes) -> None:  # noqa: ANN001 - a Hadoop Path
        stream = self._fs.create(path, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def _rename(self, source, target) -> None:  # noqa: ANN001 - Hadoop Paths
        if not self._fs.rename(source, target):
            raise StoreError(f"cannot write {target}: the store refused to rename {source} to it")

    def _rename_over(self, source, target) -> None:  # noqa: ANN001 - Hadoop Paths
        """Rename with overwrite (Spark's `FileContextBasedCheckpointFileManager`): atomic on
        HDFS, Hadoop's delete-then-rename where a filesystem does not say otherwise."""
        jvm = self._jvm
        if self._context is None:
            self._context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(
                target.toUri(), self._conf
            )
        rename = getattr(jvm.org.apache.hadoop.fs, "Options$Rename")
        options = self._gateway.new_array(rename, 1)
        options[0] = rename.OVERWRITE
        self._context.rename(source, target, options)

    def write_verified(self, relative: str, data: bytes) -> None:
        """`write`, then read back: a store that kept other bytes is an error."""
        self.write(relative, data)
        if self.read(relative) != data:
            raise StoreError(f"{self.name(relative)}: read back differs from what was written")

    def delete(self, relative: str) -> None:
        """Remove a file (none there is fine)."""
        try:
            self._fs.delete(self._path(relative), False)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot delete {self.name(relative)}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]

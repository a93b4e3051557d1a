"""Files on any Hadoop filesystem (local, `hdfs://`, `s3a://`), read and written through the
Spark session's own Hadoop configuration, so paths and credentials work as they do for the
streaming query itself (`ferry.checkpoint.stores.open_store`: this store on a classic session;
a JVM-free twin with the same methods, `ferry.checkpoint.arrow_store`, on a Spark Connect
session).

A write replaces a file whole or not at all, as Spark's own `CheckpointFileManager` does: the
bytes go to a temporary file beside the target (`.NAME.ferry-tmp`, a name Spark's logs never
read), which is then renamed over the target with overwrite (`FileContext.rename(...,
OVERWRITE)`: one atomic rename on the local filesystem and HDFS, whose `.crc` checksum files
follow). A SIGKILL at any instant leaves the target as it was or as written, never missing.
Object stores (`s3a://`, `gs://`, ...) cannot rename atomically, but they show a new object
only once it is whole: there the bytes are written to the target itself, in one put.
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry.errors import FerryError
from ferry.write.kill_points import kill_point

# Schemes whose rename is a copy and a delete, but whose single put is atomic.
OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "oss", "cosn", "obs"})


class StoreError(FerryError):
    """A checkpoint file could not be read or written: the message names it (exit code 1)."""


@dataclass(frozen=True)
class FileInfo:
    name: str
    modified_ms: int


def temporary_name(name: str) -> str:
    """The temporary file a write of `name` goes through (hidden: Spark's logs skip it)."""
    return f".{name}.ferry-tmp"


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
        except Exception as exc:  # noqa: BLE001 - any filesystem failure is the same to the user
            raise StoreError(f"cannot open {root}: {_reason(exc)}") from exc
        self.is_rename_atomic = scheme not in OBJECT_STORE_SCHEMES
        self._context = None  # the FileContext, made on the first rename

    def _path(self, relative: str):  # noqa: ANN202 - a Hadoop Path
        return self._jvm.org.apache.hadoop.fs.Path(f"{self.root}/{relative}")

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
        """`data` as the file's whole content, replacing it in one step (module docstring)."""
        folder, _, name = relative.rpartition("/")
        target = self._path(relative)
        try:
            if not self.is_rename_atomic:
                self._create(target, data)
                return
            temporary = self._path(f"{folder}/{temporary_name(name)}".lstrip("/"))
            self._create(temporary, data)
            kill_point("store.before-rename")
            self._rename_over(temporary, target)
            kill_point("store.after-rename")
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

    def _rename_over(self, source, target) -> None:  # noqa: ANN001 - Hadoop Paths
        """Rename with overwrite, atomically (Spark's `FileContextBasedCheckpointFileManager`)."""
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

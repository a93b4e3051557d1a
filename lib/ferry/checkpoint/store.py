"""Files on any Hadoop filesystem (local, `hdfs://`, `s3a://`), read and written through the
Spark session's own Hadoop `FileSystem` and configuration, so paths and credentials work as
they do for the streaming query itself.

Writes go to a temporary file beside the target and are renamed over it (the local and HDFS
filesystems rename atomically; the local one writes Spark's `.crc` checksum files too), so a
file is never left half written under its own name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ferry.errors import FerryError


class StoreError(FerryError):
    """A checkpoint file could not be read or written: the message names it (exit code 1)."""


@dataclass(frozen=True)
class FileInfo:
    name: str
    modified_ms: int


class HadoopStore:
    """One directory tree on a Hadoop filesystem, as the Spark session's configuration sees
    it."""

    def __init__(self, spark, root: str) -> None:  # noqa: ANN001 - a SparkSession
        jvm = spark._jvm
        self._jvm = jvm
        self._conf = spark._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(root)
        try:
            self._fs = path.getFileSystem(self._conf)
            # Qualified (scheme and authority filled in) so that every message names it fully.
            self.root = str(self._fs.makeQualified(path))
        except Exception as exc:  # noqa: BLE001 - any filesystem failure is the same to the user
            raise StoreError(f"cannot open {root}: {_reason(exc)}") from exc

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
        """`data` as the file's whole content, through a temporary file renamed over it."""
        target = self._path(relative)
        temporary = self._path(f"{relative.rsplit('/', 1)[0]}/.{target.getName()}.ferry-tmp")
        try:
            stream = self._fs.create(temporary, True)
            try:
                stream.write(bytearray(data))
            finally:
                stream.close()
            if self._fs.exists(target):
                self._fs.delete(target, False)
            if not self._fs.rename(temporary, target):
                raise StoreError(f"cannot write {self.name(relative)}: rename refused")
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot write {self.name(relative)}: {_reason(exc)}") from exc

    def write_verified(self, relative: str, data: bytes) -> None:
        """`write`, then read back: a store that kept other bytes is an error."""
        self.write(relative, data)
        if self.read(relative) != data:
            raise StoreError(f"{self.name(relative)}: read back differs from what was written")

    def replace_all(self, files: Mapping[str, bytes], previous: Callable[[str], bytes]) -> None:
        """Each file's content replaced (`write_verified`), all files or none: after a failure
        the files already written get `previous(relative)` back, and the failure is raised."""
        written: list[str] = []
        try:
            for relative, data in files.items():
                written.append(relative)
                self.write_verified(relative, data)
        except Exception:
            for relative in written:
                self.write(relative, previous(relative))
            raise


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]

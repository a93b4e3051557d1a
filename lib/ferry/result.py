"""A cluster-mode job's result, carried back to the submitting side.

In YARN and Kubernetes cluster deploy mode the driver runs in a container: its exit code does
not reach `spark-submit` (an application that ends with 75 or 2 is reported FAILED, or even
SUCCEEDED) and what it prints stays in a container log. spark-submit.sh therefore names a
result file on storage both sides reach (`$FERRY_RESULT`, a Hadoop filesystem URI: hdfs://,
s3a://, file:// on a shared mount); the job writes its exit code, its one-line message and
everything it printed there as it ends (`record`), and spark-submit.sh, once the application
has ended, reads it back (`python -m ferry.result read URI`), prints stdout and stderr where
client mode would and exits with the job's own code. It deletes the file (`delete URI`), on a
Hadoop filesystem in the background (its client is a JVM to start: 2-3 s the run need not
wait for); a file left by a deletion cut short is removed by a later job writing its own
beside it (`STALE_MS`).

The file is JSON: {"code": int, "stdout": str, "stderr": str}. It is written through the
driver JVM's Hadoop filesystem (the one the ledger is written with) under a temporary name and
renamed, so a reader never sees half of one; a Spark Connect session has no JVM here, and
writes it through pyarrow.fs instead (ferry.checkpoint.arrow_store, docs/connect.md). The
reader runs Hadoop's FsShell from the installed PySpark's jars with the user's
HADOOP_CONF_DIR (and $FERRY_HADOOP_CLASSPATH: jars for filesystems PySpark does not carry,
such as hadoop-aws for s3a://).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

RESULT_ENV = "FERRY_RESULT"
# A result file this old is one whose deletion was cut short (`delete` leaves it to a Hadoop
# client running on its own): the next job that writes one beside it removes it.
STALE_MS = 24 * 3600 * 1000


class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def capture() -> tuple[_Tee, _Tee] | None:
    """When spark-submit.sh asked for a result file, keep a copy of stdout and stderr."""
    if not os.environ.get(RESULT_ENV):
        return None
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    return out, err


def record(code: int, captured: tuple[_Tee, _Tee] | None) -> None:
    """Write the result file named by $FERRY_RESULT. A failure to write it is said on stderr
    (the submitting side then reports the application's end without it)."""
    uri = os.environ.get(RESULT_ENV)
    if not uri or captured is None:
        return
    out, err = captured
    sys.stdout, sys.stderr = out.stream, err.stream  # type: ignore[assignment]
    text = json.dumps({"code": code, "stdout": out.copy.getvalue(), "stderr": err.copy.getvalue()})
    try:
        _write(uri, text.encode())
    except Exception as exc:  # noqa: BLE001 - the job's own code must still be the exit code
        print(f"error: could not write the result file {uri}: {exc}", file=sys.stderr)


def _write(uri: str, data: bytes) -> None:
    from pyspark.sql import SparkSession

    # A job that failed before it built its session (a config error) still reports: the
    # application master waits for a session anyway.
    from ferry.session import is_connect

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    if is_connect(spark):
        _write_without_jvm(uri, data)
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    target = jvm.org.apache.hadoop.fs.Path(uri)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    tmp = jvm.org.apache.hadoop.fs.Path(target.getParent(), "." + target.getName() + ".tmp")
    stream = fs.create(tmp, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    fs.delete(target, False)
    if not fs.rename(tmp, target):
        raise OSError(f"could not rename {tmp} to {target}")
    try:
        _remove_stale(jvm, fs, target)
    except Exception:  # noqa: BLE001 - the run's result is written; this is housekeeping
        pass


def _write_without_jvm(uri: str, data: bytes) -> None:
    """`_write` for a session with no JVM here (Spark Connect): through pyarrow.fs
    (ferry.checkpoint.arrow_store: renamed into place, or one whole put on an object store)."""
    import time

    from ferry.checkpoint.arrow_store import ArrowStore

    parent, _, name = uri.rstrip("/").rpartition("/")
    store = ArrowStore(parent or "/")
    store.write(name, data)
    cutoff = int(time.time() * 1000) - STALE_MS
    try:
        for info in store.list(""):
            if info.name.startswith("ferry-") and info.name.endswith(".json"):
                if info.modified_ms < cutoff:
                    store.delete(info.name)
    except Exception:  # noqa: BLE001 - the run's result is written; this is housekeeping
        pass


def _remove_stale(jvm, fs, target) -> None:  # noqa: ANN001 - Py4J objects
    """Remove the result files beside `target` older than `STALE_MS`."""
    cutoff = jvm.java.lang.System.currentTimeMillis() - STALE_MS
    for status in fs.listStatus(target.getParent()):
        name = status.getPath().getName()
        if (
            name.startswith("ferry-")
            and name.endswith(".json")
            and status.isFile()
            and status.getModificationTime() < cutoff
        ):
            fs.delete(status.getPath(), False)


def fs_shell(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Hadoop's FsShell from the installed PySpark's jars, with $HADOOP_CONF_DIR's settings."""
    return subprocess.run(
        _fs_shell_command(*args), capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _fs_shell_command(*args: str) -> list[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    cp = [str(jars / "*")]
    conf_dir = os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")
    if conf_dir:
        cp.insert(0, conf_dir)
    # Filesystems the installed PySpark lacks (s3a:// needs hadoop-aws and the AWS SDK).
    extra = os.environ.get("FERRY_HADOOP_CLASSPATH")
    if extra:
        cp.append(extra)
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME") else "java"
    return [str(java), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join(cp),
            "org.apache.hadoop.fs.FsShell", *args]  # fmt: skip


def _local(uri: str) -> Path:
    """The path of a file: URI (file:///x, file:/x)."""
    rest = uri.removeprefix("file:")
    return Path("/" + rest.lstrip("/"))


def read(uri: str) -> dict | None:
    """The result file at `uri` (a path without a scheme is on the cluster's default
    filesystem), or None when there is none (the job never got to write it)."""
    if uri.startswith("file:"):
        path = _local(uri)
        return json.loads(path.read_text()) if path.is_file() else None
    done = fs_shell("-cat", uri)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)


def main(argv: list[str]) -> int:
    """`read URI`: print the job's stdout and stderr and exit with its code; 3 when there is
    no result file. `delete URI`: remove it."""
    if len(argv) != 2 or argv[0] not in ("read", "delete"):
        print("usage: python -m ferry.result read|delete URI", file=sys.stderr)
        return 2
    if argv[0] == "delete":
        if argv[1].startswith("file:"):
            _local(argv[1]).unlink(missing_ok=True)
        else:  # a JVM to start (2-3 s): left to run on its own, the run does not wait for it
            subprocess.Popen(
                _fs_shell_command("-rm", "-f", "-skipTrash", argv[1]),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        return 0
    result = read(argv[1])
    if result is None:
        return 3
    sys.stdout.write(result["stdout"])
    sys.stderr.write(result["stderr"])
    return int(result["code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A Spark Connect server for tests and benches: PySpark's own
(`org.apache.spark.sql.connect.service.SparkConnectServer`, from the `spark-connect` jar in the
PySpark wheel), started through the installed `spark-submit` in a process of its own, its
Python workers on this interpreter (where Ferry and confluent-kafka are installed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ferry.testing.brokers import free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = "Spark Connect server started"


class ServerError(RuntimeError):
    """The server did not start: the message ends with its log's tail."""


@contextlib.contextmanager
def connect_server(
    log: Path, master: str = "local[2]", timeout_s: float = 180, python: str | None = None
) -> Iterator[str]:
    """Start a server (its output in `log`), yield its `sc://localhost:PORT`, stop it."""
    port = free_port()
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": python or sys.executable}
    env.pop("SPARK_REMOTE", None)
    command = [
        str(submit), "--master", master, "--class", SERVER_CLASS,
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=8",
        "spark-internal",
    ]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while STARTED not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise ServerError(f"the Spark Connect server did not start:\n{tail}")
            time.sleep(0.5)
        yield f"sc://localhost:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

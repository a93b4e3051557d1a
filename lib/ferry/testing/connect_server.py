"""A Spark Connect server for tests and benches: PySpark's own
(`org.apache.spark.sql.connect.service.SparkConnectServer`, from the `spark-connect` jar in the
PySpark wheel), started through the installed `spark-submit` in a process of its own, its
Python workers on this interpreter (where Ferry and confluent-kafka are installed).

`limits=True` gives it the limits of Databricks serverless that Ferry must live within, through
a gRPC interceptor of its own (ServerlessLimits.java beside this file, compiled here with the
JDK's javac against the PySpark wheel's spark-connect jar): caching refused, some settings
refused, `spark.sql.shuffle.partitions` read as `auto`."""

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
LIMITS_SOURCE = Path(__file__).with_name("ServerlessLimits.java")
LIMITS_CLASS = "ferry.testing.ServerlessLimits"


class ServerError(RuntimeError):
    """The server did not start: the message ends with its log's tail."""


@contextlib.contextmanager
def connect_server(
    log: Path,
    master: str = "local[2]",
    timeout_s: float = 180,
    python: str | None = None,
    limits: bool = False,
) -> Iterator[str]:
    """Start a server (its output in `log`), yield its `sc://localhost:PORT`, stop it.
    `limits`: Databricks serverless's (the module's docstring)."""
    port = free_port()
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": python or sys.executable}
    env.pop("SPARK_REMOTE", None)
    command = [
        str(submit), "--master", master, "--class", SERVER_CLASS,
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=8",
    ]  # fmt: skip
    if limits:
        classes = _compiled_limits(log.parent / "serverless-limits")
        command += ["--driver-class-path", str(classes),
                    "--conf", f"spark.connect.grpc.interceptor.classes={LIMITS_CLASS}"]  # fmt: skip
    command.append("spark-internal")
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


def _compiled_limits(directory: Path) -> Path:
    """ServerlessLimits compiled into `directory` (its classes' root) against the installed
    PySpark's spark-connect jar, whose shaded gRPC and protobuf it uses."""
    import glob
    import shutil

    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        raise ServerError("javac (a JDK, not only a JRE) is needed to build ServerlessLimits")
    jars = glob.glob(str(Path(pyspark.__file__).parent / "jars" / "spark-connect_*.jar"))
    if not jars:
        raise ServerError("no spark-connect jar in the installed PySpark")
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [javac, "-nowarn", "-cp", jars[0], "-d", str(directory), str(LIMITS_SOURCE)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ServerError(f"javac failed on {LIMITS_SOURCE.name}:\n{done.stderr[-3000:]}")
    return directory

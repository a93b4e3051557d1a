"""The Python worker daemon of local runs: pyspark's own, with its stderr in the run's log file.

On a local master the JVM copies its Python workers' stderr onto the console. When a job fails,
Spark cancels the tasks still running, and a worker whose socket closes mid-handshake prints an
EOFError traceback there, after which Ferry's one-line error is no longer one line. Task errors
reach the driver through the socket, not stderr, so nothing is lost by keeping stderr in the
run's log file (spark-submit.sh sets `spark.python.daemon.module` to this module for local
masters, and not under --verbose)."""

from __future__ import annotations

import os


def _stderr_to_log() -> None:
    path = os.environ.get("FERRY_LOG_FILE")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return  # an unwritable log directory must not stop the workers
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    _stderr_to_log()
    from pyspark import daemon

    daemon.manager()

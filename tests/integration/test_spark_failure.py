"""Spark running out of memory, for real, in jobs started as users start them: the run ends
in one line naming the cause and what to change, exit code 1, with no Py4J trace, no
destination group written and nothing in the ledger.

A tiny driver memory is the trigger. Spark refuses heaps under 450 MiB outright
(INVALID_DRIVER_MEMORY, itself a one-line error); `spark.testing.reservedMemory=0` lifts only
that check, so a 48 MiB heap starts Spark and then really runs out of it at the first plan
(32 MiB ran out before the job could say anything)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ferry import kafka
from ferry.kafka.cluster import Cluster
from ferry.testing.produce import create_topics, produce

from .jobrunner import ROOT, ledger_rows, write_migrate_config
from .test_migrate import committed, replicate, unique_records

# Their own Spark JVMs beside the test session's, each a minute of GC on a tiny heap:
# `make test-slow`.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY_DRIVER = ["--driver-memory", "48m", "--conf", "spark.testing.reservedMemory=0"]
SHIFT = 5  # the destination holds records[SHIFT:]


def _submit(*args: str, log_dir, grace_s: float) -> subprocess.CompletedProcess:  # noqa: ANN001
    env = {**os.environ, "FERRY_LOG_DIR": str(log_dir), "FERRY_OOM_GRACE_S": str(grace_s)}
    return subprocess.run(
        [str(ROOT / "spark-submit.sh"), *args], capture_output=True, text=True, timeout=240,
        check=False, cwd=ROOT, env=env,
    )  # fmt: skip


def _assert_one_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1 and one `error:` line, the last one, holding `needles`; no trace of Py4J."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "Traceback" not in result.stderr and "py4j" not in result.stderr.lower(), result.stderr
    return errors[0]


def test_migrate_out_of_driver_memory_ends_in_one_line_and_writes_nothing(
    clusters, tmp_path, unique
):
    src, dst = clusters
    topic = f"{unique}-t"
    create_topics(src.config, {topic: 4})
    create_topics(dst.config, {topic: 4})
    for p in range(4):
        records = unique_records(f"{topic}{p}", 40)
        produce(src.config, topic, p, records)
        produce(dst.config, topic, p, replicate(records, SHIFT))
    groups = {f"{unique}-g{i}": {(topic, p): 10 + i + p for p in range(4)} for i in range(6)}
    assert not any(kafka.alter_offsets_each(Cluster("source", src.config), groups).values())
    # one group the destination already has, behind the plan: migrate would move it forward
    behind = f"{unique}-g0"
    assert kafka.alter_offsets_each(Cluster("d", dst.config), {behind: {(topic, 0): 1}}) == {
        behind: None
    }
    before = {g: committed(dst, g) for g in groups}
    config = write_migrate_config(tmp_path, src, dst, unique)

    # A 48 MiB driver's JVM usually stops answering after its OutOfMemoryError, and the run is
    # ended by ferry.driver_watch: a grace of 10 s, not the default 60, either way one line.
    result = _submit(*TINY_DRIVER, "migrate", "--config", config, "--execute",
                     log_dir=tmp_path / "logs", grace_s=10)  # fmt: skip

    _assert_one_line(result, "error: Spark ran out of memory in the driver", "OutOfMemoryError",
                     "--driver-memory", "--group")  # fmt: skip
    assert {g: committed(dst, g) for g in groups} == before
    assert before[behind] == {(topic, 0): 1}
    ledger = tmp_path / "ledger"
    assert not ledger.exists() or not [
        r for r in ledger_rows(ledger) if r["phase"] in ("intent", "outcome")
    ]


TASK_OUT_OF_MEMORY = """\
import sys

from pyspark.sql import functions as F

from ferry.cli import exit_process, run
from ferry.session import build_session


def main(argv):
    spark = build_session("ferry-task-oom")
    # a gigabyte in one task: a string repeated as many times as the row says
    df = spark.range(1).select(F.length(F.expr("repeat('x', id + 1000000000)")))
    print(df.collect())
    return 0


if __name__ == "__main__":
    exit_process(run(main))
"""


def test_a_task_out_of_memory_on_a_local_master_fails_the_job_not_the_driver(tmp_path):
    """A local master's tasks run in the driver's JVM, which Spark used to end with exit code
    52 when a task ran out of memory (ferry.session's local defaults keep it): the job reports
    the failed task, exit 1. Run by spark-submit itself, as spark-submit.sh runs only jobs/."""
    script = tmp_path / "task_oom.py"
    script.write_text(TASK_OUT_OF_MEMORY)
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    log = tmp_path / "run.log"
    result = subprocess.run(
        [submit, "--master", "local[1]", "--driver-memory", "512m",
         "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile="
         f"file:{ROOT / 'conf' / 'log4j2.properties'} -Dferry.log.file={log} "
         "-XX:TieredStopAtLevel=1 -XX:MetaspaceSize=256m",  # as spark-submit.sh's local drivers
         str(script)],
        capture_output=True, text=True, timeout=240, check=False, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "lib"), "FERRY_LOG_FILE": str(log),
             "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )  # fmt: skip
    # spark-submit merges the Python driver's stderr into its stdout (see spark-submit.sh)
    merged = subprocess.CompletedProcess(result.args, result.returncode, "", result.stdout)
    _assert_one_line(
        merged,
        "error: Spark ran out of memory in the driver",
        "java.lang.OutOfMemoryError",
        "in a task of stage",
        "--driver-memory",
    )
    assert "SparkUncaughtExceptionHandler" not in log.read_text()


WEDGED_AFTER_OUT_OF_MEMORY = """\
from ferry.cli import exit_process, run
from ferry.session import build_session


def main(argv):
    spark = build_session("ferry-wedged")
    try:  # more than the whole heap: an OutOfMemoryError at once, the JVM itself unharmed
        spark._jvm.java.nio.ByteBuffer.allocate(1_500_000_000)
    except Exception:
        pass
    # as a JVM whose own thread died of the error leaves the driver: waiting for an answer
    spark._jvm.java.lang.Thread.sleep(600_000)
    return 0


if __name__ == "__main__":
    exit_process(run(main))
"""


def test_a_driver_left_waiting_after_out_of_memory_ends_in_one_line(tmp_path):
    """The driver JVM ran out of memory and the run is still waiting on it: the run ends after
    $FERRY_OOM_GRACE_S with the one line and exit code 1, not when a scheduler kills it. Run by
    the very command spark-submit.sh builds (its OnOutOfMemoryError marker, its environment),
    with this script in the job's place."""
    script = tmp_path / "wedged.py"
    script.write_text(WEDGED_AFTER_OUT_OF_MEMORY)
    config = tmp_path / "job.yaml"
    config.write_text("")
    env = {**os.environ, "FERRY_LOG_DIR": str(tmp_path / "logs"), "FERRY_OOM_GRACE_S": "3"}
    printed = subprocess.run(
        [str(ROOT / "spark-submit.sh"), "--driver-memory", "512m", "--print-command",
         "migrate", "--config", str(config)],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    ).stdout.strip()  # fmt: skip
    job = f"{ROOT / 'jobs' / 'migrate.py'} --config {config}"
    assert printed.endswith(job) and "OnOutOfMemoryError" in printed, printed
    marker = next(w for w in printed.split() if w.startswith("FERRY_OOM_MARKER=")).split("=")[1]
    (tmp_path / "logs").mkdir()

    result = subprocess.run(
        ["bash", "-c", printed[: -len(job)] + str(script)],
        capture_output=True, text=True, timeout=240, check=False, cwd=ROOT, env=env,
    )  # fmt: skip

    # spark-submit merges the Python driver's stderr into its stdout (see spark-submit.sh)
    merged = subprocess.CompletedProcess(result.args, result.returncode, "", result.stdout)
    _assert_one_line(
        merged,
        "error: Spark ran out of memory in the driver (java.lang.OutOfMemoryError",
        "its JVM stopped answering for 3 s",
        "--driver-memory",
    )
    assert not os.path.exists(marker)

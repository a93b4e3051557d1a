"""Spark failures end in one line naming the cause and what to change (ferry.cli,
ferry.spark_failures): read from the text Py4J carries out of the JVM, here written out as
Spark 4 words it, without a JVM."""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JError, Py4JNetworkError

from ferry.cli import EXIT_INCOMPLETE, error_line, run
from ferry.errors import FerryError
from ferry.spark_failures import spark_failure

CALL = "An error occurred while calling o58.collectToPython.\n: "
ABORTED = "org.apache.spark.SparkException: Job aborted due to stage failure: "
STACK = "\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x.scala:1)"


def java(text: str) -> Py4JError:
    """What a Py4JJavaError says (its class lives in py4j.protocol, as this one's does)."""
    return Py4JError(CALL + text + STACK + "\n\nDriver stacktrace:" + STACK)


def lost_task(stage: str, executor: str, cause: str) -> Py4JError:
    return java(
        f"{ABORTED}Task 1 in stage {stage} failed 1 times, most recent failure: Lost task "
        f"1.0 in stage {stage} (TID 7) (192.0.2.2 executor {executor}): {cause}"
    )


@pytest.fixture(autouse=True)
def no_log_file(monkeypatch):
    monkeypatch.delenv("FERRY_LOG_FILE", raising=False)


def test_a_task_out_of_memory_on_a_local_master_is_the_drivers():
    line = spark_failure(lost_task("3.0", "driver", "java.lang.OutOfMemoryError: Java heap space"))
    assert line == (
        "Spark ran out of memory in the driver (java.lang.OutOfMemoryError: Java heap space, "
        "in a task of stage 3.0): raise spark-submit.sh's --driver-memory (Spark's default: "
        "1g), or select fewer groups (--group, or groups.include in the config)"
    )


def test_a_task_out_of_memory_on_a_cluster_is_its_executors():
    line = spark_failure(lost_task("7.0", "2", "java.lang.OutOfMemoryError: Java heap space"))
    assert line is not None
    assert line.startswith("Spark ran out of memory in executor 2 (java.lang.OutOfMemoryError")
    assert "in a task of stage 7.0" in line and "--executor-memory" in line
    assert "--driver-memory" not in line and "--group" in line


def test_an_executor_killed_over_its_memory_limit():
    line = spark_failure(
        lost_task(
            "4.0",
            "3",
            "ExecutorLostFailure (executor 3 exited caused by one of the running tasks) Reason: "
            "Container killed by YARN for exceeding physical memory limits. 5.5 GB of 5.5 GB "
            "physical memory used.",
        )
    )
    assert line is not None
    assert line.startswith("Spark ran out of memory in executor 3 (Container killed by YARN")
    assert "--executor-memory" in line and "spark.executor.memoryOverhead" in line


def test_a_lost_executor_and_lost_shuffle_data():
    lost = spark_failure(
        lost_task(
            "2.0",
            "5",
            "ExecutorLostFailure (executor 5 exited unrelated to the running tasks) Reason: "
            "Remote RPC client disassociated.",
        )
    )
    assert lost is not None
    assert lost.startswith("Spark lost an executor in stage 2.0 (ExecutorLostFailure (executor 5")
    assert "--executor-memory" in lost
    fetch = spark_failure(
        lost_task(
            "6.1",
            "1",
            "FetchFailed(BlockManagerId(4, 10.0.0.9, 7337, None), shuffleId=2, mapIndex=0, "
            "mapId=11, reduceId=3, message=\norg.apache.spark.shuffle.FetchFailedException",
        )
    )
    assert fetch is not None
    assert fetch.startswith("Spark lost shuffle data in stage 6.1 (FetchFailed")


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (
            f"{ABORTED}Task serialization failed: java.lang.OutOfMemoryError: Java heap space",
            "java.lang.OutOfMemoryError: Java heap space, serializing a task",
        ),
        (
            "org.apache.spark.SparkException: [NOT_ENOUGH_MEMORY_TO_BUILD_AND_BROADCAST] Not "
            "enough memory to build and broadcast the table to all worker nodes. As a "
            "workaround, you can either disable broadcast ...",
            "Not enough memory to build and broadcast the table",
        ),
        ("java.lang.OutOfMemoryError: Java heap space", "java.lang.OutOfMemoryError: Java heap"),
    ],
)
def test_out_of_memory_outside_a_task_is_the_drivers(text, cause):
    line = spark_failure(java(text))
    assert line is not None
    assert line.startswith(f"Spark ran out of memory in the driver ({cause}")
    assert "--driver-memory" in line and "--executor-memory" not in line


def test_a_driver_below_sparks_minimum():
    line = spark_failure(
        Py4JError(
            "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
            ": org.apache.spark.SparkIllegalArgumentException: [INVALID_DRIVER_MEMORY] System "
            "memory 209715200 must be at least 471859200. Please increase heap size using the "
            '--driver-memory option or "spark.driver.memory" in Spark configuration.'
        )
    )
    assert line == (
        "Spark refused its driver memory (System memory 209715200 must be at least 471859200 "
        "bytes): raise spark-submit.sh's --driver-memory (Spark's default: 1g)"
    )


def test_a_driver_jvm_that_went_away(tmp_path, monkeypatch):
    gone = Py4JError("An error occurred while calling o42.count")
    gone.__cause__ = Py4JNetworkError("Answer from Java side is empty")
    line = spark_failure(gone)
    assert line is not None
    assert line.startswith("Spark's driver JVM stopped during the run (why: its log file)")
    assert "--driver-memory" in line
    # Spark logs what ended it before the JVM exits
    log = tmp_path / "run.log"
    log.write_text(
        "ERROR SparkUncaughtExceptionHandler: Uncaught exception in thread Thread[Executor task "
        "launch worker for task 1.0 in stage 0.0 (TID 1),5,main]\n"
        "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/x.y(z.java:1)\n"
    )
    monkeypatch.setenv("FERRY_LOG_FILE", str(log))
    assert spark_failure(gone) == (
        "Spark's driver ran out of memory and stopped (java.lang.OutOfMemoryError: Java heap "
        "space): raise spark-submit.sh's --driver-memory (Spark's default: 1g), or select "
        "fewer groups (--group, or groups.include in the config)"
    )
    cancelled = java(f"{ABORTED}Job 3 cancelled because SparkContext was shut down")
    assert spark_failure(cancelled) == spark_failure(gone)


def test_fernys_own_error_from_a_task_and_other_task_failures():
    ours = lost_task(
        "1.0",
        "driver",
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "ferry.kafka.reader.KafkaReadError: destination: timed out after 2000 ms reading x[0]",
    )
    assert spark_failure(ours) is None
    assert error_line(ours) == "destination: timed out after 2000 ms reading x[0]"
    other = lost_task("1.0", "4", "java.lang.ArithmeticException: / by zero")
    assert error_line(other) == (
        "a Spark task failed in stage 1.0 on executor 4: java.lang.ArithmeticException: / by zero"
    )


def test_only_failures_out_of_spark_are_read_as_spark_failures():
    plain = RuntimeError("java.lang.OutOfMemoryError: Java heap space")
    assert spark_failure(plain) is None
    assert error_line(plain) == "java.lang.OutOfMemoryError: Java heap space"


def test_ferrys_error_about_a_spark_failure_keeps_its_words_first():
    ledger = FerryError("cannot append to ledger /l: An error occurred while calling o9.save.")
    ledger.__cause__ = java("java.lang.OutOfMemoryError: Java heap space")
    line = error_line(ledger)
    assert line.startswith(
        "cannot append to ledger /l: An error occurred while calling o9.save.; "
        "Spark ran out of memory in the driver (java.lang.OutOfMemoryError"
    )


def test_run_ends_a_spark_failure_in_one_line_and_exit_1(capsys):
    def main(argv: list[str]) -> int:
        raise lost_task("0.0", "driver", "java.lang.OutOfMemoryError: Java heap space")

    assert run(main, []) == EXIT_INCOMPLETE
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("error: Spark ran out of memory in the driver"), line


def test_a_write_not_in_the_ledger_prints_the_offsets_to_restore_before_its_one_line(capsys):
    from ferry.write.commit import OutcomeNotRecorded, WriteOutcome

    written = WriteOutcome("g1", "COMMITTED", True, previous={("t", 0): 5, ("t", 1): 7})
    unset = WriteOutcome("g2", "COMMITTED", True)

    def main(argv: list[str]) -> int:
        raise OutcomeNotRecorded("ledger append failed at /x: disk full", [written, unset])

    assert run(main, []) == EXIT_INCOMPLETE
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0].startswith("written, but not in the ledger;"), lines
    assert lines[1:4] == ["group,topic,partition,offset", "g1,t,0,5", "g1,t,1,7"]
    assert "g2: delete to undo" in lines[4]
    assert lines[-1] == "error: ledger append failed at /x: disk full"
    assert sum(line.startswith("error:") for line in lines) == 1


@pytest.mark.parametrize("has_log_file", [True, False])
def test_a_library_s_logged_traceback_goes_to_the_log_file_not_the_console(
    tmp_path, monkeypatch, capsys, has_log_file
):
    """py4j logs "Exception while sending command." with a traceback on the root logger when
    Spark's JVM dies under a call (a driver out of memory): it goes to the run's log file, and
    the console keeps the run's one error line."""
    import logging

    from ferry.cli import log_libraries_to_file

    log_file = tmp_path / "run.log"
    if has_log_file:
        monkeypatch.setenv("FERRY_LOG_FILE", str(log_file))
    else:
        monkeypatch.delenv("FERRY_LOG_FILE", raising=False)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    log_libraries_to_file()
    try:
        raise Py4JNetworkError("Answer from Java side is empty")
    except Py4JNetworkError:
        logging.exception("Exception while sending command.")
    for handler in root.handlers:
        handler.flush()
    assert capsys.readouterr().err == ""
    if has_log_file:
        text = log_file.read_text()
        assert "Exception while sending command." in text and "Traceback" in text
    else:
        assert not log_file.exists()

"""The console filter spark-submit.sh puts on the JVM's stderr (ferry.console): what reaches the
console, what goes to the run's log file, and that nothing waits for more input."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

from ferry.console import ConsoleFilter

LIB = Path(__file__).resolve().parents[2] / "lib"

IVY = b"""\
:: loading settings :: url = jar:file:/x/ivy-2.5.3.jar!/org/apache/ivy/core/settings/ivysettings.xml
Ivy Default Cache set to: /root/.ivy2.5.2/cache
The jars for the packages stored in: /root/.ivy2.5.2/jars
io.delta#delta-spark_4.2_2.13 added as a dependency
:: resolving dependencies :: org.apache.spark#spark-submit-parent-a9ab;1.0
\tconfs: [default]
\tfound io.delta#delta-spark_4.2_2.13;4.4.0 in central
You probably access the destination server through a proxy server that is not well configured.
downloading https://repo1.maven.org/maven2/io/delta/delta-storage/4.4.0/delta-storage-4.4.0.jar ...
\t[SUCCESSFUL ] io.delta#delta-storage;4.4.0!delta-storage.jar (83ms)
:: resolution report :: resolve 11645ms :: artifacts dl 10300ms
\t:: modules in use:
\t---------------------------------------------------------------------
\t|                  |            modules            ||   artifacts   |
\t|      default     |   37  |   33  |   33  |   4   ||   33  |   33  |

:: problems summary ::
:::: WARNINGS
\tHost repos.spark-packages.org not found. url=https://repos.spark-packages.org/x.jar

:: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS
:: retrieving :: org.apache.spark#spark-submit-parent-a9ab
\tconfs: [default]
\t33 artifacts copied, 0 already retrieved (87061kB/239ms)
"""


def routed(data: bytes, chunk: int = 7) -> tuple[bytes, bytes]:
    """Console and log bytes for `data` fed in small chunks (lines cut anywhere)."""
    filt = ConsoleFilter("/var/log/run.log")
    console, log = b"", b""
    for i in range(0, len(data), chunk):
        c, lg = filt.feed(data[i : i + chunk])
        console, log = console + c, log + lg
    c, lg = filt.finish()
    return console + c, log + lg


def test_ivys_report_goes_to_the_log_and_the_jobs_lines_to_the_console():
    job = b"WARNING: Using incubator modules: jdk.incubator.vector\n"
    after = b"[   0.0s] discovering groups\nerror: cannot read config file x.yaml\n"
    console, log = routed(job + IVY + after)
    assert console == job + after
    assert log == IVY


def test_stack_traces_go_to_the_log_and_a_failed_start_is_one_error_line():
    trace = (
        b'Exception in thread "Thread-4" java.lang.OutOfMemoryError: Java heap space\n'
        b"\tat py4j.ClientServerConnection.run(ClientServerConnection.java:106)\n"
        b"Caused by: java.io.IOException: x\n\t... 3 more\n"
    )
    console, log = routed(b"[   1.0s] source: reading\n" + trace + b"error: Spark's driver\n")
    assert console == b"[   1.0s] source: reading\nerror: Spark's driver\n"
    assert log == trace

    unresolved = (
        b'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: '
        b"org.example#nothing;9.9: not found]\n"
        b"\tat org.apache.spark.util.MavenUtils$.resolveMavenCoordinates(MavenUtils.scala:1)\n"
    )
    console, log = routed(IVY.split(b":: retrieving")[0] + unresolved)
    assert console == (
        b"error: spark-submit could not start the job: [unresolved dependency: "
        b"org.example#nothing;9.9: not found] (details: /var/log/run.log)\n"
    )
    assert unresolved in log
    # after the job's own error line, the JVM's main thread dying is the log's
    console, log = routed(b"error: Spark's driver JVM stopped\n" + unresolved)
    assert console == b"error: Spark's driver JVM stopped\n" and unresolved in log


def test_the_jvms_out_of_memory_report_goes_to_the_log():
    report = (
        b"#\n# java.lang.OutOfMemoryError: Java heap space\n"
        b'# -XX:OnOutOfMemoryError="touch /tmp/ferry-oom-31654"\n'
        b'#   Executing /bin/sh -c "touch /tmp/ferry-oom-31654"...\n'
    )
    before, after = b"[   1.0s] source: reading\n", b"error: Spark ran out of memory\n"
    console, log = routed(before + report + after)
    assert console == before + after
    assert log == report
    # a bare `#` of anything else (a crash banner) reaches the console, the last line too
    crash = b"#\n# A fatal error has been detected by the Java Runtime Environment:\n#\n"
    assert routed(crash) == (crash, b"")


def test_a_last_line_without_its_newline_still_arrives():
    console, _ = routed(b"[   2.0s] done\nerror: the end")
    assert console == b"[   2.0s] done\nerror: the end"


def test_each_line_is_passed_on_before_the_next_is_written(tmp_path):
    """The filter as spark-submit.sh runs it: a line written to its pipe comes out while the
    writer is still waiting to write the next (mawk, Debian's awk, held both until the end)."""
    env = {**os.environ, "PYTHONPATH": str(LIB)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferry.console", str(tmp_path / "run.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0,
    )  # fmt: skip
    try:
        for i in range(3):
            proc.stdin.write(f"[{i:6.1f}s] stage {i}\n".encode())  # type: ignore[union-attr]
            # (a generous wait: a filter that passes lines on does so in milliseconds, one
            # that holds them never does while the writer waits)
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            assert ready, f"line {i} was held back"
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line == f"[{i:6.1f}s] stage {i}\n".encode()
        proc.stdin.close()  # type: ignore[union-attr]
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()

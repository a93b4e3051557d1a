"""`spark-submit.sh` as users run it: usage errors, the commands it prints for YARN and
Kubernetes, jobs started together, and a real job through spark-submit with the library
shipped as a zip, the user's settings and Spark's logging in a file."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import textwrap
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry.testing.produce import commit_offsets, create_topics

from .jobrunner import ROOT

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "spark-submit.sh"


ENV_PY = "./environment/bin/python"


def submit(*args: str, timeout: int = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **env},
    )  # fmt: skip


def test_usage_lists_the_jobs_and_exits_2():
    for args in ((), ("no-such-job",), ("--master",)):
        result = submit(*args)
        assert result.returncode == 2, args
        assert "jobs: decode-offsets groups lag-snapshot lag-status migrate" in result.stderr
    for args, message in (
        (("no-such-job",), "unknown job 'no-such-job'"),
        (("--master",), "--master needs a value"),
        (("--bogus", "x", "migrate"), "unknown option --bogus"),
        (("--deploy-mode", "sideways", "migrate"), "--deploy-mode is client or cluster"),
        (("--master", "spark://h:7077", "--deploy-mode", "cluster", "migrate"), "standalone"),
    ):
        result = submit(*args)
        assert result.returncode == 2, args
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and message in line, args


@dataclass
class Printed:
    cwd: str | None
    env: dict[str, str]
    confs: dict[str, str]
    argv: list[str]

    def option(self, name: str) -> str | None:
        return self.argv[self.argv.index(name) + 1] if name in self.argv else None


def printed(*args: str) -> Printed:
    """The command `--print-command` prints, taken apart."""
    result = submit("--print-command", *args)
    assert result.returncode == 0, result.stderr
    words = shlex.split(result.stdout)
    cwd = None
    if words[0] == "cd":
        cwd, words = words[1], words[3:]
    assert words[0] == "env"
    env_words = [w for w in words[1:] if re.match(r"^[A-Z_]+=", w)]
    argv = words[1 + len(env_words) :]
    confs = dict(v.split("=", 1) for k, v in zip(argv, argv[1:], strict=False) if k == "--conf")
    return Printed(cwd, dict(w.split("=", 1) for w in env_words), confs, argv)


def test_yarn_and_kubernetes_commands_ship_the_environment():
    archive = f"{ROOT}/build/ferry-env.tar.gz#environment"
    for master in ("yarn", "k8s://https://kube:6443"):
        client = printed("--master", master, "migrate", "--config", "m.yaml")
        assert client.option("--master") == master and client.option("--deploy-mode") == "client"
        assert client.option("--archives") == archive
        assert client.confs["spark.pyspark.python"] == ENV_PY
        # the driver stays on this machine's virtualenv; its own Python workers (data source
        # planning) find ./environment in the directory the driver JVM runs in
        assert client.confs["spark.pyspark.driver.python"] == f"{ROOT}/build/driver-python"
        assert client.env["FERRY_DRIVER_PYTHON"] == f"{ROOT}/.venv/bin/python"
        assert client.cwd == f"{ROOT}/build/client"
        assert client.argv[-3:] == [f"{ROOT}/jobs/migrate.py", "--config", "m.yaml"]

        cluster = printed("--master", master, "--deploy-mode", "cluster", "--num-executors",
                          "4", "--archives", "extra.zip#x", "migrate")  # fmt: skip
        assert cluster.option("--deploy-mode") == "cluster" and cluster.cwd is None
        assert cluster.option("--archives") == f"{archive},extra.zip#x"
        assert cluster.option("--num-executors") == "4"
        assert cluster.confs["spark.pyspark.python"] == ENV_PY
        assert "spark.pyspark.driver.python" not in cluster.confs
        driver_env = (
            "spark.yarn.appMasterEnv.PYSPARK_PYTHON"
            if master == "yarn"
            else "spark.kubernetes.driverEnv.PYSPARK_PYTHON"
        )
        assert cluster.confs[driver_env] == ENV_PY
        # nothing names an interpreter that exists only on this machine
        assert ".venv" not in " ".join(cluster.confs.values())
        assert not any(k.startswith("PYSPARK") for k in cluster.env)


def test_an_image_with_the_environment_ships_none_and_user_settings_win():
    image_python = "/opt/ferry/env/bin/python"
    for args in (("--no-ship-env", "--conf", f"spark.pyspark.python={image_python}"),
                 ("--conf", f"spark.pyspark.python={image_python}")):  # fmt: skip
        command = printed("--master", "k8s://https://kube:6443", "--deploy-mode", "cluster",
                          *args, "migrate")  # fmt: skip
        assert command.option("--archives") is None
        assert command.confs["spark.pyspark.python"] == image_python
    user = printed("--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=3", "--conf",
                   "spark.ui.enabled=true", "--name", "mine", "groups", "list")  # fmt: skip
    assert user.confs["spark.sql.shuffle.partitions"] == "3"
    assert user.confs["spark.ui.enabled"] == "true"  # the last --conf wins in spark-submit
    assert user.argv[user.argv.index("mine") - 1] == "--name"
    assert user.argv.index("mine") > user.argv.index("ferry-groups")
    assert user.option("--archives") is None and user.cwd is None
    # local workers' stderr goes to the run's log file; a cluster's executors keep pyspark's own
    assert user.confs["spark.python.daemon.module"] == "ferry.worker_daemon"
    assert user.env["PYTHONPATH"].split(":")[0] == f"{ROOT}/lib"
    assert "spark.python.daemon.module" not in command.confs
    assert "spark.python.daemon.module" not in printed("groups", "list", "--verbose").confs


def test_jobs_started_together_after_a_library_change_all_start():
    lib_zip = ROOT / "build" / "ferry-lib.zip"
    changed = ROOT / "lib" / "ferry" / "__init__.py"
    future = time.time() + 2  # newer than any zip built before, whatever the clock's resolution
    os.utime(changed, (future, future))
    jobs = [
        subprocess.Popen([str(SCRIPT), "--print-command", "groups", "list"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        for _ in range(8)
    ]
    outcomes = [(job.wait(timeout=120), job.stderr.read()) for job in jobs]  # type: ignore[union-attr]
    for job in jobs:
        job.stdout.close()  # type: ignore[union-attr]
        job.stderr.close()  # type: ignore[union-attr]
    assert [code for code, _ in outcomes] == [0] * len(jobs), outcomes
    with zipfile.ZipFile(lib_zip) as zf:
        assert zf.testzip() is None
        assert zf.read("ferry/__init__.py") == changed.read_bytes()
        assert "ferry/session.py" in zf.namelist()
    assert not list(lib_zip.parent.glob(".ferry-lib.zip.*")), "temporary files left behind"


def test_a_job_runs_through_spark_submit(cluster, unique, tmp_path):
    topic, group = f"{unique}-t", f"{unique}-g"
    create_topics(cluster.config, {topic: 2})
    commit_offsets(cluster.config, group, {(topic, 0): 0, (topic, 1): 0})
    config = tmp_path / "groups.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: {cluster.bootstrap}
            """
        )
    )
    result = submit("--master", "local[1]", "groups", "list", "--config", str(config),
                    "--group", group, "-o", "json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "group": group,
            "state": "EMPTY",
            "protocol_type": "consumer",
            "members": 0,
            "topics": 1,
            "partitions": 2,
        }
    ]
    assert "Traceback" not in result.stderr and "INFO" not in result.stderr

    # spark-submit merges a Python driver's stderr into stdout; spark-submit.sh keeps progress
    # on stderr, so `-o json` output stays machine-readable. The user's settings are the ones
    # the session runs with, and Spark's logging goes to the run's own file.
    events, logs = tmp_path / "events", tmp_path / "logs"
    events.mkdir()
    described = submit("--conf", "spark.sql.shuffle.partitions=3",
                       "--conf", "spark.eventLog.enabled=true",
                       "--conf", "spark.eventLog.compress=false",
                       "--conf", f"spark.eventLog.dir=file://{events}",
                       "groups", "describe", "--config", str(config), "--group", group,
                       "-o", "json", FERRY_LOG_DIR=str(logs))  # fmt: skip
    assert described.returncode == 0, described.stderr
    [answer] = json.loads(described.stdout)
    assert answer["group"] == group and answer["lag"] == 0
    assert "describing 1 groups" in described.stderr
    assert not re.search(r"\b(WARN|INFO)\b", described.stderr), described.stderr
    [environment] = [
        json.loads(line)
        for event_log in events.rglob("*")
        if event_log.is_file()
        for line in event_log.read_text().splitlines()
        if '"SparkListenerEnvironmentUpdate"' in line
    ]
    properties = dict(environment["Spark Properties"])
    assert properties["spark.sql.shuffle.partitions"] == "3"
    assert properties["spark.master"] == "local[*]"
    [log_file] = logs.iterdir()
    assert re.fullmatch(r"ferry-groups-\d{8}T\d{6}Z-\d+\.log", log_file.name), log_file.name

    bad = submit("groups", "list", "--config", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot read config file"), bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_direct_session_logs_spark_to_the_file_it_names(spark):
    """Tests and notebooks build their session without spark-submit.sh: Spark's logging goes to
    the file build_session puts in FERRY_LOG_FILE, where cli.py names it."""
    log_file = Path(os.environ["FERRY_LOG_FILE"])
    marker = f"ferry-log-marker-{os.getpid()}-{time.time_ns()}"
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.LogManager.getLogger("ferry.test").warn(marker)
    assert marker in log_file.read_text(errors="replace")

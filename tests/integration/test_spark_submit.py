"""`spark-submit.sh` as users run it: usage errors, the commands it prints for YARN and
Kubernetes, jobs started together, and a real job through spark-submit with the library
shipped as a zip, the user's settings and Spark's logging in a file."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import textwrap
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
import yaml

from ferry.testing.produce import commit_offsets, create_topics

from .jobrunner import ROOT

pytestmark = pytest.mark.integration

SCRIPT = ROOT / "spark-submit.sh"


ENV_PY = "./environment/bin/python"


def submit(*args: str, timeout: int = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, **env}, cwd=ROOT,
    )  # fmt: skip


def test_usage_lists_the_jobs_and_exits_2():
    for args in ((), ("no-such-job",), ("--master",)):
        result = submit(*args)
        assert result.returncode == 2, args
        assert "jobs: audit decode-offsets groups lag-snapshot lag-status migrate" in result.stderr
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
    for master in ("yarn", "k8s://https://kube:6443"):
        # YARN: the copy named by the archive's content on the cluster's filesystem
        # (lib/ferry/packaging.py publish), uploaded by a run only when missing
        archive = (
            re.escape(f"{ROOT}/build/ferry-env.tar.gz#environment")
            if master != "yarn"
            # before `make package` (a fresh clone's `make test`) the name says it is unbuilt
            else r"(hdfs://[^/]+)?/user/[^/]+/\.ferry/env/ferry-env-%s\.tar\.gz#environment"
            % ("[0-9a-f]{64}" if (ROOT / "build" / "ferry-env.tar.gz").is_file() else "unbuilt")
        )
        client = printed("--master", master, "migrate", "--config", "m.yaml")
        assert client.option("--master") == master and client.option("--deploy-mode") == "client"
        assert re.fullmatch(archive, client.option("--archives") or ""), client.argv
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
        assert re.fullmatch(f"{archive},extra\\.zip#x", cluster.option("--archives") or "")
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


@pytest.fixture
def secured(tmp_path) -> dict[str, Path]:
    """A config whose clusters name a CA, a client certificate and key (one through ${VAR}),
    a file only the nodes have, and a `groups reset --from-file` CSV, all in tmp_path."""
    certs = tmp_path / "certs"
    certs.mkdir()
    out = {n: certs / n for n in ("ca.pem", "client.pem", "client.key")}
    for path in out.values():
        path.write_text(f"not really {path.name}\n")
    out["csv"] = tmp_path / "plan.csv"
    out["csv"].write_text("g1,orders,0,5\n")
    out["config"] = tmp_path / "groups.yaml"
    out["config"].write_text(
        textwrap.dedent(
            f"""\
            cluster:
              bootstrap.servers: ${{FERRY_TEST_BOOTSTRAP}}
              security.protocol: SSL
              ssl.ca.location: {out["ca.pem"]}
              ssl.certificate.location: {out["client.pem"]}
              ssl.key.location: ${{FERRY_TEST_KEY}}
              ssl.key.password: ${{FERRY_TEST_KEY_PASSWORD}}
              ssl.crl.location: /etc/only-on-the-nodes/crl.pem
            ledger:
              path: s3a://bucket/ledger
            """
        )
    )
    return out


SECURED_ENV = {"FERRY_TEST_BOOTSTRAP": "kafka:9093", "FERRY_TEST_KEY_PASSWORD": "hunter2"}


def submit_env(secured) -> dict[str, str]:  # noqa: ANN001
    return {**SECURED_ENV, "FERRY_TEST_KEY": str(secured["client.key"])}


def printed_with(env: dict[str, str], *args: str) -> Printed:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return printed(*args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def resolved_config(job_argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[dict, str]:
    """The config the job itself resolves from these arguments in `cwd` (`--print-config`)."""
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), *job_argv, "--print-config"],
        capture_output=True, text=True, cwd=cwd, env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout), result.stdout


def localize(files: str, into: Path) -> None:
    """What YARN and Kubernetes do with --files: each file in the working directory of the
    driver (cluster mode) and of every executor, under its name (or #alias)."""
    into.mkdir()
    for entry in files.split(","):
        path, _, alias = entry.partition("#")
        if not path.startswith(("hdfs:", "s3a:")):
            shutil.copy(path, into / (alias or Path(path).name))


def test_cluster_mode_ships_the_config_its_files_and_the_csv(secured, tmp_path):
    extra = tmp_path / "lookup.json"
    extra.write_text("{}")
    for master in ("yarn", "k8s://https://kube:6443"):
        command = printed_with(
            submit_env(secured), "--master", master, "--deploy-mode", "cluster",
            "--files", f"{extra},hdfs://nn/shared/other.txt", "groups", "reset",
            "--config", str(secured["config"]), "--group", "g1",
            "--from-file", str(secured["csv"]), "--execute",
        )  # fmt: skip
        files = command.option("--files")
        names = [Path(f.partition("#")[0]).name for f in files.split(",")]
        assert sorted(names) == sorted(["groups.yaml", "plan.csv", "ca.pem", "client.pem",
                                        "client.key", "lookup.json", "other.txt"])  # fmt: skip
        assert f"{extra},hdfs://nn/shared/other.txt" in files  # the user's own, as given
        job = command.argv[command.argv.index(f"{ROOT}/jobs/groups.py") :]
        assert job[1:] == ["reset", "--config", "groups.yaml", "--group", "g1",
                           "--from-file", "plan.csv", "--execute"]  # fmt: skip
        assert "FERRY_SHIPPED_FILES" not in command.env  # the driver finds them where it runs

        # The driver, in the directory the cluster manager localized --files into:
        driver_dir = tmp_path / f"driver-{master.split(':')[0]}"
        localize(files, driver_dir)
        config, text = resolved_config(job, driver_dir, SECURED_ENV)  # no FERRY_TEST_KEY there
        cluster = config["cluster"]
        assert cluster["ssl.ca.location"] == "ca.pem" and (driver_dir / "ca.pem").is_file()
        assert cluster["ssl.certificate.location"] == "client.pem"
        assert cluster["ssl.key.location"] == "client.key"
        assert cluster["ssl.crl.location"] == "/etc/only-on-the-nodes/crl.pem"
        assert cluster["bootstrap.servers"] == "kafka:9093"
        assert cluster["ssl.key.password"] == "***" and "hunter2" not in text
        assert (driver_dir / "plan.csv").read_text() == secured["csv"].read_text()


def test_client_mode_ships_files_for_the_executors_and_tells_the_driver(secured, tmp_path):
    for master in ("yarn", "spark://spark-master:7077"):
        command = printed_with(
            submit_env(secured), "--master", master, "groups", "describe",
            "--config", str(secured["config"]), "--set", "cluster.client.id=me",
        )  # fmt: skip
        files = command.option("--files")
        assert sorted(Path(f).name for f in files.split(",")) == [
            "ca.pem", "client.key", "client.pem"
        ]  # fmt: skip
        job = command.argv[command.argv.index(f"{ROOT}/jobs/groups.py") :]
        staged = Path(job[3])
        assert job[2] == "--config" and staged.is_absolute() and staged != secured["config"]
        assert staged.parent.parent == ROOT / "build" / "ship"
        shipped = json.loads(command.env["FERRY_SHIPPED_FILES"])
        assert shipped == {n: str(secured[n]) for n in ("ca.pem", "client.pem", "client.key")}
        # The driver's resolved config names the shipped copies (what executors open) and says
        # which local file each opens on this driver.
        told = {**SECURED_ENV, "FERRY_SHIPPED_FILES": command.env["FERRY_SHIPPED_FILES"]}
        config, text = resolved_config(job, tmp_path, told)
        assert config["cluster"]["ssl.ca.location"] == "ca.pem"
        assert config["cluster"]["client.id"] == "me"
        assert f"# cluster.ssl.ca.location: ca.pem opens {secured['ca.pem']} on this driver" in (
            text
        )
    local = printed_with(submit_env(secured), "--master", "local[2]", "groups", "describe",
                         "--config", str(secured["config"]))  # fmt: skip
    assert local.option("--files") is None and "FERRY_SHIPPED_FILES" not in local.env
    assert local.argv[-2:] == ["--config", str(secured["config"])]


def cluster_doc_commands() -> list[list[str]]:
    """Every `./spark-submit.sh` command in docs/cluster.md ("Running on a cluster")."""
    text = (ROOT / "docs" / "cluster.md").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = (line.strip() for line in joined.splitlines())
    return [shlex.split(line)[1:] for line in lines if line.startswith("./spark-")]


def test_the_documented_cluster_commands_need_no_hand_edits():
    """Run as printed: a config that is a file here is shipped and named by its shipped name;
    one that is a path in the nodes' image is left as typed."""
    commands = [c for c in cluster_doc_commands() if "cluster" in c]
    assert len(commands) == 3, commands
    for args in commands:
        command = printed(*args)
        job = command.argv[command.argv.index(f"{ROOT}/jobs/migrate.py") + 1 :]
        config = args[args.index("--config") + 1]
        if (ROOT / config).is_file():
            assert job[job.index("--config") + 1] == "migrate.yaml", args
            assert command.option("--files").split(",") == [str(ROOT / config)], args
        else:
            assert job[job.index("--config") + 1] == config, args
            assert command.option("--files") is None, args


def test_two_files_shipped_under_one_name_are_an_error(secured, tmp_path):
    other = tmp_path / "ca.pem"
    other.write_text("another CA\n")
    result = submit("--print-command", "--master", "yarn", "--files", str(other),
                    "groups", "list", "--config", str(secured["config"]),
                    **submit_env(secured))  # fmt: skip
    assert result.returncode == 2
    [line] = [x for x in result.stderr.splitlines() if not x.startswith("note:")]
    assert line.startswith("error: ") and str(other) in line and str(secured["ca.pem"]) in line


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
        # what only tests and the demo use stays home
        assert not [n for n in zf.namelist() if n.startswith(("ferry/testing/", "ferry/demo"))]
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
            "protocol_type": "",  # offsets committed by an admin: a simple group
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


def test_a_result_file_is_written_whole_and_stale_ones_beside_it_are_removed(spark, tmp_path):
    """A cluster-mode driver writes its result through the JVM's Hadoop filesystem, and removes
    the result files beside it older than a day (left by a deletion cut short); a newer one,
    being read, and files that are not results stay."""
    from ferry import result

    results = tmp_path / "results"
    results.mkdir()
    day = 86400
    for name, age_s in (("ferry-migrate-a.json", 2 * day), ("ferry-audit-b.json", day - 600),
                        ("notes.json", 3 * day)):  # fmt: skip
        path = results / name
        path.write_text("{}")
        os.utime(path, (time.time() - age_s, time.time() - age_s))
    result._write(f"file://{results}/ferry-migrate-c.json", b'{"code": 75}')
    names = sorted(p.name for p in results.iterdir() if not p.name.startswith("."))
    assert names == ["ferry-audit-b.json", "ferry-migrate-c.json", "notes.json"]
    assert json.loads((results / "ferry-migrate-c.json").read_text()) == {"code": 75}


def test_a_direct_session_logs_spark_to_the_file_it_names(spark):
    """Tests and notebooks build their session without spark-submit.sh: Spark's logging goes to
    the file build_session puts in FERRY_LOG_FILE, where cli.py names it."""
    log_file = Path(os.environ["FERRY_LOG_FILE"])
    marker = f"ferry-log-marker-{os.getpid()}-{time.time_ns()}"
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.LogManager.getLogger("ferry.test").warn(marker)
    assert marker in log_file.read_text(errors="replace")


FAKE_SUBMIT = """#!/bin/sh
# Kubernetes' spark-submit as the submitting side sees it in cluster mode: the driver ran
# elsewhere; what it left is the result file named by its FERRY_RESULT (or nothing).
for arg in "$@"; do
  case "$arg" in
    spark.kubernetes.driverEnv.FERRY_RESULT=*) result="${arg#*=}" ;;
  esac
done
[ -z "$FAKE_RESULT" ] || printf '%s' "$FAKE_RESULT" > "${result#file://}"
echo "spark-submit's own line"
exit 1
"""


def test_kubernetes_cluster_mode_reports_the_jobs_result_from_a_shared_path(tmp_path):
    """What a scheduler sees in Kubernetes cluster mode is the job's: its output and exit code
    read back from the result file under the upload path (no Kubernetes here: spark-submit is a
    stand-in that leaves the file a driver pod would have written)."""
    shared = tmp_path / "shared"
    args = ("--master", "k8s://https://kube:6443", "--deploy-mode", "cluster", "--conf",
            f"spark.kubernetes.file.upload.path=file://{shared}", "lag-status")  # fmt: skip
    command = printed(*args)
    uri = command.confs["spark.kubernetes.driverEnv.FERRY_RESULT"]
    assert uri.startswith(f"file://{shared}/ferry-results/ferry-lag-status-") and uri.endswith(
        ".json"
    )
    assert command.confs["spark.kubernetes.driverEnv.FERRY_DEPLOY_MODE"] == "cluster"
    yarn = printed("--master", "yarn", "--deploy-mode", "cluster", "lag-status")
    assert yarn.confs["spark.yarn.appMasterEnv.FERRY_RESULT"].startswith("/user/")
    assert yarn.confs["spark.yarn.maxAppAttempts"] == "1"

    fake = tmp_path / "spark-submit"
    fake.write_text(FAKE_SUBMIT)
    fake.chmod(0o755)
    (shared / "ferry-results").mkdir(parents=True)
    env = {"FERRY_SPARK_SUBMIT": str(fake), "FERRY_LOG_DIR": str(tmp_path / "log")}
    for code in (0, 1, 2, 75):
        result = {"code": code, "stdout": f'[{{"code": {code}}}]\n', "stderr": f"line {code}\n"}
        run = submit("--no-ship-env", *args, FAKE_RESULT=json.dumps(result), **env)
        assert (run.returncode, run.stdout, run.stderr) == (
            code,
            result["stdout"],
            f"line {code}\n",
        )
    assert list((shared / "ferry-results").iterdir()) == []  # each read, then deleted
    [log] = [p for p in (tmp_path / "log").iterdir() if "spark-submit's own line" in p.read_text()][
        :1
    ]
    assert log.name.startswith("ferry-lag-status-")

    none = submit("--no-ship-env", *args, FAKE_RESULT="", **env)
    assert none.returncode == 1 and none.stdout == ""
    [line] = none.stderr.splitlines()
    assert line.startswith("error: the application ended without recording Ferry's result")


USER_PACKAGE = "org.jetbrains:annotations:26.0.2"  # one small jar on Maven Central, no deps
USER_CLASS = "org.jetbrains.annotations.NotNull"


def delta_coordinate() -> str:
    import importlib.metadata as md

    spark = ".".join(md.version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark}_2.13:{md.version('delta-spark')}"


def test_spark_submits_own_options_keep_their_meaning(tmp_path):
    """Options before the job are spark-submit's: --packages takes coordinates, joined with
    Ferry's Delta jars (--delta) wherever the user's list came from; --verbose and --supervise
    reach spark-submit; a job's own --verbose stays the job's."""
    delta = delta_coordinate()
    both = printed("--packages", USER_PACKAGE, "--delta", "groups", "list")
    assert both.option("--packages") == f"{USER_PACKAGE},{delta}"
    assert both.confs["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    alone = printed("--packages", f"{USER_PACKAGE},a.b:c:1", "groups", "list")
    assert alone.option("--packages") == f"{USER_PACKAGE},a.b:c:1"
    assert "spark.sql.extensions" not in alone.confs
    assert printed("--delta", "groups", "list").option("--packages") == delta
    # a spark.jars.packages of the user's, from --conf or a properties file, is kept
    conf = printed("--conf", f"spark.jars.packages={USER_PACKAGE}", "--delta", "groups", "list")
    assert conf.option("--packages") == f"{USER_PACKAGE},{delta}"
    properties = tmp_path / "mine.conf"
    properties.write_text(f"spark.jars.packages  {USER_PACKAGE}\n")
    from_file = printed("--properties-file", str(properties), "--delta", "groups", "list")
    assert from_file.option("--packages") == f"{USER_PACKAGE},{delta}"
    assert from_file.option("--properties-file") == str(properties)
    (tmp_path / "spark-defaults.conf").write_text(f"spark.jars.packages={USER_PACKAGE}\n")
    defaults = printed_with({"SPARK_CONF_DIR": str(tmp_path)}, "--delta", "groups", "list")
    assert defaults.option("--packages") == f"{USER_PACKAGE},{delta}"

    # Delta's dependencies that Spark ships newer are excluded (never loaded: Spark's come
    # first), joined to the user's exclusions; without --delta the user's pass as given
    spark_jars = {p.name for p in (Path(pyspark.__file__).parent / "jars").iterdir()}
    ours = printed("--delta", "groups", "list").option("--exclude-packages").split(",")
    assert "org.apache.hadoop:hadoop-client-runtime" in ours and "org.slf4j:slf4j-api" in ours
    assert all(any(j.startswith(c.split(":")[1] + "-") for j in spark_jars) for c in ours), ours
    assert not any(c.startswith("io.delta:") for c in ours)
    mine = printed("--exclude-packages", "a.b:c", "--delta", "groups", "list")
    assert mine.option("--exclude-packages").split(",") == ["a.b:c", *ours]
    assert mine.argv.count("--exclude-packages") == 1
    conf = printed("--conf", "spark.jars.excludes=a.b:c", "--delta", "groups", "list")
    assert conf.option("--exclude-packages").split(",") == ["a.b:c", *ours]
    plain = printed("--exclude-packages", "a.b:c", "groups", "list")
    assert plain.option("--exclude-packages") == "a.b:c"
    assert printed("groups", "list").option("--exclude-packages") is None

    flags = printed("--verbose", "--supervise", "groups", "list", "--verbose")
    job = flags.argv.index(f"{ROOT}/jobs/groups.py")
    assert {"--verbose", "--supervise"} <= set(flags.argv[:job])
    assert flags.argv[job:] == [f"{ROOT}/jobs/groups.py", "list", "--verbose"]
    assert "--verbose" in printed("-v", "groups", "list").argv

    # the old Delta switch, followed by the job: one line naming the new one
    old = submit("--packages", "migrate", "--config", "m.yaml")
    assert old.returncode == 2
    [line] = old.stderr.splitlines()
    assert line.startswith("error: --packages takes Maven coordinates") and "--delta" in line


def test_version_names_ferry_and_spark():
    import importlib.metadata as md

    result = submit("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"ferry {md.version('ferry')} (pyspark {md.version('pyspark')})\n"
    assert f"version {md.version('pyspark')}" in result.stderr  # spark-submit's own banner
    assert not re.search(r"\bWARN\b", result.stderr), result.stderr  # nor Spark's warnings


PROBE = """\
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
utils = spark.sparkContext._jvm.org.apache.spark.util.Utils
for name in sys.argv[1:]:
    try:
        utils.classForName(name, False, False)  # through Spark's loader, as the jobs load
        print("loaded", name)
    except Exception as exc:
        print("missing", name, type(exc).__name__)
"""


def test_packages_of_the_user_load_beside_ferrys_and_ivy_stays_off_the_console(tmp_path):
    """A real local run with a user's coordinate and Ferry's Delta jars: Ivy's resolution report
    goes to the run's log file, so a config error is the console's one line; and both jars'
    classes load in a driver started with the command spark-submit.sh builds."""
    logs = tmp_path / "log"
    args = ("--packages", USER_PACKAGE, "--delta", "groups", "list")
    bad = submit(*args, "--config", str(tmp_path / "missing.yaml"), FERRY_LOG_DIR=str(logs))
    assert bad.returncode == 2, bad.stderr
    errors = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot read config file"), bad.stderr
    assert not re.search(r"^(::|\t)|Ivy|artifacts", bad.stderr, re.M), bad.stderr
    [log] = logs.iterdir()
    assert "found org.jetbrains#annotations;26.0.2" in log.read_text()  # Ivy's report
    # a coordinate that does not resolve: spark-submit's failure in one line
    missing = submit("--packages", "org.example.ferry:nothing:9.9", "groups", "list",
                     FERRY_LOG_DIR=str(tmp_path / "log2"))  # fmt: skip
    assert missing.returncode == 1
    [line] = [x for x in missing.stderr.splitlines() if not x.startswith("WARNING: Using incub")]
    assert line.startswith(
        "error: spark-submit could not start the job: "
        "[unresolved dependency: org.example.ferry#nothing;9.9: not found] (details: "
    ), line

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    command = printed(*args)
    job = command.argv.index(f"{ROOT}/jobs/groups.py")
    run = subprocess.run(
        [*command.argv[:job], str(probe), USER_CLASS, "io.delta.sql.DeltaSparkSessionExtension"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **command.env}, cwd=command.cwd or ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-2:] == [
        f"loaded {USER_CLASS}",
        "loaded io.delta.sql.DeltaSparkSessionExtension",
    ], run.stdout

"""What a Spark Connect session needs that a classic one gets from its JVM.

A Connect session (`ferry --remote sc://...`, $SPARK_REMOTE, Databricks serverless and
standard access mode) has no JVM in this process: `spark.sparkContext` raises
JVM_ATTRIBUTE_NOT_SUPPORTED. So the job descriptions are job tags, the Delta jars are told by
the session's settings, the default parallelism is read from a plan, whether the session
caches is asked once (`can_cache`: Databricks serverless refuses `persist`), every setting is
read through `setting` (a server may refuse to say one), and a failure of the
server's Python workers to import Ferry or its Kafka client is said in one line
(`missing_module_line`): the data source and the Arrow functions run in the *server's*
Python workers (docs/connect.md).
"""

from __future__ import annotations

import re
import threading

from ferry.errors import FerryError, UsageError

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
# What the server's Python workers must import for Ferry's Spark work: Ferry's own modules
# (the data source, the Arrow functions) and what they import.
WORKER_MODULES = ("ferry", "confluent_kafka", "pyarrow", "pandas")


class SessionError(FerryError):
    """No session could be opened: the message says where (exit code 1)."""


def is_connect(spark: object) -> bool:
    """Whether `spark` is a Spark Connect session: no JVM in this process, `sparkContext`
    raises. Told by its class, without importing Connect's client (grpc) to ask."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def open_session(url: str, settings: dict[str, str]):  # noqa: ANN201 - a Connect SparkSession
    """A Spark Connect session at `url` with `settings` (session settings: they change nothing
    for the server's other sessions; those a session cannot set are skipped by PySpark).
    Spark's log level is the server's: $FERRY_SPARK_LOG is refused, not ignored."""
    import os

    if os.environ.get("FERRY_SPARK_LOG"):
        raise UsageError(
            "FERRY_SPARK_LOG cannot be applied through Spark Connect (the server's logging "
            "is its own); unset it"
        )
    try:
        import pyspark.sql.connect.session  # noqa: F401 - checks the client's dependencies
    except ImportError as exc:
        raise UsageError(
            f"--remote needs Spark Connect's client ({_first_line(exc)}); reinstall ferry"
        ) from exc
    from pyspark.sql import SparkSession

    _check_reachable(url)
    builder = SparkSession.builder.remote(url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
        spark.version  # noqa: B018 - the first call to the server: is it there
    except Exception as exc:  # noqa: BLE001 - grpc's connection errors, a bad URL alike
        raise SessionError(
            f"cannot open a Spark Connect session at {_redacted(url)}: {_first_line(exc)}"
        ) from exc
    return spark


# How long a server may take to accept a connection before the run says it cannot reach it.
REACH_TIMEOUT_S = 10.0
DEFAULT_PORT = 15002  # Spark Connect's


def _check_reachable(url: str) -> None:
    """One line at once for a server nobody answers at: the client itself retries an
    unavailable server with backoff for many minutes before it gives up."""
    import socket

    found = re.match(r"^sc://(\[[^\]]+\]|[^:/;]+)(?::(\d+))?", url)
    if found is None:
        raise UsageError(f"--remote {_redacted(url)} is not sc://HOST[:PORT][/;key=value...]")
    host, port = found.group(1).strip("[]"), int(found.group(2) or DEFAULT_PORT)
    try:
        socket.create_connection((host, port), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise SessionError(
            f"cannot reach the Spark Connect server at {host}:{port}: {exc.strerror or exc}"
        ) from exc


def _redacted(url: str) -> str:
    """`url` without its token (sc://host:port/;token=...)."""
    return re.sub(r"(token=)[^;]*", r"\1***", url)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


# Connect's tags are the calling thread's: each thread's tag in force, removed when replaced.
_tags = threading.local()


def tag_operations(spark, text: str) -> None:  # noqa: ANN001 - a Connect SparkSession
    """A Connect session's stand-in for a job description: the operations the calling thread
    starts from now on carry `text` as a job tag (Spark's UI lists a job's tags;
    `spark.interruptTag` stops them). A tag holds no comma; it replaces this thread's last."""
    tag = " ".join(text.replace(",", ";").split())[:200] or "ferry"
    try:
        old = getattr(_tags, "tag", None)
        if old == tag:
            return
        if old is not None:
            spark.removeTag(old)
        spark.addTag(tag)
        _tags.tag = tag
    except Exception:  # noqa: BLE001 - a description must never fail a run
        pass


def setting(spark, key: str, default: str | None = None) -> str | None:  # noqa: ANN001
    """A session setting, or `default` where it is unset or the server will not say (Databricks
    serverless answers only the settings it supports, and refuses the rest): a setting Ferry
    reads only informs it, and must never fail a run. Any session, classic or Connect."""
    try:
        value = spark.conf.get(key, default)
    except Exception:  # noqa: BLE001 - refused, unknown: the default
        return default
    return default if value is None else str(value)


def has_delta(spark) -> bool:  # noqa: ANN001 - a Connect SparkSession
    """Whether a Connect server writes Delta itself: its session extensions name Delta's, or
    it is Databricks' (Delta built in: a Databricks task's Python, which has
    $DATABRICKS_RUNTIME_VERSION, or a server with Databricks' cluster tags). Asked once per
    session; a setting the server refuses to say counts as unset."""
    import os

    known = getattr(spark, "_ferry_has_delta", None)
    if known is None:
        extensions = setting(spark, "spark.sql.extensions", "") or ""
        databricks = bool(os.environ.get("DATABRICKS_RUNTIME_VERSION")) or bool(
            setting(spark, "spark.databricks.clusterUsageTags.clusterId", "")
        )
        known = DELTA_EXTENSION in extensions or databricks
        spark._ferry_has_delta = known
    return bool(known)


def can_cache(spark) -> bool:  # noqa: ANN001 - a Connect SparkSession
    """Whether the server caches this session's DataFrames: asked once per session by caching
    an empty range and releasing it (two analysis round trips, no job). Databricks serverless
    refuses `persist` (NOT_SUPPORTED_WITH_SERVERLESS); its newest environments run the query
    at once instead, which for an empty range costs nothing."""
    known = getattr(spark, "_ferry_can_cache", None)
    if known is None:
        try:
            probe = spark.range(0)
            probe.persist()
            probe.unpersist()
            known = True
        except Exception:  # noqa: BLE001 - any refusal: run without caching
            known = False
        spark._ferry_can_cache = known
    return bool(known)


def parallelism(spark) -> int:  # noqa: ANN001 - a Connect SparkSession
    """The server's default parallelism, from a plan: the splits it gives a range that names
    none (leafNodeDefaultParallelism, the default parallelism unless set). One analysis
    round trip (no job), asked once per session."""
    known = getattr(spark, "_ferry_parallelism", None)
    if known is None:
        try:
            plan = spark.range(1)._explain_string(mode="simple")
        except Exception:  # noqa: BLE001 - a server that will not explain: one split
            plan = ""
        found = re.search(r"splits=(\d+)", plan)
        known = int(found.group(1)) if found else 1
        spark._ferry_parallelism = known
    return int(known)


_MISSING = re.compile(r"No module named '([\w.]+)'")


def missing_module_line(exc: BaseException) -> str | None:
    """One line for a Spark Python worker that could not import what Ferry runs there (the
    Kafka data source, the Arrow functions): the module, and where it must be installed.
    None for any other failure."""
    found = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and found is None:
        seen.add(id(current))
        text = str(current)
        if "PythonException" in type(current).__name__ or "Python worker" in text:
            found = _MISSING.search(text)
        current = current.__cause__ or current.__context__
    if found is None:
        return None
    module = found.group(1).split(".")[0]
    if module not in WORKER_MODULES:
        return None
    return (
        f"Spark's Python workers cannot import {module} (No module named '{module}'): Ferry "
        "and confluent-kafka must be installed where they run: on a Spark Connect server, "
        "its workers' Python (docs/connect.md)"
    )

"""The one place a SparkSession is built (`build_session`, or `start_session` to build it while
the job talks to Kafka); everything else receives `spark` as a parameter (and `local_df` to
turn the driver's own rows into DataFrames).

Under spark-submit (spark-submit.sh) the user's master, deploy mode and settings rule, and
Ferry only fills in what nobody set. Run directly (tests, notebooks, benches, the `ferry`
command) Ferry chooses the master (`local[*]` or $FERRY_MASTER) and keeps Spark's logging in a
file, as spark-submit.sh does. With $SPARK_REMOTE set (`ferry --remote sc://...`) the session
is a Spark Connect one: no JVM in this process, so everything here that would ask the JVM
(the log level, job descriptions, the Delta jars, the parallelism) asks the session instead
(`is_connect`, docs/connect.md).

Nothing here imports PySpark's classic half (`SparkContext`, Py4J) until a classic session is
built: the base install runs on a Connect-only client (`pyspark-client`, Databricks Connect).
What Spark a run needs is checked as the session is built (`ferry.runtime`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ferry import connect
from ferry.connect import is_connect
from ferry.runtime import (
    can_cache,
    check_client_version,
    check_server_version,
    require_classic,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

T = TypeVar("T")

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
LOG4J_PROPERTIES = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"

# Settings Ferry relies on wherever the user set nothing.
DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    # Spark starts one Python daemon per distinct worker environment. SQL Python tasks add
    # SPARK_SIMPLIFIED_TRACEBACK=1 to it, plain RDD tasks (createDataFrame of a local list runs
    # its rows through Python) do not, so a run started two daemons, each about a second on 2
    # cores. Given to every Python worker, the two share one.
    "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1",
    # A driver read's records reach Spark as an Arrow table (ferry.kafka.records). Under this
    # size (default 48 MiB) Spark makes it a local relation, rows inside the plan, which its
    # optimizer folds projections and filters into on the driver, row by row, for every query
    # that uses it, and which the 2,000-group bench's 640,000 records took out of memory.
    # Above it the batches become an RDD like any other scan: 40 groups' reads (8 MiB) took
    # 12.6 -> 11.4 s, and 2,000 groups' now fit the driver (docs/benchmarks.md). Small frames
    # (positions, plans) stay local relations.
    "spark.sql.execution.arrow.localRelationThreshold": str(1 << 20),
}
# Only for local masters: Ferry's many small partitions on one machine. On a cluster Spark's
# own defaults (200 shuffle partitions, coalesced by AQE; the UI) serve better.
LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # A local master's tasks run in the driver's own JVM, and Spark ends an executor's JVM
    # (exit code 52) when a task runs out of memory: the driver went with it, and the job
    # ended in a Py4J error and code 52. Checking no depth for fatal errors, the task fails,
    # the job is aborted naming the OutOfMemoryError, and the job says so (ferry.cli).
    "spark.executor.killOnFatalError.depth": "0",
}


# Settings the `ferry` command was given (--conf K=V): for the session it builds.
_requested_conf: dict[str, str] = {}


def request_settings(settings: dict[str, str]) -> None:
    """Settings for the session `build_session` will build (the `ferry` command's --conf):
    a local session's Spark settings, a Connect session's session settings."""
    _requested_conf.update(settings)


def remote_url() -> str | None:
    """The Spark Connect endpoint this run was pointed at ($SPARK_REMOTE, which `ferry
    --remote` sets), or None."""
    return os.environ.get("SPARK_REMOTE") or None


def build_session(app_name: str = "ferry") -> SparkSession:
    """Return the active session, or build one: under spark-submit from its settings, with
    $SPARK_REMOTE a Spark Connect session, run directly with Ferry's. $FERRY_SPARK_LOG sets
    Spark's log level (default: WARN, in the log file named by $FERRY_LOG_FILE)."""
    check_client_version()
    spark = SparkSession.getActiveSession()
    if spark is None and not _under_spark_submit() and remote_url():
        spark = _connect(remote_url() or "", app_name)
    if spark is None:
        if not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
            require_classic()
        if os.environ.get("FERRY_DEPLOY_MODE") == "cluster":
            # spark.submit.pyFiles names the library zip by its path on the submitting
            # machine; YARN already put the localized copy on this driver's path, so PySpark's
            # warning that it cannot add the original is noise on the user's console.
            warnings.filterwarnings("ignore", "Failed to add file", RuntimeWarning)
        if _under_spark_submit():
            builder = _submitted(app_name)
        elif os.environ.get("DATABRICKS_RUNTIME_VERSION"):
            # a Databricks job's own session (a classic cluster's, or serverless' Connect one)
            builder = SparkSession.builder
        else:
            builder = _direct(app_name)
        spark = builder.getOrCreate()
        level = os.environ.get("FERRY_SPARK_LOG")
        if level and not is_connect(spark):
            spark.sparkContext.setLogLevel(level)
    check_server_version(spark)
    _describe_session(spark)
    # The ferry-kafka data source is registered by its first read (ferry.kafka.source):
    # registering starts a Python worker that small runs, which read on the driver, skip.
    return spark


def start_session(app_name: str = "ferry") -> Callable[[], SparkSession]:
    """Start `build_session` in the background; the returned callable waits for it. Starting
    a SparkContext takes seconds that Kafka admin calls and driver reads do not need, so a job
    does both at once (its first Spark call waits for whatever is left)."""
    future = _in_background("ferry-session", _started, app_name)

    def wait() -> SparkSession:
        spark = future.result()
        _describe_session(spark)  # in the caller's thread, which starts the jobs
        return spark

    return wait


def _started(app_name: str) -> SparkSession:
    """`build_session`, then its SQL side warmed on a thread of its own (`_warm_up`), which
    the session's first callers do not wait for unless they need the same parts."""
    spark = build_session(app_name)
    _in_background("ferry-warm-up", _warm_up, spark)
    return spark


def _warm_up(spark: SparkSession) -> None:
    """A session's first DataFrame costs about a second of JVM work that every later one
    skips (Spark builds its SQL state, analyzer and Arrow conversion on first use: 1.1 s, then
    0.03 s). Made here on a tiny Arrow table, with a projection and a filter, it is paid while
    the driver still reads Kafka, not by the run's first real DataFrame (positions_bench,
    2,000 groups: 0.7 s a run; running a tiny join and aggregation too gained nothing). An
    error stays in the thread's future: the run's own calls meet and report it."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField

    schema = StructType([StructField("n", LongType(), False)])
    table = pa.table({"n": pa.array([0], pa.int64())})
    arrow_df(spark, table, schema).select((F.col("n") + 1).alias("n")).filter(F.col("n") > 0)


def cache_in_background(df: DataFrame) -> Callable[[], None]:
    """Persist `df` and fill its cache in a Spark job of its own, started now, while the
    driver goes on (Kafka reads, building the next query); the returned callable waits for
    that job and re-raises its error. A query planned after this call reads the cache, its
    tasks waiting for any block still being written, so the job's cost hides behind the
    driver's work instead of opening the next query (40 groups: about a second). Filled by
    Spark's no-op write, not a count: a count is two more stages (a partial and a final
    aggregate) on a cold JVM, and the step's query waited for them (2,000 groups: 0.7 s). The
    write selects no column: the cache is still built whole, but the scan after it (a job of
    its own under adaptive execution) reads only its row counts instead of decoding every
    column (10,000 groups: 0.63 s of task time, now 0.13 s). A session that cannot cache
    (`can_cache`) gets nothing to wait for: its queries plan `df` each time."""
    if not can_cache(df.sparkSession):
        return lambda: None
    df.persist()
    return in_background("ferry-cache", df.select().write.format("noop").mode("overwrite").save)


def in_background(name: str, fn: Callable[..., T], *args: object) -> Callable[[], T]:
    """`fn(*args)` started now on a thread of its own, its Spark jobs described as the
    caller's (when the session is up as it starts); the returned callable waits for its
    result and re-raises its error. For driver work that hands data to Spark (the JVM's half
    of it) while the caller reads Kafka."""
    description = _description

    def run() -> T:
        context = _active_context()
        if context is not None:
            _describe(context, description)
        elif _connect_session is not None:
            _tag(_connect_session, description)
        return fn(*args)

    return _in_background(name, run).result


def beside(work: Callable[[], object] | None, action: Callable[..., T], *args: object) -> T:
    """`action(*args)`, a Spark action the caller would wait for, run on a thread of its own
    while the caller does `work()` (driver work that does not need the action's result); then
    `action`'s result. The driver's Python is idle while the JVM plans and runs a query: work
    done then is off the run's path (10,000 groups: each group's positions, 0.8 s)."""
    if work is None:
        return action(*args)
    result = in_background("ferry-query", action, *args)
    work()
    return result()


def _in_background(name: str, fn: Callable[..., T], *args: object) -> Future[T]:
    """`fn(*args)` started on a thread of its own; its future."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    future = pool.submit(fn, *args)
    pool.shutdown(wait=False)
    return future


# What the Spark jobs started from now on are about (`describe_jobs`); None until said.
_description: str | None = None


def describe_jobs(text: str) -> None:
    """Describe the Spark jobs the calling thread starts from now on (`spark.job.description`:
    the Spark UI's, YARN's and the History Server's name for them, instead of Spark's generic
    `collect at …`). Said before the session exists, it is given to the session once built.
    ferry.cli's Progress calls this with every progress line."""
    global _description
    _description = text
    context = _active_context()
    if context is not None and getattr(context, "_jsc", None) is not None:
        _describe(context)
    elif _connect_session is not None:
        _tag(_connect_session)


def _active_context() -> SparkContext | None:
    """The classic SparkContext running in this process, or None: none started, or no classic
    PySpark installed (a Connect-only client, where `pyspark` has no SparkContext)."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return None
    return SparkContext._active_spark_context


def _describe_session(spark: SparkSession) -> None:
    global _connect_session
    if is_connect(spark):
        _connect_session = spark  # built here, or given (a Databricks job's, a notebook's)
        _tag(spark)
    else:
        _describe(spark.sparkContext)


def _describe(context: SparkContext, text: str | None = None) -> None:
    # A local property of the calling thread (PySpark pins each Python thread to a JVM
    # thread); the jobs are started by the thread that prints the progress.
    text = text if text is not None else _description
    if text is not None:
        try:
            context.setJobDescription(text)
        except Exception:  # noqa: BLE001 - a description must never fail a run
            pass


# The Connect session built here, whose operations `describe_jobs` tags; None without one.
_connect_session: SparkSession | None = None


def _connect(url: str, app_name: str) -> SparkSession:
    """A Spark Connect session at `url` (ferry.connect), tagged with the job's name."""
    global _connect_session
    settings = {k: v for k, v in DEFAULTS.items() if k.startswith("spark.sql.")}
    spark = connect.open_session(url, {**settings, **_requested_conf})
    _connect_session = spark
    _tag(spark, app_name)
    return spark


def _tag(spark: SparkSession, text: str | None = None) -> None:
    text = text if text is not None else _description
    if text is not None:
        connect.tag_operations(spark, text)


def _under_spark_submit() -> bool:
    # spark-submit starts the Python driver from its JVM and names the gateway to it.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted(app_name: str) -> SparkSession.Builder:
    """Builder for a driver that spark-submit started: its settings live in spark-submit's
    JVM, which a SparkConf sees only once the gateway is up."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    conf = SparkConf()
    builder = SparkSession.builder
    if not conf.contains("spark.app.name"):
        builder = builder.appName(app_name)
    defaults = dict(DEFAULTS)
    if conf.get("spark.master", "").startswith("local"):
        defaults.update(LOCAL_DEFAULTS)
    for key, value in defaults.items():
        if not conf.contains(key):
            builder = builder.config(key, value)
    return builder


def _direct(app_name: str) -> SparkSession.Builder:
    """Builder for a run without spark-submit: Ferry picks the master and the JVM's logging."""
    master = os.environ.get("FERRY_MASTER", "local[*]")
    if master.startswith("local"):
        # Python workers on this machine use this interpreter, where ferry is installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master)
    if LOG4J_PROPERTIES.is_file():
        log_file = os.environ.setdefault(
            "FERRY_LOG_FILE", str(Path(tempfile.gettempdir()) / f"ferry-spark-{os.getpid()}.log")
        )
        java_options = (
            f"-Dlog4j2.configurationFile=file:{LOG4J_PROPERTIES} -Dferry.log.file={log_file}"
        )
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
        if master.startswith("local"):
            builder = builder.config("spark.executor.extraJavaOptions", java_options)
    defaults = {**DEFAULTS, **(LOCAL_DEFAULTS if master.startswith("local") else {})}
    for key, value in {**defaults, **_requested_conf}.items():
        builder = builder.config(key, value)
    return builder


def has_delta_jars(spark: SparkSession) -> bool:
    """True when delta-spark's JVM classes are on this session's classpath (asked once per
    SparkContext: a lookup that fails costs 60 ms of Py4J's error handling, and a ledger
    asks at every append). A Connect session has no classpath to look in: it tells by its
    settings (`ferry.connect.has_delta`)."""
    if is_connect(spark):
        return connect.has_delta(spark)
    context = spark.sparkContext
    known = _DELTA_JARS.get(context)
    if known is None:
        known = _DELTA_JARS[context] = _looks_up_delta(context)
    return known


_DELTA_JARS: weakref.WeakKeyDictionary[SparkContext, bool] = weakref.WeakKeyDictionary()


def _looks_up_delta(context: SparkContext) -> bool:
    # Looked up the way Spark loads the extension, through the context class loader: jars of
    # --packages and --jars live there, not in the system class loader that a plain
    # Class.forName through Py4J searches (which never found them under spark-submit).
    try:
        utils = context._jvm.org.apache.spark.util.Utils  # type: ignore[union-attr]
        utils.classForName(DELTA_EXTENSION, False, False)  # not initialized; Spark's loader
        return True
    except Exception:
        return False


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism: the context's, or on Connect (no context) the number of
    splits the server plans for a range with none given (leafNodeDefaultParallelism, the
    default parallelism unless set): one analysis round trip, asked once per session."""
    if is_connect(spark):
        return connect.parallelism(spark)
    return spark.sparkContext.defaultParallelism


SparkOrLater = SparkSession | Callable[[], SparkSession]  # a session, or one still starting


def session_of(spark: SparkOrLater) -> SparkSession:
    """The session itself, waiting for it if it is still starting (`start_session`)."""
    return spark() if callable(spark) else spark


def local_df(spark: SparkSession, rows: Sequence[tuple], schema: StructType) -> DataFrame:
    """Driver rows as a DataFrame, sent to the JVM as Arrow: a list of tuples would go through
    pickling and, on its first use in a run, start Python workers (about a second)."""
    return arrow_df(spark, local_table(rows, schema), schema)


def arrow_df(spark: SparkSession, table, schema: StructType) -> DataFrame:  # noqa: ANN001
    """An Arrow table as a DataFrame of `schema`, the one way Ferry hands the driver's Arrow
    to Spark. Its empty record batches are dropped first: PySpark 4.2 stops reading a table at
    its first empty batch, and the rows after it are silently lost (a concatenation of
    per-partition tables, a dataset scan whose filter emptied a file)."""
    import pyarrow as pa

    batches = [b for b in table.to_batches() if b.num_rows]
    # and Spark needs at least one chunk per column, even of nothing
    kept = batches or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    df = spark.createDataFrame(pa.Table.from_batches(kept, schema=table.schema), schema)
    if is_connect(spark):
        # Connect sends the table to the server as one local relation (cached there above
        # spark.sql.session.localRelationCacheThreshold), not a partition per batch.
        return df
    # Above the local relation threshold PySpark makes every Arrow batch of at most
    # arrow.maxRecordsPerBatch rows a partition: a driver read of 640,000 records was 79 tasks
    # in every query that scanned it. Two tasks a core do the same work (a broadcast join
    # over them: 0.46 -> 0.35 s); a local relation is left alone (collected without a job).
    tasks = 2 * default_parallelism(spark)
    if table.num_rows > tasks:
        conf = spark._jconf  # the settings Spark's own conversion reads
        rows_per_batch = conf.arrowMaxRecordsPerBatch()
        if table.nbytes > conf.arrowLocalRelationThreshold() and rows_per_batch > 0:
            if sum(-(-len(b) // rows_per_batch) for b in kept) > tasks:
                df = df.coalesce(tasks)
    return df


def local_table(rows: Sequence[tuple], schema: StructType):  # noqa: ANN201 - pyarrow
    """Driver rows as an Arrow table of `schema`."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    return pa.Table.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema, strict=True)],
        schema=arrow_schema,
    )

"""What Spark a run stands on, checked where the session is built (`ferry.session`), and the
one way Ferry caches a DataFrame.

- **Versions**: Spark 4.0 or newer, the client (full PySpark, `pyspark-client` or Databricks
  Connect) and a Connect server alike, or one line (exit 2) before a call an older client
  lacks (`createDataFrame(pyarrow.Table)`, `DataFrame.toArrow`, `GroupedData.applyInArrow`)
  could end the run in an AttributeError.
- **The classic half**: the base install holds no Spark (setup.py); a session in this process
  (local, spark-submit's) needs the full PySpark, `ferry[spark]`, or it is one line naming it.
- **Caching**: where the session caches (classic: always; Connect: asked once,
  `ferry.connect.can_cache`, since Databricks serverless refuses `persist`), `keep` persists;
  elsewhere the same DataFrame is planned again by each query that uses it.
"""

from __future__ import annotations

import importlib.util
import re
from typing import TYPE_CHECKING

from ferry import connect
from ferry.connect import is_connect
from ferry.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The oldest Spark Ferry runs on, client and server: createDataFrame(pyarrow.Table),
# DataFrame.toArrow, GroupedData.applyInArrow and Python data sources are Spark 4.0's. Tested:
# 4.0 to 4.2 (setup.py; a classic session 4.0.1 and newer, Delta Lake 4.4's jars).
OLDEST_SPARK = (4, 0)
TESTED_SPARK = "4.0 to 4.2"
SPARK_EXTRA = "ferry[spark]"


def require_classic() -> None:
    """A session in this process (local, spark-submit's) needs the full PySpark, which the
    base install does not hold: without it, one line naming the extra that brings it."""
    if not (has_module("pyspark.core") and has_module("py4j")):
        raise UsageError(
            "a local or spark-submit Spark session needs the full PySpark, which this install "
            f"lacks (a Spark Connect client only): pip install '{SPARK_EXTRA}', or run through "
            "Spark Connect (--remote sc://HOST:PORT)"
        )


def has_module(name: str) -> bool:
    """Whether `name` can be imported here (its parent package is, for a submodule)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # the parent package is missing
        return False


def spark_version(text: str) -> tuple[int, int]:
    """(major, minor) of a Spark version string ("4.2.0", "4.1.0.dev1", "3.5.2"); (0, 0) for
    one without digits."""
    found = re.match(r"\s*(\d+)(?:\.(\d+))?", text or "")
    return (int(found.group(1)), int(found.group(2) or 0)) if found else (0, 0)


def version_refusal(what: str, version: str) -> str | None:
    """One line refusing `what` at `version` when it is older than OLDEST_SPARK, else None."""
    if spark_version(version) >= OLDEST_SPARK:
        return None
    oldest = ".".join(map(str, OLDEST_SPARK))
    return (
        f"{what} is Spark {version or 'of an unknown version'}; Ferry needs Spark {oldest} or "
        f"newer (tested: {TESTED_SPARK}; on Databricks: Databricks Connect 17 or newer, a "
        "serverless environment version 4 or newer, Databricks Runtime 17 or newer)"
    )


def check_client_version() -> None:
    """This process's PySpark (full, `pyspark-client` or Databricks Connect) is Spark 4.0 or
    newer, or the run ends here in one line (exit 2), before any call an older client lacks
    would end it in an AttributeError."""
    import pyspark

    line = version_refusal("this PySpark", getattr(pyspark, "__version__", ""))
    if line:
        raise UsageError(line)


def check_server_version(spark: SparkSession) -> None:
    """A Connect server (Databricks', or any `sc://`) runs Spark 4.0 or newer, or one line
    (exit 2). A classic session's Spark is this process's PySpark, checked already."""
    if not is_connect(spark) or getattr(spark, "_ferry_version_checked", False):
        return
    try:
        version = str(spark.version)
    except Exception:  # noqa: BLE001 - a server that will not say is left to its first query
        return
    line = version_refusal("the Spark Connect server", version)
    if line:
        raise UsageError(line)
    spark._ferry_version_checked = True  # type: ignore[attr-defined]


def can_cache(spark: SparkSession) -> bool:
    """Whether this session caches DataFrames: a classic one does; a Connect one is asked once
    (`ferry.connect.can_cache`: Databricks serverless refuses `persist`)."""
    return connect.can_cache(spark) if is_connect(spark) else True


def keep(df: DataFrame, level: object = None) -> DataFrame:
    """`df` persisted (at `level`, or Spark's default) where the session caches, else `df`
    itself: its queries plan it again each time, with the same rows (every input Ferry keeps
    is a fixed set: offset ranges read, a ledger's rows of one run)."""
    if not can_cache(df.sparkSession):
        return df
    return df.persist(level) if level is not None else df.persist()


def release(df: DataFrame) -> None:
    """`keep`'s cache released; nothing where the session does not cache."""
    if can_cache(df.sparkSession):
        df.unpersist()

"""The one place a SparkSession is built; everything else receives `spark` as a parameter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def build_session(app_name: str = "ferry") -> SparkSession:
    """Return the active session, or build one tuned for Ferry's many small partitions.

    Under spark-submit the master and any Delta settings come from spark-submit.sh; run
    directly (tests, notebooks) the master defaults to `local[*]` (or $FERRY_MASTER).
    Spark's console noise stays at ERROR unless $FERRY_SPARK_LOG says otherwise.
    """
    spark = SparkSession.getActiveSession()
    if spark is None:
        # Local runs: Python workers must use this interpreter, where ferry is installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = SparkSession.builder.appName(app_name)
        conf = SparkConf()
        if not conf.contains("spark.master"):
            builder = builder.master(os.environ.get("FERRY_MASTER", "local[*]"))
        quiet = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"
        if not conf.contains("spark.driver.extraJavaOptions") and quiet.is_file():
            # Run from a checkout (tests, notebooks, benches): keep Spark's start-up lines off
            # the console as spark-submit.sh does. Under spark-submit this is already set.
            builder = builder.config(
                "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{quiet}"
            )
        spark = (
            builder.config("spark.sql.shuffle.partitions", "8")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.sql.adaptive.enabled", "true")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel(os.environ.get("FERRY_SPARK_LOG", "ERROR"))
    from ferry.kafka_source import register

    register(spark)
    return spark


def has_delta_jars(spark: SparkSession) -> bool:
    """True when delta-spark's JVM classes are on this session's classpath."""
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(DELTA_EXTENSION)  # type: ignore[union-attr]
        return True
    except Exception:
        return False

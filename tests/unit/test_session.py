"""`session.cache_in_background`: a DataFrame's cache filled by a job of its own while the
caller goes on."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from ferry import session


def _fully_cached(spark) -> set[int]:
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    return {i.id() for i in infos if 0 < i.numPartitions() == i.numCachedPartitions()}


def test_the_cache_is_whole_when_the_wait_returns(spark):
    before = _fully_cached(spark)
    df = spark.range(0, 1000, numPartitions=4).select("id", (F.col("id") * 2).alias("twice"))
    wait = session.cache_in_background(df)
    assert df.is_cached  # persisted at once: queries planned from now on read the cache
    wait()
    try:
        assert len(_fully_cached(spark) - before) == 1
        assert df.agg(F.sum("twice")).first()[0] == 999_000
    finally:
        df.unpersist()


def test_the_fill_jobs_error_is_raised_by_the_wait(spark):
    df = spark.range(3).select(F.raise_error(F.lit("no such record")).alias("x"))
    wait = session.cache_in_background(df)
    try:
        with pytest.raises(Exception, match="no such record"):
            wait()
    finally:
        df.unpersist()


def test_an_arrow_table_reaches_spark_whole_past_its_empty_batches(spark):
    """PySpark 4.2 stops reading an Arrow table at its first empty batch (a concatenation of
    per-partition tables has them): `arrow_df` drops them first."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    empty = pa.table({"x": pa.array([], pa.int64())})
    table = pa.concat_tables([pa.table({"x": [1, 2]}), empty, pa.table({"x": [3]}), empty])
    schema = StructType([StructField("x", LongType())])
    assert spark.createDataFrame(table, schema).count() == 2  # the bug this works around
    assert sorted(r.x for r in session.arrow_df(spark, table, schema).collect()) == [1, 2, 3]
    assert session.arrow_df(spark, pa.concat_tables([empty, empty]), schema).count() == 0


def test_a_large_arrow_table_is_scanned_by_two_tasks_a_core_in_its_order(spark):
    """Above the local relation threshold PySpark makes each Arrow batch of at most
    arrow.maxRecordsPerBatch rows a partition: `arrow_df` coalesces them."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    tasks = 2 * spark.sparkContext.defaultParallelism
    n = max(10_000 * 2 * tasks, 200_000) + 1  # above the 1 MiB threshold Ferry sets
    table = pa.table({"x": pa.array(range(n), pa.int64())})
    schema = StructType([StructField("x", LongType())])
    assert spark.createDataFrame(table, schema).rdd.getNumPartitions() >= n // 10_000
    df = session.arrow_df(spark, table, schema)
    assert df.rdd.getNumPartitions() == tasks
    assert df.toArrow().column("x").to_pylist() == list(range(n))


def test_a_small_arrow_table_stays_a_local_relation(spark):
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    table = pa.table({"x": pa.array(range(5_000), pa.int64())})
    df = session.arrow_df(spark, table, StructType([StructField("x", LongType())]))
    assert "LocalRelation" in df._jdf.queryExecution().optimizedPlan().toString()


def test_a_started_session_is_the_session_and_its_warm_up_runs_on_it(spark):
    """`start_session` hands back the session, and the warm-up it starts beside it makes its
    DataFrame without error on the very Spark the runs use (the time it saves: positions_bench)."""
    assert session.start_session("ferry-test")() is spark
    session._warm_up(spark)

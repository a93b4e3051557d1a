"""Delta tables through delta-spark when its jars are on the classpath, else `deltalake`.

Both paths write the same Delta protocol table from the same Spark schema, so a table started
on a laptop (deltalake) can be appended to on a cluster (delta-spark) and back. Every write
says which path ran; a missing jar is never a silent no-op.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from ferry.session import has_delta_jars


def writer_name(spark: SparkSession) -> str:
    return "delta-spark" if has_delta_jars(spark) else "deltalake (Delta jars not on the classpath)"


def append(spark: SparkSession, df: DataFrame, path: str) -> str:
    """Append `df` to the Delta table at `path` (created if absent); returns the path used."""
    if has_delta_jars(spark):
        df.write.format("delta").mode("append").option("mergeSchema", "false").save(path)
        return "delta-spark"
    from deltalake import write_deltalake

    table = df.toArrow()
    if table.num_rows == 0 and exists(path):
        return "deltalake"
    write_deltalake(path, table, mode="append")
    return "deltalake"


def exists(path: str) -> bool:
    if "://" in path:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(path)
    return (Path(path) / "_delta_log").is_dir()


def read(spark: SparkSession, path: str) -> DataFrame:
    """The whole table as a DataFrame."""
    if has_delta_jars(spark):
        return spark.read.format("delta").load(path)
    from deltalake import DeltaTable

    return spark.createDataFrame(DeltaTable(path).to_pyarrow_table())

"""The one entry point for reading records: offset ranges of one cluster in, a DataFrame out,
read on the driver or through Spark depending on the size of the read.

Where: a read of at most `reader.driver_max_offsets` offsets in total (default 1,000,000,
a read of payloads counting 4 an offset; `Cluster.reads_on_driver`) runs on the driver with
the one read loop (`ferry.kafka.reader`), every partition at once, and its records become a
DataFrame through Arrow (`SparkSession.createDataFrame` of an Arrow table: no Python worker,
no Spark job, no data source planning; above 1 MiB an RDD of Arrow batches, not a local
relation, `ferry.session`). A larger read goes through the `ferry-kafka` data source on the
executors (`ferry.kafka.source`), which runs the same loop in each task. Why the threshold:
a Python data source costs seconds to plan (Spark starts Python workers to look it up,
create and plan it before the first task, about 5 s on 2 cores), while the driver reads and
hashes about 450,000 records a second and keeps some 70 bytes of each for matching.

Either way the DataFrame has the same schema (`ferry.kafka.source.output_schema`) and rows;
the tests compare both paths on the same ranges.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from ferry.kafka.cluster import Cluster
from ferry.kafka.reader import OffsetRange, RangeReader, arrow_batches, arrow_schema, total_offsets
from ferry.kafka.source import output_schema, read_with_spark
from ferry.runtime import can_cache
from ferry.runtime import keep as keep_df
from ferry.session import SparkOrLater, arrow_df, session_of


def read(
    spark: SparkOrLater,
    cluster: Cluster,
    ranges: Sequence[OffsetRange],
    *,
    columns: Sequence[str] = (),
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
    to_next_record: bool = False,
    keep: bool = False,
) -> DataFrame:
    """The records of `ranges` (end exclusive; gaps simply absent) as a DataFrame of `columns`
    (default: Spark's Kafka source's), plus `sha256` when `hash_fields` are given.

    `to_next_record`: each range also yields the first record at or after its last offset
    (`ferry.kafka.reader`); a record that ends one range and opens the next then appears
    once per range. `keep`: read now, once, however often the DataFrame is used — a Spark
    read is persisted and run at once (one job); a driver read is in memory already (a local
    relation), so it costs nothing more. `spark` may be a callable giving the session (e.g.
    one starting in the background): a driver read asks for it only once Kafka has been read.
    """
    table, df = _read_where(
        spark, cluster, ranges, columns, hash_fields, ignore_headers, to_next_record
    )
    if df is None:
        return arrow_df(session_of(spark), table, output_schema(columns, bool(hash_fields)))
    if keep and can_cache(df.sparkSession):
        df = keep_df(df, StorageLevel.MEMORY_AND_DISK)
        df.count()  # the Spark read runs now, once, into its cache
    elif keep:
        # A session that cannot cache (Databricks serverless): read once all the same, its
        # rows brought here as Arrow and handed back as a local DataFrame, so that every use
        # sees the same records, not a second read of a log that may have moved on.
        df = arrow_df(df.sparkSession, df.toArrow(), df.schema)
    return df


def read_arrow(
    spark: SparkOrLater,
    cluster: Cluster,
    ranges: Sequence[OffsetRange],
    *,
    columns: Sequence[str],
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
):  # noqa: ANN201 - pyarrow imported lazily
    """The records of `ranges` as `read` gives them, on the driver as one Arrow table and not
    as a DataFrame, for a caller that needs them only there: a driver read's own table (no
    session asked for, nothing handed to Spark), a Spark read's rows through `toArrow` (its
    one job, nothing kept)."""
    table, df = _read_where(spark, cluster, ranges, columns, hash_fields, ignore_headers, False)
    return table if df is None else df.toArrow()


def _read_where(
    spark: SparkOrLater,
    cluster: Cluster,
    ranges: Sequence[OffsetRange],
    columns: Sequence[str],
    hash_fields: Sequence[str],
    ignore_headers: Sequence[str],
    to_next_record: bool,
):  # noqa: ANN202 - (the driver read's Arrow table, None) or (None, the Spark read's DataFrame)
    """The one decision of where a read runs (`Cluster.reads_on_driver`): on the driver, read
    now, with no session asked for; else a DataFrame of the `ferry-kafka` data source."""
    schema = output_schema(columns, bool(hash_fields))
    if cluster.reads_on_driver(total_offsets(ranges), columns):
        table = read_table(
            cluster,
            ranges,
            schema.fieldNames(),
            hash_fields=hash_fields,
            ignore_headers=ignore_headers,
            to_next_record=to_next_record,
        )
        return table, None
    df = read_with_spark(
        session_of(spark),
        cluster,
        ranges,
        columns=schema.fieldNames(),
        hash_fields=hash_fields,
        ignore_headers=ignore_headers,
        to_next_record=to_next_record,
    )
    return None, df


def read_table(
    cluster: Cluster,
    ranges: Sequence[OffsetRange],
    columns: Sequence[str],
    *,
    hash_fields: Sequence[str] = (),
    ignore_headers: Sequence[str] = (),
    to_next_record: bool = False,
):  # noqa: ANN201 - pyarrow imported lazily
    """The driver read: the ranges' records as one Arrow table of `columns`."""
    import pyarrow as pa

    with RangeReader(cluster) as reader:
        batches = list(
            arrow_batches(
                reader,
                ranges,
                columns,
                hash_fields=hash_fields,
                ignore_headers=ignore_headers,
                to_next_record=to_next_record,
            )
        )
    # no batch at all is a table too: `session.arrow_df` gives Spark the chunk it needs
    return pa.Table.from_batches(batches, schema=arrow_schema(columns))

"""Delta tables through delta-spark when its jars are on the classpath, else `deltalake`.

Both paths write the same Delta protocol table from the same Spark schema, so a table started
on a laptop (deltalake) can be appended to on a cluster (delta-spark) and back. Every write
says which path ran; a missing jar is never a silent no-op. Appends merge new columns into an
existing table's schema (older tables gain them, their old rows read as null), and a commit can
carry `userMetadata` (a JSON object) that `commit_metadata` reads back with each version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from ferry.session import arrow_df, has_delta_jars


def writer_name(spark: SparkSession) -> str:
    return "delta-spark" if has_delta_jars(spark) else "deltalake (Delta jars not on the classpath)"


def append(
    spark: SparkSession, df: DataFrame, path: str, metadata: Mapping[str, str] | None = None
) -> str:
    """Append `df` to the Delta table at `path` (created if absent); returns the writer used."""
    if has_delta_jars(spark):
        writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
        if metadata:
            writer = writer.option("userMetadata", json.dumps(dict(metadata)))
        writer.save(path)
        return "delta-spark"
    return _append_arrow(df.toArrow(), path, metadata)


def append_rows(
    spark: SparkSession,
    rows: Sequence[Mapping],
    schema: StructType,
    path: str,
    metadata: Mapping[str, str] | None = None,
) -> str:
    """Append plain rows (dicts keyed by `schema`'s names); see `append_columns`."""
    columns = {c: [r.get(c) for r in rows] for c in schema.fieldNames()}
    return append_columns(spark, columns, schema, path, metadata)


@dataclass
class Held:
    """A table one writer appends to several times (a run's ledger commits): without the
    delta-spark jars its log is read at the first append to an existing table and kept
    current by each commit after, instead of read again for every commit (a 10,000-group dry
    run's 7 ledger commits on a ledger of 1,000 versions: 1.2 s -> 0.8 s). Commits of other
    writers in between are found as a commit is made: appends never conflict."""

    path: str
    table: Any = None  # a deltalake.DeltaTable, once loaded


def append_columns(
    spark: SparkSession,
    columns: Mapping[str, list] | Any,
    schema: StructType,
    path: str | Held,
    metadata: Mapping[str, str] | None = None,
) -> str:
    """Append rows given column by column (a list per `schema` name, all of one length, or
    a pyarrow Table of `schema`'s columns in `to_arrow_schema`'s types). Without the jars no
    Spark job runs: the columns go to Arrow on the driver (column-wise: 8x faster than rows),
    which keeps a small append (one ledger outcome) cheap; a Table is written as it is.
    `path`: the table's, or a `Held` table's."""
    names = schema.fieldNames()
    if not isinstance(columns, Mapping):  # a pyarrow Table (pyarrow is imported on first use)
        if not has_delta_jars(spark):
            return _append_arrow(columns, path, metadata)
        columns = columns.to_pydict()
    if has_delta_jars(spark):
        df = spark.createDataFrame(list(zip(*(columns[c] for c in names), strict=True)), schema)
        return append(spark, df, path.path if isinstance(path, Held) else path, metadata)
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    table = pa.Table.from_pydict({c: columns[c] for c in names}, arrow_schema)
    return _append_arrow(table, path, metadata)


def _append_arrow(table, path: str | Held, metadata: Mapping[str, str] | None) -> str:  # noqa: ANN001
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    held = path if isinstance(path, Held) else None
    path = held.path if held else path
    if table.num_rows == 0 and exists(path):
        return "deltalake"
    properties = (
        CommitProperties(custom_metadata={"userMetadata": json.dumps(dict(metadata))})
        if metadata
        else None
    )
    if held and held.table is None and exists(path):
        held.table = DeltaTable(path)
    target = held.table if held and held.table is not None else path
    write_deltalake(target, table, mode="append", schema_mode="merge", commit_properties=properties)
    return "deltalake"


def exists(path: str) -> bool:
    if "://" in path:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(path)
    return (Path(path) / "_delta_log").is_dir()


@dataclass(frozen=True)
class Where:
    """Rows to read: every column of `equal` holds its value, every column of `not_equal` holds
    another (not null), and, with `any_of`, some column of it holds one of its values. A null,
    or a column the table lacks, satisfies none of them (as in SQL)."""

    equal: Mapping[str, object] = field(default_factory=dict)
    not_equal: Mapping[str, object] = field(default_factory=dict)
    any_of: Mapping[str, Sequence[object]] | None = None


def read(
    spark: SparkSession,
    path: str,
    where: Where | None = None,
    columns: Sequence[str] | None = None,
    distinct: bool = False,
) -> DataFrame:
    """The table as a DataFrame: whole, or only the rows `where` selects, only `columns` (those
    the table has), and with `distinct` each distinct row once. Without delta-spark all of it
    is done as the files are read, before any row reaches Spark: the table passes through the
    driver, so a large table is read only this way (the ledger's writes, not its plans)."""
    if has_delta_jars(spark):
        from pyspark.sql import functions as F

        df = spark.read.format("delta").load(path)
        if where is not None:
            df = df.filter(_spark_condition(F, set(df.columns), where))
        if columns is not None:
            df = df.select(*[c for c in columns if c in df.columns])
        return df.distinct() if distinct else df
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    dataset = DeltaTable(path).to_pyarrow_dataset()
    names = dataset.schema.names
    kept = names if columns is None else [c for c in columns if c in names]
    condition = None if where is None else _arrow_condition(dataset.schema, where)
    table = dataset.to_table(columns=kept, filter=condition)
    if distinct:
        table = table.group_by(kept, use_threads=False).aggregate([]).select(kept)
    # with the table's schema, an empty selection keeps its columns
    schema = pa.schema([dataset.schema.field(c) for c in kept])
    return arrow_df(spark, table.cast(schema), from_arrow_schema(schema))


def _spark_condition(F: Any, names: set[str], where: Where) -> Any:  # noqa: ANN401, N803
    condition = F.lit(True)
    for name, value in where.equal.items():
        condition = condition & (F.col(name) == F.lit(value) if name in names else F.lit(False))
    for name, value in where.not_equal.items():
        condition = condition & (F.col(name) != F.lit(value) if name in names else F.lit(False))
    if where.any_of is not None:
        wanted = F.lit(False)
        for name, values in where.any_of.items():
            if name in names:
                wanted = wanted | F.col(name).isin(list(values))
        condition = condition & wanted
    return condition


def _arrow_condition(schema: Any, where: Where) -> Any:  # noqa: ANN401 - pyarrow's types
    import pyarrow as pa
    import pyarrow.compute as pc

    def column(name: str) -> Any:  # noqa: ANN401
        # deltalake (1.6) turns a file's missing min/max into bounds of null and skips the
        # file for any comparison of the column: delta-spark writes none for booleans, and
        # its rows went unread. Compared through a cast, the column's bounds are not used.
        ref = pc.field(name)
        return ref.cast(pa.int8()) if pa.types.is_boolean(schema.field(name).type) else ref

    def value_of(value: object) -> object:
        return int(value) if isinstance(value, bool) else value  # the cast's type

    names = set(schema.names)
    condition = pc.scalar(True)
    for name, value in where.equal.items():
        condition &= column(name) == value_of(value) if name in names else pc.scalar(False)
    for name, value in where.not_equal.items():
        condition &= column(name) != value_of(value) if name in names else pc.scalar(False)
    if where.any_of is not None:
        wanted = pc.scalar(False)
        for name, values in where.any_of.items():
            if name in names:
                wanted = wanted | column(name).isin([value_of(v) for v in values])
        condition = condition & wanted
    return condition


def read_since(
    spark: SparkSession,
    path: str,
    time_column: str,
    since: datetime,
    columns: Sequence[str],
    where: Where | None = None,
) -> Any:  # noqa: ANN401 - a pyarrow.Table
    """Rows whose `time_column` is at or after `since` (and that `where` selects), as an Arrow
    table of `columns` (a column the table lacks is all null) — read on the driver, filtered
    before they arrive: for small recent slices of a large table, such as the ledger's open
    claims (not the run's own 640,000 rows)."""
    import pyarrow as pa

    where = where or Where()
    if has_delta_jars(spark):
        from pyspark.sql import functions as F

        df = spark.read.format("delta").load(path)
        condition = (F.col(time_column) >= F.lit(since)) & _spark_condition(
            F, set(df.columns), where
        )
        present = [c for c in columns if c in df.columns]
        table = df.filter(condition).select(*present).toArrow()
    else:
        import pyarrow.compute as pc
        from deltalake import DeltaTable

        dataset = DeltaTable(path).to_pyarrow_dataset()
        condition = (pc.field(time_column) >= since) & _arrow_condition(dataset.schema, where)
        present = [c for c in columns if c in dataset.schema.names]
        table = dataset.to_table(columns=present, filter=condition)
    for c in columns:
        if c not in present:
            table = table.append_column(c, pa.nulls(table.num_rows, pa.string()))
    return table.select(list(columns))


def commit_metadata(spark: SparkSession, path: str, limit: int) -> list[tuple[int, dict]]:
    """(version, userMetadata) of the newest `limit` commits, newest first ({} without)."""
    if has_delta_jars(spark):
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT {int(limit)}").collect()
        raw = [(r["version"], r["userMetadata"]) for r in rows]
    else:
        from deltalake import DeltaTable

        raw = [(h["version"], h.get("userMetadata")) for h in DeltaTable(path).history(limit)]
    out = []
    for version, text in raw:
        try:
            meta = json.loads(text) if text else {}
        except (TypeError, ValueError):
            meta = {}
        out.append((int(version), meta if isinstance(meta, dict) else {}))
    return sorted(out, reverse=True)

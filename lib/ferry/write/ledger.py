"""The audit ledger: one Delta table shared by `migrate` and the `groups` verbs.

One row per run × group × partition and phase, for dry runs too (`is_executed` false), so
every plan that was shown is on record next to every change that was made:

- `plan`: a dry run's decision, or an executing run's decision not to write a group
  (already migrated, refused, unresolved);
- `intent`: written before the first write to any cluster, one row per partition the run is
  about to change, with the offset it has now (`previous_offset`) and the one it will get;
- `outcome`: written after each batch of groups was written and read back (one commit per
  batch, `ferry.write.commit.BATCH_GROUPS` groups): `is_committed` is true only for offsets that
  were written and read back (a rollback's: for groups read back at the offsets they had before
  the run it undoes, written now or found there).

The ledger never trails the clusters by more than one batch: a run that cannot append its
intent writes nothing, and one that cannot append a batch's outcomes stops before the next
batch. `--rollback RUN_ID` restores `previous_offset` from outcome or intent rows (tables older
than the phases: committed rows); its own rows name that run in `rollback_of`.

Every commit's `userMetadata` (Delta's commit info, `DESCRIBE HISTORY`, `DeltaTable.history()`)
names the run and phase and where the rows came from (`provenance`): Ferry's version, the Spark
application id and the user Spark runs as. Columns are only ever added, nullable: a table
written by an older Ferry is appended to and read as it is (`read` fills the missing columns).

Intents are also claims: a group with an open intent of another executing run (no outcome
yet, younger than `ledger.lease_ms`) is left to the run whose intent the Delta log ordered
first, so two runs that select the same group at once never both write it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ferry import delta
from ferry.errors import FerryError

T = TypeVar("T")

PHASE_PLAN = "plan"
PHASE_INTENT = "intent"
PHASE_OUTCOME = "outcome"

LEDGER_SCHEMA = StructType(
    [
        StructField("run_id", StringType(), False),
        StructField("run_time", TimestampType(), False),
        StructField("action", StringType(), False),  # migrate, rollback, copy, reset, delete
        StructField("is_executed", BooleanType(), False),  # false: dry run
        StructField("cluster", StringType(), True),  # bootstrap servers of the cluster written
        StructField("group", StringType(), False),
        StructField("source_group", StringType(), True),
        StructField("source_topic", StringType(), True),
        StructField("source_partition", IntegerType(), True),
        StructField("source_offset", LongType(), True),
        StructField("topic", StringType(), True),  # the topic/partition whose offset is set
        StructField("partition", IntegerType(), True),
        StructField("previous_offset", LongType(), True),
        StructField("new_offset", LongType(), True),
        StructField("status", StringType(), True),
        StructField("is_committed", BooleanType(), False),
        StructField("anchor_kind", StringType(), True),
        StructField("anchor_offset", LongType(), True),
        StructField("anchor_timestamp", TimestampType(), True),
        StructField("anchor_sha256", BinaryType(), True),
        StructField("candidate_count", IntegerType(), True),
        StructField("message", StringType(), True),
        StructField("phase", StringType(), True),  # plan, intent, outcome (null: older rows)
        StructField("row_time", TimestampType(), True),  # when this row was appended
        # a rollback's rows: the run it rolls back (null: any other run, and older rollbacks)
        StructField("rollback_of", StringType(), True),
    ]
)
LEDGER_COLUMNS = LEDGER_SCHEMA.fieldNames()
# Rows per Delta commit: a run's ledger rows are never all in memory at once.
BATCH_ROWS = 50_000


def batched(rows: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of at most `size` items."""
    it = iter(rows)
    while batch := list(itertools.islice(it, size)):
        yield batch


class LedgerError(FerryError):
    """The ledger could not be written or read: the message names its path."""


def new_run_id(action: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{action}-{stamp}-{uuid.uuid4().hex[:6]}"


def provenance(spark: SparkSession) -> dict[str, str]:
    """Where a commit comes from: Ferry's version, the Spark application id, and the user Spark
    runs as (on YARN the submitting user, as Hadoop sees it; locally the login). A Connect
    session has no context to ask: the server's application id is its `spark.app.id`, and
    the user is the one the server runs the session's queries as (`current_user()`, on
    Databricks the workspace user)."""
    from ferry.connect import setting
    from ferry.session import is_connect
    from ferry.version import ferry_version

    if is_connect(spark):
        app_id = setting(spark, "spark.app.id") or ""
        try:
            user = str(spark.sql("SELECT current_user()").first()[0] or "")  # type: ignore[index]
        except Exception:  # noqa: BLE001 - a missing user must not stop a write
            user = ""
    else:
        sc = spark.sparkContext
        app_id = sc.applicationId
        try:
            user = sc.sparkUser()
        except Exception:  # noqa: BLE001 - a missing user must not stop a write
            user = ""
    if not user:
        import getpass

        user = getpass.getuser()
    return {
        "ferry.version": ferry_version(),
        "ferry.spark_app_id": app_id,
        "ferry.user": user,
    }


class Ledger:
    """One run's view of the ledger table: every append carries the run's id, time, action and
    whether it executes (and, for a rollback, the run it rolls back), every commit the run's
    provenance, and a failure names the ledger's path."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        run_id: str,
        action: str,
        is_executed: bool,
        rollback_of: str | None = None,
    ) -> None:
        self.spark = spark
        self.path = path
        self.run_id = run_id
        self.action = action
        self.is_executed = is_executed
        self.rollback_of = rollback_of
        self.run_time = datetime.now(timezone.utc)
        self.writer: str | None = None
        self._held = delta.Held(path)
        self._provenance: dict[str, str] | None = None

    def commit_metadata(self, phase: str) -> dict[str, str]:
        """The `userMetadata` of this run's commits of `phase`."""
        if self._provenance is None:
            self._provenance = provenance(self.spark)
        meta = {"ferry.run_id": self.run_id, "ferry.phase": phase, **self._provenance}
        if self.rollback_of is not None:
            meta["ferry.rollback_of"] = self.rollback_of
        return meta

    def _run_values(self) -> dict:
        """What every row this run appends now carries (whatever the row says)."""
        return {
            "run_id": self.run_id,
            "run_time": self.run_time,
            "action": self.action,
            "is_executed": self.is_executed,
            "row_time": datetime.now(timezone.utc),
            "rollback_of": self.rollback_of,
        }

    def append(self, rows: Iterable[Mapping], phase: str) -> str:
        """Append rows, of `phase` unless a row names its own, in Delta commits of at most
        `BATCH_ROWS` rows (each tagged with `phase`), so a run of any size holds one batch in
        memory; LedgerError names the path. A run's intent may span several commits: all are
        appended before any cluster is written, and claims order runs by their last one."""
        wrote = False
        for batch in batched(rows, BATCH_ROWS):
            self._append_batch(batch, phase)
            wrote = True
        if not wrote:
            self.writer = self.writer or delta.writer_name(self.spark)
        return self.writer or delta.writer_name(self.spark)

    def append_tables(self, tables: Iterable, phase: str) -> str:
        """`append` for rows already in Arrow tables of the ledger's columns (built column-wise,
        `ferry.migrate.ledger_table`): consecutive tables are joined into commits of about
        `BATCH_ROWS` rows (a table is never split); this run's values fill their columns,
        `phase` and `is_committed` (false) the rows without one."""
        import pyarrow as pa

        wrote = False
        pending: list = []
        for table in tables:
            pending.append(table)
            if sum(t.num_rows for t in pending) >= BATCH_ROWS:
                self._append_table(pa.concat_tables(pending), phase)
                pending, wrote = [], True
        if pending or not wrote:
            self._append_table(pa.concat_tables(pending) if pending else None, phase)
        return self.writer or delta.writer_name(self.spark)

    def _append_table(self, table, phase: str) -> None:  # noqa: ANN001 - a pyarrow.Table
        import pyarrow as pa
        import pyarrow.compute as pc

        if table is None:  # nothing to append: the writer is still named
            self.writer = self.writer or delta.writer_name(self.spark)
            return
        n = table.num_rows
        # The run's values over the table's; `phase` and `is_committed` where it has none.
        run = self._run_values()
        for name, value in {**run, "is_committed": False, "phase": phase}.items():
            i = table.schema.get_field_index(name)
            column = pa.repeat(pa.scalar(value, table.schema.field(i).type), n)
            if name not in run:
                column = pc.coalesce(table.column(i), column)
            table = table.set_column(i, table.schema.field(i), column)
        meta = self.commit_metadata(phase)
        try:
            self.writer = delta.append_columns(self.spark, table, LEDGER_SCHEMA, self._held, meta)
        except Exception as exc:  # noqa: BLE001 - as _append_batch
            raise LedgerError(f"cannot append to ledger {self.path}: {_reason(exc)}") from exc

    def _append_batch(self, rows: list[Mapping], phase: str) -> None:
        """One commit of every ledger column: the row's values over the defaults, this run's
        values over both — built column by column (a dict per ledger row cost more than
        writing them)."""
        run = self._run_values()
        defaults = {"is_committed": False, "phase": phase}
        columns = {
            c: [run[c]] * len(rows) if c in run else [r.get(c, defaults.get(c)) for r in rows]
            for c in LEDGER_COLUMNS
        }
        meta = self.commit_metadata(phase)
        try:
            self.writer = delta.append_columns(self.spark, columns, LEDGER_SCHEMA, self._held, meta)
        except Exception as exc:  # noqa: BLE001 - any storage failure is the same to the user
            raise LedgerError(f"cannot append to ledger {self.path}: {_reason(exc)}") from exc

    def open_claims(
        self, cluster: str, groups: Sequence[str], lease_ms: int, ignore: Collection[str] = ()
    ) -> dict[str, str]:
        """Groups (of `groups`, on `cluster`) that another run (not in `ignore`) intends to
        write and that the Delta log ordered before this run's intent: group → that run's id."""
        import pyarrow as pa
        import pyarrow.compute as pc

        since = self.run_time - timedelta(milliseconds=lease_ms)
        try:
            # Other runs' intents and outcomes on this cluster only: this run's own intent and
            # a dry run's plan just before (640,000 rows each for 10,000 groups) took seconds
            # to read back as dicts, for nothing.
            rows = delta.read_since(
                self.spark,
                self.path,
                "run_time",
                since,
                ["run_id", "group", "cluster", "phase"],
                delta.Where(
                    equal={"cluster": cluster},
                    not_equal={"run_id": self.run_id, "phase": PHASE_PLAN},
                ),
            )
        except Exception as exc:  # noqa: BLE001
            raise LedgerError(f"cannot read ledger {self.path}: {_reason(exc)}") from exc
        # The read kept other runs' rows on this cluster only. Intents without an outcome
        # are told apart column-wise: a ledger a cutover's runs wrote for 15 minutes holds
        # millions of such rows (a dict each took seconds).
        def among(column: str, values: Collection[str]):  # noqa: ANN202 - a boolean array
            return pc.is_in(rows.column(column), pa.array(list(values), pa.string()))

        is_phase = lambda phase: pc.equal(rows.column("phase"), phase)  # noqa: E731
        is_intent = pc.and_(is_phase(PHASE_INTENT), among("group", groups))
        intents = rows.filter(pc.and_(is_intent, pc.invert(among("run_id", ignore))))
        intents = intents.select(["run_id", "group"])
        closed = rows.filter(is_phase(PHASE_OUTCOME)).select(["run_id", "group"])
        open_table = intents.join(closed, ["run_id", "group"], join_type="left anti")
        open_ = set(zip(*(open_table.column(c).to_pylist() for c in ("run_id", "group")),
                        strict=True))  # fmt: skip
        if not open_:
            return {}
        order = self._intent_versions({run for run, _ in open_})
        mine = order[self.run_id]
        claims: dict[str, str] = {}
        for run, group in sorted(open_):
            # Not among the commits since ours (order.get is None): it was ordered before ours.
            version = order.get(run)
            if version is None or version < mine:
                claims.setdefault(group, run)
        return claims

    def _intent_versions(self, others: set[str]) -> dict[str, int]:
        """Delta log version of the last intent commit of this run and of the others found
        since (a run's intent may span several commits: the last one orders it, because a
        run looks for claims only after all of its own are appended)."""
        limit = 256
        while True:
            history = delta.commit_metadata(self.spark, self.path, limit)
            found: dict[str, int] = {}
            for version, meta in history:  # newest first: the first seen is the last commit
                run = meta.get("ferry.run_id")
                if meta.get("ferry.phase") == PHASE_INTENT and run in others | {self.run_id}:
                    found.setdefault(run, version)
            if self.run_id in found or len(history) < limit:
                break
            limit *= 8
        if self.run_id not in found:
            raise LedgerError(f"ledger {self.path}: this run's intent commit is not in its log")
        return found


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


# Rows that say what a run wrote or was about to: intents, outcomes and, in tables from
# before phases, committed rows (not the plans every run, dry ones included, appends:
# 320,000 rows a run at 10,000 groups).
WRITES = {"phase": [PHASE_INTENT, PHASE_OUTCOME], "is_committed": [True]}
# What a rollback needs of its run's writes, and of other runs' writes of its groups
# (`rollback.run_history`)
RUN_WRITE_COLUMNS = [
    "group", "topic", "partition", "previous_offset", "new_offset", "cluster", "phase",
    "is_committed", "status", "row_time", "run_time",
]  # fmt: skip
OTHER_WRITE_COLUMNS = [
    "run_id", "group", "cluster", "is_executed", "phase", "is_committed", "status",
    "rollback_of", "row_time", "run_time",
]  # fmt: skip


def read(spark: SparkSession, path: str) -> DataFrame:
    """The whole ledger; rows written before a column existed read it as null."""
    return _with_every_column(delta.read(spark, path))


def read_run_writes(spark: SparkSession, path: str, run_id: str) -> DataFrame:
    """The run's own write rows (`WRITES`), `RUN_WRITE_COLUMNS` only."""
    where = delta.Where(equal={"run_id": run_id}, any_of=WRITES)
    df = delta.read(spark, path, where, RUN_WRITE_COLUMNS)
    return _with_every_column(df, RUN_WRITE_COLUMNS)


def read_other_writes(spark: SparkSession, path: str, run_id: str, cluster: str) -> DataFrame:
    """Other executing runs' write rows on `cluster`, `OTHER_WRITE_COLUMNS` only, each distinct
    row once (a write's partitions share them): what a rollback checks its groups against.
    Read whole, five 10,000-group runs' writes were 3,200,000 rows, 788 MiB as Arrow, and ran
    the driver out of memory; distinct, they are a few rows a run and group."""
    where = delta.Where(
        equal={"is_executed": True, "cluster": cluster}, not_equal={"run_id": run_id}, any_of=WRITES
    )
    df = delta.read(spark, path, where, OTHER_WRITE_COLUMNS, distinct=True)
    return _with_every_column(df, OTHER_WRITE_COLUMNS)


def _with_every_column(df: DataFrame, names: Sequence[str] | None = None) -> DataFrame:
    """`names` (default: every ledger column, in the ledger's order); those a table written
    before they existed lacks read as null."""
    types = {f.name: f.dataType for f in LEDGER_SCHEMA.fields}
    return df.select(
        *[
            F.col(name) if name in df.columns else F.lit(None).cast(types[name]).alias(name)
            for name in names or LEDGER_SCHEMA.fieldNames()
        ]
    )

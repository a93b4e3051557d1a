"""Which store a checkpoint's files are read and written through: Hadoop's `FileSystem` in the
session's JVM on a classic session (`ferry.checkpoint.store.HadoopStore`), `pyarrow.fs` on a
Spark Connect session, which has no JVM to call (`ferry.checkpoint.arrow_store.ArrowStore`).
Both have the same methods, and replace a file the same way on the same store
(`ferry.checkpoint.store.Replace`: the local one through the same function): whole, by the one
operation the store makes atomic, or, where it has none, so that the one other state a kill can
leave is completed by the next run (`ferry.checkpoint.interrupted`)."""

from __future__ import annotations

from ferry.connect import is_connect


def open_store(spark, root: str):  # noqa: ANN001, ANN201 - a SparkSession; a store
    """The store for `root` on this session."""
    if is_connect(spark):
        from ferry.checkpoint.arrow_store import ArrowStore

        return ArrowStore(root)
    from ferry.checkpoint.store import HadoopStore

    return HadoopStore(spark, root)

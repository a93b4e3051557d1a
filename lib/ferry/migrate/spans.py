"""The span between a destination partition's committed and exact offsets, and the signed
difference in records: plain values shared by `ferry.migrate.difference` (which reads and
counts the records) and `ferry.audit.compare` (which turns counts into verdicts), so the
comparison stays importable without Spark.
"""

from __future__ import annotations

from collections.abc import Mapping

Span = tuple[str, int, int, int]  # topic, partition, lo, hi: the offsets [lo, hi), lo < hi
Count = tuple[int, bool]  # records in the span, whether they were counted (else: offset span)


def row_span(row: Mapping) -> Span | None:
    """The span between a plan row's destination offset now (`previous_offset`) and its exact
    one (`destination_offset`); None when either is missing or they are equal."""
    return span_between(
        row.get("dst_topic"), row.get("dst_partition"),
        row.get("previous_offset"), row.get("destination_offset"),
    )  # fmt: skip


def span_between(
    topic: str | None, partition: int | None, committed: int | None, exact: int | None
) -> Span | None:
    """`row_span` of a destination partition's committed and exact offsets."""
    if committed is None or exact is None or committed == exact or partition is None:
        return None
    lo, hi = sorted((committed, exact))
    return (topic, partition, lo, hi)  # type: ignore[return-value]


def signed_difference(committed: int, exact: int, records: int) -> int:
    """`committed - exact` in records: positive ahead (records skipped), negative behind
    (records delivered again)."""
    return records if committed > exact else -records

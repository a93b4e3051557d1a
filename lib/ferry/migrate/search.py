"""Search: find each anchor's copy on the destination by reading outward from where its
timestamp lands, not the whole matching window.

The window (`window_before_ms`/`window_after_ms`) is a bound, not the amount to read. Each
distinct anchor position (destination partition × anchor timestamp) gets a slice: from
k + 1 records before P, the first offset whose timestamp is at or after the anchor's (the
broker's lookup, verified by the first read around it), to k + 1 + r records after it. All
slices are read in one read per step (`extract.read_hashed`: to the driver, read there when
small, else by one Spark job), then matched in one Spark job (`match_in_slices`: each
anchor's candidates, picked and located on the driver, are taken inside its own slice) and
judged on the driver, which holds every offset and timestamp read (`judge_slices`); a slice
that is not yet decided grows its open sides fourfold and is read again (only the new
offsets), until it is decided or covers the window on both sides. A position's row from
the job of the step that decided or closed its slice is its result.

A slice is **decided** early when, for every anchor at that position, the best candidate
in the slice

- carries the anchor's own timestamp (the replicator kept CreateTime), and
- matches the anchor's whole context: all k records before and after (as many as the source
  has), and
- the slice covers the anchor's millisecond, plus k + 1 records after it, so every record
  with that timestamp has been seen (two such full matches are AMBIGUOUS, as in a full read).

Otherwise the slice widens until each side has k + 1 records outside the window (or reaches
the log's end), and the outcome is exactly a full-window read's. The one difference from a
full read, chosen on purpose: an identical run of 2k + 1 records elsewhere in the window,
at another timestamp, does not make an early-decided anchor AMBIGUOUS — with timestamps
kept, a record at another millisecond is not the copy. `matching.search: full` reads whole
windows (and reports such runs AMBIGUOUS). A replicator that rewrites timestamps never
decides early: its copies are found by widening in the direction the timestamps moved, and
proven unique by reading the window, so narrow windows pay off there.

Candidates are taken only from an anchor's own slice, so a plan does not depend on which
other groups happened to be in the same run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ferry.config import FerryConfig
from ferry.kafka.cluster import Cluster
from ferry.keys import TopicPartitionKey
from ferry.migrate import anchors
from ferry.migrate.anchors import PartitionRecords
from ferry.migrate.context import with_fingerprint_in
from ferry.migrate.extract import located_records
from ferry.migrate.lookups import first_positions, look_up_windows, verify_first
from ferry.migrate.matching import Located, MatchInputs
from ferry.migrate.ranges import RangeBook
from ferry.migrate.slices import (
    SLICE_KEYS,
    SLICES_SCHEMA,
    WHOLE_SLICES_SCHEMA,
    AnchorSlice,
    collected,
    in_anchor_order,
    judge_slices,
    match_in_slices,
    with_slices,
)
from ferry.session import SparkOrLater, beside, local_df, session_of

FIRST_RADIUS = 64  # offsets read after P at the first step: a busy millisecond and then some
GROWTH = 4  # an open side of an undecided slice grows this many times per step
MAX_STEPS = 24
SMALL_PARTITION = 1024  # offsets: a destination partition this small is read whole at once
# Open slices whose windows hold at most this many offsets still unread are read to their
# windows' edges at once (a second or so of one consumer), not fourfold per Spark step.
LEFTOVER_OFFSETS = 100_000
# Their windows are looked up when no partition has more than this many of them: a lookup
# takes a ListOffsets layer and a probe read per timestamp of a partition (two per slice).
WINDOW_LOOKUPS_PER_PARTITION = 16


@dataclass
class SearchResult:
    # matching's row for each position (`matching.POSITION_COLUMNS`), in the anchors' order
    table: pa.Table
    offsets_read: int
    positions: int
    steps: int


def finish_leftovers(
    dst: Cluster,
    open_slices: Mapping[tuple[str, int, int], AnchorSlice],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    book: RangeBook,
    cfg: FerryConfig,
) -> int | None:
    """When what the open slices' windows still hold is small (`LEFTOVER_OFFSETS`), widen
    their open sides to the windows' edges at once (closed once read, no Spark job to decide
    it): the last few positions take one read, not a step each. The offsets that will read,
    or None (the slices widen step by step). When the rest of their partitions is that small
    already, no window is looked up (reading past a window changes no outcome: candidates
    are taken by timestamp); else windows are looked up while no partition has more than
    `WINDOW_LOOKUPS_PER_PARTITION` open slices."""
    m = cfg.matching

    def unread() -> int:
        rest: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
        for (t, p, _), s in open_slices.items():
            lo, hi = s.edges()
            if not s.is_left_closed:
                rest[(t, p)].append((lo, s.position))
            if not s.is_right_closed:
                rest[(t, p)].append((s.position, hi))
        return book.unread(rest)

    n = unread()  # to the windows' edges where known, else to the log's
    unknown = {key: s for key, s in open_slices.items() if s.window is None}
    per_tp: dict[TopicPartitionKey, int] = defaultdict(int)
    for t, p, _ in open_slices:
        per_tp[(t, p)] += 1
    if n > LEFTOVER_OFFSETS and unknown and max(per_tp.values()) <= WINDOW_LOOKUPS_PER_PARTITION:
        look_up_windows(dst, unknown, bounds, m.context, m.window_before_ms, m.window_after_ms)
        n = unread()
    if n > LEFTOVER_OFFSETS:
        return None
    for s in open_slices.values():
        s.reach_edges()
    return n


def search_destination(
    spark: SparkOrLater,
    dst: Cluster,
    inputs: Callable[[], MatchInputs],
    anchor_prints,  # noqa: ANN001 - numpy int64: the anchors' fingerprints
    context: Mapping[tuple[str, int, int], int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    cfg: FerryConfig,
    read: Callable[[Sequence], DataFrame],
    progress: Callable[[str], None],
    ahead: Callable[[], object] | None = None,
) -> SearchResult:
    """Read outward from every anchor position until each is decided or its window is read,
    and match each position in its final slice.

    `context`: the anchor positions (`SLICE_KEYS`: destination topic, partition, anchor
    timestamp) of the anchors, each with the records before them a match needs (the least of
    its anchors' source context, at most k); `inputs()`: the anchors and what else every
    step's query reads (waited for at the first step: they are handed to Spark while the
    destination is looked up and read); `anchor_prints`: the anchors' fingerprints (the
    destination records sharing one are the possible candidates, which each step locates on
    the driver, `ferry.migrate.context`). `spark` may still be starting.
    `read(ranges)` reads offset ranges of the destination to the driver: the (topic,
    partition, offset, timestamp_ms, sha256, fingerprint) of their records (Arrow).
    `ahead()`: driver work that needs no match, done while the first step's query runs.

    Each step is one read and one Spark job, which matches every position whose slice was
    read in it; of the slices still open, the driver then tells which are decided from that
    job's rows and the offsets read: a position is done when its slice is decided or closed,
    and its row from that job is its result. So a run
    whose slices are all decided at the first step runs one matching job, and the last few
    open positions (read to their windows' edges at once) one more, over their partitions
    only. Positions within their context of the log start are read to their windows' edges
    at the first step: they could not be decided early."""
    m = cfg.matching
    k = m.context
    by_partition = _by_partition(context)
    whole = partitions_read_whole({tp: len(ks) for tp, ks in by_partition.items()}, bounds, k)
    large = [key for tp, ks in by_partition.items() if tp not in whole for key in ks]
    if large:
        progress(f"destination: looking up {len(large)} anchor timestamps")
    # The broker's answers, checked by the first read instead of a probe each (`verify_first`)
    at, unverified = first_positions(dst, large, bounds)
    slices = {key: _first_slice(pos, *bounds[key[:2]], k, False) for key, pos in at.items()}
    # A partition read whole is one slice, its positions' all: closed at once, it never changes
    # (250,000 positions on 64 such partitions: a second making them one by one). What is
    # asked of a slice is asked once per slice, not once per position (`members`).
    members: dict[int, list[tuple[str, int, int]]] = {id(s): [key] for key, s in slices.items()}
    shared = {id(s): s for s in slices.values()}
    for tp in whole:
        s = _first_slice(0, *bounds[tp], k, True)
        shared[id(s)], members[id(s)] = s, by_partition[tp]
        slices.update(dict.fromkeys(by_partition[tp], s))
    book, read_tables = RangeBook(), []
    # A position that lands closer to the destination's log start than its anchors' context
    # reaches: the copy there has less context before it than the anchor, so it is never a
    # full match and the slice never decided; it would widen step after step to its window's
    # edges. It is read there at the first step instead (when that is small). A slice read
    # whole is closed from the start.
    cut_short = {
        key: s
        for key in at
        if (s := slices[key]).is_open and s.position - s.log_start < context[key]
    }
    if cut_short and (n := finish_leftovers(dst, cut_short, bounds, book, cfg)) is not None:
        progress(
            f"destination: {len(cut_short)} anchor positions within their context of the log "
            f"start read to their windows' edges at once ({n} offsets)"
        )
    kept: list[pa.Table] = []  # each step's rows that are their positions' results
    offsets_read, step = 0, 0
    unanchored = True  # positions with no anchor ("none") are matched by the first job
    while step < MAX_STEPS and (
        unanchored or any(s.is_open or not s.read_bounds for s in shared.values())
    ):
        step += 1
        wanted: dict[TopicPartitionKey, list[tuple[int, int]]] = defaultdict(list)
        reading_ids = [i for i, s in shared.items() if s.is_open or not s.read_bounds]
        for i in reading_ids:
            s = shared[i]
            s.read_bounds = s.bounds(k)
            wanted[members[i][0][:2]].append(s.read_bounds)
        ranges = book.new_ranges(wanted)
        n = sum(r.end - r.start for r in ranges)
        opened = sum(len(members[i]) for i in reading_ids)
        progress(
            f"destination: step {step}, {opened} of {len(slices)} anchor positions open, "
            f"reading {len(ranges)} ranges ({n} offsets)"
        )
        read_table = None
        if ranges:
            read_table = read(ranges)  # every open slice's new offsets at once
            read_tables.append(read_table)
            offsets_read += n
        if unverified:
            wrong = verify_first(
                dst, {key: slices[key] for key in unverified}, read_table, bounds, k
            )
            unverified = set()
            if wrong:
                progress(
                    f"destination: {len(wrong)} timestamp lookups landed before their first "
                    "record (transaction markers are newer than the records): looked up again"
                )
            for key in wrong:  # a slice read around the wrong offset: read again next step
                slices[key].read_bounds = None
            wrong_ids = {id(slices[key]) for key in wrong}
            reading_ids = [i for i in reading_ids if i not in wrong_ids]
        for i in reading_ids:
            shared[i].close_at_edges(k)
        reading = {key: shared[i] for i in reading_ids for key in members[i]}
        still_open = {
            key: shared[i] for i in reading_ids if shared[i].is_open for key in members[i]
        }
        if len(read_tables) > 1:
            read_tables = [pa.concat_tables(read_tables)]
        # every record read so far, per partition: the candidates' context and the judging
        records = anchors.records_by_partition(read_tables[0]) if read_tables else {}
        session = session_of(spark)
        partitions = {members[i][0][:2] for i in reading_ids}
        located = _candidates(session, records, book, anchor_prints, partitions)
        is_everything = unanchored and all(shared[i].is_whole for i in reading_ids)
        ready = inputs()
        step_df = step_query(session, ready, located, reading, unanchored, is_everything, cfg)
        unanchored = False
        # The step's rows as Arrow: each row's slice key and is_full_match are read column-wise,
        # and only when some slice is still open (250,000 positions decided at once: a key
        # tuple and a dict edit a row, 0.7 s)
        first = ahead if step == 1 else None
        step_table = beside(first, collected, step_df, ready.anchors_table, "is_full_match")
        position_table = step_table.drop_columns(["is_full_match"])  # and `ANCHOR_ROW`
        if not still_open:
            kept.append(position_table)
            continue
        keys = list(zip(*(step_table.column(c).to_pylist() for c in SLICE_KEYS), strict=True))
        is_full: dict[tuple[str, int, int], bool] = {}
        for key, full in zip(keys, step_table.column("is_full_match").to_pylist(), strict=True):
            if key in still_open:
                is_full[key] = is_full.get(key, True) and bool(full)
        judged = judge_slices(records, still_open, is_full, k, m.window_before_ms,
                              m.window_after_ms)  # fmt: skip
        for key, state in judged.items():
            s = still_open[key]
            s.is_decided = state.is_decided
            s.is_left_closed = state.is_left_closed
            s.is_right_closed = state.is_right_closed
        own = [  # the rows that are the step's own results
            i
            for i, key in enumerate(keys)
            if (s := still_open.get(key)) is None or not s.is_open or step == MAX_STEPS
        ]
        kept.append(position_table.take(pa.array(own, pa.int64())))
        for s in still_open.values():
            if s.is_open:
                if not s.is_left_closed:
                    s.before = max(FIRST_RADIUS, s.before * GROWTH)
                if not s.is_right_closed:
                    s.after *= GROWTH
        leftovers = {key: s for key, s in still_open.items() if s.is_open}
        if leftovers and (n := finish_leftovers(dst, leftovers, bounds, book, cfg)) is not None:
            progress(
                f"destination: the {len(leftovers)} anchor positions still open read to "
                f"their windows' edges at once ({n} offsets)"
            )
    table = in_anchor_order(kept, inputs().anchors_table.num_rows)
    return SearchResult(table, offsets_read, len(slices), step)


def _candidates(
    spark: SparkSession,
    records: Mapping[TopicPartitionKey, PartitionRecords],
    book: RangeBook,
    anchor_prints,  # noqa: ANN001 - numpy
    partitions: set[TopicPartitionKey],
) -> Located:
    """The records of the slices' partitions that share an anchor's fingerprint (the possible
    candidates), located within the intervals read so far, with their timestamps and hashes
    (`records`: every destination record read so far, per partition)."""
    wanted = with_fingerprint_in(records, anchor_prints, partitions)
    return located_records(spark, records, book.read, wanted)


def step_query(
    spark: SparkSession,
    inputs: MatchInputs,
    located: Located,
    reading: Mapping[tuple[str, int, int], AnchorSlice],
    unanchored: bool,
    is_everything: bool,
    cfg: FerryConfig,
) -> DataFrame:
    """A step's one query (`match_in_slices`): the anchors of the slices read in it
    (`reading`, and with `unanchored` the positions with no anchor) matched inside their
    slices, among `located`'s possible candidates. Whether a slice is decided is judged on
    the driver afterwards (`judge_slices`).

    `is_everything`: the first step of a search that reads every anchor's partition whole,
    which takes every position, and a candidate anywhere in what was read is in its anchor's
    slice: no slice is joined (a local relation, two joins and a condition less to plan and
    run)."""
    m = cfg.matching
    anchors_df = inputs.anchors_df
    return match_in_slices(
        inputs,
        anchors_df if is_everything else _only(spark, anchors_df, reading, unanchored),
        located,
        m.context,
        m.window_before_ms,
        m.window_after_ms,
        within_slices=not is_everything,
    )


def _only(
    spark: SparkSession,
    anchors_df: DataFrame,
    slices: Mapping[tuple[str, int, int], AnchorSlice],
    unanchored: bool,
) -> DataFrame:
    """The anchors of these slices with their slices' bounds as last read (and,
    `unanchored`, those with no anchor at all, which have no slice)."""
    keyed_df, whole_df = _slices_dfs(spark, slices)
    return with_slices(anchors_df, keyed_df, unanchored, whole_df)


def takes_one_step(
    context: Mapping[tuple[str, int, int], int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> bool:
    """Whether the search surely ends after its first step: every anchor position's partition
    is read whole at once, so nothing is left open after it."""
    per_tp = Counter(map(_PARTITION, context))
    return len(partitions_read_whole(per_tp, bounds, k)) == len(per_tp)


_PARTITION = itemgetter(0, 1)  # an anchor position's destination partition


def _by_partition(
    context: Mapping[tuple[str, int, int], int],
) -> dict[TopicPartitionKey, list[tuple[str, int, int]]]:
    """The anchor positions of each destination partition, in order."""
    return {tp: list(keys) for tp, keys in groupby(sorted(context), key=_PARTITION)}


def partitions_read_whole(
    per_tp: Mapping[TopicPartitionKey, int],
    bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    k: int,
) -> set[TopicPartitionKey]:
    """Destination partitions read whole at once, with no lookup and no search, given how
    many anchor positions each has (`per_tp`): those no larger than a few steps would read,
    and those whose anchor positions are so many that their first slices alone would cover
    half of it. A lookup costs a request and a read per anchor (a cutover's 200 groups on a
    20,000-record partition spent a minute in them) and deciding overlapping slices costs
    more than the records they hold."""
    first_read = 2 * (k + 1) + FIRST_RADIUS
    out = set()
    for tp, n in per_tp.items():
        size = bounds[tp][1] - bounds[tp][0]
        if size <= SMALL_PARTITION or 2 * n * first_read >= size:
            out.add(tp)
    return out


def _first_slice(position: int, log_start: int, log_end: int, k: int, whole: bool) -> AnchorSlice:
    """The anchor's millisecond and context, or (`whole`) its partition's whole log, which
    needs no look at all."""
    s = AnchorSlice(position, log_start, log_end, before=0, after=FIRST_RADIUS, is_whole=whole)
    if whole:
        s.position, s.before, s.after = log_start, 0, max(SMALL_PARTITION, log_end - log_start)
    s.close_at_edges(k)
    return s


def _slices_dfs(
    spark: SparkSession, slices: Mapping[tuple[str, int, int], AnchorSlice]
) -> tuple[DataFrame | None, DataFrame | None]:
    """The slices with the bounds last read, as rows: one per anchor position
    (`SLICES_SCHEMA`), and one per partition read whole (`WHOLE_SLICES_SCHEMA`); None where
    there are none (a join less in the step's query)."""
    rows, whole = [], {}
    for (t, p, ts), s in slices.items():
        start, end = s.read_bounds or (0, 0)
        if s.is_whole:
            whole[(t, p)] = (t, p, start, end)
        else:
            rows.append((t, p, ts, s.position, start, end, s.log_start, s.log_end))
    return (
        local_df(spark, rows, SLICES_SCHEMA) if rows else None,
        local_df(spark, list(whole.values()), WHOLE_SLICES_SCHEMA) if whole else None,
    )

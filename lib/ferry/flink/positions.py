"""A Flink savepoint's KafkaSource positions as `migrate` position sets, and the tool's write
plan from their decisions (pure: the tool's JSON in, dicts out).

Each KafkaSource (one operator, told by its uid, or its operator id when it has none) gives:

- `uid U`: every reader split's next offset (the readers' `SourceReaderState`, what the job
  reads from on restart). A split no record was read from yet still holds its starting
  marker: EARLIEST (-2) is where the reader would seek on the source, its log start now, and
  LATEST (-1) its log end now: both are translated as those offsets (on the destination the
  markers would mean the copy's own start or end, other records). COMMITTED (-3) needs the
  group the job committed to: refused.
- `uid U stop`: the stopping offsets of a bounded source's splits (each the offset after the
  last record to read), translated as positions too, so the job stops after the same record.
- `uid U enumerator`: the enumerator's UNASSIGNED splits (assigned by the enumerator after the
  restart, from their offsets). Its ASSIGNED splits keep their offsets: Flink reads only their
  partitions from the state (`KafkaSourceEnumerator` tracks which partitions it handed out;
  the readers' state holds where they are); their topic names are renamed all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.config import FerryConfig
from ferry.errors import UsageError
from ferry.keys import TopicPartitionKey

EARLIEST, LATEST, COMMITTED = -2, -1, -3  # KafkaPartitionSplit's starting markers
MARKERS = {EARLIEST: "EARLIEST", LATEST: "LATEST", COMMITTED: "COMMITTED"}
STOP, ENUMERATOR = "stop", "enumerator"


@dataclass(frozen=True)
class KafkaSource:
    """One KafkaSource operator as the tool read it."""

    operator_id: str
    uid: str | None
    readers: list[dict]  # topic, partition, offset, stopping_offset, subtask
    enumerator: dict | None  # splits (with status), initial_discovery_finished

    @property
    def label(self) -> str:
        return f"uid {self.uid}" if self.uid else f"operator {self.operator_id}"

    @property
    def topics(self) -> set[str]:
        splits = self.readers + (self.enumerator or {}).get("splits", [])
        return {s["topic"] for s in splits}


def sources_of(described: Mapping) -> list[KafkaSource]:
    return [
        KafkaSource(s["operator_id"], s.get("uid"), list(s["readers"]), s.get("enumerator"))
        for s in described["sources"]
    ]


def partitions_of(sources: list[KafkaSource]) -> set[TopicPartitionKey]:
    return {
        (s["topic"], s["partition"])
        for src in sources
        for s in src.readers + (src.enumerator or {}).get("splits", [])
    }


def selected(sources: list[KafkaSource], cfg: FerryConfig, path: str) -> list[KafkaSource]:
    """The sources whose topics the config selects; one mixing selected and other topics is
    refused (exit 2), one reading none of them left as it is."""
    out = []
    for source in sources:
        chosen = {t for t in source.topics if cfg.topics.matches(t)}
        if chosen and chosen != source.topics:
            others = ", ".join(sorted(source.topics - chosen))
            raise UsageError(
                f"{path}: KafkaSource {source.label} reads topics the config selects and "
                f"others ({others}): select all of them or none"
            )
        if chosen:
            out.append(source)
    return out


def resolve(offset: int, bounds: tuple[int, int], where: str) -> int:
    """A starting offset as the source would resolve it now."""
    if offset >= 0:
        return offset
    if offset == EARLIEST:
        return bounds[0]
    if offset == LATEST:
        return bounds[1]
    raise UsageError(
        f"{where}: starts from the group's COMMITTED offsets (no record read yet): translate "
        "that group with `migrate` instead, or restart the job on the source until it reads"
    )


def position_sets(
    sources: list[KafkaSource], bounds: Mapping[TopicPartitionKey, tuple[int, int]], path: str
) -> dict[str, dict[TopicPartitionKey, int]]:
    """The position sets of the module docstring, by name."""
    sets: dict[str, dict[TopicPartitionKey, int]] = {}
    for source in sources:
        readers, stops, unassigned = {}, {}, {}
        for split in source.readers:
            tp = (split["topic"], split["partition"])
            where = f"{path} {source.label} {tp[0]}[{tp[1]}]"
            readers[tp] = resolve(split["offset"], bounds[tp], where)
            if split["stopping_offset"] is not None and split["stopping_offset"] >= 0:
                stops[tp] = split["stopping_offset"]
        for split in (source.enumerator or {}).get("splits", []):
            if split["status"] != "ASSIGNED":
                tp = (split["topic"], split["partition"])
                where = f"{path} {source.label} enumerator {tp[0]}[{tp[1]}]"
                unassigned[tp] = resolve(split["offset"], bounds[tp], where)
        for name, offsets in (
            (source.label, readers),
            (f"{source.label} {STOP}", stops),
            (f"{source.label} {ENUMERATOR}", unassigned),
        ):
            if offsets:
                sets[name] = offsets
    return sets


def write_plan(
    sources: list[KafkaSource],
    chosen: list[KafkaSource],
    offsets: Mapping[str, Mapping[TopicPartitionKey, int]],
    rename: Mapping[str, str],
) -> dict:
    """What the tool writes for every Kafka source: per reader and enumerator split, keyed by
    `topic\\0partition`, its topic, offset and stopping offset. `offsets`: each set's
    destination offsets ((destination topic, partition) → offset). A source not chosen keeps
    every split as it is."""
    out: dict[str, dict] = {}
    picked = {s.operator_id for s in chosen}
    for source in sources:
        entry: dict[str, dict] = {"readers": {}, "enumerator": {}}
        readers = offsets.get(source.label, {})
        stops = offsets.get(f"{source.label} {STOP}", {})
        unassigned = offsets.get(f"{source.label} {ENUMERATOR}", {})
        for split in source.readers:
            entry["readers"][key(split)] = _split(split, source.operator_id in picked, rename,
                                                  readers, stops)  # fmt: skip
        for split in (source.enumerator or {}).get("splits", []):
            moved = source.operator_id in picked
            table = unassigned if split["status"] != "ASSIGNED" else {}
            entry["enumerator"][key(split)] = _split(split, moved, rename, table, stops)
        out[source.operator_id] = entry
    return {"sources": out}


def key(split: Mapping) -> str:
    return f"{split['topic']}\0{split['partition']}"


def _split(
    split: Mapping,
    moved: bool,
    rename: Mapping[str, str],
    offsets: Mapping[TopicPartitionKey, int],
    stops: Mapping[TopicPartitionKey, int],
) -> dict:
    if not moved:
        return {k: split[k] for k in ("topic", "offset", "stopping_offset")}
    topic = rename.get(split["topic"], split["topic"])
    dst = (topic, split["partition"])
    stopping = split["stopping_offset"]
    return {
        "topic": topic,
        "offset": offsets.get(dst, split["offset"]),
        "stopping_offset": stops.get(dst, stopping) if stopping is not None else None,
    }

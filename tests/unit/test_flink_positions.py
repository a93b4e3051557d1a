"""`ferry.flink.positions`: a savepoint's KafkaSource splits as position sets, and the write
plan the tool applies (pure)."""

from __future__ import annotations

import pytest

from ferry.config import FerryConfig
from ferry.config.model import RenameRule, TopicSelection
from ferry.errors import UsageError
from ferry.flink import positions
from ferry.flink.positions import COMMITTED, EARLIEST, LATEST

NO_STOP = None


def split(topic, partition, offset, stopping=NO_STOP, **extra):  # noqa: ANN001, ANN003, ANN201
    return {"topic": topic, "partition": partition, "offset": offset,
            "stopping_offset": stopping, **extra}  # fmt: skip


def described(*sources: dict) -> dict:
    return {"sources": list(sources)}


def kafka_source(readers, enumerator_splits=(), uid="kafka-source", op="ab12"):  # noqa: ANN001, ANN201
    return {
        "operator_id": op,
        "uid": uid,
        "readers": list(readers),
        "enumerator": {"initial_discovery_finished": True, "splits": list(enumerator_splits)},
    }


BOUNDS = {("t", 0): (5, 100), ("t", 1): (0, 50), ("t", 2): (10, 10)}


def test_reader_offsets_and_markers_resolve_as_the_source_would():
    src = positions.sources_of(
        described(kafka_source([split("t", 0, 42), split("t", 1, EARLIEST), split("t", 2, LATEST)]))
    )
    sets = positions.position_sets(src, BOUNDS, "sp")
    assert sets == {"uid kafka-source": {("t", 0): 42, ("t", 1): 0, ("t", 2): 10}}


def test_committed_marker_is_refused_in_one_line():
    src = positions.sources_of(described(kafka_source([split("t", 0, COMMITTED)])))
    with pytest.raises(UsageError, match=r"sp uid kafka-source t\[0\]: starts from the group"):
        positions.position_sets(src, BOUNDS, "sp")


def test_stopping_offsets_and_unassigned_enumerator_splits_are_sets_of_their_own():
    readers = [split("t", 0, 42, stopping=90)]
    enum = [split("t", 0, 7, status="ASSIGNED"), split("t", 1, 3, status="UNASSIGNED")]
    src = positions.sources_of(described(kafka_source(readers, enum, uid=None)))
    sets = positions.position_sets(src, BOUNDS, "sp")
    assert sets == {
        "operator ab12": {("t", 0): 42},
        "operator ab12 stop": {("t", 0): 90},
        "operator ab12 enumerator": {("t", 1): 3},
    }


def test_write_plan_renames_every_split_and_moves_only_translated_offsets():
    readers = [split("t", 0, 42, stopping=90, subtask=0)]
    enum = [split("t", 0, 7, status="ASSIGNED"), split("t", 1, 3, status="UNASSIGNED")]
    src = positions.sources_of(described(kafka_source(readers, enum)))
    offsets = {
        "uid kafka-source": {("t-copy", 0): 71},
        "uid kafka-source stop": {("t-copy", 0): 119},
        "uid kafka-source enumerator": {("t-copy", 1): 9},
    }
    plan = positions.write_plan(src, src, offsets, {"t": "t-copy"})
    entry = plan["sources"]["ab12"]
    assert entry["readers"] == {
        "t\0" + "0": {"topic": "t-copy", "offset": 71, "stopping_offset": 119}
    }
    assert entry["enumerator"] == {
        "t\0" + "0": {"topic": "t-copy", "offset": 7, "stopping_offset": None},  # assigned: kept
        "t\0" + "1": {"topic": "t-copy", "offset": 9, "stopping_offset": None},
    }


def test_a_source_not_selected_is_written_as_it_is():
    src = positions.sources_of(described(kafka_source([split("other", 0, 4)])))
    plan = positions.write_plan(src, [], {}, {})
    assert plan["sources"]["ab12"]["readers"] == {
        "other\0" + "0": {"topic": "other", "offset": 4, "stopping_offset": None}
    }


def test_a_source_mixing_selected_and_other_topics_is_refused():
    cfg = FerryConfig(topics=TopicSelection(include=("t",), rename=(RenameRule("^t$", "u"),)))
    mixed = positions.sources_of(described(kafka_source([split("t", 0, 1), split("other", 0, 1)])))
    with pytest.raises(UsageError, match="reads topics the config selects and others"):
        positions.selected(mixed, cfg, "sp")
    only_other = positions.sources_of(described(kafka_source([split("other", 0, 1)])))
    assert positions.selected(only_other, cfg, "sp") == []


def test_savepoint_paths_local_only_and_the_new_one_beside_the_old(tmp_path):
    from ferry.flink.savepoint import new_path, savepoint_dir, temp_path

    folder = tmp_path / "savepoint-ab12-cd34"
    folder.mkdir()
    with pytest.raises(UsageError, match="no _metadata"):
        savepoint_dir(str(folder))
    (folder / "_metadata").write_bytes(b"x")
    assert savepoint_dir(f"file://{folder}/_metadata") == folder.resolve()
    with pytest.raises(UsageError, match="local or mounted paths"):
        savepoint_dir("hdfs:///savepoints/savepoint-ab12-cd34")
    assert new_path(folder) == tmp_path / "savepoint-ab12-cd34-ferry"
    assert temp_path(folder) == tmp_path / ".savepoint-ab12-cd34-ferry.tmp"

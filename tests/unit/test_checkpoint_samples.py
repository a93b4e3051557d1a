"""Real checkpoints as PySpark 4.2 with Spark's Kafka connector wrote them, one per mode
(tests/unit/checkpoint_samples, `python -m ferry.testing.checkpoint_samples` regenerates them):
every offsets file parses and renders back byte for byte, its Kafka lines are found (by name
in a v2 log), and the batches chosen are those Spark reads on restart; every source's start
offsets (`sources/KEY/0`) parse and render back byte for byte too, and which of them Spark
reads on restart follows its rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry.checkpoint.offsets_log import (
    batch_ids,
    choose_batches,
    parse_offsets_file,
    render_offsets_file,
    translated_line,
)
from ferry.checkpoint.start_offsets import (
    Read,
    parse_start_offsets,
    render_start_offsets,
    start_reads,
)

SAMPLES = Path(__file__).resolve().parent / "checkpoint_samples"
MODES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def log(mode: str, directory: str) -> list[int]:
    folder = SAMPLES / mode / directory
    return batch_ids(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_every_mode_is_there():
    assert {"subscribe", "dsv1", "union", "assign", "pattern", "v2_named", "v2_unnamed"} <= set(
        MODES
    )
    assert {"async", "continuous", "subscribe_uncommitted", "v2_named_uncommitted"} <= set(MODES)


@pytest.mark.parametrize("mode", MODES)
def test_every_offsets_file_parses_and_renders_back_byte_for_byte(mode):
    for batch in log(mode, "offsets"):
        data = (SAMPLES / mode / "offsets" / str(batch)).read_bytes()
        parsed = parse_offsets_file(f"{mode}/offsets/{batch}", batch, data)
        assert parsed.kafka_sources, f"{mode}/offsets/{batch}: no Kafka line found"
        assert render_offsets_file(parsed, {}) == data
        # a line rewritten with its own offsets and names is the very bytes Spark wrote
        same = {
            s.key: translated_line(
                s,
                {t: t for t in s.kafka or {}},
                {(t, p): o for t, parts in (s.kafka or {}).items() for p, o in parts.items()},
            )
            for s in parsed.kafka_sources
        }
        assert render_offsets_file(parsed, same) == data


def test_a_v2_log_keys_its_kafka_lines_by_name_or_index():
    named = parse_offsets_file("n", 2, (SAMPLES / "v2_named" / "offsets" / "2").read_bytes())
    assert sorted(s.key for s in named.kafka_sources) == ["first", "second"]
    unnamed = parse_offsets_file("u", 4, (SAMPLES / "v2_unnamed" / "offsets" / "4").read_bytes())
    assert sorted(s.key for s in unnamed.kafka_sources) == ["0", "1"]


@pytest.mark.parametrize(
    ("mode", "newest", "batches", "is_committed"),
    [
        ("subscribe", 2, (1, 2), True),
        ("dsv1", 2, (1, 2), True),  # DSv1's getBatch(offsets/1, offsets/2) on restart
        ("subscribe_uncommitted", 2, (1, 2), False),
        ("union_uncommitted", 2, (1, 2), False),
        ("v2_named_uncommitted", 2, (1, 2), False),
        ("async", 10, (5, 10), True),  # ids skip: the previous one in storage is 5
        ("continuous", 9, (8, 9), True),  # the newest committed epoch (9) is read
    ],
)
def test_the_batches_chosen_are_those_spark_reads_on_restart(mode, newest, batches, is_committed):
    choice = choose_batches(mode, log(mode, "offsets"), log(mode, "commits"))
    assert (choice.newest, choice.batches, choice.is_committed) == (newest, batches, is_committed)


START_FILES = sorted(SAMPLES.glob("*/sources/*/0"))


def test_the_samples_have_start_offsets_named_by_index_or_by_name():
    keys = {(p.parents[2].name, p.parent.name) for p in START_FILES}
    assert {("dsv1", "0"), ("union", "1"), ("v2_named", "first"), ("v2_unnamed", "1")} <= keys
    assert not any(p.parents[2].name == "continuous" for p in START_FILES)  # none written


@pytest.mark.parametrize("path", START_FILES, ids=lambda p: f"{p.parents[2].name}/{p.parent.name}")
def test_every_start_offsets_file_parses_and_renders_back_byte_for_byte(path):
    data = path.read_bytes()
    assert data.startswith(b"\x00v1\n")  # KafkaSourceInitialOffsetWriter: a zero byte, v1
    start = parse_start_offsets(str(path), path.parent.name, data)
    assert start.prefix == b"\x00v1\n" and start.kafka
    assert render_start_offsets(start, start.kafka) == data
    renamed = {f"source.{t}": parts for t, parts in start.kafka.items()}
    out = render_start_offsets(start, renamed)
    assert out.startswith(b"\x00v1\n") and b'"source.' in out


def parsed(mode: str, batches) -> dict:
    return {
        b: parse_offsets_file(mode, b, (SAMPLES / mode / "offsets" / str(b)).read_bytes())
        for b in batches
    }


@pytest.mark.parametrize(
    ("mode", "offsets", "commits", "reads"),
    [
        # Batch N runs again (or is checked) from offsets/N-1: the start offsets are not read.
        ("subscribe", [0, 1, 2], [0, 1, 2], {}),
        ("dsv1_uncommitted", [0, 1, 2], [0, 1], {}),
        ("union_uncommitted", [0, 1, 2], [0, 1], {}),
        # The first batch, not committed: every source runs it again from its start offsets.
        ("union", [0], [], {0: Read.RECORDS, 1: Read.RECORDS}),
        ("v2_named", [0], [], {"first": Read.RECORDS, "second": Read.RECORDS}),
        # The first batch committed: a DSv1 source checks them (getBatch(None, offsets/0)).
        ("dsv1", [0], [0], {0: Read.PRIMED}),
    ],
)
def test_the_start_offsets_spark_reads_on_restart(mode, offsets, commits, reads):
    choice = choose_batches(mode, offsets, commits)
    assert start_reads(choice, parsed(mode, choice.batches)) == reads

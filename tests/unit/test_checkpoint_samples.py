"""Real checkpoints as PySpark 4.2 with Spark's Kafka connector wrote them, one per mode
(tests/unit/checkpoint_samples, `python -m ferry.testing.checkpoint_samples` regenerates them):
every offsets file parses and renders back byte for byte, its Kafka lines are found (by name
in a v2 log), and the batches chosen are those Spark reads on restart."""

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

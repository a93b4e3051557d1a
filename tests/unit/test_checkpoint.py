"""The offset log of a Structured Streaming checkpoint as text (`ferry.checkpoint.offsets_log`):
what Spark 4.2 writes, parsed; Kafka lines told from other sources'; the batches a translation
needs; a rewrite that changes the translated lines only, byte for byte."""

from __future__ import annotations

import pytest

from ferry.checkpoint.offsets_log import (
    CheckpointFormatError,
    batch_ids,
    choose_batches,
    kafka_offsets,
    parse_offsets_file,
    render_offsets_file,
    translated_line,
)
from ferry.errors import UsageError

# As Spark 4.2 wrote it for a query on a Kafka source, a rate source with no offset yet and a
# file source (taken from a local run; the metadata line shortened).
METADATA = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1764130000000,"conf":{'
    '"spark.sql.shuffle.partitions":"8","spark.sql.streaming.stateStore.providerClass":'
    '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}}'
)
KAFKA = '{"events":{"2":29,"1":7,"0":23}}'
FILE = '{"logOffset":3}'
SPARK_FILE = f"v1\n{METADATA}\n{KAFKA}\n-\n{FILE}".encode()


def test_an_offsets_file_parses_into_its_header_metadata_and_sources():
    parsed = parse_offsets_file("cp/offsets/4", 4, SPARK_FILE)
    assert parsed.batch_id == 4 and parsed.version == "v1" and parsed.metadata == METADATA
    assert [s.text for s in parsed.sources] == [KAFKA, "-", FILE]
    assert [s.index for s in parsed.kafka_sources] == [0]
    assert parsed.kafka_sources[0].kafka == {"events": {2: 29, 1: 7, 0: 23}}


@pytest.mark.parametrize(
    "line",
    [
        '{"logOffset":3}',
        "17",
        '{"sourceVersion":1,"reservoirId":"x","index":-1}',
        "-",
        '{"t":{"x":1}}',
        '{"t":{"0":1.5}}',
        '{"t":{}}',
        "{}",
        '{"t":{"0":true}}',
    ],
)
def test_lines_of_other_sources_are_not_kafka(line):
    assert kafka_offsets(line) is None


def test_a_kafka_line_with_several_topics():
    assert kafka_offsets('{"a":{"0":1},"b":{"0":0,"1":5}}') == {"a": {0: 1}, "b": {0: 0, 1: 5}}


def test_a_rewrite_keeps_every_other_byte_and_renames_the_topic():
    parsed = parse_offsets_file("f", 4, SPARK_FILE)
    line = translated_line(
        parsed.kafka_sources[0],
        {"events": "src.events"},
        {("src.events", 0): 160, ("src.events", 1): 0, ("src.events", 2): 58},
    )
    assert line == '{"src.events":{"0":160,"1":0,"2":58}}'
    out = render_offsets_file(parsed, {0: line})
    assert out == f"v1\n{METADATA}\n{line}\n-\n{FILE}".encode()
    # Nothing replaced: the very bytes Spark wrote (no trailing newline added).
    assert render_offsets_file(parsed, {}) == SPARK_FILE
    again = parse_offsets_file("f", 4, out)
    assert again.kafka_sources[0].kafka == {"src.events": {0: 160, 1: 0, 2: 58}}


def test_topics_keep_their_order_in_a_rewritten_line():
    parsed = parse_offsets_file("f", 1, b'v1\n{}\n{"b":{"0":1},"a":{"0":2}}')
    line = translated_line(
        parsed.sources[0], {"a": "x.a", "b": "x.b"}, {("x.a", 0): 20, ("x.b", 0): 10}
    )
    assert line == '{"x.b":{"0":10},"x.a":{"0":20}}'


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"v2\n{}\n-", "offsets format 'v2'"),
        (b"hello", "no version line"),
        (b"v1", "no metadata line"),
        (b"v1\n{oops\n-", "metadata line is not JSON"),
        (b'v1\n{}\n{"events":{"0":2', "source 0's offsets are not JSON"),
        (b"v1\n{}\n", "source 0 has an empty line"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_damaged_or_unknown_files_are_one_line_usage_errors_naming_the_file(data, says):
    with pytest.raises(CheckpointFormatError, match=says) as err:
        parse_offsets_file("hdfs://nn/cp/offsets/9", 9, data)
    assert str(err.value).startswith("hdfs://nn/cp/offsets/9: ")
    assert isinstance(err.value, UsageError)  # exit code 2
    assert "\n" not in str(err.value)


def test_batch_ids_are_the_numeric_names_only():
    names = ["0", "1", ".1.crc", "10", "2", ".3.tmp", "3.ferry", "_x"]
    assert batch_ids(names) == [0, 1, 2, 10]


def test_a_committed_newest_batch_is_translated_alone():
    choice = choose_batches("cp", [0, 1, 2, 3], [0, 1, 2, 3])
    assert (choice.newest, choice.is_committed, choice.batches) == (3, True, (3,))


def test_an_uncommitted_newest_batch_is_translated_with_the_one_before():
    choice = choose_batches("cp", [5, 6, 7], [5, 6])
    assert (choice.newest, choice.is_committed, choice.batches) == (7, False, (6, 7))


def test_a_first_batch_uncommitted_or_an_empty_log_cannot_be_translated():
    with pytest.raises(CheckpointFormatError, match="batch 0 is not committed"):
        choose_batches("cp", [0], [])
    with pytest.raises(CheckpointFormatError, match="batch 9 is not committed"):
        choose_batches("cp", [9], [8])
    with pytest.raises(CheckpointFormatError, match="no batch in offsets/"):
        choose_batches("cp", [], [])

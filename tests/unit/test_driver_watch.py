"""ferry.driver_watch's pure parts: which stacks a run may not be ended in, and the grace
period's setting. The watch itself ends a real driver: tests/integration/test_spark_failure.py."""

from __future__ import annotations

import sys

import pytest

from ferry import driver_watch
from ferry.write import commit


class _Stopped(Exception):
    def __init__(self, frame) -> None:  # noqa: ANN001 - a frame
        self.frame = frame


def test_a_batch_of_offset_writes_is_not_ended_anywhere_inside_it(monkeypatch):
    def caught_inside(*_args):  # noqa: ANN202 - in place of the batch's first Kafka call
        raise _Stopped(sys._getframe())

    # nothing reaches Kafka: the batch's own frame is all this looks at
    monkeypatch.setattr(commit.kafka, "by_state", caught_inside)
    with pytest.raises(_Stopped) as stopped:
        commit.write_batch(None, [])  # type: ignore[arg-type]
    inside = stopped.value.frame
    assert driver_watch.is_unstoppable(inside)
    assert not driver_watch.is_unstoppable(inside.f_back.f_back)  # this test, outside it
    assert not driver_watch.is_unstoppable(sys._getframe())
    assert not driver_watch.is_unstoppable(None)


def test_the_grace_period_is_a_positive_number_of_seconds_or_the_default():
    default = driver_watch.DEFAULT_GRACE_S
    assert driver_watch.grace_s({}) == default
    assert driver_watch.grace_s({"FERRY_OOM_GRACE_S": "2.5"}) == 2.5
    for bad in ("", "soon", "0", "-3"):
        assert driver_watch.grace_s({"FERRY_OOM_GRACE_S": bad}) == default

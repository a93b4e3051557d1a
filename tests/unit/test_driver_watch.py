"""ferry.driver_watch's pure parts: which stacks a run may not be ended in, and the grace
period's setting. The watch itself ends a real driver: tests/integration/test_spark_failure.py."""

from __future__ import annotations

import sys

from ferry import driver_watch
from ferry.write import commit


def _frame_inside(filename: str, function: str):  # noqa: ANN202 - a frame
    """The innermost frame of a call made from inside `function`, defined in `filename`."""
    namespace: dict = {"sys": sys}
    code = f"def {function}(inner):\n    return inner()\n"
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - a function of that file
    return namespace[function](lambda: sys._getframe())


def test_a_batch_of_offset_writes_is_not_ended_anywhere_inside_it():
    inside = _frame_inside(commit.__file__, "write_batch")
    assert driver_watch.is_unstoppable(inside)
    assert not driver_watch.is_unstoppable(_frame_inside(commit.__file__, "execute_writes"))
    assert not driver_watch.is_unstoppable(_frame_inside("/elsewhere/x.py", "write_batch"))
    assert not driver_watch.is_unstoppable(sys._getframe())
    assert not driver_watch.is_unstoppable(None)


def test_the_grace_period_is_a_positive_number_of_seconds_or_the_default():
    default = driver_watch.DEFAULT_GRACE_S
    assert driver_watch.grace_s({}) == default
    assert driver_watch.grace_s({"FERRY_OOM_GRACE_S": "2.5"}) == 2.5
    for bad in ("", "soon", "0", "-3"):
        assert driver_watch.grace_s({"FERRY_OOM_GRACE_S": bad}) == default

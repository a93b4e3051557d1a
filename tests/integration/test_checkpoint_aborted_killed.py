"""A checkpoint run that finds its query running while it writes aborts, and SIGKILLed at each
instant of that abort it is never read later as a translation: the next `--execute` ends the
abort (originals back, the run's outcome rows `ABORTED` in the ledger, `aborted` in its folder)
and then translates the checkpoint afresh.

The query's batch is staged: the real job is held after its first offsets file is rewritten
(`ferry.write.kill_points.hold_point`), batch 6 is written as a running query would write it
(from the source's own positions), and the job goes on to find it and abort, killing itself at
the chosen instant. The checkpoint and topics are `test_checkpoint_killed`'s (the same names on
both clusters: only Ferry's marks tell what a file is).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .jobrunner import ROOT, ledger_rows, run_job
from .test_checkpoint import META, fake_checkpoint, offsets_files
from .test_checkpoint_killed import same_names  # noqa: F401 - the module's world

pytestmark = [pytest.mark.integration, pytest.mark.faults]

ABORT_POINTS = [
    "checkpoint.aborting",  # `aborting` written, no original back yet
    "checkpoint.put-back",  # every original back, the ledger not told, no `aborted`
]


def held_and_killed(config: str, path: Path, point: str, topic: str) -> None:
    """The real job, held after its first file; batch 6 written meanwhile; killed at
    `point` of its abort."""
    release = path.parent / f"release-{path.name}"
    command = [
        sys.executable, str(ROOT / "jobs" / "migrate.py"), "--config", config,
        "--checkpoint", str(path), "--idle", "0s", "--execute",
    ]  # fmt: skip
    env = {
        **os.environ,
        "FERRY_KILL_AT": point,
        "FERRY_HOLD_AT": "checkpoint.file",
        "FERRY_HOLD_UNTIL": str(release),
        "FERRY_MASTER": "local[1]",
    }
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 900
    while not Path(f"{release}.held").exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "the job never reached its first file"
        time.sleep(0.2)
    line = f'{{"{topic}":{{"1":28,"0":20}}}}'  # on from the source's 17, 26
    fake_checkpoint(path, {"offsets/6": f'v1\n{META}\n-\n{line}\n{{"logOffset":6}}'})
    release.touch()
    _, err = process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL, err[-2000:]


@pytest.mark.parametrize("point", ABORT_POINTS)
def test_an_abort_killed_midway_is_ended_by_the_next_run_never_read_as_a_translation(
    same_names,  # noqa: F811
    point,
):
    path = same_names["tmp"] / f"a-{point.replace('.', '-')}"
    shutil.copytree(same_names["original"], path)
    original = offsets_files(path)
    (topic,) = json.loads(original["5"].decode().split("\n")[3])
    held_and_killed(same_names["config"], path, point, topic)
    (run,) = [d for d in (path / "ferry").iterdir()]
    assert (run / "aborting").exists() and not (run / "aborted").exists()
    now = offsets_files(path)
    for batch in ("4", "5"):
        assert now[batch] in (original[batch], same_names["translated"][batch]), batch

    again = run_job(
        "migrate", "--config", same_names["config"], "--checkpoint", str(path),
        "--idle", "0s", "--execute",
    )  # fmt: skip
    said = again.stdout + again.stderr
    assert again.code == 0 and "ALREADY_MIGRATED" not in again.stdout, said[-2000:]
    assert (run / "aborted").exists(), said[-2000:]
    ledger = same_names["config"].rsplit("/", 1)[0] + "/ledger"
    statuses = {r["status"] for r in ledger_rows(ledger) if r["run_id"] == run.name}
    assert "ABORTED" in statuses and "COMMITTED" not in statuses, statuses
    after = offsets_files(path)
    # What Spark reads now (5 and 6, and 4: the newest committed) translated afresh from the
    # source's positions, by a run of its own.
    assert after["5"] == same_names["translated"]["5"]
    assert after["6"] != now["6"]
    runs = sorted(d.name for d in (path / "ferry").iterdir())
    assert len(runs) == 2 and (path / "ferry" / runs[-1] / "written").exists(), runs

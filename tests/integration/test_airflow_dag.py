"""docs/airflow/ferry_cutover.py, loaded by Airflow's own DAG loader (DagBag) in the Airflow
that `make test-slow` installs into its own virtualenv (FERRY_AIRFLOW_PYTHON, default
~/.cache/ferry/airflow-<version>/bin/python), and its task run against a stand-in
spark-submit.sh exiting 0, 1, 2, 75 and 137: which of Airflow's outcomes each code gets.
Run by `make test-slow`.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from ferry.testing.artifacts import cache_root

from .jobrunner import ROOT

pytestmark = [pytest.mark.slow]

AIRFLOW_VERSION = "3.3.2"  # as the Makefile installs it
DAGS = ROOT / "docs" / "airflow"

CHECK = textwrap.dedent(
    """\
    import json, os, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.exceptions import AirflowFailException, AirflowException

    bag = DagBag(dag_folder=sys.argv[1])
    dag = bag.dags["ferry_cutover"]  # as parsed (get_dag would ask the metadata database)
    task = dag.get_task("migrate")
    outcomes = {}
    module = sys.modules[[m for m in sys.modules if m.endswith("ferry_cutover")][0]]
    for code in (0, 75, 2, 1, 137):
        os.environ["FAKE_EXIT"] = str(code)
        try:
            task.python_callable()
            outcomes[code] = "success"
        except AirflowFailException:
            outcomes[code] = "failed, no retry"
        except AirflowException:
            outcomes[code] = "retried" if task.retries > 0 else "failed"
    print(json.dumps({
        "errors": {k: str(v) for k, v in bag.import_errors.items()},
        "dags": sorted(bag.dag_ids),
        "schedule": str(dag.schedule),
        "retries": task.retries,
        "tells_a_person": bool(task.on_failure_callback),
        "max_active_runs": dag.max_active_runs,
        "outcomes": outcomes,
        "argv": module.cutover_command(),
        "ran": open(os.environ["FAKE_LOG"]).read().splitlines(),
    }))
    """
)


def airflow_python() -> Path:
    default = cache_root() / f"airflow-{AIRFLOW_VERSION}" / "bin" / "python"
    return Path(os.environ.get("FERRY_AIRFLOW_PYTHON") or default)


def test_airflows_loader_takes_the_dag_and_each_exit_code_gets_its_outcome(tmp_path):
    python = airflow_python()
    if not python.is_file():
        pytest.fail(f"{python} is missing: `make test-slow` installs Airflow there")
    home = tmp_path / "ferry"
    home.mkdir()
    log = tmp_path / "ran.log"
    fake = home / "spark-submit.sh"
    fake.write_text(f'#!/bin/sh\necho "$PWD $*" >> {log}\nexit "$FAKE_EXIT"\n')
    fake.chmod(0o755)
    log.touch()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "FERRY_HOME": str(home),
        "FERRY_CONFIG": "conf/cutover.yaml",
        "FERRY_SUBMIT_OPTIONS": "--master yarn --deploy-mode cluster",
        "FAKE_LOG": str(log),
    }
    done = subprocess.run([str(python), "-c", CHECK, str(DAGS)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["errors"] == {} and seen["dags"] == ["ferry_cutover"]
    assert seen["retries"] > 0 and seen["max_active_runs"] == 1 and seen["tells_a_person"]
    assert seen["schedule"] == "*/30 * * * *"
    assert seen["outcomes"] == {
        "0": "success",
        "75": "retried",
        "2": "failed, no retry",
        "1": "failed, no retry",
        "137": "retried",
    }
    args = "--master yarn --deploy-mode cluster migrate --config conf/cutover.yaml --execute"
    assert seen["argv"] == [f"{home}/spark-submit.sh", *args.split()]
    assert seen["ran"] == [f"{home} {args}"] * 5  # run in FERRY_HOME, once per code

"""An Airflow DAG that runs a Ferry cutover on a schedule: `./spark-submit.sh migrate --config
... --execute` every 30 minutes until every group is migrated, with Ferry's exit codes mapped to
what Airflow does about them (docs/airflow/README.md):

    0   the run did all it was asked                     -> success
    75  only time is missing (a group's records have not -> failed for now and retried later
        reached the destination yet, a cluster did not      (RETRIES times, RETRY_DELAY apart,
        answer)                                             backing off); the next scheduled
                                                            run carries on after that
    2   usage or config error                            -> failed at once, no retries: the DAG
                                                            or the config must change first
    1   the run did not do all it was asked (a group     -> failed at once, no retries, for a
        refused because it is active, a rollback that       person (on_failure_callback): what
        cannot be made)                                     it said is in the task's log
    any other code: Spark or the machine failed (137: killed) -> failed, retried like 75

Airflow's BashOperator retries every non-zero exit alike (only one code can skip), so the task
is Python running spark-submit.sh and raising AirflowFailException (Airflow's "fail, do not
retry") for 1 and 2. Copy this file into the DAGs folder of an Airflow 2.7+ or 3.x that runs on
a machine where Ferry is checked out and `make install` was run (it imports only Airflow and the
standard library), and set the FERRY_* variables below in the scheduler's and workers'
environment. Checked by Airflow's own DAG loader in `make test-slow`
(tests/integration/test_airflow_dag.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.sdk import dag, task
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # Airflow 2.7+
    from airflow.decorators import dag, task
    from airflow.exceptions import AirflowException, AirflowFailException

# Where Ferry is checked out, its config, and spark-submit options before the job name
# (`--master yarn --deploy-mode cluster --packages`, say).
FERRY_HOME = os.environ.get("FERRY_HOME", "/opt/ferry")
FERRY_CONFIG = os.environ.get("FERRY_CONFIG", "conf/migrate.yaml")
FERRY_SUBMIT_OPTIONS = os.environ.get("FERRY_SUBMIT_OPTIONS", "")
SCHEDULE = os.environ.get("FERRY_SCHEDULE", "*/30 * * * *")
RETRIES = 6
RETRY_DELAY = timedelta(minutes=5)

EXIT_DONE, EXIT_INCOMPLETE, EXIT_USAGE, EXIT_LATER = 0, 1, 2, 75


def outcome(code: int) -> None:
    """Turn spark-submit.sh's exit code into what Airflow does: return (success), raise
    AirflowException (failed, retried), or raise AirflowFailException (failed, no retry)."""
    if code == EXIT_DONE:
        return
    if code == EXIT_LATER:
        raise AirflowException("ferry exit 75: not everything could be done yet; retried later")
    if code == EXIT_USAGE:
        raise AirflowFailException(
            "ferry exit 2: usage or config error (the line above says which); not retried: "
            "fix the DAG's options or the config"
        )
    if code == EXIT_INCOMPLETE:
        raise AirflowFailException(
            "ferry exit 1: the run did not do all it was asked (a group refused or not "
            "resolved; the lines above name them); not retried: a person decides"
        )
    raise AirflowException(f"ferry exit {code}: Spark or the machine failed; retried")


def cutover_command() -> list[str]:
    return [
        os.path.join(FERRY_HOME, "spark-submit.sh"),
        *shlex.split(FERRY_SUBMIT_OPTIONS),
        "migrate", "--config", FERRY_CONFIG, "--execute",
    ]  # fmt: skip


def run_cutover() -> None:
    """spark-submit.sh's output goes to the task's log as it is written."""
    outcome(subprocess.run(cutover_command(), cwd=FERRY_HOME, check=False).returncode)


def tell_a_person(context: dict) -> None:
    """Called when the task fails for good (exit 1 or 2, or 75 after every retry): replace
    with your alerting (Slack, PagerDuty, e-mail)."""
    ti = context.get("task_instance") or context.get("ti")
    print(f"ferry cutover needs a person: {ti} failed: {context.get('exception')}")


@dag(
    dag_id="ferry_cutover",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # one cutover run at a time (Ferry's ledger would also make it safe)
    tags=["ferry"],
    default_args={
        "retries": RETRIES,
        "retry_delay": RETRY_DELAY,
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
        "on_failure_callback": tell_a_person,
    },
)
def ferry_cutover() -> None:
    task(task_id="migrate")(run_cutover)()


ferry_cutover()

"""Shared pytest fixtures: one local Spark session for the whole run, and local Apache Kafka
clusters (`ferry.testing.brokers`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("FERRY_MASTER", "local[2]")


@pytest.fixture(scope="session")
def spark():
    from ferry.session import build_session

    session = build_session("ferry-tests")
    yield session
    session.stop()


_failed: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _failed.append(item.nodeid)


def _brokers_fixture(*names: str):
    from ferry.testing.brokers import keep_logs, local_brokers

    with local_brokers(*names) as brokers:
        yield brokers
        if _failed:
            # one folder per pytest-xdist worker: each starts clusters of the same names
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            keep_logs(brokers, ROOT / "var" / "test-logs" / worker)


@pytest.fixture(scope="session")
def cluster():
    """One local Kafka cluster for the whole run; tests use unique topic and group names."""
    yield from (b[0] for b in _brokers_fixture("single"))


@pytest.fixture(scope="session")
def clusters():
    """Two independent local Kafka clusters (source, destination) for the whole run."""
    yield from (tuple(b) for b in _brokers_fixture("source", "destination"))


@pytest.fixture
def unique(request):
    """A name prefix unique to the test, for topics and groups on the shared brokers."""
    import re
    import uuid

    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"

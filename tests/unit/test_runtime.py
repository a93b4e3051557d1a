"""What Spark a run stands on (ferry.runtime) and the settings a server may refuse to say
(ferry.connect.setting, migrate's shuffle partitions): plain logic, no session."""

from __future__ import annotations

import pytest

from ferry import connect, runtime
from ferry.errors import UsageError
from ferry.migrate.plan import shuffle_partitions


class Conf:
    """A session's `conf` that answers from `values`, refusing the keys in `refused` as
    Databricks serverless does (CONFIG_NOT_AVAILABLE)."""

    def __init__(self, values: dict[str, str], refused: tuple[str, ...] = ()) -> None:
        self.values, self.refused = values, refused

    def get(self, key: str, default: str | None = None) -> str | None:
        if key in self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")
        return self.values.get(key, default)


class Session:
    def __init__(self, values: dict[str, str], refused: tuple[str, ...] = ()) -> None:
        self.conf = Conf(values, refused)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("4.2.0", (4, 2)), ("4.1.0.dev1", (4, 1)), ("3.5.2", (3, 5)), ("4", (4, 0)), ("", (0, 0))],
)
def test_spark_versions_are_read_to_major_and_minor(text, parsed):
    assert runtime.spark_version(text) == parsed


def test_an_older_spark_is_refused_in_one_line_and_4_0_on_is_not():
    assert runtime.version_refusal("this PySpark", "4.0.0") is None
    assert runtime.version_refusal("the Spark Connect server", "4.3.0") is None
    line = runtime.version_refusal("this PySpark", "3.5.0")
    assert line is not None and "\n" not in line
    assert line.startswith("this PySpark is Spark 3.5.0; Ferry needs Spark 4.0 or newer")


def test_an_older_client_stops_the_run_before_any_call_it_lacks(monkeypatch):
    # a Spark 3.5 client (Databricks Connect 15.4) has no createDataFrame(pyarrow.Table)
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", "3.5.0")
    with pytest.raises(UsageError, match=r"^this PySpark is Spark 3\.5\.0; Ferry needs Spark 4"):
        runtime.check_client_version()
    monkeypatch.setattr(pyspark, "__version__", "4.2.0")
    runtime.check_client_version()


def test_a_refused_or_unset_setting_is_its_default():
    spark = Session({"spark.app.id": "local-1"}, refused=("spark.sql.extensions",))
    assert connect.setting(spark, "spark.app.id") == "local-1"
    assert connect.setting(spark, "spark.sql.extensions", "") == ""
    assert connect.setting(spark, "spark.unset") is None


@pytest.mark.parametrize(
    ("values", "refused", "n"),
    [
        ({"spark.sql.shuffle.partitions": "8"}, (), 8),
        ({"spark.sql.shuffle.partitions": "auto"}, (), None),  # Databricks'
        ({}, ("spark.sql.shuffle.partitions",), None),
        ({"spark.sql.shuffle.partitions": "0"}, (), None),
    ],
)
def test_shuffle_partitions_that_are_no_number_leave_the_count_to_the_server(values, refused, n):
    assert shuffle_partitions(Session(values, refused)) == n  # type: ignore[arg-type]


def test_the_classic_half_is_told_by_its_modules(monkeypatch):
    assert runtime.has_module("pyspark.core")  # this environment: the full PySpark
    runtime.require_classic()
    assert not runtime.has_module("no_such_package.core")
    monkeypatch.setattr(runtime, "has_module", lambda name: name != "pyspark.core")
    with pytest.raises(UsageError, match=r"pip install 'ferry\[spark\]'"):
        runtime.require_classic()

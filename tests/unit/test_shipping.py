"""What spark-submit.sh ships with a job on a non-local master (`ferry.shipping`), on files in
a temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ferry.config import load_config
from ferry.shipped import SHIPPED_ENV, local_paths
from ferry.shipping import ShippingError, plan_shipment


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    certs = tmp_path / "certs"
    certs.mkdir()
    out = {name: certs / name for name in ("ca.pem", "client.pem", "client.key", "kafka.keytab")}
    for path in out.values():
        path.write_text(f"not really {path.name}\n")
    out["csv"] = tmp_path / "plan.csv"
    out["csv"].write_text("g,t,0,5\n")
    config = {
        "source": {
            "bootstrap.servers": "old:9093",
            "security.protocol": "SSL",
            "ssl.ca.location": str(out["ca.pem"]),
            "ssl.certificate.location": str(out["client.pem"]),
            "ssl.key.location": "${KEY_FILE}",
            "ssl.key.password": "${KEY_PASSWORD}",
        },
        "destination": {
            "bootstrap.servers": "new:9093",
            "ssl.ca.location": str(out["ca.pem"]),  # the same file again: shipped once
            "ssl.crl.location": "/etc/image-only/crl.pem",  # not here: on the nodes
        },
        "cluster": {"bootstrap.servers": "x:9092", "ssl.ca.location": "probe"},
        "ledger": {"path": "s3://bucket/ledger"},
    }
    out["config"] = tmp_path / "migrate.yaml"
    out["config"].write_text(yaml.safe_dump(config))
    return out


ENV = {"KEY_FILE": "", "KEY_PASSWORD": "secret"}


def env(files: dict[str, Path]) -> dict[str, str]:
    return {**ENV, "KEY_FILE": str(files["client.key"])}


def test_cluster_mode_ships_the_config_its_files_and_the_csv(files, tmp_path):
    plan = plan_shipment(
        ["reset", "--config", str(files["config"]), "--from-file", str(files["csv"]),
         "--set", "destination.sasl.kerberos.keytab=" + str(files["kafka.keytab"]),
         "--execute"],
        "cluster", tmp_path / "stage", "hdfs://nn/x/extra.txt,/local/lookup.json#lookup",
        env(files),
    )  # fmt: skip
    assert plan.job_args == [
        "reset", "--config", "migrate.yaml", "--from-file", "plan.csv",
        "--set", "destination.sasl.kerberos.keytab=kafka.keytab", "--execute",
    ]  # fmt: skip
    assert set(plan.files) == {
        "migrate.yaml", "plan.csv", "ca.pem", "client.pem", "client.key", "kafka.keytab"
    }  # fmt: skip
    assert plan.files["ca.pem"] == str(files["ca.pem"].resolve())
    assert plan.driver_files == {}  # the cluster-mode driver finds them in its directory
    staged = Path(plan.files["migrate.yaml"])
    assert staged.parent.parent == tmp_path / "stage" and staged.name == "migrate.yaml"
    shipped = yaml.safe_load(staged.read_text())
    assert shipped["source"]["ssl.ca.location"] == "ca.pem"
    assert shipped["source"]["ssl.certificate.location"] == "client.pem"
    assert shipped["source"]["ssl.key.location"] == "client.key"
    assert shipped["source"]["ssl.key.password"] == "${KEY_PASSWORD}"  # read on the driver
    assert shipped["destination"]["ssl.ca.location"] == "ca.pem"
    assert shipped["destination"]["ssl.crl.location"] == "/etc/image-only/crl.pem"
    assert shipped["cluster"]["ssl.ca.location"] == "probe"
    # the copy is a valid config, and the same config gives the same copy
    assert load_config(staged, env=ENV).source["ssl.ca.location"] == "ca.pem"
    again = plan_shipment(
        ["reset", "--config", str(files["config"])], "cluster", tmp_path / "stage", "", env(files)
    )
    assert again.files["migrate.yaml"] == str(staged)


def test_client_mode_hands_the_driver_a_rewritten_config_and_the_originals(files, tmp_path):
    plan = plan_shipment(
        ["describe", f"--config={files['config']}", "--from-file", str(files["csv"])],
        "client", tmp_path / "stage", "", env(files),
    )  # fmt: skip
    staged = plan.job_args[2]
    assert plan.job_args == ["describe", "--config", staged, "--from-file", str(files["csv"])]
    assert Path(staged).is_absolute() and Path(staged).parent.parent == tmp_path / "stage"
    assert set(plan.files) == {"ca.pem", "client.pem", "client.key"}  # for the executors
    assert plan.driver_files == {
        n: str(files[n].resolve()) for n in ("ca.pem", "client.pem", "client.key")
    }


def test_nothing_to_ship_leaves_the_arguments_alone(tmp_path):
    config = tmp_path / "plain.yaml"
    config.write_text("cluster:\n  bootstrap.servers: h:9092\n")
    args = ["describe", "--config", str(config), "--group", "g.*"]
    client = plan_shipment(args, "client", tmp_path / "stage", "", {})
    assert (client.job_args, client.files, client.driver_files) == (args, {}, {})
    cluster = plan_shipment(args, "cluster", tmp_path / "stage", "", {})
    assert cluster.job_args == ["describe", "--config", "plain.yaml", "--group", "g.*"]
    assert cluster.files == {"plain.yaml": str(config.resolve())}
    # a config that is no file here is on the driver's node (an image, a ConfigMap)
    image = ["migrate", "--config", "/etc/ferry/migrate.yaml"]
    assert plan_shipment(image, "cluster", tmp_path / "stage", "", {}).job_args == image
    assert not (tmp_path / "stage").exists()


def test_two_files_under_one_name_are_an_error_naming_both(files, tmp_path):
    other = tmp_path / "ca.pem"
    other.write_text("another CA\n")
    with pytest.raises(ShippingError) as error:
        plan_shipment(
            ["describe", "--config", str(files["config"])], "client", tmp_path / "stage",
            f"{other}", env(files),
        )  # fmt: skip
    assert str(other) in str(error.value) and str(files["ca.pem"].resolve()) in str(error.value)
    assert "ca.pem" in str(error.value)
    aliased = plan_shipment(
        ["describe", "--config", str(files["config"])], "client", tmp_path / "stage",
        f"{other}#other-ca.pem", env(files),
    )  # fmt: skip
    assert "ca.pem" in aliased.files
    with pytest.raises(ShippingError, match="migrate.yaml"):
        clash = tmp_path / "x" / "migrate.yaml"
        clash.parent.mkdir()
        clash.write_text("")
        plan_shipment(
            ["describe", "--config", str(files["config"])], "cluster", tmp_path / "stage",
            str(clash), env(files),
        )  # fmt: skip


def test_local_paths_resolve_shipped_names_only_where_the_driver_was_told(monkeypatch):
    conf = {"bootstrap.servers": "h:9093", "ssl.ca.location": "ca.pem", "client.id": "ca.pem"}
    monkeypatch.delenv(SHIPPED_ENV, raising=False)
    assert local_paths(conf) == conf  # executors, a cluster-mode driver: the working directory
    monkeypatch.setenv(SHIPPED_ENV, json.dumps({"ca.pem": "/home/me/certs/ca.pem"}))
    assert local_paths(conf) == {**conf, "ssl.ca.location": "/home/me/certs/ca.pem"}


def test_the_environment_leaves_spark_to_spark_and_the_zip_leaves_tests_home(
    tmp_path, monkeypatch
):
    """The executors' environment carries Ferry's runtime packages but not what Spark puts on
    every node itself (pyspark: 485 MB of an archive that is otherwise about 180 MiB), and the
    library zip carries what jobs import, not ferry.testing or the demo."""
    import importlib.util
    import zipfile

    # lib/ferry/packaging.py runs as a script (its name is PyPI's `packaging`'s): load it by path
    path = Path(__file__).resolve().parents[2] / "lib" / "ferry" / "packaging.py"
    spec = importlib.util.spec_from_file_location("ferry_packaging_under_test", path)
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)

    names = [r.split("==")[0] for r in builder.runtime_requirements()]
    assert "pyspark" not in names and "delta-spark" not in names, names
    assert {"confluent-kafka", "pyarrow", "pyyaml"} <= set(names), names

    monkeypatch.setattr(builder, "BUILD", tmp_path)
    monkeypatch.setattr(builder, "LIB_ZIP", tmp_path / "ferry-lib.zip")
    with zipfile.ZipFile(builder.build_lib_zip()) as zf:
        zipped = zf.namelist()
    assert "ferry/cli.py" in zipped and "ferry/migrate/decision.py" in zipped
    assert not [n for n in zipped if n.startswith(("ferry/testing/", "ferry/demo"))], zipped


def test_the_zip_carries_bytecode_that_a_changed_source_overrides(tmp_path, monkeypatch):
    """Python never writes bytecode into a zip it imports from, so the zip carries it: a job
    imports the library without compiling it. The bytecode is checked against its source by
    hash: a zip whose source differs from it imports the source."""
    import importlib.util
    import subprocess
    import sys
    import zipfile

    path = Path(__file__).resolve().parents[2] / "lib" / "ferry" / "packaging.py"
    spec = importlib.util.spec_from_file_location("ferry_packaging_bytecode", path)
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    monkeypatch.setattr(builder, "BUILD", tmp_path)
    monkeypatch.setattr(builder, "LIB_ZIP", tmp_path / "ferry-lib.zip")
    built = builder.build_lib_zip()
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        entries = {n: zf.read(n) for n in names}
    sources = {n for n in names if n.endswith(".py")}
    assert sources and {n + "c" for n in sources} == names - sources

    def imported(zip_path: Path) -> list[str]:
        code = "import ferry, ferry.errors as e; print(e.__file__); print(ferry.__version__)"
        env = {"PYTHONPATH": str(zip_path)}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, cwd=tmp_path, check=True)  # fmt: skip
        return out.stdout.split()

    where, version = imported(built)
    assert where.endswith("ferry/errors.pyc"), where  # the bytecode, not a compile
    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(changed, "w") as zf:
        for name, data in entries.items():
            if name == "ferry/__init__.py":
                data += b"\n__version__ = 'changed'\n"
            zf.writestr(name, data)
    assert imported(changed)[1] == "changed" != version


def test_a_driver_imports_the_installed_pyspark_not_spark_submits_zip(tmp_path):
    """spark-submit puts `$SPARK_HOME/python/lib/pyspark.zip` (and Py4J's) first on the
    driver's path; with pip's PySpark as SPARK_HOME that zip is the installed package's own
    copy, which Python compiles on every import. Importing Ferry moves such zips last, so the
    installed package (with its bytecode) is imported; a zip from elsewhere stays first."""
    import shutil
    import subprocess
    import sys

    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*-src.zip"))]
    assert len(zips) == 2 and all(Path(z).is_file() for z in zips)
    ferry_lib = str(Path(__file__).resolve().parents[2] / "lib")

    def imported(path: list[str]) -> list[str]:
        code = "import ferry, pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={"PYTHONPATH": ":".join([ferry_lib, *path])}, cwd=tmp_path,
                             check=True)  # fmt: skip
        return out.stdout.split()

    for where in imported(zips):
        assert ".zip" not in where and where.endswith(".py"), where
    elsewhere = tmp_path / "spark" / "python" / "lib"
    elsewhere.mkdir(parents=True)
    copies = [shutil.copy(z, elsewhere) for z in zips]
    for where in imported(copies):
        assert where.startswith(str(elsewhere)), where

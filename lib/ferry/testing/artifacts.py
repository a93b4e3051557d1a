"""Fetch pinned Java artifacts (Apache Kafka and its tools) from a Maven repository into a cache.

The test brokers, MirrorMaker 2 and `kafka-consumer-groups` are Apache Kafka's own jars, fetched
by their Maven coordinates with the Ivy jar that PySpark ships, so a machine needs only Java and
`make install`. A set of jars is resolved once into `$FERRY_CACHE/<name>/` and reused while its
marker file names the same coordinates.

Settings (environment):
- `FERRY_CACHE`: where the jars go (default `~/.cache/ferry`).
- `FERRY_MAVEN_MIRROR`: a Maven repository URL to resolve from instead of Ivy's default public
  repository (a company's Nexus or Artifactory proxy on a machine without direct internet).

Run as `python -m ferry.testing.artifacts [name ...]` to fetch ahead of time (`make install`).
The name `spark-packages` resolves the `--packages` the tests' Spark applications ask for into
Spark's own Ivy cache (`spark_packages`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ferry.flink.jars import FLINK_COORDINATES, FLINK_VERSION

KAFKA_VERSION = "4.3.1"
LOG4J_VERSION = "2.25.4"  # the log4j2 Kafka 4.3.1 is built with; its slf4j binding for our logs


@dataclass(frozen=True)
class ArtifactSet:
    """Maven coordinates (group, artifact, version) resolved together, with dependencies."""

    name: str
    coordinates: tuple[tuple[str, str, str], ...]
    # Ivy artifact types retrieved: Hadoop's MiniCluster classes come in `tests` jars
    types: tuple[str, ...] = ("jar", "bundle")

    @property
    def marker(self) -> str:
        return "\n".join(":".join(c) for c in self.coordinates) + "\n"


KAFKA = ArtifactSet(
    f"kafka-{KAFKA_VERSION}",
    (
        ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
        ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ),
)

# The newest Apache Kafka 3.9 for the one suite whose peer cannot talk to Kafka 4: Burrow 1.2.1
# (Debian's) asks for ListOffsets versions Kafka 4 removed and cannot decode its offset commit
# records (value version 4). Its ZooKeeper jar (a dependency) serves Burrow's coordinator.
KAFKA_39_VERSION = "3.9.2"
KAFKA_39 = ArtifactSet(
    f"kafka-{KAFKA_39_VERSION}", (("org.apache.kafka", "kafka_2.13", KAFKA_39_VERSION),)
)

# MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`): the tests'
# and the demo's replicator and offset translator (`ferry.testing.mm2`).
MM2 = ArtifactSet(
    f"mm2-{KAFKA_VERSION}",
    (
        ("org.apache.kafka", "connect-mirror", KAFKA_VERSION),
        ("org.apache.kafka", "connect-runtime", KAFKA_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ),
)

# Hadoop's single-JVM YARN + HDFS cluster (MiniHadoopClusterManager, in the jobclient tests jar
# hadoop-minicluster depends on), at the Hadoop version the installed PySpark's client jars
# speak (pyspark/jars/hadoop-client-api-*.jar), for the YARN tests (ferry.testing.yarn).
HADOOP_VERSION = "3.5.0"
HADOOP = ArtifactSet(
    f"hadoop-minicluster-{HADOOP_VERSION}",
    (
        ("org.apache.hadoop", "hadoop-minicluster", HADOOP_VERSION),
        # MiniDFSCluster checks its test directory with JUnit (test scope in its pom)
        ("org.junit.jupiter", "junit-jupiter-api", "5.13.3"),
    ),
    types=("jar", "bundle", "test-jar"),
)

# Flink and its Kafka connector: `migrate --flink-savepoint`'s tool and the tests' Flink job
# (the versions are the product's: ferry.flink.jars). Not fetched by `make install`.
FLINK = ArtifactSet(f"flink-{FLINK_VERSION}", FLINK_COORDINATES)

SETS = {"kafka": KAFKA, "mm2": MM2, "kafka-3.9": KAFKA_39, "hadoop": HADOOP}
SPARK_PACKAGES = "spark-packages"  # not a set of ours: Spark's own Ivy cache (spark_packages)


class ArtifactError(RuntimeError):
    """The artifacts could not be fetched (no Java, no repository, an unknown version)."""


def cache_root() -> Path:
    return Path(os.environ.get("FERRY_CACHE") or Path.home() / ".cache" / "ferry")


def ivy_jar() -> Path:
    """The Ivy jar inside the installed PySpark (Spark resolves `--packages` with it)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    if not jars:
        raise ArtifactError("no ivy jar in the installed pyspark; run `make install`")
    return jars[-1]


def _ivy_files(work: Path, artifacts: ArtifactSet, mirror: str | None) -> list[str]:
    """An ivy.xml naming the coordinates, and settings for a mirror when one is given."""
    deps = "\n".join(
        f"    <dependency org={quoteattr(g)} name={quoteattr(a)} rev={quoteattr(v)}"
        ' conf="default->default"/>'
        for g, a, v in artifacts.coordinates
    )
    (work / "ivy.xml").write_text(
        '<ivy-module version="2.0">\n'
        '  <info organisation="ferry" module="ferry-testing"/>\n'
        '  <configurations><conf name="default"/></configurations>\n'
        f"  <dependencies>\n{deps}\n  </dependencies>\n"
        "</ivy-module>\n"
    )
    args = ["-ivy", str(work / "ivy.xml")]
    if mirror:
        (work / "ivysettings.xml").write_text(
            "<ivysettings>\n"
            '  <settings defaultResolver="mirror"/>\n'
            "  <resolvers>\n"
            f'    <ibiblio name="mirror" m2compatible="true" root={quoteattr(mirror)}/>\n'
            "  </resolvers>\n"
            "</ivysettings>\n"
        )
        args += ["-settings", str(work / "ivysettings.xml")]
    return args


def fetch(artifacts: ArtifactSet, quiet: bool = True) -> Path:
    """The folder holding the set's jars, fetched first if the cache lacks them."""
    folder = cache_root() / artifacts.name
    marker = folder / "COORDINATES"
    if marker.is_file() and marker.read_text() == artifacts.marker:
        return folder
    if shutil.which("java") is None:
        raise ArtifactError("java is not on PATH (Java 17 or newer is needed)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{artifacts.name}-", dir=folder.parent))
    try:
        args = _ivy_files(staging, artifacts, os.environ.get("FERRY_MAVEN_MIRROR"))
        command = [
            "java",
            "-jar",
            str(ivy_jar()),
            *args,
            "-cache",
            str(cache_root() / "ivy-cache"),
            "-retrieve",
            str(staging / "lib" / "[artifact]-[revision](-[classifier]).[ext]"),
            "-types",
            *artifacts.types,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        jars = list((staging / "lib").glob("*.jar"))
        if done.returncode != 0 or not jars:
            tail = " ".join((done.stdout + done.stderr).split()[-40:])
            raise ArtifactError(f"could not fetch {artifacts.name}: {tail}")
        (staging / "COORDINATES").write_text(artifacts.marker)
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)  # whole or not at all: a killed fetch leaves no half folder
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"{artifacts.name}: {len(jars)} jars in {folder}", file=sys.stderr)
    return folder


def classpath(artifacts: ArtifactSet) -> str:
    return os.pathsep.join(str(p) for p in sorted((fetch(artifacts) / "lib").glob("*.jar")))


def _resolutions() -> list[tuple[str, str]]:
    """(packages, excluded packages) as the tests' applications ask Spark for them: Spark's
    Kafka connector alone (`ferry.testing.streaming`), and Delta as `spark-submit.sh --delta`
    asks (its coordinates and exclusions, read from its `--print-command`)."""
    from ferry.testing.streaming import connector_package

    root = Path(__file__).resolve().parents[3]
    printed = subprocess.run(
        [str(root / "spark-submit.sh"), "--delta", "--print-command", "groups", "list"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    argv = shlex.split(printed)
    delta = (argv[argv.index("--packages") + 1], "")
    if "--exclude-packages" in argv:
        delta = (delta[0], argv[argv.index("--exclude-packages") + 1])
    return [(connector_package(), ""), delta]


def spark_packages() -> Path:
    """Resolve the tests' `--packages` into Spark's Ivy cache (~/.ivy2.5.2), one resolution at
    a time, each by a spark-submit of an empty application; skipped where the cache's jars
    folder holds every package asked for. Ivy's cache is not safe for two processes filling it
    at once (two test workers resolving the same jars on a fresh machine), so the suites that
    run on two workers call this first."""
    import pyspark

    jars = Path.home() / ".ivy2.5.2" / "jars"
    spark_submit = Path(sys.executable).parent / "spark-submit"
    for packages, excluded in _resolutions():
        wanted = [c.split(":") for c in packages.split(",")]
        if all((jars / f"{g}_{a}-{v}.jar").is_file() for g, a, v in wanted):
            continue
        with tempfile.TemporaryDirectory(prefix="ferry-resolve-") as tmp:
            app = Path(tmp) / "empty.py"
            app.write_text("")
            extra = ["--exclude-packages", excluded] if excluded else []
            command = [str(spark_submit), "--master", "local[1]", "--conf",
                       "spark.ui.enabled=false", "--packages", packages, *extra,
                       str(app)]  # fmt: skip
            env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent)}
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            tail = " ".join((done.stdout + done.stderr).split()[-40:])
            raise ArtifactError(f"could not resolve {packages}: {tail}")
    return jars


def main(argv: list[str]) -> int:
    names = argv or list(SETS)
    known = [*SETS, "flink", SPARK_PACKAGES]
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown artifact set {unknown[0]!r} (known: {', '.join(known)})")
        return 2
    try:
        for name in names:
            if name == SPARK_PACKAGES:
                print(f"{name}: {spark_packages()}")
            elif name == "flink":
                print(f"{FLINK.name}: {fetch(FLINK, quiet=True)}")
            else:
                print(f"{SETS[name].name}: {fetch(SETS[name], quiet=True)}")
    except ArtifactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

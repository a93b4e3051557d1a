"""The JVM side of `migrate --flink-savepoint`: Ferry's savepoint tool compiled and run.

The tool (`java/FerrySavepointTool.java`, shipped as package data) reads and writes savepoints
with Flink's own classes and the Kafka connector's own serializers (see its header); Ferry
compiles it once with `javac` against the Flink jars (`ferry.flink.jars`) into
`$FERRY_CACHE/flink-tool-<hash of the sources>/` and runs it in a JVM of its own, as it starts
Spark's. Its JSON answers come back on stdout; a refusal is one line on stderr with exit 2,
raised here as a `UsageError` carrying that line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ferry.errors import FerryError, UsageError

JAVA_SOURCES = Path(__file__).parent / "java"
TOOL_MAIN = "ferry.flink.tool.FerrySavepointTool"
TIMEOUT_S = 600


class FlinkToolError(FerryError):
    """The tool could not run (no JDK, the jars not fetched) or failed unexpectedly."""


def flink_classpath() -> str:
    from ferry.testing.artifacts import FLINK, ArtifactError, classpath

    try:
        return classpath(FLINK)
    except ArtifactError as exc:
        raise FlinkToolError(f"Flink's jars: {exc}") from None


def compiled(sources: list[Path], name: str) -> Path:
    """A folder of classes compiled from `sources` against Flink's jars, reused while the
    sources are the same (its name carries their hash); compiled whole or not at all."""
    from ferry.testing.artifacts import cache_root

    digest = hashlib.sha256()
    for source in sorted(sources):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    folder = cache_root() / f"{name}-{digest.hexdigest()[:12]}"
    if (folder / "COMPILED").is_file():
        return folder
    if shutil.which("javac") is None:
        raise FlinkToolError("javac is not on PATH (a JDK 17 or newer is needed)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder.parent))
    try:
        command = ["javac", "-nowarn", "-d", str(staging), "-cp", flink_classpath()]
        done = subprocess.run(
            [*command, *map(str, sources)], capture_output=True, text=True, timeout=TIMEOUT_S
        )
        if done.returncode != 0:
            raise FlinkToolError(f"javac {name}: {' '.join(done.stderr.split()[:60])}")
        (staging / "COMPILED").write_text(digest.hexdigest() + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def java_command(classes: Path, main: str, *args: str) -> list[str]:
    """`java` with Flink's jars and `classes` on the class path; FERRY_FLINK_JAVA_OPTS adds
    JVM options (a heap size for a large savepoint)."""
    opts = os.environ.get("FERRY_FLINK_JAVA_OPTS", "").split()
    classpath = os.pathsep.join([str(classes), flink_classpath()])
    return ["java", *opts, "-cp", classpath, main, *args]


def run_tool(*args: str) -> dict:
    classes = compiled(sorted(JAVA_SOURCES.glob("*.java")), "flink-tool")
    done = subprocess.run(
        java_command(classes, TOOL_MAIN, *args), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    if done.returncode == 2 and errors:
        raise UsageError(errors[-1].removeprefix("error: "))
    if done.returncode != 0:
        tail = " ".join(done.stderr.split()[-60:])
        raise FlinkToolError(f"Ferry's savepoint tool failed ({done.returncode}): {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_savepoint(path: str) -> dict:
    """Every KafkaSource's positions in the savepoint or retained checkpoint at `path` (its
    folder or its `_metadata`): the tool's JSON (`ferry.flink.savepoint` reads it)."""
    return run_tool("read", path)


def write_savepoint(path: str, new_dir: str, plan: dict) -> dict:
    """The savepoint's copy in `new_dir` (its files copied there already) given the new
    positions and topic names of `plan`: a new `_metadata` and new reader state files."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(plan, file)
    try:
        return run_tool("write", path, new_dir, file.name)
    finally:
        os.unlink(file.name)

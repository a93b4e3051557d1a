#!/usr/bin/env bash
# Run a Ferry job through spark-submit:  ./spark-submit.sh [OPTIONS] JOB [JOB ARGS...]
#
# Options (before JOB):
#   --master URL        Spark master (default: $SPARK_MASTER or local[*])
#   --deploy-mode MODE  client or cluster (YARN/Kubernetes)
#   --conf K=V          extra Spark settings, passed through (repeatable)
#   --packages          add the Delta Lake jars matching the installed Spark (same as FERRY_PACKAGES=1)
# Environment:
#   FERRY_PACKAGES=1       as --packages;  FERRY_KAFKA_PACKAGE=1 also adds Spark's Kafka connector
#   FERRY_SPARK_SUBMIT     the spark-submit to use (default: the one from .venv's pyspark)
#   PYSPARK_PYTHON         the executors' Python (default: .venv/bin/python locally)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

jobs_list() {
  for f in "$ROOT"/jobs/*.py; do
    [ -e "$f" ] || continue
    b=$(basename "$f" .py); [[ "$b" == _* ]] || echo "${b//_/-}"
  done
}
usage() {
  echo "usage: $0 [--master URL] [--deploy-mode MODE] [--conf K=V ...] [--packages] JOB [ARGS...]" >&2
  echo "jobs: $(jobs_list | tr '\n' ' ')" >&2
  exit 2
}

if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
SUBMIT="${FERRY_SPARK_SUBMIT:-$(dirname "$PY")/spark-submit}"
[ -x "$SUBMIT" ] || SUBMIT="$(command -v spark-submit || true)"
[ -n "$SUBMIT" ] || { echo "error: spark-submit not found; run 'make install'" >&2; exit 2; }

MASTER="${SPARK_MASTER:-local[*]}"
SPARK_ARGS=()
PACKAGES="${FERRY_PACKAGES:-0}"
while [ $# -gt 0 ]; do
  case "$1" in
    --master) [ $# -ge 2 ] || usage; MASTER="$2"; shift 2 ;;
    --deploy-mode) [ $# -ge 2 ] || usage; SPARK_ARGS+=(--deploy-mode "$2"); shift 2 ;;
    --conf) [ $# -ge 2 ] || usage; SPARK_ARGS+=(--conf "$2"); shift 2 ;;
    --packages) PACKAGES=1; shift ;;
    -h|--help) usage ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
JOB="$1"; shift
JOB_FILE="$ROOT/jobs/${JOB//-/_}.py"
if [ ! -f "$JOB_FILE" ] || [[ "$JOB" == _* ]]; then echo "error: unknown job '$JOB'" >&2; usage; fi

# Ship the library to executors so cluster mode works without installing Ferry there.
mkdir -p "$ROOT/build"
LIB_ZIP="$ROOT/build/ferry-lib.zip"
if [ ! -f "$LIB_ZIP" ] || [ -n "$(find "$ROOT/lib/ferry" -name '*.py' -newer "$LIB_ZIP" -print -quit)" ]; then
  (cd "$ROOT/lib" && "$PY" - <<'PYZIP'
import pathlib, zipfile
with zipfile.ZipFile("../build/ferry-lib.zip.tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for p in sorted(pathlib.Path("ferry").rglob("*.py")):
        z.write(p)
PYZIP
  ) && mv "$ROOT/build/ferry-lib.zip.tmp" "$LIB_ZIP"
fi

if [ "$PACKAGES" = "1" ]; then
  COORDS="$("$PY" - <<'PYCOORD'
import importlib.metadata as md, os
spark = md.version("pyspark"); delta = md.version("delta-spark")
mm = ".".join(spark.split(".")[:2])
coords = [f"io.delta:delta-spark_{mm}_2.13:{delta}"]
if os.environ.get("FERRY_KAFKA_PACKAGE") == "1":
    coords.append(f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark}")
print(",".join(coords))
PYCOORD
)"
  SPARK_ARGS+=(--packages "$COORDS"
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
fi

VERBOSE=0
for a in "$@"; do [ "$a" = "--verbose" ] && VERBOSE=1; done
if [ "$VERBOSE" = "0" ]; then
  SPARK_ARGS+=(--driver-java-options "-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties"
    --conf "spark.executor.extraJavaOptions=-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties"
    --conf spark.ui.showConsoleProgress=false)
fi
case "$MASTER" in local*) export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$PY}" ;; esac
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PY}"

# spark-submit's PythonRunner merges the Python driver's stderr into its stdout, which would put
# progress and errors into `-o json` output. After exec this shell's pid is the JVM's, the
# driver's parent: the driver writes its stderr to the JVM's own stderr through /proc (lib/ferry/cli.py).
[ -e "/proc/$$/fd/2" ] && export FERRY_STDERR_OF_PID="$$"
exec "$SUBMIT" --master "$MASTER" --name "ferry-$JOB" --py-files "$LIB_ZIP" \
  --conf spark.sql.session.timeZone=UTC "${SPARK_ARGS[@]}" "$JOB_FILE" "$@"

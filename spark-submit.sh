#!/usr/bin/env bash
# Run a Ferry job through spark-submit:  ./spark-submit.sh [OPTIONS] JOB [JOB ARGS...]
#
# Options (before JOB) are spark-submit's, with spark-submit's meaning, and whatever the user
# sets wins over Ferry's defaults:
#   --master URL          Spark master (default: $SPARK_MASTER or local[*])
#   --deploy-mode MODE    client (default) or cluster (YARN, Kubernetes)
#   --conf K=V            any Spark setting (repeatable)
#   --name --num-executors --executor-memory --executor-cores --total-executor-cores
#   --driver-memory --driver-cores --queue --properties-file --jars --files --archives
#   --py-files --driver-java-options --driver-class-path --driver-library-path --principal
#   --keytab --proxy-user --repositories --exclude-packages VALUE
#                         passed to spark-submit (--files, --archives, --py-files and
#                         --exclude-packages join Ferry's own)
#   --packages COORDS     Maven coordinates (group:artifact:version,...) for the driver's and
#                         executors' classpaths; joined with Ferry's own (--delta), as is a
#                         spark.jars.packages of the user's (--conf, the properties file)
#   --verbose, -v         spark-submit's own: it prints its arguments and settings (a JOB's
#                         --verbose is Ferry's: tracebacks and Spark's logging on the console)
#   --supervise           passed to spark-submit
#   --version             print Ferry's version and spark-submit's, and exit
# Non-local masters: client properties naming files (ssl.ca.location, ssl.certificate.location,
# ssl.key.location, ssl.keystore.location, ssl.crl.location, sasl.kerberos.keytab) that are
# files here are shipped with --files and the job is handed a config naming the copies; in
# cluster deploy mode the --config file and a --from-file CSV are shipped too and the job is
# handed their names (lib/ferry/shipping.py). Two files shipped under one name are an error.
# Ferry's own options:
#   --delta               add the Delta Lake jars matching the installed Spark (= FERRY_DELTA=1),
#                         to write the ledger and other tables with delta-spark (hdfs://, s3a://)
#   --no-ship-env         for a non-local master, do not ship build/ferry-env.tar.gz: the nodes
#                         (a Kubernetes image, say) already carry Ferry's Python environment;
#                         name its interpreter with --conf spark.pyspark.python=PATH
#   --print-command       print the command that would run instead of running it
# Cluster deploy mode (YARN, Kubernetes): the job's exit code and output do not reach
# spark-submit, so the job writes them to a result file on shared storage and this script,
# once the application has ended, prints them and exits with the job's own code
# (lib/ferry/result.py). Where: $FERRY_RESULT_DIR (a Hadoop URI both sides reach); default on
# YARN /user/$USER/.ferry/results on the cluster's default filesystem, on Kubernetes
# ferry-results under spark.kubernetes.file.upload.path.
# Environment:
#   FERRY_DELTA=1         as --delta (FERRY_PACKAGES=1, its old name, too); with it
#                         FERRY_KAFKA_PACKAGE=1 also adds Spark's Kafka connector
#   FERRY_SPARK_SUBMIT    the spark-submit to use (default: the one from .venv's pyspark)
#   FERRY_LOG_DIR         where each run's Spark log file goes (default: var/log)
#   FERRY_ENV_DIR         where the shipped environment is kept by content hash, a Hadoop URI
#                         (default on YARN: /user/$USER/.ferry/env; none: upload every time)
#   PYSPARK_PYTHON        local masters: the Python workers' interpreter (default: .venv's)
#   FERRY_OOM_GRACE_S     client deploy mode: a run still waiting on its driver JVM this many
#                         seconds after the JVM ran out of memory ends with exit code 1
#                         (default 60; lib/ferry/driver_watch.py)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PASS_THROUGH=" --name --num-executors --executor-memory --executor-cores --total-executor-cores
  --driver-memory --driver-cores --queue --properties-file --jars --driver-class-path
  --driver-library-path --principal --keytab --proxy-user --repositories "

jobs_list() {
  for f in "$ROOT"/jobs/*.py; do
    [ -e "$f" ] || continue
    b=$(basename "$f" .py); [[ "$b" == _* ]] || echo "${b//_/-}"
  done | tr '\n' ' ' | sed 's/ $//'
}
usage() {
  echo "usage: $0 [--master URL] [--deploy-mode MODE] [--conf K=V ...] [spark-submit options]" \
    "[--delta] [--no-ship-env] [--print-command] JOB [ARGS...]" >&2
  echo "jobs: $(jobs_list)" >&2
  exit 2
}
die() { echo "error: $1" >&2; exit "${2:-2}"; }
die_usage() { die "$1 (jobs: $(jobs_list); see --help)"; }

if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
SUBMIT="${FERRY_SPARK_SUBMIT:-$(dirname "$PY")/spark-submit}"
[ -x "$SUBMIT" ] || SUBMIT="$(command -v spark-submit || true)"
[ -n "$SUBMIT" ] || die "spark-submit not found; run 'make install'"

MASTER="${SPARK_MASTER:-local[*]}"
DEPLOY_MODE=client
DELTA="${FERRY_DELTA:-${FERRY_PACKAGES:-0}}"
SHIP_ENV=1
PRINT=0
SHOW_VERSION=0
SUBMIT_VERBOSE=0
USER_ARGS=()
USER_FLAGS=()       # spark-submit's own switches (--verbose, --supervise)
USER_PACKAGES=""    # spark-submit's --packages, as the user gave it
USER_EXCLUDES=""    # and its --exclude-packages
PROPERTIES_FILE=""
USER_CONFS=()
USER_ARCHIVES=""
USER_PY_FILES=""
USER_FILES=""
while [ $# -gt 0 ]; do
  case "$1" in
    --delta) DELTA=1; shift; continue ;;
    --no-ship-env) SHIP_ENV=0; shift; continue ;;
    --version) SHOW_VERSION=1; shift; continue ;;
    --verbose|-v) USER_FLAGS+=(--verbose); SUBMIT_VERBOSE=1; shift; continue ;;
    --supervise) USER_FLAGS+=(--supervise); shift; continue ;;
    --print-command) PRINT=1; shift; continue ;;
    -h|--help) usage ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;
    -*) [ $# -ge 2 ] || die_usage "$1 needs a value" ;;
    *) break ;;
  esac
  case "$1" in
    --master) MASTER="$2" ;;
    --deploy-mode) DEPLOY_MODE="$2" ;;
    --conf|-c) [[ "$2" == *=* ]] || die_usage "--conf needs KEY=VALUE, got '$2'"; USER_CONFS+=("$2") ;;
    --archives) USER_ARCHIVES="$2" ;;
    --files) USER_FILES="$2" ;;
    --py-files) USER_PY_FILES="$2" ;;
    --driver-java-options) USER_CONFS+=("spark.driver.extraJavaOptions=$2") ;;
    --packages)
      # spark-submit's meaning: Maven coordinates. Before, Ferry's Delta switch had this name.
      [[ "$2" == *:* ]] || die_usage "--packages takes Maven coordinates\
 (group:artifact:version,...), not '$2'; Ferry's Delta Lake jars: --delta"
      USER_PACKAGES="$2" ;;
    --exclude-packages) USER_EXCLUDES="$2" ;;
    --properties-file) PROPERTIES_FILE="$2"; USER_ARGS+=("$1" "$2") ;;
    *) [[ "$PASS_THROUGH" == *" $1 "* ]] || die_usage "unknown option $1"; USER_ARGS+=("$1" "$2") ;;
  esac
  shift 2
done
if [ "$SHOW_VERSION" = 1 ]; then
  # Ferry's version on stdout, then spark-submit's own banner (which it prints on stderr)
  PYTHONPATH="$ROOT/lib" "$PY" -c 'from ferry.cli import version_line; print(version_line())'
  # (Spark's start-up warnings go nowhere: the banner is all that was asked for)
  export SPARK_SUBMIT_OPTS="-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties\
 -Dferry.log.file=/dev/null${SPARK_SUBMIT_OPTS:+ $SPARK_SUBMIT_OPTS}"
  PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PY}" exec "$SUBMIT" --version
fi
[ $# -ge 1 ] || usage
JOB="$1"; shift
JOB_FILE="$ROOT/jobs/${JOB//-/_}.py"
if [ ! -f "$JOB_FILE" ] || [[ "$JOB" == _* ]]; then die_usage "unknown job '$JOB'"; fi

case "$DEPLOY_MODE" in client|cluster) ;; *) die_usage "--deploy-mode is client or cluster, not '$DEPLOY_MODE'" ;; esac
LOCAL=0
case "$MASTER" in
  local*) LOCAL=1
    [ "$DEPLOY_MODE" = client ] || die "a local master runs in client deploy mode only" ;;
  spark://*) [ "$DEPLOY_MODE" = client ] ||
    die "Spark standalone masters do not run Python jobs in cluster deploy mode; use client" ;;
esac
user_conf() {  # the value the user gave KEY last, if any
  local c v=""
  for c in "${USER_CONFS[@]}"; do [[ "$c" == "$1="* ]] && v="${c#*=}"; done
  printf '%s' "$v"
}
has_user_conf() {
  local c
  for c in "${USER_CONFS[@]}"; do [[ "$c" == "$1="* ]] && return 0; done
  return 1
}
VERBOSE=0
for a in "$@"; do [ "$a" = "--verbose" ] && VERBOSE=1; done

# Ship the library to executors so cluster mode works without installing Ferry there. Built
# under a unique name and renamed into place, so jobs started together never see half a zip.
mkdir -p "$ROOT/build"
LIB_ZIP="$ROOT/build/ferry-lib.zip"
if [ ! -f "$LIB_ZIP" ] || [ -n "$(find "$ROOT/lib/ferry" -name __pycache__ -prune -o \
    \( -name '*.py' -o -type d \) -newer "$LIB_ZIP" -print -quit)" ]; then
  "$PY" "$ROOT/lib/ferry/packaging.py" lib
fi

ENVS=()       # NAME=VALUE for spark-submit's environment
DEFAULTS=()   # Ferry's --conf defaults, given before the user's so the user's win
FINAL=()      # settings Ferry merges with the user's, given after them
RUN_DIR=""
ARCHIVES="$USER_ARCHIVES"
DEFAULTS+=(spark.sql.session.timeZone=UTC)
[ "$LOCAL" = 1 ] && DEFAULTS+=(spark.ui.enabled=false)

# Executors on other machines get Ferry's Python environment with the job
# (lib/ferry/packaging.py).
SHIP=0
if [ "$LOCAL" = 0 ] && [ "$SHIP_ENV" = 1 ] && ! has_user_conf spark.pyspark.python; then SHIP=1; fi
ENV_ARCHIVE="$ROOT/build/ferry-env.tar.gz"
if [ "$SHIP" = 1 ]; then
  if [ ! -f "$ENV_ARCHIVE" ] || [ ! -d "$ROOT/build/env" ] || [ ! -x "$ROOT/build/driver-python" ] ||
     [ ! -f "$ENV_ARCHIVE.sha256" ] || [ "$ROOT/setup.py" -nt "$ENV_ARCHIVE" ]; then
    if [ "$PRINT" = 1 ]; then
      echo "note: $ENV_ARCHIVE is missing or out of date; 'make package' builds it" >&2
    else
      echo "building the executors' Python environment (make package) ..." >&2
      command -v make >/dev/null || die "$ENV_ARCHIVE is missing; run 'make package'"
      flock "$ROOT/build/.package.lock" make -s -C "$ROOT" package >&2 ||
        die "'make package' failed; run it to see why" 1
    fi
  fi
  ENV_PY=./environment/bin/python
  # Uploaded once per content: YARN (and FERRY_ENV_DIR, a Hadoop URI the nodes reach, on any
  # master) references a copy named by the archive's sha256 on the cluster's filesystem, put
  # there only when missing, instead of spark-submit uploading it again with every job.
  ENV_DIR_URI="${FERRY_ENV_DIR:-}"
  case "$MASTER" in yarn*) [ -n "$ENV_DIR_URI" ] || ENV_DIR_URI="/user/${USER:-$(id -un)}/.ferry/env" ;; esac
  ENV_URI="$ENV_ARCHIVE"
  if [ -n "$ENV_DIR_URI" ] && [ "$ENV_DIR_URI" != none ]; then
    if [ "$PRINT" = 1 ]; then
      ENV_URI="$("$PY" "$ROOT/lib/ferry/packaging.py" publish "$ENV_DIR_URI" --print)" || exit 1
      echo "note: a run first puts $ENV_ARCHIVE at $ENV_URI when it is not there" >&2
    else
      ENV_URI="$("$PY" "$ROOT/lib/ferry/packaging.py" publish "$ENV_DIR_URI")" || exit 1
    fi
  fi
  ARCHIVES="$ENV_URI#environment${ARCHIVES:+,$ARCHIVES}"
  # The node's Python must be the driver's minor (PySpark refuses workers of another), when
  # the environment holds more than one (FERRY_PYTHONS).
  DRIVER_MINOR="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  DEFAULTS+=("spark.executorEnv.FERRY_PYTHON_MINOR=$DRIVER_MINOR")
  DEFAULTS+=("spark.pyspark.python=$ENV_PY")
  if [ "$DEPLOY_MODE" = cluster ]; then
    case "$MASTER" in
      yarn*) DEFAULTS+=("spark.yarn.appMasterEnv.PYSPARK_PYTHON=$ENV_PY"
        "spark.yarn.appMasterEnv.FERRY_PYTHON_MINOR=$DRIVER_MINOR") ;;
      k8s://*) DEFAULTS+=("spark.kubernetes.driverEnv.PYSPARK_PYTHON=$ENV_PY"
        "spark.kubernetes.driverEnv.FERRY_PYTHON_MINOR=$DRIVER_MINOR") ;;
    esac
  else
    # The driver JVM plans Python data sources in Python workers started with the executors'
    # ./environment/bin/python; it runs in build/client, where that path leads to build/env,
    # and the Python driver returns to the caller's directory (build/driver-python, written
    # with the environment by lib/ferry/packaging.py).
    RUN_DIR="$ROOT/build/client"
    if [ "$PRINT" = 0 ] && [ ! -L "$RUN_DIR/environment" ]; then
      mkdir -p "$RUN_DIR"
      ln -sfn ../env "$RUN_DIR/.environment.$$" && mv -T "$RUN_DIR/.environment.$$" "$RUN_DIR/environment"
    fi
    DEFAULTS+=("spark.pyspark.driver.python=$ROOT/build/driver-python")
    # Those workers run the environment with the driver's own interpreter.
    ENVS+=("FERRY_CALLER_CWD=$PWD" "FERRY_DRIVER_PYTHON=$PY" "FERRY_NODE_PYTHON=$PY")
  fi
elif [ "$LOCAL" = 1 ]; then
  ENVS+=("PYSPARK_PYTHON=${PYSPARK_PYTHON:-$PY}")
elif [ "$DEPLOY_MODE" = client ]; then
  DEFAULTS+=("spark.pyspark.driver.python=$PY")
fi
[ "$DEPLOY_MODE" = client ] && ENVS+=("PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$PY}")

# spark-submit takes one package list (--packages, else spark.jars.packages from --conf, else
# from the properties file) and --packages replaces the others: Ferry's own coordinates are
# joined to the user's list, wherever the user gave it.
# Delta's own dependencies include older copies of jars Spark ships (Hadoop's client, Parquet,
# Jackson, log4j: 25 of its 33 jars, 76 of 89 MB). Spark's copies load first, so they are never
# used; they are excluded, as far as this Spark ships them, joined to the user's exclusions
# (--exclude-packages, else spark.jars.excludes): a cluster-mode submit uploads and localizes
# 76 MB less (a YARN cluster-mode dry run with --delta: 56-58 s -> 45 s).
PACKAGES="$USER_PACKAGES"
EXCLUDES="$USER_EXCLUDES"
if [ "$DELTA" = "1" ]; then
  has_user_conf spark.jars.packages && export FERRY_USER_CONF_PACKAGES="$(user_conf spark.jars.packages)"
  has_user_conf spark.jars.excludes && export FERRY_USER_CONF_EXCLUDES="$(user_conf spark.jars.excludes)"
  COORDS="$(FERRY_USER_PACKAGES="$USER_PACKAGES" FERRY_USER_EXCLUDES="$USER_EXCLUDES" \
    FERRY_PROPERTIES_FILE="$PROPERTIES_FILE" "$PY" - <<'PYCOORD'
import importlib.metadata as md, os, re
from pathlib import Path

def spark_home():
    home = os.environ.get("SPARK_HOME")
    if not home:
        import importlib.util
        home = os.path.dirname(importlib.util.find_spec("pyspark").origin)
    return home

def properties_file_value(key):
    path = os.environ["FERRY_PROPERTIES_FILE"]
    if not path:
        path = os.path.join(os.environ.get("SPARK_CONF_DIR") or os.path.join(spark_home(), "conf"),
                            "spark-defaults.conf")
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return ""
    value = ""
    for line in lines:
        found = re.match(re.escape(key) + r"\s*(?:[=:]\s*|\s+)(.*)$", line.strip())
        if found:
            value = found.group(1).strip()
    return value

def users(option, conf, key):
    """The user's list: the option, else their --conf, else the properties file."""
    value = os.environ[option]
    if not value:
        value = os.environ.get(conf)
        if value is None:
            value = properties_file_value(key)
    return [c.strip() for c in value.split(",") if c.strip()]

spark = md.version("pyspark"); delta = md.version("delta-spark")
mm = ".".join(spark.split(".")[:2])
ferry = [f"io.delta:delta-spark_{mm}_2.13:{delta}"]
if os.environ.get("FERRY_KAFKA_PACKAGE") == "1":
    ferry.append(f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark}")
coords = users("FERRY_USER_PACKAGES", "FERRY_USER_CONF_PACKAGES", "spark.jars.packages")
print(",".join(coords + [c for c in ferry if c not in coords]))
# delta-spark's dependencies (4.x) that a Spark distribution may ship, excluded only where
# this Spark's jars directory has them
jars = os.path.join(spark_home(), "jars")
shipped = {re.sub(r"-\d[^/]*\.jar$", "", f) for f in (os.listdir(jars) if os.path.isdir(jars) else [])}
candidates = [
    "org.slf4j:slf4j-api", "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.apache.logging.log4j:log4j-api", "org.apache.logging.log4j:log4j-core",
    "com.google.code.findbugs:jsr305", "org.roaringbitmap:RoaringBitmap",
    "com.fasterxml.jackson.core:jackson-databind", "com.fasterxml.jackson.core:jackson-annotations",
    "com.fasterxml.jackson.core:jackson-core", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api", "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-column", "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-format-structures", "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-jackson", "org.locationtech.jts:jts-core",
    "org.xerial.snappy:snappy-java", "io.airlift:aircompressor", "commons-pool:commons-pool",
    "com.github.luben:zstd-jni",
]
excludes = users("FERRY_USER_EXCLUDES", "FERRY_USER_CONF_EXCLUDES", "spark.jars.excludes")
ours = [c for c in candidates if c.split(":")[1] in shipped]
print(",".join(excludes + [c for c in ours if c not in excludes]))
PYCOORD
)"
  PACKAGES="$(printf '%s\n' "$COORDS" | sed -n 1p)"
  EXCLUDES="$(printf '%s\n' "$COORDS" | sed -n 2p)"
  unset FERRY_USER_CONF_PACKAGES FERRY_USER_CONF_EXCLUDES
  DEFAULTS+=(spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
    spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
  # Every run opens tables other runs wrote, so delta-spark rebuilds each snapshot from its
  # log, in 50 tasks by default: reading a table of three commits took 20-60 s on 2 busy local
  # cores, 3-5 s in one task. Ferry's tables are small; a cluster keeps Delta's default.
  if [ "$LOCAL" = 1 ]; then DEFAULTS+=(spark.databricks.delta.snapshotPartitions=1); fi
  # The one mirror setting (FERRY_MAVEN_MIRROR, as for the test brokers' jars) serves these
  # jars too: Spark resolves --packages from $DEFAULT_ARTIFACT_REPOSITORY instead of Maven
  # Central. Resolved jars stay in Spark's Ivy cache (~/.ivy2.5.2, or spark.jars.ivy).
  if [ -n "${FERRY_MAVEN_MIRROR:-}" ] && [ -z "${DEFAULT_ARTIFACT_REPOSITORY:-}" ]; then
    ENVS+=("DEFAULT_ARTIFACT_REPOSITORY=$FERRY_MAVEN_MIRROR")
  fi
fi

# Options for the submitting JVM (the driver in client mode, YARN's or Kubernetes' client in
# cluster mode), given before the user's $SPARK_SUBMIT_OPTS and --driver-java-options, which win.
SUBMIT_OPTS=""
# Local masters: the driver JVM (the executor too) lives for one job, most of it warming up:
# loading Spark and compiling the code Spark generates for every new query plan. The optimizing
# JIT tier (C2) pays off only in long runs, and on a small machine its compiler threads take
# the cores the job needs (bench/fixed_cost.py, where the trivial job gets it too).
[ "$LOCAL" = 1 ] && SUBMIT_OPTS="-XX:TieredStopAtLevel=1"
# A client-mode driver loads Spark's classes, well over 100 MiB of class metadata, and each time
# that grew past the JVM's threshold it started a collection cycle (three in a 2,000-group dry
# run); a higher threshold leaves them out (about 0.3-0.5 s of 12; the trivial job does not move,
# docs/benchmarks.md). A heap starting whole gained nothing more and held 400 MiB more.
[ "$DEPLOY_MODE" = client ] && SUBMIT_OPTS="${SUBMIT_OPTS:+$SUBMIT_OPTS }-XX:MetaspaceSize=256m"
# A driver JVM here (client deploy mode) creates a marker file at its first OutOfMemoryError,
# and the Python driver ends a run that then stops answering (lib/ferry/driver_watch.py). The
# JVM's own words (that report, GC warnings) go to stderr: stdout is the job's (-o json).
if [ "$DEPLOY_MODE" = client ]; then
  OOM_MARKER="${TMPDIR:-/tmp}/ferry-oom-$$"
  ENVS+=("FERRY_OOM_MARKER=$OOM_MARKER")
  SUBMIT_OPTS="${SUBMIT_OPTS:+$SUBMIT_OPTS }'-XX:OnOutOfMemoryError=touch $OOM_MARKER'"
  SUBMIT_OPTS="$SUBMIT_OPTS -XX:+DisplayVMOutputToStderr -Xlog:disable"
  SUBMIT_OPTS="$SUBMIT_OPTS -Xlog:all=warning:stderr:uptime,level,tags"
fi

# Each run's Spark logging goes to its own file (conf/log4j2.properties), named to the Python
# driver as FERRY_LOG_FILE; the console keeps Ferry's own lines. --verbose: Spark's defaults.
LOG_DIR="${FERRY_LOG_DIR:-$ROOT/var/log}"
[[ "$LOG_DIR" == /* ]] || LOG_DIR="$PWD/$LOG_DIR"
LOG_FILE="$LOG_DIR/ferry-$JOB-$(date -u +%Y%m%dT%H%M%SZ)-$$.log"
ENVS+=("FERRY_LOG_FILE=$LOG_FILE")
if [ "$VERBOSE" = 0 ]; then
  LOG_OPTS="-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties -Dferry.log.file=$LOG_FILE"
  SUBMIT_OPTS="$LOG_OPTS${SUBMIT_OPTS:+ $SUBMIT_OPTS}"
  if [ "$LOCAL" = 1 ]; then
    user_opts="$(user_conf spark.executor.extraJavaOptions)"
    FINAL+=("spark.executor.extraJavaOptions=$LOG_OPTS${user_opts:+ $user_opts}")
    # Python workers' stderr to the log file too (lib/ferry/worker_daemon.py); lib/ is put on
    # the JVM's PYTHONPATH, which it hands to the daemon, so any worker Python finds the module.
    DEFAULTS+=(spark.python.daemon.module=ferry.worker_daemon)
    ENVS+=("PYTHONPATH=$ROOT/lib${PYTHONPATH:+:$PYTHONPATH}")
  fi
  DEFAULTS+=(spark.ui.showConsoleProgress=false)
  [ "$PRINT" = 1 ] || mkdir -p "$LOG_DIR"
fi
SUBMIT_OPTS="$SUBMIT_OPTS${SPARK_SUBMIT_OPTS:+ $SPARK_SUBMIT_OPTS}"
[ -z "$SUBMIT_OPTS" ] || ENVS+=("SPARK_SUBMIT_OPTS=${SUBMIT_OPTS# }")

# Files the job names (its config, a --from-file CSV, client properties such as
# ssl.ca.location) travel with it to where they are opened, and the job is handed their
# shipped names (lib/ferry/shipping.py).
FILES="$USER_FILES"
JOB_ARGS=("$@")
if [ "$LOCAL" = 0 ]; then
  SHIPPING_OUT="$(mktemp "$ROOT/build/.shipping.XXXXXX")"
  if ! PYTHONPATH="$ROOT/lib" "$PY" -m ferry.shipping --deploy-mode "$DEPLOY_MODE" \
      --stage "$ROOT/build/ship" --files "$USER_FILES" -- "$@" >"$SHIPPING_OUT"; then
    rm -f "$SHIPPING_OUT"; exit 2
  fi
  mapfile -d '' SHIPPING <"$SHIPPING_OUT"
  rm -f "$SHIPPING_OUT"
  [ -z "${SHIPPING[0]}" ] || FILES="${SHIPPING[0]}${FILES:+,$FILES}"
  [ -z "${SHIPPING[1]}" ] || ENVS+=("FERRY_SHIPPED_FILES=${SHIPPING[1]}")
  JOB_ARGS=("${SHIPPING[@]:2}")
fi

# --- Cluster deploy mode: the job's result comes back through a file (lib/ferry/result.py).
RESULT_URI=""
if [ "$DEPLOY_MODE" = cluster ]; then
  RESULT_DIR="${FERRY_RESULT_DIR:-}"
  case "$MASTER" in
    yarn*)
      [ -n "$RESULT_DIR" ] || RESULT_DIR="/user/${USER:-$(id -un)}/.ferry/results"
      # A second attempt would run the job again after it decided to stop (exit 1, 2, 75);
      # the next scheduled run is the retry. A user's setting wins.
      DEFAULTS+=(spark.yarn.maxAppAttempts=1) ;;
    k8s://*)
      upload="$(user_conf spark.kubernetes.file.upload.path)"
      [ -n "$RESULT_DIR" ] || [ -z "$upload" ] || RESULT_DIR="${upload%/}/ferry-results" ;;
  esac
  # The job refuses tables on the container's local disk (lib/ferry/config/load.py).
  case "$MASTER" in
    yarn*) FINAL+=(spark.yarn.appMasterEnv.FERRY_DEPLOY_MODE=cluster) ;;
    k8s://*) FINAL+=(spark.kubernetes.driverEnv.FERRY_DEPLOY_MODE=cluster) ;;
  esac
  if [ -n "$RESULT_DIR" ]; then
    RESULT_URI="${RESULT_DIR%/}/ferry-$JOB-$(date -u +%Y%m%dT%H%M%SZ)-$$-$RANDOM.json"
    case "$MASTER" in
      yarn*) FINAL+=("spark.yarn.appMasterEnv.FERRY_RESULT=$RESULT_URI") ;;
      k8s://*) FINAL+=("spark.kubernetes.driverEnv.FERRY_RESULT=$RESULT_URI") ;;
    esac
  else
    echo "note: no shared place for the job's result (set FERRY_RESULT_DIR or" \
      "spark.kubernetes.file.upload.path): the exit code will be spark-submit's" >&2
  fi
fi
# --- end of cluster deploy mode's result file

CMD=("$SUBMIT" --master "$MASTER" --deploy-mode "$DEPLOY_MODE" --name "ferry-$JOB"
  --py-files "$LIB_ZIP${USER_PY_FILES:+,$USER_PY_FILES}")
[ -n "$ARCHIVES" ] && CMD+=(--archives "$ARCHIVES")
[ -n "$FILES" ] && CMD+=(--files "$FILES")
[ -n "$PACKAGES" ] && CMD+=(--packages "$PACKAGES")
[ -n "$EXCLUDES" ] && CMD+=(--exclude-packages "$EXCLUDES")
CMD+=("${USER_FLAGS[@]}" "${USER_ARGS[@]}")
for c in "${DEFAULTS[@]}" "${USER_CONFS[@]}" "${FINAL[@]}"; do CMD+=(--conf "$c"); done
CMD+=("$JOB_FILE" "${JOB_ARGS[@]}")

if [ "$PRINT" = 1 ]; then
  [ -z "$RUN_DIR" ] || printf 'cd %q && ' "$RUN_DIR"
  printf 'env'; printf ' %q' "${ENVS[@]}" "${CMD[@]}"; printf '\n'
  exit 0
fi
# --- Cluster deploy mode: spark-submit waits for the application (its own output goes to the
# run's log file); the job's output and exit code come from its result file.
if [ -n "$RESULT_URI" ]; then
  for e in "${ENVS[@]}"; do export "${e?}"; done
  # pip's spark-submit finds its SPARK_HOME with the driver's Python, which cluster mode
  # does not name here
  [ -n "${SPARK_HOME:-}" ] ||
    export SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  [ "$VERBOSE" = 1 ] || mkdir -p "$LOG_DIR"
  submit_code=0
  if [ "$VERBOSE" = 1 ] || [ "$SUBMIT_VERBOSE" = 1 ]; then "${CMD[@]}" >&2 || submit_code=$?
  else "${CMD[@]}" >>"$LOG_FILE" 2>&1 || submit_code=$?; fi
  result_code=0
  PYTHONPATH="$ROOT/lib" "$PY" -m ferry.result read "$RESULT_URI" || result_code=$?
  if [ "$result_code" = 3 ]; then
    app="$(grep -o 'application_[0-9]*_[0-9]*' "$LOG_FILE" 2>/dev/null | tail -1 || true)"
    die "the application${app:+ $app} ended without recording Ferry's result (spark-submit exited $submit_code; see $LOG_FILE)" 1
  fi
  # (on a Hadoop filesystem the deletion goes on in the background: lib/ferry/result.py)
  PYTHONPATH="$ROOT/lib" "$PY" -m ferry.result delete "$RESULT_URI" >/dev/null 2>&1 || true
  exit "$result_code"
fi
# --- end of cluster deploy mode's wait

# spark-submit's PythonRunner merges the Python driver's stderr into its stdout, which would put
# progress and errors into `-o json` output. After exec this shell's pid is the JVM's, the
# driver's parent: the driver writes its stderr to the JVM's own stderr through /proc (lib/ferry/cli.py).
[ -e "/proc/$$/fd/2" ] && export FERRY_STDERR_OF_PID="$$"
# The JVM's stderr (the Python driver's too, above) reaches the console through
# lib/ferry/console.py, line by line as it is written: Java stack traces and Ivy's report for
# --packages go to the run's log file, a spark-submit that cannot start the job says so in one
# `error:` line, every other line is passed on at once. (An awk filter here was block-buffered
# by mawk, Debian's awk: a run's progress reached the console when the run ended.)
# --verbose keeps the console untouched.
if [ "$VERBOSE" = 0 ]; then
  exec 2> >(PYTHONPATH="$ROOT/lib" exec "$PY" -m ferry.console "$LOG_FILE" >&2)
fi
for e in "${ENVS[@]}"; do export "${e?}"; done
[ -z "$RUN_DIR" ] || cd "$RUN_DIR"
exec "${CMD[@]}"

# Ferry: every target that needs the environment depends on `install`, so `make demo`,
# `make test` and `make package` are each one command on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ferry-installed
PYTHON ?= python3
LIB_SOURCES := $(shell find lib/ferry -name '*.py' 2>/dev/null)

.PHONY: install demo test test-slow test-cluster test-yarn test-faults package bench lint clean

install: $(STAMP)

$(STAMP): setup.py
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 or newer is required for Spark (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] + 0 < 17) { print "error: Java 17 or newer is required, found " $$2; exit 1 } }'
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10 or newer is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,test]'
	@# Apache Kafka's jars for the test and demo clusters, fetched once into ~/.cache/ferry
	@# (FERRY_CACHE moves it; FERRY_MAVEN_MIRROR resolves from a company mirror instead).
	$(PY) -m ferry.testing.artifacts kafka mm2
	@touch $(STAMP)

# What spark-submit.sh ships to a non-local master: the library zip and Ferry's Python packages
# for the nodes' own Python, manylinux wheels for glibc 2.28 and newer, with a launcher
# (lib/ferry/packaging.py; FERRY_PYTHONS="3.12 3.13" packs for more Python minors than the
# driver's). States the glibc floor it measured in the packed files. Rebuilt only when the
# sources or the installed dependencies changed.
package: build/ferry-lib.zip build/ferry-env.tar.gz
	@du -h --apparent-size build/ferry-env.tar.gz build/ferry-lib.zip | awk '{ print $$2 ": " $$1 }'
	@cat build/ferry-env.floor

build/ferry-lib.zip: $(LIB_SOURCES) lib/ferry/packaging.py | $(STAMP)
	$(PY) lib/ferry/packaging.py lib

build/ferry-env.tar.gz: $(STAMP) lib/ferry/packaging.py lib/ferry/env_python.sh
	$(PY) lib/ferry/packaging.py env

demo: install
	$(PY) -m ferry.demo

# Two workers, each a module at a time (module fixtures stay in one process), each with its own
# clusters and Spark session: a test spends most of its time waiting on Kafka or a JVM, and
# one process kept 2 cores about 45% busy (8.5 min on one, 6.8 min on two). The slower suites
# below run the same way (each says what stays on one process, and why).
test: install
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
	  -m 'not cluster and not faults and not slow'

# Suites that start JVMs of their own beside the shared clusters and Spark session: TLS and
# SASL clusters, a cluster whose log cleaner runs every second, a delta-spark driver, the real
# kafka-consumer-groups, and the overview notebook run top to bottom (`make test` stays within
# 10 minutes without them). On two workers, but for the tests marked `alone`, after them on one
# process: MirrorMaker 2's group sync beside a second worker's load failed test_mm2_group_sync
# (an old MM2 task's log line came after the consumer joined). Spark's Ivy cache is not safe
# for two processes filling it at once, so the `--packages` the tests ask for (the Kafka
# connector, Delta) are resolved into it first (`spark-packages`; nothing to do once there).
# Burrow (the oracle for lag-status, tests/integration/test_burrow.py) is Debian's package,
# installed here when missing (as root), and watches a Kafka 3.9 cluster (Burrow 1.2.1 cannot
# talk to Kafka 4), whose jars are fetched once like 4.3.1's.
# Airflow (the loader of docs/airflow/ferry_cutover.py, tests/integration/test_airflow_dag.py)
# goes into a virtualenv of its own in ~/.cache/ferry, once: 74 s on 2 busy cores.
# A Connect-only client (pyspark-client, the shape of a Databricks serverless task's Python)
# gets a virtualenv of its own there too, once; tests/integration/test_connect_client.py
# installs this checkout's Ferry into it at each run and checks nothing pulls the full PySpark.
AIRFLOW_VERSION := 3.3.2
AIRFLOW_VENV := $(or $(FERRY_CACHE),$(HOME)/.cache/ferry)/airflow-$(AIRFLOW_VERSION)
CLIENT_VENV := $(or $(FERRY_CACHE),$(HOME)/.cache/ferry)/pyspark-client-4.2.0-venv
test-slow: install
	@command -v Burrow >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q burrow; }
	@test -x $(AIRFLOW_VENV)/bin/airflow || { $(PYTHON) -m venv $(AIRFLOW_VENV) && \
	  $(AIRFLOW_VENV)/bin/pip install -q apache-airflow==$(AIRFLOW_VERSION); }
	@test -x $(CLIENT_VENV)/bin/python || { $(PYTHON) -m venv $(CLIENT_VENV) && \
	  $(CLIENT_VENV)/bin/pip install -q pyspark-client==4.2.0 'setuptools>=70.1'; }
	$(PY) -m ferry.testing.artifacts kafka-3.9 flink spark-packages
	status=0; \
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
	  -m 'slow and not alone and not cluster and not faults' || status=$$?; \
	$(PY) -m pytest -q -p no:cacheprovider -m 'slow and alone and not cluster and not faults' \
	  || status=$$?; \
	exit $$status

# A Spark standalone master and worker started from the installed PySpark, running a job
# with the packaged environment (tests/integration/test_cluster.py), and a single-node YARN +
# HDFS (Hadoop's MiniCluster, its jars fetched once into ~/.cache/ferry) with the jobs on it
# in cluster and client mode (tests/integration/test_yarn.py), and the packaged environment on
# an older node: a Debian bullseye root filesystem (glibc 2.31) made with debootstrap, installed
# here when missing (as root), with a CPython built inside it once, both kept in ~/.cache/ferry
# (tests/integration/test_old_glibc.py; the first time: 2.5 min on an idle 2-core machine on
# 2026-11-30, 10-15 min measured on an earlier one). On two workers: the YARN module on one,
# the rest (the old node, the standalone cluster, a second MiniCluster) beside it.
test-cluster: package
	@command -v debootstrap >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q debootstrap; }
	$(PY) -m ferry.testing.artifacts hadoop
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m cluster

# The YARN tests alone (a subset of test-cluster).
test-yarn: package
	$(PY) -m ferry.testing.artifacts hadoop
	$(PY) -m pytest -q -p no:cacheprovider -m yarn

# Broker faults through a TCP proxy, and several spark-submit runs started at once, on two
# workers. (Once back on one process: three runs started together beside the other worker's
# load met a group coordinator silent for 10 s and failed; since then a call's silence ends it
# only when the cluster itself no longer answers, `ferry.kafka.retry`.)
test-faults: install
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m faults

# The cheap benches first, then the large worlds (reconcile's `wide`: 24 -> 48 partitions of
# 100,000 records). read_throughput fetches Spark's Kafka connector (spark.jars.packages).
bench: install
	$(PY) bench/fixed_cost.py
	$(PY) bench/read_throughput.py
	$(PY) bench/migrate_bench.py
	$(PY) bench/lag_bench.py
	$(PY) bench/groups_bench.py
	$(PY) bench/many_groups_bench.py
	$(PY) bench/audit_bench.py
	$(PY) bench/busy_bench.py
	$(PY) bench/reconcile_bench.py --records 20000 --scenario traffic groups wide
	$(PY) bench/mm2_bench.py

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build var spark-warehouse .pytest_cache

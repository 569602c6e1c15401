# rafka: the README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install system-deps lint lint-types format test test-slow test-fast demo bench bench-client bench-peers bench-multinode clean

$(STAMP): pyproject.toml setup.py $(wildcard storage/_crecords*.c storage/_crecords.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The Debian packages the demo (Java for Spark) and the tests (kcat, Node/npm, Chromium) need, when missing.
system-deps:
	@bash .ci/system-deps.sh test

# ruff (lint + format check) over the tree, mypy over whole packages: storage, protocol and every actors/ package
# (the Ray shells at actors/*.py are left out in pyproject.toml's [tool.mypy] overrides); .ci/run runs it before
# the tests.
MYPY_PATHS := storage protocol $(filter-out actors/__pycache__/,$(wildcard actors/*/))
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy $(MYPY_PATHS)

lint-types: install
	$(VENV)/bin/mypy $(MYPY_PATHS)

# Rewrite the tree the way `make lint` wants it (import order, formatting).
format: install
	$(VENV)/bin/ruff check --select I --fix .
	$(VENV)/bin/ruff format .

# The suite within 20 minutes on 2 cores: unit (no Ray), cluster (real Ray), client/CLI, e2e. The long suites
# marked slow (fault injection: SIGKILL/SIGSTOP, crash points, the nemesis; the Spark job's crash runs and the
# README's CLI tour through Spark) are `make test-slow`; .ci/run runs both.
test: install system-deps
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m "not slow" tests

# The suites marked slow (~15 minutes on 2 cores); CI runs them after `make test`.
test-slow: install system-deps
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m slow tests

# Only the pure unit tests (seconds).
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# The README's main job: embedded 3-broker cluster, replicated topic, a broker killed mid-stream,
# everything consumed back and checked (jobs/demo.py).
demo: install
	@bash .ci/system-deps.sh demo
	$(PY) -m jobs.demo

bench: install
	$(PY) benchmarks/storage_bench.py --json

# issue 17's figures through the public API (benchmarks/client_bench.py)
bench-client: install
	$(PY) benchmarks/client_bench.py --json

# rafka beside Redis Streams and NATS JetStream (their Debian servers and Python clients are installed here)
bench-peers: install
	@bash .ci/system-deps.sh bench
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/peers_bench.py --json

# rafka on 3 and 5 real Ray nodes (network namespaces, so root) beside the same brokers on one node: librdkafka
# produce/consume, failover per fault, an empty replica's catch-up MB/s (benchmarks/multinode_bench.py, ~20 minutes)
bench-multinode: install system-deps
	$(PY) benchmarks/multinode_bench.py --json

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis build storage/_crecords*.so

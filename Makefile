# rafka: the README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install system-deps lint lint-types format test test-slow test-fast demo bench bench-client bench-peers clean

$(STAMP): pyproject.toml setup.py $(wildcard storage/_crecords*.c storage/_crecords.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The Debian packages the demo (Java for Spark) and the tests (kcat, Node/npm, Chromium) need, when missing.
system-deps:
	@bash .ci/system-deps.sh test

# ruff (lint + format check) over the tree, mypy over the typed layers (storage, protocol, the pure actor cores); .ci/run runs it before the tests.
MYPY_PATHS := storage protocol actors/partition.py actors/replica_manager.py actors/controller_requests.py \
	actors/leader_and_isr.py actors/metadata_image.py actors/topic_configs.py actors/partition_change.py \
	actors/placement.py actors/purgatory.py actors/supervision.py actors/group_service.py \
	actors/coordinator_runtime.py actors/group_state.py actors/group_model.py actors/group_records.py \
	actors/group_membership.py actors/group_offsets.py actors/controller_logic.py \
	actors/controller_config.py actors/group_requests.py actors/log_dir_lock.py actors/metadata_store.py \
	actors/partition_state.py actors/replica_config.py actors/replica_state_machine.py actors/worker_process.py \
	actors/txn_records.py actors/txn_metadata.py actors/txn_state.py actors/txn_service.py actors/replica_housekeeping.py \
	actors/config_sources.py actors/call_order.py actors/replication_channel.py actors/fetch_session.py actors/client_channel.py actors/produce_channel.py
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

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis build storage/_crecords*.so

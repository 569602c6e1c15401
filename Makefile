# rafka: the README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install test test-fast demo bench clean

$(STAMP): pyproject.toml setup.py storage/_crecords.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The whole suite: unit (no Ray), cluster (real Ray), client/CLI, fault suites marked slow included.
test: install
	$(PY) -m pytest -q -p no:cacheprovider tests

# Only the pure unit tests (seconds).
test-fast: install
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# The README's main job: embedded 3-broker cluster, replicated topic, a broker killed mid-stream,
# everything consumed back and checked (jobs/demo.py).
demo: install
	$(PY) -m jobs.demo

bench: install
	$(PY) benchmarks/storage_bench.py --json

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis build storage/_crecords*.so

# Everything a newcomer needs: `make demo` and `make test` set themselves up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# CPU PyTorch, for capturing real PyTorch scripts (a plain `torch` would pull a CUDA build).
TORCH  := torch==2.13.0

.PHONY: setup demo test test-fast bench docs clean fuzz

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test,torch]"
	$(PY) -m profiler.capture.native.build
	touch $(STAMP)

demo: setup
	$(VENV)/bin/neuron-top --demo

# Two test workers (pytest-xdist): much of the suite waits on subprocesses, servers and
# PyTorch rather than computing, so two workers on CI's two cores finish well before one.
# TEST_WORKERS=0 runs the tests serially in one process.
TEST_WORKERS ?= 2

test: setup
	bash scripts/ensure-prometheus.sh
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)
	$(PY) -m pytest -q -m slow -n $(TEST_WORKERS) || [ $$? -eq 5 ]   # exit 5: no slow tests selected

test-fast: setup
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) -x

# >= 10,000 generated inputs through each parser (config, stream, overrides, workload specs,
# profiles, counter and instance files); exit 1 on any crash. Minutes: not in `make test`.
fuzz: setup
	$(PY) tests/fuzz/run.py --n 10000

bench: setup
	for f in bench/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

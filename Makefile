# One entry point for people and CI. `make demo` and `make test` work on a fresh machine:
# they create .venv and install what they need first.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install native demo compas test lint pytest bench clean proto

# one stamp per install profile: the runtime alone (make compas), with the embedded broker
# (make demo), with the test tools (make install / test / lint / bench)
DEMO_STAMP := $(VENV)/.installed-demo
RUNTIME_STAMP := $(VENV)/.installed-runtime
define pip_install
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.$(1)'
	touch $@
endef

# the optional compiled decoders of serving-stack records (native/, Rust through maturin):
# built where cargo is found, else the Python decoders do all the work (slower for single-row
# calls; docs/serving.md); rebuilt when its sources change
NATIVE_STAMP := $(VENV)/.installed-native
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
native: $(NATIVE_STAMP)
$(NATIVE_STAMP): $(NATIVE_SOURCES) | $(VENV)/bin/python
	@if command -v cargo >/dev/null; then \
	  $(BIN)/pip install -q ./native && touch $@; \
	else \
	  echo "cargo not found: native/ not built, serving records are decoded in Python"; \
	fi
$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml
	$(call pip_install,[dev])

# the demo needs only the runtime and the embedded broker, not the test tools
$(DEMO_STAMP): pyproject.toml
	$(call pip_install,[demo])

$(RUNTIME_STAMP): pyproject.toml
	$(call pip_install,)

install: $(STAMP) $(NATIVE_STAMP)

# the whole product: embedded broker, simulated lending model with a feedback loop, the monitor
# (status page on http://127.0.0.1:8000/); SCENARIO=fair|abrupt|feedback-loop|label-delay;
# FORMAT=kserve|oip-json|seldon: the model's traffic as KServe's logger / the Open Inference
# Protocol / Seldon Core 2 (protobuf, two topics) writes it, read as it is (docs/serving.md);
# with ATTRIBUTES=apart the protected attributes come on a topic of their own, by decision id
SCENARIO ?= feedback-loop
FORMAT ?= monitor-json
demo: $(DEMO_STAMP) $(NATIVE_STAMP)
	$(BIN)/fairness-monitor demo --scenario $(SCENARIO) \
	  --format $(if $(filter kserve,$(FORMAT)),kserve-cloudevents,$(FORMAT)) \
	  $(if $(filter apart,$(ATTRIBUTES)),--attributes-apart)

# the COMPAS data (shipped in examples/compas/) replayed through the engine: a report on the
# terminal; needs the runtime only, like the demo
compas: $(RUNTIME_STAMP) $(NATIVE_STAMP)
	$(BIN)/fairness-monitor replay --config examples/compas/config.yaml \
	  --csv examples/compas/compas-two-years.csv --csv-mapping examples/compas/mapping.yaml

lint: $(STAMP)
	$(BIN)/ruff check monitor tests bench grafana
	$(BIN)/ruff format --check monitor tests bench grafana
	$(BIN)/mypy monitor

test: lint pytest

# one test process per core (pytest-xdist; each runs its own brokers and services): most
# integration tests wait on a broker or a monitor process, so two cores took the suite from
# 31 to 19 minutes; a file's tests stay together, in order. PYTEST_WORKERS=0: one process
PYTEST_WORKERS ?= auto
pytest: $(STAMP) $(NATIVE_STAMP)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=20

bench: $(STAMP) $(NATIVE_STAMP)
	$(BIN)/python -m bench.engine_vs_river
	$(BIN)/python -m bench.decode_throughput
	$(BIN)/python -m bench.metrics_vs_fairlearn
	$(BIN)/python -m bench.pending_memory
	$(BIN)/python -m bench.kafka_throughput
	$(BIN)/python -m bench.scrape_cost
	$(BIN)/python -m bench.alert_quality
	$(BIN)/python -m bench.alert_cost
	$(BIN)/python -m bench.pending_expiry
	$(BIN)/python -m bench.state_store
	$(BIN)/python -m bench.serving_throughput

# the Open Inference Protocol's gRPC messages (Seldon Core 2's Kafka payloads) as Python: run
# after changing monitor/ingest/open_inference_grpc.proto; the output is committed
PROTOC_VERSION ?= 1.85.1
proto: $(STAMP)
	$(BIN)/pip install -q grpcio-tools==$(PROTOC_VERSION)
	cd monitor/ingest && ../../$(BIN)/python -m grpc_tools.protoc -I. \
	  --python_out=. --pyi_out=. open_inference_grpc.proto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .artifacts

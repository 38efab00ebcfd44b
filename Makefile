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

# Debian packages make test and make lab need: shellcheck (ansible-test's shellcheck test skips silently
# without it); debootstrap, systemd-nspawn, ip, ssh for the lab nodes; apt-ftparchive, gpg, cc for its apt repository.
DEBS := shellcheck git tar debootstrap systemd-container iproute2 openssh-client apt-utils gnupg gcc
LABCTL := $(BIN)/python molecule/lab/labctl.py
LAB_INVENTORY := inventories/lab

.PHONY: help venv debs link test lint ruff ansible-lint sanity units molecule docs fixtures lab lab-down clean

help:
	@echo "make lab       boot the two-node lab fleet (SIMULATED GPUs, real systemd) and run the facts playbook"
	@echo "make lab-down  stop the lab fleet and remove every mount, namespace, cgroup and process it made"
	@echo "make test      ruff, ansible-lint (production), ansible-test sanity, unit tests, molecule scenarios"
	@echo "make lint | sanity | units | molecule    one part of make test"
	@echo "make clean     make lab-down, then remove .venv and .build"

venv: $(VENV)/.installed

debs:
	@missing=""; for pkg in $(DEBS); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: requirements/dev.txt requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/dev.txt -c requirements/constraints.txt
	touch $@

link: $(IMPORT_ROOT)/ansible_collections/inferops/blackwell

$(IMPORT_ROOT)/ansible_collections/inferops/blackwell:
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

# ansible-test's pip bootstrap, served from PyPI's wheel instead of the unreachable download host.
$(ANSIBLE_TEST_CACHE)/get_pip_$(subst .,_,$(PIP_FOR_ANSIBLE_TEST)).py: tools/get_pip_offline.py | venv
	mkdir -p $(ANSIBLE_TEST_CACHE)
	$(BIN)/pip download --quiet --disable-pip-version-check --no-deps --dest $(ANSIBLE_TEST_CACHE) pip==$(PIP_FOR_ANSIBLE_TEST)
	cp tools/get_pip_offline.py $@

test: lint sanity units molecule

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

# molecule scenarios on lab nodes (each scenario creates and destroys its own nodes).
MOLECULE_SCENARIOS := incident toolkit_pip toolkit_apt flashinfer_strategies jit_pin
molecule: debs venv link
	for scenario in $(MOLECULE_SCENARIOS); do $(BIN)/molecule test --scenario-name $$scenario || exit 1; done

lab: debs venv link
	$(LABCTL) fleet-up --inventory $(LAB_INVENTORY)
	$(BIN)/ansible-playbook -i $(LAB_INVENTORY) playbooks/facts.yml
	@echo
	@echo "The lab fleet is up (GPUs, nvcc 12.8 front end and SGLang are SIMULATED; systemd and FlashInfer are real):"
	@$(LABCTL) status
	@echo "  ansible -i $(LAB_INVENTORY) all -m ping"
	@echo "  ssh -i .build/lab/ssh/id_ed25519 root@10.213.0.11     (or: $(LABCTL) exec lab-pro6000-1 -- bash)"
	@echo "  make lab-down    when done"

lab-down: venv
	$(LABCTL) fleet-down

# Rewrite the README's role sections from roles/*/meta/argument_specs.yml.
docs: venv
	$(BIN)/python tools/role_docs.py

# Rewrite the canned nvidia-smi output of the synthetic GPU profiles from the lab simulator.
fixtures:
	$(PYTHON) tests/unit/fixtures/nvidia-smi/render.py

clean: lab-down
	rm -rf $(VENV) $(BUILD) tests/output

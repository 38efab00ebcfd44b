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

.PHONY: test-matrix test-zoo bench lab-images lab-remediate help venv debs link test lint ruff ansible-lint sanity units molecule docs fixtures lab lab-down clean

help:
	@echo "make lab       boot the two-node lab fleet (SIMULATED GPUs, real systemd) and run the facts playbook"
	@echo "make bench     time site.yml and remediate.yml on BENCH_NODES (4) lab nodes of one fingerprint + 1, store on and off"
	@echo "make lab-down  stop the lab fleet and remove every mount, namespace, cgroup and process it made"
	@echo "make test      ruff, ansible-lint (production), ansible-test sanity, unit tests, molecule scenarios"
	@echo "make test-matrix    molecule stack_matrix alone: both stacks on GB10, B300 and RTX PRO 6000 nodes (also in make test)"
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

# lint, sanity (pip installs and pylint, mostly one core) and the unit tests run beside the lab from the start: the lab's
# image build (debootstrap, one pip install, downloads) keeps one core busy at most, and they are over before default's
# compiles fill both cores; after its converge the other scenarios take the second core. default prints as it runs;
# the other scenarios', lint's, sanity's and the unit tests' output follows.
test: debs venv link
	@mkdir -p $(BUILD); rm -rf $(MOLECULE_LOGS)
	@( begun=$$(date +%s); rc=0; $(MAKE) -k --no-print-directory lint sanity units > $(BUILD)/checks.log 2>&1 || rc=$$?; \
	   echo "lint, sanity and unit tests: rc $$rc, $$(( $$(date +%s) - begun )) s" >> $(BUILD)/checks.log; echo $$rc > $(BUILD)/checks.rc ) & checks=$$!; \
	  lab=0; $(MAKE) --no-print-directory lab-images molecule || lab=$$?; \
	  wait $$checks || true; echo "== lint, sanity and unit tests, run beside the lab (log: $(BUILD)/checks.log)"; cat $(BUILD)/checks.log; \
	  echo "== lab and molecule: rc $$lab; lint, sanity and unit tests: rc $$(cat $(BUILD)/checks.rc)"; \
	  test $$lab -eq 0 && test "$$(cat $(BUILD)/checks.rc)" -eq 0

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

# The lab's cached layers (base rootfs; the incident's and the current stack's images, side by side) and its mirror (CUDA
# wheels, signed apt repository).
lab-images: debs venv
	$(LABCTL) build --stack incident --stack current
	$(LABCTL) mirror --apt

# molecule scenarios on lab nodes (each scenario creates and destroys its own nodes, at its own addresses). default, the
# longest, runs from the start and prints as it runs; its compiles fill both cores until its converge is over (it then
# writes .build/molecule/default.converged). Beside it, one after another: MOLECULE_EARLY from the start, MOLECULE_BESIDE
# once that converge is over (labctl serializes changes to the shared bridge and mirror; the lab's compile cache makes a
# second caller of the same compile wait for the first). Their output goes to .build/molecule/<scenario>.log and is
# printed at the end.
MOLECULE_MAIN := default
# The second lane: from the start, zoo (its own compiles: SGLang 0.5.23 and FlashInfer 0.7.2 on 12.0f, none of them
# default's) and the scenarios that compile nothing (they wait on their nodes' services and pip more than they use a
# core), then, once default's converge is over, stack_matrix (its own compiles; its PRO 6000 node's sampling, prefill and
# cascade are zoo's, from the lab's compile cache).
MOLECULE_EARLY := zoo incident toolkit_apt flashinfer_strategies
MOLECULE_BESIDE := stack_matrix
MOLECULE_LOGS := $(BUILD)/molecule
# The lab's nodes by stack and GPU family: default runs the incident stack (SGLang 0.5.21, FlashInfer 0.6.18) on SM 12.0
# and the current one (SGLang 0.5.23, FlashInfer 0.7.2) on SM 10.3; stack_matrix the four other pairs (both stacks on SM
# 12.1, the current one on SM 12.0, the incident's on SM 10.3). Alone:
test-matrix: debs venv link lab-images
	$(BIN)/molecule test --scenario-name stack_matrix

# The model zoo alone (also in make test): each model served after site.yml with the compile tripwire set.
test-zoo: debs venv link lab-images
	$(BIN)/molecule test --scenario-name zoo

molecule: debs venv link
	@rm -rf $(MOLECULE_LOGS); mkdir -p $(MOLECULE_LOGS)
	@started=$$(date +%s); \
	  ( main=0; $(BIN)/molecule test --scenario-name $(MOLECULE_MAIN) || main=$$?; echo $$main > $(MOLECULE_LOGS)/$(MOLECULE_MAIN).rc; \
	    echo "$(MOLECULE_MAIN) rc=$$main seconds=$$(( $$(date +%s) - started ))" >> $(MOLECULE_LOGS)/lanes.txt ) & main=$$!; \
	  others=0; for scenario in $(MOLECULE_EARLY) after-the-converge $(MOLECULE_BESIDE); do \
	    if [ $$scenario = after-the-converge ]; then \
	      while [ ! -f $(MOLECULE_LOGS)/$(MOLECULE_MAIN).converged ] && kill -0 $$main 2>/dev/null; do sleep 5; done; continue; \
	    fi; \
	    begun=$$(date +%s); rc=0; $(BIN)/molecule test --scenario-name $$scenario > $(MOLECULE_LOGS)/$$scenario.log 2>&1 || rc=$$?; \
	    echo "$$scenario rc=$$rc seconds=$$(( $$(date +%s) - begun )) (started at +$$(( begun - started )) s)" >> $(MOLECULE_LOGS)/lanes.txt; \
	    if [ $$rc -ne 0 ]; then others=$$rc; break; fi; \
	  done; \
	  wait $$main || true; \
	  for scenario in $(MOLECULE_EARLY) $(MOLECULE_BESIDE); do \
	    test -f $(MOLECULE_LOGS)/$$scenario.log || continue; \
	    echo "== molecule scenario $$scenario, run beside $(MOLECULE_MAIN) (log: $(MOLECULE_LOGS)/$$scenario.log)"; \
	    cat $(MOLECULE_LOGS)/$$scenario.log; \
	  done; \
	  echo "== molecule:"; cat $(MOLECULE_LOGS)/lanes.txt; \
	  test "$$(cat $(MOLECULE_LOGS)/$(MOLECULE_MAIN).rc 2>/dev/null || echo 1)" -eq 0 && test $$others -eq 0

# The whole story on a fresh two-node lab fleet (SIMULATED GPUs and SGLang; real systemd, toolkit, FlashInfer, compiles).
LAB_PLAY := $(BIN)/ansible-playbook -i $(LAB_INVENTORY)
lab: debs venv link
	$(LABCTL) fleet-down
	$(LABCTL) fleet-up --inventory $(LAB_INVENTORY)
	$(LABCTL) mirror
	@echo; echo "== 1/4 The fleet as delivered: system CUDA 12.8 only (playbooks/facts.yml)"
	$(LAB_PLAY) playbooks/facts.yml -e facts_report_path=$(BUILD)/lab/fleet-facts-before.json
	@echo; echo "== 2/4 The incident: SGLang started the old way on lab-pro6000-1 dies at its first sampling call"
	$(LAB_PLAY) molecule/lab/show_incident.yml --limit lab-pro6000-1
	@echo; echo "== 3/4 The fix: playbooks/site.yml (JIT compiles take minutes on few cores)"
	$(LAB_PLAY) playbooks/site.yml
	@echo; echo "== 4/4 The fleet now (playbooks/facts.yml); services above: healthy"
	$(LAB_PLAY) playbooks/facts.yml -e facts_report_path=$(BUILD)/lab/fleet-facts-after.json
	@echo
	@echo "The lab fleet is up (GPUs, nvcc 12.8 front end, models and SGLang are SIMULATED; systemd, CUDA 13.0, FlashInfer are real):"
	@$(LABCTL) status
	@echo "  curl http://10.213.0.11:30000/health is not reachable from here by design: services listen on the node's loopback"
	@echo "  $(LABCTL) exec lab-pro6000-1 -- systemctl status sglang-ar     (or: ssh -i .build/lab/ssh/id_ed25519 root@10.213.0.11)"
	@echo "  make lab-remediate   wipe lab-pro6000-1's JIT cache, kill its service, run playbooks/remediate.yml"
	@echo "  make lab-down        when done"

# After `make lab`: the damage remediate.yml exists for, on one node, then the remediation of the whole fleet.
lab-remediate: venv link
	$(LAB_PLAY) molecule/lab/damage.yml
	$(LAB_PLAY) playbooks/remediate.yml -e remediate_report_path=$(BUILD)/lab/remediate-report.json

lab-down: venv
	$(LABCTL) fleet-down

# What the build store, the canary and the cheap no-op buy (issue 15's targets): BENCH_NODES lab nodes of one GPU
# profile and one of another, real compiles (the lab's compile cache off), a table and .build/bench/bench.json.
BENCH_NODES ?= 4
bench: debs venv link
	$(LABCTL) build
	$(LABCTL) mirror
	$(BIN)/python molecule/lab/bench.py --nodes $(BENCH_NODES)

# Rewrite the README's role sections from roles/*/meta/argument_specs.yml.
docs: venv
	$(BIN)/python tools/role_docs.py

# Rewrite the canned nvidia-smi output of the synthetic GPU profiles from the lab simulator.
fixtures:
	$(PYTHON) tests/unit/fixtures/nvidia-smi/render.py

clean: lab-down
	rm -rf $(VENV) $(BUILD) tests/output

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
# Galaxy's importer, antsibull-docs and Sphinx (requirements/release.txt), apart from the test tools
RELEASE_VENV := $(BUILD)/release-venv
DIST := $(BUILD)/dist
ANSIBLE_TEST_CACHE := $(HOME)/.ansible/test/cache

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(IMPORT_ROOT)
# where molecule's runs record each task's CPU (controller and lab nodes; extensions/molecule/lab/callback_plugins/lab_task_costs.py)
TASK_COSTS := $(BUILD)/task-costs
export INFEROPS_LAB_TASK_COSTS := $(TASK_COSTS)

# Debian packages make test and make lab need: shellcheck (ansible-test's shellcheck test skips silently
# without it); debootstrap, systemd-nspawn, ip, ssh for the lab nodes; apt-ftparchive, gpg, cc for its apt repository.
DEBS := shellcheck git tar debootstrap systemd-container iproute2 openssh-client apt-utils gnupg gcc
LABCTL := $(BIN)/python extensions/molecule/lab/labctl.py
LAB_STATE := $(or $(INFEROPS_LAB_STATE),$(BUILD)/lab)
LAB_INVENTORY := inventories/lab

.PHONY: controllers release-venv release-check docs-site test-suite test-role test-fresh lab-fresh test-matrix test-zoo bench lab-images lab-remediate help venv debs link test lint ruff ansible-lint sanity units molecule docs fixtures lab lab-down clean

help:
	@echo "make lab       boot the two-node lab fleet (SIMULATED GPUs, real systemd) and run the facts playbook"
	@echo "make bench     a no-op site.yml and the --check drift report on 1 and BENCH_NODES (4) converged lab nodes: wall and CPU seconds"
	@echo "make lab-down  stop the lab fleet and remove every mount, namespace, cgroup and process it made"
	@echo "make test      ruff, ansible-lint (production), ansible-test sanity, unit tests, molecule scenarios"
	@echo "make test ROLE=<role>   the per-role loop: lint, unit tests, the role alone on its prepared lab node (extensions/molecule/role)"
	@echo "make test-fresh         make test as a new machine runs it (clean clone, new HOME, empty lab caches)"
	@echo "make lab-fresh          make lab the same way (timed), then make lab-down"
	@echo "make test-matrix    molecule stack_matrix alone: both stacks on GB10, the incident stack on B300, the kernel-set stack on B200 and B300 (also in make test)"
	@echo "make lint | sanity | units | controllers | molecule | release-check | docs-site    one part of make test"
	@echo "make docs      the role READMEs and the README's role index from the argument specs, then the docs site (.build/docs/html)"
	@echo "make clean     make lab-down, then remove .venv and .build (the machine's lab images and compile cache stay: /var/cache/inferops-lab)"

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

# `make test` runs the whole suite; `make test ROLE=<role>` the per-role loop (test-role, below).
test: $(if $(ROLE),test-role,test-suite)

# lint, sanity (pip installs and pylint, mostly one core) and the unit tests, under each tested ansible-core (make
# controllers), run in one lane beside the lab from the start; the lab's images (built once per machine), then the
# molecule lanes (below). default prints as it runs; the other scenarios', lint's, sanity's and the unit tests' output
# follows. At the end: the wall time, each lane's, the machine's CPU time, and whether the run began on a fresh machine
# (no lab images, an empty compile cache) or a warm one (also in .build/test-times.txt); stopped from outside (TERM, INT),
# the same summary with where each scenario still running was (tools/test_summary.py), and exit 143.
test-suite: debs venv link
	@mkdir -p $(BUILD); rm -rf $(MOLECULE_LOGS) $(TASK_COSTS); mkdir -p $(TASK_COSTS); rm -f $(LAB_STATE)/node-cpu.jsonl $(BUILD)/checks.time $(BUILD)/images.time; \
	  started=$$(date +%s); cpu_before=$$(tools/cpu-seconds); steal_before=$$(tools/cpu-seconds steal); \
	  machine="$$($(LABCTL) machine-state)"; echo "== make test on a $$machine"; \
	  summary() { $(SUMMARY_ENV) $(BIN)/python tools/test_summary.py "$$1" "$$2" $$started $$cpu_before $$steal_before "$$machine"; }; \
	  trap 'trap - TERM INT; summary stopped 143; exit 143' TERM INT; \
	  ( begun=$$(date +%s); rc=0; $(MAKE) -k --no-print-directory lint sanity units controllers release-check docs-site > $(BUILD)/checks.log 2>&1 || rc=$$?; \
	   echo "lint, sanity and unit tests (under each tested ansible-core), Galaxy's importer and the docs site: rc $$rc, $$(( $$(date +%s) - begun )) s" >> $(BUILD)/checks.log; echo $$rc > $(BUILD)/checks.rc; \
	   times > $(BUILD)/checks.cpu; \
	   echo "lint, sanity and unit tests (under each tested ansible-core), Galaxy's importer and the docs site (beside the lab): rc=$$rc seconds=$$(( $$(date +%s) - begun )) core-seconds=$$(tools/times-total < $(BUILD)/checks.cpu)" > $(BUILD)/checks.time ) & checks=$$!; \
	  lab=0; begun=$$(date +%s); ( rc=0; $(MAKE) --no-print-directory lab-images || rc=$$?; times > $(BUILD)/images.cpu; exit $$rc ) & wait $$! || lab=$$?; \
	  echo "lab images and mirror: rc=$$lab seconds=$$(( $$(date +%s) - begun )) core-seconds=$$(tools/times-total < $(BUILD)/images.cpu)" > $(BUILD)/images.time; \
	  if [ $$lab -eq 0 ]; then $(MAKE) --no-print-directory molecule & wait $$! || lab=$$?; fi; \
	  wait $$checks || true; echo "== lint, sanity and unit tests (under each tested ansible-core), Galaxy's importer and the docs site, run beside the lab (log: $(BUILD)/checks.log)"; cat $(BUILD)/checks.log; \
	  rc=0; test $$lab -eq 0 && test "$$(cat $(BUILD)/checks.rc)" -eq 0 || rc=1; \
	  summary end $$rc | tee $(BUILD)/test-times.txt; \
	  exit $$rc

# what tools/test_summary.py reads
SUMMARY_ENV = BUILD=$(BUILD) LAB_STATE=$(LAB_STATE) MOLECULE_LOGS=$(MOLECULE_LOGS) TASK_COSTS=$(TASK_COSTS) LABCTL="$(LABCTL)"

# The per-role loop: ruff, ansible-lint on the role, every unit test, then extensions/molecule/role: one node booted on the role's
# prepared image (site.yml's provisioning steps before the role, kept as overlay layers and made once per change of what
# they depend on: extensions/molecule/role/prepared.py), the role alone, a second run that changes nothing, the role's own verify.
# make test before a merge.
test-role: debs venv link
	@test -n "$(ROLE)" && test -d roles/$(ROLE) || { echo "make test ROLE=<role>: '$(ROLE)' is not a role of this collection; one of: $(notdir $(wildcard roles/*))" >&2; exit 2; }
	@started=$$(date +%s); echo "== make test ROLE=$(ROLE) on a $$($(LABCTL) machine-state)"; rc=0; rm -rf $(TASK_COSTS); mkdir -p $(TASK_COSTS); \
	  { $(BIN)/ruff check . && $(BIN)/ansible-lint roles/$(ROLE) && PYTHONPATH=$(IMPORT_ROOT) $(BIN)/pytest -q tests/unit && \
	    $(LABCTL) build --stack current && $(LABCTL) mirror --apt && INFEROPS_ROLE=$(ROLE) $(BIN)/molecule test --scenario-name role; } || rc=$$?; \
	  $(BIN)/python tools/task_costs.py $(TASK_COSTS) 15; echo "== make test ROLE=$(ROLE): rc $$rc in $$(( $$(date +%s) - started )) s"; exit $$rc

# make test on this machine as a new one runs it: a clean clone of HEAD, a new HOME, empty lab caches (tools/test-fresh).
test-fresh:
	tools/test-fresh

# make lab the same way, timed, then make lab-down.
lab-fresh:
	tools/test-fresh lab

lint: ruff ansible-lint

ruff: venv
	$(BIN)/ruff check .

ansible-lint: venv $(IMPORT_ROOT)/ansible_collections/inferops/blackwell
	$(BIN)/ansible-lint

# A clean copy of the tracked (and new, not ignored) files, as its own git tree,
# so sanity sees exactly what would be committed.
sanity: debs venv $(ANSIBLE_TEST_CACHE)/get_pip_$(subst .,_,$(PIP_FOR_ANSIBLE_TEST)).py
	$(BIN)/python tools/sanity_tree.py $(SANITY_TREE)
	cd $(SANITY_TREE) && $(BIN)/ansible-test sanity --venv --python 3.11 --color no

units: venv $(IMPORT_ROOT)/ansible_collections/inferops/blackwell
	PYTHONPATH=$(IMPORT_ROOT) $(BIN)/pytest tests/unit tests/artifact

# sanity, the unit and the artifact tests under each later ansible-core release (requirements/controllers.txt), which
# needs a newer Python than this machine's: from a Debian 13 root filesystem (debootstrap, once per machine; chroot)
controllers: debs venv $(IMPORT_ROOT)/ansible_collections/inferops/blackwell
	$(BIN)/python tools/controllers.py test

# The lab's cached layers (base rootfs; the incident's, the current and the kernel-set stack's images, side by side) and
# its mirror (CUDA wheels, flashinfer-cubin, signed apt repository).
lab-images: debs venv
	$(LABCTL) build --stack incident --stack current --stack cubin
	$(LABCTL) mirror --apt

# molecule scenarios on lab nodes (each scenario creates and destroys its own nodes, at its own addresses), in lanes
# that all start at once (tools/molecule-lanes): a lane runs its scenarios one after another, the first lane prints as
# it runs, the others' logs (.build/molecule/<scenario>.log) are printed at the end. Nothing orders the lanes' compiles:
# the lab's compile cache runs at most one compile per core on the machine, all nodes together, and compiles an object
# two nodes need once (extensions/molecule/lab/nvcc_cache). Lanes, balanced by a warm run's figures (docs/testing.md): default (the
# incident stack on SM 12.0, the current one on SM 10.3, the faults, the bad-input matrix, rollouts and remediation); zoo
# (nine models on the current stack on SM 12.0: that pair), then example (the example inventory as shipped on three lab
# nodes); stack_matrix (the three other (stack, GPU family) pairs, and
# the kernel-set stack on SM 10.0 and SM 10.3), then
# the scenarios that compile nothing.
MOLECULE_LANES := "default" "zoo example" "stack_matrix incident toolkit_apt flashinfer_strategies"
MOLECULE_LOGS := $(BUILD)/molecule
# The lab's nodes by stack and GPU family: default runs the incident stack (SGLang 0.5.21, FlashInfer 0.6.18) on SM 12.0
# and the current one (SGLang 0.5.23, FlashInfer 0.7.2) on SM 10.3; zoo the current one on SM 12.0; stack_matrix the
# three other pairs (both stacks on SM 12.1 with Triton's attention, the incident's on SM 10.3) and the kernel-set stack
# (SGLang 0.5.15.post1, FlashInfer 0.6.12 with flashinfer-cubin 0.6.12) on SM 10.0 and SM 10.3, served through trtllm_mha
# (a dense model) and trtllm_mla (a Kimi-K2.6-shaped one).
# Alone:
test-matrix: debs venv link lab-images
	$(BIN)/molecule test --scenario-name stack_matrix

# The model zoo alone (also in make test): each model served after site.yml with the compile tripwire set.
test-zoo: debs venv link lab-images
	$(BIN)/molecule test --scenario-name zoo

# default runs with the newest tested ansible-core (requirements/controllers.txt's last) as the controller, from the
# Debian 13 root filesystem (tools/controllers.py molecule); the other scenarios with dev.txt's, the oldest supported.
NEWEST_CONTROLLER_SCENARIOS := default
molecule: debs venv link
	@MOLECULE=$(BIN)/molecule NEWEST_CONTROLLER_SCENARIOS="$(NEWEST_CONTROLLER_SCENARIOS)" \
	  NEWEST_CONTROLLER_MOLECULE="$(BIN)/python tools/controllers.py molecule" tools/molecule-lanes $(MOLECULE_LOGS) $(MOLECULE_LANES)

# The whole story on a fresh two-node lab fleet (SIMULATED GPUs and SGLang; real systemd, toolkit, FlashInfer, compiles).
LAB_PLAY := $(BIN)/ansible-playbook -i $(LAB_INVENTORY)
lab: debs venv link
	$(LABCTL) fleet-down
	$(LABCTL) fleet-up --inventory $(LAB_INVENTORY)
	$(LABCTL) mirror
	@echo; echo "== 1/4 The fleet as delivered: system CUDA 12.8 only (playbooks/facts.yml)"
	$(LAB_PLAY) playbooks/facts.yml -e facts_report_path=$(BUILD)/lab/fleet-facts-before.json
	@echo; echo "== 2/4 The incident: SGLang started the old way on lab-pro6000-1 dies at its first sampling call"
	$(LAB_PLAY) extensions/molecule/lab/show_incident.yml --limit lab-pro6000-1
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
	$(LAB_PLAY) extensions/molecule/lab/damage.yml
	$(LAB_PLAY) playbooks/remediate.yml -e remediate_report_path=$(BUILD)/lab/remediate-report.json

lab-down: venv
	$(LABCTL) fleet-down

# What a no-op run and the drift report cost (issue 33's targets: one node's no-op in <= 10 s wall and <= 3 controller
# CPU-seconds; N nodes' in <= 1.1 x N x one node's core-seconds), on 1 and BENCH_NODES converged lab nodes of one GPU
# profile; a table and .build/bench/bench.json. BENCH_ARGS=--store adds the build store's steps with real compiles (long).
BENCH_NODES ?= 4
BENCH_ARGS ?=
bench: debs venv link
	$(LABCTL) build
	$(LABCTL) mirror
	$(BIN)/python extensions/molecule/lab/bench.py --nodes $(BENCH_NODES) $(BENCH_ARGS)

# The role READMEs and the README's role index from roles/*/meta/argument_specs.yml, then the docs site.
docs: venv
	$(BIN)/python tools/role_docs.py
	$(MAKE) --no-print-directory docs-site

release-venv: $(RELEASE_VENV)/.installed

$(RELEASE_VENV)/.installed: requirements/release.txt requirements/release-constraints.txt
	$(PYTHON) -m venv $(RELEASE_VENV)
	$(RELEASE_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/release.txt -c requirements/release-constraints.txt
	touch $@

# The docs site (.build/docs/html): antsibull-docs' pages of every plugin and role, the README and the operator pages of
# docs/ as the user guide (tools/docs_site.py); any Sphinx warning fails it.
docs-site: release-venv link
	PATH=$(RELEASE_VENV)/bin:$$PATH $(RELEASE_VENV)/bin/python tools/docs_site.py

# The release tarball as Galaxy takes it: first, galaxy.yml's version may not name a release while a changelog fragment is
# in no release (tools/release_versions.py); then ansible-galaxy collection build, then Galaxy's own importer
# (galaxy-importer: metadata, every plugin's and role's documentation through ansible-doc, ansible-lint), which must pass
# with no error or warning.
release-check: venv release-venv
	$(BIN)/python tools/release_versions.py
	rm -rf $(DIST); mkdir -p $(DIST)
	$(BIN)/ansible-galaxy collection build --output-path $(DIST) .
	cd $(DIST) && PATH=$(RELEASE_VENV)/bin:$$PATH $(RELEASE_VENV)/bin/python -m galaxy_importer.main inferops-blackwell-*.tar.gz > importer.log 2>&1 \
	  || { cat importer.log; exit 1; }; cat importer.log
	@! grep -E '(WARNING|ERROR)' $(DIST)/importer.log || { echo "release-check: Galaxy's importer warned (above)" >&2; exit 1; }

# Rewrite the canned nvidia-smi output of the synthetic GPU profiles from the lab simulator.
fixtures:
	$(PYTHON) tests/unit/fixtures/nvidia-smi/render.py

clean: lab-down
	rm -rf $(VENV) $(BUILD) tests/output

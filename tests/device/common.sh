# shellcheck shell=sh
# Sourced by the run-*.sh harnesses (TEST HARNESS ONLY): ansible-core from the carried wheels into
# /tmp/site, the collection linked where Ansible finds it, the sudo shim where the host has no sudo.
# Needs: the repository root as the working directory, .whl/ carried (see README.md).
# Everything from here on goes to $OUT/run.log (the device tool brings $OUT back).
out="${OUT:-/tmp/inferops-device}"
mkdir -p "$out"
exec > "$out/run.log" 2>&1
set -x
here="$(pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ansible_core-*.whl .whl/resolvelib-*.whl \
  .whl/cryptography-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || exit 1
export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
mkdir -p /tmp/coll/ansible_collections/inferops && ln -sfn "$here" /tmp/coll/ansible_collections/inferops/blackwell
export ANSIBLE_COLLECTIONS_PATH=/tmp/coll ANSIBLE_CONFIG="$here/tests/device/ansible.cfg" ANSIBLE_FORCE_COLOR=0
if ! command -v sudo >/dev/null; then mkdir -p /tmp/shim && cp tests/device/sudo-shim.sh /tmp/shim/sudo && export PATH="/tmp/shim:$PATH"; fi

# What the host says about itself, captured in the same run as the facts (compare_facts.py reads it).
capture_host() {
  {
    nvidia-smi
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version,persistence_mode,mig.mode.current --format=csv,nounits
    nvidia-smi topo -m
    update-alternatives --query cuda
    ls -la /usr/local
    cat /proc/1/comm
    command -v sudo
    python3 --version
    /opt/torch/.venv/bin/python3 -c "import torch; print('torch', torch.__version__)"
  } > "$out/host.txt" 2>&1
}

gather_facts() {
  python3 /tmp/site/bin/ansible -i tests/device/inventory.ini h200 -m inferops.blackwell.gpu_facts > "$out/gpu_facts.json" 2>&1
  python3 tests/device/compare_facts.py "$out" > "$out/compare.txt" 2>&1
  echo "compare rc=$?" >> "$out/summary.txt"
}

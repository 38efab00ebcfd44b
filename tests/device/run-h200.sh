#!/bin/sh
# Run the collection on a lent GPU host (the device tool's machine) and put the logs in $OUT.
# Carry .whl/ (ansible-core and its missing dependencies, FlashInfer 0.6.18, apache-tvm-ffi): see tests/device/README.md.
set -u
out="${OUT:-/tmp/inferops-device}"
mkdir -p "$out"
exec > "$out/run.log" 2>&1
set -x
here="$(pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ansible_core-*.whl .whl/resolvelib-*.whl \
  .whl/cryptography-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || exit 1
# FlashInfer into the host's torch venv, as an operator's SGLang install would have it.
/opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps .whl/flashinfer_python-*.whl .whl/apache_tvm_ffi-*.whl || exit 1
export PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH"
mkdir -p /tmp/coll/ansible_collections/inferops && ln -sfn "$here" /tmp/coll/ansible_collections/inferops/blackwell
export ANSIBLE_COLLECTIONS_PATH=/tmp/coll ANSIBLE_CONFIG="$here/tests/device/ansible.cfg" ANSIBLE_FORCE_COLOR=0
if ! command -v sudo >/dev/null; then mkdir -p /tmp/shim && cp tests/device/sudo-shim.sh /tmp/shim/sudo && export PATH="/tmp/shim:$PATH"; fi
{ nvidia-smi; nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version,persistence_mode,mig.mode.current --format=csv,nounits; nvidia-smi topo -m; update-alternatives --query cuda; ls -la /usr/local; cat /proc/1/comm; command -v sudo; python3 --version; /opt/torch/.venv/bin/python3 -c "import torch; print('torch', torch.__version__)"; } > "$out/host.txt" 2>&1
play() {
  name="$1"; shift
  start=$(date +%s)
  python3 /tmp/site/bin/ansible-playbook -i tests/device/inventory.ini tests/device/site-h200.yml "$@" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc seconds=$(( $(date +%s) - start ))" >> "$out/summary.txt"
}
python3 /tmp/site/bin/ansible -i tests/device/inventory.ini h200 -m inferops.blackwell.gpu_facts > "$out/gpu_facts.json" 2>&1
python3 tests/device/compare_facts.py "$out" > "$out/compare.txt" 2>&1; echo "compare rc=$?" >> "$out/summary.txt"
play first-run --diff
play second-run
cp tests/device/sampling_check.py /tmp/sampling_check.py && chmod 644 /tmp/sampling_check.py
# The environment file's variables, one argument each (values may hold spaces), as a unit would get them.
set -- HOME=/var/lib/sglang
while IFS= read -r line; do
  case "$line" in ''|'#'*) ;; *) set -- "$@" "$(printf '%s' "$line" | sed "s/='\(.*\)'\$/=\1/")" ;; esac
done < /etc/inferops/cuda.env
runuser -u sglang -- env -i "$@" /opt/torch/.venv/bin/python3 /tmp/sampling_check.py > "$out/sampling.json" 2> "$out/sampling.err"
sampling_rc=$?
{
  echo "sampling rc=$sampling_rc"
  runuser -u sglang -- /usr/local/sbin/inferops-flashinfer check 2>&1
  find /var/lib/sglang/.cache/flashinfer -name '*.so' -printf '%p %s\n'
} >> "$out/summary.txt"
cat "$out/summary.txt"

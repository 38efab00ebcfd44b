#!/bin/sh
# gpu_facts and the facts playbook on a lent host with several GPUs (issue 8), compared field by field
# with nvidia-smi --query-gpu and nvidia-smi topo -m captured in the same run. Carry .whl/ (see README.md).
# NVLink multicast stays off: the host's NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are left as they are, and the only GPU program is torch's peer-access query.
set -u
# shellcheck source=tests/device/common.sh
. tests/device/common.sh
capture_host
# Exactly the calls gpu_facts makes, stored the way tests/unit/fixtures/nvidia-smi/<profile>/ stores them.
cap="$out/capture"
mkdir -p "$cap"
smi() { name="$1"; shift; nvidia-smi "$@" > "$cap/$name.txt" 2> "$cap/$name.err"; echo $? > "$cap/$name.rc"; }
smi query "--query-gpu=$(python3 -c 'import sys; sys.path.insert(0, "plugins/module_utils"); import gpu; print(",".join(gpu.QUERY_FIELDS))')" --format=csv,nounits
smi banner
smi topo topo -m
# Corroboration from two other angles: the NVLink state per GPU and torch's peer-access answer.
nvidia-smi nvlink --status > "$cap/nvlink-status.txt" 2>&1
/opt/torch/.venv/bin/python3 - > "$cap/peer-access.txt" 2>&1 <<'PY'
import torch
n = torch.cuda.device_count()
print("device_count", n)
for a in range(n):
    for b in range(n):
        if a != b:
            print("peer", a, b, torch.cuda.can_device_access_peer(a, b))
PY
gather_facts
start=$(date +%s)
python3 /tmp/site/bin/ansible-playbook -i tests/device/inventory.ini playbooks/facts.yml -e "facts_report_path=$out/fleet-facts.json" > "$out/facts-play.log" 2>&1
echo "facts.yml rc=$? seconds=$(( $(date +%s) - start ))" >> "$out/summary.txt"
start=$(date +%s)
python3 /tmp/site/bin/ansible-playbook -i tests/device/inventory.ini inferops.blackwell.facts --check -e "facts_report_path=/tmp/fqcn-facts.json" >> "$out/facts-play.log" 2>&1
echo "inferops.blackwell.facts --check rc=$? seconds=$(( $(date +%s) - start ))" >> "$out/summary.txt"
python3 tests/device/compare_facts.py --report "$out/fleet-facts.json" "$out" >> "$out/compare.txt" 2>&1
echo "compare with the playbook's report rc=$?" >> "$out/summary.txt"
tar -C "$out" -cf "$out/capture.tar" capture && rm -r "$cap"
cat "$out/summary.txt"

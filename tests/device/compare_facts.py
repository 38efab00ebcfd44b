# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare gpu_facts with nvidia-smi, field by field, from one device run's captures.

Usage: python3 compare_facts.py DIR   (DIR holds host.txt and gpu_facts.json from run-h200.sh)
Prints one line per field and exits 1 on any difference.
"""

from __future__ import annotations

import json
import os
import re
import sys
import typing as t


def smi_rows(host: str) -> t.List[t.Dict[str, str]]:
    lines = host.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("index, name, uuid"))
    header = [re.sub(r"\s*\[.*\]$", "", cell.strip()) for cell in lines[start].split(",")]
    rows = []
    for line in lines[start + 1:]:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


def main(directory: str) -> int:
    with open(os.path.join(directory, "host.txt")) as handle:
        host = handle.read()
    with open(os.path.join(directory, "gpu_facts.json")) as handle:
        text = handle.read()
    facts = json.loads(re.search(r"=> (\{.*\})\s*$", text, re.S).group(1))["ansible_facts"]["inferops_gpu"]
    rows = smi_rows(host)
    checks: t.List[t.Tuple[str, t.Any, t.Any]] = [("gpu_count", len(rows), facts["gpu_count"])]
    for row, gpu in zip(rows, facts["gpus"]):
        major, minor = row["compute_cap"].split(".")
        checks += [
            ("gpu%s.index" % row["index"], int(row["index"]), gpu["index"]),
            ("gpu%s.name" % row["index"], row["name"], gpu["name"]),
            ("gpu%s.uuid" % row["index"], row["uuid"], gpu["uuid"]),
            ("gpu%s.pci_bus_id" % row["index"], row["pci.bus_id"], gpu["pci_bus_id"]),
            ("gpu%s.memory_total_mib" % row["index"], int(row["memory.total"]), gpu["memory_total_mib"]),
            ("gpu%s.compute_capability" % row["index"], {"major": int(major), "minor": int(minor)}, gpu["compute_capability"]),
            ("gpu%s.driver_version" % row["index"], row["driver_version"], gpu["driver_version"]),
            ("gpu%s.persistence_mode" % row["index"], row["persistence_mode"], gpu["persistence_mode"]),
            ("gpu%s.mig_mode" % row["index"], row["mig.mode.current"], gpu["mig_mode"]),
        ]
    banner = re.search(r"CUDA Version:\s*([0-9.]+)", host)
    checks.append(("driver_cuda_version", banner.group(1) if banner else None, facts["driver_cuda_version"]))
    gpu_links = len(re.findall(r"^GPU\d+\t", host, re.M))
    checks.append(("interconnect", "none" if gpu_links == 1 else "(see topo)", facts["interconnect"] if gpu_links == 1 else "(see topo)"))
    value = re.search(r"^Value: (.*)$", host, re.M)
    checks.append(("default_toolkit.resolves_to", value.group(1) if value else None, facts["default_toolkit"]["resolves_to"]))
    bad = 0
    for name, smi, fact in checks:
        same = smi == fact
        bad += not same
        print("%-4s %-28s nvidia-smi/host: %-45s gpu_facts: %s" % ("ok" if same else "DIFF", name, smi, fact))
    print("%d field(s) compared, %d difference(s)" % (len(checks), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

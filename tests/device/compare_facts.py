# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare gpu_facts with nvidia-smi, field by field, from one device run's captures.

Usage: python3 compare_facts.py [--report FLEET_JSON] DIR
DIR holds host.txt (nvidia-smi --query-gpu, the banner and topo -m, as run-*.sh captured them) and
gpu_facts.json (the module's output). With --report, the facts compared are the ones the facts
playbook wrote for the host instead of the module's own output.
Prints one line per field and exits 1 on any difference.

nvidia-smi's output is read here on its own terms (no code shared with the collection), so a
parsing mistake in module_utils/gpu.py shows up as a difference.
"""

from __future__ import annotations

import argparse
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


def smi_links(host: str) -> t.Dict[str, str]:
    """GPU pairs of `nvidia-smi topo -m`: {'0-1': 'NV18'}; the matrix is the GPUi rows, columns in header order."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in host.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("\tGPU0"))
    columns = [cell for cell in lines[start].split("\t") if re.fullmatch(r"GPU\d+", cell)]
    links = {}
    for line in lines[start + 1:]:
        cells = line.split("\t")
        if not re.fullmatch(r"GPU\d+", cells[0]):
            break
        row = int(cells[0][3:])
        for column, link in zip(columns, cells[1:]):
            if int(column[3:]) > row:
                links["%d-%s" % (row, column[3:])] = link.strip()
    return links


def expected_interconnect(links: t.Dict[str, str]) -> str:
    if not links:
        return "none"
    nvlink = [link.startswith("NV") for link in links.values()]
    return "NVLink" if all(nvlink) else "PCIe" if not any(nvlink) else "mixed"


def module_facts(directory: str) -> t.Dict[str, t.Any]:
    with open(os.path.join(directory, "gpu_facts.json")) as handle:
        text = handle.read()
    match = re.search(r"=> (\{.*\})\s*$", text, re.S)
    if not match:
        raise SystemExit("no module result in gpu_facts.json:\n" + text[-2000:])
    return json.loads(match.group(1))["ansible_facts"]["inferops_gpu"]


def report_facts(path: str) -> t.Dict[str, t.Any]:
    with open(path) as handle:
        facts = json.load(handle)["facts"]
    if len(facts) != 1:
        raise SystemExit("%s reports %d hosts, expected the one local host" % (path, len(facts)))
    return next(iter(facts.values()))


def checks_for(host: str, facts: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, t.Any, t.Any]]:
    rows = smi_rows(host)
    checks: t.List[t.Tuple[str, t.Any, t.Any]] = [
        ("gpu_count", len(rows), facts["gpu_count"]),
        ("gpu indexes", [int(row["index"]) for row in rows], [gpu["index"] for gpu in facts["gpus"]]),
    ]
    for row, gpu in zip(rows, facts["gpus"]):
        major, minor = row["compute_cap"].split(".")
        name = "gpu%s." % row["index"]
        checks += [
            (name + "name", row["name"], gpu["name"]),
            (name + "uuid", row["uuid"], gpu["uuid"]),
            (name + "pci_bus_id", row["pci.bus_id"], gpu["pci_bus_id"]),
            (name + "memory_total_mib", int(row["memory.total"]), gpu["memory_total_mib"]),
            (name + "compute_capability", {"major": int(major), "minor": int(minor)}, gpu["compute_capability"]),
            (name + "driver_version", row["driver_version"], gpu["driver_version"]),
            (name + "persistence_mode", row["persistence_mode"], gpu["persistence_mode"]),
            (name + "mig_mode", row["mig.mode.current"], gpu["mig_mode"]),
        ]
    banner = re.search(r"CUDA Version:\s*([0-9.]+)", host)
    checks.append(("driver_cuda_version", banner.group(1) if banner else None, facts["driver_cuda_version"]))
    links = smi_links(host)
    for pair, link in sorted(links.items()):
        checks.append(("link " + pair, link, facts["links"].get(pair)))
    checks.append(("link pairs", sorted(links), sorted(facts["links"])))
    checks.append(("interconnect", expected_interconnect(links), facts["interconnect"]))
    value = re.search(r"^Value: (.*)$", host, re.M)
    checks.append(("default_toolkit.resolves_to", value.group(1) if value else None, facts["default_toolkit"]["resolves_to"]))
    return checks


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", help="the facts playbook's JSON report (fleet-facts.json)")
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    with open(os.path.join(args.directory, "host.txt")) as handle:
        host = handle.read()
    facts = report_facts(args.report) if args.report else module_facts(args.directory)
    print("source of the facts: %s" % (args.report or "gpu_facts.json (the module)"))
    bad = 0
    checks = checks_for(host, facts)
    for name, smi, fact in checks:
        same = smi == fact
        bad += not same
        print("%-4s %-28s nvidia-smi/host: %-45s gpu_facts: %s" % ("ok" if same else "DIFF", name, smi, fact))
    print("%d field(s) compared, %d difference(s)" % (len(checks), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

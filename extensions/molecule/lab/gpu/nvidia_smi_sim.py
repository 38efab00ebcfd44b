# -*- coding: utf-8 -*-
"""LAB SIMULATION -- not NVIDIA's nvidia-smi.

Test equipment for the inferops.blackwell lab fleet and molecule scenarios:
answers the nvidia-smi calls the collection makes (--query-gpu, -L, topo -m and
the banner) from a GPU profile, in the format of the real tool (checked against
real captures from an H200 host in the unit tests). It is installed on lab nodes
only, never by a role.

Profile: $INFEROPS_LAB_GPU_PROFILE, else /etc/inferops-lab/gpu-profile.json.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import typing as t

PROFILE_DEFAULT = "/etc/inferops-lab/gpu-profile.json"

# field -> (profile key, unit shown in the csv header and, without nounits, after the value)
FIELDS: t.Dict[str, t.Tuple[str, str]] = {
    "index": ("index", ""),
    "name": ("name", ""),
    "uuid": ("uuid", ""),
    "pci.bus_id": ("bus_id", ""),
    "memory.total": ("memory_mib", "MiB"),
    "memory.used": ("memory_used_mib", "MiB"),
    "memory.free": ("memory_free_mib", "MiB"),
    "compute_cap": ("compute_cap", ""),
    "driver_version": ("driver_version", ""),
    "persistence_mode": ("persistence_mode", ""),
    "mig.mode.current": ("mig_mode", ""),
    "power.limit": ("power_limit_w", "W"),
    "clocks.max.sm": ("max_sm_clock_mhz", "MHz"),
    "count": ("count", ""),
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "driver_version": "driver_version"}

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def load_profile() -> t.Dict[str, t.Any]:
    path = os.environ.get("INFEROPS_LAB_GPU_PROFILE", PROFILE_DEFAULT)
    with open(path) as handle:
        return json.load(handle)


def gpus(profile: t.Dict[str, t.Any]) -> t.List[t.Dict[str, t.Any]]:
    """Expand the profile into one record per GPU."""
    result = []
    for index, spec in enumerate(profile.get("gpus", [])):
        gpu = dict(profile.get("defaults", {}))
        gpu.update(spec)
        gpu["index"] = index
        gpu.setdefault("driver_version", profile["driver_version"])
        if "uuid" not in gpu:
            digest = hashlib.sha256(("%s/%d" % (profile["name"], index)).encode()).hexdigest()
            gpu["uuid"] = "GPU-%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])
        if isinstance(gpu.get("memory_mib"), int):
            gpu.setdefault("memory_used_mib", 0)
            gpu.setdefault("memory_free_mib", gpu["memory_mib"] - gpu["memory_used_mib"])
        else:
            # unified memory (GB10): memory.total, .used and .free are all [N/A] (real captures:
            # tests/unit/fixtures/nvidia-smi/public)
            gpu.setdefault("memory_used_mib", None)
        gpu["count"] = len(profile["gpus"])
        result.append(gpu)
    return result


def value(gpu: t.Dict[str, t.Any], field: str, units: bool) -> str:
    key, unit = FIELDS[field]
    raw = gpu.get(key)
    if raw is None:
        return "[N/A]"
    if isinstance(raw, float):
        text = "%.2f" % raw
    else:
        text = str(raw)
    if units and unit and not text.startswith("["):
        text += " " + unit
    return text


def query_gpu(profile: t.Dict[str, t.Any], spec: str, fmt: str) -> int:
    fields = [ALIASES.get(f.strip(), f.strip()) for f in spec.split(",")]
    for field in fields:
        if field not in FIELDS:
            print('Field "%s" is not a valid field to query.' % field)
            print()
            return 2
    options = fmt.split(",")
    if options[0] != "csv":
        print('"%s" is not a valid format.' % fmt)
        return 2
    units = "nounits" not in options
    if "noheader" not in options:
        header = []
        for field in fields:
            unit = FIELDS[field][1]
            header.append("%s [%s]" % (field, unit) if unit else field)
        print(", ".join(header))
    for gpu in gpus(profile):
        print(", ".join(value(gpu, field, units) for field in fields))
    return 0


def short_name(name: str) -> str:
    """The banner's name cell: a name over 27 characters is cut to 24 and "..." (real captures:
    tests/unit/fixtures/nvidia-smi/public, "NVIDIA RTX PRO 6000 Blac...")."""
    return name if len(name) <= 27 else name[:24] + "..."


def banner(profile: t.Dict[str, t.Any]) -> int:
    line = "+" + "-" * 89 + "+"
    cells = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    print(datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + "       ")
    print(line)
    print("| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|"
          % (profile["driver_version"], profile["driver_version"], profile["cuda_version"]))
    print(cells)
    print("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    print("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    print("|                                         |                        |               MIG M. |")
    print("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for gpu in gpus(profile):
        persistence = "On" if gpu.get("persistence_mode") == "Enabled" else "Off"
        unified = not isinstance(gpu.get("memory_mib"), int)
        print("|%4d  %-30s%3s  |%19s %3s |%21s |" % (
            gpu["index"], short_name(gpu["name"]), persistence, gpu["bus_id"], "Off", gpu.get("ecc", "0")))
        # a unified-memory GPU (GB10) has no framebuffer to report and no power limit: "Not Supported", "N/A"
        memory = " Not Supported          " if unified else "%11s / %9s " % (
            "%dMiB" % gpu["memory_used_mib"], "%dMiB" % gpu["memory_mib"])
        limit = "%dW" % int(gpu["power_limit_w"]) if gpu.get("power_limit_w") else "N/A "
        print("|%4s%6s%6s%16s / %5s |%s|%8s%13s |" % (
            "N/A", "%dC" % gpu.get("temperature_c", 36), "P0", "%dW" % gpu.get("power_draw_w", 103),
            limit, memory, "0%", "Default"))
        print("|%41s|%24s|%21s |" % ("", "", gpu.get("mig_mode") or "N/A"))
        print(cells)
    print()
    print(line)
    print("| Processes:" + " " * 78 + "|")
    print("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
    print("|        ID   ID                                                               Usage      |")
    print("|" + "=" * 89 + "|")
    print("|  No running processes found" + " " * 61 + "|")
    print(line)
    return 0


def link(profile: t.Dict[str, t.Any], a: t.Dict[str, t.Any], b: t.Dict[str, t.Any]) -> str:
    if a["index"] == b["index"]:
        return " X "
    topology = profile.get("topology", {})
    if topology.get("kind") == "nvlink":
        return "NV%d" % topology.get("links", 18)
    if a.get("numa", 0) != b.get("numa", 0):
        return "SYS"
    if a.get("switch") is not None and a.get("switch") == b.get("switch"):
        return "PIX"
    return "NODE"


def topo(profile: t.Dict[str, t.Any]) -> int:
    records = gpus(profile)
    labels = ["GPU%d" % gpu["index"] for gpu in records]
    print("\t\x1b[4m" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m")
    for gpu in records:
        cells = [link(profile, gpu, other) for other in records]
        print("GPU%d\t%s\t%s\t%s\t\tN/A" % (gpu["index"], "\t".join(cells), gpu.get("cpu_affinity", "0-15"),
                                            gpu.get("numa", 0)))
    sys.stdout.write(LEGEND)
    return 0


def main(argv: t.List[str]) -> int:
    profile = load_profile()
    failure = profile.get("failure")
    if failure:
        sys.stdout.write(failure.get("stdout", ""))
        sys.stderr.write(failure.get("stderr", ""))
        return int(failure.get("rc", 1))
    if profile.get("garbled"):
        sys.stdout.write(profile["garbled"])
        return 0
    if not argv:
        return banner(profile)
    if argv == ["-L"]:
        for gpu in gpus(profile):
            print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        return 0
    if argv[:2] == ["topo", "-m"]:
        return topo(profile)
    spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), None)
    if spec is not None and fmt is not None:
        return query_gpu(profile, spec, fmt)
    print("LAB SIMULATION of nvidia-smi: arguments not simulated: %s" % " ".join(argv), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsing and the SM / FlashInfer tables behind inferops.blackwell.gpu_facts.

Everything here runs on the managed node's own Python (3.8 or later) and uses
the standard library only. Functions that only parse text are pure, so the
unit tests drive them with captured command output.
"""

from __future__ import annotations

import json
import os
import re
import typing as t

# The columns gpu_facts asks nvidia-smi for, in this order.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    "persistence_mode",
    "mig.mode.current",
)

# What nvidia-smi prints where a value does not apply (MIG on a GPU without it,
# memory.total on a unified-memory GB10, ...).
_NOT_AVAILABLE = frozenset(("", "N/A", "[N/A]", "Not Supported", "[Not Supported]"))

# Lowest nvcc release that can build each FlashInfer target
# (key: FlashInfer's arch string). Targets missing here are reported with
# min_nvcc None and the host verdict says so; nothing is rejected.
TARGET_MIN_NVCC: t.Dict[str, t.Tuple[int, int]] = {
    "7.5": (10, 0),
    "8.0": (11, 0),
    "8.6": (11, 1),
    "8.7": (11, 4),
    "8.9": (11, 8),
    "9.0a": (12, 0),
    "10.0a": (12, 8),
    "10.3a": (12, 9),
    "11.0a": (13, 0),
    "12.0a": (12, 8),
    "12.0f": (12, 9),
    "12.1a": (12, 9),
}

# FlashInfer (0.6.7 and later) refuses every SM 12.x capability unless the
# CUDA version it detects is at least this.
FLASHINFER_SM12_MIN_CUDA = (12, 9)

# FlashInfer's JIT refuses anything below this capability.
FLASHINFER_MIN_CAPABILITY = (7, 5)

_CAPABILITY_RE = re.compile(r"^(\d+)\.(\d+)$")
_NVCC_RELEASE_RE = re.compile(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)*)")
# The banner's header: "Driver Version: 580.95.05  CUDA Version: 13.0"; from driver 610 on, "KMD Version: 610.43.02
# CUDA UMD Version: 13.3" (real captures: tests/unit/fixtures/nvidia-smi/public)
_BANNER_CUDA_RE = re.compile(r"CUDA (?:UMD )?Version:\s*(\d+)\.(\d+)")
_BANNER_DRIVER_RE = re.compile(r"(?:Driver|KMD) Version:\s*([0-9][0-9.]*)")
# topo -m separates its cells with tabs; a copy through a terminal has runs of spaces instead
_TOPO_CELL_SPLIT_RE = re.compile(r"\t|\s{2,}")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
_NVLINK_RE = re.compile(r"^NV(\d+)$")
_PCIE_LINKS = frozenset(("PIX", "PXB", "PHB", "NODE", "SYS"))
_TOOLKIT_DIR_RE = re.compile(r"^cuda-\d+(\.\d+)?$")
_UNIT_SUFFIX_RE = re.compile(r"\s*\[[^\]]*\]$")
_MEMORY_RE = re.compile(r"^(\d+)(?: MiB)?$")


class NvidiaSmiParseError(Exception):
    """Output of an nvidia-smi command that cannot be read."""

    def __init__(self, command: str, line_number: int, line: str, reason: str) -> None:
        self.command = command
        self.line_number = line_number
        self.line = line
        self.reason = reason
        super().__init__(
            "cannot parse the output of `%s`, line %d: %r: %s" % (command, line_number, line, reason)
        )


# --- versions --------------------------------------------------------------

def version_str(version: t.Optional[t.Sequence[int]]) -> t.Optional[str]:
    """(12, 9) -> '12.9'; None stays None."""
    if version is None:
        return None
    return ".".join(str(part) for part in version)


def parse_version(text: str) -> t.Tuple[int, ...]:
    """'12.8' or '12.8.93' -> a tuple of ints; ValueError on anything else."""
    parts = text.strip().split(".")
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError("not a dotted version: %r" % text)
    return tuple(int(part) for part in parts)


def parse_nvcc_version(text: str) -> t.Optional[t.Dict[str, t.Any]]:
    """Read `nvcc --version` output: 'release 13.0, V13.0.88'."""
    match = _NVCC_RELEASE_RE.search(text)
    if not match:
        return None
    return {
        "release": (int(match.group(1)), int(match.group(2))),
        "full": match.group(3),
    }


def parse_version_json(text: str) -> t.Optional[t.Dict[str, t.Any]]:
    """Read a toolkit's version.json ({"cuda": {"version": "12.8.1"}})."""
    try:
        data = json.loads(text)
        full = str(data["cuda"]["version"])
        parts = parse_version(full)
    except (ValueError, KeyError, TypeError):
        return None
    if len(parts) < 2:
        return None
    return {"release": (parts[0], parts[1]), "full": full}


# --- capabilities and targets ------------------------------------------------

def parse_capability(text: str) -> t.Tuple[int, int]:
    """'12.0' -> (12, 0). Integers, so 10.0 and 12.0 never collapse."""
    match = _CAPABILITY_RE.match(text.strip())
    if not match:
        raise ValueError("not a compute capability: %r" % text)
    return int(match.group(1)), int(match.group(2))


def capability_str(capability: t.Tuple[int, int]) -> str:
    return "%d.%d" % capability


def sm_name(capability: t.Tuple[int, int]) -> str:
    """(12, 0) -> 'sm_120', (9, 0) -> 'sm_90'."""
    return "sm_%d%d" % capability


def arch_family(capability: t.Tuple[int, int]) -> str:
    """Architecture family by capability range; newer majors are 'Unknown (newer)'."""
    major, minor = capability
    if major >= 13:
        return "Unknown (newer than Blackwell)"
    if major >= 10:
        return "Blackwell"
    if major == 9:
        return "Hopper"
    if major == 8:
        return "Ada Lovelace" if minor >= 9 else "Ampere"
    if major == 7:
        return "Turing" if minor >= 5 else "Volta"
    if major == 6:
        return "Pascal"
    if major == 5:
        return "Maxwell"
    if major == 3:
        return "Kepler"
    return "Unknown (older than Kepler)"


def flashinfer_target(capability: t.Tuple[int, int]) -> str:
    """The arch FlashInfer (0.6.8 and later) compiles for this capability.

    SM 9.x gets the 'a' suffix, SM 12.0 the family suffix 'f', every other
    SM 10 or later 'a', anything older none. This is the rule itself, not a
    list of known GPUs, so a newer SM yields a target too.
    """
    major, minor = capability
    if major == 12 and minor == 0:
        return "12.0f"
    if major >= 9:
        return "%d.%da" % (major, minor)
    return "%d.%d" % (major, minor)


def target_capability(target: str) -> t.Tuple[int, int]:
    """'12.0f' -> (12, 0)."""
    return parse_capability(target.rstrip("abcdefghijklmnopqrstuvwxyz"))


def target_min_nvcc(target: str) -> t.Optional[t.Tuple[int, int]]:
    """Lowest nvcc release that builds this target, or None when not known."""
    known = TARGET_MIN_NVCC.get(target)
    if known is None:
        return None
    if target_capability(target)[0] == 12:
        # FlashInfer refuses SM 12.x below this whatever nvcc itself could do.
        return max(known, FLASHINFER_SM12_MIN_CUDA)
    return known


def sort_targets(targets: t.Iterable[str]) -> t.List[str]:
    return sorted(set(targets), key=lambda target: (target_capability(target), target))


# --- nvidia-smi --------------------------------------------------------------

def query_gpu_args() -> t.List[str]:
    """Arguments for the one query gpu_facts makes; the header names the columns."""
    return ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,nounits"]


def _optional(value: str) -> t.Optional[str]:
    value = value.strip()
    return None if value in _NOT_AVAILABLE else value


def split_warnings(text: str) -> t.Tuple[t.List[str], t.List[str]]:
    """Separate nvidia-smi's own 'WARNING: ...' lines (a corrupt infoROM, say) from data."""
    warnings: t.List[str] = []
    lines: t.List[str] = []
    for line in text.splitlines():
        if line.strip().upper().startswith("WARNING:"):
            warnings.append(line.strip())
        else:
            lines.append(line)
    return warnings, lines


def describe_gpu(fields: t.Dict[str, t.Optional[str]], capability: t.Tuple[int, int]) -> t.Dict[str, t.Any]:
    """Everything gpu_facts reports for one GPU."""
    target = flashinfer_target(capability)
    min_nvcc = target_min_nvcc(target)
    memory = fields["memory.total"]
    return {
        "index": int(fields["index"] or 0),
        "name": fields["name"],
        "uuid": fields["uuid"],
        "pci_bus_id": fields["pci.bus_id"],
        "memory_total_mib": int(memory) if memory is not None else None,
        "compute_capability": {"major": capability[0], "minor": capability[1]},
        "capability": capability_str(capability),
        "sm": sm_name(capability),
        "arch_family": arch_family(capability),
        "flashinfer_arch": target,
        "flashinfer_supported": capability >= FLASHINFER_MIN_CAPABILITY,
        "min_nvcc_version": version_str(min_nvcc),
        "driver_version": fields["driver_version"],
        "persistence_mode": fields["persistence_mode"],
        "mig_mode": fields["mig.mode.current"],
    }


def parse_query_gpu(text: str, command: str) -> t.List[t.Dict[str, t.Any]]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,nounits]` output, header included.

    The header must name every field of QUERY_FIELDS (in any order; others are
    ignored, units in brackets are dropped); values may carry their unit
    ('143771 MiB'). Lines nvidia-smi prints as 'WARNING: ...' are skipped.
    Anything else that does not fit raises NvidiaSmiParseError naming the line.
    """
    header: t.Optional[t.List[str]] = None
    gpus = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.strip().upper().startswith("WARNING:"):
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if header is None:
            names = [_UNIT_SUFFIX_RE.sub("", cell) for cell in cells]
            missing = [field for field in QUERY_FIELDS if field not in names]
            if missing:
                raise NvidiaSmiParseError(
                    command, number, line, "expected a csv header naming %s; missing %s"
                    % (", ".join(QUERY_FIELDS), ", ".join(missing)))
            header = names
            continue
        if len(cells) != len(header):
            raise NvidiaSmiParseError(
                command, number, line, "expected %d comma-separated fields as the header names, found %d"
                % (len(header), len(cells)))
        fields = {name: _optional(cell) for name, cell in zip(header, cells)}
        index = fields["index"]
        if index is None or not index.isdigit():
            raise NvidiaSmiParseError(command, number, line, "index %r is not an integer" % index)
        memory = fields["memory.total"]
        if memory is not None:
            match = _MEMORY_RE.match(memory)
            if not match:
                raise NvidiaSmiParseError(command, number, line, "memory.total %r is not a MiB count" % memory)
            fields["memory.total"] = match.group(1)
        try:
            capability = parse_capability(fields["compute_cap"] or "")
        except ValueError:
            raise NvidiaSmiParseError(
                command, number, line, "compute_cap %r is not MAJOR.MINOR" % fields["compute_cap"]) from None
        gpus.append(describe_gpu(fields, capability))
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_banner(text: str) -> t.Dict[str, t.Optional[str]]:
    """Driver version and the CUDA version the driver supports, from plain `nvidia-smi`."""
    cuda = _BANNER_CUDA_RE.search(text)
    driver = _BANNER_DRIVER_RE.search(text)
    return {
        "driver_version": driver.group(1) if driver else None,
        "driver_cuda_version": "%s.%s" % (cuda.group(1), cuda.group(2)) if cuda else None,
    }


def parse_topology(text: str, command: str, gpu_count: int) -> t.Dict[str, t.Any]:
    """Read the GPU-to-GPU part of `nvidia-smi topo -m`.

    Returns links ({'0-1': 'NV18', ...}, one entry per pair) and the verdict:
    'NVLink' when every pair is linked by NVLink, 'PCIe' when none is,
    'mixed' otherwise, and 'none' for a single GPU.
    """
    header: t.Optional[t.List[str]] = None
    rows: t.Dict[int, t.Tuple[int, str, t.List[str]]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _ANSI_RE.sub("", raw).rstrip()
        cells = [cell.strip() for cell in _TOPO_CELL_SPLIT_RE.split(line)]
        if cells and not cells[0] and header is not None:
            cells = cells[1:]
        if header is None:
            labels = [cell for cell in cells if cell]
            if labels and _GPU_LABEL_RE.match(labels[0]):
                header = [cell for cell in labels if _GPU_LABEL_RE.match(cell)]
            continue
        if not cells or not _GPU_LABEL_RE.match(cells[0]):
            if rows:
                break  # legend or NIC rows follow the GPU rows
            continue
        if len(cells) < 1 + len(header):
            raise NvidiaSmiParseError(
                command, number, raw,
                "expected a link for each of %d GPU columns, found %d cells" % (len(header), len(cells) - 1),
            )
        rows[int(cells[0][3:])] = (number, raw, cells[1:1 + len(header)])
    if header is None:
        raise NvidiaSmiParseError(command, 1, text.splitlines()[0] if text else "", "no GPU header row found")
    if len(rows) != gpu_count or len(header) != gpu_count:
        raise NvidiaSmiParseError(
            command, 1, text.splitlines()[0],
            "topology lists %d GPUs, --query-gpu listed %d" % (len(rows), gpu_count),
        )
    columns = [int(label[3:]) for label in header]
    links: t.Dict[str, str] = {}
    for row_gpu, (number, raw, cells) in sorted(rows.items()):
        for column_gpu, link in zip(columns, cells):
            if column_gpu == row_gpu:
                continue
            if not (_NVLINK_RE.match(link) or link in _PCIE_LINKS):
                raise NvidiaSmiParseError(command, number, raw, "unknown link %r to GPU%d" % (link, column_gpu))
            if column_gpu > row_gpu:
                links["%d-%d" % (row_gpu, column_gpu)] = link
    return {"interconnect": interconnect_verdict(links.values()), "links": links}


def interconnect_verdict(links: t.Iterable[str]) -> str:
    kinds = {"NVLink" if _NVLINK_RE.match(link) else "PCIe" for link in links}
    if not kinds:
        return "none"
    if len(kinds) == 1:
        return kinds.pop()
    return "mixed"


def common_value(values: t.Iterable[t.Optional[str]]) -> t.Optional[str]:
    """The one value all GPUs share, 'mixed' if they differ, None if there are none."""
    distinct = set(values)
    if not distinct:
        return None
    if len(distinct) == 1:
        return distinct.pop()
    return "mixed"


def summarize_gpus(gpus: t.List[t.Dict[str, t.Any]]) -> t.Dict[str, t.Any]:
    """Host-wide facts derived from the per-GPU ones."""
    capabilities = sorted({(g["compute_capability"]["major"], g["compute_capability"]["minor"]) for g in gpus})
    targets = sort_targets(g["flashinfer_arch"] for g in gpus)
    known = [target_min_nvcc(target) for target in targets]
    return {
        "gpu_count": len(gpus),
        "capabilities": [capability_str(c) for c in capabilities],
        "sm_names": [sm_name(c) for c in capabilities],
        "arch_families": sorted({g["arch_family"] for g in gpus}),
        "flashinfer_arch_list": " ".join(targets),
        "flashinfer_targets": targets,
        "unknown_targets": [target for target, low in zip(targets, known) if low is None],
        "unsupported_gpus": [g["index"] for g in gpus if not g["flashinfer_supported"]],
        "min_cuda_version": version_str(max((low for low in known if low is not None), default=None)),
        "persistence_mode": common_value(g["persistence_mode"] for g in gpus),
        "mig_mode": common_value(g["mig_mode"] for g in gpus),
        "mig_enabled": any(g["mig_mode"] == "Enabled" for g in gpus),
    }


# --- toolkits -----------------------------------------------------------------

def toolkit_candidates(root: str, extra: t.Iterable[str]) -> t.List[str]:
    """Paths named like a toolkit under root (cuda-12.8, cuda-13), then the extra ones."""
    found = []
    if os.path.isdir(root):
        for entry in sorted(os.listdir(root)):
            path = os.path.join(root, entry)
            if _TOOLKIT_DIR_RE.match(entry) and os.path.isdir(path):
                found.append(path)
    return found + [path for path in extra if path not in found]


def link_chain(path: str, limit: int = 40) -> t.List[str]:
    """Each hop of a symlink chain: /usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-12.8."""
    chain = [path]
    current = path
    while os.path.islink(current) and len(chain) <= limit:
        target = os.readlink(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
        chain.append(current)
    return chain


def builds_targets(release: t.Optional[t.Tuple[int, int]], targets: t.Iterable[str]) -> t.Tuple[t.List[str], t.List[str]]:
    """Split targets into (can build, cannot build) for an nvcc release.

    A target whose minimum is not known is in neither list: the host verdict
    reports it as unknown instead of guessing.
    """
    can: t.List[str] = []
    cannot: t.List[str] = []
    for target in targets:
        low = target_min_nvcc(target)
        if low is None:
            continue
        if release is not None and tuple(release) >= low:
            can.append(target)
        else:
            cannot.append(target)
    return can, cannot


def describe_toolkit(
    path: str,
    *,
    aliases: t.List[str],
    nvcc: t.Optional[str],
    nvcc_output: t.Optional[str],
    version_json: t.Optional[str],
    targets: t.List[str],
) -> t.Dict[str, t.Any]:
    """One installed toolkit: its version (nvcc first, as FlashInfer reads it) and what it can build."""
    version = None
    source = None
    problems = []
    if nvcc_output is not None:
        version = parse_nvcc_version(nvcc_output)
        if version:
            source = "nvcc"
        else:
            problems.append("`%s --version` did not report a release" % nvcc)
    if version is None and version_json is not None:
        version = parse_version_json(version_json)
        if version:
            source = "version.json"
            problems.append("no working bin/nvcc: FlashInfer cannot compile with this toolkit")
    if version is None and nvcc_output is None and version_json is None:
        problems.append("neither bin/nvcc nor version.json found")
    release = version["release"] if version else None
    can, cannot = builds_targets(release if source == "nvcc" else None, targets)
    return {
        "path": path,
        "aliases": aliases,
        "nvcc": nvcc,
        "version": version_str(release),
        "version_full": version["full"] if version else None,
        "version_source": source,
        "buildable_targets": can,
        "missing_targets": cannot,
        "serves_gpus": bool(targets) and not cannot and source == "nvcc",
        "problems": problems,
    }


def host_verdict(facts: t.Dict[str, t.Any]) -> t.Tuple[str, str]:
    """(verdict, one-line explanation) for the fleet table and for plays to branch on."""
    status = facts["nvidia_smi_status"]
    if status in ("not_found", "no_devices"):
        return "no_gpu", "no NVIDIA GPU (%s)" % ("nvidia-smi not found" if status == "not_found" else "no devices")
    if status != "ok":
        return "driver_error", "nvidia-smi %s: %s" % (status, facts.get("nvidia_smi_error") or "")
    if facts["unsupported_gpus"]:
        return "unsupported_gpu", "GPU(s) %s below SM 7.5: FlashInfer cannot serve them" % (
            ", ".join(str(i) for i in facts["unsupported_gpus"]))
    if facts["unknown_targets"]:
        return "unknown_gpu", (
            "no known minimum nvcc for FlashInfer target(s) %s: check FlashInfer's support and set the arch list explicitly"
            % " ".join(facts["unknown_targets"]))
    need = facts["min_cuda_version"]
    serving = [tk for tk in facts["toolkits"] if tk["serves_gpus"]]
    default = facts["default_toolkit"]
    default_note = ""
    if default["version"] and not default["serves_gpus"]:
        default_note = "; %s -> %s (%s) cannot: pin CUDA_HOME" % (
            default["link"], default["resolves_to"], default["version"])
    if not serving:
        have = ", ".join("%s (%s)" % (tk["path"], tk["version"] or "unknown") for tk in facts["toolkits"]) or "none"
        return "needs_toolkit", "%s needs nvcc >= %s for %s; installed: %s" % (
            facts["gpu_summary"], need, facts["flashinfer_arch_list"], have)
    return "ready", "%s (%s) builds %s%s" % (
        serving[-1]["path"], serving[-1]["version"], facts["flashinfer_arch_list"], default_note)


def gpu_summary(gpus: t.List[t.Dict[str, t.Any]]) -> str:
    """'8x NVIDIA B300 SXM6 AC' or '2x NVIDIA H100 + 2x NVIDIA RTX PRO 6000 ...'."""
    counts: t.Dict[str, int] = {}
    for gpu in gpus:
        counts[gpu["name"]] = counts.get(gpu["name"], 0) + 1
    return " + ".join("%dx %s" % (count, name) for name, count in counts.items()) or "no GPU"

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/gpu.py against real H200 captures and the canned output of the lab GPU profiles."""

from __future__ import annotations

import json
import os
import typing as t

import pytest
from ansible_collections.inferops.blackwell.plugins.module_utils import gpu

QUERY = "nvidia-smi --query-gpu=... --format=csv,nounits"


def parse_profile(canned: t.Callable[..., t.Any], profile: str) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.Dict[str, t.Any]]:
    query = canned(profile, "query")
    assert query.rc == 0
    gpus = gpu.parse_query_gpu(query.out, QUERY)
    return gpus, gpu.summarize_gpus(gpus)


# --- the real H200 --------------------------------------------------------------------------------

def test_real_h200_query_gives_every_field(real_h200: t.Dict[str, str]) -> None:
    gpus = gpu.parse_query_gpu(real_h200["query"], QUERY)
    assert gpus == [{
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-6ecd4567-d6bf-079a-0073-a3e5ae679589",
        "pci_bus_id": "00000000:00:06.0",
        "memory_total_mib": 143771,
        "compute_capability": {"major": 9, "minor": 0},
        "capability": "9.0",
        "sm": "sm_90",
        "arch_family": "Hopper",
        "flashinfer_arch": "9.0a",
        "flashinfer_supported": True,
        "min_nvcc_version": "12.0",
        "driver_version": "580.159.04",
        "persistence_mode": "Enabled",
        "mig_mode": "Disabled",
    }]


def test_real_h200_host_summary(real_h200: t.Dict[str, str]) -> None:
    summary = gpu.summarize_gpus(gpu.parse_query_gpu(real_h200["query"], QUERY))
    assert summary["gpu_count"] == 1
    assert summary["capabilities"] == ["9.0"]
    assert summary["flashinfer_arch_list"] == "9.0a"
    assert summary["min_cuda_version"] == "12.0"
    assert summary["persistence_mode"] == "Enabled"
    assert summary["mig_mode"] == "Disabled"
    assert summary["mig_enabled"] is False


def test_real_h200_banner_gives_driver_and_cuda(real_h200: t.Dict[str, str]) -> None:
    assert gpu.parse_banner(real_h200["banner"]) == {"driver_version": "580.159.04", "driver_cuda_version": "13.0"}


def test_real_h200_topology_of_one_gpu_has_no_links(real_h200: t.Dict[str, str]) -> None:
    assert gpu.parse_topology(real_h200["topo"], "nvidia-smi topo -m", 1) == {"interconnect": "none", "links": {}}


def test_real_two_gpu_h200_host_is_nvlink(real_host: t.Callable[..., t.Any]) -> None:
    gpus = gpu.parse_query_gpu(real_host("real-h200-x2", "query").out, QUERY)
    assert [(g["index"], g["pci_bus_id"]) for g in gpus] == [(0, "00000000:00:06.0"), (1, "00000000:00:07.0")]
    topology = gpu.parse_topology(real_host("real-h200-x2", "topo").out, "nvidia-smi topo -m", len(gpus))
    assert topology == {"interconnect": "NVLink", "links": {"0-1": "NV18"}}


def test_query_without_header_is_refused_naming_command_and_line(real_h200: t.Dict[str, str]) -> None:
    with pytest.raises(gpu.NvidiaSmiParseError) as caught:
        gpu.parse_query_gpu(real_h200["query_noheader"], QUERY)
    assert caught.value.line_number == 1
    assert caught.value.command == QUERY
    assert "missing" in str(caught.value) and "persistence_mode" in str(caught.value)
    assert "line 1" in str(caught.value)


def test_real_nvcc_13_0_version(fixture_text: t.Callable[..., str]) -> None:
    version = gpu.parse_nvcc_version(fixture_text("real-h200", "nvcc-13.0-version.txt"))
    assert version == {"release": (13, 0), "full": "13.0.88"}


# --- the lab GPU profiles (canned simulator output) ------------------------------------------------

PROFILES = {
    # profile: (count, capabilities, family, arch list, min nvcc, interconnect, memory of GPU 0)
    "rtx-pro-6000-x8": (8, ["12.0"], ["Blackwell"], "12.0f", "12.9", "PCIe", 97887),
    "b200-x8": (8, ["10.0"], ["Blackwell"], "10.0a", "12.8", "NVLink", 183359),
    "b300-x8": (8, ["10.3"], ["Blackwell"], "10.3a", "12.9", "NVLink", 275040),
    "gb10-x1": (1, ["12.1"], ["Blackwell"], "12.1a", "12.9", "none", None),
    "mixed-h100-pro6000": (4, ["9.0", "12.0"], ["Blackwell", "Hopper"], "9.0a 12.0f", "12.9", "PCIe", 81559),
    "h200-x1": (1, ["9.0"], ["Hopper"], "9.0a", "12.0", "none", 143771),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_facts(canned: t.Callable[..., t.Any], profile: str) -> None:
    count, capabilities, families, arch_list, min_nvcc, interconnect, memory = PROFILES[profile]
    gpus, summary = parse_profile(canned, profile)
    assert summary["gpu_count"] == count
    assert [g["index"] for g in gpus] == list(range(count))
    assert summary["capabilities"] == capabilities
    assert summary["arch_families"] == families
    assert summary["flashinfer_arch_list"] == arch_list
    assert summary["min_cuda_version"] == min_nvcc
    assert gpus[0]["memory_total_mib"] == memory
    assert len({g["uuid"] for g in gpus}) == count
    assert len({g["pci_bus_id"] for g in gpus}) == count
    topo = gpu.parse_topology(canned(profile, "topo").out, "nvidia-smi topo -m", count)
    assert topo["interconnect"] == interconnect
    assert len(topo["links"]) == count * (count - 1) // 2


def test_rtx_pro_6000_is_sm120_blackwell_needing_cuda_12_9(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "rtx-pro-6000-x8")
    first = gpus[0]
    assert first["compute_capability"] == {"major": 12, "minor": 0}
    assert first["sm"] == "sm_120"
    assert first["arch_family"] == "Blackwell"
    assert first["flashinfer_arch"] == "12.0f"
    assert first["min_nvcc_version"] == "12.9"
    assert first["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert summary["sm_names"] == ["sm_120"]


def test_pcie_links_follow_switch_and_numa(canned: t.Callable[..., t.Any]) -> None:
    links = gpu.parse_topology(canned("rtx-pro-6000-x8", "topo").out, "topo", 8)["links"]
    assert links["0-1"] == "PIX"
    assert links["0-2"] == "NODE"
    assert links["0-4"] == "SYS"
    assert "1-0" not in links


def test_nvlink_links_are_nv18(canned: t.Callable[..., t.Any]) -> None:
    links = gpu.parse_topology(canned("b300-x8", "topo").out, "topo", 8)["links"]
    assert set(links.values()) == {"NV18"}


def test_gb10_unified_memory_and_no_mig_are_none(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "gb10-x1")
    assert gpus[0]["memory_total_mib"] is None
    assert gpus[0]["mig_mode"] is None
    assert gpus[0]["flashinfer_arch"] == "12.1a"
    assert summary["mig_mode"] is None
    assert summary["mig_enabled"] is False


def test_mixed_host_lists_each_target_once_lowest_first(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "mixed-h100-pro6000")
    assert [g["flashinfer_arch"] for g in gpus] == ["9.0a", "9.0a", "12.0f", "12.0f"]
    assert summary["flashinfer_targets"] == ["9.0a", "12.0f"]
    assert summary["sm_names"] == ["sm_90", "sm_120"]


def test_garbled_output_fails_naming_the_line(canned: t.Callable[..., t.Any]) -> None:
    out = canned("garbled", "query").out
    with pytest.raises(gpu.NvidiaSmiParseError) as caught:
        gpu.parse_query_gpu(out, QUERY)
    assert caught.value.line_number == 1
    assert "Unable to determine the device handle" in caught.value.line


def test_row_with_missing_fields_fails_naming_its_line(real_h200: t.Dict[str, str]) -> None:
    text = real_h200["query"] + "\n1, NVIDIA H200, GPU-x\n"
    with pytest.raises(gpu.NvidiaSmiParseError) as caught:
        gpu.parse_query_gpu(text, QUERY)
    assert caught.value.line_number == 3
    assert "found 3" in caught.value.reason


@pytest.mark.parametrize("bad, field", [("twelve", "compute_cap"), ("12", "compute_cap"), ("lots", "memory.total")])
def test_bad_values_fail_naming_the_field(bad: str, field: str) -> None:
    row = {"index": "0", "name": "G", "uuid": "GPU-1", "pci.bus_id": "0:0", "memory.total": "1024",
           "compute_cap": "12.0", "driver_version": "580", "persistence_mode": "Enabled", "mig.mode.current": "Disabled"}
    row[field] = bad
    text = ", ".join(gpu.QUERY_FIELDS) + "\n" + ", ".join(row[f] for f in gpu.QUERY_FIELDS) + "\n"
    with pytest.raises(gpu.NvidiaSmiParseError) as caught:
        gpu.parse_query_gpu(text, QUERY)
    assert field in caught.value.reason
    assert caught.value.line_number == 2


def test_warning_lines_are_skipped_and_kept(real_h200: t.Dict[str, str]) -> None:
    warning = "WARNING: infoROM is corrupted at gpu 0000:00:06.0"
    text = warning + "\n" + real_h200["query"]
    assert len(gpu.parse_query_gpu(text, QUERY)) == 1
    assert gpu.split_warnings(text)[0] == [warning]


def test_topology_with_unknown_link_fails_naming_the_row(canned: t.Callable[..., t.Any]) -> None:
    text = canned("b300-x8", "topo").out.replace("GPU3\tNV18", "GPU3\tWHAT", 1)
    with pytest.raises(gpu.NvidiaSmiParseError) as caught:
        gpu.parse_topology(text, "nvidia-smi topo -m", 8)
    assert caught.value.line.startswith("GPU3")
    assert "WHAT" in caught.value.reason


def test_topology_disagreeing_with_gpu_count_fails(canned: t.Callable[..., t.Any]) -> None:
    with pytest.raises(gpu.NvidiaSmiParseError, match="topology lists 8 GPUs, --query-gpu listed 4"):
        gpu.parse_topology(canned("b300-x8", "topo").out, "nvidia-smi topo -m", 4)


def test_topology_with_nics_and_mixed_links() -> None:
    text = ("\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tNV4\tPIX\tSYS\t0-31\t0\t\tN/A\n"
            "GPU1\tNV4\t X \tNODE\tSYS\t0-31\t0\t\tN/A\n"
            "GPU2\tPIX\tNODE\t X \tSYS\t0-31\t0\t\tN/A\n"
            "NIC0\tSYS\tSYS\tSYS\t X \n\nLegend:\n")
    assert gpu.parse_topology(text, "topo", 3) == {
        "interconnect": "mixed", "links": {"0-1": "NV4", "0-2": "PIX", "1-2": "NODE"}}


# --- capabilities, targets and toolkit versions -----------------------------------------------

def test_capabilities_are_integers_so_10_0_and_12_0_never_collapse() -> None:
    assert gpu.parse_capability("10.0") == (10, 0)
    assert gpu.parse_capability("12.0") == (12, 0)
    assert gpu.parse_capability("12.10") == (12, 10)
    assert gpu.sm_name((12, 0)) != gpu.sm_name((10, 0))
    with pytest.raises(ValueError):
        gpu.parse_capability("12")


@pytest.mark.parametrize("capability, target, family", [
    ((7, 5), "7.5", "Turing"),
    ((8, 0), "8.0", "Ampere"),
    ((8, 6), "8.6", "Ampere"),
    ((8, 9), "8.9", "Ada Lovelace"),
    ((9, 0), "9.0a", "Hopper"),
    ((10, 0), "10.0a", "Blackwell"),
    ((10, 3), "10.3a", "Blackwell"),
    ((11, 0), "11.0a", "Blackwell"),
    ((12, 0), "12.0f", "Blackwell"),
    ((12, 1), "12.1a", "Blackwell"),
])
def test_flashinfer_target_and_family(capability: t.Tuple[int, int], target: str, family: str) -> None:
    assert gpu.flashinfer_target(capability) == target
    assert gpu.arch_family(capability) == family


@pytest.mark.parametrize("target, minimum", [
    ("9.0a", (12, 0)), ("10.0a", (12, 8)), ("10.3a", (12, 9)), ("12.0f", (12, 9)), ("12.1a", (12, 9)),
    ("12.0a", (12, 9)),  # nvcc 12.8 could build 12.0a, but FlashInfer refuses SM 12.x below 12.9
])
def test_min_nvcc_per_target(target: str, minimum: t.Tuple[int, int]) -> None:
    assert gpu.target_min_nvcc(target) == minimum


def test_sm120_cannot_be_built_by_12_8_but_by_12_9_and_13_0() -> None:
    assert gpu.builds_targets((12, 8), ["12.0f"]) == ([], ["12.0f"])
    assert gpu.builds_targets((12, 9), ["12.0f"]) == (["12.0f"], [])
    assert gpu.builds_targets((13, 0), ["12.0f"]) == (["12.0f"], [])


def test_b200_builds_with_12_8_and_b300_does_not() -> None:
    assert gpu.builds_targets((12, 8), ["10.0a", "10.3a"]) == (["10.0a"], ["10.3a"])


def test_unknown_newer_sm_is_reported_not_rejected() -> None:
    fields: t.Dict[str, t.Optional[str]] = {
        "index": "0", "name": "NVIDIA Future", "uuid": "GPU-f", "pci.bus_id": "0:0", "memory.total": "1",
        "driver_version": "999.1", "persistence_mode": "Enabled", "mig.mode.current": "Disabled"}
    described = gpu.describe_gpu(fields, (13, 0))
    assert described["sm"] == "sm_130"
    assert described["flashinfer_arch"] == "13.0a"
    assert described["arch_family"].startswith("Unknown")
    assert described["min_nvcc_version"] is None
    summary = gpu.summarize_gpus([described])
    assert summary["unknown_targets"] == ["13.0a"]
    assert summary["min_cuda_version"] is None
    assert gpu.builds_targets((13, 0), ["13.0a"]) == ([], [])


def test_below_sm75_is_marked_unsupported_by_flashinfer() -> None:
    fields: t.Dict[str, t.Optional[str]] = {
        "index": "0", "name": "Tesla V100", "uuid": "GPU-v", "pci.bus_id": "0:0", "memory.total": "16384",
        "driver_version": "580", "persistence_mode": "Enabled", "mig.mode.current": None}
    described = gpu.describe_gpu(fields, (7, 0))
    assert described["flashinfer_supported"] is False
    assert gpu.summarize_gpus([described])["unsupported_gpus"] == [0]


def test_version_json_is_read_when_present() -> None:
    assert gpu.parse_version_json(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.8.1"}})) == {
        "release": (12, 8), "full": "12.8.1"}
    assert gpu.parse_version_json("{not json") is None
    assert gpu.parse_version_json(json.dumps({"cuda": {}})) is None


def test_toolkit_from_nvcc_serves_or_not() -> None:
    old = gpu.describe_toolkit("/usr/local/cuda-12.8", aliases=[], nvcc="/usr/local/cuda-12.8/bin/nvcc",
                               nvcc_output="Cuda compilation tools, release 12.8, V12.8.93", version_json=None, targets=["12.0f"])
    assert old["version"] == "12.8" and old["version_full"] == "12.8.93" and old["version_source"] == "nvcc"
    assert old["missing_targets"] == ["12.0f"] and old["serves_gpus"] is False
    new = gpu.describe_toolkit("/usr/local/cuda-13.0", aliases=[], nvcc="/usr/local/cuda-13.0/bin/nvcc",
                               nvcc_output="Cuda compilation tools, release 13.0, V13.0.88", version_json=None, targets=["12.0f"])
    assert new["buildable_targets"] == ["12.0f"] and new["serves_gpus"] is True


def test_toolkit_without_nvcc_cannot_serve_even_with_version_json() -> None:
    toolkit = gpu.describe_toolkit("/opt/cuda", aliases=[], nvcc=None, nvcc_output=None,
                                   version_json='{"cuda": {"version": "13.0.2"}}', targets=["9.0a"])
    assert toolkit["version"] == "13.0"
    assert toolkit["version_source"] == "version.json"
    assert toolkit["serves_gpus"] is False
    assert toolkit["missing_targets"] == ["9.0a"]
    assert "no working bin/nvcc" in toolkit["problems"][0]


def test_toolkit_with_broken_nvcc_says_so() -> None:
    toolkit = gpu.describe_toolkit("/opt/cuda", aliases=[], nvcc="/opt/cuda/bin/nvcc",
                                   nvcc_output="error while loading shared libraries", version_json=None, targets=[])
    assert toolkit["version"] is None
    assert "did not report a release" in toolkit["problems"][0]


# --- the file system: toolkit directories and the alternatives chain ----------------------------

def test_alternatives_chain_and_toolkit_candidates(tmp_path: t.Any) -> None:
    local = tmp_path / "usr-local"
    alternatives = tmp_path / "alternatives"
    for version in ("12.8", "13.0"):
        (local / ("cuda-" + version) / "bin").mkdir(parents=True)
    alternatives.mkdir()
    (alternatives / "cuda").symlink_to(local / "cuda-12.8")
    (alternatives / "cuda-13").symlink_to(local / "cuda-13.0")
    (local / "cuda").symlink_to(alternatives / "cuda")
    (local / "cuda-13").symlink_to(alternatives / "cuda-13")
    (local / "cuda-samples").mkdir()
    (local / "cudnn").mkdir()

    chain = gpu.link_chain(str(local / "cuda"))
    assert chain == [str(local / "cuda"), str(alternatives / "cuda"), str(local / "cuda-12.8")]
    found = gpu.toolkit_candidates(str(local), [str(tmp_path / "opt-cuda")])
    assert found == [str(local / "cuda-12.8"), str(local / "cuda-13"), str(local / "cuda-13.0"), str(tmp_path / "opt-cuda")]
    assert os.path.realpath(found[1]) == str(local / "cuda-13.0")


def test_real_alternatives_capture_matches_what_link_chain_models(fixture_text: t.Callable[..., str]) -> None:
    text = fixture_text("real-h200", "alternatives-cuda.txt")
    assert "link cuda is /usr/local/cuda" in text
    assert "link currently points to /usr/local/cuda-13.0" in text
    assert "/usr/local/cuda-13.0 - priority 130" in text
    assert "version.json" not in text  # NVIDIA's apt install: read the version from nvcc


# --- the verdict ----------------------------------------------------------------------------------

def verdict_facts(gpus: t.List[t.Dict[str, t.Any]], toolkits: t.List[t.Dict[str, t.Any]], default: str) -> t.Dict[str, t.Any]:
    facts: t.Dict[str, t.Any] = {"nvidia_smi_status": "ok", "nvidia_smi_error": None, "gpus": gpus}
    facts.update(gpu.summarize_gpus(gpus))
    facts["toolkits"] = toolkits
    by_path = {tk["path"]: tk for tk in toolkits}
    facts["default_toolkit"] = {"link": "/usr/local/cuda", "resolves_to": default,
                                "version": by_path[default]["version"], "serves_gpus": by_path[default]["serves_gpus"]}
    facts["gpu_summary"] = gpu.gpu_summary(gpus)
    return facts


def toolkit(version: str, targets: t.List[str]) -> t.Dict[str, t.Any]:
    return gpu.describe_toolkit("/usr/local/cuda-" + version, aliases=[], nvcc="nvcc", version_json=None, targets=targets,
                                nvcc_output="Cuda compilation tools, release %s, V%s.0" % (version, version))


def test_verdict_incident_state_needs_toolkit(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "rtx-pro-6000-x8")
    facts = verdict_facts(gpus, [toolkit("12.8", summary["flashinfer_targets"])], "/usr/local/cuda-12.8")
    verdict, message = gpu.host_verdict(facts)
    assert verdict == "needs_toolkit"
    assert "needs nvcc >= 12.9 for 12.0f" in message
    assert "/usr/local/cuda-12.8 (12.8)" in message
    assert message.startswith("8x NVIDIA RTX PRO 6000 Blackwell Server Edition")


def test_verdict_ready_but_default_link_still_12_8(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "b300-x8")
    targets = summary["flashinfer_targets"]
    facts = verdict_facts(gpus, [toolkit("12.8", targets), toolkit("13.0", targets)], "/usr/local/cuda-12.8")
    verdict, message = gpu.host_verdict(facts)
    assert verdict == "ready"
    assert message.startswith("/usr/local/cuda-13.0 (13.0) builds 10.3a")
    assert "/usr/local/cuda -> /usr/local/cuda-12.8 (12.8) cannot: pin CUDA_HOME" in message


def test_verdict_b200_is_served_by_12_8(canned: t.Callable[..., t.Any]) -> None:
    gpus, summary = parse_profile(canned, "b200-x8")
    facts = verdict_facts(gpus, [toolkit("12.8", summary["flashinfer_targets"])], "/usr/local/cuda-12.8")
    assert gpu.host_verdict(facts)[0] == "ready"


@pytest.mark.parametrize("status, verdict", [("not_found", "no_gpu"), ("no_devices", "no_gpu"),
                                             ("failed", "driver_error"), ("timeout", "driver_error")])
def test_verdict_without_usable_nvidia_smi(status: str, verdict: str) -> None:
    facts = {"nvidia_smi_status": status, "nvidia_smi_error": "exit 9: driver"}
    assert gpu.host_verdict(facts)[0] == verdict

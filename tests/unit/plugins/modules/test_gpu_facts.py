# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_facts module end to end, with nvidia-smi answered from canned output.

run_command is replaced for nvidia-smi only; the toolkits are real directories
with small nvcc scripts, so version detection and the alternatives chain run
for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import typing as t

import pytest
from ansible.module_utils import basic
from ansible_collections.inferops.blackwell.plugins.modules import gpu_facts
from module_runner import run_module

NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {release}, V{full}"
"""


class Node:
    """A fake node: a bin dir with nvidia-smi, toolkits under a root, /usr/local/cuda through alternatives."""

    def __init__(self, tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp_path
        self.monkeypatch = monkeypatch
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.root = tmp_path / "usr-local"
        self.root.mkdir()
        self.alternatives = tmp_path / "etc" / "alternatives"
        self.alternatives.mkdir(parents=True)
        self.answers: t.Dict[t.Tuple[str, ...], t.Tuple[int, str, str]] = {}
        self.smi_calls: t.List[t.List[str]] = []
        monkeypatch.setenv("PATH", str(self.bin))

    def add_nvidia_smi(self) -> str:
        path = self.bin / "nvidia-smi"
        path.write_text("#!/bin/sh\nexit 99\n")  # never run: run_command is replaced for it
        path.chmod(0o755)
        return str(path)

    def answer_profile(self, canned: t.Callable[..., t.Any], profile: str) -> None:
        for call, args in (("query", tuple(gpu_facts.gpu.query_gpu_args())), ("banner", ()), ("topo", ("topo", "-m"))):
            output = canned(profile, call)
            self.answers[args] = (output.rc, output.out, "")

    def add_toolkit(self, release: str, full: str, alias: t.Optional[str] = None) -> str:
        path = self.root / ("cuda-" + release)
        (path / "bin").mkdir(parents=True)
        nvcc = path / "bin" / "nvcc"
        nvcc.write_text(NVCC.format(release=release, full=full))
        nvcc.chmod(0o755)
        if alias:
            (self.alternatives / alias).symlink_to(path)
            (self.root / alias).symlink_to(self.alternatives / alias)
        return str(path)

    def set_default(self, release: str) -> None:
        (self.alternatives / "cuda").symlink_to(self.root / ("cuda-" + release))
        (self.root / "cuda").symlink_to(self.alternatives / "cuda")

    def run(self, capsys: pytest.CaptureFixture[str], check_mode: bool = False, **args: t.Any) -> t.Dict[str, t.Any]:
        node = self

        def fake_run_command(module: basic.AnsibleModule, command: t.List[str], **kwargs: t.Any) -> t.Tuple[int, str, str]:
            if os.path.basename(command[0]) == "timeout":
                command = command[2:]
            if os.path.basename(command[0]) == "nvidia-smi":
                node.smi_calls.append(command)
                return node.answers.get(tuple(command[1:]), (2, "", "unexpected arguments %s" % command[1:]))
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            return done.returncode, done.stdout, done.stderr

        self.monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
        params = {"toolkit_root": str(self.root), "default_toolkit_link": str(self.root / "cuda")}
        params.update(args)
        return run_module(gpu_facts.main, capsys, params, check_mode)


@pytest.fixture
def node(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def test_incident_node_rtx_pro_6000_with_only_12_8(node: Node, canned: t.Callable[..., t.Any],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "rtx-pro-6000-x8")
    node.add_toolkit("12.8", "12.8.93")
    node.set_default("12.8")
    result = node.run(capsys)
    assert result["changed"] is False
    facts = result["ansible_facts"]["inferops_gpu"]
    assert facts["nvidia_smi_status"] == "ok"
    assert facts["gpu_count"] == 8
    assert facts["gpus"][7]["sm"] == "sm_120"
    assert facts["gpus"][7]["arch_family"] == "Blackwell"
    assert facts["flashinfer_arch_list"] == "12.0f"
    assert facts["min_cuda_version"] == "12.9"
    assert facts["driver_version"] == "580.95.05"
    assert facts["driver_cuda_version"] == "13.0"
    assert facts["interconnect"] == "PCIe"
    assert facts["persistence_mode"] == "Enabled"
    assert facts["mig_mode"] == "Disabled"
    assert [tk["version"] for tk in facts["toolkits"]] == ["12.8"]
    assert facts["toolkits"][0]["missing_targets"] == ["12.0f"]
    assert facts["default_toolkit"]["via_alternatives"] is True
    assert facts["default_toolkit"]["resolves_to"] == str(node.root / "cuda-12.8")
    assert facts["default_toolkit"]["serves_gpus"] is False
    assert facts["serving_toolkits"] == []
    assert facts["verdict"] == "needs_toolkit"
    assert "needs nvcc >= 12.9" in facts["verdict_message"]


def test_b300_node_with_13_0_beside_12_8(node: Node, canned: t.Callable[..., t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "b300-x8")
    node.add_toolkit("12.8", "12.8.93")
    new = node.add_toolkit("13.0", "13.0.88", alias="cuda-13")
    node.set_default("12.8")
    facts = node.run(capsys)["ansible_facts"]["inferops_gpu"]
    assert facts["interconnect"] == "NVLink"
    assert facts["links"]["0-7"] == "NV18"
    assert facts["flashinfer_arch_list"] == "10.3a"
    assert [tk["path"] for tk in facts["toolkits"]] == [str(node.root / "cuda-12.8"), new]
    assert facts["toolkits"][1]["aliases"] == [str(node.root / "cuda-13")]
    assert facts["toolkits"][1]["version_full"] == "13.0.88"
    assert facts["serving_toolkits"] == [new]
    assert facts["default_toolkit"]["version"] == "12.8"
    assert facts["verdict"] == "ready"
    assert "pin CUDA_HOME" in facts["verdict_message"]


def test_check_mode_gathers_the_same_facts(node: Node, canned: t.Callable[..., t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "gb10-x1")
    node.add_toolkit("13.0", "13.0.88")
    node.set_default("13.0")
    normal = node.run(capsys)["ansible_facts"]
    checked = node.run(capsys, check_mode=True)["ansible_facts"]
    assert checked == normal
    assert checked["inferops_gpu"]["flashinfer_arch_list"] == "12.1a"
    assert checked["inferops_gpu"]["interconnect"] == "none"


def test_no_nvidia_smi_is_zero_gpus_not_a_failure(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    result = node.run(capsys)
    assert "failed" not in result
    facts = result["ansible_facts"]["inferops_gpu"]
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi"] is None
    assert facts["nvidia_smi_status"] == "not_found"
    assert facts["verdict"] == "no_gpu"
    assert facts["default_toolkit"]["exists"] is False
    assert node.smi_calls == []


def test_driver_without_gpus_is_zero_gpus(node: Node, canned: t.Callable[..., t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "none")
    facts = node.run(capsys)["ansible_facts"]["inferops_gpu"]
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi_status"] == "no_devices"
    assert facts["verdict"] == "no_gpu"


def test_driver_not_loaded_is_a_fact_with_its_message(node: Node, canned: t.Callable[..., t.Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "driver-error")
    result = node.run(capsys)
    assert "failed" not in result
    facts = result["ansible_facts"]["inferops_gpu"]
    assert facts["nvidia_smi_status"] == "failed"
    assert facts["nvidia_smi_error"].startswith("exit 9: NVIDIA-SMI has failed because it couldn't communicate")
    assert facts["gpu_count"] == 0
    assert facts["verdict"] == "driver_error"


def test_hung_nvidia_smi_is_reported_as_timeout(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answers[tuple(gpu_facts.gpu.query_gpu_args())] = (124, "", "")
    facts = node.run(capsys, timeout=7)["ansible_facts"]["inferops_gpu"]
    assert facts["nvidia_smi_status"] == "timeout"
    assert "7 s" in facts["nvidia_smi_error"]
    assert facts["verdict"] == "driver_error"


def test_garbled_output_fails_naming_command_and_line(node: Node, canned: t.Callable[..., t.Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "garbled")
    result = node.run(capsys)
    assert result["failed"] is True
    assert "nvidia-smi --query-gpu=index,name" in result["msg"]
    assert "line 1" in result["msg"]
    assert result["line_number"] == 1


def test_failed_topology_is_a_warning_not_a_failure(node: Node, canned: t.Callable[..., t.Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "b200-x8")
    node.answers[("topo", "-m")] = (3, "", "topology not supported")
    shown: t.List[str] = []
    node.monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning: shown.append(warning))
    result = node.run(capsys)
    facts = result["ansible_facts"]["inferops_gpu"]
    assert facts["gpu_count"] == 8
    assert facts["interconnect"] == "unknown"
    assert any("topo -m" in warning for warning in facts["warnings"])
    assert shown == ["`nvidia-smi topo -m` failed: exit 3: topology not supported"]


def test_an_r610_driver_banner_gives_its_cuda_version(node: Node, canned: t.Callable[..., t.Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # a real B200's banner under driver 610 ("KMD Version", "CUDA UMD Version"): tests/unit/fixtures/nvidia-smi/public
    node.add_nvidia_smi()
    node.answer_profile(canned, "b200-x8")
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia-smi", "public", "b200-r610.banner.txt")) as handle:
        node.answers[()] = (0, handle.read(), "")
    facts = node.run(capsys)["ansible_facts"]["inferops_gpu"]
    assert facts["driver_cuda_version"] == "13.3"
    assert not [warning for warning in facts["warnings"] if "banner" in warning]


def test_a_banner_without_a_cuda_version_is_a_warning(node: Node, canned: t.Callable[..., t.Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "b200-x8")
    node.answers[()] = (0, "| NVIDIA-SMI 999.1   Kernel Driver: 999.1   CUDA Runtime: 14.0 |\n", "")
    facts = node.run(capsys)["ansible_facts"]["inferops_gpu"]
    assert facts["driver_cuda_version"] is None
    assert [warning for warning in facts["warnings"] if "names no CUDA version" in warning and "999.1" in warning]


def test_explicit_nvidia_smi_that_does_not_exist_names_the_option(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    result = node.run(capsys, nvidia_smi=str(node.tmp / "nope" / "nvidia-smi"))
    assert result["failed"] is True
    assert result["msg"].startswith("nvidia_smi=")
    assert "leave nvidia_smi unset" in result["msg"]


def test_negative_timeout_names_the_option(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    result = node.run(capsys, timeout=-1)
    assert result["failed"] is True
    assert result["msg"].startswith("timeout=-1")


def test_extra_toolkit_path_and_version_json_only_toolkit(node: Node, canned: t.Callable[..., t.Any],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    node.add_nvidia_smi()
    node.answer_profile(canned, "h200-x1")
    extra = node.tmp / "opt-cuda"
    extra.mkdir()
    (extra / "version.json").write_text(json.dumps({"cuda": {"version": "12.4.1"}}))
    facts = node.run(capsys, toolkit_paths=[str(extra)])["ansible_facts"]["inferops_gpu"]
    assert facts["toolkits"][0]["path"] == str(extra)
    assert facts["toolkits"][0]["version"] == "12.4"
    assert facts["toolkits"][0]["version_source"] == "version.json"
    assert facts["toolkits"][0]["serves_gpus"] is False
    assert facts["verdict"] == "needs_toolkit"


def test_real_two_gpu_h200_host_end_to_end(node: Node, real_host: t.Callable[..., t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The three calls answered with what a lent 2x H200 host printed (fixtures/real-h200-x2)."""
    node.add_nvidia_smi()
    node.answer_profile(real_host, "real-h200-x2")
    node.add_toolkit("13.0", "13.0.88", alias="cuda-13")
    node.set_default("13.0")
    facts = node.run(capsys)["ansible_facts"]["inferops_gpu"]
    assert [call[1:] for call in node.smi_calls][2] == ["topo", "-m"]
    assert facts["gpu_count"] == 2
    assert [(g["index"], g["uuid"], g["pci_bus_id"], g["memory_total_mib"]) for g in facts["gpus"]] == [
        (0, "GPU-fd969fe7-b3f0-e2ef-e26d-80805aa0bcdd", "00000000:00:06.0", 143771),
        (1, "GPU-6f3da3db-a315-6d4f-c6b9-9624e566a019", "00000000:00:07.0", 143771),
    ]
    assert facts["interconnect"] == "NVLink"
    assert facts["links"] == {"0-1": "NV18"}
    assert facts["driver_cuda_version"] == "13.0"
    assert facts["flashinfer_arch_list"] == "9.0a"
    assert facts["verdict"] == "ready"

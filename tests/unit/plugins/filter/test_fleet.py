# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report filters used by playbooks/facts.yml."""

from __future__ import annotations

import typing as t

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.filter import fleet


def facts(verdict: str, toolkits: t.List[t.Tuple[str, str]], default: t.Optional[str]) -> t.Dict[str, t.Any]:
    return {
        "gpu_summary": "8x NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "capabilities": ["12.0"],
        "interconnect": "PCIe",
        "flashinfer_arch_list": "12.0f",
        "toolkits": [{"path": path, "version": version} for path, version in toolkits],
        "default_toolkit": {"resolves_to": default},
        "verdict": verdict,
        "verdict_message": "message for " + verdict,
    }


def test_summary_rows_mark_the_default_toolkit_and_count_verdicts() -> None:
    summary = fleet.fleet_summary({
        "pro-1": facts("needs_toolkit", [("/usr/local/cuda-12.8", "12.8")], "/usr/local/cuda-12.8"),
        "pro-2": facts("ready", [("/usr/local/cuda-12.8", "12.8"), ("/usr/local/cuda-13.0", "13.0")], "/usr/local/cuda-12.8"),
        "cpu-1": None,
    }, ["pro-1", "pro-2", "cpu-1", "down-1"])
    rows = {row["host"]: row for row in summary["hosts"]}
    assert rows["pro-1"]["toolkits"] == "12.8*"
    assert rows["pro-2"]["toolkits"] == "12.8* 13.0"
    assert rows["pro-2"]["sm"] == "12.0"
    assert rows["pro-1"]["interconnect"] == "PCIe"
    assert rows["cpu-1"]["verdict"] == "no_facts"
    assert rows["cpu-1"]["interconnect"] == "-"
    assert rows["down-1"]["verdict"] == "unreachable"
    assert summary["verdict_counts"] == {"needs_toolkit": 1, "ready": 1, "no_facts": 1, "unreachable": 1}


def test_table_has_header_a_row_per_host_totals_and_the_reasons() -> None:
    summary = fleet.fleet_summary({
        "b300-1": facts("ready", [("/usr/local/cuda-13.0", "13.0")], "/usr/local/cuda-13.0"),
        "pro-1": facts("needs_toolkit", [("/usr/local/cuda-12.8", "12.8")], "/usr/local/cuda-12.8"),
    })
    lines = fleet.fleet_table(summary)
    assert lines[0].split() == ["HOST", "GPUS", "SM", "LINK", "FLASHINFER", "ARCH", "TOOLKITS", "(*", "=", "/usr/local/cuda)", "VERDICT"]
    assert lines[1].startswith("b300-1 ")
    assert lines[1].endswith("ready")
    assert "12.0f" in lines[2] and lines[2].endswith("needs_toolkit")
    assert lines[3] == "2 host(s): needs_toolkit 1, ready 1"
    assert lines[4] == "pro-1: message for needs_toolkit"
    assert len(lines) == 5
    # columns line up: every VERDICT starts at the same offset
    offset = lines[0].index("VERDICT")
    assert lines[1][offset:] == "ready" and lines[2][offset:] == "needs_toolkit"


def test_bad_input_is_a_clear_filter_error() -> None:
    with pytest.raises(AnsibleFilterError, match="fleet_summary expects a dict"):
        fleet.fleet_summary(["host"])  # type: ignore[arg-type]
    with pytest.raises(AnsibleFilterError, match="output of fleet_summary"):
        fleet.fleet_table({"rows": []})

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node tool inferops-flashinfer: its environment file reader and its preflight verdicts."""

from __future__ import annotations

import os
import sys
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "roles", "flashinfer", "files"))

import inferops_flashinfer as tool  # noqa: E402 -- roles/flashinfer/files/inferops_flashinfer.py

CONFIG = {"venv": "/opt/sglang/venv", "env_file": "/etc/inferops/cuda.env", "expected_archs": "12.0f", "min_cuda": "12.9",
          "modules": ["sampling"]}
GOOD = {"flashinfer_version": "0.6.18", "archs": ["12.0f"], "cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0",
        "workspace": "/var/lib/sglang/.cache/flashinfer/0.6.18/120f", "warnings": [], "stamp": {"cuda_home": "/usr/local/cuda-13.0"},
        "stamp_matches": True, "modules": [{"name": "sampling", "compiled": True}]}


def test_env_file_is_read_like_systemd(tmp_path: t.Any) -> None:
    path = tmp_path / "cuda.env"
    path.write_text("# managed\nCUDA_HOME='/usr/local/cuda-13.0'\nFLASHINFER_CUDA_ARCH_LIST='9.0a 12.0f'\nPLAIN=x\nQUOTED=\"y z\"\n\n")
    assert tool.read_env_file(str(path)) == {"CUDA_HOME": "/usr/local/cuda-13.0", "FLASHINFER_CUDA_ARCH_LIST": "9.0a 12.0f",
                                             "PLAIN": "x", "QUOTED": "y z"}


def test_a_healthy_node_passes() -> None:
    assert tool.check(CONFIG, GOOD) == []


def test_the_incident_names_the_cause_and_the_fix() -> None:
    view = dict(GOOD, archs=[], cuda_home="/usr/local/cuda", cuda_version="12.8",
                warnings=["Failed to get device capability: SM 12.x requires CUDA >= 12.9."])
    problems = tool.check(CONFIG, view)
    assert any("resolved no target arch" in p and "12.8" in p and "SM 12.x requires CUDA >= 12.9" in p for p in problems)
    assert any("detects CUDA 12.8" in p and ">= 12.9" in p for p in problems)


def test_a_wiped_cache_says_warm() -> None:
    problems = tool.check(CONFIG, dict(GOOD, modules=[{"name": "sampling", "compiled": False}]))
    assert problems and "not in the cache" in problems[0] and "inferops-flashinfer warm" in problems[0]


def test_a_toolkit_changed_since_the_warm_up_says_warm() -> None:
    problems = tool.check(CONFIG, dict(GOOD, stamp_matches=False))
    assert problems and "was warmed with" in problems[0]


def test_wrong_archs_point_at_the_arch_list() -> None:
    problems = tool.check(CONFIG, dict(GOOD, archs=["12.0a"]))
    assert problems and "FLASHINFER_CUDA_ARCH_LIST" in problems[0]


def test_the_inner_program_compiles() -> None:
    compile(tool.INNER, "inner", "exec")
    assert tool.MARKER in tool.INNER and tool.STAMP in tool.INNER

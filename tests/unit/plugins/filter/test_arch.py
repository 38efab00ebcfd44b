# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""flashinfer_arch_check: an arch list read the way FlashInfer reads it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.filter.arch import flashinfer_arch_check


def test_family_target_for_sm120_needs_12_9() -> None:
    result = flashinfer_arch_check("12.0f")
    assert result == {"entries": ["12.0f"], "capabilities": ["12.0"], "min_nvcc_version": "12.9", "unknown": [], "problems": []}


def test_explicit_12_0a_skips_flashinfers_check_and_builds_with_12_8() -> None:
    assert flashinfer_arch_check("12.0a")["min_nvcc_version"] == "12.8"


def test_unsuffixed_12_0_goes_through_flashinfers_check() -> None:
    assert flashinfer_arch_check("12.0")["min_nvcc_version"] == "12.9"


def test_mixed_list_needs_the_highest() -> None:
    result = flashinfer_arch_check("9.0a 12.0f 10.0a")
    assert result["capabilities"] == ["9.0", "10.0", "12.0"]
    assert result["min_nvcc_version"] == "12.9"


@pytest.mark.parametrize("text", ["12.0f,10.3a", "12.0f  10.3a", "12.0f+PTX", "sm_120"])
def test_what_flashinfer_would_misread_is_a_problem(text: str) -> None:
    assert flashinfer_arch_check(text)["problems"]


def test_unknown_newer_target_has_no_minimum() -> None:
    result = flashinfer_arch_check("13.0a")
    assert result["unknown"] == ["13.0a"]
    assert result["min_nvcc_version"] is None


def test_non_string_input_is_a_clear_error() -> None:
    with pytest.raises(AnsibleFilterError, match="expects a string"):
        flashinfer_arch_check(["12.0f"])  # type: ignore[arg-type]

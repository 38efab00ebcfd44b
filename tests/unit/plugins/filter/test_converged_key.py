# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""converged_key: one digest per setting, grouped by role, and each role's code; converged_line."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.filter import converged


def test_settings_are_grouped_by_their_role() -> None:
    key = converged.converged_key({"cuda_env_extra_vars": {"A": "1"}, "inferops_env_file": "/etc/x", "sglang_service_ar": {}},
                                  {"gpu_summary": "8x B300"})
    assert set(key) == {"cuda_toolkit", "cuda_env", "flashinfer", "jit_cache", "sglang_service", "inferops", "site.yml"}
    assert set(key["cuda_env"]) == {"code", "cuda_env_extra_vars"}
    assert set(key["inferops"]) == {"code", "inferops_env_file"}
    assert set(key["site.yml"]) == {"code", "node"}
    assert len({key[role]["code"] for role in key}) == len(key), "each role's files have their own digest"


def test_a_changed_value_changes_only_its_digest() -> None:
    one = converged.converged_key({"cuda_env_extra_vars": {"A": "1"}, "jit_cache_store_dir": "/s"}, {"gpu_summary": "8x B300"})
    two = converged.converged_key({"cuda_env_extra_vars": {"A": "2"}, "jit_cache_store_dir": "/s"}, {"gpu_summary": "8x B300"})
    assert one["cuda_env"]["cuda_env_extra_vars"] != two["cuda_env"]["cuda_env_extra_vars"]
    assert one["jit_cache"] == two["jit_cache"] and one["site.yml"] == two["site.yml"]
    other_node = converged.converged_key({"cuda_env_extra_vars": {"A": "1"}, "jit_cache_store_dir": "/s"}, {"gpu_summary": "8x B200"})
    assert other_node["site.yml"]["node"] != one["site.yml"]["node"]


def test_a_setting_of_no_role_is_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="site_serial is no setting of this collection's roles"):
        converged.converged_key({"site_serial": "20%"}, {})


def test_line() -> None:
    assert converged.converged_line({"role": "cuda_env", "what": "file /etc/inferops/cuda.env", "want": "a", "have": "b"}) == \
        "  cuda_env: file /etc/inferops/cuda.env: a -> b"
    with pytest.raises(AnsibleFilterError):
        converged.converged_line({"role": "x"})

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/toolkit.py: laying wheels out as a toolkit, and reading update-alternatives."""

from __future__ import annotations

import os
import typing as t

import pytest
from ansible_collections.inferops.blackwell.plugins.module_utils import toolkit


def test_wheels_become_a_toolkit_layout(tmp_path: t.Any, cuda13_wheels: t.Callable[..., t.List[str]]) -> None:
    staging = tmp_path / "cuda-13.0"
    for wheel in cuda13_wheels(tmp_path):
        toolkit.extract_wheel(wheel, str(staging))
    toolkit.finish_layout(str(staging), "x86_64")
    assert os.access(staging / "bin" / "nvcc", os.X_OK)
    # readable and runnable by the (non-root) service user, whatever the wheel recorded
    assert (staging / "bin" / "nvcc").stat().st_mode & 0o777 == 0o755
    assert (staging / "nvvm" / "bin" / "cicc").stat().st_mode & 0o777 == 0o755
    assert (staging / "include" / "cuda_runtime.h").stat().st_mode & 0o777 == 0o644
    assert not (staging / "bin").is_symlink()  # nvcc finds its root through the path it was called by
    assert (staging / "include" / "curand_kernel.h").exists()
    assert not (staging / "lib64" / "libcurand.so.10").exists()  # only curand's headers
    assert os.readlink(staging / "lib") == "lib64"
    assert os.readlink(staging / "lib64" / "libcudart.so") == "libcudart.so.13"
    assert os.readlink(staging / "targets" / "x86_64-linux" / "include") == "../../include"
    assert (staging / "targets" / "x86_64-linux" / "lib" / "libcudart.so.13").exists()
    assert toolkit.missing_files(str(staging)) == ["lib64/stubs/libcuda.so"]


def test_grace_hosts_get_sbsa_targets() -> None:
    assert toolkit.target_dir("aarch64") == "sbsa-linux"
    assert toolkit.target_dir("x86_64") == "x86_64-linux"


def test_layout_without_a_runtime_wheel_says_which_is_missing(tmp_path: t.Any, cuda13_wheels: t.Callable[..., t.List[str]]) -> None:
    staging = tmp_path / "t"
    toolkit.extract_wheel(cuda13_wheels(tmp_path)[0], str(staging))
    with pytest.raises(toolkit.ToolkitError, match="nvidia-cuda-runtime"):
        toolkit.finish_layout(str(staging), "x86_64")


def test_a_wheel_that_escapes_the_prefix_is_refused(tmp_path: t.Any, make_wheel: t.Callable[..., str]) -> None:
    wheel = make_wheel(tmp_path, "nvidia_evil", "1.0", {"nvidia/cu13/include/../../../etc/passwd": "x"})
    with pytest.raises(toolkit.ToolkitError, match="unsafe path"):
        toolkit.extract_wheel(wheel, str(tmp_path / "t"))
    assert not (tmp_path / "etc").exists()


def test_select_wheels_by_exact_pin(tmp_path: t.Any, cuda13_wheels: t.Callable[..., t.List[str]],
                                    make_wheel: t.Callable[..., str]) -> None:
    wheels = cuda13_wheels(tmp_path)
    make_wheel(tmp_path, "nvidia_cuda_nvcc", "13.0.48", {"nvidia/cu13/bin/nvcc": "#!/bin/sh\n"})
    chosen = toolkit.select_wheels(str(tmp_path), ["nvidia-cuda-nvcc==13.0.88", "nvidia-curand==10.4.0.35"])
    assert chosen == [wheels[0], wheels[3]]
    with pytest.raises(toolkit.ToolkitError, match=r"nvidia-cuda-crt==13\.0\.88"):
        toolkit.select_wheels(str(tmp_path), ["nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-crt==13.0.88"])
    with pytest.raises(toolkit.ToolkitError, match="not an exact pin"):
        toolkit.select_wheels(str(tmp_path), ["nvidia-cuda-nvcc>=13"])


def test_manifest_follows_wheel_content(tmp_path: t.Any, cuda13_wheels: t.Callable[..., t.List[str]],
                                        make_wheel: t.Callable[..., str]) -> None:
    wheels = cuda13_wheels(tmp_path)
    first = toolkit.manifest_for(wheels, "13.0", "x86_64")
    assert [entry["name"] for entry in first["wheels"]] == ["nvidia_cuda_nvcc", "nvidia_cuda_runtime", "nvidia_curand", "nvidia_nvvm"]
    assert toolkit.manifest_for(wheels, "13.0", "x86_64") == first
    make_wheel(tmp_path, "nvidia_nvvm", "13.0.88", {"nvidia/cu13/nvvm/bin/cicc": "other cicc"})
    assert toolkit.manifest_for(wheels, "13.0", "x86_64") != first


QUERY = """Name: cuda
Link: /usr/local/cuda
Status: auto
Best: /usr/local/cuda-13.0
Value: /usr/local/cuda-13.0

Alternative: /usr/local/cuda-12.8
Priority: 128

Alternative: /usr/local/cuda-13.0
Priority: 130
"""


def test_alternatives_query_is_read() -> None:
    assert toolkit.parse_alternatives_query(QUERY) == {
        "status": "auto", "link": "/usr/local/cuda", "value": "/usr/local/cuda-13.0",
        "alternatives": {"/usr/local/cuda-12.8": 128, "/usr/local/cuda-13.0": 130}}


def test_new_toolkit_that_took_the_default_gives_it_back() -> None:
    state = toolkit.parse_alternatives_query(QUERY)
    assert toolkit.default_choice(state, "/usr/local/cuda-13.0", set_default=False) == "/usr/local/cuda-12.8"


def test_an_operator_choice_elsewhere_is_left_alone() -> None:
    state = toolkit.parse_alternatives_query(QUERY.replace("Value: /usr/local/cuda-13.0", "Value: /usr/local/cuda-12.8"))
    assert toolkit.default_choice(state, "/usr/local/cuda-13.0", set_default=False) is None


def test_set_default_pins_the_toolkit_in_manual_mode() -> None:
    state = toolkit.parse_alternatives_query(QUERY)
    assert toolkit.default_choice(state, "/usr/local/cuda-13.0", set_default=True) == "/usr/local/cuda-13.0"
    state["status"] = "manual"
    assert toolkit.default_choice(state, "/usr/local/cuda-13.0", set_default=True) is None


def test_a_manual_default_on_the_toolkit_itself_never_moves() -> None:
    # cuda_toolkit_version=12.8 on a node whose /usr/local/cuda an earlier run pinned to the system 12.8:
    # the 13.0 beside it must not take the default.
    state = {"status": "manual", "link": "/usr/local/cuda", "value": "/usr/local/cuda-12.8",
             "alternatives": {"/usr/local/cuda-12.8": 128, "/usr/local/cuda-13.0": 130}}
    assert toolkit.default_choice(state, "/usr/local/cuda-12.8", set_default=False) is None


def test_only_toolkit_keeps_the_default() -> None:
    state = {"status": "auto", "link": "/usr/local/cuda", "value": "/usr/local/cuda-13.0",
             "alternatives": {"/usr/local/cuda-13.0": 130}}
    assert toolkit.default_choice(state, "/usr/local/cuda-13.0", set_default=False) is None

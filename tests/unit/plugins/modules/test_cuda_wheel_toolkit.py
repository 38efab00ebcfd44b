# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cuda_wheel_toolkit end to end on synthetic wheels, with the machine's real C compiler for the stub."""

from __future__ import annotations

import json
import os
import subprocess
import typing as t

import pytest
from ansible_collections.inferops.blackwell.plugins.modules import cuda_wheel_toolkit
from module_runner import run_module

PINS = ["nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.96", "nvidia-nvvm==13.0.88", "nvidia-curand==10.4.0.35"]


def run(capsys: pytest.CaptureFixture[str], check_mode: bool = False, diff: bool = False, **params: t.Any) -> t.Dict[str, t.Any]:
    return run_module(cuda_wheel_toolkit.main, capsys, params, check_mode, diff)


def test_diff_shows_the_manifest_to_be_written(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    predicted = run(capsys, check_mode=True, diff=True, **setup)["diff"]
    assert predicted["before"] == "" and predicted["before_header"] == os.path.join(setup["prefix"], ".inferops-toolkit.json")
    run(capsys, diff=True, **setup)
    with open(os.path.join(setup["prefix"], ".inferops-toolkit.json")) as handle:
        assert handle.read() == predicted["after"]
    assert "diff" not in run(capsys, diff=True, **setup)


@pytest.fixture
def setup(tmp_path: t.Any, cuda13_wheels: t.Callable[..., t.List[str]]) -> t.Dict[str, t.Any]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cuda13_wheels(wheels)
    return {"wheel_dir": str(wheels), "pins": PINS, "prefix": str(tmp_path / "local" / "cuda-13.0"), "release": "13.0"}


def test_install_then_nothing_to_do(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    first = run(capsys, **setup)
    assert first["changed"] is True and first["action"] == "install"
    assert first["nvcc_version"] == "13.0.88"
    prefix = setup["prefix"]
    manifest = json.load(open(os.path.join(prefix, ".inferops-toolkit.json")))
    assert manifest["release"] == "13.0" and len(manifest["wheels"]) == 4
    stub = os.path.join(prefix, "lib64", "stubs", "libcuda.so")
    dynamic = subprocess.run(["readelf", "-d", stub], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic
    assert not os.path.exists(os.path.join(os.path.dirname(prefix), ".cuda-13.0.inferops-staging"))
    second = run(capsys, **setup)
    assert second["changed"] is False and second["action"] == "none"


def test_check_mode_on_a_fresh_host_writes_nothing(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, check_mode=True, **setup)
    assert result["changed"] is True and result["action"] == "install"
    assert not os.path.exists(setup["prefix"])
    assert not os.path.exists(os.path.dirname(setup["prefix"]))


def test_unfinished_install_is_repaired(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, **setup)
    os.remove(os.path.join(setup["prefix"], "lib64", "libcudart.so"))
    os.makedirs(os.path.join(os.path.dirname(setup["prefix"]), ".cuda-13.0.inferops-staging", "junk"))
    result = run(capsys, **setup)
    assert result["action"] == "repair" and "lib64/libcudart.so" in result["reason"]
    assert os.path.islink(os.path.join(setup["prefix"], "lib64", "libcudart.so"))
    assert not os.path.exists(os.path.join(os.path.dirname(setup["prefix"]), ".cuda-13.0.inferops-staging"))


def test_other_wheels_update_the_toolkit(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str],
                                         make_wheel: t.Callable[..., str]) -> None:
    run(capsys, **setup)
    make_wheel(setup["wheel_dir"], "nvidia_nvvm", "13.0.88", {"nvidia/cu13/nvvm/bin/cicc": "rebuilt cicc"},
               executable=["nvidia/cu13/nvvm/bin/cicc"])
    result = run(capsys, **setup)
    assert result["action"] == "update"
    assert open(os.path.join(setup["prefix"], "nvvm", "bin", "cicc")).read() == "rebuilt cicc"


def test_a_toolkit_from_elsewhere_of_the_same_release_is_left_alone(setup: t.Dict[str, t.Any],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = os.path.join(setup["prefix"], "bin")
    os.makedirs(bin_dir)
    with open(os.path.join(bin_dir, "nvcc"), "w") as handle:
        handle.write("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    os.chmod(os.path.join(bin_dir, "nvcc"), 0o755)
    result = run(capsys, **setup)
    assert result["changed"] is False and result["action"] == "foreign"
    assert os.listdir(setup["prefix"]) == ["bin"]


def test_a_foreign_directory_of_another_release_is_refused(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str]) -> None:
    os.makedirs(setup["prefix"])
    result = run(capsys, **setup)
    assert result["failed"] is True
    assert "was not made from wheels by this module" in result["msg"] and "cuda_toolkit_prefix" in result["msg"]


def test_wheels_of_another_release_fail_and_leave_nothing(tmp_path: t.Any, capsys: pytest.CaptureFixture[str],
                                                          cuda13_wheels: t.Callable[..., t.List[str]]) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    cuda13_wheels(wheels, release="12.9")
    prefix = str(tmp_path / "cuda-13.0")
    result = run(capsys, wheel_dir=str(wheels), pins=PINS, prefix=prefix, release="13.0")
    assert result["failed"] is True and "nvcc reports 12.9.88" in result["msg"]
    assert not os.path.exists(prefix)
    assert os.listdir(str(tmp_path)) == ["wheels"]


@pytest.mark.parametrize("params, message", [
    ({"release": "13"}, "release=13: give MAJOR.MINOR"),
    ({"prefix": "/usr/local"}, "prefix=/usr/local"),
    ({"pins": ["nvidia-cuda-crt==13.0.88"]}, "no wheel in"),
])
def test_bad_input_names_the_option(setup: t.Dict[str, t.Any], capsys: pytest.CaptureFixture[str],
                                    params: t.Dict[str, t.Any], message: str) -> None:
    result = run(capsys, **dict(setup, **params))
    assert result["failed"] is True and message in result["msg"]

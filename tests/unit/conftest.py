# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers: the real H200 captures and the canned output of the lab GPU profiles."""

from __future__ import annotations

import os
import typing as t
import zipfile

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def read_fixture(*parts: str) -> str:
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


def real_h200_sections() -> t.List[str]:
    """The sections of the real capture, split at its '---' lines (see fixtures/real-h200/README.md)."""
    return read_fixture("real-h200", "h200-nvidia-smi-misc.txt").split("\n---\n")


class SmiOutput(t.NamedTuple):
    rc: int
    out: str


def profile_output(profile: str, call: str) -> SmiOutput:
    """Canned output of one nvidia-smi call ('query', 'banner', 'topo') for a lab GPU profile."""
    return SmiOutput(int(read_fixture("nvidia-smi", profile, call + ".rc")), read_fixture("nvidia-smi", profile, call + ".txt"))


def real_host_output(host: str, call: str) -> SmiOutput:
    """Real output of one gpu_facts call captured on a lent host (fixtures/real-h200-x2/ and the like)."""
    return SmiOutput(int(read_fixture(host, call + ".rc")), read_fixture(host, call + ".txt"))


@pytest.fixture
def real_host() -> t.Callable[[str, str], SmiOutput]:
    return real_host_output


@pytest.fixture
def real_h200() -> t.Dict[str, str]:
    sections = real_h200_sections()
    return {"query": sections[0], "query_noheader": sections[1], "banner": sections[3], "topo": sections[4]}


@pytest.fixture
def canned() -> t.Callable[[str, str], SmiOutput]:
    return profile_output


@pytest.fixture
def fixture_text() -> t.Callable[..., str]:
    return read_fixture


# --- synthetic NVIDIA wheels (small zip files in the wheels' real layout) ---------------------------

NVCC = "#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.88'\n"


def _make_wheel(directory: t.Any, name: str, version: str, files: t.Dict[str, str], executable: t.Iterable[str] = ()) -> str:
    path = os.path.join(str(directory), "%s-%s-py3-none-manylinux2014_x86_64.whl" % (name, version))
    with zipfile.ZipFile(path, "w") as archive:
        for member, content in files.items():
            info = zipfile.ZipInfo(member)
            # as some of NVIDIA's wheels record them: owner-only permissions
            info.external_attr = (0o744 if member in executable else 0o600) << 16
            archive.writestr(info, content)
        archive.writestr("%s-%s.dist-info/METADATA" % (name, version), "Name: %s\n" % name)
    return path


def _cuda13_wheels(directory: t.Any, release: str = "13.0") -> t.List[str]:
    return [
        _make_wheel(directory, "nvidia_cuda_nvcc", "13.0.88", {
            "nvidia/cu13/bin/nvcc": NVCC.format(release=release), "nvidia/cu13/bin/ptxas": "ptxas", "nvidia/cu13/bin/nvcc.profile": "TOP = $(_HERE_)/..\n",
            "nvidia/cu13/include/crt/host_config.h": "/* crt */"}, executable=["nvidia/cu13/bin/nvcc", "nvidia/cu13/bin/ptxas"]),
        _make_wheel(directory, "nvidia_cuda_runtime", "13.0.96", {
            "nvidia/cu13/include/cuda_runtime.h": "/* rt */", "nvidia/cu13/lib/libcudart.so.13": "ELF"}),
        _make_wheel(directory, "nvidia_nvvm", "13.0.88", {"nvidia/cu13/nvvm/bin/cicc": "cicc"}, executable=["nvidia/cu13/nvvm/bin/cicc"]),
        _make_wheel(directory, "nvidia_curand", "10.4.0.35", {
            "nvidia/cu13/include/curand_kernel.h": "/* curand */", "nvidia/cu13/lib/libcurand.so.10": "BIG ELF"}),
    ]


@pytest.fixture
def make_wheel() -> t.Callable[..., str]:
    return _make_wheel


@pytest.fixture
def cuda13_wheels() -> t.Callable[..., t.List[str]]:
    return _cuda13_wheels

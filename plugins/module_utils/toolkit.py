# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Laying NVIDIA's CUDA wheels out as a toolkit, and reading update-alternatives.

Runs on the managed node's Python (3.8 or later), standard library only. The
functions take paths, so the unit tests drive them with small synthetic wheels.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import typing as t
import zipfile

MANIFEST = ".inferops-toolkit.json"
# Bumped when the layout itself changes, so toolkits laid out by older code are redone (2: file modes normalised).
LAYOUT_VERSION = 2
# Wheel directories and where they go in the toolkit (lib -> lib64, as NVIDIA's packages have it).
_WHEEL_DIRS = {"bin": "bin", "include": "include", "lib": "lib64", "nvvm": "nvvm"}
# Wheels of which only the headers are needed (FlashInfer's sampling kernels include curand headers, its trtllm module
# cublasLt.h and nvrtc.h).
HEADERS_ONLY = ("nvidia_curand", "nvidia_cublas", "nvidia_cuda_nvrtc")
# What a laid-out toolkit must have; a prefix missing any of them is an unfinished install.
REQUIRED_FILES = ("bin/nvcc", "bin/ptxas", "bin/nvcc.profile", "include/cuda_runtime.h", "lib64/libcudart.so",
                  "lib64/stubs/libcuda.so", "nvvm/bin/cicc")
_WHEEL_NAME_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9][^-]*)-")


class ToolkitError(Exception):
    """A wheel set or prefix that cannot become the requested toolkit."""


def target_dir(machine: str) -> str:
    """targets/<dir> as NVIDIA names it: x86_64-linux, sbsa-linux for Arm servers (Grace)."""
    return {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux", "arm64": "sbsa-linux"}.get(machine, machine + "-linux")


def wheel_identity(path: str) -> t.Tuple[str, str]:
    match = _WHEEL_NAME_RE.match(os.path.basename(path))
    if not match or not path.endswith(".whl"):
        raise ToolkitError("%s is not a wheel file name (name-version-...whl)" % path)
    return match.group("name").lower(), match.group("version")


def select_wheels(directory: str, pins: t.Iterable[str]) -> t.List[str]:
    """The wheel file in directory for each `name==version` pin; ToolkitError naming the pins not found."""
    files = sorted(entry for entry in os.listdir(directory) if entry.endswith(".whl")) if os.path.isdir(directory) else []
    chosen, missing = [], []
    for pin in pins:
        if pin.count("==") != 1:
            raise ToolkitError("%r is not an exact pin (name==version)" % pin)
        name, version = pin.split("==")
        prefix = "%s-%s-" % (re.sub(r"[-_.]+", "_", name.strip()).lower(), version.strip())
        found = [entry for entry in files if entry.lower().startswith(prefix)]
        if found:
            chosen.append(os.path.join(directory, found[-1]))
        else:
            missing.append(pin)
    if missing:
        raise ToolkitError("no wheel in %s for %s" % (directory, ", ".join(missing)))
    return chosen


def manifest_for(wheels: t.Iterable[str], release: str, machine: str) -> t.Dict[str, t.Any]:
    """What identifies an install: the wheels (name, version, sha256), the release and the target."""
    entries = []
    for path in sorted(wheels, key=os.path.basename):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        name, version = wheel_identity(path)
        entries.append({"name": name, "version": version, "sha256": digest.hexdigest()})
    return {"layout": LAYOUT_VERSION, "release": release, "target": target_dir(machine), "wheels": entries}


def read_manifest(prefix: str) -> t.Optional[t.Dict[str, t.Any]]:
    try:
        with open(os.path.join(prefix, MANIFEST)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def missing_files(prefix: str) -> t.List[str]:
    return [name for name in REQUIRED_FILES if not os.path.exists(os.path.join(prefix, name))]


def extract_wheel(path: str, staging: str) -> int:
    """Unpack one wheel's nvidia/<pkg>/{bin,include,lib,nvvm} into the staging toolkit; returns files written."""
    name, _version = wheel_identity(path)
    headers_only = name.startswith(HEADERS_ONLY)
    written = 0
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            parts = info.filename.split("/")
            if info.is_dir() or len(parts) < 4 or parts[0] != "nvidia" or parts[2] not in _WHEEL_DIRS:
                continue
            top = _WHEEL_DIRS[parts[2]]
            if headers_only and top != "include":
                continue
            relative = os.path.normpath(os.path.join(top, *parts[3:]))
            if relative.startswith("..") or os.path.isabs(relative):
                raise ToolkitError("%s: unsafe path %s" % (path, info.filename))
            target = os.path.join(staging, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(info) as source, open(target, "wb") as handle:
                shutil.copyfileobj(source, handle)
            # Every user runs a toolkit (the services are not root): 0755 for programs, 0644 for the rest,
            # whatever the wheel recorded (some record 0744 or 0700).
            mode = (info.external_attr >> 16) & 0o777
            executable = bool(mode & 0o111) if mode else (top == "bin" or "/bin/" in relative)
            os.chmod(target, 0o755 if executable else 0o644)
            written += 1
    return written


def link(target: str, name: str) -> None:
    if os.path.lexists(name):
        os.remove(name)
    os.symlink(target, name)


def finish_layout(staging: str, machine: str) -> None:
    """The links a toolkit has that wheels do not: lib -> lib64, targets/<arch>/{include,lib}, libcudart.so."""
    lib64 = os.path.join(staging, "lib64")
    os.makedirs(os.path.join(lib64, "stubs"), exist_ok=True)
    link("lib64", os.path.join(staging, "lib"))
    targets = os.path.join(staging, "targets", target_dir(machine))
    os.makedirs(targets, exist_ok=True)
    link("../../include", os.path.join(targets, "include"))
    link("../../lib64", os.path.join(targets, "lib"))
    sonames = sorted(entry for entry in os.listdir(lib64) if re.match(r"^libcudart\.so\.\d+$", entry))
    if not sonames:
        raise ToolkitError("no libcudart.so.<major> among the wheels: add the nvidia-cuda-runtime wheel")
    link(sonames[-1], os.path.join(lib64, "libcudart.so"))


def stub_source() -> str:
    """C source of a link-time stub for libcuda: FlashInfer links its modules with -lcuda.

    Only the SONAME matters to the linker (the module then needs libcuda.so.1, the
    driver's library, at load time); the few exported names keep tools that look
    for them satisfied. The stub is never loaded.
    """
    names = ("cuInit", "cuDriverGetVersion", "cuGetProcAddress", "cuDeviceGet", "cuDeviceGetAttribute",
             "cuCtxGetCurrent", "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel", "cuGetErrorString")
    return "".join("int %s(void) { return 999; }\n" % name for name in names)


# --- update-alternatives ------------------------------------------------------------------------------

def parse_alternatives_query(text: str) -> t.Dict[str, t.Any]:
    """Read `update-alternatives --query NAME`: status, link, value and each alternative's priority."""
    result: t.Dict[str, t.Any] = {"status": None, "link": None, "value": None, "alternatives": {}}
    current = None
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        if key == "Status":
            result["status"] = value
        elif key == "Link":
            result["link"] = value
        elif key == "Value":
            result["value"] = value if value != "none" else None
        elif key == "Alternative":
            current = value
            result["alternatives"][current] = None
        elif key == "Priority" and current is not None:
            result["alternatives"][current] = int(value)
    return result


def default_choice(query: t.Dict[str, t.Any], prefix: str, set_default: bool) -> t.Optional[str]:
    """Where the `cuda` group should point, or None to leave it as it is.

    set_default: the toolkit itself. Otherwise /usr/local/cuda never moves because of
    this toolkit: only when auto mode made the group point at it (NVIDIA's packages
    register at MAJOR*10+MINOR, so the newest wins) does it go back to the best other
    alternative, pinned in manual mode. A group in manual mode -- the operator's
    choice, or an earlier run's -- is left alone, even when it names this toolkit.
    """
    if set_default:
        return None if query["value"] == prefix and query["status"] == "manual" else prefix
    if query["value"] != prefix or query["status"] != "auto":
        return None
    others = {path: priority for path, priority in query["alternatives"].items() if path != prefix}
    if not others:
        return None
    return max(sorted(others), key=lambda path: others[path] or 0)

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- torch reports the lab node's GPU profile.

Installed in the lab SGLang venv only (a .pth file imports this module at start-up),
never by a role. When torch is imported, torch.cuda.device_count() and
torch.cuda.get_device_capability() answer from /etc/inferops-lab/gpu-profile.json
(the profile the simulated nvidia-smi reads), honouring CUDA_VISIBLE_DEVICES, so
FlashInfer's own arch detection runs unmodified against the simulated GPUs. Nothing
else changes: there is no driver, and a real kernel launch fails as it would.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
import typing as t

PROFILE = os.environ.get("INFEROPS_LAB_GPU_PROFILE", "/etc/inferops-lab/gpu-profile.json")


def profile_capabilities() -> t.List[t.Tuple[int, int]]:
    try:
        with open(PROFILE) as handle:
            profile = json.load(handle)
    except (OSError, ValueError):
        return []
    if profile.get("failure") or profile.get("garbled"):
        return []
    defaults = profile.get("defaults", {})
    capabilities = []
    for gpu in profile.get("gpus", []):
        major, minor = str(gpu.get("compute_cap", defaults.get("compute_cap"))).split(".")
        capabilities.append((int(major), int(minor)))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        picked = [int(index) for index in visible.split(",") if index.strip().isdigit()]
        capabilities = [capabilities[index] for index in picked if index < len(capabilities)]
    return capabilities


def patch(torch: types.ModuleType) -> None:
    capabilities = profile_capabilities()

    def device_count() -> int:
        return len(capabilities)

    def get_device_capability(device: t.Any = None) -> t.Tuple[int, int]:
        index = 0
        if isinstance(device, int):
            index = device
        elif device is not None and getattr(device, "index", None) is not None:
            index = device.index
        if not 0 <= index < len(capabilities):
            raise RuntimeError("LAB SIMULATION: no GPU %r in the profile (%d GPUs)" % (device, len(capabilities)))
        return capabilities[index]

    torch.cuda.device_count = device_count
    torch.cuda.get_device_capability = get_device_capability


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Patches torch right after it is first imported."""

    def find_spec(self, fullname: str, path: t.Any, target: t.Any = None) -> t.Optional[importlib.machinery.ModuleSpec]:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            original(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if not any(isinstance(finder, _TorchFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _TorchFinder())

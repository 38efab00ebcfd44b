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


class Gpu(t.NamedTuple):
    """What torch.cuda.get_device_properties() reports that the lab can know from a profile."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    shared_memory_per_multiprocessor: int
    shared_memory_per_block_optin: int


# Shared memory per SM and the opt-in maximum per block, by compute capability (NVIDIA's CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability"); FlashInfer's MLA planning reads both to pick its kernel.
SHARED_MEMORY = {(8, 0): (167936, 166912), (8, 6): (102400, 101376), (8, 9): (102400, 101376), (9, 0): (233472, 232448),
                 (10, 0): (233472, 232448), (10, 3): (233472, 232448), (12, 0): (102400, 101376), (12, 1): (102400, 101376)}


def host_memory_mib() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 0


def profile_gpus() -> t.List[Gpu]:
    try:
        with open(PROFILE) as handle:
            profile = json.load(handle)
    except (OSError, ValueError):
        return []
    if profile.get("failure") or profile.get("garbled"):
        return []
    defaults = profile.get("defaults", {})
    gpus = []
    for gpu in profile.get("gpus", []):
        merged = dict(defaults, **gpu)
        major, minor = str(merged.get("compute_cap")).split(".")
        # A GPU with unified memory (GB10: nvidia-smi says [N/A]) reports the system's memory to torch.
        memory = merged.get("memory_mib") or host_memory_mib()
        per_sm, per_block = SHARED_MEMORY.get((int(major), int(minor)), (0, 0))
        gpus.append(Gpu(str(merged.get("name", "NVIDIA GPU")), int(major), int(minor), int(memory) * 1024 * 1024,
                        int(merged.get("sm_count", 0)), per_sm, per_block))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        picked = [int(index) for index in visible.split(",") if index.strip().isdigit()]
        gpus = [gpus[index] for index in picked if index < len(gpus)]
    return gpus


def profile_capabilities() -> t.List[t.Tuple[int, int]]:
    return [(gpu.major, gpu.minor) for gpu in profile_gpus()]


def patch(torch: types.ModuleType) -> None:
    gpus = profile_gpus()

    def index_of(device: t.Any) -> int:
        index = 0
        if isinstance(device, int):
            index = device
        elif isinstance(device, str) and ":" in device:
            index = int(device.split(":", 1)[1])
        elif device is not None and getattr(device, "index", None) is not None:
            index = device.index
        if not 0 <= index < len(gpus):
            raise RuntimeError("LAB SIMULATION: no GPU %r in the profile (%d GPUs)" % (device, len(gpus)))
        return index

    def device_count() -> int:
        return len(gpus)

    def get_device_capability(device: t.Any = None) -> t.Tuple[int, int]:
        gpu = gpus[index_of(device)]
        return gpu.major, gpu.minor

    def get_device_name(device: t.Any = None) -> str:
        return gpus[index_of(device)].name

    def get_device_properties(device: t.Any = None) -> Gpu:
        return gpus[index_of(device)]

    def mem_get_info(device: t.Any = None) -> t.Tuple[int, int]:
        total = gpus[index_of(device)].total_memory
        return total, total

    torch.cuda.device_count = device_count
    torch.cuda.get_device_capability = get_device_capability
    if gpus:
        # What SGLang's platform detection reads: a CUDA torch (the lab venv stands for a cu130 build of the same
        # release) with these devices. No kernel can run: tensors on "cuda" fail as they would without a driver.
        torch.cuda.is_available = lambda: True
        torch.version.cuda = "13.0"
        torch.cuda.get_device_name = get_device_name
        torch.cuda.get_device_properties = get_device_properties
        torch.cuda.mem_get_info = mem_get_info
        torch.cuda.current_device = lambda: 0


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

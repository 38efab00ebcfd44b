# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- import stand-ins for SGLang's GPU-only binary packages.

Installed in the lab SGLang venv only (a .pth file imports this module at start-up), never
by a role. sgl-kernel (SGLang's CUDA kernels) and torchvision's PyPI build link against
CUDA torch, which a lab node cannot load; SGLang imports them at module level, so its
argument parsing, resolution and FlashInfer backend could not be imported at all. Here an
import of either answers with a module whose every attribute is a placeholder that raises
when called: nothing decides anything, and any kernel call fails as it would without a GPU. The
package's device queries (DEVICE_QUERIES: what the GPU is, no kernel) answer for the simulated GPUs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import typing as t

PACKAGES = ("sgl_kernel", "torchvision")


def pdl_supported() -> bool:
    """sgl_kernel.utils.is_arch_support_pdl: a device query (compute capability 9 or more), not a kernel; answered from
    what torch reports, which the lab's torch shim reads from the node's GPU profile."""
    import torch  # noqa: PLC0415

    return torch.cuda.get_device_capability(torch.cuda.current_device())[0] >= 9


# The package's device queries (they ask the GPU what it is and run no kernel), answered for the simulated GPUs.
DEVICE_QUERIES: t.Dict[str, t.Callable[[], t.Any]] = {"sgl_kernel.utils.is_arch_support_pdl": pdl_supported}


class Unavailable:
    """A name from a GPU-only package: usable in a module's top-level code, fails when called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Unavailable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unavailable(self._name + "." + attr)

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> t.NoReturn:
        raise RuntimeError("LAB SIMULATION: %s is GPU code, and a lab node runs no kernel" % self._name)

    def __mro_entries__(self, bases: t.Tuple[t.Any, ...]) -> t.Tuple[type, ...]:
        return (object,)


class StandInModule(types.ModuleType):
    def __getattr__(self, attr: str) -> t.Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return DEVICE_QUERIES.get(self.__name__ + "." + attr) or Unavailable(self.__name__ + "." + attr)


class GpuOnlyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: t.Any, target: t.Any = None) -> t.Optional[importlib.machinery.ModuleSpec]:
        if fullname.split(".", maxsplit=1)[0] in PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StandInModule(spec.name)
        module.__path__ = []
        module.__version__ = "0+lab.simulation"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


if not any(isinstance(finder, GpuOnlyFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, GpuOnlyFinder())

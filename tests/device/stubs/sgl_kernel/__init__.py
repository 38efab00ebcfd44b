# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST EQUIPMENT (tests/device only): an import stub for sgl_kernel, SGLang's CUDA kernel package, which the H200 harness
does not carry. SGLang imports it at module level in files the attention backends pull in; FlashInfer's attention backends
call none of it. Every name, in this package or a submodule, is a placeholder that raises when called."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import typing as t

__path__: t.List[str] = []  # submodules come from the finder below
__version__ = "0+inferops.test.stub"


class Unavailable:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Unavailable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unavailable(self._name + "." + attr)

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> t.NoReturn:
        raise RuntimeError("TEST STUB: %s (sgl_kernel is not installed in the H200 harness)" % self._name)

    def __mro_entries__(self, bases: t.Tuple[t.Any, ...]) -> t.Tuple[type, ...]:
        return (object,)


def __getattr__(name: str) -> Unavailable:
    if name.startswith("__"):
        raise AttributeError(name)
    return Unavailable("sgl_kernel." + name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: t.Any, target: t.Any = None) -> t.Optional[importlib.machinery.ModuleSpec]:
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        module.__getattr__ = lambda attr: Unavailable(spec.name + "." + attr)  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _Submodules())

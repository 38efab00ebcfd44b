# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST EQUIPMENT (tests/device only): an import stub for sgl_kernel, SGLang's CUDA kernel package, which the H200 harness
does not carry. SGLang imports it at module level in files the attention backends pull in; FlashInfer's attention backends
call none of it. Every name, in this package or a submodule, is a placeholder that raises when called, but one:
utils.is_arch_support_pdl, which SGLang's Triton attention backend asks at construction on a CUDA host, is answered by
SGLang's own function of that name (sglang.kernels.jit.utils.arch: the GPU arch's major version is 9 or more)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import typing as t

__path__: t.List[str] = []  # submodules come from the finder below
__version__ = "0+inferops.test.stub"


class _Placeholder(type):
    """A placeholder's class: attribute access gives further placeholders, calling one raises. A placeholder is a class,
    so SGLang may test isinstance() against it (never true) or subclass it (the subclass is an ordinary class)."""

    def __getattr__(cls, attr: str) -> t.Any:
        if attr.startswith("__") or "_stub" not in cls.__dict__:
            raise AttributeError(attr)
        return unavailable(cls.__dict__["_stub"] + "." + attr)

    def __call__(cls, *args: t.Any, **kwargs: t.Any) -> t.Any:
        if "_stub" in cls.__dict__:
            raise RuntimeError("TEST STUB: %s (sgl_kernel is not installed in the H200 harness)" % cls.__dict__["_stub"])
        return super().__call__(*args, **kwargs)


def unavailable(name: str) -> t.Any:
    return _Placeholder(name.rsplit(".", 1)[-1], (), {"_stub": name})


def __getattr__(name: str) -> t.Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return unavailable("sgl_kernel." + name)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: t.Any, target: t.Any = None) -> t.Optional[importlib.machinery.ModuleSpec]:
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]

        def placeholder(attr: str) -> t.Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            if (spec.name, attr) == ("sgl_kernel.utils", "is_arch_support_pdl"):
                return importlib.import_module("sglang.kernels.jit.utils.arch").is_arch_support_pdl
            return unavailable(spec.name + "." + attr)

        module.__getattr__ = placeholder  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _Submodules())

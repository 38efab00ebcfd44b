# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION: the C source of a stand-in for the NVIDIA driver's libcuda.so.1 on a node without a GPU.

Every function of the driver API that the node's cuda.h declares (read after the C preprocessor, so the versioned names
such as cuCtxCreate_v4 are the ones a module links) returns CUDA_ERROR_NO_DEVICE. The SGLang stand-in loads it before
any FlashInfer module, so a module that links the driver (trtllm's fmha_gen) loads as it would on a GPU node; no kernel
runs. Only the stand-in's process sees it (it is not on the loader's path). Used by labkit/images.py."""

from __future__ import annotations

import re
import sys
import typing as t

CUDA_ERROR_NO_DEVICE = 100


def names(preprocessed: str) -> t.List[str]:
    return sorted(set(re.findall(r"\bCUresult\s+(cu[A-Za-z0-9_]+)\s*\(", preprocessed)))


def source(preprocessed: str) -> str:
    found = names(preprocessed)
    if len(found) < 100:
        raise SystemExit("LAB: only %d driver functions in cuda.h: not the driver API" % len(found))
    return "/* LAB SIMULATION: the driver API without a GPU (extensions/molecule/lab/gpu/libcuda_sim.py) */\n" + "".join(
        "int %s(void) { return %d; }\n" % (name, CUDA_ERROR_NO_DEVICE) for name in found)


if __name__ == "__main__":
    sys.stdout.write(source(sys.stdin.read()))

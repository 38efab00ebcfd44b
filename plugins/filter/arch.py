# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side checks of a FLASHINFER_CUDA_ARCH_LIST, from the same tables as gpu_facts."""

from __future__ import annotations

import re
import typing as t

from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.module_utils import gpu

_ENTRY_RE = re.compile(r"\d+\.\d+[a-z]?")


def flashinfer_arch_check(arch_list: str) -> t.Dict[str, t.Any]:
    """Parse an arch list the way FlashInfer does (single spaces) and say what it needs.

    Returns entries, their capabilities, the nvcc release the list needs (null when
    an entry's minimum is not known), and problems (empty when the list is usable).
    An explicit suffix makes FlashInfer skip its own version checks, so a suffixed
    entry needs only what nvcc itself needs (12.0a builds with 12.8); an entry
    without a suffix goes through FlashInfer's checks (SM 12.x needs 12.9).
    """
    if not isinstance(arch_list, str):
        raise AnsibleFilterError("flashinfer_arch_check expects a string, got %s" % type(arch_list).__name__)
    entries = arch_list.split(" ")
    problems = []
    needs: t.List[t.Tuple[int, int]] = []
    unknown = []
    capabilities = []
    for entry in entries:
        if not _ENTRY_RE.fullmatch(entry):
            problems.append("%r is not MAJOR.MINOR with an optional letter suffix (FlashInfer splits on single spaces only; "
                            "no commas, no +PTX)" % entry)
            continue
        capability = gpu.target_capability(entry)
        capabilities.append(gpu.capability_str(capability))
        explicit = entry[-1].isalpha()
        minimum = gpu.TARGET_MIN_NVCC.get(entry) if explicit else gpu.target_min_nvcc(gpu.flashinfer_target(capability))
        if minimum is None:
            unknown.append(entry)
        else:
            needs.append(minimum)
    return {
        "entries": entries,
        "capabilities": sorted(set(capabilities), key=gpu.parse_version),
        "min_nvcc_version": None if unknown or not needs else gpu.version_str(max(needs)),
        "unknown": unknown,
        "problems": problems,
    }


class FilterModule:
    """inferops.blackwell arch list filters."""

    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"flashinfer_arch_check": flashinfer_arch_check}

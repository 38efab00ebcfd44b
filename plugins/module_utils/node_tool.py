# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node tool's modules share: their common options, and the node's tool configuration and installed files,
checked before FlashInfer is started."""

from __future__ import annotations

import os
import typing as t

from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_sglang_plan as planner

# the files the venv's Python runs, installed on the node by inferops.blackwell.inferops from this collection (imported
# here so that the module's payload holds them, to compare)
INSTALLED = (tool.venv_side, planner)

NODE_TOOL_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "config": {"type": "path", "default": tool.CONFIG},
    "library": {"type": "path", "default": "/usr/local/lib/inferops"},
    "skip_without_tool": {"type": "bool", "default": False},
}


def installed_problem(library: str) -> t.Optional[str]:
    """Why the node's installed venv side cannot serve this module (missing, or another release's); None when it can."""
    for module in INSTALLED:
        path = os.path.join(library, module.__name__.rsplit(".", 1)[-1] + ".py")
        # the payload's own copy, through whichever loader imported it (a file, the payload's zip, Ansible's loader)
        ours = module.__spec__.loader.get_data(module.__spec__.origin)
        try:
            with open(path, "rb") as handle:
                theirs = handle.read()
        except OSError as exc:
            return ("no node tool at %s (%s): the inferops.blackwell.flashinfer role installs it (its install step); "
                    "library is the directory of inferops_tool_lib" % (path, exc.strerror))
        if theirs != ours:
            return ("%s is not this collection's (another release installed it): run the inferops.blackwell.flashinfer "
                    "role (its install step reinstalls the node tool), then this again" % path)
    return None


def node_tool(module: t.Any) -> t.Tuple[t.Dict[str, t.Any], str]:
    """(the tool's configuration, the venv side's installed path), or the module fails with the cause and the fix. A
    node without this collection's tool is skipped instead in check mode (the install step that would put it there did
    not run) and with skip_without_tool (a probe before the install step of a run that installs or upgrades it)."""
    library = module.params["library"]
    problem = installed_problem(library)
    if problem and (module.check_mode or module.params["skip_without_tool"]):
        module.exit_json(changed=False, skipped=True, msg=("check mode: " if module.check_mode else "") + problem)
    if problem:
        module.fail_json(msg=problem)
    try:
        config = tool.read_config(module.params["config"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    return config, os.path.join(library, tool.VENV_SIDE)

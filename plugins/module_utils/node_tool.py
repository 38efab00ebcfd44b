# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node tool's modules share: their common options, and the node's tool configuration and installed files,
checked before FlashInfer is started."""

from __future__ import annotations

import hashlib
import os
import typing as t

from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_sglang_plan as planner

NODE_TOOL_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "config": {"type": "path", "default": tool.CONFIG},
    "library": {"type": "path", "default": "/usr/local/lib/inferops"},
    "skip_without_tool": {"type": "bool", "default": False},
}


def installed_digests() -> t.Dict[str, str]:
    """The sha256 of each file the venv's Python runs, as this release ships it: the venv side (the role's file, never
    in a module's payload: its digest is kept in module_utils) and the planner (in the payload: its own bytes)."""
    ours = planner.__spec__.loader.get_data(planner.__spec__.origin)  # whichever loader imported it (file, zip, Ansible's)
    return {tool.VENV_SIDE: tool.VENV_SIDE_SHA256, "inferops_sglang_plan.py": hashlib.sha256(ours).hexdigest()}


def installed_problem(library: str) -> t.Optional[str]:
    """Why the node's installed venv side cannot serve this module (missing, or another release's); None when it can."""
    for name, wanted in installed_digests().items():
        path = os.path.join(library, name)
        try:
            found = tool.digest(path)
        except OSError as exc:
            return ("no node tool at %s (%s): the inferops.blackwell.flashinfer role installs it (its install step); "
                    "library is the directory of inferops_tool_lib" % (path, exc.strerror))
        if found != wanted:
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

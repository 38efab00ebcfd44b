# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every module of the node tool shares: where the roles wrote its configuration and installed it."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  config:
    description:
      - The node tool's configuration, written by the inferops.blackwell.flashinfer role at C(inferops_tool_config); it
        names the SGLang venv, the environment file the services load, the expected archs, the configured modules and
        where the services' SGLang configurations are.
    type: path
    default: /etc/inferops/flashinfer.json
  library:
    description:
      - The directory the inferops.blackwell.inferops role installed the node tool's files in (the directory of
        C(inferops_tool_lib)). The half of the tool that runs in the SGLang venv's Python (FlashInfer's and SGLang's own
        code) runs from there, as a separate process in the services' environment.
      - Its files must be this collection's own (they are compared byte for byte); a node whose tool came from another
        release is refused with the fix.
    type: path
    default: /usr/local/lib/inferops
  skip_without_tool:
    description:
      - Return skipped, with the reason, instead of failing where the node has no node tool of this collection's release
        yet; for a probe that runs before the install step of a run that installs or upgrades the tool (the role probes
        again after it). In check mode such a node is always skipped.
    type: bool
    default: false
notes:
  - Run it as the services' user (C(become_user)), as the services and their C(ExecStartPre=) run; then what FlashInfer
    touches in that user's cache stays that user's.
"""

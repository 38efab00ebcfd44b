#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_verdict
short_description: Whether the SGLang services would start and serve without building a JIT module (the preflight's verdict)
version_added: 0.4.0
description:
  - The verdict the services' preflight (their C(ExecStartPre=), C(inferops-flashinfer check)) gives, from the same
    code. It holds when nvcc at C(CUDA_HOME) satisfies the GPUs, FlashInfer's arch set matches them, every module of
    the warm set is cached and was derived from the services' configurations as they are now, and the kernel sets are
    in place.
  - With O(units), also the environment each enabled or running SGLang unit really gets from systemd (drop-ins
    included) must hold every pinned value.
  - Never fails on what it finds; RV(ready) and RV(problems) say it, and the caller decides. Fails when the node tool is
    missing or is another release's.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - inferops.blackwell.node_tool
attributes:
  check_mode:
    support: full
    details: Reads only; it runs the same in check mode, where a node without this collection's node tool (its install step did not run) is skipped.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  units:
    description: Also the environment each enabled or running SGLang unit runs with, or would start with.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Would the services start?
  inferops.blackwell.flashinfer_verdict:
    units: true
  become: true
  become_user: sglang
  register: verdict

- name: Say why not
  ansible.builtin.fail:
    msg: "{{ verdict.problems | join(' ') }}"
  when: not verdict.ready
"""

RETURN = r"""
ready:
  description: True when the services would start and serve without building a JIT module.
  returned: always
  type: bool
  sample: true
problems:
  description: Each cause that would stop a service, with its fix.
  returned: always
  type: list
  elements: str
  sample: ["FlashInfer 0.6.18 resolved no target arch ... Fix: ..."]
lines:
  description: What the preflight prints when it passes (FlashInfer, archs, toolkit, cache, the kernel set, what is not warmed).
  returned: when ready
  type: list
  elements: str
view:
  description: FlashInfer's view the verdict was made from (as inferops.blackwell.flashinfer_view's probe).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils.argv_runner import runner
from ansible_collections.inferops.blackwell.plugins.module_utils.node_tool import NODE_TOOL_OPTIONS, node_tool


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(NODE_TOOL_OPTIONS, units={"type": "bool", "default": False}),
        supports_check_mode=True,
    )
    config, script = node_tool(module)
    view, causes = tool.verdict(runner(module), config, script, units=module.params["units"])
    problems = [text for _cause, text in causes]
    module.exit_json(changed=False, ready=not problems, problems=problems, view=view,
                     lines=[] if problems else tool.verdict_lines(view))


if __name__ == "__main__":
    main()

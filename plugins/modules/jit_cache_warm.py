#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: jit_cache_warm
short_description: Build the JIT modules the SGLang services will ask for, and record the warm-up beside FlashInfer's cache
version_added: 0.4.0
description:
  - Derives the warm set from the services' SGLang configurations (as inferops.blackwell.flashinfer_view's plan), adds
    the configured modules, clears stale lock files and half-built modules, and compiles what the cache lacks, in the
    services' environment, with the nvcc it pins (compile only; no GPU needed). Rebuilds everything when the toolkit
    changed since the last warm-up. Records what was derived from which file contents beside the cache.
  - Makes SGLang's own cache directories the environment file names (C(SGLANG_CACHE_DIR), C(SGLANG_JIT_CACHE_DIR)).
  - One warm-up per node at a time (a lock beside FlashInfer's workspace base); a second waits.
  - Compiles take minutes each; run it with C(async) and follow it with inferops.blackwell.jit_cache_wait, which reads
    the progress file the warm-up keeps.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - inferops.blackwell.node_tool
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  max_jobs:
    description:
      - Parallel compile jobs, unless the environment file sets C(MAX_JOBS) itself; C(0) leaves FlashInfer's own default
        (every core).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Warm the cache
  inferops.blackwell.jit_cache_warm:
    max_jobs: 8
  become: true
  become_user: sglang
  async: 3600
  poll: 0
  register: warm_job
"""

RETURN = r"""
view:
  description:
    - What the warm-up derived, built and recorded (the keys of inferops.blackwell.flashinfer_view's plan); each module
      in C(modules) also says whether it was C(built) here and in how many C(seconds), and C(cleaned) lists the stale
      lock files and half-built modules removed first.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils.argv_runner import runner
from ansible_collections.inferops.blackwell.plugins.module_utils.node_tool import NODE_TOOL_OPTIONS, node_tool


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(NODE_TOOL_OPTIONS, max_jobs={"type": "int", "default": 0}),
        supports_check_mode=False,
    )
    if module.params["max_jobs"] < 0:
        module.fail_json(msg="max_jobs must be 0 (FlashInfer's default) or more, not %d" % module.params["max_jobs"])
    config, script = node_tool(module)
    view = tool.warm(runner(module), config, script, str(module.params["max_jobs"]) if module.params["max_jobs"] else None)
    if view.get("error"):
        module.fail_json(msg=view["error"], view=view)
    module.exit_json(changed=any(entry.get("built") for entry in view.get("modules", [])), view=view)


if __name__ == "__main__":
    main()

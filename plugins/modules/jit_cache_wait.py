#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: jit_cache_wait
short_description: INTERNAL to the role jit_cache -- wait for an asynchronous JIT warm-up, printing which module it builds and for how long
version_added: 0.2.0
description:
  - Polls the asynchronous job of inferops.blackwell.jit_cache_warm (started with C(async) and C(poll=0)) and the progress
    file the warm-up keeps beside the cache, and prints one line per host when the warm-up moves to another module, and
    otherwise every O(quiet_seconds), instead of a column of retry lines.
  - Returns the job's own result when it ends (the warm-up's RV(view), its C(changed), and C(failed) and C(msg) when it
    failed), and cleans the job's status file up.
  - Runs as an action plugin on the controller; used by the inferops.blackwell.jit_cache role.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  jid:
    description: The job id of the asynchronous warm-up (its C(ansible_job_id)).
    type: str
    required: true
  progress:
    description: The warm-up's progress file, C(inferops-warm-progress.json) in FlashInfer's workspace on the node.
    type: str
    required: true
  timeout:
    description: Seconds to wait before failing.
    type: int
    default: 3600
  poll:
    description: Seconds between polls.
    type: int
    default: 15
  quiet_seconds:
    description: Seconds between two lines while the warm-up stays on the same module.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Warm the cache
  inferops.blackwell.jit_cache_warm:
  async: 3600
  poll: 0
  register: warm_job

- name: Wait for it
  inferops.blackwell.jit_cache_wait:
    jid: "{{ warm_job.ansible_job_id }}"
    progress: /var/lib/sglang/.cache/flashinfer/0.6.18/120f/inferops-warm-progress.json
  register: warm
"""

RETURN = r"""
view:
  description: What the warm-up derived, built and recorded (inferops.blackwell.jit_cache_warm's RV(view)).
  returned: when the job ended
  type: dict
finished:
  description: Always true when the wait returns.
  returned: always
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils.jit_cache_wait import ARGUMENT_SPEC


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=False,
    )
    module.fail_json(msg="inferops.blackwell.jit_cache_wait runs as an action plugin on the controller")


if __name__ == "__main__":
    main()

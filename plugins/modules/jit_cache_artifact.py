#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: jit_cache_artifact
short_description: Pack this node's JIT build for the build store, or check a stored build and put it in place
version_added: 0.4.0
description:
  - O(operation=export) packs the compiled modules of this node's plan, their generated sources, ninja's records and the
    warm-up record into O(path), with a manifest (the node's build fingerprint and each file's sha256). Fails when the
    warm set is not built yet.
  - O(operation=import) checks the artifact at O(path) -- its checksum against O(sha256), its fingerprint against this
    node's, each file against the manifest -- puts it in place, then runs ninja's own dry run (nothing may be rebuilt).
    A refused artifact leaves nothing of it in the cache and returns RV(refused) with the reason; the module does not
    fail, so the caller can build instead.
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
  operation:
    description: Pack (V(export)) or check and put in place (V(import)).
    type: str
    choices: [export, import]
    required: true
  path:
    description: The artifact (a gzip'd tar) to write or to read.
    type: path
    required: true
  sha256:
    description: The artifact's checksum as the store lists it.
    type: str
"""

EXAMPLES = r"""
- name: Put a stored build in place
  inferops.blackwell.jit_cache_artifact:
    operation: import
    path: /tmp/build.tar.gz
    sha256: "{{ stored_sum }}"
  become: true
  become_user: sglang
  register: imported
"""

RETURN = r"""
artifact:
  description:
    - export -- C(artifact) (the path), C(sha256), C(fingerprint), C(files).
    - import -- C(imported) (files put in place), C(fingerprint), C(built_on) (the node that built it).
  returned: success, unless refused
  type: dict
refused:
  description: Whether the import refused the artifact (nothing of it is left in the cache).
  returned: always
  type: bool
error:
  description: Why it was refused.
  returned: when refused
  type: str
fingerprint:
  description: This node's build fingerprint.
  returned: when refused
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils.argv_runner import runner
from ansible_collections.inferops.blackwell.plugins.module_utils.node_tool import NODE_TOOL_OPTIONS, node_tool


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(NODE_TOOL_OPTIONS,
                           operation={"type": "str", "choices": ["export", "import"], "required": True},
                           path={"type": "path", "required": True},
                           sha256={"type": "str"}),
        required_if=[("operation", "import", ("sha256",))],
        supports_check_mode=False,
    )
    config, script = node_tool(module)
    operation = module.params["operation"]
    done, result = tool.artifact(runner(module), config, operation, module.params["path"], sha256=module.params["sha256"], script=script)
    if done:
        module.exit_json(changed=operation == "import", refused=False, artifact=result)
    if operation == "export":
        module.fail_json(msg=result["error"], refused=False, fingerprint=result.get("fingerprint"))
    module.exit_json(changed=False, refused=True, error=result["error"], fingerprint=result.get("fingerprint"))


if __name__ == "__main__":
    main()

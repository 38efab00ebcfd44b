#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_view
short_description: FlashInfer and SGLang on the node exactly as the SGLang services see them (read only)
version_added: 0.4.0
description:
  - Starts the SGLang venv's Python in the one environment file the services load, and nothing of the caller's
    environment, and returns what FlashInfer's and SGLang's own code report there.
  - O(view=probe) FlashInfer's view (release, the arch set it resolves, the CUDA version and C(CUDA_HOME) it detects,
    its JIT workspace, each configured module's state, its trtllm-gen kernel set).
  - O(view=plan) also the modules the services will ask for, derived from their SGLang configurations by SGLang's own
    parser, resolution and attention backends and named by FlashInfer's spec functions, each with its state in the cache;
    the node's build fingerprint; and, for the services' own configurations, what their preflight would say of the node
    as it is (RV(view.problems)). Builds nothing.
  - O(view=parse) SGLang's own parser and resolution of the configurations (the backends it picks), or its refusal in
    RV(view.error).
  - Never fails on what it finds (a refusal, a FlashInfer that cannot start); the caller decides. Fails when the node
    tool is missing or is another release's.
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
  view:
    description: What to report.
    type: str
    choices: [probe, plan, parse]
    default: probe
  sglang_configs:
    description:
      - With O(view=plan) or O(view=parse), these SGLang configuration files (C(--config) files) instead of the
        services' own, in the tool configuration's C(sglang_config_dir); for candidates not yet written.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Probe FlashInfer as the service user
  inferops.blackwell.flashinfer_view:
    view: probe
  become: true
  become_user: sglang
  register: probe

- name: Parse candidate configurations as SGLang will
  inferops.blackwell.flashinfer_view:
    view: parse
    sglang_configs: [/tmp/stage/sglang-ar.yaml]
  become: true
  become_user: sglang
  register: parsed
  failed_when: parsed.view.error is defined
"""

RETURN = r"""
view:
  description: What the venv's Python reported, and the environment file as the tool read it.
  returned: always
  type: dict
  contains:
    flashinfer_version:
      description: FlashInfer's release in the venv.
      type: str
      returned: when FlashInfer imports
      sample: 0.6.18
    sglang_version:
      description: SGLang's release in the venv.
      type: str
      returned: when SGLang imports
      sample: 0.5.21
    archs:
      description: The target archs FlashInfer resolves in the services' environment (empty is the incident on SM 12.x).
      type: list
      elements: str
      returned: when FlashInfer imports
      sample: ["12.0f"]
    cuda_version:
      description: The CUDA version FlashInfer detects (its nvcc).
      type: str
      returned: when FlashInfer imports
      sample: "13.0"
    cuda_home:
      description: The C(CUDA_HOME) FlashInfer resolves.
      type: str
      returned: when FlashInfer imports
      sample: /usr/local/cuda-13.0
    workspace:
      description: FlashInfer's JIT workspace for this release and arch set.
      type: str
      returned: when FlashInfer imports
      sample: /var/lib/sglang/.cache/flashinfer/0.6.18/120f
    modules:
      description: Each JIT module of the warm set, with C(name), C(uri), C(why) and C(compiled).
      type: list
      elements: dict
      returned: when FlashInfer imports
    fingerprint:
      description: What a build of these modules depends on, hashed (the build store's key).
      type: str
      returned: with O(view=plan)
    fingerprint_fields:
      description: The fields the fingerprint is made of.
      type: dict
      returned: with O(view=plan)
    stamp_matches:
      description: Whether the cache's warm-up record was made in this environment.
      type: bool
      returned: when FlashInfer imports
    derived:
      description: The derivation from the services' configurations (per file its sha256, backends, models, what is not warmed).
      type: dict
      returned: with O(view=plan) or O(view=parse)
    derived_from:
      description: C(warm-up) when the derivation is the one the last warm-up recorded (nothing changed since).
      type: str
      returned: with O(view=plan)
    problems:
      description: What the services' preflight would say of the node as it is (each a cause and its fix); empty when they would start.
      type: list
      elements: str
      returned: with O(view=plan) of the services' own configurations
    trtllm_cubins:
      description: FlashInfer's trtllm-gen kernel set as its loader would find it.
      type: dict
      returned: when FlashInfer imports
    warnings:
      description: What FlashInfer logged while it resolved its archs.
      type: list
      elements: str
      returned: when FlashInfer imports
    pinned:
      description: The environment file as the services load it (the tool's one parser of it).
      type: dict
      returned: when the venv's Python ran
    error:
      description: Why FlashInfer or SGLang could not start, or SGLang's refusal of a configuration.
      type: str
      returned: on a refusal or failure
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.module_utils.argv_runner import runner
from ansible_collections.inferops.blackwell.plugins.module_utils.node_tool import NODE_TOOL_OPTIONS, node_tool


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(NODE_TOOL_OPTIONS,
                           view={"type": "str", "choices": ["probe", "plan", "parse"], "default": "probe"},
                           sglang_configs={"type": "list", "elements": "path", "default": []}),
        supports_check_mode=True,
    )
    if module.params["sglang_configs"] and module.params["view"] == "probe":
        module.fail_json(msg="sglang_configs goes with view=plan or view=parse")
    config, script = node_tool(module)
    module.exit_json(changed=False, view=tool.view_of(runner(module), config, module.params["view"], script, module.params["sglang_configs"]))


if __name__ == "__main__":
    main()

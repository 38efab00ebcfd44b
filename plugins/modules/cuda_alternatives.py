#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_alternatives
short_description: Register a CUDA toolkit with update-alternatives and keep /usr/local/cuda where the operator wants it
version_added: 0.2.0
description:
  - Registers O(prefix) in the C(cuda) group (link C(/usr/local/cuda)) and the C(cuda-<major>) group (link
    C(/usr/local/cuda-<major>)) at O(priority), the way NVIDIA's packages do (priority 130 for 13.0).
  - NVIDIA's packages leave the C(cuda) group in auto mode, so a newer toolkit takes C(/usr/local/cuda) from the system
    one. With O(set_default=false) this module gives it back -- to the best other alternative -- when the new toolkit
    has taken it; a group pointing elsewhere (an operator's choice) is left alone. With O(set_default=true) the toolkit
    becomes the default, in manual mode.
  - A C(/usr/local/cuda) that exists but is not managed by update-alternatives is never replaced; the module warns.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The two groups (C(cuda-<major>), C(cuda)) as update-alternatives keeps them, before and after.
  platform:
    platforms: debian
options:
  prefix:
    description: The toolkit directory, for example C(/usr/local/cuda-13.0).
    type: path
    required: true
  priority:
    description: Priority of the registration; NVIDIA uses C(MAJOR*10+MINOR).
    type: int
    required: true
  set_default:
    description: Make O(prefix) what C(/usr/local/cuda) points to.
    type: bool
    default: false
  link_root:
    description: Directory of the C(cuda) and C(cuda-<major>) links.
    type: path
    default: /usr/local
"""

EXAMPLES = r"""
- name: Register CUDA 13.0 and keep the system default
  inferops.blackwell.cuda_alternatives:
    prefix: /usr/local/cuda-13.0
    priority: 130
"""

RETURN = r"""
default:
  description: Where C(/usr/local/cuda) points after the run (what it would point to, in check mode).
  returned: always
  type: str
  sample: /usr/local/cuda-12.8
actions:
  description: The update-alternatives calls made (or that would be made in check mode).
  returned: always
  type: list
  elements: str
  sample: ["--install /usr/local/cuda-13 cuda-13 /usr/local/cuda-13.0 130"]
"""

import os
import re
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import toolkit


class Alternatives:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.binary = module.get_bin_path("update-alternatives", required=True)
        self.actions: t.List[str] = []

    def query(self, name: str) -> t.Optional[t.Dict[str, t.Any]]:
        rc, out, _err = self.module.run_command([self.binary, "--query", name], environ_update={"LC_ALL": "C"})
        return toolkit.parse_alternatives_query(out) if rc == 0 else None

    def call(self, args: t.List[str]) -> None:
        self.actions.append(" ".join(args))
        if self.module.check_mode:
            return
        rc, out, err = self.module.run_command([self.binary] + args, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.module.fail_json(msg="update-alternatives %s failed: %s" % (" ".join(args), (out + err).strip()),
                                  actions=self.actions)

    def ensure(self, name: str, link: str, prefix: str, priority: int) -> t.Optional[t.Dict[str, t.Any]]:
        """The group with prefix registered at priority; None when link is not ours to manage."""
        state = self.query(name)
        if state is None and os.path.lexists(link):
            self.module.warn("%s exists and is not managed by update-alternatives: left as it is" % link)
            return None
        if state is None or state["alternatives"].get(prefix) != priority:
            self.call(["--install", link, name, prefix, str(priority)])
            state = self.query(name) if not self.module.check_mode else predicted(state, link, prefix, priority)
        return state


def predicted(state: t.Optional[t.Dict[str, t.Any]], link: str, prefix: str, priority: int) -> t.Dict[str, t.Any]:
    """The group as --install would leave it (for check mode)."""
    new = dict(state or {"status": "auto", "link": link, "value": None, "alternatives": {}})
    new["alternatives"] = dict(new["alternatives"], **{prefix: priority})
    if new["status"] == "auto":
        new["value"] = max(sorted(new["alternatives"]), key=lambda path: new["alternatives"][path] or 0)
    return new


def describe(groups: t.Mapping[str, t.Optional[t.Dict[str, t.Any]]]) -> str:
    """The groups as --diff shows them: status and value, then each alternative with its priority."""
    lines = []
    for name, state in groups.items():
        if state is None:
            lines.append("%s: (no group)" % name)
            continue
        lines.append("%s: %s, %s -> %s" % (name, state.get("status"), state.get("link"), state.get("value")))
        lines.extend("  %s %s" % (path, priority) for path, priority in sorted(state.get("alternatives", {}).items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            prefix=dict(type="path", required=True),
            priority=dict(type="int", required=True),
            set_default=dict(type="bool", default=False),
            link_root=dict(type="path", default="/usr/local"),
        ),
        supports_check_mode=True,
    )
    prefix = module.params["prefix"].rstrip("/")
    match = re.search(r"cuda-(\d+)\.\d+$", prefix)
    if not match:
        module.fail_json(msg="prefix=%s: give a versioned toolkit path such as /usr/local/cuda-13.0" % prefix)
    if not os.path.isdir(prefix) and not module.check_mode:
        module.fail_json(msg="prefix=%s does not exist: install the toolkit first" % prefix)
    alternatives = Alternatives(module)
    root = module.params["link_root"]
    priority = module.params["priority"]
    names = ["cuda-" + match.group(1), "cuda"]
    before = {name: alternatives.query(name) for name in names}
    after = {names[0]: alternatives.ensure(names[0], os.path.join(root, names[0]), prefix, priority)}
    state = after["cuda"] = alternatives.ensure("cuda", os.path.join(root, "cuda"), prefix, priority)
    default = os.path.realpath(os.path.join(root, "cuda")) if os.path.lexists(os.path.join(root, "cuda")) else None
    if state is not None:
        choice = toolkit.default_choice(state, prefix, module.params["set_default"])
        if choice is not None:
            alternatives.call(["--set", "cuda", choice])
            state["value"] = choice
        default = state["value"]
    extra = {}
    if alternatives.actions and module._diff:
        if not module.check_mode:
            after = {name: alternatives.query(name) for name in names}
        extra["diff"] = {"before_header": "update-alternatives", "after_header": "update-alternatives",
                         "before": describe(before), "after": describe(after)}
    module.exit_json(changed=bool(alternatives.actions), actions=alternatives.actions, default=default, **extra)


if __name__ == "__main__":
    main()

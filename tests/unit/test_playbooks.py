# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' order and wiring are written once (playbooks/vars/roles.yml): the playbooks and molecule's converges use
it, and restate neither the role list nor a role's input from another's facts."""

from __future__ import annotations

import os
import re
import typing as t

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WIRING = os.path.join(ROOT, "playbooks", "vars", "roles.yml")


def load(path: str) -> t.Any:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def yaml_files(*bases: str) -> t.List[str]:
    return sorted(os.path.join(root, name) for base in bases for root, _dirs, names in os.walk(base) for name in names
                  if name.endswith((".yml", ".yaml")))


def restated_wiring(bases: t.Sequence[str], wiring: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """(file, what) for each place outside the wiring file that sets a wired input or lists the roles."""
    found = []
    roles = wiring["_site_roles"]
    listed = re.compile(r"\b%s\b" % r"\b.{1,20}\b".join(re.escape(role) for role in roles[1:4]))
    for path in yaml_files(*bases):
        if os.path.abspath(path) == os.path.abspath(WIRING):
            continue
        with open(path, encoding="utf-8") as handle:
            code = "".join(line for line in handle if not line.lstrip().startswith("#"))
        found += [(os.path.basename(path), name) for name in wiring["_site_wired"] if re.search(r"^\s*%s:" % name, code, re.M)]
        if listed.search(code):
            found.append((os.path.basename(path), "the role list"))
    return found


def test_the_wiring_file_names_each_role_and_wires_inputs_from_published_facts() -> None:
    wiring = load(WIRING)
    assert wiring["_site_roles"][0] == "inferops"
    assert set(wiring["_site_probed_roles"]) <= set(wiring["_site_roles"])
    for name in wiring["_site_wired"]:
        owner = next(role for role in wiring["_site_roles"] if name.startswith(role + "_"))
        value = wiring[name]
        # an input of one role, from a fact another role published (never its own)
        assert re.search(r"\b(cuda_toolkit|cuda_env)_planned\b", value), name
        assert not re.search(r"\b%s_planned\b" % owner, value), name
    for role in wiring["_site_probed_roles"]:
        assert os.path.exists(os.path.join(ROOT, "roles", role, "tasks", "probe.yml")), role


def test_site_provision_imports_every_role_of_the_wiring_file() -> None:
    wiring = load(WIRING)
    tasks = load(os.path.join(ROOT, "playbooks", "tasks", "site_provision.yml"))
    imported = [task["ansible.builtin.import_role"]["name"].rsplit(".", 1)[-1] for task in tasks
                if "ansible.builtin.import_role" in task]
    assert sorted(set(imported)) == sorted(set(wiring["_site_roles"]) - {"inferops"})  # inferops: every role's dependency
    # the wiring comes from the plays (vars/roles.yml), not from the imports
    assert [task["name"] for task in tasks if "ansible.builtin.import_role" in task and task.get("vars")] == []


@pytest.mark.parametrize("base", ["playbooks", "extensions/molecule"])
def test_nothing_restates_the_wiring(base: str) -> None:
    assert restated_wiring([os.path.join(ROOT, base)], load(WIRING)) == []


def test_the_restated_wiring_check_is_not_blind(tmp_path: t.Any) -> None:
    """The validate loop and an import as rollout.yml and site_provision.yml wrote them before the wiring file are found."""
    (tmp_path / "rollout.yml").write_text(
        "- ansible.builtin.include_role:\n    name: x\n  loop: [inferops, cuda_toolkit, cuda_env, flashinfer, jit_cache, sglang_service]\n")
    (tmp_path / "site_provision.yml").write_text(
        "- ansible.builtin.import_role:\n    name: inferops.blackwell.flashinfer\n  vars:\n"
        "    flashinfer_cuda_arch_list: \"{{ cuda_env_planned.flashinfer_arch_list | default('') }}\"\n")
    assert restated_wiring([str(tmp_path)], load(WIRING)) == [("rollout.yml", "the role list"),
                                                              ("site_provision.yml", "flashinfer_cuda_arch_list")]

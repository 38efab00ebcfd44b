# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-role loop's prepared images (extensions/molecule/role/prepared.py): site.yml's own steps, and layers that follow an edit."""

from __future__ import annotations

import importlib.util
import os
import shutil
import types
import typing as t

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def load(root: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("prepared_under_test", os.path.join(ROOT, "extensions", "molecule", "role", "prepared.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT = root
    return module


@pytest.fixture
def tree(tmp_path: t.Any) -> t.Tuple[types.ModuleType, t.Any]:
    """A copy of what the digests read, and image recipes, under tmp_path."""
    root = tmp_path / "collection"
    for rel in ["roles", "plugins", "playbooks", "meta", os.path.join("inventories", "lab", "group_vars")]:
        shutil.copytree(os.path.join(ROOT, rel), root / rel)
    for rel in ["galaxy.yml", os.path.join("extensions", "molecule", "role", "converge.yml")]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), root / rel)
    images = tmp_path / "images"
    images.mkdir()
    for name in ("base", "current"):
        (images / (name + ".recipe")).write_text(name + " recipe\n")
    module = load(str(root))
    module.IMAGES = str(images)
    return module, root


def test_the_steps_are_site_provision_imports_in_order() -> None:
    steps = load(ROOT).steps()
    assert [(step["role"], step["tasks_from"]) for step in steps] == [
        ("cuda_toolkit", "main"), ("cuda_env", "main"), ("flashinfer", "main"), ("sglang_service", "configure"),
        ("jit_cache", "main"), ("sglang_service", "start")]


def test_an_edit_of_a_role_changes_the_layers_from_its_first_step_on(tree: t.Tuple[types.ModuleType, t.Any]) -> None:
    module, root = tree
    chain = module.steps()
    before = module.layer_digests("current", "rtx-pro-6000-x8", chain)
    assert len(set(before)) == len(chain)
    with open(root / "roles" / "sglang_service" / "tasks" / "start.yml", "a", encoding="utf-8") as handle:
        handle.write("# edited\n")
    after = module.layer_digests("current", "rtx-pro-6000-x8", chain)
    # sglang_service's first step is the fourth (its units and configurations): the three before it are reused
    assert after[:3] == before[:3]
    assert all(new != old for new, old in zip(after[3:], before[3:]))


def test_shared_files_the_image_and_the_profile_change_every_layer(tree: t.Tuple[types.ModuleType, t.Any]) -> None:
    module, root = tree
    chain = module.steps()
    before = module.layer_digests("current", "rtx-pro-6000-x8", chain)
    assert all(new != old for new, old in zip(module.layer_digests("current", "b300-x8", chain), before))
    with open(os.path.join(module.IMAGES, "current.recipe"), "a", encoding="utf-8") as handle:
        handle.write("rebuilt\n")
    recipe = module.layer_digests("current", "rtx-pro-6000-x8", chain)
    assert all(new != old for new, old in zip(recipe, before))
    with open(root / "inventories" / "lab" / "group_vars" / "sglang_nodes.yml", "a", encoding="utf-8") as handle:
        handle.write("# edited\n")
    assert all(new != old for new, old in zip(module.layer_digests("current", "rtx-pro-6000-x8", chain), recipe))

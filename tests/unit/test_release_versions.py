# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/release_versions.py: galaxy.yml may not name a released version while a change is in no release."""

from __future__ import annotations

import os
import pathlib
import sys
import typing as t

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import release_versions  # noqa: E402 -- tools/release_versions.py


def tree(tmp_path: pathlib.Path, version: str, releases: t.Dict[str, t.List[str]], fragments: t.List[str]) -> str:
    """A collection tree: galaxy.yml's version, the releases with their fragments, the fragments on disk."""
    (tmp_path / "changelogs" / "fragments").mkdir(parents=True)
    (tmp_path / "galaxy.yml").write_text("namespace: inferops\nname: blackwell\nversion: %s\n" % version)
    lines = ["---", "ancestor: null", "releases:"]
    for release, listed in releases.items():
        lines += ["  %s:" % release, "    fragments:"] + ["      - %s" % name for name in listed] + ["    release_date: '2026-12-05'"]
    (tmp_path / "changelogs" / "changelog.yaml").write_text("\n".join(lines) + "\n")
    for name in fragments:
        (tmp_path / "changelogs" / "fragments" / name).write_text("---\nbugfixes:\n  - x.\n")
    return str(tmp_path)


@pytest.mark.parametrize(("version", "fragments", "wanted"), [
    # a change in no release while galaxy.yml names the released version: the tarball would lie
    ("0.2.0", ["new.yml"], "which changelogs/changelog.yaml lists as released, but 1 changelog fragment(s) are in no release: new.yml"),
    # older than the newest release
    ("0.1.0", [], "older than the newest release"),
    # the next version, or nothing unreleased: fine
    ("0.3.0", ["new.yml"], None),
    ("0.2.0", [], None),
    # a fragment the release lists (kept on disk) is released
    ("0.2.0", ["old.yml"], None),
])
def test_galaxy_version_must_not_name_a_release_that_lacks_the_changes(
        tmp_path: pathlib.Path, version: str, fragments: t.List[str], wanted: t.Optional[str]) -> None:
    root = tree(tmp_path, version, {"0.1.0": [], "0.2.0": ["old.yml"]}, fragments)
    found, _summary = release_versions.problems(root)
    if wanted is None:
        assert found == []
        assert release_versions.main([root]) == 0
    else:
        assert len(found) == 1 and wanted in found[0]
        assert release_versions.main([root]) == 1


def test_this_tree_names_a_version_that_means_what_it_says() -> None:
    found, summary = release_versions.problems(ROOT)
    assert found == [], summary

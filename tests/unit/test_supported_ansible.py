# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""meta/runtime.yml says exactly which ansible-core releases make test runs under: requirements/dev.txt's (this
machine's Python) and requirements/controllers.txt's (tools/controllers.py, Python 3.13), one release per minor
version, without gaps; each has its empty sanity ignore file, and the execution environment carries the newest."""

from __future__ import annotations

import os
import re
import typing as t

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def pinned(name: str) -> t.List[Version]:
    with open(os.path.join(ROOT, "requirements", name)) as handle:
        return [Version(match) for match in re.findall(r"(?m)^ansible-core==(\S+)", handle.read())]


def releases_under_test() -> t.List[Version]:
    return sorted(pinned("dev.txt") + pinned("controllers.txt"))


def test_requires_ansible_is_exactly_the_tested_minor_releases() -> None:
    releases = releases_under_test()
    minors = sorted({(release.major, release.minor) for release in releases})
    assert len(minors) == len(releases), "one tested release per minor version: %s" % releases
    # no gap: every minor release between the oldest and the newest is tested
    assert [minor for _major, minor in minors] == list(range(minors[0][1], minors[-1][1] + 1))
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        spec = SpecifierSet(yaml.safe_load(handle)["requires_ansible"])
    assert all(release in spec for release in releases)
    # nothing below the oldest or past the newest tested minor release
    oldest, newest = minors[0], minors[-1]
    assert Version("%d.%d.0" % oldest) in spec
    assert Version("%d.%d.99" % (oldest[0], oldest[1] - 1)) not in spec
    assert Version("%d.%d.0" % (newest[0], newest[1] + 1)) not in spec
    assert Version("%d.%d.0rc1" % (newest[0], newest[1] + 1)) not in spec


def test_each_tested_release_has_its_empty_sanity_ignore_file() -> None:
    for release in releases_under_test():
        path = os.path.join(ROOT, "tests", "sanity", "ignore-%d.%d.txt" % (release.major, release.minor))
        assert os.path.exists(path) and os.path.getsize(path) == 0, path


def test_the_execution_environment_carries_the_newest_tested_release() -> None:
    with open(os.path.join(ROOT, "execution-environment.yml")) as handle:
        environment = yaml.safe_load(handle)
    assert environment["dependencies"]["ansible_core"]["package_pip"] == "ansible-core==%s" % releases_under_test()[-1]

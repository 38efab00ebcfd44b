# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/controllers.py: what it reads, and that it never removes a root filesystem something is mounted into (the
working tree is, while a test runs there)."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import controllers  # noqa: E402 -- tools/controllers.py


def test_the_releases_file_lists_ansible_core_pins_only(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = tmp_path / "controllers.txt"
    listed.write_text("# a comment\nansible-core==2.20.10  # why\n\nansible-core==2.21.5\n")
    monkeypatch.setattr(controllers, "RELEASES_FILE", str(listed))
    assert controllers.releases() == ["2.20.10", "2.21.5"]
    listed.write_text("ansible-core>=2.20\n")
    with pytest.raises(SystemExit, match="is not ansible-core==RELEASE"):
        controllers.releases()


def test_a_root_that_holds_mounts_is_not_rebuilt(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controllers, "CACHE", str(tmp_path))
    root = controllers.rootfs()
    os.makedirs(os.path.join(root, "work"))
    (tmp_path / (controllers.SUITE + ".recipe")).write_text("another recipe\n")
    monkeypatch.setattr(controllers, "mounts_under", lambda path: [os.path.join(path, "work")] if path == root else [])
    ran = []
    monkeypatch.setattr(controllers, "run", lambda command, **kwargs: ran.append(command))
    with pytest.raises(SystemExit, match="holds mounts"):
        controllers.build()
    # nothing was run (no debootstrap), and the tree is as it was
    assert ran == [] and os.path.isdir(os.path.join(root, "work"))


def test_mounts_under_reads_this_machine_s_mounts() -> None:
    assert "/proc" in controllers.mounts_under("/proc")
    assert controllers.mounts_under("/nonexistent-inferops-path") == []

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


def test_venvs_are_not_remade_under_a_molecule_run(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A molecule run's overlay has the root filesystem as its lower layer: a venv to make then is refused, not made."""
    monkeypatch.setattr(controllers, "CACHE", str(tmp_path))
    root = controllers.rootfs()
    os.makedirs(root)
    (tmp_path / (controllers.SUITE + ".recipe")).write_text(controllers.recipe() + "\n")
    runs = os.path.join(str(tmp_path), "runs")
    monkeypatch.setattr(controllers, "mounts_under", lambda path: [os.path.join(path, "molecule-1", "merged")] if path == runs else [])
    monkeypatch.setattr(controllers, "inside", lambda *args, **kwargs: pytest.fail("a venv was made under a molecule run"))
    with pytest.raises(SystemExit, match="a molecule run uses the root filesystem"):
        controllers.build()


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".venv", "bin", "python")),
                    reason="this machine's venv (make venv); not inside tools/controllers.py's root filesystem, where it cannot run")
def test_the_lab_python_runs_on_this_machine_in_the_callers_directory(tmp_path: pathlib.Path) -> None:
    """INFEROPS_LAB_PYTHON, as molecule's plays inside the root filesystem run it: this machine's venv Python, entered
    through this process's root, in the directory it was called from, with its arguments as given."""
    command = controllers.lab_python(str(tmp_path / "root"))
    script = tmp_path / "root" / command.lstrip("/")
    here = tmp_path / "a dir"
    here.mkdir()
    done = controllers.subprocess.run([str(script), "-c", "import os, sys; print(os.getcwd(), sys.prefix, sys.argv[1:])", "x y", "$HOME"],
                                      cwd=str(here), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "%s %s ['x y', '$HOME']" % (here, os.path.join(ROOT, ".venv"))


def test_a_molecule_run_s_tree_that_still_holds_mounts_is_not_removed(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The working tree is bound into the run's overlay: if its unmount failed, removing the run's tree would remove the
    working tree through it."""
    monkeypatch.setattr(controllers, "CACHE", str(tmp_path))
    monkeypatch.setattr(controllers, "CONTROLLER_HOME", str(tmp_path / "home"))  # never the checkout's (a run may use it)
    monkeypatch.setattr(controllers, "run", lambda command, **kwargs: None)
    monkeypatch.setattr(controllers, "releases", lambda: ["2.21.5"])
    monkeypatch.setattr(controllers, "lab_python", lambda root: "/usr/local/bin/inferops-lab-python")
    monkeypatch.setattr(controllers, "mounted", lambda root: __import__("contextlib").nullcontext())
    monkeypatch.setattr(controllers, "inside", lambda *args, **kwargs: 0)
    monkeypatch.setattr(controllers.subprocess, "run", lambda *args, **kwargs: None)
    run_dir = os.path.join(str(tmp_path), "runs", "molecule-%d" % os.getpid())
    held = os.path.join(run_dir, "merged", ROOT.lstrip("/"))
    monkeypatch.setattr(controllers, "mounts_under", lambda path: [held] if path == run_dir else [])
    assert controllers.molecule(str(tmp_path / "trixie"), "default") == 0
    assert os.path.isdir(os.path.join(run_dir, "merged"))
    monkeypatch.setattr(controllers, "mounts_under", lambda path: [])
    assert controllers.molecule(str(tmp_path / "trixie"), "default") == 0
    assert not os.path.exists(run_dir)


def requirement_file(root: pathlib.Path, release: str, name: str, text: str) -> pathlib.Path:
    path = root / "opt" / ("ansible-core-%s" % release) / "lib" / "python3.13" / "site-packages" / "ansible_test" / "_data" / "requirements" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_ansible_test_s_requirements_outside_pypi_take_the_pypi_stand_in(tmp_path: pathlib.Path) -> None:
    """ansible-core 2.22's pylint test names dill by a GitHub archive (unreachable here and in CI): the release's venv
    gets dill's PyPI release in that line; a file with no such line is left as it was, byte for byte."""
    url = "https://github.com/uqfoundation/dill/archive/2308ffb0d0c605b9c050fa4c9fd5793d65c67022.zip#sha256=090190c7"
    pylint = requirement_file(tmp_path, "2.22.0", "sanity.pylint.txt",
                              "# generated\nastroid==4.0.4\ndill @ %s\nisort==9.0.1\n" % url)
    plain = requirement_file(tmp_path, "2.22.0", "sanity.pep8.txt", "pycodestyle==2.14.0\n")
    plain_before = plain.read_bytes()
    controllers.pypi_only(str(tmp_path), "2.22.0")
    lines = pylint.read_text().splitlines()
    assert lines[:2] == ["# generated", "astroid==4.0.4"] and lines[3] == "isort==9.0.1"
    assert lines[2].startswith("dill==%s  # " % controllers.PYPI_STAND_INS["dill"]) and url in lines[2]
    assert plain.read_bytes() == plain_before
    # a second pass finds nothing left to replace
    once = pylint.read_bytes()
    controllers.pypi_only(str(tmp_path), "2.22.0")
    assert pylint.read_bytes() == once


def test_a_requirement_outside_pypi_with_no_stand_in_stops_the_build_naming_it(tmp_path: pathlib.Path) -> None:
    path = requirement_file(tmp_path, "2.23.0", "sanity.mypy.txt", "mypy @ https://example.invalid/mypy.zip\n")
    with pytest.raises(SystemExit, match=r"requires mypy from https://example.invalid/mypy.zip .*PYPI_STAND_INS"):
        controllers.pypi_only(str(tmp_path), "2.23.0")
    assert path.read_text() == "mypy @ https://example.invalid/mypy.zip\n"

# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""flashinfer_patch on a venv tree holding FlashInfer 0.6.18's real compilation_context.py (from the PyPI wheel)."""

from __future__ import annotations

import os
import typing as t
import zipfile

import pytest
from ansible_collections.inferops.blackwell.plugins.modules import flashinfer_patch
from module_runner import run_module

WHEEL_CACHE = os.path.expanduser("~/.cache/inferops-test")


def released_file() -> bytes:
    """compilation_context.py of flashinfer-python 0.6.18, read from the wheel on PyPI (downloaded once)."""
    import subprocess
    import sys

    os.makedirs(WHEEL_CACHE, exist_ok=True)
    wheel = os.path.join(WHEEL_CACHE, "flashinfer_python-0.6.18-py3-none-any.whl")
    if not os.path.exists(wheel):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", WHEEL_CACHE,
                        "flashinfer-python==0.6.18"], check=True)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read("flashinfer/compilation_context.py")


@pytest.fixture(scope="module")
def original() -> bytes:
    return released_file()


@pytest.fixture
def venv(tmp_path: t.Any, original: bytes) -> t.Any:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "flashinfer" / "__pycache__").mkdir(parents=True)
    (site / "flashinfer" / "compilation_context.py").write_bytes(original)
    (site / "flashinfer" / "__pycache__" / "compilation_context.cpython-311.pyc").write_bytes(b"stale")
    (site / "flashinfer_python-0.6.18.dist-info").mkdir()
    (site / "flashinfer_python-0.6.18.dist-info" / "METADATA").write_text("Name: flashinfer-python\nVersion: 0.6.18\n")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], check_mode: bool = False, diff: bool = False, **params: t.Any) -> t.Dict[str, t.Any]:
    return run_module(flashinfer_patch.main, capsys, params, check_mode, diff)


def target(venv: t.Any) -> t.Any:
    return venv / "lib" / "python3.11" / "site-packages" / "flashinfer" / "compilation_context.py"


def test_the_released_file_is_the_known_one(original: bytes) -> None:
    assert flashinfer_patch.sha256(original) == flashinfer_patch.KNOWN["0.6.18"]
    assert original.count(flashinfer_patch.ORIGINAL_LINE.encode()) == 1


def test_patch_then_nothing_then_revert(venv: t.Any, original: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    first = run(capsys, venv=str(venv))
    assert first["changed"] is True and first["version"] == "0.6.18" and first["patched"] is True
    text = target(venv).read_text()
    assert 'raise RuntimeError("SM 12.x requires CUDA >= 12.9")' not in text
    assert 'return (major, str(minor) + "a")' in text
    compile(text, "compilation_context.py", "exec")
    assert not list((target(venv).parent / "__pycache__").iterdir())
    assert run(capsys, venv=str(venv))["changed"] is False
    reverted = run(capsys, venv=str(venv), state="absent")
    assert reverted["changed"] is True
    assert target(venv).read_bytes() == original
    assert not os.path.exists(str(target(venv)) + ".inferops-orig")
    assert run(capsys, venv=str(venv), state="absent")["changed"] is False


def test_diff_shows_the_change_in_check_mode_and_in_the_run(venv: t.Any, original: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    predicted = run(capsys, check_mode=True, diff=True, venv=str(venv))
    assert target(venv).read_bytes() == original
    done = run(capsys, diff=True, venv=str(venv))
    assert predicted["diff"] == done["diff"]
    assert done["diff"]["before"] == original.decode() and done["diff"]["after"] == target(venv).read_text()
    assert done["diff"]["before_header"] == str(target(venv))
    assert "diff" not in run(capsys, diff=True, venv=str(venv))  # nothing to change, nothing shown
    assert "diff" not in run(capsys, venv=str(venv), state="absent")  # no --diff, no diff


def test_the_file_is_replaced_whole_keeping_its_mode(venv: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    os.chmod(target(venv), 0o640)
    inode = os.stat(target(venv)).st_ino
    assert run(capsys, venv=str(venv))["changed"] is True
    assert os.stat(target(venv)).st_mode & 0o777 == 0o640
    assert os.stat(target(venv)).st_ino != inode  # a new file moved over it, not rewritten in place
    left = sorted(name for name in os.listdir(target(venv).parent) if name.startswith(".inferops-"))
    assert left == []


def test_check_mode_changes_nothing(venv: t.Any, original: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, check_mode=True, venv=str(venv))["changed"] is True
    assert target(venv).read_bytes() == original


def test_unknown_release_is_refused(venv: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "flashinfer_python-0.6.18.dist-info").rename(site / "flashinfer_python-0.6.9.dist-info")  # what pip installed
    result = run(capsys, venv=str(venv))
    assert result["failed"] is True and "0.6.9 is not a release this patch knows" in result["msg"]


def test_a_locally_modified_file_is_refused(venv: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    target(venv).write_bytes(target(venv).read_bytes() + b"\n# local change\n")
    result = run(capsys, venv=str(venv))
    assert result["failed"] is True and "neither the released file nor this patch" in result["msg"]


def test_no_flashinfer_names_the_venv(tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, venv=str(tmp_path))
    assert result["failed"] is True and "no FlashInfer" in result["msg"]

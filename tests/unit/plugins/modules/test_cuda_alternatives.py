# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cuda_alternatives against an in-memory update-alternatives that behaves like Debian's.

The real update-alternatives on real packages is exercised by extensions/molecule/toolkit_apt.
"""

from __future__ import annotations

import typing as t

import pytest
from ansible.module_utils import basic
from ansible_collections.inferops.blackwell.plugins.modules import cuda_alternatives
from module_runner import run_module


class FakeAlternatives:
    """Groups as update-alternatives keeps them: status, alternatives with priorities, value."""

    def __init__(self) -> None:
        self.groups: t.Dict[str, t.Dict[str, t.Any]] = {}
        self.calls: t.List[t.List[str]] = []

    def register(self, name: str, link: str, path: str, priority: int) -> None:
        group = self.groups.setdefault(name, {"link": link, "status": "auto", "alternatives": {}, "value": None})
        group["alternatives"][path] = priority
        if group["status"] == "auto":
            group["value"] = max(group["alternatives"], key=lambda p: group["alternatives"][p])

    def handle(self, command: t.List[str]) -> t.Tuple[int, str, str]:
        args = command[1:]
        if args[0] == "--query":
            group = self.groups.get(args[1])
            if group is None:
                return 2, "", "update-alternatives: error: no alternatives for %s\n" % args[1]
            text = "Name: %s\nLink: %s\nStatus: %s\nValue: %s\n" % (args[1], group["link"], group["status"], group["value"])
            for path, priority in group["alternatives"].items():
                text += "\nAlternative: %s\nPriority: %d\n" % (path, priority)
            return 0, text, ""
        self.calls.append(args)
        if args[0] == "--install":
            self.register(args[2], args[1], args[3], int(args[4]))
        elif args[0] == "--set":
            self.groups[args[1]]["value"] = args[2]
            self.groups[args[1]]["status"] = "manual"
        return 0, "", ""


@pytest.fixture
def alternatives(monkeypatch: pytest.MonkeyPatch, tmp_path: t.Any) -> FakeAlternatives:
    fake = FakeAlternatives()

    def run_command(module: basic.AnsibleModule, command: t.List[str], **kwargs: t.Any) -> t.Tuple[int, str, str]:
        return fake.handle(command)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda module, name, **kw: "/usr/bin/" + name)
    return fake


def run(capsys: pytest.CaptureFixture[str], tmp_path: t.Any, check_mode: bool = False, diff: bool = False,
        **params: t.Any) -> t.Dict[str, t.Any]:
    prefix = tmp_path / "cuda-13.0"
    prefix.mkdir(exist_ok=True)
    args: t.Dict[str, t.Any] = {"prefix": str(prefix), "priority": 130, "link_root": str(tmp_path)}
    args.update(params)
    return run_module(cuda_alternatives.main, capsys, args, check_mode, diff)


def test_diff_shows_the_groups_before_and_after(alternatives: FakeAlternatives, tmp_path: t.Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--diff shows both groups as update-alternatives keeps them; check mode shows what the run then does."""
    alternatives.register("cuda", str(tmp_path / "cuda"), "/usr/local/cuda-12.8", 128)
    prefix = str(tmp_path / "cuda-13.0")
    predicted = run(capsys, tmp_path, check_mode=True, diff=True)["diff"]
    done = run(capsys, tmp_path, diff=True)
    assert done["diff"]["before"] == predicted["before"] == (
        "cuda-13: (no group)\ncuda: auto, %s -> /usr/local/cuda-12.8\n  /usr/local/cuda-12.8 128\n" % (tmp_path / "cuda"))
    assert "cuda-13: auto, %s -> %s\n  %s 130\n" % (tmp_path / "cuda-13", prefix, prefix) in done["diff"]["after"]
    assert "  %s 130\n" % prefix in done["diff"]["after"].split("cuda: ", 1)[1]
    assert done["diff"]["after"].split("cuda: ", 1)[1].split("\n")[0].endswith("-> /usr/local/cuda-12.8")
    assert "diff" not in run(capsys, tmp_path, diff=True)  # nothing to do, nothing shown


def test_system_12_8_keeps_the_default(alternatives: FakeAlternatives, tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    alternatives.register("cuda", str(tmp_path / "cuda"), "/usr/local/cuda-12.8", 128)
    result = run(capsys, tmp_path)
    prefix = str(tmp_path / "cuda-13.0")
    assert result["changed"] is True
    assert result["default"] == "/usr/local/cuda-12.8"
    assert alternatives.groups["cuda"]["alternatives"][prefix] == 130
    assert alternatives.groups["cuda-13"]["value"] == prefix
    assert alternatives.calls[-1] == ["--set", "cuda", "/usr/local/cuda-12.8"]
    again = run(capsys, tmp_path)
    assert again["changed"] is False and again["actions"] == []


def test_packages_that_already_took_the_default_are_undone(alternatives: FakeAlternatives, tmp_path: t.Any,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(tmp_path / "cuda-13.0")
    alternatives.register("cuda", str(tmp_path / "cuda"), "/usr/local/cuda-12.8", 128)
    alternatives.register("cuda", str(tmp_path / "cuda"), prefix, 130)  # what NVIDIA's postinst does
    alternatives.register("cuda-13", str(tmp_path / "cuda-13"), prefix, 130)
    result = run(capsys, tmp_path)
    assert result["actions"] == ["--set cuda /usr/local/cuda-12.8"]
    assert result["default"] == "/usr/local/cuda-12.8"


def test_set_default_takes_it(alternatives: FakeAlternatives, tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    alternatives.register("cuda", str(tmp_path / "cuda"), "/usr/local/cuda-12.8", 128)
    result = run(capsys, tmp_path, set_default=True)
    assert result["default"] == str(tmp_path / "cuda-13.0")
    assert alternatives.groups["cuda"]["status"] == "manual"


def test_check_mode_calls_nothing_and_predicts(alternatives: FakeAlternatives, tmp_path: t.Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    alternatives.register("cuda", str(tmp_path / "cuda"), "/usr/local/cuda-12.8", 128)
    result = run(capsys, tmp_path, check_mode=True)
    assert result["changed"] is True
    assert result["default"] == "/usr/local/cuda-12.8"
    assert alternatives.calls == []
    assert "cuda-13" not in alternatives.groups


def test_unmanaged_usr_local_cuda_is_never_replaced(alternatives: FakeAlternatives, tmp_path: t.Any,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cuda").symlink_to("/opt/some-cuda")
    result = run(capsys, tmp_path)
    assert "cuda" not in alternatives.groups
    assert [call[0:3] for call in alternatives.calls] == [["--install", str(tmp_path / "cuda-13"), "cuda-13"]]
    assert result["default"] is not None


def test_unversioned_prefix_is_refused(alternatives: FakeAlternatives, tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, tmp_path, prefix="/usr/local/cuda")
    assert result["failed"] is True and "versioned toolkit path" in result["msg"]

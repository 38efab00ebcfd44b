# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node tool's modules (flashinfer_view, flashinfer_verdict, jit_cache_warm, jit_cache_artifact) on a made-up node:
the collection's own tool files installed in a library directory, a configuration, an environment file, and a venv
whose python answers as the venv side would (FlashInfer cannot run here; what it would say is given per test)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import typing as t

import pytest
from ansible_collections.inferops.blackwell.plugins.module_utils import inferops_flashinfer as tool
from ansible_collections.inferops.blackwell.plugins.modules import flashinfer_verdict, flashinfer_view, jit_cache_artifact, jit_cache_warm
from module_runner import run_module

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
GOOD = {"flashinfer_version": "0.6.18", "archs": ["12.0f"], "cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0",
        "workspace": "/ws", "warnings": [], "stamp_matches": True, "modules": [{"name": "sampling", "uri": "sampling", "compiled": True}]}

# the venv's python: records its argv and prints the answer given for its action
FAKE_PYTHON = """#!%s
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
with open(os.path.join(here, "answers.json")) as answers:
    print("%s" + json.dumps(json.load(answers)[sys.argv[2]]))
"""


class Node(t.NamedTuple):
    library: str
    config: str
    bin_dir: str

    def answer(self, **answers: t.Dict[str, t.Any]) -> None:
        with open(os.path.join(self.bin_dir, "answers.json"), "w") as handle:
            json.dump(answers, handle)

    def calls(self) -> t.List[t.List[str]]:
        with open(os.path.join(self.bin_dir, "calls.jsonl")) as handle:
            return [json.loads(line) for line in handle]

    def params(self, **more: t.Any) -> t.Dict[str, t.Any]:
        return dict(more, config=self.config, library=self.library)


@pytest.fixture(name="node")
def fixture_node(tmp_path: t.Any) -> Node:
    library = tmp_path / "lib" / "inferops"
    library.mkdir(parents=True)
    # as inferops.blackwell.inferops installs them: the logic and the planner from module_utils, the venv side from its files
    for name in ("inferops_flashinfer.py", "inferops_sglang_plan.py"):
        shutil.copy(os.path.join(ROOT, "plugins", "module_utils", name), str(library / name))
    shutil.copy(os.path.join(ROOT, "roles", "inferops", "files", "inferops_flashinfer_venv.py"), str(library / "inferops_flashinfer_venv.py"))
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON % (sys.executable, tool.MARKER))
    python.chmod(0o755)
    (bin_dir / "ninja").write_text("#!/bin/sh\n")
    (bin_dir / "ninja").chmod(0o755)
    env_file = tmp_path / "cuda.env"
    env_file.write_text("CUDA_HOME='/usr/local/cuda-13.0'\nPATH='/usr/local/cuda-13.0/bin:%s:/usr/bin:/bin'\n"
                        "FLASHINFER_WORKSPACE_BASE='%s'\n" % (bin_dir, tmp_path / "home"))
    (tmp_path / "sglang").mkdir()
    config = tmp_path / "flashinfer.json"
    config.write_text(json.dumps({"venv": str(tmp_path / "venv"), "env_file": str(env_file), "expected_archs": "12.0f",
                                  "min_cuda": "12.9", "modules": ["sampling"], "derive": False,
                                  "sglang_config_dir": str(tmp_path / "sglang")}))
    made = Node(str(library), str(config), str(bin_dir))
    made.answer(probe=GOOD, plan=GOOD, parse={"derived": {}}, warm=GOOD)
    return made


def test_the_view_runs_the_installed_venv_side_in_the_services_environment(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(flashinfer_view.main, capsys, node.params(view="probe"))
    assert not result.get("failed") and not result["changed"]
    assert result["view"]["archs"] == ["12.0f"] and result["view"]["pinned"]["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert node.calls()[0][:2] == [os.path.join(node.library, "inferops_flashinfer_venv.py"), "probe"]


def test_a_plan_says_what_the_preflight_would_say_and_parse_takes_candidate_files(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_module(flashinfer_view.main, capsys, node.params(view="plan"))["view"]["problems"] == []
    result = run_module(flashinfer_view.main, capsys, node.params(view="parse", sglang_configs=["/stage/sglang-ar.yaml"]))
    assert "problems" not in result["view"]
    assert json.loads(node.calls()[-1][2])["sglang_configs"] == ["/stage/sglang-ar.yaml"]
    refused = run_module(flashinfer_view.main, capsys, node.params(view="probe", sglang_configs=["/stage/sglang-ar.yaml"]))
    assert refused["failed"] and "sglang_configs goes with view=plan or view=parse" in refused["msg"]


def test_a_refusal_is_returned_not_failed(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    node.answer(parse={"error": "sglang-ar.yaml: unrecognized arguments: --no-such-flag"})
    result = run_module(flashinfer_view.main, capsys, node.params(view="parse", sglang_configs=["/stage/sglang-ar.yaml"]))
    assert not result.get("failed") and result["view"]["error"].endswith("--no-such-flag")


def test_no_tool_or_another_release_s_tool_fails_with_the_fix_and_is_skipped_in_check_mode(
        node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("inferops_sglang_plan.py", "inferops_flashinfer_venv.py"):
        path = os.path.join(node.library, name)
        with open(path, "rb") as handle:
            shipped = handle.read()
        with open(path, "ab") as handle:
            handle.write(b"# an older release\n")
        for main in (flashinfer_view.main, flashinfer_verdict.main, jit_cache_warm.main):
            result = run_module(main, capsys, node.params())
            assert result["failed"] and "%s is not this collection's" % name in result["msg"]
            assert "inferops.blackwell.flashinfer role" in result["msg"]
        with open(path, "wb") as handle:
            handle.write(shipped)
    # the shipped copies back: served (the view runs the venv side once)
    assert not run_module(flashinfer_view.main, capsys, node.params()).get("failed")
    os.unlink(os.path.join(node.bin_dir, "calls.jsonl"))
    os.unlink(os.path.join(node.library, "inferops_flashinfer_venv.py"))
    result = run_module(flashinfer_view.main, capsys, node.params())
    assert result["failed"] and result["msg"].startswith("no node tool at %s/inferops_flashinfer_venv.py" % node.library)
    skipped = run_module(flashinfer_verdict.main, capsys, node.params(), check_mode=True)
    assert skipped["skipped"] and not skipped.get("failed") and skipped["msg"].startswith("check mode: no node tool")
    # a probe ahead of the install step of a run that upgrades the tool
    waiting = run_module(flashinfer_view.main, capsys, node.params(view="parse", skip_without_tool=True))
    assert waiting["skipped"] and not waiting.get("failed") and waiting["msg"].startswith("no node tool")
    assert not os.path.exists(os.path.join(node.bin_dir, "calls.jsonl"))


def test_an_unreadable_configuration_fails_with_the_fix(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module(flashinfer_view.main, capsys, dict(node.params(), config="/nonexistent/flashinfer.json"))
    assert result["failed"] and "cannot read /nonexistent/flashinfer.json" in result["msg"] and "run the inferops.blackwell roles" in result["msg"]


def test_the_verdict_is_the_preflight_s(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    ready = run_module(flashinfer_verdict.main, capsys, node.params())
    assert ready["ready"] and ready["problems"] == [] and not ready["changed"]
    assert ready["lines"][0].startswith("inferops-flashinfer check: ok: FlashInfer 0.6.18, archs 12.0f, CUDA 13.0")
    # the incident: no arch resolved with 12.8's nvcc
    node.answer(probe=dict(GOOD, archs=[], cuda_version="12.8", cuda_home="/usr/local/cuda"))
    broken = run_module(flashinfer_verdict.main, capsys, node.params())
    assert not broken["ready"] and not broken.get("failed") and broken["lines"] == []
    assert any("resolved no target arch" in problem for problem in broken["problems"])


def test_the_warm_up_is_changed_only_when_it_built(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    assert not run_module(jit_cache_warm.main, capsys, node.params())["changed"]
    node.answer(warm=dict(GOOD, modules=[{"name": "sampling", "built": True, "seconds": 95.0}]))
    assert run_module(jit_cache_warm.main, capsys, node.params(max_jobs=2))["changed"]
    assert os.path.isfile(os.path.join(os.path.dirname(node.bin_dir), "..", "home", ".inferops-warm.lock"))
    node.answer(warm={"error": "nvcc failed"})
    failed = run_module(jit_cache_warm.main, capsys, node.params())
    assert failed["failed"] and failed["msg"] == "nvcc failed"
    assert run_module(jit_cache_warm.main, capsys, node.params(max_jobs=-1))["msg"].startswith("max_jobs must be 0")


def test_a_refused_import_is_not_a_failure_and_changes_nothing(node: Node, tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    archive = tmp_path / "build.tar.gz"
    archive.write_bytes(b"not the stored build")
    node.answer(plan=dict(GOOD, fingerprint="abc", workspace=str(tmp_path / "ws")))
    result = run_module(jit_cache_artifact.main, capsys, node.params(operation="import", path=str(archive), sha256="0" * 64))
    assert result["refused"] and not result["changed"] and not result.get("failed") and "checksum mismatch" in result["error"]
    assert result["fingerprint"] == "abc"
    missing_sum = run_module(jit_cache_artifact.main, capsys, node.params(operation="import", path=str(archive)))
    assert missing_sum["failed"] and "sha256" in missing_sum["msg"]
    node.answer(plan=dict(GOOD, fingerprint="abc", modules=[{"name": "sampling", "uri": "sampling", "compiled": False}]))
    export = run_module(jit_cache_artifact.main, capsys, node.params(operation="export", path=str(tmp_path / "out.tar.gz")))
    assert export["failed"] and "nothing to export" in export["msg"] and not os.path.exists(str(tmp_path / "out.tar.gz"))

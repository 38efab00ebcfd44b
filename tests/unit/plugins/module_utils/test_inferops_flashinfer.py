# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node tool inferops-flashinfer: its environment file reader and its preflight verdicts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))

import inferops_flashinfer as tool  # noqa: E402 -- plugins/module_utils/inferops_flashinfer.py

sys.path.insert(0, os.path.join(ROOT, "roles", "inferops", "files"))
import inferops_flashinfer_cli as cli  # noqa: E402 -- roles/inferops/files/inferops_flashinfer_cli.py, the command's front
import pytest  # noqa: E402
import yaml  # noqa: E402


def split_env(argv: t.List[str]) -> t.Tuple[t.Dict[str, str], t.List[str]]:
    """(the environment, the command) of a runner's argv that replaces the environment (env -i -- NAME=value ... argv)."""
    assert argv[:3] == ["env", "-i", "--"], argv
    end = next(index for index in range(3, len(argv)) if "=" not in argv[index])
    return dict(item.split("=", 1) for item in argv[3:end]), argv[end:]


def replying(stdout: str, seen: t.Optional[t.List[t.List[str]]] = None, rc: int = 0, stderr: str = "") -> tool.Run:
    """A runner that records each argv and answers (rc, stdout, stderr)."""
    def run(argv: t.List[str]) -> t.Tuple[int, str, str]:
        if seen is not None:
            seen.append(argv)
        return rc, stdout, stderr
    return run


def unstartable(argv: t.List[str]) -> t.Tuple[int, str, str]:
    raise OSError(2, "No such file or directory", argv[0])


@pytest.fixture(autouse=True)
def cli_runs_this_tool(monkeypatch: t.Any) -> None:
    """The command's front runs the logic under test (installed, it loads the file beside it)."""
    monkeypatch.setattr(cli, "load_tool", lambda path: tool)


CONFIG = {"venv": "/opt/sglang/venv", "env_file": "/etc/inferops/cuda.env", "expected_archs": "12.0f", "min_cuda": "12.9",
          "modules": ["sampling"]}
GOOD = {"flashinfer_version": "0.6.18", "archs": ["12.0f"], "cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0",
        "workspace": "/var/lib/sglang/.cache/flashinfer/0.6.18/120f", "warnings": [], "stamp": {"cuda_home": "/usr/local/cuda-13.0"},
        "stamp_matches": True, "modules": [{"name": "sampling", "compiled": True}]}


@pytest.fixture(name="node")
def fixture_node(tmp_path: t.Any) -> t.Dict[str, t.Any]:
    """A venv with python and ninja, and an environment file whose PATH holds the venv's bin."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "ninja"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    env_file = tmp_path / "cuda.env"
    env_file.write_text("PATH='/usr/local/cuda-13.0/bin:%s:/usr/bin:/bin'\n" % bin_dir)
    return dict(CONFIG, venv=str(tmp_path / "venv"), env_file=str(env_file))


def test_env_file_is_read_like_systemd(tmp_path: t.Any) -> None:
    path = tmp_path / "cuda.env"
    path.write_text("# managed\nCUDA_HOME='/usr/local/cuda-13.0'\nFLASHINFER_CUDA_ARCH_LIST='9.0a 12.0f'\nPLAIN=x\nQUOTED=\"y z\"\n\n")
    assert tool.read_env_file(str(path)) == {"CUDA_HOME": "/usr/local/cuda-13.0", "FLASHINFER_CUDA_ARCH_LIST": "9.0a 12.0f",
                                             "PLAIN": "x", "QUOTED": "y z"}


def test_a_healthy_node_passes(node: t.Dict[str, t.Any]) -> None:
    assert tool.check(node, GOOD) == []


def test_the_incident_names_the_cause_and_the_fix(node: t.Dict[str, t.Any]) -> None:
    view = dict(GOOD, archs=[], cuda_home="/usr/local/cuda", cuda_version="12.8",
                warnings=["Failed to get device capability: SM 12.x requires CUDA >= 12.9."])
    problems = tool.check(node, view)
    assert any("resolved no target arch" in p and "12.8" in p and "SM 12.x requires CUDA >= 12.9" in p for p in problems)
    assert any("detects CUDA 12.8" in p and ">= 12.9" in p for p in problems)


def test_a_wiped_cache_says_warm(node: t.Dict[str, t.Any]) -> None:
    problems = tool.check(node, dict(GOOD, modules=[{"name": "sampling", "compiled": False}]))
    assert problems and "not in the cache" in problems[0] and "inferops-flashinfer warm" in problems[0]


def test_a_module_ninja_would_rebuild_is_named_apart_from_a_missing_one(node: t.Dict[str, t.Any]) -> None:
    """A reinstalled FlashInfer (newer sources) leaves the library in place, but its first load would compile."""
    view = dict(GOOD, modules=[{"name": "sampling", "compiled": False, "out_of_date": "output sampling.o older than most recent input"},
                               {"name": "cascade", "compiled": False}])
    problems = tool.check(node, view)
    assert len(problems) == 2
    assert "ninja would rebuild at their first load" in problems[0] and "sampling (output sampling.o older" in problems[0]
    assert "not in the cache" in problems[1] and "cascade" in problems[1] and "sampling" not in problems[1]


def test_a_toolkit_changed_since_the_warm_up_says_warm(node: t.Dict[str, t.Any]) -> None:
    problems = tool.check(node, dict(GOOD, stamp_matches=False))
    assert problems and "was warmed with" in problems[0]


def test_wrong_archs_point_at_the_arch_list(node: t.Dict[str, t.Any]) -> None:
    problems = tool.check(node, dict(GOOD, archs=["12.0a"]))
    assert problems and "FLASHINFER_CUDA_ARCH_LIST" in problems[0]


def test_a_venv_elsewhere_than_the_pinned_path_means_no_ninja(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    # inferops_sglang_venv pointing nowhere: FlashInfer itself is fine, but the service dies on FileNotFoundError: 'ninja'.
    (tmp_path / "cuda.env").write_text("PATH='/usr/local/cuda-13.0/bin:/nonexistent/venv/bin'\n")
    problems = tool.check(node, GOOD)
    assert len(problems) == 1 and problems[0].startswith("no ninja on the PATH of") and "inferops_sglang_venv" in problems[0]


def test_a_missing_venv_python_is_named(node: t.Dict[str, t.Any]) -> None:
    problems = tool.check(dict(node, venv="/nonexistent/venv"), GOOD)
    assert problems == ["no Python at /nonexistent/venv/bin/python: fix inferops_sglang_venv."]


def test_the_venv_side_is_run_as_the_file_installed_beside_the_tool(node: t.Dict[str, t.Any], monkeypatch: t.Any) -> None:
    """The venv's Python runs inferops_flashinfer_venv.py from the tool's own directory (the role installs both there)."""
    seen: t.List[t.List[str]] = []
    tool.inner(replying(tool.MARKER + "{}", seen), node, "probe")
    _env, argv = split_env(seen[0])
    assert argv[0] == os.path.join(node["venv"], "bin", "python")
    assert argv[1] == os.path.join(os.path.dirname(tool.__file__), "inferops_flashinfer_venv.py")
    assert argv[2] == "probe" and json.loads(argv[3])["modules"] == ["sampling"]
    # a module (whose payload is not a file on the node) names the installed copy
    tool.inner(replying(tool.MARKER + "{}", seen), node, "plan", script="/usr/local/lib/inferops/inferops_flashinfer_venv.py")
    assert split_env(seen[1])[1][1:3] == ["/usr/local/lib/inferops/inferops_flashinfer_venv.py", "plan"]


def with_configs(node: t.Dict[str, t.Any], tmp_path: t.Any, **files: str) -> t.Dict[str, t.Any]:
    directory = tmp_path / "sglang"
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / (name + ".yaml")).write_text(text)
    return dict(node, sglang_config_dir=str(directory))


def derived_for(node: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    paths = tool.sglang_configs(node)
    return {"configs": {path: {"sha256": tool.digest(path)} for path in paths}, "recipes": []}


def test_a_warm_up_derived_from_the_configurations_as_they_are_passes(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n", "sglang-spec": "model-path: /models/x\n"})
    assert tool.check(node, dict(GOOD, derived=derived_for(node))) == []


def test_a_configuration_changed_since_the_warm_up_says_warm(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"})
    view = dict(GOOD, derived=derived_for(node))
    (tmp_path / "sglang" / "sglang-ar.yaml").write_text("model-path: /models/other\n")
    problems = tool.check(node, view)
    assert len(problems) == 1 and "sglang-ar.yaml changed since the cache was warmed" in problems[0]
    assert "inferops-flashinfer warm" in problems[0]


def test_a_configuration_added_since_the_warm_up_says_warm(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"})
    view = dict(GOOD, derived=derived_for(node))
    with_configs(node, tmp_path, **{"sglang-spec": "model-path: /models/demo\n"})
    assert [p for p in tool.check(node, view) if "sglang-spec.yaml changed since" in p]


def test_no_record_of_the_derivation_means_a_wiped_or_cold_cache(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"})
    problems = tool.check(node, dict(GOOD, derived=None))
    assert problems and "no record of a warm-up" in problems[0] and "remediate" in problems[0]


def test_derivation_switched_off_checks_the_configured_modules_only(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = dict(with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"}), derive=False)
    assert tool.check(node, dict(GOOD, derived=None)) == []


def test_an_sglang_jit_cache_that_cannot_be_made_is_named(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"})
    (tmp_path / "a-file").write_text("")
    with open(node["env_file"], "a") as handle:
        handle.write("SGLANG_JIT_CACHE_DIR='%s'\n" % (tmp_path / "a-file" / "sglang" / "jit"))
    problems = tool.check(node, dict(GOOD, derived=derived_for(node)))
    assert len(problems) == 1 and "SGLANG_JIT_CACHE_DIR" in problems[0] and "cannot be written" in problems[0]


def test_a_missing_sglang_jit_cache_under_a_writable_home_is_fine(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """SGLang makes it at first use (os.makedirs), as after a wipe of the cache before remediation."""
    node = with_configs(node, tmp_path, **{"sglang-ar": "model-path: /models/demo\n"})
    with open(node["env_file"], "a") as handle:
        handle.write("SGLANG_JIT_CACHE_DIR='%s'\n" % (tmp_path / "home" / ".cache" / "sglang" / "jit"))
    assert tool.check(node, dict(GOOD, derived=derived_for(node))) == []


def test_the_preflight_reports_what_is_not_warmed(node: t.Dict[str, t.Any], capsys: t.Any, monkeypatch: t.Any) -> None:
    """A passing check still says, per configuration, what the services will build or fetch at run time."""
    derived = {"configs": {
        "/etc/inferops/sglang/sglang-ar.yaml": {"not_warmed": ["attention trtllm_mha: not warmed", "SGLang's own JIT kernels"]},
        "/etc/inferops/sglang/sglang-spec.yaml": {"not_warmed": ["SGLang's own JIT kernels"]}}}
    view = dict(GOOD, derived=derived)
    assert tool.not_warmed(view) == ["sglang-ar.yaml: attention trtllm_mha: not warmed", "sglang-ar.yaml: SGLang's own JIT kernels",
                                     "sglang-spec.yaml: SGLang's own JIT kernels"]
    assert tool.not_warmed(GOOD) == []
    monkeypatch.setattr(tool, "read_config", lambda path: node)
    monkeypatch.setattr(tool, "inner", lambda config, action, *_: view)
    monkeypatch.setattr(tool, "diagnose", lambda config, view: [])
    assert cli.main(["check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("inferops-flashinfer check: ok: FlashInfer 0.6.18")
    assert lines[1:] == ["inferops-flashinfer check: not warmed: sglang-ar.yaml: attention trtllm_mha: not warmed",
                         "inferops-flashinfer check: not warmed: sglang-ar.yaml: SGLang's own JIT kernels",
                         "inferops-flashinfer check: not warmed: sglang-spec.yaml: SGLang's own JIT kernels"]


def metric(text: str, name: str) -> str:
    """The value of the one sample named name (with its labels) in a textfile."""
    values = [line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#") and line.rsplit(" ", 1)[0] == name]
    assert len(values) == 1, (name, text)
    return values[0]


def test_every_cause_the_preflight_gives_has_a_metric_label(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """The metrics' cause label is a fixed word the alerts group by: each verdict's cause is one of CAUSES."""
    views = [dict(GOOD, archs=[], cuda_version="12.8"), dict(GOOD, archs=["12.0a"]), dict(GOOD, error="boom", archs=[]),
             dict(GOOD, modules=[{"name": "sampling", "compiled": False}]), dict(GOOD, stamp_matches=False),
             dict(GOOD, modules=[{"name": "sampling", "compiled": False, "out_of_date": "newer"}])]
    causes = {cause for view in views for cause, _text in tool.diagnose(node, view)}
    assert causes == {"no_arch", "cuda_too_old", "arch_mismatch", "flashinfer_error", "modules_missing", "toolkit_changed",
                      "modules_stale"}
    assert causes <= set(tool.CAUSES)
    assert {cause for cause, _text in tool.diagnose(dict(node, venv=str(tmp_path / "nowhere")), GOOD)} == {"no_python"}
    assert [text for _cause, text in tool.diagnose(node, GOOD)] == tool.check(node, GOOD) == []


def test_a_ready_node_exports_ready_and_every_cause_at_zero() -> None:
    view = dict(GOOD, sglang_version="0.5.21", modules=[{"name": "sampling", "compiled": True}, {"name": "cascade", "compiled": True}])
    text = tool.render_metrics(view, [], 1700000000.0, 2.5)
    assert metric(text, "inferops_sglang_ready") == "1"
    assert all(metric(text, 'inferops_sglang_preflight_problem{cause="%s"}' % cause) == "0" for cause in tool.CAUSES)
    assert metric(text, "inferops_flashinfer_jit_modules_expected") == "2"
    assert metric(text, "inferops_flashinfer_jit_modules_cached") == "2"
    assert metric(text, 'inferops_flashinfer_info{flashinfer_version="0.6.18",sglang_version="0.5.21",cuda_version="13.0",'
                        'cuda_home="/usr/local/cuda-13.0",archs="12.0f"}') == "1"
    assert metric(text, "inferops_sglang_preflight_timestamp_seconds") == "1700000000.000"
    assert text.endswith("\n") and "# TYPE inferops_sglang_ready gauge" in text


def test_a_wiped_cache_exports_not_ready_with_its_cause(node: t.Dict[str, t.Any]) -> None:
    view = dict(GOOD, modules=[{"name": "sampling", "compiled": False}, {"name": "cascade", "compiled": True}])
    text = tool.render_metrics(view, tool.diagnose(node, view), 1.0, 1.0)
    assert metric(text, "inferops_sglang_ready") == "0"
    assert metric(text, 'inferops_sglang_preflight_problem{cause="modules_missing"}') == "1"
    assert metric(text, 'inferops_sglang_preflight_problem{cause="no_arch"}') == "0"
    assert metric(text, "inferops_flashinfer_jit_modules_cached") == "1"


def test_label_values_are_escaped_as_the_text_format_wants() -> None:
    assert tool.label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_metrics_are_written_atomically_and_readable(tmp_path: t.Any, monkeypatch: t.Any, capsys: t.Any) -> None:
    """metrics writes the verdict the check (run as the services' user) gave, replaces the file whole, exits 0 either way."""
    output = tmp_path / "inferops_sglang.prom"
    output.write_text("old\n")
    verdict = {"view": GOOD, "problems": [["modules_missing", "JIT modules not in the cache"]]}
    calls = []
    monkeypatch.setattr(cli, "verdict_as", lambda user, config, lib: calls.append((user, config)) or verdict)
    assert cli.main(["metrics", "--user", "sglang", "--output", str(output)]) == 0
    assert calls == [("sglang", tool.CONFIG)]
    text = output.read_text()
    assert metric(text, "inferops_sglang_ready") == "0" and oct(output.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path)) == ["inferops_sglang.prom"]
    assert "not ready: JIT modules not in the cache" in capsys.readouterr().out


def test_the_verdict_of_a_child_that_dies_is_a_cause_not_a_crash(monkeypatch: t.Any) -> None:
    class Done:
        returncode, stdout, stderr = 1, "", "Traceback: boom"

    monkeypatch.setattr(cli.subprocess, "run", lambda *args, **kwargs: Done())
    verdict = cli.verdict_as(None, "/nonexistent.json")
    assert verdict["problems"][0][0] == "flashinfer_error" and "boom" in verdict["problems"][0][1]


def test_the_verdict_comes_from_this_program_run_again(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """verdict_as runs `verdict` in a child (as the services' user when root): a venv whose Python prints nothing is
    FlashInfer failing to start, with the fix."""
    config = tmp_path / "flashinfer.json"
    config.write_text(json.dumps(node))
    verdict = cli.verdict_as(None, str(config), tool.__file__)
    assert [cause for cause, _text in verdict["problems"]] == ["flashinfer_error"]
    assert "re-run the inferops.blackwell site playbook" in verdict["problems"][0][1]
    assert verdict["view"]["error"].startswith("the venv's Python exited 0")


def test_the_documented_alert_rules_and_scrape_name_only_metrics_the_tool_writes() -> None:
    """docs/readiness.md: the example rules are valid YAML whose expressions use the tool's metric
    names, and the sample scrape has exactly the tool's samples (names and labels), in its order."""
    with open(os.path.join(ROOT, "docs", "readiness.md")) as handle:
        section = handle.read()
    scrape, rules = re.findall(r"```(?:yaml)?\n(.*?)```", section, re.S)
    written = tool.render_metrics(GOOD, [], 0.0, 0.0)
    names = {line.split("{")[0].split(" ")[0] for line in written.splitlines() if not line.startswith("#")}
    used = set()
    for group in yaml.safe_load(rules)["groups"]:
        for rule in group["rules"]:
            used.update(re.findall(r"inferops_[a-z_]+", rule["expr"]))
    assert used and used <= names, used - names

    def keys(text: str) -> t.List[str]:
        """Each sample's name and labels; the info line's label values blanked (they are the node's)."""
        lines = [line.rsplit(" ", 1)[0] for line in text.strip().splitlines() if not line.startswith("#")]
        return [re.sub(r'="[^"]*"', '=""', line) if line.startswith("inferops_flashinfer_info") else line for line in lines]

    assert keys(scrape) == keys(written)


def test_the_view_carries_the_environment_file_as_read(node: t.Dict[str, t.Any], monkeypatch: t.Any) -> None:
    """What the roles check the probe against (CUDA_HOME, the arch list, the workspace) is the environment file as this
    tool read it for the venv's Python: the file's one parser; the child gets exactly those values."""
    with open(node["env_file"], "a") as handle:
        handle.write("FLASHINFER_WORKSPACE_BASE='/var/lib/sglang'\nCUDA_HOME='/usr/local/cuda-13.0'\n")
    argvs: t.List[t.List[str]] = []
    view = tool.inner(replying(tool.MARKER + json.dumps({"archs": ["12.0f"]}), argvs), node, "probe")
    seen = split_env(argvs[0])[0]
    assert view["archs"] == ["12.0f"]
    assert view["pinned"] == tool.read_env_file(node["env_file"])
    assert view["pinned"]["FLASHINFER_WORKSPACE_BASE"] == "/var/lib/sglang" == seen["FLASHINFER_WORKSPACE_BASE"]


CUBINS = {"dir": "/srv/cubins/0.6.12", "set": "158f6fa/fmha/trtllm-gen/", "source": "FLASHINFER_CUBIN_DIR", "files": 2,
          "verified": True, "problem": None, "used": True}


def test_a_verified_kernel_set_passes(node: t.Dict[str, t.Any]) -> None:
    assert tool.check(node, dict(GOOD, trtllm_cubins=CUBINS)) == []


def test_a_provided_kernel_set_that_fails_the_check_is_refused_with_both_fixes(node: t.Dict[str, t.Any]) -> None:
    for source in ("FLASHINFER_CUBIN_DIR", "flashinfer-cubin 0.6.12"):
        view = dict(GOOD, trtllm_cubins=dict(CUBINS, source=source, verified=False, problem="tampered: 1 file(s) ..."))
        problems = tool.diagnose(node, view)
        assert [cause for cause, _text in problems] == ["trtllm_cubins"]
        assert "from %s at /srv/cubins/0.6.12" % source in problems[0][1] and "tampered" in problems[0][1]
        assert "flashinfer_cubin: true" in problems[0][1] and "FLASHINFER_CUBIN_DIR (cuda_env_extra)" in problems[0][1]


def test_no_kernel_set_is_a_note_unless_one_was_asked_for(node: t.Dict[str, t.Any]) -> None:
    view = dict(GOOD, trtllm_cubins=dict(CUBINS, source="download cache", verified=False, problem="missing: no ..."))
    assert tool.check(node, view) == []
    assert [cause for cause, _text in tool.diagnose(dict(node, cubins=True), view)] == ["trtllm_cubins"]


def test_a_kernel_set_of_another_release_names_flashinfer_cubin(node: t.Dict[str, t.Any]) -> None:
    view = dict(GOOD, archs=[], error="RuntimeError: flashinfer-cubin version (0.6.13) does not match flashinfer version (0.6.12).")
    problems = tool.diagnose(node, view)
    assert [cause for cause, _text in problems] == ["flashinfer_error"]
    assert "does not match" in problems[0][1] and "flashinfer_cubin: true" in problems[0][1]


# --- the environment a unit really runs with (check --unit, check --units, the readiness metrics)

DROP_IN = "/etc/systemd/system/sglang-ar.service.d/override.conf"


def unit_props(node: t.Dict[str, t.Any], old_env: str, **extra: t.List[str]) -> t.Dict[str, t.List[str]]:
    """systemctl show's account of sglang-ar with a hand-made drop-in that loads old_env after the pinned file."""
    props = {"Id": ["sglang-ar.service"], "ActiveState": ["failed"], "UnitFileState": ["enabled"], "MainPID": ["0"],
             "DropInPaths": [DROP_IN], "Environment": ["CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1"],
             "EnvironmentFiles": ["%s (ignore_errors=no)" % node["env_file"], "%s (ignore_errors=no)" % old_env]}
    props.update(extra)
    return props


@pytest.fixture(name="pinned")
def fixture_pinned(node: t.Dict[str, t.Any], tmp_path: t.Any) -> t.Dict[str, t.Any]:
    """The node above, its environment file pinning CUDA_HOME, and a configuration for sglang-ar."""
    with open(node["env_file"], "a") as handle:
        handle.write("CUDA_HOME='/usr/local/cuda-13.0'\n")
    configs = tmp_path / "sglang"
    configs.mkdir()
    (configs / "sglang-ar.yaml").write_text("model-path: /models/demo\n")
    old = tmp_path / "old-cuda.env"
    old.write_text("CUDA_HOME=/usr/local/cuda-12.8\n")
    return dict(node, sglang_config_dir=str(configs), old_env=str(old))


def test_a_unit_started_with_the_pinned_environment_passes(pinned: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tool, "systemd_units", lambda run, units: pytest.fail("systemd is asked only about a difference"))
    env = dict(tool.read_env_file(pinned["env_file"]), HOME="/var/lib/sglang", CUDA_VISIBLE_DEVICES="0")
    assert tool.environment_problems(cli.run, pinned, "sglang-ar.service", env, "starts with") == []


def test_a_drop_in_that_moves_cuda_home_is_refused_naming_it(pinned: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """ExecStartPre (check --unit %n): the process's own environment, built by systemd, holds 12.8; the text names the
    name, both values, the drop-in from systemd's DropInPaths, the file and the fix, and the cause is unit_environment."""
    monkeypatch.setattr(tool, "systemd_units", lambda run, units: {"sglang-ar.service": unit_props(pinned, pinned["old_env"])})
    env = dict(tool.read_env_file(pinned["env_file"]), CUDA_HOME="/usr/local/cuda-12.8")
    (problem,) = tool.environment_problems(cli.run, pinned, "sglang-ar.service", env, "starts with")
    assert problem[0] == "unit_environment" and problem[0] in tool.CAUSES
    assert "sglang-ar.service: its environment differs from the pinned one (%s)" % pinned["env_file"] in problem[1]
    assert "starts with CUDA_HOME=/usr/local/cuda-12.8 (pinned: /usr/local/cuda-13.0)" in problem[1]
    assert "(systemd's DropInPaths): %s" % DROP_IN in problem[1]
    assert "Set by: %s;" % pinned["old_env"] in problem[1]
    assert "daemon-reload" in problem[1] and "cuda_env_extra" in problem[1]


def test_systemds_settings_read_in_its_order(pinned: t.Dict[str, t.Any]) -> None:
    """Environment= first, then each environment file in order, a later one winning; a file systemd may skip is not
    counted as unreadable."""
    props = unit_props(pinned, pinned["old_env"], Environment=['CUDA_HOME=/from/environment "SPACED=a b"'])
    props["EnvironmentFiles"].append("/nonexistent/optional.env (ignore_errors=yes)")
    env, origin, unreadable = tool.settings_environment(props)
    assert env["CUDA_HOME"] == "/usr/local/cuda-12.8" and origin["CUDA_HOME"] == pinned["old_env"]
    assert env["SPACED"] == "a b" and origin["SPACED"] == "Environment="
    assert unreadable == []
    props["EnvironmentFiles"].append("/nonexistent/required.env (ignore_errors=no)")
    assert tool.settings_environment(props)[2] == ["/nonexistent/required.env"]


def test_units_seen_from_outside(pinned: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """check --units: a running unit by its main process's environment and by what it would start with now; a unit
    neither enabled nor running is not looked at."""
    pinned_env = tool.read_env_file(pinned["env_file"])
    shown = {"sglang-ar.service": unit_props(pinned, pinned["old_env"], ActiveState=["active"], MainPID=["4242"])}
    monkeypatch.setattr(tool, "systemd_units", lambda run, units: shown)
    monkeypatch.setattr(tool, "process_environment", lambda pid: dict(pinned_env) if pid == 4242 else None)
    problems = tool.units_environment_problems(cli.run, pinned)
    # it runs with the pinned values (started before the drop-in), but would start with 12.8
    assert [text for _cause, text in problems if "it runs with" in text] == []
    assert [cause for cause, text in problems if "it would start with CUDA_HOME=/usr/local/cuda-12.8" in text] == ["unit_environment"]
    shown["sglang-ar.service"] = unit_props(pinned, pinned["old_env"], ActiveState=["inactive"], UnitFileState=["disabled"])
    assert tool.units_environment_problems(cli.run, pinned) == []
    shown["sglang-ar.service"] = unit_props(pinned, pinned["env_file"], DropInPaths=[""])
    assert tool.units_environment_problems(cli.run, pinned) == []


def test_check_with_unit_exits_1_on_another_cuda_home(pinned: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], tmp_path: t.Any) -> None:
    config = tmp_path / "flashinfer.json"
    config.write_text(json.dumps(dict(pinned, modules=["sampling"], derive=False)))
    monkeypatch.setattr(tool, "inner", lambda config, action, *_: GOOD)
    monkeypatch.setattr(tool, "systemd_units", lambda run, units: {"sglang-ar.service": unit_props(pinned, pinned["old_env"])})
    for name, value in tool.read_env_file(pinned["env_file"]).items():
        monkeypatch.setenv(name, value)
    assert cli.main(["--config", str(config), "check", "--unit", "sglang-ar.service"]) == 0
    assert "sglang-ar.service starts with the pinned environment" in capsys.readouterr().out
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda-12.8")
    assert cli.main(["--config", str(config), "check", "--unit", "sglang-ar.service"]) == 1
    err = capsys.readouterr().err
    assert "check: FAIL: sglang-ar.service: its environment differs from the pinned one" in err and DROP_IN in err


def test_systemd_that_does_not_answer_is_a_problem_not_a_pass(pinned: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: t.List[t.List[str]] = []
    (problem,) = tool.units_environment_problems(replying("", seen, 1, "Failed to connect to bus: No such file or directory"), pinned)
    assert problem[0] == "unit_environment" and "Failed to connect to bus" in problem[1]
    # bounded: systemd that hangs is asked for 30 s (timeout's 124), and says so
    assert seen[0][:4] == ["timeout", "30", "systemctl", "show"]
    (problem,) = tool.units_environment_problems(replying("", None, 124), pinned)
    assert "systemctl show: no answer in 30 s" in problem[1]
    # a program that cannot start at all is the same kind of problem
    (problem,) = tool.units_environment_problems(unstartable, pinned)
    assert problem[0] == "unit_environment" and "No such file" in problem[1]


MISSING_SET = {"derived": {"configs": {"/etc/inferops/sglang/sglang-ar.yaml": {
    "attention_backends": ["trtllm_mla"], "kernel_sets": [{
        "set": "2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c/fmha/trtllm-gen", "missing": True,
        "for": ["flashinfer.jit.attention.modules.gen_trtllm_gen_fmha_module"]}]}}}}


def test_a_kernel_set_a_service_reads_and_the_node_lacks_is_refused_with_the_fix(node: t.Dict[str, t.Any]) -> None:
    view = dict(GOOD, derive=False, **MISSING_SET)
    found = [(cause, text) for cause, text in tool.diagnose(dict(node, derive=False), view) if cause == "kernel_set_missing"]
    assert len(found) == 1 and found[0][0] in tool.CAUSES
    text = found[0][1]
    assert text.startswith("sglang-ar.yaml: attention trtllm_mla reads FlashInfer 0.6.18's kernel set "
                           "2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c/fmha/trtllm-gen (flashinfer.jit.attention.modules.")
    for fix in ("flashinfer_cubin: true", "FLASHINFER_CUBIN_DIR", "extra_args", "flashinfer_kernel_set_at_first_request: true"):
        assert fix in text
    # the rollout leaves such a node alone: re-running the roles cannot place the set (playbooks/rollout.yml matches this)
    assert "re-running the roles cannot place it" in text


def test_a_kernel_set_the_operator_lets_come_at_the_first_request_or_that_is_in_place_is_not_refused(
        node: t.Dict[str, t.Any]) -> None:
    config = dict(node, derive=False)
    view = dict(GOOD, **MISSING_SET)
    assert tool.kernel_set_problems(dict(config, kernel_set_download=True), view) == []
    in_place = json.loads(json.dumps(MISSING_SET))
    in_place["derived"]["configs"]["/etc/inferops/sglang/sglang-ar.yaml"]["kernel_sets"][0]["missing"] = False
    assert tool.kernel_set_problems(config, dict(GOOD, **in_place)) == []


def test_the_venv_side_is_the_roles_file_and_the_tool_keeps_its_marker_stamp_digest_and_sha256() -> None:
    """The venv side never runs as a module: it is inferops.blackwell.inferops's file, installed beside the tool. The
    tool (and the modules' payload) keep what they share with it: its result line, its warm-up record, its file digest,
    and the sha256 of this release's copy, by which the modules accept the installed one."""
    path = os.path.join(ROOT, "roles", "inferops", "files", "inferops_flashinfer_venv.py")
    assert not os.path.exists(os.path.join(ROOT, "plugins", "module_utils", "inferops_flashinfer_venv.py"))
    spec = importlib.util.spec_from_file_location("shipped_venv_side", path)
    assert spec and spec.loader
    side = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(side)

    assert (tool.MARKER, tool.STAMP) == (side.MARKER, side.STAMP)
    assert tool.digest(path) == side.digest(path)
    assert tool.VENV_SIDE_SHA256 == side.digest(path), (
        "plugins/module_utils/inferops_flashinfer.py: VENV_SIDE_SHA256 = %r (the venv side changed)" % side.digest(path))


def test_a_replaced_environment_is_in_argv_and_the_cli_runner_runs_it() -> None:
    """with_env: exactly the given environment (nothing of the caller's), argv[0] found on its PATH: what the modules'
    run_command and the command's subprocess both start."""
    argv = tool.with_env({"PATH": "/usr/bin:/bin", "ODD": "a b=$HOME ~"}, ["sh", "-c", 'printf "%s|%s|%s" "$ODD" "$PATH" "${HOME-unset}"'])
    assert split_env(argv)[0] == {"PATH": "/usr/bin:/bin", "ODD": "a b=$HOME ~"}
    assert cli.run(argv) == (0, "a b=$HOME ~|/usr/bin:/bin|unset", "")

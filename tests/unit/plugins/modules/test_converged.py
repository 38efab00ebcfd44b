# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""converged: a record of a node, then a check that finds it unchanged, and each kind of difference, named with its role."""

from __future__ import annotations

import http.server
import json
import os
import threading
import typing as t

import pytest
from ansible_collections.inferops.blackwell.plugins.modules import converged
from module_runner import run_module

KEY = {"cuda_env": {"code": "c1", "cuda_env_extra_vars": "v1"}, "site.yml": {"code": "s1", "node": "n1"}}


class Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(Health.status)
        self.end_headers()

    def log_message(self, *args: t.Any) -> None:
        pass


@pytest.fixture
def health_url() -> t.Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Health.status = 200
    yield "http://127.0.0.1:%d/health" % server.server_address[1]
    server.shutdown()


@pytest.fixture
def node(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> t.Dict[str, str]:
    """A node's managed files, and systemctl answering from a dict (one call for all units, as on a node)."""
    env = tmp_path / "cuda.env"
    env.write_text("CUDA_HOME=/usr/local/cuda-13.0\n")
    cache = tmp_path / "cache" / "cached_ops" / "sampling"
    cache.mkdir(parents=True)
    (cache / "sampling.so").write_bytes(b"\0" * 64)
    (tmp_path / "cache" / "__pycache__").mkdir()
    os.symlink("/usr/local/cuda-12.8", str(tmp_path / "cuda"))
    units = {"sglang-ar.service": ("active", "enabled", "no"), "sglang-spec.service": ("inactive", "disabled", "no")}
    # what `systemctl show` says of a unit's settings (one line per value; ExecStart= with its run-time fields)
    settings = {"sglang-ar.service": [
        "DropInPaths=", "EnvironmentFiles=/etc/inferops/cuda.env (ignore_errors=no)",
        "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1", "User=sglang",
        "ExecStartPre={ path=/usr/local/sbin/inferops-flashinfer ; argv[]=/usr/local/sbin/inferops-flashinfer check --unit "
        "sglang-ar.service ; ignore_errors=no ; start_time=[Fri 2026-12-04 10:00:00 UTC] ; stop_time=[n/a] ; pid=41 ; "
        "code=exited ; status=0 }",
        "ExecStart={ path=/opt/sglang/venv/bin/python ; argv[]=/opt/sglang/venv/bin/python -m sglang.launch_server ; "
        "ignore_errors=no ; start_time=[Fri 2026-12-04 10:00:01 UTC] ; stop_time=[n/a] ; pid=42 ; code=(null) ; status=0/0 }"]}
    calls: t.List[t.List[str]] = []

    def fake_run(_module: t.Any, argv: t.List[str], **kwargs: t.Any) -> t.Tuple[int, str, str]:
        """AnsibleModule.run_command as the module calls it: argv unexpanded, a bounded systemctl show."""
        calls.append(argv)
        assert argv[:4] == ["timeout", "30", "systemctl", "show"] and kwargs["expand_user_and_vars"] is False
        blocks = ["Id=%s\nActiveState=%s\nUnitFileState=%s\nNeedDaemonReload=%s" % ((name,) + units[name])
                  + "".join("\n" + line for line in settings.get(name, [])) for name in argv[5:]]
        return 0, "\n\n".join(blocks) + "\n", ""

    monkeypatch.setattr(converged.AnsibleModule, "run_command", fake_run)
    return {"root": str(tmp_path), "env": str(env), "cache": str(tmp_path / "cache"), "link": str(tmp_path / "cuda"),
            "record": str(tmp_path / "state" / "converged.json"), "units": units, "settings": settings,  # type: ignore[dict-item]
            "calls": calls}  # type: ignore[dict-item]


def items(node: t.Dict[str, t.Any], health_url: str) -> t.List[t.Dict[str, t.Any]]:
    return [{"role": "cuda_env", "paths": [node["env"]]},
            {"role": "cuda_toolkit", "paths": [node["link"], node["root"] + "/absent.json"]},
            {"role": "jit_cache", "paths": [node["cache"], node["root"] + "/cache/cached_ops/*/*.so"]},
            {"role": "sglang_service", "units": ["sglang-ar", "sglang-spec"]},
            {"role": "sglang_service", "health": [{"name": "sglang-ar", "health_url": health_url, "active": True}]}]


def record(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], health_url: str, **extra: t.Any) -> t.Dict[str, t.Any]:
    params = {"state": "record", "path": node["record"], "key": KEY, "items": items(node, health_url),
              "report": {"active": ["sglang-ar"]}}
    return run_module(converged.main, capsys, dict(params, **extra))


def check(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], key: t.Optional[t.Dict[str, t.Any]] = None,
          check_mode: bool = False) -> t.Dict[str, t.Any]:
    return run_module(converged.main, capsys, {"path": node["record"], "key": key or KEY}, check_mode=check_mode)


def lines(result: t.Dict[str, t.Any]) -> t.List[str]:
    return ["%(role)s: %(what)s: %(want)s -> %(have)s" % drift for drift in result["drift"]]


def test_no_record_is_a_difference_of_site_yml(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any]) -> None:
    result = check(capsys, node)
    assert not result["converged"]
    assert lines(result) == ["site.yml: the record %s: the record of the last converged run -> none (never converged by "
                             "site.yml, or removed)" % node["record"]]


def test_a_node_as_recorded_is_converged_in_one_systemctl_call(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any],
                                                               health_url: str) -> None:
    first = record(capsys, node, health_url)
    assert first["changed"] and first["converged"]
    assert oct(os.stat(node["record"]).st_mode & 0o777) == "0o600"
    assert not record(capsys, node, health_url)["changed"], "the same state recorded again changes nothing"
    del node["calls"][:]
    result = check(capsys, node, check_mode=True)
    assert result["converged"], lines(result)
    assert result["drift"] == [] and result["report"] == {"active": ["sglang-ar"]} and result["key"] == KEY
    assert len(node["calls"]) == 1, node["calls"]


def test_each_kind_of_difference_names_its_role(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any],
                                                health_url: str) -> None:
    record(capsys, node, health_url)
    with open(node["env"], "a") as handle:
        handle.write("# edited by hand\n")
    os.unlink(os.path.join(node["cache"], "cached_ops", "sampling", "sampling.so"))
    os.unlink(node["link"])
    os.symlink("/usr/local/cuda-13.0", node["link"])
    with open(node["root"] + "/absent.json", "w") as handle:
        handle.write("{}")
    node["units"]["sglang-ar.service"] = ("failed", "enabled", "yes")
    os.makedirs(os.path.join(node["cache"], "__pycache__", "x"))  # left out of a directory's listing
    Health.status = 503
    found = lines(check(capsys, node))
    roles = sorted({line.split(":", 1)[0] for line in found})
    assert roles == ["cuda_env", "cuda_toolkit", "jit_cache", "sglang_service"], found
    assert any(line.startswith("cuda_env: file %s: sha256:" % node["env"]) for line in found), found
    assert "cuda_toolkit: file %s: link to /usr/local/cuda-12.8 -> link to /usr/local/cuda-13.0" % node["link"] in found
    assert any(line.startswith("cuda_toolkit: file %s/absent.json: absent -> sha256:" % node["root"]) for line in found)
    assert any(line.startswith("jit_cache: file %s: directory of 1 files" % node["cache"]) and "directory of 0 files" in line
               for line in found), found
    assert any(line.startswith("jit_cache: file %s/cache/cached_ops/*/*.so: " % node["root"]) and line.endswith("-> absent")
               for line in found), found
    assert "sglang_service: unit sglang-ar: active, enabled -> failed, enabled, its unit file changed since systemd read it" in found
    assert any(line.startswith("sglang_service: health of sglang-ar (%s): healthy -> unhealthy (HTTP 503)" % health_url)
               for line in found), found


def test_other_settings_name_the_setting_and_the_role(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any],
                                                      health_url: str) -> None:
    record(capsys, node, health_url)
    key = {"cuda_env": {"code": "c1", "cuda_env_extra_vars": "v2", "cuda_env_cuda_home": "h"}, "site.yml": {"code": "s2", "node": "n1"}}
    found = lines(check(capsys, node, key))
    assert found == ["cuda_env: setting cuda_env_cuda_home: this run: h -> last converged run: unset",
                     "cuda_env: setting cuda_env_extra_vars: this run: v2 -> last converged run: v1",
                     "site.yml: its code (the collection's files): this run: s2 -> last converged run: s1"]


def test_another_system_is_a_difference(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], health_url: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    record(capsys, node, health_url)
    monkeypatch.setattr(converged, "system", lambda: "ubuntu 24.04 aarch64")
    assert lines(check(capsys, node))[-1].endswith("-> ubuntu 24.04 aarch64")


def test_a_service_that_does_not_answer_leaves_no_record(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any],
                                                         health_url: str) -> None:
    record(capsys, node, health_url)
    Health.status = 500
    result = record(capsys, node, health_url)
    assert result["changed"] and not result["converged"] and not os.path.exists(node["record"])
    assert lines(result)[0].startswith("sglang_service: health of sglang-ar")
    assert not check(capsys, node)["converged"]


def test_check_mode_writes_no_record(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], health_url: str) -> None:
    params = {"state": "record", "path": node["record"], "key": KEY, "items": items(node, health_url)}
    assert run_module(converged.main, capsys, params, check_mode=True)["changed"]
    assert not os.path.exists(node["record"])


def test_an_item_of_an_unknown_kind_is_refused(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any]) -> None:
    result = run_module(converged.main, capsys, {"state": "record", "path": node["record"], "key": KEY,
                                                 "items": [{"role": "cuda_env", "files": ["/etc/x"]}]})
    assert result["failed"] and "an item of role cuda_env has files: give paths, units, unit_settings, health or debs" in result["msg"]
    assert not os.path.exists(node["record"])


@pytest.mark.parametrize("paths, said", [
    # a registered result given where the role's paths were meant: its keys would be recorded as absent files
    ({"results": [], "skipped": True, "msg": "", "changed": False}, "the paths of role jit_cache are dict, not a list of absolute paths"),
    (["/var/lib/x.so", "results", "msg"], "the paths of role jit_cache must be absolute: results, msg"),
])
def test_paths_that_no_role_writes_are_refused(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], paths: t.Any,
                                               said: str) -> None:
    result = run_module(converged.main, capsys, {"state": "record", "path": node["record"], "key": KEY,
                                                 "items": [{"role": "jit_cache", "paths": paths}]})
    assert result["failed"] and said in result["msg"]
    assert not os.path.exists(node["record"])


def test_the_record_is_json_with_each_value(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any], health_url: str) -> None:
    record(capsys, node, health_url)
    with open(node["record"]) as handle:
        data = json.load(handle)
    assert data["format"] == 1 and data["key"] == KEY and data["system"] == converged.system()
    by_path = {entry.get("path") or entry.get("unit") or entry.get("health_url"): entry["value"] for entry in data["items"]}
    assert by_path[node["link"]] == "link to /usr/local/cuda-12.8"
    assert by_path[node["root"] + "/absent.json"] == "absent"
    assert by_path["sglang-spec"] == "inactive, disabled"


def test_a_drop_in_added_by_hand_is_a_difference_of_the_unit(capsys: pytest.CaptureFixture[str], node: t.Dict[str, t.Any],
                                                             health_url: str) -> None:
    """What systemd runs a service with, as systemd reports it: a new drop-in and its environment file are named; a
    restart alone (new pids and times in ExecStart=) is not a difference."""
    extra = items(node, health_url) + [{"role": "sglang_service", "unit_settings": ["sglang-ar.service"]}]
    record(capsys, node, health_url, items=extra)
    del node["calls"][:]
    assert check(capsys, node)["converged"]
    assert len(node["calls"]) == 1, "the units' state and settings come from one systemctl call"
    node["settings"]["sglang-ar.service"] = [line.replace("pid=42", "pid=4242").replace("10:00:01", "11:00:00")
                                             for line in node["settings"]["sglang-ar.service"]]
    assert check(capsys, node)["converged"], "a restart is not a difference"
    node["settings"]["sglang-ar.service"][0] = "DropInPaths=/etc/systemd/system/sglang-ar.service.d/override.conf"
    node["settings"]["sglang-ar.service"][1] += "\nEnvironmentFiles=/etc/old-cuda.env (ignore_errors=no)"
    found = lines(check(capsys, node))
    assert found == [
        "sglang_service: unit sglang-ar.service, DropInPaths (systemd's account, drop-ins included): none -> "
        "/etc/systemd/system/sglang-ar.service.d/override.conf",
        "sglang_service: unit sglang-ar.service, EnvironmentFiles (systemd's account, drop-ins included): "
        "/etc/inferops/cuda.env (ignore_errors=no) -> /etc/inferops/cuda.env (ignore_errors=no); /etc/old-cuda.env (ignore_errors=no)"]


def test_a_command_line_keeps_its_path_and_argv_only() -> None:
    value = ("{ path=/usr/bin/x ; argv[]=/usr/bin/x --unit a.service ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; "
             "pid=0 ; code=(null) ; status=0/0 }")
    assert converged.setting_value("ExecStart", [value]) == "path=/usr/bin/x argv[]=/usr/bin/x --unit a.service"
    assert converged.setting_value("DropInPaths", [""]) == "none"


def test_debian_packages_are_read_by_dpkg_query_through_run_command(tmp_path: t.Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The real module on this Debian machine: dpkg-query's format (${Package} ...) reaches it unexpanded through
    run_command, and a package the node lacks is named."""
    path = str(tmp_path / "converged.json")
    result = run_module(converged.main, capsys, {"state": "record", "path": path, "key": KEY,
                                                 "items": [{"role": "cuda_toolkit", "debs": ["coreutils", "inferops-no-such-package"]}]})
    assert result["converged"] and result["changed"], result
    with open(path) as handle:
        (entry,) = json.load(handle)["items"]
    assert entry["value"].startswith("coreutils ") and " ii" in entry["value"], entry
    assert entry["value"].endswith("; inferops-no-such-package not installed"), entry
